"""Imputation of masked spans by a language model that never saw the private notes: the hybrid note.

FusionDP (Zeng et al., Section 5.3 and Appendix C) fills the masked segments of each note with
GPT-4o-mini, prompted with the masking paper's instruction (Sarkar et al.) over the WHOLE masked
note, to build the hybrid note x_hyb = x_pub + imputed x_priv. Here a local model (default
SmolLM2-135M, :mod:`dpcare.lm`) fills one placeholder at a time:

* the prompt of slot i is a fixed instruction with a few made-up examples (the same for every slot:
  run once, its key/value cache reused for every batch), then the LEFT context of the slot (the
  last ``context_chars`` characters of the masked text before it, cut at a word boundary, earlier
  placeholders shown as ``[LABEL]``) and a line ``[LABEL] =`` naming the type to fill;
* the value is the greedy continuation, cut at a newline, at an echoed placeholder (``[``), at the
  character after the slot when it is punctuation and at the word after it (both public, used only
  to cut), and stripped; a name loses a leading title, an age keeps its number; an empty value
  falls back to a fixed generic value of its type (counted in ``failures``).

Differences from the paper (which took ~19 hours for ~9,000 notes through an API): a 135M model
cannot rewrite a whole note, so each slot is filled from its left context and a type cue alone
(the text after the slot never enters the prompt); values are often copied from the examples
(plausible, not diverse), and one slot's value does not inform the next (a name repeated in a
note may be filled differently).

The imputer reads only the PUBLIC part of a :class:`~dpcare.text.views.masking.MaskedNote` (``text`` and
``slots``), never ``private``: the model's input cannot contain a masked span (tests plant canaries).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from dpcare.exceptions import DataError, MissingDependencyError, SpecError
from dpcare.progress import progress as show_progress
from dpcare.text.views.masking import MaskedNote

# generic public values of each type, used when the model gives nothing usable
DEFAULTS: dict[str, str] = {
    "CONTACT": "555-0100", "ID": "0000000", "AGE": "60", "DATE": "01/01/2000", "TIME": "12:00",
    "PERSON": "Smith", "NAME": "Smith", "LOCATION": "Springfield", "ORGANIZATION": "General Hospital",
    "CODE": "XX", "PROFESSION": "nurse",
}
UNKNOWN_DEFAULT = "unknown"  # a label outside DEFAULTS
INSTRUCTION = ("Excerpts of hospital discharge summaries. Private details are hidden as typed placeholders "
               "([PERSON], [DATE], [AGE], [ID], ...). Each excerpt stops where a detail was hidden; the next "
               "line gives a realistic made-up value for it.\n\n")
# (left context, label, value): made up, not from any note
EXAMPLES: tuple[tuple[str, str, str], ...] = (  # few contexts end in a title: the model then writes "Dr."
    ("DISCHARGE SUMMARY - [ORGANIZATION]\nPt: [PERSON] (MRN", "ID", "20448913"),
    ("Admitted [DATE], d/c'd", "DATE", "03/09/2019"),
    ("Attending physician:", "PERSON", "Helen Markham"),
    ("Pt is a", "AGE", "67"),
    ("Mr. [PERSON] was seen in clinic by", "PERSON", "Omar Reyes"),
    ("She arrived at", "TIME", "14:30"),
    ("Course in hospital:\nMr.", "PERSON", "Kowalski"),
    ("Dictated by: [PERSON], MD\nJob #: [ID]\nF/U: PCP", "PERSON", "Li Wei"),
    ("F/U: PCP Dr. [PERSON] (", "CONTACT", "617-555-0142"),
    ("transferred from", "ORGANIZATION", "Lakeview Medical Center"),
    ("Patient name:", "PERSON", "Rosa Delgado"),
    ("lives alone in", "LOCATION", "Springfield, OH"),
    ("Discharged on", "DATE", "August 2, 2011"),
)
CUT_AFTER = ",.;:)]}!?\"'"  # a slot followed by one of these: the value ends before it
_TITLES = re.compile(r"^(?:(?:Dr|Mr|Mrs|Ms|Miss|Prof)\.?(?:\s+|$))+")
_NEXT_WORD = re.compile(r"[ \t]+([A-Za-z]{2,})\b")


def excerpt(context: str, label: str, value: str | None = None) -> str:
    """One excerpt of the prompt: the left context, then ``[LABEL] =`` and (in examples) the value."""
    head = f"Excerpt: {context}\n[{label}] ="
    return head if value is None else f"{head} {value}\n\n"


PREFIX = INSTRUCTION + "".join(excerpt(c, label, v) for c, label, v in EXAMPLES)


def left_context(note: MaskedNote, i: int, chars: int) -> str:
    """The last ``chars`` characters of ``note.text`` before slot i, starting at a word, with the
    earlier placeholders in it written ``[LABEL]``. Reads ``text`` and ``slots`` only."""
    slot = note.slots[i]
    start = max(0, slot.start - chars)
    for s in note.slots[:i]:  # never inside an earlier placeholder
        if s.start < start < s.end:
            start = s.end
    if start > 0 and not note.text[start - 1].isspace():
        space = re.search(r"\s", note.text[start:slot.start])
        start = start + space.end() if space else start
    out, pos = [], start
    for s in note.slots[:i]:
        if s.start >= start:
            out += [note.text[pos:s.start], f"[{s.label}]"]
            pos = s.end
    return ("".join(out) + note.text[pos:slot.start]).lstrip()


def clean_value(raw: str, note: MaskedNote, i: int) -> str:
    """The value in a raw continuation for slot i ("" when none): cut at a newline, an echoed
    placeholder, the punctuation or the word that follows the slot in the public text; stripped."""
    slot = note.slots[i]
    value = raw.split("\n", 1)[0].split("[", 1)[0]
    after = note.text[slot.end:]
    if after[:1] == ".":  # a full stop, not a decimal point or an initial's dot
        value = re.split(r"\.(?=\s|$)", value, maxsplit=1)[0]
    elif after[:1] and after[0] in CUT_AFTER:
        value = value.split(after[0], 1)[0]
    elif word := _NEXT_WORD.match(after):
        value = re.split(rf"\s+{re.escape(word.group(1))}\b", value, maxsplit=1)[0]
    value = value.strip().rstrip(",;:").strip()
    if slot.label in ("PERSON", "NAME"):
        value = _TITLES.sub("", value)  # "Dr." alone after "Dr." is no name
    if slot.label == "AGE":
        number = re.search(r"\d{1,3}", value)
        value = number.group() if number else ""
    return value


def _fingerprint(note: MaskedNote) -> str:
    """A short hash of a note's public text and slots (a journal entry must match its note)."""
    slots = [(s.start, s.end, s.label) for s in note.slots]
    return hashlib.sha256(json.dumps([note.text, slots]).encode()).hexdigest()[:16]


