"""`dpcare train --nproc 2` and `dpcare forecast fit --nproc 2`: torchrun starts two gloo processes on this CPU;
rank 0 alone writes the run folder and reserves the budget, and the run names the same (epsilon, delta), unit and
n as the one-process run."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from helpers import SPEC, toy_table

DPCARE = str(Path(sys.executable).parent / "dpcare")


def run(*args, cwd):
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    return subprocess.run([DPCARE, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=600)


@pytest.mark.slow
def test_train_with_two_processes_states_the_one_process_guarantee(tmp_path):
    toy_table(300).to_csv(tmp_path / "train.csv", index=False)
    (tmp_path / "spec.yaml").write_text(yaml.safe_dump(SPEC))
    assert run("budget", "init", "budget.json", "--epsilon", "5", "--delta", "1e-3", "--dataset", "toy",
               "--unit", "example", cwd=tmp_path).returncode == 0
    common = ["train", "train.csv", "--spec", "spec.yaml", "--epochs", "1", "--batch-size", "32", "--method",
              "dp-sgd", "--epsilon", "2", "--delta", "1e-4", "--budget", "budget.json"]
    one = run(*common, "--out", "one", cwd=tmp_path)
    two = run(*common, "--out", "two", "--nproc", "2", cwd=tmp_path)
    assert one.returncode == 0 and two.returncode == 0, two.stderr[-3000:]
    assert two.stdout.count("written to two") == 1  # one rank prints
    g1, g2 = (json.loads((tmp_path / d / "run.json").read_text())["models"][0]["guarantee"] for d in ("one", "two"))
    for key in ("epsilon", "delta", "unit", "n", "accountant"):
        assert g1[key] == g2[key], key
    releases = json.loads((tmp_path / "budget.json").read_text())["releases"]
    assert [r["status"] for r in releases] == ["done", "done"]  # rank 0 reserved and committed, once
    assert sorted(p.name for p in tmp_path.iterdir()) == ["budget.json", "budget.json.lock", "one", "spec.yaml", "train.csv", "two"]


@pytest.mark.slow
def test_forecast_fit_with_two_processes_states_the_one_process_guarantee(tmp_path):
    """Patient-level DP-SGD: the patients (units) are sharded whole across the ranks; the guarantee is the same."""
    from test_timeseries_recipe import SPEC as FORECAST_SPEC
    from test_timeseries_recipe import TINY_FLAGS, events

    events().to_csv(tmp_path / "events.csv", index=False)
    (tmp_path / "spec.yaml").write_text(json.dumps(FORECAST_SPEC))
    common = ["forecast", "fit", "events.csv", "--spec", "spec.yaml", "--epsilon", "3", *TINY_FLAGS]
    one = run(*common, "--out", "one", cwd=tmp_path)
    two = run(*common, "--out", "two", "--nproc", "2", cwd=tmp_path)
    assert one.returncode == 0 and two.returncode == 0, (one.stderr + two.stderr)[-3000:]
    assert two.stdout.count("written to two") == 1  # one rank prints
    g1, g2 = (json.loads((tmp_path / d / "run.json").read_text())["models"][0]["guarantee"] for d in ("one", "two"))
    for key in ("epsilon", "delta", "unit", "n", "accountant"):
        assert g1[key] == g2[key], key
    assert g2["unit"] == "patient"
    assert sorted(p.name for p in (tmp_path / "two").iterdir()) == sorted(p.name for p in (tmp_path / "one").iterdir())
    assert sorted(p.name for p in tmp_path.iterdir()) == ["events.csv", "one", "spec.yaml", "two"]
