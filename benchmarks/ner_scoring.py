"""What the NER development runs (bench_ner_dp.py, bench_ner_verdicts.py) measure on one trained tagger: the split
of the generated corpus, exact-match F1 on held-out patients in both styles and on the 16 hand-written notes, the
paired verdict against the public lexicon on each set, and the LOSS and reference membership attacks."""
import random
import re
import zlib
from pathlib import Path

import torch

from dpcare.studies.clinical_nlp import split_patients
from dpcare.text import generate_corpus
from dpcare.text.baselines import compare_on_notes, span_counts
from dpcare.text.corpus.handwritten import handwritten_notes
from dpcare.text.evaluation import span_scores
from dpcare.text.lexicon_ner import lexicon_spans
from dpcare.text.lm.finetune import FinetuneMode
from dpcare.text.lm.token_ner import load_tagger, predict_spans

STYLES = ("templates", "varied")


def styled_corpus(n_notes: int) -> dict:
    """{style: the first ``n_notes`` generated notes} for templates, varied and mixed: the same patients in every
    style (mixed: each patient's notes in one of the two, by a hash of its id)."""
    styled = {s: generate_corpus(n_notes, seed=0, style=s) for s in STYLES}
    styled["mixed"] = [v if zlib.crc32(v.patient_id.encode()) % 2 else t
                       for t, v in zip(styled["templates"], styled["varied"])]
    return styled


def corpus_split(n_notes: int, style: str):
    """(training notes in ``style``, {style: held-out patients' notes} for templates, varied and mixed): the
    patients of :func:`styled_corpus`, split by patient once."""
    styled = styled_corpus(n_notes)
    split = split_patients(styled[style], 0.25, 0)
    held_out = {n.patient_id for n in split.held_out}
    return split.train, {s: [n for n in styled[s] if n.patient_id in held_out] for s in styled}


def fresh_patients(n_notes: int, style: str) -> list:
    """Notes in ``style`` of patients outside the first ``n_notes`` generated ones: the generator's next draws from
    the same sources (twice the notes, the patients already drawn removed; the MIMIC-IV demo's 100 patients are all
    drawn already). No run, choice or score read them: the membership attacks' clean non-members."""
    seen = {n.patient_id for n in generate_corpus(n_notes, seed=0)}
    return [n for n in styled_corpus(2 * n_notes)[style] if n.patient_id not in seen]


def sample_patients(notes, k: int, seed: int = 0):
    """The notes of ``k`` patients drawn at random (a public seed; ids sort by their source, so the first k would
    compare one source's members with another's non-members)."""
    ids = sorted({n.patient_id for n in notes})
    keep = set(random.Random(seed).sample(ids, min(k, len(ids))))
    return [n for n in notes if n.patient_id in keep]


def base_tagger(mode: str, seed: int, hints: str | None = None):
    """The tagger a run started from: the pre-trained encoder, the head (and adapters) drawn from ``seed``."""
    recipe = {"model": "minilm", "mode": mode, "labels": ["problem", "treatment", "test"], "lora_rank": 8,
              "lora_alpha": 16.0, "hints": hints}
    return load_tagger(recipe, None, seed=seed)


MODE_NAMES = "|".join(m.value for m in FinetuneMode)
SAVED = re.compile(rf"ner_(?P<style>\w+?)_(?P<mode>{MODE_NAMES})_(?P<epsilon>[\d.]+)_(?P<lr>[^_]+)_"
                   r"(?P<batch>\d+)_s(?P<seed>\d+)_ema(?P<ema>[^_]+)_hints(?P<hints>[A-Za-z]+)"
                   r"(?:_p(?P<patients>\d+))?\.pt$")


def saved_run(path: str) -> dict:
    """The settings of weights saved by bench_ner_dp.py, read from their name
    (``ner_{style}_{mode}_{epsilon}_{lr}_{batch}_s{seed}_ema{ema}_hints{hints}[_p{patients}].pt``)."""
    m = SAVED.search(Path(path).name)
    if not m:
        raise SystemExit(f"error: {path}: not a name bench_ner_dp.py writes (ner_STYLE_MODE_EPS_LR_BATCH_sSEED_...)")
    d = m.groupdict()
    return {**d, "epsilon": float(d["epsilon"]), "seed": int(d["seed"]), "path": path,
            "patients": int(d["patients"]) if d["patients"] else None,
            "hints": None if d["hints"] == "None" else d["hints"]}


