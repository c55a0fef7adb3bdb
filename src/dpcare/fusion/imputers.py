"""Imputers of private columns from public ones.

All share one contract: ``fit(support, schema)`` on a PUBLIC support set (rows
whose every column may be used, e.g. consented patients; Zeng et al. (FusionDP) uses 10%
of the data), then ``predict(public_frame)`` returns the private columns for any
rows from a frame that holds only their public columns. ``predict`` refuses a
frame that still contains private columns, so it cannot read them.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
from sklearn.ensemble import HistGradientBoostingClassifier, HistGradientBoostingRegressor
from sklearn.metrics import accuracy_score, mean_absolute_error

from dpcare.data import TableSchema, public_view
from dpcare.exceptions import (
    DataError,
    MissingDependencyError,
    MissingFileError,
    NotFittedError,
    UnknownNameError,
)


class Imputer:
    """Base class: subclasses implement ``_fit_column`` and ``_predict_column``."""

    name = "imputer"

    def fit(self, support: pd.DataFrame, schema: TableSchema) -> Imputer:
        schema.require_public()
        if len(support) == 0:
            raise DataError("the public support set has no rows")
        self.schema = schema
        self.inputs = schema.public_columns
        self._models = {}
        for col in schema.private_columns:
            known = support[col].notna()
            if known.sum() < 2:
                raise DataError(f"the support set has fewer than 2 known values of private column '{col}'")
            self._models[col] = self._fit_column(col, self._features(support[known]), support.loc[known, col])
        return self

    def predict(self, public_frame: pd.DataFrame) -> pd.DataFrame:
        if not hasattr(self, "_models"):
            raise NotFittedError("call fit() before predict()")
        leaked = [c for c in self.schema.private_columns if c in public_frame.columns]
        if leaked:
            raise DataError(f"predict() got private columns {leaked}: pass public_view(df, schema)")
        x = self._features(public_frame)
        return pd.DataFrame({c: self._predict_column(c, m, x) for c, m in self._models.items()},
                            index=public_frame.index)

    def _features(self, frame: pd.DataFrame) -> pd.DataFrame:
        x = frame[self.inputs].copy()
        for c in self.inputs:
            spec = self.schema.column(c)
            if spec.kind == "categorical":
                cats = list(spec.categories) if spec.categories else sorted(set(x[c].dropna()))
                x[c] = pd.Categorical(x[c], categories=cats)
        return x

    def _fit_column(self, col, x, y):
        raise NotImplementedError

    def _predict_column(self, col, model, x):
        raise NotImplementedError


class GradientBoostingImputer(Imputer):
    """One scikit-learn histogram gradient-boosting model per private column (the default)."""

    name = "gbm"

    def __init__(self, max_iter: int = 200, seed: int = 0):
        self.max_iter, self.seed = max_iter, seed

    def _fit_column(self, col, x, y):
        kind = self.schema.column(col).kind
        cls = HistGradientBoostingClassifier if kind == "categorical" else HistGradientBoostingRegressor
        model = cls(max_iter=self.max_iter, categorical_features="from_dtype", random_state=self.seed)
        return model.fit(x, y.astype(str) if kind == "categorical" else y.astype(float))

    def _predict_column(self, col, model, x):
        return model.predict(x)


class TabPFNImputer(Imputer):
    """TabPFN (Zeng et al.'s foundation-model prior) from LOCAL checkpoints.

    No TabPFN weights can be downloaded here: pass the classifier and regressor
    checkpoint files. Fails with a clear message if they or the package are missing.
    """

    name = "tabpfn"

    def __init__(self, classifier_checkpoint: str | Path, regressor_checkpoint: str | Path, device: str = "cpu"):
        self.paths = {"categorical": Path(classifier_checkpoint), "numeric": Path(regressor_checkpoint)}
        for kind, path in self.paths.items():
            if not path.is_file():
                raise MissingFileError(f"TabPFN {kind} checkpoint not found: {path} (weights cannot be downloaded "
                                       "here; use --imputer gbm or point to local checkpoint files)")
        try:
            import tabpfn  # noqa: F401
        except ImportError:
            raise MissingDependencyError("the TabPFN imputer needs the tabpfn package: pip install tabpfn") from None
        self.device = device

    def _fit_column(self, col, x, y):
        from tabpfn import TabPFNClassifier, TabPFNRegressor

        kind = self.schema.column(col).kind
        cls = TabPFNClassifier if kind == "categorical" else TabPFNRegressor
        model = cls(model_path=str(self.paths[kind]), device=self.device)
        return model.fit(_numeric(x), y.astype(str) if kind == "categorical" else y.astype(float))

    def _predict_column(self, col, model, x):
        return model.predict(_numeric(x))


def _numeric(x: pd.DataFrame) -> np.ndarray:
    """Categoricals as codes (NaN for missing), as TabPFN takes a float matrix."""
    cols = [x[c].cat.codes.replace(-1, np.nan) if isinstance(x[c].dtype, pd.CategoricalDtype) else x[c]
            for c in x.columns]
    return np.column_stack([np.asarray(c, dtype=float) for c in cols])


def make_imputer(name: str, **kwargs) -> Imputer:
    if name == "gbm":
        return GradientBoostingImputer(**kwargs)
    if name == "tabpfn":
        return TabPFNImputer(**kwargs)
    if name == "lm":
        from dpcare.fusion.lm_imputer import LanguageModelImputer

        return LanguageModelImputer(**kwargs)
    raise UnknownNameError(f"unknown imputer {name!r}; choose gbm, tabpfn or lm")


def imputation_quality(imputer: Imputer, frame: pd.DataFrame) -> dict[str, dict[str, float]]:
    """Per private column: accuracy (categorical) or MAE (numeric) on ``frame``, with the
    trivial baseline (majority class / median of the frame) for comparison."""
    schema = imputer.schema
    pred = imputer.predict(public_view(frame, schema))
    out = {}
    for col in schema.private_columns:
        known = frame[col].notna()
        y, p = frame.loc[known, col], pred.loc[known, col]
        if schema.column(col).kind == "categorical":
            out[col] = {"accuracy": float(accuracy_score(y.astype(str), p.astype(str))),
                        "majority_baseline": float(y.astype(str).value_counts(normalize=True).iloc[0])}
        else:
            out[col] = {"mae": float(mean_absolute_error(y, p)),
                        "median_baseline_mae": float(mean_absolute_error(y, np.full(len(y), y.median())))}
    return out
