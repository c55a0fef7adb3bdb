"""Isolation of the text corpus's public view: ``mask_phi`` (the masked note a text FusionDP public branch
would read) must not depend on what the private spans contain.

There is no text training workflow yet; this pins the one assembly step that exists. The test builds
the same note with other private span contents (other lengths too) and requires the masked text to be
identical, character for character.
"""

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
