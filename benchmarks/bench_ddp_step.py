"""Private steps per second with 1 and 2 processes (torch.distributed, gloo on the CPU), same global batch.

Each process count runs in fresh processes with OMP_NUM_THREADS=1 and the glibc allocator setting of
data-and-models.md: the engine's DP-SGD steps (fast clipping) on a transformer classifier, expected global
batch fixed, so the two runs do the same work per step; the 2-process run splits the sampled units between
the ranks and all-reduces the clipped sums (dpcare.engine.distributed). Prints the steps per second, the
speed-up and the scaling efficiency (speed-up / processes). On a machine with fewer free cores than
processes the efficiency says so.

    python benchmarks/bench_ddp_step.py [--steps 20] [--batch 256]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

from dpcare.runtime import FAST_ALLOCATOR


def work(rank: int, world: int, store: str, out: str, steps: int, batch: int) -> None:
    import torch
    import torch.distributed as dist

    from dpcare.engine import TrainConfig, Trainer
    from dpcare.settings import ComputeSettings, DPSettings
    from dpcare.methods import DPSGD
    from dpcare.models import TinyTransformer

    torch.set_num_threads(1)
    if world > 1:
        dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=world)
    n = batch * 10
    g = torch.Generator().manual_seed(0)
    data = {"x": torch.randint(0, 5000, (n, 64), generator=g), "y": (torch.rand(n, generator=g) > 0.5).float()}
    torch.manual_seed(0)
    model = TinyTransformer(vocab=5000, max_len=64, dim=128, depth=2, heads=4, classes=1)
    warm = 3
    cfg = TrainConfig(dp=DPSettings(batch_size=batch, steps=warm + steps), compute=ComputeSettings(device="cpu"),
                      noise_multiplier=1.0, progress=False, max_physical_batch=64)
    times: list[float] = []

    def on_step(step: int) -> None:
        times.append(time.perf_counter())

    Trainer(model, DPSGD(), cfg).fit(data, on_step=on_step)
    if rank == 0:
        rate = steps / (times[-1] - times[warm - 1])
        Path(out).write_text(json.dumps({"steps_per_s": rate}))
    if world > 1:
        dist.destroy_process_group()


def run(world: int, steps: int, batch: int) -> float:
    import torch.multiprocessing as mp

    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "out.json")
        if world == 1:
            work(0, 1, "", out, steps, batch)
        else:
            mp.start_processes(work, args=(world, os.path.join(tmp, "store"), out, steps, batch), nprocs=world,
                               join=True, start_method="spawn")
        return json.loads(Path(out).read_text())["steps_per_s"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--batch", type=int, default=256)
    args = parser.parse_args()
    wanted = {**FAST_ALLOCATOR, "OMP_NUM_THREADS": "1"}
    if any(os.environ.get(k) != v for k, v in wanted.items()):  # the settings must be there before start-up
        os.execve(sys.executable, [sys.executable, *sys.argv], {**os.environ, **wanted})
    one = run(1, args.steps, args.batch)
    two = run(2, args.steps, args.batch)
    print(f"DP-SGD steps/s, TinyTransformer (2x128, 64 tokens), expected global batch {args.batch}, CPU, gloo")
    print(f"  1 process : {one:.3f} steps/s")
    print(f"  2 processes: {two:.3f} steps/s   speed-up {two / one:.2f}x, scaling efficiency {two / one / 2:.2f}")
    print(f"  free cores here: {os.cpu_count()} (shared with other jobs)")


if __name__ == "__main__":
    main()
