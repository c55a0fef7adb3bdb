"""The LOSS membership-inference attack (Yeom et al. 2018), as in
Fracarolli et al. (ML4H 2025), Section 4: predict "member" when an example's
loss is below the mean training loss; report TPR, FPR, their ratio, and the ROC
over all thresholds."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

from dpcare.audit.metrics import attack_metrics
from dpcare.exceptions import DataError


def per_example_losses(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor,
                       loss_fn: Callable | None = None) -> np.ndarray:
    """Per-example task loss of a torch model (or ``loss_fn(model, x, y)``) in eval mode."""
    from dpcare.methods import task_loss

    model.eval()
    with torch.no_grad():
        losses = loss_fn(model, x, y) if loss_fn else task_loss(model(x), y)
    return losses.detach().cpu().numpy().astype(float)


def sklearn_losses(model, x, y) -> np.ndarray:
    """Per-example log loss of a fitted scikit-learn classifier with ``predict_proba``."""
    if not hasattr(model, "predict_proba"):
        raise TypeError(f"{type(model).__name__} has no predict_proba: pass per-example losses instead")
    proba = np.asarray(model.predict_proba(x), float)
    idx = np.searchsorted(model.classes_, np.asarray(y))
    return -np.log(np.clip(proba[np.arange(len(idx)), idx], 1e-12, 1.0))


@dataclass
class LossAttackResult:
    threshold: float
    tpr: float
    fpr: float
    tpr_fpr_ratio: float
    metrics: dict[str, dict[str, float]]
    member_losses: np.ndarray
    nonmember_losses: np.ndarray

    def to_dict(self) -> dict:
        return {"attack": "loss", "threshold": self.threshold, "tpr": self.tpr, "fpr": self.fpr,
                "tpr_fpr_ratio": self.tpr_fpr_ratio, "metrics": self.metrics,
                "members": len(self.member_losses), "nonmembers": len(self.nonmember_losses)}


def loss_attack(member_losses: np.ndarray, nonmember_losses: np.ndarray, bootstrap: int = 200) -> LossAttackResult:
    m, n = np.asarray(member_losses, float), np.asarray(nonmember_losses, float)
    if len(m) == 0 or len(n) == 0:
        raise DataError("the LOSS attack needs non-empty member and non-member sets")
    if not (np.isfinite(m).all() and np.isfinite(n).all()):
        raise DataError("losses contain NaN or infinite values")
    threshold = float(m.mean())
    tpr, fpr = float((m <= threshold).mean()), float((n <= threshold).mean())
    ratio = tpr / fpr if fpr > 0 else float("inf")
    return LossAttackResult(threshold, tpr, fpr, ratio, attack_metrics(-m, -n, bootstrap=bootstrap), m, n)
