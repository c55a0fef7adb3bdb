"""Settings of the DP-2Stage synthesizer (no torch: the command line builds its options from them).

:class:`SynthSettings` composes the shared :class:`~dpcare.settings.DPSettings` as ``dp``: they are the
settings of the PRIVATE stage (stage 2: target epsilon of the whole fit, delta, accountant, clipping incl.
adaptive clipping, expected batch, epochs or steps, and the seed of everything). Stage 1 trains on PUBLIC
rows only (uniform pseudo rows from the spec, or an unrelated public table) with ordinary SGD, so its
:class:`StageSettings` hold no privacy parameter; :class:`Stage2Settings` are stage 2's own knobs besides
its DP settings (learning rate, memory).

Scales (:data:`SIZES`): ``SynthSettings()`` is the paper's run (the whole model, 5 + 10 epochs);
``SynthSettings.for_device()`` is the CPU scale on a CPU (the first transformer block, 1 + 2 epochs).
A scale sets only the fields listed in :data:`SIZES`; everything else is the same in both.

:class:`AIMSettings` are the settings of the other synthesizer, AIM (:mod:`dpcare.synth.aim`).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from dpcare.exceptions import SettingsError
from dpcare.settings import (
    ComputeSettings,
    DPSettings,
    Settings,
    from_dict,
    require_unit,
    rules,
    setting,
    to_dict,
)

MODES = ("dp-2stage-u", "dp-2stage-o", "dp-standard", "non-private")
ORDERS = ("target-first", "target-last", "shuffle")
LORA_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "up_proj", "down_proj", "gate_proj", "c_attn", "c_proj",
                "c_fc")
SCALES = ("auto", "cpu", "paper")
#: what each scale sets (by nested settings, then field); every other field is the same at every scale
SIZES = {
    "paper": {"lm": {"layers": None}, "stage1": {"epochs": 5.0}, "dp": {"epochs": 10.0}},
    "cpu": {"lm": {"layers": 1}, "stage1": {"epochs": 1.0}, "dp": {"epochs": 2.0}},
}
def resolve_scale(scale: str = "auto", device: str = "auto") -> str:
    """"cpu" or "paper": "auto" is "paper" only where the model trains on a CUDA GPU (``device``: the compute
    setting, whose "auto" takes a GPU when there is one), since the paper's 30-block model is about 20x slower."""
    if scale not in SCALES:
        raise SettingsError(f"scale must be one of {list(SCALES)}, got scale = {scale!r}")
    if scale != "auto":
        return scale
    if not (device == "auto" or device.startswith("cuda")):
        return "cpu"
    import torch

    return "paper" if torch.cuda.is_available() else "cpu"


@dataclass(frozen=True)
class LMSettings(Settings):
    """How the language model is built (saved with a fitted synthesizer)."""

    model: str = setting("smollm2", kind="text", help="'smollm2' or a local Hugging Face causal-LM folder")
    layers: int | None = setting(None, kind="integer", low=1, none=True, none_means="every block",
                                 help="keep only the first k transformer blocks (a scaled model)")
    finetune: str = setting("lora", kind="choice", choices=("lora", "full"),
                            help="lora (adapters, and the output layer) or full fine-tuning")
    lora_rank: int = setting(8, kind="integer", low=1, help="LoRA rank")
    lora_alpha: float = setting(16.0, low=0, open_low=True, help="LoRA scaling alpha")
    lora_targets: tuple[str, ...] = LORA_TARGETS  # module names that get adapters (those present in the model)
    train_head: bool = setting(True, kind="flag", help="with LoRA: also train the (schema) output layer")
    vocab: str = setting("schema", kind="choice", choices=("schema", "full"),
                         help="output layer over the schema's public tokens (schema) or the whole vocabulary")

    def __post_init__(self) -> None:
        object.__setattr__(self, "lora_targets", tuple(self.lora_targets))
        super().__post_init__()
        if not self.lora_targets or not all(isinstance(t, str) and t for t in self.lora_targets):
            raise SettingsError(f"lora_targets must be module names, got lora_targets = {self.lora_targets!r}")


@dataclass(frozen=True)
class StageSettings(Settings):
    """Stage 1: ordinary (non-private) training on PUBLIC rows, pseudo rows or a public table. Nothing
    here reads the private table, so nothing here is a privacy parameter."""

    epochs: float = setting(5.0, low=0, open_low=True, cli="stage1_epochs",
                            help="stage-1 epochs over the public rows (pseudo rows or the public table)")
    batch_size: int = setting(32, kind="integer", low=1, cli="stage1_batch_size", help="stage-1 batch size")
    lr: float = setting(1e-3, low=0, open_low=True, cli="stage1_lr", help="stage-1 learning rate (Adam)")
    max_physical_batch: int = setting(64, kind="integer", low=1, cli="stage1_max_physical_batch",
                                      help="stage-1 rows per forward/backward pass (memory only)")


@dataclass(frozen=True)
class Stage2Settings(Settings):
    """Stage 2's own knobs; its DP settings (epsilon, clipping, batch, epochs...) are ``SynthSettings.dp``."""

    lr: float = setting(1e-3, low=0, open_low=True, help="stage-2 (DP) learning rate (Adam)")
    max_physical_batch: int = setting(64, kind="integer", low=1,
                                      help="stage-2 rows per forward/backward pass (memory only, not the batch)")


def _default_dp() -> DPSettings:
    return DPSettings(epsilon=1.0, batch_size=32, epochs=10.0, clip_norm=1.0)


