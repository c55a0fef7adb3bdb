"""Privacy budget across runs: composition, refusal before any data is read, atomic and concurrent writes, CLI."""

import json
import multiprocessing
import os
import sys

import pytest
import typer
from typer.testing import CliRunner

from dpcare.cli.budget import app as budget_app
from dpcare.cli.common import ErrorReportingGroup
from dpcare.exceptions import (
    BudgetExceededError,
    DataError,
    DPCareError,
    PrivacyParameterError,
    SpecError,
)
from dpcare.privacy import Guarantee, PrivacyLedger, ProtectedUnit, compute_epsilon, gaussian_event
from dpcare.privacy import budget as budget_module
from dpcare.privacy.budget import Budget, data_fingerprint, guard_run, planned_training

N, DELTA, SIGMA = 1000, 1e-5, 4.0
WORKERS, RECORDS_EACH, REFUSED = 8, 3, 3


def gaussian_ledger(times: int = 1, unit: str = "example", cols: tuple[str, ...] = ()) -> PrivacyLedger:
    ledger = PrivacyLedger(N, DELTA, unit=unit, protected_columns=cols)
    for _ in range(times):
        ledger.charge("noisy count", gaussian_event(SIGMA))
    return ledger


def new_budget(tmp_path, epsilon: float = 10.0, **kwargs) -> Budget:
    return Budget.create(tmp_path / "budget.json", epsilon, DELTA, "toy-icu", **kwargs)


# ------------------------------------------------------------- workers (module level: spawn imports them)
def _record_worker(path: str, i: int, start) -> None:
    start.wait(120)
    budget = Budget.load(path)
    for k in range(RECORDS_EACH):
        budget.record(Guarantee(0.01, 1e-9), run_id=f"w{i}-{k}", command="test")


def _reserve_worker(path: str, i: int, start) -> None:
    planned = gaussian_ledger()
    start.wait(120)
    try:
        Budget.load(path).reserve(planned, run_id=f"w{i}", command="test")
    except BudgetExceededError:
        sys.exit(REFUSED)


def _crash_worker(path: str) -> None:
    def half_then_die(obj, f):
        f.write(json.dumps(obj)[:50])
        f.flush()
        os._exit(1)  # a crash: no exception handler, no cleanup

    budget_module._dump = half_then_die
    Budget.load(path).record(Guarantee(0.5, 1e-7), run_id="crashed")


def run_processes(target, args_of, n: int) -> list[int]:
    ctx = multiprocessing.get_context("spawn")
    start = ctx.Event()
    procs = [ctx.Process(target=target, args=(*args_of(i), start)) for i in range(n)]
    for p in procs:
        p.start()
    start.set()
    for p in procs:
        p.join(300)
    return [p.exitcode for p in procs]


# ------------------------------------------------------------- composition
def test_two_identical_releases_compose_like_one_ledger_charged_twice(tmp_path):
    budget = new_budget(tmp_path)
    budget.record(gaussian_ledger(), run_id="a")
    budget.record(gaussian_ledger(), run_id="b")
    spent = Budget.load(budget.path).spent()
    assert spent.method == "pld" and spent.releases == 2 and spent.delta == DELTA
    assert spent.epsilon == gaussian_ledger(2).epsilon()

    rdp = new_budget(tmp_path / "rdp", accountant="rdp")
    for run in ("a", "b"):
        rdp.record(planned_training(N, 0.05, 40, noise_multiplier=1.2, delta=DELTA), run_id=run)
    twice = planned_training(N, 0.05, 80, noise_multiplier=1.2, delta=DELTA)
    assert rdp.spent().epsilon == pytest.approx(twice.epsilon(accountant="rdp"), rel=1e-9)


def test_releases_without_events_use_basic_composition(tmp_path):
    budget = new_budget(tmp_path)
    budget.record(Guarantee(0.5, 2e-6), run_id="old")
    budget.record(gaussian_ledger(), run_id="new")
    spent = budget.spent()
    assert spent.method == "pld + basic"
    assert spent.epsilon == pytest.approx(0.5 + compute_epsilon(gaussian_ledger().event(), DELTA - 2e-6))


