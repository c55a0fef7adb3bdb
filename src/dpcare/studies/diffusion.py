"""The diffusion study (Mahloujifar et al., Section 6.3) at CPU scale, built on the diffusion recipe
(:mod:`dpcare.images.recipe`): Feature-DP diffusion models whose blurred images are public.

Splits (stratified, disjoint): ``public`` trains the FID feature classifier, sets the rejection threshold
from its blurred images and gives the real-image reference (grid and FID); ``train`` is private (its
blurred versions are the public feature Psi(x) under FDP); ``test`` is the FID reference set. The five
methods train through the recipe's :func:`~dpcare.images.recipe.train_unet`: Non-private, Public (blurred
only), DP (DP-SGD from scratch), FDP (DP-SGD) and FDP (Alg. 1) from the Public model; FDP (Alg. 1) is
also sampled with rejection of blurry samples.

The study's folder holds no private training image: its grids show generated images and public-split
images only. Each method is a recipe run folder under ``runs/`` (``dpcare images sample runs/<method>``
samples it); the study writes ``run.json`` (every model's guarantee, FID and timing). Interrupted, the
same command resumes in the staging folder (finished methods are reloaded, the running one from its
checkpoint).
"""

from __future__ import annotations

import json
import math
import os
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from dpcare.exceptions import DataError, UnknownNameError
from dpcare.images.blur import GaussianBlur
from dpcare.images.data import ImageSet, load_digits, load_mnist, split_images
from dpcare.images.fid import FidEvaluator, fid_per_class, train_feature_net
from dpcare.images.grid import save_grid
from dpcare.images.recipe import (
    KIND,
    DiffusionModel,
    balanced_labels,
    blur_of,
    image_views,
    rejection_threshold,
    train_unet,
    training_info,
)
from dpcare.images.settings import DiffusionSettings
from dpcare.io import new_figure, save_figure
from dpcare.privacy import legacy_delta
from dpcare.progress import progress as tqdm
from dpcare.runs import Manifest, RunFolder, is_run_folder
from dpcare.settings import DPSettings
from dpcare.studies.paired import (
    LOWER,
    Claim,
    check_seeds,
    note_seeds,
    paired_differences,
    paired_markdown,
    seeds_key,
    seeds_label,
)

LOADERS = {"mnist": load_mnist, "digits": load_digits}
PUBLIC_NOTE = "NO formal guarantee: trained on blurred private images, which this model does not protect."
#: the metrics the claims are checked on (lower is better)
PAIRED_METRICS = {"fid": LOWER, "fid_per_class_mean": LOWER}


def claims(epsilons) -> list[Claim]:
    """The paper's claims (Section 6.3) at every epsilon: each FDP method beats DP and beats Public."""
    return [Claim(fdp, worse, (), float(e)) for e in epsilons for fdp in ("fdp-dpsgd", "fdp-alg1")
            for worse in ("dp", "public")]


