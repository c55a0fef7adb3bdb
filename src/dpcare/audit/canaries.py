"""Canaries for a one-run audit of a tabular DP-SGD or Feature-DP training run.

Canaries are training rows with a flipped label and fresh random private values
(within the declared bounds / categories), so that only memorising them - and,
for Feature-DP, only their private features - reveals them. Each is included
with probability 1/2:

- DP-SGD: an included canary is a training example; an excluded one is absent.
- Feature-DP: an included canary is a private training example; an excluded one
  exists only through its public view (pad(Psi(x)) in the public data), exactly
  the simulator of Definition 6 of Mahloujifar et al.

The training run and its scores are :func:`dpcare.tabular.audit.audit_tabular`.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from dpcare.data import TableSchema
from dpcare.exceptions import SpecError


def make_canaries(rows: pd.DataFrame, schema: TableSchema, rng: np.random.Generator) -> pd.DataFrame:
    """Flipped labels and fresh random private values (declared bounds/categories)."""
    can = rows.copy().reset_index(drop=True)
    target = schema.column(schema.target)
    cats = list(target.categories)
    can[schema.target] = can[schema.target].map(lambda v: cats[(cats.index(v) + 1) % len(cats)])
    for col in schema.private_columns:
        spec = schema.column(col)
        if spec.kind == "categorical":
            can[col] = rng.choice(list(spec.categories), len(can))
        else:
            if spec.bounds is None:
                raise SpecError(f"canaries need declared bounds for private column '{col}'")
            can[col] = rng.uniform(*spec.bounds, len(can))
    return can
