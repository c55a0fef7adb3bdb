"""Generative NER: the target format, note windows and greedy decoding constrained to spans of the note."""

import json

import pytest
import torch
from lm_fixtures import tiny_gpt2

from dpcare.exceptions import DataError, SpecError
from dpcare.text.lm import generative_ner as G
from dpcare.text.lm.generative_ner import (
    ConstrainedDecoder,
    EntityGrammar,
    extract_entities,
    ner_prompt,
    ner_target,
    note_windows,
    spans_in,
)
from dpcare.text.spans import ENTITY_LABELS, Note, Span, check_spans


def note_from(segments, note_id="n1", patient_id="p1", summary=("", "")) -> Note:
    """A note from (piece, label) segments: labelled pieces become spans (PATIENT: PHI, others: entities)."""
    text, phi, entities = "", [], []
    for piece, label in segments:
        if label:
            (phi if label == "PATIENT" else entities).append(Span(len(text), len(text) + len(piece), label, piece))
        text += piece
    return check_spans(Note(note_id, patient_id, text, tuple(phi), tuple(entities), summary_source=summary[0],
                            summary_target=summary[1]))


SEGMENTS = [("Ms. ", None), ("Ada Hill", "PATIENT"), (" was admitted with ", None), ("chest pain", "problem"),
            (". Cr was 1.4; repeat ", None), ("Cr", "test"), (" 1.1 after ", None), ("IV fluids", "treatment"),
            ('. Started "', None), ("Lasix", "treatment"), ('" 40 mg for ', None), ("CHF", "problem"),
            (". Pain resolved; she denied chest pain at discharge.\n", None)]
NOTE = note_from(SEGMENTS)


@pytest.fixture(scope="module")
def gpt2():
    return tiny_gpt2(seed=1)


def run_grammar(grammar, string):
    state = grammar.start()
    for ch in string:
        state = grammar.step(state, ch)
        if state is None:
            return None
    return state


# ---------------------------------------------------------------- format
def test_target_is_json_in_order_and_round_trips_through_the_grammar():
    target = ner_target(reversed(NOTE.entities))
    assert target.startswith(" [") and [e["text"] for e in json.loads(target)] == ["chest pain", "Cr", "IV fluids",
                                                                                   "Lasix", "CHF"]
    state = run_grammar(EntityGrammar(NOTE.text, ENTITY_LABELS), target)
    assert EntityGrammar.done(state)
    # "Cr" occurs first inside "Cr was 1.4" (before the gold span): each entity maps to the first occurrence
    # after the previous entity, so the round trip is exact except for such ties
    want = [(s.start, s.end, s.label, s.text) for s in NOTE.entities]
    assert [s[2] for s in state.spans] == [w[2] for w in want]
    assert state.spans[1] == (NOTE.text.index("Cr"), NOTE.text.index("Cr") + 2, "test", "Cr")
    assert [s for i, s in enumerate(state.spans) if i != 1] == [w for i, w in enumerate(want) if i != 1]
    assert ner_prompt("x").endswith("\nNote:\nx\nEntities:") and ner_target([]) == " []"


def test_escaped_characters_are_matched_as_the_note_has_them():
    text = 'He said "hi\\there"\n\tthen ok'
    spans = [Span(8, 18, "test", text[8:18]), Span(25, 27, "test", "ok")]
    state = run_grammar(EntityGrammar(text, ["test"]), ner_target(spans))
    assert [s[:3] for s in state.spans] == [(8, 18, "test"), (25, 27, "test")]


@pytest.mark.parametrize("bad", [
    ' [{"type": "drug", "text": "CHF"}]',  # unknown type
    ' [{"type": "problem", "text": "heart failure"}]',  # not in the note
    ' [{"type": "problem", "text": " CHF"}]',  # leading whitespace
    ' [{"type": "problem", "text": "CHF "}]',  # trailing whitespace
    ' [{"type": "problem", "text": ""}]',  # empty
    ' [{"type": "problem", "text": "CHF"}, {"type": "treatment", "text": "Lasix"}]',  # before the previous one
    ' [{"type": "problem", "text": "CHF"}] ',  # anything after the list
])
def test_grammar_rejects_what_is_no_span_of_the_note(bad):
    grammar = EntityGrammar(NOTE.text, ENTITY_LABELS)
    state = run_grammar(grammar, bad)
    assert state is None or not grammar.done(state)


# ---------------------------------------------------------------- windows
def test_every_entity_lies_whole_in_some_window(gpt2):
    _, tok = gpt2
    long_entity = Span(NOTE.text.index("she denied"), NOTE.text.index(" at discharge"), "problem",
                       "she denied chest pain")
    spans = [*NOTE.entities, long_entity]
    for window, stride in ((8, 4), (8, 7), (6, 6), (12, 3)):
        ranges = note_windows(NOTE.text, tok, window, stride, spans)
        assert len(ranges) > 1 and ranges[0][0] == 0 and ranges[-1][1] == len(NOTE.text)
        for s in spans:
            assert any(a <= s.start and s.end <= b for a, b in ranges), (window, stride, s)
        for a, b in ranges:
            assert len(tok(NOTE.text[a:b], add_special_tokens=False)["input_ids"]) <= window + 1
            for s in spans_in(spans, a, b):
                assert NOTE.text[a:b][s.start:s.end] == s.text
    assert note_windows(NOTE.text, tok, 1000, None) == [(0, len(NOTE.text))]


