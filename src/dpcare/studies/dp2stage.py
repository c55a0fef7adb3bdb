"""``dpcare benchmark dp2stage``: DP-Standard vs DP-2Stage-U vs DP-2Stage-O vs SmartNoise baselines
(Afonja et al., DP-2Stage, Table 3), on Adult and a clinical table, at several epsilons.

Scaled for 2 CPU cores (see docs/results/dp2stage.md): a subset of columns, a few thousand training
rows, SmolLM2 cut to its first blocks with LoRA, and short training. Every LM run is
the public recipe (:class:`~dpcare.synth.Synthesizer`) with the study's settings. The
study writes a run folder (``run.json``: every model's guarantee and ledger state,
quality metrics, timing); each finished run is saved as it finishes (``runs/*.json`` in
the staging folder), so an interrupted study resumes when the same command is rerun.
Also compares constrained decoding with rejection sampling on the same model, and puts every seed's public
baseline beside the methods: a table of as many rows drawn independently from the spec's declared support
(:mod:`dpcare.synth.support_baseline`, no private value read), evaluated as the methods are; the paired
differences then check, seed by seed, whether each method beats it.
"""

from __future__ import annotations

import json
import logging
import math
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
import pandas as pd

from dpcare.data import TableSchema, load_dataset, split_table
from dpcare.io import new_figure, save_figure, write_json
from dpcare.privacy import legacy_delta
from dpcare.runs import Manifest, RunFolder
from dpcare.settings import DPSettings, to_dict
from dpcare.studies.paired import (
    HIGHER,
    LOWER,
    Claim,
    check_seeds,
    note_seeds,
    paired_differences,
    paired_markdown,
    seeds_key,
    seeds_label,
)
from dpcare.synth.evaluate import summary
from dpcare.synth.sampling import METHODS
from dpcare.synth.settings import LMSettings, Stage2Settings, StageSettings, SynthSettings
from dpcare.synth.synthesizer import HEADLINE, Synthesizer

log = logging.getLogger(__name__)

KIND = "study:dp2stage"
LM_METHODS = ("dp-standard", "dp-2stage-u", "dp-2stage-o")
#: the method name of the public baseline's rows (no epsilon: it pairs with every method at every epsilon)
PUBLIC = "public-support"
#: columns kept per data set (target first) and the unrelated public table used by DP-2Stage-O
COLUMNS = {
    "adult": ["income", "age", "workclass", "education", "marital-status", "occupation", "relationship", "race",
              "sex", "hours-per-week"],
    "support2": ["death", "age", "sex", "race", "income", "num_co", "meanbp", "hrt", "temp", "dzclass"],
    "rhc": ["death", "age", "sex", "race", "income", "ninsclas", "aps1", "meanbp1", "hrt1", "cat1"],
}
PUBLIC_FOR = {"adult": "support2", "support2": "adult", "rhc": "adult"}
#: the metrics the claims are checked on: ML efficacy (the paper's headline), marginal fidelity, value perplexity
PAIRED_METRICS = {"F1 XGB": HIGHER, "AUC XGB": HIGHER, "HIST20": HIGHER, "ppl value": LOWER}
#: what a method must beat the public baseline on: the ranking quality of the model trained on its table (the
#: minority-class F1 is not used: random labels score a high one) and the marginals
PUBLIC_METRICS = ("AUC XGB", "HIST20")


def claims(epsilons, released: tuple[str, ...] = ()) -> list[Claim]:
    """The paper's claims (Table 3) at every epsilon: both DP-2Stage variants beat DP-Standard; and each of the
    ``released`` methods beats the public baseline (:data:`PUBLIC`) on :data:`PUBLIC_METRICS`."""
    out = [Claim(m, "dp-standard", (), float(e)) for e in epsilons for m in ("dp-2stage-u", "dp-2stage-o")]
    return out + [Claim(m, PUBLIC, PUBLIC_METRICS, float(e)) for e in epsilons for m in released]


