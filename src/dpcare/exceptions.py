"""The errors dpcare raises on input a user can fix, one family for every layer.

All derive from :class:`DPCareError`, a :class:`ValueError`, so existing ``except ValueError``
code keeps working while callers (the command line above all) can catch dpcare's own errors
in one place and tell them from bugs: every check on what a user passes (data, a spec, a
setting, a privacy parameter, a name, a path, an optional package) raises one of them. A broken
internal invariant (a bug, not a user's doing) raises ``RuntimeError`` or ``TypeError`` instead.
:class:`MissingFileError` is also a :class:`FileNotFoundError`, :class:`MissingDependencyError`
an :class:`ImportError`, :class:`UnknownNameError` a :class:`KeyError` and
:class:`NotFittedError` an :class:`AttributeError`, so handlers of those catch them too.
"""

from __future__ import annotations


class ExactStatisticWarning(UserWarning):
    """A warning whose text holds exact statistics of the private data (counts of bad values...): shown to whoever
    runs the command, and in run.json outside every guarantee (the run says so)."""


class DPCareError(ValueError):
    """Base class of the errors dpcare raises on bad input or settings."""


class SpecError(DPCareError):
    """A data spec (schema) is malformed or does not allow the requested use."""


class DataError(DPCareError):
    """Input data is unusable: a missing column, NaN where none is allowed, an empty file..."""


class PrivacyParameterError(DPCareError):
    """A privacy parameter is out of range: epsilon <= 0, delta >= 1/n, a bad noise multiplier..."""


class SettingsError(DPCareError):
    """A setting or argument is out of range, or settings contradict each other (the message names them)."""


class BudgetExceededError(DPCareError):
    """Spending more would exceed a privacy budget."""


class NotFittedError(DPCareError, AttributeError):
    """An object was used before ``fit`` (a ValueError and an AttributeError, as in scikit-learn)."""


class UnknownNameError(DPCareError, KeyError):
    """A name (a column, a method, a registry entry) that is not known; also a KeyError."""

    __str__ = BaseException.__str__  # KeyError would quote the message


class MissingFileError(DPCareError, FileNotFoundError):
    """A file or folder the user named does not exist; also a FileNotFoundError."""


class MissingDependencyError(DPCareError, ImportError):
    """An optional package or model that is not installed; also an ImportError."""


class WorkerLostError(DPCareError):
    """A parallel worker (a Ray task's process, its node or an object it held) was lost: the machine, not the
    input, failed; the message says what was lost and how to resume from the run's journal."""


__all__ = ["BudgetExceededError", "DPCareError", "DataError", "MissingDependencyError", "MissingFileError",
           "NotFittedError", "PrivacyParameterError", "SettingsError", "SpecError", "UnknownNameError",
           "WorkerLostError"]
