"""`dpcare benchmark fusiondp-text`: the nine methods of fusiondp.txt (Table 1) on clinical notes.

ICD coding (the K most frequent codes, binary cross-entropy per code, summed over the codes) with
the CAML backbone on public word vectors (``dpcare.text.classify.caml``), on the three views of
``fusion_text_data``. The methods are the tabular family's objectives with a multi-label loss:
SGD-ORG / SGD-Hybrid / SGD-Pub (non-private, on x / x_hyb / x_pub), DP-SGD (every note of a patient
protected), and Naive Fusion, Naive Fusion-Pub, Feature-DP, Calibrated Fusion and FusionDP
(feature-level DP: the masked spans of all of a patient's notes are protected). C, alpha and beta
are the paper's Table 3 values (tuned by its authors on MIMIC-III; nothing is tuned here).

Selection: after every epoch the model is scored on the validation notes; the epoch with the best
micro-F1 (at its best threshold on a fixed grid) is kept, as in the paper. That choice reads the
validation notes (original text and codes) without noise: it is listed in each guarantee as NOT
counted in epsilon. The test notes are read once, by the chosen model.
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
import torch

from dpcare.engine import TrainConfig, Trainer
from dpcare.exceptions import SpecError
from dpcare.io import epsilon_curves, new_figure, save_figure, write_json, write_text
from dpcare.methods import DPSGD, NonPrivate
from dpcare.methods.fusion import HYBRID_METHODS
from dpcare.privacy import PrivacyLedger, ProtectedUnit
from dpcare.progress import progress as tqdm
from dpcare.text.classify.caml import CAML
from dpcare.text.classify.multilabel import choose_threshold, multilabel_metrics, per_example_bce
from dpcare.text.classify.data import TextViews
from dpcare.studies.grid import append_run, check_settings, parallel_results, read_journal

NONPRIVATE = {"sgd-org": "x", "sgd-hybrid": "x_hyb", "sgd-pub": "x_pub"}
METHODS = (*NONPRIVATE, "dp-sgd", *HYBRID_METHODS.names())
#: (C, alpha, beta) of fusiondp.txt Table 3 (MIMIC-III notes, epsilon 5); DP-SGD has no alpha
PAPER_SETTINGS: dict[str, tuple[float, float, float]] = {
    "fusiondp": (1.0, 0.5, 0.5), "dp-sgd": (1.5, 1.0, 0.0), "feature-dp": (1.0, 0.2, 0.0),
    "calibrated-fusion": (0.05, 8.0, 0.0), "naive-fusion": (1.5, 0.5, 0.0), "naive-fusion-pub": (1.5, 0.5, 0.0)}
METRICS = ("f1_micro", "f1_macro", "precision_micro", "precision_macro", "recall_micro", "recall_macro",
           "auc_micro", "auc_macro")
#: (better, worse) pairs behind the paper's claims, compared seed by seed
CLAIMS = (("fusiondp", "calibrated-fusion"), ("calibrated-fusion", "feature-dp"), ("fusiondp", "dp-sgd"),
          ("naive-fusion", "naive-fusion-pub"), ("sgd-hybrid", "sgd-pub"))
SELECTION = ("the best epoch and the decision threshold, chosen by micro-F1 on the validation notes (their original "
             "text and codes): a release about the validation patients")
MISSED = "the note text outside those spans, including any sensitive span the masker missed"
LABEL_SET = "the label set (the K most frequent ICD codes of the training notes)"


def mean_bce(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Per-note binary cross-entropy averaged over the codes."""
    return per_example_bce(logits, targets) / logits.shape[1]


#: the per-note loss: BCE summed over the codes (the note's negative log-likelihood) or averaged.
#: The scale sets how the exact public gradient weighs against the clipped, noised private one.
LOSSES = {"sum": per_example_bce, "mean": mean_bce}


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
    main_epsilon: float = 5.0  # the paper's setting; delta = N^-1.1 (N: training patients)
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


