"""Settings of private LM fine-tuning on notes (``dpcare text finetune``), torch-free: the command line derives
its options from them."""

from __future__ import annotations

from dataclasses import dataclass, field

from dpcare.exceptions import SettingsError
from dpcare.settings import ComputeSettings, DPSettings, Settings, require_unit, setting

TASKS = ("ner", "summarisation")
MODES = ("dp-lora", "dp-full", "dp-prefix", "non-private")
CLIP_VARIANTS = ("fixed", "adaptive-median", "warmup-p80")


def _default_dp() -> DPSettings:
    return DPSettings(epsilon=3.0, batch_size=16, epochs=3.0, clip_norm=1.0, unit="patient")


@dataclass(frozen=True)
class FinetuneSettings(Settings):
    """What a fine-tuning run learns from; ``dp`` is the patient-level mechanism (``dp.epsilon`` and ``dp.delta``
    do not apply in the non-private mode)."""

    task: str = setting("ner", kind="choice", choices=TASKS,
                        help="ner (generative, a JSON list of spans) or summarisation")
    mode: str = setting("dp-lora", kind="choice", choices=MODES,
                        help="dp-lora (adapters on the attention's query and value), dp-full (every weight), "
                             "dp-prefix (virtual tokens) or non-private")
    model: str = setting("smollm2", kind="text", help="'smollm2' or a local Hugging Face causal-LM folder")
    layers: int = setting(0, kind="integer", low=0,
                          help="keep the first k blocks (0: all; a cut model is for smoke tests only)")
    lr: float | None = setting(None, low=0, open_low=True, none=True, none_means="the mode's starting point",
                               help="Adam learning rate")
    clip_variant: str = setting("fixed", kind="choice", choices=CLIP_VARIANTS,
                                help="fixed C, adaptive-median (private quantile estimate) or warmup-p80 (10 charged "
                                     "warm-up counts to the 80th percentile, then frozen)")
    prefix_init: str = setting("text", kind="choice", choices=("text", "random"), methods=("dp-prefix",),
                               help="dp-prefix only: text (the keys and values of the task's public instruction, "
                                    "Li and Liang's init; no budget) or random (peft's)")
    window: int = setting(256, kind="integer", low=1, help="note tokens per NER window")
    stride: int = setting(128, kind="integer", low=0,
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

    @property
    def private(self) -> bool:
        return self.mode != "non-private"


__all__ = ["CLIP_VARIANTS", "MODES", "TASKS", "FinetuneSettings"]
