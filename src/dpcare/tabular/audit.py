"""Membership audits of the tabular recipe: the LOSS attack on a fitted model's own members and held-out
rows, and the glue that trains target, shadow and canary models for the model-agnostic attacks of
:mod:`dpcare.audit` (LiRA, the one-run audit)."""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from dpcare.audit import (
    LiraResult,
    attack_payload,
    attack_row,
    logit_confidence,
    loss_attack,
    one_run_audit,
    per_example_losses,
    run_lira,
)
from dpcare.audit.canaries import make_canaries
from dpcare.audit.one_run import BOUNDS, claim_slack, gdp_mu
from dpcare.data import TableEncoder, TableSchema, load_table, public_view
from dpcare.engine import TrainConfig, Trainer
from dpcare.exceptions import DataError, SettingsError
from dpcare.methods import make_objective
from dpcare.models import TabularMLP
from dpcare.privacy import PrivacyLedger, ProtectedUnit, default_delta, make_accountant
from dpcare.runs.folder import fingerprint
from dpcare.settings import DPSettings
from dpcare.tabular.recipe import TabularModel, TabularSettings, tensors, train_rows

LOSS_TITLE = "LOSS membership attack (training rows vs held-out rows)"


def membership_audit(model: torch.nn.Module, members: dict[str, torch.Tensor], nonmembers: dict[str, torch.Tensor],
                     name: str = "model") -> dict:
    """The LOSS attack with as many members as non-members (members subsampled, seeded), as an attack file's
    payload (:func:`dpcare.audit.attack_payload`) with the threshold rule's TPR/FPR ratio."""
    k = min(len(members["y"]), len(nonmembers["y"]))
    pick = torch.randperm(len(members["y"]), generator=torch.Generator().manual_seed(0))[:k]
    m = per_example_losses(model, members["x"][pick], members["y"][pick])
    n = per_example_losses(model, nonmembers["x"][:k], nonmembers["y"][:k])
    r = loss_attack(m, n)
    row = attack_row(name, r.metrics, **{"TPR/FPR at the mean training loss": r.tpr_fpr_ratio, "members": k,
                                         "non-members": k})
    return attack_payload(LOSS_TITLE, [row], {name: (-m, -n)}, threshold=r.threshold)


def audit_split(fitted: TabularModel, data: pd.DataFrame, members: str = "train", nonmembers: str = "test") -> dict:
    """The LOSS attack on the rows of ``data`` the model trained on against its held-out rows, by the split the
    model saved (``data`` must be the table it was fitted on: same row count)."""
    split = fitted.split
    if not split or nonmembers not in split:
        raise DataError("the model saved no hold-out split (fitted with holdout=False): pass members and "
                        "non-members explicitly")
    frame = load_table(data, fitted.schema)
    if len(frame) != split["rows"]:
        raise DataError(f"the table has {len(frame)} rows, the model's split was drawn over {split['rows']}: "
                        "pass the very table the run trained on")
    part = {k: tensors(fitted.encoder, frame.iloc[split[k]].reset_index(drop=True), "zeros", 0)
            for k in (members, nonmembers)}
    return membership_audit(fitted.model, part[members], part[nonmembers], fitted.settings.method)


def _train_split_and_score(population: pd.DataFrame, schema: TableSchema, settings: TabularSettings,
                           members: np.ndarray, seed: int) -> np.ndarray:
    """Train ``settings`` on the rows ``members`` of ``population``; phi (logit confidence) of every row."""
    torch.set_num_threads(1)
    settings = replace(settings, dp=settings.dp.shifted(seed - settings.dp.seed))  # a user's noise_seed moves too
    model, encoder, _, _ = train_rows(population.iloc[members], schema, settings, progress=False)
    data = tensors(encoder, population, "zeros", seed=0)
    return logit_confidence(model, data["x"], data["y"])


def tabular_lira(population: pd.DataFrame, schema: TableSchema, settings: TabularSettings, shadows: int = 16,
                 workers: int = 2, seed: int = 0, bootstrap: int = 200, journal: Path | None = None) -> LiraResult:
    """LiRA (:func:`dpcare.audit.run_lira`) with target and shadows trained by the recipe ``settings`` on
    random halves of ``population``; ``journal``: resume an interrupted attack (keyed by the recipe and a hash
    of the population's rows)."""
    population = load_table(population, schema)
    rows = hashlib.sha256(pd.util.hash_pandas_object(population, index=True).to_numpy().tobytes()).hexdigest()
    return run_lira(partial(_train_split_and_score, population, schema, settings), len(population),
                    shadows=shadows, workers=workers, seed=seed, bootstrap=bootstrap, journal=journal,
                    journal_settings=fingerprint({"recipe": settings.to_dict(), "rows": rows}))


@dataclass
class CanaryAuditSettings:
    """A one-run audit's training run and analysis. The defaults catch a run with its noise switched off or its
    clipping skipped at a claimed epsilon of 0.5 on 2,000 rows of SUPPORT2 (docs/auditing.md has the bounds)."""

    method: str = "dp-sgd"  # dp-sgd | feature-dp
    epsilon: float = 1.0
    canaries: int | None = None  # None: half the table less one, at most MAX_CANARIES
    epochs: float = 20.0
    batch_size: int = 128
    clip_norm: float | None = None  # None: CLIP_NORMS[method]
    lr: float = 3e-3
    hidden: int = 256
    seed: int = 0  # the canaries, inclusion bits, split and initialisation
    noise_seed: int | None = None  # the training's sampling and noise: None, secret OS entropy as in every run
    confidence: float = 0.95
    design: str = "extreme"  # extreme | flipped (dpcare.audit.canaries)
    bound: str = "gdp"  # gdp | pure (dpcare.audit.one_run)
    guess_fractions: tuple[float, ...] = (0.1, 0.25, 0.5)


