"""Bad input through the command line: a clear error that names the problem, exit status 2, no traceback and
nothing half-written. The same cases make docs/bad-inputs.md: the test fails when the page is stale
(regenerate it with `DPCARE_WRITE_DOCS=1 python -m pytest tests/test_bad_inputs.py`)."""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import yaml
from helpers import SPEC, toy_table
from typer.testing import CliRunner

from dpcare.cli import app

DOC = Path(__file__).resolve().parents[1] / "docs" / "bad-inputs.md"


def _table(root: Path, change: Callable | None = None, name: str = "table.csv", n: int = 200) -> str:
    df = toy_table(n)
    (change(df) if change else df).to_csv(root / name, index=False)
    return name


def _write(root: Path, name: str, text: str) -> str:
    (root / name).write_text(text)
    return name


def _dir(root: Path, name: str) -> str:
    (root / name).mkdir()
    return name


def _spec(root: Path, text: str | None = None) -> str:
    (root / "spec.yaml").write_text(text if text is not None else yaml.safe_dump(SPEC))
    return "spec.yaml"


def _latin1(root: Path) -> str:
    """A table exported as Latin-1 (a Windows spreadsheet's CSV): 'fémale' in row 1."""
    df = toy_table(200)
    df.loc[0, "sex"] = "f\u00e9male"
    df.to_csv(root / "latin1.csv", index=False, encoding="latin-1")
    return "latin1.csv"


def _three_classes(root: Path) -> tuple[str, str]:
    """A table whose target takes 3 values, and a spec that declares them."""
    df = toy_table(200)
    df["death"] = df["death"] + (df["age"] > 80)
    df.to_csv(root / "three.csv", index=False)
    (root / "spec3.yaml").write_text(yaml.safe_dump({**SPEC, "target": {**SPEC["target"], "categories": [0, 1, 2]}}))
    return "three.csv", "spec3.yaml"


def _file_in_the_way(root: Path, name: str) -> str:
    """``blocker/<name>``, where ``blocker`` is a file: its folder can be neither made nor written (as a
    read-only folder, which the root user of a test machine cannot make)."""
    (root / "blocker").write_text("a file, not a folder")
    return f"blocker/{name}"


def _events(root: Path, bad_time: bool = False, conflict: bool = False, negated: bool = False) -> str:
    rng = np.random.default_rng(0)
    rows = []
    for p in range(12):  # 12 patients: a hash split of the seed leaves no split empty (7 / 2 / 3)
        for h in range(30):
            rows.append({"patient_id": f"p{p}", "stay_id": f"s{p}", "time": f"2020-01-01 {h % 24:02d}:00" if h < 24
                         else f"2020-01-02 {h - 24:02d}:00", "variable": "hr", "value": 80 + rng.normal()})
    if bad_time:
        rows[3]["time"] = "yesterday at noon"
    if conflict:  # a second, other heart rate at one recorded time
        rows.append({**rows[5], "value": rows[5]["value"] + 30})
    if negated:  # every value's sign flipped: impossible heart rates
        rows = [{**r, "value": -r["value"]} for r in rows]
    import pandas as pd

    pd.DataFrame(rows).to_csv(root / "events.csv", index=False)
    (root / "ts.yaml").write_text(yaml.safe_dump({"name": "toy", "step": "hour", "window": {
        "input_len": 6, "output_len": 6, "stride": 6}, "default_variables": ["hr"],
        "variables": {"hr": {"center": 80.0, "scale": 15.0, "range": [0, 300]}}}))
    return "events.csv"


def _run(root: Path) -> str:
    """A finished `dpcare train` run folder (non-private, tiny)."""
    _table(root, name="train.csv", n=300)
    r = CliRunner().invoke(app, ["train", "train.csv", "--spec", _spec(root), "--out", "run", "--method",
                                 "non-private", "--epochs", "1", "--hidden", "8"])
    assert r.exit_code == 0, r.output
    return "run"


