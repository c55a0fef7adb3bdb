"""DP-SGD on several processes with torch.distributed (one machine or several; ``torchrun`` or ``--nproc``).

Every rank holds the same private data set and the same seeds. Per private step::

    B ~ Poisson(q) over ALL n units        the same draw on every rank (same generator), at the global rate q
    B_r = {u in B : u mod R = r}           rank r's shard of the sample: whole units, so a patient's rows
                                           stay on one rank
    S_r = sum_{u in B_r} clip_C(g_u)       on rank r
    S   = all_reduce_sum(S_r)              every rank now holds the same global clipped sum
    g   = (S + N(0, sigma^2 C^2)) / (q n)  the noise is drawn ONCE from the shared noise generator (every rank
                                           draws the identical vector), divided by the EXPECTED global batch

So the released update, the sampled units, the noise and the ledger equal those of the one-process run with
the same seed (up to the order of floating-point additions in S); the guarantee is the same (epsilon, delta)
for the same unit. Only rank 0 writes checkpoints and run folders; a resumed run takes its state from rank 0's
checkpoint (broadcast), so every rank resumes at the same step. Public-branch and non-private steps are
computed on every rank alike (no communication). Opacus' distributed path has no user-level (patient)
sampling (its issue #366); here the shard is of units, so patient-level DP works the same way.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

import torch
import torch.distributed as dist
from torch import Tensor

from dpcare.exceptions import SettingsError


def world() -> tuple[int, int]:
    """(rank, number of processes); (0, 1) outside torch.distributed."""
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def is_main() -> bool:
    """True on rank 0 (and in a one-process run): the process that writes outputs and prints."""
    return world()[0] == 0


def launched_by_torchrun() -> bool:
    return int(os.environ.get("WORLD_SIZE", "1")) > 1


def init_from_environment(device: str = "auto") -> bool:
    """Join the process group torchrun described in the environment (WORLD_SIZE, RANK, MASTER_ADDR...):
    NCCL when the run trains on CUDA, else gloo. Returns whether this is a multi-process run."""
    if not launched_by_torchrun():
        return False
    if not dist.is_available():
        raise SettingsError("this torch build has no torch.distributed: run with one process")
    if not dist.is_initialized():
        cuda = device.startswith("cuda") or (device == "auto" and torch.cuda.is_available())
        if cuda:
            torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
        dist.init_process_group(backend="nccl" if cuda else "gloo")
    return True


def shard(units: Tensor, rank: int, size: int) -> Tensor:
    """This rank's share of sampled unit indices: the units u with u mod size == rank (whole units)."""
    return units if size == 1 else units[units % size == rank]


def all_reduce_sum(tensors: Mapping[str, Tensor]) -> None:
    """Sum the tensors over all ranks in place, in one collective (flattened into one buffer)."""
    if world()[1] == 1:
        return
    flat = torch.cat([t.reshape(-1) for t in tensors.values()])
    dist.all_reduce(flat, op=dist.ReduceOp.SUM)
    offset = 0
    for t in tensors.values():
        t.copy_(flat[offset : offset + t.numel()].view_as(t))
        offset += t.numel()


def from_main(obj: Any) -> Any:
    """Rank 0's ``obj`` on every rank (e.g. the state read from a checkpoint)."""
    if world()[1] == 1:
        return obj
    box = [obj if is_main() else None]
    dist.broadcast_object_list(box, src=0)
    return box[0]


__all__ = ["all_reduce_sum", "from_main", "init_from_environment", "is_main", "launched_by_torchrun",
           "shard", "world"]
