"""``DPClassifier``: the tabular recipe (:mod:`dpcare.tabular`) as a scikit-learn style estimator.

``DPClassifier(method="feature-dp", epsilon=1.0).fit(df, schema)`` trains the MLP with the chosen
method; ``predict_proba(df)`` / ``predict(df)`` need the feature columns only (never the target);
``save(folder)`` writes the run folder ``dpcare train`` writes, and ``DPClassifier.load`` reads either.

Tuning is a release. Scores of a private model on private rows (``score``, or any ``scoring=`` of GridSearchCV
and cross_val_score) are statistics of those rows; a model whose settings were picked by them carries a
guarantee that does not count the picking. The estimator keeps, in this process, a fingerprint of every
private row that was scored, and a later ``fit`` on any of those rows says so in its guarantee (a release
outside epsilon) and warns (:class:`SelectionWarning`). Rows get there three ways:

* ``score()`` of a private model remembers the rows it scored (in the process that scores: with ``n_jobs > 1``
  that is a worker, whose memory the caller never sees);
* a private ``DPClassifier`` constructed inside a scikit-learn model-selection call (GridSearchCV,
  RandomizedSearchCV, cross_val_score, cross_validate, validation_curve...: they ``clone`` the estimator in the
  CALLING process before sending the clones to workers) remembers every row of that call's ``X``, found on
  the call stack - whatever ``scoring=`` (a string scorer calls ``predict_proba``, never ``score``) and
  whatever ``n_jobs``;
* a ``fit`` called from inside a search's own ``fit`` (the refit of ``best_estimator_``) is named in the note
  even when its rows do not match (a Pipeline that transforms the columns first).

Limits: the mechanism sees one process (a search run in another process or a notebook restarted between the
search and the fit is not seen); rows are matched by the values of the spec's columns (or all of ``X``'s columns
when the search's estimator has no spec yet), so rows changed in between (rounded, re-encoded) are not matched;
scores computed by hand from ``predict_proba`` outside scikit-learn's model selection are not seen; searches
of non-private models are not recorded. ``DPClassifier(tune={"alpha": [1, 5], "lr": [1e-3, 1e-2]})`` is the
counted alternative (:func:`dpcare.tabular.tuning.tune`): every candidate and the choice are inside epsilon.
"""

from __future__ import annotations

import json
import math
import os
import sys
import warnings
import weakref
from dataclasses import fields, replace
from pathlib import Path

import numpy as np
import pandas as pd
from sklearn.base import BaseEstimator, ClassifierMixin
from sklearn.metrics import accuracy_score

from dpcare.caller import user_stacklevel
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
#: fingerprints of the private rows scored by private models in this process (see the module docstring), keyed
#: by (the sorted columns hashed, what scored them)
_SCORED_ROWS: dict[tuple[tuple[str, ...], str], set[int]] = {}
#: the last model-selection call whose X was remembered (the clones of one search remember its X once)
_LAST_MARK: tuple = (None, None)
SELECTION_NOTE = ("hyperparameter selection: {what}; if these settings were chosen by those scores, that choice is a "
                  "release outside epsilon (DPClassifier(tune=...) counts it)")


class SelectionWarning(UserWarning):
    """A private model trained on rows that earlier private models were scored on: a search on private data."""


def _canonical(v) -> str:
    """A value as text that is the same for equal values of any type: lists, dicts and other unhashable values
    as sorted JSON (repr where JSON cannot say it), missing values as one marker, 1.0 as 1 (category_text)."""
    if isinstance(v, (list, tuple, dict, set, frozenset, np.ndarray)):
        try:
            return json.dumps(sorted(v, key=repr) if isinstance(v, (set, frozenset)) else v, sort_keys=True,
                              default=lambda o: o.tolist() if isinstance(o, np.ndarray) else repr(o))
        except (TypeError, ValueError):  # mixed-type dict keys, circular containers
            return repr(v)
    if v is None or v is pd.NA or v is pd.NaT or (isinstance(v, float) and math.isnan(v)):
        return "\0missing"
    return category_text(v)


def _row_fingerprints(frame: pd.DataFrame, columns=None) -> np.ndarray:
    """One 64-bit hash per row over the values of ``columns`` (default: all), in an order that does not depend
    on the caller's; object and category columns are hashed through their canonical text, so columns of lists,
    dicts or mixed types hash too."""
    cols = sorted(frame.columns if columns is None else columns, key=str)
    canon = {}
    for c in cols:
        col = frame[c].reset_index(drop=True)
        text = col.dtype == object or isinstance(col.dtype, (pd.CategoricalDtype, pd.StringDtype))
        canon[str(c)] = col.astype(object).map(_canonical).astype(object) if text else col
    try:
        return pd.util.hash_pandas_object(pd.DataFrame(canon, index=range(len(frame))), index=False).to_numpy()
    except TypeError as err:  # a column type pandas cannot hash even as text (not seen in practice)
        raise DataError(f"cannot fingerprint the rows of columns {cols} to detect a search on private scores: {err}") \
            from None


