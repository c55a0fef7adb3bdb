"""``DPClassifier``: the tabular recipe (:mod:`dpcare.tabular`) as a scikit-learn estimator.

``DPClassifier(method="feature-dp", epsilon=1.0).fit(df, schema)`` trains the MLP with the chosen
method; ``predict_proba(df)`` / ``predict(df)`` need the feature columns only (never the target);
``save(folder)`` writes the run folder ``dpcare train`` writes, and ``DPClassifier.load`` reads either.

Inputs follow scikit-learn. With a spec, ``X`` is a DataFrame (or a CSV/Parquet path) whose columns are found by
name, or a 2-D array whose columns are the spec's feature columns in the spec's order; the declared bounds are in
the columns' own units, so a fit where a numeric column lies mostly outside them (what a scaler in a Pipeline
before the estimator gives: standardised ages are not in [18, 100]) is refused with a message saying so; dpcare
scales by the declared bounds itself. Without a spec, ``method="dp-sgd"`` (or "non-private") trains on every
column of a numeric ``X`` as given: DP-SGD's per-example gradient clipping bounds each row's influence whatever
the scale, so no statistic of the rows is read for scaling (scale by public constants, or write a spec with
bounds, for a better model); ``classes=`` declares the labels (read from ``y`` otherwise, which the guarantee
names as a release outside epsilon). Sparse input is refused (``DataError``, "sparse").
:meth:`DPClassifier._expected_failed_checks` lists the scikit-learn ``check_estimator`` checks that cannot pass
under DP, each with its reason (scikit-learn >= 1.6 takes them as ``expected_failed_checks=``).

Tuning is a release. Scores of a private model on private rows (``score``, or any ``scoring=`` of GridSearchCV
and cross_val_score) are statistics of those rows; a model whose settings were picked by them carries a
guarantee that does not count the picking. It is recorded (in the guarantee's list of releases outside epsilon,
with a :class:`SelectionWarning`) three ways, none of which looks at the call stack:

* ``score()`` of a private model remembers, in this process, a fingerprint of every row it scored, and a later
  ``fit`` on any of those rows says so (a search with the default ``scoring=None`` and ``n_jobs=1`` is seen);
* ``DPClassifier(selection="lr picked by 5-fold CV")`` declares a selection made elsewhere (another process, a
  scorer string, by hand): every fit names it;
* :class:`RecordedSearch` (``RecordedSearch(GridSearchCV(DPClassifier(...), grid))``) runs any scikit-learn search
  with ``selection=`` set on every DPClassifier inside it (so the clones in worker processes and the refit of
  ``best_estimator_`` carry it, whatever ``scoring=`` and ``n_jobs``), and remembers the rows of its ``X`` so a
  model fitted by hand on the settings it picked is seen too.

Limits: fingerprints live in one process; rows are matched by the values of the spec's columns (all columns
without a spec), so rows changed in between are not matched; a search that is neither wrapped nor declared,
and whose scores are not computed by ``score()`` in this process, is not seen.
``DPClassifier(tune={"alpha": [1, 5], "lr": [1e-3, 1e-2]})`` is the counted alternative
(:func:`dpcare.tabular.tuning.tune`): every candidate and the choice are inside epsilon.
"""

from __future__ import annotations

import json
import math
import os
import warnings
from dataclasses import fields, replace
from pathlib import Path

import numpy as np
import pandas as pd
from sklearn.base import BaseEstimator, ClassifierMixin, MetaEstimatorMixin, clone
from sklearn.exceptions import NotFittedError as SklearnNotFittedError
from sklearn.metrics import accuracy_score
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import validate_data

from dpcare.caller import user_stacklevel
from dpcare.data import TableSchema, load_spec, read_table
from dpcare.data.tables import category_text
from dpcare.exceptions import DataError, SettingsError, SpecError
from dpcare.exceptions import NotFittedError as DPCareNotFittedError
from dpcare.settings import ComputeSettings, DPSettings
from dpcare.tabular.recipe import TabularModel, TabularSettings, fit

