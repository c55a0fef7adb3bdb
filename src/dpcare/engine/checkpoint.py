"""Checkpoint files (written atomically, see :mod:`dpcare.io`)."""

from __future__ import annotations

import os
from typing import Any

import torch

from dpcare.io import torch_save


def atomic_save(obj: Any, path: str | os.PathLike) -> None:
    torch_save(path, obj)


def load(path: str | os.PathLike) -> dict[str, Any]:
    return torch.load(path, map_location="cpu", weights_only=False)
