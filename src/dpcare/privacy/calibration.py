"""The smallest noise multiplier that meets a target (epsilon, delta), never above the target.

Search on x = log(sigma) for the root of g(x) = log(epsilon(e^x) / target), which is
decreasing and nearly linear: bracket it by secant steps, then shrink the bracket
with regula falsi (Illinois), each step pushed by 0.4 tolerance across the root so
the last two evaluations usually land on either side of it. Three stages, each
seeding the next with its answer and slope:

1. RDP, from cached RDP curves (a few ms per sigma). RDP >= PLD, so its answer is
   an upper end for PLD; with ``accountant="rdp"`` it is the answer.
2. PLD on a 1e-3 grid (~10x cheaper than 1e-4, and within ~0.5% of it).
3. PLD on the requested grid: typically three evaluations.

The sigma returned is the upper end of the final bracket; its epsilon was computed
with the requested accountant (the same call as :func:`compute_epsilon`) and is
<= target, and epsilon(sigma / (1 + tolerance)) > target was observed.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Sequence

import numpy as np
from dp_accounting import dp_event

from dpcare.caller import user_stacklevel
from dpcare.exceptions import BudgetExceededError, PrivacyParameterError
from dpcare.privacy.accountants import (
    PLD_DISCRETIZATION,
    RDP_ORDERS,
    compute_epsilon,
    epsilon_from_rdp,
    make_accountant,
    rdp_curve,
)
from dpcare.privacy.events import sampled_gaussian_event, zcdp_event
from dpcare.privacy.validation import check_delta, check_epsilon, check_sampling_rate, check_steps

MIN_SIGMA, MAX_SIGMA = 0.1, 1e5
COARSE_PLD = 1e-3
SEED_TOLERANCE = 1e-2  # the RDP stage only seeds the PLD search
MAX_STEP = 3.0  # at most a factor e^3 in sigma per RDP bracketing step
MAX_PLD_STEP = 0.35  # PLD cost explodes at small sigma: creep (x1.4) from the RDP answer

Bracket = tuple[float, float, float, float]  # lo, g(lo) > 0, hi, g(hi) <= 0


def _solve(g: Callable[[float], float], x: float, slope: float, tol: float, overshoot: float = 1.2,
           max_step: float = MAX_STEP) -> Bracket:
    """Bracket the root of the decreasing ``g`` starting at ``x``, then shrink to width ``tol``.

    Bracketing steps are the secant prediction times ``overshoot`` plus 0.4 tol.
    Returns (lo, g_lo, hi, g_hi). If even MIN_SIGMA meets the target, lo = -inf.
    """
    x_min, x_max = math.log(MIN_SIGMA), math.log(MAX_SIGMA)
    x = min(max(x, x_min), x_max)
    gx = g(x)
    lo, g_lo, hi, g_hi = -math.inf, math.inf, math.inf, -math.inf
    last_step = 0.0
    while True:  # bracket
        if gx > 0:
            lo, g_lo = x, gx
        else:
            hi, g_hi = x, gx
        if math.isfinite(lo) and math.isfinite(hi):
            break
        if gx > 0 and x >= x_max:
            raise PrivacyParameterError(f"the target epsilon cannot be met even with noise multiplier {MAX_SIGMA:g}")
        if gx <= 0 and x <= x_min:
            return -math.inf, math.inf, hi, g_hi
        if math.isfinite(gx) and slope < 0:
            step = abs(gx / slope) * overshoot + 0.4 * tol
        else:  # no usable slope: double the step
            step = max(1.0, 2 * last_step)
        step = min(step, max_step)
        last_step = step
        prev, g_prev = x, gx
        x = min(max(x + (step if gx > 0 else -step), x_min), x_max)
        gx = g(x)
        if math.isfinite(gx) and math.isfinite(g_prev) and x != prev and (gx - g_prev) / (x - prev) < 0:
            slope = (gx - g_prev) / (x - prev)
    s_lo, s_hi, moved = g_lo, g_hi, 0  # Illinois keeps scaled copies for the interpolation
    while hi - lo > tol:
        w = hi - lo
        if math.isfinite(s_lo) and math.isfinite(s_hi):
            x = hi - s_hi * w / (s_hi - s_lo)
            x += 0.4 * tol if x - lo < hi - x else -0.4 * tol  # aim past the root, away from the near end
            x = min(max(x, lo + 0.05 * w), hi - 0.05 * w)
        else:
            x = lo + w / 2
        gx = g(x)
        if gx > 0:
            lo, g_lo, s_lo = x, gx, gx
            if moved == -1:
                s_hi /= 2
            moved = -1
        else:
            hi, g_hi, s_hi = x, gx, gx
            if moved == 1:
                s_lo /= 2
            moved = 1
    return lo, g_lo, hi, g_hi


def _root(b: Bracket) -> float:
    """The secant estimate of the root inside a bracket (its upper end if that is undefined)."""
    lo, g_lo, hi, g_hi = b
    if math.isfinite(lo) and math.isfinite(g_lo) and math.isfinite(g_hi) and g_lo > g_hi:
        return hi - g_hi * (hi - lo) / (g_hi - g_lo)
    return hi


def _slope(b: Bracket, default: float) -> float:
    lo, g_lo, hi, g_hi = b
    if math.isfinite(lo) and math.isfinite(g_lo) and math.isfinite(g_hi) and hi > lo and g_hi < g_lo:
        return (g_hi - g_lo) / (hi - lo)
    return default


def _log_ratio(eps: float, target: float) -> float:
    if math.isnan(eps):
        return math.inf
    return math.log(eps / target) if eps > 0 else -math.inf


def calibrate_noise_multiplier(sampling_rate: float, steps: int, target_epsilon: float, delta: float,
                               accountant: str = "pld", other_events: Sequence[dp_event.DpEvent] = (),
                               tolerance: float = 1e-3, pld_discretization: float = PLD_DISCRETIZATION) -> float:
    """Smallest sigma (to relative ``tolerance``) with eps(other_events + training) <= target_epsilon.

    Training is ``steps`` Poisson-sampled Gaussian steps at rate ``sampling_rate``.
    Raises BudgetExceededError if ``other_events`` alone use up the target, PrivacyParameterError if it
    cannot be met.
    With ``steps == 0`` any sigma meets the target and 1.0 is returned. If even sigma =
    MIN_SIGMA (0.1) meets the target, MIN_SIGMA is returned. Targets that need sigma < ~0.4
    (epsilon in the tens) are slow with PLD: its grid over the privacy loss grows as sigma shrinks.
    """
    q, target = check_sampling_rate(sampling_rate), check_epsilon(target_epsilon)
    steps, delta = check_steps(steps), check_delta(delta)
    make_accountant(accountant, pld_discretization)  # reject unknown names up front
    if not 0 < tolerance <= 0.1:
        raise PrivacyParameterError(f"tolerance must be in (0, 0.1], got tolerance = {tolerance!r}")
    other = list(other_events)
    if other:
        spent = compute_epsilon(dp_event.ComposedDpEvent(other), delta, accountant, pld_discretization)
        if spent > target or (steps and spent == target):
            raise BudgetExceededError(f"the releases already charged spend epsilon = {spent:.4g} of the target epsilon = "
                             f"{target:g} (delta = {delta:g}): no budget is left for training")
    if steps == 0:
        return 1.0

    def event(sigma: float) -> dp_event.DpEvent:
        return dp_event.ComposedDpEvent([*other, sampled_gaussian_event(q, sigma, steps)])

    base_rdp = rdp_curve(dp_event.ComposedDpEvent(other)) if other else np.zeros(len(RDP_ORDERS))

    def g_rdp(x: float) -> float:
        curve = base_rdp + steps * rdp_curve(sampled_gaussian_event(q, math.exp(x), 1))
        return _log_ratio(epsilon_from_rdp(curve, delta), target)

    exact: dict[float, float] = {}

    def g_pld(grid: float) -> Callable[[float], float]:
        def g(x: float) -> float:
            sigma = math.exp(x)
            eps = compute_epsilon(event(sigma), delta, accountant, grid)
            if grid == pld_discretization:
                exact[sigma] = eps
            return _log_ratio(eps, target)

        return g

    tol = math.log1p(tolerance)
    if accountant == "rdp":
        b = _solve(g_rdp, 0.0, -1.5, tol)
    else:
        b = _solve(g_rdp, 0.0, -1.5, math.log1p(max(tolerance, SEED_TOLERANCE)))
        if not math.isfinite(b[0]):  # RDP (an upper bound on epsilon) already meets the target at MIN_SIGMA
            return _floor(target)
        if pld_discretization < COARSE_PLD:
            b = _solve(g_pld(COARSE_PLD), _root(b), _slope(b, -1.5), math.log1p(max(tolerance, 1e-3)),
                       max_step=MAX_PLD_STEP)
        # the coarse slope is accurate and the root close: no safety factor needed
        b = _solve(g_pld(pld_discretization), _root(b), _slope(b, -1.5), tol, overshoot=1.0,
                   max_step=MAX_PLD_STEP)
    if not math.isfinite(b[0]):
        return _floor(target)
    sigma = math.exp(b[2])
    for _ in range(100):  # the answer is checked with the exact call users make
        eps = exact.get(sigma)
        if eps is None:
            eps = compute_epsilon(event(sigma), delta, accountant, pld_discretization)
        if eps <= target:
            return sigma
        sigma *= 1 + tolerance
    raise RuntimeError(f"calibration failed to meet epsilon = {target:g}; please report this")


def calibrate_zcdp_rho(target_epsilon: float, delta: float, tolerance: float = 1e-6) -> float:
    """The largest rho (to relative ``tolerance``) whose rho-zCDP event the RDP accountant certifies at
    (target_epsilon, delta): what an adaptive zCDP mechanism (AIM) may spend so that the run's ledger, which
    composes its event with that accountant, prints at most the target. The epsilon of the answer is checked
    with the same call the ledger makes (:func:`compute_epsilon` with ``"rdp"``)."""
    target, delta = check_epsilon(target_epsilon), check_delta(delta)
    if not 0 < tolerance <= 0.1:
        raise PrivacyParameterError(f"tolerance must be in (0, 0.1], got tolerance = {tolerance!r}")

    def eps(rho: float) -> float:
        return compute_epsilon(zcdp_event(rho), delta, "rdp")

    lo, hi = 1e-12, 1.0
    while eps(hi) <= target:  # rho grows about like epsilon^2 / (4 log(1/delta)) for small epsilon
        lo, hi = hi, hi * 4
    if eps(lo) > target:
        raise PrivacyParameterError(f"epsilon = {target:g} at delta = {delta:g} is below what any rho > 1e-12 meets")
    while hi / lo > 1 + tolerance:  # eps(lo) <= target < eps(hi)
        mid = math.sqrt(lo * hi)
        lo, hi = (mid, hi) if eps(mid) <= target else (lo, mid)
    return lo


def _floor(target: float) -> float:
    """MIN_SIGMA, with a warning: less noise than that is not considered, so the run's epsilon (from its ledger)
    will be below the target."""
    warnings.warn(f"target epsilon {target:g} is met with the smallest noise multiplier considered "
                  f"({MIN_SIGMA:g}): the run uses sigma = {MIN_SIGMA:g} and its ledger reports a lower epsilon",
                  stacklevel=user_stacklevel())
    return MIN_SIGMA

