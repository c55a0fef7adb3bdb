"""Privacy auditing with one training run (Steinke, Nasr, Jagielski 2023).

m canaries are each included with probability 1/2; after training the auditor
guesses "in" for the k+ highest scores and "out" for the k- lowest (abstaining on
the rest). Under (epsilon, delta)-DP the number v of correct guesses among r is
at most what randomized response allows: their bound (Theorem 5.2 and its
(epsilon, delta) extension) gives

    P[V >= v] <= P[Bin(r, q) >= v] + 2 m delta max_{i=1..v} (1/i) P[v > Bin(r, q) >= v - i],
    q = e^eps / (1 + e^eps).

The lower bound is the largest epsilon whose p-value is still <= 1 - confidence;
guess counts taken from a grid are Bonferroni-corrected.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy.stats import binom

from dpcare.exceptions import DataError, SettingsError


def p_value(m: int, r: int, v: int, epsilon: float, delta: float) -> float:
    """Probability of at least v correct guesses out of r under (epsilon, delta)-DP."""
    if not 0 <= v <= r <= m:
        raise SettingsError(f"need 0 <= v <= r <= m, got v={v}, r={r}, m={m}")
    q = 1.0 / (1.0 + math.exp(-epsilon))
    tail = float(binom.sf(v - 1, r, q))
    if delta == 0 or v == 0:
        return min(1.0, tail)
    pmf = binom.pmf(np.arange(v - 1, -1, -1), r, q)  # P[Bin = v-1], P[Bin = v-2], ..., P[Bin = 0]
    alpha = float(np.max(np.cumsum(pmf) / np.arange(1, v + 1)))
    return min(1.0, tail + 2 * m * delta * alpha)


def epsilon_lower_bound(m: int, r: int, v: int, delta: float, confidence: float = 0.95) -> float:
    """Largest epsilon rejected at the given confidence (0 if even epsilon = 0 is not rejected)."""
    beta = 1 - confidence
    if p_value(m, r, v, 0.0, delta) > beta:
        return 0.0
    lo, hi = 0.0, 1.0
    while p_value(m, r, v, hi, delta) <= beta:
        lo, hi = hi, hi * 2
        if hi > 100:
            return lo
    for _ in range(50):
        mid = (lo + hi) / 2
        if p_value(m, r, v, mid, delta) <= beta:
            lo = mid
        else:
            hi = mid
    return lo


@dataclass
class OneRunAudit:
    epsilon_lower_bound: float
    correct: int
    guesses: int
    canaries: int
    k_plus: int
    k_minus: int
    confidence: float

    def to_dict(self) -> dict:
        return dict(self.__dict__)


def one_run_audit(scores: np.ndarray, included: np.ndarray, delta: float, confidence: float = 0.95,
                  guess_fractions: tuple[float, ...] = (0.05, 0.1, 0.2, 0.3, 0.5)) -> OneRunAudit:
    """Best lower bound over symmetric guess counts k+ = k- = f m / 2, Bonferroni-corrected."""
    scores, included = np.asarray(scores, float), np.asarray(included, bool)
    m = len(scores)
    if m == 0 or len(included) != m:
        raise DataError("scores and inclusion bits must be non-empty and of equal length")
    order = np.argsort(-scores, kind="stable")
    level = 1 - (1 - confidence) / len(guess_fractions)
    best = None
    for f in guess_fractions:
        k = max(1, int(f * m / 2))
        top, bottom = order[:k], order[m - k:]
        v = int(included[top].sum() + (~included[bottom]).sum())
        eps = epsilon_lower_bound(m, 2 * k, v, delta, level)
        if best is None or eps > best.epsilon_lower_bound:
            best = OneRunAudit(eps, v, 2 * k, m, k, k, confidence)
    return best