def test_a_note_longer_than_the_window_without_sliding_and_a_too_long_entity_are_errors(gpt2):
    _, tok = gpt2
    with pytest.raises(DataError, match="more than window=8.*stride=None"):
        note_windows(NOTE.text, tok, 8, None, name="note 'n1'")
    with pytest.raises(DataError, match="'chest pain' .*longer than window=1"):
        note_windows(NOTE.text, tok, 1, 1, NOTE.entities)


# ---------------------------------------------------------------- constrained decoding
def decode_all(model, tok, texts):
    decoder = ConstrainedDecoder(model, tok, max_new_tokens=80)
    return [(text, *decoder.decode(text)) for text in texts]


TEXTS = [NOTE.text, NOTE.text[40:150], "BP 120/80, HR 88. Labs: Na 139, K 4.1, creatinine 0.9 (baseline 1.0)."]


SHORT = ["Cr 1.2 on IV fluids; CHF.", "Pain: none. BP 120/80.", "No chest pain"]
SEEDS = (1, 4, 5, 9)  # random tiny GPT-2s that do emit entities here (most random ones just write " []")


@pytest.mark.slow  # end to end
def test_random_models_decode_only_spans_of_the_note():
    found = 0
    for seed in SEEDS:
        model, tok = tiny_gpt2(seed=seed)
        for text, spans, out in decode_all(model, tok, TEXTS):
            if out.endswith("]"):
                assert isinstance(json.loads(out), list)
            starts = [s.start for s in spans]
            assert starts == sorted(starts)
            for s in spans:
                assert s.text and text[s.start:s.end] == s.text and s.label in ENTITY_LABELS
            found += len(spans)
    assert found >= 5  # so the checks above are not vacuous


@pytest.mark.slow  # end to end
def test_without_the_substring_constraint_a_random_model_emits_other_text(monkeypatch):
    """The same decoding with a note index that no longer checks the first character of an entity text
    (every position matches it): the random models' entity texts now leave the note."""
    check = G.NoteIndex.extend
    monkeypatch.setattr(G.NoteIndex, "extend", lambda self, ends, ch, lo: tuple(range(lo + 1, len(self.text) + 1))
                        if ends is None else check(self, ends, ch, lo))
    outside = 0
    for seed in SEEDS:
        model, tok = tiny_gpt2(seed=seed)
        outside += sum(s.text not in text for text, spans, _ in decode_all(model, tok, SHORT) for s in spans)
    assert outside > 0


def test_extract_entities_merges_windows_into_note_offsets(gpt2):
    model, tok = gpt2
    spans = extract_entities(model, tok, NOTE.text, window=12, stride=6, max_new_tokens=40)
    assert len(spans) == len(set(spans))
    for s in spans:
        assert NOTE.text[s.start:s.end] == s.text


def test_a_tokenizer_whose_pieces_do_not_concatenate_is_refused(gpt2):
    model, tok = gpt2

    class Stripping:  # decodes single tokens without their leading space, as SentencePiece tokenizers do
        all_special_ids, eos_token_id = tok.all_special_ids, tok.eos_token_id

        def __len__(self):
            return len(tok)

        def __call__(self, *a, **k):
            return tok(*a, **k)

        def decode(self, ids, **k):
            return tok.decode(ids, **k).lstrip()

    with pytest.raises(SpecError, match="do not concatenate"):
        ConstrainedDecoder(model, Stripping())


def test_cached_decoding_steps_equal_a_full_forward_in_every_mode(gpt2):
    """The decoder feeds one token at a time with the cache (the prefix model through its base model)."""
    from dpcare.text.lm.finetune import apply_mode

    _, tok = gpt2
    ids = torch.tensor([tok(ner_prompt("Cr 1.2") + ' [{"type"', add_special_tokens=False)["input_ids"]])
    for mode in ("dp-full", "dp-lora", "dp-prefix"):
        model = apply_mode(tiny_gpt2(seed=4)[0], mode).eval()
        with torch.no_grad():
            for p in model.parameters():  # non-zero adapters (LoRA's B starts at zero)
                p.add_(0.05 * torch.randn_like(p))
            full = model(input_ids=ids).logits[0, -1]
            batch = G._Batch(model, [ids[0, :-3].tolist()], pad=0)
            logits = batch.start()
            for i in range(3, 0, -1):
                logits = batch.step([int(ids[0, -i])])
        torch.testing.assert_close(logits[0], full, rtol=1e-4, atol=1e-5)


@pytest.mark.slow  # end to end
@pytest.mark.parametrize("arch", ["gpt2", "llama"])
@pytest.mark.parametrize("mode", ["dp-full", "dp-lora", "dp-prefix"])
def test_batched_decoding_equals_one_window_at_a_time(arch, mode):
    """Windows of different lengths decoded together (left-padded, own positions, own grammar) give what
    each gives alone, for absolute (GPT-2) and rotary (Llama, as SmolLM2) positions and a peft prefix."""
    from test_text_finetune import tiny_llama

    from dpcare.text.lm.finetune import apply_mode

    model, tok = tiny_gpt2(seed=4)
    model = apply_mode(model if arch == "gpt2" else tiny_llama(tok), mode).double().eval()
    torch.manual_seed(0)
    with torch.no_grad():
        for p in model.parameters():  # non-zero adapters (LoRA's B starts at zero)
            p.add_(0.3 * torch.randn_like(p))
    decoder = ConstrainedDecoder(model, tok, max_new_tokens=30)
    texts = TEXTS + SHORT
    alone = [decoder.decode(t) for t in texts]
    assert decoder.decode_many(texts, batch_size=4) == alone
    assert sum(len(spans) for spans, _ in alone) > 0  # entities were emitted: the comparison is not vacuous
