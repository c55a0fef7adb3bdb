"""scikit-learn style entry points: ``DPClassifier`` for tables with a privacy spec, ``make_private`` for
your own torch model. Fitted state ends in ``_``; using it before ``fit`` raises ``NotFittedError``."""

from dpcare.estimators.classifier import DPClassifier, RecordedSearch, SelectionWarning
from dpcare.estimators.private import LossObjective, PrivateTrainer, make_private

__all__ = ["DPClassifier", "LossObjective", "PrivateTrainer", "RecordedSearch", "SelectionWarning", "make_private"]
