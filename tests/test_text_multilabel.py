"""Multi-label ICD coding: label set from training labels, encoding, metrics equal to scikit-learn's."""

import numpy as np
import pytest
import torch
from sklearn.metrics import f1_score, precision_score, recall_score, roc_auc_score

from dpcare.exceptions import DataError
from dpcare.text.classify.multilabel import LabelSet, choose_threshold, multilabel_metrics, per_example_bce

TRAIN = [["I10", "E119"], ["I10", "N179"], ["I10"], ["E119", "J449"], ["N179", "E119", "I10"]]


def test_top_k_counts_training_notes_once_each_and_breaks_ties_by_code():
    labels = LabelSet.top_k(TRAIN + [["J449", "J449"]], 3)  # J449 twice in one note counts once
    assert labels.codes == ("I10", "E119", "J449")
    assert labels.train_counts == {"I10": 4, "E119": 3, "J449": 2}


def test_encode_drops_codes_outside_the_set_with_a_count_and_strict_refuses():
    labels = LabelSet.top_k(TRAIN, 2)
    y = labels.encode([["I10", "Z66"], ["E119", "Z66", "N179"], []])
    assert y.tolist() == [[1, 0], [0, 1], [0, 0]]
    assert labels.ignored([["I10", "Z66"], ["E119", "Z66", "N179"]]) == {"Z66": 2, "N179": 1}
    with pytest.raises(DataError, match="outside the label set.*N179"):
        labels.encode([["N179"]], strict=True)
    assert labels.encode([["I10"]], strict=True).tolist() == [[1, 0]]


def test_strict_encode_refuses_a_required_code_no_training_note_carries():
    published = LabelSet(["I10", "Z66"], train_counts={"I10": 4, "Z66": 0})
    assert published.missing_from_training() == ["Z66"]
    with pytest.raises(DataError, match="occur in no training note.*Z66"):
        published.encode([["I10"]], strict=True)
    assert published.encode([["Z66"]]).tolist() == [[0, 1]]


def _example():
    rng = np.random.default_rng(3)
    y = rng.random((40, 6)) < 0.3
    y[0], y[1] = True, False  # every code has both classes
    s = np.clip(0.35 * y + rng.random((40, 6)) * 0.7, 0, 1).round(2)  # ties in the scores
    return s, y.astype(int)


def test_metrics_equal_scikit_learn():
    s, y = _example()
    got = multilabel_metrics(torch.tensor(s), torch.tensor(y), threshold=0.5)
    pred = (s >= 0.5).astype(int)
    for avg in ("micro", "macro"):
        kw = {"average": avg, "zero_division": 0}
        assert got[f"precision_{avg}"] == pytest.approx(precision_score(y, pred, **kw))
        assert got[f"recall_{avg}"] == pytest.approx(recall_score(y, pred, **kw))
        assert got[f"f1_{avg}"] == pytest.approx(f1_score(y, pred, **kw))
        assert got[f"auc_{avg}"] == pytest.approx(roc_auc_score(y, s, average=avg))


def test_macro_metrics_count_undefined_codes_as_zero_and_skip_one_class_codes_in_auc():
    s, y = _example()
    y[:, 2] = 0  # never true: precision/recall/F1 of the code are 0, its AUC undefined
    got = multilabel_metrics(s, y, threshold=0.99)
    pred = (s >= 0.99).astype(int)
    assert got["f1_macro"] == pytest.approx(f1_score(y, pred, average="macro", zero_division=0))
    keep = [0, 1, 3, 4, 5]
    assert got["auc_macro"] == pytest.approx(roc_auc_score(y[:, keep], s[:, keep], average="macro"))


def test_choose_threshold_maximises_micro_f1_over_the_grid():
    s, y = _example()
    grid = np.round(np.arange(0.05, 1.0, 0.05), 2)
    best = choose_threshold(s, y, grid)
    f1 = [f1_score(y, (s >= g).astype(int), average="micro") for g in grid]
    assert best == grid[int(np.argmax(f1))]
    assert multilabel_metrics(s, y, best)["f1_micro"] == pytest.approx(max(f1))


def test_per_example_bce_sums_over_codes():
    logits, y = torch.randn(3, 4), torch.tensor([[1, 0, 0, 1]] * 3)
    want = torch.nn.functional.binary_cross_entropy_with_logits(logits, y.float(), reduction="sum") / 3
    assert per_example_bce(logits, y).shape == (3,)
    torch.testing.assert_close(per_example_bce(logits, y).mean(), want)
