"""How large a synthesizer run is: defaults for the machine, and a time estimate before the long part.

The paper's run (Afonja et al., DP-2Stage) fine-tunes the whole model for 5 stage-1 and 10 stage-2
epochs. dpcare's engine trains on the CPU, where one step of 32 rows of full SmolLM2-135M
takes ~25 s on 2 cores: hours for a table of a few thousand rows. The CPU scale keeps the
first transformer block and trains 1 + 2 epochs (the scale of ``dpcare benchmark dp2stage``,
~1 s per step): minutes.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping
from dataclasses import dataclass, replace

import torch
from torch import Tensor, nn

from dpcare.engine.objective import Objective
from dpcare.engine.trainer import TrainConfig, Trainer
from dpcare.privacy import PrivacyLedger
from dpcare.synth.settings import SCALES, SIZES, resolve_scale

LONG_SECONDS = 15 * 60  # estimates above this are logged as warnings
PAPER_HINT = ("paper scale (the whole model, 5 + 10 epochs): SynthSettings.for_device('paper'), "
              "on the command line `dpcare synth fit ... --synthesizer dp-2stage --scale paper`")


def total_steps(epochs: float, rows: int, batch_size: int) -> int:
    """Steps of a stage, as the engine counts them (expected batch ``batch_size``)."""
    return math.ceil(epochs * rows / batch_size)


def seconds_per_step(model: nn.Module, objective: Objective, data: Mapping[str, Tensor], config: TrainConfig,
                     steps: int = 1) -> float:
    """Mean wall time of ``steps`` training steps (after one warm-up step) of ``objective`` on ``data``.

    Private steps use noise multiplier 1 and a throw-away ledger; the trainable weights are
    restored afterwards, so the model is as before. ``data`` should be public (pseudo rows):
    the time of a step on private rows would depend on them."""
    kept = {n: p.detach().clone() for n, p in model.named_parameters() if p.requires_grad}
    rows = next(iter(data.values())).shape[0]
    private = objective.private
    config = replace(config.with_schedule(steps=steps, adaptive_clip=None), noise_multiplier=1.0 if private else None,
                     progress=False, checkpoint_dir=None, adaptive_clip=None)
    dp = config.dp
    trainer = Trainer(model, objective, config, PrivacyLedger(rows, dp.delta, dp.accountant) if private else None)
    step = (lambda: trainer.private_step(data, None)) if private else (lambda: trainer.nonprivate_step(data))
    model.train()
    try:
        step()
        start = time.perf_counter()
        for _ in range(steps):
            step()
        return (time.perf_counter() - start) / steps
    finally:
        with torch.no_grad():
            for n, p in model.named_parameters():
                if n in kept:
                    p.copy_(kept[n])
        model.eval()


@dataclass(frozen=True)
class FitEstimate:
    """Steps and measured seconds per step of each stage; ``scale`` is "cpu", "paper" or "custom"; ``private``:
    whether stage 2's steps are DP steps (not in the non-private mode)."""

    stage1_steps: int
    stage1_step_seconds: float
    stage2_steps: int
    stage2_step_seconds: float
    scale: str
    private: bool = True

    @property
    def seconds(self) -> float:
        return self.stage1_steps * self.stage1_step_seconds + self.stage2_steps * self.stage2_step_seconds

    @property
    def long(self) -> bool:
        return self.seconds > LONG_SECONDS

    def message(self) -> str:
        """One line: the estimate, its parts, and how to get the other scale."""
        kind = "DP steps" if self.private else "steps (non-private)"
        parts = [f"stage 2: {self.stage2_steps} {kind} x {self.stage2_step_seconds:.2f} s"]
        if self.stage1_steps:
            parts.insert(0, f"stage 1: {self.stage1_steps} steps x {self.stage1_step_seconds:.2f} s")
        text = f"estimated fit time {format_seconds(self.seconds)} ({'; '.join(parts)})"
        if self.scale == "cpu":
            return f"{text}; CPU scale (first transformer block, 1 + 2 epochs); {PAPER_HINT}"
        if self.long:
            return (f"{text}; to finish in minutes on a CPU use SynthSettings.for_device('cpu') "
                    "(`--scale cpu`), or fewer --layers / epochs")
        return text


def format_seconds(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


__all__ = ["LONG_SECONDS", "PAPER_HINT", "SCALES", "SIZES", "FitEstimate", "format_seconds", "resolve_scale",
           "seconds_per_step", "total_steps"]
