"""The diffusion recipe: a class-conditional DDPM trained on a folder of images with DP or Feature-DP, whose
public view Psi(x) is a declared Gaussian blur (Mahloujifar et al., Section 6.3). ``fit`` ->
:class:`DiffusionModel` (``save`` / ``load`` a run folder, ``sample`` images, ``save_grid``).

Methods (:data:`dpcare.images.settings.METHODS`):

| method | reads | guarantee |
|---|---|---|
| non-private | sharp images and labels | none |
| public | the blurred images and labels ONLY | none (its inputs are the public view) |
| dp | sharp images and labels | DP: the whole image and its label |
| fdp-dpsgd | sharp images, from a public model | Feature-DP: the detail beyond the blurred view |
| fdp-alg1 | l(x) - l(Psi(x)) private, l(Psi(x)) public (Algorithm 1), from a public model | Feature-DP |

The FDP methods start from a model trained on the blurred images (method ``public``): ``init`` gives one
(a run folder of ``fit`` with method public), or ``fit`` trains it first, in the same run, on the blurred
view of the same images (free: under Feature-DP the blurred view is public).

What each part reads: :func:`image_views` builds ``x`` (the sharp images), ``x_pub`` = blur(x) and ``y``
(labels) once. The public model, Algorithm 1's public branch and the rejection threshold read ``x_pub``
and ``y`` only. The threshold is a quantile of the sharpness of BLURRED PUBLIC images: those of a public
image folder when one is given, else the blurred view of the training images, which the FDP guarantee
declares public (the non-private and public methods have no guarantee to keep); a ``dp`` model without
public images has no threshold (its blurred training images are private under DP).

The privacy unit is one image (with its label): the guarantee's n is the number of images in the folder,
all of which train. Held-out ``test_images`` (another folder) score a private model: its test FID against its
public baseline's (:func:`public_baseline`: for Feature-DP the same U-Net trained without privacy on the blurred
view only, i.e. the public model the run starts from; for dp the same U-Net trained without privacy on the public
images, or untrained without them) on the same test images, with a paired bootstrap interval and a verdict
(:func:`compare_with_baseline`).
"""

from __future__ import annotations

import copy
import os
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor

from dpcare.data.splits import holdout_split
from dpcare.engine import TrainConfig, Trainer
from dpcare.engine.trainer import TrainResult
from dpcare.exceptions import DataError, SettingsError, UnknownNameError
from dpcare.images.blur import GaussianBlur
from dpcare.images.data import ImageSet, load_image_folder
from dpcare.images.diffusion import DiffusionObjective, NoiseSchedule, sample
from dpcare.images.fid import compute_features, fid, train_feature_net
from dpcare.images.grid import save_grid
from dpcare.images.settings import DiffusionSettings
from dpcare.images.unet import UNet
from dpcare.privacy import NEIGHBOURING, Guarantee, PrivacyLedger, ProtectedUnit, default_delta
from dpcare.runs import Manifest, RunFolder, SavesRunFolder, read_run_of_kind
from dpcare.runs.record import phase
from dpcare.settings import in_effect
from dpcare.verdict import Comparison, compare, verdict_entry

KIND = "images"
MODEL_FILE = "model.pt"
PROTECTED = ("image detail beyond the blurred view",)
LABEL = "class label"
#: what a model without a guarantee says in its manifest
NO_GUARANTEE = {
    "non-private": "NO differential privacy guarantee (non-private: it read the sharp images and labels).",
    "public": ("NO formal guarantee, and no private read: trained on the blurred images and labels only (the "
               "public view), never on a sharp image. The blurred view itself is NOT protected."),
}


def blur_of(settings: DiffusionSettings) -> GaussianBlur:
    """The public view Psi of ``settings``: the declared Gaussian blur."""
    return GaussianBlur(settings.blur_kernel, settings.blur_sigma)


def image_views(images: ImageSet, blur: GaussianBlur) -> dict[str, Tensor]:
    """The training tensors: ``x`` (sharp images, private), ``x_pub`` = blur(x) (the public view under
    Feature-DP) and ``y`` (labels)."""
    return {"x": images.images, "x_pub": blur(images.images), "y": images.labels}


