"""Every command that takes --budget binds the run to the budget's data set (issue 56, part 2): run against a
budget initialised for ANOTHER data set, each is refused before any private value is read, reserves nothing and
writes nothing. Red when a command stops passing its data to the budget guard (the run would then be charged to
another data set's budget, or to none at all).

"Before any value is read" is made checkable: each data set carries a value its command refuses when it reads it
(a text in a numeric column, a malformed span, a file that is no image). A command that read it before checking
the fingerprint would fail on that value instead of on the fingerprint."""

from __future__ import annotations

import json

import pytest
import yaml
from helpers import SPEC, toy_table
from test_bad_inputs import _events
from typer.testing import CliRunner

from dpcare.cli import app
from dpcare.privacy.budget import Budget, data_fingerprint


def _table(root) -> list[str]:
    df = toy_table(200)
    df["hr"] = df["hr"].astype(object)
    df.loc[7, "hr"] = "fast"  # refused when values are read
    df.to_csv(root / "table.csv", index=False)
    (root / "spec.yaml").write_text(yaml.safe_dump(SPEC))
    return ["table.csv", "--spec", "spec.yaml"]


def _notes(root, codes: bool) -> str:
    lines = []
    for i in range(30):
        note = {"note_id": f"n{i}", "patient_id": f"p{i // 2}", "text": "Mr. X was seen for chest pain.",
                "phi": [{"start": 4, "end": 400 if i == 9 else 5, "label": "PATIENT"}]}  # note 9: a span past its end
        if codes:
            note["icd_codes"] = ["I10"] if i % 2 else ["E11"]
        lines.append(json.dumps(note))
    (root / "notes.jsonl").write_text("\n".join(lines) + "\n")
    return "notes.jsonl"


def _forecast_events(root) -> list[str]:
    events = _events(root)
    path = root / events
    text = path.read_text().splitlines()
    head, first = text[0], text[1].split(",")
    first[head.split(",").index("value")] = "high"  # refused when values are read (ids alone are read first)
    path.write_text("\n".join([head, ",".join(first), *text[2:]]) + "\n")
    return [events, "--spec", "ts.yaml"]


def _images(root) -> str:
    from PIL import Image

    for label in ("a", "b"):
        (root / "imgs" / label).mkdir(parents=True)
        for k in range(6):
            Image.new("L", (8, 8), color=40 * k).save(root / "imgs" / label / f"{k}.png")
    (root / "imgs" / "a" / "broken.png").write_bytes(b"not an image")  # refused when pixels are read
    return "imgs"


def _model_folder(root) -> str:
    (root / "model").mkdir()
    return "model"


# command -> its arguments on a data set of ``root`` (the budget's fingerprint is of another data set)
COMMANDS = {
    "train": lambda d: ["train", *_table(d), "--epsilon", "1"],
    "synth fit": lambda d: ["synth", "fit", *_table(d), "--epsilon", "1"],
    # 6 patients: exact split sizes (a hash split of so few can leave one empty, refused before the budget)
    "forecast fit": lambda d: ["forecast", "fit", *_forecast_events(d), "--epsilon", "1", "--split", "permutation"],
    "images fit": lambda d: ["images", "fit", _images(d), "--epsilon", "1"],
    "text finetune": lambda d: ["text", "finetune", _notes(d, codes=False), "--model", _model_folder(d),
                                "--epsilon", "1", "--batch-size", "4"],
    "text classify": lambda d: ["text", "classify", _notes(d, codes=True), "--epsilon", "1", "--no-impute"],
}


def _budgeted(cmd, name: str = ""):
    """The names of the commands under ``cmd`` (a click command or group) that take --budget."""
    if hasattr(cmd, "commands"):
        for sub, child in cmd.commands.items():
            yield from _budgeted(child, f"{name} {sub}".strip())
    elif any(p.name == "budget" for p in cmd.params):
        yield name


def test_every_budgeted_command_is_checked():
    """A new command with --budget must be added to COMMANDS (its binding is then checked below)."""
    import typer.main

    assert sorted(_budgeted(typer.main.get_command(app))) == sorted(COMMANDS)


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_a_budget_of_another_data_set_is_refused_before_any_value_is_read(tmp_path, monkeypatch, command):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "other.csv").write_text("another data set\n")
    budget = Budget.create(tmp_path / "budget.json", 8.0, 1e-5, "other", fingerprint=data_fingerprint("other.csv"))
    before = budget.path.read_bytes()
    args = COMMANDS[command](tmp_path)
    files = {p for p in tmp_path.rglob("*")}
    r = CliRunner().invoke(app, [*args, "--budget", "budget.json", "--out", "run"])
    assert r.exit_code == 2, f"{command}: exit {r.exit_code}\n{r.output}\n{r.exception!r}"
    assert f"is not the data set of the budget {'budget.json'}" in r.stderr, r.stderr
    assert budget.path.read_bytes() == before  # nothing reserved
    written = {p for p in tmp_path.rglob("*")} - files
    assert {p.name for p in written} <= {"budget.json.lock"}, written  # no run folder, no staging folder
