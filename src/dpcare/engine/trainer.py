"""The one private training loop of dpcare (design.md, "One engine, many objectives").

Per step::

    B_priv ~ Poisson(q)                          independent inclusion, may be empty
    g_priv = (sum_i clip_C(grad l_priv(x_i)) + N(0, sigma^2 C^2)) / (q n)
    B_pub  ~ uniform, size m'                    own generator, public columns only
    g      = g_pub + alpha * g_priv              (g = g_priv without a public branch)

The sum is divided by the EXPECTED batch size q n, never the realised one
(dividing by the realised size leaks it and breaks the accounting). One ledger
charge per private step; public-only pretraining steps are free (Mahloujifar et al.,
Remark 2).

Grouped examples (``fit(..., groups=)``): the privacy unit is a patient with several rows
(forecasting windows, note windows). Poisson sampling draws patients at rate q = m / patients, a
patient's rows are clipped as ONE gradient (the sum of its rows' gradients), the noisy sum is divided
by the expected number of patients q P, and the guarantee names the patient.

``TrainConfig.ema_decay``: the trainer also keeps an exponential moving average of the weights
(ema <- decay ema + (1 - decay) w after every step) and ``fit`` leaves the model holding it. The
average is a function of the released iterates only, so it is post-processing: no privacy cost.

``TrainConfig.adaptive_clip``: private adaptive clipping (Andrew et al. 2021, :mod:`dpcare.engine.adaptive_clip`):
C follows a target quantile of the per-unit gradient norms, estimated from a noisy count; ``clip_norm``
is the initial C, and the count is charged as set by ``AdaptiveClip.accounting``.
"""

from __future__ import annotations

import logging
import math
import time
import warnings
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from dpcare.caller import user_stacklevel
from dpcare.engine import checkpoint as ckpt
from dpcare.engine.adaptive_clip import WARMUP, AdaptiveClip, QuantileEstimator
from dpcare.engine.clip import check_losses, clip_factors
from dpcare.engine import distributed
from dpcare.engine.devices import autocast, check_precision, resolve_device, to_float32
from dpcare.engine.fast_clipping import clipped_sum_fast, unsupported_reason
from dpcare.engine.functorch_backend import clipped_sum_functorch
from dpcare.engine.noise import Stream, seeded_generator
from dpcare.engine.objective import Objective
from dpcare.engine.sampling import UnitIndex, chunks, poisson_indices, take, uniform_indices
from dpcare.exceptions import DataError, SettingsError
from dpcare.privacy import Guarantee, PrivacyLedger, ProtectedUnit, check_noise_multiplier, secret_seed
from dpcare.privacy.randomness import sub_root
from dpcare.progress import progress as tqdm
from dpcare.settings import ComputeSettings, DPSettings

log = logging.getLogger(__name__)

CHECKPOINT_NAME = "checkpoint.pt"


