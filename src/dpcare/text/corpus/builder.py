"""A span-tracking text builder: offsets are exact by construction.

Filler text goes through a styler (abbreviations, typos); PHI and entity pieces are appended
verbatim, so a typo can never change a span's text.
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable

from dpcare.exceptions import DataError
from dpcare.text.spans import Note, Span

ABBREVIATIONS: dict[str, str] = {
    "patient": "pt", "history": "hx", "without": "w/o", "with": "w/", "status post": "s/p",
    "complains of": "c/o", "diagnosis": "dx", "treatment": "tx", "bilateral": "b/l",
    "year-old": "y/o", "emergency department": "ED", "intensive care unit": "ICU",
    "follow up": "f/u", "secondary to": "2/2", "medications": "meds", "approximately": "approx.",
    "discharged": "d/c'd", "continued": "cont'd", "hospital day": "HD", "significant": "signif.",
}
_ABBREV_RE = re.compile(r"\b(" + "|".join(sorted(map(re.escape, ABBREVIATIONS), key=len,
                                                 reverse=True)) + r")\b")
_WORD_RE = re.compile(r"[A-Za-z]{4,}")


def typo(word: str, rng: random.Random) -> str:
    """One keyboard-style slip inside ``word`` (the first letter is kept)."""
    i = rng.randrange(1, len(word) - 1)
    op = rng.randrange(3)
    if op == 0:  # swap two neighbours
        return word[:i] + word[i + 1] + word[i] + word[i + 2:]
    if op == 1:  # drop a letter
        return word[:i] + word[i + 1:]
    return word[:i] + word[i] + word[i:]  # double a letter


class Styler:
    """Abbreviate (each candidate with probability ``abbrev_rate``) then misspell words (each with
    probability ``typo_rate``); typos draw from their own generator so that the rest of a note
    does not depend on the typo rate."""

    def __init__(self, rng: random.Random, typo_rng: random.Random, abbrev_rate: float = 0.0,
                 typo_rate: float = 0.0):
        self.rng, self.typo_rng = rng, typo_rng
        self.abbrev_rate, self.typo_rate = abbrev_rate, typo_rate
        self.n_typos = 0

    def __call__(self, text: str) -> str:
        if self.abbrev_rate > 0:
            text = _ABBREV_RE.sub(self._abbreviate, text)
        if self.typo_rate > 0:
            text = _WORD_RE.sub(self._misspell, text)
        return text

    def _abbreviate(self, m: re.Match) -> str:
        return ABBREVIATIONS[m.group(0)] if self.rng.random() < self.abbrev_rate else m.group(0)

    def _misspell(self, m: re.Match) -> str:
        if self.typo_rng.random() >= self.typo_rate:
            return m.group(0)
        self.n_typos += 1
        return typo(m.group(0), self.typo_rng)


Slot = str | Callable[["NoteBuilder"], object] | None
_SLOT_RE = re.compile(r"\{(\w+)\}")


class NoteBuilder:
    """Append filler, PHI and entity pieces; ``build`` returns a Note whose spans match. While ``lower``
    is set, every piece (spans included) is written in lower case."""

    def __init__(self, style: Callable[[str], str] | None = None):
        self.style = style
        self.lower = False
        self._parts: list[str] = []
        self._len = 0
        self.phi: list[Span] = []
        self.entities: list[Span] = []

    @property
    def pos(self) -> int:
        return self._len

    def _append(self, piece: str) -> None:
        if self.lower:
            piece = piece.lower()
        self._parts.append(piece)
        self._len += len(piece)

    def text(self, piece: str) -> NoteBuilder:
        """Filler: styled (abbreviations, typos)."""
        self._append(self.style(piece) if self.style else piece)
        return self

    def raw(self, piece: str) -> NoteBuilder:
        """Filler that is never styled (layout, numbers, codes)."""
        self._append(piece)
        return self

    def _span(self, piece: str, label: str, into: list[Span]) -> Span:
        if not piece:
            raise DataError(f"empty {label} span")
        start = self._len
        self._append(piece)  # lower-cased there while ``lower`` is set
        span = Span(start, self._len, label, self._parts[-1])
        into.append(span)
        return span

    def phi_span(self, piece: str, label: str) -> Span:
        return self._span(piece, label, self.phi)

    def entity(self, piece: str, label: str) -> Span:
        return self._span(piece, label, self.entities)

    def fill(self, template: str, **slots: Slot) -> NoteBuilder:
        """Write ``template``; ``{name}`` takes ``slots[name]``: a string (filler) or a callable
        that writes into this builder."""
        pos = 0
        for m in _SLOT_RE.finditer(template):
            if m.start() > pos:
                self.text(template[pos:m.start()])
            value = slots[m.group(1)]
            if callable(value):
                value(self)
            elif value:
                self.text(value)
            pos = m.end()
        if pos < len(template):
            self.text(template[pos:])
        return self

    def listing(self, items: list[Callable[[NoteBuilder], object]], sep: str = ", ",
                last: str | None = " and ") -> NoteBuilder:
        """Write each item, separated by ``sep`` (``last`` before the final one)."""
        for i, item in enumerate(items):
            if i:
                self.raw(last if last is not None and i == len(items) - 1 else sep)
            item(self)
        return self

    def value(self) -> str:
        return "".join(self._parts)

    def build(self, note_id: str, patient_id: str, **fields) -> Note:
        return Note(note_id=note_id, patient_id=patient_id, text=self.value(),
                    phi=tuple(self.phi), entities=tuple(self.entities), **fields)