def _spec_columns(frame: pd.DataFrame, spec: TableSchema | None) -> list:
    """The columns of ``frame`` the spec uses (features and target); every column when there is no spec."""
    if spec is None:
        return list(frame.columns)
    return [c for c in (*spec.feature_columns, spec.target) if c in frame.columns]


def _remember(frame: pd.DataFrame, spec: TableSchema | None, how: str) -> None:
    cols = _spec_columns(frame, spec)
    if cols and len(frame):
        key = (tuple(sorted(map(str, cols))), how)
        _SCORED_ROWS.setdefault(key, set()).update(_row_fingerprints(frame, cols).tolist())


def _seen(frame: pd.DataFrame) -> tuple[int, list[str]]:
    """How many of ``frame``'s rows were scored, and by what."""
    hit, hows = np.zeros(len(frame), dtype=bool), []
    by_name = {str(c): c for c in frame.columns}
    for (cols, how), rows in _SCORED_ROWS.items():
        if rows and set(cols) <= set(by_name):
            mask = np.isin(_row_fingerprints(frame, [by_name[c] for c in cols]), np.fromiter(rows, dtype=np.uint64))
            if mask.any():
                hit |= mask
                hows.append(how)
    return int(hit.sum()), sorted(set(hows))


def _model_selection_call():
    """The outermost scikit-learn model-selection call on the stack that was given an ``X`` (its name and its X)
    and the innermost search on the stack (an object with ``_run_search``, as GridSearchCV: "GridSearchCV.fit"),
    or None for each."""
    found, search, f = None, None, sys._getframe(1)
    while f is not None:
        if f.f_globals.get("__name__", "").startswith("sklearn.model_selection"):
            loc = f.f_locals
            owner = loc.get("self")
            if "X" in loc and f.f_code.co_name != "<genexpr>":
                is_search = owner is not None and callable(getattr(owner, "_run_search", None))
                name = f"{type(owner).__name__}.fit" if is_search else f.f_code.co_name
                found = (name, loc["X"])
                search = search or (name if is_search else None)
        f = f.f_back
    return found, search


def _remember_search_rows(est: DPClassifier) -> None:
    """A private DPClassifier built (cloned) inside a scikit-learn model-selection call: remember every row of
    that call's X as scored (the clones' scores may be computed in other processes or by scorer strings)."""
    global _LAST_MARK
    if est.method == "non-private":
        return
    call, _ = _model_selection_call()
    if call is None or not isinstance(call[1], pd.DataFrame):
        return
    name, X = call
    last, last_name = _LAST_MARK
    if last is not None and last() is X and last_name == name:
        return  # this call's rows are remembered already (one clone per candidate and fold)
    _remember(X, est.schema if isinstance(est.schema, TableSchema) else None, f"the private models of {name}")
    _LAST_MARK = (weakref.ref(X), name)


class DPClassifier(ClassifierMixin, BaseEstimator):
    """A differentially private tabular classifier.

    ``schema``: the table's privacy spec (a TableSchema or a YAML/JSON path), or give it to ``fit``. Other
    parameters are the fields of :class:`~dpcare.tabular.TabularSettings` (method "feature-dp", "dp-sgd",
    "label-dp", "non-private" or a fusion method; hidden, lr, alpha, beta, pad, ...) and of its
    :class:`~dpcare.settings.DPSettings` (epsilon, delta, accountant, clip_norm, adaptive_clip, batch_size,
    epochs, steps, seed, noise_seed: None draws the noise from fresh OS entropy), with the same names and defaults, plus ``holdout``: True trains as ``dpcare train``
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
                 seed=_DP.seed, noise_seed=_DP.noise_seed, checkpoint_dir=None, progress=True, holdout=True, tune=None,
                 selection_share=0.1,
                 device="auto", precision="fp32"):
        params = dict(locals())  # scikit-learn: store every parameter unchanged
        del params["self"]
        vars(self).update(params)
        _remember_search_rows(self)  # a clone made by GridSearchCV & co. (module docstring)

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
        return self._set_fitted(_note_selection(fitted, frame, spec))

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
            _remember(labelled, self.encoder_.schema, "score()")
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


def _note_selection(fitted: TabularModel, frame: pd.DataFrame, spec: TableSchema) -> TabularModel:
    """``fitted`` with its guarantee naming a search on private scores: some of ``frame``'s rows were scored, or
    this fit runs inside a search's own fit (its refit)."""
    if fitted.ledger is None:
        return fitted
    _, search = _model_selection_call()
    seen, hows = _seen(frame)
    if not seen and search is None:
        return fitted
    what = []
    if seen:
        what.append(f"{seen} of the training rows were scored by earlier private models in this process "
                    f"({', '.join(hows)})")
    if search is not None:
        what.append(f"this model was fitted inside scikit-learn's {search}, which picks settings by scores on its data")
    note = SELECTION_NOTE.format(what="; ".join(what))
    warnings.warn(note, SelectionWarning, stacklevel=user_stacklevel())
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

