"""Private hyperparameter tuning on tables: every candidate's training AND the choice among them are counted.

Choosing hyperparameters by their score on private rows is a release (Papernot & Steinke, "Hyperparameter
tuning with Renyi differential privacy", ICLR 2022, Sec. 1): a model picked by scikit-learn's GridSearchCV
from scores on private folds carries a guarantee that does not count the search. :func:`tune` is the
counted alternative, the protocol of the FusionDP study's ``--charge-tuning`` made a tool:

1. the K grid candidates share one noise multiplier sigma*, calibrated so that K x T training steps plus the
   selection below meet the target epsilon (one ledger over the training and validation rows);
2. every candidate is trained on the training rows with the recipe (its own ledger reaches the per-candidate
   epsilon of T steps at sigma*);
3. one Gaussian release of the K validation counts of correct predictions (L2 sensitivity sqrt(K): one row
   changes each count by at most 1) takes ``selection_share`` of epsilon; the arg-max of the noisy counts is
   post-processing.

The returned model's guarantee is the composed ledger of all of it. Only grid keys that leave a candidate's
ledger the same shape may vary (learning rate, alpha, beta, clip norm, width, padding); releases that differ
per candidate (private scaling statistics, adaptive clipping) are refused.
"""

from __future__ import annotations

import itertools
import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

import numpy as np
import pandas as pd

from dpcare.data import TableSchema
from dpcare.data.splits import split_indices
from dpcare.data.tables import category_text
from dpcare.exceptions import SettingsError
from dpcare.privacy import PrivacyLedger, default_delta, gaussian_event, secret_rng
from dpcare.privacy.calibration import calibrate_noise_multiplier
from dpcare.privacy.events import event_from_json
from dpcare.privacy.randomness import secure_normal
from dpcare.privacy.validation import check_delta
from dpcare.tabular.recipe import (
    BINARY_ONLY,
    SPLITS,
    TabularModel,
    fit,
    ledger_terms,
    objective_for,
    read_and_split,
)
from dpcare.tabular.settings import TabularSettings

#: settings a grid may vary: each leaves the candidate's ledger the same (steps, q, delta, releases)
TUNABLE = {"lr": float, "alpha": float, "beta": float, "clip_norm": float, "hidden": int, "pad": str}
SELECTION = "private selection of the hyperparameters (noisy validation counts)"


def candidates(grid: Mapping[str, Sequence[Any]]) -> list[dict[str, Any]]:
    """The grid's points (every combination), checked: known keys, non-empty value lists."""
    unknown = sorted(set(grid) - set(TUNABLE))
    if unknown:
        raise SettingsError(f"private tuning cannot vary {unknown}: a grid may vary {sorted(TUNABLE)} (settings "
                            "that leave every candidate's privacy ledger the same); fix the others")
    empty = [k for k, v in grid.items() if not isinstance(v, (list, tuple)) or not v]
    if empty or not grid:
        raise SettingsError(f"every tuned setting needs a non-empty list of values, got {dict(grid)!r}")
    keys = list(grid)
    return [dict(zip(keys, values)) for values in itertools.product(*(grid[k] for k in keys))]


def parse_grid(items: Sequence[str]) -> dict[str, list[Any]]:
    """``["alpha=1,5,20", "lr=0.001,0.01"]`` (the command line's ``--tune``) as a grid."""
    grid: dict[str, list[Any]] = {}
    for item in items:
        key, sep, values = item.partition("=")
        key = key.strip().replace("-", "_")
        key = "clip_norm" if key == "clip" else key
        if not sep or key not in TUNABLE or not values.strip():
            raise SettingsError(f"--tune takes NAME=V1,V2,... with NAME one of {sorted(TUNABLE)} (clip for clip_norm), "
                                f"got --tune {item!r}")
        try:
            grid[key] = [TUNABLE[key](v.strip()) for v in values.split(",")]
        except ValueError:
            raise SettingsError(f"--tune {item!r}: the values of {key} must be {TUNABLE[key].__name__}s") from None
    return grid


def tuning_units(rows: int, seed: int, splits: dict[str, float] = SPLITS) -> tuple[int, int]:
    """(training rows, validation rows) of a table of ``rows`` rows under the split ``splits``."""
    parts = split_indices(rows, splits, seed)
    return len(parts["train"]), len(parts["val"])


def check_tunable(settings: TabularSettings) -> None:
    if not objective_for(settings).private:
        raise SettingsError(f"private tuning is for private methods; {settings.method} is not private (tune it on "
                            "public data, or not at all)")
    if settings.stats_epsilon is not None or settings.dp.adaptive_clip is not None:
        raise SettingsError("private tuning needs candidates with the same ledger: turn off --stats-epsilon and "
                            "--adaptive-clip (their releases differ per candidate)")


def plan_tuning(schema: TableSchema, settings: TabularSettings, rows: int, k: int, selection_share: float = 0.1
                ) -> tuple[PrivacyLedger, float, float]:
    """The tuning run's ledger before any row is read: the selection charged and the K x T candidate steps at the
    shared sigma*; with sigma* and the selection's noise multiplier. Its n counts training and validation rows."""
    check_tunable(settings)
    schema.require_binary_target(BINARY_ONLY)
    if not 0 < selection_share < 1:
        raise SettingsError(f"selection_share must be in (0, 1), got {selection_share!r}")
    n_train, n_val = tuning_units(rows, settings.dp.seed, settings.splits)
    units = n_train + n_val
    delta = check_delta(settings.dp.delta, units) if settings.dp.delta is not None else default_delta(units)
    objective = objective_for(settings)
    if objective.unit.value == "features":
        schema.require_public()
    ledger = PrivacyLedger(units, delta, settings.dp.accountant, **ledger_terms(schema, objective.unit))
    eps = settings.dp.epsilon
    sel_sigma = calibrate_noise_multiplier(1.0, 1, selection_share * eps, delta, settings.dp.accountant)
    ledger.charge(SELECTION, gaussian_event(sel_sigma),
                  f"{SELECTION}: one Gaussian release of {k} counts, noise multiplier {sel_sigma:.4g} (sensitivity "
                  f"sqrt({k}))")
    q, steps = _rate_and_steps(settings, n_train)
    sigma = ledger.calibrate_training_noise(q, k * steps, eps)
    ledger.charge_sampled_gaussian("candidate trainings", q, sigma, k * steps)
    return ledger, sigma, sel_sigma


