"""A one-run audit of a tabular DP-SGD or Feature-DP training run with planted canaries.

Canaries are training rows with a flipped label and fresh random private values
(within the declared bounds / categories), so that only memorising them - and,
for Feature-DP, only their private features - reveals them. Each is included
with probability 1/2:

- DP-SGD: an included canary is a training example; an excluded one is absent.
- Feature-DP: an included canary is a private training example; an excluded one
  exists only through its public view (pad(Psi(x)) in the public data), exactly
  the simulator of Definition 6 of feature-dp.txt.

Score (higher = "included"): -loss for DP-SGD; l(pad(Psi(x))) - l(x) for
Feature-DP, i.e. how much the canary's private features help the model.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
import torch

from dpcare.audit.loss_attack import per_example_losses
from dpcare.audit.one_run import one_run_audit
from dpcare.data import TableEncoder, TableSchema, load_table, public_view
from dpcare.engine import TrainConfig, Trainer
from dpcare.methods import DPSGD, FeatureDP
from dpcare.models import TabularMLP
from dpcare.privacy import PrivacyLedger, ProtectedUnit


@dataclass
class CanaryAuditSettings:
    method: str = "dp-sgd"  # dp-sgd | feature-dp
    epsilon: float = 1.0
    canaries: int = 500
    epochs: float = 20.0
    batch_size: int = 128
    clip_norm: float = 1.0
    lr: float = 3e-3
    hidden: int = 256
    seed: int = 0
    confidence: float = 0.95


def make_canaries(rows: pd.DataFrame, schema: TableSchema, rng: np.random.Generator) -> pd.DataFrame:
    """Flipped labels and fresh random private values (declared bounds/categories)."""
    can = rows.copy().reset_index(drop=True)
    target = schema.column(schema.target)
    cats = list(target.categories)
    can[schema.target] = can[schema.target].map(lambda v: cats[(cats.index(v) + 1) % len(cats)])
    for col in schema.private_columns:
        spec = schema.column(col)
        if spec.kind == "categorical":
            can[col] = rng.choice(list(spec.categories), len(can))
        else:
            if spec.bounds is None:
                raise ValueError(f"canaries need declared bounds for private column '{col}'")
            can[col] = rng.uniform(*spec.bounds, len(can))
    return can


def audit_tabular(df: pd.DataFrame, schema: TableSchema, settings: CanaryAuditSettings,
                  trainer_cls: type[Trainer] = Trainer) -> dict:
    """Train once with canaries and return the claimed epsilon and the audited lower bound.

    ``trainer_cls`` lets tests plant bugs (noise off, clipping skipped) to check the audit catches them."""
    s = settings
    if s.method not in ("dp-sgd", "feature-dp"):
        raise ValueError(f"the canary audit supports dp-sgd and feature-dp, not {s.method!r}")
    rng = np.random.default_rng(s.seed)
    df = load_table(df, schema)
    if len(df) <= 2 * s.canaries:
        raise ValueError(f"the table has {len(df)} rows; the audit needs more than 2 x {s.canaries} canaries")
    order = rng.permutation(len(df))
    canaries = make_canaries(df.iloc[order[: s.canaries]], schema, rng)
    regular = df.iloc[order[s.canaries:]].reset_index(drop=True)
    included = rng.random(s.canaries) < 0.5
    encoder = TableEncoder(schema, protect="all" if s.method == "dp-sgd" else "private").fit(regular)

    def tensors(frame: pd.DataFrame, seed: int) -> dict[str, torch.Tensor]:
        return {"x": torch.from_numpy(encoder.transform(frame)),
                "x_pub": torch.from_numpy(encoder.transform_public(public_view(frame, schema), seed=seed)),
                "y": torch.from_numpy(encoder.encode_target(frame))}

    reg, can = tensors(regular, s.seed), tensors(canaries, s.seed + 1)
    private = {k: torch.cat([reg[k], can[k][torch.from_numpy(included)]]) for k in reg}
    public = None
    if s.method == "feature-dp":  # the simulator knows every canary's public columns
        public = {k: torch.cat([reg[k], can[k]]) for k in ("x_pub", "y")}
    torch.manual_seed(s.seed)
    model = TabularMLP(reg["x"].shape[1], hidden=s.hidden, dropout=0.0)
    objective = DPSGD() if s.method == "dp-sgd" else FeatureDP()
    ledger = PrivacyLedger(len(private["y"]), unit=objective.unit,
                           protected_columns=tuple(schema.private_columns) if objective.unit is ProtectedUnit.FEATURES else ())
    trainer = trainer_cls(model, objective, TrainConfig(batch_size=s.batch_size, epochs=s.epochs, lr=s.lr,
                                                        clip_norm=s.clip_norm, target_epsilon=s.epsilon,
                                                        seed=s.seed, progress=False), ledger=ledger)
    trainer.fit(private, public)
    loss = per_example_losses(model, can["x"], can["y"])
    scores = -loss if s.method == "dp-sgd" else per_example_losses(model, can["x_pub"], can["y"]) - loss
    audit = one_run_audit(scores, included, delta=ledger.delta, confidence=s.confidence)
    return {"method": s.method, "claimed_epsilon": ledger.epsilon(), "delta": ledger.delta, **audit.to_dict()}
