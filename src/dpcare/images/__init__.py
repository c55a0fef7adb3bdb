"""Images: data sets in [-1, 1], the public blur Psi, classifier-feature FID and PNG grids."""

from dpcare.images.blur import GaussianBlur
from dpcare.images.data import (
    DEFAULT_FRACTIONS,
    ImageSet,
    load_digits,
    load_image_folder,
    load_mnist,
    split_images,
)
from dpcare.images.fid import (
    FeatureNet,
    FidEvaluator,
    accuracy,
    compute_features,
    fid,
    fid_per_class,
    frechet_distance,
    gaussian_stats,
    train_feature_net,
)
from dpcare.images.grid import grid_size, save_grid

__all__ = [
    "DEFAULT_FRACTIONS",
    "FeatureNet",
    "FidEvaluator",
    "GaussianBlur",
    "ImageSet",
    "accuracy",
    "compute_features",
    "fid",
    "fid_per_class",
    "frechet_distance",
    "gaussian_stats",
    "grid_size",
    "load_digits",
    "load_image_folder",
    "load_mnist",
    "save_grid",
    "split_images",
    "train_feature_net",
]