@dataclass
class DiffusionStudy:
    """The study's grid: the recipe's settings (every method shares them), the data set, the epsilons of the
    private methods, the seed, the generated images per method and the FID classifier's epochs."""

    dataset: str = "mnist"
    epsilons: tuple[float, ...] = (8.0, 1.0)
    seed: int = 0
    settings: DiffusionSettings = field(default_factory=DiffusionSettings)
    samples: int = 500  # generated images per method for FID
    feature_epochs: int = 20
    seeds: int = 1  # seed s: the whole study (split, FID classifier, models, noise, sampling) at seed + s

    @classmethod
    def quick(cls) -> DiffusionStudy:
        """Smoke size: 8x8 digits, a tiny U-Net, a few epochs, epsilon 8."""
        settings = DiffusionSettings(image_size=None, widths="8,16", emb_dim=16, diffusion_steps=100, sample_steps=10,
                                     plain_epochs=2, reject_rounds=2,
                                     dp=DPSettings(batch_size=128, epochs=1.0, clip_norm=0.1))
        return cls(dataset="digits", epsilons=(8.0,), settings=settings, samples=100, feature_epochs=2)

    def config(self) -> dict:
        """The run folder's settings (its resume key): every field, ``seeds`` only when not 1 (so that the
        published one-seed study keeps its key)."""
        return seeds_key(asdict(self), self.seeds)

    def at_seed(self, s: int) -> DiffusionStudy:
        """The one-seed study of seed ``s`` (seed + s); ``at_seed(0)`` is the published seed-0 study."""
        check_seeds(self.seeds)
        dp = self.settings.dp  # a user's noise_seed moves with the seed (DPSettings.shifted); dp.seed stays, since
        moved = dp.shifted(s).replace(seed=dp.seed)  # method_settings sets it from the study's own seed
        return replace(self, seed=self.seed + s, seeds=1, settings=replace(self.settings, dp=moved))

    def runs(self) -> list[tuple[str, str, float | None]]:
        """(label, method, epsilon) in training order (Public before the FDP methods that start from it)."""
        out = [("non-private", "non-private", None), ("public", "public", None)]
        for e in self.epsilons:
            out += [(f"{k} eps={e:g}", k, e) for k in ("dp", "fdp-dpsgd", "fdp-alg1")]
        return out

    def method_settings(self, method: str, epsilon: float | None, images: int | None = None) -> DiffusionSettings:
        """The recipe's settings of one method; ``images``: the private training images, which pin delta
        (unless the study's settings give one) to 1/n^1.1, the default docs/results/diffusion.md was measured with
        (now min(1e-5, 0.01/n)), so that the published numbers stay reproducible; noise_seed is pinned to the
        study's seed for the same reason (unless the settings give one; the noise is then known to whoever knows
        the seed)."""
        pin = {"delta": legacy_delta(images)} if images is not None and self.settings.dp.delta is None else {}
        pin |= {"noise_seed": self.seed} if self.settings.dp.noise_seed is None else {}
        dp = self.settings.dp.replace(seed=self.seed, **({"epsilon": epsilon} if epsilon is not None else {}), **pin)
        return replace(self.settings, method=method, dp=dp)


@dataclass
class ImageData:
    name: str
    public: ImageSet
    train: ImageSet
    test: ImageSet
    blur: GaussianBlur


def prepare_images(dataset: str = "mnist", settings: DiffusionSettings | None = None, seed: int = 0) -> ImageData:
    if dataset not in LOADERS:
        raise UnknownNameError(f"unknown image data set {dataset!r}; choose one of {sorted(LOADERS)}")
    settings = settings or DiffusionSettings()
    images = LOADERS[dataset]()
    if settings.image_size is not None:
        images = images.resized(settings.image_size)
    parts = split_images(images, seed=seed)
    return ImageData(dataset, parts["public"], parts["train"], parts["test"], blur_of(settings))


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


def _folder_name(label: str) -> str:
    return label.replace(" ", "_").replace("=", "")


def run_diffusion_study(study: DiffusionStudy, out_dir: str | os.PathLike, progress: bool = True,
                        force: bool = False) -> pd.DataFrame:
    """Train (or reload) every method, sample, score FID on the test split, write the tables, the figure and
    run.json, for every seed (seed s > 0 in the folder's ``seed<s>/``; run.json and the figure hold seed 0's
    models); the paired differences of :func:`claims` over the seeds in paired.csv and table.md. Resumable:
    rerun the same settings while the study is unfinished."""
    run = RunFolder(out_dir, "study:diffusion", study.config(), force=force, command="dpcare benchmark diffusion")
    run.write_json("config.json", study.config())
    per_seed = [_one_seed(study.at_seed(s), run, "" if s == 0 else f"seed{s}/", progress) for s in range(study.seeds)]
    results, reference, blurred, grids, feature_seconds = per_seed[0]
    table, diffs = tables([one[0] for one in per_seed], study)
    run.write_text("table.csv", table.to_csv(index=False))
    run.write_text("paired.csv", diffs.to_csv(index=False))
    run.write_text("table.md", _markdown(table, reference, blurred, study, feature_seconds, diffs))
    _figure(grids, run.path("samples.png"))
    m = manifest(results, reference, blurred, study, feature_seconds)
    note_seeds(m, study.seed, study.seeds, "table.csv (column seed) and seed<s>/")
    run.finish(m)
    return table


