"""The U-Net under fast clipping, the five diffusion objectives, matched noise in Algorithm 1, sampling."""

import pytest
import torch
from grad_reference import assert_same_clipped_sums, reference

from dpcare.engine import TrainConfig, Trainer
from dpcare.engine.fast_clipping import clipped_sum_fast, unsupported_reason
from dpcare.images.diffusion import DiffusionObjective, NoiseSchedule, denoising_loss, sample
from dpcare.images.unet import UNet
from dpcare.privacy import ProtectedUnit


def batch(b=4, size=8, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.rand(b, 1, size, size, generator=g) * 2 - 1
    x_pub = torch.nn.functional.avg_pool2d(x, 3, stride=1, padding=1)  # any fixed smoothing
    return {"x": x.double(), "x_pub": x_pub.double(), "y": torch.randint(0, 3, (b,), generator=g)}


def small_unet():
    torch.manual_seed(0)
    return UNet(channels=1, size=8, widths=(8, 16), n_classes=3, emb_dim=16).double()


def test_unet_has_fast_rules_and_keeps_examples_apart():
    model = small_unet()
    assert unsupported_reason(model, dict(model.named_parameters())) is None
    b = batch()
    t = torch.tensor([3, 50, 7, 99])
    out = model(b["x"], t, b["y"])
    assert out.shape == b["x"].shape
    changed = b["x"].clone()
    changed[1] += 1.0
    assert torch.equal(model(changed, t, b["y"])[0], out[0])


@pytest.mark.parametrize("kind", ["dp", "fdp-alg1"])
def test_diffusion_objectives_clip_like_the_per_example_loop(kind):
    """Fast clipping of the U-Net (Conv2d, GroupNorm, Linear, Embedding; Algorithm 1 calls it twice)
    equals the per-example loop with the same diffusion times and noise."""
    model = small_unet()
    objective = DiffusionObjective(kind, NoiseSchedule(100))
    b = batch()

    def fixed_noise(m, bb):  # the same draws for the batch and for each example alone
        torch.manual_seed(123 + int(bb["y"].sum()) + int(1000 * bb["x"].sum()) % 97)
        return objective.private_loss(m, bb)

    got, norms = clipped_sum_fast(model, fixed_noise, b, dict(model.named_parameters()), 0.05)
    # per-example reference with the draws each example got inside the batch
    torch.manual_seed(123 + int(b["y"].sum()) + int(1000 * b["x"].sum()) % 97)
    t = torch.randint(0, 100, (4,))
    eps = torch.randn_like(b["x"])

    def same_draws(m, bb):
        i = int(torch.nonzero((b["x"] == bb["x"][0]).flatten(1).all(1))[0])
        loss = denoising_loss(m, objective.schedule, bb["x"], bb["y"], t[i:i + 1], eps[i:i + 1])
        if kind == "fdp-alg1":
            loss = loss - denoising_loss(m, objective.schedule, bb["x_pub"], bb["y"], t[i:i + 1], eps[i:i + 1])
        return loss

    want, want_norms = reference(model, same_draws, b, 0.05)
    assert_same_clipped_sums(got, norms, want, want_norms)


def test_algorithm_1_matches_time_and_noise_of_both_terms():
    """l(x) - l(Psi(x)) is exactly 0 when Psi(x) = x: both terms use the same t and eps."""
    model = small_unet()
    b = batch()
    b["x_pub"] = b["x"].clone()
    losses = DiffusionObjective("fdp-alg1", NoiseSchedule(100)).private_loss(model, b)
    assert torch.equal(losses, torch.zeros(4, dtype=losses.dtype))


def test_public_method_reads_only_blurred_images():
    model = small_unet()
    b = batch()
    objective = DiffusionObjective("public", NoiseSchedule(100))
    assert "x" not in objective.private_keys
    torch.manual_seed(0)
    a = objective.private_loss(model, b)
    torch.manual_seed(0)
    sharp_changed = {**b, "x": b["x"] * -3}
    assert torch.equal(objective.private_loss(model, sharp_changed), a)
    alg1 = DiffusionObjective("fdp-alg1", NoiseSchedule(100))
    torch.manual_seed(0)
    p = alg1.public_loss(model, b)
    torch.manual_seed(0)
    assert torch.equal(alg1.public_loss(model, sharp_changed), p)


def test_units_and_guarantees_of_the_five_methods():
    s = NoiseSchedule(50)
    kinds = {k: DiffusionObjective(k, s) for k in DiffusionObjective.KINDS}
    assert not kinds["non-private"].private and not kinds["public"].private
    assert kinds["dp"].unit is ProtectedUnit.EXAMPLE
    assert kinds["fdp-dpsgd"].unit is ProtectedUnit.FEATURES and kinds["fdp-alg1"].unit is ProtectedUnit.FEATURES
    assert kinds["fdp-alg1"].has_public_branch and not kinds["fdp-dpsgd"].has_public_branch
    with pytest.raises(ValueError, match="unknown diffusion method"):
        DiffusionObjective("fdp", s)


def test_batch_norm_unet_is_refused():
    model = torch.nn.Sequential(torch.nn.Conv2d(1, 4, 3), torch.nn.BatchNorm2d(4))
    with pytest.raises(ValueError, match="batch normalisation"):
        Trainer(model, DiffusionObjective("dp", NoiseSchedule(10)), TrainConfig(noise_multiplier=1.0, progress=False))


def test_sampling_is_seeded_and_in_range():
    model = small_unet().float()
    s = NoiseSchedule(50)
    labels = torch.tensor([0, 1, 2])
    a = sample(model, s, labels, (1, 8, 8), steps=5, generator=torch.Generator().manual_seed(1))
    b = sample(model, s, labels, (1, 8, 8), steps=5, generator=torch.Generator().manual_seed(1))
    assert torch.equal(a, b) and a.shape == (3, 1, 8, 8) and a.abs().max() <= 1
