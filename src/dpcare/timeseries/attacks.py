"""Membership attacks on forecasters: the paper's LOSS attack (members = training windows, non-members =
the TEST patients' windows, which no selection step has seen) and LiRA from shadow models' losses, as
numbers and as attack files of a run folder (:func:`dpcare.audit.attack_payload`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from dpcare.audit import (
    attack_metrics,
    attack_payload,
    clustered_auc_interval,
    lira_scores,
    loss_attack,
)
from dpcare.audit.metrics import METRIC_NAMES
from dpcare.exceptions import DataError
from dpcare.timeseries.recipe import ForecastModel, TsfData, window_losses

LOSS_TITLE = "LOSS membership attack (training windows vs held-out test patients' windows)"
LIRA_TITLE = "LiRA membership attack (online; shadows on random halves of the train + test patients)"
PATIENT_CI = "AUC 95% interval (patients)"
PRIV = "TPR/FPR at the mean training loss"


def loss_attack_report(train_losses: np.ndarray, test_losses: np.ndarray, bootstrap: int = 200) -> dict:
    """The paper's LOSS attack (tau = mean real training loss) with members = training windows and
    non-members = TEST windows, plus the ROC metrics (flat: ``auc``, ``auc_ci``, ...)."""
    r = loss_attack(train_losses, test_losses, bootstrap=bootstrap)
    return {"tau": r.threshold, "tpr": r.tpr, "fpr": r.fpr, "priv": r.tpr_fpr_ratio, **flat_metrics(r.metrics)}


def flat_metrics(metrics: Mapping[str, Mapping[str, float]]) -> dict[str, Any]:
    """``attack_metrics`` output as {key: value, key_ci: [low, high]}."""
    return {k: v["value"] for k, v in metrics.items()} | {f"{k}_ci": [v["low"], v["high"]] for k, v in metrics.items()}


def attack_row(model: str, flat: Mapping[str, Any], **extra: Any) -> dict[str, Any]:
    """A report row from flat metrics: each metric as [value, low, high] under its display name."""
    return {"model": model, **{name: [flat[k], *flat[f"{k}_ci"]] for k, name in METRIC_NAMES.items() if k in flat},
            **extra}


def lira_statistic(losses: np.ndarray) -> np.ndarray:
    """phi = -log(loss): a monotone, roughly Gaussian per-window statistic for a regression loss."""
    return -np.log(np.asarray(losses, float) + 1e-8)


def lira_report(target_losses: np.ndarray, target_in: np.ndarray, shadow_losses: np.ndarray,
                shadow_in: np.ndarray, bootstrap: int = 200) -> dict:
    """LiRA (online and offline) over the population windows from the shadows' losses."""
    online, offline = lira_scores(lira_statistic(target_losses), lira_statistic(shadow_losses), shadow_in)
    return {"online": flat_metrics(attack_metrics(online[target_in], online[~target_in], bootstrap=bootstrap)),
            "offline": flat_metrics(attack_metrics(offline[target_in], offline[~target_in], bootstrap=bootstrap)),
            "shadows": int(shadow_in.shape[0]), "scores": {"members": online[target_in].tolist(),
                                                           "nonmembers": online[~target_in].tolist()}}


def loss_audit(fitted: ForecastModel, data: TsfData | None = None, bootstrap: int = 200) -> dict:
    """The LOSS attack on a fitted forecaster: its training windows against the held-out TEST patients'
    windows, with a patient-level bootstrap interval of the AUC; an attack file's payload. ``data``: the
    windows it was fitted on (default: those ``fit`` kept in this process)."""
    data = data if data is not None else fitted.prepared
    if data is None:
        raise DataError("the LOSS audit needs the windows the model was fitted on: run it in the process that "
                        "fitted the model (dpcare forecast fit --audit)")
    train, test = data.part("train"), data.part("test")
    tr, te = window_losses(fitted.model, train), window_losses(fitted.model, test)
    report = loss_attack_report(tr, te, bootstrap)
    name = fitted.settings.method
    ci = clustered_auc_interval(-tr, train.patient, -te, test.patient)
    row = attack_row(name, report, **{PATIENT_CI: ci, PRIV: report["priv"], "member windows": len(tr),
                                      "non-member windows": len(te), "member patients": len(train.patients()),
                                      "non-member patients": len(test.patients())})
    return attack_payload(LOSS_TITLE, [row], {name: (-tr, -te)}, threshold=report["tau"])


__all__ = ["LIRA_TITLE", "LOSS_TITLE", "attack_row", "flat_metrics", "lira_report", "lira_statistic",
           "loss_attack_report", "loss_audit"]
