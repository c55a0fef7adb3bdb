"""seeded_initialisation: new parameters are a function of the public seed, and the generators outside the block
are left as they were (the CPU generator restored, no GPU generator seeded)."""

import torch

from dpcare.engine.initialisation import seeded_initialisation


def _draw(seed):
    with seeded_initialisation(seed):
        return torch.nn.Linear(4, 3).weight.detach().clone()


def test_a_seed_fixes_the_draw_whatever_used_the_generator_before():
    first = _draw(5)
    torch.rand(7)  # the global generator moves on
    assert torch.equal(first, _draw(5))
    assert not torch.equal(first, _draw(6))


def test_the_cpu_generator_is_restored_after_the_block():
    torch.manual_seed(123)
    expected = torch.rand(5)
    torch.manual_seed(123)
    _draw(5)
    assert torch.equal(torch.rand(5), expected)


def test_no_gpu_generator_is_seeded(monkeypatch):
    """torch.manual_seed would also (lazily) seed every CUDA generator and leave it seeded from the public seed."""
    calls = []
    monkeypatch.setattr(torch.cuda, "manual_seed_all", lambda s: calls.append(s))
    monkeypatch.setattr(torch.cuda, "manual_seed", lambda s: calls.append(s))
    _draw(5)
    assert calls == []


def test_no_seed_draws_fresh_randomness():
    torch.manual_seed(1)
    a = _draw(None)
    assert not torch.equal(a, _draw(None))
