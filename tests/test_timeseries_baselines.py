"""Every forecasting run measures itself against the forecasts that need no private data, on the SAME test
windows: last observation carried forward (LOCF), the input window's mean and the declared mean (public), the
pooled training mean (a
reference that reads the training windows, never the public baseline); the verdict resamples test patients,
flips when the model is LOCF itself, and reaches run.json, the console and `dpcare report`. The residual
forecaster with its zero-initialised head and skip IS the LOCF forecast."""

import json
from dataclasses import replace

import numpy as np
import pandas as pd
import pytest
import torch
from typer.testing import CliRunner

from dpcare.cli import app
from dpcare.runs import read_manifest
from dpcare.timeseries import ForecastModel, ForecastSettings, fit, user_dataset
from dpcare.timeseries import baselines as bl
from dpcare.timeseries.model import Forecaster, last_observed, locf_forecast, masked_mse
from dpcare.timeseries.recipe import embedding_tensors, window_losses

VARS = ("hr", "sbp", "temp")
SPEC = {"name": "toy", "step": "hour", "window": {"input_len": 4, "output_len": 2, "stride": 2},
        "default_variables": list(VARS),
        "variables": {"hr": {"center": 85, "scale": 20}, "sbp": {"center": 120, "scale": 25},
                      "temp": {"center": 37, "scale": 0.8}}}
BASE = ForecastSettings()
TINY = replace(BASE, d_model=8, n_heads=2, baseline_epochs=1, dp=BASE.dp.replace(epochs=2))


def events(patients=40, seed=0, hours=14):
    """Hourly vitals of generated patients, one stay each, slowly drifting (LOCF is a fair forecast)."""
    rng = np.random.default_rng(seed)
    rows = []
    for p in range(patients):
        base = {v: rng.normal(c["center"], c["scale"]) for v, c in SPEC["variables"].items()}
        for t in range(hours):
            for v in VARS:
                if rng.random() < 0.85:
                    scale = SPEC["variables"][v]["scale"]
                    rows.append((f"p{p}", f"s{p}", t + rng.random() * 0.5, v,
                                 base[v] + scale * (rng.normal(0, 0.1) + 0.02 * t)))
    return pd.DataFrame(rows, columns=["patient_id", "stay_id", "time", "variable", "value"])


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    root = tmp_path_factory.mktemp("baselines")
    events().to_csv(root / "events.csv", index=False)
    (root / "spec.yaml").write_text(json.dumps(SPEC))
    return root


def dataset(files):
    return user_dataset(files / "events.csv", "canonical", files / "spec.yaml")


def locf_by_hand(x: torch.Tensor) -> np.ndarray:
    """The last observed value of every variable of every window, a loop (0 where never observed)."""
    n_vars = x.shape[2] // 2
    out = np.zeros((x.shape[0], n_vars))
    for i in range(x.shape[0]):
        for v in range(n_vars):
            seen = np.flatnonzero(x[i, :, n_vars + v].numpy() > 0)
            out[i, v] = x[i, seen[-1], v] if len(seen) else 0.0
    return out


def window_mean_by_hand(x: torch.Tensor) -> np.ndarray:
    """The mean observed value of every variable of every window, a loop (0 where never observed)."""
    n_vars = x.shape[2] // 2
    out = np.zeros((x.shape[0], n_vars))
    for i in range(x.shape[0]):
        for v in range(n_vars):
            seen = np.flatnonzero(x[i, :, n_vars + v].numpy() > 0)
            out[i, v] = x[i, seen, v].double().mean() if len(seen) else 0.0
    return out


