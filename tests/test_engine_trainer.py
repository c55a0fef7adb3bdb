"""The training loop: sampling, noise scale, expected-batch division, micro-batching, resume."""

import math

import numpy as np
import pytest
import torch
from helpers import crash_at_step

from dpcare.engine import Objective, TrainConfig, Trainer
from dpcare.engine.noise import Stream
from dpcare.engine.sampling import poisson_indices
from dpcare.methods import DPSGD, FeatureDP, NonPrivate
from dpcare.models import TabularMLP
from dpcare.privacy import PrivacyLedger
from dpcare.settings import DPSettings


def data(n=64, d=6, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, d, generator=g)
    x_pub = x.clone()
    x_pub[:, :2] = torch.randn(n, 2, generator=g)
    y = (x[:, 2] + 0.5 * x[:, 0] > 0).float()
    return {"x": x, "x_pub": x_pub, "y": y}


class ZeroLoss(Objective):
    """A loss with zero gradient: the private gradient is pure noise."""

    name = "zero"

    def private_loss(self, model, batch):
        return 0.0 * model(batch["x"])[:, 0]


def test_noise_std_is_sigma_c_over_expected_batch():
    torch.manual_seed(0)
    model = TabularMLP(6, hidden=128, dropout=0.0)
    sigma, clip, m, n = 1.3, 0.7, 16, 64
    trainer = Trainer(model, ZeroLoss(), TrainConfig(dp=DPSettings(batch_size=m, clip_norm=clip),
                                                     noise_multiplier=sigma, progress=False), ledger=PrivacyLedger(n))
    d = data(n)
    idx = torch.arange(40)  # realised size 40 differs from the expected 16
    noise = torch.cat([g.flatten() for g in trainer.private_gradient(d, idx, expected_batch=m).values()])
    expected = sigma * clip / m
    # ~30k samples: the sample std is within 2% of the truth with overwhelming probability
    assert noise.numel() > 20_000
    assert float(noise.std()) == pytest.approx(expected, rel=0.02)
    assert abs(float(noise.mean())) < 4 * expected / math.sqrt(noise.numel())


@pytest.mark.parametrize("secure", [False, True])
def test_poisson_inclusion_is_independent_with_rate_q(secure):
    n, q, draws = 40, 0.15, 4000
    g = Stream(1, "sampling", secure)
    masks = np.zeros((draws, n), dtype=bool)
    for t in range(draws):
        masks[t, poisson_indices(n, q, g).numpy()] = True
    rate = masks.mean(0)
    tol = 4.5 * math.sqrt(q * (1 - q) / draws)
    assert np.all(np.abs(rate - q) < tol), rate
    sizes = masks.sum(1)
    assert sizes.var() == pytest.approx(n * q * (1 - q), rel=0.12)  # binomial, not fixed size
    corr = np.corrcoef(masks.T.astype(float))
    off = corr[~np.eye(n, dtype=bool)]
    assert np.abs(off).max() < 5.5 / math.sqrt(draws)  # pairwise independence
    # empty batches happen and are legal
    g2 = Stream(2, "sampling", secure)
    assert any(poisson_indices(5, 0.05, g2).numel() == 0 for _ in range(200))


def test_empty_batch_step_adds_only_noise_and_is_charged():
    model = TabularMLP(6, hidden=8, dropout=0.0)
    ledger = PrivacyLedger(64, delta=1e-6)
    trainer = Trainer(model, DPSGD(), TrainConfig(dp=DPSettings(batch_size=1, steps=1), noise_multiplier=1.0,
                                                  progress=False),
                      ledger=ledger)
    grad = trainer.private_gradient(data(), torch.tensor([], dtype=torch.long), expected_batch=1.0)
    assert all(torch.isfinite(g).all() for g in grad.values())
    trainer.fit(data())
    assert ledger.epsilon() > 0


def test_micro_batching_gives_the_same_gradient():
    d = data(50)
    grads = []
    for physical in (7, 1024):
        torch.manual_seed(0)
        model = TabularMLP(6, hidden=16, dropout=0.0).double()
        t = Trainer(model, DPSGD(), TrainConfig(dp=DPSettings(batch_size=10, seed=5, noise_seed=5),
                                                noise_multiplier=1.0, max_physical_batch=physical,
                                                progress=False), ledger=PrivacyLedger(50))
        dd = {k: v.double() for k, v in d.items()}
        grads.append(t.private_gradient(dd, torch.arange(50), expected_batch=10.0))
    for k in grads[0]:
        torch.testing.assert_close(grads[0][k], grads[1][k])


