"""Private adaptive clipping (Andrew et al. 2021): the count mechanism, the accounting both ways, convergence
to the target quantile, the clip norm's dependence on the data through the noisy counts only, and resume."""

import math

import numpy as np
import pytest
import torch
from dp_accounting import dp_event
from helpers import crash_at_step
from torch import nn

from dpcare.engine import Objective, TrainConfig, Trainer
from dpcare.engine import adaptive_clip as ac
from dpcare.engine.adaptive_clip import AdaptiveClip, QuantileEstimator, split_gradient_noise
from dpcare.engine.noise import Stream
from dpcare.methods import DPSGD
from dpcare.models import TabularMLP
from dpcare.privacy import PrivacyLedger, compute_epsilon
from dpcare.settings import DPSettings


class NormIsX(Objective):
    """loss_i = w x_i for a 1x1 weight w: the gradient of a row is x_i whatever w is, so its norm is |x_i|."""

    name = "norm-is-x"
    private_keys = ("x",)

    def private_loss(self, model, batch):
        return model(batch["x"])[:, 0]


class ZeroLoss(Objective):
    name = "zero"
    private_keys = ("x",)

    def private_loss(self, model, batch):
        return 0.0 * model(batch["x"])[:, 0]


def linear():
    return nn.Linear(1, 1, bias=False)


def norms_data(norms):
    return {"x": torch.as_tensor(norms, dtype=torch.float32)[:, None]}


def lognormal(n, seed=0):
    return torch.exp(torch.randn(n, generator=torch.Generator().manual_seed(seed)))


def sampled(q, sigma, steps):
    step = dp_event.GaussianDpEvent(sigma)
    return dp_event.SelfComposedDpEvent(dp_event.PoissonSampledDpEvent(q, step) if q < 1 else step, steps)


DP_KEYS = {"batch_size": "batch_size", "steps": "steps", "clip_norm": "clip_norm", "seed": "seed",
           "noise_seed": "noise_seed", "target_epsilon": "epsilon"}


def fit(objective, data, groups=None, ledger=None, model=None, **cfg):
    cfg = {"batch_size": 16, "steps": 20, "progress": False, "lr": 1e-3, **cfg}
    n = len(torch.unique(groups)) if groups is not None else len(next(iter(data.values())))
    ledger = ledger or PrivacyLedger(n, accountant="rdp", unit="patient" if groups is not None else "example")
    dp = DPSettings(accountant=ledger.accountant, **{DP_KEYS[k]: cfg.pop(k) for k in list(cfg) if k in DP_KEYS})
    trainer = Trainer(model or linear(), objective, TrainConfig(dp=dp, **cfg), ledger=ledger)
    result = trainer.fit(data, groups=groups)
    return trainer, result


# ------------------------------------------------------------------ Theorem 1
def test_split_is_theorem_1_from_the_joint_sensitivity():
    sigma, sigma_b, clip = 1.1, 3.0, 0.7
    z_grad = split_gradient_noise(sigma, sigma_b)
    assert z_grad ** -2 == pytest.approx(sigma ** -2 - (2 * sigma_b) ** -2)
    # the derivation: rescale the count by s = z_grad C / sigma_b so both parts have noise std z_grad C; a unit
    # adds (clipped g, s (b - 1/2)), of norm <= sqrt(C^2 + s^2 / 4): one Gaussian with multiplier std / norm
    s = z_grad * clip / sigma_b
    assert z_grad * clip / math.sqrt(clip ** 2 + s ** 2 / 4) == pytest.approx(sigma)
    with pytest.raises(ValueError, match="2 sigma_b > sigma"):
        split_gradient_noise(2.0, 1.0)


def test_two_samples_composed_understate_one_shared_sample():
    """Why "compose" draws the count's own sample: charging two sampled Gaussians for a gradient and a count
    of the SAME sample understates epsilon; the shared sample is one sampled Gaussian of the joint vector."""
    q, sigma, count_multiplier, steps = 0.01, 1.0, 1.2, 1000
    joint = (sigma ** -2 + count_multiplier ** -2) ** -0.5
    shared = compute_epsilon(sampled(q, joint, steps), 1e-5)
    independent = compute_epsilon(dp_event.ComposedDpEvent([sampled(q, sigma, steps),
                                                            sampled(q, count_multiplier, steps)]), 1e-5)
    assert shared > 1.3 * independent


