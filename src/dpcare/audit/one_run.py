"""Privacy auditing with one training run (Steinke, Nasr, Jagielski 2023).

m canaries are each included with probability 1/2; after training the auditor
guesses "in" for the k+ highest scores and "out" for the k- lowest (abstaining on
the rest). Under (epsilon, delta)-DP the number v of correct guesses among r is
at most what randomized response allows: their bound (Theorem 5.2 and its
(epsilon, delta) extension) gives

    P[V >= v] <= P[Bin(r, q) >= v] + 2 m delta max_{i=1..v} (1/i) P[v > Bin(r, q) >= v - i],
    q = e^eps / (1 + e^eps).

Two lower bounds are read from it:

- ``bound="pure"``: the largest epsilon whose p-value at the run's delta is still <= 1 - confidence.
  The 2 m delta term makes it weak when the run's delta is not tiny next to 1 / m.
- ``bound="gdp"``: a lower bound on mu under Gaussian DP. A run is mu-GDP exactly when it is
  (epsilon, delta_mu(epsilon))-DP for EVERY epsilon >= 0, delta_mu(epsilon) = Phi(-epsilon/mu + mu/2)
  - e^epsilon Phi(-epsilon/mu - mu/2) (Dong, Roth, Su 2022, Corollary 2.13), so each epsilon of a fixed grid
  gives a valid p-value for "the run is mu-GDP" and the smallest of them is still valid. mu is rejected when
  that p-value is <= 1 - confidence; the bound is the largest mu rejected, reported with its epsilon at the
  run's delta. A claim stated as (epsilon, delta) is read as the Gaussian curve through that point (as
  DP-SGD's privacy curve nearly is: Dong, Roth, Su, Section 5), and where the run's own accountant curve lies
  above that Gaussian curve, :func:`claim_slack` adds the difference to every p-value, so that a correct run
  exceeds its claimed epsilon with probability at most 1 - confidence. Tighter f-DP analyses of the same game
  exist (Mahloujifar, Melis, Chaudhuri 2025, "Auditing f-Differential Privacy in One Run"); this one only
  combines the two published results above.

Guess counts taken from a grid are Bonferroni-corrected.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from scipy.optimize import brentq
from scipy.stats import binom, norm

from dpcare.exceptions import DataError, SettingsError

BOUNDS = ("gdp", "pure")
EPSILON_GRID = np.round(np.arange(0.05, 12.0001, 0.05), 2)  # the epsilons the GDP test takes the best of
MU_MAX = 50.0


def _check_counts(m: int, r: int, v: int) -> None:
    if not 0 <= v <= r <= m:
        raise SettingsError(f"need 0 <= v <= r <= m, got v={v}, r={r}, m={m}")


def _tail_and_alpha(r: int, v: int, epsilons: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For each epsilon: P[Bin(r, q) >= v] and max_{i=1..v} (1/i) P[v > Bin(r, q) >= v - i]."""
    q = 1.0 / (1.0 + np.exp(-np.asarray(epsilons, float)))
    tail = binom.sf(v - 1, r, q)
    if v == 0:
        return tail, np.zeros_like(q)
    pmf = binom.pmf(np.arange(v - 1, -1, -1)[None, :], r, q[:, None])  # P[Bin = v-1], ..., P[Bin = 0]
    alpha = np.max(np.cumsum(pmf, axis=1) / np.arange(1, v + 1), axis=1)
    return tail, alpha


def p_value(m: int, r: int, v: int, epsilon: float, delta: float) -> float:
    """Probability of at least v correct guesses out of r under (epsilon, delta)-DP."""
    _check_counts(m, r, v)
    tail, alpha = _tail_and_alpha(r, v, np.array([epsilon]))
    return float(min(1.0, tail[0] + 2 * m * delta * alpha[0]))


def _largest_rejected(rejects: Callable[[float], bool], start: float = 1.0, cap: float = 100.0) -> float:
    """The largest x >= 0 with rejects(x), for rejects monotone (true below a threshold): bisection."""
    if not rejects(0.0):
        return 0.0
    lo, hi = 0.0, start
    while rejects(hi):
        lo, hi = hi, hi * 2
        if hi > cap:
            return lo
    for _ in range(50):
        mid = (lo + hi) / 2
        if rejects(mid):
            lo = mid
        else:
            hi = mid
    return lo


def epsilon_lower_bound(m: int, r: int, v: int, delta: float, confidence: float = 0.95) -> float:
    """Largest epsilon rejected at the given confidence (0 if even epsilon = 0 is not rejected)."""
    beta = 1 - confidence
    return _largest_rejected(lambda eps: p_value(m, r, v, eps, delta) <= beta)


# ------------------------------------------------------------------ Gaussian DP
def gdp_delta(mu: float, epsilon: float | np.ndarray) -> float | np.ndarray:
    """delta_mu(epsilon) of mu-GDP (Dong, Roth, Su 2022, Corollary 2.13); mu = 0 gives 0."""
    eps = np.asarray(epsilon, float)
    if mu <= 0:
        return np.zeros_like(eps) if eps.ndim else 0.0
    a = -eps / mu + mu / 2
    d = norm.cdf(a) - np.exp(eps + norm.logcdf(a - mu))
    d = np.clip(d, 0.0, 1.0)
    return d if d.ndim else float(d)


