"""The likelihood-ratio attack (LiRA, Carlini et al. 2022), online and offline.

Shadow models are trained with the SAME recipe as the target (same training code,
method, epsilon and hyperparameters) on random halves of a population, so every
example is "in" about half of the shadows. Per example the score is the
logit-scaled confidence of its true label, phi = log(p / (1 - p)) (a binary
model's logit with its sign set by the label). Per example, Gaussians are fitted
to the shadows' phi when it was in and when it was out:

    online:  log N(phi; mu_in, s_in) - log N(phi; mu_out, s_out)
    offline: log P[phi_out <= phi]   (one-sided, out-shadows only)

The attack knows no model family: it is given ``train_and_score(members, seed)``,
which trains one model on the population examples ``members`` (indices) and
returns phi for every example of the population (e.g. with
:func:`logit_confidence`). With ``workers`` > 1 the target and shadows train as
Ray tasks (:mod:`dpcare.parallel`: this machine, or a cluster), so that function
must pickle (a module-level function or a ``functools.partial`` of one); each
model's seed is fixed by its position, so the result does not depend on
``workers``. The tabular recipe's version is :func:`dpcare.tabular.audit.tabular_lira`.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from dpcare.audit.likelihood_ratio import lira_scores
from dpcare.audit.metrics import attack_metrics
from dpcare.exceptions import DataError, SettingsError
from dpcare.runs.folder import fingerprint
from dpcare.runs.journal import journaled_map

#: train_and_score(members, seed) -> phi of every population example
TrainAndScore = Callable[[np.ndarray, int], np.ndarray]


def logit_confidence(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor) -> np.ndarray:
    """phi = log p_y - log(1 - p_y), computed stably from the logits."""
    model.eval()
    with torch.no_grad():
        z = model(x)
    if z.shape[1] == 1:
        sign = 2 * y.float() - 1
        return (sign * z[:, 0]).numpy().astype(float)
    logp = torch.log_softmax(z, 1)
    ly = logp.gather(1, y.long()[:, None])[:, 0]
    rest = torch.logsumexp(logp.scatter(1, y.long()[:, None], float("-inf")), 1)
    return (ly - rest).numpy().astype(float)


@dataclass
class LiraResult:
    online: dict
    offline: dict
    shadows: int
    seconds_shadows: float
    scores: dict = field(default_factory=dict, repr=False)  # name -> (member scores, non-member scores)

    def to_dict(self) -> dict:
        return {"attack": "lira", "shadows": self.shadows, "seconds_shadows": self.seconds_shadows,
                "online": self.online, "offline": self.offline}


def _train_and_score(train_and_score: TrainAndScore, members: np.ndarray, seed: int) -> np.ndarray:
    return np.asarray(train_and_score(members, seed), dtype=float)


def run_lira(train_and_score: TrainAndScore, n: int, shadows: int = 16, workers: int = 2, seed: int = 0,
             bootstrap: int = 200, journal: Path | None = None, journal_settings: str = "") -> LiraResult:
    """Train a target on a random half of a population of ``n`` examples and ``shadows`` shadow models on
    other random halves (all through ``train_and_score``); attack the target's membership over the population.

    ``journal``: a JSON-lines file where each trained model's scores are kept as it finishes, so that an
    interrupted attack rerun with the same ``n``, ``shadows``, ``seed`` and ``journal_settings`` (what else
    defines the models: the recipe, the population's fingerprint) trains only the missing ones."""
    if shadows < 2:
        raise SettingsError(f"LiRA needs at least 2 shadow models, got {shadows}")
    if n < 4:
        raise DataError(f"the population has {n} rows; LiRA needs more")
    rng = np.random.default_rng(seed)
    halves = [rng.permutation(n)[: n // 2] for _ in range(shadows + 1)]
    masks = np.zeros((shadows + 1, n), dtype=bool)
    for i, h in enumerate(halves):
        masks[i, h] = True
    tasks = [(train_and_score, h, seed + 1 + i) for i, h in enumerate(halves)]
    t0 = time.perf_counter()
    keys = ["target"] + [f"shadow {i}" for i in range(1, shadows + 1)]
    settings = fingerprint({"n": n, "shadows": shadows, "seed": seed, "caller": journal_settings})
    phis = np.stack(journaled_map(_train_and_score, tasks, keys, journal, settings, workers,
                                  decode=lambda r: np.asarray(r, dtype=float)))
    elapsed = time.perf_counter() - t0
    target_phi, target_in = phis[0], masks[0]
    shadow_phi, shadow_in = phis[1:], masks[1:]
    online, offline = lira_scores(target_phi, shadow_phi, shadow_in)
    scores = {"LiRA online": (online[target_in], online[~target_in]),
              "LiRA offline": (offline[target_in], offline[~target_in])}
    return LiraResult(attack_metrics(*scores["LiRA online"], bootstrap=bootstrap),
                      attack_metrics(*scores["LiRA offline"], bootstrap=bootstrap), shadows, elapsed, scores)
