"""What the command modules share: the one error path and small loaders."""

from __future__ import annotations

from pathlib import Path

import click
import typer
from typer.core import TyperGroup

from dpcare.exceptions import DPCareError

#: errors a user can fix (bad input, a missing file or optional package): reported in one line, exit status 2
USER_ERRORS = (DPCareError, ValueError, FileNotFoundError, ImportError)


def fail(err: Exception) -> None:
    """Print ``error: <message>`` to stderr and exit with status 2."""
    typer.secho(f"error: {err}", fg=typer.colors.RED, err=True)
    raise typer.Exit(2)


class ErrorReportingGroup(TyperGroup):
    """The root command group: turns a :data:`USER_ERRORS` raised by any command into :func:`fail`."""

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except USER_ERRORS as err:
            fail(err)


def table_and_spec(data: Path, spec: Path):
    """(table, schema): a CSV/Parquet file validated against its privacy spec."""
    from dpcare.data import load_spec, load_table

    schema = load_spec(spec)
    return load_table(data, schema), schema
