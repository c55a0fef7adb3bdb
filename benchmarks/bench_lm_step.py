"""Per-step time and peak memory of DP fine-tuning steps of SmolLM2 and MiniLM against a non-private step
of the SAME trainable parameters (the issue's targets: DP-LoRA <= 1.1x, DP-Full <= 1.3x; DP-Prefix reported).

What is compared, one pair per row:

* ``lora``: peft LoRA (rank 8, alpha 16) on the query/value projections (:func:`dpcare.text.lm.finetune.apply_mode`
  "dp-lora"; MiniLM: :func:`dpcare.text.lm.token_ner.apply_token_mode`, the classifier head trained too). The
  non-private step trains the same adapters.
* ``full``: every parameter (the output layer untied from the input embeddings, as in both modes of
  ``apply_mode``).
* ``prefix``: peft prefix tuning (10 virtual tokens; only the prefix embedding trains).

Models: SmolLM2-135M with all 30 blocks, SmolLM2 cut to its first 2 blocks (``dpcare.lm.load_causal_lm(layers=2)``,
as ``finetune(layers=2)``), and all-MiniLM-L6-v2 token classification (7 BIO tags).

A step on one fixed batch of ``--batch`` real rows (default 8), each exactly 128 tokens:

* SmolLM2: generative-NER rows of ``generate_corpus(10, seed=0)`` (:func:`~dpcare.text.lm.finetune.make_examples`,
  note windows of 32 tokens), the rows of at least 128 tokens cut to their first 128 (prompt, about 76
  tokens, then the start of the entity list); loss :class:`~dpcare.text.lm.finetune.TargetLoss` (mean NLL over
  the target tokens; per-row position ids except for prefix tuning).
* MiniLM: BIO windows of 126 word pieces plus [CLS] and [SEP] (:func:`~dpcare.text.lm.token_ner.bio_examples`),
  loss :class:`~dpcare.text.lm.token_ner.TokenNERLoss`.

A non-private step is the engine's mean gradient over the batch and an Adam update; a DP step is the engine's
clipped per-row gradient sum (each row its own unit, no micro-batching) plus Gaussian noise (sigma 1) and the
same update, on the fast clipping backend (``functorch`` rows: torch.func per-example gradients, for
reference). Each measurement runs in a fresh subprocess with OMP_NUM_THREADS=1 and the glibc allocator
setting (``bench_dp_step.child_result``), so its peak RSS (model loading included) is its own. Times are
medians over the timed steps, after warm-up steps (1 for the 30-block model, 2 otherwise); the model is in
training mode (MiniLM's dropout on).

    python benchmarks/bench_lm_step.py            # every row (about 15 minutes on one core)
    python benchmarks/bench_lm_step.py --quick    # the 2-block SmolLM2 and MiniLM only, 2 timed steps
    python benchmarks/bench_lm_step.py --batch 16
"""

from __future__ import annotations

import os
import pickle
import tempfile
from pathlib import Path

from bench_dp_step import bench_trainer, child_result, parse_or_run_child, time_trainer_steps

ROWS = 128  # tokens per row
NOTES_ENV = "DPCARE_BENCH_NOTES"  # a pickle of the notes, written once by the parent
FULL_DEPTH = 30
TARGETS = {"lora": 1.1, "full": 1.3, "prefix": None}
#: (model, trainable set, DP backends); model "smollm2:k" is SmolLM2 cut to k blocks
QUICK = [("smollm2:2", "lora", ("fast", "functorch")), ("smollm2:2", "full", ("fast",)),
         ("smollm2:2", "prefix", ("fast",)), ("minilm", "lora", ("fast", "functorch")), ("minilm", "full", ("fast",))]
FULL = [(f"smollm2:{FULL_DEPTH}", "lora", ("fast", "functorch")), (f"smollm2:{FULL_DEPTH}", "full", ("fast",)),
        (f"smollm2:{FULL_DEPTH}", "prefix", ("fast",))] + QUICK


def notes() -> list:
    """``generate_corpus(10, seed=0)``: read from the parent's pickle (generating the corpus peaks near 1 GiB,
    which would hide the step's own memory), or generated here when the child runs on its own."""
    path = os.environ.get(NOTES_ENV)
    if path:
        return pickle.loads(Path(path).read_bytes())
    from dpcare.text import generate_corpus

    return generate_corpus(10, seed=0)


def smollm2_batch(tokenizer, batch: int) -> dict:
    """``batch`` generative-NER rows of exactly ROWS tokens (rows cycled if there are fewer)."""
    from dpcare.text.lm.finetune import encode, make_examples

    examples = make_examples(notes(), "ner", tokenizer, window=32, stride=32)
    data = encode(examples, tokenizer)
    keep = (data["mask"].sum(1) >= ROWS).nonzero()[:, 0]
    rows = keep[[i % len(keep) for i in range(batch)]]
    out = {k: v[rows, :ROWS].contiguous() for k, v in data.items()}
    assert bool(out["mask"].all()) and bool((out["loss_mask"].sum(1) > 0).all())
    return out


