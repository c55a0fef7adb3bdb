"""``dpcare synth fit | sample | evaluate`` and ``dpcare benchmark dp2stage``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from dpcare.cli_common import fail as _fail
from dpcare.cli_common import table_and_spec as _table

synth_app = typer.Typer(help="DP synthetic tables from a language model (DP-2Stage).", no_args_is_help=True)


def _public(name: str | None, data: Path | None, spec: Path | None):
    """The stage-1 table of DP-2Stage-O: a bundled data set by name, or a file with its spec."""
    if data is not None:
        if spec is None:
            raise ValueError("--public-data needs --public-spec")
        return _table(data, spec)
    if name is None:
        return None, None
    from dpcare.data import load_dataset

    return load_dataset(name)


@synth_app.command("fit")
def fit(
    data: Annotated[Path, typer.Argument(help="private table (CSV or Parquet)")],
    spec: Annotated[Path, typer.Option(help="privacy spec: column types, public bounds and categories")],
    out: Annotated[Path, typer.Option(help="folder for the fitted synthesizer")] = Path("results/synth"),
    mode: Annotated[str, typer.Option(help="dp-2stage-u, dp-2stage-o, dp-standard or non-private")] = "dp-2stage-u",
    epsilon: Annotated[float, typer.Option(help="target epsilon of everything that reads the table")] = 1.0,
    delta: Annotated[float | None, typer.Option(help="delta (default 1/n^1.1; must be < 1/n)")] = None,
    model: Annotated[str, typer.Option(help="'smollm2' or a local Hugging Face causal-LM folder")] = "smollm2",
    layers: Annotated[int | None, typer.Option(help="keep only the first k transformer blocks (faster)")] = None,
    finetune: Annotated[str, typer.Option(help="lora or full")] = "lora",
    lora_rank: Annotated[int, typer.Option(help="LoRA rank")] = 8,
    lam: Annotated[float, typer.Option(help="stage-2 weight of value tokens (Eq. 6)")] = 0.65,
    stage1_epochs: Annotated[float, typer.Option(help="stage-1 epochs over the pseudo data")] = 5.0,
    stage2_epochs: Annotated[float, typer.Option(help="stage-2 (DP) epochs over the private table")] = 10.0,
    batch_size: Annotated[int, typer.Option(help="expected stage-2 batch size (Poisson)")] = 32,
    lr: Annotated[float, typer.Option(help="learning rate of both stages")] = 1e-3,
    order: Annotated[str, typer.Option(help="target-first or shuffle")] = "target-first",
    precision: Annotated[int, typer.Option(help="decimals written for numbers")] = 2,
    public: Annotated[str | None, typer.Option(help="dp-2stage-o: bundled public table (adult, support2, rhc)")] = None,
    public_data: Annotated[Path | None, typer.Option(help="dp-2stage-o: your public table instead")] = None,
    public_spec: Annotated[Path | None, typer.Option(help="spec of --public-data")] = None,
    seed: Annotated[int, typer.Option(help="seed of pseudo data, sampling and noise")] = 0,
    checkpoint_dir: Annotated[Path | None, typer.Option(help="checkpoint here; an existing one is resumed")] = None,
) -> None:
    """Fit a synthesizer; prints and saves the privacy guarantee."""
    from dpcare.synth.lm_model import LMSettings
    from dpcare.synth.synthesizer import StageSettings, Synthesizer, SynthSettings

    try:
        df, schema = _table(data, spec)
        public_table, public_schema = _public(public, public_data, public_spec)
        settings = SynthSettings(
            mode=mode, epsilon=None if mode == "non-private" else epsilon, delta=delta, lam=lam, order=order,
            precision=precision, seed=seed,
            lm=LMSettings(model=model, layers=layers, finetune=finetune, lora_rank=lora_rank),
            stage1=StageSettings(epochs=stage1_epochs, lr=lr), stage2=StageSettings(epochs=stage2_epochs,
                                                                                    batch_size=batch_size, lr=lr))
        synth = Synthesizer(schema, settings, public_table=public_table, public_schema=public_schema)
        synth.fit(df, checkpoint_dir=str(checkpoint_dir) if checkpoint_dir else None)
        synth.save(out)
    except (ValueError, FileNotFoundError, ImportError) as err:
        _fail(err)
    if synth.guarantee is not None:
        from dpcare.io import write_json

        write_json(out / "guarantee.json", synth.guarantee.to_dict())
        typer.echo(synth.guarantee.describe())
    else:
        typer.echo("non-private fit: NO privacy guarantee")
    typer.echo(f"saved to {out}/")


@synth_app.command("sample")
def sample(
    folder: Annotated[Path, typer.Argument(help="a fitted synthesizer (from `dpcare synth fit`)")],
    n: Annotated[int, typer.Option(help="rows to sample")] = 1000,
    out: Annotated[Path, typer.Option(help="CSV to write")] = Path("results/synth/synthetic.csv"),
    method: Annotated[str, typer.Option(help="constrained, rejection or imputation")] = "constrained",
    conditions: Annotated[Path | None, typer.Option(
        help="CSV with one row per sample fixing some columns (exact conditioning for leading columns)")] = None,
    temperature: Annotated[float, typer.Option(help="sampling temperature")] = 1.0,
    batch_size: Annotated[int, typer.Option(help="rows decoded together")] = 256,
    seed: Annotated[int, typer.Option(help="sampling seed")] = 0,
) -> None:
    """Sample synthetic rows (sampling reads no private data: no privacy cost)."""
    import pandas as pd

    from dpcare.io import write_json, write_text
    from dpcare.synth.synthesizer import Synthesizer

    try:
        synth = Synthesizer.load(folder)
        cond = pd.read_csv(conditions) if conditions else None
        df = synth.sample(n, method=method, conditions=cond, temperature=temperature, batch_size=batch_size,
                          seed=seed)
    except (ValueError, FileNotFoundError) as err:
        _fail(err)
    write_text(out, df.to_csv(index=False))
    write_json(out.with_suffix(".sampling.json"), synth.last_sampling.to_dict())
    s = synth.last_sampling
    typer.echo(f"wrote {len(df)} rows to {out} ({s.rows_per_second:.1f} rows/s, valid rate {s.valid_rate:.3f})")


@synth_app.command("evaluate")
def evaluate(
    synthetic: Annotated[Path, typer.Argument(help="synthetic table (CSV)")],
    train: Annotated[Path, typer.Option(help="the real training table the synthesizer was fitted on")],
    test: Annotated[Path, typer.Option(help="a held-out real table")],
    spec: Annotated[Path, typer.Option(help="privacy spec of the tables")],
    synthesizer: Annotated[Path | None, typer.Option(help="fitted synthesizer: adds perplexities on --test")] = None,
    out: Annotated[Path | None, typer.Option(help="JSON report (default: next to the synthetic table)")] = None,
    seed: Annotated[int, typer.Option(help="seed of the evaluation models")] = 0,
) -> None:
    """ML efficacy (LR, XGBoost), HIST, Pair, CorAcc, DCR and duplicates (and perplexities)."""
    from dpcare.io import write_json
    from dpcare.synth.evaluate import evaluate_synthetic, format_report

    try:
        real_train, schema = _table(train, spec)
        real_test, _ = _table(test, spec)
        fake, _ = _table(synthetic, spec)
        report = evaluate_synthetic(fake, real_train, real_test, schema, seed=seed)
        if synthesizer is not None:
            from dpcare.synth.synthesizer import Synthesizer

            report["perplexity"] = Synthesizer.load(synthesizer, progress=False).perplexity(real_test)
    except (ValueError, FileNotFoundError) as err:
        _fail(err)
    path = out or synthetic.with_suffix(".report.json")
    write_json(path, report)
    typer.echo(format_report(report))
    if "perplexity" in report:
        typer.echo("perplexity: " + json.dumps({k: round(v, 3) for k, v in report["perplexity"].items()}))
    typer.echo(f"written to {path}")


def benchmark_dp2stage(
    datasets: Annotated[str, typer.Option(help="comma-separated: adult, support2, rhc")] = "adult,support2",
    epsilons: Annotated[str, typer.Option(help="comma-separated target epsilons")] = "1,8",
    baselines: Annotated[str, typer.Option(help="comma-separated SmartNoise baselines (mst, aim, dpctgan) or none")
                         ] = "mst,aim,dpctgan",
    model: Annotated[str, typer.Option(help="'smollm2' or a local causal-LM folder")] = "smollm2",
    layers: Annotated[int | None, typer.Option(help="transformer blocks kept (default 1 for the CPU budget)")] = None,
    n_train: Annotated[int | None, typer.Option(help="private training rows per data set")] = None,
    all_columns: Annotated[bool, typer.Option(help="use every column (default: 10 per data set)")] = False,
    quick: Annotated[bool, typer.Option(help="smoke-size run for tests (Adult, epsilon 8, MST only)")] = False,
    out: Annotated[Path, typer.Option(help="results folder (finished runs are kept: rerun to resume)")] = Path(
        "results/dp2stage"),
) -> None:
    """DP-Standard vs DP-2Stage-U vs DP-2Stage-O vs SmartNoise baselines (dp-2stage.txt, Table 3)."""
    from dataclasses import replace

    from dpcare.workflows.dp2stage_benchmark import Dp2StageBenchmark, run_benchmark

    try:
        bench = Dp2StageBenchmark.quick(model) if quick else Dp2StageBenchmark(
            datasets=tuple(d.strip() for d in datasets.split(",")),
            epsilons=tuple(float(e) for e in epsilons.split(",")))
        chosen = () if baselines.strip() == "none" else tuple(b.strip() for b in baselines.split(","))
        if not quick:
            bench = replace(bench, baselines=chosen, all_columns=all_columns,
                            lm=replace(bench.lm, model=model, layers=layers or bench.lm.layers))
            if n_train:
                bench = replace(bench, n_train=n_train)
        run_benchmark(bench, out)
    except (ValueError, FileNotFoundError, ImportError) as err:
        _fail(err)
    typer.echo((out / "table.md").read_text())
    typer.echo(f"written: {out}/table.csv, table.md, dp2stage.png, sampling.json, runs/")
