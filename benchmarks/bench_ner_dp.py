"""The NER development runs of docs/clinical-nlp.md (issue 55): the MiniLM BIO tagger trained on generated notes
(non-private, DP-LoRA or DP-Full, the patient the unit), scored by exact-match span F1 on the first 60 and the
first 200 held-out patients' notes and on the 16 hand-written notes (never used for a choice), each beside the
public lexicon with a paired interval, and attacked by the LOSS and reference membership attacks
(benchmarks/ner_scoring.py). ``--style varied``
trains on the generator's varied style (abbreviations, lists, headers, negations); held-out patients are scored in
both styles. ``--patients N`` trains on N of the training patients (how many a private tagger needs).

    OMP_NUM_THREADS=1 python benchmarks/bench_ner_dp.py --mode dp-lora --epsilon 8 --lr 1e-2 --batch 128 --epochs 4.8
    OMP_NUM_THREADS=1 python benchmarks/bench_ner_dp.py --mode non-private --lr 2e-4 --batch 16 --epochs 2.2

Appends one JSON line per run to --out (default results/ner_dp.jsonl) and saves the trained weights beside it; the
same line goes to --journal (default benchmarks/journals/ner-dp.jsonl, kept in git, so a documented number outlives
the run folder; --journal '' writes none).
"""
import argparse
import json
import time
from pathlib import Path

import torch
from ner_scoring import corpus_split, fresh_patients, sample_patients, score_tagger

from dpcare.text.lm.token_ner import train_token_ner

p = argparse.ArgumentParser()
p.add_argument("--mode", default="dp-lora"); p.add_argument("--epsilon", type=float, default=8.0)
p.add_argument("--lr", type=float, default=None); p.add_argument("--batch", type=int, default=64)
p.add_argument("--epochs", type=float, default=2.0); p.add_argument("--notes", type=int, default=3000)
p.add_argument("--seed", type=int, default=0); p.add_argument("--eval", type=int, default=200)
p.add_argument("--out", default="results/ner_dp.jsonl")
p.add_argument("--journal", default=str(Path(__file__).parent / "journals" / "ner-dp.jsonl"),
               help="a second copy of the row, kept in git ('' : none)")
p.add_argument("--ema", type=float, default=None, help="keep an exponential moving average of the weights (decay)")
p.add_argument("--mia", type=int, default=200, help="patients per side of the membership attacks (0: none)")
p.add_argument("--style", default="templates", choices=("templates", "varied", "mixed"),
               help="the training notes' style (mixed: each patient's notes in one of the two, by a hash of its id)")
p.add_argument("--hints", default=None, choices=("lexicon",), help="the tagger reads the public lexicon's tags")
p.add_argument("--patients", type=int, default=None,
               help="train on this many of the training patients, drawn with the public seed 0 (default: all); the "
                    "held-out and hand-written notes stay the same")
a = p.parse_args()
t0 = time.time()
train, tests = corpus_split(a.notes, a.style)
if a.patients:
    train = sample_patients(train, a.patients)
print(f"{len(train)} train notes / {len({n.patient_id for n in train})} patients; generated in {time.time()-t0:.0f} s", flush=True)
t1 = time.time()
run = train_token_ner(train, a.mode, epsilon=a.epsilon if a.mode != "non-private" else None,
                      delta=1e-5 if a.mode != "non-private" else None, epochs=a.epochs, batch_size=a.batch,
                      lr=a.lr, seed=a.seed, accountant="pld", progress=True, ema_decay=a.ema, hints=a.hints)
took = time.time() - t1
r = run.result
row = {**vars(a), "train_s": round(took), "steps": r.steps, "sigma": r.noise_multiplier,
       "epsilon_spent": r.guarantee.epsilon if r.guarantee else None}
Path(a.out).parent.mkdir(parents=True, exist_ok=True)
torch.save(run.model.state_dict(), Path(a.out).parent / f"ner_{a.style}_{a.mode}_{a.epsilon}_{a.lr}_{a.batch}_s{a.seed}_ema{a.ema}_hints{a.hints}{f'_p{a.patients}' if a.patients else ''}.pt")
fresh = fresh_patients(a.notes, a.style) if a.mia else None
row.update(score_tagger(run.model, run.tokenizer, train, tests, a.style, a.mode, a.seed, a.eval, a.mia, a.hints,
                        fresh))
print(json.dumps(row), flush=True)
for path in filter(None, {a.out, a.journal}):
    with open(path, "a") as f:
        f.write(json.dumps(row) + "\n")
