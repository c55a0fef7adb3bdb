"""The errors dpcare raises on bad input, one family for every layer.

All derive from :class:`DPCareError`, a :class:`ValueError`, so existing ``except ValueError``
code keeps working while callers (the command line above all) can catch dpcare's own errors
in one place and tell them from bugs.
"""

from __future__ import annotations


class DPCareError(ValueError):
    """Base class of the errors dpcare raises on bad input or settings."""


class SpecError(DPCareError):
    """A data spec (schema) is malformed or does not allow the requested use."""


class DataError(DPCareError):
    """Input data is unusable: a missing column, NaN where none is allowed, an empty file..."""


class PrivacyParameterError(DPCareError):
    """A privacy parameter is out of range: epsilon <= 0, delta >= 1/n, a bad noise multiplier..."""


class BudgetExceededError(DPCareError):
    """Spending more would exceed a privacy budget."""


class NotFittedError(DPCareError, AttributeError):
    """An object was used before ``fit`` (a ValueError and an AttributeError, as in scikit-learn)."""


class UnknownNameError(DPCareError, KeyError):
    """A name (a column, a method, a registry entry) that is not known; also a KeyError."""

    __str__ = BaseException.__str__  # KeyError would quote the message


__all__ = ["BudgetExceededError", "DPCareError", "DataError", "NotFittedError", "PrivacyParameterError",
           "SpecError", "UnknownNameError"]
