"""The diffusion study on the recipe: the five methods' guarantees, rejection, a results folder without any
private training image, run.json read by the report, resume, and the command."""

import json
import os
import subprocess
import sys
from dataclasses import replace

import pandas as pd
import pytest
import torch
from typer.testing import CliRunner

import dpcare.studies.diffusion as study_module
from dpcare.cli import app
from dpcare.images.recipe import (
    generate_with_rejection,
    image_views,
    rejection_threshold,
    train_unet,
)
from dpcare.images.settings import DiffusionSettings
from dpcare.runs import read_manifest
from dpcare.settings import DPSettings
from dpcare.studies.diffusion import DiffusionStudy, prepare_images, run_diffusion_study

TINY = DiffusionSettings(image_size=None, widths="8,16", emb_dim=16, diffusion_steps=20, sample_steps=3,
                         plain_epochs=1, plain_batch_size=64, reject_rounds=2,
                         dp=DPSettings(batch_size=64, epochs=1.0, clip_norm=0.1, accountant="rdp"))  # RDP: fast
STUDY = DiffusionStudy(dataset="digits", epsilons=(8.0,), settings=TINY, samples=20, feature_epochs=1)


@pytest.fixture(scope="module")
def data():
    return prepare_images("digits", TINY)


def test_guarantees_of_the_private_methods(data):
    views = image_views(data.train, data.blur)
    shape, k = data.train.image_shape, len(data.train.classes)
    public, result = train_unet(views, STUDY.method_settings("public", None), shape, k)
    assert result.guarantee is None
    _, dp = train_unet(views, STUDY.method_settings("dp", 8.0), shape, k)
    assert dp.guarantee.unit.value == "example" and dp.guarantee.epsilon <= 8.0 + 1e-9
    assert dp.guarantee.n == len(data.train)
    for kind in ("fdp-dpsgd", "fdp-alg1"):
        _, r = train_unet(views, STUDY.method_settings(kind, 8.0), shape, k, init=public)
        g = r.guarantee
        assert g.unit.value == "features" and g.epsilon <= 8.0 + 1e-9
        assert g.protected_columns == ("image detail beyond the blurred view",)
        assert "Gaussian blur" in g.public_columns[0] and "class label" in g.public_columns
        assert "NOT protected" in g.describe()
    with pytest.raises(ValueError, match="starts from the Public model"):
        train_unet(views, STUDY.method_settings("fdp-alg1", 8.0), shape, k)
    with pytest.raises(ValueError, match="epsilon"):
        STUDY.method_settings("dp", -1.0)


def test_rejection_keeps_only_sharp_samples_until_the_last_round(data):
    views = image_views(data.train, data.blur)
    model, _ = train_unet(views, STUDY.method_settings("non-private", None), data.train.image_shape, 10)
    labels = torch.arange(20) % 10
    threshold = rejection_threshold(data.blur(data.public.images), TINY)
    images, rate = generate_with_rejection(model, TINY, threshold, labels, data.train.image_shape, seed=0)
    assert images.shape == (20, *data.train.image_shape) and 0 <= rate <= 1
    strict = replace(TINY, reject_quantile=1.0)
    _, none = generate_with_rejection(model, strict, rejection_threshold(data.blur(data.public.images), strict), labels,
                                      data.train.image_shape, seed=0)
    assert none <= rate


def test_bad_inputs_are_named():
    with pytest.raises(ValueError, match="unknown image data set"):
        prepare_images("cifar")
    with pytest.raises(ValueError, match="method must be one of"):
        STUDY.method_settings("fdp", 8.0)


