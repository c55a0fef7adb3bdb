"""`dpcare benchmark fusiondp-text`: the nine methods of Zeng et al. (FusionDP, Table 1) on clinical notes.

ICD coding (the K most frequent codes, binary cross-entropy per code, summed over the codes) with
the CAML backbone on public word vectors, every run a fit of the note-classifier recipe
(:mod:`dpcare.text.classify.recipe`) on the three views of the same notes
(:mod:`dpcare.text.classify.data`): SGD-ORG / SGD-Hybrid / SGD-Pub (non-private, on x / x_hyb / x_pub),
DP-SGD (every note of a patient protected), and Naive Fusion, Naive Fusion-Pub, Feature-DP, Calibrated
Fusion and FusionDP (feature-level DP: the masked spans of all of a patient's notes are protected). C,
alpha and beta are the paper's Table 3 values (tuned by its authors on MIMIC-III; nothing is tuned here).
The notes are split once (seed 0); the training seeds vary.

Selection: after every epoch the model is scored on the validation notes; the epoch with the best
micro-F1 (at its best threshold on a fixed grid) is kept, as in the paper. That choice reads the
validation notes (original text and codes) without noise: it is listed in each guarantee as NOT
counted in epsilon. The test notes are read once, by the chosen model.

The study writes one run folder (kind ``study:fusiondp-text``) with a ``run.json`` that ``dpcare report``
reads. The encoded views and the imputation journals wait in the staging folder's ``checkpoints/`` (they
hold the notes: deleted when the study finishes), the runs' journal in its ``runs.jsonl``: an interrupted
study resumes when the same command is rerun.
"""

from __future__ import annotations

import json
import math
import os
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from dpcare.exceptions import SpecError
from dpcare.io import epsilon_curves, new_figure, save_figure, write_json, write_text
from dpcare.privacy import legacy_delta
from dpcare.progress import progress as tqdm
from dpcare.runs import Manifest, RunFolder
from dpcare.runs.journal import append_run, check_settings, json_digest, read_journal, release_journal
from dpcare.settings import DPSettings
from dpcare.studies.grid import parallel_results
from dpcare.studies.paired import HIGHER, paired_differences, paired_markdown, seeds_label
from dpcare.text.classify.data import TextViews
from dpcare.text.classify.multilabel import multilabel_metrics
from dpcare.text.classify.recipe import (  # noqa: F401  (EpochSelection, make_ledger, make_objective: the study's face)
    LABEL_SET,
    LOSSES,
    METRICS,
    MISSED,
    SELECTION,
    EpochSelection,
    make_ledger,
    make_objective,
    prepare_views,
    train_views,
)
from dpcare.text.classify.recipe import predict_scores as predict
from dpcare.text.classify.settings import METHOD_NAMES, PAPER_SETTINGS, NoteClassifierSettings
from dpcare.text.classify.settings import NONPRIVATE_VIEWS as NONPRIVATE

KIND = "study:fusiondp-text"
COMMAND = "dpcare benchmark fusiondp-text"
METHODS = METHOD_NAMES
#: (better, worse) pairs behind the paper's claims, compared seed by seed
CLAIMS = (("fusiondp", "calibrated-fusion"), ("calibrated-fusion", "feature-dp"), ("fusiondp", "dp-sgd"),
          ("naive-fusion", "naive-fusion-pub"), ("sgd-hybrid", "sgd-pub"))
#: the test metrics the claims are checked on (all higher-is-better)
PAIRED_METRICS = {"f1_micro": HIGHER, "f1_macro": HIGHER, "auc_micro": HIGHER}


