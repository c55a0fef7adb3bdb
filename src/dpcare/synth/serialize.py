"""Rows as text, "col is value, col is value, ..." (GReaT-style, as in Afonja et al., DP-2Stage, Section 4).

The column order is fixed and starts with the target column (the paper's choice
under DP), fixed and ends with it ("target-last": the model learns the target given the other columns), or
shuffled per row. Numbers are written with a declared number of decimals.
The serialiser also returns the character spans of every key and value, so token
roles can be derived from a tokenizer's offsets.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from dpcare.data import TableSchema
from dpcare.data.tables import category_text
from dpcare.exceptions import DataError, SettingsError, SpecError

SEP, IS = ", ", " is "


@dataclass(frozen=True)
class Span:
    kind: str  # "key" or "value"
    column: str
    start: int
    end: int


class RowSerializer:
    def __init__(self, schema: TableSchema, order: str = "target-first", decimals: int | dict[str, int] = 2):
        if order not in ("target-first", "target-last", "shuffle"):
            raise SettingsError(f"order must be 'target-first', 'target-last' or 'shuffle', got {order!r}")
        self.schema, self.order = schema, order
        features = list(schema.feature_columns)
        self.columns = features + [schema.target] if order == "target-last" else [schema.target] + features
        self.decimals = decimals
        for c in self.columns:
            if SEP.strip() in c or IS.strip() == c:
                raise SpecError(f"column name {c!r} cannot be serialised unambiguously")

    def digits(self, col: str) -> int:
        """Decimals written for numeric column ``col``."""
        return self.decimals.get(col, 2) if isinstance(self.decimals, dict) else self.decimals

    def value_text(self, col: str, v) -> str:
        if v is None or (isinstance(v, float) and math.isnan(v)):
            return "missing"
        if self.schema.column(col).kind == "numeric":
            text = f"{float(v):.{self.digits(col)}f}"
            return text.rstrip("0").rstrip(".") if "." in text else text
        return category_text(v)

    def text(self, row: pd.Series, rng: np.random.Generator | None = None) -> tuple[str, list[Span]]:
        """The row's text and the spans of its keys and values."""
        cols = list(self.columns)
        if self.order == "shuffle":
            if rng is None:
                raise SettingsError("shuffled order needs an rng")
            cols = [cols[i] for i in rng.permutation(len(cols))]
        parts, spans, pos = [], [], 0
        for i, col in enumerate(cols):
            if i:
                parts.append(SEP)
                pos += len(SEP)
            value = self.value_text(col, row[col])
            spans.append(Span("key", col, pos, pos + len(col)))
            pos += len(col) + len(IS)
            spans.append(Span("value", col, pos, pos + len(value)))
            pos += len(value)
            parts.append(f"{col}{IS}{value}")
        return "".join(parts), spans

    def parse(self, text: str) -> dict[str, str]:
        """Inverse of :meth:`text` for well-formed rows: {column: value text}; unknown keys raise."""
        out = {}
        for cell in text.split(SEP):
            key, sep, value = cell.partition(IS)
            if not sep or key not in self.columns:
                raise DataError(f"cannot parse cell {cell!r}")
            out[key] = value
        return out