# ------------------------------------------------------------------ accounting
@pytest.mark.parametrize("accounting", ["split", "compose"])
def test_the_ledger_charge_is_exact(accounting):
    n, m, steps, warm, sigma, sigma_b = 64, 8, 30, 5, 1.1, 2.0
    q = m / n
    settings = AdaptiveClip(count_noise=sigma_b, accounting=accounting, warmup_steps=warm)
    trainer, result = fit(DPSGD(), _tabular(n), model=TabularMLP(6, hidden=8), batch_size=m, steps=steps,
                          noise_multiplier=sigma, adaptive_clip=settings, ledger=PrivacyLedger(n))
    ledger = trainer.ledger
    warmup = sampled(q, 2 * sigma_b, warm)  # recentred count: sensitivity 1/2
    if accounting == "split":
        by_hand = [warmup, sampled(q, sigma, steps)]
        z_grad = (sigma ** -2 - (2 * sigma_b) ** -2) ** -0.5
        assert result.gradient_noise_multiplier == pytest.approx(z_grad)
    else:
        by_hand = [warmup, sampled(q, sigma, steps), sampled(q, 2 * sigma_b, steps)]
        assert result.gradient_noise_multiplier == sigma
    assert [(e.steps, e.event) for e in ledger.entries] == [(e.count, e) for e in by_hand]
    assert ledger.epsilon() == pytest.approx(compute_epsilon(dp_event.ComposedDpEvent(by_hand), ledger.delta),
                                             rel=1e-12)
    assert result.noise_multiplier == sigma and len(trainer.clip_estimator.fractions) == warm + steps


@pytest.mark.parametrize("accounting", ["split", "compose"])
def test_the_gradient_noise_is_the_charged_share_times_the_current_clip(accounting):
    n, m, sigma, sigma_b = 64, 16, 1.3, 1.0
    trainer = Trainer(TabularMLP(6, hidden=256, dropout=0.0), ZeroLoss(),
                      TrainConfig(dp=DPSettings(batch_size=m, steps=1, clip_norm=0.7), noise_multiplier=sigma,
                                  progress=False,
                                  adaptive_clip=AdaptiveClip(count_noise=sigma_b, accounting=accounting)),
                      ledger=PrivacyLedger(n))
    trainer.optimizer = torch.optim.SGD(trainer.trainable.values(), lr=1.0)
    before = torch.cat([p.detach().flatten().clone() for p in trainer.model.parameters()])
    trainer.fit(_tabular(n))
    step = before - torch.cat([p.detach().flatten() for p in trainer.model.parameters()])
    share = split_gradient_noise(sigma, sigma_b) if accounting == "split" else sigma
    assert step.numel() > 20_000
    assert float(step.std()) == pytest.approx(share * 0.7 / m, rel=0.03)  # C_0 = 0.7 clipped this step


DELTA = 1 / 64**1.1  # a loose delta keeps sigma below 2 sigma_b = 2, which the split needs (64 units)


@pytest.mark.parametrize("accounting", ["split", "compose"])
def test_calibration_counts_the_count_mechanism(accounting):
    n, m, steps = 64, 8, 40
    settings = AdaptiveClip(count_noise=1.0, accounting=accounting, warmup_steps=10)
    trainer, result = fit(DPSGD(), _tabular(n), model=TabularMLP(6, hidden=8), batch_size=m, steps=steps,
                          target_epsilon=2.0, adaptive_clip=settings, ledger=PrivacyLedger(n, DELTA, accountant="rdp"))
    assert 1.98 < trainer.ledger.epsilon() <= 2.0  # counts included, and still tight
    plain = PrivacyLedger(n, DELTA, accountant="rdp").calibrate_training_noise(m / n, steps, 2.0)
    if accounting == "split":  # the charged multiplier is the plain one less the warm-up's share
        assert result.noise_multiplier > plain
        assert result.gradient_noise_multiplier > result.noise_multiplier
    else:
        assert result.noise_multiplier > plain and result.gradient_noise_multiplier == result.noise_multiplier


