"""Paired differences over seeds: does a study's claim hold seed by seed?

Every study names the claims it checks as ``(better, worse)`` pairs of methods (a :class:`Claim`, optionally
with the epsilon at which it holds and the metrics it is about). :func:`paired_differences` pairs the runs of
the two methods by seed (and by any ``by`` columns: data set, task) and reports, per claim and metric, the
per-seed differences ORIENTED so that a positive difference goes the claimed way (``better - worse`` for a
higher-is-better metric, ``worse - better`` for a lower-is-better one such as FID or MSE), their mean and sd,
the seeds won, a 95% t-interval of the mean difference (3 seeds or more), the one-sided Wilcoxon signed-rank
p-value (2 seeds or more) and a verdict:

* ``holds``: the 95% interval lies above 0 (3 seeds or more);
* ``not shown``: it does not, or 2 seeds (too few for an interval);
* ``one seed: not tested``: a single seed is an anecdote, not a test.

:func:`paired_markdown` renders them as the "Paired differences over seeds" section of a study's table.md.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from dpcare.exceptions import SettingsError

HIGHER, LOWER = "higher", "lower"
HOLDS, NOT_SHOWN, ONE_SEED = "holds", "not shown", "one seed: not tested"
MIN_INTERVAL_SEEDS = 3
TITLE = "Paired differences over seeds"
COLUMNS = ("claim", "metric", "better_is", "epsilon", "seeds", "differences", "mean_diff", "sd", "wins", "ci_low",
           "ci_high", "wilcoxon_p", "verdict")


@dataclass(frozen=True)
class Claim:
    """``better`` beats ``worse`` on ``metrics`` (empty: every metric of the call) at ``epsilon`` (None: the
    call's epsilon). Runs without an epsilon (non-private methods) pair at any epsilon."""

    better: str
    worse: str
    metrics: tuple[str, ...] = ()
    epsilon: float | None = None

    @property
    def text(self) -> str:
        return f"{self.better} > {self.worse}"


def as_claim(claim: Claim | Sequence) -> Claim:
    """A :class:`Claim` from itself or a ``(better, worse)`` / ``(better, worse, epsilon)`` tuple."""
    if isinstance(claim, Claim):
        return claim
    if len(claim) == 2:
        return Claim(claim[0], claim[1])
    if len(claim) == 3:
        return Claim(claim[0], claim[1], epsilon=claim[2])
    raise SettingsError(f"a claim is (better, worse) or (better, worse, epsilon), got {claim!r}")


def check_seeds(seeds: int) -> int:
    """A study's number of seeds, checked: an integer >= 1."""
    if isinstance(seeds, bool) or not isinstance(seeds, int) or seeds < 1:
        raise SettingsError(f"seeds must be an integer >= 1, got seeds = {seeds!r}")
    return seeds


def seeds_key(config: dict, seeds: int) -> dict:
    """A study's resume key with ``seeds`` only when not 1, so that a published one-seed study keeps its key."""
    out = {k: v for k, v in config.items() if k != "seeds"}
    return out if check_seeds(seeds) == 1 else {**out, "seeds": seeds}


def seeds_label(seeds: int) -> str:
    """The words a table heading carries about its seeds: '(one seed)' or '(mean ± sd over N seeds)'."""
    return "(one seed)" if seeds == 1 else f"(mean ± sd over {seeds} seeds)"


def note_seeds(manifest, first_seed: int, seeds: int, where: str = "table.csv (column seed)",
               what: str = "Models and metrics") -> None:
    """run.json of a study: its ``paired.csv`` and, with several seeds, a note that ``what`` it lists are
    ``first_seed``'s and where the other seeds' are (``where``)."""
    manifest.files["paired"] = "paired.csv"
    if seeds > 1:
        manifest.notes.append(f"{what} above are seed {first_seed}'s; the other {seeds - 1} seed(s) are in "
                              f"{where}, their paired differences in paired.csv.")


def oriented(better: np.ndarray, worse: np.ndarray, direction: str) -> np.ndarray:
    """Per-seed differences, positive when ``better`` is better: better - worse (higher is better) or
    worse - better (lower is better)."""
    if direction not in (HIGHER, LOWER):
        raise SettingsError(f"direction must be {HIGHER!r} or {LOWER!r}, got {direction!r}")
    better, worse = np.asarray(better, float), np.asarray(worse, float)
    return better - worse if direction == HIGHER else worse - better


def summarize_differences(d: Sequence[float], confidence: float = 0.95) -> dict:
    """Mean, sd, wins, the t-interval of the mean (3 values or more), the one-sided Wilcoxon p (2 or more,
    not all zero) and the verdict of oriented differences ``d``."""
    from scipy import stats

    d = np.asarray(d, float)
    n = len(d)
    mean = float(d.mean()) if n else math.nan
    sd = float(d.std(ddof=1)) if n > 1 else math.nan
    low = high = math.nan
    if n >= MIN_INTERVAL_SEEDS:
        half = float(stats.t.ppf(0.5 + confidence / 2, n - 1)) * sd / math.sqrt(n)
        low, high = mean - half, mean + half
    p = math.nan
    if n > 1 and np.any(d != 0):
        p = float(stats.wilcoxon(d, alternative="greater").pvalue)
    if n == 1:
        verdict = ONE_SEED
    elif n >= MIN_INTERVAL_SEEDS and low > 0:
        verdict = HOLDS
    else:
        verdict = NOT_SHOWN
    return {"seeds": n, "differences": " ".join(f"{x:+.4g}" for x in d), "mean_diff": mean, "sd": sd,
            "wins": int((d > 0).sum()), "ci_low": low, "ci_high": high, "wilcoxon_p": p, "verdict": verdict}


def paired_differences(runs: pd.DataFrame, claims: Iterable[Claim | Sequence], metrics: Mapping[str, str],
                       epsilon: float | None = None, *, method: str = "method", seed: str = "seed",
                       epsilon_col: str | None = "target_epsilon", by: Sequence[str] = ()) -> pd.DataFrame:
    """Per claim, ``by`` group and metric, the seed-by-seed differences of ``better`` against ``worse``.

    ``runs``: one row per (method, epsilon, seed[, by...]); ``metrics``: column -> ``"higher"`` or ``"lower"``
    (which is better); ``epsilon``: where claims without their own epsilon are checked (rows whose
    ``epsilon_col`` is missing, the non-private methods, pair at any epsilon; ``epsilon_col=None`` or a
    column not in ``runs``: no epsilon filter, the method names carry it). Pairs without a common seed, and
    metrics missing on either side, give no row. Columns: see :data:`COLUMNS` (plus the ``by`` columns first).
    """
    rows = []
    filtered = epsilon_col is not None and epsilon_col in runs
    groups = runs.groupby(list(by), sort=False) if by else [((), runs)]
    for key, group in groups:
        key = key if isinstance(key, tuple) else (key,)
        for claim in map(as_claim, claims):
            eps = claim.epsilon if claim.epsilon is not None else epsilon
            at = group
            if filtered and eps is not None:
                e = pd.to_numeric(group[epsilon_col], errors="coerce")
                at = group[e.isna() | ~np.isfinite(e.fillna(0)) | np.isclose(e.fillna(-1), float(eps))]
            a = at[at[method] == claim.better].drop_duplicates(seed).set_index(seed)
            b = at[at[method] == claim.worse].drop_duplicates(seed).set_index(seed)
            common = sorted(set(a.index) & set(b.index))
            if not common:
                continue
            for metric in claim.metrics or tuple(metrics):
                if metric not in metrics:
                    raise SettingsError(f"claim {claim.text}: metric {metric!r} has no direction in {dict(metrics)}")
                if metric not in a or metric not in b:
                    continue
                x = pd.to_numeric(a.loc[common, metric], errors="coerce").to_numpy(float)
                y = pd.to_numeric(b.loc[common, metric], errors="coerce").to_numpy(float)
                ok = np.isfinite(x) & np.isfinite(y)
                if not ok.any():
                    continue
                d = oriented(x[ok], y[ok], metrics[metric])
                rows.append({**dict(zip(by, key)), "claim": claim.text, "metric": metric,
                             "better_is": metrics[metric], "epsilon": math.nan if eps is None else float(eps),
                             **summarize_differences(d)})
    return pd.DataFrame(rows, columns=[*by, *COLUMNS])


def _num(v: float, fmt: str = ".3g") -> str:
    """``v`` formatted; '' when missing; rounding noise (|v| < 1e-12) shown as 0."""
    if v is None or pd.isna(v):
        return ""
    return format(0.0 if abs(v) < 1e-12 else v, fmt)


def paired_markdown(diffs: pd.DataFrame, seeds: int, by: Sequence[str] = (), title: str = TITLE) -> list[str]:
    """The markdown lines of the "Paired differences over seeds" section: one row per claim and metric, and
    plainly "one seed: these rows are not a test" when ``seeds`` is 1."""
    lines = ["", f"## {title} {seeds_label(seeds)}", ""]
    if seeds == 1:
        lines += ["**One seed: these rows are not a test.** Each difference below is one training run against "
                  "another; rerun with `--seeds 3` (or more) for the mean, sd, 95% interval and Wilcoxon p.", ""]
    lines += [("Differences are oriented: positive means the claim's direction (better - worse where higher is "
               "better, worse - better where lower is better, e.g. FID, MSE, attack AUC); 'holds' = the 95% "
               "t-interval of the mean difference lies above 0 (3 seeds or more). "
               + (f"With {seeds} seeds the smallest one-sided Wilcoxon p is {0.5 ** seeds:.3g}." if seeds > 1
                  else "")).rstrip(), ""]
    if diffs is None or not len(diffs):
        return lines + ["(no claim could be paired: the runs lack one of the methods)", ""]
    head = [*by, "claim", "epsilon", "metric", "better is", "mean diff", "sd", "95% interval", "seeds won",
            "Wilcoxon p (one-sided)", "verdict"]
    lines += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for _, d in diffs.iterrows():
        interval = "" if pd.isna(d["ci_low"]) else f"[{_num(d['ci_low'], '+.4g')}, {_num(d['ci_high'], '+.4g')}]"
        cells = [*(str(d[c]) for c in by), d["claim"], _num(d["epsilon"], "g"), d["metric"], d["better_is"],
                 _num(d["mean_diff"], "+.4g"), _num(d["sd"], ".4g"), interval, f"{d['wins']}/{d['seeds']}",
                 _num(d["wilcoxon_p"]), d["verdict"]]
        lines.append("| " + " | ".join(cells) + " |")
    return lines + [""]


__all__ = ["COLUMNS", "HIGHER", "HOLDS", "LOWER", "NOT_SHOWN", "ONE_SEED", "Claim", "as_claim", "note_seeds", "oriented",
           "paired_differences", "paired_markdown", "seeds_label", "summarize_differences"]
