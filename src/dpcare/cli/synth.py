"""``dpcare synth fit | sample | evaluate``: DP synthetic tables from AIM (the default) or a language model (DP-2Stage).

``fit`` writes a run folder (run.json, synthesizer.json and the model: weights.pt or model.npz); its options
come from the declarations of :class:`~dpcare.synth.settings.SynthSettings` (the DP settings of stage 2 as in
``dpcare train``, stage 1 as ``--stage1-*``), except the settings a scale sets (``--layers``,
``--stage1-epochs``, ``--epochs``), which default to the ``--scale``'s values. With ``--synthesizer aim``
(the default) only the run's options (:data:`RUN_OPTIONS`) and AIM's own apply; a language-model option
given on the command line is refused, and ``--bins`` / ``--max-model-size`` with ``--synthesizer dp-2stage``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from dpcare.cli.budget import BudgetOption, with_budget_delta
from dpcare.cli.common import echo_outside_the_guarantee, echo_plain_verdict, table_and_spec
from dpcare.cli.options import settings_options
from dpcare.cli.train import ForceOption
from dpcare.exceptions import MissingFileError, SettingsError, SpecError
from dpcare.synth.settings import AIMSettings, SynthSettings

app = typer.Typer(help="DP synthetic tables: AIM (noisy marginals and a graphical model, the default) or a language "
                       "model (DP-2Stage, --synthesizer dp-2stage).", no_args_is_help=True)

#: the settings a scale sets (dpcare.synth.settings.SIZES), each with its option (default: the scale's value)
SCALED = {"lm.layers": "--layers", "stage1.epochs": "--stage1-epochs", "dp.epochs": "--epochs"}


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


def scaled_settings(settings: SynthSettings, scale: str, given: dict[str, object]) -> SynthSettings:
    """``settings`` with the fields of :data:`SCALED` set to ``given`` (by path) or, where None, the scale's."""
    from dpcare.settings import rules

    values = settings.to_dict()
    for path, flag in SCALED.items():
        part, name = path.split(".")
        value = given.get(path)
        if value is not None:
            rules(getattr(settings, part))[name].check(flag, value)
        values[part][name] = value  # None: the scale's value
    return SynthSettings.for_device(scale, **values)


#: the synthesizers ``synth fit`` can fit: DP-2Stage's language model (its modes by --mode) or AIM
SYNTHESIZERS = ("dp-2stage", "aim")
#: the settings of ``synth fit`` that also set AIM (every other setting sets the language model only)
AIM_SHARED = ("epsilon", "delta", "seed")
#: the options of ``synth fit`` that apply to both synthesizers (the run's data, folder, split and budget)
RUN_OPTIONS = frozenset({"data", "spec", "out", "synthesizer", "test", "holdout", "compare_rows", "force", "budget",
                         *(f"dp_{name}" for name in AIM_SHARED)})
#: AIM's own options (AIMSettings' fields outside AIM_SHARED)
AIM_ONLY = frozenset({"bins", "max_model_size"})
#: the options of ``synth sample`` that set a language model's sampling
LM_SAMPLING = frozenset({"method", "conditions", "temperature", "batch_size"})


def given_options(ctx: typer.Context) -> dict[str, str]:
    """The options given on the command line of the running command: {parameter name: its flag}."""
    return {p.name: p.opts[0] for p in ctx.command.params
            if getattr(ctx.get_parameter_source(p.name), "name", None) == "COMMANDLINE"}


def _refuse(flags: list[str], where: str, what: str) -> None:
    """Refuse options given where they do not apply (``what``: what they set)."""
    if flags:
        one = len(flags) == 1
        raise SettingsError(f"{', '.join(sorted(flags))} {'does' if one else 'do'} not apply to {where}: "
                            f"{'it sets' if one else 'they set'} {what}")


