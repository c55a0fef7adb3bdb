"""Process settings that make private training fast on CPU.

Per-example-gradient steps allocate large buffers every step; glibc's default
malloc returns them to the OS each time, which made DP steps ~2.7x slower on our
machines (data-and-models.md). The setting must be in the environment before
the process starts, so ``dpcare`` commands re-execute themselves once with it.
One thread per process: with 2 threads, small ops were ~100x slower here.
"""

from __future__ import annotations

import os
import sys

FAST_ALLOCATOR = {"GLIBC_TUNABLES": "glibc.malloc.mmap_max=0:glibc.malloc.trim_threshold=4294967295"}
THREADS = {"OMP_NUM_THREADS": "1"}


def ensure_fast_process() -> None:
    """Re-exec the current command with the allocator and thread settings, unless already set.

    Set ``DPCARE_NO_REEXEC=1`` to opt out (e.g. under a debugger).
    """
    wanted = {**FAST_ALLOCATOR, **{k: v for k, v in THREADS.items() if k not in os.environ}}
    if os.environ.get("DPCARE_NO_REEXEC") or all(os.environ.get(k) == v for k, v in wanted.items()):
        return
    env = {**os.environ, **wanted, "DPCARE_NO_REEXEC": "1"}
    os.execve(sys.executable, [sys.executable, *sys.orig_argv[1:]], env)


def launched_by_torchrun() -> bool:
    """Whether torchrun (or another launcher) started this process as one of several (WORLD_SIZE > 1)."""
    return int(os.environ.get("WORLD_SIZE", "1")) > 1


def process_rank() -> int:
    """This process's rank in a multi-process torch.distributed run started by ``torchrun`` (its RANK, read only
    when WORLD_SIZE > 1); 0 otherwise, so a stray RANK in a one-process run never turns off the budget or the
    run folder. Rank 0 alone writes run folders, reserves budget and prints (dpcare.engine.distributed)."""
    try:
        world = int(os.environ.get("WORLD_SIZE") or "1")
        return int(os.environ.get("RANK") or "0") if world > 1 else 0
    except ValueError:
        return 0
