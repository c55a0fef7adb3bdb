"""`dpcare synth fit | sample | evaluate` and `dpcare benchmark dp2stage --quick` end to end on small data."""

import json

import pandas as pd
import pytest
import yaml
from helpers import SPEC, toy_table
from lm_fixtures import tiny_gpt2
from typer.testing import CliRunner

from dpcare.cli import app
from dpcare.data import TableSchema, load_table

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


def test_fit_sample_evaluate(files):
    d = files
    r = runner.invoke(app, ["synth", "fit", str(d / "train.csv"), "--spec", str(d / "spec.yaml"), "--out",
                            str(d / "fitted"), "--model", str(d / "gpt2"), "--epsilon", "3", "--stage1-epochs", "1",
                            "--stage2-epochs", "1"])
    assert r.exit_code == 0, r.output
    assert "differential privacy" in r.output
    assert json.loads((d / "fitted" / "guarantee.json").read_text())["epsilon"] <= 3.0 + 1e-6
    r = runner.invoke(app, ["synth", "sample", str(d / "fitted"), "--n", "30", "--out", str(d / "fake.csv")])
    assert r.exit_code == 0, r.output
    fake = load_table(d / "fake.csv", TableSchema.from_dict(SPEC))  # schema-valid, or load_table raises
    assert len(fake) == 30
    assert json.loads((d / "fake.sampling.json").read_text())["valid_rate"] == 1.0
    r = runner.invoke(app, ["synth", "evaluate", str(d / "fake.csv"), "--train", str(d / "train.csv"), "--test",
                            str(d / "test.csv"), "--spec", str(d / "spec.yaml"), "--synthesizer", str(d / "fitted")])
    assert r.exit_code == 0, r.output
    report = json.loads((d / "fake.report.json").read_text())
    assert {"perplexity"} <= set(report) and report["perplexity"]["value"] > 1


def test_fit_errors_are_named(files):
    d = files
    r = runner.invoke(app, ["synth", "fit", str(d / "train.csv"), "--spec", str(d / "spec.yaml"), "--model",
                            str(d / "missing-model"), "--out", str(d / "x")])
    assert r.exit_code == 2 and "unknown model path" in r.output
    r = runner.invoke(app, ["synth", "fit", str(d / "train.csv"), "--spec", str(d / "spec.yaml"), "--epsilon", "-1",
                            "--model", str(d / "gpt2"), "--out", str(d / "x")])
    assert r.exit_code == 2 and "epsilon must be > 0" in r.output
    r = runner.invoke(app, ["synth", "fit", str(d / "train.csv"), "--spec", str(d / "spec.yaml"), "--mode",
                            "dp-2stage-o", "--model", str(d / "gpt2"), "--out", str(d / "x")])
    assert r.exit_code == 2 and "public table" in r.output
    r = runner.invoke(app, ["synth", "sample", str(d / "nowhere")])
    assert r.exit_code == 2 and "not a saved synthesizer" in r.output


@pytest.mark.slow
def test_quick_benchmark_writes_table_and_resumes(files, tmp_path):
    out = tmp_path / "bench"
    args = ["benchmark", "dp2stage", "--quick", "--model", str(files / "gpt2"), "--out", str(out)]
    r = runner.invoke(app, args)
    assert r.exit_code == 0, r.output
    table = pd.read_csv(out / "table.csv")
    assert set(table["method"]) >= {"dp-standard", "dp-2stage-u", "dp-2stage-o"}
    assert (out / "dp2stage.png").exists() and (out / "sampling.json").exists()
    sampling = json.loads((out / "sampling.json").read_text())["models"]
    assert all(runs["constrained"]["valid_rate"] == 1.0 for runs in sampling.values())
    before = {p.name: p.stat().st_mtime for p in (out / "runs").iterdir()}
    r = runner.invoke(app, args)  # every run is finished: nothing is refitted
    assert r.exit_code == 0, r.output
    assert {p.name: p.stat().st_mtime for p in (out / "runs").iterdir()} == before
