"""Quality of a synthetic table measured against real data, as in DP-2Stage (Afonja et al.).

Utility: ML efficacy (Section 5.1.2, Appendix C.2.1). Fidelity: HIST (Eqs. 14-15), Pair (C.2.4) and
CorAcc (C.2.3), all against the real TEST table. Privacy-ish, not in the paper: distance to the
closest training record (DCR) and the exact-copy rate. Formulas and deviations: docs/synth-metrics.md.

Missing values: a NaN is its own category in categorical columns and its own bin in numeric ones
(HIST, Pair); Pearson and the correlation ratio use the rows where the numeric values are present;
the models impute (logistic regression) or route (XGBoost) them; DCR: see ``closest_distances``.
"""

from __future__ import annotations

import math
import warnings
from itertools import combinations

import numpy as np
import pandas as pd
from sklearn.compose import ColumnTransformer
from sklearn.impute import SimpleImputer
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import accuracy_score, f1_score, roc_auc_score
from sklearn.pipeline import Pipeline, make_pipeline
from sklearn.preprocessing import OneHotEncoder, StandardScaler

from dpcare.caller import user_stacklevel
from dpcare.data.schema import ColumnSpec, TableSchema
from dpcare.data.tables import category_text
from dpcare.exceptions import (
    DataError,
    MissingDependencyError,
    SettingsError,
    UnknownNameError,
)

BINS = (20, 50)  # numbers of equal-width bins for numeric columns in HIST and Pair (Section 5.1.2)
MODELS = ("logistic_regression", "xgboost")
SCORES = ("f1_minority", "auc", "accuracy")
LEVEL_EDGES = (0.1, 0.3, 0.5)  # CorAcc levels: [0, .1), [.1, .3), [.3, .5), [.5, 1] (Appendix C.2.3)
MISSING = "<missing>"  # stands for NaN in categorical model features


# --------------------------------------------------------------------------- inputs
def check_table(df: pd.DataFrame, schema: TableSchema, name: str = "synthetic") -> pd.DataFrame:
    """``df`` with exactly the schema's columns, in schema order: numeric as float, categorical as text.

    Raises ``DataError`` for an empty table, missing or extra columns and non-numbers in numeric
    columns. Values outside the declared categories are kept (they count as mismatches).
    """
    if not isinstance(df, pd.DataFrame):
        raise TypeError(f"the {name} table must be a pandas DataFrame, got {type(df).__name__}")
    if len(df) == 0:
        raise DataError(f"the {name} table is empty (no rows)")
    names = [c.name for c in schema.columns]
    missing = [n for n in names if n not in df.columns]
    extra = [c for c in df.columns if c not in names]
    if missing or extra:
        raise DataError(f"the {name} table does not match the schema: missing columns {missing}, "
                        f"extra columns {extra}")
    return pd.DataFrame({c.name: _column(df[c.name], c, name) for c in schema.columns}).reset_index(drop=True)


def _column(s: pd.Series, col: ColumnSpec, table: str) -> pd.Series:
    if col.kind == "categorical":
        return s.map(category_text, na_action="ignore").astype(object)
    num = pd.to_numeric(s, errors="coerce").astype(float)
    bad = s[num.isna() & s.notna()]
    if len(bad) or np.isinf(num).any():
        value = bad.iloc[0] if len(bad) else num[np.isinf(num)].iloc[0]
        raise DataError(f"column '{col.name}' of the {table} table is numeric but holds {value!r}")
    return num


# --------------------------------------------------------------------------- ML efficacy (C.2.1)
def ml_efficacy(train: pd.DataFrame, test: pd.DataFrame, schema: TableSchema, seed: int = 0,
                models: tuple[str, ...] = MODELS) -> dict:
    """Fit each model on ``train`` and score it on the real ``test`` table (Appendix C.2.1).

    ``train`` is the synthetic table, or the real training table for the real-data reference.
    The positive class is the minority class of ``test`` (on a tie, the second declared category);
    ``f1_minority`` is its F1, ``auc`` the ROC AUC of its predicted probability. A training table
    with a single class gives NaN F1 and AUC (with a warning) and the accuracy of predicting it.
    Returns ``{"positive_class", <model>: {f1_minority, auc, accuracy}, "mean": {...}}``.
    """
    positive, (x_train, y_train), (x_test, y_test) = _efficacy_data(train, test, schema)
    scores = {m: _fit_and_score(m, schema, seed, x_train, y_train, x_test, y_test) for m in models}
    mean = {k: float(np.mean([scores[m][k] for m in models])) for k in SCORES}
    return {"positive_class": positive, **scores, "mean": mean}