# (what is wrong, set-up returning the arguments, the expected message pattern)
CASES: list[tuple[str, Callable[[Path], list[str]], str]] = [
    ("train: the data file does not exist",
     lambda d: ["train", "nope.csv", "--spec", _spec(d)], "data file not found: nope.csv"),
    ("train: an empty data file",
     lambda d: ["train", _write(d, "e.csv", ""), "--spec", _spec(d)], "e.csv is empty"),
    ("train: a spec column missing from the table",
     lambda d: ["train", _table(d, lambda f: f.drop(columns=["hr"])), "--spec", _spec(d)], "lacks the spec columns"),
    ("train: a text value in a numeric column",
     lambda d: ["train", _table(d, lambda f: f.assign(hr="fast")), "--spec", _spec(d)], "'hr' is numeric"),
    ("train: NaN in a column not declared nullable",
     lambda d: ["train", _table(d, lambda f: f.assign(age=[np.nan] + list(f["age"][1:]))), "--spec", _spec(d)],
     "'age' has 1 missing"),
    ("train: a column named twice in the header",
     lambda d: ["train", _write(d, "dup.csv", "age,sex,age\n" + "1,f,2\n" * 50), "--spec", _spec(d)],
     "more than once"),
    ("train: a malformed spec YAML",
     lambda d: ["train", _table(d), "--spec", _spec(d, "name: x\ncolumns:\n  - name: a\n   kind: numeric\n")],
     "not valid YAML"),
    ("train: `columns: 5` in the spec",
     lambda d: ["train", _table(d), "--spec", _spec(d, "name: x\ncolumns: 5\n")], "'columns' must be a list"),
    ("train: epsilon <= 0", lambda d: ["train", _table(d), "--spec", _spec(d), "--epsilon", "0"],
     "--epsilon must be"),
    ("train: a meaninglessly large epsilon", lambda d: ["train", _table(d), "--spec", _spec(d), "--epsilon", "1e6"],
     r"--epsilon must be a finite number in \(0, 100\]"),
    ("train: delta >= 1/n", lambda d: ["train", _table(d), "--spec", _spec(d), "--delta", "0.5"], "delta"),
    ("train: a spec key dpcare does not know (epsilon: in the spec)",
     lambda d: ["train", _table(d), "--spec", _spec(d, yaml.safe_dump({**SPEC, "epsilon": 1.0}))],
     r"unknown spec key\(s\) \['epsilon'\]"),
    ("train: values outside their declared bounds (ages negated)",
     lambda d: ["train", _table(d, lambda f: f.assign(age=-f["age"])), "--spec", _spec(d)],
     r"'age' \d+ of \d+ \(100.0%\): \d+ below 18, 0 above 100; at most 5.0%"),
    ("train: max_out_of_range: 2 in the spec",
     lambda d: ["train", _table(d), "--spec", _spec(d, yaml.safe_dump({**SPEC, "max_out_of_range": 2}))],
     r"max_out_of_range must be a share in \[0, 1\]"),
    ("train: an unknown method", lambda d: ["train", _table(d), "--spec", _spec(d), "--method", "dp-adam"],
     "--method must be one of"),
    ("train: --out is an existing file",
     lambda d: ["train", _table(d), "--spec", _spec(d), "--out", _write(d, "out.txt", "x")],
     "is a file, not a folder"),
    ("train: --out holds another run",
     lambda d: ["train", _table(d), "--spec", _spec(d), "--out", _run(d)], "already holds a finished tabular run"),
    ("train: the command of a finished run, again",
     lambda d: ["train", "train.csv", "--spec", "spec.yaml", "--out", _run(d), "--method", "non-private", "--epochs",
                "1", "--hidden", "8"], "already holds this run, finished with these settings"),
    ("train: a CSV that is not UTF-8 (a Latin-1 export)",
     lambda d: ["train", _latin1(d), "--spec", _spec(d)], r"latin1.csv is not UTF-8 text \(line 2, byte 0xe9"),
    ("train: a target with three categories",
     lambda d: (lambda t, s: ["train", t, "--spec", s])(*_three_classes(d)), "declares 3 categories"),
    ("train: a fusion method without its public support table",
     lambda d: ["train", _table(d), "--spec", _spec(d), "--method", "fusiondp"], "--public-data"),
    ("train: a single-class test split",
     lambda d: ["train", _table(d, lambda f: f.assign(death=[1] * 5 + [0] * (len(f) - 5))), "--spec", _spec(d)],
     "single class"),
    ("predict: not a run folder",
     lambda d: ["predict", _dir(d, "x"), _table(d)], "no run.json"),
    ("predict: the new rows lack a feature column",
     lambda d: ["predict", _run(d), _table(d, lambda f: f.drop(columns=["age"]), name="new.csv")], "'age'"),
    ("audit loss: neither --data nor --members/--nonmembers",
     lambda d: ["audit", "loss", _run(d)], "pass either --data"),
    ("audit loss: another table than the run's",
     lambda d: ["audit", "loss", _run(d), "--data", _table(d, name="other.csv", n=250)], "split was drawn over"),
    ("report: a folder no run wrote",
     lambda d: ["report", _dir(d, "stray"), "--out", "r.html"], "not a dpcare run folder"),
    ("report: --out is a folder",
     lambda d: ["report", _run(d), "--out", _dir(d, "pages")], "--out pages is a folder"),
    ("report: --out where no file can be written",
     lambda d: ["report", _run(d), "--out", _file_in_the_way(d, "r.html")], "cannot write --out blocker/r.html: blocker is a file"),
    ("budget init: where no file can be written",
     lambda d: ["budget", "init", _file_in_the_way(d, "b.json"), "--epsilon", "1", "--delta", "1e-5", "--dataset",
                "x"], "cannot write budget file blocker/b.json: blocker is a file"),
    ("budget init: the file exists",
     lambda d: ["budget", "init", _write(d, "b.json", "{}"), "--epsilon", "1", "--delta", "1e-5", "--dataset", "x"],
     "already exists"),
    ("forecast fit: values outside a variable's declared range (negated)",
     lambda d: ["forecast", "fit", _events(d, negated=True), "--spec", "ts.yaml"],
     r"'hr' 360 of 360 \(100.0%\): 360 below 0, 0 above 300; at most 5.0%"),
    ("forecast fit: an unreadable time",
     lambda d: ["forecast", "fit", _events(d, bad_time=True), "--spec", "ts.yaml"], "yesterday at noon"),
    ("forecast fit: two different values of a variable at one time",
     lambda d: ["forecast", "fit", _events(d, conflict=True), "--spec", "ts.yaml"], "hold differing values"),
    ("forecast fit: a window longer than every stay",
     lambda d: ["forecast", "fit", _events(d), "--spec", "ts.yaml", "--input-len", "400"], "window"),
    ("images fit: an empty folder",
     lambda d: ["images", "fit", _dir(d, "imgs")], "imgs"),
    ("text classify: a span outside its note",
     lambda d: ["text", "classify", _write(d, "notes.jsonl", "".join(
         f'{{"note_id": "n{i}", "patient_id": "p{i}", "text": "Mr. X was seen.", "icd_codes": ["I10"], "phi": '
         f'[{{"start": 4, "end": {40 if i == 7 else 5}, "label": "PATIENT"}}]}}\n' for i in range(20))), "--out", "cls"],
     "notes.jsonl"),
    ("text finetune: an unknown model folder",
     lambda d: ["text", "finetune", _write(d, "notes.jsonl", '{"note_id": "n1", "patient_id": "p1", "text": "x"}\n'),
                "--model", "no-such-model", "--out", "ft"], "no-such-model"),
    ("text finetune: fewer patients than the expected batch (the default 128 patients a step)",
     lambda d: ["text", "finetune", _write(d, "notes.jsonl", "".join(
         f'{{"note_id": "n{i}", "patient_id": "p{i}", "text": "Pt with pneumonia."}}\n' for i in range(20))),
                "--epsilon", "3", "--out", "ft"], "but the notes hold 20 patients"),
    ("synth fit: a CSV that is not UTF-8 (a Latin-1 export)",
     lambda d: ["synth", "fit", _latin1(d), "--spec", _spec(d)], "latin1.csv is not UTF-8 text"),
    ("synth fit: a target with three categories, with the verdict",
     lambda d: (lambda t, s: ["synth", "fit", t, "--spec", s])(*_three_classes(d)),
     "declares 3 categories.*--holdout 0"),
    ("synth fit: an unknown mode",
     lambda d: ["synth", "fit", _table(d), "--spec", _spec(d), "--mode", "dp-3stage"], "--mode must be one of"),
    ("synth fit: a language-model option for the default synthesizer, AIM",
     lambda d: ["synth", "fit", _table(d), "--spec", _spec(d), "--lr", "0.01"], "add --synthesizer dp-2stage"),
    ("synth fit: an AIM option for the language model",
     lambda d: ["synth", "fit", _table(d), "--spec", _spec(d), "--synthesizer", "dp-2stage", "--bins", "10"],
     "--bins does not apply"),
]


