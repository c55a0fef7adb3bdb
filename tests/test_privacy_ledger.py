"""The ledger composes every release; the guarantee states what is protected; parameters are checked."""

import json
import time

import numpy as np
import pytest
from dp_accounting import dp_event

from dpcare.privacy import (
    Guarantee,
    PrivacyLedger,
    ProtectedUnit,
    check_delta,
    check_epsilon,
    check_noise_multiplier,
    check_sampling_rate,
    check_steps,
    compute_epsilon,
    default_delta,
    gaussian_event,
    sampled_gaussian_event,
)

# ------------------------------------------------------------------ composition


def test_per_step_charges_equal_one_self_composed_event():
    ledger = PrivacyLedger(2000)
    for _ in range(300):
        ledger.charge_sampled_gaussian("train", 0.05, 1.2)
    (entry,) = ledger.entries
    assert entry.steps == 300 and entry.event == sampled_gaussian_event(0.05, 1.2, 300)
    assert ledger.epsilon() == compute_epsilon(sampled_gaussian_event(0.05, 1.2, 300), ledger.delta)
    ledger.charge_sampled_gaussian("train", 0.05, 1.3)  # another sigma: another entry
    assert [e.steps for e in ledger.entries] == [300, 1]


def test_per_step_charging_is_cheap():
    ledger = PrivacyLedger(10_000)
    start = time.perf_counter()
    for _ in range(20_000):
        ledger.charge_sampled_gaussian("train", 0.01, 1.0, 1)
    assert time.perf_counter() - start < 0.5  # ~2 us a call; O(n) storage would show here
    assert len(ledger.entries) == 1 and ledger.entries[0].steps == 20_000


def test_statistics_and_training_compose():
    train_only = PrivacyLedger(2000)
    train_only.charge_sampled_gaussian("train", 0.05, 1.2, 300)
    both = PrivacyLedger(2000)
    both.charge("bounds of age", gaussian_event(4.0), "DP histogram for age bounds")
    both.charge_sampled_gaussian("train", 0.05, 1.2, 300)
    assert both.epsilon() > train_only.epsilon()
    assert both.epsilon() == compute_epsilon(
        dp_event.ComposedDpEvent([gaussian_event(4.0), sampled_gaussian_event(0.05, 1.2, 300)]), both.delta)
    assert both.guarantee().releases[0] == "DP histogram for age bounds"
    assert PrivacyLedger(10).epsilon() == 0.0 == PrivacyLedger(10).running_epsilon()


def test_calibration_leaves_room_for_earlier_charges():
    ledger = PrivacyLedger(2000)
    ledger.charge("bounds", gaussian_event(5.0))
    sigma = ledger.calibrate_training_noise(0.05, 300, 2.0)
    fresh = PrivacyLedger(2000).calibrate_training_noise(0.05, 300, 2.0)
    assert sigma > fresh
    ledger.charge_sampled_gaussian("train", 0.05, sigma, 300)
    assert 1.99 < ledger.epsilon() <= 2.0


def test_running_epsilon_is_a_cheap_rdp_bound():
    ledger = PrivacyLedger(50_000)
    ledger.charge("hist", gaussian_event(6.0))
    for _ in range(10_000):
        ledger.charge_sampled_gaussian("train", 0.01, 1.0)
    start = time.perf_counter()
    running = ledger.running_epsilon()
    first = time.perf_counter() - start
    start = time.perf_counter()
    ledger.charge_sampled_gaussian("train", 0.01, 1.0)
    again = ledger.running_epsilon()
    cached = time.perf_counter() - start
    assert first < 0.5 and cached < 0.05  # ~30 ms and ~0.1 ms
    assert again > running
    assert running == pytest.approx(compute_epsilon(
        dp_event.ComposedDpEvent([gaussian_event(6.0), sampled_gaussian_event(0.01, 1.0, 10_000)]),
        ledger.delta, "rdp"), rel=1e-9)
    assert ledger.epsilon() < running  # PLD is tighter than RDP here