def test_run_over_the_budget_is_refused_before_it_starts(tmp_path):
    budget = new_budget(tmp_path, epsilon=1.2)
    budget.record(gaussian_ledger(), run_id="first")
    one, two = gaussian_ledger().epsilon(), gaussian_ledger(2).epsilon()
    assert one < 1.2 < two
    before = budget.path.read_text()

    def train():
        pytest.fail("the training function ran although the budget is exhausted")

    with pytest.raises(BudgetExceededError) as err, guard_run(budget.path, gaussian_ledger(), run_id="second"):
        train()
    msg = str(err.value)
    assert f"spent epsilon = {one:.4g}" in msg and f"planned epsilon = {one:.4g}" in msg
    assert f"compose to epsilon = {two:.4g}" in msg and "total epsilon = 1.2" in msg
    assert budget.path.read_text() == before  # nothing reserved
    with pytest.raises(BudgetExceededError, match="epsilon = inf"):  # a non-private run never fits
        new_budget(tmp_path / "np").check(None)


def test_guard_run_commits_success_and_keeps_a_failed_reservation(tmp_path):
    budget = new_budget(tmp_path, accountant="rdp")  # RDP: cheap calibration and composition
    planned = planned_training(N, 0.05, 40, target_epsilon=2.0, delta=DELTA, accountant="rdp")
    with guard_run(budget.path, planned, run_id="ok", command="train") as res:
        assert Budget.load(budget.path).releases[0].status == "reserved"
        sigma = planned.state_dict()["entries"][0]["noise_multiplier"]
        res.actual = planned_training(N, 0.05, 20, noise_multiplier=sigma, delta=DELTA,
                                      accountant="rdp")  # the run stopped early
    with pytest.raises(RuntimeError), guard_run(budget.path, gaussian_ledger(), run_id="crash"):
        raise RuntimeError("the run died")
    done, crashed = Budget.load(budget.path).releases
    assert done.status == "done" and done.ledger == res.actual.state_dict()
    assert crashed.status == "reserved" and Budget.load(budget.path).spent().releases == 2  # still counts
    budget.cancel("crash")
    assert budget.spent().releases == 1 and budget.releases[1].status == "cancelled"
    with guard_run(None, None) as nothing:
        assert nothing is None


def test_a_run_that_spent_more_than_it_reserved_is_recorded_then_reported(tmp_path):
    budget = new_budget(tmp_path, epsilon=1.2)
    budget.reserve(gaussian_ledger(), run_id="run")
    with pytest.raises(BudgetExceededError, match="spent more than it reserved"):
        budget.commit("run", gaussian_ledger(2))
    (release,) = Budget.load(budget.path).releases
    assert release.status == "done" and release.ledger == gaussian_ledger(2).state_dict()


# ------------------------------------------------------------- validation
def test_clear_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="dpcare budget init"):
        Budget.load(tmp_path / "missing.json")
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(SpecError, match="not valid JSON"):
        Budget.load(tmp_path / "bad.json")
    (tmp_path / "other.json").write_text("[1, 2]")
    with pytest.raises(SpecError, match="not a dpcare budget"):
        Budget.load(tmp_path / "other.json")
    for eps, delta in ((0.0, DELTA), (-1.0, DELTA), (1.0, 0.0), (1.0, 1.0)):
        with pytest.raises(PrivacyParameterError):
            Budget.create(tmp_path / "x.json", eps, delta, "d")
    budget = new_budget(tmp_path)
    data = json.loads(budget.path.read_text())
    data["total"]["epsilon"] = 0
    (tmp_path / "zero.json").write_text(json.dumps(data))
    with pytest.raises(SpecError, match="epsilon must be"):
        Budget.load(tmp_path / "zero.json")
    data["total"]["epsilon"] = 1.0
    data["releases"] = [{**budget.as_release(gaussian_ledger(), "r0").to_dict(), "ledger": {"n": 10}}]
    (tmp_path / "ledger.json").write_text(json.dumps(data))
    with pytest.raises(SpecError, match="malformed"):
        Budget.load(tmp_path / "ledger.json")
    with pytest.raises(DPCareError, match="already exists"):
        new_budget(tmp_path)
    with pytest.raises(PrivacyParameterError, match="above the budget's total delta"):
        budget.record(Guarantee(0.1, 1e-3), run_id="loose")
    budget.record(Guarantee(0.1, 1e-7), run_id="r")
    with pytest.raises(ValueError, match="already in the budget"):
        budget.record(Guarantee(0.1, 1e-7), run_id="r")
    assert len(new_budget(tmp_path, force=True).releases) == 0


