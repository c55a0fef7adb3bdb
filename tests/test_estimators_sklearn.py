"""DPClassifier follows scikit-learn's conventions (issue 53 part 1): check_estimator passes except the checks
that cannot pass under DP (each with its reason), numpy / pandas / sparse inputs behave as in scikit-learn, a
scaler before it in a Pipeline is refused, and a search on private scores is recorded without stack inspection."""

import warnings

import numpy as np
import pandas as pd
import pytest
import scipy.sparse as sp
from helpers import SPEC, toy_table
from sklearn.exceptions import NotFittedError as SklearnNotFittedError
from sklearn.model_selection import GridSearchCV
from sklearn.pipeline import Pipeline
from sklearn.preprocessing import StandardScaler
from sklearn.utils.estimator_checks import parametrize_with_checks

from dpcare.data import TableSchema
from dpcare.estimators import classifier
from dpcare.estimators.classifier import DPClassifier, RecordedSearch, SelectionWarning
from dpcare.exceptions import DataError, NotFittedError, SettingsError, SpecError

SCHEMA = TableSchema.from_dict(SPEC)
NUMERIC = TableSchema.from_dict({"name": "numeric", "target": {"name": "death", "kind": "categorical",
                                                               "categories": [0, 1]},
                                 "columns": [{"name": "age", "kind": "numeric", "role": "private", "bounds": [18, 100]},
                                             {"name": "hr", "kind": "numeric", "role": "public", "bounds": [20, 250]}]})
#: tiny and fast: one full batch per step (q = 1: RDP in closed form, no subsampled-Gaussian curve to compute)
TINY = {"method": "dp-sgd", "epsilon": 8.0, "accountant": "rdp", "batch_size": 4096, "steps": 20, "hidden": 8,
        "progress": False}


def _checked():
    # the default: noise from OS entropy, so checks comparing two fits are expected failures (their reason is in
    # _expected_failed_checks); a pinned noise_seed ONLY so that those determinism checks run and pass
    return [DPClassifier(**TINY), DPClassifier(**TINY, noise_seed=0)]


@parametrize_with_checks(_checked(), expected_failed_checks=lambda est: est._expected_failed_checks())
def test_scikit_learn_check_estimator(estimator, check):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the label set read from y, batches covering every row: said in the tests below
        check(estimator)


def test_expected_failures_are_the_determinism_checks_and_say_why():
    secure, pinned = _checked()
    failing = secure._expected_failed_checks()
    assert set(failing) == {"check_fit_idempotent", "check_supervised_y_2d", "check_classifier_data_not_an_array"}
    assert all("noise_seed" in why for why in failing.values())
    assert pinned._expected_failed_checks() == {} and DPClassifier(method="non-private")._expected_failed_checks() == {}
    assert secure.__sklearn_tags__().non_deterministic and not pinned.__sklearn_tags__().non_deterministic
    assert secure.__sklearn_tags__().classifier_tags.multi_class
    assert not DPClassifier(schema=SCHEMA).__sklearn_tags__().classifier_tags.multi_class  # the recipe is binary


def test_not_fitted_is_scikit_learns_error_and_init_checks_nothing():
    clf = DPClassifier(epsilon=np.array([1.0, 2.0]), classes=np.array([0, 1]))  # nothing checked before fit
    clf.set_params(delta=np.array([1e-5]))
    for use in (lambda: clf.predict(np.zeros((2, 3))), lambda: clf.score(np.zeros((2, 3)), [0, 1]),
                lambda: clf.guarantee_):
        with pytest.raises(SklearnNotFittedError) as err:
            use()
        assert isinstance(err.value, NotFittedError)  # and dpcare's (a DPCareError)