def efficacy_scores(train: pd.DataFrame, test: pd.DataFrame, schema: TableSchema, seed: int = 0,
                    model: str = "xgboost") -> tuple[np.ndarray, np.ndarray | None, str]:
    """Per-row scores of one ML-efficacy model, as :func:`ml_efficacy` fits it: ``model`` trained on ``train``
    (synthetic, or any table with the schema's columns), its predicted probability of the positive class on
    every row of the real ``test`` table. Returns (0/1 test labels, scores, positive class); scores are None
    when ``train`` holds a single target class (the model's AUC is then undefined)."""
    positive, (x_train, y_train), (x_test, y_test) = _efficacy_data(train, test, schema)
    if len(np.unique(y_train)) < 2:
        return y_test, None, positive
    return y_test, _model(model, schema, seed).fit(x_train, y_train).predict_proba(x_test)[:, 1], positive


#: what needs a binary target in a synthetic table's evaluation (and so in synth fit's verdict)
EFFICACY = "ML efficacy (the AUC of a model trained on the synthetic rows, and the verdict built on it)"


def _efficacy_data(train: pd.DataFrame, test: pd.DataFrame, schema: TableSchema):
    """The checked tables as (positive class, (x, y) of ``train``, (x, y) of ``test``); the test table must hold
    both classes of the binary target."""
    schema.require_binary_target(EFFICACY)
    categories = schema.column(schema.target).categories
    test = check_table(test, schema, "real test")
    train = check_table(train, schema, "training")
    positive = _positive_class(test[schema.target], categories)
    x_test, y_test = _xy(test, schema, positive, "real test")
    x_train, y_train = _xy(train, schema, positive, "training")
    if len(set(y_test)) < 2:
        raise DataError(f"the real test table holds only one target class ({positive!r} or not): "
                        "F1 and AUC are undefined")
    return positive, (x_train, y_train), (x_test, y_test)


def _positive_class(target: pd.Series, categories: tuple[str, ...]) -> str:
    counts = target.value_counts().reindex(list(categories), fill_value=0)
    if counts.sum() < len(target):
        raise DataError(f"the real test target holds values outside its categories {list(categories)}")
    return categories[1] if counts.iloc[0] == counts.iloc[1] else str(counts.idxmin())


def _xy(df: pd.DataFrame, schema: TableSchema, positive: str, name: str) -> tuple[pd.DataFrame, np.ndarray]:
    """Features (categorical NaN as ``MISSING``) and 0/1 labels; rows without a valid label are dropped."""
    valid = df[schema.target].isin(schema.column(schema.target).categories)
    if not valid.all():
        warnings.warn(f"{int((~valid).sum())} rows of the {name} table have no valid target value; dropped",
                      RuntimeWarning, stacklevel=user_stacklevel())
    x = df.loc[valid, schema.feature_columns].copy()
    for c in schema.columns:
        if c.kind == "categorical" and c.name in x:
            x[c.name] = x[c.name].fillna(MISSING)
    return x, (df.loc[valid, schema.target] == positive).to_numpy(int)


def _fit_and_score(name: str, schema: TableSchema, seed: int, x_train: pd.DataFrame, y_train: np.ndarray,
                   x_test: pd.DataFrame, y_test: np.ndarray) -> dict[str, float]:
    classes = np.unique(y_train)
    if len(classes) < 2:
        warnings.warn(f"the training table for {name} holds {len(classes)} target class(es): F1 and AUC are NaN",
                      RuntimeWarning, stacklevel=user_stacklevel())
        accuracy = float(np.mean(y_test == classes[0])) if len(classes) else math.nan
        return {"f1_minority": math.nan, "auc": math.nan, "accuracy": accuracy}
    model = _model(name, schema, seed).fit(x_train, y_train)
    proba = model.predict_proba(x_test)[:, 1]
    pred = model.predict(x_test)
    return {"f1_minority": float(f1_score(y_test, pred, pos_label=1, zero_division=0.0)),
            "auc": float(roc_auc_score(y_test, proba)), "accuracy": float(accuracy_score(y_test, pred))}


