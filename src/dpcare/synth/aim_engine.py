"""AIM in dpcare's own process (issue 52 part 4): the rounds of :mod:`dpcare.synth.aim_rounds` on a maintained
graphical-model estimator, Private-PGM (``mbi`` 2.x, on jax's CPU backend), with OpenDP's samplers for every
random draw that touches the data. Nothing leaves the process: the encoded rows never go to a file.

The mechanism is the one of McKenna, Mullins, Sheldon and Miklau ("AIM: An Adaptive and Iterative Mechanism for
Differentially Private Synthetic Data", VLDB 2022), as SmartNoise implements it and dpcare ran it before:

* the workload: every pair of columns whose marginal has at most ``max_cells`` cells; the candidates are the
  workload's cliques and their subsets, each weighted by how many workload columns it covers;
* one-way marginals first, then rounds: the exponential mechanism picks the candidate clique the model fits
  worst (score: weight x (L1 error - the noise's expected L1 size), among cliques that keep the model under its
  size limit), a Gaussian measurement of that marginal follows, and the model is re-estimated by mirror descent
  (warm-started from the previous round's model: post-processing, no privacy cost);
* the schedule, the annealing and the exact-rho tally are :mod:`dpcare.synth.aim_rounds`'.

Randomness: the Gaussian measurements are OpenDP's ``make_gaussian`` (exact sampling, applied to the counts
themselves); the selection is OpenDP's ``make_noisy_max`` with Gumbel noise of scale 2 Delta / epsilon, which IS
the exponential mechanism (rho = epsilon^2 / 8, Cesar and Rogers 2021). dpcare checks that OpenDP's own privacy
map of every measurement and selection equals the rho the rounds charge. Sampling synthetic rows is
post-processing (mbi's sampler under a public seed).
"""

from __future__ import annotations

import hashlib
import math
import string
import time
import warnings
from collections.abc import Callable
from itertools import chain, combinations
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from dpcare.exceptions import MissingDependencyError
from dpcare.synth.aim_rounds import ROUNDS_PER_COLUMN, AIMRounds, measure_one_way, measure_rho, run_rounds, select_rho

MAX_CELLS = 10_000  # the largest pairwise marginal in the workload (SmartNoise's default)
ESTIMATION_ITERS = 1000  # mirror-descent iterations per estimate (SmartNoise's)
INSTALL = "pip install 'dpcare[synth]' (mbi 2.x with jax on the CPU, and opendp)"


def _mbi():
    """mbi, with jax in float64 and without its persistent compilation cache (mbi's own advice)."""
    try:
        import jax

        jax.config.update("jax_enable_x64", True)
        jax.config.update("jax_enable_compilation_cache", False)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            import mbi
    except ImportError as err:
        raise MissingDependencyError(f"AIM needs mbi and jax ({err.name} is missing): {INSTALL}") from None
    return mbi


def _opendp():
    try:
        import opendp.prelude as dp
    except ImportError:
        raise MissingDependencyError(f"AIM draws its noise with OpenDP, which is not installed: {INSTALL}") from None
    dp.enable_features("contrib", "floating-point")
    return dp


def available() -> str | None:
    """None when the engine can run here, else why not."""
    try:
        _mbi(), _opendp()
    except MissingDependencyError as err:
        return str(err)
    return None


# --------------------------------------------------------------------------- the data as mbi sees it
def attributes(layout: list[dict]) -> list[str]:
    """The model's attribute names: col0, col1, ... in the layout's order (as the saved models of the SmartNoise
    engine, so those still load)."""
    return [f"col{i}" for i in range(len(layout))]


def domain_of(layout: list[dict], bins: int):
    """The public domain: each column's number of codes (categories or bins, plus "missing" if nullable)."""
    from dpcare.synth.baselines import _cube_spec

    return _mbi().Domain(attributes(layout), [_cube_spec(c, bins)["card"] for c in layout])


def workload(domain, max_cells: int = MAX_CELLS) -> list[tuple[str, ...]]:
    return [cl for cl in combinations(domain.attributes, 2) if domain.size(cl) <= max_cells]


def candidates_of(cliques: list[tuple[str, ...]]) -> dict[tuple[str, ...], int]:
    """Every clique of the workload and every subset of one, weighted by the workload columns it covers."""
    closure = {tuple(s) for cl in cliques for s in chain.from_iterable(combinations(cl, k) for k in range(1, len(cl) + 1))}
    return {cl: sum(len(set(cl) & set(w)) for w in cliques) for cl in sorted(closure, key=len)}


