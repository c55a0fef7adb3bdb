"""``dpcare budget init|show``: a data set's privacy budget across runs, and the ``--budget`` option.

Errors propagate to the root group (:class:`dpcare.cli.common.ErrorReportingGroup`), which reports them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

app = typer.Typer(help="A data set's privacy budget across runs: every release recorded and composed.",
                         no_args_is_help=True)

#: ``budget: BudgetOption = None`` on every command that reads private data; pass it to
#: :func:`dpcare.privacy.budget.guard_run` with the run's planned ledger before loading the data.
BudgetOption = Annotated[Path | None, typer.Option(
    "--budget", help="the data set's budget file (`dpcare budget init`): refuse the run before reading any "
    "private row if it would exceed the total; record it")]


@app.command("init")
def budget_init(
    file: Annotated[Path, typer.Argument(help="budget file to create (JSON)")],
    epsilon: Annotated[float, typer.Option(help="total epsilon of every run on this data set")],
    delta: Annotated[float, typer.Option(help="total delta (in (0, 1); below 1/n of the data set, "
                                                 "best <= 0.01/n: each run's default is min(1e-5, 0.01/n))")],
    dataset: Annotated[str, typer.Option(help="name of the data set")],
    unit: Annotated[str, typer.Option(help="what it protects: example, patient, features or label")] = "example",
    protected: Annotated[str | None, typer.Option(
        help="features / label budgets: comma-separated protected columns (default: the first release's)")] = None,
    data: Annotated[Path | None, typer.Option(help="data file or folder to fingerprint (sha256)")] = None,
    accountant: Annotated[str, typer.Option(help="pld or rdp: composes the releases")] = "pld",
    runs: Annotated[int, typer.Option(help="runs the budget plans: a run without --delta takes delta / runs")] = 10,
    force: Annotated[bool, typer.Option(help="overwrite an existing budget file (its releases are lost)")] = False,
) -> None:
    """Create a budget file declaring the total (epsilon, delta) of a data set."""
    from dpcare.privacy.budget import Budget, data_fingerprint

    cols = tuple(c.strip() for c in (protected or "").split(",") if c.strip())
    b = Budget.create(file, epsilon, delta, dataset, unit, cols, accountant,
                      data_fingerprint(data) if data else None, force=force, runs=runs)
    typer.echo(f"budget of {b.dataset!r} ({b.unit.value}): epsilon = {b.epsilon:g}, delta = {b.delta:g} -> {file}; "
               f"a run without --delta takes delta = {b.run_delta:.3g} ({b.runs} planned runs)")


@app.command("show")
def budget_show(file: Annotated[Path, typer.Argument(help="budget file")]) -> None:
    """Every release, and the spent, total and remaining budget."""
    from dpcare.privacy.budget import Budget

    b = Budget.load(file)
    spent = b.spent()
    cols = f" ({', '.join(b.protected_columns)})" if b.protected_columns else ""
    typer.echo(f"data set: {b.dataset}{'  ' + b.fingerprint if b.fingerprint else ''}")
    typer.echo(f"unit: {b.unit.value}{cols}; accountant: {b.accountant}; created {b.created}")
    rows = [("run id", "command", "time", "status", "epsilon", "delta", "composed by")]
    rows += [(r.run_id, r.command or "-", r.time, r.status, f"{r.epsilon:.4g}", f"{r.delta:.3g}",
              "events" if r.ledger else "(eps, delta)") for r in b.releases]
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        typer.echo("  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip())
    if not b.releases:
        typer.echo("(no releases)")
    left, over = b.epsilon - spent.epsilon, spent.epsilon > b.epsilon or spent.delta > b.delta
    typer.echo(f"spent:     epsilon = {spent.epsilon:.4g} at delta = {spent.delta:.3g} "
               f"({spent.releases} counted releases, {spent.method} composition)")
    typer.echo(f"total:     epsilon = {b.epsilon:g}, delta = {b.delta:g}")
    typer.echo(f"remaining: epsilon = {max(left, 0.0):.4g}" + (" (EXCEEDED)" if over else "")
               + "; a run is checked by composing its own events with the releases above")
    held = spent.basic_delta
    typer.echo(f"delta:     {held:.3g} of {b.delta:g} held by releases without events, {b.delta - held:.3g} left to "
               f"compose the rest at; a run without --delta takes delta = {b.run_delta:.3g} (the total over "
               f"{b.runs} planned runs)")


def with_budget_delta(settings, budget: Path | None):
    """``settings`` for a run under ``--budget``: without its own delta, the budget's delta over its planned runs
    (:attr:`dpcare.privacy.budget.Budget.run_delta`), so the run leaves delta for those after it."""
    if budget is None or settings.dp.delta is not None:
        return settings
    from dpcare.privacy.budget import Budget

    return settings.replace(dp=settings.dp.replace(delta=Budget.load(budget).run_delta))
