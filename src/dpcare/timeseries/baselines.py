"""What a forecaster must beat: the forecasts that need no private data, on the SAME test windows, and the
verdict (:func:`dpcare.verdict.compare`, resampling test PATIENTS).

- **last observation carried forward** (LOCF): every future step of a variable forecast by its last observed
  value in the window's own input; a variable the input never observes falls back to the declared mean.
  Public: it reads only the window it forecasts.
- **mean of the input window**: every future step of a variable forecast by the mean of its observed values in
  the window's own input (the declared mean where never observed). Public, like LOCF; on noisy hourly vitals it
  is the stronger of the two (the last hour is a noisy estimate of a patient's level).
- **linear trend of the input window**: per window and variable, the least-squares line through its observed
  input values, extended over the horizon (the window mean where fewer than two steps are observed), clipped to
  the recipe's z-score range. Public, like LOCF (issue 54: a trend the model must beat to claim it learned one).
- **declared mean**: the spec's declared center of every variable (0 in z-units). Public when the
  standardisation is declared; with statistics fitted on the training patients (non-private methods on an
  event table without a spec) it is the training mean per variable and is labelled so.
- **pooled training mean** per variable and future step: the mean of the training windows' targets. It READS
  the training data, so it is not a public baseline under DP-SGD: a reference, never the baseline of the verdict.

The verdict is against EACH public baseline (choosing the better one on the test split would be a selection on
test data): a run "beats the public baseline" only if the whole 95% interval of its improvement in test MSE is
above 0 against every one of them (the binding comparison, the one with the lowest bound, gives the verdict).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from dpcare.timeseries.model import locf_forecast, masked_mse, window_mean
from dpcare.timeseries.windows import WindowSet

LOCF = "last observation carried forward"
WINDOW_MEAN = "mean of the input window"
TREND = "linear trend of the input window"
DECLARED_MEAN = "declared mean"
FITTED_MEAN = "training mean per variable (fitted standardisation: reads the training data, not public)"
POOLED = "pooled training mean per variable and step (reads the training data, not public)"
METRIC = "test MSE"
SHORT = {LOCF: "public: LOCF", WINDOW_MEAN: "public: input-window mean", TREND: "public: input-window trend", DECLARED_MEAN: "public: declared mean",
         FITTED_MEAN: "reference: training mean (fitted, not public)",
         POOLED: "reference: pooled training mean (not public)"}  # table labels


def public_forecasts(ws: WindowSet) -> dict[str, torch.Tensor]:
    """The forecasts of windows ``ws`` that read nothing but each window's own input: LOCF, the input window's
    mean, its linear trend and the declared mean (0 in z-units), each [N, T_out, V]."""
    t_out = int(ws.y.shape[1])
    return {LOCF: locf_forecast(ws.x, t_out), WINDOW_MEAN: window_mean(ws.x).unsqueeze(1).expand(-1, t_out, -1),
            TREND: linear_trend(ws.x, t_out), DECLARED_MEAN: torch.zeros_like(ws.y)}


def linear_trend(x: torch.Tensor, output_len: int, clip: float = 6.0) -> torch.Tensor:
    """Per window and variable, the least-squares line through the observed values of input windows x [B, T, 2V]
    (values, then observed flags) at the future steps T, ..., T + output_len - 1: [B, output_len, V], clipped to
    +-``clip`` z; the window mean where fewer than two steps are observed."""
    n_vars, steps = x.shape[-1] // 2, x.shape[1]
    values, seen = x[..., :n_vars].double(), x[..., n_vars:].double()
    t = torch.arange(steps, dtype=torch.float64)[None, :, None]
    count = seen.sum(1, keepdim=True)
    t_mean = (t * seen).sum(1, keepdim=True) / count.clamp_min(1.0)
    v_mean = (values * seen).sum(1, keepdim=True) / count.clamp_min(1.0)
    spread = ((t - t_mean) ** 2 * seen).sum(1, keepdim=True)
    slope = torch.where(spread > 0, ((t - t_mean) * (values - v_mean) * seen).sum(1, keepdim=True)
                        / spread.clamp_min(1e-12), torch.zeros_like(spread))
    future = torch.arange(steps, steps + output_len, dtype=torch.float64)[None, :, None]
    return (v_mean + slope * (future - t_mean)).clamp(-clip, clip).to(x.dtype)


def pooled_mean(train: WindowSet) -> torch.Tensor:
    """The training windows' mean target per future step and variable over observed cells (0 where none is
    observed), [T_out, V]: it READS the training data."""
    counts = train.mask.sum(0)
    return (train.y * train.mask).sum(0) / counts.clamp_min(1.0)


def losses_of(forecast: torch.Tensor, ws: WindowSet) -> np.ndarray:
    """Masked MSE of every window of ``ws`` under ``forecast`` (as :func:`dpcare.timeseries.recipe.window_losses`)."""
    return masked_mse(forecast.expand_as(ws.y), ws.y, ws.mask).double().numpy()


def _mean(_truth: np.ndarray, losses: np.ndarray) -> float:
    return float(np.mean(losses))


def compare_with_baselines(model_losses: np.ndarray, test: WindowSet, train: WindowSet, declared: bool = True,
                           seed: int = 0, resamples: int = 1000) -> dict[str, Any]:
    """The model's per-window test losses against the baselines on the same test windows: per baseline its
    test MSE, whether it is public and (public ones) the paired bootstrap over test patients; ``beats`` and
    ``verdict`` come from the binding comparison (the smallest lower bound). ``declared``: the
    standardisation statistics are declared (else the mean forecast is the training mean, not public)."""
    from dpcare.verdict import compare

    model_losses = np.asarray(model_losses, float)
    if len(model_losses) != len(test):
        raise RuntimeError(f"{len(model_losses)} model losses for {len(test)} test windows")
    public = public_forecasts(test)
    entries = []
    for name, forecast in public.items():
        is_public = declared or name != DECLARED_MEAN
        entries.append({"name": name if is_public else FITTED_MEAN, "public": is_public,
                        "losses": losses_of(forecast, test)})
    entries.append({"name": POOLED, "public": False, "losses": losses_of(pooled_mean(train), test)})
    zeros = np.zeros(len(test))
    out = []
    for e in entries:
        c = (compare(METRIC, _mean, zeros, model_losses, e["losses"], e["name"], higher_is_better=False,
                     groups=test.patient, resamples=resamples, seed=seed).to_dict() if e["public"] else None)
        out.append({"name": e["name"], "public": e["public"], "metrics": {METRIC: float(e["losses"].mean())},
                    "comparison": c})
    return summarise(out, len(test), len(test.patients()))


def summarise(entries: list[dict[str, Any]], windows: int | None = None, patients: int | None = None
              ) -> dict[str, Any]:
    """The baselines with the verdict of the binding public comparison (also rebuilds a saved run's)."""
    comparisons = [e["comparison"] for e in entries if e["comparison"] is not None]
    return {"baselines": entries, "test windows": windows, "test patients": patients,
            "beats": all(c["beats"] for c in comparisons),
            "verdict": binding_comparison({"baselines": entries})["verdict"]}


def binding_comparison(result: dict[str, Any]) -> dict[str, Any]:
    """The comparison that gives the verdict: the public baseline with the smallest lower bound."""
    return min((e["comparison"] for e in result["baselines"] if e["comparison"] is not None), key=lambda c: c["low"])


def verdict_lines(model: str, result: dict[str, Any]) -> list[str]:
    """The verdict, then one line per public baseline and the reference, for the console and run.json notes."""
    lines = [f"{model}: {result['verdict']}"]
    for e in result["baselines"]:
        if e["comparison"] is not None:
            lines.append(f"{model} vs {e['name']}: {e['comparison']['verdict']}")
        else:
            lines.append(f"reference, not a public baseline: {e['name']}: {METRIC} {e['metrics'][METRIC]:.4g}")
    return lines


__all__ = ["DECLARED_MEAN", "FITTED_MEAN", "LOCF", "POOLED", "SHORT", "TREND", "WINDOW_MEAN", "linear_trend", "compare_with_baselines", "losses_of",
           "pooled_mean", "public_forecasts", "summarise", "verdict_lines", "binding_comparison"]
