"""`dpcare synth fit | sample | evaluate` on the run contract, and `dpcare benchmark dp2stage --quick`, end to end
on small data with a tiny GPT-2 (never SmolLM2): fit -> a run folder -> sample in a fresh process -> evaluate ->
`dpcare report`; the budget refused before the table is read; one run per folder; bad options named by flag."""

import json
import subprocess
import sys
from html import escape

import pandas as pd
import pytest
import yaml
from helpers import SPEC, toy_table
from lm_fixtures import tiny_gpt2
from typer.testing import CliRunner

from dpcare.cli import app
from dpcare.cli.synth import SCALED, scaled_settings
from dpcare.data import TableSchema, load_table
from dpcare.runs import read_manifest
from dpcare.synth.settings import SIZES, SynthSettings
from dpcare.synth.synthesizer import attach_evaluation

runner = CliRunner()


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("synth-cli")
    model, tok = tiny_gpt2()
    model.save_pretrained(d / "gpt2")
    tok.save_pretrained(d / "gpt2")
    (d / "spec.yaml").write_text(yaml.safe_dump(SPEC))
    toy_table(200).to_csv(d / "train.csv", index=False)
    toy_table(100, seed=1).to_csv(d / "test.csv", index=False)
    return d


def fit_args(d, out, *extra):
    return ["synth", "fit", str(d / "train.csv"), "--spec", str(d / "spec.yaml"), "--out", str(out),
            "--synthesizer", "dp-2stage", "--model",
            str(d / "gpt2"), "--stage1-epochs", "1", "--epochs", "1", "--compare-rows", "80", *extra]


