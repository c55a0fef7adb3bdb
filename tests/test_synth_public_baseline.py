"""The public baseline of a DP synthetic table (independent sampling from the declared support): it reads no
private value, it is scored on the real test rows only, and the verdict flips when the DP table is replaced by
the baseline itself. Small toy tables, no language model."""

import copy

import numpy as np
import pandas as pd
import pytest
from helpers import SPEC, toy_table
from sklearn.metrics import roc_auc_score

from dpcare.data import TableSchema, load_table
from dpcare.exceptions import DPCareError, SettingsError, SpecError
from dpcare.synth import evaluate as evaluate_module
from dpcare.synth.evaluate import efficacy_scores, ml_efficacy
from dpcare.synth.support_baseline import (
    NAME,
    UNDEFINED,
    compare_to_public,
    describe,
    support_table,
    undeclared,
)

SCHEMA = TableSchema.from_dict(SPEC)


def tables(seed: int = 0):
    """(synthetic stand-in, real test) tables, disjoint draws."""
    return load_table(toy_table(300, seed=seed), SCHEMA), load_table(toy_table(200, seed=seed + 100), SCHEMA)


def test_the_support_table_draws_each_column_from_its_declared_support():
    t = support_table(SCHEMA, 2000, seed=3)
    assert len(t) == 2000 and list(t.columns) == [c.name for c in SCHEMA.columns]
    for c in SCHEMA.columns:
        if c.kind == "numeric":
            assert t[c.name].between(*c.bounds).all() and t[c.name].notna().all()
            assert t[c.name].min() < c.bounds[0] + 0.05 * (c.bounds[1] - c.bounds[0])  # uniform: reaches the ends
        else:
            assert set(t[c.name]) == set(c.categories)  # every declared category drawn, nothing else
    assert abs(np.corrcoef(t["age"], t["hr"])[0, 1]) < 0.1  # independent columns
    pd.testing.assert_frame_equal(t, support_table(SCHEMA, 2000, seed=3))  # seeded
    assert not t.equals(support_table(SCHEMA, 2000, seed=4))
    load_table(t, SCHEMA)  # a valid table of the spec


def test_the_baseline_reads_no_private_value(monkeypatch):
    """Isolation: two comparisons on different private tables (synthetic and test rows), the same size and seed:
    the baseline table the models train on is identical bit for bit, and is the spec's support table."""
    seen = []
    real = efficacy_scores

    def spy(train, test, schema, seed=0, model="xgboost"):
        seen.append(train.copy())
        return real(train, test, schema, seed, model)

    monkeypatch.setattr(evaluate_module, "efficacy_scores", spy)
    baselines = []
    for seed in (0, 7):
        seen.clear()
        synthetic, test = tables(seed)
        synthetic.loc[:, "age"] = synthetic["age"] * 0.5 + 40 * seed  # other private values, same row count
        compare_to_public(synthetic, test, SCHEMA, seed=11, resamples=50)
        baselines.append(seen[1::2])  # (synthetic, baseline) per metric
    first, second = baselines
    assert len(first) == 2
    for a, b in zip(first, second, strict=True):
        assert pd.util.hash_pandas_object(a).to_numpy().tobytes() == pd.util.hash_pandas_object(b).to_numpy().tobytes()
        assert a["age"].to_numpy().tobytes() == b["age"].to_numpy().tobytes()
    expected = load_table(support_table(SCHEMA, 300, seed=11), SCHEMA)
    assert load_table(first[0], SCHEMA).equals(expected)


def test_the_baseline_is_scored_on_the_test_rows_only():
    synthetic, test = tables()
    record = compare_to_public(synthetic, test, SCHEMA, seed=2, resamples=50)
    assert record["name"] == NAME and record["rows"] == record["synthetic_rows"] == 300
    assert record["test_rows"] == len(test) and all(c["units"] == len(test) for c in record["comparisons"])
    # the baseline's AUC recomputed by hand: XGBoost trained on the support table, scored on the test rows
    base = support_table(SCHEMA, 300, seed=2)
    y, scores, _ = efficacy_scores(base, test, SCHEMA, seed=2, model="xgboost")
    assert len(y) == len(test) and record["metrics"]["AUC XGB"] == pytest.approx(roc_auc_score(y, scores))
    # the synthetic side is ml_efficacy's own AUC (same models, same seed)
    assert record["model_metrics"]["AUC XGB"] == pytest.approx(ml_efficacy(synthetic, test, SCHEMA, 2)["xgboost"]["auc"])
    # other test rows move the baseline's score: it is measured there and nowhere else
    other = compare_to_public(synthetic, tables(5)[1], SCHEMA, seed=2, resamples=50)
    assert other["metrics"]["AUC XGB"] != record["metrics"]["AUC XGB"]


def test_the_verdict_flips_when_the_dp_table_is_the_baseline_itself():
    synthetic, test = tables()  # real rows standing in for a good synthetic table: the label depends on age, hr
    good = compare_to_public(synthetic, test, SCHEMA, seed=0, resamples=200)
    assert good["verdict"].startswith("beats the public baseline") and good["comparisons"][0]["beats"]
    assert good["model_metrics"]["AUC XGB"] > good["metrics"]["AUC XGB"]
    itself = support_table(SCHEMA, 300, seed=0)
    same = compare_to_public(itself, test, SCHEMA, seed=0, resamples=200)
    assert same["verdict"].startswith("no better than the public baseline: do not release")
    assert not any(c["beats"] for c in same["comparisons"]) and same["comparisons"][0]["difference"] == 0
    assert describe(same).splitlines()[0].endswith(same["verdict"])


def test_a_one_class_synthetic_target_gives_an_undefined_verdict_not_a_crash():
    synthetic, test = tables()
    synthetic["death"] = "1"
    with pytest.warns(RuntimeWarning, match="target class"):  # ml_efficacy's NaN warning is not raised here
        ml_efficacy(synthetic, test, SCHEMA, 0)
    record = compare_to_public(synthetic, test, SCHEMA, resamples=50)
    assert record["verdict"].startswith(UNDEFINED) and "'1' in all 300 rows" in record["verdict"]
    assert all(c["undefined"] and not c["beats"] for c in record["comparisons"])
    assert record["model_metrics"]["AUC XGB"] is None and record["metrics"]["AUC XGB"] is not None


def test_columns_without_a_declared_support_are_left_out_and_named():
    spec = copy.deepcopy(SPEC)
    del spec["columns"][2]["bounds"]  # hr: no declared bounds
    schema = TableSchema.from_dict(spec)
    assert undeclared(schema) == ["hr"]
    t = support_table(schema, 50, seed=0)
    assert t["hr"].isna().all() and t["age"].notna().all()
    synthetic, test = (load_table(x, schema) for x in (toy_table(300), toy_table(200, seed=1)))
    record = compare_to_public(synthetic, test, schema, resamples=50)
    assert record["left_out"] == ["hr"] and "['hr']" in describe(record)
    spec["target"] = {"name": "death", "kind": "categorical"}  # the target's categories: the spec requires them
    with pytest.raises(SpecError, match="declared categories"):
        TableSchema.from_dict(spec)
    with pytest.raises(SettingsError, match="at least one row") as err:
        support_table(SCHEMA, 0)
    assert isinstance(err.value, DPCareError)