@app.command("fit")
@settings_options("aim_settings", AIMSettings(), skip=AIM_SHARED)  # --bins, --max-model-size
@settings_options("settings", SynthSettings(), skip=("dp.unit", "lm.train_head", *SCALED))
def fit(
    ctx: typer.Context,
    data: Annotated[Path, typer.Argument(help="private table (CSV or Parquet)")],
    spec: Annotated[Path, typer.Option(help="privacy spec: column types, public bounds and categories")],
    out: Annotated[Path, typer.Option(help="run folder to write (run.json, synthesizer.json and the model); rerun "
                                           "the same command to resume an interrupted fit (AIM: from its last finished round)")
                   ] = Path("results/synth"),
    synthesizer: Annotated[str, typer.Option(help="aim (noisy marginals and a graphical model, AIM; in dpcare's "
                                                  "own process, the synth extra) or dp-2stage (a language model, "
                                                  "DP-2Stage; --mode picks its variant)")] = "aim",
    scale: Annotated[str, typer.Option(help="auto (cpu unless the model trains on a GPU), cpu (first block, 1 + 2 "
                                            "epochs: minutes) or paper (whole model, 5 + 10 epochs)")] = "auto",
    layers: Annotated[int | None, typer.Option(help="keep only the first k transformer blocks (default: the scale's)")
                      ] = None,
    stage1_epochs: Annotated[float | None, typer.Option(help="stage-1 epochs over the public rows (default: the "
                                                             "scale's)")] = None,
    epochs: Annotated[float | None, typer.Option(help="stage-2 (DP) epochs over the private table (default: the "
                                                      "scale's)")] = None,
    public: Annotated[str | None, typer.Option(help="dp-2stage-o: bundled public table (adult, support2, rhc)")] = None,
    public_data: Annotated[Path | None, typer.Option(help="dp-2stage-o: your public table instead")] = None,
    public_spec: Annotated[Path | None, typer.Option(help="spec of --public-data")] = None,
    test: Annotated[Path | None, typer.Option(help="held-out real table (rows NOT in DATA, same spec): the public-"
                                                   "baseline comparison is scored on it; default: --holdout of DATA")
                    ] = None,
    holdout: Annotated[float, typer.Option(help="without --test, this fraction of DATA (drawn with --seed) is held "
                                                "out as real test rows and does not train; 0: no comparison")
                       ] = 0.1,
    compare_rows: Annotated[int, typer.Option(min=1, help="synthetic rows (and declared-support rows) sampled for "
                                                          "the public-baseline comparison")] = 500,
    force: ForceOption = False,
    budget: BudgetOption = None,
    settings: SynthSettings = None,
    aim_settings: AIMSettings = None,
) -> None:
    """Fit a synthesizer; prints the estimated time (or, for AIM, its budget) first, then the privacy guarantee
    and the verdict against the public baseline (independent sampling from the spec's declared support) on
    real held-out rows."""
    settings = with_budget_delta(settings, budget)  # under --budget without --delta: its share of the delta
    from dpcare.data import load_spec

    if synthesizer not in SYNTHESIZERS:
        raise SettingsError(f"--synthesizer must be one of {list(SYNTHESIZERS)}, got --synthesizer = {synthesizer!r}")
    if test is not None and not test.is_file():
        raise MissingFileError(f"--test file not found: {test}")
    if synthesizer == "aim":
        from dpcare.synth.aim import AIMSynthesizer

        given = given_options(ctx)
        if "dp_noise_seed" in given:
            raise SettingsError("--noise-seed does not apply to aim: its noise comes from OpenDP's secure generator, "
                                "which no seed pins")
        hint = "" if "synthesizer" in given else " (add --synthesizer dp-2stage to fit the language model)"
        _refuse([f for name, f in given.items() if name not in RUN_OPTIONS | AIM_ONLY],
                "--synthesizer aim" + hint, "the language model")
        aim_settings = aim_settings.replace(epsilon=settings.dp.epsilon, delta=settings.dp.delta,
                                            seed=settings.dp.seed)
        synth = AIMSynthesizer(load_spec(spec), aim_settings)  # refuses undeclared bounds or categories
        synth.check_available()
        _fit_and_write(synth, data, test, holdout, compare_rows, out, force, budget, seed=aim_settings.seed,
                       run_settings=synth.run_settings(), plan=synth.plan,
                       train=lambda rows, run: synth.fit(rows, report=lambda m: typer.echo(m, err=True),
                                                       checkpoint_dir=run.checkpoint_dir),
                       files="run.json, synthesizer.json, model.npz")
        return
    _refuse([f for name, f in given_options(ctx).items() if name in AIM_ONLY], "--synthesizer dp-2stage", "AIM")
    from dpcare.synth.synthesizer import Synthesizer, plan, stage1_source

    settings = scaled_settings(settings, scale, {"lm.layers": layers, "stage1.epochs": stage1_epochs,
                                                 "dp.epochs": epochs})
    schema = load_spec(spec)
    public_table, public_schema = _public(public, public_data, public_spec)
    synth = Synthesizer(schema, settings, public_table=public_table, public_schema=public_schema)
    stage1 = {"public": public, "public_data": str(public_data) if public_data else None}

    def train(rows, run):
        synth.fit(rows, checkpoint_dir=run.checkpoint_dir, report=lambda m: typer.echo(m, err=True))

    source = stage1_source(settings, public_schema)
    _fit_and_write(synth, data, test, holdout, compare_rows, out, force, budget, seed=settings.dp.seed,
                   run_settings={**settings.to_dict(), "stage1_table": stage1},
                   plan=lambda n: plan(settings, n), train=train, files="run.json, synthesizer.json, weights.pt",
                   data_extra={"stage 1": source} if source else {})