def test_units_compose_only_when_the_release_implies_the_budget(tmp_path):
    example = new_budget(tmp_path / "e")
    for unit, cols in (("features", ("age",)), ("patient", ())):
        with pytest.raises(PrivacyParameterError, match="does not imply"):
            example.check(gaussian_ledger(unit=unit, cols=cols))
    features = new_budget(tmp_path / "f", unit="features")
    features.record(gaussian_ledger(), run_id="example-level")  # example-DP implies feature-DP
    features.record(gaussian_ledger(unit="features", cols=("age", "sex")), run_id="first")
    assert Budget.load(features.path).protected_columns == ("age", "sex")
    features.check(gaussian_ledger(unit="features", cols=("age", "sex", "hr")))
    with pytest.raises(PrivacyParameterError, match="does not imply"):
        features.check(gaussian_ledger(unit="label", cols=("death",)))
    assert Budget.load(features.path).unit is ProtectedUnit.FEATURES


# ------------------------------------------------------------- files and processes
def test_the_data_must_match_the_budgets_fingerprint(tmp_path):
    (tmp_path / "a.csv").write_text("x\n1\n")
    (tmp_path / "b.csv").write_text("x\n2\n")
    budget = new_budget(tmp_path, fingerprint=data_fingerprint(tmp_path / "a.csv"))
    with guard_run(budget.path, gaussian_ledger(), run_id="a", data=tmp_path / "a.csv"):
        pass
    with pytest.raises(DataError, match="not the data set"), guard_run(budget.path, gaussian_ledger(),
                                                                        data=tmp_path / "b.csv"):
        pytest.fail("ran on another data set")
    assert [r.run_id for r in Budget.load(budget.path).releases] == ["a"]


def test_crash_mid_write_leaves_the_previous_file(tmp_path):
    budget = new_budget(tmp_path)
    budget.record(Guarantee(0.1, 1e-7), run_id="kept")
    before = budget.path.read_text()
    ctx = multiprocessing.get_context("spawn")
    p = ctx.Process(target=_crash_worker, args=(str(budget.path),))
    p.start()
    p.join(300)
    assert p.exitcode == 1
    assert budget.path.read_text() == before
    assert [r.run_id for r in Budget.load(budget.path).releases] == ["kept"]


@pytest.mark.slow  # end to end: several processes / models
def test_concurrent_records_lose_nothing(tmp_path):
    budget = new_budget(tmp_path)
    codes = run_processes(_record_worker, lambda i: (str(budget.path), i), WORKERS)
    assert codes == [0] * WORKERS
    ids = sorted(r.run_id for r in Budget.load(budget.path).releases)
    assert ids == sorted(f"w{i}-{k}" for i in range(WORKERS) for k in range(RECORDS_EACH))


@pytest.mark.slow  # end to end: several processes / models
def test_concurrent_reservations_admit_exactly_what_fits(tmp_path):
    fits = 3
    total = (gaussian_ledger(fits).epsilon() + gaussian_ledger(fits + 1).epsilon()) / 2
    budget = new_budget(tmp_path, epsilon=total)
    codes = run_processes(_reserve_worker, lambda i: (str(budget.path), i), WORKERS)
    assert sorted(codes) == [0] * fits + [REFUSED] * (WORKERS - fits)
    final = Budget.load(budget.path)
    assert len(final.releases) == fits and final.spent().epsilon <= total


# ------------------------------------------------------------- command line
def test_cli_init_and_show(tmp_path):
    app = typer.Typer(cls=ErrorReportingGroup)  # the root group reports errors, as in dpcare.cli
    app.add_typer(budget_app, name="budget")
    runner = CliRunner()
    path = tmp_path / "icu.json"
    r = runner.invoke(app, ["budget", "init", str(path), "--epsilon", "3", "--delta", "1e-5", "--dataset", "toy-icu"])
    assert r.exit_code == 0, r.output
    r = runner.invoke(app, ["budget", "show", str(path)])
    assert r.exit_code == 0 and "(no releases)" in r.output and "remaining: epsilon = 3" in r.output
    Budget.load(path).record(gaussian_ledger(), run_id="run-1", command="train")
    r = runner.invoke(app, ["budget", "show", str(path)])
    spent = gaussian_ledger().epsilon()
    assert r.exit_code == 0 and "run-1" in r.output and "train" in r.output
    assert f"spent:     epsilon = {spent:.4g}" in r.output and f"remaining: epsilon = {3 - spent:.4g}" in r.output
    r = runner.invoke(app, ["budget", "init", str(path), "--epsilon", "3", "--delta", "1e-5", "--dataset", "x"])
    assert r.exit_code == 2 and "already exists" in r.output
    r = runner.invoke(app, ["budget", "init", str(tmp_path / "n.json"), "--epsilon", "1", "--delta", "2",
                            "--dataset", "x"])
    assert r.exit_code == 2 and "delta must be" in r.output
    r = runner.invoke(app, ["budget", "show", str(tmp_path / "missing.json")])
    assert r.exit_code == 2 and "no budget file" in r.output


