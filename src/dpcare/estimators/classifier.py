"""``DPClassifier``: the tabular workflow of ``dpcare train`` as a scikit-learn style estimator.

``DPClassifier(method="feature-dp", epsilon=1.0).fit(df, schema)`` trains the MLP with the chosen
method; ``predict_proba(df)`` / ``predict(df)`` need the feature columns only (never the target);
``save(folder)`` writes what ``dpcare train`` writes, and ``DPClassifier.load`` reads either.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pandas as pd
import torch
from sklearn.base import BaseEstimator, ClassifierMixin
from sklearn.metrics import accuracy_score

from dpcare.data import TableSchema, load_spec, load_table, read_table
from dpcare.data.tables import category_text
from dpcare.exceptions import DataError, NotFittedError
from dpcare.privacy import Guarantee
from dpcare.workflows.tabular import (
    TabularResult,
    TabularRun,
    load_run,
    save_run,
    train_all,
    train_tabular,
)

Table = pd.DataFrame | str | os.PathLike


class DPClassifier(ClassifierMixin, BaseEstimator):
    """A differentially private tabular classifier.

    Parameters are those of :class:`~dpcare.workflows.tabular.TabularRun` (same names and defaults:
    method "feature-dp", "dp-sgd", "label-dp" or "non-private"; epsilon, delta, epochs, batch_size,
    clip_norm, ...), plus ``holdout``: True trains as ``dpcare train`` does, on a random 80% of the
    rows, and keeps validation / test AUPRC and AUROC of the rest in ``result_.metrics``; False
    trains on every row (no metrics).

    Fitted attributes: ``model_`` (the torch MLP), ``encoder_`` (the fitted TableEncoder),
    ``classes_`` (the target's categories as text), ``guarantee_`` (the run's
    :class:`~dpcare.privacy.Guarantee`; None when non-private), ``result_`` (the TabularResult:
    metrics, steps, noise multiplier, settings), ``feature_names_in_``.
    """

    def __init__(self, method=TabularRun.method, epsilon=TabularRun.epsilon, delta=TabularRun.delta,
                 epochs=TabularRun.epochs, batch_size=TabularRun.batch_size, clip_norm=TabularRun.clip_norm,
                 alpha=TabularRun.alpha, lr=TabularRun.lr, hidden=TabularRun.hidden, pad=TabularRun.pad,
                 public_batch_size=TabularRun.public_batch_size, public_pretrain_steps=TabularRun.public_pretrain_steps,
                 stats_epsilon=TabularRun.stats_epsilon, accountant=TabularRun.accountant, seed=TabularRun.seed,
                 checkpoint_dir=TabularRun.checkpoint_dir, progress=TabularRun.progress, holdout=True):
        params = dict(locals())  # scikit-learn: store every parameter unchanged
        del params["self"]
        vars(self).update(params)

    def __getattr__(self, name: str):
        if name.endswith("_") and not name.startswith("_"):
            raise NotFittedError(f"this {type(self).__name__} is not fitted: call fit() or load() first "
                                 f"(it has no {name} yet)")
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    # ------------------------------------------------------------------ fitting
    def fit(self, df: Table, schema: TableSchema | str | os.PathLike) -> DPClassifier:
        """Train on ``df`` (a DataFrame or a CSV/Parquet path) with its privacy spec (a TableSchema or a
        YAML/JSON path). Returns self."""
        schema = schema if isinstance(schema, TableSchema) else load_spec(schema)
        params = self.get_params()
        holdout = params.pop("holdout")
        run = TabularRun(**params)
        result = (train_tabular if holdout else train_all)(df, schema, run)
        result.settings["holdout"] = bool(holdout)
        return self._set_fitted(result)

    def _set_fitted(self, result: TabularResult) -> DPClassifier:
        schema = result.encoder.schema
        self.model_, self.encoder_, self.result_ = result.model, result.encoder, result
        self.guarantee_ = Guarantee.from_dict(result.guarantee) if result.guarantee else None
        self.classes_ = np.array(schema.column(schema.target).categories, dtype=object)
        self.feature_names_in_ = np.array(schema.feature_columns, dtype=object)
        return self

    # ------------------------------------------------------------------ prediction
    def _features(self, df: Table) -> torch.Tensor:
        """Encoded feature columns of ``df``, validated against the spec; the target is not read."""
        schema = self.encoder_.schema
        frame = read_table(df)
        missing = [c for c in schema.feature_columns if c not in frame.columns]
        if missing:
            raise DataError(f"the table lacks the feature columns {missing} that the model reads "
                            f"(the target '{schema.target}' is not needed)")
        placeholder = schema.column(schema.target).categories[0]  # never read: only the features are encoded
        frame = load_table(frame.assign(**{schema.target: placeholder}), schema)
        return torch.from_numpy(self.encoder_.transform(frame))

    def predict_proba(self, df: Table) -> np.ndarray:
        """Class probabilities, shape [rows, len(classes_)], columns in the order of ``classes_``."""
        x = self._features(df)
        self.model_.eval()
        with torch.no_grad():
            logits = self.model_(x).double()
        if logits.shape[1] == 1:
            p = torch.sigmoid(logits[:, 0])
            return torch.stack([1 - p, p], dim=1).numpy()
        return torch.softmax(logits, dim=1).numpy()

    def predict(self, df: Table) -> np.ndarray:
        """The most probable class of each row (as text, like ``classes_``)."""
        return self.classes_[self.predict_proba(df).argmax(axis=1)]

    def score(self, df: Table, y=None, sample_weight=None) -> float:
        """Accuracy; ``y`` defaults to the target column of ``df`` (labels compared as category text)."""
        truth = read_table(df)[self.encoder_.schema.target] if y is None else pd.Series(np.asarray(y))
        return float(accuracy_score(truth.map(category_text), self.predict(df), sample_weight=sample_weight))

    # ------------------------------------------------------------------ persistence
    def save(self, folder: str | os.PathLike) -> Path:
        """Write model.pt, metrics.json and guarantee.json (the layout of ``dpcare train``)."""
        save_run(folder, self.model_, self.encoder_, self.result_)
        return Path(folder)

    @classmethod
    def load(cls, folder: str | os.PathLike) -> DPClassifier:
        """A fitted classifier from ``save`` or a ``dpcare train`` output folder."""
        result = load_run(folder)
        names = cls._get_param_names()
        return cls(**{k: v for k, v in result.settings.items() if k in names})._set_fitted(result)
