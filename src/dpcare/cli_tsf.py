"""``dpcare benchmark tsf``: membership-inference defences and patient-level DP-SGD for forecasting."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Annotated

import typer

from dpcare.cli_common import fail as _fail


def benchmark_tsf(
    datasets: Annotated[str, typer.Option(help="comma-separated bundled sets: mimic_demo, pbcseq")] = "mimic_demo,pbcseq",
    events: Annotated[Path | None, typer.Option(help="your event table instead (file or folder; needs --spec)")] = None,
    layout: Annotated[str, typer.Option(help="layout of --events: canonical, meds or clif")] = "canonical",
    spec: Annotated[Path | None, typer.Option(
        help="YAML for --events: name, step, window, default_variables, declared center/scale per variable")] = None,
    methods: Annotated[str, typer.Option(help="comma-separated: baseline, dp-sgd, zoo, zoo_pca, mixup")
                       ] = "baseline,dp-sgd,zoo,zoo_pca,mixup",
    epsilons: Annotated[str, typer.Option(help="comma-separated patient-level epsilons of DP-SGD")] = "1,3,8",
    shadows: Annotated[int, typer.Option(help="LiRA shadow models per data set (0: LOSS attack only)")] = 8,
    workers: Annotated[int, typer.Option(help="parallel processes for shadow models")] = 2,
    epochs: Annotated[float | None, typer.Option(help="baseline training epochs")] = None,
    dp_epochs: Annotated[float | None, typer.Option(help="DP-SGD epochs over the training patients")] = None,
    aug_epochs: Annotated[int | None, typer.Option(help="augmentation retraining epochs (at most)")] = None,
    alpha: Annotated[float | None, typer.Option(help="ZOO interpolation weight alpha in [0, 1]")] = None,
    seed: Annotated[int, typer.Option(help="seed of splits, models and shadows")] = 0,
    quick: Annotated[bool, typer.Option(help="smoke-size run (tiny model, epsilon 3, 2 shadows)")] = False,
    out: Annotated[Path, typer.Option(help="results folder (finished models are kept: rerun to resume)")] = Path(
        "results/tsf"),
) -> None:
    """Baseline vs DP-SGD (per patient) vs ZOO, ZOO-PCA, MixUp under LOSS and LiRA attacks
    (embedding-augmentation-mia-tsf.txt, Table 1, with real accounting)."""
    from dpcare.timeseries import user_dataset
    from dpcare.workflows.tsf_benchmark import TsfBenchmark, run_tsf_benchmark

    try:
        bench = TsfBenchmark.quick() if quick else TsfBenchmark(shadows=shadows)
        names = tuple(d.strip() for d in datasets.split(",") if d.strip())
        if events is not None:
            if spec is None:
                raise ValueError("--events needs --spec (declared center/scale per variable, step and window)")
            names = (user_dataset(events, layout, spec),)
        overrides = {k: v for k, v in {"epochs": epochs, "dp_epochs": dp_epochs, "aug_epochs": aug_epochs,
                                       "alpha": alpha}.items() if v is not None}
        bench = replace(bench, datasets=names, methods=tuple(m.strip() for m in methods.split(",")),
                        epsilons=bench.epsilons if quick else tuple(float(e) for e in epsilons.split(",")),
                        workers=workers, seed=seed, recipe=replace(bench.recipe, **overrides))
        run_tsf_benchmark(bench, out)
    except (ValueError, FileNotFoundError, ImportError) as err:
        _fail(err)
    typer.echo((out / "table.md").read_text())
    typer.echo(f"written: {out}/table.csv, table.md, roc-loss-*.png, roc-lira-*.png, <data>/target, <data>/shadows")