#: what each case printed (what, message, exit status, files written), kept by the case's test for the page
SEEN: dict[str, tuple[str, str, int, str]] = {}


def run_case(root: Path, what: str, build: Callable[[Path], list[str]]):
    cwd = os.getcwd()
    os.chdir(root)
    try:
        args = build(root)
        before = {p.relative_to(root) for p in root.rglob("*")}
        result = CliRunner().invoke(app, args)
        after = {p.relative_to(root) for p in root.rglob("*")}
    finally:
        os.chdir(cwd)
    written = sorted(str(p) for p in after - before)
    message = result.stderr.strip().replace("|", "\\|").replace(str(root) + "/", "").replace(str(root), ".")
    SEEN[what] = ("dpcare " + " ".join(a for a in args if a), message, result.exit_code, ", ".join(written))
    return args, result, written


@pytest.mark.parametrize("what, build, pattern", CASES, ids=[c[0] for c in CASES])
def test_bad_input_is_named_with_exit_2_and_nothing_written(tmp_path, what, build, pattern):
    args, r, written = run_case(tmp_path, what, build)
    assert r.exit_code == 2, f"{what}: exit {r.exit_code}\n{r.output}\n{r.exception!r}"
    assert r.stderr.startswith("error: ") and "Traceback" not in r.output, r.output
    assert re.search(pattern, r.stderr), r.stderr
    assert written == [], f"{what}: wrote {written}"