def tables(per_seed: list[list[dict]], study: DiffusionStudy) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(the table, one row per method and seed with a seed column when the study has several; the paired
    differences of :func:`claims`) of every seed's method results."""
    if study.seeds == 1:
        table = pd.DataFrame([row for r in per_seed[0] for row in _rows(r)])
    else:
        table = pd.DataFrame([{**row, "seed": s} for s, results in enumerate(per_seed) for r in results
                              for row in _rows(r)])
    return table, paired_differences(paired_runs(per_seed), claims(study.epsilons), PAIRED_METRICS)


def paired_runs(per_seed: list[list[dict]]) -> pd.DataFrame:
    """One row per (method, epsilon, seed) for :func:`~dpcare.studies.paired.paired_differences`: method =
    the method's kind (``fdp-alg1 + rejection`` for its rejection sampling), FID and mean per-class FID."""
    rows = []
    for s, results in enumerate(per_seed):
        for r in results:
            base = {"target_epsilon": r["epsilon_target"], "seed": s}
            rows.append({"method": r["kind"], **base, "fid": r["fid"], "fid_per_class_mean": _mean(r["fid_per_class"])})
            if "rejection" in r:
                rows.append({"method": f"{r['kind']} + rejection", **base, "fid": r["rejection"]["fid"],
                             "fid_per_class_mean": _mean(r["rejection"]["fid_per_class"])})
    return pd.DataFrame(rows)


def _one_seed(study: DiffusionStudy, run: RunFolder, prefix: str, progress: bool):
    """(results, reference, blurred, grids, feature seconds) of the one-seed ``study``, its files under
    ``prefix`` in the run folder (seed 0: ``""``, the published layout)."""
    data = prepare_images(study.dataset, study.settings, study.seed)
    classes = data.train.classes
    t0 = time.perf_counter()
    net = train_feature_net(data.public, epochs=study.feature_epochs, seed=study.seed)
    evaluator = FidEvaluator(net, data.test)
    labels = balanced_labels(study.samples, len(classes))
    real = matching_images(data.public, labels)  # PUBLIC images: the folder shows and scores no private image
    real_blurred = data.blur(real)
    reference = {"label": "real public-split images", "fid": evaluator(real), "file": f"{prefix}public.png"}
    blurred = {"label": "blurred public-split images", "fid": evaluator(real_blurred),
               "file": f"{prefix}public_blurred.png"}
    grids = {}
    for ref, images in ((reference, real), (blurred, real_blurred)):
        save_grid(images[:100], run.path(ref["file"]), nrow=10)
        grids[f"{ref['label']} (FID {ref['fid']:.1f})"] = run.path(ref["file"])
    feature_seconds = time.perf_counter() - t0
    views = image_views(data.train, data.blur)
    threshold = rejection_threshold(data.blur(data.public.images), study.settings)
    results, unets = [], {}
    for label, kind, eps in tqdm(study.runs(), desc="diffusion methods", disable=not progress):
        path = run.path(f"{prefix}runs/{_folder_name(label)}")
        if is_run_folder(path):  # finished before an interruption
            model = DiffusionModel.load(path)
            result = json.loads((path / "result.json").read_text())
        else:
            model, result = _train_and_score(study, label, kind, eps, path, data, views, threshold,
                                             unets.get("public") if kind.startswith("fdp") else None,
                                             evaluator, net, labels, progress)
        unets[label] = model.unet
        grids[f"{label} (FID {result['fid']:.1f})"] = path / "samples.png"
        if "rejection" in result:
            grids[f"{label} + rejection (FID {result['rejection']['fid']:.1f})"] = path / "samples_rejection.png"
        results.append(result)
    return results, reference, blurred, grids, feature_seconds