def minilm_batch(tokenizer, batch: int) -> dict:
    """``batch`` BIO windows of exactly ROWS positions, [CLS] and [SEP] included (cycled if fewer)."""
    from dpcare.text.lm.token_ner import bio_examples, encode_windows

    windows = [w for w in bio_examples(notes(), tokenizer, window=ROWS - 2, stride=ROWS - 2)
               if len(w.ids) == ROWS]
    return encode_windows([windows[i % len(windows)] for i in range(batch)], tokenizer.pad_token_id)


def build(model_key: str, trainable: str, private: bool, batch: int):
    """(model set up for ``trainable``, objective, fixed batch)."""
    if model_key == "minilm":
        from dpcare.text.lm.token_ner import TokenNERLoss, apply_token_mode, bio_tags, load_minilm

        tags = bio_tags()
        net, tokenizer = load_minilm(len(tags), tags=tags)
        model = apply_token_mode(net, "dp-lora" if trainable == "lora" else "dp-full")
        return model, TokenNERLoss(private), minilm_batch(tokenizer, batch)
    from dpcare.lm import load_causal_lm
    from dpcare.text.lm.finetune import TargetLoss, apply_mode

    causal, tokenizer = load_causal_lm("smollm2", layers=int(model_key.split(":")[1]))
    model = apply_mode(causal, "dp-" + trainable)  # "dp-full" and "non-private" set up the same parameters
    return model, TargetLoss(private, positions=trainable != "prefix"), smollm2_batch(tokenizer, batch)


def run_one(mode: str, batch: int, steps: int) -> dict:
    """``mode``: "MODEL TRAINABLE non-private" or "MODEL TRAINABLE dp BACKEND"."""
    import torch

    torch.set_num_threads(1)
    model_key, trainable, privacy, *backend = mode.split()
    torch.manual_seed(0)
    model, objective, data = build(model_key, trainable, privacy == "dp", batch)
    model.train()
    trainer = bench_trainer(model, objective, batch, backend[0] if backend else "auto")
    warmup = 1 if model_key == f"smollm2:{FULL_DEPTH}" else 2
    result = time_trainer_steps(trainer, data, torch.arange(batch), steps, warmup)
    return {**result, "trainable": sum(p.numel() for p in trainer.trainable.values()),
            "width": int(data["ids"].shape[1])}


def main() -> None:
    args = parse_or_run_child(__doc__, run_one, default_batch=8)
    if args is None:
        return
    configs = QUICK if args.quick else FULL
    with tempfile.TemporaryDirectory() as tmp:
        from dpcare.text import generate_corpus

        path = Path(tmp) / "notes.pkl"
        path.write_bytes(pickle.dumps(generate_corpus(10, seed=0)))
        os.environ[NOTES_ENV] = str(path)  # child_result passes os.environ on
        table(configs, args.batch, args.quick)


def table(configs: list, batch: int, quick: bool) -> None:
    print(f"batch {batch} rows x {ROWS} tokens; ms/step = median over the timed steps; RSS = peak of the "
          "measuring process")
    print(f"{'model':<12}{'trainable':<10}{'params':>12}{'DP backend':>12}{'ms non-priv':>13}{'ms DP':>10}"
          f"{'ratio':>8}{'target':>8}{'met':>5}{'RSS np MiB':>12}{'RSS DP MiB':>12}", flush=True)
    for model_key, trainable, backends in configs:
        steps = 2 if quick else (3 if model_key == f"smollm2:{FULL_DEPTH}" else 5)
        base = child_result(__file__, f"{model_key} {trainable} non-private", batch, steps)
        for backend in backends:
            dp = child_result(__file__, f"{model_key} {trainable} dp {backend}", batch, steps)
            ratio = dp["median_s"] / base["median_s"]
            target = TARGETS[trainable] if backend == "fast" else None
            met = "-" if target is None else ("yes" if ratio <= target else "NO")
            print(f"{model_key:<12}{trainable:<10}{base['trainable']:>12,}{dp['backend']:>12}"
                  f"{1e3 * base['median_s']:>13.0f}{1e3 * dp['median_s']:>10.0f}{ratio:>8.2f}"
                  f"{f'{target:.1f}x' if target else '-':>8}{met:>5}{base['peak_rss_mib']:>12.0f}"
                  f"{dp['peak_rss_mib']:>12.0f}", flush=True)


if __name__ == "__main__":
    main()
