"""Embarrassingly parallel experiment work (LiRA shadows, the studies' cells, LM imputation shards) on Ray.

:func:`run_tasks` calls ``fn(*task)`` for every task: in this process, one after the other, when ``workers``
<= 1 (Ray is not imported), else as Ray tasks, at most ``workers`` at a time, each on one CPU with one torch
thread (and :func:`gpus_per_task` GPUs: none by default, so Ray hides the GPUs from the tasks). Where Ray runs:

* on this machine by default: a private local Ray instance with ``workers`` CPUs, started on first use (about
  10 s) and kept for the rest of the process; nothing to set up. It is the process's own: a new instance
  (never one that happens to run on the machine), in a namespace of its own and a temporary folder of its own
  (:func:`ray_temp_dir`, removed when the process ends), so that another Ray on the machine, a user's or a
  second dpcare run's, shares neither its sessions, sockets nor spilled objects;
* on a cluster when an address is given, by :func:`configure` (the command line's ``--ray-address``) or by
  the ``RAY_ADDRESS`` environment variable (the head's ``host:6379``, as ``ray start`` prints it). dpcare
  and its dependencies must be installed on every node; ``workers`` then caps the tasks in flight.

Results are yielded as each task finishes (so a journal can record each finished cell and a rerun resumes)
or, by :func:`map_tasks`, gathered in task order. A task's result is its function's return value whichever
way it ran: the same seeds give the same results serially and on Ray. When a task fails, it is named on
stderr, the others go on, and the first failure is raised once they have finished; the serial path raises at
once (as a plain loop would). A lost worker, node or object (killed for memory, say) is not the task's failure:
it stops the work at once with a :class:`~dpcare.exceptions.WorkerLostError` naming the task and saying that
a rerun resumes from the journal of the finished tasks. When the local instance's raylet itself dies (killed for
memory, by another process such as a ``ray stop``, or marked dead by Ray's health check on a starved machine),
Ray ends the calling process at its next call, with status 1 and no exception (a pytest worker then shows as
"node down: Not properly terminated"); so the raylet is watched, and its death raises the same error first.

``fn`` and the tasks must pickle (module-level functions, ``functools.partial`` of them). An argument shared
by several tasks (the same object: a data set, a model) is shipped to the object store once, not per task.
"""

from __future__ import annotations

import atexit
import logging
import os
import shutil
import socket
import sys
import tempfile
import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

from dpcare.exceptions import MissingDependencyError, SettingsError, WorkerLostError
from dpcare.runtime import FAST_ALLOCATOR, THREADS

RAY_VERSION = "2.60.0"  # the version pyproject.toml pins
GPUS_ENV = "DPCARE_RAY_GPUS_PER_TASK"
WAIT_SECONDS = 2.0  # how often a wait for the next finished task looks at the local raylet
_address: str | None = None  # set by configure(); None: RAY_ADDRESS, else a local instance
_gpus: float | None = None  # set by configure(); None: DPCARE_RAY_GPUS_PER_TASK, else 0
_remote = None  # the Ray remote function, made once per process
_temp_dir: str | None = None  # the local instance's own temporary folder, once started
_raylet: list | None = None  # the local instance's raylet and GCS processes, watched before every call into Ray
_node: Any = None  # the Ray node object they belong to (a new one after a shutdown and a new start)


def configure(address: str | None = None, gpus_per_task: float | None = None) -> None:
    """Run later Ray tasks on the cluster at ``address`` (None: ``RAY_ADDRESS``, else this machine), each asking
    Ray for ``gpus_per_task`` GPUs (None: ``DPCARE_RAY_GPUS_PER_TASK``, else 0; a fraction shares a GPU).

    The address takes effect when Ray is started, i.e. before the first parallel call of the process."""
    global _address, _gpus
    _address = address or None
    _gpus = None if gpus_per_task is None else _checked_gpus(gpus_per_task, "gpus_per_task")


def _checked_gpus(value: Any, name: str) -> float:
    try:
        gpus = float(value)
    except (TypeError, ValueError):
        gpus = float("nan")
    if not 0 <= gpus < float("inf"):
        raise SettingsError(f"{name} must be a number of GPUs >= 0 (a fraction shares one), got {name} = {value!r}")
    return gpus


def gpus_per_task() -> float:
    """GPUs each Ray task asks for: :func:`configure`'s, else ``DPCARE_RAY_GPUS_PER_TASK``, else 0. With 0, Ray
    hides every GPU from the task, so a model in it trains on the CPU whatever its ``device``."""
    if _gpus is not None:
        return _gpus
    return _checked_gpus(os.environ.get(GPUS_ENV, "0"), GPUS_ENV)


def ray_address() -> str | None:
    """The cluster Ray tasks go to: :func:`configure`'s address, else ``RAY_ADDRESS``; None: this machine."""
    return _address or os.environ.get("RAY_ADDRESS") or None