def ledger_terms(settings: DiffusionSettings) -> dict[str, Any]:
    """The unit, protected and public parts a private run's ledger names."""
    if settings.feature_dp:
        return {"unit": ProtectedUnit.FEATURES, "protected_columns": PROTECTED,
                "public_columns": (blur_of(settings).describe(), LABEL)}
    return {"unit": ProtectedUnit.EXAMPLE, "protected_columns": (), "public_columns": ()}


def plan(settings: DiffusionSettings, images: int) -> Guarantee | None:
    """What :func:`fit` will release on a folder of ``images`` images (a public count), from the settings
    alone: a budget checks it before any image is read. None without a guarantee (non-private, public)."""
    if not settings.private:
        return None
    terms = ledger_terms(settings)
    delta = settings.dp.delta if settings.dp.delta is not None else default_delta(images)
    return Guarantee(epsilon=settings.dp.epsilon, delta=delta, n=images, accountant=settings.dp.accountant,
                     neighbouring=NEIGHBOURING[terms["unit"]], **terms)


# --------------------------------------------------------------------------- training
def new_unet(settings: DiffusionSettings, image_shape: tuple[int, int, int], classes: int, seed: int) -> UNet:
    """A freshly initialised U-Net (seeded)."""
    c, h, w = image_shape
    if h != w:
        raise DataError(f"the U-Net needs square images, got {h}x{w}: declare an image size to resize them to")
    torch.manual_seed(seed)
    return UNet(c, h, settings.unet_widths, classes, settings.emb_dim)


def public_views(objective: DiffusionObjective, views: dict[str, Tensor]) -> dict[str, Tensor] | None:
    """What the public branch of ``objective`` may read: ``x_pub`` and ``y`` (None without a public branch)."""
    return {k: views[k] for k in objective.public_keys} if objective.has_public_branch else None


def train_unet(views: dict[str, Tensor], settings: DiffusionSettings, image_shape: tuple[int, int, int],
               classes: int, init: UNet | None = None, checkpoint_dir: str | None = None, progress: bool = False,
               max_physical_batch: int = 128) -> tuple[UNet, TrainResult]:
    """Train ``settings.method`` on ``views`` (:func:`image_views`): the building block of :func:`fit` and of
    the diffusion study. FDP methods start from ``init`` (a copy of it: a model of the blurred images)."""
    objective = DiffusionObjective(settings.method, NoiseSchedule(settings.diffusion_steps))
    if settings.feature_dp and init is None:
        raise SettingsError(f"{settings.method} starts from the Public model (trained on the blurred images): pass init")
    model = copy.deepcopy(init) if init is not None else new_unet(settings, image_shape, classes, settings.dp.seed)
    if objective.private:
        ledger = PrivacyLedger(len(views["y"]), delta=settings.dp.delta, accountant=settings.dp.accountant,
                               **ledger_terms(settings))
        config = TrainConfig(dp=settings.dp, compute=settings.compute, lr=settings.lr, alpha=settings.alpha,
                             public_batch_size=settings.plain_batch_size, progress=progress,
                             checkpoint_dir=checkpoint_dir, max_physical_batch=max_physical_batch,
                             ema_decay=settings.ema_decay)
    else:
        ledger = None
        schedule = settings.dp.replace(batch_size=settings.plain_batch_size, epochs=settings.plain_epochs, steps=None)
        config = TrainConfig(dp=schedule, compute=settings.compute, lr=settings.plain_lr, progress=progress,
                             checkpoint_dir=checkpoint_dir, ema_decay=settings.ema_decay)
    private = {k: views[k] for k in objective.private_keys}
    result = Trainer(model, objective, config, ledger).fit(private, public_views(objective, views))
    return model, result


def training_info(result: TrainResult) -> dict[str, Any]:
    return {"steps": result.steps, "backend": result.backend, "noise_multiplier": result.noise_multiplier,
            "sampling_rate": result.sampling_rate}


# --------------------------------------------------------------------------- sampling
def balanced_labels(n: int, classes: int) -> Tensor:
    """``n`` labels cycling through the classes: 0, 1, ..., classes - 1, 0, 1, ..."""
    return torch.arange(n) % classes


def generate(unet: UNet, settings: DiffusionSettings, labels: Tensor, image_shape: tuple[int, int, int],
             seed: int) -> Tensor:
    """DDIM samples of ``labels`` (seeded)."""
    return sample(unet, NoiseSchedule(settings.diffusion_steps), labels, image_shape, steps=settings.sample_steps,
                  generator=torch.Generator().manual_seed(seed))


