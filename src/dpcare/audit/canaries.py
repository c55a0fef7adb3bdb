"""Canaries for a one-run audit of a tabular DP-SGD or Feature-DP training run.

Each canary is included with probability 1/2:

- DP-SGD: an included canary is a training example; an excluded one is absent.
- Feature-DP: an included canary is a private training example; an excluded one
  exists only through its public view (pad(Psi(x)) in the public data), exactly
  the simulator of Definition 6 of Mahloujifar et al.

Two designs (:func:`make_canaries`):

- ``"extreme"`` (the default of :func:`dpcare.tabular.audit.audit_tabular`): a random label and, in the
  columns it is given, values no patient has together: numbers at a declared bound (low or high by a fair
  coin; a nullable number missing with probability 1/3), categories uniformly at random (missing included
  when nullable). Far from the data, a canary's label is only known to the model if it trained on it, and
  with clipping skipped its gradient is as large as a gradient gets; the labels being random, what the
  model learns from the other canaries does not favour a canary's own label.
- ``"flipped"`` (the design before): a real row with its label flipped and fresh random private values
  (uniform within the bounds, random categories).

The training run and its scores are :func:`dpcare.tabular.audit.audit_tabular`.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from dpcare.data import TableSchema
from dpcare.exceptions import SettingsError, SpecError

DESIGNS = ("extreme", "flipped")


def make_canaries(rows: pd.DataFrame, schema: TableSchema, rng: np.random.Generator, design: str = "flipped",
                  columns: Sequence[str] | None = None) -> pd.DataFrame:
    """Canaries made from ``rows`` (one each) by ``design``; ``columns``: those the design rewrites (default:
    the private columns). The draws depend on the row count, the schema and ``rng`` only, never on values."""
    if design not in DESIGNS:
        raise SettingsError(f"canary design must be one of {DESIGNS}, got {design!r}")
    columns = list(schema.private_columns if columns is None else columns)
    can = rows.copy().reset_index(drop=True)
    n = len(can)
    cats = list(schema.column(schema.target).categories)
    if design == "flipped":
        can[schema.target] = can[schema.target].map(lambda v: cats[(cats.index(v) + 1) % len(cats)])
    else:
        can[schema.target] = rng.choice(np.array(cats, dtype=object), n)
    for col in columns:
        spec = schema.column(col)
        if spec.kind == "categorical":
            if spec.categories is None:
                raise SpecError(f"canaries need declared categories for categorical column '{col}'")
            options = list(spec.categories) + ([None] if design == "extreme" and spec.nullable else [])
            can[col] = rng.choice(np.array(options, dtype=object), n)
            continue
        if spec.bounds is None:
            raise SpecError(f"canaries need declared bounds for numeric column '{col}'")
        lo, hi = spec.bounds
        if design == "flipped":
            can[col] = rng.uniform(lo, hi, n)
        else:
            values = np.where(rng.random(n) < 0.5, float(lo), float(hi))
            missing = rng.random(n) < 1 / 3
            can[col] = np.where(missing, np.nan, values) if spec.nullable else values
    return can