def _model(name: str, schema: TableSchema, seed: int) -> Pipeline:
    """Logistic regression on scaled numbers and one-hot categories, or XGBoost (NaN handled natively)."""
    if name == "logistic_regression":
        numeric = make_pipeline(SimpleImputer(strategy="median", add_indicator=True, keep_empty_features=True),
                                StandardScaler())
        classifier = LogisticRegression(max_iter=1000, random_state=seed)
    elif name == "xgboost":
        numeric, classifier = "passthrough", _xgboost(seed)
    else:
        raise UnknownNameError(f"unknown model {name!r}; choose from {MODELS}")
    features = [schema.column(c) for c in schema.feature_columns]
    prep = ColumnTransformer([
        ("numeric", numeric, [c.name for c in features if c.kind == "numeric"]),
        ("categorical", OneHotEncoder(handle_unknown="ignore", sparse_output=False),
         [c.name for c in features if c.kind == "categorical"]),
    ], sparse_threshold=0)  # dense: XGBoost would read a sparse zero as missing
    return Pipeline([("prep", prep), ("model", classifier)])


def _xgboost(seed: int):
    try:
        from xgboost import XGBClassifier
    except ImportError:
        raise MissingDependencyError("the XGBoost efficacy model needs xgboost (pip install xgboost-cpu), or pass "
                                     "models=('logistic_regression',)") from None
    return XGBClassifier(n_jobs=1, random_state=seed, tree_method="hist")


# --------------------------------------------------------------------------- HIST and Pair (C.2.2, C.2.4)
def hist(synthetic: pd.DataFrame, real: pd.DataFrame, schema: TableSchema, bins: int = 20) -> float:
    """Normalised histogram intersection HI (Eqs. 14-15): the mean over all columns of sum_c min(p_c, q_c).

    Numeric columns use ``bins`` equal-width bins over the range of ``real``; NaN is a bin of its
    own and synthetic values outside the real range land in a bin the real table leaves empty.
    """
    cells = _discretise(synthetic, real, schema, bins)
    return float(np.mean([_intersection(r, s, k) for r, s, k in cells]))


def pair(synthetic: pd.DataFrame, real: pd.DataFrame, schema: TableSchema, bins: int = 20) -> float:
    """Pair (Appendix C.2.4): the histogram intersection of every two-way marginal, averaged over column pairs."""
    cells = _discretise(synthetic, real, schema, bins)
    return float(np.mean([_intersection(ra * kb + rb, sa * kb + sb, ka * kb)
                          for (ra, sa, ka), (rb, sb, kb) in combinations(cells, 2)]))


def _discretise(synthetic, real, schema, bins) -> list[tuple[np.ndarray, np.ndarray, int]]:
    """Per column: real codes, synthetic codes and the number of codes, shared between the two tables."""
    if bins < 1:
        raise SettingsError(f"bins must be a positive number, got {bins}")
    real, synthetic = check_table(real, schema, "real"), check_table(synthetic, schema, "synthetic")
    return [_bin_codes(real[c.name].to_numpy(float), synthetic[c.name].to_numpy(float), bins)
            if c.kind == "numeric" else _category_codes(real[c.name], synthetic[c.name]) for c in schema.columns]


def _bin_codes(real: np.ndarray, synth: np.ndarray, bins: int) -> tuple[np.ndarray, np.ndarray, int]:
    present = real[~np.isnan(real)]
    edges = np.histogram_bin_edges(present, bins) if present.size else np.linspace(0.0, 1.0, bins + 1)
    return _bin_index(real, edges), _bin_index(synth, edges), bins + 2


def _bin_index(x: np.ndarray, edges: np.ndarray) -> np.ndarray:
    """Bins as ``np.histogram`` cuts them (the last one closed); NaN -> ``bins``, out of range -> ``bins + 1``."""
    bins = len(edges) - 1
    idx = np.clip(np.searchsorted(edges, x, side="right") - 1, 0, bins - 1)
    idx[(x < edges[0]) | (x > edges[-1])] = bins + 1
    idx[np.isnan(x)] = bins
    return idx


def _category_codes(real: pd.Series, synth: pd.Series) -> tuple[np.ndarray, np.ndarray, int]:
    codes, uniques = pd.factorize(pd.concat([real, synth], ignore_index=True), use_na_sentinel=False)
    return codes[: len(real)], codes[len(real):], len(uniques)


