"""scikit-learn style estimators: DPClassifier over the tabular workflow, make_private for your own model."""

import math

import numpy as np
import pytest
import torch
from helpers import SPEC, toy_table
from sklearn.base import clone
from torch import nn

from dpcare.data import TableSchema, load_table
from dpcare.estimators import DPClassifier, PrivateTrainer, make_private
from dpcare.exceptions import DataError, NotFittedError, PrivacyParameterError, SettingsError
from dpcare.settings import DPSettings
from dpcare.tabular import TabularModel, TabularSettings, fit

SCHEMA = TableSchema.from_dict(SPEC)
SMALL = {"epochs": 2, "batch_size": 32, "hidden": 16, "progress": False}


@pytest.fixture(scope="module")
def fitted():
    return DPClassifier(method="feature-dp", epsilon=2.0, **SMALL).fit(toy_table(), SCHEMA)


def test_parameters_follow_scikit_learn():
    clf = DPClassifier(method="dp-sgd", epsilon=3.0, **SMALL)
    params = clf.get_params()
    assert params["method"] == "dp-sgd" and params["epsilon"] == 3.0 and params["holdout"] is None  # True with a spec
    assert params["delta"] is None and params["lr"] == TabularSettings().lr  # defaults are the recipe's
    assert DPClassifier().batch_size == TabularSettings().dp.batch_size and params["clip_norm"] == DPSettings().clip_norm
    assert clf.settings().dp.epsilon == 3.0 and clf.settings().method == "dp-sgd"
    assert clf.set_params(epsilon=0.5) is clf and clf.epsilon == 0.5
    copy = clone(clf)
    assert copy.get_params() == clf.get_params() and copy is not clf
    assert "epsilon=0.5" in repr(clf)


def test_not_fitted_errors(tmp_path):
    clf = DPClassifier(**SMALL)
    for use in (lambda: clf.predict(toy_table(5)), lambda: clf.predict_proba(toy_table(5)),
                lambda: clf.save(tmp_path / "m"), lambda: clf.guarantee_):
        with pytest.raises(NotFittedError, match="not fitted"):
            use()
    assert not hasattr(clf, "model_")  # NotFittedError is an AttributeError, as scikit-learn expects
    with pytest.raises(AttributeError, match="no attribute"):
        clf.nonexistent  # noqa: B018


@pytest.mark.slow  # end to end
def test_fit_predict_without_the_target(fitted):
    assert isinstance(fitted, DPClassifier)
    g = fitted.guarantee_
    assert g.unit.value == "features" and set(g.protected_columns) == {"age", "sex"} and 0 < g.epsilon <= 2.0
    assert list(fitted.classes_) == ["0", "1"] and list(fitted.feature_names_in_) == SCHEMA.feature_columns
    assert {"test_auroc", "val_auprc"} <= set(fitted.result_.metrics)
    rows = toy_table(30, seed=5)
    proba = fitted.predict_proba(rows.drop(columns="death"))
    assert proba.shape == (30, 2) and np.allclose(proba.sum(1), 1)
    assert np.array_equal(proba, fitted.predict_proba(rows))  # the target, when present, is not read
    assert set(fitted.predict(rows)) <= {"0", "1"}
    assert 0 <= fitted.score(rows) <= 1 and fitted.score(rows) == fitted.score(rows, rows["death"])
    with pytest.raises(DataError, match=r"\['age', 'hr'\]"):
        fitted.predict(rows.drop(columns=["age", "hr", "death"]))
    with pytest.raises(DataError, match="hr"):
        fitted.predict(rows.assign(hr="fast"))


@pytest.mark.slow  # end to end
def test_save_load_round_trip_and_dpcare_train_folders(fitted, tmp_path):
    rows = toy_table(20, seed=7)
    fitted.save(tmp_path / "clf")
    again = DPClassifier.load(tmp_path / "clf")
    runtime = ("progress", "checkpoint_dir", "schema")  # how a fit runs, not what it learns (the spec is the model's)
    assert again.schema == SCHEMA
    assert {k: v for k, v in again.get_params().items() if k not in runtime} == {
        k: v for k, v in fitted.get_params().items() if k not in runtime}
    assert np.array_equal(again.predict_proba(rows), fitted.predict_proba(rows))
    assert again.guarantee_ == fitted.guarantee_ and again.result_.metrics == fitted.result_.metrics
    # a folder written by the recipe behind `dpcare train`
    settings = TabularSettings(method="non-private", hidden=8, dp=DPSettings(epochs=1, batch_size=64))
    res = fit(toy_table(), SCHEMA, settings, progress=False)
    res.save(tmp_path / "train")
    loaded = TabularModel.load(tmp_path / "train")
    assert loaded.guarantee is None and loaded.settings == settings and not loaded.model.training
    clf = DPClassifier.load(tmp_path / "train")
    assert clf.method == "non-private" and clf.hidden == 8 and clf.guarantee_ is None
    with torch.no_grad():
        logit = res.model.eval()(torch.from_numpy(res.encoder.transform(load_table(rows, SCHEMA))))[:, 0]
    assert np.allclose(clf.predict_proba(rows)[:, 1], torch.sigmoid(logit.double()).numpy())
    with pytest.raises(FileNotFoundError, match="does not exist"):
        DPClassifier.load(tmp_path / "nothing")
    with pytest.raises(DataError, match="no run.json"):
        DPClassifier.load(tmp_path)