def test_compose_counts_on_its_own_sample_and_split_on_the_gradients():
    seen = {}
    for accounting in ("split", "compose"):
        calls = seen[accounting] = []
        cfg = TrainConfig(dp=DPSettings(batch_size=16, steps=6, accountant="rdp"), noise_multiplier=1.0,
                          progress=False,
                          adaptive_clip=AdaptiveClip(accounting=accounting))
        trainer = Trainer(linear(), NormIsX(), cfg, ledger=PrivacyLedger(200, accountant="rdp"))
        trainer._clipped_total = _recording(trainer._clipped_total, calls)
        trainer.fit(norms_data(lognormal(200)))
    assert len(seen["split"]) == 6 and len(seen["compose"]) == 12
    pairs = list(zip(seen["compose"][::2], seen["compose"][1::2]))
    assert all(not torch.equal(grad, count) for grad, count in pairs)  # independent Poisson samples


def _recording(clipped_total, calls):
    def wrapped(data, idx):
        calls.append(idx.clone())
        return clipped_total(data, idx)

    return wrapped


# ------------------------------------------------------------------ the count mechanism
@pytest.mark.parametrize("n, m, unclipped", [(50, 64, 20), (1000, 100, 1000)])
def test_the_noisy_fraction_is_unbiased_with_std_sigma_b_over_the_expected_batch(n, m, unclipped):
    """With q = 1 the fraction's std is sigma_b / n. With q < 1 and every unit unclipped the recentred count
    also varies with the realised batch: std sqrt(sigma_b^2 + n q (1 - q) / 4) / (q n); dividing by the
    realised size instead would give about sigma_b / (q n), five times less here."""
    sigma_b, steps = 1.0, 2000
    norms = torch.cat([torch.full((unclipped,), 0.5), torch.full((n - unclipped,), 2.0)])
    trainer, _ = fit(NormIsX(), norms_data(norms), batch_size=m, steps=steps, noise_multiplier=1.0,
                     adaptive_clip=AdaptiveClip(lr=0.0, count_noise=sigma_b))
    b = np.array(trainer.clip_estimator.fractions)
    q = min(1.0, m / n)
    std = math.sqrt(sigma_b ** 2 + n * q * (1 - q) / 4) / (q * n)
    assert b.std() == pytest.approx(std, rel=0.07)
    assert abs(b.mean() - unclipped / n) < 4 * std / math.sqrt(steps)
    assert set(trainer.clip_estimator.clip_norms) == {1.0}  # lr = 0: C never moves


# ------------------------------------------------------------------ convergence
@pytest.mark.parametrize("gamma", [0.5, 0.8])
def test_without_noise_the_estimate_converges_to_the_quantile(gamma):
    norms = lognormal(2000)
    est = QuantileEstimator(AdaptiveClip(target_quantile=gamma), 0.05, 2000, Stream(0, "count noise", secure=False))
    est.count_noise = 1e-12  # no privacy noise: the exact fraction of a full pass
    for _ in range(300):
        est.observe(int((norms <= est.clip_norm).sum()), len(norms))
    assert est.clip_norm == pytest.approx(float(torch.quantile(norms, gamma)), rel=0.01)


def _grouped_norms(patients, seed=0):
    """Patients with 1-4 positive rows each; a patient's gradient is the sum of its rows, norm = that sum."""
    g = torch.Generator().manual_seed(seed)
    totals = lognormal(patients, seed)
    counts = torch.randint(1, 5, (patients,), generator=g)
    groups = torch.repeat_interleave(torch.arange(patients), counts)
    shares = torch.rand(len(groups), generator=g) + 0.1
    shares = shares / torch.zeros(patients).index_add_(0, groups, shares)[groups]
    return norms_data(shares * totals[groups]), groups, totals


@pytest.mark.parametrize("backend, grouped, accounting", [("fast", False, "split"), ("functorch", False, "split"),
                                                          ("fast", True, "split"), ("functorch", True, "split"),
                                                          ("fast", True, "compose")])
