"""Write a grid of images in [-1, 1] as one PNG (written atomically)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch

from dpcare.exceptions import DataError, SettingsError
from dpcare.io import atomic_write

LABEL_HEIGHT = 12  # pixels of the caption strip above each tile when labels are given


def grid_size(n: int, image_hw: tuple[int, int], nrow: int = 10, padding: int = 2, scale: int = 1,
              labels: bool = False) -> tuple[int, int]:
    """(width, height) in pixels of the PNG that ``save_grid`` writes for n images."""
    cols = max(1, min(nrow, n))
    rows = max(1, math.ceil(n / cols))
    tile_h = image_hw[0] * scale + (LABEL_HEIGHT if labels else 0)
    return cols * image_hw[1] * scale + (cols + 1) * padding, rows * tile_h + (rows + 1) * padding


def save_grid(images: torch.Tensor, path: str | Path, nrow: int = 10,
              labels: Sequence[object] | None = None, padding: int = 2, scale: int = 1) -> Path:
    """Save ``images [N, C, H, W]`` (C = 1 or 3, values in [-1, 1]) as a PNG grid.

    ``nrow`` images per row (torchvision's convention), white ``padding`` between tiles,
    each image enlarged ``scale`` times (nearest neighbour). ``labels`` (one per image) are
    written in a caption strip above each tile. Pixel size: ``grid_size``.
    """
    from PIL import Image, ImageDraw, ImageFont

    if images.ndim != 4 or images.shape[1] not in (1, 3) or images.shape[0] == 0:
        raise DataError(f"images must be [N, 1 or 3, H, W] with N >= 1, got {tuple(images.shape)}")
    if nrow < 1 or padding < 0 or scale < 1:
        raise SettingsError(f"need nrow >= 1, padding >= 0, scale >= 1; "
                            f"got {nrow}, {padding}, {scale}")
    n, c, h, w = images.shape
    if labels is not None and len(labels) != n:
        raise DataError(f"{len(labels)} labels for {n} images")
    x = images.detach().float().cpu().clamp(-1, 1).add(1).mul(127.5).round().to(torch.uint8)
    tiles = x.permute(0, 2, 3, 1).numpy()
    if scale > 1:
        tiles = tiles.repeat(scale, axis=1).repeat(scale, axis=2)
    width, height = grid_size(n, (h, w), nrow, padding, scale, labels is not None)
    canvas = np.full((height, width, c), 255, dtype=np.uint8)
    cols, caption = max(1, min(nrow, n)), LABEL_HEIGHT if labels is not None else 0
    th, tw = h * scale, w * scale
    for i in range(n):
        r, k = divmod(i, cols)
        top = padding + r * (th + caption + padding) + caption
        left = padding + k * (tw + padding)
        canvas[top:top + th, left:left + tw] = tiles[i]
    image = Image.fromarray(canvas[:, :, 0] if c == 1 else canvas, mode="L" if c == 1 else "RGB")
    if labels is not None:
        draw, font = ImageDraw.Draw(image), ImageFont.load_default()
        for i, label in enumerate(labels):
            r, k = divmod(i, cols)
            xy = (padding + k * (tw + padding), padding + r * (th + caption + padding) - 2)
            draw.text(xy, str(label), fill=0, font=font)
    return atomic_write(path, lambda f: image.save(f, format="PNG"), mode="wb")