def rejection_threshold(blurred_public: Tensor, settings: DiffusionSettings) -> float:
    """The rejection threshold: the ``reject_quantile`` of the sharpness of BLURRED PUBLIC images."""
    blur = blur_of(settings)
    return float(torch.quantile(blur.sharpness(blurred_public), settings.reject_quantile))


def generate_with_rejection(unet: UNet, settings: DiffusionSettings, threshold: float, labels: Tensor,
                            image_shape: tuple[int, int, int], seed: int) -> tuple[Tensor, float]:
    """Sample, drop samples no sharper than ``threshold``, resample their labels (at most ``reject_rounds``
    rounds; the last round keeps what it gets). Returns images and acceptance rate."""
    blur = blur_of(settings)
    out = torch.empty(len(labels), *image_shape)
    todo = torch.arange(len(labels))
    drawn = accepted = 0
    for r in range(settings.reject_rounds):
        images = generate(unet, settings, labels[todo], image_shape, seed + 1000 * r)
        keep = blur.sharpness(images) > threshold
        drawn, accepted = drawn + len(todo), accepted + int(keep.sum())
        last = r == settings.reject_rounds - 1
        chosen = torch.ones_like(keep) if last else keep
        out[todo[chosen]] = images[chosen]
        todo = todo[~chosen]
        if not len(todo):
            break
    return out, accepted / max(drawn, 1)