@dataclass
class TextFusionBenchmark:
    n_notes: int = 1000
    corpus_seed: int = 0
    top_k: int = 50
    max_tokens: int = 512
    emb_dim: int = 100
    n_filters: int = 50
    kernel_size: int = 10
    epsilons: tuple[float, ...] = (1.0, 5.0, 10.0)
    main_epsilon: float = 5.0  # the paper's setting; delta = N^-1.1 (N: training patients), pinned in settings_for
    seeds: int = 3
    epochs: int = 6
    batch_size: int = 64
    lr: float = 3e-3
    methods: tuple[str, ...] = METHODS
    settings: dict[str, tuple[float, float, float]] = field(default_factory=lambda: dict(PAPER_SETTINGS))
    workers: int = 2
    impute_context_chars: int = 64  # left context of each masked span in the imputer's prompt
    train_embeddings: bool = True  # False: keep the public word vectors fixed
    loss: str = "sum"  # BCE over the codes per note: "sum" or "mean" (see LOSSES)

    @classmethod
    def quick(cls) -> TextFusionBenchmark:
        """A smoke-size run for CI: 150 notes, 20 codes, 256 tokens, 2 epochs, one seed, epsilon 5."""
        return cls(n_notes=150, top_k=20, max_tokens=256, epsilons=(5.0,), seeds=1, epochs=2, batch_size=16)

    def validate(self) -> None:
        unknown = sorted(set(self.methods) - set(METHODS))
        if unknown:
            raise SpecError(f"unknown methods {unknown}; choose from {list(METHODS)}")
        if not self.methods:
            raise SpecError("no methods to run")
        if self.loss not in LOSSES:
            raise SpecError(f"loss must be one of {sorted(LOSSES)}, got {self.loss!r}")
        if not self.epsilons or any(not (e > 0 and math.isfinite(e)) for e in self.epsilons):
            raise SpecError(f"epsilons must be finite and > 0, got {self.epsilons}")
        self.epsilons = tuple(float(e) for e in self.epsilons)  # one spelling in keys and files
        self.main_epsilon = float(self.main_epsilon)
        if self.main_epsilon not in self.epsilons:
            raise SpecError(f"main_epsilon {self.main_epsilon} must be one of the epsilons {self.epsilons}")
        for name, value in (("seeds", self.seeds), ("epochs", self.epochs), ("batch_size", self.batch_size),
                            ("n_notes", self.n_notes)):
            if value < 1:
                raise SpecError(f"{name} must be >= 1, got {value}")
        for method in self.methods:  # every run's recipe settings, checked by their own rules
            for epsilon in [None] if method in NONPRIVATE else self.epsilons:
                self.settings_for(method, epsilon)

    def fingerprint(self) -> str:
        """The settings a finished run depends on (a resumed journal must match them)."""
        keep = {k: v for k, v in asdict(self).items() if k not in ("methods", "epsilons", "main_epsilon", "seeds",
                                                                  "workers")}
        return json.dumps(keep, sort_keys=True, default=str)

    def data_settings(self) -> dict[str, Any]:
        """The settings the prepared data depends on."""
        return {k: getattr(self, k) for k in ("n_notes", "corpus_seed", "top_k", "max_tokens", "emb_dim",
                                              "impute_context_chars")}

    def tasks(self) -> list[tuple[str, float | None, int]]:
        return [(m, e, s) for m in self.methods for e in ([None] if m in NONPRIVATE else self.epsilons)
                for s in range(self.seeds)]

    def run_settings(self, lm: str = "smollm2", notes: str = "generated") -> dict[str, Any]:
        """The settings of the study's run folder (its resume key): all but ``workers``, with the imputation LM
        and where the notes come from."""
        keep = {k: v for k, v in asdict(self).items() if k != "workers"}
        return {**json.loads(json.dumps(keep, default=str)), "lm": str(lm), "notes": notes}

    def settings_for(self, method: str, epsilon: float | None = None, seed: int = 0,
                     lm: str = "smollm2", patients: int | None = None) -> NoteClassifierSettings:
        """The recipe's settings of one run: the method's (C, alpha, beta), the study's model and training
        settings, the target epsilon (private methods) and the training seed; the notes split with seed 0.
        ``patients``: the training patients, which pin delta to the published 1/n^1.1 (None: the default)."""
        clip, alpha, beta = self.settings.get(method, (1.0, 1.0, 0.0))  # unused by the non-private references
        # delta pinned to 1/n^1.1, the default docs/results/fusiondp-text.md was measured with (now min(1e-5, 0.01/n)),
        # and noise_seed to the training seed (the default is secret OS entropy): the published numbers stay
        # reproducible; their noise is known to whoever knows the seed
        delta = None if patients is None else legacy_delta(patients)
        dp = DPSettings(epsilon=self.main_epsilon if epsilon is None else epsilon, delta=delta,
                        batch_size=self.batch_size, epochs=float(self.epochs), clip_norm=clip, seed=seed,
                        noise_seed=seed, unit="patient")
        return NoteClassifierSettings(method=method, top_k=self.top_k, max_tokens=self.max_tokens, emb_dim=self.emb_dim,
                                      n_filters=self.n_filters, kernel_size=self.kernel_size, lr=self.lr, alpha=alpha,
                                      beta=beta, loss=self.loss, train_embeddings=self.train_embeddings, lm=str(lm),
                                      impute_context_chars=self.impute_context_chars, split_seed=0, dp=dp)


