"""Privacy events of dpcare's mechanisms, in dp-accounting's event algebra, and their JSON form.

One event covers all three private training methods. DP-SGD, two-batch Feature-DP
and Label-DP each release, per step, the sum of clipped per-example gradients of a
Poisson sample (rate q) plus N(0, (sigma C)^2) noise. For Feature-DP this is
Theorem 5 of Mahloujifar et al.: Algorithm 1 is f-DP_i^Psi (Definition 6) with
f = T(N(0, sigma)^T, ((1 - q) N(0, sigma) + q N(tau, sigma))^T), which is exactly the
trade-off of T Poisson-subsampled Gaussian steps under add/remove (sigma in units
of the clipping norm tau). Label-DP is the special case Psi(x, y) = x. The public
batch (Algorithm 1, lines 5-6) only touches public features, which the simulator
knows, so it costs nothing and has no event.
"""

from __future__ import annotations

import math
from typing import Any

from dp_accounting import dp_event

from dpcare.exceptions import DataError, PrivacyParameterError
from dpcare.privacy.validation import check_noise_multiplier, check_sampling_rate, check_steps


def sampled_gaussian_event(sampling_rate: float, noise_multiplier: float, steps: int) -> dp_event.DpEvent:
    """``steps`` Poisson-sampled (rate q) Gaussian mechanisms with noise multiplier sigma.

    SelfComposed(PoissonSampled(q, Gaussian(sigma)), steps); q = 1 drops the sampling
    wrapper and steps = 0 gives a NoOpDpEvent.
    """
    q = check_sampling_rate(sampling_rate)
    sigma = check_noise_multiplier(noise_multiplier)
    steps = check_steps(steps)
    if steps == 0:
        return dp_event.NoOpDpEvent()
    step: dp_event.DpEvent = dp_event.GaussianDpEvent(sigma)
    if q < 1.0:
        step = dp_event.PoissonSampledDpEvent(q, step)
    return dp_event.SelfComposedDpEvent(step, steps)


def gaussian_event(noise_multiplier: float) -> dp_event.DpEvent:
    """One Gaussian mechanism, noise std = noise_multiplier x L2 sensitivity.

    E.g. a noisy histogram where one record moves one count by 1 (L2 sensitivity 1
    under add/remove) with N(0, sigma^2) noise per bin is ``gaussian_event(sigma)``.
    """
    return dp_event.GaussianDpEvent(check_noise_multiplier(noise_multiplier))


def zcdp_event(rho: float) -> dp_event.DpEvent:
    """A mechanism that is rho-zCDP as a whole (Bun & Steinke 2016, Definition 1.1), e.g. AIM: every Gaussian
    measurement (rho = 1 / (2 sigma^2)) and exponential-mechanism selection (rho = epsilon^2 / 8, Cesar &
    Rogers 2021) of an adaptive run added up. It is (alpha, rho * alpha)-RDP for every alpha > 1, so only the
    RDP accountant composes it; the PLD accountant does not support it (a Gaussian with the same rho would be
    tighter than an arbitrary rho-zCDP mechanism is)."""
    if isinstance(rho, bool) or not isinstance(rho, (int, float)) or not math.isfinite(rho) or rho <= 0:
        raise PrivacyParameterError(f"rho must be a finite number > 0, got rho = {rho!r}")
    return dp_event.ZCDpEvent(float(rho))


def laplace_event(noise_multiplier: float) -> dp_event.DpEvent:
    """One Laplace mechanism, scale b = noise_multiplier x L1 sensitivity (epsilon = 1/noise_multiplier)."""
    return dp_event.LaplaceDpEvent(check_noise_multiplier(noise_multiplier))


# ------------------------------------------------------------------ JSON
def event_to_json(event: dp_event.DpEvent) -> Any:
    """A JSON-serialisable form of an event: nested dicts with a ``class_name`` key."""

    def convert(v: Any) -> Any:
        if hasattr(v, "_fields") and "class_name" in v._fields:
            return {k: convert(x) for k, x in v._asdict().items() if k != "module_name"}
        if isinstance(v, (list, tuple)):
            return [convert(x) for x in v]
        return v

    return convert(event.to_named_tuple())


def event_from_json(obj: Any) -> dp_event.DpEvent:
    """Inverse of :func:`event_to_json`; only dp-accounting's own event classes are built."""

    def build(v: Any) -> Any:
        if isinstance(v, dict) and "class_name" in v:
            cls = getattr(dp_event, str(v["class_name"]), None)
            if not (isinstance(cls, type) and issubclass(cls, dp_event.DpEvent)):
                raise DataError(f"unknown privacy event class {v['class_name']!r}")
            return cls(**{k: build(x) for k, x in v.items() if k != "class_name"})
        if isinstance(v, list):
            return [build(x) for x in v]
        return v

    event = build(obj)
    if not isinstance(event, dp_event.DpEvent):
        raise TypeError(f"not a serialised privacy event: {obj!r}")
    return event
