"""Start-up of the command line: whole processes, wall time, beside ``python -c pass`` in the same run.

Issue 52's target: ``dpcare --help`` and a refused bad input under 2 s of wall time on an idle 2-core machine.
Each command runs ``--repeat`` times (a first, unmeasured run warms the file cache); the median is printed with
its ratio to the bare interpreter. ``DPCARE_NO_REEXEC=1`` rows show what the command's self re-execution costs
(dpcare.runtime: it restarts once with the allocator setting, before the command line is imported: dpcare.console).

    OMP_NUM_THREADS=1 python benchmarks/bench_startup.py [--repeat 5]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TARGET_S = 2.0


def wall(cmd: list[str], env: dict[str, str], cwd: str) -> tuple[float, int]:
    start = time.perf_counter()
    done = subprocess.run(cmd, env=env, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - start, done.returncode


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    dpcare = shutil.which("dpcare") or str(Path(sys.executable).with_name("dpcare"))
    base = {k: v for k, v in os.environ.items() if k not in ("DPCARE_NO_REEXEC", "GLIBC_TUNABLES")}
    no_reexec = {**base, "DPCARE_NO_REEXEC": "1"}
    with tempfile.TemporaryDirectory() as cwd:
        (Path(cwd) / "spec.yaml").write_text("target: {name: y, kind: categorical, categories: [0, 1]}\n"
                                             "columns: [{name: x, kind: numeric, role: public, bounds: [0, 1]}]\n")
        bad = [dpcare, "train", "missing.csv", "--spec", "spec.yaml", "--method", "dp-sgd", "--epsilon", "1",
               "--out", "run"]
        rows = [("python -c pass", [sys.executable, "-c", "pass"], base, 0),
                ("dpcare --help", [dpcare, "--help"], base, 0),
                ("dpcare --help (DPCARE_NO_REEXEC=1)", [dpcare, "--help"], no_reexec, 0),
                ("dpcare train, a missing file (refused)", bad, base, 2),
                ("the same (DPCARE_NO_REEXEC=1)", bad, no_reexec, 2)]
        medians: list[float] = []
        for name, cmd, env, want in rows:
            wall(cmd, env, cwd)  # warm the file cache
            times = []
            for _ in range(args.repeat):
                seconds, code = wall(cmd, env, cwd)
                if code != want:
                    sys.exit(f"error: {name!r} exited {code}, expected {want}")
                times.append(seconds)
            medians.append(statistics.median(times))
        print(f"start-up, median of {args.repeat} whole processes (target: {TARGET_S:g} s for dpcare)")
        print(f"{'command':42} {'s':>7} {'x python':>9}")
        for (name, *_), median in zip(rows, medians):
            mark = "" if name.startswith("python") else ("  ok" if median < TARGET_S else "  over target")
            print(f"{name:42} {median:7.2f} {median / medians[0]:9.1f}{mark}")


if __name__ == "__main__":
    main()
