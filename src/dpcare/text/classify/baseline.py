"""The public baseline of the note classifier: the best ICD coder that needs no private data, scored on the SAME
test notes as the private model, and the verdict (:func:`dpcare.verdict.compare`, resampling test PATIENTS).

* Feature-level methods (naive-fusion(-pub), feature-dp, calibrated-fusion, fusiondp) protect only the masked
  spans: the masked note ``x_pub`` and the ICD codes are public. The baseline is the better, by micro-F1 on the
  masked VALIDATION notes (issue 54: the strongest public coder, never chosen on test notes), of a panel of two
  coders trained WITHOUT privacy on the masked training notes: the same CAML (same shape, initialisation,
  learning rate, epochs; the ``sgd-pub`` reference, its epoch and threshold chosen on the validation notes)
  and a TF-IDF bag of words with one logistic regression per code (:func:`tfidf_coder`, its threshold chosen
  on the validation notes). Both read ``x_pub``, the codes and the patient index, never ``x``
  (:func:`public_views`). The hybrid view (masks filled by a public LM) is public as well; it is not the
  baseline here (``sgd-hybrid`` is a reference method of its own).
* DP-SGD protects every note of a patient, the codes included, and the non-private references protect
  nothing: no training note is public. The baseline is then the constant prediction of every code of the label
  set for every note; it needs the label set alone, which the model itself releases (an uncounted release
  listed in the DP-SGD guarantee). Predicting every code dominates predicting none (micro-F1 0) and needs no
  choice on any split.

The metric is micro-F1 at each model's own validation threshold; the 95% interval of the difference comes
from a paired bootstrap over the test patients (a patient's notes are drawn together). "beats" only when the
whole interval is above 0.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from dpcare.exceptions import DataError
from dpcare.text.classify.multilabel import multilabel_metrics
from dpcare.text.classify.settings import NoteClassifierSettings

if TYPE_CHECKING:
    from dpcare.text.classify.data import TextViews

METRIC = "test f1_micro"
PUBLIC_VIEW = "the same CAML without privacy on the masked notes only (sgd-pub)"
CONSTANT = "every code of the label set for every note (the labels are private)"
TFIDF = "TF-IDF logistic regression per code on the masked notes only (non-private)"


def public_views(views: TextViews) -> TextViews:
    """The views with everything private removed: per split the masked note's ids (as ``x`` and ``x_pub``),
    the codes and the patient index. The original note ``x`` and the hybrid view are not carried."""
    from dpcare.text.classify.data import TextViews

    tensors = {s: {"x": t["x_pub"], "x_pub": t["x_pub"], "y": t["y"], "patient": t["patient"]}
               for s, t in views.tensors.items()}
    return TextViews(tensors, views.codes, views.embedding, {})


def micro_f1(truth: np.ndarray, predicted: np.ndarray) -> float:
    """Micro-F1 of boolean [notes, codes] decisions (0 when nothing is predicted and nothing is true)."""
    tp = float(np.logical_and(truth, predicted).sum())
    den = float(truth.sum() + predicted.sum())
    return 2 * tp / den if den else 0.0


def uses_public_view(settings: NoteClassifierSettings) -> bool:
    """True for the feature-level methods (the masked note and the codes are public)."""
    return settings.private and settings.method != "dp-sgd"


def public_baseline(views: TextViews, settings: NoteClassifierSettings, model_scores: torch.Tensor, threshold: float,
                    progress: bool = False) -> dict[str, Any]:
    """The baseline of ``settings.method`` on the test notes of ``views``, and the private model against it
    (``model_scores``: its scores of the test notes [notes, codes], decisions at ``threshold``): ``name``, ``method``, ``metrics`` (test metrics of the baseline), ``comparisons``
    (one, micro-F1, with the verdict), ``test notes`` and ``test patients``."""
    from dpcare.text.classify.recipe import predict_scores, train_views
    from dpcare.verdict import compare

    test = views.tensors["test"]
    truth = test["y"].numpy().astype(bool)
    ours = torch.as_tensor(model_scores).numpy() >= threshold
    if ours.shape != truth.shape:
        raise DataError(f"the model's scores {ours.shape} are not those of the {truth.shape} test notes x codes")
    entry: dict[str, Any] = {}
    if uses_public_view(settings):
        pub = public_views(views)
        trained = train_views(pub, replace(settings, method="sgd-pub"), progress=progress)
        caml = {"name": PUBLIC_VIEW, "method": "sgd-pub", "threshold": float(trained.best["threshold"]),
                "best_epoch": trained.best["epoch"], "validation f1_micro": float(trained.best["f1_micro"]),
                "scores": predict_scores(trained.model, pub.tensors["test"]["x_pub"])}
        bow = tfidf_coder(pub, seed=settings.dp.seed)
        panel = [caml, bow]
        best = max(panel, key=lambda c: c["validation f1_micro"])  # max keeps the first (CAML) of equals
        t, scores = best["threshold"], best["scores"]
        entry.update({k: v for k, v in best.items() if k != "scores"},
                     reads="the masked notes (x_pub), the ICD codes and the patient of each note",
                     panel=[{k: c[k] for k in ("name", "validation f1_micro")} for c in panel],
                     **{"chosen on": "validation micro-F1"})
    else:
        t, scores = 0.5, torch.ones(truth.shape)
        entry.update(name=CONSTANT, method="constant", threshold=t, reads="the label set")
    theirs = scores.numpy() >= t
    metrics = multilabel_metrics(scores, test["y"], t)
    comparison = compare(METRIC, micro_f1, truth, ours, theirs, entry["name"], groups=test["patient"].numpy(),
                         seed=settings.dp.seed)
    return {**entry, "metrics": {f"test {k}": float(v) for k, v in metrics.items()},
            "comparisons": [comparison.to_dict()], "test notes": len(truth),
            "test patients": len(torch.unique(test["patient"]))}


def bag_of_words(ids: torch.Tensor, vocabulary: int):
    """Token counts of each note [notes, vocabulary] (a sparse matrix) from padded ids; <pad> (id 0) not counted."""
    from scipy.sparse import csr_matrix

    ids = torch.as_tensor(ids).numpy()
    rows, cols = np.nonzero(ids)
    return csr_matrix((np.ones(len(rows)), (rows, ids[rows, cols])), shape=(ids.shape[0], vocabulary))


def tfidf_coder(views: TextViews, seed: int = 0) -> dict[str, Any]:
    """A TF-IDF bag of words of the masked notes with one logistic regression per code, fitted on the training
    notes of the PUBLIC ``views`` (:func:`public_views`), its threshold chosen by micro-F1 on the validation
    notes; a code every training note has (or none has) is predicted by its constant. Returns the panel entry
    with the test notes' ``scores``."""
    import warnings

    from sklearn.feature_extraction.text import TfidfTransformer
    from sklearn.linear_model import LogisticRegression
    from sklearn.multiclass import OneVsRestClassifier

    from dpcare.text.classify.multilabel import choose_threshold

    vocabulary = views.embedding.shape[0]
    train, val, test = (views.tensors[s] for s in ("train", "val", "test"))
    tfidf = TfidfTransformer(sublinear_tf=True).fit(bag_of_words(train["x_pub"], vocabulary))
    x = {name: tfidf.transform(bag_of_words(t["x_pub"], vocabulary)) for name, t in (("train", train), ("val", val),
                                                                                     ("test", test))}
    with warnings.catch_warnings():  # "Label ... is present in all training examples": predicted as its constant
        warnings.filterwarnings("ignore", message="Label .* present in all training examples")
        coder = OneVsRestClassifier(LogisticRegression(C=10.0, max_iter=1000, random_state=seed)).fit(
            x["train"], train["y"].numpy().astype(int))
    val_scores = coder.predict_proba(x["val"])
    t = choose_threshold(torch.from_numpy(val_scores), val["y"])
    val_f1 = micro_f1(val["y"].numpy().astype(bool), val_scores >= t)
    return {"name": TFIDF, "method": "tfidf-logistic", "threshold": float(t), "validation f1_micro": float(val_f1),
            "scores": torch.from_numpy(coder.predict_proba(x["test"])).float()}


__all__ = ["CONSTANT", "METRIC", "PUBLIC_VIEW", "TFIDF", "bag_of_words", "micro_f1", "public_baseline",
           "public_views", "tfidf_coder", "uses_public_view"]