def test_ctrl_c_says_what_was_kept_and_how_to_resume(tmp_path, monkeypatch):
    def interrupted_fit(*args, checkpoint_dir=None, **kwargs):
        Path(checkpoint_dir).mkdir(parents=True)  # the run has begun to keep its work
        raise KeyboardInterrupt

    monkeypatch.setattr("dpcare.tabular.fit", interrupted_fit)
    monkeypatch.chdir(tmp_path)
    r = CliRunner().invoke(app, ["train", _table(tmp_path), "--spec", _spec(tmp_path), "--out", "run"])
    assert r.exit_code == 130, r.output
    assert r.stderr.strip() == ("interrupted; the work done so far is kept in .run.partial: rerun the same command "
                                "to resume from it")


def test_the_bad_input_page_is_current(tmp_path):
    """The page from what each case printed: kept by the cases' tests above (one worker runs this module in
    order), a case not run here (a -k selection) is run now."""
    rows = ["# Bad input: what the command line says", "",
            "Generated by `tests/test_bad_inputs.py` (every case runs through the CLI; exit status 2, no traceback, "
            "nothing written). Regenerate: `DPCARE_WRITE_DOCS=1 python -m pytest tests/test_bad_inputs.py`.", "",
            "| input | command | message | exit | written |", "|---|---|---|---|---|"]
    for i, (what, build, _) in enumerate(CASES):
        if what not in SEEN:
            root = tmp_path / str(i)
            root.mkdir()
            run_case(root, what, build)
        command, message, status, written = SEEN[what]
        rows.append(f"| {what} | `{command}` | {message} | {status} | {written or 'nothing'} |")
    text = "\n".join(rows) + "\n"
    if os.environ.get("DPCARE_WRITE_DOCS"):
        DOC.write_text(text)
    assert DOC.exists() and DOC.read_text() == text, "docs/bad-inputs.md is stale: regenerate it (see the docstring)"