Table = pd.DataFrame | np.ndarray | str | os.PathLike
_DP = DPSettings()
_REC = TabularSettings()
#: the recipe's own settings (the rest of the parameters are DPSettings')
_RECIPE_FIELDS = tuple(f.name for f in fields(TabularSettings) if f.name not in ("dp", "compute"))
_DP_FIELDS = tuple(f.name for f in fields(DPSettings) if f.name != "unit")
#: fingerprints of the private rows scored by private models in this process (see the module docstring), keyed
#: by (the sorted columns hashed, what scored them)
_SCORED_ROWS: dict[tuple[tuple[str, ...], str], set[int]] = {}
SELECTION_NOTE = ("hyperparameter selection: {what}; if these settings were chosen by those scores, that choice is a "
                  "release outside epsilon (DPClassifier(tune=...) counts it)")
#: the label column of a spec-less fit's fingerprints
_Y = "\0y"
#: methods that need no spec (every column and the label protected, or nothing)
SPECLESS_METHODS = ("dp-sgd", "non-private")


class NotFittedError(DPCareNotFittedError, SklearnNotFittedError):
    """Used before ``fit``: dpcare's :class:`~dpcare.exceptions.NotFittedError` and scikit-learn's."""


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


def _selection_note(frame: pd.DataFrame, selection: str | None) -> str | None:
    """The guarantee's note on a search on private scores: rows of ``frame`` that were scored, a declared
    ``selection``; None when there is neither."""
    seen, hows = _seen(frame)
    what = []
    if seen:
        what.append(f"{seen} of the training rows were scored by earlier private models in this process "
                    f"({', '.join(hows)})")
    if selection:
        what.append(f"declared: {selection}")
    if not what:
        return None
    note = SELECTION_NOTE.format(what="; ".join(what))
    warnings.warn(note, SelectionWarning, stacklevel=user_stacklevel())
    return note


