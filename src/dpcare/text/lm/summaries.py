"""Summaries written by a fine-tuned causal LM (greedy decoding of the summarisation prompt of
:func:`dpcare.text.lm.finetune.summary_prompt`), and identifiers masked in them; their ROUGE-L against the
notes' reference summaries is :func:`dpcare.text.lm.scoring.score_summaries`."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from dpcare.exceptions import SettingsError
from dpcare.text.lm.finetune import summary_prompt


@torch.no_grad()
def write_summary(model: nn.Module, tokenizer, source: str, max_new_tokens: int = 96) -> str:
    """Greedy continuation of the summarisation prompt of ``source`` (a hospital course), up to EOS or
    ``max_new_tokens`` tokens, stripped."""
    if max_new_tokens < 1:
        raise SettingsError(f"max_new_tokens must be >= 1, got {max_new_tokens}")
    ids = tokenizer(summary_prompt(source), add_special_tokens=False, return_tensors="pt")["input_ids"]
    device = next(model.parameters()).device
    was_training = model.training
    model.eval()
    try:
        out = model.generate(input_ids=ids.to(device), attention_mask=torch.ones_like(ids, device=device),
                             max_new_tokens=max_new_tokens, do_sample=False, num_beams=1,
                             eos_token_id=tokenizer.eos_token_id,
                             pad_token_id=tokenizer.pad_token_id or tokenizer.eos_token_id)
    finally:
        model.train(was_training)
    return tokenizer.decode(out[0, ids.shape[1]:], skip_special_tokens=True).strip()


def mask_identifiers(texts: Sequence[str], masker) -> tuple[list[str], int]:
    """``texts`` (generated summaries) with every span the masker finds (names, dates, record numbers, phones,
    places...) replaced by its typed placeholder, and the number of spans replaced: a fine-tuned model copies
    identifiers from the notes it reads into what it writes. Empty texts are kept as they are."""
    kept = [i for i, t in enumerate(texts) if t.strip()]
    found = masker.find_many([texts[i] for i in kept], [f"summary {i}" for i in kept], show_progress=False)
    out, count = list(texts), 0
    for i, spans in zip(kept, found):
        text = texts[i]
        for span in sorted(spans, key=lambda s: s.start, reverse=True):
            text = text[:span.start] + masker.placeholder.format(label=span.label) + text[span.end:]
        out[i] = text
        count += len(spans)
    return out, count

