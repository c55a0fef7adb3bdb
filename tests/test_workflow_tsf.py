"""The forecasting recipe's training functions and the study on them: what each step may read,
patient-level DP-SGD, attacks on untouched test patients, LiRA shadows, the resumable benchmark (a run
folder with run.json) and its command line."""

import json
import os
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest
import torch
from typer.testing import CliRunner

import dpcare.timeseries.recipe as tsf
from dpcare.cli import app
from dpcare.runs import read_manifest
from dpcare.studies.tsf import TsfBenchmark, method_labels, run_tsf_benchmark, train_methods
from dpcare.timeseries import ForecastSettings, user_dataset
from dpcare.timeseries.attacks import lira_report
from dpcare.timeseries.model import locf_forecast, masked_mse
from dpcare.timeseries.recipe import prepare_tsf, train_dp_sgd, with_method

VARS = ("hr", "sbp", "temp")
DECLARED = {"hr": (85.0, 20.0), "sbp": (120.0, 25.0), "temp": (37.0, 0.8)}
WINDOW = {"input_len": 4, "output_len": 2, "stride": 2}
BASE = ForecastSettings()
TINY = ForecastSettings(d_model=8, n_heads=2, baseline_epochs=2, baseline_batch_size=8, aug_epochs=2, aug_candidates=8,
                        dp=BASE.dp.replace(epochs=2))


def events(patients=25, hours=14, seed=0, shift=None):
    """Hourly vitals of generated patients (one stay each); ``shift`` adds offsets to chosen patients."""
    rng = np.random.default_rng(seed)
    rows = []
    for p in range(patients):
        base = {"hr": rng.normal(85, 10), "sbp": rng.normal(120, 10), "temp": rng.normal(37, 0.4)}
        for t in range(hours):
            for v in VARS:
                if rng.random() < 0.85:
                    value = base[v] + rng.normal(0, 3 if v != "temp" else 0.2) + 0.3 * t
                    if shift and f"p{p}" in shift:
                        value += shift[f"p{p}"]
                    rows.append((f"p{p}", f"s{p}", t + rng.random() * 0.5, v, value))
    return pd.DataFrame(rows, columns=["patient_id", "stay_id", "time", "variable", "value"])


def prepared(ev=None, declared=DECLARED):
    return prepare_tsf("toy", events=events() if ev is None else ev, variables=VARS, step="hour",
                       declared=declared, **WINDOW)


def params(model):
    return torch.cat([p.detach().flatten() for p in model.parameters()])


def test_fitted_standardisation_never_reads_validation_or_test_patients():
    data = prepared(declared=None)
    assert data.standardizer.source == "fitted"
    held_out = data.splits["validation"] + data.splits["test"]
    changed = prepared(events(shift={p: 1000.0 for p in held_out}), declared=None)
    assert changed.splits == data.splits
    assert changed.standardizer.center == data.standardizer.center
    assert changed.standardizer.scale == data.standardizer.scale
    assert torch.equal(changed.part("train").x, data.part("train").x)
    # a training patient does move the statistics (the test can see a leak)
    moved = prepared(events(shift={data.splits["train"][0]: 1000.0}), declared=None)
    assert moved.standardizer.center != data.standardizer.center


def test_declared_statistics_are_used_as_declared():
    data = prepared()
    assert data.standardizer.source == "declared"
    assert data.standardizer.center == {v: c for v, (c, _) in DECLARED.items()}


def test_dp_sgd_refuses_statistics_fitted_on_the_data():
    data = prepared(declared=None)
    with pytest.raises(ValueError, match="declared standardisation"):
        train_dp_sgd(data.part("train"), TINY, data.standardizer)
    with pytest.raises(ValueError, match="epsilon"):
        with_method(TINY, "dp-sgd", epsilon=0.0)


def test_changing_test_patients_leaves_every_trained_model_bit_identical():
    """Training and selection read train (and validation) windows only: the test patients, the attack's
    non-members, can change freely."""
    data = prepared()
    changed = prepared(events(shift={p: 50.0 for p in data.splits["test"]}))
    assert not torch.equal(changed.part("test").x, data.part("test").x)
    labels = ["baseline", "dp-sgd eps=3", "zoo", "zoo_pca", "mixup"]
    seeded = with_method(TINY, "baseline", seed=1)
    a = train_methods(data.part("train"), data.part("validation"), labels, seeded, data.standardizer)
    b = train_methods(changed.part("train"), changed.part("validation"), labels, seeded, changed.standardizer)
    for lab in labels:
        assert torch.equal(params(a[lab][0]), params(b[lab][0])), lab


