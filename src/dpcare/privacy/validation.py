"""Checks of privacy parameters; every error names the parameter and the bad value."""

from __future__ import annotations

import math
import numbers

from dpcare.exceptions import PrivacyParameterError


def _is_real(x: object) -> bool:
    return isinstance(x, numbers.Real) and not isinstance(x, bool)


def default_delta(n: int) -> float:
    """delta = 1 / n^1.1: strictly below 1/n, so "publish one random record" does not qualify."""
    if not isinstance(n, numbers.Integral) or isinstance(n, bool) or n < 1:
        raise PrivacyParameterError(f"n (number of private examples) must be an integer >= 1, got {n!r}")
    return 1.0 / float(n) ** 1.1


def check_epsilon(epsilon: float) -> float:
    """Return epsilon as a float; raise unless it is finite and > 0."""
    if not _is_real(epsilon) or not math.isfinite(epsilon) or epsilon <= 0:
        raise PrivacyParameterError(f"epsilon must be a finite number > 0, got epsilon = {epsilon!r}")
    return float(epsilon)


def check_delta(delta: float, n: int | None = None) -> float:
    """Return delta as a float; raise unless 0 < delta < 1 and, given n, delta < 1/n."""
    if not _is_real(delta) or not math.isfinite(delta) or not 0 < delta < 1:
        raise PrivacyParameterError(f"delta must be a number in (0, 1), got delta = {delta!r}")
    if n is not None and delta >= 1.0 / n:
        raise PrivacyParameterError(
            f"delta = {delta:g} must be < 1/n = {1.0 / n:g} for n = {n} examples (a mechanism that publishes "
            f"one random record outright has delta = 1/n); the default is 1/n^1.1 = {default_delta(n):g}"
        )
    return float(delta)


def check_sampling_rate(q: float) -> float:
    """Return the Poisson sampling rate q as a float; raise unless 0 < q <= 1."""
    if not _is_real(q) or not 0 < q <= 1:
        raise PrivacyParameterError(f"sampling rate q must be in (0, 1], got q = {q!r}")
    return float(q)


def check_noise_multiplier(sigma: float) -> float:
    """Return the noise multiplier sigma as a float; raise unless finite and > 0."""
    if not _is_real(sigma) or not math.isfinite(sigma) or sigma <= 0:
        raise PrivacyParameterError(f"noise multiplier sigma must be a finite number > 0, got sigma = {sigma!r}")
    return float(sigma)


def check_steps(steps: int) -> int:
    """Return steps as an int; raise unless it is an integer >= 0."""
    if not isinstance(steps, numbers.Integral) or isinstance(steps, bool) or steps < 0:
        raise PrivacyParameterError(f"steps must be an integer >= 0, got steps = {steps!r}")
    return int(steps)
