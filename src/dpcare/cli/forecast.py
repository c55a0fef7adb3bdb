"""``dpcare forecast fit|apply``: a forecaster of the next hours (or visits) of vitals and labs, trained on a
hospital's own events (patient-level DP-SGD, or a non-private baseline / augmentation defence), saved as a
run folder, and applied to new patients' events."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Annotated

import typer

from dpcare.cli.budget import BudgetOption, with_budget_delta
from dpcare.cli.common import echo_outside_the_guarantee, echo_plain_verdict
from dpcare.cli.options import settings_options
from dpcare.timeseries.settings import ForecastSettings

app = typer.Typer(help="Forecast patients' vitals and labs from their events: fit (patient-level DP-SGD by default), "
                       "apply to new patients.", no_args_is_help=True)

LayoutOption = Annotated[str, typer.Option(help="layout of EVENTS: canonical (CSV/Parquet with patient_id, stay_id, "
                                                "time, variable, value), meds (file or folder) or clif (folder)")]


@app.command("fit")
@settings_options("settings", ForecastSettings(), skip=("dp.unit",))
def forecast_fit(
    events: Annotated[Path | None, typer.Argument(help="your event file or folder (needs --spec)")] = None,
    layout: LayoutOption = "canonical",
    spec: Annotated[Path | None, typer.Option(
        help="time-series spec (YAML): name, step (hour|visit), window, default_variables and a DECLARED "
             "center/scale per variable (DP-SGD needs them)")] = None,
    dataset: Annotated[str | None, typer.Option(help="a bundled data set instead of EVENTS: mimic_demo or pbcseq")
                       ] = None,
    out: Annotated[Path, typer.Option(help="run folder to write (model.pt, split.json, run.json); rerun the same "
                                           "command to resume an interrupted run")] = Path("results/forecast"),
    audit: Annotated[bool, typer.Option(help="run the LOSS membership attack: training windows vs the held-out test "
                                             "patients' windows")] = False,
    force: Annotated[bool, typer.Option("--force", help="replace a non-empty --out folder whole when the run "
                                                        "finishes (default: refuse it)")] = False,
    budget: BudgetOption = None,
    settings: ForecastSettings = None,
) -> None:
    """Train a forecaster on events; print test MSE beside the baselines on the same test patients (last
    observation carried forward, the declared mean: public; the pooled training mean: a reference), the
    verdict, the guarantee (patient-level DP-SGD) and the attack."""
    settings = with_budget_delta(settings, budget)  # under --budget without --delta: its share of the delta
    from dpcare.exceptions import SettingsError, UnknownNameError
    from dpcare.privacy import guard_run
    from dpcare.runs import RunFolder
    from dpcare.timeseries import DATASETS, user_dataset
    from dpcare.timeseries.attacks import PRIV, loss_audit
    from dpcare.timeseries.baselines import binding_comparison, verdict_lines
    from dpcare.timeseries.recipe import KIND, fit, plan

    if (events is None) == (dataset is None):
        raise SettingsError("give exactly one of EVENTS (with --spec) and --dataset")
    if events is not None:
        if spec is None:
            raise SettingsError("EVENTS needs --spec: the step, window, variables and declared center/scale of "
                                "each variable (see docs/timeseries.md)")
        source = user_dataset(events, layout, spec)
    elif dataset not in DATASETS:
        raise UnknownNameError(f"unknown --dataset {dataset!r}; choose one of {sorted(DATASETS)}")
    else:
        source = DATASETS[dataset]
    run = RunFolder(out, KIND, settings.to_dict(), force=force, command="dpcare forecast fit")
    patients = source.patient_ids()  # the ids alone: the public count the budget is checked on
    planned = plan(settings, patients, source)
    with guard_run(budget, planned, run_id=run.run_id, command="forecast fit", data=events) as held:
        model = fit(source, settings, checkpoint_dir=run.checkpoint_dir)
        if held is not None:
            held.actual = model.ledger
    attacks = []
    if audit:
        from dpcare.runs.record import phase

        with phase("LOSS membership attack (--audit)"):
            payload = loss_audit(model)
        attacks.append(run.attack("loss", payload))
    data = {"path": str(events) if events is not None else None, "layout": layout if events is not None else None,
            "dataset": dataset or source.name, "patients": len(patients)}
    model.write(run, data=data, attacks=attacks)
    g = model.guarantee
    row = {"method": settings.method, **{k: v for k, v in model.metrics.items() if k.startswith("test")},
           "baselines test_mse": {e["name"]: e["metrics"]["test MSE"] for e in model.baselines["baselines"]},
           "epsilon": g.epsilon if g else math.inf, "delta": g.delta if g else 0.0,
           "patients": {k: len(model.split[k]) for k in ("train", "validation", "test")}}
    echo_plain_verdict(binding_comparison(model.baselines))
    typer.echo(json.dumps(row, indent=2, default=_json_float))
    typer.echo(g.describe() if g else "NO formal guarantee: a non-private model (the baseline or an augmentation "
                                      "defence).")
    for line in verdict_lines(settings.method, model.baselines):
        typer.echo(line)
    echo_outside_the_guarantee("patients")
    if audit:
        r = payload["rows"][0]
        typer.echo(f"LOSS attack: AUC {r['AUC'][0]:.3f} [{r['AUC'][1]:.3f}, {r['AUC'][2]:.3f}], TPR/FPR at the mean "
                   f"training loss {r[PRIV]:.3f} (attacks/loss.json)")
    typer.echo(f"written to {out}/")


@app.command("apply")
def forecast_apply(
    run_dir: Annotated[Path, typer.Argument(help="a run folder of `dpcare forecast fit`")],
    events: Annotated[Path, typer.Argument(help="new patients' events (only the model's variables are read)")],
    layout: LayoutOption = "canonical",
    out: Annotated[Path, typer.Option(help="CSV to write: one row per stay and future step, one column per "
                                           "variable")] = Path("forecasts.csv"),
) -> None:
    """Forecast the next steps of every stay of EVENTS from its last input window."""
    from dpcare.exceptions import SettingsError
    from dpcare.io import write_text
    from dpcare.timeseries import ForecastModel

    if out.is_dir():
        raise SettingsError(f"--out {out} is a folder: give the CSV file to write")
    model = ForecastModel.load(run_dir)
    frame = model.forecast(events, layout)
    write_text(out, frame.to_csv(index=False))
    typer.echo(f"{frame['stay_id'].nunique()} stays x {model.window['output_len']} {model.step} steps forecast, "
               f"written to {out}")


def _json_float(x):
    return "inf" if isinstance(x, float) and math.isinf(x) else str(x)