# ---------------------------------------------------------------- one run
_VIEWS: dict[str, TextViews] = {}


def _views(path: str) -> TextViews:
    if path not in _VIEWS:  # one load per worker process
        _VIEWS[path] = TextViews.load(path)
    return _VIEWS[path]


def train_text_one(method: str, epsilon: float | None, seed: int, views_path: str,
                   bench: TextFusionBenchmark) -> dict[str, Any]:
    """Train one (method, epsilon, seed) with the recipe; metrics of the epoch chosen on validation, on the test
    notes."""
    start = time.perf_counter()
    views = _views(views_path)
    test = views.tensors["test"]
    patients = int(views.tensors["train"]["patient"].max()) + 1  # the ledger's n (train_views counts the same)
    trained = train_views(views, bench.settings_for(method, epsilon, seed, patients=patients))
    best, ledger = trained.best, trained.ledger
    scores = multilabel_metrics(predict(trained.model, test["x"]), test["y"], best["threshold"])
    return {"method": method, "target_epsilon": epsilon, "seed": seed,
            "epsilon": ledger.epsilon() if ledger else math.inf, "delta": ledger.delta if ledger else None,
            "best_epoch": best["epoch"], "threshold": best["threshold"], "val_f1_micro": best["f1_micro"],
            **{f"test_{k}": v for k, v in scores.items()}, "seconds": time.perf_counter() - start,
            "guarantee": ledger.guarantee().to_dict() if ledger else None}


# ---------------------------------------------------------------- the benchmark
def run_text_benchmark(views_path: str | os.PathLike, bench: TextFusionBenchmark, out_dir: str | os.PathLike,
                       progress: bool = True, data: str | None = None) -> pd.DataFrame:
    """Every (method, epsilon, seed), resumable through ``out_dir/runs.jsonl``; writes the tables,
    the paired differences and the plot. ``data``: the notes' :func:`notes_digest`, kept in every journal row;
    a journal of other notes is refused."""
    bench.validate()
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    journal = out / "runs.jsonl"
    done = read_journal(journal)
    check_settings(journal, done, bench.fingerprint(), data)
    key = lambda m, e, s: f"{m}|{e}|{s}"
    have = {key(r["method"], r["target_epsilon"], r["seed"]) for r in done}
    todo = [t for t in bench.tasks() if key(*t) not in have]
    bar = tqdm(total=len(bench.tasks()), initial=len(bench.tasks()) - len(todo), desc="fusiondp-text runs",
               disable=not progress)
    with open(journal, "a") as fh:
        for row in parallel_results(train_text_one, [(m, e, s, str(views_path), bench) for m, e, s in todo],
                                    bench.workers):
            row["settings"], row["data"] = bench.fingerprint(), data
            append_run(fh, row)
            done.append(row)
            bar.update()
    bar.close()
    wanted = {key(*t): i for i, t in enumerate(bench.tasks())}  # the task order, whatever finished first
    runs = pd.DataFrame(sorted((r for r in done if key(r["method"], r["target_epsilon"], r["seed"]) in wanted),
                               key=lambda r: wanted[key(r["method"], r["target_epsilon"], r["seed"])]))
    table = summarize(runs)
    kept = runs.drop(columns=["guarantee", "settings", "data"], errors="ignore")  # "data": absent in old journals
    write_text(out / "runs.csv", kept.to_csv(index=False))
    write_text(out / "table.csv", table.to_csv(index=False))
    diffs = claim_differences(runs, bench.main_epsilon)
    write_text(out / "paired.csv", diffs.to_csv(index=False))
    write_json(out / "settings.json", asdict(bench))
    write_json(out / "guarantees.json", {f"{r['method']}@{r['target_epsilon']}": r["guarantee"]
                                         for r in done if r["guarantee"] and r["seed"] == 0})
    write_text(out / "table.md", markdown(table, diffs, bench))
    plot(table, out / "f1_vs_epsilon.png")
    return table


