"""The summarisation development runs of docs/clinical-nlp.md (issue 55): SmolLM2-135M fine-tuned through the
recipe's ``finetune`` (non-private, DP-LoRA, DP-Full or DP-Prefix, the patient the unit) on the generated corpus
of the NER runs (benchmarks/ner_scoring.py: the same 3,000 notes and the same split by patient), scored by ROUGE-L
F1 of greedy summaries of the first ``--eval`` held-out notes, beside LEAD-3 and the base model with paired
intervals over the held-out patients (``dpcare.text.lm.scoring.score_summaries``, what ``text finetune --test``
prints). ``--patients N`` trains on N of the 2,167 training patients (drawn with the public seed 0).

    OMP_NUM_THREADS=1 python benchmarks/bench_sum_dp.py --mode dp-lora --epsilon 3 --patients 1000 --batch 64 --epochs 2

Appends one JSON line per run to --out (default results/sum_dp.jsonl), with the summaries beside it, and the same
line, without the summaries, to --journal (default benchmarks/journals/sum-dp.jsonl, kept in git; '' : none).
"""
import argparse
import json
import time
from pathlib import Path

from ner_scoring import attack_row, corpus_split, fresh_patients, sample_patients

from dpcare.lm import load_causal_lm
from dpcare.text.lm.attacks import loss_attack_lm
from dpcare.text.lm.finetune import finetune
from dpcare.text.lm.scoring import score_summaries

p = argparse.ArgumentParser()
p.add_argument("--mode", default="dp-lora"); p.add_argument("--epsilon", type=float, default=3.0)
p.add_argument("--lr", type=float, default=None); p.add_argument("--batch", type=int, default=64)
p.add_argument("--epochs", type=float, default=2.0); p.add_argument("--notes", type=int, default=3000)
p.add_argument("--patients", type=int, default=None, help="train on this many of the training patients")
p.add_argument("--seed", type=int, default=0); p.add_argument("--eval", type=int, default=60)
p.add_argument("--base", action=argparse.BooleanOptionalAction, default=True,
               help="also decode the base model's summaries (a baseline; as long as the model's own)")
p.add_argument("--mia", type=int, default=100,
               help="patients per side of the LOSS and reference membership attacks: training patients against "
                    "held-out patients outside the scored notes (0: none)")
p.add_argument("--fresh", action="store_true",
               help="attack with clean non-members (ner_scoring.fresh_patients: no run, choice or score read them) "
                    "instead of held-out patients")
p.add_argument("--out", default="results/sum_dp.jsonl")
p.add_argument("--journal", default=str(Path(__file__).parent / "journals" / "sum-dp.jsonl"),
               help="a second copy of the row, kept in git ('' : none)")
a = p.parse_args()
t0 = time.time()
train, tests = corpus_split(a.notes, "templates")
if a.patients:
    train = sample_patients(train, a.patients)
held_out = tests["templates"][:a.eval]
print(f"{len(train)} train notes / {len({n.patient_id for n in train})} patients; {len(held_out)} held-out notes "
      f"of {len({n.patient_id for n in held_out})} patients; generated in {time.time() - t0:.0f} s", flush=True)
private = a.mode != "non-private"
t1 = time.time()
net, tokenizer, info = finetune(train, task="summarisation", mode=a.mode, epsilon=a.epsilon if private else None,
                                delta=1e-5 if private else None, epochs=a.epochs, batch_size=a.batch, lr=a.lr,
                                seed=a.seed, progress=True)
took = time.time() - t1
t2 = time.time()
base_recipe = {"model": "smollm2", "layers": None}  # what finetune trained from (its defaults)
scores = score_summaries(net, tokenizer, base_recipe, held_out, baseline=a.base)
guarantee = info.get("guarantee")
row = {**vars(a), "train_s": round(took), "score_s": round(time.time() - t2), "steps": info.get("steps"),
       "sigma": info.get("noise_multiplier"), "epsilon_spent": guarantee["epsilon"] if guarantee else None,
       "rouge_l": round(scores.value, 4),
       "versus": [{k: (round(c[k], 4) if isinstance(c[k], float) else c[k])
                   for k in ("baseline_name", "baseline", "difference", "low", "high", "beats")}
                  for c in scores.result["comparisons"]],
       "verdict": scores.result.get("verdict")}
if a.mia:  # non-members: clean ones (--fresh), or held-out patients no summariser score read (the NER runs did)
    scored = {n.patient_id for n in held_out}
    nonmembers = (fresh_patients(a.notes, "templates") if a.fresh
                  else [n for n in tests["templates"] if n.patient_id not in scored])
    base, _ = load_causal_lm(base_recipe["model"], base_recipe["layers"])
    attack = loss_attack_lm(net, base, tokenizer, sample_patients(train, a.mia), sample_patients(nonmembers, a.mia),
                            task="summarisation")
    row["membership"] = attack_row(attack)
print(json.dumps(row), flush=True)
Path(a.out).parent.mkdir(parents=True, exist_ok=True)
with open(a.out, "a") as f:
    f.write(json.dumps({**row, "summaries": scores.outputs}) + "\n")
if a.journal:
    with open(a.journal, "a") as f:
        f.write(json.dumps(row) + "\n")
