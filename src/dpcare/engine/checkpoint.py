"""Atomic checkpoints: written to a temporary file, then renamed over the old one."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

import torch


def atomic_save(obj: Any, path: str | os.PathLike) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
    os.close(fd)
    try:
        torch.save(obj, tmp)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def load(path: str | os.PathLike) -> dict[str, Any]:
    return torch.load(path, map_location="cpu", weights_only=False)
