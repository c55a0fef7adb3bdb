"""``DPClassifier``: the tabular recipe (:mod:`dpcare.tabular`) as a scikit-learn style estimator.

``DPClassifier(method="feature-dp", epsilon=1.0).fit(df, schema)`` trains the MLP with the chosen
method; ``predict_proba(df)`` / ``predict(df)`` need the feature columns only (never the target);
``save(folder)`` writes the run folder ``dpcare train`` writes, and ``DPClassifier.load`` reads either.

Tuning is a release. Scores of a private model on private rows (``score``, as GridSearchCV and cross_val_score
call it) are statistics of those rows; a model whose settings were picked by them carries a guarantee that
does not count the picking. The estimator keeps a fingerprint of every private row it scored in this process:
a later ``fit`` on any of those rows says so in its guarantee (a release outside epsilon) and warns.
``DPClassifier(tune={"alpha": [1, 5], "lr": [1e-3, 1e-2]})`` is the counted alternative
(:func:`dpcare.tabular.tuning.tune`): every candidate and the choice are inside epsilon.
"""

from __future__ import annotations

import os
import warnings
from dataclasses import fields, replace
from pathlib import Path

import numpy as np
import pandas as pd
from sklearn.base import BaseEstimator, ClassifierMixin
from sklearn.metrics import accuracy_score

from dpcare.data import TableSchema, load_spec, read_table
from dpcare.data.tables import category_text
from dpcare.exceptions import DataError, NotFittedError, SettingsError, SpecError
from dpcare.settings import ComputeSettings, DPSettings
from dpcare.tabular.recipe import TabularModel, TabularSettings, fit

Table = pd.DataFrame | str | os.PathLike
_DP = DPSettings()
_REC = TabularSettings()
#: the recipe's own settings (the rest of the parameters are DPSettings')
_RECIPE_FIELDS = tuple(f.name for f in fields(TabularSettings) if f.name not in ("dp", "compute"))
_DP_FIELDS = tuple(f.name for f in fields(DPSettings) if f.name != "unit")
#: fingerprints of the private rows a private model was scored on in this process (see the module docstring)
_SCORED_ROWS: set[int] = set()
SELECTION_NOTE = ("hyperparameter selection: {rows} of the training rows were scored (score(), as GridSearchCV and "
                  "cross_val_score call it) by an earlier private model in this process; if these settings were "
                  "chosen by those scores, that choice is a release outside epsilon (DPClassifier(tune=...) counts it)")


class SelectionWarning(UserWarning):
    """A private model trained on rows that earlier private models were scored on: a search on private data."""


def _row_fingerprints(frame: pd.DataFrame) -> np.ndarray:
    """One 64-bit hash per row over its values, in a column order that does not depend on the caller's."""
    return pd.util.hash_pandas_object(frame[sorted(frame.columns)], index=False).to_numpy()


