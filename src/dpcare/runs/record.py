"""What a run records as it goes, for its ``run.json``: the time of each phase and every warning it gave.

``phase("training")`` times a block of work into the run being made (the newest unfinished
:class:`~dpcare.runs.RunFolder` of this process); outside a run it only runs the block. ``record_warning``
keeps a warning the user was shown; warnings given before the run folder exists (while settings are checked)
are held and handed to the next run folder made, so ``run.json`` and the report repeat every one of them.
"""

from __future__ import annotations

import time
import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

__all__ = ["RunRecord", "phase", "record_warning"]


@dataclass
class RunRecord:
    """The phases (name, seconds) and warnings of one run, in the order they happened."""

    started: float = field(default_factory=time.monotonic)
    phases: list[dict[str, float | str]] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    exact_statistics: bool = False  # a warning states exact statistics of the private data

    def add_warning(self, message: str, exact_statistics: bool = False) -> None:
        if message not in self.warnings:
            self.warnings.append(message)
        self.exact_statistics |= exact_statistics

    def timing_rows(self, resumed: bool = False) -> list[dict[str, float | str]]:
        """The phases, then the whole run from its output check to its manifest (of a resumed run: this
        process's part)."""
        whole = "this resumed part of the run" if resumed else "whole run"
        return [*self.phases, {"phase": f"{whole} (output check to run.json)",
                               "seconds": round(time.monotonic() - self.started, 2)}]


#: records of the unfinished run folders of this process, newest last; weak, so a run folder dropped without
#: finish() or abandon() (a library caller's exception) does not take the warnings of the runs after it
_ACTIVE: list[weakref.ref[RunRecord]] = []
_PENDING: list[tuple[str, bool]] = []  # warnings given while no run folder was open


def current_record() -> RunRecord | None:
    """The newest unfinished run's record (None outside a run)."""
    while _ACTIVE and _ACTIVE[-1]() is None:
        _ACTIVE.pop()
    return _ACTIVE[-1]() if _ACTIVE else None


def open_record() -> RunRecord:
    """A new run's record, made current (with the warnings given before it)."""
    record = RunRecord()
    for message, exact in _PENDING:
        record.add_warning(message, exact)
    _PENDING.clear()
    _ACTIVE.append(weakref.ref(record))
    return record


def close_record(record: RunRecord) -> None:
    _ACTIVE[:] = [r for r in _ACTIVE if r() is not None and r() is not record]


@contextmanager
def phase(name: str) -> Iterator[None]:
    """Time the block as the phase ``name`` of the current run (nothing is recorded outside a run). Nested
    phases are recorded each on its own (an outer phase's seconds include its inner ones)."""
    record = current_record()
    start = time.monotonic()
    try:
        yield
    finally:
        if record is not None:
            record.phases.append({"phase": name, "seconds": round(time.monotonic() - start, 2)})


def record_warning(message: str, exact_statistics: bool = False) -> None:
    """Keep a warning shown to the user for the current run's manifest (or the next run's, if none is open);
    ``exact_statistics``: its text holds exact statistics of the private data (the run's manifest then says that
    its warnings are outside the guarantee)."""
    record = current_record()
    if record is not None:
        record.add_warning(message, exact_statistics)
    elif (message, exact_statistics) not in _PENDING:
        _PENDING.append((message, exact_statistics))
