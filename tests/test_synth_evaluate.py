"""Synthetic-table metrics (dpcare.synth.evaluate): HIST, Pair, CorAcc, ML efficacy, DCR, the report."""

import json
import math

import numpy as np
import pandas as pd
import pytest
from helpers import SPEC, toy_table

from dpcare.data import TableSchema, load_dataset, load_table
from dpcare.synth.evaluate import (
    SUMMARY,
    abs_pearson,
    closest_distances,
    coracc,
    correlation_level,
    correlation_ratio,
    cramers_v,
    dcr,
    evaluate_synthetic,
    format_report,
    hist,
    ml_efficacy,
    pair,
    summary,
)


@pytest.fixture(scope="module")
def adult():
    """Disjoint real train (3000 rows) and test (1500 rows) samples of UCI Adult (string target)."""
    df, schema = load_dataset("adult", "train")
    rows = df.sample(4500, random_state=0).reset_index(drop=True)
    return rows.iloc[:3000].reset_index(drop=True), rows.iloc[3000:].reset_index(drop=True), schema


@pytest.fixture(scope="module")
def toy():
    schema = TableSchema.from_dict(SPEC)
    return load_table(toy_table(300), schema), load_table(toy_table(200, seed=1), schema), schema


def tiny_schema(kind: str = "categorical", target_categories=("0", "1")) -> TableSchema:
    return TableSchema.from_dict({"target": {"name": "t", "categories": list(target_categories)},
                                  "columns": [{"name": "x", "kind": kind, "nullable": True}]})


