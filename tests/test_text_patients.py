"""Notes to patients for formats that name none (a folder of .txt notes, BRAT, i2b2 2010): a --patients mapping
(a CSV of note_id,patient_id, or a file-name pattern) makes a patient's notes one privacy unit, and without one
the user is told that every note is its own patient (several notes of one patient would silently weaken the
patient-level guarantee)."""

from __future__ import annotations

import json
import warnings

import pytest
from typer.testing import CliRunner

from dpcare.cli import app
from dpcare.exceptions import DataError, SettingsError
from dpcare.text.patients import EachNoteOwnPatientWarning, patient_mapping
from dpcare.text.readers import count_patients, read_notes, read_patient_ids

NOTES = {"101_admission": "Seen for chest pain.", "101_discharge": "Discharged home on aspirin.",
         "102_admission": "Seen for dyspnoea.", "103_discharge": "Discharged to rehab."}
PATIENT_OF = {"101_admission": "101", "101_discharge": "101", "102_admission": "102", "103_discharge": "103"}


@pytest.fixture
def folder(tmp_path):
    notes = tmp_path / "notes"
    notes.mkdir()
    for stem, text in NOTES.items():
        (notes / f"{stem}.txt").write_text(text)
    return notes


def _csv(tmp_path, rows=PATIENT_OF) -> str:
    path = tmp_path / "patients.csv"
    path.write_text("note_id,patient_id\n" + "".join(f"{n},{p}\n" for n, p in rows.items()))
    return str(path)


@pytest.mark.parametrize("fmt", ["txt", "brat", "i2b2-2010"])
def test_a_csv_or_a_pattern_makes_a_patients_notes_one_unit(tmp_path, folder, fmt):
    for spec in (_csv(tmp_path), r"(?P<patient>\d+)_.*"):
        of = patient_mapping(spec)
        with warnings.catch_warnings():
            warnings.simplefilter("error", EachNoteOwnPatientWarning)  # mapped: nothing to warn about
            notes = read_notes(folder, fmt, of)
            assert {n.note_id: n.patient_id for n in notes} == PATIENT_OF
            assert read_patient_ids(folder, fmt, of) == {"101", "102", "103"}  # the ledger's n: 3, not 4
            assert count_patients(folder, fmt, of) == 3


def test_without_a_mapping_every_note_is_its_own_patient_and_the_user_is_told(folder):
    with pytest.warns(EachNoteOwnPatientWarning, match="every note of .* is its own patient .*--patients"):
        notes = read_notes(folder, "txt")
    assert {n.patient_id for n in notes} == set(NOTES)
    with pytest.warns(EachNoteOwnPatientWarning):
        assert count_patients(folder, "brat") == 4


def test_a_mapping_that_does_not_cover_a_note_or_does_not_apply_is_refused(tmp_path, folder):
    with pytest.raises(DataError, match="'103_discharge' is not in --patients"):
        read_notes(folder, "txt", patient_mapping(_csv(tmp_path, {k: v for k, v in PATIENT_OF.items()
                                                                  if k != "103_discharge"})))
    with pytest.raises(DataError, match="does not match --patients"):
        read_patient_ids(folder, "txt", patient_mapping(r"(?P<patient>\d+)_admission"))
    with pytest.raises(SettingsError, match=r"CSV file .* or a file-name pattern"):
        patient_mapping("no-such-file.csv")
    with pytest.raises(SettingsError, match="not a valid regular expression"):
        patient_mapping("(?P<patient>[0-9+)")
    with pytest.raises(DataError, match="two patients"):
        bad = tmp_path / "two.csv"
        bad.write_text("note_id,patient_id\na,1\na,2\n")
        patient_mapping(str(bad))
    jsonl = tmp_path / "notes.jsonl"
    jsonl.write_text(json.dumps({"note_id": "a", "patient_id": "p", "text": "x"}) + "\n")
    with pytest.raises(SettingsError, match="names each note's patient itself"):
        read_notes(jsonl, "jsonl", patient_mapping(r"(?P<patient>.*)"))


def test_the_text_commands_take_the_mapping(tmp_path, folder):
    out = tmp_path / "masked.jsonl"
    r = CliRunner().invoke(app, ["text", "mask", str(folder), "--format", "txt", "--patients",
                                 r"(?P<patient>\d+)_.*", "--out", str(out)])
    assert r.exit_code == 0, r.output
    views = {v["note_id"]: v["patient_id"] for v in map(json.loads, out.read_text().splitlines())}
    assert views == PATIENT_OF and "is its own patient" not in r.output
    with pytest.warns(EachNoteOwnPatientWarning):  # the command line prints it as `warning: ...`
        r = CliRunner().invoke(app, ["text", "mask", str(folder), "--format", "txt", "--out", str(tmp_path / "b.jsonl")])
    assert r.exit_code == 0, r.output
    r = CliRunner().invoke(app, ["text", "finetune", str(folder), "--format", "txt", "--patients", "nonsense",
                                 "--out", str(tmp_path / "ft")])
    assert r.exit_code == 2 and "--patients must be a CSV file" in r.output and not (tmp_path / "ft").exists()