def test_with_noise_the_clip_converges_to_the_quantile(backend, grouped, accounting):
    if grouped:
        data, groups, norms = _grouped_norms(1000)
    else:
        norms, groups = lognormal(1000), None
        data = norms_data(norms)
    trainer, result = fit(NormIsX(), data, groups=groups, batch_size=200, steps=250, noise_multiplier=1.0,
                          backend=backend, clip_norm=0.05, adaptive_clip=AdaptiveClip(accounting=accounting))
    assert result.backend == backend and trainer.clip_estimator.count_noise == 10.0  # expected batch / 20
    tail = float(np.exp(np.mean(np.log(trainer.clip_estimator.clip_norms[-100:]))))
    assert tail == pytest.approx(float(torch.quantile(norms, 0.5)), rel=0.1)


def test_a_frozen_warm_up_privately_replaces_the_first_iterations_percentile():
    """The dp-lora recipe (C = 80th percentile of early gradient norms), done privately: a charged warm-up."""
    norms = lognormal(1000)
    settings = AdaptiveClip(target_quantile=0.8, warmup_steps=80, freeze_after_warmup=True, lr=0.3)
    applied = []
    dp = DPSettings(batch_size=200, steps=10, clip_norm=0.1, noise_seed=0, accountant="rdp")
    trainer = Trainer(linear(), NormIsX(),
                      TrainConfig(dp=dp, noise_multiplier=1.0, progress=False, adaptive_clip=settings),
                      ledger=PrivacyLedger(1000, accountant="rdp"))
    original = trainer._apply
    trainer._apply = lambda grad: (applied.append(1), original(grad))
    trainer.fit(norms_data(norms))
    est = trainer.clip_estimator
    assert len(applied) == 10 and len(est.fractions) == 80  # the warm-up updates no weights
    assert est.clip_norms[-1] == pytest.approx(float(torch.quantile(norms, 0.8)), rel=0.15)
    assert [h["clip_norm"] for h in trainer.history] == [est.clip_norm] * len(trainer.history)  # frozen
    assert [(e.name, e.steps) for e in trainer.ledger.entries] == [(ac.WARMUP, 80), (ac.TRAINING, 10)]


# ------------------------------------------------------------------ no non-private norms
WARM, STEPS = 3, 25
REAL_COUNT = ac.noisy_fraction


def _spied_run(monkeypatch, norms, perturb=False, accounting="split"):
    """A run whose count mechanism and clipping calls are recorded. ``perturb`` rescales every norm the
    backend returns while keeping it on the same side of C (the clipped sums, computed before, are untouched)."""
    released, calls = [], []

    def spy(unclipped, included, *args):
        out = REAL_COUNT(unclipped, included, *args)
        released.append((unclipped, included, out))
        return out

    monkeypatch.setattr(ac, "noisy_fraction", spy)
    settings = AdaptiveClip(target_quantile=0.6, lr=0.3, count_noise=2.0, accounting=accounting, warmup_steps=WARM)
    torch.manual_seed(0)
    dp = DPSettings(batch_size=40, steps=STEPS, clip_norm=0.3, seed=7, noise_seed=7, accountant="rdp")
    trainer = Trainer(linear(), NormIsX(),
                      TrainConfig(dp=dp, noise_multiplier=1.0, progress=False, adaptive_clip=settings),
                      ledger=PrivacyLedger(len(norms), accountant="rdp"))
    original, g = trainer.clipped_sum, torch.Generator().manual_seed(1)

    def clipped_sum(batch, groups=None):
        summed, got = original(batch, groups)
        c = trainer.clip_norm
        calls.append((c, int((got <= c).sum()), len(got)))
        if perturb:
            r = torch.rand(got.shape, generator=g)
            got = torch.where(got <= c, got * r, c * (1.01 + 5 * r))
        return summed, got

    trainer.clipped_sum = clipped_sum
    trainer.fit(norms_data(norms))
    return trainer, released, calls


