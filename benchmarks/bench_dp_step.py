"""Per-step time and peak memory of private steps relative to a non-private step.

Each configuration runs in a fresh subprocess (clean peak-memory reading) with
OMP_NUM_THREADS=1 and the glibc allocator setting of data-and-models.md. The
batch is fixed (exactly the expected batch size) so the steps do the same work.

    python benchmarks/bench_dp_step.py            # all
    python benchmarks/bench_dp_step.py --quick    # fewer repetitions
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time

from dpcare.runtime import FAST_ALLOCATOR

# "seeded": a pinned noise seed (one torch generator per stream); the others draw secure noise (engine/noise.py)
MODES = ["non-private", "dp-sgd fast", "dp-sgd fast seeded", "dp-sgd functorch", "feature-dp fast",
         "feature-dp functorch"]


def build(model_name: str, batch: int):
    import torch

    from dpcare.models import TabularMLP, TinyTransformer

    g = torch.Generator().manual_seed(0)
    if model_name == "mlp":
        model = TabularMLP(64, hidden=256)
        x = torch.randn(batch, 64, generator=g)
        x_pub = x.clone()
        x_pub[:, :8] = torch.randn(batch, 8, generator=g)
        y = (torch.rand(batch, generator=g) > 0.5).float()
    else:
        model = TinyTransformer(vocab=5000, max_len=64, dim=128, depth=2, heads=4, classes=2)
        x = torch.randint(0, 5000, (batch, 64), generator=g)
        x_pub = x.clone()
        x_pub[:, :8] = 0  # the "private" positions masked
        y = torch.randint(0, 2, (batch,), generator=g)
    return model, {"x": x, "x_pub": x_pub, "y": y}


def opacus_step(model, data, batch: int, mode: str):
    """A DP-SGD step of Opacus (reference only; Opacus is not a dpcare dependency)."""
    import torch
    from opacus import PrivacyEngine
    from torch.utils.data import DataLoader, TensorDataset

    loader = DataLoader(TensorDataset(data["x"], data["y"]), batch_size=batch)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    crit = torch.nn.BCEWithLogitsLoss()
    kwargs = {"criterion": crit} if mode == "ghost" else {}
    out = PrivacyEngine().make_private(module=model, optimizer=opt, data_loader=loader, noise_multiplier=1.0,
                                       max_grad_norm=1.0, grad_sample_mode=mode, poisson_sampling=False, **kwargs)
    model, opt = out[0], out[1]
    crit = out[2] if mode == "ghost" else crit

    def step():
        opt.zero_grad()
        loss = crit(model(data["x"])[:, 0], data["y"])
        loss.backward()
        opt.step()

    return step


def run_one(model_name: str, mode: str, batch: int, steps: int) -> dict:
    import torch

    from dpcare.methods import DPSGD, FeatureDP, NonPrivate

    torch.set_num_threads(1)
    model, data = build(model_name, batch)
    if mode.startswith("opacus"):
        return time_steps(opacus_step(model, data, batch, mode.split()[1]), steps)
    method = mode.split()[0]
    objective = {"non-private": NonPrivate, "dp-sgd": DPSGD, "feature-dp": FeatureDP}[method]()
    words = mode.split()
    backend = words[1] if len(words) > 1 else "auto"
    trainer = bench_trainer(model, objective, batch, backend, noise_seed=0 if "seeded" in words else None)
    return time_trainer_steps(trainer, data, torch.arange(batch), steps)


def bench_trainer(model, objective, batch: int, backend: str = "auto", noise_seed: int | None = None):
    """A trainer for timing one fixed batch: sigma 1 for private objectives, no micro-batching, no progress;
    secure noise unless ``noise_seed`` is given."""
    import warnings

    from dpcare.engine import TrainConfig, Trainer
    from dpcare.settings import DPSettings
    from dpcare.privacy import PrivacyLedger, ReproducibleNoiseWarning

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ReproducibleNoiseWarning)
        cfg = TrainConfig(dp=DPSettings(batch_size=batch, noise_seed=noise_seed),
                          noise_multiplier=1.0 if objective.private else None, backend=backend, progress=False,
                          max_physical_batch=batch)
    return Trainer(model, objective, cfg, ledger=PrivacyLedger(10**6))


def time_trainer_steps(trainer, data: dict, idx, steps: int, warmup: int = 3) -> dict:
    """Time one engine step on a fixed batch: the clipped, noised private gradient of the units ``idx``
    (plus the public branch's mean gradient, if any) or the non-private mean gradient, then the update."""
    objective = trainer.objective

    def step():
        if not objective.private:
            grad, _ = trainer.mean_gradient(objective.private_loss, data)
        else:
            grad = trainer.private_gradient(data, idx, expected_batch=len(idx))
            if objective.has_public_branch:
                g_pub, _ = trainer.mean_gradient(objective.public_loss, data)
                grad = {k: g_pub[k] + grad[k] for k in grad}
        trainer._apply(grad)

    return {**time_steps(step, steps, warmup), "backend": trainer.backend}


def time_steps(step, steps: int, warmup: int = 3) -> dict:
    for _ in range(warmup):
        step()
    times = []
    for _ in range(steps):
        t0 = time.perf_counter()
        step()
        times.append(time.perf_counter() - t0)
    times.sort()
    return {"median_s": times[len(times) // 2], "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}


def parse_or_run_child(doc: str, run_one, default_batch: int) -> argparse.Namespace | None:
    """The step scripts' command line: ``--quick``, ``--batch``; a ``--child MODE BATCH STEPS`` call runs
    one mode, prints its JSON and returns None."""
    ap = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--batch", type=int, default=default_batch)
    ap.add_argument("--child", nargs=3, metavar=("MODE", "BATCH", "STEPS"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        mode, b, s = args.child
        print(json.dumps(run_one(mode, int(b), int(s))))
        return None
    return args


def child_result(script: str, mode: str, batch: int, steps: int) -> dict:
    """Run ``script --child MODE BATCH STEPS`` in a fresh process (clean peak RSS, one thread, fast allocator)."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", **FAST_ALLOCATOR}
    out = subprocess.run([sys.executable, script, "--child", mode, str(batch), str(steps)], env=env,
                         capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def step_ratios(script: str, modes: list[str], batch: int, steps: int, width: int = 22) -> dict[str, dict]:
    """Each mode's median step time, its ratio to the first mode, backend and peak RSS, printed as a table."""
    print(f"{'mode':<{width}}{'backend':<11}{'ms/step':>10}{'x non-private':>15}{'peak RSS MiB':>14}")
    results, base = {}, None
    for mode in modes:
        r = results[mode] = child_result(script, mode, batch, steps)
        base = base or r["median_s"]
        print(f"{mode:<{width}}{r['backend']:<11}{1e3 * r['median_s']:>10.1f}{r['median_s'] / base:>15.2f}"
              f"{r['peak_rss_mib']:>14.0f}", flush=True)
    return results


def noise_draw_ms(secure: bool, size: int = 1_000_000, repeats: int = 10) -> float:
    """Median ms to draw one step's noise vector of ``size`` coordinates (engine/noise.py's Stream)."""
    import torch

    from dpcare.engine.noise import Stream

    torch.set_num_threads(1)
    stream = Stream(5, "noise", secure)
    stream.normal((size,), 1.0)
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        stream.normal((size,), 1.0)
        times.append(time.perf_counter() - t0)
    return 1e3 * sorted(times)[repeats // 2]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--child", nargs=4, metavar=("MODEL", "MODE", "BATCH", "STEPS"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        m, mode, b, s = args.child
        print(json.dumps(run_one(m, mode, int(b), int(s))))
        return
    env = {**os.environ, "OMP_NUM_THREADS": "1", **FAST_ALLOCATOR}
    steps = 10 if args.quick else 30
    seeded, secure = noise_draw_ms(False), noise_draw_ms(True)
    print(f"noise for 1M coordinates: seeded {seeded:.1f} ms, secure {secure:.1f} ms ({secure / seeded:.1f}x)\n")
    configs = [("mlp", 256), ("transformer", 32)]
    print(f"{'model':<17}{'mode':<22}{'ms/step':>10}{'x non-private':>15}{'peak RSS MiB':>14}")
    try:
        import opacus  # noqa: F401

        extra = ["opacus hooks", "opacus ghost"]
    except ImportError:
        extra = []
        print("(opacus not installed: its reference rows are skipped)")
    for model_name, batch in configs:
        base = None
        for mode in MODES + (extra if model_name == "mlp" else []):
            out = subprocess.run([sys.executable, __file__, "--child", model_name, mode, str(batch), str(steps)],
                                 env=env, capture_output=True, text=True, check=True)
            r = json.loads(out.stdout.strip().splitlines()[-1])
            base = base or r["median_s"]
            print(f"{model_name + ' b' + str(batch):<17}{mode:<22}{1e3 * r['median_s']:>10.2f}"
                  f"{r['median_s'] / base:>15.2f}{r['peak_rss_mib']:>14.0f}", flush=True)


if __name__ == "__main__":
    main()