def test_non_private_micro_batching_gives_the_same_mean_gradient_and_loss():
    """Non-private (and public-branch) batches larger than max_physical_batch are summed in chunks."""
    dd = {k: v.double() for k, v in data(50).items()}
    out = []
    for physical in (7, 1024):
        torch.manual_seed(0)
        model = TabularMLP(6, hidden=16, dropout=0.0).double()
        t = Trainer(model, NonPrivate(), TrainConfig(dp=DPSettings(batch_size=10), max_physical_batch=physical,
                                                     progress=False))
        out.append(t.mean_gradient(NonPrivate().private_loss, dd))
    assert out[0][1] == pytest.approx(out[1][1], rel=1e-12)
    for k in out[0][0]:
        torch.testing.assert_close(out[0][0][k], out[1][0][k])


def test_ledger_is_charged_once_per_private_step_and_calibration_meets_target():
    ledger = PrivacyLedger(64)
    cfg = TrainConfig(dp=DPSettings(batch_size=8, steps=40, epsilon=2.0), progress=False)
    trainer = Trainer(TabularMLP(6, hidden=8), FeatureDP(), cfg, ledger=ledger)
    result = trainer.fit(data(), {"x_pub": data()["x_pub"], "y": data()["y"]})
    assert result.steps == 40 and result.sampling_rate == pytest.approx(8 / 64)
    assert ledger.epsilon() <= 2.0
    assert ledger.epsilon() > 1.9  # calibrated, not loose
    assert result.guarantee.epsilon == pytest.approx(ledger.epsilon())


def run(steps, ckpt_dir, crash_at=None, ema_decay=None, noise_seed=11, **checkpoints):
    torch.manual_seed(0)
    model = TabularMLP(6, hidden=16)  # dropout on: the RNG state must resume too
    cfg = TrainConfig(dp=DPSettings(batch_size=8, steps=steps, seed=11, noise_seed=noise_seed), noise_multiplier=1.1,
                      public_pretrain_steps=3, progress=False, checkpoint_dir=str(ckpt_dir), ema_decay=ema_decay,
                      **({"checkpoint_every": 4} | checkpoints))
    trainer = Trainer(model, FeatureDP(), cfg, ledger=PrivacyLedger(64))
    if crash_at is not None:
        crash_at_step(trainer, crash_at)
    d = data()
    trainer.fit(d, {"x_pub": d["x_pub"], "y": d["y"]})
    return model, trainer


@pytest.mark.parametrize("ema_decay", [None, 0.9])
def test_killed_run_resumes_to_the_same_model_and_epsilon(tmp_path, ema_decay):
    ref_model, ref = run(20, tmp_path / "a", ema_decay=ema_decay)
    with pytest.raises(KeyboardInterrupt):
        run(20, tmp_path / "b", crash_at=14, ema_decay=ema_decay)
    model, resumed = run(20, tmp_path / "b", ema_decay=ema_decay)
    for (n, p), (_, q) in zip(ref_model.state_dict().items(), model.state_dict().items()):
        assert torch.equal(p, q), n
    assert resumed.ledger.epsilon() == pytest.approx(ref.ledger.epsilon(), rel=1e-12)


def test_long_steps_are_checkpointed_by_time_too(tmp_path):
    """checkpoint_seconds: a run of few, long steps (an LM on a CPU) is checkpointed when that much time has
    passed, not only every checkpoint_every steps; killed at step 14, it resumes from there to the same model."""
    from dpcare.engine import checkpoint as ckpt
    from dpcare.engine.trainer import CHECKPOINT_NAME

    ref_model, _ = run(20, tmp_path / "a")
    timed = {"checkpoint_every": 1000, "checkpoint_seconds": 1e-9}
    with pytest.raises(KeyboardInterrupt):
        run(20, tmp_path / "b", crash_at=14, **timed)
    assert ckpt.load(tmp_path / "b" / CHECKPOINT_NAME)["step"] == 14  # none without the time rule (every 1000)
    model, _ = run(20, tmp_path / "b", **timed)
    for (n, p), (_, q) in zip(ref_model.state_dict().items(), model.state_dict().items()):
        assert torch.equal(p, q), n


