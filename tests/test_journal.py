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