def summarize(runs: pd.DataFrame) -> pd.DataFrame:
    runs = runs.assign(target_epsilon=runs["target_epsilon"].fillna(math.inf))
    agg = {f"{m}": (f"test_{m}", "mean") for m in METRICS}
    agg.update({f"{m}_sd": (f"test_{m}", "std") for m in METRICS})
    agg.update(epsilon=("epsilon", "max"), seeds=("seed", "count"), best_epoch=("best_epoch", "mean"))
    return runs.groupby(["method", "target_epsilon"], sort=False).agg(**agg).reset_index()


def claim_differences(runs: pd.DataFrame, epsilon: float) -> pd.DataFrame:
    """The paired differences over seeds (:func:`dpcare.studies.paired.paired_differences`) of :data:`CLAIMS` at
    ``epsilon`` (non-private methods at any epsilon) on the test metrics of :data:`PAIRED_METRICS`."""
    test = runs.rename(columns={f"test_{m}": m for m in PAIRED_METRICS})
    return paired_differences(test, CLAIMS, PAIRED_METRICS, epsilon)


def markdown(table: pd.DataFrame, diffs: pd.DataFrame, bench: TextFusionBenchmark) -> str:
    main = table[(table["target_epsilon"] == bench.main_epsilon) | ~np.isfinite(table["target_epsilon"])]
    lines = [f"# FusionDP on clinical notes: ICD top-{bench.top_k}, epsilon {bench.main_epsilon:g} "
             f"{seeds_label(bench.seeds)}", "",
             (f"Test metrics, mean ± sd over {bench.seeds} seed(s); "
              f"{bench.epochs} epochs, epoch and threshold chosen on validation."), "",
             "| method | " + " | ".join(METRICS) + " |", "|---" * (len(METRICS) + 1) + "|"]
    for _, r in main.iterrows():
        cells = [_mean_sd(r[m], r[f"{m}_sd"]) for m in METRICS]
        lines.append(f"| {r['method']} | " + " | ".join(cells) + " |")
    eps = sorted(e for e in table["target_epsilon"].unique() if math.isfinite(e))
    lines += ["", "Micro-F1 against epsilon:", "", "| method | " + " | ".join(f"eps={e:g}" for e in eps) + " |",
              "|---" * (len(eps) + 1) + "|"]
    for method in table["method"].unique():
        sub = table[table["method"] == method].set_index("target_epsilon")
        if all(math.isinf(e) for e in sub.index):
            continue
        lines.append(f"| {method} | " + " | ".join(_mean_sd(sub.loc[e, "f1_micro"], sub.loc[e, "f1_micro_sd"])
                                                 if e in sub.index else "" for e in eps) + " |")
    lines += paired_markdown(diffs, bench.seeds,
                             title=f"Paired differences over seeds at epsilon {bench.main_epsilon:g}")
    lines += ["", f"Not counted in epsilon: {SELECTION}; for DP-SGD also {LABEL_SET}.", ""]
    return "\n".join(lines)


def _mean_sd(mean: float, sd: float) -> str:
    return f"{mean:.3f}" if pd.isna(sd) else f"{mean:.3f} ± {sd:.3f}"


def plot(table: pd.DataFrame, path: Path) -> None:
    fig, axes = new_figure((10, 4), ncols=2)
    for ax, metric in zip(axes, ("f1_micro", "auc_macro")):
        epsilon_curves(ax, table, "method", metric)
        ax.set_xlabel("epsilon")
        ax.set_ylabel(f"test {metric.replace('_', ' ')}")
    axes[0].legend(fontsize=7, ncol=2)
    save_figure(fig, path)