class SpanImputer:
    """Fill every placeholder of masked notes with a local causal LM (see the module docstring).

    ``model``: ``"smollm2"`` or a local Hugging Face causal-LM folder; ``lm``: a loaded (model,
    tokenizer) instead (tests). ``context_chars``: left context per slot; ``max_new_tokens``: the
    longest value in tokens (SmolLM2 writes a token per digit: a phone number takes 13);
    ``batch_size``: prompts per forward pass; ``chunk_notes``: notes per checkpoint write. After
    :meth:`impute`: ``failures`` (fallbacks by label), ``cache_hits``, ``unique_prompts``,
    ``seconds_per_note`` and :meth:`stats`, for that call. Prompts already generated are kept in
    memory (``_cache``) for later calls.
    """

    def __init__(self, model: str = "smollm2", context_chars: int = 200, max_new_tokens: int = 14,
                 batch_size: int = 16, progress: bool = False, lm: tuple[Any, Any] | None = None,
                 chunk_notes: int = 32):
        for name, v in (("context_chars", context_chars), ("max_new_tokens", max_new_tokens),
                        ("batch_size", batch_size), ("chunk_notes", chunk_notes)):
            if not isinstance(v, int) or v < 1:
                raise SpecError(f"SpanImputer: {name} must be a positive integer, got {v!r}")
        self.model_name, self.context_chars, self.max_new_tokens = model, context_chars, max_new_tokens
        self.batch_size, self.progress, self.chunk_notes = batch_size, progress, chunk_notes
        self._lm, self._prefix = lm, None
        self._cache: dict[str, str] = {}  # prompt -> raw continuation
        self._reset()

    def _reset(self) -> None:
        self.failures: Counter[str] = Counter()
        self.cache_hits = self.unique_prompts = self.notes = self.slots = self.resumed = 0
        self.seconds_per_note: float | None = None

    def _load(self) -> tuple[Any, Any]:
        if self._lm is None:
            from dpcare.lm import load_causal_lm

            try:
                self._lm = load_causal_lm(self.model_name)
            except MissingDependencyError:  # a package to install, not a wrong model setting
                raise
            except (FileNotFoundError, ValueError) as e:
                raise SpecError(f"SpanImputer: cannot load model {self.model_name!r}: {e}") from e
        return self._lm

    def prompt(self, note: MaskedNote, i: int) -> str:
        """The text after the shared prefix for slot i: public context and type only."""
        return excerpt(left_context(note, i, self.context_chars), note.slots[i].label)

    # ------------------------------------------------------------------ imputation
    def impute(self, masked_notes: Sequence[MaskedNote], checkpoint: str | os.PathLike | None = None
               ) -> list[list[str]]:
        """One value per slot of each note. ``checkpoint``: a JSONL journal; notes found in it are
        not recomputed, the others are appended every ``chunk_notes`` notes (resumable). A journal
        belongs to one set of settings: it is not checked against them, only against the notes."""
        notes = list(masked_notes)
        for k, note in enumerate(notes):
            _check_note(note, k)
        self._reset()
        t0 = time.perf_counter()
        done = _read_journal(Path(checkpoint), notes) if checkpoint is not None else {}
        self.resumed = sum(n.note_id in done for n in notes)
        pending = [n for n in notes if n.note_id not in done]
        bar = show_progress(total=len(pending), desc="imputing spans", disable=not self.progress)
        for start in range(0, len(pending), self.chunk_notes):
            chunk = pending[start : start + self.chunk_notes]
            values = self._impute_chunk(chunk)
            if checkpoint is not None:
                _append_journal(Path(checkpoint), chunk, values)
            done.update((n.note_id, v) for n, v in zip(chunk, values))
            bar.update(len(chunk))
        bar.close()
        self.notes = len(pending)
        self.seconds_per_note = (time.perf_counter() - t0) / len(pending) if pending else None
        return [list(done[n.note_id]) for n in notes]

    def _impute_chunk(self, notes: list[MaskedNote]) -> list[list[str]]:
        """Values of a few notes: their prompts deduplicated, the new ones generated in batches."""
        prompts = [[self.prompt(n, i) for i in range(len(n.slots))] for n in notes]
        raw = self._generate([p for ps in prompts for p in ps])
        out = []
        for note, ps in zip(notes, prompts):
            values = []
            for i, p in enumerate(ps):
                value = clean_value(raw[p], note, i)
                if not value:
                    self.failures[note.slots[i].label] += 1
                    value = DEFAULTS.get(note.slots[i].label, UNKNOWN_DEFAULT)
                values.append(value)
            out.append(values)
        self.slots += sum(map(len, prompts))
        return out

    def _generate(self, prompts: list[str]) -> dict[str, str]:
        """Raw continuations of ``prompts``, each distinct prompt generated once (then cached)."""
        from dpcare.lm import encode_prefix, greedy_continuations

        new = list(dict.fromkeys(p for p in prompts if p not in self._cache))
        self.cache_hits += len(prompts) - len(new)
        self.unique_prompts += len(new)
        if new:
            model, tok = self._load()
            if self._prefix is None:
                self._prefix = encode_prefix(model, tok, PREFIX)
            texts = greedy_continuations(model, tok, self._prefix, new, self.max_new_tokens, stop="\n",
                                         batch_size=self.batch_size)
            self._cache.update(zip(new, texts))
        return {p: self._cache[p] for p in prompts}

    # ------------------------------------------------------------------ results
    def hybrid_texts(self, masked_notes: Sequence[MaskedNote], values: Sequence[Sequence[str]]) -> list[str]:
        """The hybrid notes: each note's text with its placeholders replaced by its values."""
        notes = list(masked_notes)
        if len(values) != len(notes):
            raise DataError(f"{len(values)} value lists for {len(notes)} notes")
        for k, (note, vs) in enumerate(zip(notes, values)):
            _check_note(note, k)
            if len(vs) != len(note.slots) or not all(isinstance(v, str) for v in vs):
                raise DataError(f"note {note.note_id!r}: {len(vs)} values for {len(note.slots)} masked spans "
                                "(one string per span)")
        return [note.fill(list(vs)) for note, vs in zip(notes, values)]

    def impute_texts(self, masked_notes: Sequence[MaskedNote], checkpoint: str | os.PathLike | None = None
                     ) -> list[str]:
        """The hybrid notes of ``masked_notes`` (:meth:`impute` then :meth:`hybrid_texts`)."""
        notes = list(masked_notes)
        return self.hybrid_texts(notes, self.impute(notes, checkpoint))

    def stats(self) -> dict[str, Any]:
        """Counts and speed of the last :meth:`impute` call (notes resumed from a journal apart)."""
        return {"notes": self.notes, "resumed_notes": self.resumed, "slots": self.slots,
                "unique_prompts": self.unique_prompts, "cache_hits": self.cache_hits,
                "failures": dict(self.failures), "seconds_per_note": self.seconds_per_note}