def test_a_bad_parameter_is_named_at_fit():
    with pytest.raises(PrivacyParameterError, match=r"epsilon must be a finite number in \(0, 100\]"):
        DPClassifier(epsilon=-1.0, **SMALL).fit(toy_table(50), SCHEMA)
    with pytest.raises(Exception, match="method must be one of"):
        DPClassifier(method="dp-adam", **SMALL).fit(toy_table(50), SCHEMA)


def test_holdout_false_trains_on_every_row():
    df = toy_table(300)
    clf = DPClassifier(method="dp-sgd", epsilon=1.0, holdout=False, **SMALL).fit(df, SCHEMA)
    assert clf.guarantee_.n == len(df) and clf.result_.metrics == {}
    assert clf.result_.split["holdout"] is False and len(clf.result_.split["train"]) == len(df)


# ---------------------------------------------------------------- make_private
def data(n=200, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 4, generator=g)
    return {"x": x, "y": (x[:, 0] > 0).long()}


def net():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))


def test_make_private_returns_a_trainer_within_epsilon():
    d = data()
    trainer = make_private(net(), nn.CrossEntropyLoss(reduction="none"), d, epsilon=2.0, batch_size=32, epochs=3,
                           progress=False, seed=1)
    assert isinstance(trainer, PrivateTrainer) and trainer.ledger.n == 200
    result = trainer.fit()
    assert result.guarantee.epsilon <= 2.0 + 1e-6 and result.noise_multiplier > 0
    assert trainer.ledger.guarantee().unit.value == "example"
    fixed = make_private(net(), nn.CrossEntropyLoss(reduction="none"), d, noise_multiplier=1.0, steps=4,
                         accountant="rdp", progress=False)
    assert fixed.fit(d).steps == 4 and fixed.ledger.epsilon() > 0
    # [B, 1] per-example losses (BCE on one logit) are accepted as one loss per example
    bce = make_private(nn.Linear(4, 1), nn.BCEWithLogitsLoss(reduction="none"),
                       {"x": d["x"], "y": d["y"].float()[:, None]}, noise_multiplier=1.0, steps=2, accountant="rdp",
                       progress=False)
    assert bce.fit().steps == 2


def separable(n=600, d=8, seed=0):
    g = torch.Generator().manual_seed(seed)
    x, w = torch.randn(n, d, generator=g), torch.randn(d, generator=g)
    return x, (x @ w > 0).float()


def bce(out, target):
    return nn.functional.binary_cross_entropy_with_logits(out[:, 0], target, reduction="none")


@pytest.mark.parametrize("arch", ["linear", "mlp"])
def test_make_private_defaults_learn_a_separable_task_at_epsilon_2(arch):
    """Issue 53: the README's call pattern (epsilon 2, batch 64, 3 epochs) with the default learning rate reached
    0.53-0.77 train accuracy at lr 1e-3; the rule 0.5 / sqrt(steps) must come within 6 points of non-private
    training (0.98-1.00 here), on every one of 3 seeds."""
    sigma = None  # calibrated to epsilon 2 on the first seed, then reused: the same run, one calibration
    for seed in range(3):
        x, y = separable(seed=seed)
        torch.manual_seed(seed)
        model = nn.Linear(8, 1) if arch == "linear" else nn.Sequential(nn.Linear(8, 64), nn.ReLU(), nn.Linear(64, 1))
        budget = {"epsilon": 2.0} if sigma is None else {"noise_multiplier": sigma}
        trainer = make_private(model, bce, {"x": x, "y": y}, **budget, batch_size=64, epochs=3, progress=False,
                               seed=seed)
        assert trainer.config.lr == pytest.approx(0.5 / math.sqrt(29))  # ceil(3 x 600 / 64) = 29 steps
        result = trainer.fit()
        sigma = result.noise_multiplier
        assert result.guarantee.epsilon <= 2.0 + 1e-6
        with torch.no_grad():
            accuracy = float(((model(x)[:, 0] > 0).float() == y).float().mean())
        assert accuracy >= 0.92, (seed, accuracy)


def test_make_private_wants_a_learning_rate_with_sgd():
    x, y = separable(100)
    with pytest.raises(SettingsError, match="give lr= with optimizer='sgd'"):
        make_private(nn.Linear(8, 1), bce, {"x": x, "y": y}, epsilon=2.0, optimizer="sgd")
    assert make_private(nn.Linear(8, 1), bce, {"x": x, "y": y}, epsilon=2.0, optimizer="sgd", lr=0.3).config.lr == 0.3


