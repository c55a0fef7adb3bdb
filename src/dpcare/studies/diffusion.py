"""Feature-DP diffusion models with a blurred public view (feature-dp.txt, Section 6.3), at CPU scale.

Splits (stratified, disjoint): ``public`` trains only the FID feature classifier and sets the
rejection threshold from its blurred images; ``train`` is private (its blurred versions are the public
feature Psi(x) under FDP); ``test`` is the FID reference. The five methods train through the engine:
Non-private, Public (blurred only), DP (DP-SGD from scratch), FDP (DP-SGD) and FDP (Alg. 1) from the
Public model; FDP (Alg. 1) is also sampled with rejection of blurry samples.
"""

from __future__ import annotations

import copy
import math
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from dpcare.engine import TrainConfig, Trainer
from dpcare.exceptions import DataError, SettingsError, UnknownNameError
from dpcare.images import (
    FidEvaluator,
    GaussianBlur,
    ImageSet,
    fid_per_class,
    load_digits,
    load_mnist,
    save_grid,
    split_images,
    train_feature_net,
)
from dpcare.images.diffusion import DiffusionObjective, NoiseSchedule, sample
from dpcare.images.unet import UNet
from dpcare.io import new_figure, save_figure, torch_save, write_json, write_text
from dpcare.privacy import PrivacyLedger, ProtectedUnit, check_epsilon
from dpcare.progress import progress as tqdm

KINDS = DiffusionObjective.KINDS
LOADERS = {"mnist": load_mnist, "digits": load_digits}


@dataclass
class DiffusionRecipe:
    """How every model is trained and sampled (CPU scale; the paper's U-Net has 32.8M parameters).

    Default: MNIST digits shrunk to 14 x 14 (a fixed per-image resize), a 0.27M-parameter U-Net, ~1,900
    non-private steps, weights averaged (EMA, free post-processing for the DP runs too)."""

    image_size: int | None = 14  # None: the data set's own size
    widths: tuple[int, ...] = (32, 64)
    emb_dim: int = 64
    diffusion_steps: int = 1000
    sample_steps: int = 50  # DDIM steps
    epochs: float = 80.0  # Non-private and Public
    batch_size: int = 128
    lr: float = 2e-3
    dp_epochs: float = 30.0
    dp_batch_size: int = 256  # expected Poisson batch
    dp_lr: float = 2e-3
    clip_norm: float = 0.1  # the paper's C
    ema_decay: float | None = 0.99
    blur_kernel: int = 3
    blur_sigma: float = 1.0
    samples: int = 500  # generated images per method for FID
    feature_epochs: int = 20
    reject_quantile: float = 0.9  # keep samples sharper than 90% of blurred public images
    reject_rounds: int = 5


@dataclass
class ImageData:
    name: str
    public: ImageSet
    train: ImageSet
    test: ImageSet
    blur: GaussianBlur

    def private_tensors(self) -> dict[str, torch.Tensor]:
        """The private training images, their blurred views (public under FDP) and labels."""
        return {"x": self.train.images, "x_pub": self.blur(self.train.images), "y": self.train.labels}


def prepare_images(dataset: str = "mnist", recipe: DiffusionRecipe | None = None, seed: int = 0) -> ImageData:
    if dataset not in LOADERS:
        raise UnknownNameError(f"unknown image data set {dataset!r}; choose one of {sorted(LOADERS)}")
    recipe = recipe or DiffusionRecipe()
    images = LOADERS[dataset]()
    if recipe.image_size is not None:
        images = images.resized(recipe.image_size)
    parts = split_images(images, seed=seed)
    return ImageData(dataset, parts["public"], parts["train"], parts["test"],
                     GaussianBlur(recipe.blur_kernel, recipe.blur_sigma))


def new_unet(data: ImageData, recipe: DiffusionRecipe, seed: int) -> UNet:
    torch.manual_seed(seed)
    c, h, _ = data.train.image_shape
    return UNet(c, h, recipe.widths, len(data.train.classes), recipe.emb_dim)


