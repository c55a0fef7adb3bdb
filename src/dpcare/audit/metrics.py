"""Membership-inference metrics: AUC, TPR at low FPR, balanced accuracy, bootstrap intervals, ROC plot."""

from __future__ import annotations

import os

import numpy as np
from sklearn.metrics import roc_auc_score, roc_curve

from dpcare.exceptions import DataError
from dpcare.io import new_figure, save_figure


def tpr_at_fpr(labels: np.ndarray, scores: np.ndarray, fpr_target: float) -> float:
    fpr, tpr, _ = roc_curve(labels, scores)
    ok = fpr <= fpr_target
    return float(tpr[ok].max()) if ok.any() else 0.0


def best_balanced_accuracy(labels: np.ndarray, scores: np.ndarray) -> float:
    fpr, tpr, _ = roc_curve(labels, scores)
    return float(((tpr + 1 - fpr) / 2).max())


def _point(labels, scores) -> dict[str, float]:
    return {"auc": float(roc_auc_score(labels, scores)), "tpr_at_1pct_fpr": tpr_at_fpr(labels, scores, 0.01),
            "tpr_at_0.1pct_fpr": tpr_at_fpr(labels, scores, 0.001),
            "balanced_accuracy": best_balanced_accuracy(labels, scores)}


def attack_metrics(member_scores: np.ndarray, nonmember_scores: np.ndarray, bootstrap: int = 200,
                   seed: int = 0) -> dict[str, dict[str, float]]:
    """Each metric with a 95% bootstrap interval (members and non-members resampled separately).

    Scores: higher means "more likely a member"."""
    member_scores, nonmember_scores = np.asarray(member_scores, float), np.asarray(nonmember_scores, float)
    if len(member_scores) == 0 or len(nonmember_scores) == 0:
        raise DataError("members and non-members must both be non-empty")
    labels = np.r_[np.ones(len(member_scores)), np.zeros(len(nonmember_scores))]
    point = _point(labels, np.r_[member_scores, nonmember_scores])
    rng = np.random.default_rng(seed)
    draws = {k: [] for k in point}
    for _ in range(bootstrap):
        m = rng.choice(member_scores, len(member_scores))
        n = rng.choice(nonmember_scores, len(nonmember_scores))
        for k, v in _point(labels, np.r_[m, n]).items():
            draws[k].append(v)
    return {k: {"value": v, "low": float(np.percentile(draws[k], 2.5)), "high": float(np.percentile(draws[k], 97.5))}
            for k, v in point.items()}


def plot_roc(curves: dict[str, tuple[np.ndarray, np.ndarray]], path: str | os.PathLike, title: str = "") -> None:
    """Log-log ROC curves: {name: (member_scores, nonmember_scores)}."""
    fig, ax = new_figure((4.5, 4.2))
    for name, (m, n) in curves.items():
        labels = np.r_[np.ones(len(m)), np.zeros(len(n))]
        fpr, tpr, _ = roc_curve(labels, np.r_[m, n])
        ax.plot(fpr, tpr, label=f"{name} (AUC {roc_auc_score(labels, np.r_[m, n]):.3f})")
    ax.plot([1e-4, 1], [1e-4, 1], "k--", linewidth=0.8, label="chance")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(1e-3, 1)
    ax.set_ylim(1e-3, 1)
    ax.set_xlabel("false positive rate")
    ax.set_ylabel("true positive rate")
    ax.set_title(title)
    ax.legend(fontsize=7)
    save_figure(fig, path)


def clustered_auc_interval(member_scores: np.ndarray, member_groups: np.ndarray, nonmember_scores: np.ndarray,
                           nonmember_groups: np.ndarray, draws: int = 500, seed: int = 0) -> list[float]:
    """95% bootstrap interval of the AUC resampling whole groups (patients), members and non-members
    separately: windows of one patient are correlated, so resampling windows understates the spread."""
    m, n = np.asarray(member_scores, float), np.asarray(nonmember_scores, float)
    mg, ng = np.asarray(member_groups), np.asarray(nonmember_groups)
    if len(m) != len(mg) or len(n) != len(ng):
        raise DataError("one group label per score is needed")
    m_idx = [np.flatnonzero(mg == g) for g in np.unique(mg)]
    n_idx = [np.flatnonzero(ng == g) for g in np.unique(ng)]
    rng = np.random.default_rng(seed)
    aucs = []
    for _ in range(draws):
        ms = m[np.concatenate([m_idx[i] for i in rng.integers(0, len(m_idx), len(m_idx))])]
        ns = n[np.concatenate([n_idx[i] for i in rng.integers(0, len(n_idx), len(n_idx))])]
        aucs.append(roc_auc_score(np.r_[np.ones(len(ms)), np.zeros(len(ns))], np.r_[ms, ns]))
    return [float(np.percentile(aucs, 2.5)), float(np.percentile(aucs, 97.5))]


#: attack_metrics keys -> the names a report shows
METRIC_NAMES = {"auc": "AUC", "tpr_at_1pct_fpr": "TPR @ 1% FPR", "tpr_at_0.1pct_fpr": "TPR @ 0.1% FPR",
                "balanced_accuracy": "balanced accuracy"}


def attack_row(model: str, metrics: dict[str, dict[str, float]], **extra) -> dict:
    """One report row of an attack: each metric as [value, low, high] under its display name."""
    return {"model": model, **{name: [metrics[k]["value"], metrics[k]["low"], metrics[k]["high"]]
                               for k, name in METRIC_NAMES.items() if k in metrics}, **extra}


def attack_payload(title: str, rows: list[dict], curves: dict[str, tuple], **extra) -> dict:
    """An attack file's content (:mod:`dpcare.runs.manifest`): rows and ROC scores (higher = member)."""
    return {"title": title, "rows": rows, "curves": {m: {"members": [float(x) for x in a],
                                                         "nonmembers": [float(x) for x in b]}
                                                     for m, (a, b) in curves.items()}, **extra}

