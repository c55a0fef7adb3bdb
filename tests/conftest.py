import os

os.environ.setdefault("OMP_NUM_THREADS", "1")

import pytest
import torch

torch.set_num_threads(1)


@pytest.fixture(scope="module")
def gpt2_folder(tmp_path_factory):
    """A tiny random GPT-2 saved as a local Hugging Face folder (path as str)."""
    from lm_fixtures import tiny_gpt2

    folder = tmp_path_factory.mktemp("tiny-gpt2")
    model, tok = tiny_gpt2()
    model.save_pretrained(folder)
    tok.save_pretrained(folder)
    return str(folder)


@pytest.fixture(scope="module")
def bert_folder(tmp_path_factory):
    """A tiny random BERT token classifier with the MiniLM tokenizer, saved as a local folder (path as str)."""
    from lm_fixtures import minilm_tokenizer, tiny_bert

    tok = minilm_tokenizer()
    folder = tmp_path_factory.mktemp("tiny-bert")
    tiny_bert(tok).save_pretrained(folder)
    tok.save_pretrained(folder)
    return str(folder)
