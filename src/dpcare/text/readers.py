"""Readers (and writers, for round trips) of real note corpora a user supplies.

MIMIC-III NOTEEVENTS.csv, i2b2/n2c2 2010 concepts (.txt + .con), i2b2 2014 de-identification
XML, BRAT standoff (.txt + .ann; also a plain folder of .txt notes) and JSONL. Every reader checks
each span against its note's text and raises DataError naming the file (and line) for malformed
content; a corpus without notes raises DataError("... no notes"); a missing file or folder raises
MissingFileError. :func:`read_notes` reads any of them by format name (the commands' ``--format``);
:func:`count_patients` counts a JSONL file's patients from their ids alone (a public count, before
any note text is read).
"""

from __future__ import annotations

import json
import os
import re
import xml.etree.ElementTree as ET
from collections.abc import Callable, Iterable
from pathlib import Path
from xml.sax.saxutils import quoteattr

from dpcare.exceptions import DataError, MissingFileError, SettingsError, UnknownNameError
from dpcare.text.patients import PatientOf, warn_each_note_its_own_patient
from dpcare.text.spans import PHI_TYPES, Note, Span, check_spans, note_to_dict

PHI_TAGS = frozenset(PHI_TYPES.values()) | {"PHI"}


def _nonempty(notes: list[Note], where: str | os.PathLike) -> list[Note]:
    if not notes:
        raise DataError(f"{where}: no notes")
    return notes


def _files(folder: str | os.PathLike, suffix: str) -> list[Path]:
    folder = Path(folder)
    if not folder.is_dir():
        raise MissingFileError(f"no such folder: {folder}")
    return sorted(p for p in folder.iterdir() if p.suffix == suffix and p.is_file())


def _same_words(a: str, b: str) -> bool:
    return " ".join(a.split()).lower() == " ".join(b.split()).lower()


def _file_stem(note_id: str) -> str:
    return re.sub(r"[^\w.-]", "_", note_id)


# --- MIMIC-III NOTEEVENTS -----------------------------------------------------------------------

def read_noteevents(path: str | os.PathLike, categories: Iterable[str] | None = None,
                    drop_errors: bool = True, chunksize: int = 50_000) -> list[Note]:
    """MIMIC-III NOTEEVENTS.csv (upper- or lower-case columns): note = ROW_ID, patient =
    SUBJECT_ID; HADM_ID, CATEGORY, DESCRIPTION, CHARTDATE go to meta. ``categories`` keeps
    those note categories (e.g. "Discharge summary"); rows with ISERROR = 1 are dropped."""
    import pandas as pd

    path = Path(path)
    if not path.is_file():
        raise MissingFileError(f"no such file: {path}")
    try:
        chunks = pd.read_csv(path, dtype=str, keep_default_na=False, chunksize=chunksize)
        first = next(iter(chunks), None)
    except pd.errors.EmptyDataError:
        raise DataError(f"{path}: no notes") from None
    except pd.errors.ParserError as e:
        raise DataError(f"{path}: not a readable NOTEEVENTS csv ({e})") from None
    if first is None:
        raise DataError(f"{path}: no notes")
    columns = {c.upper(): c for c in first.columns}
    missing = [c for c in ("ROW_ID", "SUBJECT_ID", "TEXT") if c not in columns]
    if missing:
        raise DataError(f"{path}: missing column(s) {missing}; MIMIC-III NOTEEVENTS has ROW_ID, "
                         f"SUBJECT_ID, HADM_ID, CATEGORY, TEXT")
    keep = None if categories is None else {c.lower() for c in categories}
    notes, row = [], 0
    for chunk in _chunks(first, chunks, path):
        chunk = chunk.rename(columns={v: k for k, v in columns.items()})
        for rec in chunk.to_dict("records"):
            row += 1
            if drop_errors and str(rec.get("ISERROR", "")).strip() in ("1", "1.0"):
                continue
            category = str(rec.get("CATEGORY", "")).strip()
            if keep is not None and category.lower() not in keep:
                continue
            note_id, subject = str(rec["ROW_ID"]).strip(), str(rec["SUBJECT_ID"]).strip()
            if not note_id or not subject:
                raise DataError(f"{path}: data row {row}: empty ROW_ID or SUBJECT_ID")
            meta = {k.lower(): str(rec[k]).strip() for k in ("HADM_ID", "CATEGORY", "DESCRIPTION",
                                                              "CHARTDATE") if k in rec}
            notes.append(Note(note_id=note_id, patient_id=subject, text=str(rec["TEXT"]),
                              meta={"source": "mimic3_noteevents", **meta}))
    return _nonempty(notes, path)


