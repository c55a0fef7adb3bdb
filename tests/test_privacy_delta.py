"""The default delta keeps n*delta <= 0.01; the guarantee states n*delta; a weaker delta warns, delta >= 1/n is refused."""

import math
import warnings

import pytest

from dpcare.exceptions import PrivacyParameterError
from dpcare.privacy import (
    Guarantee,
    PrivacyLedger,
    WeakDeltaWarning,
    check_delta,
    default_delta,
    legacy_delta,
    n_delta,
)


@pytest.mark.parametrize("n, expected", [(1, 1e-5), (15, 1e-5), (482, 1e-5), (800, 1e-5), (1000, 1e-5),
                                         (7284, 0.01 / 7284), (100_000, 1e-7), (10**9, 1e-11)])
def test_default_delta_is_min_of_1e5_and_one_hundredth_over_n(n, expected):
    assert default_delta(n) == pytest.approx(expected, rel=1e-12)
    assert n * default_delta(n) <= 0.01 * (1 + 1e-12)
    assert check_delta(default_delta(n), n) == default_delta(n)  # below 1/n, so accepted


def test_the_old_default_is_kept_for_published_numbers_only():
    assert legacy_delta(7284) == pytest.approx(7284 ** -1.1) == pytest.approx(5.6e-5, rel=0.02)  # the demo's
    assert 0.5 < n_delta(legacy_delta(800), 800) < n_delta(legacy_delta(15), 15) < 0.8  # the 0.5-0.8
    with pytest.raises(PrivacyParameterError, match="n .* must be an integer >= 1"):
        default_delta(0)


def test_the_guarantee_states_n_delta():
    text = PrivacyLedger(120).guarantee().describe()
    assert "(0, 1e-05)-differential privacy (PLD accountant, n = 120, n*delta = 0.0012)" in text
    assert "WEAK delta" not in text
    ledger = PrivacyLedger(7284)
    ledger.charge_sampled_gaussian("training", 0.035, 1.0, 100)
    assert "n = 7284, n*delta = 0.01)" in ledger.guarantee().describe()
    assert "n not saved" in Guarantee(1.0, 1e-5).describe()  # a saved guarantee without n


def test_a_delta_with_n_delta_above_one_hundredth_warns_in_words():
    with pytest.warns(WeakDeltaWarning) as caught:
        ledger = PrivacyLedger(482, delta=legacy_delta(482))
    (w,) = caught
    text = str(w.message)
    assert "n*delta = 0.539 > 0.01" in text
    assert "publishes each unit's record in full with probability delta" in text
    assert "would expose 0.539 units in expectation" in text
    assert w.filename == __file__  # points at the caller, not at dpcare
    assert issubclass(WeakDeltaWarning, UserWarning)
    g = ledger.guarantee().describe()
    assert "WEAK delta: n*delta = 0.54 > 0.01" in g and "expose 0.54 units" in g
    with pytest.warns(WeakDeltaWarning, match=r"n\*delta = 0.02 "):
        PrivacyLedger(2000, delta=1e-5)


@pytest.mark.parametrize("n", [1, 15, 482, 1000, 7284, 123_457])
def test_the_default_and_a_delta_at_the_limit_do_not_warn(n):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        PrivacyLedger(n)
        PrivacyLedger(n, delta=0.01 / n)
    with pytest.warns(WeakDeltaWarning):
        weak = PrivacyLedger(n, delta=math.nextafter(1 / n, 0))  # just below the error
    # loading a saved ledger does not warn again (it warned when it was built)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert PrivacyLedger.from_state_dict(weak.state_dict()).delta == weak.delta


def test_delta_at_or_above_one_over_n_stays_an_error():
    for delta in (1e-3, 2e-3):
        with pytest.raises(PrivacyParameterError, match=r"must be < 1/n = 0.001 for n = 1000 .*"
                                                        r"the default is min\(1e-5, 0.01/n\) = 1e-05"):
            PrivacyLedger(1000, delta=delta)


def test_a_recipe_run_with_a_weak_given_delta_warns_and_says_so_in_its_guarantee():
    from helpers import SPEC, toy_table

    from dpcare.data import TableSchema
    from dpcare.settings import DPSettings
    from dpcare.tabular import TabularSettings, fit

    schema = TableSchema.from_dict(SPEC)
    fast = {"epochs": 1, "batch_size": 32, "accountant": "rdp"}
    with warnings.catch_warnings():
        warnings.simplefilter("error", WeakDeltaWarning)
        model = fit(toy_table(200), schema, TabularSettings(method="dp-sgd", hidden=8, dp=DPSettings(**fast)),
                    holdout=False, progress=False)  # no hold-out: no public baseline's bootstrap, a fast test
    n = model.guarantee.n
    assert n == 200
    assert model.guarantee.delta == default_delta(n) and f"n = {n}, n*delta = {n * 1e-5:.2g})" in \
        model.guarantee.describe()
    with pytest.warns(WeakDeltaWarning, match=rf"n = {n} units gives n\*delta = {n * 1e-3:.3g} > 0.01"):
        weak = fit(toy_table(200), schema, TabularSettings(method="dp-sgd", hidden=8,
                                                           dp=DPSettings(delta=1e-3, **fast)),
                   holdout=False, progress=False)
    assert "WEAK delta" in weak.guarantee.describe()
