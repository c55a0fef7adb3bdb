"""Frechet distance on the features of a small classifier trained on the public split.

This is NOT Inception-FID: the feature extractor is a small CNN trained only on a public split
that is disjoint from the private training and test images, so values are comparable only
between runs that share the same feature net (same data, split and seed), never with
published Inception-FID numbers.
"""

from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn.functional as F
from scipy import linalg
from torch import nn

from dpcare.engine.initialisation import seeded_cpu_generator
from dpcare.exceptions import DataError
from dpcare.images.data import ImageSet


def _group_norm(channels: int) -> nn.GroupNorm:
    return nn.GroupNorm(min(8, channels), channels)


class FeatureNet(nn.Module):
    """Three 3x3 conv layers (GroupNorm, SiLU; two with stride 2), a linear map of the
    flattened maps to a ``feature_dim`` embedding (the FID features) and a linear class head."""

    def __init__(self, in_channels: int, n_classes: int, size: int | tuple[int, int],
                 width: int = 32, feature_dim: int = 64) -> None:
        super().__init__()
        self.in_channels, self.n_classes = int(in_channels), int(n_classes)
        self.size = (size, size) if isinstance(size, int) else (int(size[0]), int(size[1]))
        h, w = ((s + 1) // 2 for s in self.size)
        h, w = (h + 1) // 2, (w + 1) // 2
        self.body = nn.Sequential(
            nn.Conv2d(in_channels, width, 3, padding=1), _group_norm(width), nn.SiLU(),
            nn.Conv2d(width, 2 * width, 3, stride=2, padding=1), _group_norm(2 * width), nn.SiLU(),
            nn.Conv2d(2 * width, 2 * width, 3, stride=2, padding=1), _group_norm(2 * width),
            nn.SiLU(), nn.Flatten(), nn.Linear(2 * width * h * w, feature_dim), nn.SiLU(),
        )
        self.head = nn.Linear(feature_dim, n_classes)

    def _check(self, x: torch.Tensor) -> None:
        if x.ndim != 4 or x.shape[1] != self.in_channels or tuple(x.shape[2:]) != self.size:
            raise DataError(f"FeatureNet expects [N, {self.in_channels}, {self.size[0]}, "
                            f"{self.size[1]}] images, got shape {tuple(x.shape)}")

    def features(self, x: torch.Tensor) -> torch.Tensor:
        """Embedding ``[N, feature_dim]`` of images ``[N, C, H, W]`` in [-1, 1]."""
        self._check(x)
        return self.body(x)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(x))


def _device(net: nn.Module) -> torch.device:
    return next(net.parameters()).device


def _images(images: ImageSet | torch.Tensor) -> torch.Tensor:
    return images.images if isinstance(images, ImageSet) else images


@torch.no_grad()
def compute_features(net: FeatureNet, images: ImageSet | torch.Tensor,
                     batch_size: int = 500) -> np.ndarray:
    """``net.features`` of all images (eval mode, in batches) as float64 [N, F]."""
    x, was_training = _images(images), net.training
    net.eval()
    try:
        dev = _device(net)
        out = [net.features(x[i:i + batch_size].to(dev, torch.float32)).double().cpu()
               for i in range(0, len(x), batch_size)]
    finally:
        net.train(was_training)
    return torch.cat(out).numpy() if out else np.zeros((0, net.head.in_features))


@torch.no_grad()
def accuracy(net: FeatureNet, data: ImageSet, batch_size: int = 500) -> float:
    """Share of ``data`` the classifier labels correctly."""
    was_training = net.training
    net.eval()
    try:
        dev, correct = _device(net), 0
        for i in range(0, len(data), batch_size):
            logits = net(data.images[i:i + batch_size].to(dev, torch.float32))
            correct += int((logits.argmax(1).cpu() == data.labels[i:i + batch_size].cpu()).sum())
    finally:
        net.train(was_training)
    return correct / max(len(data), 1)


