"""``dpcare benchmark dp2stage``: DP-Standard vs DP-2Stage-U vs DP-2Stage-O vs SmartNoise baselines
(dp-2stage.txt, Table 3), on Adult and a clinical table, at several epsilons.

Scaled for 2 CPU cores (see README): a subset of columns, a few thousand training
rows, SmolLM2 cut to its first blocks with LoRA, and short training. Every run is
saved as it finishes (``runs/*.json``); a rerun skips finished runs (resume).
Also compares constrained decoding with rejection sampling on the same model.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import numpy as np
import pandas as pd

from dpcare.data import TableSchema, load_dataset, split_table
from dpcare.io import new_figure, save_figure, write_json, write_text
from dpcare.synth.lm_model import LMSettings
from dpcare.synth.sampling import METHODS
from dpcare.synth.synthesizer import StageSettings, Synthesizer, SynthSettings

log = logging.getLogger(__name__)

LM_METHODS = ("dp-standard", "dp-2stage-u", "dp-2stage-o")
#: columns kept per data set (target first) and the unrelated public table used by DP-2Stage-O
COLUMNS = {
    "adult": ["income", "age", "workclass", "education", "marital-status", "occupation", "relationship", "race",
              "sex", "hours-per-week"],
    "support2": ["death", "age", "sex", "race", "income", "num_co", "meanbp", "hrt", "temp", "dzclass"],
    "rhc": ["death", "age", "sex", "race", "income", "ninsclas", "aps1", "meanbp1", "hrt1", "cat1"],
}
PUBLIC_FOR = {"adult": "support2", "support2": "adult", "rhc": "adult"}


@dataclass
class Dp2StageBenchmark:
    datasets: tuple[str, ...] = ("adult", "support2")
    epsilons: tuple[float, ...] = (1.0, 8.0)
    methods: tuple[str, ...] = LM_METHODS
    baselines: tuple[str, ...] = ("mst", "aim", "dpctgan")
    n_train: int = 1500
    n_test: int = 1000
    n_synth: int = 1000
    n_public: int = 2000  # rows of the unrelated public table for DP-2Stage-O
    n_perplexity: int = 300
    all_columns: bool = False
    lm: LMSettings = field(default_factory=lambda: LMSettings(layers=1, lora_rank=8))
    stage1: StageSettings = field(default_factory=lambda: StageSettings(epochs=1.0, batch_size=32, lr=2e-3))
    stage2: StageSettings = field(default_factory=lambda: StageSettings(epochs=2.0, batch_size=64, lr=2e-3))
    compare_sampling_rows: int = 100  # constrained vs rejection vs imputation on one model; 0 skips
    seed: int = 0

    @classmethod
    def quick(cls, model: str = "smollm2") -> Dp2StageBenchmark:
        return cls(datasets=("adult",), epsilons=(8.0,), baselines=("mst",), n_train=120, n_test=100, n_synth=60,
                   n_public=120, n_perplexity=40, lm=LMSettings(model=model, layers=1, lora_rank=4),
                   stage1=StageSettings(epochs=1.0, batch_size=16, lr=3e-3),
                   stage2=StageSettings(epochs=1.0, batch_size=32, lr=3e-3), compare_sampling_rows=20)

    def to_dict(self) -> dict:
        return {**asdict(self), "lm": self.lm.to_dict()}


def prepare(name: str, bench: Dp2StageBenchmark) -> tuple[pd.DataFrame, pd.DataFrame, TableSchema]:
    """(train, test, schema) of a bundled data set: the benchmark's columns, fixed-size random splits."""
    df, schema = load_dataset(name)
    if not bench.all_columns:
        keep = COLUMNS[name]
        schema = TableSchema(tuple(c for c in schema.columns if c.name in keep), name=schema.name, meta=schema.meta)
        df = df[keep]
    parts = split_table(df, {"train": 0.7, "test": 0.3}, seed=bench.seed)
    train, test = parts["train"], parts["test"]
    return (train.sample(min(bench.n_train, len(train)), random_state=bench.seed).reset_index(drop=True),
            test.sample(min(bench.n_test, len(test)), random_state=bench.seed).reset_index(drop=True), schema)


