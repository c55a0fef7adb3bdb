"""Where a tagger's entities come from, against the public lexicon it reads as hints (issue 55): on the first
``--eval`` held-out patients' notes (or the hand-written notes), every gold entity counted by whether the lexicon
and the tagger find it exactly, and every false entity by whether the other one predicts it too, per label.

    OMP_NUM_THREADS=1 python benchmarks/bench_ner_errors.py \
        results/ner_templates_dp-lora_8.0_0.01_128_s0_emaNone_hintslexicon.pt

Prints a markdown table and appends one JSON line to --out.
"""
import argparse
import json
from collections import Counter
from pathlib import Path

from ner_scoring import corpus_split, load_saved, saved_run

from dpcare.text.corpus.handwritten import handwritten_notes
from dpcare.text.lexicon_ner import lexicon_spans
from dpcare.text.lm.token_ner import predict_spans

p = argparse.ArgumentParser()
p.add_argument("weights"); p.add_argument("--notes", type=int, default=3000)
p.add_argument("--eval", type=int, default=200)
p.add_argument("--handwritten", action="store_true", help="the 16 hand-written notes instead of held-out ones")
p.add_argument("--out", default="results/ner_errors.jsonl")
a = p.parse_args()
run = saved_run(a.weights)
if a.handwritten:
    notes = handwritten_notes()
else:
    _, tests = corpus_split(a.notes, run["style"])
    notes = tests["templates" if run["style"] == "mixed" else run["style"]][:a.eval]
model, tokenizer = load_saved(run)


def exact(spans) -> set:
    return {(s.start, s.end, s.label) for s in spans}


counts = Counter()
for note, predicted in zip(notes, predict_spans(model, tokenizer, notes)):
    gold, lexicon, tagger = exact(note.entities), exact(lexicon_spans(note.text)), exact(predicted)
    for start, end, label in gold:
        counts[label, "gold", ("lexicon" if (start, end, label) in lexicon else "not lexicon")
               + (", tagger" if (start, end, label) in tagger else ", not tagger")] += 1
    for e in tagger - gold:
        counts[e[2], "false", "tagger" + (" and lexicon" if e in lexicon else " only")] += 1
    for e in lexicon - gold - tagger:
        counts[e[2], "false", "lexicon only"] += 1
labels = sorted({k[0] for k in counts})
kinds = sorted({k[1:] for k in counts})
print("| entities | " + " | ".join(labels) + " | all |\n|---" + "|---" * (len(labels) + 1) + "|")
for kind in kinds:
    row = [counts[(lab, *kind)] for lab in labels]
    print(f"| {kind[0]}: {kind[1]} | " + " | ".join(map(str, row)) + f" | {sum(row)} |")
Path(a.out).parent.mkdir(parents=True, exist_ok=True)
with open(a.out, "a") as f:
    f.write(json.dumps({"weights": a.weights, "notes": len(notes), "handwritten": a.handwritten,
                        "counts": [[*k, v] for k, v in sorted(counts.items())]}) + "\n")