def train_feature_net(public: ImageSet, epochs: int = 20, seed: int = 0, batch_size: int = 64,
                      lr: float = 2e-3, shift: int | None = None, feature_dim: int = 64,
                      device: str | torch.device = "cpu") -> FeatureNet:
    """Train the FID feature classifier on the PUBLIC split only (Adam, cosine decay).

    ``shift`` > 0 augments with random translations of up to ``shift`` pixels, padded with -1
    (the background); default min(H, W) // 14 (2 pixels for 28x28, none for 8x8).
    Deterministic given ``seed``; the global RNG is left untouched. Returns the net in eval mode.
    """
    if len(public) < 2:
        raise DataError("the public split needs at least 2 images to train the feature net")
    c, h, w = public.image_shape
    shift = min(h, w) // 14 if shift is None else int(shift)
    with seeded_cpu_generator(seed):
        net = FeatureNet(c, len(public.classes), (h, w), feature_dim=feature_dim).to(device)
    gen = torch.Generator().manual_seed(seed)
    x, y = public.images.to(device, torch.float32), public.labels.to(device)
    opt = torch.optim.Adam(net.parameters(), lr=lr)
    steps = epochs * math.ceil(len(public) / batch_size)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=max(steps, 1))
    net.train()
    for _ in range(epochs):
        order = torch.randperm(len(public), generator=gen).to(device)
        for i in range(0, len(public), batch_size):
            idx = order[i:i + batch_size]
            xb = x[idx]
            if shift > 0:
                dy, dx = torch.randint(-shift, shift + 1, (2,), generator=gen).tolist()
                xb = F.pad(xb, (shift, shift, shift, shift), value=-1.0)
                xb = xb[:, :, shift + dy:shift + dy + h, shift + dx:shift + dx + w]
            loss = F.cross_entropy(net(xb), y[idx])
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            sched.step()
    return net.eval()


def gaussian_stats(features: np.ndarray | torch.Tensor) -> tuple[np.ndarray, np.ndarray]:
    """Mean [F] and covariance [F, F] (float64) of features [N, F], N >= 2."""
    f = np.asarray(features.detach().cpu() if isinstance(features, torch.Tensor) else features,
                   dtype=np.float64)
    if f.ndim != 2 or f.shape[0] < 2:
        raise DataError(f"features must be [N, F] with N >= 2, got shape {f.shape}")
    if not np.isfinite(f).all():
        raise DataError("features contain NaN or infinite values")
    return f.mean(axis=0), np.atleast_2d(np.cov(f, rowvar=False))


def frechet_distance(mu1: np.ndarray, cov1: np.ndarray, mu2: np.ndarray, cov2: np.ndarray,
                     eps: float = 1e-6) -> float:
    """|mu1 - mu2|^2 + tr(cov1 + cov2 - 2 (cov1 cov2)^{1/2}), with ``eps`` added on both
    diagonals (and raised tenfold while the square root is not finite)."""
    if mu1.shape != mu2.shape or cov1.shape != cov2.shape:
        raise DataError(f"feature dimensions differ: {mu1.shape} vs {mu2.shape}")
    eye = np.eye(cov1.shape[0])
    for _ in range(6):
        a, b = cov1 + eps * eye, cov2 + eps * eye
        root = linalg.sqrtm(a @ b)
        if np.isfinite(root).all():
            break
        eps *= 10.0
    else:
        raise FloatingPointError("matrix square root of the covariance product is not finite")
    diff = mu1 - mu2
    value = float(diff @ diff + np.trace(a) + np.trace(b) - 2.0 * np.trace(np.real(root)))
    return max(value, 0.0)


def fid(features_a: np.ndarray | torch.Tensor, features_b: np.ndarray | torch.Tensor,
        eps: float = 1e-6) -> float:
    """Frechet distance of the Gaussians fitted to two feature sets [N_a, F] and [N_b, F]."""
    return frechet_distance(*gaussian_stats(features_a), *gaussian_stats(features_b), eps=eps)


class FidEvaluator:
    """FID against a fixed reference set whose feature statistics are computed once."""

    def __init__(self, net: FeatureNet, reference: ImageSet | torch.Tensor,
                 batch_size: int = 500) -> None:
        self.net, self.batch_size = net, batch_size
        self.mu, self.cov = gaussian_stats(compute_features(net, reference, batch_size))
        self.n_reference = len(_images(reference))

    def __call__(self, images: ImageSet | torch.Tensor) -> float:
        mu, cov = gaussian_stats(compute_features(self.net, images, self.batch_size))
        return frechet_distance(mu, cov, self.mu, self.cov)


def fid_per_class(net: FeatureNet, generated: ImageSet, reference: ImageSet) -> dict[str, float]:
    """FID per class (generated images of class k vs reference images of class k).

    Keys are ``reference.classes``; NaN where either side has fewer than 2 images.
    """
    if tuple(generated.classes) != tuple(reference.classes):
        raise DataError(f"class names differ: {generated.classes} vs {reference.classes}")
    feats_g = compute_features(net, generated)
    feats_r = compute_features(net, reference)
    lab_g, lab_r = generated.labels.cpu().numpy(), reference.labels.cpu().numpy()
    out = {}
    for k, name in enumerate(reference.classes):
        g, r = feats_g[lab_g == k], feats_r[lab_r == k]
        out[name] = fid(g, r) if len(g) >= 2 and len(r) >= 2 else float("nan")
    return out
