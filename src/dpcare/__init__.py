"""dpcare: differential privacy for clinical machine learning.

The names below are the public API. They load on first use (``__version__`` too), so
``import dpcare`` stays fast and imports no torch; the errors (:mod:`dpcare.exceptions`) are
always loaded.
"""

from __future__ import annotations

import importlib

from dpcare.exceptions import (
    BudgetExceededError,
    DataError,
    DPCareError,
    MissingDependencyError,
    MissingFileError,
    NotFittedError,
    PrivacyParameterError,
    SettingsError,
    SpecError,
    UnknownNameError,
)

#: public name -> the module that defines it
_LAZY = {
    "DPClassifier": "dpcare.estimators",
    "make_private": "dpcare.estimators",
    "Synthesizer": "dpcare.synth",
    "Trainer": "dpcare.engine",
    "TrainConfig": "dpcare.engine",
    "PrivacyLedger": "dpcare.privacy",
    "ProtectedUnit": "dpcare.privacy",
    "Guarantee": "dpcare.privacy",
    "load_spec": "dpcare.data",
    "load_table": "dpcare.data",
    "load_dataset": "dpcare.data",
}


def _version() -> str:
    """The installed distribution's version, else the one in a source checkout's pyproject.toml."""
    from importlib import metadata

    try:
        return metadata.version("dpcare")
    except metadata.PackageNotFoundError:
        import tomllib
        from pathlib import Path

        pyproject = Path(__file__).resolve().parents[2] / "pyproject.toml"
        with pyproject.open("rb") as f:
            return tomllib.load(f)["project"]["version"]


def __getattr__(name: str):
    if name == "__version__":
        value = _version()
    elif name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name]), name)
    else:
        raise AttributeError(f"module 'dpcare' has no attribute {name!r}")
    globals()[name] = value  # later look-ups skip __getattr__
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY, "__version__"})


__all__ = [
    "BudgetExceededError",
    "DPCareError",
    "DPClassifier",
    "DataError",
    "Guarantee",
    "MissingDependencyError",
    "MissingFileError",
    "NotFittedError",
    "PrivacyLedger",
    "PrivacyParameterError",
    "ProtectedUnit",
    "SettingsError",
    "SpecError",
    "Synthesizer",
    "TrainConfig",
    "Trainer",
    "UnknownNameError",
    "__version__",
    "load_dataset",
    "load_spec",
    "load_table",
    "make_private",
]