class DPClassifier(ClassifierMixin, BaseEstimator):
    """A differentially private tabular classifier.

    ``schema``: the table's privacy spec (a TableSchema or a YAML/JSON path), or give it to ``fit``; without one,
    ``method`` "dp-sgd" or "non-private" train on every column of a numeric ``X`` as given (module docstring).
    Other parameters are the fields of :class:`~dpcare.tabular.TabularSettings` (method "feature-dp", "dp-sgd",
    "label-dp", "non-private" or a fusion method; hidden, lr, alpha, beta, pad, ...) and of its
    :class:`~dpcare.settings.DPSettings` (epsilon, delta, accountant, clip_norm, adaptive_clip, batch_size,
    epochs, steps, seed, noise_seed: None draws the noise from fresh OS entropy), with the same names and
    defaults, plus ``holdout``: True trains as ``dpcare train`` does, on a random 80% of the rows (the rest:
    ``validation_share`` and ``test_share``), and keeps validation / test AUPRC and AUROC in ``result_.metrics``; False trains on every row (no
    metrics); None (the default) is True with a spec and False without one (scikit-learn's convention: score
    held-out rows yourself). ``checkpoint_dir`` and ``progress`` do not change the result; ``device`` and
    ``precision`` say where it trains (:class:`~dpcare.settings.ComputeSettings`). ``tune``: a grid
    ({"alpha": [1, 5], ...}) tuned privately, every candidate and the choice inside epsilon (``selection_share``
    of it on the choice; :func:`dpcare.tabular.tuning.tune`). ``selection``: text declaring that these settings
    were picked by scores on the private rows (the guarantee lists it outside epsilon; :class:`RecordedSearch`
    sets it). ``classes``: without a spec, the labels y may take, from public knowledge (None: read from y, a
    release the guarantee names).

    Parameters are checked by ``fit``, not by the constructor or ``set_params`` (scikit-learn's convention).
    Fitted attributes: ``model_`` (the torch MLP), ``classes_`` (the spec's target categories as text; without a
    spec the labels of y), ``guarantee_`` (the run's :class:`~dpcare.privacy.Guarantee`; None when
    non-private), ``result_`` (the :class:`~dpcare.tabular.TabularModel`; without a spec the engine's
    TrainResult), ``encoder_`` (with a spec: the fitted TableEncoder), ``n_features_in_`` and
    ``feature_names_in_`` (the spec's feature columns, or X's column names).
    """

    def __init__(self, schema=None, method=_REC.method, epsilon=_DP.epsilon, delta=_DP.delta, epochs=_REC.dp.epochs,
                 batch_size=_REC.dp.batch_size, clip_norm=_DP.clip_norm, adaptive_clip=_DP.adaptive_clip,
                 alpha=_REC.alpha, beta=_REC.beta, lr=_REC.lr, hidden=_REC.hidden, pad=_REC.pad,
                 public_batch_size=_REC.public_batch_size, public_pretrain_steps=_REC.public_pretrain_steps,
                 stats_epsilon=_REC.stats_epsilon, imputer=_REC.imputer, accountant=_DP.accountant, steps=_DP.steps,
                 seed=_DP.seed, noise_seed=_DP.noise_seed, checkpoint_dir=None, progress=True, holdout=None,
                 validation_share=_REC.validation_share, test_share=_REC.test_share, tune=None, selection_share=0.1, selection=None, classes=None,
                 device="auto", precision="fp32"):
        params = dict(locals())  # scikit-learn: store every parameter unchanged, check nothing
        del params["self"]
        vars(self).update(params)

    def __getattr__(self, name: str):
        if name.endswith("_") and not name.startswith("_"):
            raise NotFittedError(f"this {type(self).__name__} is not fitted: call fit() or load() first "
                                 f"(it has no {name} yet)")
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def __sklearn_is_fitted__(self) -> bool:
        return "model_" in vars(self)

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.allow_nan = False  # nullable columns need a spec (their declared fill and flag)
        tags.input_tags.sparse = False
        tags.classifier_tags.poor_score = True  # noisy by design: no fixed accuracy threshold
        tags.classifier_tags.multi_class = self.schema is None  # the tabular recipe is binary
        tags.non_deterministic = self.noise_seed is None and self.method != "non-private"
        return tags

    def _expected_failed_checks(self) -> dict[str, str]:
        """The scikit-learn ``check_estimator`` checks that cannot pass under DP, with the reason: pass it as
        ``check_estimator(est, expected_failed_checks=est._expected_failed_checks())`` (or to
        ``parametrize_with_checks``). scikit-learn >= 1.6 has no tag for them; this is where they are kept."""
        failing = {}
        if self.method != "non-private" and self.noise_seed is None:
            why = ("each fit draws fresh DP noise from OS entropy (noise_seed=None, the secure default): two fits on "
                   "the same data differ by design (their predictions may still agree by chance); with an integer "
                   "noise_seed the check passes")
            for check in ("check_fit_idempotent", "check_supervised_y_2d", "check_classifier_data_not_an_array"):
                # each compares the predictions of two fits; on check_estimator's small, easy data the two noisy
                # models can predict the same labels, so a check may pass by chance (pytest's XPASS, not a fault)
                failing[check] = why
        return failing

    def settings(self) -> TabularSettings:
        """The recipe settings these parameters describe (validated: a bad value names the parameter)."""
        p = self.get_params()
        dp = DPSettings(**{k: p[k] for k in _DP_FIELDS})
        return TabularSettings(**{k: p[k] for k in _RECIPE_FIELDS}, dp=dp,
                               compute=ComputeSettings(device=p["device"], precision=p["precision"]))

    # ------------------------------------------------------------------ fitting
    def fit(self, X: Table, y=None, schema: TableSchema | str | os.PathLike | None = None, public_data: Table | None = None,
            imputer=None) -> DPClassifier:
        """Train on ``X`` with its privacy spec; returns self.

        scikit-learn style: ``fit(X, y)`` with the features in ``X`` (a DataFrame, a CSV/Parquet path, or a 2-D
        array whose columns are the spec's feature columns in order) and the target in ``y``, or ``fit(df)`` with
        the target column inside ``df``. The spec (a TableSchema or a YAML/JSON path) comes from ``schema=`` here,
        the ``schema`` parameter of the constructor, or - for code written before - the second positional
        argument (``fit(df, schema)``). Without a spec, DP-SGD (or non-private training) on every column of a
        numeric X (module docstring). Fusion methods take ``public_data`` (a public support table) or a fitted
        ``imputer``."""
        if isinstance(y, (TableSchema, str, os.PathLike)):  # fit(df, schema): the original signature
            schema, y = y, None
        if self.selection is not None and not (isinstance(self.selection, str) and self.selection.strip()):
            raise SettingsError(f"selection must be None or a text saying how the settings were picked, got "
                                f"{self.selection!r}")
        _refuse_sparse(X)
        given = schema if schema is not None else self.schema
        if given is None:
            return self._fit_without_spec(X, y, public_data, imputer)
        spec = _spec(given)
        if self.classes is not None:
            raise SettingsError("classes= is for a fit without a spec: the spec declares the target's categories")
        frame = _spec_frame(X, spec, with_target=y is None)
        if y is not None:
            frame = _with_target(frame, y, spec)
        holdout = True if self.holdout is None else bool(self.holdout)
        if self.tune:
            if not holdout:
                raise SettingsError("tune= picks among candidates on the validation rows: it needs holdout=True")
            from dpcare.tabular.tuning import tune

            fitted = tune(frame, spec, self.settings(), self.tune, self.selection_share, progress=self.progress,
                          public_data=public_data, imputer=imputer)
        else:
            fitted = fit(frame, spec, self.settings(), holdout=holdout, public_data=public_data,
                         imputer=imputer, checkpoint_dir=self.checkpoint_dir, progress=self.progress)
        if fitted.ledger is not None:
            note = _selection_note(frame, self.selection)
            if note is not None:
                fitted.ledger.note_uncounted(note)
                fitted = replace(fitted, guarantee=fitted.ledger.guarantee())
        return self._set_fitted(fitted)

    def _set_fitted(self, fitted: TabularModel) -> DPClassifier:
        schema = fitted.schema
        self.model_, self.encoder_, self.result_ = fitted.model, fitted.encoder, fitted
        self.guarantee_ = fitted.guarantee
        self.classes_ = np.array(fitted.classes, dtype=object)
        self.feature_names_in_ = np.array(schema.feature_columns, dtype=object)
        self.n_features_in_ = len(schema.feature_columns)
        return self

    def _fit_without_spec(self, X, y, public_data, imputer) -> DPClassifier:
        """DP-SGD (or non-private training) on every column of X as given: no statistic of the rows is read."""
        import torch

        from dpcare.engine import TrainConfig, Trainer
        from dpcare.models import TabularMLP
        from dpcare.privacy import PrivacyLedger, ProtectedUnit
        from dpcare.tabular.recipe import METHODS

        settings = self.settings()
        if settings.method not in SPECLESS_METHODS:
            raise SpecError(f"method {settings.method} needs the table's privacy spec (which columns are private, their "
                            f"public bounds and categories): DPClassifier(schema=...) or fit(X, y, schema=...); "
                            f"without a spec use {' or '.join(SPECLESS_METHODS)}")
        refused = {"tune": bool(self.tune), "stats_epsilon": settings.stats_epsilon is not None,
                   "public_data": public_data is not None, "imputer": imputer is not None, "holdout": bool(self.holdout)}
        given = [k for k, v in refused.items() if v]
        if given:
            raise SettingsError(f"{', '.join(given)} need(s) a spec: without one DPClassifier trains on every row and "
                                "column of X as given (give schema=, or leave these unset)")
        if y is None:
            raise DataError("DPClassifier requires y to be passed, but the target y is None: without a spec no "
                            "column of X is named as the target (fit(X, y), or give schema=)")
        with _as_data_error():
            x, labels = validate_data(self, X, y, dtype=np.float32, accept_sparse=False, y_numeric=False)
            check_classification_targets(labels)
        classes, declared = self._classes(labels)
        n = len(x)
        torch.manual_seed(settings.dp.seed)
        model = TabularMLP(x.shape[1], hidden=settings.hidden, out_features=1 if len(classes) == 2 else len(classes))
        objective = METHODS.get(settings.method).objective(settings)
        ledger = None
        if objective.private:
            ledger = PrivacyLedger(n, delta=settings.dp.delta, accountant=settings.dp.accountant,
                                   unit=ProtectedUnit.EXAMPLE,
                                   declared=("the class labels given as classes=",) if declared else ())
        index = np.searchsorted(classes, labels)
        target = torch.from_numpy(index.astype(np.float32 if len(classes) == 2 else np.int64))
        config = TrainConfig(dp=settings.dp, compute=settings.compute, lr=settings.lr,
                             checkpoint_dir=self.checkpoint_dir, progress=self.progress)
        result = Trainer(model, objective, config, ledger=ledger).fit({"x": torch.from_numpy(x), "y": target})
        if ledger is not None:
            if not declared:
                ledger.note_uncounted(f"the label set {[_label(c) for c in classes]} was read from the training "
                                      "labels (declare classes= to keep it inside the guarantee)")
            frame = _positional_frame(x, labels)
            note = _selection_note(frame, self.selection)
            if note is not None:
                ledger.note_uncounted(note)
            result = replace(result, guarantee=ledger.guarantee())
        model.eval()
        self.model_, self.result_, self.guarantee_, self.classes_ = model, result, result.guarantee, classes
        return self

    def _classes(self, labels: np.ndarray) -> tuple[np.ndarray, bool]:
        """The sorted label set (declared in ``classes=`` or read from y) and whether it was declared."""
        seen = np.unique(labels)
        if self.classes is None:
            if len(seen) < 2:
                raise DataError(f"y holds one class ({_label(seen[0])}): without a spec or classes= the labels "
                                "cannot be known; declare classes=[...] (the labels y may take)")
            return seen, False
        declared = np.unique(np.asarray(list(self.classes)))
        if len(declared) < 2 or len(declared) != len(list(self.classes)):
            raise SettingsError(f"classes must list two or more distinct labels, got {self.classes!r}")
        outside = np.setdiff1d(seen, declared)
        if len(outside):
            raise DataError(f"y holds labels {[_label(c) for c in outside[:5]]} outside classes={list(self.classes)}")
        return declared, True

    # ------------------------------------------------------------------ prediction
    def _check_fitted(self) -> None:
        if not self.__sklearn_is_fitted__():
            raise NotFittedError(f"this {type(self).__name__} is not fitted: call fit() or load() first")

    def predict_proba(self, X: Table) -> np.ndarray:
        """Class probabilities, shape [rows, len(classes_)], columns in the order of ``classes_``."""
        self._check_fitted()
        _refuse_sparse(X)
        if "encoder_" in vars(self):
            return self.result_.predict_proba(_spec_frame(X, self.encoder_.schema, with_target=False))
        import torch

        from dpcare.tabular.recipe import probabilities

        with _as_data_error():
            x = validate_data(self, X, dtype=np.float32, accept_sparse=False, reset=False)
        return probabilities(self.model_, torch.from_numpy(x))

    def predict(self, X: Table) -> np.ndarray:
        """The most probable class of each row (one of ``classes_``: the spec's categories as text)."""
        return self.classes_[self.predict_proba(X).argmax(axis=1)]

    def score(self, X: Table, y=None, sample_weight=None) -> float:
        """Accuracy; ``y`` defaults to the target column of ``X`` (labels compared as category text)."""
        self._check_fitted()
        _refuse_sparse(X)
        if "encoder_" not in vars(self):
            if y is None:
                raise DataError("score() needs the true labels y")
            predicted = self.predict(X)
            if self.guarantee_ is not None:  # a statistic of these (private) rows: remembered, see module docstring
                with _as_data_error():
                    x = validate_data(self, X, dtype=np.float32, reset=False)
                _remember(_positional_frame(x, np.asarray(y)), None, "score()")
            return float(accuracy_score(y, predicted, sample_weight=sample_weight))
        spec = self.encoder_.schema
        target = spec.target
        frame = _spec_frame(X, spec, with_target=y is None)
        if y is None and target not in frame.columns:
            raise DataError(f"score() needs the true labels: pass y, or a table with the target column '{target}'")
        truth = frame[target] if y is None else pd.Series(np.asarray(y))
        if len(truth) != len(frame):
            raise DataError(f"y has {len(truth)} labels for {len(frame)} rows")
        if self.guarantee_ is not None:  # a statistic of these (private) rows: remembered, see the module docstring
            labelled = frame if y is None or target in frame.columns else _with_target(frame, y, spec)
            _remember(labelled, spec, "score()")
        return float(accuracy_score(truth.map(category_text), self.predict(frame), sample_weight=sample_weight))

    # ------------------------------------------------------------------ persistence
    def save(self, folder: str | os.PathLike, force: bool = False) -> Path:
        """Write the run folder of ``dpcare train`` (refused if ``folder`` is not empty, unless ``force``)."""
        self._check_fitted()
        if "encoder_" not in vars(self):
            raise SettingsError("save() writes the run folder of `dpcare train`, which needs a spec; a model fitted "
                                "without one pickles (joblib.dump) with its guarantee_")
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


