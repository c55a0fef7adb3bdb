"""Isolation of the forecasting recipe's public parts: the defences' selection step, the standardisation
statistics under DP-SGD, and the patient split.

tests/test_workflow_tsf.py already checks that changing TEST patients leaves every model bit-identical,
that fitted statistics read training patients only, and that the defences receive exactly the
validation windows. This adds the other direction: with declared statistics (those DP-SGD requires),
changing the values of the TRAINING patients leaves the validation windows that the defences' epoch
selection reads bit-identical. And for ``fit`` on a user's events: the statistics DP-SGD standardises with
and the split (a function of the patient ids and the seed) do not move when private values, times or stay
lengths change. The public baselines of the verdict (LOCF, the input-window mean, the declared mean) do not move
when the training patients' values change.
"""

import json
from dataclasses import replace

import numpy as np
import pandas as pd
import pytest
import torch

from dpcare.studies.tsf import train_methods
from dpcare.timeseries import ForecastSettings, user_dataset
from dpcare.timeseries import recipe as tsf
from dpcare.timeseries.recipe import fit, prepare_tsf

VARS = ("hr", "sbp", "temp")
DECLARED = {"hr": (85.0, 20.0), "sbp": (120.0, 25.0), "temp": (37.0, 0.8)}
WINDOW = {"input_len": 4, "output_len": 2, "stride": 2}
BASE = ForecastSettings()
TINY = ForecastSettings(d_model=8, n_heads=2, baseline_epochs=1, baseline_batch_size=8, aug_epochs=1,
                        aug_candidates=4, dp=BASE.dp.replace(seed=1))


def events(shift=None, patients=20, hours=12, seed=0):
    """Hourly vitals of generated patients (one stay each); ``shift`` adds offsets to chosen patients."""
    rng = np.random.default_rng(seed)
    rows = []
    for p in range(patients):
        base = {"hr": rng.normal(85, 10), "sbp": rng.normal(120, 10), "temp": rng.normal(37, 0.4)}
        for t in range(hours):
            for v in VARS:
                if rng.random() < 0.85:
                    value = base[v] + rng.normal(0, 3 if v != "temp" else 0.2) + (shift or {}).get(f"p{p}", 0.0)
                    rows.append((f"p{p}", f"s{p}", t + rng.random() * 0.5, v, value))
    return pd.DataFrame(rows, columns=["patient_id", "stay_id", "time", "variable", "value"])


class Selected(Exception):
    pass


def selection_input(monkeypatch, ev, declared, form="direct"):
    """prepare_tsf + train_methods(["zoo"]): the validation (and training) windows the defence's
    retraining loop, which selects epochs on validation loss, receives. A residual forecaster's embedding path
    forecasts the change from its own anchor (LOCF plus its skip): the spy checks that its targets are the
    validation windows' targets minus that forecast, and keeps the windows' raw targets."""
    data = prepare_tsf("toy", events=ev, variables=VARS, step="hour", declared=declared, **WINDOW)
    val = data.part("validation")
    seen = {}

    def spy(model, train, validation, config, progress=True):
        assert torch.equal(validation["y"], model.target(val.x, val.y))  # y itself for the direct forecaster
        seen["train"] = {k: v.clone() for k, v in train.items()}
        seen["validation"] = {"x": validation["x"].clone(), "y": val.y.clone(), "mask": validation["mask"].clone()}
        raise Selected

    monkeypatch.setattr(tsf, "retrain_with_augmentation", spy)
    with pytest.raises(Selected):
        train_methods(data.part("train"), val, ["zoo"], replace(TINY, parameterisation=form), data.standardizer)
    return data, seen


@pytest.mark.parametrize("form", ["direct", "residual"])
def test_selection_reads_bit_identical_validation_windows_when_training_patients_change(monkeypatch, form):
    data, a = selection_input(monkeypatch, events(), DECLARED, form)
    changed = events(shift={p: 10.0 * (i + 1) for i, p in enumerate(data.splits["train"])})
    _, b = selection_input(monkeypatch, changed, DECLARED, form)
    assert not torch.equal(a["train"]["x"], b["train"]["x"])  # the training patients did change
    assert a["validation"].keys() == b["validation"].keys()
    for k in a["validation"]:
        assert torch.equal(a["validation"][k], b["validation"][k]), k
    # with statistics fitted on the training patients the validation windows move (why DP-SGD refuses them)
    _, fa = selection_input(monkeypatch, events(), None, form)
    _, fb = selection_input(monkeypatch, changed, None, form)
    assert not torch.equal(fa["validation"]["x"], fb["validation"]["x"])
    # fails if prepare_tsf fits the statistics on the training patients although they are declared (checked)


