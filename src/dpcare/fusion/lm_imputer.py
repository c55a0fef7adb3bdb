"""A language-model imputer: the "foundation model prior" of Zeng et al. (FusionDP) on our machines.

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

from dpcare.exceptions import SettingsError
from dpcare.fusion.imputers import Imputer
from dpcare.lm import encode_prefix, greedy_continuations, run_after_prefix
from dpcare.progress import progress as tqdm

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
            raise SettingsError(f"shots must be >= 1, got {shots}")
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
        rows = [serialize(x.iloc[i], self.inputs) + f", {col} is" for i in range(len(x))]
        spec = self.schema.column(col)
        if spec.kind == "categorical":
            return self._choose(fitted["prefix"], rows, list(spec.categories), col)
        return self._generate_numbers(fitted["prefix"], rows, spec, fitted["fallback"], col)

    # ------------------------------------------------------------------ scoring
    # The few-shot prefix is the same for every row of a column: it is run once and its
    # key/value cache is reused for each batch of rows (only the row's own text is new).
    @torch.no_grad()
    def _choose(self, prefix_text: str, rows: list[str], categories: list[str], col: str) -> np.ndarray:
        model, tok = self._load()
        prefix = encode_prefix(model, tok, prefix_text)
        cand_ids = [tok(" " + c, add_special_tokens=False)["input_ids"] for c in categories]
        out = []
        for start in tqdm(range(0, len(rows), self.batch_size), disable=not self.progress, desc=f"lm: {col}"):
            seqs, spans = [], []
            for r in rows[start : start + self.batch_size]:
                r_ids = tok(r, add_special_tokens=False)["input_ids"]
                for c in cand_ids:
                    seqs.append(r_ids + c)
                    spans.append((len(r_ids), len(r_ids) + len(c)))
            batch = run_after_prefix(model, tok.pad_token_id, prefix, seqs, left_pad=False)
            logp = torch.log_softmax(batch.logits, dim=-1)
            scores = np.array([float(logp[i, a - 1 : b - 1].gather(1, batch.ids[i, a:b, None]).sum())
                               for i, (a, b) in enumerate(spans)])
            k = len(categories)
            out += [categories[int(np.argmax(scores[i : i + k]))] for i in range(0, len(scores), k)]
        return np.array(out, dtype=object)

    def _generate_numbers(self, prefix_text: str, rows: list[str], spec, fallback: float, col: str) -> np.ndarray:
        model, tok = self._load()
        texts = greedy_continuations(model, tok, encode_prefix(model, tok, prefix_text), rows, self.max_new_tokens,
                                     batch_size=self.batch_size, progress=f"lm: {col}" if self.progress else None)
        values = [self._parse(t, spec) for t in texts]
        failures = sum(v is None for v in values)
        self.parse_failures[col] = self.parse_failures.get(col, 0) + failures
        return np.array([fallback if v is None else v for v in values], dtype=float)

    @staticmethod
    def _parse(text: str, spec) -> float | None:
        m = NUMBER.search(text.split("\n")[0].split(",")[0])
        if not m:
            return None
        v = float(m.group())
        if spec.bounds is not None and not spec.bounds[0] <= v <= spec.bounds[1]:
            return None
        return v
