"""The settings of the diffusion recipe (:mod:`dpcare.images.recipe`), declared once (pure Python, no torch:
the command line derives its options from them without loading torch).

Defaults are the CPU-scale recipe of the diffusion study (Mahloujifar et al., Section 6.3): images at
14 x 14, a 0.27M-parameter U-Net (widths 32, 64), 1,000 diffusion steps, 50 DDIM sampling steps, a
Gaussian blur with kernel 3 and sigma 1 as the public view, weights averaged (EMA 0.99); the private
methods run 30 epochs at an expected batch of 256 with C = 0.1 (the paper's C).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from dpcare.exceptions import SettingsError
from dpcare.settings import ComputeSettings, DPSettings, Settings, require_unit, setting

#: the five methods (the same names as :class:`dpcare.images.diffusion.DiffusionObjective`)
METHODS = ("non-private", "public", "dp", "fdp-dpsgd", "fdp-alg1")
PRIVATE = ("dp", "fdp-dpsgd", "fdp-alg1")
FEATURE_DP = ("fdp-dpsgd", "fdp-alg1")


def _default_dp() -> DPSettings:
    return DPSettings(epsilon=1.0, batch_size=256, epochs=30.0, clip_norm=0.1)


@dataclass(frozen=True)
class DiffusionSettings(Settings):
    """Settings of :func:`dpcare.images.recipe.fit` (and of ``dpcare images fit``)."""

    method: str = setting("fdp-dpsgd", kind="choice", choices=METHODS,
                          help="what is protected: the detail beyond the blurred view (fdp-dpsgd, fdp-alg1: "
                               "they start from a model trained on the blurred images), the whole image and its "
                               "label (dp), nothing (non-private), or a model of the blurred images only (public)")
    image_size: int | None = setting(14, kind="integer", low=2, none=True, none_means="the images' own size",
                                     help="every image is resized to this many pixels square")
    color: str = setting("rgb", kind="choice", choices=("rgb", "gray"),
                         help="read images as RGB (3 channels) or grayscale (1 channel)")
    widths: str = setting("32,64", kind="text",
                          help="U-Net channel widths, one per resolution, comma-separated (the image size must "
                               "be divisible by 2^(levels - 1))")
    emb_dim: int = setting(64, kind="integer", low=2, help="width of the U-Net's time and class embedding")
    diffusion_steps: int = setting(1000, kind="integer", low=2, help="diffusion steps of the noise schedule")
    sample_steps: int = setting(50, kind="integer", low=1, help="DDIM sampling steps")
    plain_epochs: float = setting(80.0, low=0, open_low=True,
                                  help="epochs of training without DP: the non-private and public methods, and the "
                                       "public model an FDP run trains first without --init")
    plain_batch_size: int = setting(128, kind="integer", low=1,
                                    help="batch of training without DP, and of fdp-alg1's public branch")
    plain_lr: float = setting(2e-3, low=0, open_low=True, help="Adam learning rate of training without DP")
    lr: float = setting(2e-3, low=0, open_low=True, methods=PRIVATE, help="Adam learning rate of the private methods")
    alpha: float = setting(1.0, low=0, methods=("fdp-alg1",), help="fdp-alg1: weight of the private gradient (g = g_pub + alpha g_priv)")
    ema_decay: float | None = setting(0.99, low=0, high=1, open_high=True, none=True, none_means="no averaging",
                                      help="exponential moving average of the weights (post-processing: free)")
    blur_kernel: int = setting(3, kind="integer", low=1,
                               help="odd kernel size of the Gaussian blur whose output is the PUBLIC view")
    blur_sigma: float = setting(1.0, low=0, open_low=True, help="sigma (pixels) of the public Gaussian blur")
    reject_quantile: float = setting(0.9, low=0, high=1, open_low=True,
                                     help="rejection sampling keeps samples sharper than this quantile of blurred "
                                          "public images")
    reject_rounds: int = setting(5, kind="integer", low=1, help="rounds of rejection sampling (the last keeps all)")
    dp: DPSettings = field(default_factory=_default_dp)
    compute: ComputeSettings = field(default_factory=ComputeSettings)  # device, precision, processes

    def __post_init__(self) -> None:
        super().__post_init__()
        self.unet_widths  # noqa: B018 - parses and checks the widths
        if self.blur_kernel % 2 == 0:
            raise SettingsError(f"blur_kernel must be an odd integer >= 1, got blur_kernel = {self.blur_kernel}")
        require_unit(self.dp, "example", "the diffusion recipe's privacy unit is one image")

    @property
    def unet_widths(self) -> tuple[int, ...]:
        """``widths`` as integers."""
        try:
            out = tuple(int(w) for w in self.widths.split(","))
        except ValueError:
            out = ()
        if not out or any(w < 1 for w in out):
            raise SettingsError(f"widths must be positive integers separated by commas (e.g. 32,64), got widths = "
                                f"{self.widths!r}")
        return out

    @property
    def private(self) -> bool:
        return self.method in PRIVATE

    @property
    def feature_dp(self) -> bool:
        return self.method in FEATURE_DP




__all__ = ["FEATURE_DP", "METHODS", "PRIVATE", "DiffusionSettings"]
