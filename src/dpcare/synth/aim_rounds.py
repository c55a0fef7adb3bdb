"""AIM's rounds, resumable: the budget schedule of AIM and the noisy measurements made so far, saved after every
round so that an interrupted fit resumes where it stopped instead of starting over.

The schedule is the paper's (McKenna, Mullins, Sheldon and Miklau, "AIM: An Adaptive and Iterative Mechanism for
Differentially Private Synthetic Data", VLDB 2022, Algorithm 1): T = 16 d rounds planned; each round spends 0.9 of
its share of rho on a Gaussian measurement (rho = 1 / (2 sigma^2)) and 0.1 on the exponential-mechanism selection
(rho = epsilon^2 / 8); when less than two rounds' worth is left, one last round spends exactly what remains;
after a round whose measurement barely moved the model, sigma halves and epsilon doubles.

A resumed fit re-spends nothing: the checkpoint holds every measurement (its clique, noisy answer and sigma), every
selection's epsilon and the budget used; :meth:`AIMRounds.spent` re-adds them, independently of ``used``, and the
worker refuses a fit whose tally is not exactly rho. The checkpoint is private (a run's staging folder, deleted when
the run finishes): it is keyed to the settings and a digest of the encoded rows, and a checkpoint of other settings
or rows is not resumed.

Two engines run these rounds: dpcare's own (:mod:`dpcare.synth.aim_engine`: mbi 2.x and OpenDP in dpcare's
process, the default) and the SmartNoise worker of the comparison baselines (:mod:`dpcare.synth.baselines`, in its
own interpreter without dpcare), which imports this file by path: numpy and the standard library only.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

MEASURE_SHARE = 0.9  # of a round's rho: the Gaussian measurement; the rest is the selection (the paper's split)
ROUNDS_PER_COLUMN = 16  # T = 16 d (the paper's default)


def measure_rho(sigma: float) -> float:
    """zCDP of one Gaussian measurement of a count vector (L2 sensitivity 1)."""
    return 0.5 / sigma ** 2


def select_rho(epsilon: float) -> float:
    """zCDP of one exponential-mechanism selection at ``epsilon`` (rho = epsilon^2 / 8)."""
    return epsilon ** 2 / 8


@dataclass
class Measurement:
    clique: tuple[str, ...]
    y: np.ndarray  # the noisy answer: the clique's counts plus Gaussian noise of ``sigma``
    sigma: float


@dataclass
class AIMRounds:
    """The state of an AIM fit after its last finished round (see the module's docstring)."""

    rho: float
    rounds: int  # T, the planned number of rounds
    sigma: float
    epsilon: float
    used: float = 0.0
    round: int = 0
    done: bool = False
    measurements: list[Measurement] = field(default_factory=list)
    selections: list[float] = field(default_factory=list)  # each round's selection epsilon

    @classmethod
    def start(cls, rho: float, rounds: int) -> AIMRounds:
        if not rho > 0 or rounds < 1:  # dpcare calibrates both: a broken invariant, not a user's input
            raise RuntimeError(f"AIM needs rho > 0 and at least one round, got rho = {rho}, {rounds} rounds")
        return cls(rho, rounds, sigma=math.sqrt(rounds / (2 * MEASURE_SHARE * rho)),
                   epsilon=math.sqrt(8 * (1 - MEASURE_SHARE) * rho / rounds))

    def measure(self, clique, y: np.ndarray) -> None:
        """Record a measurement made at the current sigma and charge it."""
        self.measurements.append(Measurement(tuple(clique), np.asarray(y, dtype=float), self.sigma))
        self.used += measure_rho(self.sigma)

    def begin_round(self) -> None:
        """Start a round: its sigma and epsilon (the whole remainder when less than two rounds are left), the
        selection charged. The round's measurement follows with :meth:`measure`."""
        if self.done:
            raise RuntimeError("AIM's last round has been run")
        self.round += 1
        remaining = self.rho - self.used
        if remaining < 2 * (measure_rho(self.sigma) + select_rho(self.epsilon)):
            self.sigma = math.sqrt(1 / (2 * MEASURE_SHARE * remaining))
            self.epsilon = math.sqrt(8 * (1 - MEASURE_SHARE) * remaining)
            self.done = True
        self.selections.append(self.epsilon)
        self.used += select_rho(self.epsilon)

    def size_limit(self, max_model_size: float) -> float:
        """The model size (MB) this round may grow to: the share of the budget used so far."""
        return max_model_size * (self.used + measure_rho(self.sigma)) / self.rho

    def anneal(self) -> None:
        """The measurement barely moved the model: measure more precisely from now on."""
        self.sigma /= 2
        self.epsilon *= 2

    def spent(self) -> float:
        """rho of every measurement and selection recorded, added up afresh (not read from ``used``)."""
        return sum(measure_rho(m.sigma) for m in self.measurements) + sum(select_rho(e) for e in self.selections)

    def check_spent(self) -> float:
        """The tally of a finished fit, refused unless it is exactly rho (a resume that lost or repeated a round,
        or a schedule that overspent)."""
        spent = self.spent()
        if not (self.done and math.isclose(spent, self.rho, rel_tol=1e-9)):
            raise RuntimeError(f"AIM's measurements and selections add up to rho = {spent!r}, not {self.rho!r}"
                               + ("" if self.done else " (its last round has not been run)"))
        return spent

    # ------------------------------------------------------------------ checkpoint
    def save(self, path: str | os.PathLike, key: dict) -> None:
        """Write the state atomically (a crash leaves the previous round's file)."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        meta = {"key": key, "rho": self.rho, "rounds": self.rounds, "sigma": self.sigma, "epsilon": self.epsilon,
                "used": self.used, "round": self.round, "done": self.done, "selections": self.selections,
                "measurements": [{"clique": list(m.clique), "sigma": m.sigma} for m in self.measurements]}
        arrays = {f"y{i}": m.y for i, m in enumerate(self.measurements)}
        tmp = path.with_name(path.name + ".tmp")
        with open(tmp, "wb") as f:
            np.savez(f, meta=np.array(json.dumps(meta)), **arrays)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)

    @classmethod
    def load(cls, path: str | os.PathLike, key: dict) -> AIMRounds | None:
        """The state saved at ``path`` for the same ``key``; None when there is none (or it is of another key)."""
        path = Path(path)
        if not path.is_file():
            return None
        with np.load(path, allow_pickle=False) as saved:
            meta = json.loads(str(saved["meta"]))
            if meta["key"] != json.loads(json.dumps(key)):
                return None
            ms = [Measurement(tuple(m["clique"]), saved[f"y{i}"], m["sigma"]) for i, m in enumerate(meta["measurements"])]
        return cls(meta["rho"], meta["rounds"], meta["sigma"], meta["epsilon"], meta["used"], meta["round"],
                   meta["done"], ms, list(meta["selections"]))


Noisy = Callable[[np.ndarray, float], np.ndarray]  # (counts, sigma) -> the counts with Gaussian noise of sigma


def measure_one_way(state: AIMRounds, answers: dict[tuple, np.ndarray], noisy: Noisy) -> None:
    """AIM's start: every one-way marginal among the candidates, measured at the starting sigma."""
    for clique in (cl for cl in answers if len(cl) == 1):
        state.measure(clique, noisy(answers[clique], state.sigma))


def run_rounds(state: AIMRounds, answers: dict[tuple, np.ndarray], *, estimate: Callable[[AIMRounds], Any],
               select: Callable[[Any, AIMRounds], tuple], fitted: Callable[[Any, tuple], np.ndarray], noisy: Noisy,
               after_round: Callable[[AIMRounds, tuple], None] = lambda state, clique: None) -> Any:
    """AIM's rounds from ``state`` to the last; returns the model of every measurement. Each round ``select``-s a
    clique with the round's epsilon, measures it at the round's sigma, re-``estimate``-s the model and anneals when
    the ``fitted`` marginal moved less than the noise's expected L1 size; ``after_round`` (a checkpoint) follows."""
    model = estimate(state)
    while not state.done:
        state.begin_round()
        clique = select(model, state)
        x, before = answers[clique], fitted(model, clique)
        state.measure(clique, noisy(x, state.sigma))
        model = estimate(state)
        if np.linalg.norm(fitted(model, clique) - before, 1) <= state.sigma * math.sqrt(2 / math.pi) * x.size:
            state.anneal()
        after_round(state, clique)
    return model


__all__ = [
    "MEASURE_SHARE",
    "ROUNDS_PER_COLUMN",
    "AIMRounds",
    "Measurement",
    "measure_one_way",
    "measure_rho",
    "run_rounds",
    "select_rho",
]
