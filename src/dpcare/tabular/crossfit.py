"""A cross-fitted evaluation for small tables (issue 54): every row is a test row once.

On a table of a few hundred rows a 10% test split holds a few dozen rows, and the verdict against the
public baseline is mostly "cannot be told". :func:`cross_fit` cuts the rows into ``folds`` parts by a seeded
permutation (a function of the row count and the seed alone). For fold k: the test rows are part k, the
validation rows part k+1 (cyclically), the training rows the rest. A private model is trained on the training
rows with the run's settings, the public baseline panel is fitted on their public view and chosen on the
validation rows only (never the test fold), and both score the test fold. The comparison is the mean over
folds of each fold's metric, with a bootstrap of the rows drawn within their fold
(:func:`dpcare.verdict.compare` with ``strata``).

What it is: an estimate of how a model trained BY THESE SETTINGS compares with the strongest public model,
on every row. The fold models are never saved or released; their metrics, like every test metric, are exact
statistics of the rows and outside any guarantee. It does not replace the run's own model and verdict:
``dpcare train --cross-fit K`` trains the released model as without it (one guarantee, one ledger) and adds
this evaluation to ``run.json``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
from sklearn.metrics import average_precision_score, roc_auc_score

from dpcare.data import TableSchema
from dpcare.exceptions import DataError, SettingsError
from dpcare.fusion import Imputer
from dpcare.progress import progress as tqdm
from dpcare.tabular.recipe import chosen_public_scores, probabilities, tensors, train_rows
from dpcare.tabular.settings import TabularSettings
from dpcare.verdict import compare

METRICS = (("AUPRC", average_precision_score), ("AUROC", roc_auc_score))


def fold_parts(rows: int, folds: int, seed: int) -> list[np.ndarray]:
    """The row positions of each fold: a seeded permutation cut into ``folds`` parts of nearly equal size."""
    if not isinstance(folds, int) or folds < 3:
        raise SettingsError(f"a cross-fitted evaluation needs at least 3 folds (test, validation and training "
                            f"rows), got {folds!r}")
    if rows < 10 * folds:
        raise DataError(f"{rows} rows are too few for {folds} folds (at least {10 * folds}: 10 rows a fold)")
    return [np.sort(p) for p in np.array_split(np.random.default_rng(seed).permutation(rows), folds)]


def cross_fit(frame: pd.DataFrame, schema: TableSchema, settings: TabularSettings, folds: int = 5,
              imputer: Imputer | None = None, progress: bool = True) -> dict[str, Any]:
    """The cross-fitted evaluation of ``settings`` on the validated rows ``frame`` (``imputer``: the fitted
    imputer of a fusion method, fitted on public rows only). Returns a JSON-able record: folds, rows, the
    baseline chosen in each fold, each metric's comparison (``Comparison.to_dict``) and per-fold values."""
    parts = fold_parts(len(frame), folds, settings.dp.seed)
    y_all = np.empty(len(frame))
    ours, base, stratum = np.empty(len(frame)), np.empty(len(frame)), np.empty(len(frame), dtype=int)
    chosen = []
    for k in tqdm(range(folds), desc="cross-fitted folds", disable=not progress):
        test_rows, val_rows = parts[k], parts[(k + 1) % folds]
        train_rows_k = np.sort(np.concatenate([p for i, p in enumerate(parts) if i not in (k, (k + 1) % folds)]))
        for name, rows in (("test", test_rows), ("validation", val_rows)):
            if frame[schema.target].iloc[rows].nunique() < 2:
                raise DataError(f"fold {k}'s {name} rows hold a single class of '{schema.target}': use fewer "
                                "folds or more rows")
        fold_settings = settings.replace(dp=settings.dp.shifted(k))  # each fold its own draws
        model, encoder, _, train = train_rows(frame.iloc[train_rows_k].reset_index(drop=True), schema,
                                              fold_settings, imputer, None, progress=False)
        held = {name: tensors(encoder, frame.iloc[rows].reset_index(drop=True), settings.pad, settings.dp.seed + i)
                for i, (name, rows) in enumerate((("val", val_rows), ("test", test_rows)), start=1)}
        name, scores, _ = chosen_public_scores(settings, train, held["val"], held["test"], model.config)
        chosen.append(name)
        y_all[test_rows] = held["test"]["y"].numpy()
        ours[test_rows] = probabilities(model, held["test"]["x"])[:, 1]
        base[test_rows] = scores
        stratum[test_rows] = k
    names = sorted(set(chosen))
    label = names[0] if len(names) == 1 else "the panel's best on each fold's validation rows"
    comparisons = [compare(f"cross-fitted {m}", fn, y_all, ours, base, label, seed=settings.dp.seed,
                           strata=stratum).to_dict() for m, fn in METRICS]
    per_fold = [{"fold": k, "rows": int(len(parts[k])), "baseline": chosen[k],
                 **{f"{m} model": float(fn(y_all[parts[k]], ours[parts[k]])) for m, fn in METRICS},
                 **{f"{m} baseline": float(fn(y_all[parts[k]], base[parts[k]])) for m, fn in METRICS}}
                for k in range(folds)]
    return {"folds": folds, "rows": len(frame), "seed": settings.dp.seed, "baseline": label,
            "comparisons": comparisons, "per_fold": per_fold,
            "note": ("cross-fitted: each row scored once, by a model trained without it under these settings; the "
                     "fold models are not released, and these metrics are outside the guarantee")}


__all__ = ["cross_fit", "fold_parts"]