def gdp_epsilon(mu: float, delta: float) -> float:
    """The epsilon of mu-GDP at ``delta`` (0 when delta_mu(0) <= delta)."""
    if mu <= 0 or gdp_delta(mu, 0.0) <= delta:
        return 0.0
    hi = 1.0
    while gdp_delta(mu, hi) > delta:
        hi *= 2
    return float(brentq(lambda e: gdp_delta(mu, e) - delta, 0.0, hi, xtol=1e-10))


def gdp_mu(epsilon: float, delta: float) -> float:
    """The mu whose Gaussian curve passes through (epsilon, delta): mu-GDP is (epsilon, delta)-DP at that point."""
    if not (epsilon >= 0 and 0 < delta < 1):
        raise SettingsError(f"need epsilon >= 0 and 0 < delta < 1, got epsilon={epsilon}, delta={delta}")
    hi = 1.0
    while gdp_delta(hi, epsilon) < delta:
        hi *= 2
    return float(brentq(lambda mu: gdp_delta(mu, epsilon) - delta, 1e-12, hi, xtol=1e-12))


def gdp_p_value(m: int, r: int, v: int, mu: float, slack: float = 0.0) -> float:
    """Probability of at least v correct guesses out of r if the run is mu-GDP (the best epsilon of
    :data:`EPSILON_GRID` in the (epsilon, delta) bound), plus ``slack`` (:func:`claim_slack`)."""
    _check_counts(m, r, v)
    tail, alpha = _tail_and_alpha(r, v, EPSILON_GRID)
    return _gdp_p(m, tail, alpha, mu) + slack


def _gdp_p(m: int, tail: np.ndarray, alpha: np.ndarray, mu: float) -> float:
    return float(np.min(np.minimum(1.0, tail + 2 * m * gdp_delta(mu, EPSILON_GRID) * alpha)))


def mu_lower_bound(m: int, r: int, v: int, confidence: float = 0.95, slack: float = 0.0) -> float:
    """Largest mu rejected at the given confidence: v correct guesses out of r are too many for mu-GDP
    (0 if even mu = 0, no privacy loss at all, is not rejected)."""
    _check_counts(m, r, v)
    beta = 1 - confidence
    tail, alpha = _tail_and_alpha(r, v, EPSILON_GRID)
    return _largest_rejected(lambda mu: _gdp_p(m, tail, alpha, mu) + slack <= beta, start=0.5, cap=MU_MAX)


def claim_slack(m: int, epsilon: float, delta: float, profile: Callable[[np.ndarray], np.ndarray]) -> float:
    """How much larger the p-values of :func:`gdp_p_value` can be for a run whose accountant certifies
    (e, profile(e))-DP for every e than for the Gaussian curve through its claim (epsilon, delta):
    2 m max over the grid of (profile(e) - delta_mu(e))_+ (the alpha factor of the bound is at most 1).
    Adding it to every p-value keeps the GDP bound at or below the claim with probability >= confidence."""
    mu = gdp_mu(epsilon, delta)
    gap = np.asarray(profile(EPSILON_GRID), float) - gdp_delta(mu, EPSILON_GRID)
    return float(2 * m * max(0.0, np.max(gap)))


@dataclass
class OneRunAudit:
    epsilon_lower_bound: float
    correct: int
    guesses: int
    canaries: int
    k_plus: int
    k_minus: int
    confidence: float
    bound: str = "pure"
    mu_lower_bound: float | None = None  # the GDP bound itself (bound="gdp")
    delta: float | None = None  # the delta the epsilon is stated at
    slack: float = 0.0  # added to every p-value (claim_slack)

    def to_dict(self) -> dict:
        return dict(self.__dict__)


def one_run_audit(scores: np.ndarray, included: np.ndarray, delta: float, confidence: float = 0.95,
                  guess_fractions: tuple[float, ...] = (0.05, 0.1, 0.2, 0.3, 0.5), bound: str = "pure",
                  slack: float = 0.0) -> OneRunAudit:
    """Best lower bound over symmetric guess counts k+ = k- = f m / 2, Bonferroni-corrected.

    ``bound``: "pure" (the epsilon rejected at ``delta``) or "gdp" (the mu rejected, stated as its epsilon at
    ``delta``); ``slack`` is added to the GDP p-values (:func:`claim_slack`)."""
    scores, included = np.asarray(scores, float), np.asarray(included, bool)
    m = len(scores)
    if m == 0 or len(included) != m:
        raise DataError("scores and inclusion bits must be non-empty and of equal length")
    if bound not in BOUNDS:
        raise SettingsError(f"bound must be one of {BOUNDS}, got {bound!r}")
    if not guess_fractions or not all(0 < f <= 1 for f in guess_fractions):
        raise SettingsError(f"guess fractions must be in (0, 1], got {guess_fractions}")
    order = np.argsort(-scores, kind="stable")
    level = 1 - (1 - confidence) / len(guess_fractions)
    best = None
    for f in guess_fractions:
        k = max(1, int(f * m / 2))
        top, bottom = order[:k], order[m - k:]
        v = int(included[top].sum() + (~included[bottom]).sum())
        mu = None
        if bound == "pure":
            eps = epsilon_lower_bound(m, 2 * k, v, delta, level)
        else:
            mu = mu_lower_bound(m, 2 * k, v, level, slack)
            eps = gdp_epsilon(mu, delta)
        audit = OneRunAudit(eps, v, 2 * k, m, k, k, confidence, bound, mu, delta, slack)
        if best is None or (mu, eps) > (best.mu_lower_bound, best.epsilon_lower_bound):
            best = audit
    return best
