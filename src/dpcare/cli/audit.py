"""``dpcare audit loss | lira | one-run | attribute``: attacks on trained models and training recipes."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from dpcare.cli.common import table_and_spec
from dpcare.exceptions import DataError

app = typer.Typer(help="Attacks and audits: LOSS, LiRA, one-run epsilon lower bound, attribute inference.",
                  no_args_is_help=True)


@app.command("loss")
def audit_loss(
    run_dir: Annotated[Path, typer.Argument(help="folder of a `dpcare train` run (model.pt)")],
    members: Annotated[Path, typer.Option(help="CSV/Parquet of rows used in training")],
    nonmembers: Annotated[Path, typer.Option(help="CSV/Parquet of rows not used in training")],
    out: Annotated[Path | None, typer.Option(help="where to write audit.json and audit_roc.png")] = None,
) -> None:
    """Membership inference (LOSS attack) against a trained model: AUC, TPR at low FPR, ROC."""
    import torch

    from dpcare.data import load_table
    from dpcare.workflows.tabular import load_run, membership_audit

    run = load_run(run_dir)
    model, encoder = run.model, run.encoder
    frames = {name: load_table(p, encoder.schema) for name, p in (("members", members), ("non-members", nonmembers))}
    both = frames["members"].merge(frames["non-members"], how="inner")
    if len(both):
        raise DataError(f"{len(both)} rows appear in both the members and the non-members")
    data = {k: {"x": torch.from_numpy(encoder.transform(f)), "y": torch.from_numpy(encoder.encode_target(f))}
            for k, f in frames.items()}
    result = membership_audit(model, data["members"], data["non-members"], out or run_dir, title=str(run_dir))
    m = result["metrics"]
    typer.echo(f"LOSS attack: AUC {m['auc']['value']:.3f} [{m['auc']['low']:.3f}, {m['auc']['high']:.3f}]; "
               f"TPR@1%FPR {m['tpr_at_1pct_fpr']['value']:.3f}; balanced accuracy "
               f"{m['balanced_accuracy']['value']:.3f}; TPR/FPR at the mean training loss {result['tpr_fpr_ratio']:.3f}")


@app.command("lira")
def audit_lira(
    data: Annotated[Path, typer.Argument(help="the population table (CSV/Parquet)")],
    spec: Annotated[Path, typer.Option(help="its privacy spec")],
    method: Annotated[str, typer.Option(help="training recipe of target and shadows")] = "dp-sgd",
    epsilon: Annotated[float, typer.Option(help="epsilon of the recipe (private methods)")] = 1.0,
    epochs: Annotated[float, typer.Option(help="epochs of the recipe")] = 10.0,
    batch_size: Annotated[int, typer.Option(help="expected batch size of the recipe")] = 64,
    shadows: Annotated[int, typer.Option(help="shadow models")] = 16,
    workers: Annotated[int, typer.Option(help="parallel processes")] = 2,
    out: Annotated[Path, typer.Option(help="folder for lira.json")] = Path("results/lira"),
) -> None:
    """LiRA (online + offline) against a target trained on a random half of DATA, shadows on other halves."""
    from dpcare.audit import plot_roc
    from dpcare.io import write_json
    from dpcare.workflows.tabular import TabularRun
    from dpcare.workflows.tabular_audit import tabular_lira

    df, schema = table_and_spec(data, spec)
    run = TabularRun(method=method, epsilon=None if method == "non-private" else epsilon, epochs=epochs,
                     batch_size=batch_size)
    r = tabular_lira(df, schema, run, shadows=shadows, workers=workers)
    write_json(out / "lira.json", r.to_dict())
    plot_roc(r.scores, out / "lira_roc.png", title=f"LiRA: {method}")
    typer.echo(f"LiRA, {shadows} shadows in {r.seconds_shadows:.1f} s: online AUC {r.online['auc']['value']:.3f}, "
               f"TPR@1%FPR {r.online['tpr_at_1pct_fpr']['value']:.3f}; offline AUC "
               f"{r.offline['auc']['value']:.3f} ({out}/lira.json)")


@app.command("one-run")
def audit_one_run(
    data: Annotated[Path, typer.Argument(help="training table (CSV/Parquet); canaries are drawn from it")],
    spec: Annotated[Path, typer.Option(help="its privacy spec")],
    method: Annotated[str, typer.Option(help="dp-sgd or feature-dp")] = "dp-sgd",
    epsilon: Annotated[float, typer.Option(help="claimed epsilon of the run")] = 1.0,
    canaries: Annotated[int, typer.Option(help="number of canaries (each included with probability 1/2)")] = 500,
    epochs: Annotated[float, typer.Option(help="epochs")] = 20.0,
    clip: Annotated[float, typer.Option(help="clipping norm")] = 1.0,
    seed: Annotated[int, typer.Option(help="seed")] = 0,
    out: Annotated[Path, typer.Option(help="folder for one_run.json")] = Path("results/audit"),
) -> None:
    """Empirical epsilon lower bound from one training run with canaries (Steinke, Nasr, Jagielski 2023)."""
    from dpcare.io import write_json
    from dpcare.workflows.tabular_audit import CanaryAuditSettings, audit_tabular

    df, schema = table_and_spec(data, spec)
    r = audit_tabular(df, schema, CanaryAuditSettings(method=method, epsilon=epsilon, canaries=canaries,
                                                      epochs=epochs, clip_norm=clip, seed=seed))
    write_json(out / "one_run.json", r)
    typer.echo(f"claimed epsilon {r['claimed_epsilon']:.3f}; audited lower bound {r['epsilon_lower_bound']:.3f} "
               f"({r['correct']}/{r['guesses']} correct guesses on {r['canaries']} canaries, "
               f"{r['confidence']:.0%} confidence)")


@app.command("attribute")
def audit_attribute(
    run_dir: Annotated[Path, typer.Argument(help="folder of a `dpcare train` run (model.pt, guarantee.json)")],
    rows: Annotated[Path, typer.Option(help="rows whose private column to reconstruct (CSV/Parquet)")],
    column: Annotated[str, typer.Option(help="private column to reconstruct")],
    out: Annotated[Path | None, typer.Option(help="folder for attribute.json (default: RUN_DIR)")] = None,
) -> None:
    """Attribute inference from the model + public columns, against the prior and Theorem 4's bound."""
    from dpcare.audit import attribute_inference
    from dpcare.data import load_table
    from dpcare.io import write_json
    from dpcare.workflows.tabular import load_run

    run = load_run(run_dir)
    frame = load_table(rows, run.encoder.schema)
    g = run.guarantee or {}
    r = attribute_inference(run.model, run.encoder, frame, column, epsilon=g.get("epsilon"),
                            delta=g.get("delta") or 0.0)
    write_json((out or run_dir) / "attribute.json", r)
    bound = f"; Theorem 4 bound {r['theorem4_bound']:.3f}" if "theorem4_bound" in r else ""
    typer.echo(f"{column}: success {r['success']:.3f} on {r['rows']} rows; prior (Ball) {r['prior_ball']:.3f}{bound}")
