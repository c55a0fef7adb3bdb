"""Which patient each note belongs to, for note formats that name no patient (a folder of .txt notes, BRAT,
i2b2 2010; i2b2 2014 names them in its file names).

The patient is the privacy unit of fine-tuning and classification: notes of one patient must be one unit, or a
patient with several notes is clipped several times and the printed patient-level epsilon is false. Where
the format names no patient, the user maps notes to patients (``--patients``) with either

* a CSV file with the columns ``note_id`` (the note file's name without ``.txt``) and ``patient_id``, or
* a regular expression with a group named ``patient``, matched against the whole file name without ``.txt``:
  ``(?P<patient>\\d+)_.*`` reads patient ``123`` from ``123_discharge.txt``.

Without a mapping each note is its own patient, and :func:`warn_each_note_its_own_patient` says so.
"""

from __future__ import annotations

import csv
import re
import warnings
from collections.abc import Callable
from pathlib import Path

from dpcare.caller import user_stacklevel
from dpcare.exceptions import DataError, SettingsError

PatientOf = Callable[[str], str]
PATTERN_GROUP = "patient"


class EachNoteOwnPatientWarning(UserWarning):
    """Notes whose format names no patient were read without a notes-to-patient mapping."""


def patient_mapping(spec: str | Path | None) -> PatientOf | None:
    """The note-id -> patient-id function of ``--patients``: a CSV file (note_id, patient_id) or a regular
    expression with a ``(?P<patient>...)`` group; None for None. A malformed one is refused here, before any
    note is read; a note the mapping does not cover is refused when it is read."""
    if spec is None or str(spec) == "":
        return None
    path = Path(spec)
    if path.is_file():
        return _csv_mapping(path)
    text = str(spec)
    if f"(?P<{PATTERN_GROUP}>" not in text:
        raise SettingsError(f"--patients must be a CSV file (columns note_id, patient_id) or a file-name pattern "
                            f"with a group (?P<{PATTERN_GROUP}>...), got {text!r} (no such file either)")
    try:
        pattern = re.compile(text)
    except re.error as e:
        raise SettingsError(f"--patients {text!r} is not a valid regular expression: {e}") from None

    def of(note_id: str) -> str:
        match = pattern.fullmatch(note_id)
        if match is None or not match.group(PATTERN_GROUP):
            raise DataError(f"note {note_id!r}: its file name does not match --patients {text!r}, so its patient "
                            "is unknown")
        return match.group(PATTERN_GROUP)

    return of


def _csv_mapping(path: Path) -> PatientOf:
    try:
        with path.open(newline="", encoding="utf-8") as f:
            rows = list(csv.DictReader(f))
    except UnicodeDecodeError:
        raise DataError(f"--patients {path} is not UTF-8 text: save it as UTF-8") from None
    if not rows or not {"note_id", "patient_id"} <= set(rows[0]):
        raise DataError(f"--patients {path} needs the columns note_id and patient_id and one row per note")
    owner: dict[str, str] = {}
    for line, row in enumerate(rows, 2):
        note, patient = (row.get("note_id") or "").strip(), (row.get("patient_id") or "").strip()
        if not note or not patient:
            raise DataError(f"--patients {path}, line {line}: an empty note_id or patient_id")
        if owner.setdefault(note, patient) != patient:
            raise DataError(f"--patients {path}, line {line}: note {note!r} is given two patients, "
                            f"{owner[note]!r} and {patient!r}")

    def of(note_id: str) -> str:
        if note_id not in owner:
            raise DataError(f"note {note_id!r} is not in --patients {path}, so its patient is unknown")
        return owner[note_id]

    return of


def warn_each_note_its_own_patient(where: str | Path, notes: int) -> None:
    """Say that ``notes`` notes at ``where`` were each taken as their own patient (no mapping was given)."""
    if notes < 2:
        return
    warnings.warn(f"every note of {where} is its own patient ({notes} notes; the format names no patients): a "
                  "patient with several notes is then protected only note by note and a patient-level epsilon "
                  "does not hold. Map notes to patients with --patients (a CSV of note_id,patient_id, or a "
                  f"file-name pattern with (?P<{PATTERN_GROUP}>...))", EachNoteOwnPatientWarning,
                  stacklevel=user_stacklevel())


__all__ = ["EachNoteOwnPatientWarning", "PatientOf", "patient_mapping", "warn_each_note_its_own_patient"]