def train_diffusion(kind: str, data: ImageData, recipe: DiffusionRecipe, epsilon: float | None = None,
                    init: UNet | None = None, seed: int = 0, progress: bool = False,
                    checkpoint_dir: str | None = None) -> tuple[UNet, dict]:
    """Train one method. FDP methods start from ``init`` (the Public model); private ones need ``epsilon``."""
    schedule = NoiseSchedule(recipe.diffusion_steps)
    objective = DiffusionObjective(kind, schedule)
    if kind.startswith("fdp") and init is None:
        raise SettingsError(f"{kind} starts from the Public model: pass init=")
    model = copy.deepcopy(init) if init is not None else new_unet(data, recipe, seed)
    tensors = data.private_tensors()
    n = len(data.train)
    if objective.private:
        check_epsilon(epsilon)
        features = objective.unit is ProtectedUnit.FEATURES
        ledger = PrivacyLedger(n, unit=objective.unit,
                               protected_columns=("image detail beyond the blurred view",) if features else (),
                               public_columns=(data.blur.describe(), "class label") if features else ())
        cfg = TrainConfig(batch_size=recipe.dp_batch_size, epochs=recipe.dp_epochs, lr=recipe.dp_lr,
                          clip_norm=recipe.clip_norm, target_epsilon=epsilon, public_batch_size=recipe.batch_size,
                          seed=seed, progress=progress, checkpoint_dir=checkpoint_dir, max_physical_batch=128,
                          ema_decay=recipe.ema_decay)
    else:
        ledger = None
        cfg = TrainConfig(batch_size=recipe.batch_size, epochs=recipe.epochs, lr=recipe.lr, seed=seed,
                          progress=progress, checkpoint_dir=checkpoint_dir, ema_decay=recipe.ema_decay)
    private = {k: tensors[k] for k in objective.private_keys}
    public = {k: tensors[k] for k in objective.public_keys} if objective.has_public_branch else None
    result = Trainer(model, objective, cfg, ledger).fit(private, public)
    info = {"kind": kind, "steps": result.steps, "backend": result.backend,
            "noise_multiplier": result.noise_multiplier}
    if result.guarantee is not None:
        info |= {"guarantee": result.guarantee.to_dict(), "guarantee_text": result.guarantee.describe(),
                 "ledger": result.ledger.state_dict()}
    return model, info


def balanced_labels(n: int, classes: int) -> torch.Tensor:
    return torch.arange(n) % classes


def matching_images(images: ImageSet, labels: torch.Tensor) -> torch.Tensor:
    """Real images with the class counts of ``labels`` (the first ones of each class, in split order), so a
    reference FID compares like with like: split order groups images by class in some data sets."""
    out = torch.empty(len(labels), *images.image_shape)
    for k in labels.unique():
        want = (labels == k).nonzero().flatten()
        have = (images.labels == k).nonzero().flatten()
        if len(have) < len(want):
            raise DataError(f"class {images.classes[int(k)]!r} has {len(have)} images, {len(want)} are needed")
        out[want] = images.images[have[: len(want)]]
    return out


def generate(model: UNet, data: ImageData, recipe: DiffusionRecipe, labels: torch.Tensor, seed: int) -> torch.Tensor:
    return sample(model, NoiseSchedule(recipe.diffusion_steps), labels, data.train.image_shape,
                  steps=recipe.sample_steps, generator=torch.Generator().manual_seed(seed))


def sharpness_threshold(data: ImageData, recipe: DiffusionRecipe) -> float:
    """The rejection threshold: a quantile of the sharpness of BLURRED PUBLIC images (no private read)."""
    return float(torch.quantile(data.blur.sharpness(data.blur(data.public.images)), recipe.reject_quantile))


