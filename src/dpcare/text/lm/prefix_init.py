"""A prefix initialised from a real prompt (Li and Liang 2021, Prefix-Tuning, Section 7.2).

peft initialises the prefix of prefix tuning at random: every layer's attention then attends to 10 random
keys and values, which shifts the model far from the pre-trained one (the earlier one-seed DP-Prefix at
epsilon 3, docs/results/clinical-nlp.md: held-out perplexity 38 against 2.12 for the untouched model), and a
few noisy DP steps cannot undo it.
Li and Liang initialise the prefix with the ACTIVATIONS of real words instead: the frozen model reads a real
token sequence, and its per-layer keys and values become the initial prefix. The untrained prefix is then
a real prompt, and the model starts where the pre-trained model stands with that prompt in front.

:func:`init_prefix_from_text` does that for peft's prefix tuning without reparametrisation (what
:func:`dpcare.text.lm.finetune.apply_mode` builds): it runs the base model on the first k tokens of a text
(k = the virtual tokens; a shorter text is repeated, token by token, until it has k) with the cache on, and
writes each layer's keys and values into the prefix embedding in the layout ``PeftModel.get_prompt`` reads
back: the embedding's row j is ``view(num_layers * 2, kv_heads, head_dim)`` with entry 2l the keys and 2l+1
the values of layer l at token j. ``kv_heads`` are the key-value heads (peft sizes the prefix by
``num_key_value_heads`` for grouped-query attention, as SmolLM2's 3 of 9 heads), and the keys are stored
as the cache holds them: after the rotary embedding of positions 0..k-1 (Llama, SmolLM2) or computed from
the position embeddings of 0..k-1 (GPT-2).

Positions: dpcare's prefix rows put the first real token at position k (training leaves the position ids
to the model, which counts from the cache's length, k; decoding passes a row's own positions from 0 and peft
adds k), exactly where the same token stands after k real prompt tokens. So the text-initialised prefix
model computes EXACTLY what the base model computes on (prompt tokens + input), up to floating point
(tests/test_lm_prefix_init.py checks it for GPT-2 and a grouped-query Llama, in training and in decoding).

The text is PUBLIC: the task's own instruction (:func:`public_prefix_text`), never a note. The initial
prefix therefore depends on public text and the public base weights only; it reads no private record and
costs no privacy budget. Reloading a saved model (:func:`dpcare.text.lm.saved.load_finetuned`) copies the
trained prefix over whatever the prefix started as, so it needs no initialisation.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from dpcare.exceptions import DataError, SpecError, UnknownNameError

PREFIX_INITS = ("text", "random")


def check_prefix_init(name: str) -> None:
    """``name`` is one of PREFIX_INITS (an UnknownNameError lists them)."""
    if name not in PREFIX_INITS:
        raise UnknownNameError(f"unknown prefix initialisation {name!r}; choose one of {list(PREFIX_INITS)}")


def public_prefix_text(task: str, labels: Sequence[str] | None = None) -> str:
    """The public instruction of ``task``: what a text-initialised prefix reads (NER: the instruction of
    :func:`~dpcare.text.lm.generative_ner.ner_prompt` for ``labels``; summarisation: SUMMARY_INSTRUCTION)."""
    from dpcare.text.lm.finetune import SUMMARY_INSTRUCTION, TASKS
    from dpcare.text.lm.generative_ner import NOTE_HEADER, ner_prompt
    from dpcare.text.spans import ENTITY_LABELS

    if task == "ner":
        return ner_prompt("", ENTITY_LABELS if labels is None else labels).split(NOTE_HEADER, 1)[0]
    if task == "summarisation":
        return SUMMARY_INSTRUCTION
    raise SpecError(f"unknown task {task!r}; choose one of {list(TASKS)}")


def prefix_token_ids(tokenizer, text: str, k: int) -> list[int]:
    """The first ``k`` tokens of ``text`` (no special tokens); a shorter text is repeated until it has ``k``."""
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    if not ids:
        raise DataError(f"the prefix text {text!r} has no tokens")
    return [ids[i % len(ids)] for i in range(k)]


def _prefix_config(model: nn.Module):
    config = getattr(model, "active_peft_config", None)
    kind = getattr(getattr(config, "peft_type", None), "value", None)
    if kind != "PREFIX_TUNING":
        raise SpecError(f"{type(model).__name__} is not a peft prefix-tuning model (apply_mode(..., 'dp-prefix'))")
    if config.prefix_projection or config.num_transformer_submodules != 1:
        raise SpecError("only a prefix without reparametrisation on a decoder-only model can be initialised "
                        "from text (prefix_projection=False, one transformer submodule)")
    return config


def prefix_embedding(model: nn.Module) -> nn.Embedding:
    """The embedding that holds the prefix of a peft prefix-tuning ``model`` ([k, layers * 2 * kv_dim])."""
    _prefix_config(model)
    return model.prompt_encoder[model.active_adapter].embedding


@torch.no_grad()
def prompt_cache(base: nn.Module, ids: Sequence[int]) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """(keys, values) of every layer of ``base`` (a Hugging Face causal LM, run in eval mode) after reading
    ``ids`` from position 0: tensors [kv heads, len(ids), head dim] as its cache holds them."""
    device = next(base.parameters()).device
    was_training = base.training
    base.eval()  # no dropout in the activations that become the prefix
    try:
        out = base(input_ids=torch.tensor([list(ids)], device=device), use_cache=True)
    finally:
        base.train(was_training)
    cache = out.get("cache", None)
    if cache is None:  # transformers before 5 call it past_key_values
        cache = out.get("past_key_values", None)
    if cache is None:
        raise SpecError(f"{type(base).__name__} returned no cache")
    layers = getattr(cache, "layers", None)
    if layers is not None:
        return [(layer.keys[0], layer.values[0]) for layer in layers]
    return [(keys[0], values[0]) for keys, values in cache]  # the legacy tuple of (keys, values)


@torch.no_grad()
def init_prefix_from_text(model: nn.Module, tokenizer, text: str) -> list[int]:
    """Set the prefix of a peft prefix-tuning ``model`` to the keys and values of its base model reading the
    first k tokens of ``text`` (k: the virtual tokens; see the module docstring). Returns the k token ids.
    ``text`` must be public: the prefix it yields is released with the model and is charged nothing."""
    config = _prefix_config(model)
    k, n_layers = config.num_virtual_tokens, config.num_layers
    heads, head_dim = config.num_attention_heads, config.token_dim // config.num_attention_heads
    ids = prefix_token_ids(tokenizer, text, k)
    cache = prompt_cache(model.get_base_model(), ids)
    if len(cache) != n_layers:
        raise SpecError(f"the base model's cache has {len(cache)} layers, the prefix {n_layers}")
    weight = prefix_embedding(model).weight
    rows = weight.view(k, n_layers, 2, heads, head_dim)  # get_prompt: view(k, layers * 2, heads, dim)
    for layer, (keys, values) in enumerate(cache):
        if keys.shape != (heads, k, head_dim) or values.shape != keys.shape:
            raise SpecError(f"layer {layer}: the cache holds keys {tuple(keys.shape)}, the prefix expects "
                            f"{(heads, k, head_dim)} (key-value heads, tokens, head dimension)")
        rows[:, layer, 0] = keys.transpose(0, 1).to(weight.dtype)  # [k, heads, dim]
        rows[:, layer, 1] = values.transpose(0, 1).to(weight.dtype)
    return ids


__all__ = ["PREFIX_INITS", "check_prefix_init", "init_prefix_from_text", "prefix_embedding", "prefix_token_ids", "prompt_cache",
           "public_prefix_text"]
