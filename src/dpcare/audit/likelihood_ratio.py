"""LiRA scores from numbers (Carlini et al. 2022): the target's per-example statistic and the shadow
models' statistics with their membership. Training the shadows is the caller's job (tabular:
:func:`dpcare.audit.run_lira` driven by :mod:`dpcare.tabular.audit`; forecasting:
:mod:`dpcare.timeseries.attacks`).

    online:  log N(phi; mu_in, s_in) - log N(phi; mu_out, s_out)
    offline: log P[phi_out <= phi]   (one-sided, out-shadows only)

Variances are pooled over examples (more stable than per-example ones with few shadows, Sec. 5).
"""

from __future__ import annotations

import math

import numpy as np
from scipy.stats import norm

from dpcare.exceptions import DataError


def lira_scores(phi: np.ndarray, shadow_phi: np.ndarray, shadow_in: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Online and offline LiRA scores of each example (higher: more likely a member).

    ``phi`` [n]: the target model's statistic per example; ``shadow_phi`` [S, n] the shadows' and
    ``shadow_in`` [S, n] whether each example was in each shadow's training set.
    """
    phi, shadow_phi, shadow_in = np.asarray(phi, float), np.asarray(shadow_phi, float), np.asarray(shadow_in, bool)
    if shadow_phi.shape != shadow_in.shape or shadow_phi.shape[1:] != phi.shape:
        raise DataError(f"shapes differ: phi {phi.shape}, shadow_phi {shadow_phi.shape}, shadow_in {shadow_in.shape}")
    online, offline = np.empty(len(phi)), np.empty(len(phi))
    # a global variance estimate is more stable than per-example ones with few shadows (Carlini et al., Sec. 5)
    s_in = _pooled_std(shadow_phi, shadow_in)
    s_out = _pooled_std(shadow_phi, ~shadow_in)
    for j in range(len(phi)):
        ins, outs = shadow_phi[shadow_in[:, j], j], shadow_phi[~shadow_in[:, j], j]
        mu_out = outs.mean() if len(outs) else 0.0
        mu_in = ins.mean() if len(ins) else mu_out
        online[j] = norm.logpdf(phi[j], mu_in, s_in) - norm.logpdf(phi[j], mu_out, s_out)
        offline[j] = norm.logcdf((phi[j] - mu_out) / s_out)
    return online, offline


def _pooled_std(values: np.ndarray, mask: np.ndarray) -> float:
    centred = []
    for j in range(values.shape[1]):
        v = values[mask[:, j], j]
        if len(v) > 1:
            centred.append(v - v.mean())
    s = float(np.concatenate(centred).std()) if centred else 1.0
    return s if s > 0 and math.isfinite(s) else 1.0