def marginals(model, cliques) -> dict[tuple[str, ...], np.ndarray]:
    """The model's marginal (counts summing to its total, flattened in the clique's order) on each of ``cliques``:
    the product of the model's potentials summed over the other attributes, in NumPy (np.einsum). The same numbers
    as mbi's ``model.project`` (to 1e-11 in a test), about a thousand times faster on a CPU: mbi runs its variable
    elimination as many small jax operations, which took most of a round. Post-processing of the model."""
    pots = model.potentials
    attributes = list(pots.domain.attributes)
    if len(attributes) > len(string.ascii_letters):
        raise RuntimeError(f"{len(attributes)} columns: einsum names at most {len(string.ascii_letters)}")
    letter = dict(zip(attributes, string.ascii_letters))
    operands, subscripts = [], []
    for cl in pots.cliques:
        values = np.asarray(pots[cl].values, dtype=np.longdouble)  # x86's 80-bit floats: no underflow in products
        operands.append(np.exp(values - values.max()))  # log-potentials, shifted: the marginal is normalised below
        subscripts.append("".join(letter[a] for a in pots[cl].domain.attributes))
    for a, size in zip(attributes, pots.domain.shape):  # every attribute appears, covered or not
        operands.append(np.ones(size, dtype=np.longdouble))
        subscripts.append(letter[a])
    total, out = float(model.total), {}
    for cl in cliques:
        with np.errstate(all="ignore"):
            table = np.einsum(",".join(subscripts) + "->" + "".join(letter[a] for a in cl), *operands,
                              optimize="greedy")
            table = (table / table.sum() * total).astype(np.float64)
        if not np.all(np.isfinite(table)):  # the product underflowed (or a potential is -inf): mbi's own, in logs
            table = np.asarray(model.project(tuple(cl)).datavector(), dtype=np.float64)
        out[tuple(cl)] = table.reshape(-1)
    return out


def model_size(domain, cliques) -> float:
    """Megabytes of a model over ``cliques`` (8 bytes a cell)."""
    return sum(domain.size(cl) for cl in cliques) * 8 / 2 ** 20


# --------------------------------------------------------------------------- OpenDP's mechanisms
class Mechanisms:
    """The two randomised steps, each checked against OpenDP's own privacy map before it runs."""

    def __init__(self):
        self.dp = _opendp()

    def noisy(self, counts: np.ndarray, sigma: float) -> np.ndarray:
        """The counts with Gaussian noise of ``sigma`` (L2 sensitivity 1: one row changes one count by 1)."""
        dp = self.dp
        meas = dp.m.make_gaussian(dp.vector_domain(dp.atom_domain(T=float, nan=False)), dp.l2_distance(T=float),
                                  scale=float(sigma))
        _check(meas.map(1.0), measure_rho(sigma), "Gaussian measurement")
        return np.asarray(meas([float(v) for v in counts]), dtype=float)

    def select(self, scores: list[float], epsilon: float, sensitivity: float) -> int:
        """The exponential mechanism at ``epsilon`` over ``scores`` of L-infinity sensitivity ``sensitivity``."""
        dp = self.dp
        meas = dp.m.make_noisy_max(dp.vector_domain(dp.atom_domain(T=float, nan=False)), dp.linf_distance(T=float),
                                   dp.zero_concentrated_divergence(), scale=2 * sensitivity / epsilon)
        _check(meas.map(sensitivity), select_rho(epsilon), "exponential-mechanism selection")
        scores = [float(x) for x in scores]
        if not all(math.isfinite(x) for x in scores):  # OpenDP refuses them with a cryptic message
            raise RuntimeError(f"AIM's selection scores are not all finite: {scores}")
        return int(meas(scores))


def _check(opendp_rho: float, charged: float, what: str) -> None:
    if not math.isclose(float(opendp_rho), charged, rel_tol=1e-9):
        raise RuntimeError(f"OpenDP's privacy map of the {what} is rho = {opendp_rho}, the rounds charge {charged}")


