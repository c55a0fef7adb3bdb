"""A JSON-lines journal of finished tasks, so that a long grid (a benchmark's trainings, an attack's shadow
models) resumes where an interrupted call stopped instead of starting over.

Each line is one finished task: its ``key`` (what it computed), the ``settings`` fingerprint of the call
and its ``result``. A rerun with the same settings reads the journal, runs only the tasks whose key is
missing and returns every result in task order; a journal written with other settings is refused. The
journal lives in the run's staging folder (:class:`dpcare.runs.RunFolder`), which an interrupted run
leaves behind and the same command resumes in.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from dpcare.exceptions import SpecError
from dpcare.io import write_text
from dpcare.parallel import map_tasks


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


def json_digest(value: Any) -> str:
    """``sha256:<hex>`` over ``value`` as sorted-key JSON (non-JSON values as ``str``): the ``data`` a journal's
    rows carry, so that a journal is resumed only on the data its runs were trained on."""
    return "sha256:" + hashlib.sha256(json.dumps(value, sort_keys=True, default=str).encode()).hexdigest()


def release_journal(journal: Path) -> None:
    """Drop every row's ``data`` digest before the journal is released with its finished run (atomic rewrite):
    the digest only serves resuming, and a hash of private data confirms a guessed data set exactly, which no
    DP guarantee covers."""
    rows = read_journal(journal)
    write_text(journal, "".join(json.dumps({k: v for k, v in r.items() if k != "data"}, default=_plain) + "\n"
                                for r in rows))


def check_settings(journal: Path, rows: list[dict[str, Any]], fingerprint: str, data: str | None = None) -> None:
    """Refuse to resume a journal whose runs were trained with other settings, or (``data``: a digest of the
    data the runs train on, kept in each row's ``data`` field) on other data."""
    stale = [r for r in rows if r.get("settings") != fingerprint]
    if stale:
        raise SpecError(f"{journal} holds {len(stale)} run(s) trained with other settings (epochs, lr, batch size, "
                        "data sizes, ...): use another output folder, or delete the journal to start over")
    other = [r for r in rows if data is not None and r.get("data") != data]
    if other:
        raise SpecError(f"{journal} holds {len(other)} run(s) trained on other data (data digest "
                        f"{other[0].get('data')}, now {data}): use another output folder, or delete the journal "
                        "to start over")


def append_run(fh, row: dict[str, Any]) -> None:
    """One finished run, flushed to disk before the next starts."""
    fh.write(json.dumps(row, default=_plain) + "\n")
    fh.flush()
    os.fsync(fh.fileno())


def _plain(value: Any) -> Any:
    """numpy scalars and arrays as JSON numbers and lists (exact: floats are written with repr)."""
    if isinstance(value, (np.generic, np.ndarray)):
        return value.tolist()
    raise TypeError(f"a journal row holds a {type(value).__name__}, which JSON cannot store")


def journaled_map(fn: Callable[..., Any], tasks: Sequence[tuple], keys: Sequence[str], journal: Path | None,
                  settings: str, workers: int = 1, on_result: Callable[[int, Any], None] | None = None,
                  decode: Callable[[Any], Any] = lambda r: r) -> list[Any]:
    """``[fn(*task) for task in tasks]`` in task order (:func:`dpcare.parallel.map_tasks`), each result written
    to ``journal`` as it finishes under its ``keys[i]``; tasks already in the journal are not run again (their
    results are read back through ``decode``, e.g. ``np.asarray``). ``journal=None``: no journal.
    ``on_result(i, result)`` is called for every task, journaled ones first."""
    if len(keys) != len(tasks) or len(set(keys)) != len(keys):
        raise TypeError("journaled_map needs one distinct key per task")
    if journal is None:
        return map_tasks(fn, tasks, workers, on_result)
    rows = read_journal(journal)
    check_settings(journal, rows, settings)
    done = {r["key"]: decode(r["result"]) for r in rows}
    results: list[Any] = [done.get(k) for k in keys]
    todo = [i for i, k in enumerate(keys) if k not in done]
    for i, k in enumerate(keys):
        if k in done and on_result is not None:
            on_result(i, results[i])
    journal.parent.mkdir(parents=True, exist_ok=True)
    with open(journal, "a") as fh:
        def record(j: int, result: Any) -> None:
            i = todo[j]
            append_run(fh, {"key": keys[i], "settings": settings, "result": result})
            results[i] = result
            if on_result is not None:
                on_result(i, result)

        map_tasks(fn, [tasks[i] for i in todo], workers, record)
    return results


__all__ = ["append_run", "check_settings", "journaled_map", "json_digest", "read_journal", "release_journal"]