# --------------------------------------------------------------------------- the forecasts themselves
def test_last_observation_carried_forward_by_hand():
    x = torch.zeros(2, 4, 6)
    x[0, 1, 0], x[0, 1, 3] = 1.5, 1  # variable 0 observed at step 1 only
    x[0, 3, 1], x[0, 3, 4] = -2.0, 1  # variable 1 observed last at step 3
    x[0, 0, 1], x[0, 0, 4] = 9.0, 1
    x[1, 2, 2], x[1, 2, 5] = 0.25, 1  # window 1: only variable 2
    expected = torch.tensor([[1.5, -2.0, 0.0], [0.0, 0.0, 0.25]])  # never observed: the declared mean, 0
    assert torch.equal(last_observed(x), expected)
    assert torch.equal(locf_forecast(x, 3), expected[:, None].expand(2, 3, 3))
    rng = torch.Generator().manual_seed(0)
    values = torch.randn(50, 6, 4, generator=rng)
    seen = (torch.rand(50, 6, 4, generator=rng) < 0.3).float()
    x = torch.cat([values * seen, seen], dim=2)
    np.testing.assert_array_equal(last_observed(x).numpy(), locf_by_hand(x).astype(np.float32))


def test_the_residual_forecaster_with_a_zero_head_is_locf_exactly():
    torch.manual_seed(0)
    model = Forecaster(3, input_len=4, output_len=2, d_model=8, n_heads=2, residual=True).eval()
    rng = torch.Generator().manual_seed(1)
    seen = (torch.rand(64, 4, 3, generator=rng) < 0.6).float()
    x = torch.cat([torch.randn(64, 4, 3, generator=rng) * seen, seen], dim=2)
    y, mask = torch.randn(64, 2, 3, generator=rng), (torch.rand(64, 2, 3, generator=rng) < 0.7).float()
    with torch.no_grad():
        assert torch.equal(model(x), locf_forecast(x, 2)) and not model.head_is_off()
        model.head.requires_grad_(False)  # the linear parameterisation: the transformer is not computed
        assert model.head_is_off() and torch.equal(model(x), locf_forecast(x, 2))
        model.head.requires_grad_(True)
    from dpcare.timeseries.windows import WindowSet

    ws = WindowSet(x, y, mask, np.array(["p"] * 64), np.array(["s"] * 64), np.zeros(64, int), VARS)
    np.testing.assert_array_equal(window_losses(model, ws), bl.losses_of(locf_forecast(x, 2), ws))
    # trained (non-zero head and skip): the embedding path against y - anchor is the forecast against y
    for p in list(model.head.parameters()) + list(model.skip.parameters()):
        torch.nn.init.normal_(p, std=0.3)
    with torch.no_grad():
        direct = masked_mse(model(x), y, mask).double().numpy()
    np.testing.assert_allclose(window_losses(model, ws), direct, rtol=1e-5, atol=1e-6)
    assert torch.equal(embedding_tensors(model, ws)["y"], model.target(x, y))
    # a direct forecaster (the paper's, the study's) keeps its parameters and its targets
    direct_model = Forecaster(3, input_len=4, output_len=2, d_model=8, n_heads=2)
    assert not hasattr(direct_model, "head") and direct_model.target(x, y) is y


