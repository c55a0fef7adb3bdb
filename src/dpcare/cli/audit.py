"""``dpcare audit loss | lira | one-run | attribute``: attacks on trained models and training recipes."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from dpcare.cli.common import RayAddressOption, table_and_spec, use_ray
from dpcare.cli.options import settings_options
from dpcare.exceptions import DataError
from dpcare.settings import DPSettings
from dpcare.tabular.settings import TabularSettings

app = typer.Typer(help="Attacks and audits: LOSS, LiRA, one-run epsilon lower bound, attribute inference.",
                  no_args_is_help=True)


@app.command("loss")
def audit_loss(
    run_dir: Annotated[Path, typer.Argument(help="run folder of `dpcare train`")],
    data: Annotated[Path | None, typer.Option(
        help="the table the run trained on: members and held-out rows come from the run's own split")] = None,
    members: Annotated[Path | None, typer.Option(help="or: CSV/Parquet of rows used in training")] = None,
    nonmembers: Annotated[Path | None, typer.Option(help="and CSV/Parquet of rows not used in training")] = None,
) -> None:
    """Membership inference (LOSS attack) against a trained model: AUC, TPR at low FPR, ROC; added to the run
    folder (attacks/loss.json, tied to the run by its id)."""
    import torch

    from dpcare.data import load_table
    from dpcare.exceptions import SettingsError
    from dpcare.runs import attach_attack
    from dpcare.tabular import TabularModel
    from dpcare.tabular.audit import audit_split, membership_audit

    if (data is None) == (members is None or nonmembers is None):
        raise SettingsError("pass either --data (the run's own table and split) or both --members and --nonmembers")
    model = TabularModel.load(run_dir)
    if data is not None:
        payload = audit_split(model, data)
    else:
        frames = {name: load_table(p, model.schema) for name, p in (("members", members), ("non-members", nonmembers))}
        both = frames["members"].merge(frames["non-members"], how="inner")
        if len(both):
            raise DataError(f"{len(both)} rows appear in both the members and the non-members")
        tensors = {k: {"x": torch.from_numpy(model.encoder.transform(f)),
                       "y": torch.from_numpy(model.encoder.encode_target(f))} for k, f in frames.items()}
        payload = membership_audit(model.model, tensors["members"], tensors["non-members"], model.settings.method)
    attach_attack(run_dir, "loss", payload)
    r = payload["rows"][0]
    typer.echo(f"LOSS attack: AUC {r['AUC'][0]:.3f} [{r['AUC'][1]:.3f}, {r['AUC'][2]:.3f}]; "
               f"TPR@1%FPR {r['TPR @ 1% FPR'][0]:.3f}; balanced accuracy {r['balanced accuracy'][0]:.3f}; "
               f"TPR/FPR at the mean training loss {r['TPR/FPR at the mean training loss']:.3f} "
               f"({run_dir}/attacks/loss.json)")


@app.command("lira")
@settings_options("settings", TabularSettings(method="dp-sgd", dp=DPSettings(batch_size=64)),
                  skip=("dp.unit", "dp.seed"))
def audit_lira(
    data: Annotated[Path, typer.Argument(help="the population table (CSV/Parquet)")],
    spec: Annotated[Path, typer.Option(help="its privacy spec")],
    shadows: Annotated[int, typer.Option(help="shadow models")] = 16,
    workers: Annotated[int, typer.Option(help="models trained at once, as Ray tasks (1: in this process)")] = 2,
    ray_address: RayAddressOption = None,
    seed: Annotated[int, typer.Option(help="seed of the halves and the training runs")] = 0,
    out: Annotated[Path, typer.Option(help="run folder to write (run.json, attacks/lira.json)")] = Path("results/lira"),
    force: Annotated[bool, typer.Option("--force", help="replace a non-empty --out folder")] = False,
    settings: TabularSettings = None,
) -> None:
    """LiRA (online + offline) against a target trained on a random half of DATA, shadows on other halves,
    all with the training recipe given by the options."""
    use_ray(ray_address, workers)
    from dpcare.audit import attack_payload, attack_row
    from dpcare.runs import Manifest, RunFolder
    from dpcare.tabular.audit import tabular_lira

    run = RunFolder(out, "audit-lira", {"recipe": settings.to_dict(), "shadows": shadows, "seed": seed},
                    force=force, command="dpcare audit lira")
    df, schema = table_and_spec(data, spec)
    r = tabular_lira(df, schema, settings, shadows=shadows, workers=workers, seed=seed,
                     journal=run.path("models.jsonl"))  # a rerun of an interrupted attack trains only the rest
    rows = [attack_row(f"{settings.method} ({mode})", getattr(r, mode), shadows=r.shadows,
                       **{"shadow seconds": r.seconds_shadows}) for mode in ("online", "offline")]
    entry = run.attack("lira", attack_payload("LiRA membership attack", rows, r.scores))
    manifest = Manifest(attacks=[entry], notes=["Target and shadows are trained here on random halves of the "
                                                "population; the target model itself is not kept."])
    run.finish(manifest)
    typer.echo(f"LiRA, {shadows} shadows in {r.seconds_shadows:.1f} s: online AUC {r.online['auc']['value']:.3f}, "
               f"TPR@1%FPR {r.online['tpr_at_1pct_fpr']['value']:.3f}; offline AUC "
               f"{r.offline['auc']['value']:.3f} ({out}/attacks/lira.json)")


@app.command("one-run")
def audit_one_run(
    data: Annotated[Path, typer.Argument(help="training table (CSV/Parquet); canaries are drawn from it")],
    spec: Annotated[Path, typer.Option(help="its privacy spec")],
    method: Annotated[str, typer.Option(help="dp-sgd or feature-dp")] = "dp-sgd",
    epsilon: Annotated[float, typer.Option(help="claimed epsilon of the run")] = 1.0,
    canaries: Annotated[int | None, typer.Option(
        help="number of canaries, each included with probability 1/2 [default: half the rows less one, "
             "at most 1000]")] = None,
    epochs: Annotated[float, typer.Option(help="epochs")] = 20.0,
    clip: Annotated[float | None, typer.Option(
        help="clipping norm [default: 0.1 for dp-sgd, 10 for feature-dp]")] = None,
    design: Annotated[str, typer.Option(
        help="canaries: extreme (random labels, values at the declared bounds) or flipped (real rows, "
             "flipped labels)")] = "extreme",
    bound: Annotated[str, typer.Option(
        help="gdp (Gaussian-DP lower bound on mu, as epsilon at the run's delta) or pure (epsilon at delta, "
             "Steinke et al.)")] = "gdp",
    seed: Annotated[int, typer.Option(help="seed of the canaries, inclusion bits, split and initialisation")] = 0,
    noise_seed: Annotated[int | None, typer.Option(
        help="seed of the training's sampling and noise, to repeat an audit exactly [default: secret OS entropy, "
             "as in every run]")] = None,
    out: Annotated[Path, typer.Option(help="run folder to write (run.json, attacks/one_run.json)")] = Path(
        "results/audit"),
    force: Annotated[bool, typer.Option("--force", help="replace a non-empty --out folder")] = False,
) -> None:
    """Empirical epsilon lower bound from one training run with canaries (Steinke, Nasr, Jagielski 2023); see
    docs/auditing.md."""
    from dpcare.runs import Manifest, RunFolder
    from dpcare.tabular.audit import CanaryAuditSettings, audit_tabular

    settings = CanaryAuditSettings(method=method, epsilon=epsilon, canaries=canaries, epochs=epochs, clip_norm=clip,
                                   seed=seed, noise_seed=noise_seed, design=design, bound=bound)
    run = RunFolder(out, "audit-one-run", vars(settings), force=force, command="dpcare audit one-run")
    df, schema = table_and_spec(data, spec)
    r = audit_tabular(df, schema, settings)
    gdp = r["bound"] == "gdp"
    name = "Gaussian DP (mu lower bound, as epsilon at the run's delta)" if gdp else "(epsilon, delta) at the run's delta"
    row = {"model": r["method"], "claimed epsilon": r["claimed_epsilon"], "audited lower bound": r["epsilon_lower_bound"],
           "bound": name, "correct guesses": r["correct"], "guesses": r["guesses"], "canaries": r["canaries"],
           "confidence": r["confidence"]}
    if gdp:
        row.update({"claimed mu": r["claimed_mu"], "mu lower bound": r["mu_lower_bound"]})
    details = {k: v for k, v in r.items() if k not in ("guarantee", "ledger")}
    entry = run.attack("one_run", {"title": "One-run audit (empirical epsilon lower bound)", "rows": [row],
                                   "details": details})
    manifest = Manifest(attacks=[entry])
    manifest.add_model(f"{r['method']} (the audited training run, with canaries)", r["guarantee"], r["ledger"])
    run.finish(manifest)
    mu = f"mu >= {r['mu_lower_bound']:.3f} against a claimed {r['claimed_mu']:.3f}; " if gdp else ""
    typer.echo(f"claimed epsilon {r['claimed_epsilon']:.3f}; audited lower bound {r['epsilon_lower_bound']:.3f} "
               f"({r['bound']} bound: {mu}{r['correct']}/{r['guesses']} correct guesses on {r['canaries']} "
               f"canaries, {r['confidence']:.0%} confidence)")


@app.command("attribute")
def audit_attribute(
    run_dir: Annotated[Path, typer.Argument(help="run folder of `dpcare train`")],
    rows: Annotated[Path, typer.Option(help="rows whose private column to reconstruct (CSV/Parquet)")],
    column: Annotated[str, typer.Option(help="private column to reconstruct")],
) -> None:
    """Attribute inference from the model + public columns, against the prior and Theorem 4's bound; added to the
    run folder (attacks/attribute-COLUMN.json: one file per column)."""
    from dpcare.audit import attribute_inference
    from dpcare.data import load_table
    from dpcare.runs import attach_attack
    from dpcare.tabular import TabularModel

    model = TabularModel.load(run_dir)
    frame = load_table(rows, model.schema)
    g = model.guarantee
    r = attribute_inference(model.model, model.encoder, frame, column, epsilon=g.epsilon if g else None,
                            delta=g.delta if g else 0.0)
    row = {"model": model.settings.method, "success": r["success"], "prior (ball)": r["prior_ball"],
           "Theorem 4 bound": r.get("theorem4_bound"), "rows": r["rows"]}
    attach_attack(run_dir, f"attribute-{column}", {"title": f"Attribute inference of '{column}'", "rows": [row],
                                                   "details": r})
    bound = f"; Theorem 4 bound {r['theorem4_bound']:.3f}" if "theorem4_bound" in r else ""
    typer.echo(f"{column}: success {r['success']:.3f} on {r['rows']} rows; prior (Ball) {r['prior_ball']:.3f}{bound}")
