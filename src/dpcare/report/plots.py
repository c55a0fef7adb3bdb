"""PNG plots for the report, as bytes (drawn with the project's figure helpers) and as data URIs."""

from __future__ import annotations

import base64
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from dpcare.io import new_figure, save_figure


def data_uri(png: bytes) -> str:
    return "data:image/png;base64," + base64.b64encode(png).decode("ascii")


def _rendered(draw: Callable[[Path], object]) -> bytes:
    """The PNG that ``draw(path)`` writes, read back from a temporary folder."""
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "plot.png"
        draw(path)
        return path.read_bytes()


def roc_png(curves: dict[str, tuple[Sequence[float], Sequence[float]]], title: str = "") -> bytes:
    """Log-log ROC curves of {model: (member scores, non-member scores)} (``dpcare.audit.plot_roc``)."""
    from dpcare.audit import plot_roc

    arrays = {k: (np.asarray(m, float), np.asarray(n, float)) for k, (m, n) in curves.items()}
    return _rendered(lambda p: plot_roc(arrays, p, title=title))


def bar_png(labels: Sequence[str], values: Sequence[float], xlabel: str, title: str = "") -> bytes:
    """Horizontal bars, one per label, top to bottom in the given order."""
    fig, ax = new_figure((7, 0.9 + 0.32 * len(labels)))
    y = np.arange(len(labels))[::-1]
    ax.barh(y, values, color="#4C72B0")
    ax.set_yticks(y, labels, fontsize=8)
    for yi, v in zip(y, values):
        ax.text(v, yi, f" {v:.4g} " if v < 0 else f" {v:.4g}", va="center", ha="right" if v < 0 else "left",
                fontsize=7)
    lo, hi = min(0.0, *values), max(0.0, *values)
    pad = 0.22 * ((hi - lo) or 1.0)  # room for the value labels inside the axes (they were cut at the edge)
    ax.set_xlim(lo - (pad if lo < 0 else 0.0), hi + (pad if hi > 0 else 0.02 * pad))
    ax.set_xlabel(xlabel)
    ax.set_title(title, fontsize=9)
    return _rendered(lambda p: save_figure(fig, p))