def check_choices(datasets: tuple[str, ...], methods: tuple[str, ...], baselines: tuple[str, ...]) -> None:
    """Refuse unknown data sets, LM methods or SmartNoise baselines, no data set, or a study with neither kind
    of method, before any data is read."""
    from dpcare.exceptions import SettingsError
    from dpcare.synth.baselines import BASELINES

    if not datasets or any(d not in COLUMNS for d in datasets):
        raise SettingsError(f"--datasets must name one or more of {list(COLUMNS)}, got {list(datasets)}")
    unknown = [m for m in methods if m not in LM_METHODS] + [b for b in baselines if b not in BASELINES]
    if unknown:
        raise SettingsError(f"unknown method(s) {unknown}: the LM methods are {list(LM_METHODS)}, the SmartNoise "
                            f"baselines {list(BASELINES)}")
    if not methods and not baselines:
        raise SettingsError("the study needs at least one LM method or SmartNoise baseline")


NOT_PROTECTED = ("DP-2Stage-O's stage-1 table and the pseudo data of DP-2Stage-U (drawn from the spec's declared "
                 "ranges) are public, outside every guarantee.")


def _settings(lm: LMSettings, stage1: StageSettings, lr: float, epochs: float, batch_size: int) -> SynthSettings:
    return SynthSettings(lm=lm, stage1=stage1, stage2=Stage2Settings(lr=lr),
                         dp=DPSettings(epochs=epochs, batch_size=batch_size, clip_norm=1.0))


@dataclass
class Dp2StageBenchmark:
    """The study's grid. ``settings``: the synthesizer settings every LM run shares (the recipe's); each run
    sets its own mode and ``dp.epsilon`` (one of ``epsilons``). ``settings.dp.seed`` is the seed of the whole
    study: data splits, pseudo data, noise, baselines, sampling and evaluation."""

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
    settings: SynthSettings = field(default_factory=lambda: _settings(
        LMSettings(layers=1, lora_rank=8), StageSettings(epochs=1.0, batch_size=32, lr=2e-3), lr=2e-3, epochs=2.0,
        batch_size=64))
    compare_sampling_rows: int = 100  # constrained vs rejection vs imputation on one model; 0 skips
    seeds: int = 1  # seed s: the whole grid (splits, pseudo data, noise, baselines, sampling) at seed + s

    @property
    def seed(self) -> int:
        return self.settings.dp.seed

    @classmethod
    def quick(cls, model: str = "smollm2") -> Dp2StageBenchmark:
        return cls(datasets=("adult",), epsilons=(8.0,), baselines=("mst",), n_train=120, n_test=100, n_synth=60,
                   n_public=120, n_perplexity=40,
                   settings=_settings(LMSettings(model=model, layers=1, lora_rank=4),
                                      StageSettings(epochs=1.0, batch_size=16, lr=3e-3), lr=3e-3, epochs=1.0,
                                      batch_size=32),
                   compare_sampling_rows=20)

    def synth_settings(self, method: str, epsilon: float, rows: int | None = None) -> SynthSettings:
        """The settings of the LM run of ``method`` at ``epsilon``; ``rows``: the private training rows, which
        pin delta (unless the benchmark's settings give one) to the published 1/n^1.1 (see :meth:`delta`).
        noise_seed is pinned to the seed likewise (unless given): the published numbers stay reproducible, and
        their noise is known to whoever knows the seed (the recipe's default is secret OS entropy)."""
        pin = {"noise_seed": self.settings.dp.seed} if self.settings.dp.noise_seed is None else {}
        dp = self.settings.dp.replace(epsilon=epsilon, **pin)
        if rows is not None:
            dp = dp.replace(delta=self.delta(rows))
        return self.settings.replace(mode=method, dp=dp)

    def delta(self, rows: int) -> float:
        """The settings' delta, else 1/n^1.1: the default docs/results/dp2stage.md was measured with (now
        min(1e-5, 0.01/n)), pinned so that the published numbers stay reproducible."""
        return self.settings.dp.delta if self.settings.dp.delta is not None else legacy_delta(rows)

    def at_seed(self, s: int) -> Dp2StageBenchmark:
        """The one-seed benchmark of seed ``s`` (``settings.dp.seed`` + s); ``at_seed(0)`` is the published one."""
        check_seeds(self.seeds)
        return replace(self, seeds=1, settings=self.settings.replace(dp=self.settings.dp.shifted(s)))

    def to_dict(self) -> dict:
        """The settings (the run folder's resume key); ``seeds`` only when not 1, so that the published one-seed
        study keeps its key."""
        return seeds_key(to_dict(self), self.seeds)