def test_the_study_folder_holds_no_private_training_image(tmp_path, monkeypatch):
    """Issue 24, item 8: every grid the study writes shows generated or public-split images, never a private
    training image (sharp or blurred); the threshold comes from the blurred public split; run.json is what
    the report reads; an interrupted study resumes (finished methods are reloaded, not retrained)."""
    data = prepare_images("digits", TINY, STUDY.seed)
    private = {tuple(x.flatten().tolist()) for x in torch.cat([data.train.images, data.blur(data.train.images)])}
    public = {tuple(x.flatten().tolist()) for x in torch.cat([data.public.images, data.blur(data.public.images)])}
    saved, thresholds = [], []
    real_save, real_threshold = study_module.save_grid, study_module.rejection_threshold
    monkeypatch.setattr(study_module, "save_grid", lambda images, path, **kw: (
        saved.append((path.name, images.clone())), real_save(images, path, **kw))[1])
    monkeypatch.setattr(study_module, "rejection_threshold", lambda blurred, s: (
        thresholds.append(blurred.clone()), real_threshold(blurred, s))[1])

    out = tmp_path / "study"
    trained, real_train = [], study_module._train_and_score

    def interrupted(study, label, *args):
        if label == "dp eps=8":
            raise KeyboardInterrupt("simulated kill")
        trained.append(label)
        return real_train(study, label, *args)

    monkeypatch.setattr(study_module, "_train_and_score", interrupted)
    with pytest.raises(KeyboardInterrupt):
        run_diffusion_study(STUDY, out, progress=False)
    assert trained == ["non-private", "public"] and not out.exists()

    def counted(study, label, *args):
        trained.append(label)
        return real_train(study, label, *args)

    monkeypatch.setattr(study_module, "_train_and_score", counted)
    table = run_diffusion_study(STUDY, out, progress=False)
    assert trained == ["non-private", "public", "dp eps=8", "fdp-dpsgd eps=8", "fdp-alg1 eps=8"]
    assert list(table["method"]) == ["non-private", "public", "dp eps=8", "fdp-dpsgd eps=8", "fdp-alg1 eps=8",
                                     "fdp-alg1 eps=8 + rejection"]

    names = [n for n, _ in saved]
    assert "real.png" not in names and {"public.png", "public_blurred.png", "samples.png"} <= set(names)
    for name, images in saved:
        rows = {tuple(x.flatten().tolist()) for x in images}
        assert not rows & private, f"{name} shows a private training image"
        if name.startswith("public"):
            assert rows <= public
    assert not list(out.rglob("real.png")) and not list(out.rglob("blurred.png"))
    assert all(torch.equal(t, data.blur(data.public.images)) for t in thresholds) and thresholds

    m = read_manifest(out)
    assert m.kind == "study:diffusion" and m.headline == ["FID"]
    models = {e["name"]: e for e in m.models}
    assert models["dp eps=8"]["guarantee"]["unit"] == "example" and models["dp eps=8"]["ledger"]
    assert models["fdp-alg1 eps=8 + rejection"]["guarantee"]["unit"] == "features"
    assert models["public"]["guarantee"] is None and "blurred" in models["public"]["note"]
    assert any("PUBLIC split" in n for n in m.notes) and "PUBLIC split" in (out / "table.md").read_text()
    assert [r["model"] for r in m.metrics][-2:] == ["real public-split images (reference)",
                                                    "blurred public-split images (reference)"]
    # every method is a recipe run folder: sampled by `dpcare images sample`
    assert read_manifest(out / "runs" / "fdp-dpsgd_eps8").kind == "images"
    runner = CliRunner()
    r = runner.invoke(app, ["images", "sample", str(out / "runs" / "fdp-alg1_eps8"), "--n", "4", "--rejection",
                            "--out", str(tmp_path / "g.png")])
    assert r.exit_code == 0, r.output
    r = runner.invoke(app, ["report", str(out), "--out", str(tmp_path / "r.html")])
    assert r.exit_code == 0, r.output
    html = (tmp_path / "r.html").read_text()
    assert "fdp-alg1 eps=8 + rejection" in html and "public-split" in html
    with pytest.raises(ValueError, match="is not empty"):
        run_diffusion_study(STUDY, out, progress=False)


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
    assert not (out / "real.png").exists() and (out / "public.png").exists()
    private = table.dropna(subset=["epsilon"])
    assert (private["epsilon"] <= 8 + 1e-9).all() and set(private["unit"]) == {"example", "features"}
    assert json.loads((out / "run.json").read_text())["kind"] == "study:diffusion"
    again = subprocess.run([sys.executable, "-m", "dpcare.cli", "benchmark", "diffusion", "--quick", "--out", str(out)],
                           capture_output=True, text=True, env=env)
    assert again.returncode == 2 and "--force" in again.stderr