# ---------------------------------------------------------------- one run
class EpochSelection:
    """``on_step`` callback: at each epoch's end (step round(k T / E), the last at T), score the
    validation notes and keep the best state."""

    def __init__(self, model: torch.nn.Module, val: dict[str, torch.Tensor], total_steps: int, epochs: int):
        self.model, self.val = model, val
        self.ends = {max(1, round(k * total_steps / epochs)): k for k in range(1, epochs + 1)}
        self.best: dict[str, Any] = {"f1_micro": -1.0}

    def __call__(self, step: int) -> None:
        if step not in self.ends:
            return
        scores = predict(self.model, self.val["x"])
        threshold = choose_threshold(scores, self.val["y"])
        f1 = multilabel_metrics(scores, self.val["y"], threshold)["f1_micro"]
        if f1 > self.best["f1_micro"]:
            state = {k: v.detach().clone() for k, v in self.model.state_dict().items()}
            self.best = {"f1_micro": f1, "epoch": self.ends[step], "threshold": threshold, "state": state}


@torch.no_grad()
def predict(model: torch.nn.Module, ids: torch.Tensor, batch: int = 256) -> torch.Tensor:
    model.eval()
    return torch.cat([torch.sigmoid(model(ids[i:i + batch])) for i in range(0, len(ids), batch)])


_VIEWS: dict[str, TextViews] = {}


def _views(path: str) -> TextViews:
    if path not in _VIEWS:  # one load per worker process
        _VIEWS[path] = TextViews.load(path)
    return _VIEWS[path]


def make_objective(method: str, beta: float = 0.0, loss: str = "sum"):
    """The method's objective with the multi-label loss (``beta``: FusionDP's consistency weight)."""
    fn = LOSSES[loss]
    if method in NONPRIVATE:
        return NonPrivate(fn)
    if method == "dp-sgd":
        return DPSGD(fn)
    factory = HYBRID_METHODS.get(method)
    return factory(beta, loss=fn) if method == "fusiondp" else factory(loss=fn)


def make_ledger(method: str, n_patients: int) -> PrivacyLedger:
    if method == "dp-sgd":
        ledger = PrivacyLedger(n_patients, unit=ProtectedUnit.PATIENT)
        ledger.note_uncounted(LABEL_SET)
    else:
        ledger = PrivacyLedger(n_patients, unit=ProtectedUnit.FEATURES,
                               protected_columns=("the sensitive spans the masker found, in all of a patient's notes",),
                               public_columns=(MISSED, "the ICD codes"))
    ledger.note_uncounted(SELECTION)
    return ledger


def train_text_one(method: str, epsilon: float | None, seed: int, views_path: str,
                   bench: TextFusionBenchmark) -> dict[str, Any]:
    """Train one (method, epsilon, seed); metrics of the epoch chosen on validation, on the test notes."""
    start = time.perf_counter()
    views = _views(views_path)
    train, val, test = (views.tensors[s] for s in ("train", "val", "test"))
    torch.manual_seed(seed)
    model = CAML(views.embedding.shape[0], len(views.codes), bench.emb_dim, bench.n_filters, bench.kernel_size,
                 embeddings=views.embedding, activation="relu")
    model.embed.weight.requires_grad_(bench.train_embeddings)
    objective = make_objective(method, bench.settings.get(method, (0, 0, 0.0))[2], bench.loss)
    cfg = {"batch_size": bench.batch_size, "epochs": bench.epochs, "lr": bench.lr, "seed": seed, "progress": False}
    n_units = int(train["patient"].max()) + 1
    units = len(train["y"]) if method in NONPRIVATE else n_units
    selection = EpochSelection(model, val, math.ceil(bench.epochs * units / bench.batch_size), bench.epochs)
    ledger = None
    if method in NONPRIVATE:
        trainer = Trainer(model, objective, TrainConfig(**cfg))
        trainer.fit({"x": train[NONPRIVATE[method]], "y": train["y"]}, on_step=selection)
    else:
        clip, alpha, _ = bench.settings[method]
        ledger = make_ledger(method, n_units)
        trainer = Trainer(model, objective, TrainConfig(**cfg, clip_norm=clip, alpha=alpha, target_epsilon=epsilon),
                          ledger=ledger)
        public = {k: train[k] for k in objective.public_keys} if objective.has_public_branch else None
        trainer.fit({k: train[k] for k in objective.private_keys}, public, groups=train["patient"],
                    on_step=selection)
    best = selection.best
    model.load_state_dict(best["state"])
    scores = multilabel_metrics(predict(model, test["x"]), test["y"], best["threshold"])
    return {"method": method, "target_epsilon": epsilon, "seed": seed,
            "epsilon": ledger.epsilon() if ledger else math.inf, "delta": ledger.delta if ledger else None,
            "best_epoch": best["epoch"], "threshold": best["threshold"], "val_f1_micro": best["f1_micro"],
            **{f"test_{k}": v for k, v in scores.items()}, "seconds": time.perf_counter() - start,
            "guarantee": ledger.guarantee().to_dict() if ledger else None}


