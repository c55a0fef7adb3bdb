"""Isolation of the text views: ``mask_phi`` (the gold masked note) and the note-classifier recipe
(dpcare.text.classify: the imputation LM's prompts, the masked x_pub and hybrid x_hyb token ids, the
vocabulary) must not depend on what the private spans contain, and each method's training must read only
its own views. Each test builds the same notes with other private span contents (other lengths too) or
other original token ids and requires what the public side sees to be identical, bit for bit.
"""

import pytest
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


# ---- the note-classifier recipe: what the imputer, the public views and each method see ----------------
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
    """The rules masker's output for the original notes, with the private spans of the notes at hand (a masker
    that finds the same spans whatever they hold)."""

    def __init__(self, masked):
        self.by_id = {m.note_id: m for m in masked}

    def mask_many(self, notes):
        return [self.by_id[n.note_id] for n in notes]


def _prompt_recorder():
    """The recipe's span imputer with its language model replaced by a recorder of every prompt it is given
    (the text after the shared instruction: all the model would read)."""
    from dpcare.text.views.imputation import SpanImputer

    class PromptRecorder(SpanImputer):
        def _generate(self, prompts):
            self.prompts += prompts
            return {p: f" value {len(p) % 7}" for p in prompts}

    imputer = PromptRecorder()
    imputer.prompts = []
    return imputer


def _two_corpora(n: int = 30):
    """The same notes twice, their masked spans holding their own values, then other words of other lengths."""
    from dataclasses import replace

    from dpcare.text import SpanMasker, generate_corpus
    from dpcare.text.classify.data import PLACEHOLDER

    notes = [replace(n, phi=()) for n in generate_corpus(n, seed=2)]
    masked = SpanMasker(ner=False, placeholder=PLACEHOLDER).mask_many(notes)
    words = ["pneumonia", "sepsis", "insulin", "kidney"]
    for pick in (lambda m: [s.text for s in m.private],
                 lambda m: [words[j % 4] * (1 + j % 3) for j in range(len(m.slots))]):
        values = [pick(m) for m in masked]
        corpus = [replace(n, text=m.fill(v)) for n, m, v in zip(notes, masked, values)]
        yield corpus, _Masker([_with_private(m, v) for m, v in zip(masked, values)])


def test_the_recipe_public_views_do_not_depend_on_the_private_spans(tmp_path):
    """Two corpora with the same masked notes but other private span contents (other words, other lengths):
    the imputation LM's prompts, the x_pub / x_hyb token ids and the vocabulary of a fit are bit-identical;
    x is not. Planted leaks seen red: the hybrid view built from ``MaskedNote.restore()`` (the note text) in
    ``dpcare.text.classify.data.prepare_text_views``, and the imputer's left context read from the note text.
    That the LM imputer never reads a masked note's ``.private`` is also tested in tests/test_text_imputation.py
    (canary spans, every token the model sees recorded)."""
    from dpcare.settings import DPSettings
    from dpcare.text.classify.recipe import prepare_views
    from dpcare.text.classify.settings import NoteClassifierSettings

    settings = NoteClassifierSettings(top_k=5, max_tokens=200, emb_dim=8, n_filters=4, kernel_size=3,
                                      dp=DPSettings(epsilon=5.0, batch_size=8, epochs=1, unit="patient"))
    runs = []
    for corpus, masker in _two_corpora():
        imputer = _prompt_recorder()
        views = prepare_views(corpus, settings, imputer=imputer, masker=masker, progress=False)
        runs.append((imputer.prompts, views))
    (prompts_a, a), (prompts_b, b) = runs
    assert prompts_a and prompts_a == prompts_b
    assert a.codes == b.codes and torch.equal(a.embedding, b.embedding)  # public vocabulary and vectors
    for split in ("train", "val", "test"):
        for view in ("x_pub", "x_hyb", "y", "patient"):
            assert torch.equal(a.tensors[split][view], b.tensors[split][view]), (split, view)
    assert not torch.equal(a.tensors["train"]["x"], b.tensors["train"]["x"])  # the private view does change


class _Captured(Exception):
    pass


def test_each_method_trains_only_on_its_views(monkeypatch):
    """What every method's training receives, captured at Trainer.fit, when the original view x of the
    training notes is replaced by other token ids: SGD-Hybrid and SGD-Pub see only x_hyb / x_pub, the fusion
    methods' public branch holds no x, and all of it is bit-identical; the patient groups are the same.
    Planted leaks seen red: sgd-hybrid mapped to "x" in NONPRIVATE_VIEWS, and "x" added to a public branch."""
    from dpcare.engine.trainer import Trainer
    from dpcare.settings import DPSettings
    from dpcare.text.classify.data import TextViews, build_views, split_notes
    from dpcare.text.classify.multilabel import LabelSet
    from dpcare.text.classify.recipe import train_views
    from dpcare.text.classify.settings import METHOD_NAMES, NONPRIVATE_VIEWS, NoteClassifierSettings

    corpus, masker = next(_two_corpora(40))
    parts = split_notes(corpus)
    masked = {k: masker.mask_many(v) for k, v in parts.items()}
    hybrid = {k: [m.fill(["value"] * len(m.slots)) for m in v] for k, v in masked.items()}
    views = build_views(parts, masked, hybrid, LabelSet.top_k([n.icd_codes for n in parts["train"]], 5), 128, 8)
    x = views.tensors["train"]["x"]
    other = TextViews(**{**views.__dict__, "tensors": {k: dict(v) for k, v in views.tensors.items()}})
    other.tensors["train"]["x"] = torch.randint_like(x, 4, int(x.max()) + 1)  # other private words
    assert not torch.equal(other.tensors["train"]["x"], x)
    seen = {}

    def capture(self, data, public=None, groups=None, **kw):
        seen[tag] = {"data": data, "public": public, "groups": groups}
        raise _Captured

    monkeypatch.setattr(Trainer, "fit", capture)
    for method in METHOD_NAMES:
        s = NoteClassifierSettings(method=method, top_k=5, max_tokens=128, emb_dim=8, n_filters=4, kernel_size=3,
                                   dp=DPSettings(epsilon=5.0, batch_size=8, epochs=1, unit="patient"))
        for tag, v in ((f"{method}|a", views), (f"{method}|b", other)):
            with pytest.raises(_Captured):
                train_views(v, s)
    for method in ("sgd-hybrid", "sgd-pub"):
        a, b = seen[f"{method}|a"], seen[f"{method}|b"]
        assert torch.equal(a["data"]["x"], views.tensors["train"][NONPRIVATE_VIEWS[method]]), method
        assert torch.equal(a["data"]["x"], b["data"]["x"]), method
    assert not torch.equal(seen["sgd-org|a"]["data"]["x"], seen["sgd-org|b"]["data"]["x"])  # x does reach it
    private = [m for m in METHOD_NAMES if m not in NONPRIVATE_VIEWS]
    for method in private:
        a, b = seen[f"{method}|a"], seen[f"{method}|b"]
        assert torch.equal(a["groups"], views.tensors["train"]["patient"]), method  # the patient is the unit
        if method == "dp-sgd":
            assert a["public"] is None
            continue
        assert a["public"] and "x" not in a["public"] and set(a["public"]) <= {"x_pub", "x_hyb", "y"}, method
        for key in a["public"]:
            assert torch.equal(a["public"][key], b["public"][key]), (method, key)
