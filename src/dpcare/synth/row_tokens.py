"""Rows as token ids with key / value / other roles, tokenised segment by segment.

A row "age is 63, sex is Male" is cut into the segments ``"age"`` (key), ``" is"``
(other), ``" 63"`` (value), ``","`` (other), ``" sex"`` (key), ... (a space before a
key or value belongs to it, as byte-level BPE tokenisers attach it). Each segment is
tokenised on its own, so a token never straddles a key and a value, roles are exact,
and the decoder can write the public segments (keys, separators) token for token
exactly as they were seen in training.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
import torch

from dpcare.exceptions import DataError, SettingsError
from dpcare.synth.serialize import IS, SEP, RowSerializer
from dpcare.synth.tokens import KEY, OTHER, VALUE


@dataclass(frozen=True)
class Segment:
    text: str
    role: int
    column: str


class RowTokenizer:
    """Segment tokenisation of serialised rows; ``bos`` starts and ``eos`` ends every row."""

    def __init__(self, serializer: RowSerializer, tokenizer):
        self.serializer, self.tokenizer = serializer, tokenizer
        self.bos = tokenizer.bos_token_id if tokenizer.bos_token_id is not None else tokenizer.eos_token_id
        self.eos = tokenizer.eos_token_id
        if self.eos is None:
            raise SettingsError("the tokenizer has no end-of-sequence token")
        self._cache: dict[str, list[int]] = {}

    def ids(self, text: str) -> list[int]:
        if text not in self._cache:
            ids = self.tokenizer(text, add_special_tokens=False)["input_ids"]
            if not ids:
                raise SettingsError(f"the tokenizer gives no tokens for {text!r} (is it loaded correctly?)")
            self._cache[text] = ids
        return self._cache[text]

    @staticmethod
    def key_segments(column: str, first: bool) -> list[Segment]:
        """The public segments that open a column: separator (unless first), key, " is"."""
        lead = [] if first else [Segment(SEP.rstrip(), OTHER, column)]
        return lead + [Segment(column if first else " " + column, KEY, column), Segment(IS.rstrip(), OTHER, column)]

    @staticmethod
    def value_segment(column: str, value_text: str) -> Segment:
        return Segment(" " + value_text, VALUE, column)

    def segments(self, row: pd.Series, rng: np.random.Generator | None = None) -> list[Segment]:
        _, spans = self.serializer.text(row, rng)
        out: list[Segment] = []
        for i, span in enumerate(s for s in spans if s.kind == "key"):
            out += self.key_segments(span.column, first=i == 0)
            out.append(self.value_segment(span.column, self.serializer.value_text(span.column, row[span.column])))
        return out

    def encode_row(self, row: pd.Series, rng: np.random.Generator | None = None) -> tuple[list[int], list[int]]:
        ids, roles = [self.bos], [OTHER]
        for seg in self.segments(row, rng):
            t = self.ids(seg.text)
            ids += t
            roles += [seg.role] * len(t)
        return ids + [self.eos], roles + [OTHER]

    def encode_table(self, df: pd.DataFrame, seed: int = 0) -> dict[str, torch.Tensor]:
        """``ids``, ``roles`` and ``mask`` tensors [rows, longest row], right-padded with eos."""
        if len(df) == 0:
            raise DataError("the table has no rows")
        missing = [c for c in self.serializer.columns if c not in df.columns]
        if missing:
            raise DataError(f"the table lacks the columns {missing}")
        rng = np.random.default_rng(seed)
        rows = [self.encode_row(r, rng) for _, r in df.iterrows()]
        width = max(len(i) for i, _ in rows)
        ids = torch.full((len(rows), width), self.eos, dtype=torch.long)
        roles = torch.zeros((len(rows), width), dtype=torch.long)
        mask = torch.zeros((len(rows), width), dtype=torch.long)
        for k, (i, r) in enumerate(rows):
            ids[k, : len(i)], roles[k, : len(r)], mask[k, : len(i)] = torch.tensor(i), torch.tensor(r), 1
        return {"ids": ids, "roles": roles, "mask": mask}
