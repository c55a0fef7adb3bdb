"""Benchmark grids: the runs yielded as each finishes (on Ray with ``workers`` > 1, :mod:`dpcare.parallel`), so
that the journal (:mod:`dpcare.runs.journal`) records it at once (used by the text benchmarks)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator

from dpcare.parallel import run_tasks

__all__ = ["parallel_results"]


def parallel_results(fn: Callable[..., dict], tasks: Iterable[tuple], workers: int) -> Iterator[dict]:
    """``fn(*task)`` for every task, as Ray tasks on ``workers`` CPUs with one torch thread each (in this
    process when ``workers`` <= 1), yielded as they finish; every finished run is yielded before a failure is
    raised, and each failure is named on stderr as it happens (the other runs go on)."""
    for _, row in run_tasks(fn, tasks, workers):
        yield row
