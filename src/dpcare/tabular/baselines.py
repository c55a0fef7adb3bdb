"""The tabular recipe's public baselines: predictors that need no private data, the strongest chosen on VALIDATION
rows (issue 54; never on the test rows the verdict is scored on).

When only some columns are private (Feature-DP, the fusion family) the public columns and the label are public,
so a release is worth it only if it beats what those alone give. The panel, each fitted without privacy on the
training rows' public view (pad(Psi(x)): the private columns replaced, as the public branch sees them):

* a constant: the training prevalence (AUROC 0.5);
* logistic regression (scikit-learn, L2, standardised inputs);
* gradient boosting (scikit-learn's HistGradientBoostingClassifier, its defaults);
* the recipe's own MLP (passed in: trained as the private model is, without noise).

A wide MLP trained on a few hundred rows overfits; a plain logistic regression on the same public columns can
beat it, and a verdict against the MLP alone then credits the private columns with what is only regularisation.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from sklearn.ensemble import HistGradientBoostingClassifier
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import average_precision_score, roc_auc_score
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

Scorer = Callable[[np.ndarray], np.ndarray]  # public view -> probability of the positive class


@dataclass(frozen=True)
class Candidate:
    """One fitted public predictor and its validation scores."""

    name: str
    score: Scorer
    validation_auprc: float
    validation_auroc: float

    def summary(self) -> dict[str, float | str]:
        return {"name": self.name, "validation AUPRC": self.validation_auprc,
                "validation AUROC": self.validation_auroc}


def fit_panel(x_train: np.ndarray, y_train: np.ndarray, seed: int) -> dict[str, Scorer]:
    """The panel's predictors other than the recipe's MLP, fitted on the training rows' public view."""
    prevalence = float(np.mean(y_train))
    panel: dict[str, Scorer] = {"a constant (the training prevalence)": lambda x: np.full(len(x), prevalence)}
    if len(np.unique(y_train)) < 2:  # nothing else can be fitted on one class
        return panel
    logistic = make_pipeline(StandardScaler(), LogisticRegression(max_iter=2000)).fit(x_train, y_train)
    boosting = HistGradientBoostingClassifier(random_state=seed).fit(x_train, y_train)
    panel["logistic regression on the public columns"] = lambda x: logistic.predict_proba(x)[:, 1]
    panel["gradient boosting on the public columns"] = lambda x: boosting.predict_proba(x)[:, 1]
    return panel


def choose(panel: dict[str, Scorer], x_val: np.ndarray, y_val: np.ndarray) -> tuple[Candidate, list[Candidate]]:
    """Score every predictor on the validation rows; the best by validation AUPRC (ties: the earlier, simpler
    one) and all of them. Only validation rows are read here."""
    scored = []
    for name, score in panel.items():
        p = score(x_val)
        scored.append(Candidate(name, score, float(average_precision_score(y_val, p)), float(roc_auc_score(y_val, p))))
    best = max(scored, key=lambda c: c.validation_auprc)  # max keeps the first of equals
    return best, scored


__all__ = ["Candidate", "choose", "fit_panel"]