def _train_and_score(study: DiffusionStudy, label: str, kind: str, eps: float | None, path: Path, data: ImageData,
                     views: dict[str, torch.Tensor], threshold: float, init, evaluator: FidEvaluator, net,
                     labels: torch.Tensor, progress: bool) -> tuple[DiffusionModel, dict]:
    """One method as a recipe run folder at ``path``: train, sample, score; result.json and the grids beside the
    model."""
    settings = study.method_settings(kind, eps, images=len(views["y"]))  # the ledger's n (train_unet's)
    mrun = RunFolder(path, KIND, settings.to_dict(), command="dpcare benchmark diffusion")
    classes, shape = data.train.classes, data.train.image_shape
    t1 = time.perf_counter()
    unet, trained = train_unet(views, settings, shape, len(classes), init, mrun.checkpoint_dir, progress)
    seconds = time.perf_counter() - t1
    info = {"kind": kind, **training_info(trained),
            "threshold_from": "the blurred images of the study's public split"}
    if init is not None:
        info["init"] = {"what": "the study's Public model (trained on the blurred training images only)"}
    if trained.guarantee is not None:
        info |= {"guarantee": trained.guarantee.to_dict(), "guarantee_text": trained.guarantee.describe(),
                 "ledger": trained.ledger.state_dict()}
    model = DiffusionModel(settings, unet, classes, shape, trained.guarantee, trained.ledger, threshold,
                           {k: v for k, v in info.items() if k not in ("guarantee", "guarantee_text", "ledger")})
    t1 = time.perf_counter()
    images = model.sample(labels=labels, seed=study.seed)
    sample_seconds = time.perf_counter() - t1
    result = {"label": label, "kind": kind, "epsilon_target": eps, "info": info, "seconds": seconds,
              "images_per_second": len(labels) / sample_seconds, **_scores(evaluator, net, images, labels, data)}
    save_grid(images[:100], mrun.path("samples.png"), nrow=10)
    if kind == "fdp-alg1":
        sharp, rate = model.sample_with_rejection(labels=labels, seed=study.seed)
        result["rejection"] = {"acceptance_rate": rate, **_scores(evaluator, net, sharp, labels, data)}
        save_grid(sharp[:100], mrun.path("samples_rejection.png"), nrow=10)
    mrun.write_json("result.json", result)
    model.write(mrun, data={"dataset": study.dataset, "split": "train", "images": len(data.train)},
                metrics={"FID": result["fid"], "mean per-class FID": _mean(result["fid_per_class"])})
    return model, result


def _scores(evaluator: FidEvaluator, net, images: torch.Tensor, labels: torch.Tensor, data: ImageData) -> dict:
    generated = ImageSet(images, labels, data.test.classes, "generated")
    per_class = fid_per_class(net, generated, data.test)
    return {"fid": evaluator(images), "fid_per_class": per_class}


def _mean(per_class: dict[str, float | None]) -> float:
    """Mean per-class FID over the classes that have one (NaN, or null once written to JSON: < 2 images)."""
    return float(np.nanmean([math.nan if v is None else v for v in per_class.values()]))


def _rows(result: dict) -> list[dict]:
    """The table rows of one method: itself, and its rejection sampling if any."""
    variants = [result] + ([{**result, **result["rejection"], "label": f"{result['label']} + rejection"}]
                           if "rejection" in result else [])
    out = []
    for r in variants:
        g = r.get("info", {}).get("guarantee", {})
        out.append({"method": r["label"], "epsilon": g.get("epsilon"), "unit": g.get("unit"), "fid": r["fid"],
                    "fid_per_class_mean": _mean(r["fid_per_class"]), "acceptance_rate": r.get("acceptance_rate"),
                    "train_seconds": r.get("seconds"), "images_per_second": r.get("images_per_second")})
    return out


def _reference_text(reference: dict, blurred: dict, study: DiffusionStudy, seconds: float) -> str:
    return (f"Reference FID: {reference['fid']:.1f} for {study.samples} real images of the PUBLIC split (the "
            f"samples' class counts; no private training image is scored or shown), {blurred['fid']:.1f} for their "
            f"blurred versions (features of a classifier trained on the public split in {seconds:.0f} s: NOT "
            "Inception-FID; the classifier has seen these public images).")


