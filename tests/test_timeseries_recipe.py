"""The forecasting recipe on a hospital's own events: fit (patient-level DP-SGD), save, load in a fresh
process, forecast new patients; the guarantee counts the patients the engine samples; the budget is
checked on the public patient count before any event is read; bad inputs are named."""

import json
import os
import re
import subprocess
import sys
from dataclasses import replace

import numpy as np
import pandas as pd
import pytest
import torch
from typer.testing import CliRunner

from dpcare.cli import app
from dpcare.exceptions import DataError, PrivacyParameterError, SettingsError, SpecError
from dpcare.privacy import ProtectedUnit, default_delta
from dpcare.runs import read_manifest
from dpcare.timeseries import (
    ForecastModel,
    ForecastSettings,
    events_dataset,
    fit,
    patient_ids,
    plan,
    user_dataset,
)
from dpcare.timeseries.recipe import training_patients
from dpcare.timeseries.windows import split_patients

VARS = ("hr", "sbp", "temp")
SPEC = {"name": "toy", "step": "hour", "window": {"input_len": 4, "output_len": 2, "stride": 2},
        "default_variables": list(VARS),
        "variables": {"hr": {"center": 85, "scale": 20}, "sbp": {"center": 120, "scale": 25},
                      "temp": {"center": 37, "scale": 0.8}}}
BASE = ForecastSettings()
TINY = replace(BASE, d_model=8, n_heads=2, baseline_epochs=1, baseline_batch_size=16, aug_epochs=1,
               aug_candidates=8, dp=BASE.dp.replace(epochs=2))
TINY_FLAGS = ["--d-model", "8", "--n-heads", "2", "--epochs", "2", "--baseline-epochs", "1"]
ENV = {**os.environ, "OMP_NUM_THREADS": "1"}


def events(patients=36, seed=0, prefix="p", shift=0.0, max_hours=16):
    """Hourly vitals of generated patients, one stay each of 3 to ``max_hours`` hours (some too short for a
    window); ``shift`` moves every value (the private values change, the ids do not)."""
    rng = np.random.default_rng(seed)
    rows = []
    for p in range(patients):
        base = {"hr": rng.normal(85, 10), "sbp": rng.normal(120, 10), "temp": rng.normal(37, 0.4)}
        for t in range(int(rng.integers(3, max_hours))):
            for v in VARS:
                if rng.random() < 0.85:
                    rows.append((f"{prefix}{p}", f"s{prefix}{p}", t + rng.random() * 0.5, v,
                                 base[v] + rng.normal(0, 2) + 0.3 * t + shift))
    return pd.DataFrame(rows, columns=["patient_id", "stay_id", "time", "variable", "value"])


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    root = tmp_path_factory.mktemp("forecast")
    events().to_csv(root / "events.csv", index=False)
    (root / "spec.yaml").write_text(json.dumps(SPEC))
    return root


@pytest.fixture(scope="module")
def fitted(files):
    return fit(user_dataset(files / "events.csv", "canonical", files / "spec.yaml"), TINY, progress=False)


def cli(*args):
    return CliRunner().invoke(app, [str(a) for a in args], catch_exceptions=False)


# --------------------------------------------------------------------------- the guarantee and the plan
def test_the_guarantee_counts_the_patients_the_engine_samples(files, monkeypatch):
    from dpcare.engine import Trainer

    seen = {}
    real = Trainer.fit

    def spy(self, private_data, public_data=None, groups=None, on_step=None):
        seen["units"] = len(torch.unique(groups))
        return real(self, private_data, public_data, groups, on_step)

    monkeypatch.setattr(Trainer, "fit", spy)
    ds = user_dataset(files / "events.csv", "canonical", files / "spec.yaml")
    model = fit(ds, TINY, progress=False)
    g = model.guarantee
    assert g.unit is ProtectedUnit.PATIENT and model.ledger.unit is ProtectedUnit.PATIENT
    assert g.n == seen["units"] == model.ledger.n
    # the engine samples the training patients that have a window: fewer than the split's training patients
    assert g.n < len(model.split["train"]) == training_patients(ds.patient_ids(), TINY)
    assert g.epsilon <= TINY.dp.epsilon + 1e-9
    # delta and the expected batch come from the public count (the split's training patients), as planned
    planned = plan(TINY, ds.patient_ids(), ds)
    assert planned.delta == g.delta == default_delta(len(model.split["train"]))
    assert planned.epsilon == TINY.dp.epsilon and planned.unit is ProtectedUnit.PATIENT
    assert model.info["expected_patients_per_step"] == round(0.25 * len(model.split["train"]))
    assert model.info["sampling_rate"] == pytest.approx(model.info["expected_patients_per_step"] / g.n)


