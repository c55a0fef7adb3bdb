"""The diffusion recipe end to end on a user's image folder: fit (dp, the FDP methods, public) -> run folder ->
load in a fresh process -> sample a grid -> report; the budget checked before any image is read; one run per
folder; the guarantee's n is the images the engine samples; what the public view's readers see (isolation)."""

import json
import subprocess
import sys

import numpy as np
import pytest
import torch
from PIL import Image
from sklearn.datasets import load_digits
from typer.testing import CliRunner

import dpcare.images.recipe as recipe
from dpcare.cli import app
from dpcare.exceptions import DataError, SettingsError, UnknownNameError
from dpcare.images import GaussianBlur, ImageSet, count_images, grid_size
from dpcare.images.diffusion import DiffusionObjective
from dpcare.images.recipe import DiffusionModel, fit, plan
from dpcare.images.settings import METHODS, DiffusionSettings
from dpcare.runs import read_manifest
from dpcare.settings import DPSettings

runner = CliRunner()
TINY = {"image_size": 8, "color": "gray", "widths": "8,16", "emb_dim": 16, "diffusion_steps": 20, "sample_steps": 3,
        "plain_epochs": 1, "plain_batch_size": 32, "reject_rounds": 2}
TINY_DP = {"batch_size": 32, "epochs": 1.0, "accountant": "rdp", "epsilon": 8.0}  # RDP: fast calibration
TINY_ARGS = ["--image-size", "8", "--color", "gray", "--widths", "8,16", "--emb-dim", "16", "--diffusion-steps", "20",
             "--sample-steps", "3", "--plain-epochs", "1", "--plain-batch-size", "32", "--batch-size", "32",
             "--epochs", "1", "--accountant", "rdp", "--epsilon", "8"]


def tiny(method: str, **dp) -> DiffusionSettings:
    return DiffusionSettings(method=method, **TINY, dp=DPSettings(**{**TINY_DP, "clip_norm": 0.1, **dp}))


def digits(per_class: int = 30, classes=(0, 1)) -> ImageSet:
    """sklearn's 8x8 digits of two classes in [-1, 1] (pixel values are multiples of 1/8: exact in float32)."""
    d = load_digits()
    keep = np.concatenate([np.flatnonzero(d.target == k)[:per_class] for k in classes])
    x = torch.from_numpy((d.images[keep] / 16.0 * 2 - 1).astype(np.float32)).reshape(-1, 1, 8, 8)
    y = torch.from_numpy(np.searchsorted(classes, d.target[keep])).long()
    return ImageSet(x, y, tuple(f"digit{k}" for k in classes), "sklearn digits")


def write_folder(root, per_class: int = 30):
    """The digits as PNG files, one sub-folder per class: a user's image folder."""
    data = digits(per_class)
    for i, (img, label) in enumerate(zip(data.images, data.labels)):
        pixels = ((img[0].numpy() + 1) / 2 * 255).round().astype(np.uint8)
        path = root / data.classes[int(label)] / f"img{i:03d}.png"
        path.parent.mkdir(parents=True, exist_ok=True)
        Image.fromarray(pixels, mode="L").save(path)
    return root


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return write_folder(tmp_path_factory.mktemp("images") / "scans")


def fit_cli(folder, out, method, *extra):
    # --holdout 0: every image trains (the default's held-out comparison is tested in test_images_baseline.py)
    return runner.invoke(app, ["images", "fit", str(folder), "--out", str(out), "--method", method, *TINY_ARGS,
                               "--holdout", "0", *extra])


def params(model: torch.nn.Module) -> torch.Tensor:
    return torch.cat([p.detach().flatten() for p in model.parameters()])


