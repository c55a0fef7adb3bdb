"""Train one tabular model with a chosen method on a table with a privacy spec.

The data flow keeps the public branch honest: the public tensors are built by
``TableEncoder.transform_public`` from ``public_view(df)``, a frame that does not
contain the private columns at all.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch
from sklearn.metrics import average_precision_score, roc_auc_score

from dpcare.data import TableEncoder, TableSchema, load_table, public_view, split_table
from dpcare.engine import TrainConfig, Trainer
from dpcare.exceptions import (
    DataError,
    MissingFileError,
    PrivacyParameterError,
    SettingsError,
    UnknownNameError,
)
from dpcare.io import torch_save, write_json
from dpcare.methods import make_objective
from dpcare.models import TabularMLP
from dpcare.privacy import (
    NEIGHBOURING,
    Guarantee,
    PrivacyLedger,
    ProtectedUnit,
    check_epsilon,
    default_delta,
)

#: which feature columns each method protects (encoder statistics must be public or DP for these)
PROTECTS = {"non-private": "label", "dp-sgd": "all", "feature-dp": "private", "label-dp": "label"}
SPLITS = {"train": 0.8, "val": 0.1, "test": 0.1}


@dataclass
class TabularRun:
    """Settings of one run of ``train_tabular`` (the ``dpcare train`` options)."""

    method: str = "feature-dp"
    epsilon: float | None = 1.0  # ignored for non-private
    delta: float | None = None  # default 1/n^1.1
    clip_norm: float = 1.0
    alpha: float = 1.0
    epochs: float = 10.0
    batch_size: int = 256
    public_batch_size: int | None = None
    lr: float = 1e-3
    hidden: int = 256
    pad: str = "gaussian"  # gaussian | zeros: how pad(Psi(x)) fills private features
    public_pretrain_steps: int = 0
    stats_epsilon: float | None = None  # DP budget for undeclared bounds of protected columns
    accountant: str = "pld"
    seed: int = 0
    checkpoint_dir: str | None = None
    progress: bool = True
    audit: bool = False  # LOSS attack: training split (members) vs held-out test split (non-members)

    def validate(self) -> None:
        if self.method not in PROTECTS:
            raise UnknownNameError(f"unknown method {self.method!r}; choose one of {sorted(PROTECTS)}")
        if self.method != "non-private":
            if self.epsilon is None:
                raise PrivacyParameterError(f"method {self.method} needs an epsilon")
            check_epsilon(self.epsilon)
        if self.pad not in ("gaussian", "zeros"):
            raise SettingsError(f"pad must be 'gaussian' or 'zeros', got {self.pad!r}")


@dataclass
class TabularResult:
    method: str
    metrics: dict[str, float]
    guarantee: dict[str, Any] | None
    noise_multiplier: float | None
    steps: int
    settings: dict[str, Any] = field(default_factory=dict)
    model: torch.nn.Module | None = field(default=None, repr=False)
    encoder: TableEncoder | None = field(default=None, repr=False)
    audit: dict[str, Any] | None = None
    ledger: PrivacyLedger | None = field(default=None, repr=False)

    def row(self) -> dict[str, Any]:
        g = self.guarantee or {}
        return {
            "method": self.method,
            "AUPRC": self.metrics["test_auprc"],
            "AUROC": self.metrics["test_auroc"],
            "epsilon": g.get("epsilon", math.inf),
            "delta": g.get("delta", 0.0),
            "protected": protected_text(g),
        }


def protected_text(g: dict[str, Any]) -> str:
    if not g:
        return "nothing (non-private)"
    unit = g["unit"]
    if unit == ProtectedUnit.EXAMPLE.value:
        return "whole example"
    if unit == ProtectedUnit.LABEL.value:
        return f"label ({', '.join(g['protected_columns'])})"
    return "features: " + ", ".join(g["protected_columns"])


def split(df: pd.DataFrame, seed: int) -> dict[str, pd.DataFrame]:
    return split_table(df, SPLITS, seed=seed)


def prepare(encoder: TableEncoder, frame: pd.DataFrame, pad: str, seed: int) -> dict[str, torch.Tensor]:
    """Tensors of one split: x (all features), x_pub = pad(Psi(x)) from the public view only, y."""
    return {
        "x": torch.from_numpy(encoder.transform(frame)),
        "x_pub": torch.from_numpy(encoder.transform_public(public_view(frame, encoder.schema), pad=pad, seed=seed)),
        "y": torch.from_numpy(encoder.encode_target(frame)),
    }


def public_data_for(method: str, train: dict[str, torch.Tensor]) -> dict[str, torch.Tensor] | None:
    """What the public branch may read: pad(Psi(x)) and y for Feature-DP, x alone for Label-DP."""
    if method == "feature-dp":
        return {"x_pub": train["x_pub"], "y": train["y"]}
    if method == "label-dp":
        return {"x": train["x"]}
    return None


def evaluate(model: torch.nn.Module, data: dict[str, torch.Tensor]) -> dict[str, float]:
    model.eval()
    with torch.no_grad():
        logits = model(data["x"])
    y = data["y"].numpy()
    scores = logits[:, 0].numpy() if logits.shape[1] == 1 else torch.softmax(logits, 1)[:, 1].numpy()
    if len(np.unique(y)) < 2:
        raise DataError("the evaluation split has a single class; AUROC/AUPRC are undefined")
    return {"auprc": float(average_precision_score(y, scores)), "auroc": float(roc_auc_score(y, scores))}


def train_tabular(df: pd.DataFrame, schema: TableSchema, run: TabularRun,
                  out_dir: str | os.PathLike | None = None) -> TabularResult:
    """Split, encode, train with ``run.method`` and evaluate on the held-out test split."""
    run.validate()
    parts = split(load_table(df, schema), run.seed)
    model, encoder, result, train = train_on_split(parts["train"], schema, run)
    data = {"train": train, **{name: prepare(encoder, parts[name], run.pad, seed=run.seed + i)
                               for i, name in enumerate(("val", "test"), start=1)}}
    metrics = {f"{split_name}_{k}": v for split_name in ("val", "test") for k, v in evaluate(model, data[split_name]).items()}
    out = _result(run, model, encoder, result, metrics)
    if run.audit:
        out.audit = membership_audit(model, data["train"], data["test"], out_dir, title=run.method)
    if out_dir is not None:
        save_run(out_dir, model, encoder, out)
    return out


def train_all(df: pd.DataFrame, schema: TableSchema, run: TabularRun) -> TabularResult:
    """Train on every row of ``df`` (no held-out split, hence no metrics)."""
    model, encoder, result, _ = train_on_split(load_table(df, schema), schema, run)
    return _result(run, model, encoder, result, {})


def _result(run: TabularRun, model: TabularMLP, encoder: TableEncoder, result, metrics: dict[str, float]
            ) -> TabularResult:
    guarantee = result.guarantee.to_dict() if result.guarantee else None
    return TabularResult(run.method, metrics, guarantee, result.noise_multiplier, result.steps, asdict(run), model,
                         encoder, ledger=result.ledger)


def _ledger_terms(schema: TableSchema, unit: ProtectedUnit) -> dict[str, Any]:
    """The unit, protected and public columns a run's ledger names."""
    protected = {ProtectedUnit.FEATURES: schema.private_columns, ProtectedUnit.LABEL: [schema.target],
                 ProtectedUnit.EXAMPLE: []}[unit]
    public = {ProtectedUnit.FEATURES: [*schema.public_columns, schema.target],
              ProtectedUnit.LABEL: schema.feature_columns, ProtectedUnit.EXAMPLE: []}[unit]
    return {"unit": unit, "protected_columns": tuple(protected), "public_columns": tuple(public)}


