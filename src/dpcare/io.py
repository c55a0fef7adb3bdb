"""Atomic output: write to a temporary file in the same folder, then rename."""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any


def atomic_write(path: str | os.PathLike, write: Callable[[IO], None], mode: str = "w") -> Path:
    """Call ``write(file)`` on a temporary file and move it over ``path`` only if it succeeded."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, mode) as f:
            write(f)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return path


def write_json(path: str | os.PathLike, obj: Any) -> Path:
    return atomic_write(path, lambda f: json.dump(obj, f, indent=2, default=str))


def write_text(path: str | os.PathLike, text: str) -> Path:
    return atomic_write(path, lambda f: f.write(text))


def torch_save(path: str | os.PathLike, obj: Any) -> Path:
    import torch

    return atomic_write(path, lambda f: torch.save(obj, f), mode="wb")


def new_figure(figsize: tuple[float, float], ncols: int = 1, nrows: int = 1):
    """A matplotlib figure and axes (``nrows`` x ``ncols``) on the non-interactive backend."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt.subplots(nrows, ncols, figsize=figsize)


def save_figure(fig, path: str | os.PathLike, dpi: int = 120) -> Path:
    """Save a matplotlib figure atomically as PNG and close it."""
    import matplotlib.pyplot as plt

    try:
        fig.tight_layout()
        return atomic_write(path, lambda f: fig.savefig(f, dpi=dpi, format="png"), mode="wb")
    finally:
        plt.close(fig)
