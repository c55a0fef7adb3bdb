"""Settings of the forecasting recipe (no torch: the command line builds its options from them)."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from dpcare.exceptions import SettingsError
from dpcare.settings import ComputeSettings, DPSettings, Settings, require_unit, setting

DEFENCES = ("zoo", "zoo_pca", "mixup")
METHODS = ("baseline", "dp-sgd", *DEFENCES)
PARAMETERISATIONS = ("direct", "residual", "linear")
SPLIT_METHODS = ("hash", "permutation")  # timeseries.windows.split_patients
NON_PRIVATE = ("baseline", *DEFENCES)  # trained without privacy (the defences start from the baseline)
ZOO = ("zoo", "zoo_pca")


def _default_dp() -> DPSettings:
    # epochs 30 with dp_lr 0.05 and the linear parameterisation: chosen on the VALIDATION patients of the bundled
    # sets (docs/timeseries.md, "Defaults")
    return DPSettings(epsilon=3.0, batch_size=8, epochs=30.0, clip_norm=1.0, unit="patient")


@dataclass(frozen=True)
class ForecastSettings(Settings):
    """Settings of :func:`fit` (and of ``dpcare forecast fit`` and ``dpcare benchmark tsf``)."""

    method: str = setting("dp-sgd", kind="choice", choices=METHODS,
                          help="baseline (non-private), dp-sgd (patient-level DP: the only one with a guarantee), "
                               "or an augmentation defence of the baseline (zoo, zoo_pca, mixup: no guarantee)")
    parameterisation: str | None = setting(
        None, kind="choice", choices=PARAMETERISATIONS, none=True,
        none_means="linear for dp-sgd, residual for the other methods",
        help="direct: the transformer forecasts the values (the paper's); residual: last observation carried forward "
             "plus a per-variable linear change and the transformer's, both from zero (the untrained forecaster IS "
             "last observation carried forward); linear: residual with the linear change alone trained (few "
             "parameters: what DP-SGD can learn from few patients)")
    d_model: int = setting(64, kind="integer", low=1, help="width of the forecaster's embedding and encoder")
    n_heads: int = setting(4, kind="integer", low=1, help="attention heads of the encoder (must divide --d-model)")
    baseline_epochs: float = setting(60.0, low=0, open_low=True, methods=NON_PRIVATE,
                                     help="epochs of non-private training (the baseline; the defences start from it)")
    baseline_batch_size: int = setting(32, kind="integer", low=1, methods=NON_PRIVATE, help="windows per step of non-private training")
    baseline_lr: float = setting(5e-4, low=0, open_low=True, methods=NON_PRIVATE, help="Adam learning rate of non-private training")
    dp_lr: float = setting(0.05, low=0, open_low=True, methods=("dp-sgd",), help="Adam learning rate of DP-SGD")
    dp_sampling_rate: float | None = setting(
        0.25, low=0, high=1, open_low=True, none=True, none_means="--batch-size patients per step", methods=("dp-sgd",),
        help="DP-SGD: expected share of the training patients per step (expected batch = rate x the training "
             "patients of the split, a public count)")
    aug_epochs: int = setting(8, kind="integer", low=1, methods=DEFENCES, help="defences: retraining epochs (at most)")
    aug_candidates: int = setting(256, kind="integer", low=1, methods=DEFENCES,
                                  help="defences: synthetic candidates per epoch (the paper's 32,000 is GPU scale)")
    aug_lr: float = setting(5e-4, low=0, open_low=True, methods=DEFENCES, help="defences: fine-tuning learning rate")
    alpha: float = setting(0.75, low=0, high=1, methods=ZOO, help="ZOO: interpolation weight alpha")
    mixup_beta: float = setting(1.0, low=0, open_low=True, methods=("mixup",), help="MixUp: Beta(b, b) of the mixing weight")
    pca_variance: float = setting(0.70, low=0, high=1, open_low=True, methods=("zoo_pca",),
                                  help="ZOO-PCA: share of the embeddings' variance its components keep")
    zoo_mu_rel: float = setting(0.05, low=0, open_low=True, methods=ZOO,
                                help="ZOO: step mu as a share of the mean norm of the real embeddings")
    input_len: int | None = setting(None, kind="integer", low=1, none=True, none_means="the spec's window",
                                    help="input steps of a window")
    output_len: int | None = setting(None, kind="integer", low=1, none=True, none_means="the spec's window",
                                     help="forecast steps of a window (the horizon)")
    stride: int | None = setting(None, kind="integer", low=1, none=True, none_means="the spec's window",
                                 help="steps between the anchors of two windows of a stay")
    split: str = setting("hash", kind="choice", choices=SPLIT_METHODS,
                         help="how patients are split 64/16/20: hash (a hash of the seed and the patient id: one new "
                              "patient moves only itself) or permutation (exact sizes; a new patient reshuffles all; "
                              "the forecasting runs published before issue 51)")
    validation_share: float = setting(0.16, low=0, high=0.5, open_low=True, open_high=True,
                                      help="share of the patients held out for validation (the defences' "
                                           "early stopping)")
    test_share: float = setting(0.20, low=0, high=0.5, open_low=True, open_high=True,
                                help="share of the patients held out to score the model and its verdict (test)")
    dp: DPSettings = field(default_factory=_default_dp)
    compute: ComputeSettings = field(default_factory=ComputeSettings)  # device, precision, processes

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.validation_share + self.test_share >= 0.9:
            raise SettingsError(f"validation_share + test_share must leave at least 10% of the patients to train, "
                                f"got {self.validation_share:g} + {self.test_share:g}")
        require_unit(self.dp, "patient", "the forecasting recipe protects patients (all windows of a patient sampled "
                                         "and clipped together)")
        if self.method in DEFENCES and self.form == "linear":
            raise SettingsError(f"the {self.method} defence fine-tunes the transformer in embedding space, which the "
                                "linear parameterisation does not train: use --parameterisation residual or direct")
        if self.d_model % self.n_heads:
            raise SettingsError(f"d_model must be divisible by n_heads, got d_model = {self.d_model}, "
                                f"n_heads = {self.n_heads}")

    @property
    def private(self) -> bool:
        return self.method == "dp-sgd"

    @property
    def form(self) -> str:
        """The parameterisation of this method's forecaster (``parameterisation``, or the method's default)."""
        return self.form_for(self.private)

    def form_for(self, private: bool) -> str:
        """The parameterisation of a DP-SGD (``private``) or a non-private forecaster under these settings (the
        defences start from a non-private Baseline, whatever ``method`` is)."""
        if self.parameterisation is not None:
            return self.parameterisation
        return "linear" if private else "residual"

    @property
    def fractions(self) -> tuple[float, float, float]:
        """The shares of the patients that train, validate and test (64 / 16 / 20 by default)."""
        return (round(1.0 - self.validation_share - self.test_share, 12), self.validation_share, self.test_share)

    def window(self) -> dict[str, int | None]:
        return {"input_len": self.input_len, "output_len": self.output_len, "stride": self.stride}




def with_method(settings: ForecastSettings, method: str, **dp: Any) -> ForecastSettings:
    """``settings`` for another method (and DP settings), validated."""
    return replace(settings, method=method, dp=settings.dp.replace(**dp) if dp else settings.dp)


def dp_batch_size(settings: ForecastSettings, patients: int) -> int:
    """Expected patients per DP-SGD step for ``patients`` training patients (a public count)."""
    rate = settings.dp_sampling_rate
    return settings.dp.batch_size if rate is None else max(1, round(rate * patients))


__all__ = ["DEFENCES", "METHODS", "PARAMETERISATIONS", "SPLIT_METHODS", "ForecastSettings", "dp_batch_size", "with_method"]
