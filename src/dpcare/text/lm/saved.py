"""Saving and loading a causal LM fine-tuned by :func:`dpcare.text.lm.finetune.finetune`.

A saved folder holds the TRAINED parameters only (``weights.safetensors``: the LoRA factors, the prefix, or
every parameter with the untied output layer) and ``finetune.json``: the recipe that rebuilds the rest (the
base model, the blocks kept, the mode and its adapter sizes, the task, labels and windows) with the run's
guarantee, ledger and loss history. Loading rebuilds the base model, applies the mode and copies the saved
parameters in; a weights file that does not match the recipe exactly is an error, never a partial load.
Every file is written atomically. ``dpcare text finetune`` writes them into a run folder
(:mod:`dpcare.runs`) whose ``run.json`` (:func:`finetune_manifest`) is what ``dpcare report`` reads.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import torch
from torch import nn

from dpcare.exceptions import DataError, MissingFileError
from dpcare.io import atomic_write, write_json
from dpcare.runs import Manifest
from dpcare.verdict import verdict_entry

FORMAT = 1
WEIGHTS = "weights.safetensors"
META = "finetune.json"
#: what rebuilds the model and its inputs (``info`` keys of :func:`~dpcare.text.lm.finetune.finetune` and of
#: :func:`~dpcare.text.lm.token_ner.finetune_tagger`); ``kind``: "causal-lm" or "token-tagger" (a folder saved
#: before the tagger existed has none: a causal LM)
RECIPE = ("kind", "task", "mode", "model", "layers", "lora_rank", "lora_alpha", "prefix_tokens", "labels", "window",
          "stride")
OPTIONAL_RECIPE = ("hints",)  # a tagger's lexicon hints; absent from causal LMs and from folders saved before
CAUSAL = "causal-lm"
BUILT_IN = ("smollm2", "minilm")  # model names that are not folders


def recipe_of(info: dict[str, Any]) -> dict[str, Any]:
    """What rebuilds the model from ``info``: the RECIPE keys, and the OPTIONAL_RECIPE keys it holds."""
    return {k: info[k] for k in (*RECIPE, *OPTIONAL_RECIPE) if k in info}


def recipe_kind(recipe: dict[str, Any]) -> str:
    """``"token-tagger"`` or ``"causal-lm"`` (the default of folders saved before ``kind`` was recorded)."""
    return recipe.get("kind") or CAUSAL


def trained_state(model: nn.Module) -> dict[str, torch.Tensor]:
    """The parameters that training changed (``requires_grad``), detached, contiguous, on the CPU."""
    return {n: p.detach().cpu().contiguous() for n, p in model.named_parameters() if p.requires_grad}


def save_finetuned(model: nn.Module, info: dict[str, Any], folder: str | os.PathLike) -> Path:
    """Write ``model``'s trained parameters and ``info`` (recipe, guarantee, ledger, history) to ``folder``."""
    from safetensors.torch import save

    missing = [k for k in RECIPE if k not in info]
    if missing:
        raise DataError(f"info lacks the recipe keys {missing}: pass the info returned by finetune()")
    folder = Path(folder)
    model_name = info["model"]
    if model_name not in BUILT_IN:  # a local folder: keep an absolute path so the saved model loads from anywhere
        model_name = str(Path(model_name).resolve())
    payload = save(trained_state(model))
    atomic_write(folder / WEIGHTS, lambda f: f.write(payload), mode="wb")
    recipe = recipe_of(info)
    write_json(folder / META, {"format": FORMAT, "recipe": {**recipe, "model": model_name},
                               "info": {k: v for k, v in info.items() if k not in recipe}})
    if info.get("guarantee"):
        write_json(folder / "guarantee.json", info["guarantee"])
    return folder


