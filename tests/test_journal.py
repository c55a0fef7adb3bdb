"""The text benchmarks' worker pool: finished runs come back, a failing run is named at once, then raised."""

from __future__ import annotations

import pytest

from dpcare.studies.grid import parallel_results


def _run(name: str, fail: bool) -> dict:
    if fail:
        raise ValueError(f"{name} broke")
    return {"name": name}


def test_every_finished_run_is_yielded_and_a_failure_is_named_then_raised(capsys):
    got = []
    with pytest.raises(ValueError, match="b broke"):
        for row in parallel_results(_run, [("a", False), ("b", True), ("c", False)], workers=2):
            got.append(row["name"])
    assert sorted(got) == ["a", "c"]
    assert "run (b, True) failed: ValueError('b broke')" in capsys.readouterr().err


# ---------------------------------------------------------------- the journal of finished tasks (resume)
import numpy as np  # noqa: E402

from dpcare.exceptions import SpecError  # noqa: E402
from dpcare.runs.journal import journaled_map  # noqa: E402

CALLS: list = []


def _square(x: int, fail_at: int | None = None) -> dict:
    if x == fail_at:
        raise RuntimeError(f"interrupted at {x}")
    CALLS.append(x)
    return {"x": x, "y": np.float64(x) ** 2}


def test_an_interrupted_map_resumes_with_only_the_missing_tasks(tmp_path):
    journal, keys = tmp_path / "j.jsonl", [f"task {i}" for i in range(4)]
    CALLS.clear()
    with pytest.raises(RuntimeError, match="interrupted at 2"):
        journaled_map(_square, [(i, 2) for i in range(4)], keys, journal, "s1")
    assert CALLS == [0, 1]
    CALLS.clear()
    seen = []
    got = journaled_map(_square, [(i, None) for i in range(4)], keys, journal, "s1",
                        on_result=lambda i, r: seen.append(i))
    assert CALLS == [2, 3]  # the finished tasks were read back, not run again
    assert got == [{"x": i, "y": float(i * i)} for i in range(4)] and sorted(seen) == [0, 1, 2, 3]


def test_a_journal_of_other_settings_is_refused(tmp_path):
    journal = tmp_path / "j.jsonl"
    journaled_map(_square, [(1,)], ["a"], journal, "s1")
    with pytest.raises(SpecError, match="other settings"):
        journaled_map(_square, [(1,)], ["a"], journal, "s2")


def test_an_interrupted_lira_trains_only_the_missing_models(tmp_path):
    from dpcare.audit import run_lira

    def score(members, seed, fail=None):
        if seed == fail:
            raise RuntimeError("interrupted")
        CALLS.append(seed)
        phi = np.random.default_rng(seed).normal(size=20)
        phi[members] += 1.0
        return phi

    whole = run_lira(score, 20, shadows=4, workers=1, seed=3, bootstrap=10)
    journal = tmp_path / "models.jsonl"
    CALLS.clear()
    with pytest.raises(RuntimeError):
        run_lira(lambda m, s: score(m, s, fail=6), 20, shadows=4, workers=1, seed=3, journal=journal)
    CALLS.clear()
    resumed = run_lira(score, 20, shadows=4, workers=1, seed=3, bootstrap=10, journal=journal)
    assert CALLS == [6, 7, 8]  # target and shadows 1-2 came from the journal
    assert resumed.online == whole.online and resumed.offline == whole.offline


def test_the_fusiondp_study_resumes_its_finished_trainings(tmp_path, monkeypatch):
    from dpcare.studies import fusiondp

    monkeypatch.setattr(fusiondp, "train_one", lambda m, e, p, seed, data, bench: CALLS.append(seed) or {"seed": seed})
    bench = fusiondp.FusionBenchmark.quick()
    tasks = [("dp-sgd", 1.0, {"clip_norm": 0.5}, s, None, bench) for s in range(3)]
    CALLS.clear()
    first = fusiondp._map(tasks, 1, False, "tuning", tmp_path / "t.jsonl")
    again = fusiondp._map(tasks, 1, False, "tuning", tmp_path / "t.jsonl")
    assert CALLS == [0, 1, 2] and first == again == [{"seed": s} for s in range(3)]