def test_plan_needs_only_the_settings_and_the_patient_ids():
    ids = [f"p{i}" for i in range(36)]
    assert plan(replace(TINY, method="baseline"), ids) is None
    g = plan(TINY, ids)
    n = len(split_patients(ids, seed=TINY.dp.seed)["train"])
    assert g.n == training_patients(ids, TINY) == n and g.delta == default_delta(n)
    by_permutation = replace(TINY, split="permutation")  # exact sizes: 64% of 36
    assert plan(by_permutation, ids).n == training_patients(ids, by_permutation) == 23
    assert plan(replace(TINY, dp=TINY.dp.replace(delta=1e-3)), ids).delta == 1e-3
    with pytest.raises(DataError, match="too few"):
        plan(TINY, ["p1"])
    no_stats = events_dataset(events())  # no spec: nothing declared
    with pytest.raises(SpecError, match="declared standardisation"):
        plan(TINY, ids, no_stats)


def test_the_population_is_read_from_the_id_column_alone(tmp_path):
    ev = events(patients=5)
    ev["time"] = "not a time"  # never read
    ev.to_csv(tmp_path / "e.csv", index=False)
    ev.to_parquet(tmp_path / "e.parquet")
    assert patient_ids(tmp_path / "e.csv") == patient_ids(tmp_path / "e.parquet") == [f"p{i}" for i in range(5)]
    ev.drop(columns="patient_id").to_csv(tmp_path / "bad.csv", index=False)
    with pytest.raises(DataError, match="patient_id"):
        patient_ids(tmp_path / "bad.csv")


# --------------------------------------------------------------------------- the model
def test_save_load_forecast_round_trip(fitted, tmp_path):
    new = events(patients=6, seed=5, prefix="q")  # new patients, never seen
    a = fitted.forecast(new)
    fitted.save(tmp_path / "run")
    loaded = ForecastModel.load(tmp_path / "run")
    pd.testing.assert_frame_equal(loaded.forecast(new), a)
    assert loaded.guarantee == fitted.guarantee and loaded.metrics == pytest.approx(fitted.metrics)
    assert loaded.standardizer.center == fitted.standardizer.center and loaded.window == fitted.window
    assert loaded.split == fitted.split and set(loaded.split["test"]).isdisjoint(loaded.split["train"])
    assert loaded.duplicates == fitted.duplicates == "refuse"  # new events are binned by the training data's rule
    # one row per stay and future hour; the hour follows the stay's last binned hour; values in their units
    stays = new.groupby("stay_id")["time"].max()
    assert len(a) == 2 * len(stays) and list(a.columns[:4]) == ["patient_id", "stay_id", "horizon", "hour"]
    for (stay, h), hour in a.set_index(["stay_id", "horizon"])["hour"].items():
        assert hour == int(np.floor(stays[stay])) + h
    assert a["temp"].between(30, 44).all() and np.isfinite(a[list(VARS)].to_numpy()).all()


def test_forecast_reads_short_stays_and_missing_variables(fitted):
    short = events(patients=2, seed=9, prefix="r", max_hours=4)  # shorter than input_len: left-padded
    only_hr = short[short["variable"] == "hr"]
    out = fitted.forecast(only_hr)
    assert len(out) == 2 * only_hr["stay_id"].nunique() and np.isfinite(out[list(VARS)].to_numpy()).all()
    with pytest.raises(DataError, match="none of the model's variables"):
        fitted.forecast(short.assign(variable="weight"))


def test_run_folder_contents(fitted, tmp_path):
    fitted.save(tmp_path / "run")
    m = read_manifest(tmp_path / "run")
    assert m.kind == "forecast" and m.models[0]["guarantee"]["unit"] == "patient"
    assert [r["model"] for r in m.metrics] == ["dp-sgd", "public baseline: last observation carried forward",
                                               "public baseline: mean of the input window",
                                               "public baseline: linear trend of the input window",
                                               "public baseline: declared mean",
                                               "reference: pooled training mean per variable and step (reads the "
                                               "training data, not public)"]
    assert m.notes[0].startswith("dp-sgd: ")
    assert any("split.json" in s and "identifiers" in s for s in m.not_protected)
    assert sorted(p.name for p in (tmp_path / "run").iterdir()) == ["model.pt", "run.json", "split.json"]
    with pytest.raises(SettingsError, match="not empty"):
        fitted.save(tmp_path / "run")


