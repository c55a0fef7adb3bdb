"""The ``dpcare`` console script: the process re-executes itself with the fast settings (dpcare.runtime) before
the command line and its dependencies are imported, so that they are imported once, not twice."""

from __future__ import annotations

from dpcare.runtime import ensure_fast_process


def main() -> None:
    """Re-exec with the fast process settings, then run the command line (:func:`dpcare.cli.main`)."""
    ensure_fast_process()
    from dpcare.cli import main as run_command_line

    run_command_line()


__all__ = ["main"]