# --------------------------------------------------------------------------- the fitted model
@dataclass
class DiffusionModel(SavesRunFolder):
    """A fitted diffusion model: the U-Net, its settings, classes and image shape, the guarantee (None:
    non-private or public) and ledger, the rejection threshold (None: no public images to set it) and what
    training recorded (steps, noise, where the FDP start and the threshold came from)."""

    RUN_KIND = KIND

    settings: DiffusionSettings
    unet: UNet
    classes: tuple[str, ...]
    image_shape: tuple[int, int, int]
    guarantee: Guarantee | None = None
    ledger: PrivacyLedger | None = field(default=None, repr=False)
    threshold: float | None = None
    info: dict[str, Any] = field(default_factory=dict)
    run_id: str = ""  # of the run folder it was loaded from
    metrics: dict[str, float] = field(default_factory=dict)  # on the test images (fit with test_images)
    baseline: dict[str, Any] | None = None  # the public baseline on the same test images, and the verdict

    def label_indices(self, n: int | None = None, labels: Any = None) -> Tensor:
        """Class indices to sample: ``labels`` (class names or indices), or ``n`` cycling through the classes."""
        if labels is None:
            if n is None or int(n) < 1:
                raise SettingsError(f"give the number of images to sample (n >= 1) or their labels, got n = {n!r}")
            return balanced_labels(int(n), len(self.classes))
        if isinstance(labels, Tensor):
            labels = labels.tolist()
        out = []
        for label in labels:
            if isinstance(label, str) and label in self.classes:
                out.append(self.classes.index(label))
            elif isinstance(label, int) and not isinstance(label, bool) and 0 <= label < len(self.classes):
                out.append(label)
            else:
                raise UnknownNameError(f"unknown class {label!r}; the model's classes are {list(self.classes)}")
        if n is not None and int(n) != len(out):
            raise SettingsError(f"n = {n} but {len(out)} labels were given")
        if not out:
            raise SettingsError("no labels to sample")
        return torch.tensor(out, dtype=torch.long)

    def sample(self, n: int | None = None, labels: Any = None, seed: int = 0, rejection: bool = False) -> Tensor:
        """Generated images ``[N, C, H, W]`` in [-1, 1]; with ``rejection``, blurry samples are redrawn."""
        if rejection:
            return self.sample_with_rejection(n, labels, seed)[0]
        return generate(self.unet, self.settings, self.label_indices(n, labels), self.image_shape, seed)

    def sample_with_rejection(self, n: int | None = None, labels: Any = None, seed: int = 0) -> tuple[Tensor, float]:
        """Samples with rejection of blurry ones, and the acceptance rate."""
        if self.threshold is None:
            raise SettingsError("this model has no rejection threshold: a dp model's blurred training images are "
                                "private, so it needs public images to set one (fit with public_images / "
                                "--public-images)")
        return generate_with_rejection(self.unet, self.settings, self.threshold, self.label_indices(n, labels),
                                       self.image_shape, seed)

    def save_grid(self, path: str | os.PathLike, n: int | None = 100, labels: Any = None, seed: int = 0,
                  rejection: bool = False, nrow: int = 10) -> Path:
        """Sample and write a PNG grid of the images."""
        return save_grid(self.sample(n, labels, seed, rejection), path, nrow=nrow)

    # ----------------------------------------------------------------- run folders
    def not_protected(self) -> list[str]:
        s = self.settings
        out = []
        if s.method != "non-private":
            out.append(f"The public view: each image blurred ({blur_of(s).describe()}) and its class label. "
                       "Feature-DP protects only the detail beyond it; nothing protects the view itself"
                       + (" (this model reads only the view)." if s.method == "public" else "."))
        if "init" in self.info:
            out.append(f"The starting model: {self.info['init']['what']}.")
        if self.info.get("threshold_from"):
            out.append(f"The rejection threshold comes from {self.info['threshold_from']}.")
        out.append("The class names and the number of images (read from the folder's names, not its pixels) are "
                   "treated as public metadata; declare the classes to keep them independent of which images exist.")
        return out

    def manifest(self, data: dict[str, Any] | None = None, metrics: dict[str, Any] | None = None) -> Manifest:
        method = self.settings.method
        metrics = {**self.metrics, **(metrics or {})}
        m = Manifest(settings=self.settings.to_dict(), data=data or {}, files={"model": MODEL_FILE})
        m.settings["info"] = self.info
        m.add_model(method, self.guarantee.to_dict() if self.guarantee else None,
                    self.ledger.state_dict() if self.ledger is not None else None,
                    note="" if self.guarantee else NO_GUARANTEE[method])
        if metrics:
            m.metrics = [{"model": method, **metrics}]
            m.headline = [k for k in metrics if "FID" in k][:1]
        if self.baseline is not None:
            b = self.baseline
            m.baselines = [b]
            m.metrics.append({"model": f"public baseline: {b['name']}", **b["metrics"]})
        if self.baseline is not None:
            m.verdicts = [verdict_entry(method, self.baseline["comparisons"][0])]
        m.settings_in_effect = in_effect(self.settings, {"dp.delta": self.guarantee.delta} if self.guarantee else {})
        m.not_protected = self.not_protected()
        if self.baseline is not None and "feature_net" in self.baseline:
            m.not_protected.append(f"The test images (scored, and {self.baseline['feature_net']}) are outside the "
                                   "guarantee: their FIDs are released in this file.")
        m.notes = [*([f"{method}: {self.baseline['comparisons'][0]['verdict']}. {self.baseline['interval']}"]
                     if self.baseline is not None else []), (f"Classes: {', '.join(self.classes)}; images {self.image_shape[1]}x{self.image_shape[2]}, "
                    f"{self.image_shape[0]} channel(s). Sample with `dpcare images sample FOLDER --n 100 --out "
                    "grid.png`.")]
        return m

    def write(self, run: RunFolder, data: dict[str, Any] | None = None, metrics: dict[str, Any] | None = None) -> Path:
        """Write the model and the manifest into ``run`` and finish it."""
        u = self.unet
        run.save_torch(MODEL_FILE, {"unet": u.state_dict(), "classes": list(self.classes),
                                    "image_shape": list(self.image_shape), "threshold": self.threshold,
                                    "unet_config": {"channels": u.channels, "size": u.size,
                                                    "widths": list(self.settings.unet_widths),
                                                    "n_classes": u.n_classes, "emb_dim": u.emb_dim}})
        return run.finish(self.manifest(data, metrics))

    @classmethod
    def load(cls, folder: str | os.PathLike) -> DiffusionModel:
        """A model saved by :meth:`save` or ``dpcare images fit`` (works in a fresh process)."""
        folder = Path(folder)
        manifest, settings, info = read_run_of_kind(folder, KIND, "a diffusion model")
        saved = torch.load(folder / MODEL_FILE, map_location="cpu", weights_only=True)
        c = saved["unet_config"]
        unet = UNet(c["channels"], c["size"], tuple(c["widths"]), c["n_classes"], c["emb_dim"])
        unet.load_state_dict(saved["unet"])
        unet.eval()
        entry = manifest.models[0]
        g, ledger = entry.get("guarantee"), entry.get("ledger")
        metrics = {k: v for k, v in manifest.metrics[0].items() if k != "model"} if manifest.metrics else {}
        return cls(DiffusionSettings.from_dict(settings), unet, tuple(saved["classes"]), tuple(saved["image_shape"]),
                   Guarantee.from_dict(g) if g else None, PrivacyLedger.from_state_dict(ledger) if ledger else None,
                   saved["threshold"], info, manifest.run_id, metrics,
                   manifest.baselines[0] if manifest.baselines else None)