@dataclass
class TrainConfig:
    """One run of the engine: the DP settings and the compute settings THEMSELVES (the objects a recipe holds,
    validated once when they were made: epsilon, delta, accountant, C, the expected batch, epochs or steps, the
    seeds, the unit; the device and precision), and the engine's own knobs (optimiser, public branch, memory,
    checkpoints). A private objective calibrates its noise to ``dp.epsilon`` unless ``noise_multiplier`` fixes
    sigma (audits, timings, tests); a ledger the trainer makes takes ``dp.delta`` and ``dp.accountant``, and a
    ledger given to it must agree with them. A non-private objective reads only the schedule (batch, epochs or
    steps, seed)."""

    dp: DPSettings = field(default_factory=DPSettings)
    compute: ComputeSettings = field(default_factory=ComputeSettings)
    public_batch_size: int | None = None  # m'; default = dp.batch_size
    lr: float = 1e-3
    optimizer: str = "adam"  # adam | adamw | sgd
    momentum: float = 0.9
    weight_decay: float = 0.0
    noise_multiplier: float | None = None  # a fixed sigma instead of calibrating to dp.epsilon
    alpha: float = 1.0
    max_physical_batch: int = 1024
    public_pretrain_steps: int = 0
    backend: str = "auto"  # auto | fast | functorch
    # resume point: checkpoint.pt and (dp.noise_seed None) the secret root; both determine the noise, so delete the
    # folder, or keep it as private as the data, once the run is done (a RunFolder's finish() deletes it)
    checkpoint_dir: str | None = None
    checkpoint_every: int = 100
    checkpoint_seconds: float = 600.0  # and when this long has passed since the last one (long steps: an LM on a CPU)
    progress: bool = True
    ema_decay: float | None = None  # keep an exponential moving average of the weights; fit() ends with it
    # private adaptive clipping's engine settings; None: dp.adaptive_clip's quantile with the defaults, or a fixed C
    adaptive_clip: AdaptiveClip | None = None
    # a fixed Poisson rate q instead of dp.batch_size / n (the one-run audit: the rate planned before the canaries
    # were drawn, so that it does not depend on how many were included); the expected batch is then q n
    sampling_rate: float | None = None

    def clipping(self, private: bool) -> AdaptiveClip | None:
        """The adaptive clipping a private objective runs: ``adaptive_clip``, else ``dp.adaptive_clip``'s quantile."""
        if self.adaptive_clip is not None:
            return self.adaptive_clip
        return AdaptiveClip(target_quantile=self.dp.adaptive_clip) if private and self.dp.adaptive_clip else None

    def with_schedule(self, **changes: Any) -> TrainConfig:
        """A copy whose DP settings take ``changes`` (batch_size, epochs, steps, seed...), validated as settings."""
        return replace(self, dp=self.dp.replace(**changes))

    def validate(self, objective: Objective) -> None:
        """The engine's own knobs (the DP and compute settings validated themselves when they were made)."""
        if not isinstance(self.dp, DPSettings) or not isinstance(self.compute, ComputeSettings):
            raise SettingsError("TrainConfig takes dp=DPSettings(...) and compute=ComputeSettings(...), got "
                                f"{type(self.dp).__name__} and {type(self.compute).__name__}")
        positive = {"lr": self.lr, "max_physical_batch": self.max_physical_batch,
                    "checkpoint_every": self.checkpoint_every, "checkpoint_seconds": self.checkpoint_seconds}
        for name, value in positive.items():
            if not (isinstance(value, (int, float)) and math.isfinite(value) and value > 0):
                raise SettingsError(f"{name} must be a positive number, got {value!r}")
        if self.ema_decay is not None and not (0 <= self.ema_decay < 1):
            raise SettingsError(f"ema_decay must be in [0, 1), got {self.ema_decay!r}")
        if self.alpha < 0 or not math.isfinite(self.alpha):
            raise SettingsError(f"alpha must be >= 0, got {self.alpha!r}")
        if self.backend not in ("auto", "fast", "functorch"):
            raise SettingsError(f"backend must be auto, fast or functorch, got {self.backend!r}")
        if self.optimizer not in ("adam", "adamw", "sgd"):
            raise SettingsError(f"optimizer must be adam, adamw or sgd, got {self.optimizer!r}")
        if objective.private and self.noise_multiplier is not None:
            check_noise_multiplier(self.noise_multiplier)
        if self.sampling_rate is not None and not (0 < self.sampling_rate <= 1):
            raise SettingsError(f"sampling_rate must be in (0, 1], got {self.sampling_rate!r}")
        clipping = self.clipping(objective.private)
        if clipping is not None:
            if not objective.private:
                raise SettingsError("adaptive_clip needs a private objective")
            clipping.validate()


def check_ledger_agrees(ledger: PrivacyLedger, dp: DPSettings) -> None:
    """A ledger made elsewhere must compose as the DP settings say: their accountant, and their delta when set."""
    if ledger.accountant != dp.accountant or (dp.delta is not None and ledger.delta != dp.delta):
        raise SettingsError(f"the ledger composes with accountant {ledger.accountant!r} at delta {ledger.delta:g} "
                            f"but the DP settings say accountant {dp.accountant!r}, delta {dp.delta}: build the "
                            "ledger from the same settings")


@dataclass
class TrainResult:
    steps: int
    sampling_rate: float
    noise_multiplier: float | None
    guarantee: Guarantee | None
    backend: str
    history: list[dict[str, float]] = field(default_factory=list)
    ledger: PrivacyLedger | None = None  # every charge of the run (private objectives)
    clip_norm: float | None = None  # the last clip norm: the setting, or the adaptive estimate
    gradient_noise_multiplier: float | None = None  # noise on the gradient sum / C (differs under the "split")