def load_saved(run: dict):
    """(model in eval mode, tokenizer) of a :func:`saved_run`: its base tagger with the saved weights."""
    model, tokenizer = base_tagger(run["mode"], run["seed"], run["hints"])
    model.load_state_dict(torch.load(run["path"], weights_only=True))
    return model.eval(), tokenizer


def micro_f1(gold, predicted) -> float:
    return round(float(span_scores(gold, predicted).loc["micro", "f1"]), 3)


def versus(gold, predicted, lexicon, patients) -> dict:
    """The paired comparison of ``predicted`` with the lexicon's spans (a bootstrap over patients)."""
    c = compare_on_notes("ner F1", span_counts(gold, predicted), {"lexicon": span_counts(gold, lexicon)},
                         patients)["comparisons"][0]
    return {"difference": round(c["difference"], 3), "low": round(c["low"], 3), "high": round(c["high"], 3),
            "beats": c["beats"]}


def score_tagger(model, tokenizer, train, tests: dict, style: str, mode: str, seed: int, n_eval: int = 200,
                 n_mia: int = 200, hints: str | None = None, fresh: list | None = None) -> dict:
    """The row fields: F1 per set (the first 60 and ``n_eval`` held-out notes of the training style, ``n_eval`` of
    the other style, the hand-written notes), the lexicon's F1 and the paired comparison with it on each set, and
    the membership attacks on ``n_mia`` training and held-out patients (0: none), and, given ``fresh`` notes
    (:func:`fresh_patients`), on ``n_mia`` training patients of the fresh notes' sources against ``n_mia`` fresh
    patients (``membership_fresh``)."""
    main = "templates" if style == "mixed" else style
    other = "varied" if main == "templates" else "templates"
    sets = {"f1_60": tests[main][:60], f"f1_{n_eval}": tests[main][:n_eval],
            f"f1_{n_eval}_{other}": tests[other][:n_eval], "f1_handwritten": handwritten_notes()}
    row = {}
    for name, notes in sets.items():
        gold = [list(n.entities) for n in notes]
        patients = [n.patient_id for n in notes]
        predicted = predict_spans(model, tokenizer, notes)
        lexicon = [lexicon_spans(n.text) for n in notes]
        # the tagger's spans, and the lexicon's where the tagger found nothing (a rule fixed before any score)
        both = [t + [x for x in lx if not any(x.start < y.end and y.start < x.end for y in t)]
                for t, lx in zip(predicted, lexicon)]
        table = span_scores(gold, predicted)
        row[name] = {lab: round(float(table.loc[lab, "f1"]), 3) for lab in table.index}
        row["lexicon_" + name] = micro_f1(gold, lexicon)
        row["vs_lexicon_" + name] = versus(gold, predicted, lexicon, patients)
        row["with_lexicon_" + name] = micro_f1(gold, both)
        row["with_lexicon_vs_lexicon_" + name] = versus(gold, both, lexicon, patients)
        if name == "f1_handwritten":
            row["handwritten_table"] = table.round(3).to_dict()
    if n_mia:  # members: training patients; non-members: held-out patients (never used for a choice here)
        from dpcare.text.lm.attacks import loss_attack_tagger

        base, _ = base_tagger(mode, seed, hints)
        # non-members in the members' style (mixed: the same rule per patient), or the attack measures the style
        attack = loss_attack_tagger(model, base, tokenizer, sample_patients(train, n_mia),
                                    sample_patients(tests[style], n_mia))
        row["membership"] = attack_row(attack)
        if fresh:  # members from the sources the fresh patients come from
            sources = {n.patient_id.split(":")[0] for n in fresh}
            members = [n for n in train if n.patient_id.split(":")[0] in sources]
            attack = loss_attack_tagger(model, base, tokenizer, sample_patients(members, n_mia),
                                        sample_patients(fresh, n_mia))
            row["membership_fresh"] = attack_row(attack)
    return row


def attack_row(attack) -> dict:
    return {k: {m: [round(v[x], 3) for x in ("value", "low", "high")] for m, v in d.items()}
            for k, d in (("loss", attack.loss), ("reference", attack.reference))}
