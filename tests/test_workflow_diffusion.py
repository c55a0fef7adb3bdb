"""The diffusion workflow: what the public parts read, the five methods' guarantees, rejection, the CLI."""

import os
import subprocess
import sys

import pandas as pd
import pytest
import torch

import dpcare.workflows.diffusion as wf
from dpcare.images.diffusion import DiffusionObjective
from dpcare.workflows.diffusion import (
    DiffusionRecipe,
    generate_with_rejection,
    prepare_images,
    sharpness_threshold,
    train_diffusion,
)

TINY = DiffusionRecipe(image_size=None, widths=(8, 16), emb_dim=16, diffusion_steps=50, sample_steps=5, epochs=1, dp_epochs=1,
                       batch_size=64, dp_batch_size=64, samples=40, feature_epochs=1, reject_rounds=2)


@pytest.fixture(scope="module")
def data():
    return prepare_images("digits", TINY)


def params(model):
    return torch.cat([p.detach().flatten() for p in model.parameters()])


def test_public_model_never_sees_a_sharp_image(data, monkeypatch):
    """Public training reads only the blurred images: replacing every sharp training image by noise
    (blurred views kept) leaves the model bit-identical."""
    a, _ = train_diffusion("public", data, TINY)
    real = data.private_tensors()
    monkeypatch.setattr(type(data), "private_tensors",
                        lambda self: {**real, "x": torch.randn_like(real["x"])})
    b, _ = train_diffusion("public", data, TINY)
    assert torch.equal(params(a), params(b))


def test_algorithm_1_public_branch_reads_only_blurred_images(data, monkeypatch):
    blurred = data.blur(data.train.images)
    seen = []
    real = DiffusionObjective.public_loss

    def spy(self, model, batch):
        seen.append(batch)
        return real(self, model, batch)

    monkeypatch.setattr(DiffusionObjective, "public_loss", spy)
    public, _ = train_diffusion("public", data, TINY)
    _, info = train_diffusion("fdp-alg1", data, TINY, epsilon=8.0, init=public)
    assert seen
    rows = {tuple(r.flatten().tolist()) for r in blurred}
    for batch in seen:
        assert set(batch) == {"x_pub", "y"}
        assert all(tuple(r.flatten().tolist()) in rows for r in batch["x_pub"])


def test_guarantees_of_the_private_methods(data):
    public, info = train_diffusion("public", data, TINY)
    assert "guarantee" not in info
    _, dp = train_diffusion("dp", data, TINY, epsilon=8.0)
    assert dp["guarantee"]["unit"] == "example" and dp["guarantee"]["epsilon"] <= 8.0 + 1e-9
    assert dp["guarantee"]["n"] == len(data.train)
    for kind in ("fdp-dpsgd", "fdp-alg1"):
        _, info = train_diffusion(kind, data, TINY, epsilon=8.0, init=public)
        g = info["guarantee"]
        assert g["unit"] == "features" and g["epsilon"] <= 8.0 + 1e-9
        assert g["protected_columns"] == ["image detail beyond the blurred view"]
        assert "Gaussian blur" in g["public_columns"][0] and "class label" in g["public_columns"]
        assert "NOT protected" in info["guarantee_text"]
    with pytest.raises(ValueError, match="starts from the Public model"):
        train_diffusion("fdp-alg1", data, TINY, epsilon=8.0)
    with pytest.raises(ValueError, match="epsilon"):
        train_diffusion("dp", data, TINY, epsilon=-1.0)


def test_rejection_threshold_reads_only_public_images(data):
    t = sharpness_threshold(data, TINY)
    changed = wf.ImageData(data.name, data.public, data.train.subset(torch.arange(10)), data.test, data.blur)
    assert sharpness_threshold(changed, TINY) == t
    other = wf.ImageData(data.name, data.test, data.train, data.public, data.blur)
    assert sharpness_threshold(other, TINY) != t


def test_rejection_keeps_only_sharp_samples_until_the_last_round(data):
    model, _ = train_diffusion("non-private", data, TINY)
    labels = torch.arange(20) % 10
    images, rate = generate_with_rejection(model, data, TINY, labels, seed=0)
    assert images.shape == (20, *data.train.image_shape) and 0 <= rate <= 1
    strict = DiffusionRecipe(**{**TINY.__dict__, "reject_quantile": 1.0, "reject_rounds": 2})
    _, none = generate_with_rejection(model, data, strict, labels, seed=0)
    assert none <= rate


def test_bad_inputs_are_named(data):
    with pytest.raises(ValueError, match="unknown image data set"):
        prepare_images("cifar")
    with pytest.raises(ValueError, match="unknown diffusion method"):
        train_diffusion("fdp", data, TINY)


@pytest.mark.slow
def test_cli_quick_diffusion_benchmark(tmp_path):
    out = tmp_path / "diff"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    r = subprocess.run([sys.executable, "-m", "dpcare.cli", "benchmark", "diffusion", "--quick", "--out", str(out)],
                       capture_output=True, text=True, env=env, timeout=900)
    assert r.returncode == 0, r.stderr[-2000:]
    table = pd.read_csv(out / "table.csv")
    assert list(table["method"]) == ["non-private", "public", "dp eps=8", "fdp-dpsgd eps=8", "fdp-alg1 eps=8",
                                     "fdp-alg1 eps=8 + rejection"]
    assert (out / "samples.png").exists() and (table["fid"] > 0).all()
    private = table.dropna(subset=["epsilon"])
    assert (private["epsilon"] <= 8 + 1e-9).all() and set(private["unit"]) == {"example", "features"}