# --------------------------------------------------------------------------- commands end to end
def test_fit_sample_and_report_commands(folder, tmp_path):
    out = tmp_path / "dp"
    r = fit_cli(folder, out, "dp")
    assert r.exit_code == 0, r.output
    m = read_manifest(out)
    g = m.models[0]["guarantee"]
    assert m.kind == "images" and g["unit"] == "example" and g["n"] == 60 and 0 < g["epsilon"] <= 8.0
    assert sorted(p.name for p in out.iterdir()) == ["model.pt", "run.json"]
    assert m.data["classes"] == ["digit0", "digit1"] and m.settings["dp"]["clip_norm"] == 0.1

    # sample in a fresh process: the grid, identical to sampling the loaded model here
    grid = tmp_path / "grid.png"
    p = subprocess.run([sys.executable, "-m", "dpcare.cli", "images", "sample", str(out), "--n", "12", "--out",
                        str(grid), "--nrow", "6"], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    with Image.open(grid) as im:
        assert im.size == grid_size(12, (8, 8), 6) and im.mode == "L"
    here = DiffusionModel.load(out).save_grid(tmp_path / "here.png", n=12, nrow=6)
    assert here.read_bytes() == grid.read_bytes()

    # a dp model has no public images to set a rejection threshold: refused with the way out
    p = runner.invoke(app, ["images", "sample", str(out), "--rejection", "--out", str(tmp_path / "r.png")])
    assert p.exit_code == 2 and "public images" in p.stderr
    p = runner.invoke(app, ["images", "sample", str(out), "--labels", "digit1,cat", "--out", str(tmp_path / "c.png")])
    assert p.exit_code == 2 and "unknown class 'cat'" in p.stderr and "digit0" in p.stderr

    rep = runner.invoke(app, ["report", str(out), "--out", str(tmp_path / "r.html")])
    assert rep.exit_code == 0, rep.output
    html = (tmp_path / "r.html").read_text()
    assert m.run_id in html and "dpcare images fit" in html


def test_fdp_runs_start_from_a_public_model(folder, tmp_path):
    """fdp-dpsgd without --init trains the public model first in the run; fdp-alg1 starts from a public run."""
    r = fit_cli(folder, tmp_path / "fdp", "fdp-dpsgd")
    assert r.exit_code == 0, r.output
    m = read_manifest(tmp_path / "fdp")
    g = m.models[0]["guarantee"]
    assert g["unit"] == "features" and g["protected_columns"] == ["image detail beyond the blurred view"]
    assert "Gaussian blur" in g["public_columns"][0] and "class label" in g["public_columns"]
    assert "trained first in this run" in m.settings["info"]["init"]["what"]
    assert any("public view" in line and "nothing protects" in line for line in m.not_protected)
    assert "NOT protected" in r.output

    pub = tmp_path / "public"
    r = fit_cli(folder, pub, "public")
    assert r.exit_code == 0, r.output
    m = read_manifest(pub)
    assert m.models[0]["guarantee"] is None and "no private read" in m.models[0]["note"]
    assert "never on a sharp image" in m.models[0]["note"]

    r = fit_cli(folder, tmp_path / "alg1", "fdp-alg1", "--init", str(pub))
    assert r.exit_code == 0, r.output
    m = read_manifest(tmp_path / "alg1")
    assert m.settings["info"]["init"]["run_id"] == read_manifest(pub).run_id
    assert m.models[0]["guarantee"]["unit"] == "features"
    assert "blurred view of the training images" in m.settings["info"]["threshold_from"]
    p = runner.invoke(app, ["images", "sample", str(tmp_path / "alg1"), "--n", "4", "--rejection", "--out",
                            str(tmp_path / "sharp.png")])
    assert p.exit_code == 0, p.output

    # --init: only for FDP, only a public model, only with the same model and blur settings
    r = fit_cli(folder, tmp_path / "x", "dp", "--init", str(pub))
    assert r.exit_code == 2 and "starts from scratch" in r.stderr and "not public" in r.stderr
    r = fit_cli(folder, tmp_path / "x", "fdp-alg1", "--init", str(tmp_path / "fdp"))
    assert r.exit_code == 2 and "'fdp-dpsgd' model" in r.stderr
    r = fit_cli(folder, tmp_path / "x", "fdp-alg1", "--init", str(pub), "--blur-sigma", "2")
    assert r.exit_code == 2 and "blur_sigma (1.0 there, 2.0 here)" in r.stderr
    assert not (tmp_path / "x").exists()


def test_budget_is_checked_before_any_image_is_read(folder, tmp_path, monkeypatch):
    budget = tmp_path / "b.json"
    assert runner.invoke(app, ["budget", "init", str(budget), "--epsilon", "0.1", "--delta", "0.05", "--dataset",
                               "scans"]).exit_code == 0
    monkeypatch.setattr("dpcare.images.data._read_image", lambda *a, **k: pytest.fail("an image was read"))
    r = runner.invoke(app, ["images", "fit", str(folder), "--out", str(tmp_path / "out"), "--method", "dp",
                            *TINY_ARGS, "--epsilon", "1", "--budget", str(budget)])
    assert r.exit_code == 2 and "budget" in r.stderr.lower() and "epsilon" in r.stderr
    assert json.loads(budget.read_text())["releases"] == []


def test_a_non_empty_output_is_refused_before_any_image_is_read(folder, tmp_path, monkeypatch):
    out = tmp_path / "out"
    out.mkdir()
    (out / "old.txt").write_text("another run")
    monkeypatch.setattr("dpcare.images.data._read_image", lambda *a, **k: pytest.fail("an image was read"))
    r = fit_cli(folder, out, "dp")
    assert r.exit_code == 2 and "is not empty" in r.stderr and "--force" in r.stderr


# --------------------------------------------------------------------------- the recipe in Python
def test_guarantee_n_is_the_images_the_engine_samples(folder, monkeypatch):
    seen = []
    real_fit = recipe.Trainer.fit

    def spy(self, private_data, public_data=None, **kw):
        seen.append((self.objective.name, len(private_data["y"])))
        return real_fit(self, private_data, public_data, **kw)

    monkeypatch.setattr(recipe.Trainer, "fit", spy)
    settings = tiny("fdp-alg1")
    n = count_images(folder)
    model = fit(folder, settings, progress=False)
    assert n == 60 and seen == [("public", 60), ("fdp-alg1", 60)]
    assert model.guarantee.n == plan(settings, n).n == model.ledger.n == 60
    assert model.info["sampling_rate"] == pytest.approx(32 / 60)
    planned = plan(settings, n)
    assert (planned.unit, planned.protected_columns, planned.public_columns) == (
        model.guarantee.unit, model.guarantee.protected_columns, model.guarantee.public_columns)
    assert plan(tiny("public"), n) is None and plan(tiny("non-private"), n) is None


def test_an_interrupted_fit_resumes_to_the_same_model(tmp_path, monkeypatch):
    """Killed during the FDP phase (after the public model trained in the run), the same fit with the same
    checkpoint folder resumes: the public model from its checkpoint, and ends with the same weights."""
    data, settings = digits(30), tiny("fdp-alg1", epochs=2.0, noise_seed=0)  # the reference draws the same noise
    reference = fit(data, settings, progress=False)
    real_step, armed = recipe.Trainer.private_step, [True]

    def killed(self, *args, **kwargs):
        if armed and self.step_count == 2:
            armed.clear()
            raise KeyboardInterrupt("simulated kill")
        return real_step(self, *args, **kwargs)

    monkeypatch.setattr(recipe.Trainer, "private_step", killed)
    with pytest.raises(KeyboardInterrupt):
        fit(data, settings, checkpoint_dir=str(tmp_path), progress=False)
    assert (tmp_path / "public" / "checkpoint.pt").exists()
    again = fit(data, settings, checkpoint_dir=str(tmp_path), progress=False)
    assert torch.equal(params(again.unet), params(reference.unet)) and again.guarantee == reference.guarantee


def test_save_load_round_trip_and_sampling(tmp_path):
    data = digits(10)
    model = fit(data, tiny("dp", batch_size=8), public_images=digits(5, classes=(2, 3)), progress=False)
    assert model.threshold is not None and "public image folder" in model.info["threshold_from"]
    model.save(tmp_path / "m")
    back = DiffusionModel.load(tmp_path / "m")
    assert torch.equal(params(back.unet), params(model.unet)) and back.threshold == model.threshold
    assert back.classes == ("digit0", "digit1") and back.guarantee == model.guarantee
    a = model.sample(labels=["digit1", 0, "digit1"], seed=3)
    assert torch.equal(a, back.sample(labels=torch.tensor([1, 0, 1]), seed=3)) and a.shape == (3, 1, 8, 8)
    assert back.sample(n=5).shape == (5, 1, 8, 8)
    images, rate = back.sample_with_rejection(n=4)
    assert images.shape == (4, 1, 8, 8) and 0 <= rate <= 1
    with pytest.raises(UnknownNameError, match="unknown class 'digit7'"):
        back.sample(labels=["digit7"])
    with pytest.raises(SettingsError, match="number of images"):
        back.sample()
    with pytest.raises(SettingsError, match="not empty"):
        model.save(tmp_path / "m")
    with pytest.raises(DataError, match="not a diffusion model"):
        DiffusionModel.load(_tabular_like_run(tmp_path / "other"))


def _tabular_like_run(path):
    from dpcare.runs import Manifest, RunFolder

    RunFolder(path, "tabular").finish(Manifest())
    return path


def test_settings_are_declared_and_checked():
    assert METHODS == DiffusionObjective.KINDS
    assert DiffusionSettings().dp.batch_size == 256 and DiffusionSettings().dp.epochs == 30
    assert DiffusionSettings().dp.clip_norm == 0.1
    with pytest.raises(SettingsError, match="widths must be positive integers"):
        DiffusionSettings(widths="32,x")
    with pytest.raises(SettingsError, match="blur_kernel must be an odd"):
        DiffusionSettings(blur_kernel=4)
    with pytest.raises(SettingsError, match="method must be one of"):
        DiffusionSettings(method="fdp")
    with pytest.raises(SettingsError, match="unit"):
        DiffusionSettings(dp=DPSettings(unit="patient"))
    with pytest.raises(SettingsError, match="starts from the Public model"):
        recipe.train_unet({}, tiny("fdp-alg1"), (1, 8, 8), 2)
    back = DiffusionSettings.from_dict(tiny("fdp-alg1").to_dict())
    assert back == tiny("fdp-alg1")


def test_importing_the_command_line_options_loads_no_torch():
    code = "import sys; import dpcare.images.settings, dpcare.cli.images; print('torch' in sys.modules)"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert r.stdout.strip() == "False"


# --------------------------------------------------------------------------- isolation of the public view
class BlockMean(GaussianBlur):
    """A public view with an exact null space: every 2x2 block replaced by its mean. Adding +d, -d, -d, +d to
    a block changes the image but not its view, bit for bit (the digits' pixels and d are dyadic)."""

    def __call__(self, images):
        n, c, h, w = images.shape
        blocks = images.reshape(n, c, h // 2, 2, w // 2, 2).mean(dim=(3, 5), keepdim=True)
        return blocks.expand(n, c, h // 2, 2, w // 2, 2).reshape(n, c, h, w).clone()

    def describe(self):
        return "2x2 block means"


def detail_changed(data: ImageSet) -> ImageSet:
    """The same images with new detail inside every 2x2 block and the same block means."""
    n, c, h, w = data.images.shape
    sign = torch.randint(0, 2, (n, c, h // 2, 1, w // 2, 1), generator=torch.Generator().manual_seed(1)) * 2 - 1
    pattern = torch.tensor([[1.0, -1.0], [-1.0, 1.0]]).reshape(1, 1, 1, 2, 1, 2)
    d = (0.5 * sign * pattern).reshape(n, c, h, w)
    return ImageSet(data.images + d, data.labels, data.classes, "detail changed")


def test_public_view_readers_see_bit_identical_inputs_when_only_the_detail_changes(monkeypatch):
    """The public model, Algorithm 1's public branch (which reads only x_pub and y) and the rejection threshold
    are bit-identical when the private images change but their public view does not.

    The Gaussian blur has no exact null space in floating point, so the test swaps in a view that has one
    (2x2 block means, see BlockMean) through the recipe's one seam for Psi (``blur_of``): x' = x + d with d
    zero-mean in every block has Psi(x') == Psi(x) bit for bit. Everything downstream of the view is the
    recipe's own code. Planted leaks seen red: the public model trained on ``x`` instead of ``x_pub``; the
    public branch handed ``x`` as well (key check); the threshold computed from the sharp images (also
    checked automatically at the end)."""
    monkeypatch.setattr(recipe, "blur_of", lambda s: BlockMean(s.blur_kernel, s.blur_sigma))
    x, x2 = digits(20), detail_changed(digits(20))
    psi = BlockMean()
    assert not torch.equal(x.images, x2.images) and torch.equal(psi(x.images), psi(x2.images))

    seen = {"x": [], "x2": []}
    real = DiffusionObjective.public_loss
    current = []

    def spy(self, model, batch):
        seen[current[0]].append({k: v.clone() for k, v in batch.items()})
        return real(self, model, batch)

    monkeypatch.setattr(DiffusionObjective, "public_loss", spy)
    models = {}
    for name, data in (("x", x), ("x2", x2)):
        current[:] = [name]
        models[name] = {m: fit(data, tiny(m), progress=False) for m in ("public", "fdp-alg1", "fdp-dpsgd")}
    a, b = models["x"], models["x2"]
    assert torch.equal(params(a["public"].unet), params(b["public"].unet))
    for m in ("public", "fdp-alg1", "fdp-dpsgd"):
        assert a[m].threshold == b[m].threshold
    assert seen["x"] and len(seen["x"]) == len(seen["x2"])
    for one, two in zip(seen["x"], seen["x2"]):
        assert set(one) == {"x_pub", "y"} and all(torch.equal(one[k], two[k]) for k in one)
    # not vacuous: the private branch does read the detail
    assert not torch.equal(params(a["fdp-alg1"].unet), params(b["fdp-alg1"].unet))

    # a threshold that read the sharp images would differ
    monkeypatch.setattr(recipe, "threshold_source", lambda s, views, public: (views["x"], "leak"))
    leak = [fit(d, tiny("public"), progress=False).threshold for d in (x, x2)]
    assert leak[0] != leak[1]


def test_the_public_branch_of_the_real_blur_reads_only_the_view(monkeypatch):
    """With the declared Gaussian blur: the public model is bit-identical when every sharp image is replaced
    by noise and its blurred view kept (``image_views`` is where the recipe builds the view once)."""
    data = digits(10)
    real_views = recipe.image_views
    a = fit(data, tiny("public"), progress=False)
    monkeypatch.setattr(recipe, "image_views", lambda images, blur: {
        **real_views(images, blur), "x": torch.randn_like(images.images)})
    b = fit(data, tiny("public"), progress=False)
    assert torch.equal(params(a.unet), params(b.unet)) and a.threshold == b.threshold
