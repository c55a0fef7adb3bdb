"""``dpcare demo`` and ``dpcare datasets``: the bundled real data sets."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer


def demo(
    out: Annotated[Path, typer.Option(help="results folder")] = Path("results/demo"),
    dataset: Annotated[str, typer.Option(help="bundled data set: support2, rhc or adult")] = "support2",
    epsilon: Annotated[float, typer.Option(help="epsilon of every private method")] = 1.0,
    seeds: Annotated[int, typer.Option(help="seeds per method")] = 3,
    epochs: Annotated[float, typer.Option(help="epochs per run")] = 10.0,
    force: Annotated[bool, typer.Option("--force", help="replace a non-empty --out folder when the run finishes")
                     ] = False,
) -> None:
    """Main job: Feature-DP (demographics private) vs DP-SGD vs Label-DP vs non-private on SUPPORT2."""
    from dpcare.studies.demo import run_demo

    run_demo(out, dataset=dataset, epsilon=epsilon, seeds=seeds, epochs=epochs, force=force)
    typer.echo((out / "results.md").read_text())
    typer.echo(f"table: {out}/results.csv, {out}/results.md; plot: {out}/results.png; runs: {out}/runs/")


def datasets(
    export: Annotated[str | None, typer.Option(help="write this bundled data set as CSV + its spec")] = None,
    out: Annotated[Path, typer.Option(help="folder for --export")] = Path("results/data"),
) -> None:
    """List the bundled real data sets, or export one with its privacy spec (a template for your own)."""
    from dpcare.data import BUNDLED, load_dataset, save_spec
    from dpcare.io import write_text

    if export is None:
        for name, text in BUNDLED.items():
            typer.echo(f"{name}: {text}")
        return
    df, schema = load_dataset(export)
    write_text(out / f"{export}.csv", df.to_csv(index=False))
    save_spec(schema, out / f"{export}.yaml")
    typer.echo(f"wrote {out / (export + '.csv')} ({len(df)} rows) and {out / (export + '.yaml')}")