def planned_guarantee(schema: TableSchema, run: TabularRun, rows: int, holdout: bool = True) -> Guarantee | None:
    """What :func:`train_tabular` (``holdout``) or :func:`train_all` will release on a table of ``rows`` rows,
    from the settings alone: a budget checks it before any row is read. None for a non-private run."""
    run.validate()
    objective = make_objective(run.method)
    if not objective.private:
        return None
    n = len(split(pd.DataFrame(index=range(rows)), run.seed)["train"]) if holdout else rows
    delta = run.delta if run.delta is not None else default_delta(n)
    return Guarantee(epsilon=run.epsilon, delta=delta, n=n, accountant=run.accountant,
                     neighbouring=NEIGHBOURING[objective.unit], **_ledger_terms(schema, objective.unit))


def train_on_split(train_df: pd.DataFrame, schema: TableSchema, run: TabularRun):
    """Fit the encoder and train on exactly ``train_df`` (validated rows).

    Returns (model, encoder, TrainResult, the training tensors)."""
    run.validate()
    torch.manual_seed(run.seed)
    objective = make_objective(run.method)
    ledger = None
    if objective.private:
        if objective.unit is ProtectedUnit.FEATURES:
            schema.require_public()
        ledger = PrivacyLedger(len(train_df), delta=run.delta, accountant=run.accountant,
                               **_ledger_terms(schema, objective.unit))
    encoder = TableEncoder(schema, protect=PROTECTS[run.method]).fit(
        train_df, ledger=ledger, stats_epsilon=run.stats_epsilon, seed=run.seed)
    train = prepare(encoder, train_df, run.pad, seed=run.seed)
    classes = len(schema.column(schema.target).categories)  # declared, never read from the private labels
    model = TabularMLP(train["x"].shape[1], hidden=run.hidden, out_features=1 if classes == 2 else classes)
    config = TrainConfig(
        batch_size=run.batch_size, epochs=run.epochs, public_batch_size=run.public_batch_size, lr=run.lr,
        clip_norm=run.clip_norm, target_epsilon=run.epsilon if objective.private else None, alpha=run.alpha,
        public_pretrain_steps=run.public_pretrain_steps, seed=run.seed, checkpoint_dir=run.checkpoint_dir,
        progress=run.progress,
    )
    trainer = Trainer(model, objective, config, ledger=ledger)
    result = trainer.fit(train, public_data_for(run.method, train))
    return model, encoder, result, train


