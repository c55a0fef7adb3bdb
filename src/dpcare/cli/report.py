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
    card: Annotated[bool, typer.Option(help="also write each run's Markdown model card beside the page (OUT with "
                                            ".md; OUT.<run>.md for several folders)")] = True,
) -> None:
    """Write one HTML page: the verdict first, the privacy guarantee in plain words with every ledger line, what
    is NOT protected, utility with units, attacks with ROC curves, the run's warnings, the settings in effect and
    the timing of every phase; several folders side by side. Beside it, the same as a Markdown model card."""
    from dpcare.report import collect, write_report
    from dpcare.report.card import card_path

    path = write_report(run_dirs, out, title, card=card)
    typer.echo(f"wrote {path} ({len(run_dirs)} folder{'s' if len(run_dirs) > 1 else ''})")
    if card:
        cards = [card_path(out, collect(d), len(run_dirs)) for d in run_dirs]
        typer.echo(f"model card{'s' if len(cards) > 1 else ''}: {', '.join(str(c) for c in cards)}")
