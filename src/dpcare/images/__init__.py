"""Images: data sets in [-1, 1] (bundled sets and a user's image folder), the public blur Psi, classifier-feature
FID, PNG grids, and the diffusion recipe (:mod:`dpcare.images.recipe`: ``fit`` -> :class:`DiffusionModel`).

Names load on first use, so ``from dpcare.images.settings import DiffusionSettings`` (the command line's
options) imports no torch. ``dpcare.images.fid`` is the FID module (the function is ``dpcare.images.fid.fid``).
"""

from dpcare.lazy import lazy_face

__getattr__, __dir__, __all__ = lazy_face(__name__, {
    **dict.fromkeys(("GaussianBlur",), "blur"),
    **dict.fromkeys(("DEFAULT_FRACTIONS", "ImageSet", "count_images", "load_digits", "load_image_folder",
                     "load_mnist", "split_images"), "data"),
    **dict.fromkeys(("FeatureNet", "FidEvaluator", "accuracy", "compute_features", "fid_per_class",
                     "frechet_distance", "gaussian_stats", "train_feature_net"), "fid"),
    **dict.fromkeys(("grid_size", "save_grid"), "grid"),
    **dict.fromkeys(("DiffusionSettings",), "settings"),
    **dict.fromkeys(("DiffusionModel", "fit", "plan"), "recipe"),
})