# --------------------------------------------------------------------------- bad inputs
def test_bad_inputs_are_named(files, tmp_path):
    with pytest.raises(SettingsError, match="method must be one of"):
        replace(TINY, method="dpsgd")
    with pytest.raises(PrivacyParameterError, match="epsilon must be"):
        TINY.dp.replace(epsilon=0.0)
    with pytest.raises(SettingsError, match="unit must be 'patient', got unit = 'example'"):
        replace(TINY, dp=TINY.dp.replace(unit="example"))
    ds = user_dataset(files / "events.csv", "canonical", files / "spec.yaml")
    with pytest.raises(DataError, match="longer than every stay"):
        fit(ds, replace(TINY, input_len=20), progress=False)
    bad = events(patients=4)
    bad["time"] = bad["time"].astype(object)
    bad.loc[3, "time"] = "yesterday-ish"
    bad.to_csv(tmp_path / "bad.csv", index=False)
    with pytest.raises(DataError, match="column 'time'.*'yesterday-ish'"):
        fit(user_dataset(tmp_path / "bad.csv", "canonical", files / "spec.yaml"), TINY, progress=False)
    with pytest.raises(SpecError, match="declared standardisation"):
        fit(events(), TINY, progress=False)  # an event table without a spec: nothing declared
    small = replace(TINY, method="baseline", input_len=4, output_len=2, stride=2)
    model = fit(events(), small, progress=False)  # non-private, no spec: statistics fitted on training patients
    assert model.guarantee is None and model.standardizer.source == "fitted"
    assert any("fitted on the training patients" in s for s in model.manifest().not_protected)


