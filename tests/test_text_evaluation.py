"""Span P/R/F1 by exact match, ROUGE-L against hand-computed values, perplexity."""

import math

import pytest

from dpcare.exceptions import DataError
from dpcare.text.evaluation import perplexity, rouge_l, span_scores
from dpcare.text.spans import Span


def s(start, end, label):
    return Span(start, end, label, "x" * (end - start))


def test_span_scores_exact_match_per_type_and_micro():
    gold = [[s(0, 4, "NAME"), s(10, 20, "DATE")], [s(3, 5, "DATE")]]
    pred = [[s(0, 4, "NAME"), s(10, 19, "DATE"), s(30, 33, "AGE")], [s(3, 5, "DATE"), s(3, 5, "DATE")]]
    t = span_scores(gold, pred)
    assert t.loc["NAME", ["tp", "precision", "recall", "f1"]].tolist() == [1, 1.0, 1.0, 1.0]
    assert t.loc["DATE", "tp"] == 1 and t.loc["DATE", "precision"] == 0.5 and t.loc["DATE", "recall"] == 0.5
    assert math.isnan(t.loc["AGE", "recall"]) and t.loc["AGE", "precision"] == 0.0
    micro = t.loc["micro"]
    assert (micro["tp"], micro["gold"], micro["predicted"]) == (2, 3, 4)  # the duplicate counts once
    assert micro["f1"] == pytest.approx(2 * 2 / (3 + 4))


def test_span_scores_need_aligned_notes():
    with pytest.raises(DataError, match="notes"):
        span_scores([[]], [])


def test_rouge_l_matches_the_longest_common_subsequence_by_hand():
    # reference 6 tokens, prediction 4 tokens, LCS "patient admitted with pneumonia" = 4
    r = rouge_l(["the patient was admitted with pneumonia"], ["patient admitted with pneumonia"])
    assert r["precision"] == pytest.approx(1.0) and r["recall"] == pytest.approx(4 / 6)
    assert r["fmeasure"] == pytest.approx(2 * (4 / 6) / (1 + 4 / 6))
    with pytest.raises(DataError):
        rouge_l([], [])


def test_perplexity():
    assert perplexity(10 * math.log(5), 10) == pytest.approx(5.0)
    with pytest.raises(DataError):
        perplexity(1.0, 0)