def manifest(table: pd.DataFrame, guarantees: dict[str, Any], bench: TextFusionBenchmark, generated: bool = True
             ) -> Manifest:
    """run.json of the study: one model per method and epsilon (the guarantee of its seed-0 run; the study keeps
    no ledger states), the test metrics (mean over seeds), what no guarantee covers."""
    m = Manifest(headline=["test f1_micro", "test auc_macro"], figures=[
        ["test micro-F1 and macro-AUC against epsilon", "f1_vs_epsilon.png"]],
        files={"table": "table.md", "runs": "runs.csv", "paired": "paired.csv", "data": "data/data.json"})
    for r in table.to_dict("records"):
        finite = math.isfinite(r["target_epsilon"])
        model = f"{r['method']} eps={r['target_epsilon']:g}" if finite else r["method"]
        g = guarantees.get(f"{r['method']}@{r['target_epsilon']}") if finite else None
        m.add_model(model, g, None, note="" if g else "NO differential privacy guarantee (non-private reference).")
        m.metrics.append({"model": model, **{f"test {k}": r[k] for k in METRICS}, "seeds": r["seeds"]})
    m.not_protected = ["Sensitive spans the masker missed are part of the public view: no guarantee covers them "
                       "(see the masker's recall in data/data.json).",
                       "The imputation language model is public: its pre-training data are outside every guarantee."]
    m.notes = [f"Not counted in epsilon: {SELECTION}; for DP-SGD also {LABEL_SET}.",
               "Ledger lines come from each guarantee's release lines (the study keeps the guarantees of the seed-0 "
               "runs, not their ledger states)."]
    if generated:
        m.notes.append("The notes are GENERATED (grounded in real records); results say nothing of real notes.")
    return m


def notes_digest(notes: list) -> str:
    """sha256 over every note (ids, text, spans, codes): the views folder and each journal row carry it while the
    study runs, so it is resumed only on the notes it started on (generated notes must regenerate the same). Not
    released: a hash of the notes confirms a guessed corpus exactly (:func:`release_journal`)."""
    return json_digest([asdict(n) for n in notes])


def check_notes(views_dir: Path, digest: str) -> None:
    """The views folder's notes digest (``notes.sha256``, written before the views are prepared; the folder is a
    checkpoint, never released): refuse views, or imputation journals, of other notes."""
    kept = views_dir / "notes.sha256"
    if kept.exists() and kept.read_text() != digest:
        raise SpecError(f"{views_dir} holds views of other notes (data digest {kept.read_text()}, now {digest}): "
                        "use another output folder")
    if not kept.exists():
        if (views_dir / "views.pt").exists():
            raise SpecError(f"{views_dir} holds views without a notes digest: use another output folder")
        write_text(kept, digest)


def run_fusiondp_text(bench: TextFusionBenchmark, out_dir: str | os.PathLike, notes=None, lm: str = "smollm2",
                      progress: bool = True, force: bool = False) -> pd.DataFrame:
    """The whole study into the run folder ``out_dir``: notes (default: ``bench.n_notes`` generated ones), their
    three views (the recipe's, resumable in the staging folder's checkpoints), then every run (journalled in
    the staging folder's ``runs.jsonl``), the tables and run.json. Rerun the same call to resume."""
    from dpcare.text import generate_corpus

    bench.validate()
    if lm != "smollm2" and not (Path(lm) / "config.json").is_file():
        raise SpecError(f"unknown model path {lm!r}: not a local Hugging Face causal-LM folder (use 'smollm2')")
    source = "generated" if notes is None else "supplied"
    run = RunFolder(out_dir, KIND, bench.run_settings(lm, source), force=force, command=COMMAND)
    work = run.path("runs.jsonl").parent  # the staging folder (made on first use), where a rerun resumes
    data = Path(run.checkpoint_dir) / "views"  # the views hold the notes: never released
    if notes is None:
        notes = generate_corpus(bench.n_notes, seed=bench.corpus_seed)
    digest = notes_digest(notes)
    check_settings(work / "runs.jsonl", read_journal(work / "runs.jsonl"), bench.fingerprint(), digest)
    check_notes(data, digest)
    wanted = {**bench.data_settings(), "lm": str(lm), "notes": source}
    if (data / "views.pt").exists():
        have = TextViews.load(data / "views.pt").info.get("settings")
        if have != wanted:
            raise SpecError(f"{data} holds notes prepared with other settings ({have}, now {wanted}): "
                            "use another output folder")
    else:
        prepare_views(notes, bench.settings_for("fusiondp", lm=lm), work_dir=data, impute_workers=bench.workers,
                      progress=progress, tag=wanted, info_path=work / "data" / "data.json")
    table = run_text_benchmark(data / "views.pt", bench, work, progress, data=digest)
    release_journal(work / "runs.jsonl")
    guarantees = json.loads((work / "guarantees.json").read_text())
    run.finish(manifest(table, guarantees, bench, generated=source == "generated"))
    return table
