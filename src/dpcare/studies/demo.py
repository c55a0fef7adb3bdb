"""The main job on the bundled default: feature-level DP on SUPPORT2 next to DP-SGD, Label-DP and a
non-private model at the same epsilon, over a few seeds; each run is a ``dpcare train`` run folder under
``runs/``, the summary a run folder of its own (``run.json``: every model's guarantee and metrics)."""

from __future__ import annotations

import math
import os
from dataclasses import replace
from pathlib import Path

import pandas as pd

from dpcare.io import new_figure, save_figure
from dpcare.privacy import legacy_delta
from dpcare.runs import Manifest, RunFolder, is_run_folder
from dpcare.settings import DPSettings
from dpcare.studies.paired import HIGHER, Claim, paired_differences, paired_markdown
from dpcare.tabular import TabularModel, TabularSettings, fit
from dpcare.tabular.recipe import protected_text, training_rows

DEMO_METHODS = ("non-private", "dp-sgd", "feature-dp", "label-dp")
#: what the demo checks, seed by seed: feature-level DP beats DP-SGD at the same epsilon (Mahloujifar et al.'s
#: claim), DP-SGD beats Label-DP (docs/results/demo.md's reading), and what privacy costs against the non-private model
CLAIMS = (Claim("feature-dp", "dp-sgd"), Claim("dp-sgd", "label-dp"), Claim("non-private", "feature-dp"),
          Claim("non-private", "dp-sgd"))
PAIRED_METRICS = {"AUPRC": HIGHER, "AUROC": HIGHER}


def run_demo(out_dir: str | os.PathLike = "results/demo", dataset: str = "support2", epsilon: float = 1.0,
             seeds: int = 3, epochs: float = 10.0, methods: tuple[str, ...] = DEMO_METHODS,
             progress: bool = True, force: bool = False) -> pd.DataFrame:
    """Train each method on each seed, write runs/, results.csv, results.md and a plot; return the summary."""
    from dpcare.data import load_dataset

    study = {"dataset": dataset, "epsilon": epsilon, "seeds": seeds, "epochs": epochs, "methods": list(methods)}
    folder = RunFolder(out_dir, "study:demo", study, force=force, command="dpcare demo")
    df, schema = load_dataset(dataset)
    rows, manifest = [], Manifest(headline=["AUPRC", "AUROC"])
    base = TabularSettings(dp=DPSettings(epsilon=epsilon, epochs=epochs, batch_size=256))
    for method in methods:
        for seed in range(seeds):
            # delta pinned to 1/n^1.1, the default docs/results/demo.md was measured with (the default is now
            # min(1e-5, 0.01/n)): the published numbers stay reproducible; the guarantee flags it as weak.
            # noise_seed pinned to the seed for the same reason (the default is secret OS entropy): the noise
            # of these runs is known to whoever knows the seed, and their run.json says so
            n = training_rows(len(df), seed, holdout=True)
            settings = replace(base, method=method,
                               dp=base.dp.replace(seed=seed, noise_seed=seed, delta=legacy_delta(n)))
            name = f"{method}-seed{seed}"
            path = folder.path(f"runs/{name}")
            if is_run_folder(path):  # finished before an interruption: the study resumes
                model = TabularModel.load(path)
            else:
                model = fit(df, schema, settings, progress=progress)
                model.save(path)
            g, b = model.guarantee, model.baseline
            rows.append({"method": method, "AUPRC": model.metrics["test_auprc"], "AUROC": model.metrics["test_auroc"],
                         "epsilon": g.epsilon if g else math.inf, "delta": g.delta if g else 0.0,
                         "protected": protected_text(g), "seed": seed, "baseline": baseline_cell(b["name"]),
                         "baseline_AUPRC": b["metrics"]["test AUPRC"],
                         "beats": b["comparisons"][0]["beats"]})
            manifest.add_model(name, g.to_dict() if g else None,
                               model.ledger.state_dict() if model.ledger is not None else None,
                               note="" if g else "NO differential privacy guarantee (non-private run).")
    runs = pd.DataFrame(rows)
    summary = summarize(runs)
    diffs = paired_differences(runs, CLAIMS, PAIRED_METRICS, epsilon_col=None)
    folder.write_text("runs.csv", runs.to_csv(index=False))
    folder.write_text("results.csv", summary.to_csv(index=False))
    folder.write_text("paired.csv", diffs.to_csv(index=False))
    folder.write_text("results.md", markdown_table(summary, dataset, epsilon, seeds, schema)
                      + "\n".join(paired_markdown(diffs, seeds)))
    plot_summary(summary, folder.path("results.png"), dataset, epsilon)
    manifest.metrics = [{"model": f"{r.method}-seed{r.seed}", "AUPRC": r.AUPRC, "AUROC": r.AUROC}
                        for r in runs.itertuples()]
    manifest.figures = [["test AUPRC per method", "results.png"]]
    manifest.files = {"runs": "runs/", "table": "results.md", "paired": "paired.csv"}
    folder.finish(manifest)
    return summary


