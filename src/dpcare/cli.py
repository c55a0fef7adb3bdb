"""The ``dpcare`` command line."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Annotated

import typer

from dpcare.cli_common import fail as _fail
from dpcare.cli_common import table_and_spec as _table_and_spec
from dpcare.cli_synth import benchmark_dp2stage, synth_app
from dpcare.cli_images import benchmark_diffusion
from dpcare.cli_tsf import benchmark_tsf
from dpcare.runtime import ensure_fast_process

app = typer.Typer(
    help="dpcare: differential privacy for clinical machine learning. Every epsilon printed comes from "
    "the privacy ledger of the run (dp-accounting PLD by default).",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)
account_app = typer.Typer(help="Privacy accounting for DP-SGD / Feature-DP steps (Poisson-subsampled Gaussian).",
                          no_args_is_help=True)
app.add_typer(account_app, name="account")
benchmark_app = typer.Typer(help="Reproduce the papers' comparisons on real data.", no_args_is_help=True)
app.add_typer(benchmark_app, name="benchmark")

Accountant = Annotated[str, typer.Option(help="pld, rdp or both")]

app.add_typer(synth_app, name="synth")
benchmark_app.command("dp2stage")(benchmark_dp2stage)
benchmark_app.command("tsf")(benchmark_tsf)
benchmark_app.command("diffusion")(benchmark_diffusion)


@account_app.command("epsilon")
def account_epsilon(
    sampling_rate: Annotated[float, typer.Option("--q", help="Poisson sampling rate q = batch / n")],
    noise_multiplier: Annotated[float, typer.Option("--sigma", help="noise multiplier sigma")],
    steps: Annotated[int, typer.Option(help="number of private steps")],
    delta: Annotated[float, typer.Option(help="target delta")],
    accountant: Accountant = "both",
) -> None:
    """Epsilon spent by STEPS Poisson-subsampled Gaussian steps at (q, sigma)."""
    from dpcare.privacy import compute_epsilon, sampled_gaussian_event

    try:
        event = sampled_gaussian_event(sampling_rate, noise_multiplier, steps)
        for name in _accountants(accountant):
            typer.echo(f"{name}: epsilon = {compute_epsilon(event, delta, accountant=name):.4f} at delta = {delta:g}")
    except ValueError as err:
        _fail(err)


@account_app.command("sigma")
def account_sigma(
    sampling_rate: Annotated[float, typer.Option("--q", help="Poisson sampling rate q = batch / n")],
    steps: Annotated[int, typer.Option(help="number of private steps")],
    epsilon: Annotated[float, typer.Option(help="target epsilon (never exceeded)")],
    delta: Annotated[float, typer.Option(help="target delta")],
    accountant: Accountant = "both",
) -> None:
    """Smallest noise multiplier whose epsilon stays within the target."""
    from dpcare.privacy import calibrate_noise_multiplier

    try:
        for name in _accountants(accountant):
            sigma = calibrate_noise_multiplier(sampling_rate, steps, epsilon, delta, accountant=name)
            typer.echo(f"{name}: sigma = {sigma:.4f} for epsilon <= {epsilon:g} at delta = {delta:g}")
    except ValueError as err:
        _fail(err)


def _accountants(name: str) -> list[str]:
    if name not in ("pld", "rdp", "both"):
        raise ValueError(f"accountant must be pld, rdp or both, got {name!r}")
    return ["pld", "rdp"] if name == "both" else [name]


@app.command()
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
) -> None:
    """Train a model on a table with a privacy spec; print test AUPRC/AUROC and the guarantee."""
    from dpcare.data import load_spec, load_table
    from dpcare.workflows.tabular import TabularRun, train_tabular

    try:
        schema = load_spec(spec)
        df = load_table(data, schema)
        run = TabularRun(method=method, epsilon=None if method == "non-private" else epsilon, delta=delta,
                         clip_norm=clip, alpha=alpha, epochs=epochs, batch_size=batch_size,
                         public_batch_size=public_batch_size, lr=lr, pad=pad, stats_epsilon=stats_epsilon, seed=seed,
                         checkpoint_dir=str(checkpoint_dir) if checkpoint_dir else None, audit=audit)
        result = train_tabular(df, schema, run, out_dir=out)
    except (ValueError, FileNotFoundError, KeyError) as err:
        _fail(err)
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


audit_app = typer.Typer(help="Attacks and audits: LOSS, LiRA, one-run epsilon lower bound, attribute inference.",
                        no_args_is_help=True)
app.add_typer(audit_app, name="audit")


def _load_run(run_dir: Path):
    import torch

    from dpcare.data import TableEncoder
    from dpcare.models import TabularMLP

    path = run_dir / "model.pt"
    if not path.exists():
        raise FileNotFoundError(f"no model.pt in {run_dir}")
    saved = torch.load(path, map_location="cpu", weights_only=False)
    encoder = TableEncoder.from_state_dict(saved["encoder"])
    model = TabularMLP(**saved["model_config"])
    model.load_state_dict(saved["model"])
    return model, encoder


@audit_app.command("loss")
def audit_loss(
    run_dir: Annotated[Path, typer.Argument(help="folder of a `dpcare train` run (model.pt)")],
    members: Annotated[Path, typer.Option(help="CSV/Parquet of rows used in training")],
    nonmembers: Annotated[Path, typer.Option(help="CSV/Parquet of rows not used in training")],
    out: Annotated[Path | None, typer.Option(help="where to write audit.json and audit_roc.png")] = None,
) -> None:
    """Membership inference (LOSS attack) against a trained model: AUC, TPR at low FPR, ROC."""
    import torch

    from dpcare.data import load_table
    from dpcare.workflows.tabular import membership_audit

    try:
        model, encoder = _load_run(run_dir)
        frames = {name: load_table(p, encoder.schema) for name, p in (("members", members), ("non-members",
                                                                                             nonmembers))}
        both = frames["members"].merge(frames["non-members"], how="inner")
        if len(both):
            raise ValueError(f"{len(both)} rows appear in both the members and the non-members")
        data = {k: {"x": torch.from_numpy(encoder.transform(f)), "y": torch.from_numpy(encoder.encode_target(f))}
                for k, f in frames.items()}
        result = membership_audit(model, data["members"], data["non-members"], out or run_dir, title=str(run_dir))
    except (ValueError, FileNotFoundError) as err:
        _fail(err)
    m = result["metrics"]
    typer.echo(f"LOSS attack: AUC {m['auc']['value']:.3f} [{m['auc']['low']:.3f}, {m['auc']['high']:.3f}]; "
               f"TPR@1%FPR {m['tpr_at_1pct_fpr']['value']:.3f}; balanced accuracy "
               f"{m['balanced_accuracy']['value']:.3f}; TPR/FPR at the mean training loss {result['tpr_fpr_ratio']:.3f}")


@audit_app.command("lira")
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
    from dpcare.audit import lira
    from dpcare.io import write_json
    from dpcare.workflows.tabular import TabularRun

    try:
        df, schema = _table_and_spec(data, spec)
        run = TabularRun(method=method, epsilon=None if method == "non-private" else epsilon, epochs=epochs,
                         batch_size=batch_size)
        r = lira(df, schema, run, shadows=shadows, workers=workers)
    except (ValueError, FileNotFoundError) as err:
        _fail(err)
    write_json(out / "lira.json", r.to_dict())
    from dpcare.audit import plot_roc

    plot_roc(r.scores, out / "lira_roc.png", title=f"LiRA: {method}")
    typer.echo(f"LiRA, {shadows} shadows in {r.seconds_shadows:.1f} s: online AUC {r.online['auc']['value']:.3f}, "
               f"TPR@1%FPR {r.online['tpr_at_1pct_fpr']['value']:.3f}; offline AUC "
               f"{r.offline['auc']['value']:.3f} ({out}/lira.json)")


@audit_app.command("one-run")
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
    from dpcare.audit.canaries import CanaryAuditSettings, audit_tabular

    try:
        df, schema = _table_and_spec(data, spec)
        r = audit_tabular(df, schema, CanaryAuditSettings(method=method, epsilon=epsilon, canaries=canaries,
                                                          epochs=epochs, clip_norm=clip, seed=seed))
    except (ValueError, FileNotFoundError) as err:
        _fail(err)
    from dpcare.io import write_json

    write_json(out / "one_run.json", r)
    typer.echo(f"claimed epsilon {r['claimed_epsilon']:.3f}; audited lower bound {r['epsilon_lower_bound']:.3f} "
               f"({r['correct']}/{r['guesses']} correct guesses on {r['canaries']} canaries, "
               f"{r['confidence']:.0%} confidence)")


@audit_app.command("attribute")
def audit_attribute(
    run_dir: Annotated[Path, typer.Argument(help="folder of a `dpcare train` run (model.pt, guarantee.json)")],
    rows: Annotated[Path, typer.Option(help="rows whose private column to reconstruct (CSV/Parquet)")],
    column: Annotated[str, typer.Option(help="private column to reconstruct")],
    out: Annotated[Path | None, typer.Option(help="folder for attribute.json (default: RUN_DIR)")] = None,
) -> None:
    """Attribute inference from the model + public columns, against the prior and Theorem 4's bound."""
    from dpcare.audit import attribute_inference
    from dpcare.data import load_table

    try:
        model, encoder = _load_run(run_dir)
        frame = load_table(rows, encoder.schema)
        g = json.loads((run_dir / "guarantee.json").read_text()) if (run_dir / "guarantee.json").exists() else {}
        r = attribute_inference(model, encoder, frame, column, epsilon=g.get("epsilon"), delta=g.get("delta") or 0.0)
    except (ValueError, FileNotFoundError) as err:
        _fail(err)
    from dpcare.io import write_json

    write_json((out or run_dir) / "attribute.json", r)
    bound = f"; Theorem 4 bound {r['theorem4_bound']:.3f}" if "theorem4_bound" in r else ""
    typer.echo(f"{column}: success {r['success']:.3f} on {r['rows']} rows; prior (Ball) {r['prior_ball']:.3f}{bound}")


