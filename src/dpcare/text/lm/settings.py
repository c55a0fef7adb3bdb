"""Settings of private LM fine-tuning on notes (``dpcare text finetune``), torch-free: the command line derives
its options from them. NER trains the MiniLM BIO token tagger by default (:mod:`dpcare.text.lm.token_ner`; issue
55: non-private, on held-out patients of generated notes, exact-match entity F1 0.94 to 0.98 after 20 minutes of
one CPU core; docs/clinical-nlp.md); a causal LM (``--model smollm2`` or a folder) does generative NER and
summarisation."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from dpcare.exceptions import SettingsError
from dpcare.settings import ComputeSettings, DPSettings, Settings, require_unit, setting

TASKS = ("ner", "summarisation")
MODES = ("dp-lora", "dp-full", "dp-prefix", "non-private")
CLIP_VARIANTS = ("fixed", "adaptive-median", "warmup-p80")
HINT_CHOICES = ("lexicon", "none")  # dpcare.text.lm.token_ner.HINTS, and none


def _default_dp() -> DPSettings:
    # 128 patients a step for about 5 epochs: the tagger's measured best (issue 55, docs/clinical-nlp.md: 82 steps of
    # 128 of 2,167 patients beat 64 a step at epsilon 3 and 8); an epoch costs the same at any batch size
    return DPSettings(epsilon=3.0, batch_size=128, epochs=5.0, clip_norm=1.0, unit="patient")


#: where summarisation's schedule differs (issue 55, docs/clinical-nlp.md "Summarisation at scale": 64 patients a
#: step for 2 epochs, 32 steps on 1,000 patients, beat LEAD-3 at epsilon 3 and 8 in about 45 min of one core; the
#: tagger's 128 a step for 5 epochs is unmeasured for summaries and takes 1.5 to 2 h there)
SUMMARY_SCHEDULE = {"batch_size": 64, "epochs": 2.0}


#: starting learning rates per mode of the BIO token tagger (:mod:`dpcare.text.lm.token_ner`), chosen on held-out
#: generated patients (docs/clinical-nlp.md, issue 55), never on the hand-written notes; dp-lora 1e-2 (5e-3 and 2e-2
#: scored lower at 64 patients a step)
TAGGER_LR = {"non-private": 2e-4, "dp-full": 5e-4, "dp-lora": 1e-2, "dp-prefix": 1e-2}
#: starting learning rates per mode of a causal LM (:mod:`dpcare.text.lm.finetune`; generative NER: not tuned)
CAUSAL_LR = {"non-private": 5e-5, "dp-full": 1e-4, "dp-lora": 2e-3, "dp-prefix": 1e-2}
#: where a causal LM's summarisation differs (issue 55, docs/clinical-nlp.md "Summarisation at scale": DP-LoRA at
#: 1e-2 beat LEAD-3 at epsilon 3 and 8 on 1,000 generated patients, 2e-3 did not)
SUMMARY_LR = {"dp-lora": 1e-2}


def starting_lr(mode: str, task: str, tagger: bool) -> float:
    """The learning rate of a run given none: TAGGER_LR's for a token tagger; for a causal LM, SUMMARY_LR's for
    summarisation where it has the mode, else CAUSAL_LR's."""
    if tagger:
        return TAGGER_LR[mode]
    if task == "summarisation" and mode in SUMMARY_LR:
        return SUMMARY_LR[mode]
    return CAUSAL_LR[mode]


def _lr_none_means() -> str:
    return (f"the mode's starting point (DP-LoRA: {starting_lr('dp-lora', 'ner', True):g} for a tagger, "
            f"{starting_lr('dp-lora', 'summarisation', False):g} for summarisation, "
            f"{starting_lr('dp-lora', 'ner', False):g} for generative NER)")


def task_dp(task: str) -> DPSettings:
    """The default DP settings of a fine-tuning run on ``task``: the tagger's schedule, SUMMARY_SCHEDULE's for
    summarisation."""
    dp = _default_dp()
    return dp.replace(**SUMMARY_SCHEDULE) if task == "summarisation" else dp


