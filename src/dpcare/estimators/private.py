"""``make_private``: DP training of your own torch model and per-example loss on dpcare's engine.

In the spirit of Opacus' ``PrivacyEngine.make_private``, but the result is dpcare's
:class:`~dpcare.engine.Trainer` (Poisson sampling, per-example clipping, Gaussian noise) with a
:class:`~dpcare.privacy.PrivacyLedger` as ``.ledger``::

    trainer = make_private(model, nn.CrossEntropyLoss(reduction="none"), {"x": X, "y": Y}, epsilon=1.0)
    result = trainer.fit()          # trains on the data given above
    print(trainer.ledger.guarantee().describe())
"""

from __future__ import annotations

import math
import secrets
from collections.abc import Callable, Mapping

import torch
from torch import Tensor, nn

from dpcare.engine import Objective, TrainConfig, Trainer, TrainResult
from dpcare.engine.clip import check_losses
from dpcare.exceptions import DataError, PrivacyParameterError, SettingsError
from dpcare.privacy import PrivacyLedger, ProtectedUnit, check_epsilon
from dpcare.settings import ComputeSettings, DPSettings

KEYS = ("x", "y")
DP_KEYS = ("steps", "seed", "noise_seed")  # DPSettings fields make_private takes as keywords
COMPUTE_KEYS = ("device", "precision")  # ComputeSettings fields
NOT_KEYWORDS = {"dp", "compute", "lr", "noise_multiplier"}  # TrainConfig fields made here or given by name


class LossObjective(Objective):
    """A criterion ``loss_fn(model(batch["x"]), batch["y"])`` returning one loss per example."""

    name = "custom loss"
    private_keys = KEYS

    def __init__(self, loss_fn: Callable[[Tensor, Tensor], Tensor]):
        reduction = getattr(loss_fn, "reduction", "none")
        if reduction != "none":
            raise SettingsError(f"loss_fn reduces over the batch (reduction={reduction!r}); DP training clips each "
                                "example's gradient, so pass per-example losses, e.g. "
                                "nn.CrossEntropyLoss(reduction='none')")
        self.loss_fn = loss_fn

    def private_loss(self, model, batch) -> Tensor:
        losses = self.loss_fn(model(batch["x"]), batch["y"])
        if losses.dim() == 0:
            raise SettingsError("loss_fn returned a scalar (a mean or sum over the batch?); it must return one loss "
                                "per example, shape [batch], e.g. nn.CrossEntropyLoss(reduction='none')")
        if losses.dim() == 2 and losses.shape[1] == 1:  # e.g. BCEWithLogitsLoss on [B, 1] logits and targets
            losses = losses[:, 0]
        return losses

    def check(self, model: nn.Module, data: Mapping[str, Tensor]) -> None:
        """Fail now, not mid-training, if the loss of the first two rows is not one value per row."""
        probe = {k: data[k][:2] for k in KEYS}
        with torch.no_grad():
            check_losses(self.private_loss(model, probe), len(probe["x"]))

    def __repr__(self) -> str:
        return f"LossObjective({self.loss_fn!r})"


class PrivateTrainer(Trainer):
    """A :class:`Trainer` bound to the data its ledger counts: ``fit()`` trains on them."""

    def __init__(self, model: nn.Module, objective: Objective, config: TrainConfig, ledger: PrivacyLedger,
                 data: Mapping[str, Tensor], groups: Tensor | None = None):
        super().__init__(model, objective, config, ledger)
        self.data, self.groups = data, groups

    def fit(self, private_data: Mapping[str, Tensor] | None = None, public_data: Mapping[str, Tensor] | None = None,
            groups: Tensor | None = None) -> TrainResult:
        """Train on the data given to ``make_private`` (or on other data with as many privacy units)."""
        data = self.data if private_data is None else private_data
        groups = self.groups if groups is None else groups
        n = _units(data, groups)
        if n != self.ledger.n:
            raise DataError(f"the ledger counts {self.ledger.n} privacy units but fit() got {n}; call make_private "
                            "with the data you train on")
        return super().fit(data, public_data, groups)


