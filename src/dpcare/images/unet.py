"""A small class-conditional U-Net for noise prediction (DDPM), built for per-example DP.

Every trainable parameter lives in ``nn.Conv2d``, ``nn.Linear``, ``nn.GroupNorm`` or ``nn.Embedding``
(all have fast clipping rules in the engine), and no layer mixes the examples of a batch: GroupNorm
replaces the BatchNorm of many diffusion U-Nets. Channel widths (32, 64) give ~0.9M parameters at
28 x 28, a CPU-scale stand-in for the paper's 32.8M-parameter U-Net.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from dpcare.exceptions import SettingsError


def timestep_embedding(t: Tensor, dim: int) -> Tensor:
    """Sinusoidal embedding of integer diffusion times t [B] -> [B, dim]."""
    half = dim // 2
    freq = torch.exp(-math.log(10000.0) * torch.arange(half, dtype=torch.float32, device=t.device) / half)
    angles = t.float()[:, None] * freq[None]
    return torch.cat([angles.sin(), angles.cos()], dim=1)


class ResBlock(nn.Module):
    """GroupNorm -> SiLU -> conv, plus the (time, class) embedding, twice; 1x1 conv skip if widths differ."""

    def __init__(self, c_in: int, c_out: int, emb_dim: int, groups: int = 8):
        super().__init__()
        self.norm1, self.conv1 = nn.GroupNorm(min(groups, c_in), c_in), nn.Conv2d(c_in, c_out, 3, padding=1)
        self.emb = nn.Linear(emb_dim, c_out)
        self.norm2, self.conv2 = nn.GroupNorm(min(groups, c_out), c_out), nn.Conv2d(c_out, c_out, 3, padding=1)
        self.skip = nn.Conv2d(c_in, c_out, 1) if c_in != c_out else None

    def forward(self, x: Tensor, emb: Tensor) -> Tensor:
        h = self.conv1(F.silu(self.norm1(x))) + self.emb(emb)[:, :, None, None]
        h = self.conv2(F.silu(self.norm2(h)))
        return h + (self.skip(x) if self.skip is not None else x)


class UNet(nn.Module):
    """eps_theta(x_t, t, y): two resolutions down (stride-2 convs), a middle block, two up (nearest
    upsampling + conv) with skip connections. ``n_classes`` > 0 adds a class embedding (label
    ``n_classes`` = unconditional, for classifier-free guidance-style sampling without a label)."""

    def __init__(self, channels: int = 1, size: int = 28, widths: tuple[int, ...] = (32, 64), n_classes: int = 10,
                 emb_dim: int = 128):
        super().__init__()
        if size % (2 ** (len(widths) - 1)):
            raise SettingsError(f"image size {size} must be divisible by {2 ** (len(widths) - 1)} for {len(widths)} levels")
        self.channels, self.size, self.n_classes, self.emb_dim = channels, size, n_classes, emb_dim
        self.time_mlp = nn.Sequential(nn.Linear(emb_dim, emb_dim), nn.SiLU(), nn.Linear(emb_dim, emb_dim))
        self.class_emb = nn.Embedding(n_classes + 1, emb_dim) if n_classes else None
        self.stem = nn.Conv2d(channels, widths[0], 3, padding=1)
        self.down = nn.ModuleList()
        self.downsample = nn.ModuleList()
        for i, w in enumerate(widths):
            self.down.append(ResBlock(widths[i - 1] if i else widths[0], w, emb_dim))
            self.downsample.append(nn.Conv2d(w, w, 3, stride=2, padding=1) if i < len(widths) - 1 else nn.Identity())
        self.mid = ResBlock(widths[-1], widths[-1], emb_dim)
        self.up = nn.ModuleList()
        self.upconv = nn.ModuleList()
        for i in reversed(range(len(widths))):
            out = widths[i - 1] if i else widths[0]
            self.up.append(ResBlock(widths[i] * 2, out, emb_dim))
            self.upconv.append(nn.Conv2d(out, out, 3, padding=1) if i else nn.Identity())
        self.out_norm = nn.GroupNorm(min(8, widths[0]), widths[0])
        self.out = nn.Conv2d(widths[0], channels, 3, padding=1)

    def forward(self, x: Tensor, t: Tensor, y: Tensor | None = None) -> Tensor:
        emb = self.time_mlp(timestep_embedding(t, self.emb_dim).to(x.dtype))
        if self.class_emb is not None:
            labels = y if y is not None else torch.full((x.shape[0],), self.n_classes, dtype=torch.long)
            emb = emb + self.class_emb(labels)
        h = self.stem(x)
        skips = []
        for block, down in zip(self.down, self.downsample):
            h = block(h, emb)
            skips.append(h)
            h = down(h)
        h = self.mid(h, emb)
        for block, conv in zip(self.up, self.upconv):
            h = block(torch.cat([h, skips.pop()], dim=1), emb)
            if not isinstance(conv, nn.Identity):
                h = conv(F.interpolate(h, scale_factor=2, mode="nearest"))
        return self.out(F.silu(self.out_norm(h)))
