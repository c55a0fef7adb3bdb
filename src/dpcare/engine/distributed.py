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

All of this holds only if every rank really holds the same data: a rank that read another file, or the same rows
in another order, would clip some person's rows twice (or none) and sample a set that is not the one accounted.
``Trainer.fit`` therefore compares a fingerprint of the private tensors and the unit ids across the ranks
(:func:`check_same_data`) before any step or budget, and stops every rank with :class:`RankDataMismatchError`
naming the ranks that differ from rank 0. The fingerprint (:func:`data_fingerprint`) is a sha256 over each
tensor's name, dtype and shape and over its bytes: all of them for tensors up to ``FULL_HASH_ELEMENTS``
elements, else a fixed strided sample of about that many elements (first element included, the same positions
on every rank) - a cheap check that catches another file, another row order or another row count, but can miss
a single changed value in a very large tensor.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Mapping
from typing import Any

import torch
import torch.distributed as dist
from torch import Tensor

from dpcare.exceptions import DataError, SettingsError
from dpcare.ranks import from_main, is_main, world
from dpcare.runtime import launched_by_torchrun

#: tensors with at most this many elements are hashed whole; larger ones by a strided sample of about as many
FULL_HASH_ELEMENTS = 1 << 22


class RankDataMismatchError(DataError):
    """The ranks of a distributed run hold different private data (or unit ids): the shared sample and the
    per-rank shards of the design would not be the ones accounted."""


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


def _tensor_bytes(t: Tensor) -> bytes:
    """The raw bytes of ``t`` (flattened; a strided sample when it has more than FULL_HASH_ELEMENTS elements)."""
    flat = t.detach().reshape(-1)
    stride = max(1, -(-flat.numel() // FULL_HASH_ELEMENTS))
    sample = flat[::stride].to("cpu").contiguous()
    return sample.view(torch.uint8).numpy().tobytes()


def data_fingerprint(data: Mapping[str, Tensor], groups: Tensor | None = None) -> str:
    """sha256 (hex) over the tensors' names, dtypes, shapes and bytes (a strided sample of large ones, see the
    module docstring) and over the unit ids ``groups``; order of the mapping's keys does not matter."""
    h = hashlib.sha256()
    items = sorted(data.items()) + ([("\0groups", groups)] if groups is not None else [])
    for name, t in items:
        h.update(f"{name}|{t.dtype}|{tuple(t.shape)}|{t.numel()}\n".encode())
        h.update(_tensor_bytes(t))
    return h.hexdigest()


def check_same_data(data: Mapping[str, Tensor], groups: Tensor | None = None, what: str = "private data") -> None:
    """Raise :class:`RankDataMismatchError` on EVERY rank when some rank's ``data`` / ``groups`` fingerprint
    differs from rank 0's (one all_gather of a 64-character digest); nothing in a one-process run."""
    if world()[1] == 1:
        return
    mine = data_fingerprint(data, groups)
    digests: list[Any] = [None] * world()[1]
    dist.all_gather_object(digests, mine)
    differ = [r for r, d in enumerate(digests) if d != digests[0]]
    if differ:
        raise RankDataMismatchError(
            f"ranks {differ} hold different {what} (or unit ids) from rank 0 (sha256 {digests[0][:12]} on rank 0; "
            + ", ".join(f"{digests[r][:12]} on rank {r}" for r in differ) + "): every rank must read the same data "
            "set, the same rows in the same order, or a person could be clipped on two ranks and the sample would "
            "not be the one accounted (dpcare.engine.distributed); nothing was trained or spent")


__all__ = ["FULL_HASH_ELEMENTS", "RankDataMismatchError", "all_reduce_sum", "check_same_data", "data_fingerprint",
           "from_main", "init_from_environment", "is_main", "launched_by_torchrun",
           "shard", "world"]
