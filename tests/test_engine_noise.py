"""The secret streams of a private run (engine/noise.py): independent per name and root, secure by default."""

import math

import numpy as np
import pytest
import torch

from dpcare.engine import TrainConfig, Trainer
from dpcare.engine.noise import Stream
from dpcare.privacy.randomness import SECURE_SUMMANDS
from dpcare.methods import DPSGD
from dpcare.models import TabularMLP
from dpcare.privacy import PrivacyLedger
from dpcare.settings import DPSettings

NAMES = ("sampling", "noise", "count noise", "count sample")


def trainer(noise_seed, adaptive=False):
    from dpcare.engine.adaptive_clip import AdaptiveClip

    cfg = TrainConfig(dp=DPSettings(batch_size=8, steps=2, seed=0, noise_seed=noise_seed), noise_multiplier=1.0,
                      progress=False, adaptive_clip=AdaptiveClip() if adaptive else None)
    return Trainer(TabularMLP(4, hidden=4, dropout=0.0), DPSGD(), cfg, ledger=PrivacyLedger(64))


def test_no_stream_of_one_pinned_run_repeats_a_stream_of_a_run_with_a_nearby_noise_seed():
    """LiRA shadows pin consecutive noise seeds: with streams at root + 0, 2, 4, 5, shadow k's noise was shadow
    k+2's sampling. Every stream of seeds 0..7 must start from its own state."""
    states = {}
    for seed in range(8):
        for name, stream in trainer(seed)._streams.items():
            states[(seed, name)] = stream._generator.get_state()
    assert len(states) == 8 * len(NAMES)
    distinct = {bytes(s.numpy()) for s in states.values()}
    assert len(distinct) == len(states)


def test_without_a_noise_seed_every_stream_is_secure_and_with_one_none_is():
    assert all(s.secure for s in trainer(None, adaptive=True)._streams.values())
    pinned = trainer(3, adaptive=True)
    assert not any(s.secure for s in pinned._streams.values())
    assert set(pinned._streams) == set(NAMES)


def test_a_secure_draw_is_fresh_per_draw_and_a_function_of_root_name_and_draw_number():
    a, b = Stream(2**100 + 5, "noise", secure=True), Stream(2**100 + 5, "noise", secure=True)
    first = a.normal((1000,), 1.0)
    assert not torch.equal(first, a.normal((1000,), 1.0))  # the next draw: another generator
    assert torch.equal(first, b.normal((1000,), 1.0))  # the same root and draw number: the same draw (resume)
    other = Stream(2**100 + 5, "sampling", secure=True)
    assert not torch.equal(first, other.normal((1000,), 1.0))  # another name: another stream
    c = Stream(2**100 + 5, "noise", secure=True)
    c.load_state_dict(a.state_dict())  # a resumed run continues at the draw it stopped at
    assert torch.equal(c.normal((50,), 1.0), a.normal((50,), 1.0))


def test_a_secure_gaussian_is_the_scaled_sum_of_several_draws():
    """The floating-point defence (Holohan & Braghin 2021): SECURE_SUMMANDS draws of std sigma / 2, summed."""
    assert SECURE_SUMMANDS == 4
    s = Stream(11, "noise", secure=True)
    got = s.normal((7, 3), 2.5)
    rng = np.random.Generator(np.random.PCG64DXSM(np.random.SeedSequence(11, spawn_key=(s._key, 0))))
    parts = [rng.standard_normal((7, 3), dtype=np.float32) for _ in range(SECURE_SUMMANDS)]
    want = (parts[0] + parts[1] + parts[2] + parts[3]) * np.float32(2.5 / 2)
    assert torch.allclose(got, torch.from_numpy(want), rtol=1e-6, atol=1e-6)
    assert got.dtype == torch.float32 and s.normal((), 1.0, torch.float64).dtype == torch.float64


@pytest.mark.parametrize("secure", [False, True])
def test_the_noise_has_mean_zero_and_std_sigma(secure):
    stream = Stream(3, "noise", secure)
    draws = torch.cat([stream.normal((20_000,), 1.7) for _ in range(3)])
    assert float(draws.std()) == pytest.approx(1.7, rel=0.02)
    assert abs(float(draws.mean())) < 4 * 1.7 / math.sqrt(draws.numel())
    # fourth moment of a Gaussian: 3 sigma^4 (a sum of uniforms or a wrong scale would miss it)
    assert float((draws / 1.7).pow(4).mean()) == pytest.approx(3.0, rel=0.08)
