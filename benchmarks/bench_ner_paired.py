"""Taggers saved by bench_ner_dp.py compared on the SAME notes (issue 55: "3 seeds, paired"): each model's
exact-match F1 on the first ``--eval`` held-out patients' notes and on the 16 hand-written notes; per cell (mode,
epsilon, learning rate, patients a step, hints, training patients) the mean and range over its seeds and the mean's
share of a non-private F1; and, for every seed and epsilon that has both, DP-LoRA minus DP-Full with its 95% interval (a
bootstrap over patients: dpcare.text.baselines.compare_on_notes, as the verdicts use), so the two modes are told
apart on the same patients rather than by two separate scores.

    OMP_NUM_THREADS=1 python benchmarks/bench_ner_paired.py results/ner_templates_*_hintslexicon.pt \\
        --reference results/ner_templates_non-private_8.0_0.0002_16_s0_emaNone_hintslexicon.pt

The mode, epsilon, seed, hints and training patients are read from the weights' names
(``ner_scoring.saved_run``). Prints markdown tables and appends one JSON line to --out.
"""
import argparse
import json
import statistics
from pathlib import Path

from ner_scoring import corpus_split, load_saved, micro_f1, saved_run

from dpcare.text.baselines import compare_on_notes, span_counts
from dpcare.text.corpus.handwritten import handwritten_notes
from dpcare.text.lm.token_ner import predict_spans

p = argparse.ArgumentParser()
p.add_argument("weights", nargs="+"); p.add_argument("--reference", default=None,
                                                     help="a non-private tagger's weights: the 100%% of the shares")
p.add_argument("--notes", type=int, default=3000); p.add_argument("--eval", type=int, default=200)
p.add_argument("--out", default="results/ner_paired.jsonl")
a = p.parse_args()

runs = [saved_run(w) for w in a.weights] + ([saved_run(a.reference)] if a.reference else [])
styles = {r["style"] for r in runs}
if len(styles) != 1:
    raise SystemExit(f"error: the weights were trained on different styles {sorted(styles)}: compare one at a time")
style = styles.pop()
_, tests = corpus_split(a.notes, style)
sets = {"held_out": tests["templates" if style == "mixed" else style][:a.eval], "handwritten": handwritten_notes()}
gold = {s: [list(n.entities) for n in notes] for s, notes in sets.items()}
patients = {s: [n.patient_id for n in notes] for s, notes in sets.items()}

predicted = {}
for r in runs:
    model, tokenizer = load_saved(r)
    predicted[r["path"]] = {s: predict_spans(model, tokenizer, notes) for s, notes in sets.items()}
    r.update({s: micro_f1(gold[s], predicted[r["path"]][s]) for s in sets})
    print(f"{Path(r['path']).name}: held-out {r['held_out']}, hand-written {r['handwritten']}", flush=True)

reference = runs.pop() if a.reference else None
cells = {}
for r in runs:
    cells.setdefault((r["mode"], r["epsilon"], r["lr"], r["batch"], r["hints"], r["patients"]), []).append(r)
summary = []
print("\n| mode | epsilon | lr | patients a step | training patients | seeds | F1 held-out: mean [min, max] "
      "| share of non-private | hand-written: mean [min, max] |\n|---|---|---|---|---|---|---|---|---|")
for (mode, eps, lr, batch, hints, n), rs in sorted(cells.items(), key=str):
    f1s, hws = [r["held_out"] for r in rs], [r["handwritten"] for r in rs]
    share = statistics.mean(f1s) / reference["held_out"] if reference else None
    summary.append({"mode": mode, "epsilon": eps, "lr": lr, "batch": batch, "hints": hints, "patients": n,
                    "seeds": sorted(r["seed"] for r in rs), "f1": f1s, "handwritten": hws, "share": share})
    print(f"| {mode} | {eps:g} | {lr} | {batch} | {n or 'all'} | {len(rs)} | {statistics.mean(f1s):.3f} "
          f"[{min(f1s):.3f}, {max(f1s):.3f}] | {'' if share is None else f'{share:.1%}'} | {statistics.mean(hws):.3f} "
          f"[{min(hws):.3f}, {max(hws):.3f}] |")

pairs = []
for lora in (r for r in runs if r["mode"] == "dp-lora"):
    for full in (r for r in runs if r["mode"] == "dp-full" and (r["epsilon"], r["seed"], r["hints"], r["patients"]) ==
                 (lora["epsilon"], lora["seed"], lora["hints"], lora["patients"])):
        row = {"epsilon": lora["epsilon"], "seed": lora["seed"], "dp_lora": lora["path"], "dp_full": full["path"]}
        for s in sets:
            c = compare_on_notes("ner F1", span_counts(gold[s], predicted[lora["path"]][s]),
                                 {"dp-full": span_counts(gold[s], predicted[full["path"]][s])},
                                 patients[s])["comparisons"][0]
            row[s] = {k: round(c[k], 3) for k in ("difference", "low", "high")} | {"beats": c["beats"]}
        pairs.append(row)
if pairs:
    print("\n| epsilon | seed | DP-LoRA minus DP-Full, held-out [95%] | hand-written [95%] |\n|---|---|---|---|")
for row in pairs:
    h, w = row["held_out"], row["handwritten"]
    print(f"| {row['epsilon']:g} | {row['seed']} | {h['difference']:+.3f} [{h['low']:+.3f}, {h['high']:+.3f}] | "
          f"{w['difference']:+.3f} [{w['low']:+.3f}, {w['high']:+.3f}] |")

Path(a.out).parent.mkdir(parents=True, exist_ok=True)
with open(a.out, "a") as f:
    f.write(json.dumps({"runs": runs, "reference": reference, "cells": summary, "pairs": pairs}) + "\n")
