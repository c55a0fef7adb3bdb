"""Read the folders dpcare writes into :class:`~dpcare.report.model.Run` (one reader per writer).

Each reader takes only what the folder holds: where a writer saves no guarantee, ledger lines, ROC scores
or timing, the run says so instead of filling in a value.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from dpcare.exceptions import DataError, DPCareError, MissingFileError
from dpcare.report.model import Attack, Privacy, Run, finite, privacy_from_guarantee

ATTACK_METRICS = {"auc": "AUC", "tpr_at_1pct_fpr": "TPR @ 1% FPR", "tpr_at_0.1pct_fpr": "TPR @ 0.1% FPR",
                  "balanced_accuracy": "balanced accuracy"}


class UnknownRunFolder(DPCareError):
    """A folder that no dpcare writer produced (or that is missing the files one writes)."""


def read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError as err:
        raise DataError(f"{path} is not valid JSON ({err})") from None


def _interval(m: dict[str, Any], key: str) -> Any:
    """``attack_metrics`` form ({value, low, high}) or the flat form (key, key_ci) as (value, low, high)."""
    v = m.get(key)
    if isinstance(v, dict):
        return v["value"], v["low"], v["high"]
    ci = m.get(f"{key}_ci")
    return (v, *ci) if v is not None and ci else v


def _attack_row(model: str, metrics: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"model": model, **{label: _interval(metrics, k) for k, label in ATTACK_METRICS.items()
                               if k in metrics}, **extra}


# --------------------------------------------------------------------------- the run-folder contract
def read_run(folder: Path) -> Run:
    """A folder with a ``run.json`` manifest (:mod:`dpcare.runs`): everything the report shows comes from the
    manifest and the attack files it lists (each checked to belong to this run)."""
    from dpcare.runs import read_attacks, read_manifest

    m = read_manifest(folder)
    privacy = [privacy_from_guarantee(e["name"], e.get("guarantee"), e.get("ledger"),
                                      none_note=e.get("note") or "NO differential privacy guarantee.")
               if e.get("guarantee") or e.get("epsilon") is None else
               Privacy(e["name"], finite(e["epsilon"]), e.get("delta"), note=e.get("note", ""),
                       ledger_note="not saved: the run keeps this model's epsilon, not its ledger lines")
               for e in m.models]
    attacks = []
    for a in read_attacks(folder, m):
        curves = {model: (c["members"], c["nonmembers"]) for model, c in (a.get("curves") or {}).items()}
        attacks.append(Attack(a.get("title", "attack"), list(a.get("rows", [])), curves,
                              _existing(*(folder / p for p in a.get("plots", [])))))
    figures = [(caption, folder / file) for caption, file in m.figures if (folder / file).exists()]
    config = {**m.settings, **({"data": m.data} if m.data else {}), "run id": m.run_id}
    return Run(folder, m.command or m.kind, privacy, list(m.metrics), list(m.headline), attacks, config,
               list(m.timing), list(m.not_protected), figures, list(m.notes))


def _existing(*paths: Path) -> list[Path]:
    return [p for p in paths if p.exists()]


# --------------------------------------------------------------------------- benchmarks
def read_fusiondp_text(folder: Path) -> Run:
    METRICS = ("f1_micro", "f1_macro", "precision_micro", "precision_macro", "recall_micro", "recall_macro",
               "auc_micro", "auc_macro")  # those of the text FusionDP study
    settings = read_json(folder / "settings.json")
    table = pd.read_csv(folder / "table.csv")
    guarantees = read_json(folder / "guarantees.json")
    run = Run(folder, "dpcare benchmark fusiondp-text", headline=["test f1_micro", "test auc_macro"], config=settings,
              figures=[("test micro-F1 and macro-AUC against epsilon", p)
                       for p in _existing(folder / "f1_vs_epsilon.png")])
    for r in table.to_dict("records"):
        finite_eps = math.isfinite(r["target_epsilon"])
        model = f"{r['method']} eps={r['target_epsilon']:g}" if finite_eps else r["method"]
        g = guarantees.get(f"{r['method']}@{r['target_epsilon']}") if finite_eps else None
        if g:
            run.privacy.append(privacy_from_guarantee(model, g))
        else:
            run.privacy.append(Privacy(model, note="NO differential privacy guarantee (non-private reference)."))
        run.utility.append({"model": model, **{f"test {k}": r[k] for k in METRICS}, "seeds": r["seeds"]})
    run.not_protected = [("Sensitive spans the masker missed are part of the public view: no guarantee covers them "
                          "(see the masker's recall in data/data.json).")]
    return run


def _quality(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The synthetic-data metrics of dp2stage-style records, as ``summary_table`` picks them."""
    from dpcare.workflows.dp2stage_benchmark import summary_table

    return [{k: v for k, v in row.items() if k not in ("dataset", "epsilon", "method", "fit s")
             and not (k == "error" and not v)} for row in summary_table(records).to_dict("records")]


