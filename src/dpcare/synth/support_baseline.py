"""The public baseline of a DP synthetic table: independent sampling from the declared support.

A DP synthetic table is worth releasing only if it beats what anyone can make without the private data.
Anyone holding the spec can draw every column independently and uniformly from its declared bounds or
category list: :func:`support_table` does exactly that, from the spec alone (it takes no table, so it
cannot read a private value). :func:`compare_to_public` then trains the ML-efficacy models on the DP
synthetic table and on a baseline table of the same size, scores both on the SAME real test rows and
compares them with a paired bootstrap over those rows (:func:`dpcare.verdict.compare`).

Columns without a declared support: a numeric column without ``bounds`` or a categorical one without
``categories`` is LEFT OUT of the baseline: every baseline row is missing there (the models see no
information in it), and the baseline record names it. The synthesizer itself may know more about such a
column (a DP range estimate, charged to its budget), so the baseline is then slightly weaker than a
public one could be; it is said so. The target must declare its categories (ML efficacy needs them).
Declared-nullable columns are never missing in the baseline: the missing rate is not public.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from dpcare.data.schema import TableSchema
from dpcare.exceptions import SettingsError, SpecError

NAME = "independent sampling from the declared support"
HOW = ("each column drawn independently and uniformly from the spec's declared bounds or categories, as many rows "
       "as the synthetic table; no private value read")
#: the ML-efficacy scores compared: (column name in run.json, evaluation model); the first gives the verdict
METRICS = (("AUC XGB", "xgboost"), ("AUC LR", "logistic_regression"))
UNDEFINED = "undefined: the synthetic table has one class of the target"


def undeclared(schema: TableSchema) -> list[str]:
    """The columns whose support the spec does not declare (left out of the baseline)."""
    return [c.name for c in schema.columns
            if (c.kind == "numeric" and c.bounds is None) or (c.kind == "categorical" and not c.categories)]


def support_table(schema: TableSchema, n: int, seed: int = 0) -> pd.DataFrame:
    """``n`` rows, each column drawn independently and uniformly from its declared bounds (numbers) or
    category list; a column without a declared support is all missing (see the module docstring). A
    function of the spec, ``n`` and ``seed`` only."""
    if not isinstance(n, (int, np.integer)) or isinstance(n, bool) or n < 1:
        raise SettingsError(f"the baseline table needs at least one row, got n = {n!r}")
    target = schema.column(schema.target)
    if not target.categories:
        raise SpecError(f"the target '{schema.target}' declares no categories: the public baseline (and ML "
                        "efficacy) need them in the spec")
    rng = np.random.default_rng(seed)
    out: dict[str, Any] = {}
    for c in schema.columns:  # one generator, columns in spec order: each draw depends on the spec alone
        if c.kind == "categorical" and c.categories:
            out[c.name] = pd.Series(rng.choice(np.array(c.categories, dtype=object), n), dtype=object)
        elif c.kind == "numeric" and c.bounds is not None:
            out[c.name] = rng.uniform(c.bounds[0], c.bounds[1], n)
        else:
            out[c.name] = np.full(n, np.nan) if c.kind == "numeric" else pd.Series([None] * n, dtype=object)
    return pd.DataFrame(out)


def _undefined(label: str, synthetic: pd.DataFrame, schema: TableSchema, baseline_auc: float | None) -> dict:
    values = synthetic[schema.target].dropna().astype(str).unique().tolist()
    which = f"{values[0]!r} in all {len(synthetic)} rows" if len(values) == 1 else f"no valid value in {len(synthetic)} rows"
    return {"metric": f"real-test {label}", "model": None, "baseline_name": NAME, "baseline": baseline_auc,
            "beats": False, "undefined": True,
            "verdict": f"{UNDEFINED} ({which}): its ML efficacy is undefined; do not release"}


def compare_to_public(synthetic: pd.DataFrame, real_test: pd.DataFrame, schema: TableSchema, seed: int = 0,
                      resamples: int = 1000, baseline: pd.DataFrame | None = None) -> dict[str, Any]:
    """The DP ``synthetic`` table against the public baseline on the real test rows: for each of
    :data:`METRICS`, the model trained on each table, its per-row scores on ``real_test`` and a paired
    bootstrap of the AUROC difference over those rows. ``baseline``: the baseline table (default
    ``support_table(schema, len(synthetic), seed)``). Returns the run.json ``baselines`` record: name,
    rows, left-out columns, the baseline's metrics, the synthetic table's, one comparison per metric
    (each with its verdict) and ``verdict`` (the first metric's)."""
    from sklearn.metrics import roc_auc_score

    from dpcare.synth.evaluate import check_table, efficacy_scores
    from dpcare.verdict import compare

    synthetic = check_table(synthetic, schema, "synthetic")
    if baseline is None:
        baseline = support_table(schema, len(synthetic), seed)
    comparisons, ours_metrics, base_metrics, units = [], {}, {}, 0
    for label, model in METRICS:
        y, ours, positive = efficacy_scores(synthetic, real_test, schema, seed, model)
        _, theirs, _ = efficacy_scores(baseline, real_test, schema, seed, model)
        units = len(y)
        base_auc = float(roc_auc_score(y, theirs)) if theirs is not None else None
        base_metrics[label] = base_auc
        ours_metrics[label] = float(roc_auc_score(y, ours)) if ours is not None else None
        if ours is None:
            comparisons.append(_undefined(label, synthetic, schema, base_auc))
        elif theirs is None:  # only when the baseline has very few rows: uniform draws hit every category
            comparisons.append({"metric": f"real-test {label}", "model": ours_metrics[label], "baseline_name": NAME,
                                "baseline": None, "beats": False, "undefined": True,
                                "verdict": "undefined: the baseline table has one class of the target (too few "
                                           "rows to compare)"})
        else:
            comparisons.append(compare(f"real-test {label}", roc_auc_score, y, ours, theirs, NAME,
                                       resamples=resamples, seed=seed).to_dict())
    left_out = undeclared(schema)
    counts = synthetic[schema.target].value_counts(dropna=False)
    return {"name": NAME, "how": HOW, "rows": len(baseline), "synthetic_rows": len(synthetic), "test_rows": units,
            "synthetic_target": {str(k): int(v) for k, v in counts.items()},
            "positive_class": positive, "left_out": left_out, "metrics": base_metrics, "model_metrics": ours_metrics,
            "comparisons": comparisons, "verdict": comparisons[0]["verdict"]}


def describe(record: dict[str, Any]) -> str:
    """The console lines of a :func:`compare_to_public` record (the first is the verdict)."""
    head = f"public baseline ({record['name']}, {record['rows']} rows; {record['test_rows']} real test rows): "
    lines = [head + record["verdict"]]
    lines += [f"  {c['metric']}: {c['verdict']}" for c in record["comparisons"][1:]]
    if record.get("left_out"):
        lines.append(f"  left out of the baseline (no declared bounds or categories: all missing there): "
                     f"{record['left_out']}")
    return "\n".join(lines)


__all__ = ["METRICS", "NAME", "UNDEFINED", "compare_to_public", "describe", "support_table", "undeclared"]
