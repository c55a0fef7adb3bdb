"""AIM's rounds (dpcare.synth.aim_rounds): the paper's budget schedule spends exactly rho, and a fit that stops
resumes from its checkpoint with every measurement it made, re-spending nothing.

The loop is the one the SmartNoise worker runs; here its estimation, selection and noise are stand-ins (the
real ones run in .venv-baselines: tests/test_synth_aim.py's slow test interrupts and resumes a real fit).
"""

import math

import numpy as np
import pytest

from dpcare.synth.aim_rounds import AIMRounds, measure_one_way, measure_rho, run_rounds, select_rho

CLIQUES = [("a",), ("b",), ("c",), ("a", "b"), ("a", "c"), ("b", "c")]
KEY = {"rho": None, "rows": "digest-1"}


class Stop(Exception):
    """Stands for a fit killed between two rounds."""


def answers(seed=0):
    rng = np.random.default_rng(seed)
    return {cl: rng.integers(0, 50, 4 ** len(cl)).astype(float) for cl in CLIQUES}


def fakes(anneal: bool, seed=1):
    """Stand-ins: ``anneal`` makes every round's model move less than the noise (annealing every round), else
    never."""
    rng = np.random.default_rng(seed)
    order = [cl for cl in CLIQUES if len(cl) == 2]

    def estimate(state):
        return len(state.measurements)  # the model's "version"

    def fitted(model, clique):  # moves by 0 (anneal) or by far more than the noise (never anneal)
        return np.full(4 ** len(clique), 0.0 if anneal else 1e9 * model)

    return dict(estimate=estimate, fitted=fitted, select=lambda model, state: order[state.round % len(order)],
                noisy=lambda x, sigma: x + rng.normal(0, sigma, x.size))


def fit(rho, rounds, anneal, after_round=None, state=None):
    x = answers()
    if state is None:
        state = AIMRounds.start(rho, rounds)
        measure_one_way(state, x, fakes(anneal)["noisy"])
    run_rounds(state, x, **fakes(anneal), **({} if after_round is None else {"after_round": after_round}))
    return state


@pytest.mark.parametrize("rho", [0.05, 1.0, 7.3])
@pytest.mark.parametrize("anneal", [False, True])
def test_the_schedule_spends_exactly_rho(rho, anneal):
    state = fit(rho, rounds=48, anneal=anneal)
    assert state.done and math.isclose(state.spent(), rho, rel_tol=1e-12) and state.check_spent() == state.spent()
    assert math.isclose(state.used, state.spent(), rel_tol=1e-12)
    assert len(state.selections) == state.round and len(state.measurements) == 3 + state.round
    # the paper's split at the start: 0.9 of a round's share measures, 0.1 selects
    first = AIMRounds.start(rho, 48)
    assert math.isclose(measure_rho(first.sigma) + select_rho(first.epsilon), rho / 48, rel_tol=1e-12)
    assert math.isclose(measure_rho(first.sigma), 0.9 * rho / 48, rel_tol=1e-12)
    if anneal:  # sigma halves each round: the budget runs out within a few rounds
        assert state.round < 10 and state.measurements[-2].sigma < state.measurements[3].sigma


def test_an_interrupted_fit_resumes_with_its_measurements_and_spends_rho_once(tmp_path):
    """Red when a resume loses what the checkpoint holds (the budget used, a measurement, a selection): the
    resumed rounds would then spend rho again, and the tally refuses the fit."""
    path = tmp_path / "aim-rounds.npz"

    def save_then_stop(state, clique):
        state.save(path, KEY)
        if state.round == 5:
            raise Stop

    with pytest.raises(Stop):
        fit(1.0, rounds=48, anneal=False, after_round=save_then_stop)
    saved = AIMRounds.load(path, KEY)
    assert saved.round == 5 and not saved.done and len(saved.measurements) == 3 + 5
    before = [(m.clique, m.y.copy(), m.sigma) for m in saved.measurements]
    resumed = fit(1.0, rounds=48, anneal=False, state=saved)
    assert resumed.done and math.isclose(resumed.check_spent(), 1.0, rel_tol=1e-9)
    for (clique, y, sigma), m in zip(before, resumed.measurements):
        assert m.clique == clique and m.sigma == sigma and np.array_equal(m.y, y)
    # the same number of rounds as a fit that never stopped (the schedule is deterministic without annealing)
    assert resumed.round == fit(1.0, rounds=48, anneal=False).round


def test_an_unfinished_or_overspent_fit_is_refused():
    state = AIMRounds.start(1.0, 16)
    measure_one_way(state, answers(), fakes(False)["noisy"])
    with pytest.raises(RuntimeError, match="last round has not been run"):
        state.check_spent()
    done = fit(1.0, 16, anneal=False)
    done.selections.append(done.selections[-1])  # one selection more than the rounds ran
    with pytest.raises(RuntimeError, match="add up to rho"):
        done.check_spent()
    with pytest.raises(RuntimeError, match="last round has been run"):
        done.begin_round()


def test_a_checkpoint_of_other_settings_or_rows_is_not_resumed(tmp_path):
    state = fit(1.0, 16, anneal=False)
    state.save(tmp_path / "c.npz", KEY)
    assert AIMRounds.load(tmp_path / "c.npz", KEY).round == state.round
    assert AIMRounds.load(tmp_path / "c.npz", {**KEY, "rows": "digest-2"}) is None  # other rows
    assert AIMRounds.load(tmp_path / "c.npz", {**KEY, "rho": 2.0}) is None  # other settings
    assert AIMRounds.load(tmp_path / "missing.npz", KEY) is None


def test_a_save_that_fails_leaves_the_last_round_in_place(tmp_path, monkeypatch):
    path = tmp_path / "c.npz"
    state = AIMRounds.start(1.0, 16)
    measure_one_way(state, answers(), fakes(False)["noisy"])
    state.save(path, KEY)
    state.begin_round()

    def broken(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(np, "savez", broken)
    with pytest.raises(OSError):
        state.save(path, KEY)
    monkeypatch.undo()
    back = AIMRounds.load(path, KEY)
    assert back.round == 0 and len(back.measurements) == 3


def test_bad_budgets_are_refused():
    with pytest.raises(RuntimeError, match="rho > 0"):
        AIMRounds.start(0.0, 16)
    with pytest.raises(RuntimeError, match="at least one round"):
        AIMRounds.start(1.0, 0)