def _check_note(note: Any, k: int) -> None:
    """A MaskedNote whose slots are sorted, disjoint and inside its text."""
    if not isinstance(note, MaskedNote):
        raise DataError(f"item {k}: expected a MaskedNote (SpanMasker.mask_many), got {type(note).__name__}")
    pos = 0
    for s in note.slots:
        if not pos <= s.start < s.end <= len(note.text):
            raise DataError(f"note {note.note_id!r}: slot {s.start}:{s.end} is not sorted, disjoint and "
                            "inside the text")
        pos = s.end


# ---------------------------------------------------------------------- checkpoint journal
def _read_journal(path: Path, notes: list[MaskedNote]) -> dict[str, list[str]]:
    """Values of the notes already in the journal; a truncated last line (a crash) is cut off."""
    by_id: dict[str, MaskedNote] = {}
    for n in notes:
        if by_id.setdefault(n.note_id, n) is not n and _fingerprint(by_id[n.note_id]) != _fingerprint(n):
            raise DataError(f"note id {n.note_id!r} names two different notes: ids must be unique with a "
                            "checkpoint")
    if not path.exists():
        return {}
    data = path.read_bytes()
    body, _, tail = data.rpartition(b"\n")  # tail: a line cut short by a crash (no newline)
    lines, done = body.split(b"\n") if body else [], {}
    for j, line in enumerate(lines):
        try:
            rec = json.loads(line) if line.strip() else None
        except json.JSONDecodeError:
            if j < len(lines) - 1:
                raise DataError(f"{path}: line {j + 1} is not JSON: not an imputation journal") from None
            tail = line + b"\n" + tail  # the last line, written only in part
            continue
        if rec is not None:
            _take_record(path, rec, by_id, done)
    if tail:
        with open(path, "r+b") as f:
            f.truncate(len(data) - len(tail))
    return done


