"""``dpcare train``: one private (or non-private) model on a table with a privacy spec."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Annotated

import typer

from dpcare.cli.budget import BudgetOption


def train(
    data: Annotated[Path, typer.Argument(help="CSV or Parquet file")],
    spec: Annotated[Path, typer.Option(help="privacy spec (YAML or JSON): column types, roles, public bounds")],
    out: Annotated[Path, typer.Option(help="output folder: model.pt, metrics.json, guarantee.json")] = Path(
        "results/train"),
    method: Annotated[str, typer.Option(help="feature-dp, dp-sgd, label-dp or non-private")] = "feature-dp",
    epsilon: Annotated[float, typer.Option(help="target epsilon of the whole run")] = 1.0,
    delta: Annotated[float | None, typer.Option(help="delta (default 1/n^1.1; must be < 1/n)")] = None,
    clip: Annotated[float, typer.Option(help="per-example clipping norm C")] = 1.0,
    alpha: Annotated[float, typer.Option(help="weight of the private gradient: g = g_pub + alpha g_priv")] = 1.0,
    epochs: Annotated[float, typer.Option(help="passes over the private data (in expectation)")] = 10.0,
    batch_size: Annotated[int, typer.Option(help="expected private batch size (Poisson)")] = 256,
    public_batch_size: Annotated[int | None, typer.Option(help="public batch size (default: batch size)")] = None,
    lr: Annotated[float, typer.Option(help="Adam learning rate")] = 1e-3,
    pad: Annotated[str, typer.Option(help="how pad(Psi(x)) fills private features: gaussian or zeros")] = "gaussian",
    stats_epsilon: Annotated[float | None, typer.Option(
        help="DP budget for scaling bounds of protected columns the spec does not declare")] = None,
    seed: Annotated[int, typer.Option(help="seed of splits, sampling, noise")] = 0,
    checkpoint_dir: Annotated[Path | None, typer.Option(help="checkpoint here; an existing one is resumed")] = None,
    audit: Annotated[bool, typer.Option(help="run the LOSS membership attack: training vs held-out test rows")] = False,
    budget: BudgetOption = None,
) -> None:
    """Train a model on a table with a privacy spec; print test AUPRC/AUROC and the guarantee."""
    from dpcare.data import count_rows, load_spec, load_table
    from dpcare.privacy import guard_run
    from dpcare.workflows.tabular import TabularRun, planned_guarantee, train_tabular

    schema = load_spec(spec)
    run = TabularRun(method=method, epsilon=None if method == "non-private" else epsilon, delta=delta,
                     clip_norm=clip, alpha=alpha, epochs=epochs, batch_size=batch_size,
                     public_batch_size=public_batch_size, lr=lr, pad=pad, stats_epsilon=stats_epsilon, seed=seed,
                     checkpoint_dir=str(checkpoint_dir) if checkpoint_dir else None, audit=audit)
    with guard_run(budget, planned_guarantee(schema, run, count_rows(data)), command="train", data=data) as held:
        result = train_tabular(load_table(data, schema), schema, run, out_dir=out)
        if held is not None:
            held.actual = result.ledger
    typer.echo(json.dumps(result.row(), indent=2, default=_json_float))
    if result.guarantee:
        from dpcare.privacy import Guarantee

        typer.echo(Guarantee.from_dict(result.guarantee).describe())
    if result.audit:
        a = result.audit
        typer.echo(f"LOSS attack: AUC {a['metrics']['auc']['value']:.3f} "
                   f"[{a['metrics']['auc']['low']:.3f}, {a['metrics']['auc']['high']:.3f}], TPR/FPR at the mean "
                   f"training loss {a['tpr_fpr_ratio']:.3f} (audit.json, audit_roc.png)")
    typer.echo(f"written to {out}/")


def _json_float(x):
    return "inf" if isinstance(x, float) and math.isinf(x) else str(x)
