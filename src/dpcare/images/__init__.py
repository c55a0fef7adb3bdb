"""Images: data sets in [-1, 1] (bundled sets and a user's image folder), the public blur Psi, classifier-feature
FID, PNG grids, and the diffusion recipe (:mod:`dpcare.images.recipe`: ``fit`` -> :class:`DiffusionModel`).

Names load on first use, so ``from dpcare.images.settings import DiffusionSettings`` (the command line's
options) imports no torch. ``dpcare.images.fid`` is the FID module (the function is ``dpcare.images.fid.fid``).
"""

from __future__ import annotations

import importlib

_LAZY = {
    "GaussianBlur": "dpcare.images.blur",
    "DEFAULT_FRACTIONS": "dpcare.images.data",
    "ImageSet": "dpcare.images.data",
    "count_images": "dpcare.images.data",
    "load_digits": "dpcare.images.data",
    "load_image_folder": "dpcare.images.data",
    "load_mnist": "dpcare.images.data",
    "split_images": "dpcare.images.data",
    "FeatureNet": "dpcare.images.fid",
    "FidEvaluator": "dpcare.images.fid",
    "accuracy": "dpcare.images.fid",
    "compute_features": "dpcare.images.fid",
    "fid_per_class": "dpcare.images.fid",
    "frechet_distance": "dpcare.images.fid",
    "gaussian_stats": "dpcare.images.fid",
    "train_feature_net": "dpcare.images.fid",
    "grid_size": "dpcare.images.grid",
    "save_grid": "dpcare.images.grid",
    "DiffusionSettings": "dpcare.images.settings",
    "DiffusionModel": "dpcare.images.recipe",
    "fit": "dpcare.images.recipe",
    "plan": "dpcare.images.recipe",
}


def __getattr__(name: str):
    if name not in _LAZY:
        raise AttributeError(f"module 'dpcare.images' has no attribute {name!r}")
    value = getattr(importlib.import_module(_LAZY[name]), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})


__all__ = [
    "DEFAULT_FRACTIONS",
    "DiffusionModel",
    "DiffusionSettings",
    "FeatureNet",
    "FidEvaluator",
    "GaussianBlur",
    "ImageSet",
    "accuracy",
    "compute_features",
    "count_images",
    "fid_per_class",
    "fit",
    "frechet_distance",
    "gaussian_stats",
    "grid_size",
    "load_digits",
    "load_image_folder",
    "load_mnist",
    "plan",
    "save_grid",
    "split_images",
    "train_feature_net",
]
