"""Deterministic splits of a table."""

from __future__ import annotations

import numpy as np
import pandas as pd

from dpcare.exceptions import DataError, SettingsError


def split_indices(rows: int, fractions: dict[str, float], seed: int = 0) -> dict[str, np.ndarray]:
    """Sorted row positions of disjoint random parts of ``rows`` rows with the given fractions (summing to 1),
    a function of ``rows`` and ``seed`` only (never of the values), the same for the same seed."""
    _check_fractions(fractions)
    if rows == 0:
        raise DataError("cannot split a table with no rows")
    parts = _cut([np.arange(rows)], fractions, seed)
    for name, idx in parts.items():
        if len(idx) == 0:
            raise DataError(f"split '{name}' is empty: the table has only {rows} rows")
    return parts


def holdout_split(rows: int, fraction: float, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """(training, test) positions of ``rows`` private units: ``fraction`` of them, drawn with ``seed`` (a function
    of the count and the seed, never of the values), are held out as the real test units of the public-baseline
    comparison and do not train. ``fraction`` 0: every unit trains."""
    if not 0 <= fraction < 1:
        raise SettingsError(f"the held-out fraction must be in [0, 1), got holdout = {fraction}")
    if fraction == 0:
        return np.arange(rows), np.arange(0)
    parts = split_indices(rows, {"train": 1 - fraction, "test": fraction}, seed)
    return parts["train"], parts["test"]


def split_table(df: pd.DataFrame, fractions: dict[str, float], seed: int = 0,
                stratify: str | None = None) -> dict[str, pd.DataFrame]:
    """Disjoint random parts with the given fractions (summing to 1), the same for the same seed.

    Stratifying on the target is a data-dependent choice; it is meant for evaluation splits.
    """
    if stratify is None:
        return {name: df.iloc[rows].reset_index(drop=True)
                for name, rows in split_indices(len(df), fractions, seed).items()}
    _check_fractions(fractions)
    if len(df) == 0:
        raise DataError("cannot split a table with no rows")
    if stratify not in df.columns:
        raise DataError(f"cannot stratify on '{stratify}': the table has no such column")
    codes = pd.factorize(df[stratify], use_na_sentinel=False)[0]  # missing values form a group of their own
    parts = _cut([np.flatnonzero(codes == k) for k in range(codes.max() + 1)], fractions, seed)
    out = {}
    for name, rows in parts.items():
        if len(rows) == 0:
            raise DataError(f"split '{name}' is empty: the table has only {len(df)} rows")
        out[name] = df.iloc[rows].reset_index(drop=True)
    return out


def _check_fractions(fractions: dict[str, float]) -> None:
    if not fractions or any(f <= 0 for f in fractions.values()):
        raise SettingsError(f"split fractions must be positive, got {fractions}")
    if abs(sum(fractions.values()) - 1) > 1e-9:
        raise SettingsError(f"split fractions must sum to 1, got {sum(fractions.values()):.6g} from {fractions}")


def _cut(groups: list[np.ndarray], fractions: dict[str, float], seed: int) -> dict[str, np.ndarray]:
    """Each group permuted by one generator and cut by the fractions; parts are the sorted unions."""
    rng = np.random.default_rng(seed)
    parts: dict[str, list[np.ndarray]] = {k: [] for k in fractions}
    for idx in groups:
        idx = rng.permutation(idx)
        cuts = np.round(np.cumsum(list(fractions.values())) * len(idx)).astype(int)
        for name, lo, hi in zip(fractions, [0, *cuts[:-1]], cuts):
            parts[name].append(idx[lo:hi])
    return {name: np.sort(np.concatenate(chunks)) for name, chunks in parts.items()}