def _intersection(real_codes: np.ndarray, synth_codes: np.ndarray, n_codes: int) -> float:
    """Eq. 14 with proportions p_c = s_c / |D| and q_c = t_c / |S|."""
    p = np.bincount(real_codes, minlength=n_codes) / len(real_codes)
    q = np.bincount(synth_codes, minlength=n_codes) / len(synth_codes)
    return float(np.minimum(p, q).sum())


# --------------------------------------------------------------------------- CorAcc (C.2.3)
def cramers_v(x, y, bias_correction: bool = True) -> float:
    """Cramér's V of two categorical sequences (NaN is a category), by default with Bergsma's bias correction."""
    cx, ux = pd.factorize(pd.Series(x).to_numpy(object), use_na_sentinel=False)
    cy, uy = pd.factorize(pd.Series(y).to_numpy(object), use_na_sentinel=False)
    r, k, n = len(ux), len(uy), len(cx)
    if n < 2 or min(r, k) < 2:
        return 0.0
    table = np.bincount(cx * k + cy, minlength=r * k).reshape(r, k)
    expected = np.outer(table.sum(1), table.sum(0)) / n
    phi2 = ((table - expected) ** 2 / expected).sum() / n
    if not bias_correction:
        return float(min(1.0, math.sqrt(phi2 / (min(r, k) - 1))))
    phi2 = max(0.0, phi2 - (k - 1) * (r - 1) / (n - 1))
    denom = min(r - (r - 1) ** 2 / (n - 1), k - (k - 1) ** 2 / (n - 1)) - 1
    return float(min(1.0, math.sqrt(phi2 / denom))) if denom > 0 else 0.0


def correlation_ratio(categories, values) -> float:
    """Correlation ratio eta of numbers given categories: sqrt(between-group / total sum of squares).

    NaN is a category; rows with a missing number are left out. 0 when the numbers are constant.
    """
    cats = pd.Series(categories).to_numpy(object)
    y = pd.Series(values, dtype=float).to_numpy()
    present = ~np.isnan(y)
    codes, _ = pd.factorize(cats[present], use_na_sentinel=False)
    y = y[present]
    total = ((y - y.mean()) ** 2).sum() if y.size else 0.0
    if total <= 0:
        return 0.0
    counts = np.bincount(codes)
    means = np.bincount(codes, weights=y) / counts
    return float(math.sqrt(min(1.0, (counts * (means - y.mean()) ** 2).sum() / total)))


def abs_pearson(x, y) -> float:
    """|Pearson r| over the rows where both numbers are present; 0 when either is constant."""
    x, y = np.asarray(x, float), np.asarray(y, float)
    present = ~(np.isnan(x) | np.isnan(y))
    x, y = x[present], y[present]
    if x.size < 2 or x.std() == 0 or y.std() == 0:
        return 0.0
    return float(min(1.0, abs(np.corrcoef(x, y)[0, 1])))


def associations(table: pd.DataFrame, schema: TableSchema) -> pd.Series:
    """The association of every column pair, indexed by (column a, column b) in schema order.

    Cramér's V (bias-corrected) for two categorical columns, the correlation ratio for a
    categorical and a numeric one, |Pearson| for two numeric ones (Appendix C.2.3).
    """
    df = check_table(table, schema, "input")
    values = {}
    for a, b in combinations(schema.columns, 2):
        if a.kind == b.kind == "categorical":
            values[a.name, b.name] = cramers_v(df[a.name], df[b.name])
        elif a.kind == b.kind == "numeric":
            values[a.name, b.name] = abs_pearson(df[a.name], df[b.name])
        else:
            cat, num = (a, b) if a.kind == "categorical" else (b, a)
            values[a.name, b.name] = correlation_ratio(df[cat.name], df[num.name])
    return pd.Series(values, dtype=float)


def correlation_level(value) -> np.ndarray:
    """0 low [0, .1), 1 weak [.1, .3), 2 medium [.3, .5), 3 strong [.5, 1] (Appendix C.2.3)."""
    return np.digitize(value, LEVEL_EDGES)


def coracc(synthetic: pd.DataFrame, real: pd.DataFrame, schema: TableSchema) -> float:
    """CorAcc (Appendix C.2.3): the fraction of column pairs whose association level is the same."""
    real_levels = correlation_level(associations(check_table(real, schema, "real"), schema).to_numpy())
    synth_levels = correlation_level(associations(check_table(synthetic, schema, "synthetic"), schema).to_numpy())
    return float(np.mean(real_levels == synth_levels))


