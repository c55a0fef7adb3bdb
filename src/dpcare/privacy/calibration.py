"""Calibrate the noise multiplier to a target (epsilon, delta) without ever overshooting it.

The RDP bound is cheap and looser than PLD, so the RDP-calibrated sigma is an
upper end of the PLD bracket. A safeguarded regula-falsi (Illinois) search on
log(sigma) then closes the bracket with a coarse PLD grid (1e-3, ~10x cheaper;
pessimistic, so its sigma is an upper end too), and one evaluation on the fine
grid (1e-4) confirms it is within the target and within 0.2% of it; otherwise
(at small epsilon the coarse grid is visibly looser) the search continues on the
fine grid. The sigma returned has a computed epsilon <= target.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

from dp_accounting import dp_event

from dpcare.privacy.accountants import PLD_DISCRETIZATION, compute_epsilon
from dpcare.privacy.events import sampled_gaussian_event
from dpcare.privacy.validation import check_delta, check_epsilon, check_sampling_rate, check_steps

MAX_SIGMA = 1e4
COARSE_PLD = 1e-3
EPS_SLACK = 2e-3  # accept a coarse-grid sigma whose fine-grid epsilon is within 0.2% of the target


def _epsilon_fn(q: float, steps: int, delta: float, accountant: str, other: Sequence[dp_event.DpEvent],
                pld_discretization: float) -> Callable[[float], float]:
    def eps(sigma: float) -> float:
        event = dp_event.ComposedDpEvent([*other, sampled_gaussian_event(q, sigma, steps)])
        return compute_epsilon(event, delta, accountant, pld_discretization)

    return eps


def _solve(eps: Callable[[float], float], target: float, lo: float, f_lo: float, hi: float, f_hi: float,
           rel_tol: float) -> float:
    """Shrink [lo, hi] with eps(lo) > target >= eps(hi) until hi/lo <= 1 + rel_tol; return hi."""
    side = 0
    while hi / lo > 1 + rel_tol:
        a, b = math.log(lo), math.log(hi)
        ga, gb = f_lo - target, f_hi - target
        x = b - gb * (b - a) / (gb - ga) if gb != ga else (a + b) / 2
        # keep the step strictly inside, and at least a little away from the ends
        margin = 0.02 * (b - a)
        x = min(max(x, a + margin), b - margin)
        sigma = math.exp(x)
        f = eps(sigma)
        if f > target:
            lo, f_lo = sigma, f
            if side == -1:
                f_hi = target + (f_hi - target) / 2  # Illinois: halve the stale end
            side = -1
        else:
            hi, f_hi = sigma, f
            if side == 1:
                f_lo = target + (f_lo - target) / 2
            side = 1
    return hi


def _bracket(eps: Callable[[float], float], target: float, start: float) -> tuple[float, float, float, float]:
    """Find lo < hi with eps(lo) > target >= eps(hi), starting the search at ``start``."""
    hi, f_hi = start, eps(start)
    while f_hi > target:
        if hi >= MAX_SIGMA:
            raise ValueError(f"epsilon {target:g} cannot be reached even with noise multiplier {MAX_SIGMA:g}")
        hi, f_hi = hi * 2, eps(hi * 2)
    lo, f_lo = hi / 1.5, eps(hi / 1.5)
    while f_lo <= target:
        hi, f_hi = lo, f_lo
        if lo < 1e-3:
            return lo / 2, math.inf, hi, f_hi
        lo, f_lo = lo / 2, eps(lo / 2)
    return lo, f_lo, hi, f_hi


def calibrate_noise_multiplier(sampling_rate: float, steps: int, target_epsilon: float, delta: float,
                               accountant: str = "pld", other_events: Sequence[dp_event.DpEvent] = (),
                               tolerance: float = 1e-3, pld_discretization: float = PLD_DISCRETIZATION) -> float:
    """Smallest sigma (within ``tolerance``, relative) with eps(other_events + training) <= target."""
    q, target = check_sampling_rate(sampling_rate), check_epsilon(target_epsilon)
    check_steps(steps)
    check_delta(delta)
    if other_events:
        spent = compute_epsilon(dp_event.ComposedDpEvent(list(other_events)), delta, accountant, pld_discretization)
        if spent >= target:
            raise ValueError(f"the releases already charged spend epsilon {spent:.4g} >= target {target:g}: "
                             "no budget is left for training")
    if steps == 0:
        return 1.0  # no step is taken: any sigma meets the target
    rdp = _epsilon_fn(q, steps, delta, "rdp", other_events, pld_discretization)
    lo, f_lo, hi, f_hi = _bracket(rdp, target, 1.0)
    sigma_rdp = _solve(rdp, target, lo, f_lo, hi, f_hi, tolerance)
    if accountant == "rdp":
        return sigma_rdp
    sigma = sigma_rdp
    if pld_discretization < COARSE_PLD:
        coarse = _epsilon_fn(q, steps, delta, accountant, other_events, COARSE_PLD)
        lo, f_lo, hi, f_hi = _bracket(coarse, target, sigma_rdp)
        sigma = _solve(coarse, target, lo, f_lo, hi, f_hi, tolerance)
    exact = _epsilon_fn(q, steps, delta, accountant, other_events, pld_discretization)
    eps = exact(sigma)
    if target * (1 - EPS_SLACK) <= eps <= target:  # the coarse answer is tight on the fine grid too
        return sigma
    lo, f_lo, hi, f_hi = _bracket(exact, target, sigma)
    return _solve(exact, target, lo, f_lo, hi, f_hi, tolerance)
