"""Annotated notes: character spans, PHI categories (i2b2 2014) and entity labels (i2b2 2010)."""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from dpcare.exceptions import DataError

# i2b2 2014 de-identification TYPE -> TAG (Stubbs & Uzuner 2015, annotation guidelines).
PHI_TYPES: dict[str, str] = {
    "PATIENT": "NAME", "DOCTOR": "NAME", "USERNAME": "NAME",
    "PROFESSION": "PROFESSION",
    "ROOM": "LOCATION", "DEPARTMENT": "LOCATION", "HOSPITAL": "LOCATION",
    "ORGANIZATION": "LOCATION", "STREET": "LOCATION", "CITY": "LOCATION", "STATE": "LOCATION",
    "COUNTRY": "LOCATION", "ZIP": "LOCATION", "LOCATION-OTHER": "LOCATION", "OTHER": "LOCATION",
    "AGE": "AGE", "DATE": "DATE",
    "PHONE": "CONTACT", "FAX": "CONTACT", "EMAIL": "CONTACT", "URL": "CONTACT", "IPADDR": "CONTACT",
    "SSN": "ID", "MEDICALRECORD": "ID", "HEALTHPLAN": "ID", "ACCOUNT": "ID", "LICENSE": "ID",
    "VEHICLE": "ID", "DEVICE": "ID", "BIOID": "ID", "IDNUM": "ID",
}
# the subset the generator writes
GENERATED_PHI: tuple[str, ...] = (
    "PATIENT", "DOCTOR", "AGE", "DATE", "MEDICALRECORD", "IDNUM", "HOSPITAL", "STREET", "CITY",
    "STATE", "ZIP", "PHONE",
)
# i2b2 2010 concept types
ENTITY_LABELS: tuple[str, ...] = ("problem", "treatment", "test")


@dataclass(frozen=True)
class Span:
    """``text[start:end] == span.text`` for the note it belongs to; ``label`` is a type."""

    start: int
    end: int
    label: str
    text: str


@dataclass(frozen=True)
class Note:
    """One note of one patient (the privacy unit) with gold annotations."""

    note_id: str
    patient_id: str
    text: str
    phi: tuple[Span, ...] = ()
    entities: tuple[Span, ...] = ()
    icd_codes: tuple[str, ...] = ()
    summary_source: str = ""
    summary_target: str = ""
    meta: dict[str, Any] = field(default_factory=dict, hash=False)


def _describe(note: Note, where: str | None) -> str:
    return f"{where}: note {note.note_id!r}" if where else f"note {note.note_id!r}"


def check_spans(note: Note, where: str | None = None) -> Note:
    """Raise DataError naming the note (and ``where``, e.g. a file) for a span that is out of
    bounds or whose text differs from the note's; return the note unchanged otherwise."""
    if not str(note.note_id):
        raise DataError(f"{where or 'note'}: empty note id")
    if not str(note.patient_id):
        raise DataError(f"{_describe(note, where)}: empty patient id (the privacy unit)")
    n = len(note.text)
    for kind, spans in (("PHI", note.phi), ("entity", note.entities)):
        for s in spans:
            if not (0 <= s.start < s.end <= n):
                raise DataError(f"{_describe(note, where)}: {kind} span {s.label} [{s.start}:{s.end}]"
                                 f" {s.text!r} lies outside the note (length {n})")
            if note.text[s.start:s.end] != s.text:
                raise DataError(f"{_describe(note, where)}: {kind} span {s.label} [{s.start}:{s.end}]"
                                 f" is {s.text!r} but the note has {note.text[s.start:s.end]!r}")
    return note


def mask_phi(note: Note, fill: str | None = None) -> str:
    """The note's text with every PHI span replaced by ``fill`` (default ``[**TYPE**]``)."""
    out, pos = [], 0
    for s in sorted(note.phi, key=lambda s: s.start):
        if s.start < pos:  # overlaps a PHI span already masked
            pos = max(pos, s.end)
            continue
        out.append(note.text[pos:s.start])
        out.append(f"[**{s.label}**]" if fill is None else fill)
        pos = s.end
    out.append(note.text[pos:])
    return "".join(out)


def phi_pattern(value: str) -> re.Pattern:
    """``value`` as a whole token (not inside a longer word or number), ignoring case."""
    return re.compile(r"(?<!\w)" + re.escape(value) + r"(?!\w)", re.IGNORECASE)


def phi_leaks(note: Note, extra: Iterable[str] = ()) -> list[tuple[str, int]]:
    """(string, offset) for each occurrence, as a whole token and ignoring case, of a PHI span's
    text (or of ``extra`` strings) outside every PHI span. Empty for a well de-identified gold."""
    chars = list(note.text)
    for s in note.phi:
        chars[s.start:s.end] = "\0" * (s.end - s.start)
    masked = "".join(chars)
    values = {s.text for s in note.phi} | set(extra)
    return [(v, m.start()) for v in sorted(values) if v.strip()
            for m in phi_pattern(v).finditer(masked)]


def name_parts(note: Note, labels: Iterable[str] = ("PATIENT", "DOCTOR")) -> set[str]:
    """Each word (2+ letters) of the note's name spans: a surname alone is PHI too."""
    return {w for s in note.phi if s.label in labels for w in re.findall(r"[^\W\d_]{2,}", s.text)}


def cuts_a_word(text: str, start: int, end: int) -> bool:
    """Whether [start, end) begins or ends inside a word of ``text`` (a letter or digit on both sides of an edge):
    "Dia" or "bet" of "Diabetes"."""
    def inside(i: int) -> bool:
        return 0 < i < len(text) and text[i - 1].isalnum() and text[i].isalnum()

    return inside(start) or inside(end)


def whole_entities(spans: Iterable[Span], text: str) -> list[Span]:
    """The predicted ``spans`` of one note as whole entities: spans that cut a word (:func:`cuts_a_word`) are
    dropped, and of spans that overlap (e.g. an entity and a piece of it, decoded from two windows) the longest
    is kept (ties: the earliest, then by label); duplicates count once. Sorted by position."""
    kept: list[Span] = []
    candidates = {s for s in spans if s.end > s.start and not cuts_a_word(text, s.start, s.end)}
    for s in sorted(candidates, key=lambda s: (s.start - s.end, s.start, s.label)):
        if all(s.end <= k.start or k.end <= s.start for k in kept):
            kept.append(s)
    return sorted(kept, key=lambda s: (s.start, s.end, s.label))


def span_to_dict(span: Span) -> dict[str, Any]:
    return {"start": span.start, "end": span.end, "label": span.label, "text": span.text}


def note_to_dict(note: Note) -> dict[str, Any]:
    """A JSON-ready dict (the JSONL schema of save_jsonl / read_jsonl)."""
    return {
        "note_id": note.note_id, "patient_id": note.patient_id, "text": note.text,
        "phi": [span_to_dict(s) for s in note.phi],
        "entities": [span_to_dict(s) for s in note.entities],
        "icd_codes": list(note.icd_codes), "summary_source": note.summary_source,
        "summary_target": note.summary_target, "meta": note.meta,
    }