# ---------------------------------------------------------------- the benchmark
def run_text_benchmark(views_path: str | os.PathLike, bench: TextFusionBenchmark, out_dir: str | os.PathLike,
                       progress: bool = True) -> pd.DataFrame:
    """Every (method, epsilon, seed), resumable through ``out_dir/runs.jsonl``; writes the tables,
    the paired differences and the plot."""
    bench.validate()
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    journal = out / "runs.jsonl"
    done = read_journal(journal)
    check_settings(journal, done, bench.fingerprint())
    key = lambda m, e, s: f"{m}|{e}|{s}"
    have = {key(r["method"], r["target_epsilon"], r["seed"]) for r in done}
    todo = [t for t in bench.tasks() if key(*t) not in have]
    bar = tqdm(total=len(bench.tasks()), initial=len(bench.tasks()) - len(todo), desc="fusiondp-text runs",
               disable=not progress)
    with open(journal, "a") as fh:
        for row in parallel_results(train_text_one, [(m, e, s, str(views_path), bench) for m, e, s in todo],
                                    bench.workers):
            row["settings"] = bench.fingerprint()
            append_run(fh, row)
            done.append(row)
            bar.update()
    bar.close()
    wanted = {key(*t): i for i, t in enumerate(bench.tasks())}  # the task order, whatever finished first
    runs = pd.DataFrame(sorted((r for r in done if key(r["method"], r["target_epsilon"], r["seed"]) in wanted),
                               key=lambda r: wanted[key(r["method"], r["target_epsilon"], r["seed"])]))
    table = summarize(runs)
    write_text(out / "runs.csv", runs.drop(columns=["guarantee", "settings"]).to_csv(index=False))
    write_text(out / "table.csv", table.to_csv(index=False))
    diffs = paired_differences(runs, bench.main_epsilon)
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


def paired_differences(runs: pd.DataFrame, epsilon: float) -> pd.DataFrame:
    """Seed-by-seed differences (better - worse) of the claimed orderings at ``epsilon`` (non-private
    methods at any epsilon), with the number of seeds won and a one-sided Wilcoxon p-value."""
    from scipy.stats import wilcoxon

    rows = []
    at = runs[(runs["target_epsilon"].isna()) | (runs["target_epsilon"] == epsilon)]
    for better, worse in CLAIMS:
        a = at[at["method"] == better].set_index("seed")
        b = at[at["method"] == worse].set_index("seed")
        seeds = sorted(set(a.index) & set(b.index))
        if not seeds:
            continue
        for m in ("f1_micro", "f1_macro", "auc_micro"):
            d = a.loc[seeds, f"test_{m}"].to_numpy() - b.loc[seeds, f"test_{m}"].to_numpy()
            p = float(wilcoxon(d, alternative="greater").pvalue) if len(d) > 1 and np.any(d != 0) else float("nan")
            rows.append({"claim": f"{better} > {worse}", "metric": m, "mean_diff": float(d.mean()),
                         "sd": float(d.std(ddof=1)) if len(d) > 1 else float("nan"),
                         "wins": int((d > 0).sum()), "seeds": len(d), "wilcoxon_p": p})
    return pd.DataFrame(rows)


