"""Objectives for tabular prediction: non-private, DP-SGD, Feature-DP and Label-DP.

Feature-DP follows Algorithm 1 of Mahloujifar et al.: with ``pad(Psi(x))`` the row
whose private features are replaced by Gaussian noise (or zeros),

    l_priv(x) = l(x) - l(pad(Psi(x)))      clipped and noised, Poisson batch
    l_pub(x)  = l(pad(Psi(x)))             exact gradient, separate uniform batch

so that l = l_priv + l_pub. Label-DP is the paper's case study: the public loss
is the label-free part of the cross-entropy (logsumexp of the logits, or
softplus for one logit) and the private loss is the rest, -z_y (Section 5).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor

from dpcare.engine.objective import Batch, Model, Objective
from dpcare.exceptions import SettingsError
from dpcare.privacy import ProtectedUnit
from dpcare.registry import Registry


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


#: a per-example loss: (logits [B, ...], targets [B, ...]) -> [B]
LossFn = Callable[[Tensor, Tensor], Tensor]


class DPSGD(Objective):
    """Whole-example DP: every feature and the label are protected. ``loss``: the per-example loss
    (default :func:`task_loss`; multi-label notes use ``dpcare.text.classify.multilabel.per_example_bce``)."""

    name = "dp-sgd"

    def __init__(self, loss: LossFn = task_loss):
        self.loss = loss

    def private_loss(self, model: Model, batch: Batch) -> Tensor:
        return self.loss(model(batch["x"]), batch["y"])


class NonPrivate(DPSGD):
    """The same loss trained without clipping, noise or accounting."""

    name = "non-private"
    private = False


class HybridObjective(Objective):
    """l_priv = l(x) - [l(r)] + beta ||h(x) - h(r)||^2 and l_pub = l(v), for a reference view r
    (or none) and a public view v: the hybrid family of Zeng et al. (FusionDP), Feature-DP included."""

    unit = ProtectedUnit.FEATURES
    has_public_branch = True

    def __init__(self, name: str, reference: str | None, public_view: str, beta: float = 0.0,
                 loss: LossFn = task_loss):
        if beta < 0:
            raise SettingsError(f"beta must be >= 0, got {beta}")
        if beta and reference is None:
            raise SettingsError("the consistency term needs a reference view")
        self.name, self.reference, self.public_view, self.beta = name, reference, public_view, beta
        self.loss = loss
        self.private_keys = tuple(dict.fromkeys(["x", "y", *([reference] if reference else [])]))
        self.public_keys = (public_view, "y")

    def private_loss(self, model: Model, batch: Batch) -> Tensor:
        loss, y = self.loss, batch["y"]
        if self.reference is None:
            return loss(model(batch["x"]), y)
        if not self.beta:
            return loss(model(batch["x"]), y) - loss(model(batch[self.reference]), y)
        out, h = model(batch["x"], return_hidden=True)
        out_r, h_r = model(batch[self.reference], return_hidden=True)
        return loss(out, y) - loss(out_r, y) + self.beta * (h - h_r).pow(2).sum(1)

    def public_loss(self, model: Model, batch: Batch) -> Tensor:
        return self.loss(model(batch[self.public_view]), batch["y"])

    def __repr__(self) -> str:
        return f"HybridObjective({self.name!r}, reference={self.reference!r}, public={self.public_view!r}, beta={self.beta})"


class FeatureDP(HybridObjective):
    """Feature-level DP relative to the public columns (Algorithm 1 of Mahloujifar et al.):
    l_priv = l(x) - l(pad(Psi(x))), l_pub = l(pad(Psi(x)))."""

    name = "feature-dp"

    def __init__(self, loss: LossFn = task_loss):
        super().__init__("feature-dp", reference="x_pub", public_view="x_pub", loss=loss)


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


#: the objectives of the tabular methods, by method name
OBJECTIVES: Registry[type[Objective]] = Registry("method")
for _cls in (NonPrivate, DPSGD, FeatureDP, LabelDP):
    OBJECTIVES.add(_cls.name, _cls)


def make_objective(name: str) -> Objective:
    """A fresh objective of the tabular method ``name``."""
    return OBJECTIVES.get(name)()