class RecordedSearch(MetaEstimatorMixin, BaseEstimator):
    """A scikit-learn search (GridSearchCV, RandomizedSearchCV, HalvingGridSearchCV...) over private models whose
    choice is recorded in their guarantees: ``RecordedSearch(GridSearchCV(DPClassifier(...), grid)).fit(X, y)``.

    ``fit`` clones the search, sets ``selection=`` on every :class:`DPClassifier` inside its estimator (so each
    clone, in this process or a worker, and the refit ``best_estimator_`` name the search in their guarantee,
    whatever ``scoring=`` and ``n_jobs``), remembers the rows of ``X`` as scored (a model fitted later by hand on
    those rows is seen) and fits it. The selection stays a release OUTSIDE epsilon: this records it, it does not
    count it (``DPClassifier(tune=...)`` does). The fitted search is ``search_``; ``best_estimator_``,
    ``best_params_``, ``best_score_``, ``cv_results_``, ``predict``, ``predict_proba`` and ``score`` are its."""

    def __init__(self, search):
        self.search = search

    def fit(self, X, y=None, **params) -> RecordedSearch:
        search = clone(self.search)
        inner = getattr(search, "estimator", None)
        if inner is None:
            raise SettingsError(f"RecordedSearch wraps a scikit-learn search with an estimator (GridSearchCV...), got "
                                f"{type(self.search).__name__}")
        grid = getattr(search, "param_grid", None) or getattr(search, "param_distributions", None) or {}
        names = sorted({k for g in (grid if isinstance(grid, list) else [grid]) for k in g})
        what = f"settings picked by {type(search).__name__} over {names} from scores on the rows it was given"
        found = {"": inner} if isinstance(inner, DPClassifier) else {}
        if hasattr(inner, "get_params"):
            found.update({f"{k}__": v for k, v in inner.get_params(deep=True).items() if isinstance(v, DPClassifier)})
        if not found:
            raise SettingsError(f"the search's estimator ({type(inner).__name__}) holds no DPClassifier to record")
        inner.set_params(**{f"{path}selection": what for path in found})
        for clf in found.values():
            if clf.method != "non-private":
                _remember_search_rows(X, y, clf, type(search).__name__)
                break
        search.fit(X, y, **params)
        self.search_ = search
        return self

    def __getattr__(self, name: str):
        if name in ("best_estimator_", "best_params_", "best_score_", "best_index_", "cv_results_", "classes_",
                    "n_features_in_", "feature_names_in_", "refit_time_", "scorer_", "n_splits_"):
            if "search_" not in vars(self):
                raise NotFittedError(f"this RecordedSearch is not fitted: call fit() first (it has no {name} yet)")
            return getattr(vars(self)["search_"], name)
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def __sklearn_is_fitted__(self) -> bool:
        return "search_" in vars(self)

    def _fitted_search(self):
        if "search_" not in vars(self):
            raise NotFittedError("this RecordedSearch is not fitted: call fit() first")
        return self.search_

    def predict(self, X):
        return self._fitted_search().predict(X)

    def predict_proba(self, X):
        return self._fitted_search().predict_proba(X)

    def score(self, X, y=None):
        return self._fitted_search().score(X, y)


