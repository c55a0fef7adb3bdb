"""The cross-fitted evaluation for small tables (issue 54 part 2): every row a test row once, the baseline chosen
on each fold's validation rows only, the verdict from a bootstrap within the folds; `dpcare train --cross-fit`."""

from __future__ import annotations

import json

import numpy as np
import pytest
import yaml
from helpers import SPEC, toy_table
from typer.testing import CliRunner

from dpcare.cli import app
from dpcare.data import TableSchema
from dpcare.exceptions import DataError, SettingsError
from dpcare.settings import DPSettings
from dpcare.tabular import TabularSettings
from dpcare.tabular import crossfit as cf

SCHEMA = TableSchema.from_dict(SPEC)
TINY = TabularSettings(method="feature-dp", hidden=8,
                       dp=DPSettings(epsilon=3.0, steps=3, batch_size=32, accountant="rdp", noise_seed=0))


def test_folds_cover_every_row_once_from_the_count_and_seed_alone():
    parts = cf.fold_parts(95, 4, seed=3)
    assert sorted(np.concatenate(parts).tolist()) == list(range(95)) and [len(p) for p in parts] == [24, 24, 24, 23]
    assert all((a == b).all() for a, b in zip(parts, cf.fold_parts(95, 4, seed=3)))
    assert not all((a == b).all() for a, b in zip(parts, cf.fold_parts(95, 4, seed=4)))
    with pytest.raises(SettingsError, match="at least 3 folds"):
        cf.fold_parts(95, 2, 0)
    with pytest.raises(DataError, match="too few for 5 folds"):
        cf.fold_parts(40, 5, 0)


def test_each_fold_is_scored_once_and_its_baseline_chosen_on_its_validation_rows_only(monkeypatch):
    frame = toy_table(150, seed=2)
    parts = cf.fold_parts(len(frame), 3, TINY.dp.seed)
    seen = []
    real = cf.chosen_public_scores

    def spy(settings, train, val, test, shape):
        seen.append({"val": val["y"].numpy().copy(), "test": test["y"].numpy().copy(), "train": len(train["y"])})
        return real(settings, train, val, test, shape)

    monkeypatch.setattr(cf, "chosen_public_scores", spy)
    record = cf.cross_fit(frame, SCHEMA, TINY, folds=3, progress=False)
    y = frame["death"].to_numpy()
    for k, s in enumerate(seen):  # the panel is chosen on fold k+1's rows; fold k is only scored
        assert np.array_equal(s["val"], y[parts[(k + 1) % 3]]) and np.array_equal(s["test"], y[parts[k]])
        assert s["train"] == len(frame) - len(parts[k]) - len(parts[(k + 1) % 3])
    assert sum(f["rows"] for f in record["per_fold"]) == len(frame) == record["rows"]
    auprc = record["comparisons"][0]
    assert auprc["units"] == len(frame) and auprc["low"] <= auprc["difference"] <= auprc["high"]
    assert auprc["model"] == pytest.approx(np.mean([f["AUPRC model"] for f in record["per_fold"]]))
    assert auprc["baseline"] == pytest.approx(np.mean([f["AUPRC baseline"] for f in record["per_fold"]]))
    assert "outside the guarantee" in record["note"]


def test_train_cross_fit_adds_the_evaluation_and_refuses_what_it_cannot_do(tmp_path):
    frame = toy_table(150, seed=2)
    frame.to_csv(tmp_path / "t.csv", index=False)
    (tmp_path / "spec.yaml").write_text(yaml.safe_dump(SPEC))
    base = ["train", str(tmp_path / "t.csv"), "--spec", str(tmp_path / "spec.yaml"), "--method", "feature-dp",
            "--epsilon", "3", "--steps", "3", "--batch-size", "32", "--hidden", "8", "--accountant", "rdp",
            "--validation-share", "0.2", "--test-share", "0.2"]
    r = CliRunner().invoke(app, [*base, "--cross-fit", "3", "--out", str(tmp_path / "run")])
    assert r.exit_code == 0, r.output
    assert "cross-fitted over 3 folds (150 rows, each a test row once)" in r.output
    run = json.loads((tmp_path / "run" / "run.json").read_text())
    assert run["settings"]["info"]["cross_fit"]["folds"] == 3
    assert any("cross-fitted" in v["model"] for v in run["verdicts"])
    assert any("fold models are not released" in s for s in run["not_protected"])
    assert len(run["models"]) == 1  # one released model, one guarantee
    for bad, message in ((["--cross-fit", "2"], "at least 3 folds"), (["--cross-fit", "20"], "too few for 20 folds"),
                         (["--cross-fit", "3", "--tune", "lr=0.001,0.01"], "without --tune")):
        r = CliRunner().invoke(app, [*base, *bad, "--out", str(tmp_path / "no")])
        assert r.exit_code == 2 and message in r.output, r.output
        assert not (tmp_path / "no").exists()  # refused before the run folder or any row


def test_a_stratified_comparison_averages_the_folds_and_keeps_a_unit_in_one_fold():
    from sklearn.metrics import roc_auc_score

    from dpcare.verdict import compare

    rng = np.random.default_rng(0)
    y = rng.integers(0, 2, 300)
    model, baseline, fold = y + rng.normal(0, 1, 300), y + rng.normal(0, 2, 300), np.arange(300) % 3
    c = compare("AUROC", roc_auc_score, y, model, baseline, "b", strata=fold)
    assert c.model == pytest.approx(np.mean([roc_auc_score(y[fold == k], model[fold == k]) for k in range(3)]))
    assert c.low > 0 and c.units == 300
    plain = compare("AUROC", roc_auc_score, y, model, baseline, "b")  # one stratum: the plain paired bootstrap
    assert plain.model == roc_auc_score(y, model)
    with pytest.raises(DataError, match="two strata"):
        compare("AUROC", roc_auc_score, y, model, baseline, "b", groups=np.arange(300) // 2, strata=fold)


def test_a_fusion_method_cross_fits_with_the_imputer_fit_fitted_once(tmp_path, monkeypatch):
    """The fold models of a fusion method impute with the imputer the run fitted on the public support table;
    it is fitted once, not again for the evaluation."""
    from dpcare.tabular import recipe

    toy_table(150, seed=2).to_csv(tmp_path / "t.csv", index=False)
    toy_table(60, seed=9).to_csv(tmp_path / "support.csv", index=False)
    (tmp_path / "spec.yaml").write_text(yaml.safe_dump(SPEC))
    fitted, given = [], []
    real_fit, real_cross = recipe.fit_imputer, cf.cross_fit
    monkeypatch.setattr(recipe, "fit_imputer", lambda *a, **k: fitted.append(real_fit(*a, **k)) or fitted[-1])
    monkeypatch.setattr(cf, "cross_fit", lambda *a, imputer=None, **k: given.append(imputer) or real_cross(
        *a, imputer=imputer, **k))
    r = CliRunner().invoke(app, ["train", str(tmp_path / "t.csv"), "--spec", str(tmp_path / "spec.yaml"), "--method",
                                 "fusiondp", "--public-data", str(tmp_path / "support.csv"), "--epsilon", "3",
                                 "--steps", "3", "--batch-size", "32", "--hidden", "8", "--accountant", "rdp",
                                 "--cross-fit", "3", "--out", str(tmp_path / "run")])
    assert r.exit_code == 0, r.output
    assert len(fitted) == 1 and fitted[0] is not None and given == fitted