def ray_temp_dir() -> str | None:
    """The temporary folder of this process's own local Ray instance (sessions, sockets, logs, spilled objects);
    None before it starts or when the tasks go to a cluster."""
    return _temp_dir


def _own_temp_dir() -> str:
    """A fresh temporary folder for a local Ray instance, removed at exit (after Ray has shut down). Short,
    under the system's temporary folder: Ray's socket paths must stay under the OS limit of ~107 bytes."""
    global _temp_dir
    _temp_dir = tempfile.mkdtemp(prefix="dpcare-ray-", dir="/tmp" if os.path.isdir("/tmp") else None)

    def remove(path: str = _temp_dir) -> None:
        import ray

        ray.shutdown()
        shutil.rmtree(path, ignore_errors=True)

    atexit.register(remove)
    return _temp_dir


def _call(fn: Callable[..., Any], *args: Any) -> Any:
    import torch

    torch.set_num_threads(1)
    return fn(*args)


def _check_reachable(address: str, timeout: float = 5.0) -> None:
    """Refuse a cluster address nothing answers at (Ray itself would retry for minutes)."""
    rest = address.split("://", 1)[-1]
    host, _, port = rest.rpartition(":")
    if not host or not port.isdigit():  # "auto" and other forms: left to Ray
        return
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=timeout).close()
    except OSError as e:
        raise SettingsError(f"no Ray cluster answers at {address!r} (--ray-address / RAY_ADDRESS): {e}") from e


def _ray(workers: int, gpus: float):
    """The ray module, started (locally with ``workers`` CPUs, or connected to the configured cluster), checked to
    have the ``gpus`` a task asks for."""
    global _remote
    try:
        import ray
    except ImportError as e:
        raise MissingDependencyError(
            f"workers > 1 runs tasks on Ray, which is not installed: pip install 'dpcare[scale]' (ray=={RAY_VERSION}), "
            "or run with --workers 1") from e
    if not ray.is_initialized():
        address = ray_address()
        # one thread per task, and the allocator setting of dpcare.runtime, in workers started anywhere
        runtime_env = {"env_vars": {**FAST_ALLOCATOR, **THREADS}}
        common = {"include_dashboard": False, "log_to_driver": False, "ignore_reinit_error": True,
                  "logging_level": logging.WARNING, "runtime_env": runtime_env,
                  "namespace": f"dpcare-{os.getpid()}-{uuid.uuid4().hex[:8]}"}
        try:
            if address:
                _check_reachable(address)
                ray.init(address=address, **common)
            else:  # "local": a new instance of our own, never a cluster that happens to run on this machine
                # the workers import what this process can (its sys.path), as spawned processes would
                path = os.pathsep.join(p for p in sys.path if p and os.path.isdir(p))
                runtime_env["env_vars"]["PYTHONPATH"] = path
                ray.init(address="local", num_cpus=workers, _temp_dir=_own_temp_dir(), **common)
        except ConnectionError as e:
            hint = ("" if os.environ.get("RAY_AUTH_MODE") else "; a cluster started by `ray start` checks a token: "
                    "set RAY_AUTH_MODE=token, with the head's ~/.ray/auth_token here (or RAY_AUTH_TOKEN)")
            raise SettingsError(f"cannot connect to the Ray cluster at {address!r} (--ray-address / RAY_ADDRESS): "
                                f"{e}{hint}") from e
    if _remote is None:
        _remote = ray.remote(num_cpus=1, max_retries=0)(_call)
    _watch_raylet()
    _check_raylet()
    have = ray.cluster_resources().get("GPU", 0)
    if gpus > 0 and have < gpus:  # Ray would wait for them forever
        raise SettingsError(f"each task asks for {gpus:g} GPU(s) ({GPUS_ENV}), but the Ray instance has {have:g}: "
                            f"unset {GPUS_ENV} to run the tasks on CPUs")
    return ray


def _watch_raylet() -> None:
    """Keep the processes of this process's own local instance (its raylet and GCS server) to watch them, read
    again whenever Ray's node changed (a shutdown and a new start). Ray's node object holds them (a private
    attribute of the pinned Ray version; not found, or tasks going to a cluster: nothing is watched)."""
    global _raylet, _node
    try:
        from ray._private import worker

        node = worker._global_node
    except ImportError:
        node = None
    if node is _node and _raylet is not None:
        return
    _node = node
    processes = {} if ray_address() else (getattr(node, "all_processes", None) or {})
    _raylet = [info.process for kind in ("raylet", "gcs_server") for info in processes.get(kind, ())]