def test_make_private_groups_protect_patients():
    d = data(120)
    groups = torch.arange(120) // 4
    trainer = make_private(net(), nn.CrossEntropyLoss(reduction="none"), d, noise_multiplier=1.0, groups=groups,
                           batch_size=8, steps=3, accountant="rdp", progress=False)
    g = trainer.fit().guarantee
    assert g.unit.value == "patient" and g.n == 30
    with pytest.raises(DataError, match="30 privacy units"):
        trainer.fit(data(100), groups=torch.arange(100) // 4)


@pytest.mark.parametrize("loss, kw, error, match", [
    (nn.CrossEntropyLoss(), {"epsilon": 1.0}, ValueError, "reduction='mean'"),
    (lambda out, y: nn.functional.cross_entropy(out, y), {"epsilon": 1.0}, ValueError, "returned a scalar"),
    (lambda out, y: nn.functional.cross_entropy(out, y, reduction="none")[:, None] * torch.ones(1, 3),
     {"epsilon": 1.0}, ValueError, "one loss per example"),
    (nn.CrossEntropyLoss(reduction="none"), {"epsilon": 0.0}, PrivacyParameterError, "epsilon"),
    (nn.CrossEntropyLoss(reduction="none"), {"epsilon": -1.0}, PrivacyParameterError, "epsilon"),
    (nn.CrossEntropyLoss(reduction="none"), {}, PrivacyParameterError, "exactly one"),
    (nn.CrossEntropyLoss(reduction="none"), {"epsilon": 1.0, "noise_multiplier": 1.0}, PrivacyParameterError,
     "exactly one"),
    (nn.CrossEntropyLoss(reduction="none"), {"epsilon": 1.0, "delta": 0.01}, PrivacyParameterError, "1/n"),
    (nn.CrossEntropyLoss(reduction="none"), {"noise_multiplier": 0.0}, PrivacyParameterError, "sigma"),
    (nn.CrossEntropyLoss(reduction="none"), {"epsilon": 1.0, "epoch": 3}, SettingsError, "epoch"),
])
def test_make_private_errors_are_clear(loss, kw, error, match):
    with pytest.raises(error, match=match):
        make_private(net(), loss, data(), **kw)


def test_make_private_needs_x_and_y():
    with pytest.raises(DataError, match=r"\['y'\]"):
        make_private(net(), nn.CrossEntropyLoss(reduction="none"), {"x": data()["x"]}, epsilon=1.0)


# ---------------------------------------------------------------- scikit-learn conventions
@pytest.mark.slow  # end to end
def test_fit_X_y_cross_val_score_and_a_pipeline():
    """fit(X, y) with a frame and a Series, the spec in the constructor; cross_val_score clones and scores it;
    a Pipeline routes clf__schema to fit."""
    from sklearn.model_selection import cross_val_score
    from sklearn.pipeline import Pipeline
    from sklearn.preprocessing import FunctionTransformer

    df = toy_table(300)
    X, y = df.drop(columns="death"), df["death"]
    clf = DPClassifier(schema=SCHEMA, method="dp-sgd", epsilon=2.0, **SMALL).fit(X, y)
    assert clf.guarantee_.unit.value == "example" and 0 <= clf.score(X, y) <= 1
    scores = cross_val_score(DPClassifier(schema=SCHEMA, method="non-private", holdout=False, **SMALL), X, y, cv=3)
    assert scores.shape == (3,) and ((0 <= scores) & (scores <= 1)).all()
    pipe = Pipeline([("keep", FunctionTransformer()), ("clf", DPClassifier(method="non-private", **SMALL))])
    pipe.fit(X, y, clf__schema=SCHEMA)
    assert pipe.predict(X.head(4)).shape == (4,)


@pytest.mark.slow  # end to end
def test_fixable_mistakes_are_dpcare_errors():
    from dpcare.exceptions import DPCareError, SpecError

    df = toy_table(100)
    with pytest.raises(SpecError, match="needs the table's privacy spec"):
        DPClassifier(**SMALL).fit(df, None)
    with pytest.raises(DataError, match="one label per row"):
        DPClassifier(schema=SCHEMA, **SMALL).fit(df.drop(columns="death"), df["death"][:50])
    with pytest.raises(DataError, match="already holds the target"):
        DPClassifier(schema=SCHEMA, **SMALL).fit(df, df["death"])
    fitted = DPClassifier(schema=SCHEMA, method="non-private", **SMALL).fit(toy_table(200))
    with pytest.raises(DataError, match="score\\(\\) needs the true labels"):
        fitted.score(df.drop(columns="death"))
    with pytest.raises(DPCareError, match="method must be one of"):
        DPClassifier(schema=SCHEMA, method="magic").fit(df)
    x = torch.randn(10, 4)
    with pytest.raises(DataError, match="different numbers of rows"):
        make_private(nn.Linear(4, 2), nn.CrossEntropyLoss(reduction="none"), {"x": x, "y": torch.zeros(9).long()},
                     epsilon=1.0)
    x[0, 0] = float("nan")
    with pytest.raises(DataError, match="NaN or infinite"):
        make_private(nn.Linear(4, 2), nn.CrossEntropyLoss(reduction="none"), {"x": x, "y": torch.zeros(10).long()},
                     epsilon=1.0)