def test_resume_refuses_a_checkpoint_of_another_run(tmp_path):
    run(8, tmp_path / "c")
    with pytest.raises(ValueError, match="different run"):
        run(12, tmp_path / "c")


def test_same_seed_same_model_different_seed_different_model():
    def train(seed):  # both seeds pinned: the public one and the (secret) noise_seed
        torch.manual_seed(123)
        model = TabularMLP(6, hidden=8)
        Trainer(model, DPSGD(), TrainConfig(dp=DPSettings(batch_size=8, steps=5, seed=seed, noise_seed=seed),
                                            noise_multiplier=1.0, progress=False),
                ledger=PrivacyLedger(64)).fit(data())
        return torch.cat([p.flatten() for p in model.parameters()])

    assert torch.equal(train(1), train(1))
    assert not torch.equal(train(1), train(2))


def test_nonprivate_training_learns():
    torch.manual_seed(0)
    model = TabularMLP(6, hidden=32, dropout=0.0)
    d = data(256)
    Trainer(model, NonPrivate(), TrainConfig(dp=DPSettings(batch_size=32, epochs=20), lr=1e-2, progress=False)).fit(d)
    acc = ((model(d["x"])[:, 0] > 0).float() == d["y"]).float().mean()
    assert acc > 0.9


@pytest.mark.parametrize(
    "make, match",
    [
        (lambda: TrainConfig(dp=DPSettings(batch_size=0)), "batch_size"),
        (lambda: TrainConfig(dp=DPSettings(clip_norm=-1.0)), "clip"),
        (lambda: TrainConfig(dp={"epsilon": 1.0}), "dp=DPSettings"),
        (lambda: TrainConfig(noise_multiplier=-1.0), "noise"),
        (lambda: TrainConfig(backend="gpu"), "backend"),
        (lambda: TrainConfig(alpha=-0.5), "alpha"),
    ],
)
def test_bad_config_is_named(make, match):
    with pytest.raises(ValueError, match=match):
        Trainer(TabularMLP(6, hidden=8), DPSGD(), make())


def test_the_engine_runs_the_dp_settings_themselves_delta_and_accountant_included():
    """The ledger the trainer makes takes the settings' delta and accountant (a copy of the settings into a second
    config once dropped them); a ledger made elsewhere must agree with the settings; unit = patient needs groups."""
    dp = DPSettings(epsilon=2.0, delta=1e-4, accountant="rdp", batch_size=8, steps=4)
    trainer = Trainer(TabularMLP(6, hidden=8), DPSGD(), TrainConfig(dp=dp, progress=False))
    assert trainer.config.dp is dp
    result = trainer.fit(data())
    assert (result.ledger.delta, result.ledger.accountant) == (1e-4, "rdp")
    assert result.guarantee.epsilon == pytest.approx(2.0, rel=0.02) and result.guarantee.delta == 1e-4
    for ledger in (PrivacyLedger(64, delta=1e-4), PrivacyLedger(64, delta=1e-5, accountant="rdp")):
        with pytest.raises(ValueError, match="build the ledger from the same settings"):
            Trainer(TabularMLP(6, hidden=8), DPSGD(), TrainConfig(dp=dp, progress=False), ledger).fit(data())
    patients = dp.replace(unit="patient", delta=None, accountant="pld")
    with pytest.raises(ValueError, match="unit = 'patient'"):
        Trainer(TabularMLP(6, hidden=8), DPSGD(), TrainConfig(dp=patients, progress=False)).fit(data())


def test_a_fixed_sampling_rate_replaces_the_batch_over_n():
    """The audit's rate is planned before its canaries are drawn: q must not move with the rows included."""
    cfg = TrainConfig(dp=DPSettings(batch_size=8, steps=2), sampling_rate=0.25, noise_multiplier=1.0, progress=False)
    trainer = Trainer(TabularMLP(6, hidden=8), DPSGD(), cfg)
    result = trainer.fit(data(n=60))
    assert result.sampling_rate == 0.25 and trainer.ledger.entries[0].description.count("q = 0.25") == 1


def test_a_fixed_noise_multiplier_is_used_instead_of_calibrating_to_epsilon():
    dp = DPSettings(epsilon=1.0, batch_size=8, steps=3)
    result = Trainer(TabularMLP(6, hidden=8), DPSGD(), TrainConfig(dp=dp, noise_multiplier=0.7,
                                                                   progress=False)).fit(data())
    assert result.noise_multiplier == 0.7 and result.guarantee.epsilon > 1.0


