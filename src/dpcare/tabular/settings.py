"""Settings of the tabular recipe (no torch: the command line builds its options from them)."""

from __future__ import annotations

from dataclasses import dataclass, field

from dpcare.exceptions import SettingsError
from dpcare.settings import ComputeSettings, DPSettings, Settings, require_unit, setting

#: the methods of :data:`dpcare.tabular.recipe.METHODS`, in its order
METHOD_NAMES = ("non-private", "dp-sgd", "feature-dp", "label-dp", "naive-fusion", "naive-fusion-pub",
                "calibrated-fusion", "fusiondp")


#: alpha when none is given, by method (every other method: 1). Label-DP's was chosen on the VALIDATION rows of
#: the bundled SUPPORT2 table (grid alpha in {1, 5, 20} x epsilon in {1, 3, 8} x 3 seeds, the recipe's other
#: defaults): see docs/tabular.md, "alpha". Its public loss (the label-free softplus / logsumexp) is not clipped
#: while the private label term -z_y is, so at alpha = 1 clipping shrinks the label's pull against it.
DEFAULT_ALPHA: dict[str, float] = {"label-dp": 20.0}


def default_alpha(method: str) -> float:
    """The weight of the private gradient a run of ``method`` uses when ``alpha`` is None."""
    return DEFAULT_ALPHA.get(method, 1.0)


#: methods with a public branch (g = g_pub + alpha g_priv), and those whose public branch reads imputed columns
PUBLIC_BRANCH = ("feature-dp", "label-dp", "naive-fusion", "naive-fusion-pub", "calibrated-fusion", "fusiondp")
HYBRID = ("naive-fusion", "calibrated-fusion", "fusiondp")


def _default_dp() -> DPSettings:
    return DPSettings(epsilon=1.0, batch_size=256, epochs=10.0)


@dataclass(frozen=True)
class TabularSettings(Settings):
    """Settings of :func:`fit` (and of ``dpcare train`` / ``DPClassifier``)."""

    method: str = setting("feature-dp", kind="choice", choices=METHOD_NAMES,
                          help="what is protected: the private columns (feature-dp, the fusion family), whole "
                               "rows (dp-sgd), the label (label-dp), or nothing (non-private)")
    hidden: int = setting(256, kind="integer", low=1, help="width of the MLP's hidden layers")
    lr: float = setting(1e-3, low=0, open_low=True, help="Adam learning rate")
    alpha: float | None = setting(None, low=0, none=True, none_means="the method's default (default_alpha)",
                                  methods=PUBLIC_BRANCH,
                                  help="weight of the private gradient: g = g_pub + alpha g_priv; default: the "
                                       f"method's own (label-dp {DEFAULT_ALPHA['label-dp']:g}, the others 1)")
    beta: float = setting(0.2, low=0, methods=("fusiondp",), help="fusiondp: weight of the hidden-layer consistency term")
    pad: str = setting("gaussian", kind="choice", choices=("gaussian", "zeros"), methods=PUBLIC_BRANCH,
                       help="how pad(Psi(x)) fills the private columns")
    public_batch_size: int | None = setting(None, kind="integer", low=1, none=True, none_means="the batch size",
                                            methods=PUBLIC_BRANCH,
                                            help="rows per step of the public branch")
    public_pretrain_steps: int = setting(0, kind="integer", low=0, methods=PUBLIC_BRANCH,
                                         help="public-only steps before private training (free)")
    stats_epsilon: float | None = setting(None, low=0, open_low=True, none=True,
                                          none_means="protected columns must declare bounds/categories",
                                          methods=METHOD_NAMES[1:],
                                          help="DP budget for scaling bounds of protected columns the spec does "
                                               "not declare")
    imputer: str = setting("gbm", kind="choice", choices=("gbm", "lm"), methods=HYBRID,
                           help="fusion methods: imputer of the private columns, fitted on --public-data")
    validation_share: float = setting(0.1, low=0, high=0.5, open_low=True, open_high=True,
                                      help="share of the rows held out to choose and check (validation)")
    test_share: float = setting(0.1, low=0, high=0.5, open_low=True, open_high=True,
                                help="share of the rows held out to score the model and its verdict (test); more "
                                     "test rows detect smaller differences from the public baseline")
    dp: DPSettings = field(default_factory=_default_dp)
    compute: ComputeSettings = field(default_factory=ComputeSettings)  # device, precision, processes

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.validation_share + self.test_share >= 0.9:
            raise SettingsError(f"validation_share + test_share must leave at least 10% of the rows to train, got "
                                f"{self.validation_share:g} + {self.test_share:g}")
        require_unit(self.dp, "example", "the tabular recipe protects rows (a table with several rows per patient "
                                         "needs one row per patient, or the event and notes recipes)")

    @property
    def private(self) -> bool:
        return self.method != "non-private"

    @property
    def splits(self) -> dict[str, float]:
        """The shares of the rows that train, validate and test (a function of the row count and seed only)."""
        train = round(1.0 - self.validation_share - self.test_share, 12)
        return {"train": train, "val": self.validation_share, "test": self.test_share}

    @property
    def effective_alpha(self) -> float:
        """The alpha the run uses: the given one, else the method's default (:func:`default_alpha`)."""
        return default_alpha(self.method) if self.alpha is None else float(self.alpha)




__all__ = ["DEFAULT_ALPHA", "METHOD_NAMES", "TabularSettings", "default_alpha"]
