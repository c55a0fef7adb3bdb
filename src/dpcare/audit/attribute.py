"""Attribute inference against feature-level DP models (Mahloujifar et al., Section 4.2, Theorem 4).

The attacker knows a row's public columns and label and the model; for each
candidate value of one private column it fills the row in and keeps the value
with the smallest model loss. Success is compared with the prior - the Ball term
of Theorem 4: the largest probability mass within distance rho of a single value
(for a categorical column, rho = 0: the most frequent value) - and with the
theorem's bound 1 - f(Ball) for an (epsilon, delta)-DP trade-off f:

    1 - f(b) = min(1, delta + e^eps b, 1 - e^-eps (1 - delta - b)).
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import torch

from dpcare.audit.loss_attack import per_example_losses
from dpcare.data import TableEncoder
from dpcare.exceptions import DataError, SettingsError, SpecError


def theorem4_bound(ball: float, epsilon: float, delta: float) -> float:
    """Upper bound on attribute-inference success for an (epsilon, delta)-feature-DP mechanism."""
    if not 0 <= ball <= 1:
        raise SettingsError(f"Ball must be a probability, got {ball}")
    return float(min(1.0, delta + math.exp(epsilon) * ball, 1 - math.exp(-epsilon) * (1 - delta - ball)))


def _ball(values: pd.Series, numeric: bool, rho: float) -> float:
    v = values.dropna()
    if not numeric:
        return float(v.astype(str).value_counts(normalize=True).iloc[0])
    x = np.sort(v.to_numpy(float))
    counts = np.searchsorted(x, x + 2 * rho, side="right") - np.arange(len(x))
    return float(counts.max() / len(x))


def attribute_inference(model: torch.nn.Module, encoder: TableEncoder, frame: pd.DataFrame, column: str,
                        prior_frame: pd.DataFrame | None = None, grid: int = 25,
                        rho_fraction: float = 0.05, epsilon: float | None = None,
                        delta: float = 0.0) -> dict:
    """Reconstruct ``column`` of each row of ``frame`` from the model, the public columns and the label."""
    schema = encoder.schema
    if column not in schema.private_columns:
        raise SpecError(f"'{column}' is not a private column of the model's spec ({schema.private_columns})")
    spec = schema.column(column)
    frame = frame[frame[column].notna()].reset_index(drop=True)
    if len(frame) == 0:
        raise DataError(f"no row with a known value of '{column}'")
    numeric = spec.kind == "numeric"
    if numeric:
        lo, hi = spec.bounds if spec.bounds else (frame[column].min(), frame[column].max())
        candidates, rho = list(np.linspace(lo, hi, grid)), rho_fraction * (hi - lo)
    else:
        candidates, rho = list(spec.categories), 0.0
    y = torch.from_numpy(encoder.encode_target(frame))
    losses = np.stack([per_example_losses(model, torch.from_numpy(encoder.transform(frame.assign(**{column: c}))), y)
                       for c in candidates], axis=1)
    guess = [candidates[i] for i in losses.argmin(1)]
    truth = frame[column]
    if numeric:
        success = float(np.mean(np.abs(np.asarray(guess, float) - truth.to_numpy(float)) <= rho))
    else:
        success = float(np.mean(np.asarray(guess, dtype=object) == truth.astype(str).to_numpy(object)))
    ball = _ball((prior_frame if prior_frame is not None else frame)[column], numeric, rho)
    out = {"column": column, "rows": len(frame), "success": success, "prior_ball": ball, "rho": rho}
    if epsilon is not None:
        out["theorem4_bound"] = theorem4_bound(ball, epsilon, delta)
    return out
