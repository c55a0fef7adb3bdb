"""Issue 23 (diffusion): a private diffusion model against its public baseline on the same held-out test images
(test FID, paired bootstrap over the test images, verdict) in fit, run.json, the console and the report; the
baseline never reads a private (sharp) training image."""

import pytest
import torch
from test_images_recipe import (
    TINY_ARGS,
    BlockMean,
    detail_changed,
    digits,
    params,
    tiny,
    write_folder,
)
from typer.testing import CliRunner

from dpcare.cli import app
from dpcare.exceptions import DataError, UnknownNameError
from dpcare.images import ImageSet, recipe
from dpcare.images.fid import compute_features, fid, train_feature_net
from dpcare.images.recipe import (
    compare_with_baseline,
    fit,
    generate,
    new_unet,
    score_against_baseline,
)
from dpcare.runs import read_manifest

runner = CliRunner()


def halves(data: ImageSet) -> tuple[ImageSet, ImageSet]:
    """Even images train, odd images test (disjoint, both classes)."""
    return data.subset(torch.arange(0, len(data), 2)), data.subset(torch.arange(1, len(data), 2))


def test_the_verdict_beats_a_worse_baseline_and_flips_when_the_model_is_the_baseline():
    """Real held-out digits as the 'model's samples' beat noise as the baseline's; the same noise as the model's
    samples is no better than itself (difference exactly 0, interval [0, 0])."""
    data = digits(40)
    public, rest = halves(data)
    test, real = halves(rest)
    net = train_feature_net(public, epochs=5, seed=0)
    f_test, f_real = compute_features(net, test), compute_features(net, real)
    f_noise = compute_features(net, torch.rand(test.images.shape, generator=torch.Generator().manual_seed(0)) * 2 - 1)
    good = score_against_baseline(f_test, f_real, f_noise, "noise", resamples=200)
    assert good.beats and good.model < good.baseline and good.units == len(test)
    assert "beats the public baseline" in good.verdict()
    same = score_against_baseline(f_test, f_noise, f_noise, "noise", resamples=200)
    assert not same.beats and same.difference == same.low == same.high == 0
    assert same.verdict().startswith("no better than the public baseline: do not release")
    # the metric is the FID of the samples against the test images
    assert good.model == pytest.approx(fid(f_real, f_test)) and good.baseline == pytest.approx(fid(f_noise, f_test))


def test_fit_scores_the_model_and_its_baseline_on_the_test_images_only():
    """dp without public images: the baseline is the untrained U-Net; its reported test FID is recomputed from
    the test images alone (features from a net trained on them, one sample per test image of its class)."""
    train, test = halves(digits(30))
    settings = tiny("dp")
    model = fit(train, settings, test_images=test, progress=False, resamples=100)
    b = model.baseline
    assert b["test_images"] == len(test) == b["comparisons"][0]["units"]
    net = train_feature_net(test, epochs=20, seed=settings.dp.seed)
    f_test = compute_features(net, test.images)
    for unet, value in ((new_unet(settings, test.image_shape, 2, settings.dp.seed), b["metrics"]["test FID"]),
                       (model.unet, model.metrics["test FID"])):
        samples = generate(unet, settings, test.labels, test.image_shape, settings.dp.seed)
        assert fid(compute_features(net, samples), f_test) == value
    # replacing the DP model by its own baseline flips nothing into a release
    metrics, same = compare_with_baseline(model.unet, model.unet, "itself", settings, test, resamples=50)
    assert not same["comparisons"][0]["beats"] and same["metrics"]["test FID"] == metrics["test FID"]


def test_the_fdp_baseline_is_bit_identical_when_only_the_private_detail_changes(monkeypatch):
    """Feature-DP: the baseline (the U-Net trained without privacy on the blurred view) and its test FID are
    bit-identical when the training images' detail beyond the view changes (a view with an exact null space, as
    in test_images_recipe); the FDP model itself does change."""
    monkeypatch.setattr(recipe, "blur_of", lambda s: BlockMean(s.blur_kernel, s.blur_sigma))
    x, test = halves(digits(30))
    x2 = detail_changed(x)
    assert not torch.equal(x.images, x2.images)
    got, real = [], recipe.public_baseline
    monkeypatch.setattr(recipe, "public_baseline", lambda *a, **k: got.append(real(*a, **k)) or got[-1])
    a, b = (fit(d, tiny("fdp-dpsgd"), test_images=test, progress=False, resamples=50) for d in (x, x2))
    assert torch.equal(params(got[0][0]), params(got[1][0]))
    assert a.baseline["metrics"] == b.baseline["metrics"]
    assert not torch.equal(params(a.unet), params(b.unet))