# --------------------------------------------------------------------------- fit and sample
def fit_aim(train: pd.DataFrame, layout: list[dict], bins: int, rho: float, max_model_size: float = 80.0,
            progress: Callable[[float], None] | None = None, checkpoint: str | Path | None = None
            ) -> tuple[dict, dict[str, np.ndarray], dict]:
    """AIM at ``rho``-zCDP on the (schema-checked) private ``train`` rows, encoded with the public ``layout``.
    Returns the fitted model's state (domain, cliques, total), its log-potential arrays and the accounting
    record, as the SmartNoise engine did. ``progress(fraction of rho spent)`` after every round;
    ``checkpoint``: a private file the rounds are saved to and resumed from."""
    from dpcare.synth.baselines import _encode

    mbi = _mbi()
    mechanisms = Mechanisms()
    codes, _ = _encode(train, layout, "cube", bins)
    names = attributes(layout)
    domain = domain_of(layout, bins)
    data = mbi.Dataset({a: codes[c["name"]].to_numpy(np.int64) for a, c in zip(names, layout)}, domain)
    candidates = candidates_of(workload(domain))
    answers = {cl: np.asarray(data.project(cl).datavector(), dtype=float) for cl in candidates}
    rounds = ROUNDS_PER_COLUMN * len(names)
    digest = hashlib.sha256(np.ascontiguousarray(codes.to_numpy(np.int64)).tobytes()).hexdigest()
    key = {"engine": "mbi2", "rho": rho, "rounds": rounds, "max_model_size": max_model_size, "attributes": names,
           "shape": [int(x) for x in domain.shape], "rows": digest}
    start = time.perf_counter()
    state = AIMRounds.load(checkpoint, key) if checkpoint else None
    resumed = None if state is None else state.round
    if state is None:
        state = AIMRounds.start(rho, rounds)
        measure_one_way(state, answers, mechanisms.noisy)
        if checkpoint:
            state.save(checkpoint, key)
    estimator = mbi.estimation.MirrorDescent()
    previous: list[Any] = []

    def estimate(s: AIMRounds):
        measured = [mbi.LinearMeasurement(m.y, m.clique, m.sigma) for m in s.measurements]
        model = estimator.estimate(domain, measured, iters=ESTIMATION_ITERS,
                                   warm_start=previous[-1] if previous else None)
        previous[:] = [model]
        return model

    def select(model, s: AIMRounds) -> tuple[str, ...]:
        limit = s.size_limit(max_model_size)
        cliques = list(model.potentials.cliques)
        free = set(candidates_of(cliques))
        allowed = [cl for cl in candidates if cl in free or model_size(domain, [*cliques, cl]) <= limit]
        bias = math.sqrt(2 / math.pi) * s.sigma
        estimates = marginals(model, allowed)
        scores = [candidates[cl] * (np.linalg.norm(answers[cl] - estimates[cl], 1) - bias * domain.size(cl))
                  for cl in allowed]
        return allowed[mechanisms.select(scores, s.epsilon, max(candidates[cl] for cl in allowed))]

    def fitted(model, cl) -> np.ndarray:
        return marginals(model, [cl])[tuple(cl)]

    def after_round(s: AIMRounds, clique) -> None:
        if checkpoint:
            s.save(checkpoint, key)
        if progress is not None:
            progress(s.used / s.rho)

    model = run_rounds(state, answers, estimate=estimate, select=select, fitted=fitted, noisy=mechanisms.noisy,
                       after_round=after_round)
    spent = state.check_spent()
    model_state, arrays = model_arrays(model)
    return model_state, arrays, {"mechanism": "AIM (zCDP, Gaussian noise; mbi 2 and OpenDP in dpcare's process)",
                                 "rho": rho, "rho_spent": spent, "rounds": state.round, "resumed_after_round": resumed,
                                 "fit_seconds": time.perf_counter() - start}


def model_arrays(model) -> tuple[dict, dict[str, np.ndarray]]:
    """A fitted model as its state (attributes, shape, cliques, total) and log-potential arrays: all that sampling
    needs, and post-processing of the noisy measurements (releasing it costs nothing more)."""
    pots = model.potentials
    arrays = {f"p{i}": np.asarray(pots[cl].values) for i, cl in enumerate(pots.cliques)}
    return {"attributes": list(pots.domain.attributes), "shape": [int(x) for x in pots.domain.shape],
            "cliques": [list(cl) for cl in pots.cliques], "total": float(model.total)}, arrays


def load_model(state: dict, arrays: dict[str, np.ndarray]):
    """The graphical model of :func:`model_arrays` (or of a model the SmartNoise engine saved)."""
    mbi = _mbi()
    import jax.numpy as jnp

    domain = mbi.Domain(tuple(state["attributes"]), tuple(state["shape"]))
    cliques = [tuple(cl) for cl in state["cliques"]]
    factors = {cl: mbi.Factor(domain.project(cl), jnp.asarray(arrays[f"p{i}"])) for i, cl in enumerate(cliques)}
    potentials = mbi.CliqueVector(domain, cliques, factors)
    marginals = mbi.marginal_oracles.message_passing_hugin(potentials, state["total"])
    return mbi.MarkovRandomField(potentials=potentials, marginals=marginals, total=state["total"])


def sample_aim(state: dict, arrays: dict[str, np.ndarray], layout: list[dict], bins: int, n: int,
               seed: int = 0) -> pd.DataFrame:
    """``n`` rows of a fitted model, decoded to the schema's columns: a function of the released model, ``n`` and
    the public ``seed`` (mbi samples from NumPy's global generator, seeded here and restored after)."""
    from dpcare.synth.baselines import _decoded

    model = load_model(state, arrays)
    saved = np.random.get_state()
    np.random.seed(seed)
    try:
        data = model.synthetic_data(rows=n)
    finally:
        np.random.set_state(saved)
    columns = data.to_dict()
    codes = pd.DataFrame({c["name"]: np.asarray(columns[a]) for a, c in zip(attributes(layout), layout)})
    return _decoded(codes, layout, "cube", bins, seed)


__all__ = ["MAX_CELLS", "Mechanisms", "available", "candidates_of", "fit_aim", "load_model", "marginals", "model_arrays",
           "sample_aim", "workload"]