def shuffle_each_column(df: pd.DataFrame, seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    return df.apply(lambda c: rng.permutation(c.to_numpy()))


# ----------------------------------------------------------------------------- fidelity
@pytest.mark.parametrize("bins", [20, 50])
def test_real_against_itself_scores_one(toy, bins):
    real, _, schema = toy  # has NaN in 'lab'
    assert hist(real, real, schema, bins) == pytest.approx(1.0)
    assert pair(real, real, schema, bins) == pytest.approx(1.0)
    assert coracc(real, real, schema) == 1.0


def test_scores_do_not_depend_on_table_sizes(toy):
    real, _, schema = toy
    twice = pd.concat([real, real], ignore_index=True)
    assert hist(twice, real, schema) == pytest.approx(1.0)
    assert pair(real, twice, schema, 50) == pytest.approx(1.0)
    assert coracc(twice, real, schema) == 1.0


def test_missing_numbers_are_a_bin_of_their_own(toy):
    real, _, schema = toy
    filled = real.assign(lab=real["lab"].fillna(real["lab"].min()))  # NaN moved into the first bin
    share = real["lab"].isna().mean()
    assert hist(filled, real, schema) == pytest.approx(1 - share / len(schema.columns))
    assert coracc(filled, real, schema) <= 1.0  # Pearson / eta skip missing numbers: no crash


def test_independently_shuffled_columns_keep_hist_but_lose_pair_and_coracc(adult):
    real, _, schema = adult
    fake = shuffle_each_column(real)
    assert hist(fake, real, schema) == pytest.approx(1.0)
    assert pair(fake, real, schema) < 0.93
    assert coracc(fake, real, schema) < 0.6
    other_real = adult[1]  # a second real sample keeps the joint structure
    assert pair(other_real, real, schema) > pair(fake, real, schema) + 0.03
    assert coracc(other_real, real, schema) > coracc(fake, real, schema) + 0.3


def test_constant_table_has_low_hist(adult):
    real, _, schema = adult
    constant = real.iloc[[0] * len(real)].reset_index(drop=True)
    assert hist(constant, real, schema) < 0.6
    assert pair(constant, real, schema) < 0.3


def test_hist_hand_computed():
    schema = tiny_schema()
    real = pd.DataFrame({"t": ["0", "0", "1", "1"], "x": ["a", "a", "b", "b"]})
    fake = pd.DataFrame({"t": ["0", "0", "1", "1"], "x": ["a", "a", "a", "b"]})
    # x: min(.5, .75) + min(.5, .25) = .75; t: 1; HI = mean over the two columns
    assert hist(fake, real, schema) == pytest.approx((0.75 + 1) / 2)
    # NaN is a category of its own: real has none, so the NaN share of the fake is lost
    fake_nan = fake.assign(x=["a", "a", np.nan, "b"])
    assert hist(fake_nan, real, schema) == pytest.approx((0.75 + 1) / 2)
    assert hist(fake_nan, fake_nan, schema) == pytest.approx(1.0)


def test_hist_bins_on_the_real_range_with_nan_and_out_of_range_cells():
    schema = tiny_schema("numeric")
    real = pd.DataFrame({"t": ["0", "1", "0", "1"], "x": [0.0, 1.0, 2.0, 3.0]})
    # 2 bins on [0, 3]: real (.5, .5); fake: 0 and 1 in bin 0, 10 outside the range, NaN its own cell
    fake = pd.DataFrame({"t": ["0", "1", "0", "1"], "x": [0.0, 1.0, 10.0, np.nan]})
    assert hist(fake, real, schema, bins=2) == pytest.approx((0.5 + 1) / 2)
    # with the fake's range instead, 10 would have shared a bin with real values: it must not
    assert hist(real.assign(x=[0.0, 1.0, 2.0, 3.0 + 1e-9]), real, schema, bins=2) == pytest.approx(0.875)


def test_pair_sees_joint_structure_the_marginals_miss():
    schema = tiny_schema()
    real = pd.DataFrame({"t": ["0", "0", "1", "1"], "x": ["a", "a", "b", "b"]})
    flipped = pd.DataFrame({"t": ["1", "1", "0", "0"], "x": ["a", "a", "b", "b"]})
    assert hist(flipped, real, schema) == pytest.approx(1.0)
    assert pair(flipped, real, schema) == pytest.approx(0.0)


# ----------------------------------------------------------------------------- association measures
def test_cramers_v_bias_correction_hand_computed():
    # counts [[3, 1], [1, 3]], n = 8: chi2 = 2, phi2 = 1/4, corrected phi2 = 1/4 - 1/7 = 3/28,
    # r~ = k~ = 2 - 1/7 = 13/7, V^2 = (3/28) / (6/7) = 1/8
    x = ["a"] * 4 + ["b"] * 4
    y = ["u", "u", "u", "v", "u", "v", "v", "v"]
    assert cramers_v(x, y, bias_correction=False) == pytest.approx(0.5)
    assert cramers_v(x, y) == pytest.approx(math.sqrt(1 / 8))
    assert cramers_v(["a", "a", "b", "b"], ["u", "v", "u", "v"]) == 0.0  # independent
    assert cramers_v(["a", "a", "b", "b"], [1, 1, 2, 2]) == pytest.approx(1.0)
    assert cramers_v(["a"] * 4, ["u", "v", "u", "v"]) == 0.0  # a single category: no association
    assert cramers_v(["a", np.nan, "a", np.nan], ["u", "v", "u", "v"]) == pytest.approx(1.0)  # NaN is a category


def test_correlation_ratio_and_pearson_hand_computed():
    # group means 2 and 6 around 4: between SS = 16, total SS = 20
    assert correlation_ratio(["a", "a", "b", "b"], [1, 3, 5, 7]) == pytest.approx(math.sqrt(0.8))
    assert correlation_ratio(["a", "a", "b", "b", "b"], [1, 3, 5, 7, np.nan]) == pytest.approx(math.sqrt(0.8))
    assert correlation_ratio(["a", "b", "a", "b"], [2, 2, 2, 2]) == 0.0
    assert abs_pearson([1, 2, 3, np.nan], [3, 2, 1, 0]) == pytest.approx(1.0)
    assert abs_pearson([1, 1, 1], [1, 2, 3]) == 0.0


def test_correlation_levels_follow_the_paper_thresholds():
    values = [0.0, 0.099, 0.1, 0.29, 0.3, 0.49, 0.5, 1.0]
    assert correlation_level(values).tolist() == [0, 0, 1, 1, 2, 2, 3, 3]


# ----------------------------------------------------------------------------- ML efficacy
def test_real_training_data_beats_shuffled_labels(adult):
    real, test, schema = adult
    good = ml_efficacy(real, test, schema)
    bad = ml_efficacy(real.assign(income=np.random.default_rng(0).permutation(real["income"])), test, schema)
    assert good["positive_class"] == ">50K"  # the minority of the test table
    for model in ("logistic_regression", "xgboost"):
        assert good[model]["auc"] > 0.85 and bad[model]["auc"] < 0.65
        assert good[model]["f1_minority"] > bad[model]["f1_minority"] + 0.3
        assert 0 <= good[model]["accuracy"] <= 1
    assert good["mean"]["auc"] == pytest.approx((good["logistic_regression"]["auc"] + good["xgboost"]["auc"]) / 2)


def test_one_class_training_table_gives_nan_with_a_warning(adult):
    real, test, schema = adult
    only_low = real[real["income"] == "<=50K"]
    with pytest.warns(RuntimeWarning, match="F1 and AUC are NaN"):
        out = ml_efficacy(only_low, test, schema)
    for model in ("logistic_regression", "xgboost"):
        assert math.isnan(out[model]["auc"]) and math.isnan(out[model]["f1_minority"])
        assert out[model]["accuracy"] == pytest.approx((test["income"] == "<=50K").mean())


def test_positive_class_is_the_test_minority_and_labels_may_be_numbers(toy):
    real, test, schema = toy
    minority = test["death"].value_counts().idxmin()
    fake = real.assign(death=real["death"].astype(int))  # 0/1 numbers where the spec says "0"/"1"
    out = ml_efficacy(fake, test, schema, models=("logistic_regression",))
    assert out["positive_class"] == minority
    assert out == ml_efficacy(real, test, schema, models=("logistic_regression",))


def test_rows_without_a_valid_label_are_dropped_with_a_warning(toy):
    real, test, schema = toy
    fake = real.assign(death=real["death"].where(real.index % 10 != 0, "maybe"))
    with pytest.warns(RuntimeWarning, match="30 rows of the training table have no valid target"):
        out = ml_efficacy(fake, test, schema, models=("logistic_regression",))
    assert 0.5 < out["logistic_regression"]["auc"] <= 1


def test_ml_efficacy_needs_a_binary_target():
    schema = tiny_schema(target_categories=("a", "b", "c"))
    df = pd.DataFrame({"t": ["a", "b", "c"], "x": ["u", "v", "u"]})
    with pytest.raises(ValueError, match="declares 3 categories .*needs a binary outcome"):
        ml_efficacy(df, df, schema)


# ----------------------------------------------------------------------------- DCR and copies
def test_copies_of_training_rows_have_zero_distance(toy):
    real, test, schema = toy
    copies = real.sample(60, random_state=0)
    out = dcr(copies, real, schema, holdout=test)
    assert out["synthetic_median"] == 0.0 and out["synthetic_p5"] == 0.0 and out["duplicate_rate"] == 1.0
    assert out["holdout_median"] > 0.05 and out["holdout_duplicate_rate"] == 0.0
    moved = copies.assign(hr=copies["hr"] + 1.0)
    out = dcr(moved, real, schema)
    assert out["duplicate_rate"] == 0.0 and out["synthetic_median"] > 0
    assert set(out) == {"synthetic_median", "synthetic_p5", "duplicate_rate"}


def test_copies_are_exactly_zero_despite_rounding(adult):
    real, _, schema = adult  # many columns: |a|^2 + |b|^2 - 2ab leaves ~1e-8 for some copies
    assert closest_distances(real.iloc[:500], real, schema).max() == 0.0


def test_closest_distance_hand_computed():
    schema = tiny_schema("numeric")
    train = pd.DataFrame({"t": ["0", "1", "1"], "x": [0.0, 10.0, np.nan]})
    query = pd.DataFrame({"t": ["0", "1", "1", "0"], "x": [5.0, 10.0, np.nan, 20.0]})
    # x scaled by the training range 10; a target mismatch adds 1 to the squared distance
    d = closest_distances(query, train, schema)
    assert d == pytest.approx([0.5, 0.0, 0.0, math.sqrt(1 + 1)])


# ----------------------------------------------------------------------------- inputs and the report
@pytest.mark.parametrize("change, message", [
    (lambda df: df.drop(columns=["hr"]), r"missing columns \['hr'\]"),
    (lambda df: df.assign(extra=1), r"extra columns \['extra'\]"),
    (lambda df: df.iloc[:0], "synthetic table is empty"),
    (lambda df: df.assign(hr="fast"), "numeric but holds 'fast'"),
])
def test_bad_synthetic_tables_are_named(toy, change, message):
    real, test, schema = toy
    with pytest.raises(ValueError, match=message):
        evaluate_synthetic(change(real), real, test, schema)
    with pytest.raises(ValueError, match=message):
        hist(change(real), test, schema)


def test_evaluate_synthetic_report(adult):
    real, test, schema = adult
    train, fake = real.iloc[:1500], shuffle_each_column(real.iloc[1500:])
    report = evaluate_synthetic(fake, train, test, schema, seed=0)
    text = json.dumps(report)
    assert json.loads(text)["rows"] == {"synthetic": 1500, "train": 1500, "test": 1500}
    # the headline numbers that the dp2stage study's table and `synth evaluate`'s run.json rows read (SUMMARY)
    row = summary(report)
    assert list(row) == list(SUMMARY) and row["ppl value"] is None and row["ppl all"] is None  # no perplexity here
    for column, path in SUMMARY.items():
        if not path.startswith("perplexity/"):
            value = report
            for part in path.split("/"):
                value = value[part]
            assert isinstance(value, float) and row[column] == value, path
    assert summary({**report, "perplexity": {"value": 3.0, "all": 2.0}})["ppl value"] == 3.0
    base = report["real_baseline"]
    assert base["ml_efficacy"] == ml_efficacy(train, test, schema, seed=0)  # the "train on real" reference
    assert base["pair"] > report["pair"] and base["coracc"] > report["coracc"]
    assert report["hist"]["mean"] == pytest.approx((report["hist"]["bins_20"] + report["hist"]["bins_50"]) / 2)
    assert report["dcr"]["duplicate_rate"] < 0.5
    printed = format_report(report)
    for label in ("XGB AUC", "HIST bins 50", "Pair (mean)", "CorAcc", "DCR", "'>50K'"):
        assert label in printed
    assert "real train" in printed and format_report({k: v for k, v in report.items() if k != "real_baseline"})