# --------------------------------------------------------------------------- fitting
MUST_MATCH = ("image_size", "color", "widths", "emb_dim", "diffusion_steps", "blur_kernel", "blur_sigma")


def load_init(settings: DiffusionSettings, init: DiffusionModel | str | os.PathLike | None) -> DiffusionModel | None:
    """The public model an FDP run starts from (a run of method ``public`` with the same model and blur
    settings), checked before any image is read; None without one."""
    if init is None:
        return None
    if not settings.feature_dp:
        why = (" (a model of the blurred private images would leak them: under DP they are not public)"
               if settings.method == "dp" else "")
        raise SettingsError(f"--init is for fdp-dpsgd and fdp-alg1, which start from a public model; method "
                            f"{settings.method} starts from scratch{why}")
    model = init if isinstance(init, DiffusionModel) else DiffusionModel.load(init)
    if model.settings.method != "public":
        raise SettingsError(f"--init {init} holds a {model.settings.method!r} model: an FDP run starts from a model "
                            "trained on the blurred images only (dpcare images fit FOLDER --method public)")
    differ = [f"{k} ({getattr(model.settings, k)!r} there, {getattr(settings, k)!r} here)" for k in MUST_MATCH
              if getattr(model.settings, k) != getattr(settings, k)]
    if differ:
        raise SettingsError(f"--init {init} was trained with other settings: {', '.join(differ)}")
    return model


def read_images(images: ImageSet | str | os.PathLike, settings: DiffusionSettings, labels: str | os.PathLike | None = None,
                classes: Any = None) -> ImageSet:
    """An image set at the settings' size: a folder is read (resized on reading, in the settings' colour)."""
    if isinstance(images, ImageSet):
        if labels is not None or classes is not None:
            raise SettingsError("labels and classes are for an image folder, not an ImageSet")
        return images.resized(settings.image_size) if settings.image_size is not None else images
    return load_image_folder(images, size=settings.image_size, grayscale=settings.color == "gray", labels=labels,
                             classes=classes)


def threshold_source(settings: DiffusionSettings, views: dict[str, Tensor],
                     public: ImageSet | None) -> tuple[Tensor | None, str]:
    """The blurred PUBLIC images that set the rejection threshold, and what they are."""
    blur = blur_of(settings)
    if public is not None:
        return blur(public.images), f"the blurred images of a public image folder ({len(public)} images)"
    if settings.method == "dp":
        return None, ""
    what = ("public under Feature-DP" if settings.method != "non-private" else "the model has no guarantee")
    return views["x_pub"], f"the blurred view of the training images ({what})"


