"""Is a private model worth releasing? Its metric against the best public baseline on the SAME test units,
with a paired bootstrap interval of the difference, and a verdict in words.

A DP model is worth releasing only if it beats what anyone can do without the private data. The
comparison resamples the test units (rows, or patients: pass ``groups`` so a patient's rows move
together), recomputes both models' metric on every resample and reports the difference's 95%
percentile interval. The verdict says "beats" only when the whole interval is on the better side.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass

import numpy as np

from dpcare.exceptions import DataError

Metric = Callable[[np.ndarray, np.ndarray], float]  # (truth, scores or predictions) -> value
#: what every run's console summary and report say of the numbers printed beside its guarantee
OUTSIDE_THE_GUARANTEE = ("Outside the guarantee: the test and validation metrics, the public baselines' scores, the "
                         "verdict and any attack result are exact statistics of held-out {units}, which are not "
                         "training data (nothing there is noised); publishing them is a release of its own")


@dataclass(frozen=True)
class Comparison:
    """The private model's ``metric`` against ``baseline`` on the same test units (difference = model -
    baseline, oriented so that positive means the model is better)."""

    metric: str
    model: float
    baseline_name: str
    baseline: float
    difference: float
    low: float
    high: float
    higher_is_better: bool
    units: int
    resamples: int

    @property
    def beats(self) -> bool:
        return self.outcome == "better"

    @property
    def outcome(self) -> str:
        """"better" (the whole interval above 0), "worse" (the whole interval below 0) or "tie"."""
        return outcome(self.low, self.high)

    def verdict(self) -> str:
        where = (f"{self.metric} {self.model:.4g} vs {self.baseline:.4g} for {self.baseline_name}: improvement "
                 f"{self.difference:+.3g}, 95% interval [{self.low:+.3g}, {self.high:+.3g}] over {self.units} test units")
        if self.beats:
            return f"beats the public baseline ({where})"
        return f"no better than the public baseline: do not release ({where}); {self.diagnosis()}"

    def diagnosis(self) -> str:
        """Why a model that does not beat the baseline does not: significantly worse, or a tie that these test
        units cannot break (then more units, to train on or to test on, may decide it)."""
        if self.outcome == "worse":
            return "it is significantly worse than the baseline"
        return (f"the interval contains 0: on {self.units} test units it cannot be told from the baseline "
                "(more training or test units may decide it)")

    def to_dict(self) -> dict:
        return {**asdict(self), "beats": self.beats, "verdict": self.verdict()}


def plain_verdict(comparison: dict) -> str:
    """The verdict in plain words, from a :meth:`Comparison.to_dict`: "worth releasing" (the whole interval is
    better than the public baseline), "do not release" (the whole interval is worse) or "cannot be told with N
    test units" (the interval contains 0: release nothing on this evidence)."""
    found = outcome(comparison["low"], comparison["high"])
    if found == "tie":
        return f"cannot be told with {comparison['units']} test units"
    return "worth releasing" if found == "better" else "do not release"


def outcome(low: float, high: float) -> str:
    """What a 95% interval of the improvement over a baseline says: "better", "worse" or "tie" (contains 0)."""
    return "better" if low > 0 else "worse" if high < 0 else "tie"


#: a difference in AUROC / AUPRC a clinician would act on; a test split that cannot detect it is said before training
PRACTICAL_DIFFERENCE = 0.05


class SmallTestWarning(UserWarning):
    """The test split is too small to detect a difference of practical size (said before training)."""


def detectable_difference(test_units: int, power: float = 0.8, level: float = 0.05, auc: float = 0.75,
                          correlation: float = 0.5) -> float:
    """The smallest difference in AUROC between a model and its baseline that a paired comparison on
    ``test_units`` units detects with ``power`` at two-sided ``level``, computed before any label is read: Hanley
    and McNeil's (Radiology 1982) standard error of an AUC of ``auc`` with balanced classes, the most favourable
    case (rarer positives need more units), for two AUCs correlated at ``correlation``. A planning figure."""
    from statistics import NormalDist

    a, half = auc, test_units / 2
    if half < 1:
        return float("inf")
    q1, q2 = a / (2 - a), 2 * a * a / (1 + a)
    variance = (a * (1 - a) + (half - 1) * (q1 - a * a) + (half - 1) * (q2 - a * a)) / (half * half)
    z = NormalDist().inv_cdf(1 - level / 2) + NormalDist().inv_cdf(power)
    return z * (2 * variance * (1 - correlation)) ** 0.5


def units_to_detect(difference: float, **kwargs: float) -> int:
    """The fewest test units whose :func:`detectable_difference` is at most ``difference``."""
    low, high = 2, 4
    while detectable_difference(high, **kwargs) > difference:
        low, high = high, high * 2
    while high - low > 1:
        mid = (low + high) // 2
        low, high = (mid, high) if detectable_difference(mid, **kwargs) > difference else (low, mid)
    return high


