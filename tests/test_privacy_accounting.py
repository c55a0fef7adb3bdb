"""Accountants, calibration and events against dp-accounting, golden values and an independent RDP."""

import math
import subprocess
import sys

import pytest
from dp_accounting import dp_event
from dp_accounting.pld import pld_privacy_accountant
from dp_accounting.rdp import rdp_privacy_accountant
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dpcare.privacy import (
    calibrate_noise_multiplier,
    compute_delta,
    compute_epsilon,
    make_accountant,
    sampled_gaussian_event,
)


def independent_rdp_epsilon(q, sigma, steps, delta, orders=range(2, 257)):
    """RDP of the Poisson-subsampled Gaussian at integer orders by the exact binomial
    expansion (Mironov, Talwar, Zhang 2019, Sec. 3.3), composed over steps, converted with
    eps = rdp + log((a-1)/a) - (log delta + log a)/(a-1) (Canonne, Kamath, Steinke 2020)."""
    best = math.inf
    for a in orders:
        terms = [math.lgamma(a + 1) - math.lgamma(k + 1) - math.lgamma(a - k + 1) + (a - k) * math.log1p(-q)
                 + k * math.log(q) + (k * k - k) / (2 * sigma**2) for k in range(a + 1)]
        m = max(terms)
        log_a = m + math.log(sum(math.exp(t - m) for t in terms))
        rdp = steps * log_a / (a - 1)
        best = min(best, rdp + math.log((a - 1) / a) - (math.log(delta) + math.log(a)) / (a - 1))
    return best


GOLDEN = sampled_gaussian_event(0.04, 1.5, 2250)  # sigma 1.5, q 0.04, 90 epochs


def test_golden_values():
    # values of the issue (Opacus/TF-privacy tutorials' setting), reproduced with dp-accounting 0.6.0
    assert compute_epsilon(GOLDEN, 1e-5, "rdp") == pytest.approx(7.33, abs=0.01)
    assert compute_epsilon(GOLDEN, 1e-5, "pld") == pytest.approx(6.77, abs=0.015)


def test_rdp_matches_an_independent_implementation():
    for q, sigma, steps, delta in [(0.04, 1.5, 2250, 1e-5), (0.01, 1.0, 1000, 1e-6), (0.1, 4.0, 300, 1e-5)]:
        ours = compute_epsilon(sampled_gaussian_event(q, sigma, steps), delta, "rdp")
        ref = independent_rdp_epsilon(q, sigma, steps, delta)
        # ours also uses fractional orders, so it can only be a little smaller
        assert ours <= ref * (1 + 1e-6)
        assert ours == pytest.approx(ref, rel=0.03)
        assert compute_epsilon(sampled_gaussian_event(q, sigma, steps), delta, "pld") <= ours


def test_equals_dp_accounting_called_directly():
    event = dp_event.SelfComposedDpEvent(dp_event.PoissonSampledDpEvent(0.02, dp_event.GaussianDpEvent(1.1)), 500)
    pld = pld_privacy_accountant.PLDAccountant(value_discretization_interval=1e-4)
    pld.compose(event)
    rdp = rdp_privacy_accountant.RdpAccountant()
    rdp.compose(event)
    assert compute_epsilon(sampled_gaussian_event(0.02, 1.1, 500), 1e-5, "pld") == pytest.approx(pld.get_epsilon(1e-5))
    assert compute_epsilon(sampled_gaussian_event(0.02, 1.1, 500), 1e-5, "rdp") == pytest.approx(rdp.get_epsilon(1e-5))
    delta = compute_delta(sampled_gaussian_event(0.02, 1.1, 500), 2.0)
    assert compute_epsilon(sampled_gaussian_event(0.02, 1.1, 500), delta) == pytest.approx(2.0, rel=1e-3)


def test_event_shapes():
    assert isinstance(sampled_gaussian_event(0.1, 1.0, 0), dp_event.NoOpDpEvent)
    assert isinstance(sampled_gaussian_event(1.0, 1.0, 1), dp_event.GaussianDpEvent)
    with pytest.raises(ValueError, match="sampling rate"):
        sampled_gaussian_event(0.0, 1.0, 5)
    with pytest.raises(ValueError, match="sigma"):
        sampled_gaussian_event(0.1, -1.0, 5)
    with pytest.raises(ValueError, match="steps"):
        sampled_gaussian_event(0.1, 1.0, 2.5)
    with pytest.raises(ValueError, match="accountant"):
        make_accountant("moments")


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(q=st.floats(0.001, 0.5), steps=st.integers(1, 3000), eps=st.floats(0.1, 10.0),
       log_delta=st.floats(-9, -4))
def test_calibration_never_exceeds_target_rdp(q, steps, eps, log_delta):
    delta = 10**log_delta
    sigma = calibrate_noise_multiplier(q, steps, eps, delta, accountant="rdp")
    assert compute_epsilon(sampled_gaussian_event(q, sigma, steps), delta, "rdp") <= eps
    assert compute_epsilon(sampled_gaussian_event(q, sigma * 0.99, steps), delta, "rdp") > eps  # tight


@pytest.mark.parametrize("q, steps, eps", [(0.01, 2000, 0.5), (0.05, 500, 2.0), (0.2, 50, 8.0), (1.0, 10, 1.0)])
def test_calibration_never_exceeds_target_pld(q, steps, eps):
    sigma = calibrate_noise_multiplier(q, steps, eps, 1e-5)
    assert compute_epsilon(sampled_gaussian_event(q, sigma, steps), 1e-5) <= eps
    assert compute_epsilon(sampled_gaussian_event(q, sigma * 0.99, steps), 1e-5) > eps
    assert sigma <= calibrate_noise_multiplier(q, steps, eps, 1e-5, accountant="rdp")


def test_calibration_counts_other_releases_and_refuses_impossible_targets():
    alone = calibrate_noise_multiplier(0.05, 200, 1.0, 1e-5)
    with_stats = calibrate_noise_multiplier(0.05, 200, 1.0, 1e-5, other_events=[dp_event.GaussianDpEvent(8.0)])
    assert with_stats > alone
    with pytest.raises(ValueError, match="no budget"):
        calibrate_noise_multiplier(0.05, 200, 0.1, 1e-5, other_events=[dp_event.GaussianDpEvent(0.5)])
    with pytest.raises(ValueError, match="epsilon"):
        calibrate_noise_multiplier(0.05, 200, 0.0, 1e-5)


def test_privacy_layer_does_not_import_torch():
    code = "import sys, dpcare.privacy; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
