"""Resumable benchmark grids: a JSON-lines journal of finished runs, and the runs yielded as each finishes
(on Ray with ``workers`` > 1, :mod:`dpcare.parallel`) so that the journal records it at once (used by the
text benchmarks)."""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

from dpcare.exceptions import SpecError
from dpcare.parallel import run_tasks


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
    """``fn(*task)`` for every task, as Ray tasks on ``workers`` CPUs with one torch thread each (in this
    process when ``workers`` <= 1), yielded as they finish; every finished run is yielded before a failure is
    raised, and each failure is named on stderr as it happens (the other runs go on)."""
    for _, row in run_tasks(fn, tasks, workers):
        yield row