MAX_CANARIES = 1000
# DP-SGD: below every example's gradient norm, so a run that skips clipping stands out; Feature-DP: large enough
# for the private branch to matter next to the public one (at 0.1 a run without noise learns nothing private)
CLIP_NORMS = {"dp-sgd": 0.1, "feature-dp": 10.0}


def canary_count(settings: CanaryAuditSettings, rows: int) -> int:
    """The number of canaries for a table of ``rows`` rows (the audit needs more rows than twice that)."""
    m = settings.canaries if settings.canaries is not None else min(MAX_CANARIES, (rows - 1) // 2)
    if m < 1 or rows <= 2 * m:
        raise DataError(f"the table has {rows} rows; the audit needs more than 2 x {m} canaries (and at least one)")
    return m


def ledger_profile(ledger: PrivacyLedger) -> Callable[[np.ndarray], np.ndarray]:
    """delta(epsilon) that the ledger's accountant certifies for everything it charged, as a function."""
    accountant = make_accountant(ledger.accountant)
    accountant.compose(ledger.event())
    return lambda eps: np.array([accountant.get_delta(float(e)) for e in np.atleast_1d(eps)])


def audit_tabular(df: pd.DataFrame, schema: TableSchema, settings: CanaryAuditSettings,
                  trainer_cls: type[Trainer] | None = None) -> dict:
    """Train once with canaries (:mod:`dpcare.audit.canaries`) and return the claimed epsilon and the audited
    lower bound (:func:`dpcare.audit.one_run_audit`, ``settings.bound``). Score (higher = "included"): the
    model's log-odds of the canary's label for DP-SGD; l(pad(Psi(x))) - l(x) for Feature-DP, i.e. how much the
    canary's private features help the model.

    The mechanism does not depend on which canaries were drawn in: its sampling rate, step count, noise and
    delta are fixed from the table's row count and the canary count before the inclusion bits are drawn (only
    the division by the expected batch q n sees the training-set size, as in every run of the engine).

    ``trainer_cls`` (default :class:`dpcare.engine.Trainer`) lets tests plant bugs (noise off, clipping skipped)
    to check the audit catches them."""
    s = settings
    if s.method not in ("dp-sgd", "feature-dp"):
        raise SettingsError(f"the canary audit supports dp-sgd and feature-dp, not {s.method!r}")
    if s.bound not in BOUNDS:
        raise SettingsError(f"bound must be one of {BOUNDS}, got {s.bound!r}")
    trainer_cls = trainer_cls or Trainer
    rng = np.random.default_rng(s.seed)
    df = load_table(df, schema)
    m = canary_count(s, len(df))
    order = rng.permutation(len(df))
    rewritten = schema.feature_columns if s.design == "extreme" else None  # flipped: the private columns
    canaries = make_canaries(df.iloc[order[:m]], schema, rng, s.design, rewritten)
    regular = df.iloc[order[m:]].reset_index(drop=True)
    included = rng.random(m) < 0.5
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
    planned = len(regular) + m / 2  # the expected training-set size: rate, steps and delta come from it
    rate = min(1.0, s.batch_size / planned)
    n = len(private["y"])
    torch.manual_seed(s.seed)
    model = TabularMLP(reg["x"].shape[1], hidden=s.hidden, dropout=0.0)
    objective = make_objective(s.method)
    ledger = PrivacyLedger(n, delta=default_delta(len(regular) + m), unit=objective.unit,
                           protected_columns=tuple(schema.private_columns) if objective.unit is ProtectedUnit.FEATURES else ())
    clip = CLIP_NORMS[s.method] if s.clip_norm is None else s.clip_norm
    # q is the rate planned before the canaries were drawn, whatever number of them was included
    dp = DPSettings.rebuilt(epsilon=s.epsilon, delta=ledger.delta, clip_norm=clip, batch_size=s.batch_size,
                            steps=math.ceil(s.epochs / rate), seed=s.seed, noise_seed=s.noise_seed)
    config = TrainConfig(dp=dp, sampling_rate=rate, public_batch_size=s.batch_size, lr=s.lr, progress=False)
    trainer = trainer_cls(model, objective, config, ledger=ledger)
    trainer.fit(private, public)
    if s.method == "dp-sgd":
        scores = logit_confidence(model, can["x"], can["y"])
    else:
        scores = per_example_losses(model, can["x_pub"], can["y"]) - per_example_losses(model, can["x"], can["y"])
    claimed = ledger.epsilon()
    slack = claim_slack(m, claimed, ledger.delta, ledger_profile(ledger)) if s.bound == "gdp" else 0.0
    audit = one_run_audit(scores, included, delta=ledger.delta, confidence=s.confidence,
                          guess_fractions=tuple(s.guess_fractions), bound=s.bound, slack=slack)
    claimed_mu = gdp_mu(claimed, ledger.delta) if s.bound == "gdp" else None
    return {"method": s.method, "claimed_epsilon": claimed, "claimed_mu": claimed_mu, **audit.to_dict(),
            "design": s.design, "clip_norm": clip, "guarantee": ledger.guarantee().to_dict(), "ledger": ledger.state_dict()}
