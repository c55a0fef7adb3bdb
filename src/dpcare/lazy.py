"""Package faces whose names load on first use: importing a package (or its torch-free settings module, which
the command line needs) then imports no torch."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping


def lazy_face(package: str, homes: Mapping[str, str]) -> tuple[Callable[[str], object], Callable[[], list[str]],
                                                                list[str]]:
    """``(__getattr__, __dir__, __all__)`` for ``package``: each public name in ``homes`` (name -> submodule,
    relative to the package) is imported from its submodule when first used, then kept on the package."""

    def __getattr__(name: str) -> object:
        if name not in homes:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(f"{package}.{homes[name]}"), name)
        setattr(sys.modules[package], name, value)  # later look-ups skip __getattr__
        return value

    def __dir__() -> list[str]:
        return sorted({*vars(sys.modules[package]), *homes})

    return __getattr__, __dir__, sorted(homes)


__all__ = ["lazy_face"]