def generate_with_rejection(model: UNet, data: ImageData, recipe: DiffusionRecipe, labels: torch.Tensor,
                            seed: int) -> tuple[torch.Tensor, float]:
    """Sample, drop samples no sharper than blurred images, resample their labels (at most
    ``reject_rounds`` rounds; the last round keeps what it gets). Returns images and acceptance rate."""
    threshold = sharpness_threshold(data, recipe)
    out = torch.empty(len(labels), *data.train.image_shape)
    todo = torch.arange(len(labels))
    drawn = accepted = 0
    for r in range(recipe.reject_rounds):
        images = generate(model, data, recipe, labels[todo], seed + 1000 * r)
        keep = data.blur.sharpness(images) > threshold
        drawn, accepted = drawn + len(todo), accepted + int(keep.sum())
        last = r == recipe.reject_rounds - 1
        chosen = torch.ones_like(keep) if last else keep
        out[todo[chosen]] = images[chosen]
        todo = todo[~chosen]
        if not len(todo):
            break
    return out, accepted / max(drawn, 1)


@dataclass
class DiffusionBenchmark:
    dataset: str = "mnist"
    epsilons: tuple[float, ...] = (8.0, 1.0)
    seed: int = 0
    recipe: DiffusionRecipe = field(default_factory=DiffusionRecipe)

    @classmethod
    def quick(cls) -> DiffusionBenchmark:
        """Smoke size: 8x8 digits, a tiny U-Net, a few epochs, epsilon 8."""
        recipe = DiffusionRecipe(image_size=None, widths=(8, 16), emb_dim=16, diffusion_steps=100, sample_steps=10, epochs=2,
                                 dp_epochs=1, dp_batch_size=128, samples=100, feature_epochs=2, reject_rounds=2)
        return cls(dataset="digits", epsilons=(8.0,), recipe=recipe)

    def runs(self) -> list[tuple[str, str, float | None]]:
        """(label, kind, epsilon) in training order (Public before the FDP methods that start from it)."""
        out = [("non-private", "non-private", None), ("public", "public", None)]
        for e in self.epsilons:
            out += [(f"{k} eps={e:g}", k, e) for k in ("dp", "fdp-dpsgd", "fdp-alg1")]
        return out


def run_diffusion_benchmark(bench: DiffusionBenchmark, out_dir: str | Path, progress: bool = True) -> pd.DataFrame:
    """Train (or reload) every method, sample, and score FID on the test split. Resumable per method."""
    out = Path(out_dir)
    recipe = bench.recipe
    write_json(out / "config.json", asdict(bench))
    data = prepare_images(bench.dataset, recipe, bench.seed)
    t0 = time.perf_counter()
    net = train_feature_net(data.public, epochs=recipe.feature_epochs, seed=bench.seed)
    evaluator = FidEvaluator(net, data.test)
    labels = balanced_labels(recipe.samples, len(data.train.classes))
    rows, grids, models = [], {}, {}
    real = matching_images(data.train, labels)
    real_blurred = data.blur(real)
    reference = {"label": "real train images", "fid": evaluator(real)}
    blurred = {"label": "blurred train images", "fid": evaluator(real_blurred)}
    for ref, images in ((reference, real), (blurred, real_blurred)):
        path = out / f"{ref['label'].split()[0]}.png"
        save_grid(images[:100], path, nrow=10)
        grids[f"{ref['label']} (FID {ref['fid']:.1f})"] = path
    feature_seconds = time.perf_counter() - t0
    for label, kind, eps in tqdm(bench.runs(), desc="diffusion methods", disable=not progress):
        folder = out / "runs" / label.replace(" ", "_").replace("=", "")
        result = _read(folder / "result.json")
        init = models.get("public") if kind.startswith("fdp") else None
        if result is None:
            t1 = time.perf_counter()
            model, info = train_diffusion(kind, data, recipe, eps, init, bench.seed, progress,
                                          str(folder / "checkpoint"))
            torch_save(folder / "model.pt", model.state_dict())
            seconds = time.perf_counter() - t1
            t1 = time.perf_counter()
            images = generate(model, data, recipe, labels, bench.seed)
            sample_seconds = time.perf_counter() - t1
            result = {"label": label, "kind": kind, "epsilon_target": eps, "info": info, "seconds": seconds,
                      "images_per_second": len(labels) / sample_seconds, **_scores(evaluator, net, images, labels, data)}
            save_grid(images[:100], folder / "samples.png", nrow=10)
            if kind == "fdp-alg1":
                sharp, rate = generate_with_rejection(model, data, recipe, labels, bench.seed)
                result["rejection"] = {"acceptance_rate": rate, **_scores(evaluator, net, sharp, labels, data)}
                save_grid(sharp[:100], folder / "samples_rejection.png", nrow=10)
            write_json(folder / "result.json", result)
        else:
            model = new_unet(data, recipe, bench.seed)
            model.load_state_dict(torch.load(folder / "model.pt", map_location="cpu", weights_only=True))
        models[label] = model
        grids[f"{label} (FID {result['fid']:.1f})"] = folder / "samples.png"
        if "rejection" in result:
            grids[f"{label} + rejection (FID {result['rejection']['fid']:.1f})"] = folder / "samples_rejection.png"
        rows.append(_row(result))
        if "rejection" in result:
            rows.append(_row({**result, **result["rejection"], "label": f"{label} + rejection"}))
    table = pd.DataFrame(rows)
    table.to_csv(out / "table.csv", index=False)
    write_text(out / "table.md", _markdown(table, reference, blurred, bench, feature_seconds))
    _figure(grids, out / "samples.png")
    return table