def test_without_a_spec_dp_sgd_trains_on_every_column_as_given():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(80, 3))
    y = np.where(X[:, 0] > 0, "yes", "no")
    with pytest.warns(UserWarning):
        clf = DPClassifier(**TINY).fit(X, y)
    assert list(clf.classes_) == ["no", "yes"] and clf.n_features_in_ == 3 and clf.guarantee_.n == 80
    assert set(clf.predict(X)) <= {"no", "yes"} and clf.predict_proba(X).shape == (80, 2)
    # the label set was read from y: a release outside epsilon, named; declaring it keeps it inside
    assert any("label set ['no', 'yes'] was read" in u for u in clf.guarantee_.uncounted)
    declared = DPClassifier(**TINY, classes=["no", "yes"]).fit(X, y)
    assert not any("label set" in u for u in declared.guarantee_.uncounted)
    assert "classes=" in " ".join(declared.guarantee_.declared)
    with pytest.raises(DataError, match=r"labels \['yes'\] outside classes"):
        DPClassifier(**TINY, classes=["no", "maybe"]).fit(X, y)
    assert DPClassifier(**TINY, classes=["no", "yes"]).fit(X, np.full(80, "no")).classes_.tolist() == ["no", "yes"]
    with pytest.raises(DataError, match="one class"):
        DPClassifier(**TINY).fit(X, np.full(80, "no"))
    # a frame without a spec: its column names are kept and checked at predict
    frame = pd.DataFrame(X, columns=["a", "b", "c"])
    named = DPClassifier(**TINY, classes=["no", "yes"]).fit(frame, y)
    assert list(named.feature_names_in_) == ["a", "b", "c"]
    with pytest.raises(DataError, match="X has 2 features"):
        named.predict(X[:, :2])


def test_without_a_spec_what_needs_one_is_refused():
    X, y = np.zeros((10, 2)), np.arange(10) % 2
    with pytest.raises(SpecError, match="method feature-dp needs the table's privacy spec"):
        DPClassifier(method="feature-dp").fit(X, y)
    for kw in ({"holdout": True}, {"stats_epsilon": 0.1}, {"tune": {"lr": [0.1]}}):
        with pytest.raises(SettingsError, match=f"{next(iter(kw))} need"):
            DPClassifier(**{**TINY, **kw}).fit(X, y)
    with pytest.raises(DataError, match="requires y to be passed"):
        DPClassifier(**TINY).fit(X)
    with pytest.raises(SettingsError, match="needs a spec"):
        DPClassifier(**TINY, classes=[0, 1]).fit(X, y).save("never")


def test_sparse_input_is_refused_with_a_clear_message():
    X = sp.csr_matrix(np.eye(6))
    for clf in (DPClassifier(**TINY), DPClassifier(**TINY, schema=NUMERIC)):
        with pytest.raises(DataError, match="sparse input is not supported"):
            clf.fit(X, np.arange(6) % 2)


def _numeric_rows(n=200, seed=0):
    df = toy_table(n, seed)[["age", "hr", "death"]]
    return df.drop(columns="death"), df["death"]


def test_an_array_with_a_spec_is_read_by_position():
    X, y = _numeric_rows()
    clf = DPClassifier(schema=NUMERIC, holdout=False, **TINY).fit(X.to_numpy(), y.to_numpy())
    assert list(clf.feature_names_in_) == ["age", "hr"] and clf.n_features_in_ == 2
    assert np.array_equal(clf.predict_proba(X.to_numpy()), clf.predict_proba(X))  # positions = the spec's names
    assert list(clf.classes_) == ["0", "1"]
    with pytest.raises(DataError, match=r"array of 3 columns.*\['age', 'hr'\]"):
        clf.predict(np.zeros((2, 3)))
    # with the target as the last column and no y
    both = DPClassifier(schema=NUMERIC, holdout=False, **TINY).fit(np.column_stack([X, y]))
    assert both.guarantee_.n == len(X)