def _rate_and_steps(settings: TabularSettings, n_train: int) -> tuple[float, int]:
    """One candidate's Poisson rate and step count, as the engine sets them (Trainer.sampling_rate / total_steps)."""
    dp = settings.dp
    steps = dp.steps if dp.steps is not None else math.ceil(dp.epochs * n_train / dp.batch_size)
    return min(1.0, dp.batch_size / n_train), steps


def candidate_epsilon(settings: TabularSettings, n_train: int, delta: float, sigma: float) -> float:
    """The epsilon one candidate's own ledger reaches with T steps at ``sigma`` (a hair more noise: the
    candidate's calibration then lands at or above sigma)."""
    q, steps = _rate_and_steps(settings, n_train)
    one = PrivacyLedger(n_train, delta, settings.dp.accountant, _warn=False)
    one.charge_sampled_gaussian("training", q, sigma * (1 + 2e-3), steps)
    return one.epsilon()


def tune(data: pd.DataFrame | str | os.PathLike, schema: TableSchema, settings: TabularSettings,
         grid: Mapping[str, Sequence[Any]], selection_share: float = 0.1, progress: bool = True,
         **fit_options: Any) -> TabularModel:
    """Train every grid candidate and pick one privately (module docstring); the chosen model's guarantee
    covers all candidates and the choice. ``fit_options``: :func:`~dpcare.tabular.recipe.fit`'s public_data /
    imputer."""
    points = candidates(grid)
    check_tunable(settings)
    frame, parts = read_and_split(data, schema, settings.dp.seed, splits=settings.splits)
    k = len(points)
    total, sigma, sel_sigma = plan_tuning(schema, settings, len(frame), k, selection_share)
    n_train = len(parts["train"])
    per_candidate = replace(settings.dp, epsilon=candidate_epsilon(settings, n_train, total.delta, sigma),
                            delta=total.delta)
    val = frame.iloc[parts["val"]].reset_index(drop=True)
    truth = val[schema.target].map(category_text).to_numpy()
    # the selection's noise is secret (noise_seed, OS entropy by default): a draw seeded by the published seed
    # could be regenerated and subtracted from the published noisy counts
    rng = secret_rng(settings.dp.noise_seed, purpose="tuning selection")
    fitted, noisy = [], []
    for i, point in enumerate(points):
        # each candidate its own initialisation, Poisson samples and noise (the K x T composition assumes
        # independent noise; a shared seed would give every candidate the same noise vector), the same split
        model = fit(frame, schema, replace(settings, **point, dp=per_candidate), progress=progress,
                    engine_seed=settings.dp.seed + 1_000_003 * (i + 1), **fit_options)
        correct = int((np.asarray(model.classes, dtype=object)[model.predict_proba(val).argmax(1)] == truth).sum())
        noisy.append(correct + float(secure_normal(rng, sel_sigma * math.sqrt(k))))
        fitted.append(model)
    pick = int(np.argmax(noisy))
    ledger = _composed(total.n, total, fitted, sel_sigma, k)
    chosen = fitted[pick]
    guarantee = ledger.guarantee()
    if guarantee.epsilon > settings.dp.epsilon * (1 + 1e-3):  # the calibration above makes this a bug, not bad input
        raise RuntimeError(f"private tuning composed to epsilon {guarantee.epsilon} > target {settings.dp.epsilon}")
    # the validation rows are inside this guarantee's n: their exact metrics are not released
    metrics = {name: v for name, v in chosen.metrics.items() if not name.startswith("val_")}
    info = {**chosen.info, "tuning": {
        "grid": {k_: list(v) for k_, v in grid.items()}, "chosen": points[pick], "candidates": k,
        "noisy_validation_counts": [round(float(c), 3) for c in noisy], "selection_noise_multiplier": sel_sigma,
        "shared_noise_multiplier": sigma, "selection_share": selection_share}}
    return replace(chosen, settings=replace(settings, **points[pick]), guarantee=guarantee, ledger=ledger, info=info,
                   metrics=metrics)


def _composed(units: int, plan: PrivacyLedger, fitted: Sequence[TabularModel], sel_sigma: float, k: int
              ) -> PrivacyLedger:
    """One ledger over training and validation rows: the selection, then every candidate's actual releases."""
    ledger = PrivacyLedger(units, plan.delta, plan.accountant, plan.unit, plan.protected_columns, plan.public_columns,
                           plan.declared, _warn=False)
    ledger.charge(SELECTION, gaussian_event(sel_sigma), plan.entries[0].description)
    for i, model in enumerate(fitted):
        for e in model.ledger.state_dict()["entries"]:
            if e["kind"] == "sampled_gaussian":
                ledger.charge_sampled_gaussian(f"candidate {i + 1}: {e['name']}", e["sampling_rate"],
                                               e["noise_multiplier"], e["steps"])
            else:
                ledger.charge(f"candidate {i + 1}: {e['name']}", event_from_json(e["event"]), e["description"])
    return ledger


__all__ = ["SELECTION", "TUNABLE", "candidates", "parse_grid", "plan_tuning", "tune"]