def test_defences_select_on_validation_windows_only(monkeypatch):
    data = prepared()
    seen = {}
    real = tsf.retrain_with_augmentation

    def spy(model, train, validation, config, progress=True):
        seen["train"], seen["validation"] = train["x"], validation["x"]
        return real(model, train, validation, config, progress)

    monkeypatch.setattr(tsf, "retrain_with_augmentation", spy)
    train_methods(data.part("train"), data.part("validation"), ["zoo"], TINY, data.standardizer)
    assert torch.equal(seen["validation"], data.part("validation").x)
    assert torch.equal(seen["train"], data.part("train").x)


def test_dp_sgd_is_patient_level_with_the_right_sampling_rate():
    data = prepared()
    train = data.part("train")
    model, info = train_dp_sgd(train, TINY, data.standardizer)
    g = info["guarantee"]
    patients = len(train.patients())
    assert g["unit"] == "patient" and g["n"] == patients
    assert g["epsilon"] <= TINY.dp.epsilon + 1e-9
    assert info["sampling_rate"] == pytest.approx(round(TINY.dp_sampling_rate * patients) / patients)
    assert "patient" in info["guarantee_text"]
    assert len(train) > patients  # several windows per patient: the unit is not the window


def test_lira_report_finds_a_leak_and_no_leak():
    rng = np.random.default_rng(0)
    n, s = 300, 16
    shadow_in = rng.random((s, n)) < 0.5
    base = rng.lognormal(0, 0.3, n)
    shadow = base * np.where(shadow_in, 0.5, 1.0) * rng.lognormal(0, 0.05, (s, n))
    target_in = rng.random(n) < 0.5
    leaky = base * np.where(target_in, 0.5, 1.0)
    assert lira_report(leaky, target_in, shadow, shadow_in, bootstrap=20)["online"]["auc"] > 0.9
    blind = base * rng.lognormal(0, 0.05, n)
    assert abs(lira_report(blind, target_in, shadow, shadow_in, bootstrap=20)["online"]["auc"] - 0.5) < 0.1


def test_benchmark_attacks_test_patients_shadows_avoid_validation_and_resume(tmp_path, monkeypatch):
    spec = tmp_path / "toy.yaml"
    spec.write_text(json.dumps({"name": "toy", "step": "hour", "window": WINDOW, "default_variables": list(VARS),
                                "variables": {v: {"center": c, "scale": s} for v, (c, s) in DECLARED.items()}}))
    path = tmp_path / "events.parquet"
    events().to_parquet(path)
    ds = user_dataset(path, "canonical", spec)
    fast = with_method(TINY, "dp-sgd", accountant="rdp")  # RDP: fast calibration
    bench = TsfBenchmark(datasets=(ds,), methods=("baseline", "dp-sgd", "mixup"), epsilons=(3.0,), shadows=2,
                         workers=1, settings=fast, bootstrap=20, patient_draws=20)
    out = tmp_path / "out"

    class Interrupted(Exception):
        pass

    def interrupt(*a, **k):
        raise Interrupted

    with monkeypatch.context() as m:  # an interruption after every model and shadow was trained
        m.setattr("dpcare.studies.tsf.lira_report", interrupt)
        with pytest.raises(Interrupted):
            run_tsf_benchmark(bench, out, progress=False)
    staging = tmp_path / ".out.partial"
    assert not out.exists() and (staging / "toy" / "target").is_dir()

    def no_training(*a, **k):
        raise AssertionError("a finished run was trained again")

    monkeypatch.setattr("dpcare.studies.tsf.train_methods", no_training)
    monkeypatch.setattr("dpcare.studies.tsf.run_shadow", no_training)
    table = run_tsf_benchmark(bench, out, progress=False)  # the rerun resumes in the staging folder
    baselines = ["public: LOCF", "public: input-window mean", "public: input-window trend", "public: declared mean",
                 "reference: pooled training mean (not public)"]
    assert list(table["method"]) == ["baseline", "dp-sgd eps=3", "mixup", *baselines]
    assert set(table["verdict"][:3]) <= {"beats", "no better"} and table["verdict"][3:].isna().all()
    data = prepare_tsf(ds, split="permutation")  # the study's split
    for f in (out / "toy" / "target").glob("*.json"):
        r = json.loads(f.read_text())
        assert r["nonmember_patients"] == sorted(data.splits["test"]), f.name
        assert not set(r["nonmember_patients"]) & set(data.splits["validation"])
        assert r["member_patients"] == sorted(data.splits["train"])
    for k in range(2):
        members = json.loads((out / "toy" / "shadows" / f"shadow_{k}.json").read_text())["members"]
        assert set(members) <= set(data.splits["train"] + data.splits["test"])
        assert len(members) == len(data.splits["train"] + data.splits["test"]) // 2
    assert np.isfinite(table["lira_auc"][:3]).all()
    # the baselines on the same test windows as the models, the LOCF one by hand
    test = data.part("test")
    locf = masked_mse(locf_forecast(test.x, 2), test.y, test.mask).double().mean().item()
    assert table["test_mse"][3] == pytest.approx(locf)
    assert (out / "roc-loss-toy.png").exists() and (out / "roc-lira-toy.png").exists()
    assert not (out / "checkpoints").exists() and not staging.exists()
    # run.json: every model, its guarantee (DP-SGD only), test MSE, and both attacks with their scores
    m = read_manifest(out)
    assert m.kind == "study:tsf" and [e["name"] for e in m.models] == [f"toy: {lab}" for lab in table["method"][:3]]
    assert any(n.startswith("toy: dp-sgd eps=3: ") for n in m.notes) and m.baselines[0]["data"] == "toy"
    g = m.models[1]["guarantee"]
    assert g["unit"] == "patient" and g["n"] == len(data.part("train").patients()) and m.models[0]["guarantee"] is None
    assert [r["test MSE"] for r in m.metrics] == pytest.approx(list(table["test_mse"]))
    attacks = {a["file"]: json.loads((out / a["file"]).read_text()) for a in m.attacks}
    assert set(attacks) == {"attacks/loss.json", "attacks/lira.json"}
    assert [r["AUC"][0] for r in attacks["attacks/loss.json"]["rows"]] == pytest.approx(list(table["loss_auc"][:3]))
    assert [r["AUC"][0] for r in attacks["attacks/lira.json"]["rows"]] == pytest.approx(list(table["lira_auc"][:3]))
    html = tmp_path / "report.html"
    r = CliRunner().invoke(app, ["report", str(out), "--out", str(html)])
    assert r.exit_code == 0, r.output
    assert "LiRA membership attack" in html.read_text()
    with pytest.raises(ValueError, match="not empty"):  # a finished study is not run into again
        run_tsf_benchmark(bench, out, progress=False)


