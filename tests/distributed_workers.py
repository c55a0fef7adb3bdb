"""Work run in each process of the 2-process torch.distributed tests (gloo on the CPU; spawned, so it lives in
an importable module). Every function builds its data and model from fixed seeds, so the one-process run in
the test and each rank here start from the same state."""

from __future__ import annotations

import os
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn

from dpcare.engine import TrainConfig, Trainer
from dpcare.methods import DPSGD
from dpcare.models import TabularMLP
from dpcare.privacy import PrivacyLedger, ProtectedUnit
from dpcare.settings import ComputeSettings, DPSettings

PATIENTS, FEATURES = 60, 6


def grouped_data() -> tuple[dict[str, torch.Tensor], torch.Tensor]:
    """1 to 4 rows per patient; ``pid`` rides along in the batch so a rank can say whose rows it clipped."""
    g = torch.Generator().manual_seed(11)
    rows_per = torch.randint(1, 5, (PATIENTS,), generator=g)
    groups = torch.repeat_interleave(torch.arange(PATIENTS), rows_per)
    n = len(groups)
    x = torch.randn(n, FEATURES, generator=g)
    y = (x[:, 0] + 0.3 * torch.randn(n, generator=g) > 0).float()
    return {"x": x, "y": y, "pid": groups.float()}, groups


class Recording(Trainer):
    """Records, per step, the patients whose rows this rank clipped and how many rows of each."""

    seen: list[dict[int, int]]

    def clipped_sum(self, batch, groups=None):
        ids, counts = torch.unique(batch["pid"].long(), return_counts=True)
        self.seen[-1].update(zip(ids.tolist(), counts.tolist()))
        return super().clipped_sum(batch, groups)

    def private_step(self, private_data, public_data):
        self.seen.append({})
        return super().private_step(private_data, public_data)


class Interrupted(Exception):
    pass


def _stop_at(step: int):
    def on_step(done: int) -> None:
        if done == step:
            raise Interrupted(f"stopped after step {step}")

    return on_step


def patient_run(checkpoint_dir: str | None = None, stop_after: int | None = None,
                noise_seed: int | None = 5) -> tuple[nn.Module, Recording]:
    data, groups = grouped_data()
    torch.manual_seed(0)
    model = TabularMLP(FEATURES, hidden=16, dropout=0.0)
    cfg = TrainConfig(dp=DPSettings(batch_size=12, steps=8, epsilon=2.0, seed=5, noise_seed=noise_seed),
                      compute=ComputeSettings(device="cpu"), lr=0.05, max_physical_batch=7, progress=False,
                      checkpoint_dir=checkpoint_dir, checkpoint_every=3)
    trainer = Recording(model, DPSGD(), cfg, PrivacyLedger(PATIENTS, 1e-5, unit=ProtectedUnit.PATIENT))
    trainer.seen = []
    trainer.fit(data, groups=groups, on_step=_stop_at(stop_after) if stop_after else None)
    return model, trainer


class NoSignal(DPSGD):
    """A private loss with gradient exactly zero: the update is the noise alone, divided by the expected batch."""

    def private_loss(self, model, batch):
        return model(batch["x"]).sum(1) * 0.0


NOISE_N, NOISE_BATCH, NOISE_SIGMA, NOISE_C, NOISE_STEPS = 400, 40, 1.3, 0.5, 6


def noise_run() -> list[torch.Tensor]:
    """SGD (lr 1, no momentum) on a no-signal loss: each step's parameter change is -noise / (q n)."""
    torch.manual_seed(0)
    model = nn.Linear(64, 64)
    x = torch.randn(NOISE_N, 64, generator=torch.Generator().manual_seed(1))
    cfg = TrainConfig(dp=DPSettings(batch_size=NOISE_BATCH, steps=1, clip_norm=NOISE_C, seed=9, noise_seed=9),
                      compute=ComputeSettings(device="cpu"), lr=1.0, optimizer="sgd", momentum=0.0,
                      noise_multiplier=NOISE_SIGMA, progress=False)
    trainer = Trainer(model, NoSignal(), cfg, PrivacyLedger(NOISE_N, 1e-5))
    data = {"x": x, "y": torch.zeros(NOISE_N)}
    steps = []
    for _ in range(NOISE_STEPS):
        before = torch.cat([p.detach().flatten().clone() for p in model.parameters()])
        trainer.private_step(data, None)
        steps.append(torch.cat([p.detach().flatten() for p in model.parameters()]) - before)
    return steps


def worker(rank: int, world: int, store: str, out: str) -> None:
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=world)
    try:
        model, trainer = patient_run()
        result = {"params": [p.detach().clone() for p in model.parameters()], "seen": trainer.seen,
                  "epsilon": trainer.ledger.epsilon(), "unit": trainer.ledger.unit.value, "n": trainer.ledger.n,
                  "noise_multiplier": trainer.noise_multiplier, "noise_steps": noise_run()}
        folder = str(Path(out) / "ckpt")  # rank 0 writes the checkpoint; every rank resumes from rank 0's state
        try:
            patient_run(folder, stop_after=4)  # checkpoints at step 3, then "killed"
        except Interrupted:
            pass
        resumed, _ = patient_run(folder)
        result["resumed"] = [p.detach().clone() for p in resumed.parameters()]
        secret, _ = patient_run(noise_seed=None)  # the secret root: OS entropy drawn on rank 0, taken by every rank
        result["secret"] = [p.detach().clone() for p in secret.parameters()]
        torch.save(result, Path(out) / f"rank{rank}.pt")
        dist.barrier()  # as in mismatch_worker
    finally:
        dist.destroy_process_group()


def mismatch_worker(rank: int, world: int, store: str, out: str) -> None:
    """Rank 1 holds other data than rank 0: one changed value, then the same rows in another order. Every rank
    must stop with RankDataMismatchError before any step or charge; the error message is written per rank."""
    from dpcare.engine.distributed import RankDataMismatchError

    os.environ.setdefault("OMP_NUM_THREADS", "1")
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=world)
    try:
        report = {}
        data, groups = grouped_data()
        order = torch.randperm(len(groups), generator=torch.Generator().manual_seed(3))
        perturbed = {**data, "x": data["x"].clone()}
        perturbed["x"][17, 2] += 1e-3
        reordered = ({k: v[order] for k, v in data.items()}, groups[order])
        for case, (d, g) in {"value": (perturbed, groups), "order": reordered}.items():
            if rank == 0:
                d, g = data, groups
            model = TabularMLP(FEATURES, hidden=16, dropout=0.0)
            cfg = TrainConfig(dp=DPSettings(batch_size=12, steps=3, epsilon=2.0, seed=5),
                              compute=ComputeSettings(device="cpu"), lr=0.05, progress=False)
            trainer = Trainer(model, DPSGD(), cfg, PrivacyLedger(PATIENTS, 1e-5, unit=ProtectedUnit.PATIENT))
            try:
                trainer.fit(d, groups=g)
                report[case] = "trained"
            except RankDataMismatchError as e:
                report[case] = str(e)
            report[case + "_steps"] = trainer.step_count
            report[case + "_charges"] = len(trainer.ledger.entries)
        torch.save(report, Path(out) / f"mismatch{rank}.pt")
        dist.barrier()  # neither rank tears gloo down while the other still talks to it (a rare SIGABRT at exit)
    finally:
        dist.destroy_process_group()