def markdown(table: pd.DataFrame, diffs: pd.DataFrame, bench: TextFusionBenchmark) -> str:
    main = table[(table["target_epsilon"] == bench.main_epsilon) | ~np.isfinite(table["target_epsilon"])]
    lines = [f"# FusionDP on clinical notes: ICD top-{bench.top_k}, epsilon {bench.main_epsilon:g}", "",
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
    if len(diffs):
        lines += ["", (f"Paired differences at epsilon {bench.main_epsilon:g} (better - worse, per seed; with "
                       f"{bench.seeds} seeds the smallest one-sided Wilcoxon p is {0.5 ** bench.seeds:.3g}):"), "",
                  "| claim | metric | mean diff | sd | seeds won | Wilcoxon p (one-sided) |", "|---|---|---|---|---|---|"]
        for _, d in diffs.iterrows():
            lines.append(f"| {d['claim']} | {d['metric']} | {d['mean_diff']:+.4f} | {_num(d['sd'])} | "
                         f"{d['wins']}/{d['seeds']} | {_num(d['wilcoxon_p'])} |")
    lines += ["", f"Not counted in epsilon: {SELECTION}; for DP-SGD also {LABEL_SET}.", ""]
    return "\n".join(lines)


def _mean_sd(mean: float, sd: float) -> str:
    return f"{mean:.3f}" if pd.isna(sd) else f"{mean:.3f} ± {sd:.3f}"


def _num(v: float) -> str:
    return "" if pd.isna(v) else f"{v:.3f}"


def plot(table: pd.DataFrame, path: Path) -> None:
    fig, axes = new_figure((10, 4), ncols=2)
    for ax, metric in zip(axes, ("f1_micro", "auc_macro")):
        epsilon_curves(ax, table, "method", metric)
        ax.set_xlabel("epsilon")
        ax.set_ylabel(f"test {metric.replace('_', ' ')}")
    axes[0].legend(fontsize=7, ncol=2)
    save_figure(fig, path)


def run_fusiondp_text(bench: TextFusionBenchmark, out_dir: str | os.PathLike, notes=None, lm: str = "smollm2",
                      progress: bool = True) -> pd.DataFrame:
    """The whole benchmark: notes (default: ``bench.n_notes`` generated ones), their three views
    (``out_dir/data``, resumable), then every run (``out_dir/runs.jsonl``, resumable)."""
    from dpcare.text import generate_corpus
    from dpcare.text.views.imputation import SpanImputer
    from dpcare.text.classify.data import prepare_text_views

    bench.validate()
    if lm != "smollm2" and not (Path(lm) / "config.json").is_file():
        raise SpecError(f"unknown model path {lm!r}: not a local Hugging Face causal-LM folder (use 'smollm2')")
    out = Path(out_dir)
    wanted = {**bench.data_settings(), "lm": str(lm), "notes": "generated" if notes is None else "supplied"}
    if (out / "data" / "views.pt").exists():
        have = TextViews.load(out / "data" / "views.pt").info.get("settings")
        if have != wanted:
            raise SpecError(f"{out / 'data'} holds notes prepared with other settings ({have}, now {wanted}): "
                            "use another output folder")
    else:
        if notes is None:
            notes = generate_corpus(bench.n_notes, seed=bench.corpus_seed)
        imputer = SpanImputer(lm, context_chars=bench.impute_context_chars, batch_size=32,
                              progress=progress and bench.workers <= 1)
        prepare_text_views(notes, out / "data", top_k=bench.top_k, max_tokens=bench.max_tokens,
                           emb_dim=bench.emb_dim, imputer=imputer, impute_workers=bench.workers,
                           progress=progress, settings=wanted)
    return run_text_benchmark(out / "data" / "views.pt", bench, out, progress)