def test_bad_inputs_are_named():
    with pytest.raises(ValueError, match="unknown time-series data set"):
        prepare_tsf("nope")
    with pytest.raises(ValueError, match="unknown method"):
        method_labels(["baseline", "dpsgd"], [1.0])
    with pytest.raises(ValueError, match="longer than every stay"):
        prepare_tsf("toy", events=events(hours=5), variables=VARS, step="hour", declared=DECLARED, **WINDOW)
    with pytest.raises(ValueError, match="empty"):
        prepare_tsf("toy", events=events().iloc[:0], variables=VARS, declared=DECLARED)


def test_bundled_data_prepare_with_declared_statistics():
    for name in ("mimic_demo", "pbcseq"):
        data = prepare_tsf(name)
        s = data.summary()
        assert s["standardisation"] == "declared"
        assert min(s["patients"].values()) >= 5
        assert not set(data.splits["train"]) & set(data.splits["test"])
        assert float(data.windows.x[..., : data.n_vars].abs().max()) <= 6.0  # z-scores clipped


@pytest.mark.slow
def test_cli_quick_benchmark_runs(tmp_path):
    out = tmp_path / "tsf"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    r = subprocess.run([sys.executable, "-m", "dpcare.cli", "benchmark", "tsf", "--quick", "--out", str(out)],
                       capture_output=True, text=True, env=env, timeout=900)
    assert r.returncode == 0, r.stderr[-2000:]
    table = pd.read_csv(out / "table.csv")
    assert set(table["data"]) == {"mimic_demo", "pbcseq"}
    assert len(table) == 10 + 8 and table["lira_auc"].notna().sum() == 10
    dp = table[table["method"].str.startswith("dp-sgd")]
    assert (dp["epsilon"] <= 3.0 + 1e-9).all()


@pytest.mark.slow  # end to end
def test_cli_names_a_bad_input(tmp_path):
    r = subprocess.run([sys.executable, "-m", "dpcare.cli", "benchmark", "tsf", "--events", str(tmp_path / "x.csv"),
                        "--out", str(tmp_path)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 2 and "--spec" in r.stderr
    for flag in ("--datasets", "--methods"):  # empty entries are dropped: nothing left is refused before any work
        r = subprocess.run([sys.executable, "-m", "dpcare.cli", "benchmark", "tsf", flag, " , ", "--out",
                            str(tmp_path / "none")], capture_output=True, text=True, timeout=300)
        assert r.returncode == 2 and "must each name at least one entry" in r.stderr
        assert not (tmp_path / "none").exists()


def test_the_study_keeps_its_published_settings():
    """The README's table was measured with the paper's direct parameterisation and these DP-SGD settings; the
    recipe's defaults have changed since (residual forecaster, more steps), the study's have not."""
    from dpcare.studies.tsf import published_settings

    s = TsfBenchmark().settings
    assert s == published_settings() and s.parameterisation == "direct"
    assert (s.d_model, s.baseline_epochs, s.baseline_lr, s.dp_lr, s.dp_sampling_rate) == (64, 60.0, 5e-4, 2e-3, 0.25)
    assert (s.dp.epochs, s.dp.clip_norm, s.dp.seed, s.dp.unit) == (15.0, 1.0, 0, "patient")
    assert TsfBenchmark.quick().settings.form == "direct"
