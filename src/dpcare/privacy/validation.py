"""Checks of privacy parameters; each error names the parameter and the bad value."""

from __future__ import annotations

import math


def default_delta(n: int) -> float:
    """delta = 1 / n^1.1: below 1/n, so no 'release one random record' mechanism qualifies."""
    if n < 1:
        raise ValueError(f"n must be >= 1 to set a default delta, got {n}")
    return 1.0 / n**1.1


def check_epsilon(epsilon: float) -> float:
    if not isinstance(epsilon, (int, float)) or not math.isfinite(epsilon) or epsilon <= 0:
        raise ValueError(f"epsilon must be a finite number > 0, got {epsilon!r}")
    return float(epsilon)


def check_delta(delta: float, n: int | None = None) -> float:
    if not isinstance(delta, (int, float)) or not math.isfinite(delta) or delta <= 0:
        raise ValueError(f"delta must be a number > 0, got {delta!r}")
    if n is not None and delta >= 1.0 / n:
        raise ValueError(
            f"delta = {delta:g} must be < 1/n = {1.0 / n:g} for n = {n} examples (a mechanism that publishes one "
            f"random record outright meets delta = 1/n); the default is 1/n^1.1 = {default_delta(n):g}"
        )
    if delta >= 1:
        raise ValueError(f"delta must be < 1, got {delta!r}")
    return float(delta)


def check_sampling_rate(q: float) -> float:
    if not isinstance(q, (int, float)) or not (0 < q <= 1):
        raise ValueError(f"sampling rate q must be in (0, 1], got {q!r}")
    return float(q)


def check_noise_multiplier(sigma: float) -> float:
    if not isinstance(sigma, (int, float)) or not math.isfinite(sigma) or sigma <= 0:
        raise ValueError(f"noise multiplier sigma must be a finite number > 0, got {sigma!r}")
    return float(sigma)


def check_steps(steps: int) -> int:
    if not isinstance(steps, int) or isinstance(steps, bool) or steps < 0:
        raise ValueError(f"steps must be an integer >= 0, got {steps!r}")
    return steps
