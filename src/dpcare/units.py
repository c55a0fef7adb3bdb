"""What every metric dpcare reports measures, and on which scale: one glossary for run.json's ``units``, the report
and the model card. A metric column is named by its split and base name ("test AUPRC", "validation f1_micro",
"real-test AUC XGB", "test MSE sd"); :func:`unit_of` strips the split and the statistic and looks up the base name.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

_SHARE = "0 to 1 (higher is better)"
_POOLED, _PER_CODE = "over every (note, code) pair pooled", "per ICD code, averaged over the codes"
_EFFICACY = "of {model} trained on the synthetic (or baseline) table and scored on the real test rows"

#: base metric name -> its unit and scale
UNITS: dict[str, str] = {
    "AUPRC": "area under the precision-recall curve of the positive class, 0 to 1 (higher is better; a constant "
             "prediction scores the prevalence)",
    "AUROC": "area under the ROC curve, 0 to 1 (higher is better; 0.5 is chance)",
    "MSE": "mean squared error of the forecast over every observed value of the windows, in standardised units (each "
           "variable centred and divided by its scale, so 1.0 is the error of a variable's variance; lower is better)",
    "FID": "Frechet distance between Gaussians fitted to the features of generated and real images (squared feature "
           "units of the run's own feature network, not Inception's: comparable within one run only); 0 is identical "
           "feature statistics, lower is better",
    "mean per-class FID": "the FID (see FID) within each class, averaged over the classes; lower is better",
    **{f"{m}_{avg}": f"{m} {_POOLED if avg == 'micro' else _PER_CODE}, {_SHARE}"
       for m in ("f1", "precision", "recall") for avg in ("micro", "macro")},
    "auc_micro": f"area under the ROC curve {_POOLED}, 0 to 1 (0.5 is chance)",
    "auc_macro": f"area under the ROC curve {_PER_CODE}, 0 to 1 (0.5 is chance)",
    "ner F1": f"exact-match entity F1 over the gold spans (start, end and label all equal), {_SHARE}",
    "ner_f1": f"exact-match entity F1 over the gold spans (start, end and label all equal), {_SHARE}",
    "ner_precision": f"exact-match entity precision, {_SHARE}",
    "ner_recall": f"exact-match entity recall, {_SHARE}",
    "ROUGE-L F1": f"ROUGE-L F1 of the summary against the reference (longest common subsequence of words), {_SHARE}",
    "rougeL_f1": f"ROUGE-L F1 of the summary against the reference (longest common subsequence of words), {_SHARE}",
    "perplexity": "per-token perplexity of the held-out text under the model (exp of the mean token cross-entropy; "
                  "1 is perfect, lower is better)",
    "AUC XGB": "ROC AUC " + _EFFICACY.format(model="XGBoost") + ", 0 to 1 (0.5 is chance)",
    "AUC LR": "ROC AUC " + _EFFICACY.format(model="logistic regression") + ", 0 to 1 (0.5 is chance)",
    "F1 XGB": "F1 of the minority class " + _EFFICACY.format(model="XGBoost") + f", {_SHARE}",
    "F1 LR": "F1 of the minority class " + _EFFICACY.format(model="logistic regression") + f", {_SHARE}",
    "HIST20": "mean overlap of each column's histogram, real test vs synthetic (20 bins per number), 0 to 1 (1 is "
              "identical marginals)",
    "HIST50": "mean overlap of each column's histogram, real test vs synthetic (50 bins per number), 0 to 1 (1 is "
              "identical marginals)",
    "Pair": "mean overlap of the joint histogram of every pair of columns, real test vs synthetic, 0 to 1 (1 is "
            "identical)",
    "CorAcc": "share of column pairs whose association level (low, weak, medium, strong) is the same in the real and "
              "the synthetic table, 0 to 1 (higher is better)",
    "ppl value": "perplexity of the value tokens of held-out real rows under the synthesizer (1 is perfect; lower is "
                 "better)",
    "ppl all": "perplexity of every token of held-out real rows under the synthesizer (1 is perfect; lower is better)",
    "DCR median": "median distance from a synthetic row to its closest real training row (numbers min-max scaled, a "
                  "category mismatch adds 1 to the squared distance); near 0 means copies",
    "dup rate": "share of synthetic rows equal to some real training row, 0 to 1 (lower is safer)",
}

_SPLIT = re.compile(r"^(test|validation|train|real-test)\s+")
_STATISTIC = re.compile(r"\s+(sd|\(mean\)|mean)$")


def unit_of(column: str) -> str | None:
    """The unit and scale of a metric column, or None for a name the glossary does not know."""
    base = _STATISTIC.sub("", _SPLIT.sub("", column.strip()))
    unit = UNITS.get(base) or UNITS.get(base.upper())
    if unit is None:
        return None
    return f"standard deviation over seeds of: {unit}" if column.strip().endswith(" sd") else unit


def units_for(rows: Iterable[dict[str, Any]]) -> dict[str, str]:
    """run.json's ``units`` for the numeric columns of ``rows`` the glossary knows."""
    out: dict[str, str] = {}
    for row in rows:
        for column, value in row.items():
            if column != "model" and isinstance(value, (int, float)) and not isinstance(value, bool):
                unit = unit_of(column)
                if unit is not None:
                    out.setdefault(column, unit)
    return out


__all__ = ["UNITS", "unit_of", "units_for"]