SPEC = {"name": "toy", "step": "hour", "window": WINDOW, "default_variables": list(VARS),
        "variables": {v: {"center": c, "scale": s} for v, (c, s) in DECLARED.items()}}


def fit_input(monkeypatch, tmp_path, ev):
    """``fit`` with DP-SGD on ``ev``: the standardizer and the split the private training receives."""
    (tmp_path / "spec.yaml").write_text(json.dumps(SPEC))
    ev.to_csv(tmp_path / "events.csv", index=False)
    seen = {}

    def spy(train, settings, standardizer, patients, progress, checkpoint_dir):
        seen["center"], seen["scale"] = dict(standardizer.center), dict(standardizer.scale)
        seen["source"], seen["patients"] = standardizer.source, patients
        raise Selected

    real = tsf.prepare_tsf

    def keep(*args, **kwargs):
        seen["splits"] = (data := real(*args, **kwargs)).splits
        return data

    monkeypatch.setattr(tsf, "dp_sgd", spy)
    monkeypatch.setattr(tsf, "prepare_tsf", keep)
    with pytest.raises(Selected):
        fit(user_dataset(tmp_path / "events.csv", "canonical", tmp_path / "spec.yaml"), TINY, progress=False)
    return seen


def test_dp_sgd_statistics_and_split_do_not_move_with_private_values(monkeypatch, tmp_path):
    a = fit_input(monkeypatch, tmp_path, events(patients=30))
    changed = events(patients=30, shift={f"p{i}": 40.0 * (i + 1) for i in range(30)})
    b = fit_input(monkeypatch, tmp_path, changed)
    assert a["source"] == b["source"] == "declared"
    assert a["center"] == b["center"] == {v: c for v, (c, _) in DECLARED.items()}
    assert a["scale"] == b["scale"]
    assert a["splits"] == b["splits"] and a["patients"] == b["patients"]
    # shorter stays: fewer patients have a window, yet the split (over every patient id) stays the same
    cut = changed["patient_id"].isin([f"p{i}" for i in range(0, 30, 3)])  # a third of the patients: no window
    short = changed[(changed["time"] < 5) | ~cut]
    c = fit_input(monkeypatch, tmp_path, short)
    windowed = prepare_tsf("toy", events=short, variables=VARS, step="hour", declared=DECLARED, **WINDOW).splits
    assert windowed != a["splits"]  # splitting the patients that have a window would move
    assert c["splits"] == a["splits"] and c["patients"] == a["patients"]
    # seen red with two planted leaks (checked): prepare_tsf labelling statistics fitted on the training
    # patients "declared", and splitting the patients that have a window instead of every patient id


def test_public_baselines_do_not_move_with_the_training_patients():
    """LOCF, the input-window mean and the declared mean read the test windows alone: with other values for every
    training patient, their forecasts, test MSE and comparisons are bit-identical; the pooled training mean (a
    reference, labelled not public) moves."""
    from dpcare.timeseries import baselines as bl

    data = prepare_tsf("toy", events=events(), variables=VARS, step="hour", declared=DECLARED, **WINDOW)
    changed = events(shift={p: 10.0 * (i + 1) for i, p in enumerate(data.splits["train"])})
    other = prepare_tsf("toy", events=changed, variables=VARS, step="hour", declared=DECLARED, **WINDOW)
    assert other.splits == data.splits and not torch.equal(other.part("train").y, data.part("train").y)
    test_a, test_b = data.part("test"), other.part("test")
    for name, forecast in bl.public_forecasts(test_a).items():
        assert torch.equal(forecast, bl.public_forecasts(test_b)[name]), name
    losses = np.zeros(len(test_a))
    a = bl.compare_with_baselines(losses, test_a, data.part("train"), seed=3, resamples=50)
    b = bl.compare_with_baselines(losses, test_b, other.part("train"), seed=3, resamples=50)
    assert [e for e in a["baselines"] if e["public"]] == [e for e in b["baselines"] if e["public"]]
    assert a["baselines"][-1]["name"] == bl.POOLED and a["baselines"][-1] != b["baselines"][-1]
    # seen red with a planted leak (checked): the declared mean forecast replaced by pooled_mean(train)