def _check_raylet() -> None:
    """Raise :class:`WorkerLostError` if the local instance's raylet or GCS server has ended: Ray would end this
    process at its next call (status 1, no exception, no clean-up)."""
    if _raylet and any(process.poll() is not None for process in _raylet):
        raise WorkerLostError(
            "this process's local Ray instance is gone: its raylet ended (killed for memory or by another process, "
            "e.g. `ray stop`, or marked dead by Ray on a machine too busy to answer its health checks). The runs "
            "that finished are kept in the run's journal; rerun the same command to resume (with fewer --workers "
            "if memory is short)")


def _shared_refs(ray, tasks: Sequence[tuple]) -> dict[int, Any]:
    """Object-store references of the arguments that several tasks share (by identity)."""
    seen: dict[int, int] = {}
    keep: dict[int, Any] = {}
    for task in tasks:
        for arg in task:
            if not isinstance(arg, (str, bytes, int, float, bool, type(None))):
                seen[id(arg)] = seen.get(id(arg), 0) + 1
                keep[id(arg)] = arg
    return {i: ray.put(keep[i]) for i, k in seen.items() if k > 1}


def _describe(task: tuple) -> str:
    return ", ".join(str(x) for x in task if isinstance(x, (str, int, float, type(None))))


def run_tasks(fn: Callable[..., Any], tasks: Iterable[tuple], workers: int = 1) -> Iterator[tuple[int, Any]]:
    """``(index, fn(*task))`` for every task, as each finishes (in task order when serial); see the module."""
    tasks = [tuple(t) for t in tasks]
    if workers <= 1 or len(tasks) <= 1 and not ray_address():
        for i, task in enumerate(tasks):
            yield i, fn(*task)
        return
    gpus = gpus_per_task()  # checked before Ray starts
    ray = _ray(workers, gpus)
    from ray.exceptions import RayError, RayTaskError

    fn_ref = ray.put(fn)
    shared = _shared_refs(ray, [(fn, *t) for t in tasks])
    args = [[shared.get(id(a), a) for a in t] for t in tasks]
    pending: dict[Any, int] = {}
    nxt, failed = 0, None
    try:
        while nxt < len(tasks) or pending:
            while nxt < len(tasks) and len(pending) < workers:
                pending[_remote.options(num_gpus=gpus).remote(fn_ref, *args[nxt])] = nxt
                nxt += 1
            ready, _ = ray.wait(list(pending), num_returns=1, timeout=WAIT_SECONDS)
            if not ready:  # nothing finished yet: is the instance still there?
                _check_raylet()
                continue
            ref = ready[0]
            i = pending.pop(ref)
            try:
                result = ray.get(ref)
            except RayTaskError as e:  # the task's own function raised
                cause = e.cause if isinstance(getattr(e, "cause", None), BaseException) else e
                print(f"run ({_describe(tasks[i])}) failed: {cause!r}; the others go on", file=sys.stderr,
                      flush=True)
                if failed is None:
                    failed = (cause, e)
                continue
            except RayError as e:  # not the task: its worker, node or result was lost
                raise WorkerLostError(_lost_message(tasks[i], e)) from e
            yield i, result
    finally:  # the caller stopped early (or failed): nothing keeps running for it
        try:
            _check_raylet()
        except WorkerLostError:  # a call into Ray would end this process: nothing is left to cancel
            pending = {}
        for ref in pending:
            try:
                ray.cancel(ref, force=True)
            except RayError:  # its worker is already gone (the error being raised says why)
                pass
    if failed is not None:
        cause, error = failed
        if cause is error:
            raise error
        raise cause from error  # the task's own error (a DPCareError stays one); the remote traceback chained


def _lost_message(task: tuple, error: BaseException) -> str:
    first = str(error).strip().splitlines()[0] if str(error).strip() else ""
    where = f"on the Ray cluster at {ray_address()}" if ray_address() else "on this machine's Ray instance"
    return (f"the parallel run ({_describe(task)}) was lost {where}: {type(error).__name__}"
            f"{': ' + first[:300] if first else ''}. This is the machine, not the input: a worker killed for "
            "memory or by another process, or a node gone. The runs that finished are kept in the run's journal; "
            "rerun the same command to resume (with fewer --workers if memory is short)")


def map_tasks(fn: Callable[..., Any], tasks: Iterable[tuple], workers: int = 1,
              on_result: Callable[[int, Any], None] | None = None) -> list[Any]:
    """``[fn(*task) for task in tasks]`` in task order, run as :func:`run_tasks` does; ``on_result(index,
    result)`` is called as each task finishes (a journal records it there)."""
    tasks = list(tasks)
    results: list[Any] = [None] * len(tasks)
    for i, result in run_tasks(fn, tasks, workers):
        results[i] = result
        if on_result is not None:
            on_result(i, result)
    return results


__all__ = ["GPUS_ENV", "configure", "gpus_per_task", "map_tasks", "ray_address", "ray_temp_dir", "run_tasks"]