class DPClassifier(ClassifierMixin, BaseEstimator):
    """A differentially private tabular classifier.

    ``schema``: the table's privacy spec (a TableSchema or a YAML/JSON path), or give it to ``fit``. Other
    parameters are the fields of :class:`~dpcare.tabular.TabularSettings` (method "feature-dp", "dp-sgd",
    "label-dp", "non-private" or a fusion method; hidden, lr, alpha, beta, pad, ...) and of its
    :class:`~dpcare.settings.DPSettings` (epsilon, delta, accountant, clip_norm, adaptive_clip, batch_size,
    epochs, steps, seed), with the same names and defaults, plus ``holdout``: True trains as ``dpcare train``
    does, on a random 80% of the rows, and keeps validation / test AUPRC and AUROC of the rest in
    ``result_.metrics``; False trains on every row (no metrics). ``checkpoint_dir`` and ``progress`` do not
    change the result; ``device`` and ``precision`` say where it trains (:class:`~dpcare.settings.ComputeSettings`).
    ``tune``: a grid ({"alpha": [1, 5], ...}) tuned privately, every candidate and the choice inside epsilon
    (``selection_share`` of it on the choice; :func:`dpcare.tabular.tuning.tune`).

    Fitted attributes: ``model_`` (the torch MLP), ``encoder_`` (the fitted TableEncoder), ``classes_`` (the
    target's categories as text), ``guarantee_`` (the run's :class:`~dpcare.privacy.Guarantee`; None when
    non-private), ``result_`` (the :class:`~dpcare.tabular.TabularModel`), ``feature_names_in_``.
    """

    def __init__(self, schema=None, method=_REC.method, epsilon=_DP.epsilon, delta=_DP.delta, epochs=_REC.dp.epochs,
                 batch_size=_REC.dp.batch_size, clip_norm=_DP.clip_norm, adaptive_clip=_DP.adaptive_clip,
                 alpha=_REC.alpha, beta=_REC.beta, lr=_REC.lr, hidden=_REC.hidden, pad=_REC.pad,
                 public_batch_size=_REC.public_batch_size, public_pretrain_steps=_REC.public_pretrain_steps,
                 stats_epsilon=_REC.stats_epsilon, imputer=_REC.imputer, accountant=_DP.accountant, steps=_DP.steps,
                 seed=_DP.seed, checkpoint_dir=None, progress=True, holdout=True, tune=None, selection_share=0.1,
                 device="auto", precision="fp32"):
        params = dict(locals())  # scikit-learn: store every parameter unchanged
        del params["self"]
        vars(self).update(params)

    def __getattr__(self, name: str):
        if name.endswith("_") and not name.startswith("_"):
            raise NotFittedError(f"this {type(self).__name__} is not fitted: call fit() or load() first "
                                 f"(it has no {name} yet)")
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def settings(self) -> TabularSettings:
        """The recipe settings these parameters describe (validated: a bad value names the parameter)."""
        p = self.get_params()
        dp = DPSettings(**{k: p[k] for k in _DP_FIELDS})
        return TabularSettings(**{k: p[k] for k in _RECIPE_FIELDS}, dp=dp,
                               compute=ComputeSettings(device=p["device"], precision=p["precision"]))

    # ------------------------------------------------------------------ fitting
    def fit(self, X: Table, y=None, schema: TableSchema | str | os.PathLike | None = None, public_data: Table | None = None,
            imputer=None) -> DPClassifier:
        """Train on ``X`` (a DataFrame or a CSV/Parquet path) with its privacy spec; returns self.

        scikit-learn style: ``fit(X, y)`` with the features in ``X`` and the target in ``y`` (a Series or
        array), or ``fit(df)`` with the target column inside ``df``. The spec (a TableSchema or a YAML/JSON
        path) comes from ``schema=`` here, the ``schema`` parameter of the constructor, or - for code written
        before - the second positional argument (``fit(df, schema)``); it cannot be inferred, since which
        columns are private and their public bounds are not a property of the data. Fusion methods take
        ``public_data`` (a public support table) or a fitted ``imputer``."""
        if isinstance(y, (TableSchema, str, os.PathLike)):  # fit(df, schema): the original signature
            schema, y = y, None
        spec = _spec(schema if schema is not None else self.schema)
        frame = read_table(X)
        if y is not None:
            frame = _with_target(frame, y, spec)
        if self.tune:
            if not self.holdout:
                raise SettingsError("tune= picks among candidates on the validation rows: it needs holdout=True")
            from dpcare.tabular.tuning import tune

            fitted = tune(frame, spec, self.settings(), self.tune, self.selection_share, progress=self.progress,
                          public_data=public_data, imputer=imputer)
        else:
            fitted = fit(frame, spec, self.settings(), holdout=bool(self.holdout), public_data=public_data,
                         imputer=imputer, checkpoint_dir=self.checkpoint_dir, progress=self.progress)
        return self._set_fitted(_note_selection(fitted, frame))

    def _set_fitted(self, fitted: TabularModel) -> DPClassifier:
        schema = fitted.schema
        self.model_, self.encoder_, self.result_ = fitted.model, fitted.encoder, fitted
        self.guarantee_ = fitted.guarantee
        self.classes_ = np.array(fitted.classes, dtype=object)
        self.feature_names_in_ = np.array(schema.feature_columns, dtype=object)
        return self

    # ------------------------------------------------------------------ prediction
    def predict_proba(self, df: Table) -> np.ndarray:
        """Class probabilities, shape [rows, len(classes_)], columns in the order of ``classes_``."""
        return self.result_.predict_proba(df)

    def predict(self, df: Table) -> np.ndarray:
        """The most probable class of each row (as text, like ``classes_``)."""
        return self.classes_[self.predict_proba(df).argmax(axis=1)]

    def score(self, df: Table, y=None, sample_weight=None) -> float:
        """Accuracy; ``y`` defaults to the target column of ``df`` (labels compared as category text)."""
        target = self.encoder_.schema.target
        frame = read_table(df)
        if y is None and target not in frame.columns:
            raise DataError(f"score() needs the true labels: pass y, or a table with the target column '{target}'")
        truth = frame[target] if y is None else pd.Series(np.asarray(y))
        if len(truth) != len(frame):
            raise DataError(f"y has {len(truth)} labels for {len(frame)} rows")
        if self.guarantee_ is not None:  # a statistic of these (private) rows: remembered, see the module docstring
            labelled = frame if y is None or target in frame.columns else _with_target(frame, y, self.encoder_.schema)
            _SCORED_ROWS.update(_row_fingerprints(labelled).tolist())
        return float(accuracy_score(truth.map(category_text), self.predict(frame), sample_weight=sample_weight))

    # ------------------------------------------------------------------ persistence
    def save(self, folder: str | os.PathLike, force: bool = False) -> Path:
        """Write the run folder of ``dpcare train`` (refused if ``folder`` is not empty, unless ``force``)."""
        return self.result_.save(folder, force=force)

    @classmethod
    def load(cls, folder: str | os.PathLike) -> DPClassifier:
        """A fitted classifier from ``save`` or a ``dpcare train`` run folder."""
        fitted = TabularModel.load(folder)
        s = fitted.settings
        params = {**{k: getattr(s, k) for k in _RECIPE_FIELDS}, **{k: getattr(s.dp, k) for k in _DP_FIELDS},
                  "device": s.compute.device, "precision": s.compute.precision}
        names = cls._get_param_names()
        return cls(schema=fitted.schema, **{k: v for k, v in params.items() if k in names})._set_fitted(fitted)


