"""The ledger composes every release; the guarantee states what is protected."""

import json

import pytest
from dp_accounting import dp_event

from dpcare.privacy import (
    Guarantee,
    PrivacyLedger,
    ProtectedUnit,
    compute_epsilon,
    default_delta,
    gaussian_event,
    sampled_gaussian_event,
)


def test_per_step_charges_equal_one_self_composed_event():
    ledger = PrivacyLedger(2000)
    for _ in range(300):
        ledger.charge_sampled_gaussian("train", 0.05, 1.2)
    assert ledger.epsilon() == pytest.approx(compute_epsilon(sampled_gaussian_event(0.05, 1.2, 300), ledger.delta))


def test_statistics_and_training_compose():
    train_only = PrivacyLedger(2000)
    train_only.charge_sampled_gaussian("train", 0.05, 1.2, 300)
    both = PrivacyLedger(2000)
    both.charge("bounds of age", gaussian_event(4.0), "DP histogram for age bounds")
    both.charge_sampled_gaussian("train", 0.05, 1.2, 300)
    assert both.epsilon() > train_only.epsilon()
    assert "DP histogram for age bounds" in both.guarantee().releases


def test_calibration_leaves_room_for_earlier_charges():
    ledger = PrivacyLedger(2000)
    ledger.charge("bounds", gaussian_event(5.0))
    sigma = ledger.calibrate_training_noise(0.05, 300, 2.0)
    ledger.charge_sampled_gaussian("train", 0.05, sigma, 300)
    assert 1.98 < ledger.epsilon() <= 2.0


def test_default_delta_and_bad_parameters():
    assert PrivacyLedger(1000).delta == pytest.approx(default_delta(1000)) == pytest.approx(1000**-1.1)
    with pytest.raises(ValueError, match=r"delta.*1/n"):
        PrivacyLedger(1000, delta=1e-3)
    with pytest.raises(ValueError, match="delta"):
        PrivacyLedger(1000, delta=0.0)
    with pytest.raises(ValueError, match="accountant"):
        PrivacyLedger(1000, accountant="moments")
    with pytest.raises(ValueError, match="n >= 1"):
        PrivacyLedger(0)
    with pytest.raises(ValueError, match="sigma"):
        PrivacyLedger(10).charge_sampled_gaussian("t", 0.1, 0.0)


def test_state_dict_round_trips_through_json():
    ledger = PrivacyLedger(500, unit=ProtectedUnit.FEATURES, protected_columns=["age", "sex"], public_columns=["hr"])
    ledger.charge("hist", dp_event.PoissonSampledDpEvent(0.5, dp_event.GaussianDpEvent(2.0)))
    ledger.charge_sampled_gaussian("train", 0.1, 1.0, 50)
    again = PrivacyLedger.from_state_dict(json.loads(json.dumps(ledger.state_dict())))
    assert again.epsilon() == ledger.epsilon()
    assert again.guarantee() == ledger.guarantee()


def test_guarantee_states_unit_and_public_columns(tmp_path):
    ledger = PrivacyLedger(500, unit=ProtectedUnit.FEATURES, protected_columns=["age"], public_columns=["hr", "bun"])
    ledger.charge_sampled_gaussian("train", 0.1, 1.0, 50)
    g = ledger.guarantee()
    text = g.describe()
    assert "age" in text and "NOT protected" in text and "hr" in text and "simulator" in text
    assert Guarantee.from_dict(json.loads(json.dumps(g.to_dict()))) == g
    ledger.save_json(tmp_path / "g.json")
    assert json.loads((tmp_path / "g.json").read_text())["guarantee"]["unit"] == "features"
    assert PrivacyLedger(10).epsilon() == 0.0