def _over_seeds(table: pd.DataFrame) -> pd.DataFrame:
    """Mean (and sd, ``<column>_sd``) over the seeds of each method's FIDs and acceptance rate."""
    num = ["fid", "fid_per_class_mean", "acceptance_rate"]
    table = table.assign(acceptance_rate=pd.to_numeric(table["acceptance_rate"], errors="coerce"))
    agg = {"epsilon": ("epsilon", "first"), "unit": ("unit", "first"),
           **{c: (c, "mean") for c in num}, **{f"{c}_sd": (c, "std") for c in num}}
    return table.groupby("method", sort=False).agg(**agg).reset_index()


def _pm(r, column: str, fmt: str = ".1f") -> str:
    """A cell: the value, with '± sd' where the table is over seeds."""
    sd = r.get(f"{column}_sd")
    return format(r[column], fmt) + ("" if sd is None or pd.isna(sd) else f" ± {format(sd, fmt)}")


def _markdown(table: pd.DataFrame, reference: dict, blurred: dict, study: DiffusionStudy, seconds: float,
              diffs: pd.DataFrame | None = None) -> str:
    """table.md: one row per method (mean ± sd over seeds when there are several), the references (seed 0's)
    and, with ``diffs``, the paired differences of the claims."""
    lines = [f"# Diffusion study: {study.dataset} {seeds_label(study.seeds)}", "",
             "| method | epsilon | protected | FID | mean per-class FID | acceptance |", "|---|---|---|---|---|---|"]
    if "seed" in table:
        table = _over_seeds(table)
    for _, r in table.iterrows():
        eps = "" if r["epsilon"] is None or (isinstance(r["epsilon"], float) and math.isnan(r["epsilon"])) \
            else f"{r['epsilon']:.3g}"
        unit = {"example": "image + label", "features": "detail beyond blur"}.get(
            r["unit"], "detail beyond blur (never read: epsilon 0)" if r["method"] == "public" else "nothing")
        acc = "" if r["acceptance_rate"] is None or pd.isna(r["acceptance_rate"]) else _pm(r, "acceptance_rate", ".2f")
        lines.append(f"| {r['method']} | {eps} | {unit} | {_pm(r, 'fid')} | {_pm(r, 'fid_per_class_mean')} | {acc} |")
    text = "\n".join(lines) + "\n\n" + _reference_text(reference, blurred, study, seconds) + "\n"
    if diffs is not None:
        text += "\n".join(paired_markdown(diffs, study.seeds))
    return text


def manifest(results: list[dict], reference: dict, blurred: dict, study: DiffusionStudy, seconds: float) -> Manifest:
    """run.json of the study: every model (and its rejection sampling) with its guarantee and ledger, FID,
    timing; the public-split references as metric rows and a note."""
    m = Manifest(headline=["FID"], figures=[["samples of every method (and of real public-split images)",
                                             "samples.png"]],
                 files={"table": "table.md", "table_csv": "table.csv", "config": "config.json", "models": "runs/"})
    for r in results:
        info = r.get("info", {})
        none = PUBLIC_NOTE if r["kind"] == "public" else "NO differential privacy guarantee (non-private)."
        for row in _rows(r):
            m.add_model(row["method"], info.get("guarantee"), info.get("ledger"),
                        note="" if info.get("guarantee") else none)
            m.metrics.append({"model": row["method"], "FID": row["fid"], "mean per-class FID": row["fid_per_class_mean"],
                              "acceptance rate": row["acceptance_rate"]})
        m.timing.append({"model": r["label"], "train seconds": r.get("seconds"),
                         "images per second": r.get("images_per_second")})
    m.metrics += [{"model": f"{ref['label']} (reference)", "FID": ref["fid"]} for ref in (reference, blurred)]
    m.not_protected = [("The public split (its images train the FID feature classifier, set the rejection threshold "
                        "and are the real-image reference) is public data, outside every guarantee."),
                       "FID is measured on features of a classifier trained on the public split, not Inception."]
    m.notes = [_reference_text(reference, blurred, study, seconds),
               "Every method is a recipe run folder under runs/ (`dpcare images sample runs/<method> --n 100`)."]
    return m


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


__all__ = ["DiffusionStudy", "ImageData", "matching_images", "prepare_images", "run_diffusion_study"]
