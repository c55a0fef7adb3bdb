"""Where a dpcare warning points: the first line outside dpcare, the user's call that led to it."""

from __future__ import annotations

import sys


#: standard-library modules that only pass a call through (dataclasses.replace, a context manager, a partial)
PLUMBING = frozenset({"dataclasses", "contextlib", "functools"})


def _passes_through(frame) -> bool:
    name = frame.f_globals.get("__name__", "")  # a dataclass's generated __init__ runs in its module's globals
    return name == "dpcare" or name.startswith("dpcare.") or name in PLUMBING


def user_stacklevel() -> int:
    """The ``stacklevel`` that makes a ``warnings.warn`` in the function calling this one name the first frame
    outside dpcare and the :data:`PLUMBING` modules, however many calls lie between (a fixed number breaks when
    a call is added or a public entry point is called from another)."""
    frame, level = sys._getframe(1), 1
    while frame.f_back is not None and _passes_through(frame):
        frame, level = frame.f_back, level + 1
    return level


__all__ = ["user_stacklevel"]