def _chunks(first, rest, path: Path):
    import pandas as pd

    yield first
    try:
        yield from rest
    except pd.errors.ParserError as e:
        raise DataError(f"{path}: not a readable NOTEEVENTS csv ({e})") from None


# --- i2b2 / n2c2 2010 concepts --------------------------------------------------------------------

_CON_RE = re.compile(r'^c="(.*)" (\d+):(\d+) (\d+):(\d+)\|\|t="([^"]*)"\s*$')


def _token_table(text: str) -> list[list[tuple[int, int]]]:
    """Per line (1-based in i2b2, index 0 here), the character offsets of whitespace tokens."""
    table, offset = [], 0
    for line in text.split("\n"):
        table.append([(offset + m.start(), offset + m.end()) for m in re.finditer(r"\S+", line)])
        offset += len(line) + 1
    return table


def _con_spans(con: Path, text: str, table) -> list[Span]:
    spans = []
    for lineno, line in enumerate(con.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        m = _CON_RE.match(line)
        if not m:
            raise DataError(f'{con}:{lineno}: malformed concept line {line!r}; expected '
                             f'c="text" LINE:TOKEN LINE:TOKEN||t="problem|treatment|test"')
        concept, l1, t1, l2, t2, label = m.group(1), *map(int, m.group(2, 3, 4, 5)), m.group(6)
        try:
            if min(l1, l2) < 1:
                raise IndexError
            start, end = table[l1 - 1][t1][0], table[l2 - 1][t2][1]
        except IndexError:
            raise DataError(f"{con}:{lineno}: concept {concept!r} at {l1}:{t1} {l2}:{t2} lies "
                             f"outside the note ({len(table)} lines)") from None
        if end <= start or not _same_words(text[start:end], concept):
            raise DataError(f"{con}:{lineno}: concept text {concept!r} does not match the note's "
                             f"{text[start:end]!r} at {l1}:{t1} {l2}:{t2}")
        spans.append(Span(start, end, label.lower(), text[start:end]))
    return spans


def read_i2b2_2010(txt_dir: str | os.PathLike, con_dir: str | os.PathLike | None = None,
                   patient_id: PatientOf | None = None) -> list[Note]:
    """i2b2/n2c2 2010 notes (``*.txt``) and concepts (``*.con``, same stem; default: next to the
    text). Offsets are LINE:TOKEN over whitespace tokens, lines from 1, tokens from 0, both ends
    inclusive. The corpus names no patients: patient = note id unless ``patient_id`` maps it."""
    txts = _files(txt_dir, ".txt")
    con_dir = Path(con_dir) if con_dir is not None else Path(txt_dir)
    stems = {p.stem for p in txts}
    orphans = [p.name for p in _files(con_dir, ".con") if p.stem not in stems]
    if orphans:
        raise DataError(f"{con_dir}: concept file(s) without a note: {orphans[:5]}")
    notes = []
    for txt in txts:
        text = txt.read_text(encoding="utf-8")
        con = con_dir / f"{txt.stem}.con"
        entities = _con_spans(con, text, _token_table(text)) if con.is_file() else []
        note = Note(txt.stem, (patient_id or str)(txt.stem), text, entities=tuple(entities),
                    meta={"source": "i2b2_2010"})
        notes.append(check_spans(note, str(txt)))
    return _nonempty(notes, txt_dir)


def tokenize_spans(note: Note) -> Note:
    """Insert a space where a span starts or ends inside a whitespace token ("pneumonia," ->
    "pneumonia ,") so that every span falls on token boundaries, as i2b2 2010 needs. Offsets of
    sections in ``meta`` no longer hold and are dropped."""
    spans = [*note.phi, *note.entities]
    text = note.text
    cuts = {s.start for s in spans if s.start > 0 and not text[s.start - 1].isspace()}
    cuts |= {s.end for s in spans if s.end < len(text) and not text[s.end].isspace()}
    for s in spans:
        inside = [c for c in cuts if s.start < c < s.end]
        if inside:
            raise DataError(f"note {note.note_id!r}: span {s.label} {s.text!r} overlaps another "
                             f"span's boundary at {inside[0]}")
    if not cuts:
        return note
    order = sorted(cuts)
    pieces, prev = [], 0
    for c in order:
        pieces += [text[prev:c], " "]
        prev = c
    pieces.append(text[prev:])

    def moved(s: Span) -> Span:
        start = s.start + sum(c <= s.start for c in order)
        end = s.end + sum(c < s.end for c in order)
        return Span(start, end, s.label, s.text)

    meta = {k: v for k, v in note.meta.items() if k not in ("sections", "summary_source_span")}
    return Note(note.note_id, note.patient_id, "".join(pieces), tuple(map(moved, note.phi)),
                tuple(map(moved, note.entities)), note.icd_codes, note.summary_source,
                note.summary_target, {**meta, "tokenized": True})


def write_i2b2_2010(notes: Iterable[Note], txt_dir: str | os.PathLike,
                    con_dir: str | os.PathLike | None = None) -> list[Path]:
    """Write ``<id>.txt`` and ``<id>.con`` (entities only). Spans must fall on whitespace token
    boundaries: pass notes through tokenize_spans first."""
    from dpcare.io import write_text

    txt_dir = Path(txt_dir)
    con_dir = Path(con_dir) if con_dir is not None else txt_dir
    written = []
    for note in notes:
        table = _token_table(note.text)
        starts = {a: (i + 1, k) for i, line in enumerate(table) for k, (a, _) in enumerate(line)}
        ends = {b: (i + 1, k) for i, line in enumerate(table) for k, (_, b) in enumerate(line)}
        lines = []
        for s in note.entities:
            if s.start not in starts or s.end not in ends:
                raise DataError(f"note {note.note_id!r}: entity {s.text!r} [{s.start}:{s.end}] does "
                                 f"not fall on whitespace token boundaries (use tokenize_spans)")
            (l1, t1), (l2, t2) = starts[s.start], ends[s.end]
            concept = " ".join(s.text.split())
            lines.append(f'c="{concept.lower()}" {l1}:{t1} {l2}:{t2}||t="{s.label}"\n')
        stem = _file_stem(note.note_id)
        written.append(write_text(txt_dir / f"{stem}.txt", note.text))
        write_text(con_dir / f"{stem}.con", "".join(lines))
    return written


# --- i2b2 2014 de-identification XML --------------------------------------------------------------

def _patient_2014(stem: str) -> str:
    """i2b2 2014 files are PATIENT-RECORD (e.g. 220-01): several records per patient."""
    m = re.match(r"^(\d+)-\d+$", stem)
    return m.group(1) if m else stem


def read_i2b2_2014_xml(path: str | os.PathLike, patient_id: PatientOf | None = None) -> list[Note]:
    """One ``<deIdi2b2>`` file or a folder of them: ``<TEXT>`` and ``<TAGS>`` whose elements
    (NAME, DATE, LOCATION, ...) carry id, start, end, text and TYPE; label = TYPE. Patient = the
    part before "-" of ``PPP-RR.xml`` names (else the file stem) unless ``patient_id`` maps it."""
    path = Path(path)
    if not path.exists():
        raise MissingFileError(f"no such file or folder: {path}")
    files = _files(path, ".xml") if path.is_dir() else [path]
    notes = []
    for f in files:
        try:
            root = ET.parse(f).getroot()
        except ET.ParseError as e:
            line, col = e.position
            raise DataError(f"{f}:{line}: malformed XML (column {col}): {e}") from None
        text_el = root.find("TEXT")
        if text_el is None:
            raise DataError(f"{f}: no <TEXT> element (expected an i2b2 2014 <deIdi2b2> file)")
        text = text_el.text or ""
        phi = []
        tags = root.find("TAGS")
        for tag in [] if tags is None else tags:
            label = tag.get("TYPE", "")
            if tag.tag not in PHI_TAGS and label not in PHI_TYPES:
                continue  # other annotation tracks (e.g. risk factors)
            try:
                start, end = int(tag.get("start")), int(tag.get("end"))
            except (TypeError, ValueError):
                raise DataError(f"{f}: tag {tag.tag} id={tag.get('id')!r} has no integer start/end "
                                 f"({tag.get('start')!r}, {tag.get('end')!r})") from None
            phi.append(Span(start, end, label or tag.tag, tag.get("text", text[start:end])))
        note = Note(f.stem, (patient_id or _patient_2014)(f.stem), text, phi=tuple(phi),
                    meta={"source": "i2b2_2014"})
        notes.append(check_spans(note, str(f)))
    return _nonempty(notes, path)


def _cdata(text: str) -> str:
    return "<![CDATA[" + text.replace("]]>", "]]]]><![CDATA[>") + "]]>"


def write_i2b2_2014_xml(notes: Iterable[Note], folder: str | os.PathLike) -> list[Path]:
    """Write one ``<id>.xml`` in the i2b2 2014 layout per note (PHI spans only)."""
    from dpcare.io import write_text

    written = []
    for note in notes:
        tags = "".join(
            f"<{PHI_TYPES.get(s.label, 'PHI')} id=\"P{i}\" start=\"{s.start}\" end=\"{s.end}\" "
            f"text={quoteattr(s.text)} TYPE={quoteattr(s.label)} comment=\"\" />\n"
            for i, s in enumerate(note.phi))
        xml = (f'<?xml version="1.0" encoding="UTF-8" ?>\n<deIdi2b2>\n<TEXT>{_cdata(note.text)}'
               f"</TEXT>\n<TAGS>\n{tags}</TAGS>\n</deIdi2b2>\n")
        written.append(write_text(Path(folder) / f"{_file_stem(note.note_id)}.xml", xml))
    return written


# --- inline PHI markup (hand-written test notes) ---------------------------------------------------

_INLINE = re.compile(r"\[\[([A-Z-]+)\|([^\]|]+)\]\]")


def read_inline_phi(path: str | os.PathLike) -> list[Note]:
    """Notes written with inline PHI markup: a line ``=== note-id`` opens a note, ``[[TYPE|text]]``
    marks a PHI span of an i2b2 2014 type (the markers are removed; offsets refer to the plain
    text); ``#`` lines before the first note are comments. Each note is its own patient."""
    path = Path(path)
    if not path.is_file():
        raise MissingFileError(f"no such file: {path}")
    blocks: list[tuple[str, list[str], int]] = []
    for lineno, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if line.startswith("=== "):
            blocks.append((line[4:].strip(), [], lineno))
        elif blocks:
            blocks[-1][1].append(line)
        elif line.strip() and not line.startswith("#"):
            raise DataError(f"{path}:{lineno}: text before the first '=== note-id' line")
    notes = []
    for note_id, lines, lineno in blocks:
        marked, text, phi, pos = "\n".join(lines).strip("\n"), [], [], 0
        for m in _INLINE.finditer(marked):
            if m.group(1) not in PHI_TYPES:
                raise DataError(f"{path}: note {note_id!r} (line {lineno}): unknown PHI type "
                                 f"{m.group(1)!r}; choose from {sorted(PHI_TYPES)}")
            text.append(marked[pos:m.start()])
            start = sum(map(len, text))
            text.append(m.group(2))
            phi.append(Span(start, start + len(m.group(2)), m.group(1), m.group(2)))
            pos = m.end()
        text.append(marked[pos:])
        plain = "".join(text)
        if "[[" in plain or "]]" in plain:
            raise DataError(f"{path}: note {note_id!r} (line {lineno}): malformed [[TYPE|text]] marker")
        notes.append(check_spans(Note(note_id, note_id, plain, phi=tuple(phi),
                                      meta={"source": "inline"}), str(path)))
    return _nonempty(notes, path)


# --- BRAT standoff -------------------------------------------------------------------------------

_BRAT_RANGE = re.compile(r"^(\d+) (\d+)$")


def _brat_spans(ann: Path, text: str, discontinuous: str) -> tuple[list[Span], list[Span]]:
    phi, entities = [], []
    for lineno, line in enumerate(ann.read_text(encoding="utf-8").splitlines(), 1):
        if not line.startswith("T"):
            continue  # relations, events, attributes, notes
        fields = line.split("\t")
        parts = fields[1].split(" ", 1) if len(fields) >= 3 else []
        ranges = [_BRAT_RANGE.match(r.strip()) for r in parts[1].split(";")] if len(parts) == 2 else []
        if not ranges or not all(ranges):
            raise DataError(f"{ann}:{lineno}: malformed text-bound annotation {line!r}; expected "
                             f"'T1<TAB>Label START END<TAB>text'")
        if len(ranges) > 1 and discontinuous == "error":
            raise DataError(f"{ann}:{lineno}: discontinuous span {fields[1]!r} (pass "
                             f"discontinuous='first' to keep its first fragment)")
        bounds = [(int(r.group(1)), int(r.group(2))) for r in ranges]
        for start, end in bounds:
            if not 0 <= start < end <= len(text):
                raise DataError(f"{ann}:{lineno}: span [{start}:{end}] lies outside the note "
                                 f"(length {len(text)})")
        actual = " ".join(text[a:b] for a, b in bounds)
        if " ".join(actual.split()) != " ".join(fields[2].split()):
            raise DataError(f"{ann}:{lineno}: annotation text {fields[2]!r} does not match the "
                             f"note's {actual!r} at {fields[1].split(' ', 1)[1]}")
        start, end = bounds[0]
        label = parts[0]
        if label.upper() in PHI_TYPES:
            phi.append(Span(start, end, label.upper(), text[start:end]))
        else:
            entities.append(Span(start, end, label, text[start:end]))
    return phi, entities


def read_brat(folder: str | os.PathLike, patient_id: PatientOf | None = None,
              discontinuous: str = "error") -> list[Note]:
    """BRAT standoff: ``X.txt`` with ``X.ann``; T lines become spans (labels that are i2b2 2014
    PHI types go to ``phi``, upper-cased; others to ``entities`` as written). Discontinuous spans
    raise DataError, or with ``discontinuous="first"`` keep their first fragment. Patient = note
    id unless ``patient_id`` maps it."""
    if discontinuous not in ("error", "first"):
        raise SettingsError(f"discontinuous must be 'error' or 'first', got {discontinuous!r}")
    notes = []
    for txt in _files(folder, ".txt"):
        text = txt.read_text(encoding="utf-8")
        ann = txt.with_suffix(".ann")
        phi, entities = _brat_spans(ann, text, discontinuous) if ann.is_file() else ([], [])
        note = Note(txt.stem, (patient_id or str)(txt.stem), text, tuple(phi), tuple(entities),
                    meta={"source": "brat"})
        notes.append(check_spans(note, str(txt)))
    return _nonempty(notes, folder)


def write_brat(notes: Iterable[Note], folder: str | os.PathLike) -> list[Path]:
    """Write ``<id>.txt`` and ``<id>.ann`` (PHI then entity spans as T lines)."""
    from dpcare.io import write_text

    written = []
    for note in notes:
        lines = [f"T{i}\t{s.label} {s.start} {s.end}\t{' '.join(s.text.split())}\n"
                 for i, s in enumerate([*note.phi, *note.entities], 1)]
        stem = _file_stem(note.note_id)
        written.append(write_text(Path(folder) / f"{stem}.txt", note.text))
        write_text(Path(folder) / f"{stem}.ann", "".join(lines))
    return written


# --- JSONL ---------------------------------------------------------------------------------------

def _spans(obj, key: str, text: str, where: str) -> tuple[Span, ...]:
    out = []
    for k, s in enumerate(obj.get(key) or []):
        try:
            start, end, label = int(s["start"]), int(s["end"]), str(s["label"])
        except (KeyError, TypeError, ValueError):
            raise DataError(f"{where}: {key}[{k}] needs integer start, end and a label, "
                             f"got {s!r}") from None
        out.append(Span(start, end, label, str(s["text"]) if "text" in s else text[start:end]))
    return tuple(out)


def note_from_dict(obj: dict, where: str) -> Note:
    """A Note from the JSONL schema (note_to_dict); spans checked against the text."""
    if not isinstance(obj, dict) or not isinstance(obj.get("text"), str):
        # a malformed corpus line is a DataError like every other bad input of the readers
        raise DataError(f"{where}: each line must be a JSON object with a string 'text'")
    for key in ("note_id", "patient_id"):
        if obj.get(key) in (None, ""):
            raise DataError(f"{where}: no {key!r} (every note needs its patient id, the privacy "
                             f"unit; use the note id when each note is its own patient)")
    text = obj["text"]
    note = Note(str(obj["note_id"]), str(obj["patient_id"]), text,
                _spans(obj, "phi", text, where), _spans(obj, "entities", text, where),
                tuple(map(str, obj.get("icd_codes") or ())), str(obj.get("summary_source") or ""),
                str(obj.get("summary_target") or ""), dict(obj.get("meta") or {}))
    return check_spans(note, where)


def read_jsonl(path: str | os.PathLike) -> list[Note]:
    """One JSON object per line: note_id, patient_id, text, and optionally phi / entities (lists
    of {start, end, label, text}), icd_codes, summary_source, summary_target, meta."""
    path = Path(path)
    if not path.is_file():
        raise MissingFileError(f"no such file: {path}")
    notes = []
    with path.open(encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as e:
                raise DataError(f"{path}:{lineno}: not valid JSON ({e.msg})") from None
            notes.append(note_from_dict(obj, f"{path}:{lineno}"))
    return _nonempty(notes, path)


def read_json_array(path: str | os.PathLike) -> list[Note]:
    """A JSON file holding one array of note objects (the fields of :func:`read_jsonl`)."""
    path = Path(path)
    try:
        records = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise DataError(f"{path}: not valid JSON ({e.msg}, line {e.lineno}); --format json reads one array of note "
                        "objects (--format jsonl: one object per line)") from None
    if not isinstance(records, list):
        raise DataError(f"{path}: --format json reads one JSON array of note objects, got a {type(records).__name__}")
    return _nonempty([note_from_dict(obj, f"{path}[{i}]") for i, obj in enumerate(records)], path)


def write_jsonl(notes: Iterable[Note], path: str | os.PathLike) -> Path:
    from dpcare.io import write_json_lines

    return write_json_lines(path, map(note_to_dict, notes))


# --- any format, by name --------------------------------------------------------------------------

#: format name -> (what it reads, "file" / "folder" / "either", reader of (path, note-id -> patient-id or None))
NOTE_FORMATS: dict[str, tuple[str, str, Callable[[Path, PatientOf | None], list[Note]]]] = {
    "jsonl": ("a JSON-lines file, one note per line (note_id, patient_id, text, optional icd_codes, phi, "
              "entities, summary_source, summary_target)", "file", lambda p, _: read_jsonl(p)),
    "noteevents": ("MIMIC-III NOTEEVENTS.csv (ROW_ID, SUBJECT_ID, TEXT, ...)", "file",
                   lambda p, _: read_noteevents(p)),
    "i2b2-2010": ("a folder of i2b2/n2c2 2010 notes (.txt, with .con concepts)", "folder",
                  lambda p, of: read_i2b2_2010(p, patient_id=of)),
    "i2b2-2014": ("an i2b2 2014 de-identification .xml file or a folder of them", "either",
                  lambda p, of: read_i2b2_2014_xml(p, patient_id=of)),
    "json": ("a JSON file holding one array of note objects (the jsonl fields)", "file",
             lambda p, _: read_json_array(p)),
    "txt": ("a folder of plain .txt notes (BRAT .ann files beside them are read too); each note its own patient "
            "unless --patients maps them", "folder", lambda p, of: read_brat(p, patient_id=of)),
    "brat": ("a folder of .txt notes (with BRAT .ann annotations, optional); each note its own patient unless "
             "--patients maps them", "folder", lambda p, of: read_brat(p, patient_id=of)),
}
#: formats whose notes name no patient: a --patients mapping applies (i2b2 2014's file names name one, which a
#: mapping may override); without one, a folder of several notes is warned about
UNNAMED_PATIENTS = ("txt", "brat", "i2b2-2010")
MAPPABLE = (*UNNAMED_PATIENTS, "i2b2-2014")


def _check_mapping(format: str, patients: PatientOf | None) -> None:
    if patients is not None and format not in MAPPABLE:
        raise SettingsError(f"--format {format} names each note's patient itself: --patients applies only to "
                            f"{list(MAPPABLE)}")


def read_notes(path: str | os.PathLike, format: str = "jsonl", patients: PatientOf | None = None) -> list[Note]:
    """The notes of ``path`` in ``format`` (a name of :data:`NOTE_FORMATS`); a path of the wrong kind (a file
    for a folder format, or the reverse) is an error naming what the format expects. ``patients`` maps a note's
    id (its file name without the suffix) to its patient in the formats that name none
    (:func:`dpcare.text.patients.patient_mapping`); without it each such note is its own patient, with a
    warning."""
    if format not in NOTE_FORMATS:
        raise UnknownNameError(f"unknown notes format {format!r}; choose one of {list(NOTE_FORMATS)}")
    _check_mapping(format, patients)
    what, kind, reader = NOTE_FORMATS[format]
    path = Path(path)
    if not path.exists():
        raise MissingFileError(f"no such file or folder: {path} (--format {format} reads {what})")
    if kind == "file" and path.is_dir():
        raise DataError(f"{path} is a folder; --format {format} reads {what}")
    if kind == "folder" and not path.is_dir():
        raise DataError(f"{path} is a file; --format {format} reads {what} (--format jsonl reads a JSON-lines file)")
    notes = reader(path, patients)
    if format in UNNAMED_PATIENTS and patients is None:
        warn_each_note_its_own_patient(path, len(notes))
    return notes


def count_patients(path: str | os.PathLike, format: str = "jsonl", patients: PatientOf | None = None) -> int:
    """The number of :func:`read_patient_ids` of the notes at ``path``."""
    return len(read_patient_ids(path, format, patients))


def read_patient_ids(path: str | os.PathLike, format: str = "jsonl", patients: PatientOf | None = None) -> set[str]:
    """Distinct patient ids of the notes at ``path`` in ``format``, from the ids alone where the format allows:
    the JSONL lines' patient_id, NOTEEVENTS' SUBJECT_ID column, the file names of a folder format (a note per
    .txt, an i2b2 2014 record per patient-record stem; ``patients`` maps those, as in :func:`read_notes`). The
    notes are checked when they are read."""
    path = Path(path)
    if format != "jsonl":
        return _patient_ids_of(path, format, patients)
    if not path.is_file():
        raise MissingFileError(f"no such file: {path}")
    ids = set()
    with path.open(encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            try:
                patient = json.loads(line).get("patient_id") if line.strip() else None
            except (json.JSONDecodeError, AttributeError):
                raise DataError(f"{path}:{lineno}: not a JSON object") from None
            if patient not in (None, ""):
                ids.add(str(patient))  # as read_jsonl keeps it
    if not ids:
        raise DataError(f"{path}: no notes")
    return ids


def _patient_ids_of(path: Path, format: str, patients: PatientOf | None) -> set[str]:
    if format not in NOTE_FORMATS:
        raise UnknownNameError(f"unknown notes format {format!r}; choose one of {list(NOTE_FORMATS)}")
    _check_mapping(format, patients)
    what, kind, _ = NOTE_FORMATS[format]
    if not path.exists():
        raise MissingFileError(f"no such file or folder: {path} (--format {format} reads {what})")
    if format in UNNAMED_PATIENTS and path.is_dir():
        stems = [p.stem for p in path.glob("*.txt")]
        ids = {(patients or str)(stem) for stem in stems}
        if patients is None:
            warn_each_note_its_own_patient(path, len(stems))
    elif format == "i2b2-2014" and path.is_dir():
        ids = {(patients or _patient_2014)(p.stem) for p in path.glob("*.xml")}
    elif format == "noteevents" and path.is_file():
        ids = _noteevents_subjects(path)
    else:  # one file holding everything (a JSON array, one i2b2 2014 file): read it
        ids = {n.patient_id for n in read_notes(path, format, patients)}
    if not ids:
        raise DataError(f"{path}: no notes (--format {format} reads {what})")
    return {str(i) for i in ids}


def _noteevents_subjects(path: Path) -> set[str]:
    """SUBJECT_ID of the rows :func:`read_noteevents` keeps (ISERROR rows dropped), read from those two columns."""
    import pandas as pd

    try:
        header = {c.upper(): c for c in pd.read_csv(path, nrows=0).columns}
    except (pd.errors.EmptyDataError, pd.errors.ParserError) as e:
        raise DataError(f"{path}: not a readable NOTEEVENTS csv ({e})") from None
    if "SUBJECT_ID" not in header:
        raise DataError(f"{path}: missing column(s) ['SUBJECT_ID']; MIMIC-III NOTEEVENTS has ROW_ID, SUBJECT_ID, "
                        "HADM_ID, CATEGORY, TEXT")
    wanted = [header[c] for c in ("SUBJECT_ID", "ISERROR") if c in header]
    rows = pd.read_csv(path, usecols=wanted, dtype=str, keep_default_na=False)
    if "ISERROR" in header:
        rows = rows[~rows[header["ISERROR"]].str.strip().isin(["1", "1.0"])]
    return {s.strip() for s in rows[header["SUBJECT_ID"]] if s.strip()}
