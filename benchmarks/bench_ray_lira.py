"""LiRA with 16 shadow models (plus the target) of the tabular MLP, serial vs Ray tasks: wall time and ratio.

    python benchmarks/bench_ray_lira.py [--rows 1000] [--shadows 16] [--workers 2] [--method dp-sgd]
                                        [--ray-address HEAD_IP:6379]

The serial run trains the 17 models one after the other in this process (workers 1); the Ray run trains them
as Ray tasks on ``--workers`` CPUs (a local Ray instance, or the cluster of ``--ray-address`` / RAY_ADDRESS).
Ray's start-up is timed apart (a first trivial call), then the shadow training of each path; both must give
the same attack scores, which is checked: the noise seed is pinned (``--noise-seed``, default 0), because a
release's fresh secret noise would make two serial runs differ too. The run exits 1 when they differ.
"""

from __future__ import annotations

import argparse
import os
import time
import warnings

import numpy as np

from dpcare import parallel
from dpcare.data import load_dataset
from dpcare.privacy.randomness import ReproducibleNoiseWarning
from dpcare.settings import DPSettings
from dpcare.tabular.audit import tabular_lira
from dpcare.tabular.settings import TabularSettings


def _nothing(i: int) -> int:
    return i


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=1000)
    ap.add_argument("--shadows", type=int, default=16)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--method", default="dp-sgd", help="dp-sgd (epsilon 1, with its noise calibration) or non-private")
    ap.add_argument("--epochs", type=float, default=5.0)
    ap.add_argument("--ray-address", default=None)
    ap.add_argument("--noise-seed", type=int, default=0,
                    help="pinned DP noise root, so both paths draw the same noise (what makes the check possible)")
    args = ap.parse_args()
    parallel.configure(args.ray_address)
    warnings.simplefilter("ignore", ReproducibleNoiseWarning)  # pinned on purpose: the check needs it
    df, schema = load_dataset("support2")
    df = df.sample(args.rows, random_state=0).reset_index(drop=True)
    recipe = TabularSettings(method=args.method, hidden=64,
                             dp=DPSettings(epsilon=1.0, epochs=args.epochs, batch_size=64,
                                           noise_seed=args.noise_seed))
    print(f"SUPPORT2, {args.rows} rows; {args.method}, {args.epochs:g} epochs, MLP 64 wide; target + {args.shadows} "
          f"shadows; {os.cpu_count()} CPUs here, load average {os.getloadavg()[0]:.2f}")
    t0 = time.perf_counter()
    serial = tabular_lira(df, schema, recipe, shadows=args.shadows, workers=1, bootstrap=50)
    serial_wall = time.perf_counter() - t0
    t0 = time.perf_counter()
    parallel.map_tasks(_nothing, [(i,) for i in range(args.workers)], args.workers)
    start = time.perf_counter() - t0
    t0 = time.perf_counter()
    on_ray = tabular_lira(df, schema, recipe, shadows=args.shadows, workers=args.workers, bootstrap=50)
    ray_wall = time.perf_counter() - t0
    same = all(np.array_equal(on_ray.scores[k][j], serial.scores[k][j]) for k in serial.scores for j in (0, 1))
    print(f"serial:              {serial.seconds_shadows:7.1f} s training ({serial_wall:.1f} s in all)")
    print(f"Ray, {args.workers} workers:      {on_ray.seconds_shadows:7.1f} s training ({ray_wall:.1f} s in all; "
          f"Ray start-up {start:.1f} s before it)")
    print(f"speed-up (training): {serial.seconds_shadows / on_ray.seconds_shadows:.2f}x; with start-up "
          f"{serial_wall / (ray_wall + start):.2f}x; same attack scores: {same}; online AUC "
          f"{serial.online['auc']['value']:.3f} vs {on_ray.online['auc']['value']:.3f}")
    if not same:
        raise SystemExit("the Ray path gave other attack scores than the serial path with the same seeds")


if __name__ == "__main__":
    main()
