"""Where the engine computes: a device (``auto``: CUDA when present, else CPU) and a precision.

``bf16`` runs forward and backward passes under bfloat16 autocast (parameters stay fp32); the
per-unit gradient norms, the clipping and the noisy sum are computed in fp32 (both clipping backends
cast to fp32 before the norms), so the sensitivity bound C holds exactly whatever the precision. A
device that is asked for and absent is an error: nothing silently falls back to the CPU.
"""

from __future__ import annotations

import contextlib

import torch

from dpcare.exceptions import SettingsError
from dpcare.settings import PRECISIONS, check_device_name


def resolve_device(name: str) -> torch.device:
    """The torch device for ``name``; ``auto`` picks CUDA when it is available. An absent device is refused."""
    check_device_name(name)
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    device = torch.device(name)
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise SettingsError(f"device {name!r} was asked for but this machine has no CUDA device (or torch was "
                                "built without CUDA): use --device cpu, or --device auto to take a GPU when present")
        if device.index is not None and device.index >= torch.cuda.device_count():
            raise SettingsError(f"device {name!r} does not exist: this machine has {torch.cuda.device_count()} "
                                "CUDA device(s), numbered from 0")
    if device.type == "mps" and not torch.backends.mps.is_available():
        raise SettingsError(f"device {name!r} was asked for but Apple's MPS backend is not available here")
    return device


def check_precision(precision: str, device: torch.device) -> None:
    if precision not in PRECISIONS:
        raise SettingsError(f"precision must be one of {list(PRECISIONS)}, got precision = {precision!r}")
    if precision == "bf16" and device.type == "cuda" and not torch.cuda.is_bf16_supported():
        raise SettingsError(f"precision bf16 was asked for but {device} does not support bfloat16: use fp32")


def autocast(device: torch.device, precision: str) -> contextlib.AbstractContextManager:
    """bfloat16 autocast on ``device`` for ``bf16``; nothing for ``fp32``."""
    if precision == "bf16":
        return torch.autocast(device.type, dtype=torch.bfloat16)
    return contextlib.nullcontext()


def full_precision(device: torch.device) -> contextlib.AbstractContextManager:
    """Autocast switched off (inside a bf16 region): the norms, clip factors and sums run in fp32."""
    return torch.autocast(device.type, enabled=False)


def to_float32(t: torch.Tensor) -> torch.Tensor:
    """A reduced-precision floating tensor as fp32 (integer tensors such as token ids unchanged)."""
    return t.float() if t.is_floating_point() and t.dtype != torch.float32 and t.dtype != torch.float64 else t


__all__ = ["PRECISIONS", "autocast", "check_device_name", "check_precision", "full_precision", "resolve_device",
           "to_float32"]
