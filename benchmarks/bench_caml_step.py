"""DP-SGD step of the CAML note coder (fast clipping backend) relative to a non-private step, and peak memory.

CAML (dpcare.text.classify.caml: embedding 100, 50 filters of width 10, 50 labels, vocabulary 5,000) on one fixed
batch of random token ids, 1,000 tokens per note (a quarter of the notes padded from position 600),
multi-hot targets, BCE summed over the labels. Each mode runs in a fresh subprocess (clean peak RSS)
with OMP_NUM_THREADS=1 and the glibc allocator setting.

    python benchmarks/bench_caml_step.py [--quick] [--batch 32]
"""

from __future__ import annotations

from bench_dp_step import bench_trainer, parse_or_run_child, step_ratios, time_trainer_steps

MODES = ["non-private", "dp-sgd fast"]
VOCAB, LENGTH, LABELS = 5000, 1000, 50


def run_one(mode: str, batch: int, steps: int) -> dict:
    import torch

    from dpcare.engine import Objective
    from dpcare.text.classify.caml import CAML
    from dpcare.text.classify.multilabel import per_example_bce

    class MultiLabelLoss(Objective):
        name, private = "multi-label", mode != "non-private"

        def private_loss(self, model, batch):
            return per_example_bce(model(batch["x"]), batch["y"])

    torch.set_num_threads(1)
    g = torch.Generator().manual_seed(0)
    x = torch.randint(4, VOCAB, (batch, LENGTH), generator=g)
    x[::4, 600:] = 0
    data = {"x": x, "y": (torch.rand(batch, LABELS, generator=g) < 0.1).float()}
    torch.manual_seed(0)
    model = CAML(VOCAB, LABELS, emb_dim=100, n_filters=50, kernel_size=10, dropout=0.2)
    objective = MultiLabelLoss()
    trainer = bench_trainer(model, objective, batch, "fast" if objective.private else "auto")
    return time_trainer_steps(trainer, data, torch.arange(batch), steps)


def main() -> None:
    args = parse_or_run_child(__doc__, run_one, default_batch=32)
    if args is None:
        return
    step_ratios(__file__, MODES, args.batch, 5 if args.quick else 20)
    print(f"(batch {args.batch} notes x {LENGTH} tokens, vocabulary {VOCAB}, {LABELS} labels)")


if __name__ == "__main__":
    main()