def _synthesizer(method: str, eps: float, schema: TableSchema, bench: Dp2StageBenchmark, dataset: str) -> Synthesizer:
    public_table = public_schema = None
    if method == "dp-2stage-o":
        public_table, _, public_schema = prepare(PUBLIC_FOR[dataset], replace(bench, n_train=bench.n_public))
    settings = SynthSettings(mode=method, epsilon=eps, lm=bench.lm, stage1=bench.stage1, stage2=bench.stage2,
                             seed=bench.seed)
    return Synthesizer(schema, settings, public_table=public_table, public_schema=public_schema)


def fitted_synthesizer(method: str, eps: float, train: pd.DataFrame, schema: TableSchema,
                       bench: Dp2StageBenchmark, dataset: str, stage1_cache: Path | str | None = None) -> Synthesizer:
    """A synthesizer of ``method`` fitted on ``train`` with the benchmark's settings."""
    return _synthesizer(method, eps, schema, bench, dataset).fit(train, stage1_cache=stage1_cache)


def run_one(dataset: str, method: str, eps: float, train: pd.DataFrame, test: pd.DataFrame, schema: TableSchema,
            bench: Dp2StageBenchmark, stage1_cache: Path | None = None) -> dict:
    """Fit, sample and evaluate one method at one epsilon."""
    from dpcare.synth.evaluate import evaluate_synthetic

    row: dict = {"dataset": dataset, "method": method, "epsilon": eps, "n_train": len(train)}
    start = time.perf_counter()
    if method in LM_METHODS or method == "non-private":
        synth = fitted_synthesizer(method, eps, train, schema, bench, dataset, stage1_cache)
        row["fit_seconds"] = time.perf_counter() - start
        fake = synth.sample(bench.n_synth, seed=bench.seed)
        row["sampling"] = synth.last_sampling.to_dict()
        row["perplexity"] = synth.perplexity(test.iloc[: bench.n_perplexity])
        row["epsilon_spent"] = synth.guarantee.epsilon if synth.guarantee else None
        row["delta"] = synth.guarantee.delta if synth.guarantee else None
    else:
        from dpcare.privacy import default_delta
        from dpcare.synth.baselines import run_baseline

        delta = default_delta(len(train))
        fake = run_baseline(method, train, schema, eps, delta, bench.n_synth, seed=bench.seed)
        row["fit_seconds"] = time.perf_counter() - start
        row["epsilon_spent"], row["delta"] = eps, delta
    row["metrics"] = evaluate_synthetic(fake, train, test, schema, seed=bench.seed)
    row["seconds"] = time.perf_counter() - start
    return row


def compare_sampling(train: pd.DataFrame, schema: TableSchema, bench: Dp2StageBenchmark, dataset: str,
                     stage1_cache: Path | None = None) -> dict:
    """Constrained decoding vs rejection vs imputation sampling on the same model, for a DP-Standard and a
    DP-2Stage-U model at the smallest epsilon."""
    out = {}
    for mode in ("dp-standard", "dp-2stage-u"):
        synth = fitted_synthesizer(mode, min(bench.epsilons), train, schema, bench, dataset, stage1_cache)
        stats = sampling_methods(synth, bench.compare_sampling_rows, bench.seed, progress=False)
        out[mode] = {method: st.to_dict() for method, st in stats.items()}
    return out


def sampling_methods(synth: Synthesizer, rows: int, seed: int = 0, progress: bool = True) -> dict:
    """``{method: SamplingStats}``: each sampling method asked for ``rows`` valid rows of the same fitted model
    (a fresh sampler with the same seed each), generating at most ``5 * rows``."""
    return {m: synth.sampler(seed=seed).sample(rows, m, progress=progress, max_attempts=5 * rows)[1]
            for m in METHODS}


