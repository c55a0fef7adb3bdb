"""Uniform pseudo data for stage 1 of DP-2Stage (DP-2Stage-U): every column drawn independently and
uniformly from its PUBLIC range or category list. The paper reads these ranges off the private table;
we take them from the spec, or from a DP estimate charged to the ledger."""

from __future__ import annotations

import numpy as np
import pandas as pd

from dpcare.data import TableEncoder, TableSchema
from dpcare.exceptions import SettingsError, SpecError


def numeric_ranges(schema: TableSchema, private_table: pd.DataFrame | None = None, ledger=None,
                   stats_epsilon: float | None = None, noise_seed: int | None = None, keep: str | None = None
                   ) -> dict[str, tuple[float, float]]:
    """Public [lo, hi] of every numeric column: declared bounds, or a DP estimate charged to ``ledger`` (its
    noise from the secret ``noise_seed``, fresh OS entropy when None, kept in ``keep`` for a resume)."""
    undeclared = [c.name for c in schema.columns if c.kind == "numeric" and c.bounds is None]
    ranges = {c.name: c.bounds for c in schema.columns if c.kind == "numeric" and c.bounds is not None}
    if undeclared:
        if private_table is None:
            raise SpecError(f"columns {undeclared} have no public bounds: declare them, or pass the table with a "
                            "ledger and stats_epsilon for a DP estimate")
        enc = TableEncoder(schema, protect="all").fit(private_table, ledger=ledger, stats_epsilon=stats_epsilon,
                                                      noise_seed=noise_seed, keep=keep)
        for c in undeclared:
            lo, hi = enc.stats[c]["range"]
            ranges[c] = (float(np.expm1(lo)), float(np.expm1(hi))) if schema.column(c).transform == "log1p" else (lo, hi)
    return ranges


def uniform_pseudo_table(schema: TableSchema, n: int, seed: int = 0, private_table: pd.DataFrame | None = None,
                         ledger=None, stats_epsilon: float | None = None,
                         ranges: dict[str, tuple[float, float]] | None = None,
                         noise_seed: int | None = None) -> pd.DataFrame:
    """``n`` rows; ``private_table`` is read only for undeclared numeric bounds, via a charged DP estimate
    (pass ``ranges`` from :func:`numeric_ranges` to reuse an estimate already paid for). ``seed`` draws the
    (public) pseudo rows; ``noise_seed`` the estimate's secret noise."""
    if n < 1:
        raise SettingsError(f"n must be >= 1, got {n}")
    if ranges is None:
        ranges = numeric_ranges(schema, private_table, ledger, stats_epsilon, noise_seed)
    rng = np.random.default_rng(seed)
    out = {}
    for c in schema.columns:
        if c.kind == "categorical":
            if c.categories is None:
                raise SpecError(f"column '{c.name}' has no declared categories for pseudo data")
            out[c.name] = rng.choice(list(c.categories), n)
        else:
            lo, hi = ranges[c.name]
            out[c.name] = rng.uniform(lo, hi, n)
    return pd.DataFrame(out)
