"""Settings of the note-classifier recipe (no torch: the command line builds its options from them).

ICD coding of notes with the CAML backbone under the FusionDP family's methods (Zeng et al., Section 5.3):
the methods, the paper's per-method (C, alpha, beta) and :class:`NoteClassifierSettings`.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from dpcare.exceptions import SettingsError
from dpcare.settings import ComputeSettings, DPSettings, Settings, require_unit, setting

#: non-private references: the view of the training notes each trains on
NONPRIVATE_VIEWS = {"sgd-org": "x", "sgd-hybrid": "x_hyb", "sgd-pub": "x_pub"}
#: private methods whose public branch reads the hybrid view (the imputed note)
HYBRID_VIEW = ("naive-fusion", "calibrated-fusion", "fusiondp")
#: every method, in the order of the paper's Table 1 (the hybrid family as ``dpcare.methods.fusion.HYBRID_METHODS``)
METHOD_NAMES = (*NONPRIVATE_VIEWS, "dp-sgd", "naive-fusion", "naive-fusion-pub", "feature-dp", "calibrated-fusion",
                "fusiondp")
#: (C, alpha, beta) of the paper's Table 3 (MIMIC-III notes, epsilon 5); DP-SGD has no alpha
PAPER_SETTINGS: dict[str, tuple[float, float, float]] = {
    "fusiondp": (1.0, 0.5, 0.5), "dp-sgd": (1.5, 1.0, 0.0), "feature-dp": (1.0, 0.2, 0.0),
    "calibrated-fusion": (0.05, 8.0, 0.0), "naive-fusion": (1.5, 0.5, 0.0), "naive-fusion-pub": (1.5, 0.5, 0.0)}
LOSSES = ("sum", "mean")
#: methods with a public branch (g = g_pub + alpha g_priv); methods that read the imputed (hybrid) note; methods that
#: read a masked view at all
PUBLIC_BRANCH = ("naive-fusion", "naive-fusion-pub", "feature-dp", "calibrated-fusion", "fusiondp")
READ_HYBRID = (*HYBRID_VIEW, "sgd-hybrid")
READ_MASKED = tuple(m for m in METHOD_NAMES if m not in ("dp-sgd", "sgd-org"))


def _default_dp() -> DPSettings:
    return DPSettings(epsilon=5.0, batch_size=64, epochs=6.0, clip_norm=1.0, unit="patient")


@dataclass(frozen=True)
class NoteClassifierSettings(Settings):
    """Settings of :func:`dpcare.text.classify.recipe.fit` (and of ``dpcare text classify``).

    The defaults are those of the FusionDP method in the paper's Table 3 (C 1.0, alpha 0.5, beta 0.5) and of the
    text FusionDP study (512 tokens, CAML with 50 filters of width 10 on 100-dimensional public word vectors,
    Adam at 3e-3, 64 patients per step, 6 epochs, epsilon 5); :func:`paper_settings` gives another method's
    Table 3 values. ``dp.batch_size`` is the expected number of PATIENTS per step (notes, for the non-private
    references), ``dp.epochs`` whole passes: the epoch kept is chosen on the validation notes."""

    method: str = setting("fusiondp", kind="choice", choices=METHOD_NAMES,
                          help="what is protected: the masked spans of a patient's notes (naive-fusion(-pub), "
                               "feature-dp, calibrated-fusion, fusiondp), every note of a patient (dp-sgd), or "
                               "nothing (sgd-org / sgd-hybrid / sgd-pub on x / x_hyb / x_pub); other methods' "
                               "C, alpha, beta in the paper: docs/text-fusiondp.md")
    top_k: int = setting(50, kind="integer", low=1, help="the K most frequent ICD codes of the training notes")
    max_tokens: int = setting(512, kind="integer", low=1, help="tokens of a note the model reads (the rest is cut)")
    emb_dim: int = setting(100, kind="integer", low=1, help="word-vector dimension (public vectors projected)")
    n_filters: int = setting(50, kind="integer", low=1, cli="filters", help="CAML convolution filters")
    kernel_size: int = setting(10, kind="integer", low=1, cli="kernel", help="CAML convolution width (tokens)")
    lr: float = setting(3e-3, low=0, open_low=True, help="Adam learning rate")
    alpha: float = setting(0.5, low=0, methods=PUBLIC_BRANCH, help="weight of the private gradient: g = g_pub + alpha g_priv")
    beta: float = setting(0.5, low=0, methods=("fusiondp",), help="fusiondp: weight of the consistency term ||h(x) - h(x_hyb)||^2")
    loss: str = setting("sum", kind="choice", choices=LOSSES, help="per-note BCE over the codes: sum or mean")
    train_embeddings: bool = setting(True, kind="flag", help="train the word vectors (off: keep the public ones)")
    impute: bool = setting(True, kind="flag", methods=READ_HYBRID,
                           help="fill the masked spans with a language model that reads only the masked text (the "
                                "hybrid view); off: the hybrid view is the masked note")
    lm: str = setting("smollm2", kind="text", methods=READ_HYBRID, help="imputation LM: smollm2 or a local causal-LM folder")
    impute_context_chars: int = setting(64, kind="integer", low=1, cli="impute_context", methods=READ_HYBRID,
                                        help="characters of masked text left of a span in the imputer's prompt")
    mask_ner: bool = setting(True, kind="flag", methods=READ_MASKED,
                             help="mask persons, dates, places and organisations found by spaCy's NER model as well "
                                  "as the rules' spans (off: rules only)")
    split_seed: int = setting(0, kind="integer", help="seed of the patient split (train 70 / validation 10 / test 20 "
                                                      "by default)")
    validation_share: float = setting(0.1, low=0, high=0.5, open_low=True, open_high=True,
                                      help="share of the patients held out to choose the epoch and threshold "
                                           "(validation)")
    test_share: float = setting(0.2, low=0, high=0.5, open_low=True, open_high=True,
                                help="share of the patients held out to score the coder and its verdict (test); more "
                                     "test patients detect smaller differences from the public baseline")
    dp: DPSettings = field(default_factory=_default_dp)
    compute: ComputeSettings = field(default_factory=ComputeSettings)  # device, precision, processes

    def __post_init__(self) -> None:
        super().__post_init__()
        require_unit(self.dp, "patient", "the note classifier protects patients (all of a patient's notes together)")
        if self.dp.steps is not None:
            raise SettingsError("the note classifier trains whole epochs (the epoch kept is chosen on the validation "
                                f"notes): set epochs, not steps (got steps = {self.dp.steps})")
        if self.validation_share + self.test_share >= 0.9:
            raise SettingsError(f"validation_share + test_share must leave at least 10% of the patients to train, "
                                f"got {self.validation_share:g} + {self.test_share:g}")
        if not float(self.dp.epochs).is_integer():
            raise SettingsError(f"epochs must be a whole number of passes for the note classifier, got "
                                f"epochs = {self.dp.epochs}")

    @property
    def private(self) -> bool:
        return self.method not in NONPRIVATE_VIEWS

    @property
    def epochs(self) -> int:
        return int(self.dp.epochs)

    @property
    def split_fractions(self) -> tuple[float, float, float]:
        """The train / validation / test shares of the patients."""
        return (round(1.0 - self.validation_share - self.test_share, 12), self.validation_share, self.test_share)


def paper_settings(method: str) -> dict[str, float]:
    """The paper's Table 3 (C, alpha, beta) of ``method`` as keywords of :func:`with_method`; {} for the
    non-private references."""
    if method not in PAPER_SETTINGS:
        return {}
    clip, alpha, beta = PAPER_SETTINGS[method]
    return {"clip_norm": clip, "alpha": alpha, "beta": beta}


def with_method(settings: NoteClassifierSettings, method: str, clip_norm: float | None = None,
                alpha: float | None = None, beta: float | None = None, **dp: Any) -> NoteClassifierSettings:
    """``settings`` for another method, (C, alpha, beta) where given, and DP settings (validated)."""
    if clip_norm is not None:
        dp["clip_norm"] = clip_norm
    changes = {k: v for k, v in {"alpha": alpha, "beta": beta}.items() if v is not None}
    return replace(settings, method=method, dp=settings.dp.replace(**dp) if dp else settings.dp, **changes)


__all__ = ["HYBRID_VIEW", "LOSSES", "METHOD_NAMES", "NONPRIVATE_VIEWS", "NoteClassifierSettings", "PAPER_SETTINGS",
           "paper_settings", "with_method"]
