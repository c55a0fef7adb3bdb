"""The language model of a synthesizer: a local causal LM whose output layer is cut to the schema's tokens.

The tokens a serialised row can contain are public: the tokens of the column names,
separators, declared categories, "missing", and every token made only of digits,
".", "-" (numbers). Restricting the output layer to them (``vocab="schema"``) is a
data-independent choice that cuts the largest matrix product of a small LM (49k
outputs for SmolLM2) to a few hundred, without changing what can be written. The
new output layer starts from the pretrained output embeddings of those tokens and
is untied from the input embeddings. Perplexities are then over this vocabulary.

Fine-tuning: ``"lora"`` (peft adapters on the attention and MLP projections, plus
the output layer when ``train_head``) or ``"full"`` (every parameter).
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from dpcare.exceptions import SettingsError, SpecError
from dpcare.lm import load_causal_lm
from dpcare.synth.constraints import is_number_piece
from dpcare.synth.settings import LORA_TARGETS, LMSettings

__all__ = ["LORA_TARGETS", "LMSettings", "SynthLM", "build_lm", "number_token_ids", "trainable_state"]


def number_token_ids(tokenizer) -> list[int]:
    """Every vocabulary entry that decodes to digits, '.', '-' (with at most one leading space)."""
    return [i for i in range(len(tokenizer)) if is_number_piece(tokenizer.decode([i]))]


class SynthLM(nn.Module):
    """A decoder body and an output layer over ``token_ids`` (original ids, in output order).

    ``forward(ids)`` takes ORIGINAL token ids and returns logits over the output
    vocabulary; ``to_output`` / ``token_ids`` map between the two numberings.
    """

    def __init__(self, body: nn.Module, head: nn.Linear, token_ids: list[int], vocab_size: int):
        super().__init__()
        self.body, self.head = body, head
        self.register_buffer("token_ids", torch.tensor(token_ids, dtype=torch.long), persistent=False)
        index = torch.full((vocab_size,), -1, dtype=torch.long)
        index[self.token_ids] = torch.arange(len(token_ids))
        self.register_buffer("output_index", index, persistent=False)

    def to_output(self, ids: Tensor) -> Tensor:
        out = self.output_index[ids]
        if (out < 0).any():
            bad = sorted({int(i) for i in ids[out < 0]})[:10]
            raise SpecError(f"tokens {bad} are outside the model's output vocabulary (is the schema complete?)")
        return out

    def forward(self, ids: Tensor, attention_mask: Tensor | None = None, past_key_values=None,
                use_cache: bool = False):
        past = past_key_values.get_seq_length() if past_key_values is not None else 0
        # per-row positions (not a broadcast [1, S]) so position embeddings see the batch dimension
        positions = (past + torch.arange(ids.shape[1], device=ids.device)).expand(ids.shape[0], -1)
        out = self.body(input_ids=ids, attention_mask=attention_mask, position_ids=positions,
                        past_key_values=past_key_values, use_cache=use_cache)
        logits = self.head(out.last_hidden_state)
        return (logits, out.past_key_values) if use_cache else logits


def build_lm(settings: LMSettings, vocab_texts: list[str]) -> tuple[SynthLM, object]:
    """(model, tokenizer): ``vocab_texts`` are the public strings whose tokens the output layer must cover."""
    causal, tok = load_causal_lm(settings.model, settings.layers)
    body = causal.base_model
    if settings.vocab == "full":
        token_ids = list(range(len(tok)))
    else:
        wanted = set(number_token_ids(tok)) | {tok.eos_token_id}
        if tok.bos_token_id is not None:
            wanted.add(tok.bos_token_id)
        for text in vocab_texts:
            wanted.update(tok(text, add_special_tokens=False)["input_ids"])
        token_ids = sorted(wanted)
    emb = causal.get_output_embeddings().weight.detach()
    head = nn.Linear(emb.shape[1], len(token_ids), bias=False)
    with torch.no_grad():
        head.weight.copy_(emb[token_ids])
    model = SynthLM(body, head, token_ids, vocab_size=max(len(tok), emb.shape[0]))
    _set_trainable(model, settings)
    return model, tok


def _set_trainable(model: SynthLM, s: LMSettings) -> None:
    if s.finetune == "full":
        for p in model.parameters():
            p.requires_grad_(True)
        return
    from peft import LoraConfig, inject_adapter_in_model

    for p in model.parameters():
        p.requires_grad_(False)
    present = {n.rsplit(".", 1)[-1] for n, m in model.body.named_modules() if isinstance(m, nn.Linear)}
    targets = [t for t in s.lora_targets if t in present]
    if not targets:
        # GPT-2 uses Conv1D projections; peft handles them under the same names
        targets = [t for t in s.lora_targets if any(n.endswith("." + t) for n, _ in model.body.named_modules())]
    if not targets:
        raise SettingsError(f"none of the LoRA targets {list(s.lora_targets)} exist in this model")
    conv1d = any(type(m).__name__ == "Conv1D" for m in model.body.modules())  # GPT-2 stores weights as [in, out]
    config = LoraConfig(r=s.lora_rank, lora_alpha=s.lora_alpha, lora_dropout=0.0, target_modules=targets,
                        fan_in_fan_out=conv1d)
    inject_adapter_in_model(config, model.body)
    for n, p in model.body.named_parameters():
        p.requires_grad_("lora_" in n)
    model.head.weight.requires_grad_(s.train_head)


def trainable_state(model: nn.Module) -> dict[str, Tensor]:
    """The parameters that fine-tuning changes (all that is saved besides the settings)."""
    return {n: p.detach().clone() for n, p in model.named_parameters() if p.requires_grad} | {
        "head.weight": model.head.weight.detach().clone()}