# ------------------------------------------------------------------ persistence


def _mixed_ledger() -> PrivacyLedger:
    ledger = PrivacyLedger(500, unit=ProtectedUnit.FEATURES, protected_columns=["age", "sex"],
                           public_columns=["hr"], accountant="rdp")
    ledger.charge_sampled_gaussian("train", 0.1, 1.0, 20)
    ledger.charge("hist", dp_event.PoissonSampledDpEvent(0.5, dp_event.GaussianDpEvent(2.0)), "a histogram")
    ledger.charge_sampled_gaussian("train", 0.1, 1.0, 30)
    ledger.charge_sampled_gaussian("tune", 0.1, 2.0, 0)
    return ledger


def test_state_dict_round_trips_through_json():
    ledger = _mixed_ledger()
    state = ledger.state_dict()
    again = PrivacyLedger.from_state_dict(json.loads(json.dumps(state)))
    assert again.state_dict() == state
    assert again.entries == ledger.entries
    assert again.epsilon() == ledger.epsilon()
    assert again.guarantee() == ledger.guarantee()
    again.charge_sampled_gaussian("train", 0.1, 1.0)  # resumed training keeps accumulating
    assert again.entries[0].steps == 51


def test_reads_the_layout_before_version_1():
    old = {"n": 500, "delta": 1e-4, "accountant": "pld", "unit": "example", "protected_columns": [],
           "public_columns": [], "events": [{"name": "h", "description": "h",
                                             "event": {"class_name": "GaussianDpEvent", "noise_multiplier": 3.0}}],
           "steps": [["train", 0.1, 1.0, 40]]}
    ledger = PrivacyLedger.from_state_dict(old)
    assert [e.event for e in ledger.entries] == [gaussian_event(3.0), sampled_gaussian_event(0.1, 1.0, 40)]


def test_save_json_is_atomic_and_complete(tmp_path):
    ledger = _mixed_ledger()
    path = tmp_path / "privacy.json"
    path.write_text("old")
    ledger.save_json(path)
    saved = json.loads(path.read_text())
    assert saved["ledger"] == ledger.state_dict()
    assert Guarantee.from_dict(saved["guarantee"]) == ledger.guarantee()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["privacy.json"]  # no temporary file left


# ------------------------------------------------------------------ guarantee


def test_guarantee_states_unit_and_public_columns():
    ledger = PrivacyLedger(500, unit=ProtectedUnit.FEATURES, protected_columns=["age"], public_columns=["hr", "bun"])
    ledger.charge_sampled_gaussian("train", 0.1, 1.0, 50)
    g = ledger.guarantee()
    assert g.unit is ProtectedUnit.FEATURES and g.n == 500 and g.delta == ledger.delta
    assert "Definition 6" in g.neighbouring and "public columns" in g.neighbouring
    text = g.describe()
    assert "age" in text and "NOT protected" in text and "hr, bun" in text and "simulator" in text
    assert f"{g.epsilon:.4g}" in text
    assert Guarantee.from_dict(json.loads(json.dumps(g.to_dict()))) == g
    example = PrivacyLedger(500)
    example.charge_sampled_gaussian("train", 0.1, 1.0, 50)
    assert example.guarantee().neighbouring == "add/remove one example"
    assert "every column" in example.guarantee().describe()
    label = PrivacyLedger(500, unit="label", protected_columns=["death"])
    label.charge_sampled_gaussian("train", 0.1, 1.0, 50)
    assert "the label (death)" in label.guarantee().describe()
    nonprivate = PrivacyLedger(500)
    nonprivate.charge("raw mean", dp_event.NonPrivateDpEvent())
    assert nonprivate.guarantee().describe().startswith("NO differential privacy")


# ------------------------------------------------------------------ validation


