"""Speed of constrained generative-NER decoding with SmolLM2-135M: windows one at a time vs in batches.

    OMP_NUM_THREADS=1 python benchmarks/bench_ner_decoding.py [--notes 3] [--batch 8] [--window 128]

Held-out-like generated notes are cut into the benchmark's windows; every window is decoded by
``ConstrainedDecoder`` (greedy, every entity a span of the note) once one window at a time and once
``--batch`` windows per forward pass (left-padded, each row with its own positions and grammar), in this
process, one thread. Prints seconds per note of each, the ratio, and how many windows decode to the same
string (float32 logits of a padded batch may break an exact tie differently; the tests compare in float64).
The model is the pre-trained one (decoding speed does not depend on fine-tuning).
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")

import argparse
import time

import torch

from dpcare.lm import load_causal_lm
from dpcare.text import generate_corpus
from dpcare.text.lm.generative_ner import ConstrainedDecoder, _Batch, note_windows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--notes", type=int, default=3)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--window", type=int, default=128)
    ap.add_argument("--max-new-tokens", type=int, default=384)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(1)
    model, tok = load_causal_lm("smollm2")
    notes = generate_corpus(args.notes, seed=args.seed)
    windows = [n.text[a:b] for n in notes for a, b in note_windows(n.text, tok, args.window, args.window)]
    decoder = ConstrainedDecoder(model, tok, max_new_tokens=args.max_new_tokens)
    decoder.decode(windows[0][:40])  # warm-up (vocabulary trie built once per tokenizer)
    print(f"{len(notes)} notes, {len(windows)} windows of {args.window} tokens")

    t0 = time.perf_counter()
    alone = [decoder.decode(w) for w in windows]
    alone_s = (time.perf_counter() - t0) / len(notes)
    t0 = time.perf_counter()
    batched = decoder.decode_many(windows, args.batch)
    batched_s = (time.perf_counter() - t0) / len(notes)
    same = sum(a[1] == b[1] for a, b in zip(alone, batched))
    tokens = sum(len(tok(out, add_special_tokens=False)["input_ids"]) for _, out in alone)
    print(f"one window at a time: {alone_s:.1f} s/note; {args.batch} windows per pass: {batched_s:.1f} s/note; "
          f"speed-up {alone_s / batched_s:.2f}x; {tokens / len(windows):.0f} generated tokens per window; "
          f"same output in {same} of {len(windows)} windows")
    # A fine-tuned model writes long entity lists in most windows: the gain is then the per-token throughput
    # of a step with `batch` rows over a step with one row (after a prompt-length cache).
    prompts = [tok(w, add_special_tokens=False)["input_ids"] for w in windows[:args.batch]]
    per_token = {}
    for rows in (1, args.batch):
        batch = _Batch(model, prompts[:rows] * (rows // len(prompts[:rows])), pad=tok.eos_token_id)
        with torch.no_grad():
            batch.start()
            t0 = time.perf_counter()
            for _ in range(20):
                batch.step([tok.eos_token_id] * rows)
        per_token[rows] = (time.perf_counter() - t0) / 20 / rows
    print(f"decoding step: {1e3 * per_token[1]:.0f} ms per token with 1 row, {1e3 * per_token[args.batch]:.0f} ms "
          f"per token with {args.batch} rows: {per_token[1] / per_token[args.batch]:.2f}x the throughput")


if __name__ == "__main__":
    main()
