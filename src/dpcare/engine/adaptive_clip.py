"""Private adaptive clipping: the clip norm C tracks a quantile of the per-unit gradient norms.

Andrew, Thakkar, McMahan, Ramaswamy, "Differentially Private Learning with Adaptive Clipping"
(NeurIPS 2021, arXiv:1905.03871). Per step, over the Poisson-sampled units B (rows, or patients
with grouped examples: the norm of the patient's summed gradient), with b_i = 1[||g_i|| <= C]::

    b~ = (sum_{i in B} (b_i - 1/2) + N(0, sigma_b^2)) / (q n) + 1/2     the recentred count (paper, Sec. 3)
    C  <- C exp(-eta (b~ - gamma))                                      the geometric update

divided by the EXPECTED batch size q n (the realised |B| would leak it and bias the estimate).
Recentring makes one unit move the count by 1/2, so the count alone is a Gaussian mechanism
with noise multiplier 2 sigma_b. C depends on the data only through the noisy counts b~.

Accounting (``AdaptiveClip.accounting``):

* ``"split"`` (Theorem 1 of the paper): the gradient sum and the count of the SAME sample form
  one Gaussian mechanism. Rescaling the count by sigma_grad C / sigma_b makes the noise isotropic,
  and a unit's contribution (clipped g_i, b_i - 1/2) then has norm <= C sqrt(1 + sigma_grad^2 /
  (2 sigma_b)^2), hence one sampled Gaussian with noise multiplier sigma where
  sigma^-2 = sigma_grad^-2 + (2 sigma_b)^-2. The run is charged sigma (``noise_multiplier``, or
  calibrated to ``target_epsilon``) and the gradient gets sigma_grad = (sigma^-2 - (2 sigma_b)^-2)^-1/2.
* ``"compose"``: the count is its own Poisson-sampled Gaussian (noise multiplier 2 sigma_b), charged
  next to the gradient's (noise multiplier ``noise_multiplier``). Composing two sampled mechanisms is
  only valid for independent samples (on a shared sample it understates epsilon, see
  docs/adaptive-clipping.md), so in this mode the count is taken on its own Poisson sample, at the
  cost of one more pass for its norms.

Warm-up (``warmup_steps``): before the first private step the estimator runs alone on that many
fresh Poisson samples (no model update), each count charged as a sampled Gaussian (2 sigma_b).
With ``freeze_after_warmup`` C then stays fixed: the private replacement for setting C to a
percentile of the first iterations' gradient norms.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from dp_accounting import dp_event

from dpcare.engine.noise import Stream
from dpcare.exceptions import PrivacyParameterError
from dpcare.privacy import sampled_gaussian_event

ACCOUNTING = ("split", "compose")
TRAINING = "private training steps"
JOINT = "private training steps (gradient and clip count, one Gaussian)"
COUNTS = "adaptive clipping counts"
WARMUP = "adaptive clipping warm-up counts"


@dataclass(frozen=True)
class AdaptiveClip:
    """Settings of private adaptive clipping; ``TrainConfig.clip_norm`` is the (public) initial C."""

    target_quantile: float = 0.5  # gamma: the fraction of units left unclipped
    lr: float = 0.2  # eta of the geometric update (0: C stays put)
    count_noise: float | None = None  # sigma_b, noise std on the count; None: expected batch / 20 (the paper's)
    accounting: str = "split"  # split (Theorem 1) | compose
    warmup_steps: int = 0  # estimator-only steps before training, each charged
    freeze_after_warmup: bool = False  # keep C fixed after the warm-up (no count during training)

    def validate(self) -> None:
        if not 0 < self.target_quantile < 1:
            raise PrivacyParameterError(f"target_quantile must be in (0, 1), got {self.target_quantile!r}")
        if not (math.isfinite(self.lr) and self.lr >= 0):
            raise PrivacyParameterError(f"the adaptive clipping lr must be >= 0, got {self.lr!r}")
        if self.count_noise is not None and not (math.isfinite(self.count_noise) and self.count_noise > 0):
            raise PrivacyParameterError(f"count_noise (sigma_b) must be > 0, got {self.count_noise!r}")
        if self.accounting not in ACCOUNTING:
            raise PrivacyParameterError(f"accounting must be one of {ACCOUNTING}, got {self.accounting!r}")
        if type(self.warmup_steps) is not int or self.warmup_steps < 0:
            raise PrivacyParameterError(f"warmup_steps must be an integer >= 0, got {self.warmup_steps!r}")
        if self.freeze_after_warmup and not self.warmup_steps:
            raise PrivacyParameterError("freeze_after_warmup needs warmup_steps > 0")


def split_gradient_noise(noise_multiplier: float, count_noise: float) -> float:
    """Theorem 1: the gradient's noise multiplier (sigma^-2 - (2 sigma_b)^-2)^-1/2 when one sampled Gaussian
    with ``noise_multiplier`` sigma covers the gradient and the recentred count with noise std sigma_b."""
    rest = noise_multiplier ** -2 - (2 * count_noise) ** -2
    if rest <= 0:
        raise PrivacyParameterError(
            f"the split accounting needs 2 sigma_b > sigma: count_noise sigma_b = {count_noise:.4g} leaves nothing "
            f"of noise multiplier sigma = {noise_multiplier:.4g} to the gradient; raise count_noise or use "
            "accounting='compose'")
    return rest ** -0.5


def noisy_fraction(unclipped: int, included: int, expected_batch: float, count_noise: float,
                   stream: Stream) -> float:
    """The count mechanism: b~ = (unclipped - included / 2 + N(0, sigma_b^2)) / expected_batch + 1/2."""
    noise = float(stream.normal((), count_noise, torch.float64))
    return (unclipped - included / 2 + noise) / expected_batch + 0.5


class QuantileEstimator:
    """The state of adaptive clipping in one run: C, the noisy fractions released, the warm-up left.

    It sees the data only through :meth:`observe`'s count of unclipped units, made private at once."""

    def __init__(self, settings: AdaptiveClip, clip_norm: float, expected_batch: float, stream: Stream):
        self.settings, self.expected_batch, self.stream = settings, float(expected_batch), stream
        self.count_noise = settings.count_noise if settings.count_noise is not None else expected_batch / 20
        self.clip_norm = float(clip_norm)
        self.clip_norms = [self.clip_norm]  # C_0, C_1, ...: public, a function of the noisy fractions
        self.fractions: list[float] = []  # the released b~ of every count
        self.warmup_left = settings.warmup_steps

    @property
    def counting(self) -> bool:
        """Whether training steps release a count (not after a frozen warm-up)."""
        return not self.settings.freeze_after_warmup

    @property
    def count_multiplier(self) -> float:
        """Noise multiplier of the count alone: std sigma_b over sensitivity 1/2."""
        return 2 * self.count_noise

    def gradient_noise(self, noise_multiplier: float) -> float:
        """Noise multiplier of the gradient sum, given the one charged per training step."""
        if self.counting and self.settings.accounting == "split":
            return split_gradient_noise(noise_multiplier, self.count_noise)
        return noise_multiplier

    def step_charges(self, noise_multiplier: float) -> list[tuple[str, float]]:
        """(ledger name, noise multiplier) of the sampled Gaussians one training step charges."""
        if not self.counting:
            return [(TRAINING, noise_multiplier)]
        if self.settings.accounting == "split":
            return [(JOINT, noise_multiplier)]
        return [(TRAINING, noise_multiplier), (COUNTS, self.count_multiplier)]

    def planned_events(self, sampling_rate: float, steps: int) -> list[dp_event.DpEvent]:
        """The run's charges that do not depend on the training noise: warm-up counts, composed counts."""
        events = []
        if self.warmup_left:
            events.append(sampled_gaussian_event(sampling_rate, self.count_multiplier, self.warmup_left))
        if self.counting and self.settings.accounting == "compose":
            events.append(sampled_gaussian_event(sampling_rate, self.count_multiplier, steps))
        return events

    def observe(self, unclipped: int, included: int) -> float:
        """Release the noisy fraction of ``unclipped`` of ``included`` sampled units and update C."""
        s = self.settings
        b = noisy_fraction(int(unclipped), int(included), self.expected_batch, self.count_noise, self.stream)
        self.fractions.append(b)
        self.clip_norm *= math.exp(-s.lr * (b - s.target_quantile))
        self.clip_norms.append(self.clip_norm)
        return self.clip_norm

    def state_dict(self) -> dict:
        return {"clip_norm": self.clip_norm, "clip_norms": list(self.clip_norms), "fractions": list(self.fractions),
                "warmup_left": self.warmup_left}

    def load_state_dict(self, state: dict) -> None:
        self.clip_norm, self.warmup_left = state["clip_norm"], state["warmup_left"]
        self.clip_norms, self.fractions = list(state["clip_norms"]), list(state["fractions"])