def make_private(model: nn.Module, loss_fn: Callable[[Tensor, Tensor], Tensor], data: Mapping[str, Tensor], *,
                 epsilon: float | None = None, noise_multiplier: float | None = None, delta: float | None = None,
                 clip_norm: float = 1.0, batch_size: int = 256, epochs: float = 10.0, lr: float | None = None,
                 groups: Tensor | None = None, accountant: str = "pld", **config) -> PrivateTrainer:
    """A trainer that fits ``model`` on ``data`` (``{"x": inputs, "y": targets}``, one row per example)
    with DP-SGD.

    Give exactly one of ``epsilon`` (the noise multiplier is calibrated so the whole run stays
    within it) and ``noise_multiplier``. ``delta`` defaults to min(1e-5, 0.01/n) and must be < 1/n.
    ``loss_fn(outputs, targets)`` must return one loss per example. ``groups`` (one integer per
    row) makes each patient, not each row, the privacy unit (n counts patients). ``lr`` None: Adam's
    (and AdamW's) learning rate by :func:`default_lr` from the run's number of steps; give it with
    ``optimizer="sgd"``. Other keyword arguments: ``steps``, ``seed`` and ``noise_seed``
    (:class:`~dpcare.settings.DPSettings`), ``device`` and ``precision`` (:class:`~dpcare.settings.ComputeSettings`)
    and the engine's own :class:`~dpcare.engine.TrainConfig` fields (optimizer, weight_decay, progress, ...).
    """
    if (epsilon is None) == (noise_multiplier is None):
        raise PrivacyParameterError("give exactly one of epsilon (the noise is calibrated to it) and "
                                    "noise_multiplier")
    if epsilon is not None:
        check_epsilon(epsilon)
    missing = [k for k in KEYS if k not in data]
    if missing:
        raise DataError(f"data lacks the keys {missing}: pass {{'x': inputs, 'y': targets}} (got {sorted(data)})")
    _check_tensors(data, groups)
    allowed = set(DP_KEYS) | set(COMPUTE_KEYS) | set(TrainConfig.__dataclass_fields__) - NOT_KEYWORDS
    unknown = sorted(set(config) - allowed)
    if unknown:
        raise SettingsError(f"unknown training settings {unknown}; make_private takes epsilon= and these: "
                            f"{sorted(allowed)}")
    unit = ProtectedUnit.PATIENT if groups is not None else ProtectedUnit.EXAMPLE
    n = _units(data, groups)
    if lr is None:
        if config.get("optimizer", "adam") == "sgd":
            raise SettingsError("give lr= with optimizer='sgd' (the default learning rate is a rule for Adam)")
        steps = config.get("steps") or math.ceil(epochs * n / batch_size)
        lr = default_lr(steps)
    ledger = PrivacyLedger(n, delta=delta, accountant=accountant, unit=unit)
    objective = LossObjective(loss_fn)
    objective.check(model, data)
    target = {} if epsilon is None else {"epsilon": epsilon}
    if "seed" in config and config["seed"] is None:  # fresh randomness for the public seed, as before
        config["seed"] = secrets.randbits(62)
    dp = DPSettings(batch_size=batch_size, epochs=epochs, clip_norm=clip_norm, delta=delta, accountant=accountant,
                    unit=unit.value, **target, **{k: config.pop(k) for k in DP_KEYS if k in config})
    compute = ComputeSettings(**{k: config.pop(k) for k in COMPUTE_KEYS if k in config})
    settings = TrainConfig(dp=dp, compute=compute, lr=lr, noise_multiplier=noise_multiplier, **config)
    return PrivateTrainer(model, objective, settings, ledger, data, groups)


def default_lr(steps: int) -> float:
    """Adam's learning rate for a DP-SGD run of ``steps`` steps: 0.5 / sqrt(steps).

    Adam moves each weight by about ``lr`` a step. On gradients that are mostly noise (DP-SGD's, late in a run)
    the moves are a random walk, which drifts about ``lr * sqrt(steps)``; this rule holds that drift at 0.5,
    while a consistent gradient can still move a weight ``0.5 * sqrt(steps)``. Measured with ``make_private`` at
    epsilon 2 on a linearly separable 600-row task (tests/test_estimators.py, 3 seeds): 0.95-0.97 train
    accuracy for a linear model and a 64-unit MLP after 24-375 steps, against 0.98-1.00 without privacy;
    the former fixed default 1e-3 reached 0.53-0.77 in 29 steps."""
    return 0.5 / math.sqrt(max(1, int(steps)))


def _units(data: Mapping[str, Tensor], groups: Tensor | None) -> int:
    """Privacy units: rows, or distinct patients in ``groups``."""
    return len(torch.unique(groups)) if groups is not None else next(iter(data.values())).shape[0]


def _check_tensors(data: Mapping[str, Tensor], groups: Tensor | None) -> None:
    """One row per example in every tensor (and in ``groups``), no NaN or infinity: refused before training."""
    rows = {k: (v.shape[0] if isinstance(v, Tensor) and v.dim() else None) for k, v in data.items()}
    bad = sorted(k for k, r in rows.items() if r is None)
    if bad:
        raise DataError(f"data[{bad[0]!r}] is not a tensor with one row per example")
    if len(set(rows.values())) != 1:
        raise DataError(f"the tensors of data have different numbers of rows: {rows}")
    for k, v in data.items():
        if v.is_floating_point() and not bool(torch.isfinite(v).all()):
            raise DataError(f"data[{k!r}] holds {int((~torch.isfinite(v)).sum())} NaN or infinite values")
    if groups is not None and tuple(groups.shape) != (next(iter(rows.values())),):
        raise DataError(f"groups must hold one patient label per row: shape ({next(iter(rows.values()))},), got "
                        f"{tuple(groups.shape)}")

