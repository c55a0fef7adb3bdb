"""Experiment work on Ray (dpcare.parallel): the same results as the serial path for the same seeds (LiRA
shadows, a grid of study cells, forecasting shadows), a rerun that skips the cells its journal holds, Ray
needed only when workers > 1. One local Ray instance (about 10 s to start) serves the whole module."""

from __future__ import annotations

import json
import sys
import warnings
from dataclasses import replace

import numpy as np
import pytest
from typer.testing import CliRunner

from dpcare import parallel
from dpcare.exceptions import MissingDependencyError, SettingsError


def _square(x: int) -> int:
    return x * x


@pytest.fixture(scope="module")
def local_ray():
    """A local Ray instance of 2 CPUs, started once for the module (as the first parallel call starts it)."""
    ray = pytest.importorskip("ray")
    assert parallel.map_tasks(_square, [(2,), (3,)], workers=2) == [4, 9]
    assert ray.is_initialized()
    return ray


def test_serial_path_needs_no_ray_and_parallel_says_how_to_get_it(monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` fails
    done = []
    assert parallel.map_tasks(_square, [(1,), (2,), (3,)], workers=1, on_result=lambda i, r: done.append(i)) == [1, 4, 9]
    assert done == [0, 1, 2]
    with pytest.raises(MissingDependencyError, match=r"pip install 'dpcare\[scale\]'") as err:
        parallel.map_tasks(_square, [(1,), (2,)], workers=2)
    assert isinstance(err.value, ImportError)


def test_the_address_comes_from_the_option_then_the_environment(monkeypatch):
    monkeypatch.setenv("RAY_ADDRESS", "env-head:6379")
    monkeypatch.setattr(parallel, "_address", None)
    assert parallel.ray_address() == "env-head:6379"
    parallel.configure("flag-head:6379")
    assert parallel.ray_address() == "flag-head:6379"
    parallel.configure(None)
    monkeypatch.delenv("RAY_ADDRESS")
    assert parallel.ray_address() is None


def test_gpus_per_task_come_from_configure_then_the_environment_and_are_checked(monkeypatch):
    monkeypatch.setattr(parallel, "_gpus", None)
    monkeypatch.delenv(parallel.GPUS_ENV, raising=False)
    assert parallel.gpus_per_task() == 0  # default: CPU tasks
    monkeypatch.setenv(parallel.GPUS_ENV, "0.5")
    assert parallel.gpus_per_task() == 0.5
    parallel.configure(None, gpus_per_task=1)
    assert parallel.gpus_per_task() == 1
    parallel.configure(None)
    for bad in ("x", "-1", "inf", "nan"):
        monkeypatch.setenv(parallel.GPUS_ENV, bad)
        with pytest.raises(SettingsError, match=parallel.GPUS_ENV):
            parallel.gpus_per_task()
    with pytest.raises(SettingsError, match="gpus_per_task"):
        parallel.configure(None, gpus_per_task=-0.5)


def test_tasks_asking_for_gpus_ray_does_not_have_are_refused_not_left_waiting(local_ray, monkeypatch):
    if local_ray.cluster_resources().get("GPU", 0):
        pytest.skip("this machine's Ray instance has a GPU")
    monkeypatch.setenv(parallel.GPUS_ENV, "1")
    with pytest.raises(SettingsError, match="has 0"):
        parallel.map_tasks(_square, [(2,), (3,)], workers=2)
    monkeypatch.setenv(parallel.GPUS_ENV, "0")
    assert parallel.map_tasks(_square, [(2,), (3,)], workers=2) == [4, 9]


def test_ray_address_without_workers_is_refused():
    from dpcare.cli import app

    r = CliRunner().invoke(app, ["audit", "lira", "x.csv", "--spec", "x.yaml", "--workers", "1",
                                 "--ray-address", "head:6379"])
    assert r.exit_code == 2 and "--ray-address" in r.output and "--workers" in r.output


def test_lira_shadows_on_ray_match_the_serial_run(local_ray):
    from dpcare.data import load_dataset
    from dpcare.settings import DPSettings
    from dpcare.tabular.audit import tabular_lira
    from dpcare.tabular.settings import TabularSettings

    df, schema = load_dataset("support2")
    df = df.sample(200, random_state=0).reset_index(drop=True)
    recipe = TabularSettings(method="non-private", hidden=16, dp=DPSettings(epochs=3, batch_size=32))
    serial = tabular_lira(df, schema, recipe, shadows=4, workers=1, bootstrap=10)
    on_ray = tabular_lira(df, schema, recipe, shadows=4, workers=2, bootstrap=10)
    for name, (members, nonmembers) in serial.scores.items():
        np.testing.assert_array_equal(on_ray.scores[name][0], members)
        np.testing.assert_array_equal(on_ray.scores[name][1], nonmembers)
    assert on_ray.online == serial.online and on_ray.offline == serial.offline
    other = tabular_lira(df, schema, recipe, shadows=4, workers=2, seed=1, bootstrap=10)
    assert not np.array_equal(other.scores["LiRA online"][0], serial.scores["LiRA online"][0])  # seeds matter


def test_grid_cells_on_ray_match_the_serial_run(local_ray):
    """FusionDP cells (non-private, DP-SGD and FusionDP with a given noise multiplier, two seeds): the
    rows come back in task order with the serial run's numbers, DP noise included."""
    from dpcare.data import load_dataset
    from dpcare.studies.fusiondp import FusionBenchmark, _map, prepare_splits

    df, schema = load_dataset("support2")
    data = prepare_splits(df.sample(800, random_state=0), schema, seed=0).tensors
    bench = replace(FusionBenchmark.quick(), hidden=16, batch_size=64)
    noisy = {"clip_norm": 0.5, "alpha": 1.0, "beta": 0.2, "noise_multiplier": 1.0}
    tasks = [("sgd-org", None, {}, 0, data, bench), ("dp-sgd", 1.0, noisy, 0, data, bench),
             ("fusiondp", 1.0, noisy, 1, data, bench), ("sgd-org", None, {}, 1, data, bench)]
    with warnings.catch_warnings():  # the study's delta may be weak for 560 rows: not what is tested here
        warnings.simplefilter("ignore")
        serial = _map(tasks, 1, False, "serial")
        on_ray = _map(tasks, 2, False, "ray")
    assert on_ray == serial
    assert [(r["method"], r["seed"]) for r in on_ray] == [(t[0], t[3]) for t in tasks]
    assert serial[0]["test_auroc"] != serial[3]["test_auroc"]  # the seed reaches the training


def test_forecasting_shadows_resume_from_their_files_and_match_the_serial_run(local_ray, tmp_path):
    from test_workflow_tsf import TINY, prepared

    from dpcare.studies.tsf import TsfBenchmark, _shadows

    data = prepared()
    bench = TsfBenchmark(datasets=("toy",), methods=("baseline",), epsilons=(3.0,), shadows=4, workers=1,
                         settings=TINY)
    labels = bench.validate()
    serial, serial_in = _shadows(data, labels, bench, tmp_path / "serial", False)
    bench = replace(bench, workers=2)
    folder = tmp_path / "ray"
    on_ray, ray_in = _shadows(data, labels, bench, folder, False)
    np.testing.assert_array_equal(ray_in, serial_in)
    np.testing.assert_array_equal(on_ray["baseline"], serial["baseline"])

    # an interrupted study: shadow 1 never finished; the rerun trains it alone, the others are read back
    (folder / "shadow_1.json").unlink()
    kept = {k: (folder / f"shadow_{k}.json").stat().st_mtime_ns for k in (0, 2, 3)}
    again, _ = _shadows(data, labels, bench, folder, False)
    assert {k: (folder / f"shadow_{k}.json").stat().st_mtime_ns for k in (0, 2, 3)} == kept
    assert json.loads((folder / "shadow_1.json").read_text())["losses"]["baseline"] == serial["baseline"][1].tolist()
    np.testing.assert_array_equal(again["baseline"], serial["baseline"])


def test_an_address_nothing_answers_at_is_refused_quickly(monkeypatch):
    import socket

    with socket.socket() as s:  # a port that was free a moment ago: nothing listens there
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setattr(parallel, "_address", None)
    monkeypatch.setenv("RAY_ADDRESS", f"127.0.0.1:{port}")
    monkeypatch.setattr(parallel, "_remote", None)
    ray = pytest.importorskip("ray")
    monkeypatch.setattr(ray, "is_initialized", lambda: False)  # as in a fresh process
    with pytest.raises(SettingsError, match="no Ray cluster answers"):
        parallel.map_tasks(_square, [(1,), (2,)], workers=2)


class _ShoutingImputer:
    """An imputer's interface without a language model: each masked note's value is the note in capitals,
    journalled line by line in its checkpoint file."""

    def __init__(self):
        self.notes = 0

    def impute(self, masked, checkpoint=None):
        values = [[m.upper()] for m in masked]
        if checkpoint is not None:
            checkpoint.write_text("".join(json.dumps(v) + "\n" for v in values))
        self.notes += len(masked)
        return values

    def stats(self):
        return {"notes": self.notes, "seconds_per_note": 0.0}


def test_imputation_shards_on_ray_keep_the_notes_order(local_ray, tmp_path):
    from dpcare.text.classify.data import impute_notes

    notes = [f"note {i}" for i in range(7)]
    serial, serial_stats = impute_notes(_ShoutingImputer(), notes, tmp_path, workers=1)
    values, stats = impute_notes(_ShoutingImputer(), notes, tmp_path, workers=2)
    assert values == serial == [[n.upper()] for n in notes]
    assert stats["notes"] == serial_stats["notes"] == 7 and stats["workers"] == 2
    shards = [json.loads(line) for k in (0, 1) for line in (tmp_path / f"imputation.{k}.jsonl").read_text().splitlines()]
    assert shards == serial  # each shard journalled its own contiguous part


def _die_on(x: int) -> int:
    if x == 3:
        import os

        os._exit(1)  # the worker process is lost, as when the machine kills it for memory
    return x


def test_a_lost_worker_stops_the_work_with_a_clear_error_naming_the_task(local_ray):
    from dpcare.exceptions import WorkerLostError

    with pytest.raises(WorkerLostError, match=r"the parallel run \(3\) was lost .*WorkerCrashedError.*rerun the same "
                                              r"command to resume"):
        parallel.map_tasks(_die_on, [(1,), (2,), (3,), (4,)], workers=2)
    assert parallel.map_tasks(_square, [(5,), (6,)], workers=2) == [25, 36]  # the instance still serves


OWN_INSTANCE = """
import json, ray
from dpcare import parallel
assert parallel.map_tasks(abs, [(-1,), (-2,)], workers=2) == [1, 2]
ctx = ray.get_runtime_context()
print(json.dumps({"namespace": ctx.namespace, "gcs": ctx.gcs_address, "temp": parallel.ray_temp_dir()}))
"""


def test_each_process_starts_its_own_ray_in_its_own_namespace_and_folder(local_ray, tmp_path):
    """Another Ray on the machine (here the test's own) is never joined: a second process gets a new instance,
    namespace and temporary folder, and its folder is gone when it ends."""
    import os
    import subprocess
    from pathlib import Path

    mine = local_ray.get_runtime_context()
    assert mine.namespace.startswith("dpcare-") and Path(parallel.ray_temp_dir(), "session_latest").exists()
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    done = subprocess.run([sys.executable, "-c", OWN_INSTANCE], capture_output=True, text=True, env=env, timeout=240)
    assert done.returncode == 0, done.stderr[-2000:]
    other = json.loads(done.stdout.strip().splitlines()[-1])
    assert other["gcs"] != mine.gcs_address and other["namespace"] != mine.namespace
    assert other["temp"] != parallel.ray_temp_dir() and not Path(other["temp"]).exists()  # removed at exit


RAYLET_KILLED = """
import sys
from dpcare import parallel
from dpcare.exceptions import WorkerLostError

def square(x):
    return x * x

import ray

assert parallel.map_tasks(square, [(2,), (3,)], workers=2) == [4, 9]
ray.shutdown()  # a new instance after a shutdown is watched afresh: its predecessor's ended raylet is no alarm
assert parallel.map_tasks(square, [(6,), (7,)], workers=2) == [36, 49]
raylet = parallel._raylet[0]
raylet.kill()  # the local instance's raylet dies, as when the machine kills it for memory
raylet.wait(30)
try:
    parallel.map_tasks(square, [(4,), (5,)], workers=2)
except WorkerLostError as e:
    # a file, not stdout: Ray's log thread prints the raylet's end to stdout and can land inside our line
    open("outcome.txt", "w").write(f"error: {e}")
    sys.exit(3)
open("outcome.txt", "w").write("no error")
"""


def test_a_dead_local_raylet_is_a_clear_error_not_a_silent_exit(tmp_path):
    """Ray ends its driver (status 1, no exception) at the next call once the local raylet is gone: a pytest
    worker running Ray tests showed this as a lost worker. The raylet is watched, so the call raises first (and a
    new instance after a shutdown is watched afresh). Run in a child process: without the watch it is the child
    that Ray ends."""
    import subprocess

    pytest.importorskip("ray")
    script = tmp_path / "raylet_killed.py"
    script.write_text(RAYLET_KILLED)
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=240,
                          cwd=tmp_path)
    assert done.returncode == 3, (done.returncode, done.stdout, done.stderr[-2000:])
    outcome = (tmp_path / "outcome.txt").read_text()
    assert outcome.startswith("error: this process's local Ray instance is gone"), outcome
    assert "rerun the same command to resume" in outcome
