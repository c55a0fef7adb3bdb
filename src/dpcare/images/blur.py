"""The public feature map Psi: a fixed Gaussian blur, applied to each image on its own."""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from dpcare.exceptions import DataError, SettingsError


@dataclass(frozen=True)
class GaussianBlur:
    """Separable Gaussian blur Psi(x) with a kernel built from (kernel_size, sigma) only.

    Data-independent: no statistic of any image or batch enters. Each image and channel is
    blurred on its own (reflect padding, then a weighted sum of shifted copies along H and
    then W), so Psi(batch)[i] is bit-identical to Psi(batch[i:i+1]).
    """

    kernel_size: int = 5
    sigma: float = 1.5

    def __post_init__(self) -> None:
        k = self.kernel_size
        if isinstance(k, bool) or not isinstance(k, numbers.Integral) or k < 1 or k % 2 == 0:
            raise SettingsError(f"kernel_size must be an odd positive integer, got {k!r}")
        s = self.sigma
        if isinstance(s, bool) or not isinstance(s, numbers.Real) or not math.isfinite(s) or s <= 0:
            raise SettingsError(f"sigma must be a finite number > 0, got {s!r}")

    @property
    def radius(self) -> int:
        return int(self.kernel_size) // 2

    def kernel(self) -> torch.Tensor:
        """The 1-D weights (float64, sum 1); the 2-D kernel is their outer product."""
        x = torch.arange(int(self.kernel_size), dtype=torch.float64) - self.radius
        w = torch.exp(-(x**2) / (2.0 * float(self.sigma) ** 2))
        return w / w.sum()

    def describe(self) -> str:
        return (f"Gaussian blur: separable {self.kernel_size}x{self.kernel_size} kernel, "
                f"sigma={float(self.sigma):g} px, reflect padding, each image and channel alone")

    def __call__(self, images: torch.Tensor) -> torch.Tensor:
        """Blur ``images [N, C, H, W]`` (floating point); returns the same shape and dtype."""
        if images.ndim != 4:
            raise DataError(f"images must be [N, C, H, W], got shape {tuple(images.shape)}")
        if not images.is_floating_point():
            raise TypeError(f"images must be floating point, got {images.dtype}")
        r = self.radius
        if r == 0:
            return images.clone()
        h, w = images.shape[-2:]
        if min(h, w) <= r:
            raise DataError(f"images of {h}x{w} pixels are too small for a {self.kernel_size}-"
                            f"pixel kernel (reflect padding needs more than {r} pixels per side)")
        weights = self.kernel().to(device=images.device, dtype=images.dtype).tolist()
        n, c = images.shape[:2]
        x = F.pad(images.reshape(n * c, 1, h, w), (r, r, r, r), mode="reflect")
        # fixed-order sums of shifted copies: elementwise, so no cross-image arithmetic at all
        rows = sum(wt * x[:, :, i:i + h, :] for i, wt in enumerate(weights))
        out = sum(wt * rows[:, :, :, j:j + w] for j, wt in enumerate(weights))
        return out.reshape(n, c, h, w)

    def sharpness(self, images: torch.Tensor) -> torch.Tensor:
        """Per image the mean squared residual ``x - Psi(x)`` (high-frequency energy) [N].

        Blurry images score low: a score to reject blurry samples by.
        """
        return (images - self(images)).pow(2).flatten(1).mean(dim=1)