def _remember_search_rows(X, y, clf: DPClassifier, search: str) -> None:
    """The rows a search over a private ``clf`` is given, remembered as scored by "the private models of
    ``search``" (in the columns ``clf`` would fingerprint them by)."""
    how = f"the private models of {search}"
    if clf.schema is None:
        if isinstance(X, (pd.DataFrame, np.ndarray)):
            x = np.asarray(X, dtype=np.float32)
            if x.ndim == 2 and y is not None:
                _remember(_positional_frame(x, np.asarray(y)), None, how)
        return
    spec = _spec(clf.schema)
    frame = _spec_frame(X, spec, with_target=y is None)
    if y is not None and spec.target not in frame.columns:
        frame = _with_target(frame, y, spec)
    _remember(frame, spec, how)


# ---------------------------------------------------------------------- inputs
class InputTypeError(DataError, TypeError):
    """X holds values of a type that cannot be a number (a DataError, and a TypeError as numpy raises)."""


class _as_data_error:
    """scikit-learn's input checks (validate_data), their messages kept, as DataError (a ValueError; a TypeError
    stays one too: InputTypeError)."""

    def __enter__(self):
        return self

    def __exit__(self, kind, err, tb):
        if kind is not None and issubclass(kind, (TypeError, ValueError)) and not isinstance(err, DPCareNotFittedError):
            if isinstance(err, DataError):
                return False
            raise (InputTypeError if issubclass(kind, TypeError) else DataError)(str(err)) from err
        return False