def _take_record(path: Path, rec: Any, by_id: dict[str, MaskedNote], done: dict[str, list[str]]) -> None:
    """Check one journal record against its note (if in this call) and keep its values."""
    if not isinstance(rec, dict) or not isinstance(rec.get("values"), list) or "note_id" not in rec:
        raise DataError(f"{path}: a record without note_id and values: not an imputation journal")
    note = by_id.get(rec["note_id"])
    if note is None:
        return
    if rec.get("fingerprint") != _fingerprint(note) or len(rec["values"]) != len(note.slots):
        raise DataError(f"{path}: note {note.note_id!r} in the journal differs from the note given "
                        "(another corpus or masker?): use a new checkpoint path")
    done[note.note_id] = rec["values"]


def _append_journal(path: Path, notes: list[MaskedNote], values: list[list[str]]) -> None:
    """Append one line per note, then flush and fsync (a crash loses at most the line being written)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a", encoding="utf-8") as f:
        f.writelines(json.dumps({"note_id": n.note_id, "fingerprint": _fingerprint(n), "values": vs}) + "\n"
                     for n, vs in zip(notes, values))
        f.flush()
        os.fsync(f.fileno())


__all__ = ["DEFAULTS", "PREFIX", "SpanImputer", "clean_value", "left_context"]
