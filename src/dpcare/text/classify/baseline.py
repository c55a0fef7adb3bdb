"""The public baseline of the note classifier: the best ICD coder that needs no private data, scored on the SAME
test notes as the private model, and the verdict (:func:`dpcare.verdict.compare`, resampling test PATIENTS).

* Feature-level methods (naive-fusion(-pub), feature-dp, calibrated-fusion, fusiondp) protect only the masked
  spans: the masked note ``x_pub`` and the ICD codes are public. The baseline is the same CAML (same shape,
  initialisation, learning rate, epochs) trained WITHOUT privacy on the masked training notes (the
  ``sgd-pub`` reference), its epoch and threshold chosen by micro-F1 on the masked validation notes, and
  scored on the masked test notes: it reads ``x_pub``, the codes and the patient index, never ``x``
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
        t = float(trained.best["threshold"])
        scores = predict_scores(trained.model, pub.tensors["test"]["x_pub"])
        entry.update(name=PUBLIC_VIEW, method="sgd-pub", threshold=t, best_epoch=trained.best["epoch"],
                     reads="the masked notes (x_pub), the ICD codes and the patient of each note")
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


__all__ = ["CONSTANT", "METRIC", "PUBLIC_VIEW", "micro_f1", "public_baseline", "public_views", "uses_public_view"]