def membership_audit(model, members: dict[str, torch.Tensor], nonmembers: dict[str, torch.Tensor],
                     out_dir: str | os.PathLike | None = None, title: str = "") -> dict[str, Any]:
    """LOSS attack with as many members as non-members (members subsampled, seeded); JSON + ROC plot."""
    from dpcare.audit import loss_attack, per_example_losses, plot_roc

    k = min(len(members["y"]), len(nonmembers["y"]))
    pick = torch.randperm(len(members["y"]), generator=torch.Generator().manual_seed(0))[:k]
    m = per_example_losses(model, members["x"][pick], members["y"][pick])
    n = per_example_losses(model, nonmembers["x"][:k], nonmembers["y"][:k])
    result = loss_attack(m, n).to_dict()
    result["roc"] = {"members": (-m).tolist(), "nonmembers": (-n).tolist()}  # attack scores, for ROC curves
    if out_dir is not None:
        write_json(Path(out_dir) / "audit.json", result)
        plot_roc({"LOSS": (-m, -n)}, Path(out_dir) / "audit_roc.png", title=f"LOSS attack: {title}")
    return result


def save_run(out_dir: str | os.PathLike, model: TabularMLP, encoder: TableEncoder, result: TabularResult) -> None:
    """model.pt (weights, model config, encoder), metrics.json and guarantee.json, each written atomically."""
    out = Path(out_dir)
    torch_save(out / "model.pt", {"model": model.state_dict(), "model_config": model.config,
                                  "encoder": encoder.state_dict()})
    write_json(out / "metrics.json", {"method": result.method, "metrics": result.metrics,
                                             "noise_multiplier": result.noise_multiplier, "steps": result.steps,
                                             "settings": result.settings})
    write_json(out / "guarantee.json", result.guarantee or {"epsilon": None, "note": "non-private run"})
    if result.ledger is not None:
        result.ledger.save_json(out / "ledger.json")


def load_run(folder: str | os.PathLike) -> TabularResult:
    """A run saved by :func:`save_run` (``dpcare train``): model (in eval mode), encoder, metrics, guarantee.

    Only model.pt is required; metrics.json and guarantee.json are read when present."""
    folder = Path(folder)
    path = folder / "model.pt"
    if not path.exists():
        raise MissingFileError(f"no model.pt in {folder}")
    saved = torch.load(path, map_location="cpu", weights_only=False)
    encoder = TableEncoder.from_state_dict(saved["encoder"])
    model = TabularMLP(**saved["model_config"])
    model.load_state_dict(saved["model"])
    model.eval()
    meta = _read_json(folder / "metrics.json")
    guarantee = _read_json(folder / "guarantee.json")
    return TabularResult(meta.get("method", ""), meta.get("metrics", {}),
                         guarantee if guarantee.get("epsilon") is not None else None, meta.get("noise_multiplier"),
                         meta.get("steps", 0), meta.get("settings", {}), model, encoder)


def _read_json(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text()) if path.exists() else {}
