"""Attacks and audits: membership inference (LOSS, LiRA), one-run epsilon lower bounds, attribute inference,
metrics. They take models, scores or a training function (numbers in, numbers out); the recipes train what
they attack (the tabular glue: :mod:`dpcare.tabular.audit`)."""

from dpcare.audit.attribute import attribute_inference, theorem4_bound
from dpcare.audit.likelihood_ratio import lira_scores
from dpcare.audit.lira import LiraResult, logit_confidence, run_lira
from dpcare.audit.loss_attack import (
    LossAttackResult,
    loss_attack,
    per_example_losses,
    sklearn_losses,
)
from dpcare.audit.metrics import (
    attack_metrics,
    attack_payload,
    attack_row,
    clustered_auc_interval,
    plot_roc,
)
from dpcare.audit.one_run import epsilon_lower_bound, one_run_audit, p_value

__all__ = [
    "LiraResult",
    "LossAttackResult",
    "attack_metrics",
    "attack_payload",
    "attack_row",
    "attribute_inference",
    "clustered_auc_interval",
    "epsilon_lower_bound",
    "lira_scores",
    "logit_confidence",
    "loss_attack",
    "one_run_audit",
    "p_value",
    "per_example_losses",
    "plot_roc",
    "run_lira",
    "sklearn_losses",
    "theorem4_bound",
]