def test_the_dp_baseline_reads_only_the_public_images(monkeypatch):
    """dp with public images: the baseline is trained without privacy on the public images; replacing every
    private training image by noise leaves its inputs and weights bit-identical."""
    data = digits(30)
    index = torch.arange(len(data))
    rest, public = data.subset(index[index % 3 != 2]), data.subset(index[index % 3 == 2])  # both classes in each
    train, test = halves(rest)
    noise = ImageSet(torch.rand_like(train.images) * 2 - 1, train.labels, train.classes, "noise")
    seen, real_train = [], recipe.train_unet

    def spy(views, settings, *args, **kw):
        out = real_train(views, settings, *args, **kw)
        if settings.method == "non-private":
            seen.append(({k: v.clone() for k, v in views.items()}, out[0]))
        return out

    monkeypatch.setattr(recipe, "train_unet", spy)
    for d in (train, noise):
        fit(d, tiny("dp"), public_images=public, test_images=test, progress=False, resamples=50)
    (v1, u1), (v2, u2) = seen
    assert all(torch.equal(v1[k], v2[k]) for k in v1) and torch.equal(v1["x"], public.images)
    assert torch.equal(params(u1), params(u2))


def test_the_command_prints_and_stores_the_verdict_and_the_report_shows_it(tmp_path):
    train = write_folder(tmp_path / "train", per_class=15)
    test = write_folder(tmp_path / "test", per_class=8)
    out = tmp_path / "run"
    r = runner.invoke(app, ["images", "fit", str(train), "--out", str(out), "--method", "fdp-dpsgd", *TINY_ARGS,
                            "--test-images", str(test)])
    assert r.exit_code == 0, r.output
    assert "fdp-dpsgd beats the public baseline" in r.output or \
        "fdp-dpsgd no better than the public baseline: do not release" in r.output
    m = read_manifest(out)
    b = m.baselines[0]
    assert b["comparisons"][0]["units"] == 16 and b["comparisons"][0]["metric"] == "test FID"
    assert [row["model"] for row in m.metrics] == ["fdp-dpsgd", f"public baseline: {b['name']}"]
    assert m.data["test_images"] == str(test)
    rep = runner.invoke(app, ["report", str(out), "--out", str(tmp_path / "r.html")])
    assert rep.exit_code == 0, rep.output
    html = (tmp_path / "r.html").read_text()
    assert "public baseline" in html and ("beats the public baseline" in html or "do not release" in html)
    loaded = recipe.DiffusionModel.load(out)
    assert loaded.baseline == b and loaded.metrics == {"test FID": m.metrics[0]["test FID"]}
    # without test images and with --holdout 0: said so, no baselines
    r = runner.invoke(app, ["images", "fit", str(train), "--out", str(tmp_path / "none"), "--method", "dp",
                            *TINY_ARGS, "--holdout", "0"])
    assert r.exit_code == 0 and "not compared with the public baseline (--holdout 0 and no --test-images)" in r.output
    assert read_manifest(tmp_path / "none").baselines == []


def test_by_default_a_tenth_of_the_folder_is_held_out_and_every_private_run_has_a_verdict(tmp_path):
    train = write_folder(tmp_path / "train", per_class=15)
    out = tmp_path / "run"
    r = runner.invoke(app, ["images", "fit", str(train), "--out", str(out), "--method", "fdp-dpsgd", *TINY_ARGS])
    assert r.exit_code == 0, r.output
    assert "27 training images (3 held out)" in r.output and "fdp-dpsgd " in r.output and "public baseline" in r.output
    m = read_manifest(out)
    assert m.models[0]["guarantee"]["n"] == 27  # the held-out images do not train: n is the training count
    assert m.data["held_out"] == {"fraction": 0.1, "images": 3, "seed": 0} and m.data["training_images"] == 27
    assert m.baselines[0]["comparisons"][0]["units"] == 3
    # the held-out positions depend on the count and the seed only
    assert recipe.training_count(30, 0.1, 0) == 27 and recipe.training_count(30, 0.1, 0, test_images=True) == 30


def test_test_images_of_another_class_or_too_few_are_refused(tmp_path):
    train, test = halves(digits(10))
    other = ImageSet(test.images, test.labels, ("a", "b"), "renamed")
    with pytest.raises(DataError, match="classes"):
        fit(train, tiny("dp"), test_images=other, progress=False)
    with pytest.raises(DataError, match="at least 2"):
        fit(train, tiny("dp"), test_images=test.subset(torch.arange(1)), progress=False)
    folder = write_folder(tmp_path / "t", per_class=2)
    (folder / "digit0").rename(folder / "cat")
    with pytest.raises(UnknownNameError, match="cat"):
        fit(train, tiny("dp"), test_images=folder, progress=False)


def test_a_run_without_a_verdict_holds_no_image_out(tmp_path):
    """Held-out images serve only the comparison of a private model with its baseline: a public run, or a
    private one with --no-baseline, trains on every image of the folder."""
    train = write_folder(tmp_path / "train", per_class=15)
    for method, extra in (("public", []), ("dp", ["--no-baseline"])):
        out = tmp_path / method
        r = runner.invoke(app, ["images", "fit", str(train), "--out", str(out), "--method", method, *TINY_ARGS, *extra])
        assert r.exit_code == 0, r.output
        m = read_manifest(out)
        assert m.data["training_images"] == 30 and "held_out" not in m.data and m.baselines == []
    assert read_manifest(tmp_path / "dp").models[0]["guarantee"]["n"] == 30
