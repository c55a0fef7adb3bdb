"""Tuning is a release: private tuning counts every candidate and the choice (dpcare.tabular.tuning), and a model
picked by scikit-learn's search from scores on private rows says in its guarantee that the pick is not counted."""

import json
import warnings

import pandas as pd
import pytest
import yaml
from helpers import SPEC, toy_table
from sklearn.model_selection import GridSearchCV
from typer.testing import CliRunner

from dpcare.cli import app
from dpcare.data import TableSchema
from dpcare.estimators import classifier
from dpcare.estimators.classifier import DPClassifier, SelectionWarning
from dpcare.exceptions import SettingsError
from dpcare.tabular.settings import TabularSettings
from dpcare.tabular.tuning import SELECTION, candidates, parse_grid, tune, tuning_units

SCHEMA = TableSchema.from_dict(SPEC)
FAST = TabularSettings(method="dp-sgd").replace(dp=TabularSettings().dp.replace(epsilon=2.0, epochs=1, batch_size=32))


SEEDS: list = []


@pytest.fixture(scope="module")
def tuned():
    from dpcare.tabular import tuning

    real = tuning.fit

    def spy(*args, engine_seed=None, **kwargs):
        SEEDS.append(engine_seed)
        return real(*args, engine_seed=engine_seed, **kwargs)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(tuning, "fit", spy)
        return tune(toy_table(300), SCHEMA, FAST, {"lr": [1e-3, 1e-2], "alpha": [1.0, 3.0]}, progress=False)


def test_candidates_draw_independent_noise_and_no_validation_metric_is_released(tuned):
    """The K x T composition assumes independent noise: one engine seed per candidate (a shared seed gave every
    candidate the same noise vector); the validation rows are inside n, so their exact metrics are dropped."""
    assert len(SEEDS) == 4 and len(set(SEEDS)) == 4 and FAST.dp.seed not in SEEDS
    assert not any(k.startswith("val_") for k in tuned.metrics) and "test_auprc" in tuned.metrics


def test_every_candidate_and_the_choice_are_inside_epsilon(tuned):
    g, ledger = tuned.guarantee, tuned.ledger
    assert g.epsilon <= 2.0 * (1 + 1e-3) and g.epsilon > 1.9  # spent, not wasted
    assert ledger.n == sum(tuning_units(300, FAST.dp.seed))  # training AND validation rows
    names = [e.name for e in ledger.entries]
    assert names[0] == SELECTION and sum(n.startswith("candidate ") for n in names) == 4
    t = tuned.info["tuning"]
    assert t["candidates"] == 4 and len(t["noisy_validation_counts"]) == 4
    assert {"lr": tuned.settings.lr, "alpha": tuned.settings.alpha} == t["chosen"]
    # the candidates alone (without the selection) would be cheaper: the selection is charged
    alone = type(ledger)(ledger.n, ledger.delta, _warn=False)
    for e in ledger.entries[1:]:
        alone.charge(e.name, e.event)
    assert alone.epsilon() < ledger.epsilon()


def test_bad_grids_are_named():
    with pytest.raises(SettingsError, match=r"cannot vary \['epochs'\]"):
        candidates({"epochs": [1, 2]})
    with pytest.raises(SettingsError, match="non-empty list"):
        candidates({"lr": []})
    assert parse_grid(["alpha=1,5", "clip=0.5,1"]) == {"alpha": [1.0, 5.0], "clip_norm": [0.5, 1.0]}
    with pytest.raises(SettingsError, match="NAME=V1,V2"):
        parse_grid(["alpha"])
    with pytest.raises(SettingsError, match="private methods"):
        tune(toy_table(100), SCHEMA, FAST.replace(method="non-private"), {"lr": [1e-3]})


def test_a_model_picked_by_grid_search_on_private_scores_says_so(monkeypatch):
    monkeypatch.setattr(classifier, "_SCORED_ROWS", {})
    df = toy_table(300)
    X, y = df.drop(columns=[SCHEMA.target]), df[SCHEMA.target]
    est = DPClassifier(schema=SCHEMA, method="dp-sgd", epsilon=2.0, epochs=1, batch_size=32, progress=False,
                       holdout=False)
    fresh = DPClassifier(**est.get_params()).fit(X, y)  # nothing scored yet: a plain guarantee
    assert fresh.guarantee_.uncounted == ()
    search = GridSearchCV(est, {"lr": [1e-3, 1e-2]}, cv=2)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        search.fit(X, y)
    picked = search.best_estimator_.guarantee_
    assert len(picked.uncounted) == 1 and picked.uncounted[0].startswith("hyperparameter selection: 300 of the "
                                                                          "training rows were scored")
    assert "hyperparameter selection" in picked.describe()
    assert any(issubclass(w.category, SelectionWarning) for w in caught)


def test_row_fingerprints_take_lists_dicts_and_mixed_labels(monkeypatch):
    """A column of lists or dicts, and a label column of mixed int / str / float: the rows are fingerprinted
    (through canonical text, 1.0 = 1 = "1"), only the spec's columns when there is a spec."""
    monkeypatch.setattr(classifier, "_SCORED_ROWS", {})
    df = toy_table(6)
    odd = df.assign(notes=[[1, "a"], {"k": {2, 3}}, None, [], {"a": [1]}, (1, 2)],
                    death=pd.Series([0, "1", 1.0, 0, "0", 1], dtype=object))
    assert len(set(classifier._row_fingerprints(odd).tolist())) == 6  # no TypeError; rows stay distinct
    plain = df.assign(death=["0", "1", "1", "0", "0", "1"])  # the same rows, labels as text, no notes column
    classifier._remember(odd, SCHEMA, "score()")
    assert classifier._seen(plain) == (6, ["score()"])  # the spec's columns only: notes is not needed
    assert classifier._seen(plain.assign(age=plain["age"] + 1))[0] == 0


@pytest.mark.slow
def test_train_tune_on_the_command_line(tmp_path):
    toy_table(300).to_csv(tmp_path / "t.csv", index=False)
    (tmp_path / "spec.yaml").write_text(yaml.safe_dump(SPEC))
    r = CliRunner().invoke(app, ["train", str(tmp_path / "t.csv"), "--spec", str(tmp_path / "spec.yaml"), "--method",
                                 "dp-sgd", "--epsilon", "2", "--epochs", "1", "--batch-size", "32", "--tune",
                                 "lr=0.001,0.01", "--out", str(tmp_path / "run")])
    assert r.exit_code == 0, r.output
    assert "chosen privately among 2 candidates" in r.output
    g = json.loads((tmp_path / "run" / "run.json").read_text())["models"][0]["guarantee"]
    assert g["n"] == sum(tuning_units(300, 0)) and g["epsilon"] <= 2.0 * (1 + 1e-3)
    r = CliRunner().invoke(app, ["train", str(tmp_path / "t.csv"), "--spec", str(tmp_path / "spec.yaml"),
                                 "--tune", "epochs=1,2", "--out", str(tmp_path / "run2")])
    assert r.exit_code == 2 and "--tune takes NAME=V1,V2" in r.output and not (tmp_path / "run2").exists()
