"""Training methods expressed as objectives on the one engine."""

from dpcare.methods.tabular import DPSGD, FeatureDP, LabelDP, NonPrivate, make_objective, task_loss

__all__ = ["DPSGD", "FeatureDP", "LabelDP", "NonPrivate", "make_objective", "task_loss"]
