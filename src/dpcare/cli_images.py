"""``dpcare benchmark diffusion``: Feature-DP diffusion models with a blurred public view."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Annotated

import typer

from dpcare.cli_common import fail as _fail


def benchmark_diffusion(
    dataset: Annotated[str, typer.Option(help="mnist (5,000 real digits, 28x28) or digits (8x8)")] = "mnist",
    epsilons: Annotated[str, typer.Option(help="comma-separated epsilons of the private methods")] = "8,1",
    epochs: Annotated[float | None, typer.Option(help="epochs of Non-private and Public")] = None,
    dp_epochs: Annotated[float | None, typer.Option(help="epochs of the private methods")] = None,
    samples: Annotated[int | None, typer.Option(help="generated images per method for FID")] = None,
    blur_sigma: Annotated[float | None, typer.Option(help="sigma (pixels) of the public Gaussian blur")] = None,
    seed: Annotated[int, typer.Option(help="seed of splits, models and sampling")] = 0,
    quick: Annotated[bool, typer.Option(help="smoke-size run (8x8 digits, tiny U-Net, epsilon 8)")] = False,
    out: Annotated[Path, typer.Option(help="results folder (finished methods are kept: rerun to resume)")] = Path(
        "results/diffusion"),
) -> None:
    """Non-private vs Public (blurred) vs DP vs FDP (DP-SGD) vs FDP (Alg. 1, with rejection of blurry
    samples): FID on classifier features (feature-dp.txt, Section 6.3)."""
    from dpcare.workflows.diffusion import DiffusionBenchmark, run_diffusion_benchmark

    try:
        bench = DiffusionBenchmark.quick() if quick else DiffusionBenchmark(
            dataset=dataset, epsilons=tuple(float(e) for e in epsilons.split(",")))
        overrides = {k: v for k, v in {"epochs": epochs, "dp_epochs": dp_epochs, "samples": samples,
                                       "blur_sigma": blur_sigma}.items() if v is not None}
        bench = replace(bench, seed=seed, recipe=replace(bench.recipe, **overrides))
        run_diffusion_benchmark(bench, out)
    except (ValueError, FileNotFoundError, ImportError) as err:
        _fail(err)
    typer.echo((out / "table.md").read_text())
    typer.echo(f"written: {out}/table.csv, table.md, samples.png, runs/<method>/samples.png")