# --------------------------------------------------------------------------- DCR and copies (not in the paper)
def closest_distances(query: pd.DataFrame, reference: pd.DataFrame, schema: TableSchema) -> np.ndarray:
    """Euclidean distance from each ``query`` row to its closest ``reference`` row, over all columns.

    Numbers are min-max scaled with the reference's range; a NaN number takes the reference
    median plus a 0/1 missing flag. Each categorical mismatch (NaN is a category) adds 1 to the
    squared distance. Exact copies get exactly 0.
    """
    query, reference = check_table(query, schema, "query"), check_table(reference, schema, "reference")
    q, r = _embed(query, reference, schema)
    ref_sq = np.einsum("ij,ij->i", r, r)
    step = max(1, 2**22 // len(r))  # ~32 MB of distances at a time
    best = np.concatenate([(ref_sq[None, :] - 2 * q[i:i + step] @ r.T).min(axis=1)
                           for i in range(0, len(q), step)])
    distance = np.sqrt(np.maximum(best + np.einsum("ij,ij->i", q, q), 0.0))
    distance[copies(query, reference)] = 0.0
    return distance


def _embed(query: pd.DataFrame, reference: pd.DataFrame, schema: TableSchema) -> tuple[np.ndarray, np.ndarray]:
    q_parts, r_parts = [], []
    for col in schema.columns:
        if col.kind == "numeric":
            ref = reference[col.name].to_numpy(float)
            present = ref[~np.isnan(ref)]
            lo, scale, fill = 0.0, 1.0, 0.0
            if present.size:
                lo, scale = present.min(), (np.ptp(present) or 1.0)
                fill = (np.median(present) - lo) / scale
            for df, parts in ((query, q_parts), (reference, r_parts)):
                x = df[col.name].to_numpy(float)
                parts.append(np.column_stack([np.nan_to_num((x - lo) / scale, nan=fill), np.isnan(x)]))
        else:
            q_codes, r_codes, n_codes = _category_codes(query[col.name], reference[col.name])
            one_hot = np.eye(n_codes) / math.sqrt(2)  # a mismatch adds 2 * (1/sqrt 2)^2 = 1
            q_parts.append(one_hot[q_codes])
            r_parts.append(one_hot[r_codes])
    return np.hstack(q_parts), np.hstack(r_parts)


def copies(query: pd.DataFrame, reference: pd.DataFrame) -> np.ndarray:
    """Whether each ``query`` row equals some ``reference`` row in every column (NaN equals NaN).

    Both tables must already have the same columns and types (see ``check_table``).
    """
    keys = pd.util.hash_pandas_object(reference, index=False)
    return pd.util.hash_pandas_object(query, index=False).isin(keys).to_numpy()


def dcr(synthetic: pd.DataFrame, real_train: pd.DataFrame, schema: TableSchema,
        holdout: pd.DataFrame | None = None) -> dict[str, float]:
    """Distance to the closest training record: median and 5th percentile, and the exact-copy rate.

    With a real ``holdout`` table the same numbers for its rows give the reference: a synthetic
    table much closer to the training rows than unseen real rows are suggests memorisation.
    """
    train = check_table(real_train, schema, "real training")
    out = {}
    for name, df in (("synthetic", synthetic), ("holdout", holdout)):
        if df is None:
            continue
        df = check_table(df, schema, name)
        d = closest_distances(df, train, schema)
        out[f"{name}_median"] = float(np.median(d))
        out[f"{name}_p5"] = float(np.percentile(d, 5))
        out["duplicate_rate" if name == "synthetic" else "holdout_duplicate_rate"] = float(
            copies(df, train).mean())
    return out


# --------------------------------------------------------------------------- the report
def quality(table: pd.DataFrame, real_test: pd.DataFrame, schema: TableSchema, seed: int = 0,
            bins: tuple[int, ...] = BINS) -> dict:
    """ML efficacy, HIST, Pair and CorAcc of ``table`` against the real test table.

    ``hist`` holds one value per bin count and their mean; ``pair`` is the mean over bin counts
    (as the paper reports it), ``pair_bins`` the values per bin count.
    """
    hists = {f"bins_{b}": hist(table, real_test, schema, b) for b in bins}
    pairs = {f"bins_{b}": pair(table, real_test, schema, b) for b in bins}
    return {"ml_efficacy": ml_efficacy(table, real_test, schema, seed),
            "hist": {**hists, "mean": float(np.mean(list(hists.values())))},
            "pair": float(np.mean(list(pairs.values()))), "pair_bins": pairs,
            "coracc": coracc(table, real_test, schema)}


def evaluate_synthetic(synthetic: pd.DataFrame, real_train: pd.DataFrame, real_test: pd.DataFrame,
                       schema: TableSchema, seed: int = 0, bins: tuple[int, ...] = BINS,
                       baseline: bool = True) -> dict:
    """Every metric of a synthetic table, as a JSON-able dict nested by metric family.

    ``quality(synthetic)`` keys, plus ``dcr`` (to ``real_train``, with ``real_test`` as the
    holdout reference), ``rows`` and, with ``baseline``, ``real_baseline``: ``quality`` of the
    real training table, the paper's "Real data" row (Table 2).
    """
    synthetic = check_table(synthetic, schema, "synthetic")
    real_train = check_table(real_train, schema, "real training")
    real_test = check_table(real_test, schema, "real test")
    report = {"rows": {"synthetic": len(synthetic), "train": len(real_train), "test": len(real_test)},
              **quality(synthetic, real_test, schema, seed, bins),
              "dcr": dcr(synthetic, real_train, schema, holdout=real_test)}
    if baseline:
        report["real_baseline"] = quality(real_train, real_test, schema, seed, bins)
    return report


def format_report(report: dict) -> str:
    """A plain-text table of an ``evaluate_synthetic`` report: synthetic next to the real baseline."""
    rows = [(f"{short} {label}", f"ml_efficacy/{model}/{key}")
            for model, short in (("logistic_regression", "LR"), ("xgboost", "XGB"))
            for key, label in (("f1_minority", "F1 (minority)"), ("auc", "AUC"), ("accuracy", "accuracy"))]
    rows += [(f"HIST {b.replace('_', ' ')}", f"hist/{b}") for b in report.get("hist", {}) if b != "mean"]
    rows += [(f"Pair {b.replace('_', ' ')}", f"pair_bins/{b}") for b in report.get("pair_bins", {})]
    rows += [("Pair (mean)", "pair"), ("CorAcc", "coracc")]
    base = report.get("real_baseline", {})
    positive = _get(report, "ml_efficacy/positive_class")
    lines = [f"positive (minority) class: {positive!r}; models tested on real test rows",
             f"{'metric':<22}{'synthetic':>10}{'real train':>12}"]
    lines += [f"{label:<22}{_fmt(_get(report, path)):>10}{_fmt(_get(base, path)):>12}" for label, path in rows]
    if "dcr" in report:
        d = {k: _fmt(v) for k, v in report["dcr"].items()}
        lines.append(f"DCR to training rows: median {d.get('synthetic_median')}, 5th percentile "
                     f"{d.get('synthetic_p5')} (real holdout: {d.get('holdout_median')}, {d.get('holdout_p5')})")
        lines.append(f"exact copies of training rows: {d.get('duplicate_rate')} "
                     f"(real holdout: {d.get('holdout_duplicate_rate')})")
    return "\n".join(lines)


#: the headline numbers of a report, in the order tables show them: column -> path in an ``evaluate_synthetic``
#: report (``perplexity`` is added by ``dpcare synth evaluate --synthesizer`` and by the dp2stage study)
SUMMARY = {
    "F1 LR": "ml_efficacy/logistic_regression/f1_minority",
    "F1 XGB": "ml_efficacy/xgboost/f1_minority",
    "AUC XGB": "ml_efficacy/xgboost/auc",
    "HIST20": "hist/bins_20",
    "HIST50": "hist/bins_50",
    "Pair": "pair",
    "CorAcc": "coracc",
    "ppl value": "perplexity/value",
    "ppl all": "perplexity/all",
    "DCR median": "dcr/synthetic_median",
    "dup rate": "dcr/duplicate_rate",
}


def summary(report: dict) -> dict:
    """The :data:`SUMMARY` numbers of a report: None where it has none (e.g. no perplexity) or the number is
    undefined (NaN), so the row is plain JSON."""
    values = {column: _get(report, path) for column, path in SUMMARY.items()}
    return {k: None if isinstance(v, float) and math.isnan(v) else v for k, v in values.items()}


def _get(d: dict, path: str):
    for part in path.split("/"):
        if not isinstance(d, dict) or part not in d:
            return None
        d = d[part]
    return d


def _fmt(v) -> str:
    return "-" if v is None else f"{v:.3f}" if isinstance(v, float) else str(v)
