"""Events and accountants: golden values, dp-accounting called directly, independent RDP and PLD checks."""

import math
import subprocess
import sys

import pytest
from dp_accounting import dp_event
from dp_accounting.pld import pld_privacy_accountant, privacy_loss_distribution
from dp_accounting.rdp import rdp_privacy_accountant

from dpcare.privacy import (
    RDP_ORDERS,
    compute_delta,
    compute_epsilon,
    event_from_json,
    event_to_json,
    gaussian_event,
    laplace_event,
    make_accountant,
    sampled_gaussian_event,
)
from dpcare.privacy.accountants import rdp_curve

# ------------------------------------------------------------------ independent references


def independent_log_a(q: float, sigma: float, alpha: int) -> float:
    """log E_{z~mu0}[(mu(z)/mu0(z))^alpha] for the Poisson-subsampled Gaussian, integer alpha, by the exact
    binomial expansion (Mironov, Talwar, Zhang 2019, Sec. 3.3):
    A_alpha = sum_k C(alpha, k) (1-q)^(alpha-k) q^k exp((k^2 - k) / (2 sigma^2))."""
    terms = [math.lgamma(alpha + 1) - math.lgamma(k + 1) - math.lgamma(alpha - k + 1)
             + (alpha - k) * math.log1p(-q) + k * math.log(q) + (k * k - k) / (2 * sigma**2)
             for k in range(alpha + 1)]
    m = max(terms)
    return m + math.log(sum(math.exp(t - m) for t in terms))


def independent_rdp_epsilon(q: float, sigma: float, steps: int, delta: float, orders) -> float:
    """RDP composed over steps, converted with eps = rdp + log((a-1)/a) - (log delta + log a)/(a-1)
    (Canonne, Kamath, Steinke 2020, Prop. 12; Asoodeh et al. 2020)."""
    best = math.inf
    for a in orders:
        rdp = steps * independent_log_a(q, sigma, a) / (a - 1)
        best = min(best, rdp + math.log((a - 1) / a) - (math.log(delta) + math.log(a)) / (a - 1))
    return best


def analytic_gaussian_epsilon(sigma: float, delta: float) -> float:
    """Exact epsilon of one Gaussian mechanism with sensitivity 1 (Balle & Wang 2018, Thm. 8):
    delta(eps) = Phi(1/(2s) - eps s) - e^eps Phi(-1/(2s) - eps s), solved by bisection."""
    phi = lambda x: 0.5 * math.erfc(-x / math.sqrt(2))
    d = lambda e: phi(0.5 / sigma - e * sigma) - math.exp(e) * phi(-0.5 / sigma - e * sigma)
    lo, hi = 0.0, 100.0
    for _ in range(200):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if d(mid) > delta else (lo, mid)
    return hi


INT_ORDERS = [int(a) for a in RDP_ORDERS if a == int(a)]

# ------------------------------------------------------------------ golden values


def test_golden_values():
    # sigma 1.5, q 0.04, 2250 steps (90 epochs of batch 0.04 n), delta 1e-5: the setting of the issue
    # (and of the TF-Privacy / Opacus MNIST tutorials). dp-accounting 0.6.0:
    #  * RDP 7.3293 (optimal order 3.9), = the 7.33. Integer orders only give 7.3299.
    #  * PLD 6.7688: converged (grids 1e-4, 3e-5 and 1e-5 agree to 1e-5). The 6.78 is not the
    #    limit: it is what a coarser grid gives (4e-3 -> 6.7799, 1e-2 -> 6.838), or an upper estimate
    #    of another accountant; we pin the value the 1e-4 grid computes and that finer grids confirm.
    event = sampled_gaussian_event(0.04, 1.5, 2250)
    rdp, pld = compute_epsilon(event, 1e-5, "rdp"), compute_epsilon(event, 1e-5, "pld")
    assert rdp == pytest.approx(7.3293, abs=5e-4)
    assert pld == pytest.approx(6.7688, abs=5e-4)
    assert compute_epsilon(event, 1e-5, "pld", pld_discretization=4e-3) == pytest.approx(6.78, abs=0.005)
    assert pld < rdp


@pytest.mark.parametrize("q, sigma, steps, delta",
                         [(0.04, 1.5, 2250, 1e-5), (0.01, 1.0, 1000, 1e-6), (0.1, 4.0, 300, 1e-5),
                          (0.002, 0.8, 5000, 1e-7)])
def test_rdp_matches_an_independent_implementation(q, sigma, steps, delta):
    # per-order RDP of one step at every integer order, to floating-point accuracy
    curve = rdp_curve(sampled_gaussian_event(q, sigma, 1))
    for a, r in zip(RDP_ORDERS, curve):
        if a in INT_ORDERS and a <= 256:
            assert r == pytest.approx(independent_log_a(q, sigma, int(a)) / (a - 1), rel=1e-9)
    ours = compute_epsilon(sampled_gaussian_event(q, sigma, steps), delta, "rdp")
    ref = independent_rdp_epsilon(q, sigma, steps, delta, [a for a in INT_ORDERS if a <= 256])
    assert ours <= ref * (1 + 1e-9)  # ours also has fractional orders: never worse
    assert ours == pytest.approx(ref, rel=0.02)
    assert compute_epsilon(sampled_gaussian_event(q, sigma, steps), delta, "pld") <= ours