# --------------------------------------------------------------------------- the baselines of a run
def test_the_baselines_are_computed_on_the_test_patients_only(files, monkeypatch):
    seen = {"public": [], "pooled": []}
    real_public, real_pooled = bl.public_forecasts, bl.pooled_mean

    def spy_public(ws):
        seen["public"].append(set(ws.patient.tolist()))
        return real_public(ws)

    def spy_pooled(ws):
        seen["pooled"].append(set(ws.patient.tolist()))
        return real_pooled(ws)

    monkeypatch.setattr(bl, "public_forecasts", spy_public)
    monkeypatch.setattr(bl, "pooled_mean", spy_pooled)
    model = fit(dataset(files), TINY, progress=False)
    test = model.prepared.part("test")
    test_patients = set(test.patients())
    # the public forecasts are made for the test windows alone: no training (or validation) window reaches them
    assert seen["public"] == [test_patients] and test_patients <= set(model.split["test"])
    assert seen["pooled"] == [set(model.prepared.part("train").patients())]  # the reference reads training windows
    b = model.baselines
    assert b["test windows"] == len(test) and b["test patients"] == len(test_patients)
    names = [e["name"] for e in b["baselines"]]
    assert names == [bl.LOCF, bl.WINDOW_MEAN, bl.TREND, bl.DECLARED_MEAN, bl.POOLED]
    assert [e["public"] for e in b["baselines"]] == [True, True, True, True, False]
    assert b["baselines"][4]["comparison"] is None and "not public" in bl.POOLED
    for e in b["baselines"][:4]:
        c = e["comparison"]
        assert c["units"] == len(test_patients) and c["model"] == pytest.approx(model.metrics["test_mse"])
        assert c["baseline"] == e["metrics"]["test MSE"] and not c["higher_is_better"]
    # LOCF's test MSE, by hand on the test windows
    locf = torch.from_numpy(locf_by_hand(test.x)).float()[:, None].expand_as(test.y)
    by_hand = masked_mse(locf, test.y, test.mask).double().mean().item()
    assert b["baselines"][0]["metrics"]["test MSE"] == pytest.approx(by_hand, rel=1e-6)
    zero = masked_mse(torch.zeros_like(test.y), test.y, test.mask).double().mean().item()
    assert b["baselines"][3]["metrics"]["test MSE"] == pytest.approx(zero, rel=1e-6)
    means = torch.from_numpy(window_mean_by_hand(test.x)).float()[:, None].expand_as(test.y)
    by_hand = masked_mse(means, test.y, test.mask).double().mean().item()
    assert b["baselines"][1]["metrics"]["test MSE"] == pytest.approx(by_hand, rel=1e-6)


def test_the_verdict_flips_when_the_model_is_locf_itself(files):
    model = fit(dataset(files), TINY, progress=False)
    test, train = model.prepared.part("test"), model.prepared.part("train")
    itself = bl.compare_with_baselines(bl.losses_of(locf_forecast(test.x, 2), test), test, train)
    assert not itself["beats"] and itself["verdict"].startswith("no better than the public baseline: do not release")
    locf = itself["baselines"][0]["comparison"]
    assert locf["difference"] == 0 and locf["low"] == locf["high"] == 0
    perfect = bl.compare_with_baselines(np.zeros(len(test)), test, train)  # the truth itself
    assert perfect["beats"] and perfect["verdict"].startswith("beats the public baseline")
    assert all(e["comparison"]["beats"] for e in perfect["baselines"][:4])
    # the binding comparison decides: LOCF beats the declared mean on these drifting vitals, yet it is no better
    # than itself, so the run is no better than the public baseline
    assert itself["baselines"][3]["comparison"]["beats"] and not itself["beats"]


def test_fitted_statistics_make_the_mean_forecast_a_reference(files):
    model = fit(events(), replace(TINY, method="baseline", input_len=4, output_len=2, stride=2), progress=False)
    b = model.baselines
    assert model.standardizer.source == "fitted"
    assert [e["public"] for e in b["baselines"]] == [True, True, True, False, False]
    assert b["baselines"][3]["name"] == bl.FITTED_MEAN and b["baselines"][3]["comparison"] is None


