"""DDPM noise-prediction training as engine objectives, and sampling (Mahloujifar et al., Section 6.3).

The five methods of the paper, each an :class:`~dpcare.engine.Objective`:

| method | private loss per image | public branch | start |
|---|---|---|---|
| non-private | l(x) (no clipping, noise or accounting) | - | random |
| public | l(Psi(x)) (non-private on blurred images: (0, 0)-FDP) | - | random |
| dp | l(x), DP-SGD (protects the whole image and label) | - | random |
| fdp-dpsgd | l(x), DP-SGD (FDP by Proposition 2) | - | the Public model |
| fdp-alg1 | l(x) - l(Psi(x)) with the SAME diffusion time and noise | l(Psi(x)) on a separate uniform batch | the Public model |

l(z) = || eps - eps_theta(sqrt(abar_t) z + sqrt(1 - abar_t) eps, t, y) ||^2 per image (mean over
pixels). Psi(x) = (blur(x), y): the blurred image AND the label are public under FDP.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor, nn

from dpcare.engine import Objective
from dpcare.exceptions import SettingsError, UnknownNameError
from dpcare.privacy import ProtectedUnit


class NoiseSchedule:
    """Linear beta schedule of DDPM (Ho et al. 2020): beta from 1e-4 to 0.02 over ``steps`` steps."""

    def __init__(self, steps: int = 1000, beta_start: float = 1e-4, beta_end: float = 0.02):
        if steps < 2:
            raise SettingsError(f"the diffusion needs at least 2 steps, got {steps}")
        self.steps = steps
        self.betas = torch.linspace(beta_start * 1000 / steps, beta_end * 1000 / steps, steps, dtype=torch.float64)
        self.alpha_bar = torch.cumprod(1 - self.betas, 0)

    def noised(self, x0: Tensor, t: Tensor, eps: Tensor) -> Tensor:
        ab = self.alpha_bar.to(x0.dtype)[t].view(-1, *([1] * (x0.dim() - 1)))
        return ab.sqrt() * x0 + (1 - ab).sqrt() * eps


def denoising_loss(model: Callable, schedule: NoiseSchedule, x0: Tensor, y: Tensor | None, t: Tensor,
                   eps: Tensor) -> Tensor:
    """Per-image noise-prediction MSE [B] at times t with noise eps."""
    pred = model(schedule.noised(x0, t, eps), t, y)
    return (pred - eps).pow(2).flatten(1).mean(1)


def _draw(x: Tensor, schedule: NoiseSchedule) -> tuple[Tensor, Tensor]:
    """Diffusion times and noise of a batch (torch's global generator, seeded and checkpointed by the trainer)."""
    return torch.randint(0, schedule.steps, (x.shape[0],)), torch.randn_like(x)


class DiffusionObjective(Objective):
    """One of the five methods (see the module docstring). Batches hold ``x`` (sharp images, private),
    ``x_pub`` (their blurred versions) and ``y`` (labels)."""

    KINDS = ("non-private", "public", "dp", "fdp-dpsgd", "fdp-alg1")

    def __init__(self, kind: str, schedule: NoiseSchedule):
        if kind not in self.KINDS:
            raise UnknownNameError(f"unknown diffusion method {kind!r}; choose one of {self.KINDS}")
        self.name, self.schedule = kind, schedule
        self.private = kind in ("dp", "fdp-dpsgd", "fdp-alg1")
        self.has_public_branch = kind == "fdp-alg1"
        self.unit = ProtectedUnit.EXAMPLE if kind == "dp" else ProtectedUnit.FEATURES
        self.private_keys = ("x_pub", "y") if kind == "public" else ("x", "x_pub", "y") if kind == "fdp-alg1" \
            else ("x", "y")
        self.public_keys = ("x_pub", "y")

    def private_loss(self, model: nn.Module, batch) -> Tensor:
        view = batch["x_pub"] if self.name == "public" else batch["x"]
        t, eps = _draw(view, self.schedule)
        loss = denoising_loss(model, self.schedule, view, batch["y"], t, eps)
        if self.name == "fdp-alg1":  # matched diffusion time and noise: l(x) - l(Psi(x))
            loss = loss - denoising_loss(model, self.schedule, batch["x_pub"], batch["y"], t, eps)
        return loss

    def public_loss(self, model: nn.Module, batch) -> Tensor:
        t, eps = _draw(batch["x_pub"], self.schedule)
        return denoising_loss(model, self.schedule, batch["x_pub"], batch["y"], t, eps)


@torch.no_grad()
def sample(model: nn.Module, schedule: NoiseSchedule, labels: Tensor, shape: tuple[int, int, int],
           steps: int = 100, generator: torch.Generator | None = None, batch: int = 500,
           progress: Callable[[int], None] | None = None) -> Tensor:
    """Deterministic DDIM sampling (eta = 0) on ``steps`` evenly spaced times; images clipped to [-1, 1]."""
    model.eval()
    times = torch.linspace(schedule.steps - 1, 0, steps).round().long()
    ab = schedule.alpha_bar.float()
    out = []
    for i in range(0, len(labels), batch):
        y = labels[i:i + batch]
        x = torch.randn(len(y), *shape, generator=generator)
        for j, t in enumerate(times):
            eps = model(x, t.repeat(len(y)), y)
            a_t = ab[t]
            x0 = ((x - (1 - a_t).sqrt() * eps) / a_t.sqrt()).clamp(-1, 1)
            a_prev = ab[times[j + 1]] if j + 1 < len(times) else torch.tensor(1.0)
            x = a_prev.sqrt() * x0 + (1 - a_prev).sqrt() * eps
        out.append(x.clamp(-1, 1))
        if progress:
            progress(len(y))
    return torch.cat(out) if out else torch.zeros(0, *shape)