@app.command()
def demo(
    out: Annotated[Path, typer.Option(help="results folder")] = Path("results/demo"),
    dataset: Annotated[str, typer.Option(help="bundled data set: support2, rhc or adult")] = "support2",
    epsilon: Annotated[float, typer.Option(help="epsilon of every private method")] = 1.0,
    seeds: Annotated[int, typer.Option(help="seeds per method")] = 3,
    epochs: Annotated[float, typer.Option(help="epochs per run")] = 10.0,
) -> None:
    """Main job: Feature-DP (demographics private) vs DP-SGD vs non-private on SUPPORT2."""
    from dpcare.workflows.demo import run_demo

    try:
        summary = run_demo(out, dataset=dataset, epsilon=epsilon, seeds=seeds, epochs=epochs)
    except (ValueError, ImportError) as err:
        _fail(err)
    typer.echo((out / "results.md").read_text())
    typer.echo(f"table: {out}/results.csv, {out}/results.md; plot: {out}/results.png; runs: {out}/runs/")
    del summary


@app.command()
def datasets(
    export: Annotated[str | None, typer.Option(help="write this bundled data set as CSV + its spec")] = None,
    out: Annotated[Path, typer.Option(help="folder for --export")] = Path("results/data"),
) -> None:
    """List the bundled real data sets, or export one with its privacy spec (a template for your own)."""
    from dpcare.data import BUNDLED, load_dataset

    if export is None:
        for name, text in BUNDLED.items():
            typer.echo(f"{name}: {text}")
        return
    try:
        df, schema = load_dataset(export)
    except (ValueError, ImportError) as err:
        _fail(err)
    from dpcare.data import save_spec
    from dpcare.io import write_text

    write_text(out / f"{export}.csv", df.to_csv(index=False))
    save_spec(schema, out / f"{export}.yaml")
    typer.echo(f"wrote {out / (export + '.csv')} ({len(df)} rows) and {out / (export + '.yaml')}")