@dataclass(frozen=True)
class FinetuneSettings(Settings):
    """What a fine-tuning run learns from; ``dp`` is the patient-level mechanism (``dp.epsilon`` and ``dp.delta``
    do not apply in the non-private mode)."""

    task: str = setting("ner", kind="choice", choices=TASKS,
                        help="ner (generative, a JSON list of spans) or summarisation")
    mode: str = setting("dp-lora", kind="choice", choices=MODES,
                        help="dp-lora (adapters on the attention's query and value), dp-full (every weight), "
                             "dp-prefix (virtual tokens) or non-private")
    model: str | None = setting(None, kind="text", none=True,
                                none_means="minilm (a BIO token tagger) for ner, smollm2 for summarisation",
                                help="'minilm' (all-MiniLM-L6-v2 as a BIO token tagger, ner only), 'smollm2' "
                                     "(generative), or a local Hugging Face folder: a BERT-architecture encoder "
                                     "(a tagger) or a causal LM")
    layers: int = setting(0, kind="integer", low=0,
                          help="keep the first k blocks (0: all; a cut model is for smoke tests only)")
    lr: float | None = setting(None, low=0, open_low=True, none=True,
                               none_means=_lr_none_means(),
                               help="Adam learning rate")
    clip_variant: str = setting("fixed", kind="choice", choices=CLIP_VARIANTS,
                                help="fixed C, adaptive-median (private quantile estimate) or warmup-p80 (10 charged "
                                     "warm-up counts to the 80th percentile, then frozen)")
    prefix_init: str = setting("text", kind="choice", choices=("text", "random"), methods=("dp-prefix",),
                               help="dp-prefix only: text (Li and Liang's start: the keys and values of public "
                                    "words, the task's instruction or, for a token tagger, the label names; no "
                                    "budget) or random")
    window: int | None = setting(None, kind="integer", low=1, none=True,
                                 none_means="128 word pieces for a tagger, 256 tokens for a causal LM",
                                 help="note tokens per NER window")
    hints: str | None = setting(None, kind="choice", choices=HINT_CHOICES, none=True,
                                none_means="lexicon for a token tagger",
                                help="token tagger only: lexicon (it also reads the public lexicon's tag of every "
                                     "word piece: ICD-10-CM problems, drug names, lab tests) or none")
    stride: int | None = setting(None, kind="integer", low=0, none=True,
                                 none_means="the window for a tagger (training windows do not overlap), 128 for a "
                                            "causal LM",
                                 help="tokens between window starts (0: no sliding; a longer note is an error)")
    dp: DPSettings = field(default_factory=_default_dp)
    compute: ComputeSettings = field(default_factory=ComputeSettings)  # device, precision, processes

    def __post_init__(self) -> None:
        super().__post_init__()
        require_unit(self.dp, "patient", "fine-tuning protects patients (every window of every note of a patient "
                                         "clipped together)")
        if self.dp.steps is not None:
            raise SettingsError("fine-tuning counts epochs over the patients: give --epochs, not --steps")
        if self.dp.adaptive_clip is not None and self.clip_variant != "fixed":
            raise SettingsError(f"--adaptive-clip {self.dp.adaptive_clip} and --clip-variant {self.clip_variant} "
                                "both choose how C adapts: give one")
        if self.tagger:
            if self.task != "ner":
                raise SettingsError(f"--model {self.resolved_model} is a token tagger: it does ner only (summarisation "
                                    "needs a causal LM, e.g. --model smollm2)")
            if self.layers:
                raise SettingsError("--layers cuts a causal LM's blocks; the token tagger keeps its encoder whole")
            if self.stride == 0:
                raise SettingsError("--stride 0 (no sliding) is for a causal LM; the token tagger's windows always "
                                    "slide (leave --stride out: it is the window)")
        elif self.hints not in (None, "none"):
            raise SettingsError(f"--hints {self.hints} is for a token tagger; --model {self.resolved_model} is a causal "
                                "LM (leave --hints out)")

    @classmethod
    def for_task(cls, task: str, **changes) -> FinetuneSettings:
        """The settings of a run on ``task`` with its measured defaults (:func:`task_dp`), ``changes`` applied; a
        plain ``FinetuneSettings(task="summarisation")`` keeps the tagger's schedule. ``dpcare text finetune``
        builds its defaults with this."""
        return cls(task=task, **({"dp": task_dp(task)} | changes))

    def task_defaults(self) -> FinetuneSettings:
        """The defaults of a run on this task (what the command line fills in for options left off)."""
        return FinetuneSettings.for_task(self.task)

    @property
    def private(self) -> bool:
        return self.mode != "non-private"

    @property
    def resolved_lr(self) -> float:
        """The learning rate trained at: the setting, or :func:`starting_lr` of the mode, task and model."""
        return self.lr if self.lr is not None else starting_lr(self.mode, self.task, self.tagger)

    @property
    def resolved_model(self) -> str:
        """The model trained: the setting, or by default minilm (ner) / smollm2 (summarisation)."""
        if self.model is not None:
            return self.model
        return TAGGER if self.task == "ner" else "smollm2"

    @property
    def tagger(self) -> bool:
        """Whether the model is an encoder trained as a BIO token tagger (:mod:`dpcare.text.lm.token_ner`)."""
        return is_tagger(self.resolved_model)

    @property
    def resolved_hints(self) -> str | None:
        """The hints the tagger reads: the setting, lexicon by default; None for "none" and for a causal LM."""
        if not self.tagger or self.hints == "none":
            return None
        return self.hints or "lexicon"

    @property
    def resolved_window(self) -> int:
        if self.window is not None:
            return self.window
        return TAGGER_WINDOW if self.tagger else 256

    @property
    def resolved_stride(self) -> int:
        """Tokens between window starts (0: no sliding)."""
        if self.stride is not None:
            return self.stride
        return self.resolved_window if self.tagger else 128


TAGGER = "minilm"
TAGGER_WINDOW = 128  # dpcare.text.lm.token_ner.WINDOW (this module stays torch-free)
ENCODER_TYPES = ("bert",)  # dpcare.text.lm.token_ner.ENCODER_TYPES


def is_tagger(model: str) -> bool:
    """``minilm``, or a local folder whose config.json names a BERT-architecture encoder."""
    if model == TAGGER:
        return True
    config = Path(model) / "config.json"
    if model == "smollm2" or not config.is_file():
        return False
    try:
        return json.loads(config.read_text()).get("model_type") in ENCODER_TYPES
    except (OSError, ValueError):
        return False


__all__ = ["CAUSAL_LR", "CLIP_VARIANTS", "MODES", "SUMMARY_LR", "SUMMARY_SCHEDULE", "TAGGER", "TAGGER_LR", "TASKS",
           "FinetuneSettings", "is_tagger", "starting_lr", "task_dp"]