@pytest.mark.parametrize("accounting", ["split", "compose"])
def test_the_clip_norm_depends_on_the_data_only_through_the_noisy_counts(monkeypatch, accounting):
    norms = lognormal(400, seed=3)
    trainer, released, calls = _spied_run(monkeypatch, norms, accounting=accounting)
    # 1. C_0 is the public setting, and every later C replays from it and the released fractions alone
    replay = [0.3]
    for _, _, b in released:
        replay.append(replay[-1] * math.exp(-0.3 * (b - 0.6)))
    assert trainer.clip_estimator.clip_norms == replay and len(released) == WARM + STEPS
    # 2. every clipping call used that C: warm-up calls one each, then each step's call(s) (compose: two)
    per_step = 1 if accounting == "split" else 2
    release_of_call = list(range(WARM)) + [WARM + t for t in range(STEPS) for _ in range(per_step)]
    assert [c for c, _, _ in calls] == [replay[k] for k in release_of_call]
    # 3. the count mechanism got the true count of unclipped units of its sample, and nothing else of the data
    counted = calls[:WARM] + calls[WARM:][per_step - 1::per_step]  # compose: the count's own sample
    assert [r[:2] for r in released] == [c[1:] for c in counted]
    # 4. rescaling every norm while keeping its side of C changes nothing: C never reads a norm's value
    again, released_again, calls_again = _spied_run(monkeypatch, norms, perturb=True, accounting=accounting)
    assert again.clip_estimator.clip_norms == replay and calls_again == calls
    assert [r[:2] for r in released_again] == [r[:2] for r in released]
    assert torch.equal(again.model.weight, trainer.model.weight)
    # the test can fail: other data, other counts, other clip norms
    other, _, _ = _spied_run(monkeypatch, norms * 3, accounting=accounting)
    assert other.clip_estimator.clip_norms != replay


# ------------------------------------------------------------------ resume and settings
def _tabular(n=64, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 6, generator=g)
    return {"x": x, "y": (x[:, 2] + 0.5 * x[:, 0] > 0).float()}


def _resumable(folder, accounting, crash_at=None):
    torch.manual_seed(0)
    settings = AdaptiveClip(count_noise=1.5, accounting=accounting, warmup_steps=3)
    cfg = TrainConfig(dp=DPSettings(batch_size=8, steps=20, seed=11, noise_seed=11, clip_norm=0.2, accountant="rdp"),
                      noise_multiplier=1.1, progress=False, checkpoint_dir=str(folder), checkpoint_every=4,
                      adaptive_clip=settings)
    trainer = Trainer(TabularMLP(6, hidden=16), DPSGD(), cfg, ledger=PrivacyLedger(64, accountant="rdp"))
    if crash_at is not None:
        crash_at_step(trainer, crash_at)
    trainer.fit(_tabular())
    return trainer


@pytest.mark.parametrize("accounting", ["split", "compose"])
def test_a_killed_run_resumes_with_its_clip_norm_and_estimator(tmp_path, accounting):
    ref = _resumable(tmp_path / "a", accounting)
    with pytest.raises(KeyboardInterrupt):
        _resumable(tmp_path / "b", accounting, crash_at=14)
    resumed = _resumable(tmp_path / "b", accounting)
    for (n, p), (_, q) in zip(ref.model.state_dict().items(), resumed.model.state_dict().items()):
        assert torch.equal(p, q), n
    assert resumed.clip_estimator.state_dict() == ref.clip_estimator.state_dict()
    assert len(ref.clip_estimator.fractions) == 23 and resumed.clip_norm == ref.clip_norm != 0.2
    assert resumed.ledger.state_dict() == ref.ledger.state_dict()


def test_a_checkpoint_of_another_adaptive_setting_is_refused(tmp_path):
    _resumable(tmp_path / "c", "split")
    with pytest.raises(ValueError, match="different run"):
        _resumable(tmp_path / "c", "compose")


@pytest.mark.parametrize("settings, match", [
    (AdaptiveClip(target_quantile=1.0), "target_quantile"),
    (AdaptiveClip(lr=-0.1), "lr"),
    (AdaptiveClip(count_noise=0.0), "count_noise"),
    (AdaptiveClip(accounting="both"), "accounting"),
    (AdaptiveClip(warmup_steps=-1), "warmup_steps"),
    (AdaptiveClip(freeze_after_warmup=True), "warmup_steps > 0"),
])
def test_bad_settings_are_named(settings, match):
    with pytest.raises(ValueError, match=match):
        Trainer(linear(), NormIsX(), TrainConfig(noise_multiplier=1.0, adaptive_clip=settings))


def test_a_split_that_leaves_the_gradient_no_noise_is_refused():
    with pytest.raises(ValueError, match="2 sigma_b > sigma"):
        fit(NormIsX(), norms_data(lognormal(100)), noise_multiplier=3.0, adaptive_clip=AdaptiveClip(count_noise=1.0))