@pytest.mark.parametrize("sigma, steps", [(1.0, 1), (3.0, 16), (20.0, 100)])
def test_pld_matches_the_analytic_gaussian(sigma, steps):
    # q = 1: T Gaussian steps = one Gaussian with sigma / sqrt(T), whose epsilon is known exactly
    exact = analytic_gaussian_epsilon(sigma / math.sqrt(steps), 1e-5)
    ours = compute_epsilon(sampled_gaussian_event(1.0, sigma, steps), 1e-5)
    assert exact <= ours <= exact + 2e-3  # pessimistic, within the 1e-4 grid
    assert ours < compute_epsilon(sampled_gaussian_event(1.0, sigma, steps), 1e-5, "rdp")


# ------------------------------------------------------------------ dp-accounting called directly


def test_equals_dp_accounting_called_directly():
    raw = dp_event.SelfComposedDpEvent(dp_event.PoissonSampledDpEvent(0.02, dp_event.GaussianDpEvent(1.1)), 500)
    ours = sampled_gaussian_event(0.02, 1.1, 500)
    assert ours == raw
    pld = pld_privacy_accountant.PLDAccountant(value_discretization_interval=1e-4)
    pld.compose(raw)
    rdp = rdp_privacy_accountant.RdpAccountant(orders=list(RDP_ORDERS))
    rdp.compose(raw)
    default_rdp = rdp_privacy_accountant.RdpAccountant()
    default_rdp.compose(raw)
    assert compute_epsilon(ours, 1e-5) == pld.get_epsilon(1e-5)
    assert compute_epsilon(ours, 1e-5, "rdp") == rdp.get_epsilon(1e-5)
    assert compute_epsilon(ours, 1e-5, "rdp") <= default_rdp.get_epsilon(1e-5) + 1e-12  # denser orders
    assert compute_delta(ours, 2.0) == pld.get_delta(2.0)
    assert compute_epsilon(ours, compute_delta(ours, 2.0)) == pytest.approx(2.0, rel=1e-3)


def test_pld_self_composes_in_one_step(monkeypatch):
    """100,000 steps go through one self_compose (FFT), not 100,000 compositions."""
    pld_cls = privacy_loss_distribution.PrivacyLossDistribution
    calls = {"compose": 0, "self_compose": []}
    compose, self_compose = pld_cls.compose, pld_cls.self_compose

    def counting_compose(self, *a, **k):
        calls["compose"] += 1
        return compose(self, *a, **k)

    def counting_self_compose(self, count, *a, **k):
        calls["self_compose"].append(count)
        return self_compose(self, count, *a, **k)

    monkeypatch.setattr(pld_cls, "compose", counting_compose)
    monkeypatch.setattr(pld_cls, "self_compose", counting_self_compose)
    eps = compute_epsilon(sampled_gaussian_event(0.01, 1.0, 100_000), 1e-5)
    assert calls == {"compose": 1, "self_compose": [100_000]}
    assert 20 < eps < 30


def test_accountants_reject_bad_input():
    with pytest.raises(ValueError, match="accountant.*'moments'"):
        make_accountant("moments")
    with pytest.raises(ValueError, match="delta"):
        compute_epsilon(sampled_gaussian_event(0.1, 1.0, 5), 0.0)
    with pytest.raises(ValueError, match="epsilon"):
        compute_delta(sampled_gaussian_event(0.1, 1.0, 5), -1.0)
    assert compute_epsilon(dp_event.NonPrivateDpEvent(), 1e-5) == math.inf


# ------------------------------------------------------------------ events


def test_event_shapes():
    assert sampled_gaussian_event(0.1, 1.0, 0) == dp_event.NoOpDpEvent()
    assert sampled_gaussian_event(1.0, 2.0, 3) == dp_event.SelfComposedDpEvent(dp_event.GaussianDpEvent(2.0), 3)
    assert gaussian_event(4.0) == dp_event.GaussianDpEvent(4.0)
    assert laplace_event(2.0) == dp_event.LaplaceDpEvent(2.0)
    assert compute_epsilon(laplace_event(2.0), 1e-9) == pytest.approx(0.5, abs=1e-3)  # pure eps = 1/b
    with pytest.raises(ValueError, match="sampling rate q .* 0.0"):
        sampled_gaussian_event(0.0, 1.0, 5)
    with pytest.raises(ValueError, match="sigma .* -1.0"):
        sampled_gaussian_event(0.1, -1.0, 5)
    with pytest.raises(ValueError, match="steps .* 2.5"):
        sampled_gaussian_event(0.1, 1.0, 2.5)


def test_events_round_trip_through_json():
    import json

    event = dp_event.ComposedDpEvent([gaussian_event(3.0), laplace_event(1.5), sampled_gaussian_event(0.1, 1.2, 7),
                                      dp_event.NoOpDpEvent()])
    assert event_from_json(json.loads(json.dumps(event_to_json(event)))) == event
    with pytest.raises(ValueError, match="unknown privacy event class"):
        event_from_json({"class_name": "PrivacyLedger"})


def test_privacy_layer_does_not_import_torch():
    code = "import sys, dpcare.privacy; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
