"""Speed of span imputation (the hybrid note) with SmolLM2-135M on generated notes, against a naive loop.

    OMP_NUM_THREADS=1 python benchmarks/bench_text_imputation.py [--notes 20] [--naive-notes 3] [--seed 0]

Notes from ``generate_corpus`` are masked by ``SpanMasker()``; ``SpanImputer`` fills every slot
(the shared instruction prefix run once and its key/value cache reused, prompts deduplicated, sorted
by length and generated in left-padded batches that stop once every row has ended its line). The
naive baseline generates one slot at a time with ``model.generate`` over the whole prompt (prefix
included, no cache, no deduplication) on the first --naive-notes notes; the imputer is also timed
alone on those notes (fresh cache) for a like-for-like ratio. Both run in this process, one thread.
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")

import argparse
import time
from collections import Counter

import torch

from dpcare.lm import load_causal_lm
from dpcare.text import SpanMasker, generate_corpus
from dpcare.text.views.imputation import DEFAULTS, PREFIX, SpanImputer, clean_value, left_context


def naive_values(model, tok, imp: SpanImputer, notes) -> list[list[str]]:
    """One ``model.generate`` per slot over the full prompt (no prefix cache, no batching, no dedup)."""
    out = []
    for note in notes:
        values = []
        for i in range(len(note.slots)):
            ids = tok(PREFIX, add_special_tokens=False)["input_ids"] + tok(
                imp.prompt(note, i), add_special_tokens=False)["input_ids"]
            ids = torch.tensor([ids])
            with torch.no_grad():
                gen = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), do_sample=False,
                                     max_new_tokens=imp.max_new_tokens, pad_token_id=tok.pad_token_id)
            raw = tok.decode(gen[0, ids.shape[1]:], skip_special_tokens=True).split("\n", 1)[0]
            values.append(clean_value(raw, note, i))
        out.append(values)
    return out


def timed(fn, *args):
    t0 = time.perf_counter()
    result = fn(*args)
    return result, time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--notes", type=int, default=20)
    ap.add_argument("--naive-notes", type=int, default=3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--examples", type=int, default=12)
    args = ap.parse_args()
    torch.set_num_threads(1)
    masked = SpanMasker().mask_many(generate_corpus(n_notes=args.notes, seed=args.seed))
    slots = sum(len(m.slots) for m in masked)
    print(f"{len(masked)} notes, {slots / len(masked):.1f} masked slots per note")
    lm, load_s = timed(load_causal_lm, "smollm2")
    print(f"SmolLM2-135M loaded in {load_s:.1f} s")

    imp = SpanImputer(lm=lm)
    values = imp.impute(masked)
    st = imp.stats()
    print(f"SpanImputer, {len(masked)} notes: {st['seconds_per_note']:.2f} s/note "
          f"({st['slots']} slots, {st['unique_prompts']} unique prompts, {st['cache_hits']} cache hits)")
    few = masked[: args.naive_notes]
    alone = SpanImputer(lm=lm)
    few_values = alone.impute(few)
    naive, naive_s = timed(naive_values, *lm, alone, few)
    naive_per_note = naive_s / len(few)
    print(f"SpanImputer, first {len(few)} notes: {alone.seconds_per_note:.2f} s/note; naive one-slot-at-a-time "
          f"generate: {naive_per_note:.2f} s/note; speed-up {naive_per_note / alone.seconds_per_note:.1f}x")
    pairs = [(a, b) for va, vb in zip(few_values, naive) for a, b in zip(va, vb)]
    agree = sum(a == b or not b for a, b in pairs)  # an empty naive value is the imputer's fallback
    print(f"naive and batched values agree on {agree}/{len(pairs)} slots")
    fail = sum(imp.failures.values())
    print(f"fallbacks (no usable value, a generic one used): {fail}/{slots} slots "
          f"({fail / slots:.1%}), by label {dict(imp.failures.most_common())}")
    print("examples, at most 2 per type (public left context [TYPE] -> imputed value):")
    shown: Counter[str] = Counter()
    for note, vs in zip(masked, values):
        for i, v in enumerate(vs):
            label = note.slots[i].label
            if shown[label] < 2 and sum(shown.values()) < args.examples and i % 3 == 1:
                ctx = left_context(note, i, 60).replace("\n", " | ")
                flag = "  (fallback)" if v == DEFAULTS.get(label) else ""
                print(f"  ...{ctx[-50:]:>50}[{label}] -> {v!r}{flag}")
                shown[label] += 1

if __name__ == "__main__":
    main()
