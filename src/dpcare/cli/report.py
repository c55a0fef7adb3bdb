"""``dpcare report RUN_DIR... --out report.html``: one self-contained HTML page for run and benchmark folders.

A folder no dpcare command wrote raises :class:`dpcare.report.UnknownRunFolder` (a ``DPCareError``), which
the root command group reports as ``error: ...`` with exit status 2, like every other command.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer


def report(
    run_dirs: Annotated[list[Path], typer.Argument(
        help="folders written by dpcare train / demo / audit / synth or a benchmark; several are compared")],
    out: Annotated[Path, typer.Option(help="the HTML file to write (self-contained: plots embedded)")],
    title: Annotated[str | None, typer.Option(help="page title (default: the folder names)")] = None,
) -> None:
    """Write one HTML page: the privacy guarantee in plain words with every ledger line, what is NOT
    protected, utility, attacks with ROC curves, configuration and timing; several folders side by side."""
    from dpcare.report import write_report

    path = write_report(run_dirs, out, title)
    typer.echo(f"wrote {path} ({len(run_dirs)} folder{'s' if len(run_dirs) > 1 else ''})")