# --------------------------------------------------------------------------- the commands
@pytest.mark.slow  # end to end
def test_cli_fit_apply_in_a_fresh_process_report(files, tmp_path):
    run = tmp_path / "run"
    r = cli("forecast", "fit", files / "events.csv", "--spec", files / "spec.yaml", "--epsilon", "3", "--audit",
            "--out", run, *TINY_FLAGS)
    assert r.exit_code == 0, r.output
    assert "(3, " in r.output and "patient" in r.output and "LOSS attack: AUC" in r.output
    assert "dp-sgd vs last observation carried forward: " in r.output
    first = r.stdout.splitlines()[0]  # progress goes to stderr
    assert re.match(r"verdict: (worth releasing|do not release|cannot be told with \d+ test units) \(on test MSE, "
                    r"against ", first), r.stdout  # the plain verdict opens the summary (issue 54 part 3)
    m = read_manifest(run)
    assert m.verdicts[0]["metric"] == "test MSE" and m.verdicts[0]["verdict"] in first
    assert "training (dp-sgd)" in [p["phase"] for p in m.phases] and "MSE" in m.units["test MSE"]
    split = json.loads((run / "split.json").read_text())
    loss = json.loads((run / "attacks" / "loss.json").read_text())
    assert loss["run_id"] == m.run_id and 0 < loss["rows"][0]["non-member patients"] <= len(split["test"])
    assert m.models[0]["guarantee"]["n"] < len(split["train"])
    new = tmp_path / "new.csv"
    events(patients=5, seed=3, prefix="n").to_csv(new, index=False)
    out = tmp_path / "forecasts.csv"
    p = subprocess.run([sys.executable, "-m", "dpcare.cli", "forecast", "apply", str(run), str(new), "--out", str(out)],
                       capture_output=True, text=True, env=ENV, timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    written = pd.read_csv(out)
    expected = ForecastModel.load(run).forecast(pd.read_csv(new))
    assert list(written.columns) == ["patient_id", "stay_id", "horizon", "hour", *VARS]
    assert sorted(written["patient_id"].unique()) == [f"n{i}" for i in range(5)]
    np.testing.assert_allclose(written[list(VARS)].to_numpy(), expected[list(VARS)].to_numpy(), rtol=1e-9)
    r = cli("report", run, "--out", tmp_path / "report.html")
    assert r.exit_code == 0, r.output
    html = (tmp_path / "report.html").read_text()
    assert "test MSE" in html and "public baseline: last observation carried forward" in html
    assert "LOSS membership attack" in html
    r = cli("forecast", "fit", files / "events.csv", "--spec", files / "spec.yaml", "--out", run)
    assert r.exit_code == 2 and "not empty" in r.output


def test_cli_budget_refuses_before_any_event_is_read(files, tmp_path):
    ev = events()
    ev["time"] = "unreadable"  # reading the events would fail on it: the refusal must come first
    ev.to_csv(tmp_path / "e.csv", index=False)
    budget = tmp_path / "budget.json"
    r = cli("budget", "init", budget, "--epsilon", "0.1", "--delta", "1e-3", "--dataset", "toy", "--unit", "patient")
    assert r.exit_code == 0, r.output
    r = cli("forecast", "fit", tmp_path / "e.csv", "--spec", files / "spec.yaml", "--epsilon", "1", "--budget",
            budget, "--out", tmp_path / "run", *TINY_FLAGS)
    assert r.exit_code == 2 and "budget" in r.output and "time" not in r.output
    # without the budget the same file is read, and its time column named
    r = cli("forecast", "fit", tmp_path / "e.csv", "--spec", files / "spec.yaml", "--out", tmp_path / "run2",
            *TINY_FLAGS)
    assert r.exit_code == 2 and "column 'time'" in r.output


def test_cli_names_bad_options(files, tmp_path):
    base = ["forecast", "fit", files / "events.csv", "--spec", files / "spec.yaml", "--out", tmp_path / "o"]
    r = cli(*base, "--method", "dpsgd")
    assert r.exit_code == 2 and "--method must be one of" in r.output
    r = cli(*base, "--epsilon", "-1")
    assert r.exit_code == 2 and "--epsilon must be" in r.output
    r = cli("forecast", "fit", files / "events.csv", "--out", tmp_path / "o")
    assert r.exit_code == 2 and "--spec" in r.output
    r = cli("forecast", "fit", "--dataset", "nope", "--out", tmp_path / "o")
    assert r.exit_code == 2 and "mimic_demo" in r.output


def test_a_partly_declared_standardisation_is_refused_and_the_default_stride_follows_the_step():
    partial = {**SPEC, "variables": {k: v for k, v in SPEC["variables"].items() if k != "temp"}}
    with pytest.raises(SpecError, match=r"default_variables \['temp'\] have no declared center and scale"):
        events_dataset(events(), partial)  # not: every variable silently standardised with fitted statistics
    no_stride = {"input_len": 4, "output_len": 2}
    assert events_dataset(events(), {**SPEC, "window": no_stride}).stride == 4
    assert events_dataset(events(), {**SPEC, "step": "visit", "window": no_stride}).stride == 1
    assert events_dataset(events(), {**SPEC, "variables": {}}).declared == {}  # none declared: fitted (non-private)
    with pytest.raises(SpecError, match="stride may be left out"):
        events_dataset(events(), {**SPEC, "window": {"input_len": 4}})


def test_values_outside_a_declared_range_are_counted_and_refused_above_the_share():
    """Issue 54 part 4: a forecaster trained on negated concentrations was accepted without a word. A variable's
    declared `range` is checked when the events are read: refused above max_out_of_range, else a warning."""
    from dpcare.data.tables import OutOfRangeWarning
    from dpcare.exceptions import DataError, SpecError
    from dpcare.timeseries import events_dataset

    spec = json.loads(json.dumps(SPEC))
    spec["variables"]["sbp"]["range"] = [0, None]
    table = events(patients=8)
    negated = table.assign(value=np.where(table["variable"] == "sbp", -table["value"], table["value"]))
    with pytest.raises(DataError, match=r"'sbp' \d+ of \d+ \(100.0%\): \d+ below 0; at most 5.0%"):
        events_dataset(negated, spec).load()
    few = table.copy()
    few.loc[few.index[few["variable"] == "sbp"][:1], "value"] = -5.0
    with pytest.warns(OutOfRangeWarning, match=r"'sbp' 1 of \d+ .*: 1 below 0"):
        events_dataset(few, spec).load()
    assert len(events_dataset(table, spec).load()) == len(table)  # inside the range: nothing said
    with pytest.raises(SpecError, match="range of 'sbp' must be"):
        events_dataset(table, {**spec, "variables": {**spec["variables"], "sbp": {"center": 1, "scale": 1,
                                                                                   "range": "positive"}}})


def test_the_patient_split_shares_are_settings():
    """Issue 54 part 2: the test share is an option (more test patients detect smaller differences)."""
    from dpcare.exceptions import SettingsError
    from dpcare.timeseries.recipe import training_patients

    ids = [f"p{i}" for i in range(50)]
    assert training_patients(ids, replace(BASE, split="permutation")) == 32  # 64% of 50
    wider = replace(BASE, split="permutation", validation_share=0.1, test_share=0.3)
    assert wider.fractions == (0.6, 0.1, 0.3) and training_patients(ids, wider) == 30
    with pytest.raises(SettingsError, match="leave at least 10% of the patients"):
        replace(BASE, validation_share=0.45, test_share=0.45)
