"""Batch samplers. The private batch is Poisson-sampled (each example joins
independently with probability q, so the realised size varies and may be 0); the
public batch is a uniform sample of fixed size, drawn with its own generator."""

from __future__ import annotations

import torch
from torch import Tensor

from dpcare.engine.noise import Stream
from dpcare.exceptions import DataError


def poisson_indices(n: int, rate: float, stream: Stream) -> Tensor:
    """Indices of the examples included, each independently with probability ``rate`` (a secret stream's draw)."""
    return torch.nonzero(stream.rand(n) < rate, as_tuple=False).flatten()


def uniform_indices(n: int, size: int, generator: torch.Generator) -> Tensor:
    """A uniform sample of ``min(size, n)`` distinct indices."""
    return torch.randperm(n, generator=generator)[: min(size, n)]


def take(data: dict[str, Tensor], idx: Tensor) -> dict[str, Tensor]:
    return {k: v[idx] for k, v in data.items()}


def chunks(idx: Tensor, size: int) -> list[Tensor]:
    """Split a batch into physical micro-batches of at most ``size`` examples."""
    return list(torch.split(idx, size)) if idx.numel() else []


class UnitIndex:
    """Rows of the private data grouped into privacy units (e.g. all windows of one patient).

    Poisson sampling draws units; a unit's rows always travel together, into one micro-batch."""

    def __init__(self, groups: Tensor):
        if groups.dim() != 1 or groups.is_floating_point() or groups.is_complex():
            raise DataError(f"groups must be a 1-d integer tensor (one unit label per row), got dtype "
                            f"{groups.dtype} and shape {tuple(groups.shape)}")
        _, self.labels, self.counts = torch.unique(groups, return_inverse=True, return_counts=True)
        self.order = torch.argsort(self.labels, stable=True)  # rows sorted by unit
        self.starts = torch.cumsum(self.counts, 0) - self.counts
        self.n = len(self.counts)

    def rows(self, units: Tensor) -> Tensor:
        """Indices of every row of the given units."""
        counts = self.counts[units]
        offsets = torch.arange(int(counts.sum())) - torch.repeat_interleave(torch.cumsum(counts, 0) - counts, counts)
        return self.order[torch.repeat_interleave(self.starts[units], counts) + offsets]

    def chunks(self, units: Tensor, max_rows: int) -> list[Tensor]:
        """Row indices of ``units`` in micro-batches of at most ``max_rows`` rows; a unit is never split
        (one with more rows than ``max_rows`` forms a micro-batch of its own)."""
        parts, current, size = [], [], 0
        for u, c in zip(units.tolist(), self.counts[units].tolist()):
            if current and size + c > max_rows:
                parts.append(current)
                current, size = [], 0
            current.append(u)
            size += c
        if current:
            parts.append(current)
        return [self.rows(torch.tensor(p, dtype=torch.long)) for p in parts]