def _note_selection(fitted: TabularModel, frame: pd.DataFrame) -> TabularModel:
    """``fitted`` with its guarantee naming a search on private scores, if any of ``frame``'s rows were scored."""
    if fitted.ledger is None or not _SCORED_ROWS:
        return fitted
    seen = int(np.isin(_row_fingerprints(frame), np.fromiter(_SCORED_ROWS, dtype=np.uint64)).sum())
    if not seen:
        return fitted
    note = SELECTION_NOTE.format(rows=seen)
    warnings.warn(note, SelectionWarning, stacklevel=3)
    fitted.ledger.note_uncounted(note)
    return replace(fitted, guarantee=fitted.ledger.guarantee())


def _spec(schema) -> TableSchema:
    if schema is None:
        raise SpecError("DPClassifier needs the table's privacy spec: DPClassifier(schema=...) or fit(X, y, "
                        "schema=...) with a TableSchema or a YAML/JSON spec file; it cannot be inferred, since which "
                        "columns are private and their public bounds and categories are not properties of the data "
                        "(`dpcare datasets --export support2` writes an example spec)")
    return schema if isinstance(schema, TableSchema) else load_spec(schema)


def _with_target(frame: pd.DataFrame, y, spec: TableSchema) -> pd.DataFrame:
    """The features with the target column ``y`` added (its name from the spec)."""
    values = np.asarray(y)
    if values.ndim != 1 or len(values) != len(frame):
        raise DataError(f"y must hold one label per row of X: {len(frame)} rows, got shape {values.shape}")
    if spec.target in frame.columns:
        raise DataError(f"X already holds the target column '{spec.target}' and y was given too: pass one")
    return frame.assign(**{spec.target: values})