# ------------------------------------------------------------- the invariants, fast (the slow tests use processes)
def test_two_budget_objects_loaded_before_either_reserves_do_not_both_pass(tmp_path):
    """Each object holds a snapshot from before the other's reservation: the check must use a fresh read under
    the lock, never the snapshot (red when reserve() checked self instead of the fresh read, checked)."""
    total = (gaussian_ledger(1).epsilon() + gaussian_ledger(2).epsilon()) / 2  # one fits, two do not
    first, second = Budget.load(new_budget(tmp_path, epsilon=total).path), Budget.load(tmp_path / "budget.json")
    first.reserve(gaussian_ledger(), run_id="a", command="test")
    with pytest.raises(BudgetExceededError):
        second.reserve(gaussian_ledger(), run_id="b", command="test")
    assert [r.run_id for r in Budget.load(tmp_path / "budget.json").releases] == ["a"]


def test_read_check_and_write_happen_inside_one_lock(tmp_path, monkeypatch):
    """Every file read and write of a reservation happens while the lock is held (a read-check-write outside
    the lock lets two processes pass the same check)."""
    budget = new_budget(tmp_path)
    events, held = [], {"now": False}
    real_flock, real_load, real_write = budget_module.fcntl.flock, Budget.load, Budget._write

    def flock(f, op):
        held["now"] = op == budget_module.fcntl.LOCK_EX
        events.append("lock" if held["now"] else "unlock")
        return real_flock(f, op)

    def load(cls, path):
        events.append(f"read{'' if held['now'] else ' OUTSIDE'}")
        return real_load.__func__(cls, path)

    def write(self):
        events.append(f"write{'' if held['now'] else ' OUTSIDE'}")
        return real_write(self)

    monkeypatch.setattr(budget_module.fcntl, "flock", flock)
    monkeypatch.setattr(Budget, "load", classmethod(load))
    monkeypatch.setattr(Budget, "_write", write)
    budget.reserve(gaussian_ledger(), run_id="a", command="test")
    assert events == ["lock", "read", "write", "unlock"]


def test_a_commit_protecting_a_weaker_unit_than_the_budget_is_refused(tmp_path):
    """A patient budget, a patient-level reservation, then an actual ledger that protects only rows: the commit
    must not record it as if it protected patients."""
    budget = new_budget(tmp_path, unit="patient")
    budget.reserve(gaussian_ledger(unit="patient"), run_id="a", command="test")
    with pytest.raises(PrivacyParameterError, match="does not imply"):
        budget.commit("a", gaussian_ledger(unit="example"))
    assert [r.status for r in Budget.load(budget.path).releases] == ["reserved"]


def _run_under(budget: Budget, delta: float, run_id: str) -> None:
    """One run as the recipes do it: reserve its planned guarantee (epsilon 1), commit its exact ledger."""
    budget.reserve(Guarantee(epsilon=1.0, delta=delta, n=N), run_id=run_id)
    budget.commit(run_id, planned_training(N, 0.05, 200, target_epsilon=1.0, delta=delta))


def test_three_runs_at_epsilon_1_fit_a_3_1e5_budget_at_the_budget_run_delta(tmp_path):
    """Issue 54: a planned run is a bare (epsilon, delta) added by basic composition; at the budget's own delta it
    leaves none for composing the runs before it (epsilon = inf). At delta / runs, three runs fit."""
    budget = Budget.create(tmp_path / "b.json", 3.0, 1e-5, "toy")
    assert budget.runs == 10 and budget.run_delta == pytest.approx(1e-6)
    for k in range(3):
        _run_under(budget, budget.run_delta, f"run{k}")
    assert Budget.load(budget.path).spent().epsilon < 3.0
    assert Budget.load(budget.path).runs == 10  # kept in the file
    whole = Budget.create(tmp_path / "w.json", 3.0, 1e-5, "toy")
    _run_under(whole, 1e-5, "first")
    with pytest.raises(BudgetExceededError, match="the DELTA is spent"):
        _run_under(whole, 1e-5, "second")
    with pytest.raises(PrivacyParameterError, match="runs"):
        Budget.create(tmp_path / "r.json", 3.0, 1e-5, "toy", runs=0)