@dataclass(frozen=True)
class SynthSettings(Settings):
    """Settings of a :class:`~dpcare.synth.Synthesizer` (and of ``dpcare synth fit``).

    ``dp`` are the DP settings of stage 2; its epsilon is the target of the whole fit (a DP range
    estimate for a column without declared bounds, ``stats_epsilon``, is part of it). In ``non-private``
    mode nothing is private: epsilon, delta, the accountant and clipping do not apply (adaptive clipping
    is refused), batch size, epochs / steps and the seed do."""

    mode: str = setting("dp-2stage-u", kind="choice", choices=MODES,
                        help="dp-2stage-u (stage 1 on uniform pseudo rows from the spec), dp-2stage-o (stage 1 on "
                             "a public table), dp-standard (stage 2 only) or non-private")
    lam: float | None = setting(0.65, low=0, high=1, none=True, none_means="the plain LM loss",
                                help="stage-2 weight of value tokens (Eq. 6); key and other tokens get 1 - lam")
    order: str = setting("target-first", kind="choice", choices=ORDERS,
                         help="column order of a serialised row: target first, target last, or shuffled per row")
    decimals: int = setting(2, kind="integer", low=0, high=12, help="decimals written for numbers")
    pseudo_rows: int | None = setting(None, kind="integer", low=1, none=True,
                                      none_means="as many as the private table",
                                      help="dp-2stage-u: stage-1 pseudo rows")
    stats_epsilon: float = setting(0.1, low=0, open_low=True,
                                   help="epsilon (inside --epsilon) of the DP range estimate of a numeric column "
                                        "whose bounds the spec does not declare")
    lm: LMSettings = field(default_factory=LMSettings)
    stage1: StageSettings = field(default_factory=StageSettings)
    stage2: Stage2Settings = field(default_factory=Stage2Settings)
    dp: DPSettings = field(default_factory=_default_dp)
    compute: ComputeSettings = field(default_factory=ComputeSettings)  # device, precision, processes

    def __post_init__(self) -> None:
        super().__post_init__()
        require_unit(self.dp, "example", "the synthesizer protects rows (a table with several rows per patient needs "
                                         "one row per patient)")
        if self.mode == "non-private" and self.dp.adaptive_clip is not None:
            raise SettingsError("adaptive_clip is a private mechanism: non-private mode clips nothing; leave it unset")

    @property
    def private(self) -> bool:
        return self.mode != "non-private"

    @classmethod
    def for_device(cls, scale: str = "auto", **fields: Any) -> SynthSettings:
        """Settings sized for the machine: ``scale`` "auto" (the CPU scale unless the model trains on a
        GPU), "cpu" or "paper". ``lm``, ``stage1``, ``stage2`` and ``dp`` may be settings objects (used as
        they are) or dicts merged over the scale's defaults, where None means "the scale's default"; the
        fields of DPSettings may also be given as keywords (``epsilon=1.0`` for ``dp={"epsilon": 1.0}``)."""
        compute = fields.get("compute")
        device = (compute.device if isinstance(compute, ComputeSettings)
                  else (compute or {}).get("device") or "auto")
        size = SIZES[resolve_scale(scale, device)]
        dp_names = {f.name for f in dataclasses.fields(DPSettings)}
        flat = {k: fields.pop(k) for k in list(fields) if k in dp_names}
        if flat:
            if isinstance(fields.get("dp"), DPSettings):
                raise SettingsError(f"pass the DP settings either as dp= or as keywords {sorted(flat)}, not both")
            fields["dp"] = {**(fields.get("dp") or {}), **flat}
        known = {f.name: f for f in dataclasses.fields(cls)}
        unknown = sorted(set(fields) - set(known))
        if unknown:
            raise SettingsError(f"unknown settings {unknown} for SynthSettings; known: {sorted(set(known) | dp_names)}")
        for name in ("lm", "stage1", "stage2", "dp", "compute"):  # a dict (e.g. to_dict()'s) becomes settings
            given = fields.get(name)
            if dataclasses.is_dataclass(given):
                continue
            base = known[name].default_factory()
            chosen = {k: v for k, v in (given or {}).items() if v is not None}
            fields[name] = from_dict(type(base), {**to_dict(base), **size.get(name, {}), **chosen})
        return cls(**fields)

    def scale_name(self) -> str:
        """"cpu" or "paper" when every field a scale sets is that scale's, else "custom"."""
        for name, size in SIZES.items():
            if all(getattr(getattr(self, part), k) == v for part, values in size.items() for k, v in values.items()):
                return name
        return "custom"


# --------------------------------------------------------------------------- AIM
def _dp_rule(name: str) -> dataclasses.Field:
    """A field declared exactly as DPSettings declares ``name`` (same checks, help and error)."""
    default = next(f.default for f in dataclasses.fields(DPSettings) if f.name == name)
    return dataclasses.field(default=default, metadata={"rule": rules(DPSettings)[name]})


@dataclass(frozen=True)
class AIMSettings(Settings):
    """Settings of an :class:`~dpcare.synth.aim.AIMSynthesizer` (and of ``dpcare synth fit --synthesizer aim``)."""

    epsilon: float = _dp_rule("epsilon")
    delta: float | None = _dp_rule("delta")
    seed: int = setting(0, kind="integer", help="public seed of the hold-out split and of sampling (AIM's noise and "
                                                "selections never use it)")
    bins: int = setting(20, kind="integer", low=2, help="equal-width bins of each numeric column between its "
                                                        "declared bounds (log1p scale where the spec says so)")
    max_model_size: float = setting(80.0, low=0, open_low=True,
                                    help="AIM's limit on its graphical model, in MB (AIM's own default: 80)")


__all__ = ["LORA_TARGETS", "MODES", "ORDERS", "SCALES", "SIZES", "AIMSettings", "LMSettings", "Stage2Settings",
           "StageSettings", "SynthSettings", "resolve_scale"]
