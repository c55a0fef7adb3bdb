"""Shared pieces of both clipping backends."""

from __future__ import annotations

from torch import Tensor

from dpcare.exceptions import SettingsError


def clip_factors(norms: Tensor, clip_norm: float) -> Tensor:
    """min(1, C / ||g_i||): every scaled per-example gradient has norm <= C."""
    return (clip_norm / (norms + 1e-6)).clamp(max=1.0)


def check_losses(losses: Tensor, batch: int) -> Tensor:
    """Objectives must return one loss per example: shape [B] exactly."""
    if losses.shape != (batch,):
        raise SettingsError(
            f"the objective returned losses of shape {tuple(losses.shape)}, expected ({batch},): one "
            "loss per example (a [B,1] logit broadcast against a [B] target is a classic bug)"
        )
    return losses
