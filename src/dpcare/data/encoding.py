"""Encode a validated table as a float matrix, and build pad(Psi(x)) from public columns alone.

Numeric: transform (log1p), clip to bounds, scale to [-1, 1]; a nullable column gets
the midpoint and a ``<col>__missing`` indicator. Categorical: one-hot (+ indicator
if nullable). Bounds and categories of PROTECTED columns come from the spec or a
DP estimate charged to the ledger; of other columns, from the training data.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from dpcare.data.dp_bounds import dp_bounds, histogram_event, noise_for_columns
from dpcare.data.schema import ColumnSpec, TableSchema
from dpcare.data.tables import category_text
from dpcare.privacy.randomness import secret_rng
from dpcare.exceptions import (
    DataError,
    NotFittedError,
    PrivacyParameterError,
    SettingsError,
    SpecError,
)

PROTECT = ("private", "all", "label", "none")


def public_view(df: pd.DataFrame, schema: TableSchema) -> pd.DataFrame:
    """The table without its private columns: all the public branch may see."""
    return df.drop(columns=[c for c in schema.private_columns if c in df.columns])


def replace_private(df: pd.DataFrame, imputed: pd.DataFrame, schema: TableSchema) -> pd.DataFrame:
    """Hybrid rows: the public columns of ``df`` exactly, the private columns from ``imputed``."""
    missing = [c for c in schema.private_columns if c not in imputed.columns]
    if missing or len(imputed) != len(df):
        raise DataError(f"imputed values must have {len(df)} rows and the private columns (lacks {missing})")
    out = df.copy()
    for c in schema.private_columns:
        values, spec = imputed[c], schema.column(c)
        if spec.categories is not None:
            text = values.map(category_text, na_action="ignore")
            unknown = sorted(set(text.dropna()) - set(spec.categories))
            if unknown:
                raise DataError(f"imputed column '{c}' has values {unknown[:5]} outside {list(spec.categories)}")
            values = text
        out[c] = values.to_numpy()
    return out


def _declared(spec: ColumnSpec) -> bool:
    return spec.bounds is not None if spec.kind == "numeric" else spec.categories is not None


def _forward(spec: ColumnSpec, x: np.ndarray) -> np.ndarray:
    return np.log1p(np.clip(x, -1 + 1e-9, None)) if spec.transform == "log1p" else x


class TableEncoder:
    """``protect``: which feature columns' statistics must not be read from data —
    "private" (feature-level DP), "all" (DP-SGD), "label" or "none" (no feature)."""

    def __init__(self, schema: TableSchema, protect: str = "private"):
        if protect not in PROTECT:
            raise SettingsError(f"protect must be one of {PROTECT}, got {protect!r}")
        self.schema, self.protect = schema, protect
        self.stats: dict[str, dict[str, Any]] = {}

    def protected(self, name: str) -> bool:
        return self.protect == "all" or (self.protect == "private" and name in self.schema.private_columns)

    # ------------------------------------------------------------------ fit
    def fit(self, df: pd.DataFrame, ledger=None, stats_epsilon: float | None = None, noise_seed: int | None = None,
            stats_noise_multiplier: float | None = None, keep: str | None = None) -> TableEncoder:
        """Bounds and categories of every feature column.

        Protected columns use the spec; a protected numeric column without declared
        bounds gets a DP estimate charged to ``ledger`` (``ledger.charge(name, event,
        description)``). Its noise: ``stats_noise_multiplier`` if given, else calibrated
        so that all such estimates together are (``stats_epsilon``, ``ledger.delta``)-DP.
        That noise is secret: drawn from ``noise_seed`` (``DPSettings.noise_seed``), fresh OS entropy when None
        (kept in the folder ``keep``, a run's checkpoint folder, so that a resumed run draws the same bounds);
        :func:`dpcare.privacy.secret_rng`.
        """
        feats = [self.schema.column(n) for n in self.schema.feature_columns]
        missing = [c.name for c in feats if not _declared(c) and c.name not in df.columns]
        if missing:
            raise DataError(f"the table lacks the feature columns {missing} (their statistics are not declared)")
        need_dp = [c for c in feats if self.protected(c.name) and c.kind == "numeric" and c.bounds is None]
        for c in feats:
            if self.protected(c.name) and c.kind == "categorical" and c.categories is None:
                raise SpecError(f"column '{c.name}' is protected and categorical: declare its categories in the "
                                 "spec (learning the category set from the data would leak it)")
        no_budget = stats_epsilon is None and stats_noise_multiplier is None
        if need_dp and (ledger is None or no_budget):
            raise SpecError(f"protected numeric columns {[c.name for c in need_dp]} have no declared bounds: "
                            "declare bounds in the spec, or give a DP budget for their estimate (--stats-epsilon "
                            "on the command line, stats_epsilon= in Python)")
        sigma = self._stats_sigma(len(need_dp), ledger, stats_epsilon, stats_noise_multiplier) if need_dp else None
        rng = secret_rng(noise_seed, keep, purpose="table bounds") if need_dp else None
        self.stats = {}
        for c in feats:  # the data are read only for columns whose statistics are not declared
            st: dict[str, Any] = {"missing": c.nullable}
            if c.kind == "numeric":
                if c.bounds is not None:
                    lo, hi = c.bounds
                    tlo, thi = (float(v) for v in _forward(c, np.array([lo, hi])))
                elif c in need_dp:  # charged before anything (even an error) depends on the noisy histogram
                    ledger.charge(f"dp bounds of {c.name}", histogram_event(sigma),
                                  f"noisy histogram for the scaling bounds of '{c.name}' (sigma = {sigma:.3g})")
                    tlo, thi = dp_bounds(_forward(c, df[c.name].to_numpy(float)), sigma, rng)
                else:
                    t = _forward(c, df[c.name].to_numpy(float))
                    t = t[~np.isnan(t)]
                    tlo, thi = (float(t.min()), float(t.max())) if len(t) else (0.0, 1.0)
                st["range"] = (tlo, thi if thi > tlo else tlo + 1.0)
            elif c.categories is not None:
                st["categories"] = list(c.categories)
            else:
                st["categories"] = sorted(set(df[c.name].dropna().map(category_text)))
            self.stats[c.name] = st
        return self

    @staticmethod
    def _stats_sigma(count: int, ledger, stats_epsilon: float | None, noise_multiplier: float | None) -> float:
        if noise_multiplier is not None:
            if not noise_multiplier > 0:
                raise PrivacyParameterError(f"stats_noise_multiplier must be > 0, got {noise_multiplier!r}")
            return float(noise_multiplier)
        delta = getattr(ledger, "delta", None)
        if delta is None:
            raise PrivacyParameterError("calibrating the DP bounds to stats_epsilon needs the ledger's delta; pass a "
                             "PrivacyLedger or stats_noise_multiplier")
        return noise_for_columns(count, stats_epsilon, delta)

    # ------------------------------------------------------------------ layout
    def _check_fitted(self):
        if not self.stats:
            raise NotFittedError("call fit() before transform()")

    @property
    def feature_names(self) -> list[str]:
        self._check_fitted()
        names = []
        for col, st in self.stats.items():
            names += [col] if "range" in st else [f"{col}={v}" for v in st["categories"]]
            names += [f"{col}__missing"] if st["missing"] else []
        return names

    @property
    def column_slices(self) -> dict[str, slice]:
        self._check_fitted()
        out, pos = {}, 0
        for col, st in self.stats.items():
            width = (1 if "range" in st else len(st["categories"])) + int(st["missing"])
            out[col] = slice(pos, pos + width)
            pos += width
        return out

    @property
    def private_feature_mask(self) -> np.ndarray:
        mask = np.zeros(len(self.feature_names), dtype=bool)
        for col, sl in self.column_slices.items():
            mask[sl] = col in self.schema.private_columns
        return mask

    # ------------------------------------------------------------------ transform
    def _encode_column(self, col: str, x: pd.Series) -> np.ndarray:
        st, spec = self.stats[col], self.schema.column(col)
        missing = x.isna().to_numpy()
        if missing.any() and not st["missing"]:
            raise DataError(f"column '{col}' has {int(missing.sum())} missing values but is not nullable in the spec")
        if "range" in st:
            lo, hi = st["range"]
            t = np.clip(_forward(spec, x.to_numpy(float)), lo, hi)
            block = (2 * (t - lo) / (hi - lo) - 1)[:, None]
            block[missing] = 0.0
        else:
            cats = st["categories"]
            x = x.map(category_text, na_action="ignore")
            block = (x.to_numpy(object)[:, None] == np.array(cats, dtype=object)[None, :]).astype(float)
        if st["missing"]:
            block = np.hstack([block, missing[:, None].astype(float)])
        return block

    def transform(self, df: pd.DataFrame) -> np.ndarray:
        self._check_fitted()
        return np.hstack([self._encode_column(c, df[c]) for c in self.stats]).astype(np.float32)

    def transform_public(self, df_public: pd.DataFrame, pad: str = "gaussian", seed: int = 0) -> np.ndarray:
        """pad(Psi(x)): public features encoded, private positions N(0,1) noise or zeros.

        ``df_public`` must not contain private columns (use :func:`public_view`)."""
        self._check_fitted()
        present = [c for c in self.schema.private_columns if c in df_public.columns]
        if present:
            raise DataError(f"transform_public got private columns {present}; pass public_view(df, schema)")
        if pad not in ("gaussian", "zeros"):
            raise SettingsError(f"pad must be 'gaussian' or 'zeros', got {pad!r}")
        n = len(df_public)
        rng = np.random.default_rng(seed)
        blocks = []
        for col, sl in self.column_slices.items():
            if col in self.schema.private_columns:
                width = sl.stop - sl.start
                blocks.append(rng.standard_normal((n, width)) if pad == "gaussian" else np.zeros((n, width)))
            else:
                blocks.append(self._encode_column(col, df_public[col]))
        return np.hstack(blocks).astype(np.float32)

    def encode_target(self, df: pd.DataFrame) -> np.ndarray:
        spec = self.schema.column(self.schema.target)
        text = df[spec.name].map(category_text, na_action="ignore")
        unknown = sorted(set(text.dropna()) - set(spec.categories)) + (["NaN"] if text.isna().any() else [])
        if unknown:
            raise DataError(f"target '{spec.name}' has values {unknown[:5]} outside {list(spec.categories)}")
        y = text.map(spec.categories.index)
        if len(spec.categories) == 2:
            return y.to_numpy(np.float32)
        return y.to_numpy(np.int64)

    # ------------------------------------------------------------------ persistence
    def state_dict(self) -> dict[str, Any]:
        return {"schema": self.schema.to_dict(), "protect": self.protect,
                "stats": {k: {**v, "range": list(v["range"])} if "range" in v else v for k, v in self.stats.items()}}

    @classmethod
    def from_state_dict(cls, d: dict[str, Any]) -> TableEncoder:
        enc = cls(TableSchema.from_dict(d["schema"]), d["protect"])
        enc.stats = {k: {**v, "range": tuple(v["range"])} if "range" in v else dict(v) for k, v in d["stats"].items()}
        return enc