def _refuse_sparse(X) -> None:
    from scipy.sparse import issparse

    if issparse(X) or (isinstance(X, pd.DataFrame) and any(isinstance(t, pd.SparseDtype) for t in X.dtypes)):
        raise DataError("sparse input is not supported: DPClassifier needs dense X (X.toarray(), or a dense "
                        "DataFrame)")


def _positional_frame(x: np.ndarray, y: np.ndarray | None) -> pd.DataFrame:
    """A spec-less X (and y) as a frame with columns named by position: what fingerprints are computed on."""
    frame = pd.DataFrame(np.asarray(x), columns=[str(i) for i in range(np.asarray(x).shape[1])])
    if y is not None:
        frame[_Y] = pd.Series(np.asarray(y, dtype=object)).map(_canonical).to_numpy()
    return frame


def _spec_frame(X: Table, spec: TableSchema, with_target: bool) -> pd.DataFrame:
    """X as a frame with the spec's column names: a frame or file as it is, an array by position (its columns
    are the spec's feature columns in order; with ``with_target``, optionally followed by the target)."""
    if isinstance(X, (pd.DataFrame, str, os.PathLike)):
        return read_table(X)
    try:
        values = np.asarray(X)
    except (TypeError, ValueError) as err:
        raise DataError(f"X must be a DataFrame, a CSV/Parquet path or a 2-D array, got {type(X).__name__}: {err}") \
            from None
    names = list(spec.feature_columns)
    if values.ndim != 2:
        raise DataError(f"X must be 2-D (rows x columns), got an array of shape {values.shape}; reshape your data")
    if with_target and values.shape[1] == len(names) + 1:
        names.append(spec.target)
    if values.shape[1] != len(names):
        raise DataError(f"X is an array of {values.shape[1]} columns; its columns are read as the spec's "
                        f"{len(spec.feature_columns)} feature columns in order {spec.feature_columns}: pass a DataFrame "
                        "with those column names, or an array with exactly those columns")
    return pd.DataFrame(values, columns=names)


def _label(v):
    return v.item() if isinstance(v, np.generic) else v


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

