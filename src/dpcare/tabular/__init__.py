"""Tables: a DP classifier on a table with a privacy spec (every method: DP-SGD, Feature-DP, Label-DP, the
FusionDP family), saved as a run folder and applied to new rows; its membership audits.

Names load on first use, so ``dpcare.tabular.settings`` (what the command line needs) imports no torch.
"""

from dpcare.lazy import lazy_face

__getattr__, __dir__, __all__ = lazy_face(__name__, {
    **dict.fromkeys(("METHODS", "TableMethod", "TabularModel", "fit", "plan", "train_rows"), "recipe"),
    **dict.fromkeys(("METHOD_NAMES", "TabularSettings"), "settings"),
})
