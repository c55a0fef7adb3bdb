"""``dpcare synth fit | sample | evaluate``: DP synthetic tables from a language model (DP-2Stage)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from dpcare.cli.budget import BudgetOption
from dpcare.cli.common import table_and_spec
from dpcare.exceptions import MissingFileError, SettingsError

app = typer.Typer(help="DP synthetic tables from a language model (DP-2Stage).", no_args_is_help=True)


def _public(name: str | None, data: Path | None, spec: Path | None):
    """The stage-1 table of DP-2Stage-O: a bundled data set by name, or a file with its spec."""
    if data is not None:
        if spec is None:
            raise SettingsError("--public-data needs --public-spec")
        return table_and_spec(data, spec)
    if name is None:
        return None, None
    from dpcare.data import load_dataset

    return load_dataset(name)


@app.command("fit")
def fit(
    data: Annotated[Path, typer.Argument(help="private table (CSV or Parquet)")],
    spec: Annotated[Path, typer.Option(help="privacy spec: column types, public bounds and categories")],
    out: Annotated[Path, typer.Option(help="folder for the fitted synthesizer")] = Path("results/synth"),
    mode: Annotated[str, typer.Option(help="dp-2stage-u, dp-2stage-o, dp-standard or non-private")] = "dp-2stage-u",
    epsilon: Annotated[float, typer.Option(help="target epsilon of everything that reads the table")] = 1.0,
    delta: Annotated[float | None, typer.Option(help="delta (default 1/n^1.1; must be < 1/n)")] = None,
    model: Annotated[str, typer.Option(help="'smollm2' or a local Hugging Face causal-LM folder")] = "smollm2",
    scale: Annotated[str, typer.Option(help="auto (cpu unless the model trains on a GPU), cpu (first block, 1 + 2 "
                                              "epochs: minutes) or paper (whole model, 5 + 10 epochs)")] = "auto",
    layers: Annotated[int | None, typer.Option(help="keep only the first k transformer blocks (default: the scale's)")
                      ] = None,
    finetune: Annotated[str, typer.Option(help="lora or full")] = "lora",
    lora_rank: Annotated[int, typer.Option(help="LoRA rank")] = 8,
    lam: Annotated[float, typer.Option(help="stage-2 weight of value tokens (Eq. 6)")] = 0.65,
    stage1_epochs: Annotated[float | None, typer.Option(help="stage-1 epochs over the pseudo data (default: the "
                                                             "scale's)")] = None,
    stage2_epochs: Annotated[float | None, typer.Option(help="stage-2 (DP) epochs over the private table (default: "
                                                             "the scale's)")] = None,
    batch_size: Annotated[int, typer.Option(help="expected stage-2 batch size (Poisson)")] = 32,
    lr: Annotated[float, typer.Option(help="learning rate of both stages")] = 1e-3,
    order: Annotated[str, typer.Option(help="target-first or shuffle")] = "target-first",
    precision: Annotated[int, typer.Option(help="decimals written for numbers")] = 2,
    public: Annotated[str | None, typer.Option(help="dp-2stage-o: bundled public table (adult, support2, rhc)")] = None,
    public_data: Annotated[Path | None, typer.Option(help="dp-2stage-o: your public table instead")] = None,
    public_spec: Annotated[Path | None, typer.Option(help="spec of --public-data")] = None,
    seed: Annotated[int, typer.Option(help="seed of pseudo data, sampling and noise")] = 0,
    checkpoint_dir: Annotated[Path | None, typer.Option(help="checkpoint here; an existing one is resumed")] = None,
    budget: BudgetOption = None,
) -> None:
    """Fit a synthesizer; prints the estimated time first, then saves and prints the privacy guarantee."""
    from dpcare.data import count_rows, load_spec, load_table
    from dpcare.privacy import Guarantee, default_delta, guard_run
    from dpcare.synth.synthesizer import Synthesizer, SynthSettings

    schema = load_spec(spec)
    public_table, public_schema = _public(public, public_data, public_spec)
    settings = SynthSettings.for_device(
        scale, mode=mode, epsilon=None if mode == "non-private" else epsilon, delta=delta, lam=lam, order=order,
        precision=precision, seed=seed,
        lm={"model": model, "layers": layers, "finetune": finetune, "lora_rank": lora_rank},
        stage1={"epochs": stage1_epochs, "lr": lr},
        stage2={"epochs": stage2_epochs, "batch_size": batch_size, "lr": lr})
    synth = Synthesizer(schema, settings, public_table=public_table, public_schema=public_schema)
    rows = count_rows(data)
    planned = None if mode == "non-private" else Guarantee(
        epsilon=epsilon, delta=delta if delta is not None else default_delta(rows), n=rows)
    with guard_run(budget, planned, command="synth fit", data=data) as held:
        synth.fit(load_table(data, schema), checkpoint_dir=str(checkpoint_dir) if checkpoint_dir else None,
                  report=lambda message: typer.echo(message, err=True))
        if held is not None:
            held.actual = synth.ledger
    synth.save(out)
    if synth.guarantee is not None:
        from dpcare.io import write_json

        write_json(out / "guarantee.json", synth.guarantee.to_dict())
        typer.echo(synth.guarantee.describe())
    else:
        typer.echo("non-private fit: NO privacy guarantee")
    typer.echo(f"saved to {out}/")


@app.command("sample")
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

    synth = Synthesizer.load(folder)
    if conditions is not None and not conditions.is_file():
        raise MissingFileError(f"conditions file not found: {conditions}")
    cond = pd.read_csv(conditions) if conditions else None
    df = synth.sample(n, method=method, conditions=cond, temperature=temperature, batch_size=batch_size,
                      seed=seed)
    write_text(out, df.to_csv(index=False))
    write_json(out.with_suffix(".sampling.json"), synth.last_sampling.to_dict())
    s = synth.last_sampling
    typer.echo(f"wrote {len(df)} rows to {out} ({s.rows_per_second:.1f} rows/s, valid rate {s.valid_rate:.3f})")


@app.command("evaluate")
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

    real_train, schema = table_and_spec(train, spec)
    real_test, _ = table_and_spec(test, spec)
    fake, _ = table_and_spec(synthetic, spec)
    report = evaluate_synthetic(fake, real_train, real_test, schema, seed=seed)
    if synthesizer is not None:
        from dpcare.synth.synthesizer import Synthesizer

        report["perplexity"] = Synthesizer.load(synthesizer, progress=False).perplexity(real_test)
    path = out or synthetic.with_suffix(".report.json")
    write_json(path, report)
    typer.echo(format_report(report))
    if "perplexity" in report:
        typer.echo("perplexity: " + json.dumps({k: round(v, 3) for k, v in report["perplexity"].items()}))
    typer.echo(f"written to {path}")
