"""The private model against the best public baseline on the same test units, and the verdict in words."""

import numpy as np
import pytest
from helpers import SPEC, toy_table
from sklearn.metrics import average_precision_score, mean_squared_error, roc_auc_score

from dpcare.data import TableSchema
from dpcare.exceptions import DataError
from dpcare.settings import DPSettings
from dpcare.tabular import TabularSettings, fit
from dpcare.verdict import compare


def test_the_verdict_flips_when_the_model_is_the_baseline_itself():
    rng = np.random.default_rng(0)
    y = rng.integers(0, 2, 400)
    good = y + rng.normal(0, 0.6, 400)
    base = rng.normal(0, 1, 400)
    c = compare("AUROC", roc_auc_score, y, good, base, "noise")
    assert c.beats and c.verdict().startswith("beats the public baseline") and c.low > 0
    same = compare("AUROC", roc_auc_score, y, base, base, "noise")
    assert not same.beats and same.difference == 0 and same.low == same.high == 0
    assert same.verdict().startswith("no better than the public baseline: do not release")


def test_lower_is_better_metrics_and_patient_resampling():
    rng = np.random.default_rng(1)
    truth = rng.normal(size=300)
    close, far = truth + rng.normal(0, 0.1, 300), truth + rng.normal(0, 1.0, 300)
    patients = np.repeat(np.arange(30), 10)
    c = compare("MSE", mean_squared_error, truth, close, far, "far", higher_is_better=False, groups=patients)
    assert c.beats and c.difference > 0 and c.units == 30
    worse = compare("MSE", mean_squared_error, truth, far, close, "close", higher_is_better=False, groups=patients)
    assert not worse.beats and worse.difference < 0
    assert worse.verdict().endswith("it is significantly worse than the baseline")
    tie = compare("MSE", mean_squared_error, truth, close, close + rng.normal(0, 0.01, 300), "twin",
                  higher_is_better=False, groups=patients)
    assert tie.low < 0 < tie.high and "the interval contains 0: on 30 test units" in tie.verdict()
    with pytest.raises(DataError, match="same non-empty test units"):
        compare("MSE", mean_squared_error, truth, close[:10], far, "far")


SCHEMA = TableSchema.from_dict(SPEC)
FAST = TabularSettings(hidden=16, dp=DPSettings(epsilon=2.0, epochs=2, batch_size=32, accountant="rdp"))


@pytest.mark.parametrize("method, baseline", [("feature-dp", "panel"), ("dp-sgd", "constant"),
                                              ("label-dp", "constant")])
@pytest.mark.slow  # end to end
def test_every_tabular_run_reports_its_public_baseline_on_the_test_rows(method, baseline):
    df = toy_table(400)
    m = fit(df, SCHEMA, TabularSettings(**{**FAST.__dict__, "method": method}), progress=False)
    b = m.baseline
    if baseline == "panel":  # the strongest public predictor on the VALIDATION rows, named
        assert b["name"] in [p["name"] for p in b["panel"]] and len(b["panel"]) == 4
        best = max(b["panel"], key=lambda p: p["validation AUPRC"])
        assert b["name"] == best["name"] and b["chosen on"] == "validation AUPRC"
    else:
        assert baseline in b["name"] and "panel" not in b
    test_rows = df.iloc[m.split["test"]]
    assert b["comparisons"][0]["units"] == len(test_rows) == 40  # the test split, not validation or training
    assert b["comparisons"][0]["model"] == pytest.approx(m.metrics["test_auprc"])
    if baseline == "constant":
        assert b["metrics"]["test AUROC"] == 0.5
        assert b["metrics"]["test AUPRC"] == pytest.approx(average_precision_score(test_rows["death"],
                                                                                   np.zeros(len(test_rows))))
    manifest = m.manifest()
    assert manifest.baselines == [b] and any("public baseline" in n for n in manifest.notes)
    assert manifest.metrics[1]["model"].startswith("public baseline:")


def test_the_public_columns_baseline_reads_no_private_value():
    """The feature-level baseline is trained and scored on the public view: with other private values in every
    row, its predictions are bit-identical (red when it was trained on x instead of x_pub, checked)."""
    from dpcare.tabular import recipe

    seen = []
    real = recipe.probabilities

    def spy(model, x):
        out = real(model, x)
        seen.append(out)
        return out

    df = toy_table(400)
    other = df.copy()
    other["age"] = 100 - other["age"] + 18
    other["sex"] = other["sex"].map({"female": "male", "male": "female"})
    runs = []
    for frame in (df, other):
        seen.clear()
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(recipe, "probabilities", spy)
            m = fit(frame, SCHEMA, FAST, progress=False)
        runs.append((seen[-2], m.baseline["metrics"], m.baseline["panel"]))  # the last public scores before ours
    assert np.array_equal(runs[0][0], runs[1][0]) and runs[0][1] == runs[1][1]
    assert runs[0][2] == runs[1][2]  # every candidate of the panel scores the same validation rows alike


