"""Isolation of the text views: ``mask_phi`` (the gold masked note) and the text FusionDP workflow (the
imputer's input, the public x_pub and hybrid x_hyb token ids) must not depend on what the private spans
contain. Each test builds the same notes with other private span contents (other lengths too) and
requires what the public side sees to be identical, bit for bit.
"""

import torch

from dpcare.text import Note, Span, mask_phi

SEGMENTS = [("Seen by Dr. ", None), ("Ada Hill", "DOCTOR"), (" on ", None), ("2031-04-02", "DATE"),
            ("; the patient, ", None), ("84", "AGE"), (" years old, lives in ", None), ("Springfield", "CITY"),
            (". Hill walks help.", None)]
OTHER = {"DOCTOR": "Bo Lee-Nakamura", "DATE": "1/2/29", "AGE": "101", "CITY": "Ely"}


def note(segments, overlap=False):
    text, spans = "", []
    for piece, label in segments:
        if label:
            spans.append(Span(len(text), len(text) + len(piece), label, piece))
        text += piece
    if overlap:  # a second annotation inside the first PHI span (e.g. a surname marked again)
        first = spans[0]
        spans.append(Span(first.end - 3, first.end, "PATIENT", text[first.end - 3:first.end]))
    return Note("n1", "p1", text, tuple(spans))


def test_masked_note_is_identical_whatever_the_private_spans_contain():
    other = [(OTHER[label] if label else piece, label) for piece, label in SEGMENTS]
    for overlap in (False, True):
        a, b = note(SEGMENTS, overlap), note(other, overlap)
        assert a.text != b.text
        for fill in (None, "[PHI]"):
            assert mask_phi(a, fill) == mask_phi(b, fill), (overlap, fill)
    masked = mask_phi(note(SEGMENTS))
    assert "Ada" not in masked and "84" not in masked and "Springfield" not in masked
    # fails if mask_phi writes the span's text instead of its label, or keeps its last character (checked)


# ---- the text FusionDP workflow: what the imputer and the public views see ----------------------
def _with_private(masked, values):
    """``masked`` with private spans holding ``values`` (offsets in the note ``masked.fill(values)``)."""
    from dpcare.text import MaskedNote

    spans, shift = [], 0
    for slot, value in zip(masked.slots, values):
        start = slot.start + shift
        spans.append(Span(start, start + len(value), slot.label, value))
        shift += len(value) - (slot.end - slot.start)
    return MaskedNote(masked.note_id, masked.patient_id, masked.text, masked.slots, tuple(spans))


class _Masker:
    def __init__(self, masked):
        self.by_id = {m.note_id: m for m in masked}

    def mask_many(self, notes):
        return [self.by_id[n.note_id] for n in notes]


class _RecordingImputer:
    def __init__(self):
        self.seen = []

    def impute(self, masked, checkpoint=None):
        self.seen += [(m.note_id, m.text, m.slots) for m in masked]
        return [[f"{s.label.lower()} value" for s in m.slots] for m in masked]

    def stats(self):
        return {}


def test_text_fusion_imputer_and_public_views_do_not_depend_on_the_private_spans(tmp_path):
    """Two corpora with the same masked notes but other private span contents (other words, other
    lengths): the imputer's input (note ids, masked texts, slots) and the x_pub / x_hyb token ids are
    bit-identical, x is not. Fails if the hybrid or public view is built from the note text (checked with
    the hybrid view built from ``MaskedNote.restore()``). That the language-model imputer never reads a
    masked note's ``.private`` is tested in tests/test_text_imputation.py (canary spans, every token the
    model sees recorded)."""
    from dataclasses import replace

    from dpcare.text import SpanMasker, generate_corpus
    from dpcare.text.classify.data import PLACEHOLDER, prepare_text_views

    notes = [replace(n, phi=()) for n in generate_corpus(30, seed=2)]
    masked = SpanMasker(ner=False, placeholder=PLACEHOLDER).mask_many(notes)
    words = ["pneumonia", "sepsis", "insulin", "kidney"]
    runs = []
    for k, pick in enumerate((lambda m: [s.text for s in m.private],
                              lambda m: [words[j % 4] * (1 + j % 3) for j in range(len(m.slots))])):
        values = [pick(m) for m in masked]
        corpus = [replace(n, text=m.fill(v)) for n, m, v in zip(notes, masked, values)]
        imputer = _RecordingImputer()
        views = prepare_text_views(corpus, tmp_path / str(k), top_k=5, max_tokens=200, emb_dim=8, imputer=imputer,
                                   masker=_Masker([_with_private(m, v) for m, v in zip(masked, values)]),
                                   progress=False)
        runs.append((imputer.seen, views.tensors))
    (seen_a, a), (seen_b, b) = runs
    assert seen_a == seen_b
    for split in ("train", "val", "test"):
        assert torch.equal(a[split]["x_pub"], b[split]["x_pub"])
        assert torch.equal(a[split]["x_hyb"], b[split]["x_hyb"])
    assert not torch.equal(a["train"]["x"], b["train"]["x"])  # the private view does change
