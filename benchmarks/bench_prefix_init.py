"""Held-out perplexity of SmolLM2 with a random vs a text-initialised prefix (docs/clinical-nlp.md, "Prefix
initialisation"): the base model, the untrained prefix models, then each after a short DP-Prefix fine-tuning.

The study's split (``dpcare benchmark clinical-nlp``: generated notes, a quarter of the patients held out), its
NER rows (windows of ``--window`` note tokens, no overlap) and its perplexity (the held-out patients' target
NLL, summed, over their target tokens), with the library's own functions. One seed; CPU, one thread.

    OMP_NUM_THREADS=1 python benchmarks/bench_prefix_init.py --notes 24 --layers 0 --epsilon 8
"""

from __future__ import annotations

import argparse
import json
import time


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--notes", type=int, default=24)
    ap.add_argument("--layers", type=int, default=0, help="keep the first k SmolLM2 blocks (0: all 30)")
    ap.add_argument("--epsilon", type=float, default=8.0)
    ap.add_argument("--epochs", type=float, default=2.0)
    ap.add_argument("--batch-size", type=int, default=4, help="expected patients per step")
    ap.add_argument("--window", type=int, default=128)
    ap.add_argument("--eval-patients", type=int, default=0, help="score only the first k held-out patients (0: all)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--skip-training", action="store_true")
    args = ap.parse_args()

    import inspect

    import torch

    torch.set_num_threads(1)
    from dpcare.lm import load_causal_lm
    from dpcare.studies.clinical_nlp import DELTA, split_patients
    from dpcare.text import generate_corpus
    from dpcare.text.evaluation import perplexity
    from dpcare.text.lm.attacks import _patient_nll
    from dpcare.text.lm.finetune import apply_mode, finetune, make_examples
    from dpcare.text.lm.prefix_init import init_prefix_from_text, public_prefix_text

    layers = args.layers or None
    split = split_patients(generate_corpus(args.notes, seed=args.seed), 0.25, args.seed)
    held = split.held_out
    if args.eval_patients:
        keep = set(split.held_out_patients[: args.eval_patients])
        held = [n for n in held if n.patient_id in keep]
    _, tok = load_causal_lm("smollm2", layers)
    rows = make_examples(held, "ner", tok, window=args.window, stride=args.window)
    out = {"settings": vars(args), "train_patients": len(split.train_patients),
           "held_out_patients": len({n.patient_id for n in held}), "held_out_rows": len(rows), "perplexity": {}}

    def score(name, model):
        t0 = time.perf_counter()
        nll = _patient_nll(model.eval(), tok, rows, 4)
        out["perplexity"][name] = round(perplexity(sum(t for t, _ in nll.values()), sum(c for _, c in nll.values())), 4)
        print(f"{name}: perplexity {out['perplexity'][name]} ({time.perf_counter() - t0:.0f} s)", flush=True)

    score("base", load_causal_lm("smollm2", layers)[0])
    torch.manual_seed(args.seed)
    score("random prefix, untrained", apply_mode(load_causal_lm("smollm2", layers)[0], "dp-prefix"))
    model = apply_mode(load_causal_lm("smollm2", layers)[0], "dp-prefix")
    init_prefix_from_text(model, tok, public_prefix_text("ner"))
    score("text prefix, untrained", model)
    # the same secret noise stream for both inits where the engine takes one (a paired comparison)
    noise = {"noise_seed": args.seed} if "noise_seed" in inspect.signature(finetune).parameters else {}
    if not args.skip_training:
        for init in ("random", "text"):
            t0 = time.perf_counter()
            torch.manual_seed(args.seed)  # peft's random prefix
            net, _, info = finetune(split.train, "ner", "dp-prefix", epsilon=args.epsilon, delta=DELTA,
                                    model="smollm2", layers=layers, epochs=args.epochs, batch_size=args.batch_size,
                                    seed=args.seed, window=args.window, stride=args.window, prefix_init=init,
                                    max_physical_batch=2, **noise)
            out[f"{init}_steps"], out[f"{init}_fit_s"] = info["steps"], round(time.perf_counter() - t0)
            out["sigma"] = info["noise_multiplier"]
            score(f"{init} prefix, DP-Prefix eps {args.epsilon:g}", net)
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