@pytest.mark.parametrize("output", ["default", "pandas"])
def test_a_scaler_before_the_estimator_is_refused(output):
    """Issue 53: StandardScaler in a Pipeline crashed on numpy output and, with pandas output, clipped the
    standardised ages to the declared [18, 100]. The estimator sees values mostly outside the spec's bounds and
    refuses, saying why (a scaler fitted on the private rows is itself a release)."""
    X, y = _numeric_rows()
    scaler = StandardScaler() if output == "default" else StandardScaler().set_output(transform="pandas")
    pipe = Pipeline([("scale", scaler), ("clf", DPClassifier(schema=NUMERIC, holdout=False, **TINY))])
    with pytest.raises(DataError, match=r"'age' \d+ of \d+ \(100.0%\).*scaler before DPClassifier"):
        pipe.fit(X, y)
    raw = Pipeline([("clf", DPClassifier(schema=NUMERIC, holdout=False, **TINY))]).fit(X, y)  # raw columns: fine
    assert raw.predict(X.head(3)).shape == (3,)


# ---------------------------------------------------------------- recording a search on private scores
def test_a_declared_selection_is_in_the_guarantee():
    X, y = _numeric_rows(100)
    with pytest.warns(SelectionWarning, match="declared: lr picked by 5-fold CV"):
        clf = DPClassifier(schema=NUMERIC, holdout=False, selection="lr picked by 5-fold CV", **TINY).fit(X, y)
    assert any(u.startswith("hyperparameter selection: declared: lr picked by 5-fold CV")
               for u in clf.guarantee_.uncounted)
    with pytest.raises(SettingsError, match="selection must be None or a text"):
        DPClassifier(schema=NUMERIC, selection=3, **TINY).fit(X, y)


@pytest.mark.parametrize("with_spec", [True, False])
def test_recorded_search_marks_every_model_it_trains(monkeypatch, with_spec):
    """A scorer string never calls DPClassifier.score: a bare GridSearchCV is not seen, RecordedSearch is (its
    clones carry selection=, its X is remembered), in a Pipeline too, and the search given is not changed."""
    monkeypatch.setattr(classifier, "_SCORED_ROWS", {})
    X, y = _numeric_rows(120)
    est = (DPClassifier(schema=NUMERIC, holdout=False, **TINY) if with_spec
           else Pipeline([("keep", "passthrough"), ("clf", DPClassifier(classes=[0, 1], **TINY))]))
    grid = {"lr": [0.05, 0.1]} if with_spec else {"clf__lr": [0.05, 0.1]}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        bare = GridSearchCV(est, grid, cv=2, scoring="roc_auc").fit(X, y)
    clf_of = (lambda m: m) if with_spec else (lambda m: m.named_steps["clf"])
    assert clf_of(bare.best_estimator_).guarantee_.uncounted == ()  # the documented limit
    search = GridSearchCV(est, grid, cv=2, scoring="roc_auc")
    with pytest.warns(SelectionWarning):
        recorded = RecordedSearch(search).fit(X, y)
    note = clf_of(recorded.best_estimator_).guarantee_.uncounted
    assert len(note) == 1 and f"declared: settings picked by GridSearchCV over {sorted(grid)}" in note[0]
    assert "120 of the training rows were scored by earlier private models in this process (the private models " \
           "of GridSearchCV)" in note[0]
    assert clf_of(search.estimator).selection is None  # the search given is cloned, not changed
    assert recorded.predict(X.head(2)).shape == (2,) and set(recorded.best_params_) == set(grid)
    # settings read off the search and fitted by hand on the same rows: seen by their rows
    with pytest.warns(SelectionWarning, match="the private models of GridSearchCV"):
        by_hand = clone_with(clf_of(est), recorded.best_params_).fit(X, y)
    assert by_hand.guarantee_.uncounted[0].startswith("hyperparameter selection: 120 of the training rows")


def clone_with(clf, params):
    return DPClassifier(**{**clf.get_params(), **{k.removeprefix("clf__"): v for k, v in params.items()}})


def test_recorded_search_needs_a_search_over_a_dpclassifier():
    with pytest.raises(SettingsError, match="holds no DPClassifier"):
        RecordedSearch(GridSearchCV(StandardScaler(), {"with_mean": [True]})).fit(np.zeros((4, 2)))
    with pytest.raises(SklearnNotFittedError):
        RecordedSearch(GridSearchCV(DPClassifier(), {"lr": [0.1]})).best_estimator_  # noqa: B018