def test_the_panel_is_fitted_on_training_rows_and_the_best_is_chosen_on_validation_rows():
    """Issue 54: the baseline is the strongest of a panel (constant, logistic regression, gradient boosting and the
    recipe's MLP), chosen by validation AUPRC; the test rows never enter the choice."""
    from dpcare.tabular.baselines import choose, fit_panel

    rng = np.random.default_rng(0)
    x = rng.normal(size=(600, 5)).astype(np.float32)
    y = (x[:, 0] - 0.5 * x[:, 1] + 0.3 * rng.normal(size=600) > 0).astype(np.float32)
    panel = fit_panel(x[:400], y[:400], seed=0)
    assert list(panel) == ["a constant (the training prevalence)", "logistic regression on the public columns",
                           "gradient boosting on the public columns"]
    panel["a perfect oracle of the validation rows"] = lambda v: v[:, 0] * 0 + (v[:, 0] - 0.5 * v[:, 1] > 0)
    best, scored = choose(panel, x[400:500], y[400:500])
    assert [c.name for c in scored] == list(panel)
    assert best.validation_auprc == max(c.validation_auprc for c in scored)
    assert scored[0].validation_auroc == 0.5 and scored[1].validation_auprc > 0.9  # the linear signal is found
    only_constant = fit_panel(x[:50], np.zeros(50, dtype=np.float32), seed=0)
    assert list(only_constant) == ["a constant (the training prevalence)"]  # one class: nothing else fits


def test_the_plain_verdict_has_three_answers():
    from dpcare.verdict import plain_verdict

    base = {"beats": False, "low": -0.1, "high": 0.2, "units": 45}
    assert plain_verdict({**base, "beats": True, "low": 0.01}) == "worth releasing"
    assert plain_verdict({**base, "high": -0.01}) == "do not release"
    assert plain_verdict(base) == "cannot be told with 45 test units"


def test_the_smallest_detectable_difference_is_hanley_mcneil_and_falls_with_the_test_units():
    """Issue 54 part 2: said before training from the count alone (balanced classes, AUC 0.75, correlation 0.5)."""
    from dpcare.verdict import detectable_difference, units_to_detect

    # Hanley & McNeil at A = 0.75, 30 + 30 units: SE^2 = (0.1875 + 29 (0.6 - 0.5625) + 29 (0.6429 - 0.5625)) / 900
    se2 = (0.1875 + 29 * (0.75 / 1.25 - 0.5625) + 29 * (2 * 0.5625 / 1.75 - 0.5625)) / 900
    assert detectable_difference(60) == pytest.approx((1.959964 + 0.841621) * (2 * se2 * 0.5) ** 0.5, rel=1e-5)
    values = [detectable_difference(n) for n in (20, 60, 200, 1000)]
    assert values == sorted(values, reverse=True)
    n = units_to_detect(0.05)
    assert detectable_difference(n) <= 0.05 < detectable_difference(n - 1)


def test_a_small_test_split_is_said_before_training_and_the_shares_are_settings(monkeypatch):
    from dpcare.exceptions import SettingsError
    from dpcare.verdict import SmallTestWarning

    read = []
    monkeypatch.setattr("dpcare.tabular.recipe.load_table", lambda *a, **k: read.append(1) or pytest.fail("read"))
    settings = TabularSettings(method="dp-sgd", hidden=8, test_share=0.3, dp=DPSettings(epochs=1, batch_size=32))
    with pytest.warns(SmallTestWarning, match=r"the test split holds 90 rows: .* about 0.14 AUROC"), \
            pytest.raises(BaseException, match="read"):
        fit(toy_table(300), TableSchema.from_dict(SPEC), settings, progress=False)
    assert read == [1]  # said before the table was read
    monkeypatch.undo()
    with pytest.warns(SmallTestWarning):
        model = fit(toy_table(300), TableSchema.from_dict(SPEC), settings, progress=False)
    assert (len(model.split["train"]), len(model.split["val"]), len(model.split["test"])) == (180, 30, 90)
    assert model.guarantee.n == 180
    with pytest.raises(SettingsError, match="leave at least 10% of the rows to train"):
        TabularSettings(validation_share=0.45, test_share=0.45)