def _fit_and_write(synth, data: Path, test: Path | None, holdout: float, compare_rows: int, out: Path, force: bool,
                   budget: Path | None, *, seed: int, run_settings: dict, plan, train, files: str,
                   data_extra: dict | None = None) -> None:
    """What ``synth fit`` does for either synthesizer: split by row count and seed alone, claim the run folder
    and reserve the budget (``plan(training rows)``) before any row is read, read and check the real test rows,
    ``train(training rows, run folder)``, compare with the public baseline, write the run and print its verdict."""
    from dpcare.data import count_rows, load_table
    from dpcare.privacy import guard_run
    from dpcare.runs import RunFolder
    from dpcare.runs.record import phase
    from dpcare.synth.saved import check_test_rows
    from dpcare.synth.evaluate import EFFICACY
    from dpcare.synth.support_baseline import describe
    from dpcare.synth.synthesizer import holdout_split

    schema = synth.schema
    if test is not None:
        holdout = 0.0  # the test rows come from --test: every row of DATA trains
    if test is not None or holdout > 0:  # the verdict is scored on them: refused now, not after the fit
        try:
            schema.require_binary_target(EFFICACY)
        except SpecError as e:
            raise SpecError(f"{e}; or fit without a verdict: --holdout 0 and no --test") from None
    rows = count_rows(data)  # public: every ledger states n
    train_idx, test_idx = holdout_split(rows, holdout, seed)  # from the row count and seed alone
    planned = plan(len(train_idx))
    run = RunFolder(out, "synth", run_settings, force=force, command="dpcare synth fit")
    with guard_run(budget, planned, run_id=run.run_id, command="synth fit", data=data) as held:
        with phase("reading and checking the table"):
            table = load_table(data, schema)
        if test is not None:
            real_test = load_table(test, schema)
            check_test_rows(real_test, schema, f"--test {test}")
        elif len(test_idx):
            real_test = table.iloc[test_idx].reset_index(drop=True)
            check_test_rows(real_test, schema, f"the held-out {holdout:g} of DATA ({len(test_idx)} rows, seed "
                                               f"{seed})")
        else:
            real_test = None
        with phase("fitting the synthesizer"):
            train(table.iloc[train_idx].reset_index(drop=True), run)
        if held is not None:
            held.actual = synth.ledger
    if real_test is not None:
        with phase("public baseline and the verdict on the real test rows"):
            synth.compare_to_public(real_test, rows=compare_rows)
    split = ({"test": str(test), "test rows": len(real_test)} if test is not None else
             {"held out": holdout, "test rows": len(test_idx), "held-out rows": test_idx.tolist()})
    synth.write(run, data={"path": str(data), "rows": rows, "training rows": len(train_idx), **split,
                           **(data_extra or {})})
    echo_plain_verdict(synth.baseline["comparisons"][0] if synth.baseline is not None else None)
    if synth.guarantee is not None:
        typer.echo(synth.guarantee.describe())
    else:
        typer.echo("non-private fit: NO privacy guarantee")
    if synth.baseline is not None:
        typer.echo(describe(synth.baseline))
        echo_outside_the_guarantee("rows")
    else:
        typer.echo("no public-baseline comparison (--holdout 0 and no --test): nothing says this table beats "
                   "sampling from the declared support")
    typer.echo(f"written to {out}/ ({files})")


