"""Fine-tuning a causal LM on clinical notes through the DP engine (Lopez and Hill, Section 4.1):
generative NER and summarisation, in four modes.

* ``non-private``: every parameter, ordinary training, no ledger (the paper's upper bound).
* ``dp-full``: every parameter, DP-SGD.
* ``dp-lora``: peft LoRA adapters (rank 8, alpha 16, no dropout) on the attention query and value
  projections, the rest frozen. Llama-style models (SmolLM2): ``q_proj`` and ``v_proj``. GPT-2 has one fused
  query-key-value projection ``c_attn`` (a Conv1D): the adapter goes on ``c_attn``, so one rank-8 update
  of the fused [d, 3d] weight also reaches the keys (peft cannot adapt a slice of a fused layer).
* ``dp-prefix``: peft prefix tuning (``prefix_tokens`` virtual tokens, no reparametrisation): only the
  prefix embedding (keys and values of every layer) is trained.

Every mode runs on the engine's fast clipping backend: LoRA's factors are ``nn.Linear`` layers, the
prefix is an ``nn.Embedding`` called with the indices 0..k-1 for every example (the embedding rule gives
its exact per-example gradient), and the full modes UNTIE the output layer from the input embeddings (a
copy of the tied matrix, trained separately; the fast backend refuses a parameter shared by two layers)
and pass per-row position ids so GPT-2's position embedding sees the batch dimension.

Examples (:func:`make_examples`): NER windows of the note (:mod:`dpcare.text.lm.generative_ner`), or one
summarisation pair per note (prompt: the hospital course; target: the discharge diagnoses and summary).
Rows are prompt tokens, target tokens and EOS, right-padded, with an attention mask. The loss of a row
is the MEAN next-token NLL over its target tokens and EOS (``reduction="sum"``: their sum), so a
window's gradient does not grow with the length of its entity list. The privacy unit is the PATIENT:
every window of every note of a patient carries the patient's group id for ``Trainer.fit(groups=...)``;
``batch_size`` is the expected number of patients per step. Non-private training samples rows, with as
many rows per step as the private modes expect (``batch_size`` x rows per patient) and as many steps.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from enum import Enum

import torch
from torch import Tensor, nn

from dpcare.caller import user_stacklevel
from dpcare.engine.adaptive_clip import AdaptiveClip
from dpcare.engine.initialisation import seeded_initialisation
from dpcare.engine.objective import Objective
from dpcare.engine.trainer import TrainConfig, Trainer
from dpcare.exceptions import (
    DataError,
    PrivacyParameterError,
    SettingsError,
    SpecError,
    UnknownNameError,
)
from dpcare.lm import load_causal_lm, trim_right_padding
from dpcare.privacy import (
    NEIGHBOURING,
    Guarantee,
    ProtectedUnit,
    check_delta,
    check_epsilon,
    default_delta,
)
from dpcare.settings import ComputeSettings, DPSettings
from dpcare.text.lm.generative_ner import ner_prompt, ner_target, note_windows, spans_in
from dpcare.text.lm.prefix_init import check_prefix_init, init_prefix_from_text, public_prefix_text
from dpcare.text.lm.settings import CLIP_VARIANTS, FinetuneSettings, starting_lr
from dpcare.text.spans import ENTITY_LABELS, Note
from dpcare.token_loss import token_nll

TASKS = ("ner", "summarisation")
#: LoRA targets of the query and value projections, by architecture; the first family present is used
QV_TARGETS = (("q_proj", "v_proj"), ("c_attn",), ("query_key_value",), ("query", "value"))
SUMMARY_INSTRUCTION = "Summarise the hospital course: list the discharge diagnoses, then a short summary."


#: clip-norm variants: the fixed setting, adaptive clipping at the median throughout training, and a private
#: warm-up to the 80th percentile with C frozen afterwards (the paper's recipe made private)
#: std of the noise on the clip count: the paper's default (expected batch / 20) is for batches of hundreds; with
#: a few patients per step it would leave the split accounting (2 sigma_b > sigma) nothing for the gradient
COUNT_NOISE = 2.0


def adaptive_clip(variant: str, quantile: float | None = None) -> AdaptiveClip | None:
    """The :class:`~dpcare.engine.adaptive_clip.AdaptiveClip` of a clip variant (None: the fixed clip norm), or
    of the generic ``quantile`` (``DPSettings.adaptive_clip``) with the fixed variant."""
    if variant == "fixed":
        return None if quantile is None else AdaptiveClip(target_quantile=quantile, lr=0.2, count_noise=COUNT_NOISE)
    if variant == "adaptive-median":
        return AdaptiveClip(target_quantile=0.5, lr=0.2, count_noise=COUNT_NOISE)
    if variant == "warmup-p80":
        return AdaptiveClip(target_quantile=0.8, lr=0.3, count_noise=COUNT_NOISE, warmup_steps=10,
                            freeze_after_warmup=True)
    raise UnknownNameError(f"unknown clip variant {variant!r}; choose from {list(CLIP_VARIANTS)}")


class FinetuneMode(str, Enum):
    NON_PRIVATE = "non-private"
    DP_FULL = "dp-full"
    DP_LORA = "dp-lora"
    DP_PREFIX = "dp-prefix"

    @property
    def private(self) -> bool:
        return self is not FinetuneMode.NON_PRIVATE

    @classmethod
    def parse(cls, mode: str | FinetuneMode) -> FinetuneMode:
        try:
            return cls(mode)
        except ValueError:
            raise UnknownNameError(f"unknown fine-tuning mode {mode!r}; choose one of "
                                   f"{[m.value for m in cls]}") from None


# --------------------------------------------------------------------------- modes
def qv_targets(model: nn.Module) -> list[str]:
    """Names of the attention query and value projections of ``model`` (see QV_TARGETS)."""
    names = {n.rsplit(".", 1)[-1] for n, _ in model.named_modules()}
    for family in QV_TARGETS:
        if set(family) <= names:
            return list(family)
    raise SpecError(f"{type(model).__name__}: no attention query/value projections among the known names "
                    f"{[t for f in QV_TARGETS for t in f]}")


def untie_output(model: nn.Module) -> None:
    """Give the output layer its own copy of the tied input embeddings."""
    out, emb = model.get_output_embeddings(), model.get_input_embeddings()
    if out is not None and out.weight is emb.weight:
        out.weight = nn.Parameter(emb.weight.detach().clone())
    model.config.tie_word_embeddings = False


def apply_mode(model: nn.Module, mode: str | FinetuneMode, lora_rank: int = 8, lora_alpha: float = 16.0,
               prefix_tokens: int = 10) -> nn.Module:
    """``model`` (a Hugging Face causal LM) set up for ``mode``: the model itself with every parameter
    trainable and an untied output layer, or a peft wrapper training only the adapters or the prefix."""
    mode = FinetuneMode.parse(mode)
    if mode in (FinetuneMode.NON_PRIVATE, FinetuneMode.DP_FULL):
        untie_output(model)
        for p in model.parameters():
            p.requires_grad_(True)
        return model
    from peft import LoraConfig, PrefixTuningConfig, TaskType, get_peft_model

    if mode is FinetuneMode.DP_LORA:
        conv1d = any(type(m).__name__ == "Conv1D" for m in model.modules())  # GPT-2 stores [in, out]
        config = LoraConfig(task_type=TaskType.CAUSAL_LM, r=lora_rank, lora_alpha=lora_alpha, lora_dropout=0.0,
                            target_modules=qv_targets(model), fan_in_fan_out=conv1d)
    else:
        config = PrefixTuningConfig(task_type=TaskType.CAUSAL_LM, num_virtual_tokens=prefix_tokens)
    with warnings.catch_warnings():  # transformers' deprecation notice, raised inside peft
        warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing", category=FutureWarning)
        return get_peft_model(model, config)


# --------------------------------------------------------------------------- examples
@dataclass(frozen=True)
class Example:
    """One training row: ``prompt`` and ``target`` texts of a note (``offset``: the window's first
    character in the note, NER only)."""

    note_id: str
    patient_id: str
    prompt: str
    target: str
    offset: int = 0


def ner_examples(notes: Iterable[Note], tokenizer, labels: Sequence[str] = ENTITY_LABELS, window: int | None = 256,
                 stride: int | None = 128) -> list[Example]:
    """One example per window of each note: its text in the prompt, its entities (spans of ``labels`` among
    the note's entities and PHI) as the target."""
    out = []
    for note in notes:
        spans = [s for s in (*note.entities, *note.phi) if s.label in labels]
        for start, end in note_windows(note.text, tokenizer, window, stride, spans, f"note {note.note_id!r}"):
            out.append(Example(note.note_id, note.patient_id, ner_prompt(note.text[start:end], labels),
                               ner_target(spans_in(spans, start, end)), start))
    return out


def summary_prompt(source: str) -> str:
    return f"{SUMMARY_INSTRUCTION}\nHospital course:\n{source}\nSummary:"


def summary_examples(notes: Iterable[Note]) -> list[Example]:
    """One example per note with a summarisation pair (notes without one are skipped)."""
    return [Example(n.note_id, n.patient_id, summary_prompt(n.summary_source), " " + n.summary_target)
            for n in notes if n.summary_source.strip() and n.summary_target.strip()]


def make_examples(notes: Iterable[Note], task: str, tokenizer, labels: Sequence[str] = ENTITY_LABELS,
                  window: int | None = 256, stride: int | None = 128) -> list[Example]:
    """The rows of ``task`` ("ner" or "summarisation"); a DataError when there are none."""
    if task not in TASKS:
        raise UnknownNameError(f"unknown task {task!r}; choose one of {list(TASKS)}")
    examples = (ner_examples(notes, tokenizer, labels, window, stride) if task == "ner"
                else summary_examples(notes))
    if not examples:
        raise DataError(f"no {task} examples: no notes" + (" with a summarisation pair" if task != "ner" else ""))
    return examples


def encode(examples: Sequence[Example], tokenizer, max_tokens: int | None = None) -> dict[str, Tensor]:
    """Right-padded rows ``ids``, attention ``mask`` and ``loss_mask`` (1 on the target tokens and EOS)."""
    rows, weights = [], []
    for ex in examples:
        prompt = tokenizer(ex.prompt, add_special_tokens=False)["input_ids"]
        target = tokenizer(ex.target, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
        if max_tokens is not None and len(prompt) + len(target) > max_tokens:
            raise DataError(f"note {ex.note_id!r}: a row of {len(prompt) + len(target)} tokens exceeds the "
                            f"model's {max_tokens} positions (use a smaller window)")
        rows.append(prompt + target)
        weights.append([0] * len(prompt) + [1] * len(target))
    width = max(map(len, rows))
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    data = {"ids": torch.full((len(rows), width), pad, dtype=torch.long),
            "mask": torch.zeros(len(rows), width, dtype=torch.long),
            "loss_mask": torch.zeros(len(rows), width, dtype=torch.long)}
    for i, (row, w) in enumerate(zip(rows, weights)):
        data["ids"][i, :len(row)] = torch.tensor(row)
        data["mask"][i, :len(row)] = 1
        data["loss_mask"][i, :len(row)] = torch.tensor(w)
    return data


def patient_groups(examples: Sequence[Example]) -> Tensor:
    """One integer per row: the index of its patient (every window of every note of a patient shares it)."""
    ids = {p: i for i, p in enumerate(sorted({ex.patient_id for ex in examples}))}
    return torch.tensor([ids[ex.patient_id] for ex in examples], dtype=torch.long)


# --------------------------------------------------------------------------- objective
class TargetLoss(Objective):
    """Per-row next-token NLL over the target tokens (mean, or sum). ``positions``: pass per-row position
    ids (off for prefix tuning, whose positions start after the prefix)."""

    private_keys = ("ids", "mask", "loss_mask")

    def __init__(self, private: bool = True, positions: bool = True, reduction: str = "mean"):
        if reduction not in ("mean", "sum"):
            raise UnknownNameError(f"reduction must be 'mean' or 'sum', got {reduction!r}")
        self.private, self.positions, self.reduction = private, positions, reduction
        self.name = ("dp-" if private else "") + "target-lm"

    def private_loss(self, model, batch) -> Tensor:
        trimmed, batched = trim_right_padding({k: batch[k] for k in self.private_keys}, batch["mask"])
        ids, mask, weights = (trimmed[k] for k in self.private_keys)
        # logits only from the position before the first target token on (saves the prompt's logits)
        first = 1 if batched else max(1, int(weights.float().argmax(1).min()))
        # rows are right-padded and attention is causal, so no real token sees padding: the mask changes
        # nothing, and under torch.func it is left out (transformers inspects its values)
        kw = {"attention_mask": None if batched else mask, "logits_to_keep": ids.shape[1] - first + 1}
        if self.positions:
            kw["position_ids"] = torch.arange(ids.shape[1], device=ids.device).expand(ids.shape[0], -1)
        logits = model(input_ids=ids, **kw).logits[:, :-1]
        nll = token_nll(logits, ids[:, first:])
        w = weights[:, first:].to(nll.dtype)
        total = (nll * w).sum(1)
        return total / w.sum(1).clamp(min=1) if self.reduction == "mean" else total


# --------------------------------------------------------------------------- training
def finetune_with(notes: Iterable[Note], settings: FinetuneSettings, checkpoint_dir: str | None = None,
                  progress: bool = False, max_physical_batch: int = 8):
    """:func:`finetune` with a :class:`~dpcare.text.lm.settings.FinetuneSettings` (what ``dpcare text finetune``
    runs)."""
    s, dp = settings, settings.dp
    if s.tagger:  # an encoder: the BIO token tagger (the default for ner)
        from dpcare.text.lm.token_ner import finetune_tagger

        return finetune_tagger(notes, s.mode, epsilon=dp.epsilon if s.private else None,
                               delta=dp.delta if s.private else None, model=s.resolved_model, epochs=dp.epochs,
                               batch_size=dp.batch_size, lr=s.resolved_lr, clip_norm=dp.clip_norm, seed=dp.seed,
                               noise_seed=dp.noise_seed, window=s.resolved_window, stride=s.resolved_stride or None,
                               max_physical_batch=max_physical_batch, accountant=dp.accountant,
                               checkpoint_dir=checkpoint_dir, progress=progress,
                               adaptive_clip=adaptive_clip(s.clip_variant, dp.adaptive_clip), device=s.compute.device,
                               precision=s.compute.precision, hints=s.resolved_hints, prefix_init=s.prefix_init)
    return finetune(notes, s.task, s.mode, epsilon=dp.epsilon if s.private else None,
                    delta=dp.delta if s.private else None, model=s.resolved_model, layers=s.layers or None,
                    epochs=dp.epochs, batch_size=dp.batch_size, lr=s.resolved_lr, clip_norm=dp.clip_norm, seed=dp.seed,
                    noise_seed=dp.noise_seed,
                    checkpoint_dir=checkpoint_dir, progress=progress, window=s.resolved_window,
                    stride=s.resolved_stride or None,
                    max_physical_batch=max_physical_batch, accountant=dp.accountant,
                    adaptive_clip=adaptive_clip(s.clip_variant, dp.adaptive_clip), prefix_init=s.prefix_init,
                    device=s.compute.device, precision=s.compute.precision)


def plan(settings: FinetuneSettings, patients: int) -> Guarantee | None:
    """The guarantee a run will state, from the settings and the public patient count (None: non-private); an
    expected batch of every patient (no amplification by sampling) is refused before any work."""
    if not settings.private:
        return None
    dp = settings.dp
    if dp.batch_size >= patients:
        raise SettingsError(f"--batch-size {dp.batch_size} expected patients a step, but the notes hold {patients} "
                            "patients: every step would read every patient (sampling amplifies nothing); pass "
                            f"--batch-size below {patients} (a tenth to a quarter of them)")
    delta = check_delta(dp.delta, patients) if dp.delta is not None else default_delta(patients)
    return Guarantee(epsilon=dp.epsilon, delta=delta, n=patients, accountant=dp.accountant, unit=ProtectedUnit.PATIENT,
                     neighbouring=NEIGHBOURING[ProtectedUnit.PATIENT])


def engine_settings(mode: FinetuneMode, epsilon: float | None, delta: float | None, accountant: str, epochs: float,
                    batch_size: int, clip_norm: float, seed: int, noise_seed: int | None) -> DPSettings:
    """The engine's DP settings from a fine-tuning function's arguments (the patient is the unit of the private
    modes; the non-private mode reads only the schedule)."""
    privacy = {"epsilon": epsilon, "delta": delta, "unit": "patient"} if mode.private else {}
    return DPSettings.rebuilt(accountant=accountant, epochs=epochs, batch_size=batch_size, clip_norm=clip_norm,
                              seed=seed, noise_seed=noise_seed, **privacy)


def check_mode_privacy(mode: FinetuneMode, epsilon: float | None, delta: float | None) -> None:
    """A private mode needs a valid target epsilon; non-private training takes neither epsilon nor delta."""
    if mode.private:
        if epsilon is None:
            raise PrivacyParameterError(f"{mode.value} needs a target epsilon")
        check_epsilon(epsilon)
    elif epsilon is not None or delta is not None:
        raise PrivacyParameterError("non-private training takes no epsilon or delta")


def check_adaptive_clip(mode: FinetuneMode, adaptive_clip: AdaptiveClip | None) -> None:
    """Adaptive clipping is a private mechanism: refused in non-private mode; its settings are checked."""
    if adaptive_clip is None:
        return
    if not mode.private:
        raise PrivacyParameterError("adaptive clipping applies to the private modes only (non-private training "
                                    "does not clip)")
    adaptive_clip.validate()


def finetune(notes: Iterable[Note], task: str = "ner", mode: str | FinetuneMode = "dp-lora",
             epsilon: float | None = None, delta: float | None = None, model: str = "smollm2",
             layers: int | None = None, epochs: float = 3.0, batch_size: int = 16, lr: float | None = None,
             clip_norm: float = 1.0, seed: int = 0, noise_seed: int | None = None, checkpoint_dir: str | None = None,
             progress: bool = False,
             labels: Sequence[str] = ENTITY_LABELS, window: int | None = 256, stride: int | None = 128,
             lora_rank: int = 8, lora_alpha: float = 16.0, prefix_tokens: int = 10, reduction: str = "mean",
             max_physical_batch: int = 8, accountant: str = "pld", adaptive_clip: AdaptiveClip | None = None,
             device: str = "auto", precision: str = "fp32", prefix_init: str = "text"):
    """Fine-tune ``model`` ("smollm2" or a local Hugging Face folder; ``layers``: keep the first k blocks) on
    ``task`` in ``mode``. Returns (model, tokenizer, info); ``info["guarantee"]`` names the PATIENT as the
    protected unit (None in non-private mode, which has no ledger). ``lr=None``:
    :func:`~dpcare.text.lm.settings.starting_lr` of the mode and task; ``accountant``: "pld" or "rdp" (the
    ledger's); ``adaptive_clip``: private adaptive clipping of the per-patient norms (``clip_norm`` is then the
    initial C; private modes only, see docs/adaptive-clipping.md);
    ``device`` / ``precision``: where the engine trains (:mod:`dpcare.engine.devices`); ``prefix_init``
    (dp-prefix): "text", the keys and values of the task's PUBLIC instruction (:mod:`dpcare.text.lm.prefix_init`,
    no budget), or "random", peft's own initialisation. ``seed``: public (initialisation, dropout);
    ``noise_seed``: the secret root of the private sampling and noise (None: fresh OS entropy)."""
    mode = FinetuneMode.parse(mode)
    check_mode_privacy(mode, epsilon, delta)
    check_adaptive_clip(mode, adaptive_clip)
    check_prefix_init(prefix_init)
    notes = list(notes)
    if task == "ner" and notes and not any(n.entities for n in notes):
        warnings.warn(f"none of the {len(notes)} training notes carries a gold entity: the NER model can only "
                      "learn to answer with an empty list", stacklevel=user_stacklevel())
    causal, tokenizer = load_causal_lm(model, layers)
    prefix = mode is FinetuneMode.DP_PREFIX
    examples = make_examples(notes, task, tokenizer, labels, window, stride)
    data = encode(examples, tokenizer, _max_positions(causal, prefix_tokens if prefix else 0))
    groups = patient_groups(examples)
    patients, rows = int(groups.max()) + 1, len(examples)
    objective = TargetLoss(mode.private, positions=not prefix, reduction=reduction)
    config = TrainConfig(dp=engine_settings(mode, epsilon, delta, accountant, epochs, batch_size, clip_norm, seed,
                                            noise_seed),
                         compute=ComputeSettings(device=device, precision=precision),
                         lr=starting_lr(mode.value, task, tagger=False) if lr is None else lr,
                         checkpoint_dir=checkpoint_dir,
                         progress=progress, max_physical_batch=max_physical_batch, adaptive_clip=adaptive_clip)
    config.validate(objective)
    with seeded_initialisation(seed):  # the adapters (or the random prefix) from the public seed
        net = apply_mode(causal, mode, lora_rank, lora_alpha, prefix_tokens)
    if prefix and prefix_init == "text":  # public text and public weights: reads no note, charged nothing
        init_prefix_from_text(net, tokenizer, public_prefix_text(task, labels))
    if mode.private:
        # the trainer's ledger: the settings' delta and accountant, the patients sampled from
        result = Trainer(net, objective, config).fit(data, groups=groups)
    else:  # rows, as many per step (expected) and as many steps as the private modes
        config = config.with_schedule(batch_size=max(1, round(batch_size * rows / patients)),
                                      steps=math.ceil(epochs * patients / batch_size))
        result = Trainer(net, objective, config).fit(data)
    info = {
        "kind": "causal-lm", "task": task, "mode": mode.value, "model": str(model), "layers": layers, "lora_rank": lora_rank,
        "lora_alpha": lora_alpha, "prefix_tokens": prefix_tokens, "prefix_init": prefix_init if prefix else None,
        "labels": list(labels), "window": window,
        "stride": stride, "patients": patients, "lr": config.lr,
        "notes": len({e.note_id for e in examples}), "rows": rows,
        **training_info(net, result, adaptive_clip),
    }
    return net, tokenizer, info


def training_info(net: nn.Module, result, adaptive_clip: AdaptiveClip | None) -> dict:
    """What a fine-tuning run's ``info`` says of its training (for the causal LM and the token tagger alike): the
    trainable parameter count, steps, sampling rate, noise multipliers, clip norm, history, and the guarantee and
    ledger (None without privacy)."""
    g = result.guarantee
    return {
        "trainable_parameters": sum(p.numel() for p in net.parameters() if p.requires_grad),
        "steps": result.steps, "sampling_rate": result.sampling_rate, "noise_multiplier": result.noise_multiplier,
        "gradient_noise_multiplier": result.gradient_noise_multiplier, "clip_norm": result.clip_norm,
        "adaptive_clip": asdict(adaptive_clip) if adaptive_clip else None,
        "backend": result.backend, "history": result.history, "guarantee": g.to_dict() if g else None,
        "guarantee_text": g.describe() if g else "no privacy guarantee (non-private fine-tuning)",
        "ledger": result.ledger.state_dict() if result.ledger else None,
    }


def _max_positions(model: nn.Module, reserved: int = 0) -> int | None:
    """Tokens a row may hold: the model's positions less ``reserved`` (a prefix's virtual tokens)."""
    cfg = model.config
    most = getattr(cfg, "n_positions", None) or getattr(cfg, "max_position_embeddings", None)
    return most - reserved if most else None
