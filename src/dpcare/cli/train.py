"""``dpcare train`` and ``dpcare predict``: a private (or non-private) model on a table with a privacy spec,
saved as a run folder, and applied to new rows."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Annotated

import typer

from dpcare.cli.budget import BudgetOption, with_budget_delta
from dpcare.cli.common import echo_outside_the_guarantee, echo_plain_verdict
from dpcare.cli.options import settings_options
from dpcare.tabular.settings import TabularSettings

ForceOption = Annotated[bool, typer.Option("--force", help="replace a non-empty --out folder whole when the run "
                                                           "finishes (default: refuse it)")]


@settings_options("settings", TabularSettings(), skip=("dp.unit",))
def train(
    data: Annotated[Path, typer.Argument(help="CSV or Parquet file")],
    spec: Annotated[Path, typer.Option(help="privacy spec (YAML or JSON): column types, roles, public bounds")],
    out: Annotated[Path, typer.Option(help="run folder to write (model.pt, split.json, run.json); rerun the same "
                                           "command to resume an interrupted run")] = Path("results/train"),
    public_data: Annotated[Path | None, typer.Option(
        help="fusion methods: a PUBLIC support table (every column public, rows not in DATA) to fit the imputer")
    ] = None,
    imputer_file: Annotated[Path | None, typer.Option(help="fusion methods: a fitted imputer (joblib) instead")
                            ] = None,
    audit: Annotated[bool, typer.Option(help="run the LOSS membership attack: training vs held-out test rows")] = False,
    tune: Annotated[list[str] | None, typer.Option(
        help="tune privately: NAME=V1,V2,... (lr, alpha, beta, clip, hidden, pad; repeat for a grid); every "
             "candidate and the choice among them are inside --epsilon (docs/tabular.md)")] = None,
    selection_share: Annotated[float, typer.Option(help="with --tune: the share of epsilon spent on choosing")] = 0.1,
    cross_fit: Annotated[int, typer.Option(
        help="also evaluate the settings cross-fitted over K folds (every row a test row once; for small tables): "
             "K fold models, never released, against the public panel; 0: off")] = 0,
    force: ForceOption = False,
    budget: BudgetOption = None,
    settings: TabularSettings = None,
) -> None:
    """Train a model on a table with a privacy spec; print test AUPRC/AUROC and the guarantee."""
    settings = with_budget_delta(settings, budget)  # under --budget without --delta: its share of the delta
    from dpcare.data.schema import load_spec
    from dpcare.data.tables import count_rows
    from dpcare.exceptions import DataError, DPCareError, SettingsError
    from dpcare.verdict import plain_verdict

    schema = load_spec(spec)  # the spec and the file's row count first: a bad input is refused before torch loads
    rows = count_rows(data)
    if rows == 0:
        raise DataError(f"data file {data} has no rows")
    from dpcare.io import strict_json
    from dpcare.privacy import guard_run
    from dpcare.runs import RunFolder
    from dpcare.tabular import fit, plan
    from dpcare.tabular.audit import audit_split
    from dpcare.tabular.recipe import check_imputer_inputs, read_and_split
    from dpcare.tabular.tuning import candidates, parse_grid, plan_tuning
    from dpcare.tabular.tuning import tune as tune_privately

    check_imputer_inputs(settings, public_data, imputer_file)
    if cross_fit:
        from dpcare.tabular.crossfit import fold_parts

        if tune:
            raise SettingsError("--cross-fit evaluates fixed settings: give it without --tune")
        fold_parts(rows, cross_fit, settings.dp.seed)  # enough rows for the folds, said before any value is read
    grid = parse_grid(tune) if tune else None
    if grid:  # every candidate and the choice, planned before any row is read
        planned = plan_tuning(schema, settings, rows, len(candidates(grid)), selection_share)[0].guarantee()
    else:
        planned = plan(schema, settings, rows)  # checks the method's needs before any row is read
    run = RunFolder(out, "tabular", settings.to_dict(), force=force, command="dpcare train")
    with guard_run(budget, planned, run_id=run.run_id, command="train", data=data) as held:
        try:
            frame, _ = read_and_split(data, schema, settings.dp.seed, splits=settings.splits)  # bad values or splits: refused untrained
        except DPCareError:
            if held is not None:
                held.refused = True
            raise
        if grid:
            model = tune_privately(frame, schema, settings, grid, selection_share, public_data=public_data,
                                   imputer=imputer_file)
        else:
            model = fit(frame, schema, settings, public_data=public_data, imputer=imputer_file,
                        checkpoint_dir=run.checkpoint_dir)
        if held is not None:
            held.actual = model.ledger
    if cross_fit:
        from dpcare.runs.record import phase
        from dpcare.tabular.crossfit import cross_fit as cross_fitted

        with phase(f"cross-fitted evaluation ({cross_fit} folds)"):  # the imputer fit() fitted on public rows
            model.info["cross_fit"] = cross_fitted(frame, schema, settings, cross_fit, imputer=model.imputer)
    attacks = []
    if audit:
        from dpcare.runs.record import phase

        with phase("LOSS membership attack (--audit)"):
            payload = audit_split(model, data)
        attacks.append(run.attack("loss", payload))
    model.write(run, data={"path": str(data), "rows": model.split["rows"]}, attacks=attacks)
    row = {"method": settings.method, **{k: v for k, v in model.metrics.items() if k.startswith("test")},
           "epsilon": model.guarantee.epsilon if model.guarantee else math.inf,
           "delta": model.guarantee.delta if model.guarantee else 0.0}
    echo_plain_verdict(model.baseline["comparisons"][0] if model.baseline else None)
    typer.echo(json.dumps(strict_json(row), indent=2))  # a non-private run's epsilon prints as null
    if grid:
        t = model.info["tuning"]
        typer.echo(f"chosen privately among {t['candidates']} candidates: {t['chosen']} (noisy validation counts "
                   f"{t['noisy_validation_counts']}; the choice and every candidate are inside epsilon)")
    if model.guarantee:
        typer.echo(model.guarantee.describe())
    if model.baseline is not None:
        typer.echo(f"{settings.method} {model.baseline['comparisons'][0]['verdict']}")
    if cross_fit:
        c = model.info["cross_fit"]
        typer.echo(f"cross-fitted over {cross_fit} folds ({c['rows']} rows, each a test row once): "
                   f"{plain_verdict(c['comparisons'][0])}; {settings.method} {c['comparisons'][0]['verdict']}")
    if model.metrics:
        echo_outside_the_guarantee("rows")
    if audit:
        r = payload["rows"][0]
        typer.echo(f"LOSS attack: AUC {r['AUC'][0]:.3f} [{r['AUC'][1]:.3f}, {r['AUC'][2]:.3f}], TPR/FPR at the mean "
                   f"training loss {r['TPR/FPR at the mean training loss']:.3f} (attacks/loss.json)")
    typer.echo(f"written to {out}/")


def predict(
    run_dir: Annotated[Path, typer.Argument(help="a run folder of `dpcare train`")],
    data: Annotated[Path, typer.Argument(help="CSV or Parquet with the spec's feature columns (no target needed)")],
    out: Annotated[Path, typer.Option(help="CSV to write: one probability column per class and the prediction")] = Path(
        "predictions.csv"),
) -> None:
    """Apply a trained model to new rows: class probabilities and the predicted class, one row per input row."""
    import pandas as pd

    from dpcare.exceptions import SettingsError
    from dpcare.io import write_text
    from dpcare.tabular import TabularModel

    if out.is_dir():
        raise SettingsError(f"--out {out} is a folder: give the CSV file to write")
    model = TabularModel.load(run_dir)
    proba = model.predict_proba(data)
    frame = pd.DataFrame(proba, columns=[f"p_{c}" for c in model.classes])
    frame["prediction"] = [model.classes[i] for i in proba.argmax(axis=1)]
    write_text(out, frame.to_csv(index=False))
    typer.echo(f"{len(frame)} predictions written to {out}")