def prepare(name: str, bench: Dp2StageBenchmark) -> tuple[pd.DataFrame, pd.DataFrame, TableSchema]:
    """(train, test, schema) of a bundled data set: the benchmark's columns, fixed-size random splits."""
    df, schema = load_dataset(name)
    if not bench.all_columns:
        keep = COLUMNS[name]
        schema = schema.select(keep)
        df = df[keep]
    parts = split_table(df, {"train": 0.7, "test": 0.3}, seed=bench.seed)
    train, test = parts["train"], parts["test"]
    return (train.sample(min(bench.n_train, len(train)), random_state=bench.seed).reset_index(drop=True),
            test.sample(min(bench.n_test, len(test)), random_state=bench.seed).reset_index(drop=True), schema)


def _synthesizer(method: str, eps: float, schema: TableSchema, bench: Dp2StageBenchmark, dataset: str,
                 rows: int | None = None) -> Synthesizer:
    public_table = public_schema = None
    if method == "dp-2stage-o":
        public_table, _, public_schema = prepare(PUBLIC_FOR[dataset], replace(bench, n_train=bench.n_public))
    return Synthesizer(schema, bench.synth_settings(method, eps, rows), public_table=public_table,
                       public_schema=public_schema)


def fitted_synthesizer(method: str, eps: float, train: pd.DataFrame, schema: TableSchema,
                       bench: Dp2StageBenchmark, dataset: str, stage1_cache: Path | str | None = None) -> Synthesizer:
    """A synthesizer of ``method`` fitted on ``train`` with the benchmark's settings."""
    return _synthesizer(method, eps, schema, bench, dataset, len(train)).fit(train, stage1_cache=stage1_cache)


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
        row["guarantee"] = synth.guarantee.to_dict() if synth.guarantee else None
        row["ledger"] = synth.ledger.state_dict() if synth.ledger is not None else None
    else:
        from dpcare.synth.baselines import run_baseline

        delta = bench.delta(len(train))  # pinned as the LM methods' (the published 1/n^1.1)
        fake = run_baseline(method, train, schema, eps, delta, bench.n_synth, seed=bench.seed)
        row["fit_seconds"] = time.perf_counter() - start
        row["epsilon_spent"], row["delta"] = eps, delta
    row["metrics"] = evaluate_synthetic(fake, train, test, schema, seed=bench.seed)
    row["seconds"] = time.perf_counter() - start
    return row


def run_public(dataset: str, train: pd.DataFrame, test: pd.DataFrame, schema: TableSchema,
               bench: Dp2StageBenchmark) -> dict:
    """The public baseline of one data set at the benchmark's seed: ``n_synth`` rows drawn from the spec's
    declared support (no private value read), evaluated exactly as every method's table is."""
    from dpcare.synth.evaluate import evaluate_synthetic
    from dpcare.synth.support_baseline import NAME, support_table

    start = time.perf_counter()
    fake = support_table(schema, bench.n_synth, seed=bench.seed)
    return {"dataset": dataset, "method": PUBLIC, "epsilon": None, "n_train": len(train), "fit_seconds": 0.0,
            "baseline": NAME, "metrics": evaluate_synthetic(fake, train, test, schema, seed=bench.seed),
            "seconds": time.perf_counter() - start}


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


