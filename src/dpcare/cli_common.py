"""Helpers shared by the command-line modules."""

from __future__ import annotations

from pathlib import Path

import typer


def fail(err: Exception) -> None:
    """Print a clear error and exit with status 2."""
    typer.secho(f"error: {err}", fg=typer.colors.RED, err=True)
    raise typer.Exit(2)


def table_and_spec(data: Path, spec: Path):
    """(table, schema): a CSV/Parquet file validated against its privacy spec."""
    from dpcare.data import load_spec, load_table

    schema = load_spec(spec)
    return load_table(data, schema), schema