class Trainer:
    """Runs an :class:`Objective` on a model with the privacy accounting of ``ledger``.

    ``private_data`` and ``public_data`` map keys (``x``, ``x_pub``, ``y``...) to tensors
    with one row per example. The public branch only ever sees ``public_data``.
    """

    def __init__(
        self,
        model: nn.Module,
        objective: Objective,
        config: TrainConfig,
        ledger: PrivacyLedger | None = None,
        optimizer_factory: Callable[[list[nn.Parameter]], torch.optim.Optimizer] | None = None,
    ):
        config.validate(objective)
        if objective.private:
            _refuse_batch_norm(model)
        self.device = resolve_device(config.compute.device)
        check_precision(config.compute.precision, self.device)
        self.model, self.objective, self.config, self.ledger = model.to(self.device), objective, config, ledger
        self.units: UnitIndex | None = None  # set by fit(groups=...): rows grouped into privacy units
        self.trainable = {n: p for n, p in model.named_parameters() if p.requires_grad}
        if not self.trainable:
            raise SettingsError("the model has no trainable parameters (all have requires_grad=False)")
        self.optimizer = (optimizer_factory or self._default_optimizer)(list(self.trainable.values()))
        self.backend = self._choose_backend()
        if self.precision == "bf16" and self.backend == "functorch":
            warnings.warn("precision bf16 applies to the fast clipping backend; this model trains with the torch.func "
                          "backend, whose per-example gradients are computed in fp32 (torch's vmap cannot "
                          "differentiate LayerNorm under autocast)", stacklevel=user_stacklevel())
        self.noise_multiplier: float | None = config.noise_multiplier
        self.rank, self.world_size = distributed.world()
        # one seed for every rank (rank 0's): the same Poisson draw, the same noise vector (engine/distributed.py).
        # The public seed (recorded) seeds public sampling and the model's randomness; a private objective's
        # sampling and every noise come from the secret root (noise_seed, or OS entropy kept in the checkpoint
        # folder for a resume: privacy/randomness.py). A non-private run's batches are public randomness.
        seed = distributed.from_main(self.dp.seed)
        self._gens = {"public": seeded_generator(sub_root(seed, "public sampling"))}
        if objective.private:  # secret streams (engine/noise.py): secure unless a noise seed is pinned
            root = secret_seed(self.dp.noise_seed, config.checkpoint_dir if self.rank == 0 else None)
            secure = self.dp.noise_seed is None
            self._streams = {name: Stream(root, name, secure, self.device if name == "noise" else "cpu")
                             for name in ("sampling", "noise", "count noise", "count sample")}
        else:  # a non-private run's batches are public randomness
            self._streams = {}
            self._gens["batches"] = seeded_generator(sub_root(seed, "batches"))
        torch.manual_seed(sub_root(seed, "model randomness"))  # dropout and other model randomness
        self.clip_estimator: QuantileEstimator | None = None  # set by fit() with adaptive clipping
        self.step_count = 0
        self.history: list[dict[str, float]] = []
        self.ema = {n: p.detach().clone() for n, p in self.trainable.items()} if config.ema_decay is not None else None

    # ---------------------------------------------------------------- set-up
    def _default_optimizer(self, params: list[nn.Parameter]) -> torch.optim.Optimizer:
        c = self.config
        if c.optimizer == "sgd":
            return torch.optim.SGD(params, lr=c.lr, momentum=c.momentum, weight_decay=c.weight_decay)
        cls = torch.optim.AdamW if c.optimizer == "adamw" else torch.optim.Adam
        return cls(params, lr=c.lr, weight_decay=c.weight_decay)

    def _choose_backend(self) -> str:
        if not self.objective.private or self.config.backend == "functorch":
            return "functorch" if self.objective.private else "none"
        reason = unsupported_reason(self.model, self.trainable)
        if reason is None:
            return "fast"
        if self.config.backend == "fast":
            raise SettingsError(f"the fast clipping backend cannot train this model: {reason}")
        log.info("fast clipping unavailable (%s); using torch.func per-example gradients", reason)
        return "functorch"

    @property
    def dp(self) -> DPSettings:
        return self.config.dp

    @property
    def precision(self) -> str:
        return self.config.compute.precision

    def total_steps(self, n: int) -> int:
        dp = self.dp
        return dp.steps if dp.steps is not None else math.ceil(dp.epochs * n / dp.batch_size)

    def sampling_rate(self, n: int) -> float:
        if n <= 0:
            raise DataError("the private data set has no rows")
        if self.config.sampling_rate is not None:
            return self.config.sampling_rate
        return min(1.0, self.dp.batch_size / n)

    @property
    def clip_norm(self) -> float:
        """C of the next step: the setting, or with adaptive clipping its current private estimate."""
        return self.clip_estimator.clip_norm if self.clip_estimator is not None else self.dp.clip_norm

    @property
    def gradient_noise_multiplier(self) -> float:
        """Noise std on the clipped gradient sum, in units of C (under the "split" a share of noise_multiplier)."""
        est = self.clip_estimator
        return self.noise_multiplier if est is None else est.gradient_noise(self.noise_multiplier)

    def _start_adaptive_clip(self, expected_batch: float) -> None:
        clipping = self.config.clipping(self.objective.private)
        if clipping is not None and self.clip_estimator is None:
            self.clip_estimator = QuantileEstimator(clipping, self.dp.clip_norm, expected_batch,
                                                    self._streams["count noise"])

    # ---------------------------------------------------------------- gradients
    def clipped_sum(self, batch: Mapping[str, Tensor], groups: Tensor | None = None) -> tuple[dict[str, Tensor], Tensor]:
        """Sum of clipped per-unit gradients of the private loss over ``batch`` (a unit: a row, or the rows
        sharing a label in ``groups``)."""
        fn = clipped_sum_fast if self.backend == "fast" else clipped_sum_functorch
        with autocast(self.device, self.precision):
            return fn(self.model, self.objective.private_loss, batch, self.trainable, self.clip_norm, groups)

    def _take(self, data: Mapping[str, Tensor], idx: Tensor) -> dict[str, Tensor]:
        """The rows ``idx`` of ``data`` (kept on the CPU), moved to the training device."""
        return {k: v.to(self.device, non_blocking=True) for k, v in take(data, idx).items()}

    def _clipped_total(self, data: Mapping[str, Tensor], idx: Tensor) -> tuple[dict[str, Tensor], Tensor]:
        """Sum of the clipped gradients of the units ``idx`` (micro-batched), and the units' norms. With several
        processes each rank clips its shard of ``idx`` and the sums are all-reduced (the norms stay local)."""
        c = self.config
        idx = distributed.shard(idx, self.rank, self.world_size)
        total = {n: torch.zeros_like(p) for n, p in self.trainable.items()}
        norms = []
        if self.units is None:
            parts = [(rows, None) for rows in chunks(idx, c.max_physical_batch)]
        else:
            parts = [(rows, self.units.labels[rows].to(self.device))
                     for rows in self.units.chunks(idx, c.max_physical_batch)]
        for rows, labels in parts:
            if len(rows) > c.max_physical_batch:  # one unit with more rows than fit in a pass
                summed, part_norms = self._large_unit(data, rows)
            else:
                summed, part_norms = self.clipped_sum(self._take(data, rows), labels)
            norms.append(part_norms.detach().cpu())
            for n, g in summed.items():
                total[n] += g
        distributed.all_reduce_sum(total)
        return total, torch.cat(norms) if norms else torch.zeros(0)

    def _large_unit(self, data: Mapping[str, Tensor], rows: Tensor) -> tuple[dict[str, Tensor], Tensor]:
        """The clipped gradient of ONE unit whose rows do not fit in one pass (e.g. a patient with many long
        windows): its gradient is summed over chunks of ``max_physical_batch`` rows by ordinary backward
        passes (memory: one copy of the trainable parameters plus one chunk's activations), then clipped."""
        params = list(self.trainable.values())
        grads = None
        for part in chunks(rows, self.config.max_physical_batch):
            with autocast(self.device, self.precision):
                loss = check_losses(self.objective.private_loss(self.model, self._take(data, part)), len(part))
            loss = to_float32(loss).sum()
            g = torch.autograd.grad(loss, params, allow_unused=True, materialize_grads=True)
            grads = list(g) if grads is None else [a.add_(b) for a, b in zip(grads, g)]
        norm = torch.sqrt(sum(to_float32(g).pow(2).sum() for g in grads)).reshape(1)
        factor = clip_factors(norm, self.clip_norm)
        return {n: g * factor for n, g in zip(self.trainable, grads)}, norm

    def private_gradient(self, data: Mapping[str, Tensor], idx: Tensor, expected_batch: float) -> dict[str, Tensor]:
        """Noisy clipped gradient of the private loss, divided by the expected batch size.

        ``idx`` indexes privacy units: rows, or after ``fit(groups=...)`` the grouped units."""
        return self._noisy(self._clipped_total(data, idx)[0], expected_batch)

    def _noisy(self, total: dict[str, Tensor], expected_batch: float) -> dict[str, Tensor]:
        std = self.gradient_noise_multiplier * self.clip_norm
        sizes = [g.numel() for g in total.values()]
        noise = self._streams["noise"].normal((sum(sizes),), std)  # one draw per step, split over the tensors
        for g, part in zip(total.values(), noise.split(sizes)):
            g += part.view(g.shape).to(g.dtype)
            g /= expected_batch
        return total

    def mean_gradient(self, loss_fn, batch: Mapping[str, Tensor]) -> tuple[dict[str, Tensor], float]:
        """Ordinary gradient of the mean loss (public branch, non-private training); a batch larger than
        ``max_physical_batch`` is summed over chunks of that many rows, so memory stays bounded (not with
        batch normalisation, whose per-row losses depend on the whole batch)."""
        size = next(iter(batch.values())).shape[0]
        params = list(self.trainable.values())
        if size <= self.config.max_physical_batch or _has_batch_norm(self.model):
            with autocast(self.device, self.precision):
                loss = to_float32(check_losses(loss_fn(self.model, batch), size)).mean()
            grads = torch.autograd.grad(loss, params, allow_unused=True, materialize_grads=True)
            return dict(zip(self.trainable, grads)), float(loss.detach())
        total, summed = 0.0, None
        for rows in chunks(torch.arange(size), self.config.max_physical_batch):
            with autocast(self.device, self.precision):
                loss = to_float32(check_losses(loss_fn(self.model, take(batch, rows)), len(rows))).sum()
            grads = torch.autograd.grad(loss, params, allow_unused=True, materialize_grads=True)
            summed = list(grads) if summed is None else [a.add_(b) for a, b in zip(summed, grads)]
            total += float(loss.detach())
        return {n: g / size for n, g in zip(self.trainable, summed)}, total / size

    def _apply(self, grad: dict[str, Tensor]) -> None:
        for n, p in self.trainable.items():
            p.grad = grad[n]
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        if self.ema is not None:
            with torch.no_grad():
                for n, p in self.trainable.items():
                    self.ema[n].lerp_(p.detach(), 1 - self.config.ema_decay)

    # ---------------------------------------------------------------- steps
    def public_step(self, public_data: Mapping[str, Tensor]) -> float:
        idx = uniform_indices(_rows(public_data), self._public_batch(), self._gens["public"])
        grad, loss = self.mean_gradient(self.objective.public_loss, self._take(public_data, idx))
        self._apply(grad)
        return loss

    def private_step(self, private_data: Mapping[str, Tensor], public_data: Mapping[str, Tensor] | None) -> dict:
        n = self.units.n if self.units is not None else _rows(private_data)
        q = self.sampling_rate(n)
        idx = poisson_indices(n, q, self._streams["sampling"])
        self._start_adaptive_clip(q * n)
        est, record = self.clip_estimator, {}
        if est is None:
            grad = self.private_gradient(private_data, idx, expected_batch=q * n)
            self.ledger.charge_sampled_gaussian("private training steps", q, self.noise_multiplier, 1)
        else:  # the same clipped sum and noise as private_gradient, plus the count of this step
            record["clip_norm"] = est.clip_norm  # the C of this step
            total, norms = self._clipped_total(private_data, idx)
            grad = self._noisy(total, expected_batch=q * n)
            if est.counting:
                if est.settings.accounting == "compose":  # the count's own sample (see adaptive_clip)
                    norms = self._clipped_total(private_data, poisson_indices(n, q, self._streams["count sample"]))[1]
                self._release_count(norms)
            for name, sigma in est.step_charges(self.noise_multiplier):
                self.ledger.charge_sampled_gaussian(name, q, sigma, 1)
        if self.objective.has_public_branch:
            pub_idx = uniform_indices(_rows(public_data), self._public_batch(), self._gens["public"])
            g_pub, record["public_loss"] = self.mean_gradient(self.objective.public_loss,
                                                               self._take(public_data, pub_idx))
            grad = {k: g_pub[k] + self.config.alpha * grad[k] for k in grad}
        elif self.config.alpha != 1.0:
            grad = {k: self.config.alpha * g for k, g in grad.items()}
        self._apply(grad)
        return record

    def warm_up_clip(self, private_data: Mapping[str, Tensor], n: int) -> None:
        """Adaptive clipping's warm-up: count-only steps on fresh Poisson samples, each charged; no update."""
        est, q = self.clip_estimator, self.sampling_rate(n)
        while est.warmup_left:
            idx = poisson_indices(n, q, self._streams["count sample"])
            self._release_count(self._clipped_total(private_data, idx)[1])
            est.warmup_left -= 1
            self.ledger.charge_sampled_gaussian(WARMUP, q, est.count_multiplier, 1)

    def _release_count(self, norms: Tensor) -> None:
        """Adaptive clipping's noisy count of the units unclipped at the current C; C then moves. The
        estimator is handed the count alone, never the norms."""
        counts = torch.tensor([float((norms <= self.clip_norm).sum()), float(len(norms))], device=self.device)
        distributed.all_reduce_sum({"counts": counts})  # every rank's shard of the sample
        self.clip_estimator.observe(int(counts[0]), int(counts[1]))

    def nonprivate_step(self, data: Mapping[str, Tensor]) -> dict:
        idx = uniform_indices(_rows(data), self.dp.batch_size, self._gens["batches"])
        grad, loss = self.mean_gradient(self.objective.private_loss, self._take(data, idx))
        self._apply(grad)
        return {"loss": loss}

    def _public_batch(self) -> int:
        return self.config.public_batch_size or self.dp.batch_size

    # ---------------------------------------------------------------- loop
    def fit(self, private_data: Mapping[str, Tensor], public_data: Mapping[str, Tensor] | None = None,
            groups: Tensor | None = None, on_step: Callable[[int], None] | None = None) -> TrainResult:
        """Train. ``groups`` (one integer label per private row) makes each label a privacy unit: a
        patient whose rows are sampled, clipped and accounted together (see the module docstring).
        ``on_step(step)`` runs after every step (e.g. a validation pass at the end of each epoch; the
        model is put back in training mode after it); what it releases is the caller's to account for."""
        obj, c = self.objective, self.config
        _check_data(private_data, obj.private_keys, "private_data")
        if obj.has_public_branch or c.public_pretrain_steps:
            if public_data is None:
                raise SettingsError(f"{obj.name} has a public branch: pass public_data")
            _check_data(public_data, obj.public_keys, "public_data")
        if self.world_size > 1:  # the design needs the same data on every rank: checked before any step or budget
            distributed.check_same_data(private_data, groups)
        n = _rows(private_data)
        if groups is not None:
            n = self._group(groups, n)
        total = self.total_steps(n)
        if obj.private:
            if self.ledger is None:
                patient = self.units is not None and obj.unit is ProtectedUnit.EXAMPLE
                self.ledger = PrivacyLedger(n, c.dp.delta, c.dp.accountant,
                                            unit=ProtectedUnit.PATIENT if patient else obj.unit)
            self._check_ledger(n)
            q = self.sampling_rate(n)
            if q == 1.0:
                warnings.warn(f"the expected batch ({c.dp.batch_size}) covers all {n} privacy units (q = 1): every "
                              "step reads every unit, so sampling amplifies nothing; use a smaller batch size or "
                              "more units", stacklevel=user_stacklevel())
            self._start_adaptive_clip(q * n)
            if self.noise_multiplier is None:
                planned = self.clip_estimator.planned_events(q, total) if self.clip_estimator else ()
                self.noise_multiplier = self.ledger.calibrate_training_noise(q, total, c.dp.epsilon, planned=planned)
            if self.clip_estimator is not None:  # raises if a split would leave the gradient no noise
                self.clip_estimator.gradient_noise(self.noise_multiplier)
        self._maybe_resume(total)
        self.model.train()
        pre = c.public_pretrain_steps
        bar = tqdm(total=pre + total, initial=self.step_count, disable=not c.progress or self.rank != 0, desc=obj.name,
                   leave=False)
        every = max(1, (pre + total) // 50)
        eps_every = max(10, (pre + total) // 10)  # the exact accountant: ~10 times a run, at most every 10 steps
        shown: dict[str, float] = {}
        saved = time.monotonic()  # the last checkpoint (or the start)
        while self.step_count < pre + total:
            if self.step_count < pre:
                rec = {"public_loss": self.public_step(public_data)}
            elif obj.private:
                if self.clip_estimator is not None and self.clip_estimator.warmup_left:
                    self.warm_up_clip(private_data, n)
                rec = self.private_step(private_data, public_data)
            else:
                rec = self.nonprivate_step(private_data)
            self.step_count += 1
            if self.step_count % every == 0 or self.step_count == pre + total:
                rec["step"] = self.step_count
                if obj.private and (self.step_count % eps_every == 0 or self.step_count == pre + total):
                    rec["epsilon"] = self.ledger.epsilon()
                self.history.append(rec)
                shown = {**shown, **{k: round(v, 4) for k, v in rec.items() if k != "step"}}
                bar.set_postfix(shown)
            bar.update(1)
            if c.checkpoint_dir and (self.step_count % c.checkpoint_every == 0 or self.step_count == pre + total
                                     or time.monotonic() - saved >= c.checkpoint_seconds):
                self.save_checkpoint(total)
                saved = time.monotonic()
            if on_step is not None:
                on_step(self.step_count)
                self.model.train()
        bar.close()
        if self.ema is not None:  # post-processing of the released iterates: no privacy cost
            with torch.no_grad():
                for name, p in self.trainable.items():
                    p.copy_(self.ema[name])
        self.model.eval()
        if self.device.type != "cpu":  # the recipes evaluate, save and apply on the CPU
            self.model.to("cpu")
        return TrainResult(
            steps=total,
            sampling_rate=self.sampling_rate(n),
            noise_multiplier=self.noise_multiplier,
            guarantee=self.ledger.guarantee() if obj.private else None,
            backend=self.backend,
            history=self.history,
            ledger=self.ledger if obj.private else None,
            clip_norm=self.clip_norm if obj.private else None,
            gradient_noise_multiplier=self.gradient_noise_multiplier if obj.private else None,
        )

    def _check_ledger(self, n: int) -> None:
        """The ledger states the run's DP settings and the unit the engine samples: its delta and accountant are
        the settings' (a ledger made elsewhere must agree), a patient-level ledger (or ``unit="patient"``) needs
        grouped rows (``fit(groups=...)``), and the ledger's n is the number of units sampled from."""
        check_ledger_agrees(self.ledger, self.dp)
        if self.dp.unit == "patient" and self.units is None:
            raise SettingsError("the DP settings protect patients (unit = 'patient') but fit() got no groups=: pass "
                                "groups= (one patient label per row)")
        if self.ledger.unit is ProtectedUnit.PATIENT and self.units is None:
            raise SettingsError("the ledger protects patients but fit() got no groups=: the engine would sample and "
                                "clip rows while the guarantee names patients; pass groups= (one patient label per "
                                "row)")
        if self.ledger.n != n:
            raise SettingsError(f"the ledger counts n = {self.ledger.n} units but the engine samples from {n}: the "
                                "guarantee would state the wrong n")

    def _group(self, groups: Tensor, rows: int) -> int:
        """Index the privacy units of grouped rows; returns the number of units."""
        if groups.shape != (rows,):
            raise DataError(f"groups must hold one label per private row: shape ({rows},), got {tuple(groups.shape)}")
        self.units = UnitIndex(groups)
        # whole-example objectives protect the patient; feature- or label-level ones protect the private
        # features (or labels) of all of a patient's rows together: the ledger then counts patients
        unit = ProtectedUnit.PATIENT if self.objective.unit is ProtectedUnit.EXAMPLE else self.objective.unit
        if self.ledger is not None and (self.ledger.unit is not unit or self.ledger.n != self.units.n):
            raise SettingsError(f"with grouped rows the ledger must count patients: unit {unit.value!r} and n = "
                                f"{self.units.n} units, got unit {self.ledger.unit.value!r} and n = {self.ledger.n}")
        return self.units.n

    # ---------------------------------------------------------------- checkpoints
    def _fingerprint(self, total: int) -> dict[str, Any]:
        c, dp = self.config, self.dp
        flat = {**{k: v for k, v in asdict(c).items() if k not in ("dp", "compute", "adaptive_clip")},
                "batch_size": dp.batch_size, "epochs": dp.epochs, "steps": dp.steps, "clip_norm": dp.clip_norm,
                "target_epsilon": dp.epsilon if self.objective.private and c.noise_multiplier is None else None,
                "seed": dp.seed, "noise_seed": dp.noise_seed, "adaptive_clip": c.clipping(self.objective.private),
                "device": c.compute.device, "precision": c.compute.precision, "delta": dp.delta,
                "accountant": dp.accountant}
        if flat["adaptive_clip"] is not None:
            flat["adaptive_clip"] = asdict(flat["adaptive_clip"])
        # the names and defaults of the flat config before it held the settings: a private run's checkpoint of an
        # older dpcare resumes unless it ran at a non-default delta or accountant (then it is refused once); a
        # non-private run's leaves out what only the noise reads (C, the noise seed, delta, the accountant)
        skip = {"progress", "checkpoint_dir", "checkpoint_every", "checkpoint_seconds"}
        if not self.objective.private:
            skip |= {"clip_norm", "noise_seed", "delta", "accountant"}
        skip |= {k for k, default in (("adaptive_clip", None), ("noise_seed", None), ("device", "auto"),
                                      ("precision", "fp32"), ("delta", None), ("accountant", "pld"),
                                      ("sampling_rate", None))
                 if flat[k] == default}
        keep = {k: v for k, v in flat.items() if k not in skip}
        return {"config": keep, "objective": self.objective.name, "total_steps": total,
                "units": self.units.n if self.units is not None else None}

    def save_checkpoint(self, total: int) -> None:
        if self.rank != 0:  # one writer; the other ranks resume from rank 0's file (broadcast)
            return
        state = {
            "fingerprint": self._fingerprint(total),
            "step": self.step_count,
            "model": self.model.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "generators": {k: g.get_state() for k, g in self._gens.items()},
            "streams": {k: s.state_dict() for k, s in self._streams.items()},
            "torch_rng": torch.get_rng_state(),
            "noise_multiplier": self.noise_multiplier,
            "ledger": self.ledger.state_dict() if self.ledger is not None else None,
            "history": self.history,
            "ema": self.ema,
            "clip_estimator": self.clip_estimator.state_dict() if self.clip_estimator is not None else None,
        }
        ckpt.atomic_save(state, Path(self.config.checkpoint_dir) / CHECKPOINT_NAME)

    def _maybe_resume(self, total: int) -> None:
        path = Path(self.config.checkpoint_dir) / CHECKPOINT_NAME if self.config.checkpoint_dir else None
        # every rank takes rank 0's state (every rank calls this, with or without a checkpoint folder)
        state = distributed.from_main(ckpt.load(path) if self.rank == 0 and path and path.exists() else None)
        if state is None:
            return
        if state["fingerprint"] != self._fingerprint(total):
            raise DataError(
                f"checkpoint {path} belongs to a different run (config, objective or data size differ); "
                "use another checkpoint directory or delete it"
            )
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        if "streams" not in state:
            raise DataError(f"checkpoint {path} was written by an older dpcare (its noise streams differ); "
                            "delete it to start the run afresh")
        for k, g in self._gens.items():
            g.set_state(state["generators"][k])
        for k, s in self._streams.items():
            s.load_state_dict(state["streams"][k])
        torch.set_rng_state(state["torch_rng"])
        self.noise_multiplier = state["noise_multiplier"]
        if state["ledger"] is not None:
            self.ledger = PrivacyLedger.from_state_dict(state["ledger"])
        self.history = state["history"]
        self.ema = state.get("ema")
        if self.ema is not None:  # checkpoints are read onto the CPU
            self.ema = {n: t.to(self.device) for n, t in self.ema.items()}
        if state.get("clip_estimator") is not None:
            self.clip_estimator.load_state_dict(state["clip_estimator"])
        self.step_count = state["step"]
        log.info("resumed from %s at step %d", path, self.step_count)


def _has_batch_norm(model: nn.Module) -> bool:
    return any(isinstance(mod, nn.modules.batchnorm._BatchNorm) for mod in model.modules())


def _refuse_batch_norm(model: nn.Module) -> None:
    for name, mod in model.named_modules():
        if isinstance(mod, nn.modules.batchnorm._BatchNorm):
            raise SettingsError(
                f"layer '{name}' ({type(mod).__name__}) is batch normalisation: it mixes the examples of a batch, "
                "so clipping each example's gradient no longer bounds its influence; use GroupNorm or LayerNorm "
                "in private training"
            )


def _rows(data: Mapping[str, Tensor]) -> int:
    return next(iter(data.values())).shape[0]


def _check_data(data: Mapping[str, Tensor], keys: tuple[str, ...], what: str) -> None:
    missing = [k for k in keys if k not in data]
    if missing:
        raise DataError(f"{what} lacks the keys {missing} that the objective reads (has {sorted(data)})")
    sizes = {k: v.shape[0] for k, v in data.items()}
    if len(set(sizes.values())) != 1:
        raise DataError(f"{what} tensors have different numbers of rows: {sizes}")
    for k, v in data.items():
        if v.is_floating_point() and not torch.isfinite(v).all():
            raise DataError(f"{what}['{k}'] contains NaN or infinite values")
