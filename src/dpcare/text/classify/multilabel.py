"""Multi-label ICD coding: the label set, the per-note loss, metrics and the decision threshold.

The label set is a function of the TRAINING labels only (``LabelSet.top_k``: the K most frequent
codes, as the MIMIC-III top-50 setting of CAML and FusionDP). Under FusionDP the label is PUBLIC:
only spans of the note text are private features (Zeng et al.: the public loss
``l(f(x_hybrid), y)`` reads the true label), so choosing the label set from the training labels
spends no privacy budget there; under sample-level DP-SGD the label is private and the label set
must come from public knowledge instead (e.g. a published code list, ``LabelSet(codes)``).

Metrics follow scikit-learn's definitions (checked in the tests): micro averages pool every
(note, code) decision; macro averages are the mean over codes, a per-code precision, recall or F1
whose denominator is zero counting as 0; macro AUC averages the codes whose targets hold both
classes (the others are skipped: their AUC is undefined).
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Iterable, Sequence

import numpy as np
import torch
import torch.nn.functional as F
from scipy.stats import rankdata
from torch import Tensor

from dpcare.exceptions import DataError

log = logging.getLogger(__name__)

THRESHOLD_GRID = np.round(np.arange(0.05, 1.0, 0.05), 2)


class LabelSet:
    """An ordered set of codes; ``train_counts``: how many training notes carry each code."""

    def __init__(self, codes: Sequence[str], train_counts: dict[str, int] | None = None):
        self.codes: tuple[str, ...] = tuple(codes)
        self.index = {c: i for i, c in enumerate(self.codes)}
        if len(self.index) != len(self.codes):
            raise DataError("duplicate codes in the label set")
        self.train_counts = dict(train_counts or {})

    @classmethod
    def top_k(cls, train_label_lists: Iterable[Iterable[str]], k: int) -> LabelSet:
        """The ``k`` codes carried by the most TRAINING notes (a code counted once per note; ties by
        code). Pass the training split's labels only: the set is a function of them."""
        counts = Counter(c for codes in train_label_lists for c in set(codes))
        top = sorted(counts, key=lambda c: (-counts[c], c))[:k]
        return cls(top, {c: counts[c] for c in top})

    def __len__(self) -> int:
        return len(self.codes)

    def missing_from_training(self) -> list[str]:
        """Codes of the set that no training note carries (only for a set given with counts)."""
        return [c for c in self.codes if self.train_counts and not self.train_counts.get(c)]

    def ignored(self, label_lists: Iterable[Iterable[str]]) -> Counter:
        """How often each code outside the set occurs in ``label_lists`` (what ``encode`` drops)."""
        return Counter(c for codes in label_lists for c in set(codes) if c not in self.index)

    def encode(self, label_lists: Sequence[Iterable[str]], strict: bool = False) -> Tensor:
        """Multi-hot targets [N, K] (float32). Codes outside the set are dropped (see ``ignored``);
        with ``strict`` a dropped code, or a code of the set no training note carries, is an error."""
        label_lists = [set(codes) for codes in label_lists]
        if strict:
            if missing := self.missing_from_training():
                raise DataError(f"{len(missing)} code(s) of the label set occur in no training note: "
                                f"{missing[:5]}")
            if outside := self.ignored(label_lists):
                raise DataError(f"{len(outside)} code(s) outside the label set: {sorted(outside)[:5]}")
        out = torch.zeros(len(label_lists), len(self.codes))
        for i, codes in enumerate(label_lists):
            out[i, [self.index[c] for c in codes if c in self.index]] = 1.0
        if dropped := sum(self.ignored(label_lists).values()):
            log.info("%d code occurrence(s) outside the %d-code label set ignored", dropped, len(self))
        return out


def per_example_bce(logits: Tensor, targets: Tensor) -> Tensor:
    """One loss per note [B]: binary cross-entropy with logits SUMMED over the codes (the negative
    log-likelihood of the note's code vector, each code an independent Bernoulli)."""
    return F.binary_cross_entropy_with_logits(logits, targets.to(logits.dtype), reduction="none").sum(1)


def _counts(pred: np.ndarray, true: np.ndarray, axis) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    tp = (pred & true).sum(axis)
    return tp, pred.sum(axis), true.sum(axis)


def _ratio(num: np.ndarray, den: np.ndarray) -> np.ndarray:
    num, den = np.asarray(num, float), np.asarray(den, float)
    return np.divide(num, den, out=np.zeros_like(num), where=den > 0)


def _prf(tp, n_pred, n_true) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    return _ratio(tp, n_pred), _ratio(tp, n_true), _ratio(2 * tp, n_pred + n_true)


def _auc(scores: np.ndarray, true: np.ndarray) -> np.ndarray:
    """ROC AUC of each column (Mann-Whitney, ties counted half); NaN where a column has one class."""
    ranks = rankdata(scores, axis=0)
    pos = true.sum(0).astype(float)
    neg = true.shape[0] - pos
    with np.errstate(invalid="ignore", divide="ignore"):
        auc = ((ranks * true).sum(0) - pos * (pos + 1) / 2) / (pos * neg)
    return np.where((pos > 0) & (neg > 0), auc, np.nan)


def _arrays(scores, targets) -> tuple[np.ndarray, np.ndarray]:
    s = scores.detach().cpu().double().numpy() if isinstance(scores, Tensor) else np.asarray(scores, float)
    t = targets.detach().cpu().numpy() if isinstance(targets, Tensor) else np.asarray(targets)
    if s.shape != t.shape or s.ndim != 2:
        raise DataError(f"scores {s.shape} and targets {t.shape} must both be [notes, codes]")
    return s, t.astype(bool)


def multilabel_metrics(scores, targets, threshold: float = 0.5) -> dict[str, float]:
    """Micro and macro precision, recall, F1 (a code predicted where score >= ``threshold``) and
    ROC AUC. ``scores`` are probabilities (sigmoid of the logits) [N, K]; ``targets`` multi-hot."""
    s, t = _arrays(scores, targets)
    pred = s >= threshold
    out = {}
    for avg, axis in (("micro", None), ("macro", 0)):
        p, r, f1 = _prf(*_counts(pred, t, axis))
        out.update({f"precision_{avg}": float(np.mean(p)), f"recall_{avg}": float(np.mean(r)),
                    f"f1_{avg}": float(np.mean(f1))})
    per_code = _auc(s, t)
    out["auc_micro"] = float(_auc(s.reshape(-1, 1), t.reshape(-1, 1))[0])
    out["auc_macro"] = float(np.nanmean(per_code)) if np.isfinite(per_code).any() else float("nan")
    return out


def choose_threshold(scores, targets, grid: Sequence[float] = THRESHOLD_GRID) -> float:
    """The threshold of ``grid`` with the best micro F1 (the smallest on ties). It READS THE LABELS
    of the notes it is given: choose it on the validation split (never the test split); under
    sample-level DP those labels are private, and their use has to be public or accounted for."""
    s, t = _arrays(scores, targets)
    f1 = [float(_prf(*_counts(s >= g, t, None))[2]) for g in grid]
    return float(grid[int(np.argmax(f1))])
