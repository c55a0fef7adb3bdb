"""The likelihood-ratio attack (LiRA, Carlini et al. 2022), online and offline.

Shadow models are trained with the SAME recipe as the target (our engine, same
method, epsilon and hyperparameters) on random halves of a population, so every
example is "in" about half of the shadows. Per example the score is the
logit-scaled confidence of its true label, phi = log(p / (1 - p)) (a binary
model's logit with its sign set by the label). Per example, Gaussians are fitted
to the shadows' phi when it was in and when it was out:

    online:  log N(phi; mu_in, s_in) - log N(phi; mu_out, s_out)
    offline: log P[phi_out <= phi]   (one-sided, out-shadows only)

Shadows train in parallel processes.
"""

from __future__ import annotations

import multiprocessing
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field, replace

import numpy as np
import pandas as pd
import torch

from dpcare.audit.likelihood_ratio import lira_scores
from dpcare.audit.metrics import attack_metrics
from dpcare.data import TableSchema, load_table
from dpcare.workflows.tabular import TabularRun, prepare, train_on_split


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


def _train_and_score(args) -> np.ndarray:
    population, schema, run, train_idx, seed = args
    torch.set_num_threads(1)
    model, encoder, _, _ = train_on_split(population.iloc[train_idx], schema, replace(run, seed=seed, progress=False))
    data = prepare(encoder, population, "zeros", seed=0)
    return logit_confidence(model, data["x"], data["y"])


def lira(population: pd.DataFrame, schema: TableSchema, run: TabularRun, shadows: int = 16, workers: int = 2,
         seed: int = 0, bootstrap: int = 200) -> LiraResult:
    """Train a target on a random half of ``population`` and ``shadows`` shadow models on other random halves;
    attack the target's membership over the whole population."""
    if shadows < 2:
        raise ValueError(f"LiRA needs at least 2 shadow models, got {shadows}")
    population = load_table(population, schema)
    n = len(population)
    if n < 4:
        raise ValueError(f"the population has {n} rows; LiRA needs more")
    rng = np.random.default_rng(seed)
    halves = [rng.permutation(n)[: n // 2] for _ in range(shadows + 1)]
    masks = np.zeros((shadows + 1, n), dtype=bool)
    for i, h in enumerate(halves):
        masks[i, h] = True
    tasks = [(population, schema, run, h, seed + 1 + i) for i, h in enumerate(halves)]
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
