"""Deterministic splits of a table."""

from __future__ import annotations

import numpy as np
import pandas as pd

from dpcare.exceptions import DataError, SettingsError


def split_table(df: pd.DataFrame, fractions: dict[str, float], seed: int = 0,
                stratify: str | None = None) -> dict[str, pd.DataFrame]:
    """Disjoint random parts with the given fractions (summing to 1), the same for the same seed.

    Stratifying on the target is a data-dependent choice; it is meant for evaluation splits.
    """
    if not fractions or any(f <= 0 for f in fractions.values()):
        raise SettingsError(f"split fractions must be positive, got {fractions}")
    if abs(sum(fractions.values()) - 1) > 1e-9:
        raise SettingsError(f"split fractions must sum to 1, got {sum(fractions.values()):.6g} from {fractions}")
    if len(df) == 0:
        raise DataError("cannot split a table with no rows")
    if stratify is not None and stratify not in df.columns:
        raise DataError(f"cannot stratify on '{stratify}': the table has no such column")
    rng = np.random.default_rng(seed)
    if stratify is None:
        groups = [np.arange(len(df))]
    else:  # one group per value, missing values form a group of their own
        codes = pd.factorize(df[stratify], use_na_sentinel=False)[0]
        groups = [np.flatnonzero(codes == k) for k in range(codes.max() + 1)]
    parts: dict[str, list[np.ndarray]] = {k: [] for k in fractions}
    for idx in groups:
        idx = rng.permutation(idx)
        cuts = np.round(np.cumsum(list(fractions.values())) * len(idx)).astype(int)
        for name, lo, hi in zip(fractions, [0, *cuts[:-1]], cuts):
            parts[name].append(idx[lo:hi])
    out = {}
    for name, chunks in parts.items():
        rows = np.sort(np.concatenate(chunks))
        if len(rows) == 0:
            raise DataError(f"split '{name}' is empty: the table has only {len(df)} rows")
        out[name] = df.iloc[rows].reset_index(drop=True)
    return out
