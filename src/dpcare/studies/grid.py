"""Resumable benchmark grids: a JSON-lines journal of finished runs and a pool that journals each run as
soon as it finishes (used by the text benchmarks)."""

from __future__ import annotations

import json
import multiprocessing
import os
import sys
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path
from typing import Any

import torch

from dpcare.exceptions import SpecError


def read_journal(path: Path) -> list[dict[str, Any]]:
    """The completed runs of an earlier, interrupted call; a half-written last line is cut off."""
    if not path.exists():
        return []
    rows, good = [], 0
    with open(path, "rb") as fh:
        for line in fh:
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError:
                break
            good += len(line)
    if good < path.stat().st_size:
        os.truncate(path, good)
    return rows


def check_settings(journal: Path, rows: list[dict[str, Any]], fingerprint: str) -> None:
    """Refuse to resume a journal whose runs were trained with other settings."""
    stale = [r for r in rows if r.get("settings") != fingerprint]
    if stale:
        raise SpecError(f"{journal} holds {len(stale)} run(s) trained with other settings (epochs, lr, batch size, "
                        "data sizes, ...): use another output folder, or delete the journal to start over")


def append_run(fh, row: dict[str, Any]) -> None:
    """One finished run, flushed to disk before the next starts."""
    fh.write(json.dumps(row) + "\n")
    fh.flush()
    os.fsync(fh.fileno())


def parallel_results(fn: Callable[..., dict], tasks: Iterable[tuple], workers: int) -> Iterator[dict]:
    """``fn(*task)`` for every task, in ``workers`` spawned single-threaded processes (in this process when
    ``workers`` <= 1), yielded as they finish; every finished run is yielded before a failure is raised, and
    each failure is named on stderr as it happens (the other runs go on)."""
    tasks = list(tasks)
    if workers <= 1 or len(tasks) <= 1:
        for task in tasks:
            yield fn(*task)
        return
    failed = None
    with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn"),
                             initializer=torch.set_num_threads, initargs=(1,)) as pool:
        futures = {pool.submit(fn, *task): task for task in tasks}
        for f in as_completed(futures):
            if f.exception() is None:
                yield f.result()
                continue
            named = ", ".join(str(x) for x in futures[f] if isinstance(x, (str, int, float, type(None))))
            print(f"run ({named}) failed: {f.exception()!r}; the others go on", file=sys.stderr, flush=True)
            failed = failed or f.exception()
    if failed is not None:
        raise failed