def fit(images: ImageSet | str | os.PathLike, settings: DiffusionSettings | None = None, *,
        init: DiffusionModel | str | os.PathLike | None = None, labels: str | os.PathLike | None = None,
        classes: Any = None, public_images: ImageSet | str | os.PathLike | None = None,
        checkpoint_dir: str | None = None, progress: bool = True, max_physical_batch: int = 128,
        test_images: ImageSet | str | os.PathLike | None = None, baseline: bool = True,
        resamples: int = 1000, holdout: float = 0.0) -> DiffusionModel:
    """Train ``settings.method`` on every image of ``images`` (a folder: class sub-folders, or flat with a
    ``labels`` CSV; or an :class:`ImageSet`). FDP methods start from ``init`` (a public model's run folder)
    or from a public model trained first on the blurred images. ``public_images`` (optional) set the
    rejection threshold. ``checkpoint_dir``: resumable training state (sub-folders per model).

    ``test_images`` (held-out images, not in ``images``, with the same classes): a private model is scored
    on them (test FID) against its public baseline (:func:`public_baseline`) with a paired bootstrap
    interval and a verdict (``model.baseline``); ``baseline=False`` skips that (speed). Without ``test_images``,
    ``holdout`` (e.g. 0.1) of the images, drawn with the seed from their count alone, are held out as the test
    images and do not train (:func:`training_count` is the n of the guarantee)."""
    settings = settings or DiffusionSettings()
    start = load_init(settings, init)  # before any image is read
    data = read_images(images, settings, labels, classes)
    public = read_images(public_images, settings) if public_images is not None else None
    if public is not None and public.image_shape != data.image_shape:
        raise DataError(f"the public images are {public.image_shape} (C, H, W), the training images "
                        f"{data.image_shape}: read them at the same size and colour")
    test = None
    if test_images is not None:  # a folder is read with the training images' classes (an unknown one is named)
        test = read_images(test_images, settings, classes=None if isinstance(test_images, ImageSet) else
                           list(data.classes))
    elif holdout:  # positions from the count and the seed alone, as training_count computes them
        train_idx, test_idx = holdout_split(len(data), holdout, settings.dp.seed)
        data, test = data.subset(torch.as_tensor(train_idx)), data.subset(torch.as_tensor(test_idx))
    if test is not None:
        check_test_images(test, data)
    views = image_views(data, blur_of(settings))
    info: dict[str, Any] = {"images": len(data)}
    shape, k = data.image_shape, len(data.classes)
    sub = (lambda name: str(Path(checkpoint_dir) / name)) if checkpoint_dir else (lambda name: None)
    unet_init = None
    if start is not None:
        if start.classes != data.classes or start.image_shape != shape:
            raise DataError(f"the --init model has classes {list(start.classes)} and images {start.image_shape}; "
                            f"this folder has {list(data.classes)} and {shape}")
        unet_init = start.unet
        info["init"] = {"what": f"the public model of run {start.run_id or '(not saved)'}, trained on blurred images "
                                "only", "run_id": start.run_id}
    elif settings.feature_dp:
        with phase("training the public model on blurred images"):
            unet_init, first = train_unet(views, replace(settings, method="public"), shape, k, None, sub("public"),
                                          progress, max_physical_batch)
        info["init"] = {"what": "a public model trained first in this run on the blurred images only (plain epochs, "
                                "plain batch size and lr)", "steps": first.steps}
    with phase(f"training ({settings.method})"):
        unet, result = train_unet(views, settings, shape, k, unet_init, sub(settings.method), progress,
                                  max_physical_batch)
    info.update(training_info(result))
    blurred, source = threshold_source(settings, views, public)
    info["threshold_from"] = source
    threshold = rejection_threshold(blurred, settings) if blurred is not None else None
    metrics, compared = {}, None
    if test is not None and baseline and settings.private:
        with phase("training the public baseline"):
            base_unet, name = public_baseline(settings, views, public, shape, k, unet_init, sub("baseline"),
                                              progress, max_physical_batch)
        with phase("sampling, test FIDs and the verdict"):
            metrics, compared = compare_with_baseline(unet, base_unet, name, settings, test, public, resamples)
    return DiffusionModel(settings, unet, data.classes, shape, result.guarantee, result.ledger, threshold, info,
                          metrics=metrics, baseline=compared)


# --------------------------------------------------------------------------- the public baseline
#: the metric a private model is compared with its baseline on
TEST_METRIC = "test FID"
INTERVAL = ("The interval is a paired bootstrap over the test images: each resample draws test-image indices with "
            "replacement and takes, at those indices, the test images, the DP model's samples and the baseline's "
            "samples (one sample per test image, of its class, the same sampling noise for both models), then "
            "recomputes both FIDs; the 2.5% and 97.5% percentiles of the difference. It covers which test images "
            "and which samples were drawn, not the randomness of training (one trained model each).")


def training_count(images: int, holdout: float, seed: int, test_images: bool = False) -> int:
    """How many of ``images`` train (the guarantee's n): all with separate test images, else all but the
    held-out ``holdout`` fraction (:func:`dpcare.data.splits.holdout_split`)."""
    return images if test_images else len(holdout_split(images, holdout, seed)[0])


def check_test_images(test: ImageSet, data: ImageSet) -> None:
    """Held-out test images: the training images' shape, at least 2 images (a FID needs a covariance)."""
    if test.image_shape != data.image_shape:
        raise DataError(f"the test images are {test.image_shape} (C, H, W), the training images {data.image_shape}: "
                        "read them at the same size and colour")
    if tuple(test.classes) != tuple(data.classes):
        raise DataError(f"the test images have classes {list(test.classes)}, the training images {list(data.classes)}")
    if len(test) < 2:
        raise DataError(f"{len(test)} test image(s): a FID needs at least 2 (give a folder of held-out images)")


