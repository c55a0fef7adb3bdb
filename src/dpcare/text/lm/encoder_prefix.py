"""Prefix tuning for the BERT-architecture token tagger (Li and Liang 2021), built here.

peft's prefix tuning hands the prefix to the model as ``past_key_values``; BERT's encoder in transformers 5
takes no cache (peft 0.21 refuses: "Model does not support past key values which are required for prefix
tuning"). :class:`PrefixTagger` does the same thing inside the attention instead: every self-attention layer l
attends to k trained keys and values (P_l^K, P_l^V) before the note's own. Queries come from the note's pieces
only, so the output keeps the note's positions and the head tags them as before; a padding mask is widened by
k positions that every query may see. BERT adds its absolute positions to the input embeddings, so the prefix
has no position: as in Li and Liang's encoder experiments, it is a set of extra keys and values per layer.

Layout: one ``nn.Embedding`` [k, layers * 2 * hidden] read with the indices 0..k-1 for every row (peft's
layout without reparametrisation), so the engine's embedding rule clips it per patient like any other row
parameter. Trained: the prefix, the fresh classification head (a fresh head must learn, as in peft's prefix
tuning for token classification) and, with hints, the widened token-type rows; every encoder weight is frozen.

Initialisation ``"text"`` (the default): the frozen encoder reads a PUBLIC text (the label names,
:data:`PREFIX_TEXT`), and the keys and values of its first k pieces in every layer become the prefix, Li and
Liang's initialisation from real words (their Section 7.2); ``"random"``: N(0, 0.02) like BERT's weights.
Neither reads a note or spends budget.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from dpcare.exceptions import SpecError
from dpcare.text.lm.prefix_init import check_prefix_init, prefix_token_ids

#: what a text-initialised prefix reads: public words naming the task (the i2b2-2010 concept classes)
PREFIX_TEXT = "medical problem treatment test"
PREFIX_TOKENS = 10


def widened_mask(mask: Tensor | None, k: int) -> Tensor | None:
    """``mask`` (None, or a boolean / additive attention mask [..., keys]) with k leading keys every query sees."""
    if mask is None:
        return None
    seen = mask.new_ones(()) if mask.dtype == torch.bool else mask.new_zeros(())
    return torch.cat([seen.expand(*mask.shape[:-1], k), mask], dim=-1)


class PrefixedSelfAttention(nn.Module):
    """A BERT self-attention whose keys and values start with the prefix in ``prefix`` ([B, heads, k, head dim]
    each, set by :class:`PrefixTagger` for one forward)."""

    def __init__(self, inner: nn.Module):
        super().__init__()
        self.inner = inner
        self.prefix: tuple[Tensor, Tensor] | None = None

    def forward(self, hidden_states: Tensor, attention_mask: Tensor | None = None, **kwargs):
        from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS
        from transformers.models.bert.modeling_bert import eager_attention_forward

        if self.prefix is None:
            raise SpecError("a prefixed attention layer ran outside its PrefixTagger")
        for cache in ("cache", "past_key_values"):  # an encoder keeps no cache
            kwargs.pop(cache, None)
        a, shape = self.inner, (*hidden_states.shape[:-1], -1, self.inner.attention_head_size)
        query = a.query(hidden_states).view(shape).transpose(1, 2)
        keys, values = self.prefix
        key = torch.cat([keys, a.key(hidden_states).view(shape).transpose(1, 2)], dim=2)
        value = torch.cat([values, a.value(hidden_states).view(shape).transpose(1, 2)], dim=2)
        attend = ALL_ATTENTION_FUNCTIONS.get_interface(a.config._attn_implementation, eager_attention_forward)
        out, weights = attend(a, query, key, value, widened_mask(attention_mask, keys.shape[2]),
                              dropout=a.dropout.p if self.training else 0.0, scaling=a.scaling, **kwargs)
        return out.reshape(*hidden_states.shape[:-1], -1).contiguous(), weights


def _self_attentions(tagger: nn.Module) -> list[nn.Module]:
    encoder = getattr(tagger.base_model, "encoder", None)
    layers = list(getattr(encoder, "layer", []) or [])
    if not layers or not all(hasattr(layer, "attention") and hasattr(layer.attention, "self") for layer in layers):
        raise SpecError(f"{type(tagger).__name__} is not a BERT-architecture encoder: no encoder.layer[i]."
                        "attention.self to prefix")
    return [layer.attention for layer in layers]


class PrefixTagger(nn.Module):
    """A token tagger (a Hugging Face BERT-like ``ForTokenClassification``) with a trained prefix of ``tokens``
    keys and values in every self-attention layer; called like the tagger."""

    def __init__(self, tagger: nn.Module, tokens: int = PREFIX_TOKENS, start: Tensor | None = None):
        super().__init__()
        if tokens < 1:
            raise SpecError(f"a prefix needs at least 1 virtual token, got {tokens}")
        attentions = _self_attentions(tagger)
        cfg = tagger.config
        self.tokens, self.layers = tokens, len(attentions)
        self.heads, self.head_dim = cfg.num_attention_heads, cfg.hidden_size // cfg.num_attention_heads
        for attention in attentions:
            if not isinstance(attention.self, PrefixedSelfAttention):
                attention.self = PrefixedSelfAttention(attention.self)
        self.attentions = [a.self for a in attentions]  # a plain list: the modules stay registered once, in tagger
        self.tagger = tagger
        self.prefix = nn.Embedding(tokens, self.layers * 2 * cfg.hidden_size)
        nn.init.normal_(self.prefix.weight, std=getattr(cfg, "initializer_range", 0.02))
        if start is not None:
            with torch.no_grad():
                self.prefix.weight.copy_(start)
        self.register_buffer("prefix_ids", torch.arange(tokens), persistent=False)
        for name, p in tagger.named_parameters():
            p.requires_grad_(name.split(".")[0] == "classifier" or "token_type_embeddings" in name
                             and getattr(cfg, "dpcare_hints", None) is not None)

    @property
    def config(self):
        return self.tagger.config

    def forward(self, input_ids: Tensor, **kwargs):
        rows = self.prefix(self.prefix_ids.expand(input_ids.shape[0], -1))  # [B, k, layers * 2 * hidden]
        kv = rows.view(*rows.shape[:2], self.layers, 2, self.heads, self.head_dim).permute(2, 3, 0, 4, 1, 5)
        for attention, (keys, values) in zip(self.attentions, kv):  # [B, heads, k, head dim] each
            attention.prefix = (keys, values)
        try:
            return self.tagger(input_ids=input_ids, **kwargs)
        finally:
            for attention in self.attentions:
                attention.prefix = None


@torch.no_grad()
def text_start(tagger: nn.Module, tokenizer, tokens: int, text: str = PREFIX_TEXT) -> Tensor:
    """The prefix rows [tokens, layers * 2 * hidden] (:class:`PrefixTagger`'s layout) that hold the keys and values
    of the first ``tokens`` pieces of ``text`` in every self-attention layer of the plain (not yet prefixed)
    ``tagger``, run in eval mode. ``text`` must be PUBLIC: the start is released with the model, charged nothing."""
    ids = prefix_token_ids(tokenizer, text, tokens)
    attentions = _self_attentions(tagger)
    captured: dict[tuple[int, int], Tensor] = {}
    hooks = [linear.register_forward_hook(lambda m, i, o, at=(layer, kind): captured.__setitem__(at, o[0]))
             for layer, a in enumerate(attentions) for kind, linear in enumerate((a.self.key, a.self.value))]
    was_training = tagger.training
    tagger.eval()
    try:
        tagger(input_ids=torch.tensor([ids], device=next(tagger.parameters()).device))
    finally:
        for h in hooks:
            h.remove()
        tagger.train(was_training)
    rows = torch.stack([torch.stack([captured[layer, 0], captured[layer, 1]], 1) for layer in range(len(attentions))],
                       1)  # [tokens, layers, 2, hidden]
    return rows.reshape(tokens, -1)


def add_prefix(tagger: nn.Module, tokenizer, tokens: int = PREFIX_TOKENS, init: str = "text") -> PrefixTagger:
    """``tagger`` set up for dp-prefix: a :class:`PrefixTagger` of ``tokens`` virtual tokens initialised from
    :data:`PREFIX_TEXT` (``init="text"``) or at random (``"random"``: drawn from torch's generator, which the
    callers seed publicly)."""
    check_prefix_init(init)
    return PrefixTagger(tagger, tokens, text_start(tagger, tokenizer, tokens) if init == "text" else None)


__all__ = ["PREFIX_TEXT", "PREFIX_TOKENS", "PrefixTagger", "PrefixedSelfAttention", "add_prefix", "text_start",
           "widened_mask"]
