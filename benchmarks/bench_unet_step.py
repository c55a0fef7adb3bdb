"""DP steps of the diffusion U-Net relative to a non-private step, peak memory, and sampling speed.

The U-Net of the diffusion recipe's defaults (DiffusionSettings: 14x14 images, widths 32/64,
class-conditional) on one fixed batch. Each mode
runs in a fresh subprocess (clean peak RSS) with OMP_NUM_THREADS=1 and the glibc allocator setting.
"fdp-alg1" runs the model twice per private example (l(x) - l(Psi(x))) plus the public batch.

    python benchmarks/bench_unet_step.py [--quick] [--batch 64]
"""

from __future__ import annotations

import time

from bench_dp_step import (
    bench_trainer,
    child_result,
    parse_or_run_child,
    step_ratios,
    time_trainer_steps,
)

MODES = ["non-private", "dp fast", "fdp-alg1 fast", "dp functorch", "sampling"]


def run_one(mode: str, batch: int, steps: int) -> dict:
    import torch

    from dpcare.images.diffusion import DiffusionObjective, NoiseSchedule, sample
    from dpcare.images.unet import UNet
    from dpcare.images.settings import DiffusionSettings

    torch.set_num_threads(1)
    torch.manual_seed(0)
    recipe = DiffusionSettings()
    size = recipe.image_size
    model = UNet(1, size, recipe.unet_widths, 10, recipe.emb_dim)
    schedule = NoiseSchedule(1000)
    if mode == "sampling":
        labels = torch.arange(batch) % 10
        sample(model, schedule, labels, (1, size, size), steps=2)
        t0 = time.perf_counter()
        sample(model, schedule, labels, (1, size, size), steps=10)
        per_image = (time.perf_counter() - t0) / batch
        import resource

        return {"median_s": per_image, "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                "backend": "-"}
    kind = mode.split()[0]
    objective = DiffusionObjective(kind, schedule)
    g = torch.Generator().manual_seed(0)
    x = torch.rand(batch, 1, size, size, generator=g) * 2 - 1
    data = {"x": x, "x_pub": torch.nn.functional.avg_pool2d(x, 3, 1, 1), "y": torch.randint(0, 10, (batch,))}
    backend = "functorch" if "functorch" in mode else "auto"
    trainer = bench_trainer(model, objective, batch, backend)
    return time_trainer_steps(trainer, data, torch.arange(batch), steps)


def main() -> None:
    args = parse_or_run_child(__doc__, run_one, default_batch=64)
    if args is None:
        return
    steps = 3 if args.quick else 10
    step_ratios(__file__, [m for m in MODES if m != "sampling"], args.batch, steps, width=16)
    r = child_result(__file__, "sampling", args.batch, steps)
    print(f"sampling: {1 / r['median_s']:.1f} images/s with 10 DDIM steps, peak RSS {r['peak_rss_mib']:.0f} MiB")
    print(f"(batch {args.batch} images at the diffusion recipe's size and widths; {MODES[0]} = plain Adam step)")


if __name__ == "__main__":
    main()