def read_dp2stage(folder: Path) -> Run:
    from dpcare.workflows.dp2stage_benchmark import LM_METHODS

    records = [read_json(p) for p in sorted((folder / "runs").glob("*.json"))]
    table = _quality(records)
    run = Run(folder, "dpcare benchmark dp2stage", headline=["F1 XGB", "HIST20", "Pair", "CorAcc"],
              config=read_json(folder / "config.json"),
              figures=[("synthetic data quality", p) for p in _existing(folder / "dp2stage.png")])
    for rec, row in zip(records, table):
        model = f"{rec['dataset']} {rec['method']} eps={rec['epsilon']:g}"
        if rec.get("error"):
            run.notes.append(f"{model} failed: {rec['error']}")
        elif rec.get("guarantee"):  # the synthesizer's guarantee (and ledger state), where the record keeps it
            run.privacy.append(privacy_from_guarantee(model, rec["guarantee"], rec.get("ledger")))
        elif rec["method"] in LM_METHODS:
            run.privacy.append(Privacy(model, finite(rec.get("epsilon_spent")), rec.get("delta"),
                                       ledger_note="not saved: the benchmark writes the spent epsilon and delta of "
                                                   "the synthesizer's ledger, not its lines",
                                       note="whole rows of the private training table"))
        elif rec["method"] == "non-private":
            run.privacy.append(Privacy(model, note="NO differential privacy guarantee (non-private fine-tuning)."))
        else:
            run.privacy.append(Privacy(model, finite(rec.get("epsilon_spent")), rec.get("delta"),
                                       ledger_note="no dpcare ledger: the SmartNoise synthesizer accounts itself",
                                       note="whole rows (SmartNoise's own accounting, not dpcare's ledger)"))
        run.utility.append({"model": model, **row})
        run.timing.append({"model": model, "fit seconds": rec.get("fit_seconds"), "seconds": rec.get("seconds")})
    run.not_protected = [("DP-2Stage-O's stage-1 table and the pseudo data of DP-2Stage-U (drawn from the spec's "
                          "declared ranges) are public, outside every guarantee.")]
    if (folder / "sampling.json").exists():
        s = read_json(folder / "sampling.json")
        run.timing += [{"model": f"{mode} sampling: {m}", "rows per second": r.get("rows_per_second"),
                        "valid rate": r.get("valid_rate")} for mode, rs in s["models"].items() for m, r in rs.items()]
    return run


def read_synth(folder: Path) -> Run:
    """``dpcare synth fit`` (synthesizer.json), with ``synth sample`` / ``synth evaluate`` outputs beside it."""
    state = _maybe(folder / "synthesizer.json")
    run = Run(folder, "dpcare synth", headline=["F1 XGB", "HIST20", "Pair", "CorAcc"])
    model = "synthesizer"
    if state is not None:
        settings = state.get("settings", {})
        model = settings.get("mode", model)
        run.config = settings
        run.privacy.append(privacy_from_guarantee(model, state.get("guarantee"), state.get("ledger"),
                                                  none_note="NO differential privacy guarantee (non-private fit)."))
        run.not_protected.append("Stage 1 reads only public data (pseudo rows from the spec's declared ranges, or a "
                                 "public table): outside every guarantee.")
    else:
        run.notes.append("No synthesizer.json here: the guarantee lives in the fitted synthesizer's folder.")
    for p in sorted(folder.glob("*.report.json")):
        rep = read_json(p)
        table = p.name.removesuffix(".report.json")
        rows = _quality([{"dataset": "", "epsilon": None, "method": model, "metrics": rep,
                          "perplexity": rep.get("perplexity")}])
        run.utility.append({"model": model, "table": table, **rows[0]})
        if "real_baseline" in rep:
            base = _quality([{"dataset": "", "epsilon": None, "method": "", "metrics": rep["real_baseline"]}])
            run.utility.append({"model": "real training table (reference)", "table": table, **base[0]})
    for p in sorted(folder.glob("*.sampling.json")):
        s = read_json(p)
        run.timing.append({"model": f"{model} sampling ({p.name})", "rows per second": s.get("rows_per_second"),
                           "valid rate": s.get("valid_rate")})
    return run


def _maybe(path: Path) -> Any:
    return read_json(path) if path.exists() else None


# --------------------------------------------------------------------------- dispatch
@dataclass(frozen=True)
class Writer:
    command: str
    expected: str  # the files that identify its folders, for error messages
    matches: Callable[[Path], bool]
    read: Callable[[Path], Run]


def _has(folder: Path, *names: str) -> bool:
    return all(any(folder.glob(n)) for n in names)


WRITERS = (
    Writer("dpcare benchmark dp2stage", "config.json + runs/*.json",
           lambda f: _has(f, "config.json", "runs/*.json"), read_dp2stage),
    Writer("dpcare benchmark fusiondp-text", "settings.json + guarantees.json + paired.csv",
           lambda f: _has(f, "settings.json", "guarantees.json", "paired.csv"), read_fusiondp_text),
    Writer("dpcare synth fit / evaluate", "synthesizer.json or *.report.json",
           lambda f: _has(f, "synthesizer.json") or _has(f, "*.report.json"), read_synth),
)


def collect(folder: str | Path) -> Run:
    """The :class:`Run` of one folder written by a dpcare command; a clear error for anything else."""
    from dpcare.runs import is_run_folder

    folder = Path(folder)
    if is_run_folder(folder):
        return read_run(folder)
    if not folder.is_dir():
        raise MissingFileError(f"run folder {folder} does not exist or is not a folder")
    for w in WRITERS:
        if w.matches(folder):
            try:
                return w.read(folder)
            except (KeyError, TypeError, IndexError) as err:
                raise UnknownRunFolder(f"{folder} looks like a '{w.command}' folder ({w.expected}) but its files "
                                       f"do not have that writer's content ({type(err).__name__}: {err})") from err
    expected = "; ".join(f"{w.expected} ({w.command})" for w in WRITERS)
    raise UnknownRunFolder(f"{folder} is not a dpcare run folder: expected one of {expected}")
