"""`dpcare train --budget`: the run is checked against the data set's budget before any value is read,
recorded with its exact ledger after, and a run that would exceed the total is refused."""

import json

import pytest
import yaml
from helpers import SPEC, toy_table
from typer.testing import CliRunner

from dpcare.cli import app
from dpcare.data import count_rows

runner = CliRunner()


@pytest.fixture
def table(tmp_path):
    toy_table(300).to_csv(tmp_path / "train.csv", index=False)
    (tmp_path / "spec.yaml").write_text(yaml.safe_dump(SPEC))
    return tmp_path


def train(tmp_path, out, epsilon, budget):
    return runner.invoke(app, ["train", str(tmp_path / "train.csv"), "--spec", str(tmp_path / "spec.yaml"),
                               "--out", str(tmp_path / out), "--epochs", "1", "--method", "dp-sgd",
                               "--epsilon", str(epsilon), "--delta", "1e-4", "--budget", str(budget)])


def test_count_rows_reads_no_values(tmp_path):
    (tmp_path / "t.csv").write_text('a,b\n1,"two\nlines"\n3,4\n')
    assert count_rows(tmp_path / "t.csv") == 2


def test_train_records_its_ledger_and_a_run_over_the_total_is_refused_before_reading(table, monkeypatch):
    budget = table / "budget.json"
    r = runner.invoke(app, ["budget", "init", str(budget), "--epsilon", "1.5", "--delta", "1e-4",
                            "--dataset", "toy", "--unit", "example"])
    assert r.exit_code == 0, r.output
    assert train(table, "a", 1.0, budget).exit_code == 0
    release = json.loads(budget.read_text())["releases"][0]
    assert release["status"] == "done" and release["ledger"] is not None  # the run's exact charges
    assert release["epsilon"] == pytest.approx(1.0, abs=0.02)

    def no_reading(*a, **k):
        raise AssertionError("the private table was read before the budget check")

    monkeypatch.setattr("dpcare.data.load_table", no_reading)
    refused = train(table, "b", 1.0, budget)
    assert refused.exit_code == 2 and "budget" in refused.output.lower()
    assert not (table / "b" / "model.pt").exists()
    assert len(json.loads(budget.read_text())["releases"]) == 1
