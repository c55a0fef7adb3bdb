"""Atomic output: write to a temporary file in the same folder, then rename."""

from __future__ import annotations

import json
import math
import os
import tempfile
from collections.abc import Callable, Iterable
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


def check_writable_file(path: str | os.PathLike, what: str) -> Path:
    """Refuse, before any work, an output file that cannot be written: ``path`` is a folder, or its folder cannot
    be made or written (read-only, no permission, a file in the way). ``what`` names it for the user
    ("--out", "budget file"). Probes by creating (and removing) a temporary file beside it, as the atomic
    write will."""
    from dpcare.exceptions import SettingsError

    path = Path(path)
    if path.is_dir():
        raise SettingsError(f"{what} {path} is a folder: give the file to write")
    blocker = next((p for p in path.parents if p.exists() and not p.is_dir()), None)
    if blocker is not None:
        raise SettingsError(f"cannot write {what} {path}: {blocker} is a file, not a folder")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".probe")
        os.close(fd)
        os.unlink(probe)
    except OSError as e:
        raise SettingsError(f"cannot write {what} {path}: {e.strerror or e} ({e.filename or path.parent})") from None
    return path


def strict_json(obj: Any) -> Any:
    """``obj`` with every NaN or infinite float replaced by None: JSON has no NaN or Infinity (Python's json
    module writes them, and other readers reject the file)."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: strict_json(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [strict_json(v) for v in obj]
    if hasattr(obj, "item") and hasattr(obj, "dtype") and getattr(obj, "ndim", 1) == 0:  # numpy scalars
        return strict_json(obj.item())
    return obj


def write_json(path: str | os.PathLike, obj: Any) -> Path:
    """Strict JSON (NaN and infinity written as null), atomically."""
    return atomic_write(path, lambda f: json.dump(strict_json(obj), f, indent=2, default=str, allow_nan=False))


def write_text(path: str | os.PathLike, text: str) -> Path:
    return atomic_write(path, lambda f: f.write(text))


def write_json_lines(path: str | os.PathLike, rows: Iterable[Any]) -> Path:
    """One JSON object per line (UTF-8 kept as is), written atomically."""
    return write_text(path, "".join(json.dumps(strict_json(r), ensure_ascii=False, default=str, allow_nan=False) + "\n"
                                    for r in rows))


def torch_save(path: str | os.PathLike, obj: Any) -> Path:
    import torch

    return atomic_write(path, lambda f: torch.save(obj, f), mode="wb")


def new_figure(figsize: tuple[float, float], ncols: int = 1, nrows: int = 1):
    """A matplotlib figure and axes (``nrows`` x ``ncols``) on the non-interactive backend."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt.subplots(nrows, ncols, figsize=figsize)


def epsilon_curves(ax, table, by: str, metric: str) -> None:
    """One line of ``metric`` (error bars from ``{metric}_sd``) against ``target_epsilon`` per value of
    column ``by``; a group whose only epsilon is infinite (non-private) is a dashed horizontal line."""
    import numpy as np
    import pandas as pd
    from matplotlib.ticker import NullFormatter

    for i, name in enumerate(table[by].unique()):
        sub = table[table[by] == name].sort_values("target_epsilon")
        finite = sub[np.isfinite(sub["target_epsilon"])]
        color = f"C{i % 10}"
        if len(finite):
            ax.errorbar(finite["target_epsilon"], finite[metric], yerr=finite[f"{metric}_sd"].fillna(0),
                        marker="o", capsize=3, label=name, color=color)
        elif not pd.isna(sub[metric].iloc[0]):
            ax.axhline(float(sub[metric].iloc[0]), linestyle="--", linewidth=1, label=name, color=color)
    ax.set_xscale("log")
    swept = sorted({float(e) for e in table["target_epsilon"] if np.isfinite(e)})
    if swept:  # ticks at the swept epsilons only: the log axis' own minor labels (2x10^0, ...) overlap
        ax.xaxis.set_minor_formatter(NullFormatter())
        ax.set_xticks(swept, [f"{e:g}" for e in swept])


def save_figure(fig, path: str | os.PathLike, dpi: int = 120) -> Path:
    """Save a matplotlib figure atomically as PNG and close it."""
    import matplotlib.pyplot as plt

    try:
        fig.tight_layout()
        return atomic_write(path, lambda f: fig.savefig(f, dpi=dpi, format="png"), mode="wb")
    finally:
        plt.close(fig)