def finetune_manifest(info: dict[str, Any], settings: dict[str, Any] | None = None,
                      data: dict[str, Any] | None = None, scores=None) -> Manifest:
    """run.json of a fine-tuning run: the fine-tuned model with its guarantee and ledger (none: non-private),
    the recipe and training figures in ``settings["info"]``, the files; with ``scores``
    (:class:`~dpcare.text.lm.scoring.NoteScores` of held-out notes), its metric, the public baselines' and the
    verdict."""
    m = Manifest(settings=dict(settings or {}), data=data or {}, files={"weights": WEIGHTS, "recipe": META})
    name = f"{info['task']} {info['mode']}"
    m.add_model(name, info.get("guarantee"), info.get("ledger"),
                note="" if info.get("guarantee") else "NO differential privacy guarantee (non-private fine-tuning).")
    m.settings["info"] = {k: info.get(k) for k in (*RECIPE, *OPTIONAL_RECIPE, "patients", "notes", "rows", "steps",
                                                   "sampling_rate", "noise_multiplier", "clip_norm",
                                                   "trainable_parameters")}
    if settings:
        from dpcare.settings import in_effect
        from dpcare.text.lm.settings import FinetuneSettings

        s = FinetuneSettings.from_dict({k: v for k, v in settings.items() if k != "info"})
        g = info.get("guarantee")
        m.settings_in_effect = in_effect(s, {"lr": info["lr"], "model": s.resolved_model, "window": s.resolved_window,
                                             "stride": s.resolved_stride, "hints": s.resolved_hints or "none",
                                             **({"dp.delta": g["delta"]} if g else {})}, method=s.mode)
    if scores is None or scores.result is None:
        m.notes.append("No utility is measured at fine-tuning without --test: `dpcare text ner` / `summarise` "
                       "score notes with gold annotations; the clinical-nlp study attacks its models.")
        return m
    m.metrics = [{"model": name, f"test {scores.metric}": scores.value, "test notes": scores.scored}]
    m.metrics += [{"model": f"public baseline: {c['baseline_name']}", f"test {scores.metric}": c["baseline"],
                   "test notes": scores.scored} for c in scores.result["comparisons"]]
    m.headline = [f"test {scores.metric}"]
    m.baselines = [scores.record(name)]
    m.verdicts = [verdict_entry(name, c) for c in scores.result["comparisons"]]
    m.notes.append(f"{name}: {scores.result['verdict']}")
    m.not_protected.append("The held-out notes (--test) are scored, not trained on: their scores in this file are "
                           "outside the guarantee.")
    return m


def read_meta(folder: str | os.PathLike) -> dict[str, Any]:
    """``finetune.json`` of a saved folder; errors name a folder that is not one."""
    import json

    folder = Path(folder)
    if not (folder / META).is_file() or not (folder / WEIGHTS).is_file():
        raise MissingFileError(f"{folder} is not a fine-tuned model folder (no {META} and {WEIGHTS}; "
                               "`dpcare text finetune --out` writes one)")
    meta = json.loads((folder / META).read_text())
    if meta.get("format") != FORMAT:
        raise DataError(f"{folder / META}: format {meta.get('format')!r}, this dpcare reads format {FORMAT}")
    return meta


def load_finetuned(folder: str | os.PathLike):
    """(model in eval mode, tokenizer, meta) of a folder written by :func:`save_finetuned`."""
    from safetensors.torch import load_file

    from dpcare.lm import load_causal_lm
    from dpcare.text.lm.finetune import apply_mode

    meta = read_meta(folder)
    r = meta["recipe"]
    if recipe_kind(r) != CAUSAL:  # the BIO token tagger
        from dpcare.text.lm.token_ner import load_tagger

        try:
            model, tokenizer = load_tagger(r, load_file(str(Path(folder) / WEIGHTS)))
        except DataError as e:
            raise DataError(f"{folder}: {e}") from None
        return model, tokenizer, meta
    causal, tokenizer = load_causal_lm(r["model"], r["layers"])
    model = apply_mode(causal, r["mode"], r["lora_rank"], r["lora_alpha"], r["prefix_tokens"])
    try:
        copy_trained_state(model, load_file(str(Path(folder) / WEIGHTS)), f"{r['mode']} on {r['model']}")
    except DataError as e:
        raise DataError(f"{folder}: {e}") from None
    return model.eval(), tokenizer, meta


def copy_trained_state(model: nn.Module, state: dict[str, torch.Tensor], recipe: str) -> None:
    """Copy saved trained parameters into ``model``: exactly its trainable parameters, each of its shape, or a
    DataError naming the difference (``recipe`` describes what the model was built from)."""
    params = dict(model.named_parameters())
    expected = {n for n, p in params.items() if p.requires_grad}
    if set(state) != expected:
        raise DataError(f"the saved weights do not match the recipe ({recipe}): missing "
                        f"{sorted(expected - set(state))[:5]}, unexpected {sorted(set(state) - expected)[:5]}")
    with torch.no_grad():
        for name, value in state.items():
            if params[name].shape != value.shape:
                raise DataError(f"{name} has shape {tuple(value.shape)}, the recipe builds {tuple(params[name].shape)}")
            params[name].copy_(value)
