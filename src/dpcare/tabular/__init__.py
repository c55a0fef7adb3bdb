"""Tables: a DP classifier on a table with a privacy spec (every method: DP-SGD, Feature-DP, Label-DP, the
FusionDP family), saved as a run folder and applied to new rows; its membership audits.

Names load on first use, so ``dpcare.tabular.settings`` (what the command line needs) imports no torch.
"""

from __future__ import annotations

import importlib

_LAZY = {"METHODS": "recipe", "TableMethod": "recipe", "TabularModel": "recipe", "fit": "recipe", "plan": "recipe",
         "train_rows": "recipe", "TabularSettings": "settings", "METHOD_NAMES": "settings"}


def __getattr__(name: str):
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{_LAZY[name]}"), name)
    globals()[name] = value
    return value


__all__ = sorted(_LAZY)