def run_benchmark(bench: Dp2StageBenchmark, out: Path | str, force: bool = False) -> pd.DataFrame:
    """Every (data set, epsilon, method) run, the sampling comparison, the tables, the plot and run.json.
    Finished runs are kept in the staging folder: rerunning the same settings resumes an interrupted study."""
    run = RunFolder(out, KIND, bench.to_dict(), force=force, command="dpcare benchmark dp2stage")
    run.path("runs").mkdir(exist_ok=True)  # the staging folder (a rerun resumes there) with the finished runs
    work = run.staging
    records = []
    for s in range(bench.seeds):  # seed 0: the published files and numbers; seed s > 0: files named -seed<s>
        one, tag = bench.at_seed(s), "" if s == 0 else f"-seed{s}"
        for dataset in bench.datasets:
            train, test, schema = prepare(dataset, one)
            for eps in bench.epsilons:
                for method in (*bench.methods, *bench.baselines):
                    path = work / "runs" / f"{dataset}-{method}-eps{eps:g}{tag}.json"
                    if path.exists():
                        records.append({**json.loads(path.read_text()), "seed": s})
                        continue
                    log.info("%s %s eps=%g seed %d", dataset, method, eps, one.seed)
                    try:
                        row = run_one(dataset, method, eps, train, test, schema, one, work / "stage1")
                    except Exception as err:  # a baseline that cannot run is reported, not hidden
                        if method in LM_METHODS:
                            raise
                        row = {"dataset": dataset, "method": method, "epsilon": eps,
                               "error": f"{type(err).__name__}: {err}"}
                    write_json(path, row if s == 0 else {**row, "seed": s})
                    records.append({**row, "seed": s})
            path = work / "runs" / f"{dataset}-{PUBLIC}{tag}.json"
            if not path.exists():
                write_json(path, run_public(dataset, train, test, schema, one) | ({"seed": s} if s else {}))
            records.append({**json.loads(path.read_text()), "seed": s})
    if bench.compare_sampling_rows and bench.methods:  # the comparison samples LM models
        path = work / "sampling.json"
        if not path.exists():
            train, _, schema = prepare(bench.datasets[0], bench)
            result = compare_sampling(train, schema, bench, bench.datasets[0], work / "stage1")
            write_json(path, {"dataset": bench.datasets[0], "epsilon": min(bench.epsilons), "models": result})
    table, diffs = tables(records, bench)
    first = [r["seed"] == 0 for r in records]  # run.json and the plot: seed 0's models; the others in table.csv
    run.write_text("table.csv", table.to_csv(index=False))
    run.write_text("paired.csv", diffs.to_csv(index=False))
    run.write_text("table.md", table_markdown(table, work, bench.seeds, diffs))
    plot(table[first], run.path("dp2stage.png"))
    m = manifest([r for r in records if r["seed"] == 0], table[first], work)
    note_seeds(m, bench.seed, bench.seeds)
    run.finish(m)
    return table


def tables(records: list[dict], bench: Dp2StageBenchmark) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(the table, a seed column when ``bench`` has several seeds; the paired differences of :func:`claims` per
    data set) of the runs' ``records`` (each with its ``seed``: 0, 1, ...)."""
    table = summary_table(records)
    seeds = [r.get("seed", 0) for r in records]
    released = (*bench.methods, *bench.baselines)
    diffs = paired_differences(table.assign(seed=seeds), claims(bench.epsilons, released), PAIRED_METRICS,
                               epsilon_col="epsilon", by=("dataset",))
    if bench.seeds > 1:
        table.insert(3, "seed", seeds)
    return table, diffs


#: the table's metric columns: a run's report numbers (dpcare.synth.evaluate.SUMMARY, in that order) and its fit time
SUMMARY = (*summary({}), "fit s")


def summary_table(records: list[dict]) -> pd.DataFrame:
    rows = []
    for r in records:
        row = {"dataset": r["dataset"], "epsilon": r["epsilon"], "method": r["method"]}
        metrics = summary({**r.get("metrics", {}), "perplexity": r.get("perplexity")})
        row.update({k: np.nan if v is None else v for k, v in metrics.items()})
        row["fit s"] = r.get("fit_seconds", np.nan)
        row["error"] = r.get("error", "")
        rows.append(row)
    return pd.DataFrame(rows)


