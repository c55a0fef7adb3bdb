"""A language-model imputer: the "foundation model prior" of fusiondp.txt on our machines.

For each private column, a few rows of the PUBLIC support set are serialised as
in-context examples ("hr is 90, group is a, age is 63"), followed by the query
row's public columns and "<column> is". Categorical answers are chosen by the
model's likelihood of each declared category, so they are always valid; numeric
answers are generated greedily, parsed and checked against the column's bounds
(failures fall back to the support-set median and are counted). Only the query
row's public columns enter the prompt.
"""

from __future__ import annotations

import math
import re

import numpy as np
import pandas as pd
import torch
from tqdm.auto import tqdm

from dpcare.fusion.imputers import Imputer

NUMBER = re.compile(r"-?\d+(?:\.\d+)?")


def value_text(v) -> str:
    if v is None or (isinstance(v, (float, np.floating)) and math.isnan(v)):
        return "unknown"
    return f"{v:.4g}" if isinstance(v, (float, np.floating)) else str(v)


def serialize(row: pd.Series, columns: list[str]) -> str:
    return ", ".join(f"{c} is {value_text(row[c])}" for c in columns)


class LanguageModelImputer(Imputer):
    """In-context imputation with a local causal LM (default: SmolLM2-135M, see :mod:`dpcare.lm`)."""

    name = "lm"

    def __init__(self, model: str = "smollm2", shots: int = 4, batch_size: int = 8, max_new_tokens: int = 6,
                 seed: int = 0, progress: bool = False, lm=None):
        if shots < 1:
            raise ValueError(f"shots must be >= 1, got {shots}")
        self.model_name, self.shots, self.batch_size = model, shots, batch_size
        self.max_new_tokens, self.seed, self.progress = max_new_tokens, seed, progress
        self._lm = lm  # (model, tokenizer), e.g. a small test model
        self.parse_failures: dict[str, int] = {}

    def _load(self):
        if self._lm is None:
            from dpcare.lm import load_causal_lm

            self._lm = load_causal_lm(self.model_name)
        return self._lm

    def _fit_column(self, col, x, y):
        self._load()
        rng = np.random.default_rng(self.seed)
        idx = rng.choice(len(x), size=min(self.shots, len(x)), replace=False)
        lines = [f"{serialize(x.iloc[i], self.inputs)}, {col} is {value_text(y.iloc[i])}" for i in idx]
        spec = self.schema.column(col)
        fallback = y.astype(str).mode().iloc[0] if spec.kind == "categorical" else float(y.median())
        return {"prefix": "Each line describes one patient.\n" + "\n".join(lines) + "\n", "fallback": fallback}

    def _predict_column(self, col, fitted, x):
        prompts = [fitted["prefix"] + serialize(x.iloc[i], self.inputs) + f", {col} is" for i in range(len(x))]
        spec = self.schema.column(col)
        if spec.kind == "categorical":
            return self._choose(prompts, list(spec.categories), col)
        return self._generate_numbers(prompts, spec, fitted["fallback"], col)

    # ------------------------------------------------------------------ scoring
    @torch.no_grad()
    def _choose(self, prompts: list[str], categories: list[str], col: str) -> np.ndarray:
        model, tok = self._load()
        out = []
        cand_ids = [tok(" " + c, add_special_tokens=False)["input_ids"] for c in categories]
        for start in tqdm(range(0, len(prompts), self.batch_size), disable=not self.progress, desc=f"lm: {col}"):
            batch = prompts[start : start + self.batch_size]
            seqs, spans = [], []
            for p in batch:
                p_ids = tok(p, add_special_tokens=False)["input_ids"]
                for c in cand_ids:
                    seqs.append(p_ids + c)
                    spans.append((len(p_ids), len(p_ids) + len(c)))
            scores = self._sequence_logprobs(seqs, spans)
            k = len(categories)
            for i in range(len(batch)):
                out.append(categories[int(np.argmax(scores[i * k : (i + 1) * k]))])
        return np.array(out, dtype=object)

    def _sequence_logprobs(self, seqs: list[list[int]], spans: list[tuple[int, int]]) -> np.ndarray:
        model, tok = self._load()
        width = max(map(len, seqs))
        ids = torch.full((len(seqs), width), tok.pad_token_id, dtype=torch.long)
        mask = torch.zeros_like(ids)
        for i, s in enumerate(seqs):
            ids[i, : len(s)] = torch.tensor(s)
            mask[i, : len(s)] = 1
        logp = torch.log_softmax(model(input_ids=ids, attention_mask=mask).logits.float(), dim=-1)
        scores = []
        for i, (a, b) in enumerate(spans):
            targets = ids[i, a:b]
            scores.append(float(logp[i, a - 1 : b - 1].gather(1, targets[:, None]).sum()))
        return np.array(scores)

    @torch.no_grad()
    def _generate_numbers(self, prompts: list[str], spec, fallback: float, col: str) -> np.ndarray:
        model, tok = self._load()
        tok.padding_side = "left"
        out, failures = [], 0
        for start in tqdm(range(0, len(prompts), self.batch_size), disable=not self.progress, desc=f"lm: {col}"):
            enc = tok(prompts[start : start + self.batch_size], return_tensors="pt", padding=True,
                      add_special_tokens=False)
            gen = model.generate(**enc, max_new_tokens=self.max_new_tokens, do_sample=False,
                                 pad_token_id=tok.pad_token_id)
            for text in tok.batch_decode(gen[:, enc["input_ids"].shape[1]:], skip_special_tokens=True):
                value = self._parse(text, spec)
                if value is None:
                    failures += 1
                    value = fallback
                out.append(value)
        self.parse_failures[col] = failures
        return np.array(out, dtype=float)

    @staticmethod
    def _parse(text: str, spec) -> float | None:
        m = NUMBER.search(text.split("\n")[0].split(",")[0])
        if not m:
            return None
        v = float(m.group())
        if spec.bounds is not None and not spec.bounds[0] <= v <= spec.bounds[1]:
            return None
        return v
