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
    Writer("dpcare benchmark fusiondp-text", "settings.json + guarantees.json + paired.csv",
           lambda f: _has(f, "settings.json", "guarantees.json", "paired.csv"), read_fusiondp_text),
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