def manifest(records: list[dict], table: pd.DataFrame, work: Path) -> Manifest:
    """run.json of the study: every model with its guarantee and ledger state (the SmartNoise baselines: their own
    epsilon and delta), its quality metrics and timing, the sampling comparison, what is not protected."""
    m = Manifest(headline=list(HEADLINE), files={"table": "table.md", "table (CSV)": "table.csv", "runs": "runs/"},
                 not_protected=[NOT_PROTECTED])
    for rec, row in zip(records, table.to_dict("records")):
        metrics = {k: None if isinstance(v, float) and math.isnan(v) else v for k, v in row.items()
                   if k in SUMMARY and k != "fit s"}
        if rec["method"] == PUBLIC:
            name = f"{rec['dataset']} public baseline"
            m.baselines.append({"data": rec["dataset"], "name": rec.get("baseline"), "metrics": metrics})
            m.metrics.append({"model": name, **metrics})
            continue
        model = f"{rec['dataset']} {rec['method']} eps={rec['epsilon']:g}"
        if rec.get("error"):
            m.notes.append(f"{model} failed: {rec['error']}")
            continue
        if rec["method"] == "non-private":
            m.add_model(model, None, note="NO differential privacy guarantee (non-private fine-tuning).")
        elif rec["method"] in LM_METHODS:
            m.add_model(model, rec.get("guarantee"), rec.get("ledger"), note="whole rows of the private training table",
                        epsilon=rec.get("epsilon_spent"), delta=rec.get("delta"))
        else:
            m.add_model(model, None, note="whole rows (SmartNoise's own accounting, not dpcare's ledger)",
                        epsilon=rec.get("epsilon_spent"), delta=rec.get("delta"))
        m.metrics.append({"model": model, **metrics})
        m.timing.append({"model": model, "fit seconds": rec.get("fit_seconds"), "seconds": rec.get("seconds")})
    if (work / "sampling.json").exists():
        s = json.loads((work / "sampling.json").read_text())
        m.files["sampling"] = "sampling.json"
        m.timing += [{"model": f"{mode} sampling: {meth}", "rows per second": r.get("rows_per_second"),
                      "valid rate": r.get("valid_rate")} for mode, rs in s["models"].items() for meth, r in rs.items()]
    if (work / "dp2stage.png").exists():
        m.figures.append(["synthetic data quality", "dp2stage.png"])
    return m


def _num(v: float) -> str:
    return "" if pd.isna(v) else f"{v:.3f}" if abs(v) < 100 else f"{v:.0f}"


def _over_seeds(table: pd.DataFrame) -> pd.DataFrame:
    """One row per (dataset, epsilon, method): 'mean ± sd' over the seeds of every metric, the errors joined."""
    rows = []
    for (dataset, eps, method), g in table.groupby(["dataset", "epsilon", "method"], sort=False, dropna=False):
        row = {"dataset": dataset, "epsilon": eps, "method": method, "seeds": len(g)}
        for c in SUMMARY:
            v = g[c].dropna()
            row[c] = "" if v.empty else _num(v.mean()) + ("" if len(v) < 2 else f" ± {_num(v.std(ddof=1))}")
        row["error"] = "; ".join(sorted({e for e in g["error"] if e}))
        rows.append(row)
    return pd.DataFrame(rows)


def table_markdown(table: pd.DataFrame, out: Path, seeds: int = 1, diffs: pd.DataFrame | None = None) -> str:
    """table.md: one row per (dataset, epsilon, method), mean ± sd over seeds when there are several (a seed
    column in ``table``), the sampling comparison and, with ``diffs``, the paired differences of the claims."""
    if "seed" in table:
        shown = _over_seeds(table)
    else:
        shown = table.copy()
        for c in SUMMARY:
            shown[c] = shown[c].map(_num)
    shown["epsilon"] = shown["epsilon"].map(lambda e: "none" if pd.isna(e) else f"{float(e):g}")  # none: public
    text = f"# DP-2Stage benchmark {seeds_label(seeds)}\n\n"
    text += "| " + " | ".join(shown.columns) + " |\n|" + "---|" * len(shown.columns) + "\n"
    text += "\n".join("| " + " | ".join(str(v) for v in r) + " |" for r in shown.itertuples(index=False))
    sampling = out / "sampling.json"
    if sampling.exists():
        s = json.loads(sampling.read_text())
        text += (f"\n\nSampling the same model ({s['dataset']}, epsilon = {s['epsilon']:g}):\n\n"
                 "| model | sampling | valid rate | rows/s |\n|---|---|---|---|\n")
        text += "\n".join(f"| {mode} | {m} | {r['valid_rate']:.3f} | {r['rows_per_second']:.2f} |"
                          for mode, runs in s["models"].items() for m, r in runs.items())
    if diffs is not None:
        text += "\n" + "\n".join(paired_markdown(diffs, seeds, by=("dataset",)))
    return text + "\n"


def plot(table: pd.DataFrame, path: Path) -> None:
    ok = table[table["error"] == ""]
    if ok.empty:
        return
    metrics = ["HIST20", "Pair", "CorAcc", "F1 XGB"]
    public = ok[ok["method"] == PUBLIC]  # no epsilon: drawn beside the methods at every epsilon
    groups = [((dataset, eps), pd.concat([g, public[public["dataset"] == dataset]]))
              for (dataset, eps), g in ok[ok["method"] != PUBLIC].groupby(["dataset", "epsilon"])]
    if not groups:
        return
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
