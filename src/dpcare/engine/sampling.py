"""Batch samplers. The private batch is Poisson-sampled (each example joins
independently with probability q, so the realised size varies and may be 0); the
public batch is a uniform sample of fixed size, drawn with its own generator."""

from __future__ import annotations

import torch
from torch import Tensor


def poisson_indices(n: int, rate: float, generator: torch.Generator) -> Tensor:
    """Indices of the examples included, each independently with probability ``rate``."""
    return torch.nonzero(torch.rand(n, generator=generator) < rate, as_tuple=False).flatten()


def uniform_indices(n: int, size: int, generator: torch.Generator) -> Tensor:
    """A uniform sample of ``min(size, n)`` distinct indices."""
    return torch.randperm(n, generator=generator)[: min(size, n)]


def take(data: dict[str, Tensor], idx: Tensor) -> dict[str, Tensor]:
    return {k: v[idx] for k, v in data.items()}


def chunks(idx: Tensor, size: int) -> list[Tensor]:
    """Split a batch into physical micro-batches of at most ``size`` examples."""
    return list(torch.split(idx, size)) if idx.numel() else []