def warn_if_small_test(test_units: int, unit: str = "rows", option: str = "--test-share") -> None:
    """Say before training when the test split cannot detect a difference of :data:`PRACTICAL_DIFFERENCE`."""
    import warnings

    smallest = detectable_difference(test_units)
    if smallest > PRACTICAL_DIFFERENCE:
        warnings.warn(f"the test split holds {test_units} {unit}: the verdict can detect a difference from the public "
                      f"baseline of about {smallest:.2f} AUROC or more (80% power, 5% level, balanced classes; more "
                      f"with rarer positives), not one of practical size ({PRACTICAL_DIFFERENCE:g} needs about "
                      f"{units_to_detect(PRACTICAL_DIFFERENCE):,} test {unit}): expect 'cannot be told' unless the "
                      f"model is much better; use more {unit} or a larger {option}", SmallTestWarning, stacklevel=3)


def verdict_entry(model: str, comparison: dict) -> dict:
    """One row of run.json's ``verdicts``: the model, the verdict in plain words first, then what it rests on
    (the metric, the baseline, the difference and its 95% interval over how many test units) and the sentence."""
    c = comparison
    if c.get("undefined"):  # a metric that cannot be computed (e.g. a synthetic table of one class)
        return {"model": model, "verdict": "do not release (the metric is undefined)", "metric": c["metric"],
                "against": c["baseline_name"], "model value": c.get("model"), "baseline value": c.get("baseline"),
                "sentence": c["verdict"]}
    return {"model": model, "verdict": plain_verdict(c), "metric": c["metric"], "against": c["baseline_name"],
            "model value": c["model"], "baseline value": c["baseline"],
            "difference [95% interval]": [c["difference"], c["low"], c["high"]], "test units": c["units"],
            "sentence": c["verdict"]}


def compare(metric_name: str, metric: Metric, truth: np.ndarray, model: np.ndarray, baseline: np.ndarray,
            baseline_name: str, higher_is_better: bool = True, groups: np.ndarray | None = None,
            resamples: int = 1000, seed: int = 0, strata: np.ndarray | None = None) -> Comparison:
    """Paired bootstrap of ``metric(model) - metric(baseline)`` over the test units (``groups``: one unit label
    per row; a unit's rows are drawn together). A resample the metric is undefined on (e.g. one class) is
    drawn again. ``strata``: one label per row, e.g. the folds of a cross-fitted evaluation, each scored by its
    own model and baseline: the metric is then the mean of its values on each stratum's rows, and the units are
    drawn within their stratum (a stratified bootstrap)."""
    truth, model, baseline = (np.asarray(a) for a in (truth, model, baseline))
    if not len(truth) == len(model) == len(baseline) or not len(truth):
        raise DataError(f"the model and the baseline must be scored on the same non-empty test units: "
                        f"{len(truth)} labels, {len(model)} and {len(baseline)} predictions")
    sign = 1.0 if higher_is_better else -1.0
    units = np.arange(len(truth)) if groups is None else np.asarray(groups)
    labels, index = np.unique(units, return_inverse=True)
    rows_of = [np.flatnonzero(index == k) for k in range(len(labels))]
    layer = np.zeros(len(truth), dtype=int) if strata is None else np.unique(np.asarray(strata), return_inverse=True)[1]
    if any(len(np.unique(layer[r])) > 1 for r in rows_of):
        raise DataError("a test unit's rows lie in two strata (folds): every unit must be scored in one")
    units_in = [np.flatnonzero(layer[[r[0] for r in rows_of]] == s) for s in range(layer.max() + 1)]

    def mean_metric(scores: np.ndarray, picks: list[np.ndarray]) -> float:
        return float(np.mean([metric(truth[p], scores[p]) for p in picks]))

    whole = [np.concatenate([rows_of[k] for k in units_s]) for units_s in units_in]
    point_m, point_b = mean_metric(model, whole), mean_metric(baseline, whole)
    rng = np.random.default_rng(seed)
    diffs, tries = [], 0
    while len(diffs) < resamples and tries < 5 * resamples:
        tries += 1
        picks = [np.concatenate([rows_of[k] for k in rng.choice(units_s, len(units_s))]) for units_s in units_in]
        try:
            d = mean_metric(model, picks) - mean_metric(baseline, picks)
        except ValueError:  # scikit-learn's metrics on a one-class resample
            continue
        if np.isfinite(d):
            diffs.append(sign * d)
    if len(diffs) < resamples // 2:
        raise DataError(f"the {metric_name} is undefined on most resamples of the {len(labels)} test units: too "
                        "few units (or one class) to compare with the baseline")
    low, high = np.percentile(diffs, [2.5, 97.5])
    return Comparison(metric_name, point_m, baseline_name, point_b, float(sign * (point_m - point_b)),
                      float(low), float(high), higher_is_better, len(labels), len(diffs))


__all__ = ["OUTSIDE_THE_GUARANTEE", "PRACTICAL_DIFFERENCE", "Comparison", "Metric", "SmallTestWarning", "compare",
           "detectable_difference", "plain_verdict", "units_to_detect", "verdict_entry", "warn_if_small_test"]