@app.command("sample")
def sample(
    ctx: typer.Context,
    folder: Annotated[Path, typer.Argument(help="a fitted synthesizer (a run folder of `dpcare synth fit`)")],
    n: Annotated[int, typer.Option(help="rows to sample")] = 1000,
    out: Annotated[Path, typer.Option(help="CSV to write (and its .sampling.json beside it)")] = Path("synthetic.csv"),
    method: Annotated[str, typer.Option(help="constrained, rejection or imputation (language models)")
                      ] = "constrained",
    conditions: Annotated[Path | None, typer.Option(
        help="CSV with one row per sample fixing some columns (exact conditioning for leading columns)")] = None,
    temperature: Annotated[float, typer.Option(help="sampling temperature")] = 1.0,
    batch_size: Annotated[int, typer.Option(help="rows decoded together")] = 256,
    seed: Annotated[int, typer.Option(help="sampling seed")] = 0,
) -> None:
    """Sample synthetic rows (sampling reads no private data: no privacy cost). --method, --conditions,
    --temperature and --batch-size apply to a language model only."""
    import pandas as pd

    from dpcare.io import write_json, write_text
    from dpcare.synth.aim import AIMSynthesizer
    from dpcare.synth.saved import load_synthesizer

    if out.is_dir():
        raise SettingsError(f"--out {out} is a folder: give the CSV file to write")
    if conditions is not None and not conditions.is_file():
        raise MissingFileError(f"conditions file not found: {conditions}")
    synth = load_synthesizer(folder)
    if isinstance(synth, AIMSynthesizer):
        _refuse([f for name, f in given_options(ctx).items() if name in LM_SAMPLING],
                "an AIM synthesizer, which draws rows from its graphical model", "a language model's sampling")
        df = synth.sample(n, seed=seed)
        record = synth.last_sampling
    else:
        cond = pd.read_csv(conditions) if conditions else None
        df = synth.sample(n, method=method, conditions=cond, temperature=temperature, batch_size=batch_size,
                          seed=seed)
        record = synth.last_sampling.to_dict()
    write_text(out, df.to_csv(index=False))
    write_json(sampling_record(out), {"run_id": synth.run_id, "synthesizer": str(folder), **record})
    speed = f"{record['rows_per_second']:.1f} rows/s" if record.get("rows_per_second") else "speed not measured"
    typer.echo(f"wrote {len(df)} rows to {out} ({speed}, valid rate {record['valid_rate']:.3f})")


def sampling_record(table: Path) -> Path:
    """Where ``synth sample`` records how ``table`` was sampled (and from which run)."""
    return table.with_suffix(".sampling.json")


@app.command("evaluate")
def evaluate(
    synthetic: Annotated[Path, typer.Argument(help="synthetic table (CSV)")],
    train: Annotated[Path, typer.Option(help="the real training table the synthesizer was fitted on")],
    test: Annotated[Path, typer.Option(help="a held-out real table")],
    spec: Annotated[Path, typer.Option(help="privacy spec of the tables")],
    synthesizer: Annotated[Path | None, typer.Option(
        help="the fit's run folder: adds perplexities on --test, and the metrics to its run.json (for dpcare "
             "report)")] = None,
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
        from dpcare.synth.saved import load_synthesizer

        fitted = load_synthesizer(synthesizer, progress=False)
        if hasattr(fitted, "perplexity"):
            report["perplexity"] = fitted.perplexity(real_test)
        else:
            typer.echo("no perplexities: AIM is not a language model", err=True)
    path = out or synthetic.with_suffix(".report.json")
    write_json(path, report)
    typer.echo(format_report(report))
    if "perplexity" in report:
        typer.echo("perplexity: " + json.dumps({k: round(v, 3) for k, v in report["perplexity"].items()}))
    typer.echo(f"written to {path}")
    if synthesizer is not None:
        from dpcare.synth.synthesizer import attach_evaluation

        record = sampling_record(synthetic)
        sampling = json.loads(record.read_text()) if record.is_file() else None
        attach_evaluation(synthesizer, synthetic.name, report, sampling)
        typer.echo(f"metrics added to {synthesizer}/run.json" + ("" if sampling else
                   f" (no {record.name}: not checked that the table was sampled from this run)"))