def test_default_delta_and_bad_ledger_parameters():
    assert PrivacyLedger(1000).delta == default_delta(1000) == pytest.approx(1e-5)
    with pytest.raises(ValueError, match=r"delta = 0.001 must be < 1/n = 0.001 for n = 1000"):
        PrivacyLedger(1000, delta=1e-3)
    with pytest.raises(ValueError, match="delta"):
        PrivacyLedger(1000, delta=0.0)
    with pytest.raises(ValueError, match="accountant .*'moments'"):
        PrivacyLedger(1000, accountant="moments")
    with pytest.raises(ValueError, match="n >= 1"):
        PrivacyLedger(0)
    with pytest.raises(ValueError, match="sigma = 0.0"):
        PrivacyLedger(10).charge_sampled_gaussian("t", 0.1, 0.0)
    with pytest.raises(ValueError, match="steps = -1"):
        PrivacyLedger(10).charge_sampled_gaussian("t", 0.1, 1.0, -1)
    with pytest.raises(TypeError, match="DpEvent"):
        PrivacyLedger(10).charge("t", 1.0)


@pytest.mark.parametrize("check, bad, name", [
    (check_epsilon, 0.0, "epsilon"), (check_epsilon, -1.0, "epsilon"), (check_epsilon, float("inf"), "epsilon"),
    (check_epsilon, float("nan"), "epsilon"), (check_delta, 0.0, "delta"), (check_delta, 1.0, "delta"),
    (check_sampling_rate, 0.0, "sampling rate q"), (check_sampling_rate, 1.5, "sampling rate q"),
    (check_noise_multiplier, -2.0, "sigma"), (check_noise_multiplier, float("inf"), "sigma"),
    (check_steps, -3, "steps"), (check_steps, 1.5, "steps"), (check_steps, True, "steps"),
])
def test_checks_name_the_parameter_and_value(check, bad, name):
    with pytest.raises(ValueError, match=f"{name}.*{bad!r}".replace("(", r"\(").replace(")", r"\)")):
        check(bad)


def test_checks_accept_numpy_scalars():
    assert check_steps(np.int64(5)) == 5 and isinstance(check_steps(np.int64(5)), int)
    assert check_sampling_rate(np.float32(0.5)) == 0.5
    assert check_delta(1e-6, 1000) == 1e-6


def test_uncounted_releases_are_listed_and_survive_a_round_trip():
    ledger = PrivacyLedger(100)
    ledger.charge_sampled_gaussian("steps", 0.1, 1.0, 10)
    eps = ledger.epsilon()
    ledger.note_uncounted("the epoch chosen on validation")
    ledger.note_uncounted("the epoch chosen on validation")
    assert ledger.epsilon() == eps  # listed, not charged
    g = ledger.guarantee()
    assert g.uncounted == ("the epoch chosen on validation",)
    assert "NOT counted in epsilon" in g.describe() and "the epoch chosen on validation" in g.describe()
    again = PrivacyLedger.from_state_dict(ledger.state_dict())
    assert again.guarantee().uncounted == g.uncounted
    assert type(g).from_dict(g.to_dict()) == g


def test_the_guarantee_names_only_what_the_run_declared():
    """A run on raw tensors declared no spec: its guarantee must not claim 'declared column bounds'."""
    from dpcare.privacy import PrivacyLedger

    bare = PrivacyLedger(100)
    bare.charge_sampled_gaussian("private training steps", 0.1, 1.0, 10)
    text = bare.guarantee().describe()
    assert "Treated as public: the number of units n." in text and "bounds" not in text
    spec = PrivacyLedger(100, declared=("the spec's declared column bounds and category lists",))
    spec.charge_sampled_gaussian("private training steps", 0.1, 1.0, 10)
    assert "the spec's declared column bounds" in spec.guarantee().describe()
    again = PrivacyLedger.from_state_dict(spec.state_dict())
    assert again.guarantee() == spec.guarantee()
    assert "paper" not in text and ".txt" not in text  # papers are cited by authors, never by file names
