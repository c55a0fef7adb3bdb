"""Tables: a DP classifier on a table with a privacy spec (every method: DP-SGD, Feature-DP, Label-DP, the
FusionDP family), saved as a run folder and applied to new rows; its membership audits."""

from dpcare.tabular.recipe import (
    METHODS,
    TableMethod,
    TabularModel,
    TabularSettings,
    fit,
    plan,
    train_rows,
)

__all__ = ["METHODS", "TableMethod", "TabularModel", "TabularSettings", "fit", "plan", "train_rows"]