def public_baseline(settings: DiffusionSettings, views: dict[str, Tensor], public: ImageSet | None,
                    image_shape: tuple[int, int, int], classes: int, public_unet: UNet | None,
                    checkpoint_dir: str | None = None, progress: bool = False,
                    max_physical_batch: int = 128) -> tuple[UNet, str]:
    """The best model this recipe makes without private data, and its name. It never reads a sharp training
    image:

    - Feature-DP (fdp-dpsgd, fdp-alg1): the blurred view and the labels are public, so the baseline is the
      same U-Net trained without privacy on the blurred view only: the public model the FDP run started from
      (``public_unet``: trained in the run, or the ``--init`` run; ``views`` is not read).
    - dp (the whole image and its label private, so their blurred view is too): the same U-Net trained without
      privacy on the public images (``public``, sharp: they are public) when given; else the U-Net at its
      initialisation (no data at all: its samples are structured noise)."""
    if settings.feature_dp:
        if public_unet is None:
            raise SettingsError(f"{settings.method}: the public baseline is the public model it starts from")
        return public_unet, "the same U-Net trained without privacy on the blurred view only (the run's public model)"
    if public is not None:
        if public.image_shape != image_shape or len(public.classes) != classes:
            raise DataError(f"the public images ({public.image_shape}, {len(public.classes)} classes) must match the "
                            f"training images ({image_shape}, {classes} classes) to train the public baseline")
        unet, _ = train_unet(image_views(public, blur_of(settings)), replace(settings, method="non-private"),
                             image_shape, classes, None, checkpoint_dir, progress, max_physical_batch)
        return unet, f"the same U-Net trained without privacy on the {len(public)} public images only"
    return (new_unet(settings, image_shape, classes, settings.dp.seed),
            "the same U-Net untrained (no public images: a model that reads no data)")


def score_against_baseline(test_features: np.ndarray, model_features: np.ndarray, baseline_features: np.ndarray,
                           name: str, resamples: int = 1000, seed: int = 0) -> Comparison:
    """Test FID of the model's samples against the baseline's, on the same test images: one sample per test
    image in each (row i of each array belongs to test image i); a paired bootstrap over the test images
    (:data:`INTERVAL`). Positive difference: the model's FID is lower (better)."""
    return compare(TEST_METRIC, lambda test, gen: fid(gen, test), test_features, model_features, baseline_features,
                   name, higher_is_better=False, resamples=resamples, seed=seed)


def compare_with_baseline(unet: UNet, baseline_unet: UNet, name: str, settings: DiffusionSettings, test: ImageSet,
                          public: ImageSet | None = None, resamples: int = 1000,
                          feature_epochs: int = 20) -> tuple[dict[str, float], dict[str, Any]]:
    """The model's test FID and its public baseline's (the verdict): both sample one image per test image, of its
    class, with the same noise; FID on the features of a small classifier trained on the public images when
    given, else on the test images (never on a training image; NOT Inception-FID)."""
    seed = settings.dp.seed
    source, what = (public, f"the {len(public)} public images") if public is not None else (test, "the test images")
    net = train_feature_net(source, epochs=feature_epochs, seed=seed)
    shape = test.image_shape
    feats = [compute_features(net, test.images)]
    for u in (unet, baseline_unet):
        feats.append(compute_features(net, generate(u, settings, test.labels, shape, seed)))
    c = score_against_baseline(*feats, name, resamples, seed)
    return ({TEST_METRIC: c.model},
            {"name": name, "metrics": {TEST_METRIC: c.baseline}, "comparisons": [c.to_dict()], "interval": INTERVAL,
             "test_images": len(test), "feature_net": f"the FID features come from a classifier trained on {what}"})


__all__ = ["KIND", "MODEL_FILE", "TEST_METRIC", "DiffusionModel", "DiffusionSettings", "balanced_labels", "blur_of",
           "check_test_images", "compare_with_baseline", "fit", "generate", "generate_with_rejection", "image_views",
           "ledger_terms", "load_init", "new_unet", "plan", "public_baseline", "public_views", "read_images", "rejection_threshold",
           "score_against_baseline", "threshold_source", "train_unet", "training_count"]
