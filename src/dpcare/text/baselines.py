"""Public baselines of the fine-tuned note models (NER, summarisation), on the SAME notes, with the verdict of
:func:`dpcare.verdict.compare` (paired bootstrap over PATIENTS: a patient's notes are drawn together).

* NER: the public lexicon (:mod:`dpcare.text.lexicon_ner`: ICD-10-CM problems, drug names, CLIF lab tests, found
  by longest match; labels problem / treatment / test), and the base model WITHOUT fine-tuning, decoded the same
  way as the model. Neither read a private note: the vocabularies and the pre-training data are public.
* Summarisation: the base model without fine-tuning (the same greedy prompt), and LEAD-k: the first ``k``
  sentences of the source. ``k`` is fixed beforehand (:data:`LEAD_SENTENCES` = 3, the customary LEAD-3 of
  summarisation papers), never chosen on the notes scored.

A model "beats the public baseline" only when the whole 95% interval of its improvement is above 0 against
EVERY baseline (choosing the better baseline on the scored notes would be a selection on test data); the
binding comparison (the lowest bound) gives the verdict.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import numpy as np

from dpcare.exceptions import DataError
from dpcare.text.spans import Span

#: sentences of the LEAD baseline, fixed before any note is read (LEAD-3)
LEAD_SENTENCES = 3
BASE_MODEL = "the base model without fine-tuning"
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+|\n+")


def lead(source: str, k: int = LEAD_SENTENCES) -> str:
    """The first ``k`` sentences of ``source`` (a sentence ends at . ! or ? followed by white space, or at a
    line break)."""
    if k < 1:
        raise DataError(f"the lead baseline needs k >= 1 sentences, got {k}")
    sentences = [s.strip() for s in _SENTENCE_END.split(source.strip()) if s.strip()]
    return " ".join(sentences[:k])


def lead_name(k: int = LEAD_SENTENCES) -> str:
    return f"LEAD-{k} (the first {k} sentences of the source)"


def rouge_l_per_note(references: Sequence[str], predictions: Sequence[str]) -> np.ndarray:
    """ROUGE-L F1 of every pair (the mean is :func:`dpcare.text.evaluation.rouge_l`'s fmeasure)."""
    from rouge_score import rouge_scorer

    if len(references) != len(predictions):
        raise DataError(f"{len(references)} references but {len(predictions)} predictions")
    scorer = rouge_scorer.RougeScorer(["rougeL"], use_stemmer=True)
    return np.array([scorer.score(r, p)["rougeL"].fmeasure for r, p in zip(references, predictions)], float)


def span_counts(gold: Sequence[Sequence[Span]], predicted: Sequence[Sequence[Span]]) -> np.ndarray:
    """Per note [true positives, predicted, gold] of exact-match spans (duplicates counted once)."""
    if len(gold) != len(predicted):
        raise DataError(f"{len(gold)} notes of gold spans but {len(predicted)} of predictions")
    rows = []
    for g, p in zip(gold, predicted):
        g, p = {(s.start, s.end, s.label) for s in g}, {(s.start, s.end, s.label) for s in p}
        rows.append((len(g & p), len(p), len(g)))
    return np.array(rows, float).reshape(-1, 3)


def micro_f1(_truth: np.ndarray, counts: np.ndarray) -> float:
    """Exact-match micro-F1 of per-note counts [tp, predicted, gold] (0 when nothing is predicted or gold)."""
    tp, pred, gold = counts.sum(0)
    return float(2 * tp / (pred + gold)) if pred + gold else 0.0


def mean(_truth: np.ndarray, values: np.ndarray) -> float:
    return float(np.mean(values))


def compare_on_notes(metric: str, model: np.ndarray, baselines: dict[str, np.ndarray], patients: Sequence[str],
                     seed: int = 0, resamples: int = 1000) -> dict[str, Any]:
    """The model's per-note values (``model``: per-note counts for ``ner F1``, ROUGE-L F1 per note otherwise)
    against every baseline's on the same notes, resampling ``patients``: per baseline its comparison, and the
    verdict of the binding one."""
    from dpcare.verdict import compare

    fn = micro_f1 if metric == "ner F1" else mean
    truth = np.zeros(len(model))
    groups = np.asarray(patients)
    comparisons = [compare(metric, fn, truth, model, values, name, groups=groups, seed=seed,
                           resamples=resamples).to_dict() for name, values in baselines.items()]
    binding = min(comparisons, key=lambda c: c["low"])
    return {"comparisons": comparisons, "beats": all(c["beats"] for c in comparisons),
            "verdict": binding["verdict"], "notes": len(model), "patients": len(set(patients))}


__all__ = ["BASE_MODEL", "LEAD_SENTENCES", "compare_on_notes", "lead", "lead_name", "mean", "micro_f1",
           "rouge_l_per_note", "span_counts"]
