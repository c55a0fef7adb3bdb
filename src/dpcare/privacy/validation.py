"""Checks of privacy parameters; every error names the parameter and the bad value."""

from __future__ import annotations

import math
import numbers
import warnings

from dpcare.caller import user_stacklevel
from dpcare.exceptions import PrivacyParameterError


def _is_real(x: object) -> bool:
    return isinstance(x, numbers.Real) and not isinstance(x, bool)


#: the largest n*delta a run's delta is allowed without a warning
MAX_N_DELTA = 0.01
#: the cap on the default delta whatever n (the customary 1e-5 of large data sets)
DEFAULT_DELTA_CAP = 1e-5


class WeakDeltaWarning(UserWarning):
    """A delta with n*delta > 0.01: a mechanism that publishes each unit's record with probability delta meets it."""


def _check_n(n: object) -> int:
    if not isinstance(n, numbers.Integral) or isinstance(n, bool) or n < 1:
        raise PrivacyParameterError(f"n (number of private examples) must be an integer >= 1, got {n!r}")
    return int(n)


def default_delta(n: int) -> float:
    """delta = min(1e-5, 0.01/n), so that n*delta <= 0.01 for every n.

    (epsilon, delta)-DP is met by a mechanism that publishes each of the n records in full with
    probability delta, which exposes n*delta records in expectation; delta must therefore be much
    smaller than 1/n (Dwork & Roth 2014, "The Algorithmic Foundations of Differential Privacy",
    Sec. 2.3), and for ML training "well below 1/n" (Ponomareva et al. 2023, "How to DP-fy ML", JAIR,
    Sec. 5.2.1). 0.01/n keeps the expected number of exposed units at 1 in 100 or fewer; the 1e-5 cap
    is the customary value once n exceeds 1,000. Before issue 23 the default was 1/n^1.1
    (:func:`legacy_delta`), whose n*delta = n^-0.1 is 0.5-0.8 for 15-800 units.
    """
    return min(DEFAULT_DELTA_CAP, MAX_N_DELTA / _check_n(n))


def legacy_delta(n: int) -> float:
    """1/n^1.1, the default delta before issue 23 (n*delta = n^-0.1: 0.41 at n = 7,284, 0.54 at 482).

    Only for reproducing numbers published with it: the studies pin it explicitly. It is below 1/n,
    so it passes :func:`check_delta`, but a ledger warns about it (:class:`WeakDeltaWarning`)."""
    return 1.0 / float(_check_n(n)) ** 1.1


def n_delta(delta: float, n: int) -> float:
    """n*delta: the expected number of units a mechanism that publishes each unit's record with
    probability delta would expose (such a mechanism is (0, delta)-DP)."""
    return float(n) * float(delta)


def is_weak_delta(delta: float, n: int) -> bool:
    """n*delta > 0.01 (beyond rounding: the default 0.01/n times n may round to 0.010000000000000002)."""
    return n_delta(delta, n) > MAX_N_DELTA * (1 + 1e-9)


def weak_delta_message(delta: float, n: int) -> str | None:
    """The warning's text when n*delta > 0.01, else None."""
    if not is_weak_delta(delta, n):
        return None
    nd = n_delta(delta, n)
    return (f"delta = {delta:.3g} for n = {n} units gives n*delta = {nd:.3g} > {MAX_N_DELTA:g}: a mechanism that "
            f"publishes each unit's record in full with probability delta meets this (epsilon, delta) guarantee "
            f"and would expose {nd:.3g} units in expectation. Use delta <= {MAX_N_DELTA:g}/n; the default is "
            f"min({DEFAULT_DELTA_CAP:g}, {MAX_N_DELTA:g}/n) = {default_delta(n):.3g}")


def warn_if_weak_delta(delta: float, n: int) -> None:
    """Warn (:class:`WeakDeltaWarning`, at the user's call) when n*delta > 0.01; delta >= 1/n is an error in
    :func:`check_delta`."""
    msg = weak_delta_message(delta, n)
    if msg is not None:
        warnings.warn(msg, WeakDeltaWarning, stacklevel=user_stacklevel())


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
            f"one random record outright has delta = 1/n); the default is min(1e-5, 0.01/n) = {default_delta(n):g}"
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