def _scores(evaluator: FidEvaluator, net, images: torch.Tensor, labels: torch.Tensor, data: ImageData) -> dict:
    generated = ImageSet(images, labels, data.test.classes, "generated")
    per_class = fid_per_class(net, generated, data.test)
    return {"fid": evaluator(images), "fid_per_class": per_class}


def _row(result: dict) -> dict:
    g = result.get("info", {}).get("guarantee", {})
    return {"method": result["label"], "epsilon": g.get("epsilon"), "unit": g.get("unit"), "fid": result["fid"],
            "fid_per_class_mean": float(np.nanmean(list(result["fid_per_class"].values()))),
            "acceptance_rate": result.get("acceptance_rate"), "train_seconds": result.get("seconds"),
            "images_per_second": result.get("images_per_second")}


def _markdown(table: pd.DataFrame, reference: dict, blurred: dict, bench: DiffusionBenchmark, seconds: float) -> str:
    lines = ["| method | epsilon | protected | FID | mean per-class FID | acceptance |", "|---|---|---|---|---|---|"]
    for _, r in table.iterrows():
        eps = "" if r["epsilon"] is None or (isinstance(r["epsilon"], float) and math.isnan(r["epsilon"])) \
            else f"{r['epsilon']:.3g}"
        unit = {"example": "image + label", "features": "detail beyond blur"}.get(
            r["unit"], "detail beyond blur (never read: epsilon 0)" if r["method"] == "public" else "nothing")
        acc = "" if r["acceptance_rate"] is None or pd.isna(r["acceptance_rate"]) else f"{r['acceptance_rate']:.2f}"
        lines.append(f"| {r['method']} | {eps} | {unit} | {r['fid']:.1f} | {r['fid_per_class_mean']:.1f} | {acc} |")
    return "\n".join(lines) + (
        f"\n\nReference FID: {reference['fid']:.1f} for {bench.recipe.samples} real training images, "
        f"{blurred['fid']:.1f} for their blurred versions (features of a classifier trained on the public split in "
        f"{seconds:.0f} s: NOT Inception-FID).\n")


def _figure(grids: dict[str, Path], path: Path) -> None:
    from PIL import Image

    ncols = min(len(grids), 5)
    nrows = math.ceil(len(grids) / ncols)
    fig, axes = new_figure((2.4 * ncols, 2.7 * nrows), ncols=ncols, nrows=nrows)
    axes = np.atleast_1d(axes).ravel()
    for ax in axes:
        ax.axis("off")
    for ax, (label, p) in zip(axes, grids.items()):
        ax.imshow(np.asarray(Image.open(p)), cmap="gray")
        ax.set_title(label, fontsize=8)
    save_figure(fig, path)


def _read(path: Path) -> dict | None:
    import json

    return json.loads(path.read_text()) if path.exists() else None
