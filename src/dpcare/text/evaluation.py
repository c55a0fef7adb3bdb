"""Metrics of clinical NLP outputs: exact-match span precision / recall / F1 (per type and micro),
ROUGE-L (Google's ``rouge-score`` package, the reference implementation) and perplexity.

A predicted span counts only if its start, end and type equal a gold span's (i2b2 2010 / 2014
"exact" matching); duplicates in a prediction count once.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Sequence

import pandas as pd

from dpcare.exceptions import DataError
from dpcare.text.spans import Span

MICRO = "micro"


def _keys(spans: Iterable[Span]) -> set[tuple[int, int, str]]:
    return {(s.start, s.end, s.label) for s in spans}


def span_scores(gold: Sequence[Sequence[Span]], predicted: Sequence[Sequence[Span]]) -> pd.DataFrame:
    """One row per type and a ``micro`` row: true positives, gold, predicted, precision, recall, F1.

    ``gold[i]`` and ``predicted[i]`` are the spans of note i. Precision of a type never predicted,
    and recall of a type absent from the gold spans, are NaN (not 0 or 1)."""
    if len(gold) != len(predicted):
        raise DataError(f"{len(gold)} notes of gold spans but {len(predicted)} of predictions")
    tp, n_gold, n_pred = Counter(), Counter(), Counter()
    for g, p in zip(gold, predicted):
        g, p = _keys(g), _keys(p)
        n_gold.update(k[2] for k in g)
        n_pred.update(k[2] for k in p)
        tp.update(k[2] for k in g & p)
    rows = [_row(t, tp[t], n_gold[t], n_pred[t]) for t in sorted(n_gold | n_pred)]
    rows.append(_row(MICRO, sum(tp.values()), sum(n_gold.values()), sum(n_pred.values())))
    return pd.DataFrame(rows).set_index("type")


def _row(kind: str, tp: int, gold: int, pred: int) -> dict:
    precision = tp / pred if pred else math.nan
    recall = tp / gold if gold else math.nan
    f1 = 2 * tp / (gold + pred) if gold + pred else math.nan
    return {"type": kind, "tp": tp, "gold": gold, "predicted": pred, "precision": precision, "recall": recall,
            "f1": f1}


def rouge_l(references: Sequence[str], predictions: Sequence[str]) -> dict[str, float]:
    """Mean ROUGE-L precision, recall and F1 over pairs (Porter stemming, as in most summarisation papers)."""
    from rouge_score import rouge_scorer

    if len(references) != len(predictions):
        raise DataError(f"{len(references)} references but {len(predictions)} predictions")
    if not references:
        raise DataError("ROUGE-L of no pairs")
    scorer = rouge_scorer.RougeScorer(["rougeL"], use_stemmer=True)
    scores = [scorer.score(r, p)["rougeL"] for r, p in zip(references, predictions)]
    return {k: sum(getattr(s, k) for s in scores) / len(scores) for k in ("precision", "recall", "fmeasure")}


def perplexity(total_nll: float, tokens: int) -> float:
    """exp(total negative log-likelihood in nats / number of predicted tokens)."""
    if tokens <= 0:
        raise DataError("perplexity needs at least one predicted token")
    return math.exp(total_nll / tokens)
