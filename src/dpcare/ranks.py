"""Which process of a torch.distributed run this is, and rank 0's value on every rank: what every layer may ask
(the privacy layer's secret root, the engine's seeds and checkpoints) without importing the engine."""

from __future__ import annotations

from typing import Any


def world() -> tuple[int, int]:
    """(rank, number of processes); (0, 1) outside torch.distributed."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def is_main() -> bool:
    """True on rank 0 (and in a one-process run): the process that writes outputs and prints."""
    return world()[0] == 0


def from_main(obj: Any) -> Any:
    """Rank 0's ``obj`` on every rank (e.g. the state read from a checkpoint); ``obj`` itself in one process."""
    if world()[1] == 1:
        return obj
    import torch.distributed as dist

    box = [obj if is_main() else None]
    dist.broadcast_object_list(box, src=0)
    return box[0]


__all__ = ["from_main", "is_main", "world"]
