"""Noise calibration: never above the target, tight, and aware of earlier releases."""

import pytest
from dp_accounting import dp_event
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from dpcare.privacy import (
    calibrate_noise_multiplier,
    compute_epsilon,
    gaussian_event,
    sampled_gaussian_event,
)
from dpcare.privacy.calibration import MIN_SIGMA

FAST = (Phase.explicit, Phase.generate)  # no shrinking: a failure is reported at once, not minutes later


def eps(q, sigma, steps, delta, accountant="pld", other=()):
    event = dp_event.ComposedDpEvent([*other, sampled_gaussian_event(q, sigma, steps)])
    return compute_epsilon(event, delta, accountant)


@settings(max_examples=20, deadline=None, derandomize=True, phases=FAST,
          suppress_health_check=[HealthCheck.too_slow])
@given(q=st.floats(0.001, 1.0), steps=st.integers(1, 5000), target=st.floats(0.1, 10.0),
       log_delta=st.floats(-10, -4))
def test_calibration_never_exceeds_target_rdp(q, steps, target, log_delta):
    delta = 10**log_delta
    sigma = calibrate_noise_multiplier(q, steps, target, delta, accountant="rdp")
    assert eps(q, sigma, steps, delta, "rdp") <= target
    if sigma > MIN_SIGMA:
        assert eps(q, sigma * 0.99, steps, delta, "rdp") > target  # tight
        assert eps(q, sigma / 1.002, steps, delta, "rdp") > target  # within the default tolerance 1e-3


@settings(max_examples=4, deadline=None, derandomize=True, phases=FAST,
          suppress_health_check=[HealthCheck.too_slow])
@given(q=st.floats(0.005, 0.3), steps=st.integers(1, 2000), target=st.floats(0.3, 8.0))
def test_calibration_never_exceeds_target_pld_property(q, steps, target):
    sigma = calibrate_noise_multiplier(q, steps, target, 1e-6)
    assert eps(q, sigma, steps, 1e-6) <= target
    assert eps(q, sigma / 1.002, steps, 1e-6) > target


@pytest.mark.parametrize("q, steps, target", [(0.01, 2000, 0.5), (0.05, 500, 2.0), (0.2, 50, 8.0), (1.0, 10, 1.0)])
def test_calibration_never_exceeds_target_pld(q, steps, target):
    sigma = calibrate_noise_multiplier(q, steps, target, 1e-5)
    assert eps(q, sigma, steps, 1e-5) <= target
    assert eps(q, sigma * 0.99, steps, 1e-5) > target
    assert eps(q, sigma / 1.002, steps, 1e-5) > target
    assert sigma < calibrate_noise_multiplier(q, steps, target, 1e-5, accountant="rdp")  # PLD is tighter


def test_tolerance_is_honoured():
    sigma = calibrate_noise_multiplier(0.05, 300, 1.5, 1e-5, tolerance=1e-5)
    assert eps(0.05, sigma, 300, 1e-5) <= 1.5 < eps(0.05, sigma / (1 + 2e-5), 300, 1e-5)


def test_calibration_counts_other_releases():
    stats = [gaussian_event(8.0), dp_event.LaplaceDpEvent(20.0)]
    alone = calibrate_noise_multiplier(0.05, 200, 1.0, 1e-5)
    with_stats = calibrate_noise_multiplier(0.05, 200, 1.0, 1e-5, other_events=stats)
    assert with_stats > alone
    assert eps(0.05, with_stats, 200, 1e-5, other=stats) <= 1.0 < eps(0.05, with_stats * 0.99, 200, 1e-5, other=stats)
    with_stats_rdp = calibrate_noise_multiplier(0.05, 200, 1.0, 1e-5, "rdp", other_events=stats[:1])
    assert eps(0.05, with_stats_rdp, 200, 1e-5, "rdp", other=stats[:1]) <= 1.0


def test_calibration_refuses_impossible_targets_and_bad_input():
    with pytest.raises(ValueError, match="no budget"):
        calibrate_noise_multiplier(0.05, 200, 0.1, 1e-5, other_events=[gaussian_event(0.5)])
    with pytest.raises(ValueError, match="no budget"):
        calibrate_noise_multiplier(0.05, 0, 0.1, 1e-5, other_events=[gaussian_event(0.5)])
    with pytest.raises(ValueError, match="epsilon .* 0.0"):
        calibrate_noise_multiplier(0.05, 200, 0.0, 1e-5)
    with pytest.raises(ValueError, match="delta"):
        calibrate_noise_multiplier(0.05, 200, 1.0, 1.5)
    with pytest.raises(ValueError, match="accountant"):
        calibrate_noise_multiplier(0.05, 200, 1.0, 1e-5, accountant="moments")
    spent = compute_epsilon(gaussian_event(3.0), 1e-5)
    with pytest.raises(ValueError, match="cannot be met"):  # budget left, but too little for any sigma
        calibrate_noise_multiplier(1.0, 1, spent * (1 + 1e-7), 1e-5, other_events=[gaussian_event(3.0)])


def test_zero_steps():
    assert calibrate_noise_multiplier(0.05, 0, 1.0, 1e-5) == 1.0  # no step: any sigma meets the target
    assert calibrate_noise_multiplier(0.05, 0, 1.0, 1e-5, other_events=[gaussian_event(8.0)]) == 1.0
