"""Score a tagger saved by bench_ner_dp.py again (benchmarks/ner_scoring.py: F1 per set, the paired verdict against
the public lexicon, the membership attacks) without training it again.

    OMP_NUM_THREADS=1 python benchmarks/bench_ner_verdicts.py results/ner_templates_dp-lora_8.0_0.005_64_s0_emaNone.pt \\
        --mode dp-lora --style templates --seed 0
"""
import argparse
import json
from pathlib import Path

import torch
from ner_scoring import base_tagger, corpus_split, fresh_patients, score_tagger

p = argparse.ArgumentParser()
p.add_argument("weights"); p.add_argument("--mode", required=True); p.add_argument("--seed", type=int, default=0)
p.add_argument("--style", default="templates", choices=("templates", "varied", "mixed"))
p.add_argument("--notes", type=int, default=3000); p.add_argument("--eval", type=int, default=200)
p.add_argument("--mia", type=int, default=200); p.add_argument("--label", default="")
p.add_argument("--out", default="results/ner_verdicts.jsonl")
p.add_argument("--hints", default=None, choices=("lexicon",), help="the tagger was trained with lexicon hints")
p.add_argument("--fresh", action="store_true", help="also attack with clean non-members (ner_scoring.fresh_patients)")
a = p.parse_args()
train, tests = corpus_split(a.notes, a.style)
model, tokenizer = base_tagger(a.mode, a.seed, a.hints)
model.load_state_dict(torch.load(a.weights, weights_only=True))
fresh = fresh_patients(a.notes, a.style) if a.fresh else None
row = {**vars(a), **score_tagger(model.eval(), tokenizer, train, tests, a.style, a.mode, a.seed, a.eval, a.mia,
                                 a.hints, fresh)}
print(json.dumps(row), flush=True)
Path(a.out).parent.mkdir(parents=True, exist_ok=True)
with open(a.out, "a") as f:
    f.write(json.dumps(row) + "\n")
