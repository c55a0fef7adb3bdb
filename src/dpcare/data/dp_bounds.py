"""Differentially private scaling bounds for numeric columns whose bounds are not public.

A histogram over a FIXED, data-independent grid (sign x 10^k, k from -3 to 9 in
steps of 0.05, plus 0) gets Gaussian noise (the floating-point-safe sampler,
privacy.randomness.secure_normal); one record moves one count by one, so the L2
sensitivity under add/remove is 1 and each column is one Gaussian mechanism.
Bins whose noisy count is below 4 sigma are dropped (an empty bin passes with
probability 3e-5), and the bounds are approximate lower/upper quantiles of what
remains: post-processing, so no further privacy cost.
"""

from __future__ import annotations

import numpy as np
from dp_accounting import dp_event

from dpcare.exceptions import DataError
from dpcare.privacy import calibrate_noise_multiplier
from dpcare.privacy.randomness import secure_normal

_POS = 10.0 ** np.arange(-3, 9.0001, 0.05)
THRESHOLD = 4.0
EDGES = np.concatenate([-_POS[::-1], [0.0], _POS])  # values beyond +-1e9 fall in the end bins


def noise_for_columns(count: int, epsilon: float, delta: float) -> float:
    """Noise multiplier of each of ``count`` histograms so that together they are (epsilon, delta)-DP."""
    return calibrate_noise_multiplier(1.0, count, epsilon, delta, accountant="pld")


def dp_bounds(values: np.ndarray, noise_multiplier: float, rng: np.random.Generator,
              quantile: float = 0.01) -> tuple[float, float]:
    """Noisy-histogram estimate of the (quantile, 1 - quantile) range of ``values`` (NaN ignored)."""
    v = np.clip(values[~np.isnan(values)], EDGES[0], EDGES[-1])
    counts = np.histogram(v, bins=EDGES)[0].astype(float)
    noisy = counts + secure_normal(rng, noise_multiplier, counts.shape)
    noisy[noisy < THRESHOLD * noise_multiplier] = 0.0
    total = noisy.sum()
    if total <= 0:
        raise DataError("no bin of the noisy histogram passed the threshold: too few rows for this stats budget "
                        "(declare the bounds in the spec, or raise --stats-epsilon)")
    cdf = np.cumsum(noisy) / total
    lo_bin = int(np.searchsorted(cdf, quantile))
    hi_bin = int(np.searchsorted(cdf, 1 - quantile))
    lo, hi = EDGES[lo_bin], EDGES[min(hi_bin + 1, len(EDGES) - 1)]
    return float(lo), float(hi if hi > lo else lo + 1.0)


def histogram_event(noise_multiplier: float) -> dp_event.DpEvent:
    return dp_event.GaussianDpEvent(noise_multiplier)
