"""The main job (`dpcare demo`) as a study over the tabular recipe: one run folder per method and seed, the
summary with each method's public baseline, its own run.json, resume and refusal of a non-empty folder."""

import pytest

from dpcare.exceptions import SettingsError
from dpcare.runs import read_manifest
from dpcare.studies.demo import BASELINES, run_demo


def test_demo_study_writes_runs_baselines_and_its_manifest(tmp_path):
    out = tmp_path / "demo"
    summary = run_demo(out, epsilon=1.0, seeds=1, epochs=0.2, methods=("dp-sgd", "feature-dp"), progress=False)
    assert list(summary["method"]) == ["dp-sgd", "feature-dp"]
    assert summary["baseline"].iloc[0] == "constant"  # DP-SGD: the labels are private
    assert summary["baseline"].iloc[1] in BASELINES.values()  # the panel's winner on validation rows
    m = read_manifest(out)
    assert m.kind == "study:demo" and [x["name"] for x in m.models] == ["dp-sgd-seed0", "feature-dp-seed0"]
    assert all(x["guarantee"]["epsilon"] <= 1.0 + 1e-6 for x in m.models)
    for name in ("dp-sgd-seed0", "feature-dp-seed0"):
        assert read_manifest(out / "runs" / name).kind == "tabular"
    table = (out / "results.md").read_text()
    assert "public baseline AUPRC" in table and "seeds |" in table
    # the paired section: the one pair of this run (feature-dp vs dp-sgd), one seed, so not a test
    assert "Paired differences over seeds" in table and "one seed: not tested" in table
    paired = (out / "paired.csv").read_text().splitlines()
    assert len(paired) == 3 and all(line.startswith("feature-dp > dp-sgd,") for line in paired[1:])
    with pytest.raises(SettingsError, match="is not empty"):
        run_demo(out, seeds=1, epochs=0.2, methods=("dp-sgd",), progress=False)
