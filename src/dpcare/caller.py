"""Where a dpcare warning points: the first line outside dpcare, the user's call that led to it."""

from __future__ import annotations

import sys


def _in_dpcare(frame) -> bool:
    name = frame.f_globals.get("__name__", "")  # a dataclass's generated __init__ runs in its module's globals
    return name == "dpcare" or name.startswith("dpcare.")


def user_stacklevel() -> int:
    """The ``stacklevel`` that makes a ``warnings.warn`` in the function calling this one name the first frame
    outside the dpcare package, however many of dpcare's own calls lie between (a fixed number breaks when a
    call is added or a public entry point is called from another)."""
    frame, level = sys._getframe(1), 1
    while frame.f_back is not None and _in_dpcare(frame):
        frame, level = frame.f_back, level + 1
    return level


__all__ = ["user_stacklevel"]
