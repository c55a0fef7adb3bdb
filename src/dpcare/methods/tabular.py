"""Objectives for tabular prediction: non-private, DP-SGD, Feature-DP and Label-DP.

Feature-DP follows Algorithm 1 of feature-dp.txt: with ``pad(Psi(x))`` the row
whose private features are replaced by Gaussian noise (or zeros),

    l_priv(x) = l(x) - l(pad(Psi(x)))      clipped and noised, Poisson batch
    l_pub(x)  = l(pad(Psi(x)))             exact gradient, separate uniform batch

so that l = l_priv + l_pub. Label-DP is the paper's case study: the public loss
is the label-free part of the cross-entropy (logsumexp of the logits, or
softplus for one logit) and the private loss is the rest, -z_y (Section 5).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from dpcare.engine.objective import Batch, Model, Objective
from dpcare.privacy import ProtectedUnit


def task_loss(logits: Tensor, y: Tensor) -> Tensor:
    """Per-example loss: BCE-with-logits for one logit, cross-entropy otherwise."""
    if logits.dim() == 2 and logits.shape[1] == 1:
        return F.binary_cross_entropy_with_logits(logits[:, 0], y.to(logits.dtype), reduction="none")
    return F.cross_entropy(logits, y.long(), reduction="none")


def label_free_loss(logits: Tensor) -> Tensor:
    """The part of the cross-entropy that does not read the label."""
    if logits.dim() == 2 and logits.shape[1] == 1:
        return F.softplus(logits[:, 0])
    return torch.logsumexp(logits, dim=1)


def label_term(logits: Tensor, y: Tensor) -> Tensor:
    """-z_y: cross-entropy minus its label-free part."""
    if logits.dim() == 2 and logits.shape[1] == 1:
        return -y.to(logits.dtype) * logits[:, 0]
    return -logits.gather(1, y.long()[:, None])[:, 0]


class DPSGD(Objective):
    """Whole-example DP: every feature and the label are protected."""

    name = "dp-sgd"

    def private_loss(self, model: Model, batch: Batch) -> Tensor:
        return task_loss(model(batch["x"]), batch["y"])


class NonPrivate(DPSGD):
    """The same loss trained without clipping, noise or accounting."""

    name = "non-private"
    private = False


class FeatureDP(Objective):
    """Feature-level DP relative to the public columns (Algorithm 1 of feature-dp.txt)."""

    name = "feature-dp"
    unit = ProtectedUnit.FEATURES
    has_public_branch = True
    private_keys = ("x", "x_pub", "y")
    public_keys = ("x_pub", "y")

    def private_loss(self, model: Model, batch: Batch) -> Tensor:
        return task_loss(model(batch["x"]), batch["y"]) - task_loss(model(batch["x_pub"]), batch["y"])

    def public_loss(self, model: Model, batch: Batch) -> Tensor:
        return task_loss(model(batch["x_pub"]), batch["y"])


class LabelDP(Objective):
    """Label DP: features are public, only the label is protected."""

    name = "label-dp"
    unit = ProtectedUnit.LABEL
    has_public_branch = True
    private_keys = ("x", "y")
    public_keys = ("x",)

    def private_loss(self, model: Model, batch: Batch) -> Tensor:
        return label_term(model(batch["x"]), batch["y"])

    def public_loss(self, model: Model, batch: Batch) -> Tensor:
        return label_free_loss(model(batch["x"]))


OBJECTIVES = {cls.name: cls for cls in (NonPrivate, DPSGD, FeatureDP, LabelDP)}


def make_objective(name: str) -> Objective:
    try:
        return OBJECTIVES[name]()
    except KeyError:
        raise ValueError(f"unknown method {name!r}; choose one of {sorted(OBJECTIVES)}") from None