def test_bad_data_is_named():
    t = Trainer(TabularMLP(6, hidden=8), FeatureDP(), TrainConfig(dp=DPSettings(steps=1), noise_multiplier=1.0,
                                                                  progress=False))
    d = data()
    with pytest.raises(ValueError, match="public_data"):
        t.fit(d)
    bad = dict(d, x=d["x"].clone())
    bad["x"][3, 1] = float("nan")
    with pytest.raises(ValueError, match="NaN"):
        t.fit(bad, {"x_pub": d["x_pub"], "y": d["y"]})
    with pytest.raises(ValueError, match="lacks the keys"):
        t.fit({"x": d["x"], "y": d["y"]}, {"x_pub": d["x_pub"], "y": d["y"]})


def test_ema_is_the_moving_average_of_the_iterates_and_ends_in_the_model():
    decay, iterates = 0.8, []
    torch.manual_seed(5)
    model = TabularMLP(6, hidden=8, dropout=0.0)
    trainer = Trainer(model, DPSGD(), TrainConfig(dp=DPSettings(batch_size=8, steps=6), noise_multiplier=1.0,
                                                  ema_decay=decay, progress=False), ledger=PrivacyLedger(64))
    start = torch.cat([p.detach().flatten().clone() for p in model.parameters()])
    original = trainer._apply

    def recording(grad):
        original(grad)
        iterates.append(torch.cat([p.detach().flatten().clone() for p in model.parameters()]))

    trainer._apply = recording
    trainer.fit(data())
    expected = start
    for w in iterates:
        expected = decay * expected + (1 - decay) * w
    final = torch.cat([p.detach().flatten() for p in model.parameters()])
    assert len(iterates) == 6
    assert torch.allclose(final, expected, atol=1e-6)
    assert not torch.allclose(final, iterates[-1])  # the model holds the average, not the last iterate


def test_ema_decay_outside_unit_interval_is_refused():
    with pytest.raises(ValueError, match="ema_decay"):
        Trainer(TabularMLP(6, hidden=8), DPSGD(), TrainConfig(noise_multiplier=1.0, ema_decay=1.0),
                ledger=PrivacyLedger(64))


# ---------------------------------------------------------------- the unit sampled is the unit named
def test_a_patient_ledger_without_groups_is_refused():
    """A caller's ledger declared for patients while fit() samples rows would print a patient-level epsilon
    with the patients' n for a row-level mechanism (a false statement): refused before any step."""
    from dpcare.exceptions import SettingsError
    from dpcare.privacy import ProtectedUnit

    d = data(64)
    trainer = Trainer(TabularMLP(6, hidden=8), DPSGD(), TrainConfig(dp=DPSettings(batch_size=8, steps=2),
                                                                    noise_multiplier=1.0, progress=False),
                      ledger=PrivacyLedger(16, unit=ProtectedUnit.PATIENT))
    with pytest.raises(SettingsError, match="protects patients but fit\\(\\) got no groups="):
        trainer.fit(d)
    assert trainer.step_count == 0
    # red when _check_unit is not called in fit (checked)


def test_the_ledger_counts_the_units_the_engine_samples():
    from dpcare.exceptions import SettingsError

    d = data(64)
    trainer = Trainer(TabularMLP(6, hidden=8), DPSGD(), TrainConfig(dp=DPSettings(batch_size=8, steps=2),
                                                                    noise_multiplier=1.0,
                                                                    progress=False), ledger=PrivacyLedger(100))
    with pytest.raises(SettingsError, match="ledger counts n = 100 units but the engine samples from 64"):
        trainer.fit(d)
    ok = Trainer(TabularMLP(6, hidden=8), DPSGD(), TrainConfig(dp=DPSettings(batch_size=8, steps=2),
                                                               noise_multiplier=1.0,
                                                               progress=False), ledger=PrivacyLedger(64))
    assert ok.fit(d).guarantee.n == 64


def test_a_batch_covering_every_unit_warns():
    d = data(32)
    trainer = Trainer(TabularMLP(6, hidden=8), DPSGD(), TrainConfig(dp=DPSettings(batch_size=64, steps=1),
                                                                    noise_multiplier=1.0,
                                                                    progress=False), ledger=PrivacyLedger(32))
    with pytest.warns(UserWarning, match="covers all 32 privacy units"):
        trainer.fit(d)