def test_manifest_console_and_report_carry_the_verdict(files, tmp_path):
    run = tmp_path / "run"
    r = CliRunner().invoke(app, ["forecast", "fit", str(files / "events.csv"), "--spec", str(files / "spec.yaml"),
                                 "--d-model", "8", "--n-heads", "2", "--epochs", "2", "--out", str(run)],
                           catch_exceptions=False)
    assert r.exit_code == 0, r.output
    assert "dp-sgd: beats the public baseline" in r.output or "dp-sgd: no better than the public baseline: do not " \
                                                                "release" in r.output
    for name in (bl.LOCF, bl.WINDOW_MEAN, bl.TREND, bl.DECLARED_MEAN):
        assert f"dp-sgd vs {name}:" in r.output
    assert f"reference, not a public baseline: {bl.POOLED}" in r.output
    m = read_manifest(run)
    assert [row["model"] for row in m.metrics] == ["dp-sgd", f"public baseline: {bl.LOCF}",
                                                  f"public baseline: {bl.WINDOW_MEAN}", f"public baseline: {bl.TREND}",
                                                  f"public baseline: {bl.DECLARED_MEAN}", f"reference: {bl.POOLED}"]
    assert [e["name"] for e in m.baselines] == [bl.LOCF, bl.WINDOW_MEAN, bl.TREND, bl.DECLARED_MEAN, bl.POOLED]
    verdict = m.notes[0]
    assert verdict.startswith("dp-sgd: ") and ("beats the public baseline" in verdict or "do not release" in verdict)
    assert any(bl.POOLED in s and "outside the guarantee" in s for s in m.not_protected)
    loaded = ForecastModel.load(run)  # the verdict survives the round trip
    assert loaded.baselines["verdict"] == verdict.removeprefix("dp-sgd: ")
    assert loaded.baselines["baselines"] == m.baselines
    r = CliRunner().invoke(app, ["report", str(run), "--out", str(tmp_path / "report.html")])
    assert r.exit_code == 0, r.output
    html = (tmp_path / "report.html").read_text()
    for name in (bl.LOCF, bl.WINDOW_MEAN, bl.TREND, bl.DECLARED_MEAN):
        assert f"public baseline: {name}" in html
    assert "reads the training data, not public" in html and "public baseline" in html and verdict[:40] in html


# --------------------------------------------------------------------------- the parameterisations
def test_parameterisations_and_their_defaults(files):
    from dpcare.exceptions import SettingsError
    from dpcare.timeseries.recipe import new_model

    assert ForecastSettings().form == "linear"  # DP-SGD: the linear change from LOCF alone
    d = ForecastSettings()  # the defaults chosen on validation patients (docs/timeseries.md, "Defaults")
    assert (d.dp_lr, d.dp.epochs, d.dp_sampling_rate, d.dp.clip_norm) == (0.05, 30.0, 0.25, 1.0)
    assert replace(BASE, method="baseline").form == replace(BASE, method="zoo").form == "residual"
    with pytest.raises(SettingsError, match="parameterisation residual or direct"):
        replace(BASE, method="mixup", parameterisation="linear")
    model = fit(dataset(files), TINY, progress=False)  # linear: DP-SGD trains (and noises) the skip alone
    test = model.prepared.part("test")
    fresh = new_model(TINY, test)
    trained = dict(model.model.named_parameters())
    for name, p in fresh.named_parameters():
        assert torch.equal(p, trained[name]) != name.startswith("skip."), name
    assert model.guarantee is not None and not torch.equal(model.model.skip.weight, fresh.skip.weight)
    direct = new_model(replace(TINY, parameterisation="direct"), test)
    assert not direct.residual and all(p.requires_grad for p in direct.parameters())


def test_the_linear_trend_of_the_input_window_extends_each_line_and_needs_two_points():
    """Issue 54 part 1: a public baseline that forecasts a trend (a model that only learned trends must beat it)."""
    import torch

    from dpcare.timeseries.baselines import TREND, linear_trend, public_forecasts

    values = torch.tensor([[[0.0, 5.0], [1.0, 0.0], [2.0, 0.0], [3.0, 0.0]]])  # var 0: slope 1; var 1: one point
    seen = torch.tensor([[[1.0, 1.0], [1.0, 0.0], [0.0, 0.0], [1.0, 0.0]]])  # var 0's step 2 unobserved
    x = torch.cat([values, seen], dim=-1)
    out = linear_trend(x, 3)
    assert torch.allclose(out[0, :, 0], torch.tensor([4.0, 5.0, 6.0]))  # the line through t = 0, 1, 3
    assert torch.allclose(out[0, :, 1], torch.tensor([5.0, 5.0, 5.0]))  # one observation: its value (the mean)
    assert linear_trend(x * torch.tensor([100.0, 1, 1, 1]), 3).max() == 6.0  # clipped to +-6 z
    assert TREND in public_forecasts(type("W", (), {"x": x, "y": torch.zeros(1, 3, 2)})())