@benchmark_app.command("fusiondp")
def benchmark_fusiondp(
    dataset: Annotated[str, typer.Option(help="bundled data set: support2, rhc or adult")] = "support2",
    data: Annotated[Path | None, typer.Option(help="your CSV/Parquet instead of a bundled set (needs --spec)")] = None,
    spec: Annotated[Path | None, typer.Option(help="privacy spec of --data")] = None,
    private: Annotated[str | None, typer.Option(
        help="comma-separated private columns, overriding the spec (e.g. a few weak ones, Appendix D)")] = None,
    epsilons: Annotated[str, typer.Option(help="comma-separated target epsilons")] = "0.1,0.3,0.5,1,2",
    seeds: Annotated[int, typer.Option(help="seeds (tuning uses seed 0)")] = 3,
    epochs: Annotated[float, typer.Option(help="epochs per run")] = 7.0,
    imputer: Annotated[str, typer.Option(
        help="gbm (default), lm (SmolLM2 in context; slow on CPU, see README) or tabpfn (local checkpoints)")] = "gbm",
    tabpfn_classifier: Annotated[Path | None, typer.Option(help="local TabPFN classifier checkpoint")] = None,
    tabpfn_regressor: Annotated[Path | None, typer.Option(help="local TabPFN regressor checkpoint")] = None,
    workers: Annotated[int, typer.Option(help="parallel training processes")] = 2,
    quick: Annotated[bool, typer.Option(help="smoke-size run (2 epsilons, 1 seed, 1 grid point, 2 epochs)")] = False,
    charge_tuning: Annotated[bool, typer.Option(
        help="tune privately on every seed and count it in epsilon (default: the paper's uncounted tuning)")] = False,
    out: Annotated[Path, typer.Option(help="results folder")] = Path("results/fusiondp"),
) -> None:
    """FusionDP vs Feature-DP vs DP-SGD vs the hybrid baselines over epsilons (fusiondp.txt, Figure 2)."""
    from dataclasses import replace

    from dpcare.data import load_dataset, load_spec, load_table
    from dpcare.workflows.fusion_benchmark import FusionBenchmark, run_benchmark

    try:
        if data is not None:
            if spec is None:
                raise ValueError("--data needs --spec")
            schema = load_spec(spec)
            df = load_table(data, schema)
        else:
            df, schema = load_dataset(dataset)
        if private:
            schema = schema.with_roles([c.strip() for c in private.split(",") if c.strip()])
        bench = FusionBenchmark.quick() if quick else FusionBenchmark(seeds=seeds, epochs=epochs)
        if not quick:
            bench = replace(bench, epsilons=tuple(float(e) for e in epsilons.split(",")))
        options = {}
        if imputer == "tabpfn":
            options = {"classifier_checkpoint": tabpfn_classifier, "regressor_checkpoint": tabpfn_regressor}
            if None in options.values():
                raise ValueError("--imputer tabpfn needs --tabpfn-classifier and --tabpfn-regressor checkpoint files")
        bench = replace(bench, imputer=imputer, imputer_options=options, workers=workers, charge_tuning=charge_tuning)
        run_benchmark(df, schema, bench, out)
    except (ValueError, FileNotFoundError, ImportError) as err:
        _fail(err)
    typer.echo((out / "table.md").read_text())
    typer.echo(f"written: {out}/table.csv, table.md, auprc_vs_epsilon.png, runs.csv, imputation.json")


def _json_float(x):
    return "inf" if isinstance(x, float) and math.isinf(x) else str(x)


def main() -> None:
    ensure_fast_process()
    app()


if __name__ == "__main__":
    main()
