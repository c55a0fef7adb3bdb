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
:func:`logit_confidence`). Shadows train in parallel processes, so that function
must pickle (a module-level function or a ``functools.partial`` of one). The
tabular recipe's version is :func:`dpcare.tabular.audit.tabular_lira`.
"""

from __future__ import annotations

import multiprocessing
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field

import numpy as np
import torch

from dpcare.audit.likelihood_ratio import lira_scores
from dpcare.audit.metrics import attack_metrics
from dpcare.exceptions import DataError, SettingsError

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


def _train_and_score(task: tuple[TrainAndScore, np.ndarray, int]) -> np.ndarray:
    train_and_score, members, seed = task
    return np.asarray(train_and_score(members, seed), dtype=float)


def run_lira(train_and_score: TrainAndScore, n: int, shadows: int = 16, workers: int = 2, seed: int = 0,
             bootstrap: int = 200) -> LiraResult:
    """Train a target on a random half of a population of ``n`` examples and ``shadows`` shadow models on
    other random halves (all through ``train_and_score``); attack the target's membership over the population."""
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
    if workers > 1:
        with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn")) as pool:
            phis = np.stack(list(pool.map(_train_and_score, tasks)))
    else:
        phis = np.stack([_train_and_score(t) for t in tasks])
    elapsed = time.perf_counter() - t0
    target_phi, target_in = phis[0], masks[0]
    shadow_phi, shadow_in = phis[1:], masks[1:]
    online, offline = lira_scores(target_phi, shadow_phi, shadow_in)
    scores = {"LiRA online": (online[target_in], online[~target_in]),
              "LiRA offline": (offline[target_in], offline[~target_in])}
    return LiraResult(attack_metrics(*scores["LiRA online"], bootstrap=bootstrap),
                      attack_metrics(*scores["LiRA offline"], bootstrap=bootstrap), shadows, elapsed, scores)