@pytest.mark.slow  # end to end
def test_fit_sample_in_a_fresh_process_evaluate_and_report(files, tmp_path):
    d = files
    out = tmp_path / "fitted"
    r = runner.invoke(app, fit_args(d, out, "--epsilon", "3", "--decimals", "1"))
    assert r.exit_code == 0, r.output
    assert "differential privacy" in r.output and "estimated fit time" in r.stderr
    assert sorted(p.name for p in out.iterdir()) == ["run.json", "synthesizer.json", "weights.pt"]  # no checkpoints
    m = read_manifest(out)
    g, ledger = m.models[0]["guarantee"], m.models[0]["ledger"]
    assert m.kind == "synth" and m.command == "dpcare synth fit" and m.models[0]["name"] == "dp-2stage-u"
    # 10% of the rows (20) are held out as the real test rows of the public-baseline comparison: 180 train
    assert g["epsilon"] <= 3.0 + 1e-6 and g["n"] == 180 and g["unit"] == "example" and ledger["n"] == 180
    assert m.settings["decimals"] == 1 and m.settings["dp"]["epsilon"] == 3.0 and m.settings["lm"]["layers"] == 1
    assert any("Stage 1 reads only public data" in line for line in m.not_protected)
    assert m.data["rows"] == 200 and m.data["training rows"] == 180 and m.data["test rows"] == 20
    assert len(set(m.data["held-out rows"])) == 20 and max(m.data["held-out rows"]) < 200
    (b,) = m.baselines
    assert b["test_rows"] == 20 and b["rows"] == b["synthetic_rows"] == 80 and b["name"].startswith("independent")
    verdicts = ("beats the public baseline", "no better than the public baseline: do not release", "undefined: ")
    assert b["verdict"] in r.output and b["verdict"].startswith(verdicts)
    assert [row["model"] for row in m.metrics] == ["dp-2stage-u", f"public baseline: {b['name']}"]
    assert m.metrics[1]["AUC XGB"] == b["metrics"]["AUC XGB"] and any(b["verdict"] in n for n in m.notes)
    assert any("public-baseline comparison" in line for line in m.not_protected)

    # sample in a fresh process: the folder alone is the model
    fake = tmp_path / "fake.csv"
    p = subprocess.run([sys.executable, "-m", "dpcare.cli", "synth", "sample", str(out), "--n", "30", "--out",
                        str(fake)], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    table = load_table(fake, TableSchema.from_dict(SPEC))  # schema-valid, or load_table raises
    assert len(table) == 30
    assert all(len(f"{v:.10g}".partition(".")[2]) <= 1 for v in table["age"])  # --decimals 1 was saved and used
    sampling = json.loads((tmp_path / "fake.sampling.json").read_text())
    assert sampling["valid_rate"] == 1.0 and sampling["run_id"] == m.run_id

    # evaluate: the report JSON where asked, and the metrics in the run's run.json
    r = runner.invoke(app, ["synth", "evaluate", str(fake), "--train", str(d / "train.csv"), "--test",
                            str(d / "test.csv"), "--spec", str(d / "spec.yaml"), "--synthesizer", str(out)])
    assert r.exit_code == 0, r.output
    report = json.loads((tmp_path / "fake.report.json").read_text())
    assert report["perplexity"]["value"] > 1
    m = read_manifest(out)
    rows = {row["model"]: row for row in m.metrics if row["synthetic table"] == "fake.csv"}
    assert set(rows) == {"dp-2stage-u", "real training table (reference)"} and len(m.metrics) == 4
    assert rows["dp-2stage-u"]["HIST20"] == report["hist"]["bins_20"] and rows["dp-2stage-u"]["synthetic table"] == (
        "fake.csv") and rows["dp-2stage-u"]["source"] == "sampled from this run"
    assert m.headline == ["F1 XGB", "HIST20", "Pair", "CorAcc", "AUC XGB"] and len(m.baselines) == 1
    assert any("read the real training and test tables" in line for line in m.not_protected)
    assert any(t.get("synthetic table") == "fake.csv" for t in m.timing)
    attach_evaluation(out, "fake.csv", report, sampling)  # evaluated again: its rows are replaced, not appended
    assert len(read_manifest(out).metrics) == 4 and len(read_manifest(out).timing) == len(m.timing)

    # the report reads the run folder through run.json
    rep = runner.invoke(app, ["report", str(out), "--out", str(tmp_path / "r.html")])
    assert rep.exit_code == 0, rep.output
    html = (tmp_path / "r.html").read_text()
    assert f"{g['epsilon']:.4g}" in html and "private training steps" in html and "HIST20" in html
    assert "Stage 1 reads only public data" in html and m.run_id in html
    assert escape(b["verdict"]) in html and "public baseline: independent sampling" in html


@pytest.mark.slow  # end to end
def test_the_comparison_on_a_given_test_table_or_none(files, tmp_path):
    d = files
    out = tmp_path / "given"
    r = runner.invoke(app, fit_args(d, out, "--mode", "non-private", "--test", str(d / "test.csv")))
    assert r.exit_code == 0, r.output
    m = read_manifest(out)
    assert m.data["training rows"] == 200 and m.data["test rows"] == 100 and m.baselines[0]["test_rows"] == 100
    assert m.baselines[0]["verdict"] in r.output
    assert r.stdout.startswith(f"verdict: {m.verdicts[0]['verdict']} (on real-test AUC XGB")  # issue 54 part 3
    out = tmp_path / "none"
    r = runner.invoke(app, fit_args(d, out, "--mode", "non-private", "--holdout", "0"))
    assert r.exit_code == 0 and "no public-baseline comparison" in r.output, r.output
    assert read_manifest(out).baselines == [] and read_manifest(out).metrics == []
    r = runner.invoke(app, fit_args(d, tmp_path / "bad", "--holdout", "1.5"))
    assert r.exit_code == 2 and "held-out fraction must be in [0, 1)" in r.stderr
    one = tmp_path / "one-class.csv"
    toy_table(50).assign(death=1).to_csv(one, index=False)
    r = runner.invoke(app, fit_args(d, tmp_path / "one", "--test", str(one)))
    assert r.exit_code == 2 and "single class of 'death'" in r.stderr and not (tmp_path / "one").exists()


def test_a_table_sampled_from_another_run_is_not_attached(files, tmp_path):
    d = files
    out = tmp_path / "fitted"
    assert runner.invoke(app, fit_args(d, out, "--mode", "non-private", "--holdout", "0")).exit_code == 0
    assert read_manifest(out).models[0]["guarantee"] is None
    fake = tmp_path / "fake.csv"
    toy_table(40, seed=4).to_csv(fake, index=False)
    (tmp_path / "fake.sampling.json").write_text(json.dumps({"run_id": "another-run", "method": "constrained"}))
    r = runner.invoke(app, ["synth", "evaluate", str(fake), "--train", str(d / "train.csv"), "--test",
                            str(d / "test.csv"), "--spec", str(d / "spec.yaml"), "--synthesizer", str(out)])
    assert r.exit_code == 2 and "sampled from run 'another-run'" in r.stderr
    assert read_manifest(out).metrics == []


def test_the_budget_is_refused_before_the_table_is_read(files, tmp_path, monkeypatch):
    d = files
    budget = tmp_path / "b.json"
    assert runner.invoke(app, ["budget", "init", str(budget), "--epsilon", "0.1", "--delta", "0.01", "--dataset",
                               "toy"]).exit_code == 0
    monkeypatch.setattr("dpcare.data.load_table", lambda *a, **k: pytest.fail("the private table was read"))
    monkeypatch.setattr("dpcare.synth.synthesizer.Synthesizer.fit", lambda *a, **k: pytest.fail("fitted"))
    r = runner.invoke(app, fit_args(d, tmp_path / "out", "--epsilon", "1", "--budget", str(budget)))
    assert r.exit_code == 2 and "budget" in r.stderr, r.output
    assert not (tmp_path / "out").exists()
    assert json.loads(budget.read_text())["releases"] == []


def test_a_non_empty_out_is_refused_before_anything_is_read(files, tmp_path, monkeypatch):
    d = files
    out = tmp_path / "out"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    monkeypatch.setattr("dpcare.data.load_table", lambda *a, **k: pytest.fail("the private table was read"))
    r = runner.invoke(app, fit_args(d, out))
    assert r.exit_code == 2 and "is not empty" in r.stderr and "--force" in r.stderr
    assert (out / "notes.txt").read_text() == "mine"


@pytest.mark.parametrize("option, value, message", [
    ("--epsilon", "-1", "--epsilon must be a finite number"),
    ("--decimals", "-1", "--decimals must be an integer in [0, 12], got --decimals = -1"),
    ("--epochs", "0", "--epochs must be a finite number > 0, got --epochs = 0.0"),
    ("--stage1-epochs", "-2", "--stage1-epochs must be a finite number > 0"),
    ("--layers", "0", "--layers must be an integer >= 1"),
    ("--lam", "2", "--lam must be a finite number in [0, 1]"),
    ("--stage1-lr", "0", "--stage1-lr must be a finite number > 0"),
    ("--mode", "gan", "--mode must be one of ['dp-2stage-u'"),
])
def test_a_bad_value_names_its_flag(files, tmp_path, option, value, message):
    r = runner.invoke(app, ["synth", "fit", str(tmp_path / "never-read.csv"), "--spec", str(files / "spec.yaml"),
                            "--synthesizer", "dp-2stage", "--out", str(tmp_path / "out"), option, value])
    assert r.exit_code == 2 and f"error: {message}" in r.stderr, r.output
    assert not (tmp_path / "out").exists()


def test_the_scale_sets_exactly_the_options_left_at_their_default():
    """--scale fills --layers, --stage1-epochs and --epochs (what SIZES sets); every other option's default is the
    same at both scales, so the command's defaults are the presets themselves."""
    leaves = {f"{part}.{name}" for size in SIZES.values() for part, values in size.items() for name in values}
    assert set(SCALED) == leaves
    for scale in ("cpu", "paper"):
        assert scaled_settings(SynthSettings(), scale, {}) == SynthSettings.for_device(scale)
    s = scaled_settings(SynthSettings(), "paper", {"dp.epochs": 3.0})
    assert (s.dp.epochs, s.stage1.epochs, s.lm.layers) == (3.0, 5.0, None)


def test_fit_errors_are_named(files, tmp_path):
    d = files
    r = runner.invoke(app, ["synth", "fit", str(d / "train.csv"), "--spec", str(d / "spec.yaml"), "--synthesizer",
                            "dp-2stage", "--model", str(d / "missing-model"), "--out", str(tmp_path / "x")])
    assert r.exit_code == 2 and "unknown model path" in r.output
    r = runner.invoke(app, fit_args(d, tmp_path / "y", "--mode", "dp-2stage-o"))
    assert r.exit_code == 2 and "public table" in r.output
    r = runner.invoke(app, ["synth", "sample", str(tmp_path / "nowhere")])
    assert r.exit_code == 2 and "not a saved synthesizer" in r.output
    r = runner.invoke(app, ["synth", "sample", str(tmp_path / "nowhere"), "--out", str(tmp_path)])
    assert r.exit_code == 2 and "is a folder" in r.output


def test_the_benchmark_refuses_unknown_methods_and_data_sets_before_any_work(tmp_path):
    out = tmp_path / "bench"
    for flag, value in (("--methods", "dp-bogus"), ("--baselines", "ctgan"), ("--methods", "none")):
        extra = ["--baselines", "none"] if value == "none" else []
        r = runner.invoke(app, ["benchmark", "dp2stage", flag, value, *extra, "--out", str(out)])
        assert r.exit_code == 2, r.output
        assert ("unknown method" in r.stderr) == (value != "none") and not out.exists()
    assert "at least one LM method" in r.stderr
    for datasets in ("adult,mimic", ","):  # an unknown data set, or none (empty entries are dropped)
        r = runner.invoke(app, ["benchmark", "dp2stage", "--datasets", datasets, "--out", str(out)])
        assert r.exit_code == 2 and "--datasets must name one or more of" in r.stderr and not out.exists()
    assert not (tmp_path / ".bench.partial").exists()


@pytest.mark.slow
def test_quick_benchmark_writes_a_run_folder_and_resumes(files, tmp_path, monkeypatch):
    """The study writes run.json (read by dpcare report); killed after its runs, the same command resumes in the
    staging folder without refitting them; a finished folder is refused without --force."""
    import dpcare.studies.dp2stage as study

    out = tmp_path / "bench"
    args = ["benchmark", "dp2stage", "--quick", "--model", str(files / "gpt2"), "--out", str(out)]

    def killed(*a, **k):
        raise KeyboardInterrupt("simulated kill")

    with monkeypatch.context() as m:
        m.setattr(study, "compare_sampling", killed)
        r = runner.invoke(app, args)
    assert r.exit_code != 0 and not out.exists()
    staged = tmp_path / ".bench.partial" / "runs"
    before = {p.name: p.stat().st_mtime for p in staged.iterdir()}
    assert len(before) == 5  # three LM methods and MST at epsilon 8, the public baseline
    r = runner.invoke(app, args)
    assert r.exit_code == 0, r.output
    assert {p.name: p.stat().st_mtime for p in (out / "runs").iterdir()} == before  # resumed: nothing refitted
    table = pd.read_csv(out / "table.csv")
    assert set(table["method"]) >= {"dp-standard", "dp-2stage-u", "dp-2stage-o", "public-support"}
    assert [b["name"] for b in read_manifest(out).baselines] == ["independent sampling from the declared support"]
    assert (out / "dp2stage.png").exists() and (out / "sampling.json").exists()
    sampling = json.loads((out / "sampling.json").read_text())["models"]
    assert all(runs["constrained"]["valid_rate"] == 1.0 for runs in sampling.values())
    m = read_manifest(out)
    lm = [e for e in m.models if e["name"].split()[1] in study.LM_METHODS]
    assert len(lm) == 3 and all(e["guarantee"]["epsilon"] <= 8 + 1e-6 and e["ledger"] for e in lm)
    assert m.headline == ["F1 XGB", "HIST20", "Pair", "CorAcc"] and m.figures
    rep = runner.invoke(app, ["report", str(out), "--out", str(tmp_path / "r.html")])
    assert rep.exit_code == 0, rep.output
    assert "adult dp-2stage-u eps=8" in (tmp_path / "r.html").read_text()
    r = runner.invoke(app, args)
    assert r.exit_code == 2 and "is not empty" in r.stderr