#: the tabular recipe's public baselines (the panel of dpcare.tabular.baselines and the recipe's own), in a table
#: cell; a name not listed is shown whole
BASELINES = {"the same MLP on the public columns only (non-private)": "MLP, public columns",
             "logistic regression on the public columns": "logistic regression, public columns",
             "gradient boosting on the public columns": "gradient boosting, public columns",
             "a constant (the training prevalence)": "constant",
             "a constant prediction (the labels are private)": "constant"}


def baseline_cell(name: str) -> str:
    return BASELINES.get(name, name)


def summarize(runs: pd.DataFrame) -> pd.DataFrame:
    agg = runs.groupby("method", sort=False).agg(
        AUPRC=("AUPRC", "mean"), AUPRC_sd=("AUPRC", "std"), AUROC=("AUROC", "mean"), AUROC_sd=("AUROC", "std"),
        epsilon=("epsilon", "max"), delta=("delta", "max"), protected=("protected", "first"), seeds=("seed", "count"),
        baseline=("baseline", lambda names: " / ".join(dict.fromkeys(names))),  # each seed's winner, once
        baseline_AUPRC=("baseline_AUPRC", "mean"), beats=("beats", "sum"))
    return agg.reset_index()


def markdown_table(summary: pd.DataFrame, dataset: str, epsilon: float, seeds: int, schema) -> str:
    lines = [f"# {dataset}: target `{schema.target}`, private columns {', '.join(schema.private_columns)}",
             "", f"Test-set mean ± sd over {seeds} seeds; private methods calibrated to epsilon = {epsilon}.", "",
             "| method | AUPRC | AUROC | epsilon | delta | protected | public baseline AUPRC | beats it |",
             "|---|---|---|---|---|---|---|---|"]
    for r in summary.itertuples():
        eps = "inf" if r.epsilon == float("inf") else f"{r.epsilon:.3f}"
        lines.append(f"| {r.method} | {r.AUPRC:.3f} ± {r.AUPRC_sd:.3f} | {r.AUROC:.3f} ± {r.AUROC_sd:.3f} | {eps} "
                     f"| {r.delta:.2e} | {r.protected} | {r.baseline_AUPRC:.3f} ({r.baseline}) | "
                     f"{int(r.beats)}/{r.seeds} seeds |")
    return "\n".join(lines) + ("\n\nPublic baseline: the best predictor that needs no private data, on the same "
                               "test rows (where only some columns are private: the best on validation rows of a "
                               "constant, logistic regression, gradient boosting and the same MLP on the public "
                               "columns, per seed; a constant where the labels are private). 'Beats it': the "
                               "paired bootstrap interval of the AUPRC difference lies above zero in that many "
                               "seeds.\n")


def plot_summary(summary: pd.DataFrame, path: Path, dataset: str, epsilon: float) -> None:
    fig, ax = new_figure((6, 3.2))
    ax.bar(summary["method"], summary["AUPRC"], yerr=summary["AUPRC_sd"].fillna(0), capsize=4, color="#4C72B0")
    lo = max(0.0, float((summary["AUPRC"] - summary["AUPRC_sd"].fillna(0)).min()) - 0.05)
    ax.set_ylim(lo, 1.0)
    ax.set_ylabel("test AUPRC")
    ax.set_title(f"{dataset}, epsilon = {epsilon} (private methods)")
    save_figure(fig, path)