def run_benchmark(bench: Dp2StageBenchmark, out: Path) -> pd.DataFrame:
    out = Path(out)
    (out / "runs").mkdir(parents=True, exist_ok=True)
    write_json(out / "config.json", bench.to_dict())
    records = []
    for dataset in bench.datasets:
        train, test, schema = prepare(dataset, bench)
        for eps in bench.epsilons:
            for method in (*bench.methods, *bench.baselines):
                path = out / "runs" / f"{dataset}-{method}-eps{eps:g}.json"
                if path.exists():
                    records.append(json.loads(path.read_text()))
                    continue
                log.info("%s %s eps=%g", dataset, method, eps)
                try:
                    row = run_one(dataset, method, eps, train, test, schema, bench, out / "stage1")
                except Exception as err:  # a baseline that cannot run is reported, not hidden
                    if method in LM_METHODS:
                        raise
                    row = {"dataset": dataset, "method": method, "epsilon": eps, "error": f"{type(err).__name__}: {err}"}
                write_json(path, row)
                records.append(row)
    if bench.compare_sampling_rows:
        path = out / "sampling.json"
        if not path.exists():
            train, _, schema = prepare(bench.datasets[0], bench)
            result = compare_sampling(train, schema, bench, bench.datasets[0], out / "stage1")
            write_json(path, {"dataset": bench.datasets[0], "epsilon": min(bench.epsilons), "models": result})
    table = summary_table(records)
    table.to_csv(out / "table.csv", index=False)
    write_text(out / "table.md", table_markdown(table, out))
    plot(table, out / "dp2stage.png")
    return table


SUMMARY = {  # column in the table: path in a run record
    "F1 LR": "metrics/ml_efficacy/logistic_regression/f1_minority",
    "F1 XGB": "metrics/ml_efficacy/xgboost/f1_minority",
    "AUC XGB": "metrics/ml_efficacy/xgboost/auc",
    "HIST20": "metrics/hist/bins_20",
    "HIST50": "metrics/hist/bins_50",
    "Pair": "metrics/pair",
    "CorAcc": "metrics/coracc",
    "ppl value": "perplexity/value",
    "ppl all": "perplexity/all",
    "DCR median": "metrics/dcr/synthetic_median",
    "dup rate": "metrics/dcr/duplicate_rate",
    "fit s": "fit_seconds",
}


def _get(record: dict, path: str):
    cur = record
    for part in path.split("/"):
        if not isinstance(cur, dict) or part not in cur:
            return np.nan
        cur = cur[part]
    return cur


def summary_table(records: list[dict]) -> pd.DataFrame:
    rows = []
    for r in records:
        row = {"dataset": r["dataset"], "epsilon": r["epsilon"], "method": r["method"]}
        row.update({k: _get(r, p) for k, p in SUMMARY.items()})
        row["error"] = r.get("error", "")
        rows.append(row)
    return pd.DataFrame(rows)


def table_markdown(table: pd.DataFrame, out: Path) -> str:
    shown = table.copy()
    for c in SUMMARY:
        shown[c] = shown[c].map(lambda v: "" if pd.isna(v) else f"{v:.3f}" if abs(v) < 100 else f"{v:.0f}")
    text = "| " + " | ".join(shown.columns) + " |\n|" + "---|" * len(shown.columns) + "\n"
    text += "\n".join("| " + " | ".join(str(v) for v in r) + " |" for r in shown.itertuples(index=False))
    sampling = out / "sampling.json"
    if sampling.exists():
        s = json.loads(sampling.read_text())
        text += (f"\n\nSampling the same model ({s['dataset']}, epsilon = {s['epsilon']:g}):\n\n"
                 "| model | sampling | valid rate | rows/s |\n|---|---|---|---|\n")
        text += "\n".join(f"| {mode} | {m} | {r['valid_rate']:.3f} | {r['rows_per_second']:.2f} |"
                          for mode, runs in s["models"].items() for m, r in runs.items())
    return text + "\n"


def plot(table: pd.DataFrame, path: Path) -> None:
    ok = table[table["error"] == ""]
    if ok.empty:
        return
    metrics = ["HIST20", "Pair", "CorAcc", "F1 XGB"]
    groups = list(ok.groupby(["dataset", "epsilon"]))
    fig, axes = new_figure((4.5 * len(groups), 3.6), ncols=len(groups))
    axes = np.atleast_1d(axes)
    for ax, ((dataset, eps), g) in zip(axes, groups):
        width = 0.8 / len(g)
        for i, (_, r) in enumerate(g.iterrows()):
            ax.bar(np.arange(len(metrics)) + i * width, [r[m] for m in metrics], width, label=r["method"])
        ax.set_xticks(np.arange(len(metrics)) + 0.4 - width / 2, metrics)
        ax.set_ylim(0, 1)
        ax.set_title(f"{dataset}, epsilon = {eps:g}")
    axes[0].legend(fontsize=7)
    save_figure(fig, path)
