"""``dpcare benchmark clinical-nlp``: Tables 1 and 2 of Lopez and Hill on generated notes.

* Table 1: generative NER (exact-match span F1, constrained decoding) and summarisation (ROUGE-L of greedy
  summaries) of a causal LM fine-tuned non-privately, with DP-Full, DP-LoRA and DP-Prefix at epsilon 3.
* Table 2: membership-inference AUC against the NER models at epsilon 1, 3, 8 and non-private; the paper
  attacks DP-LoRA, here every mode in ``sweep_modes`` is trained at every epsilon (also the sweep plot).
  Attacks: LOSS, LOSS calibrated by the base model, and with ``shadows`` > 0 the paper's shadow-model LiRA;
  with ``canaries`` > 0 every generative-NER run also trains on fake canary patients, each included with
  probability 1/2, and reports a one-run epsilon lower bound (Steinke et al. 2023).
* ``token-ner``: the MiniLM encoder as a BIO tagger (non-private, DP-Full, DP-LoRA at epsilon 3; prefix
  tuning is not offered for it), the same held-out notes.
* ``clip_ablation``: DP-LoRA NER at epsilon 3 with private adaptive clipping (Andrew et al. 2021) at the
  median, and the paper's "80th percentile of the first iterations" made private (charged warm-up counts,
  C frozen after them), beside the fixed clip norm (the paper's Section 4.4).

Every cell fine-tunes one model (:func:`dpcare.text.lm.finetune.finetune`, the PATIENT as the privacy unit,
delta 1e-5 as the paper; noise_seed pinned to the cell's seed, so that the published numbers stay
reproducible: their noise is known to whoever knows the seed), then scores the held-out patients' notes and attacks the model. The patients are
split once: training patients (the members) and held-out patients (the test notes and the non-members).
No selection step reads the held-out patients: learning rates, epochs and the clip norm are fixed
beforehand (:data:`dpcare.text.lm.settings.CAUSAL_LR`), the last iterate is scored, and no threshold is
tuned, so nothing is left uncounted in epsilon and the non-members are clean. The attacks score an equal
number of members, drawn at random from the training patients.

The study writes one run folder (:mod:`dpcare.runs`, kind ``study:clinical-nlp``) with a ``run.json`` that
``dpcare report`` reads: every model's guarantee, the utility table, the attacks and canary audits. Runs are
journalled in ``runs.jsonl`` of the run's staging folder (``.<out>.partial``; the split notes wait in its
``checkpoints/``, deleted when the study finishes): an interrupted call resumes when the same command is
rerun, each unfinished run from its last checkpoint (``checkpoints/cells/``), and a journal written with other
settings is refused. Runs go ``workers`` at a time in separate
processes. ``train=False`` (``--tables-only``) rewrites the tables of a finished folder (or of the
staging folder of an unfinished one) from its journal and trains nothing.
"""

from __future__ import annotations

import json
import math
import os
import pickle
import random
import shutil
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from dpcare.exceptions import DataError, SpecError
from dpcare.io import atomic_write, epsilon_curves, new_figure, save_figure, write_json, write_text
from dpcare.progress import progress as tqdm
from dpcare.runs import MANIFEST, Manifest, RunFolder, is_run_folder, read_manifest
from dpcare.runs.folder import CHECKPOINTS, PARTIAL, staging_path
from dpcare.runs.journal import (
    append_run,
    check_settings,
    json_digest,
    read_journal,
    release_journal,
)
from dpcare.studies.grid import parallel_results
from dpcare.studies.paired import (
    HIGHER,
    LOWER,
    Claim,
    paired_differences,
    paired_markdown,
    seeds_label,
)
from dpcare.text.lm.finetune import CLIP_VARIANTS, FinetuneMode, adaptive_clip
from dpcare.text.spans import ENTITY_LABELS, Note

KIND = "study:clinical-nlp"
COMMAND = "dpcare benchmark clinical-nlp"

BASE = "base"  # the pre-trained model, never fine-tuned: reads no private note (the floor of every method)
MODES = (BASE, *(m.value for m in FinetuneMode))
TASKS = ("ner", "summarisation", "token-ner")
TOKEN_MODES = ("non-private", "dp-full", "dp-lora")  # the MiniLM tagger has no prefix-tuning mode here
ATTACKS = ("loss", "reference")  # dpcare.text.lm.attacks.loss_attack_lm
DELTA = 1e-5  # the paper's (Section 5.1)
#: the paper's claims checked seed by seed at the main epsilon (per task; the fixed clip norm): DP-LoRA beats
#: DP-Full and DP-Prefix (Table 1), non-private beats DP-LoRA (the price of privacy), and DP lowers the
#: membership attacks' AUC against the non-private model (Table 2)
CLAIMS = (Claim("dp-lora", "dp-full", ("ner_f1", "rougeL_f1", "perplexity")),
          Claim("dp-lora", "dp-prefix", ("ner_f1", "rougeL_f1", "perplexity")),
          Claim("non-private", "dp-lora", ("ner_f1", "rougeL_f1")),
          Claim("dp-lora", "non-private", ("mia_loss_auc", "mia_reference_auc")))
PAIRED_METRICS = {"ner_f1": HIGHER, "rougeL_f1": HIGHER, "perplexity": LOWER, "mia_loss_auc": LOWER,
                  "mia_reference_auc": LOWER}


@dataclass
class ClinicalNLPBenchmark:
    n_notes: int = 48
    corpus_seed: int = 0
    held_out: float = 0.25  # fraction of patients held out (test notes and attack non-members)
    model: str = "smollm2"
    layers: int | None = None  # keep the first k blocks (a cut SmolLM2 is no language model: smoke tests only)
    epochs: float = 2.0
    batch_size: int = 4  # expected patients per step
    clip_norm: float = 1.0
    window: int = 128  # note tokens per NER window (stride = window: no overlap)
    epsilons: tuple[float, ...] = (1.0, 3.0, 8.0)
    main_epsilon: float = 3.0
    modes: tuple[str, ...] = MODES
    sweep_modes: tuple[str, ...] = ("dp-lora",)  # NER models trained at every epsilon (Table 2, the plot)
    tasks: tuple[str, ...] = ("ner", "summarisation")
    canaries: int = 0  # fake canary patients per generative-NER run (each included with probability 1/2)
    shadows: int = 0  # LiRA shadow models per Table 2 run (0: LOSS and reference attacks only)
    clip_ablation: bool = False  # DP-LoRA NER at main_epsilon with the adaptive clip-norm variants
    encoder: str = "minilm"  # the token-ner model: "minilm" or a local encoder folder
    eval_notes: int = 6  # held-out notes decoded for NER F1 and ROUGE-L (all held-out patients are attacked)
    summary_tokens: int = 96
    ner_tokens: int = 384  # most tokens of one window's entity list
    seeds: int = 1
    workers: int = 2
    physical_batch: int = 2  # rows per forward/backward pass (memory only: the gradients are the same)
    # dp-prefix's start: the task's public instruction ("text", the default since issue 23) or peft's random
    # prefix ("random": the published table's DP-Prefix cells); in the resume fingerprint, so journals never mix
    prefix_init: str = "text"

    @classmethod
    def quick(cls) -> ClinicalNLPBenchmark:
        """A smoke-size run for CI: 12 notes, SmolLM2 cut to one block, one epoch, epsilon 3, 2 test notes."""
        return cls(n_notes=12, held_out=0.34, layers=1, epochs=1.0, batch_size=4, epsilons=(3.0,), eval_notes=2,
                   summary_tokens=24, ner_tokens=64, canaries=4)

    def validate(self) -> None:
        for name, values, known in (("modes", self.modes, MODES), ("sweep_modes", self.sweep_modes, MODES),
                                    ("tasks", self.tasks, TASKS)):
            unknown = sorted(set(values) - set(known))
            if unknown:
                raise SpecError(f"unknown {name} {unknown}; choose from {list(known)}")
        if not self.modes or not self.tasks:
            raise SpecError("no modes or no tasks to run")
        if {"non-private", BASE} & set(self.sweep_modes):
            raise SpecError("sweep_modes are private modes (the non-private and base models have no epsilon)")
        if not self.epsilons or any(not (e > 0 and math.isfinite(e)) for e in self.epsilons):
            raise SpecError(f"epsilons must be finite and > 0, got {self.epsilons}")
        self.epsilons = tuple(float(e) for e in self.epsilons)
        self.main_epsilon = float(self.main_epsilon)
        if self.main_epsilon not in self.epsilons:
            raise SpecError(f"main_epsilon {self.main_epsilon} must be one of the epsilons {self.epsilons}")
        if not 0 < self.held_out < 1:
            raise SpecError(f"held_out must lie in (0, 1), got {self.held_out}")
        for name in ("n_notes", "seeds", "batch_size", "eval_notes", "summary_tokens", "ner_tokens", "window"):
            if getattr(self, name) < 1:
                raise SpecError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.canaries < 0:
            raise SpecError(f"canaries must be >= 0, got {self.canaries}")
        if self.shadows < 0 or self.shadows % 2:
            raise SpecError(f"shadows must be an even number >= 0 (LiRA trains them in complementary pairs), "
                            f"got {self.shadows}")
        if self.epochs <= 0:
            raise SpecError(f"epochs must be > 0, got {self.epochs}")
        if self.model != "smollm2" and not (Path(self.model) / "config.json").is_file():
            raise SpecError(f"unknown model path {self.model!r}: not a local Hugging Face causal-LM folder "
                            "(use 'smollm2')")

    def fingerprint(self) -> str:
        """The settings a finished run depends on (a resumed journal must match them)."""
        keep = {k: v for k, v in asdict(self).items()
                if k not in ("modes", "sweep_modes", "tasks", "epsilons", "main_epsilon", "seeds", "workers",
                             "clip_ablation", "physical_batch")}
        return json.dumps(keep, sort_keys=True, default=str)

    def run_settings(self, notes: str = "generated") -> dict[str, Any]:
        """The settings of the study's run folder (its resume key): every setting but the runtime knobs
        (``workers``; ``physical_batch`` changes memory only), and where the notes come from."""
        keep = {k: v for k, v in asdict(self).items() if k not in ("workers", "physical_batch")}
        return {**json.loads(json.dumps(keep, default=str)), "notes": notes}

    def cells(self) -> list[tuple[str, str, float | None, int, str]]:
        """(task, mode, target epsilon or None, seed, clip variant) of every run."""
        out = []
        for task in self.tasks:
            for mode in self.modes:
                if task == "token-ner" and mode not in TOKEN_MODES:
                    continue
                if mode in ("non-private", BASE):
                    eps: list = [None]
                elif task == "ner" and mode in self.sweep_modes:
                    eps = list(self.epsilons)
                else:
                    eps = [self.main_epsilon]
                out += [(task, mode, e, s, "fixed") for e in eps for s in range(self.seeds)]
        if self.clip_ablation and "ner" in self.tasks:
            out += [("ner", "dp-lora", self.main_epsilon, s, v) for v in CLIP_VARIANTS[1:] for s in range(self.seeds)]
        return out

    def attacked(self, task: str, mode: str, variant: str) -> bool:
        """Runs of Table 2 (membership inference; LiRA shadows when ``shadows`` > 0)."""
        return task == "ner" and variant == "fixed" and (mode == "non-private" or mode in self.sweep_modes)


def _untrained(bench: ClinicalNLPBenchmark, task: str):
    """(the pre-trained model, tokenizer, info) of the ``base`` rows: nothing fine-tuned, nothing read."""
    from dpcare.lm import load_causal_lm

    model, tokenizer = load_causal_lm(bench.model, bench.layers)
    info = {"task": task, "mode": BASE, "steps": 0, "noise_multiplier": None, "gradient_noise_multiplier": None,
            "clip_norm": None, "patients": 0, "rows": 0, "trainable_parameters": 0, "backend": "none",
            "guarantee": None, "guarantee_text": "the pre-trained model, never fine-tuned: it reads no private note"}
    return model, tokenizer, info


# ---------------------------------------------------------------- data
@dataclass
class NoteSplit:
    """Training patients' notes and held-out patients' notes (disjoint patients)."""

    train: list[Note]
    held_out: list[Note]

    @property
    def train_patients(self) -> list[str]:
        return sorted({n.patient_id for n in self.train})

    @property
    def held_out_patients(self) -> list[str]:
        return sorted({n.patient_id for n in self.held_out})


def split_patients(notes: list[Note], held_out: float, seed: int = 0) -> NoteSplit:
    """Hold out a random ``held_out`` fraction of the PATIENTS (all their notes)."""
    if not notes:
        raise DataError("no notes: the corpus is empty")
    patients = sorted({n.patient_id for n in notes})
    if len(patients) < 4:
        raise DataError(f"{len(patients)} patient(s): the benchmark needs at least 4 (2 trained, 2 held out)")
    random.Random(f"{seed}:split").shuffle(patients)
    k = min(len(patients) - 2, max(2, round(held_out * len(patients))))
    out = set(patients[:k])
    return NoteSplit([n for n in notes if n.patient_id not in out], [n for n in notes if n.patient_id in out])


def prepare_notes(bench: ClinicalNLPBenchmark, out: Path, notes: list[Note] | None = None,
                  check: Callable[[str], None] = lambda digest: None) -> tuple[Path, str]:
    """``out/checkpoints/notes.pkl``: the split notes (generated unless given), written once (in the staging
    folder: the notes are not part of the released folder); a folder prepared with other settings is refused.
    ``out/data/split.json``: the patients of each side. ``check`` sees the split's :func:`split_digest` before
    anything is written (the journal's check); returns the path and the digest."""
    path = out / CHECKPOINTS / "notes.pkl"
    wanted = {"n_notes": bench.n_notes, "corpus_seed": bench.corpus_seed, "held_out": bench.held_out,
              "notes": "generated" if notes is None else "supplied"}
    if path.exists():
        kept = pickle.loads(path.read_bytes())
        if kept["settings"] != wanted:
            raise SpecError(f"{path} holds notes prepared with other settings ({kept['settings']}, now {wanted}): "
                            "use another output folder")
        check(digest := split_digest(kept["split"]))
        return path, digest
    if notes is None:
        from dpcare.text import generate_corpus

        notes = generate_corpus(bench.n_notes, seed=bench.corpus_seed)
    split = split_patients(list(notes), bench.held_out, bench.corpus_seed)
    check_scorable(bench, split)
    check(digest := split_digest(split))
    atomic_write(path, lambda fh: pickle.dump({"settings": wanted, "split": split}, fh), mode="wb")
    write_json(out / "data" / "split.json", {"train_patients": split.train_patients,
                                             "held_out_patients": split.held_out_patients,
                                             "train_notes": len(split.train), "held_out_notes": len(split.held_out)})
    return path, digest


def check_scorable(bench: ClinicalNLPBenchmark, split: NoteSplit) -> None:
    """The held-out notes every cell scores carry each task's gold annotations (NER: an entity span;
    summarisation: a summarisation pair in every note), checked before any cell trains."""
    from dpcare.text.lm.scoring import check_gold

    scored = split.held_out[: bench.eval_notes]
    where = f"clinical-nlp: the {len(scored)} held-out note(s) scored"
    if "ner" in bench.tasks:
        check_gold("ner", scored, ENTITY_LABELS, where)
    missing = [n.note_id for n in scored if not (n.summary_source.strip() and n.summary_target.strip())]
    if "summarisation" in bench.tasks and missing:
        raise DataError(f"{where}: {len(missing)} have no summarisation pair (summary_source and summary_target), "
                        f"e.g. {missing[:3]}")


def _load_split(path: str) -> NoteSplit:
    return pickle.loads(Path(path).read_bytes())["split"]


def split_digest(split: NoteSplit) -> str:
    """sha256 over every note of the split (side, ids, text, annotations, meta): each journal row carries it, so
    a journal is resumed only on the notes its cells trained and were scored on (notes.pkl is never released,
    and regenerated notes must be the same notes)."""
    sides = {"train": [asdict(n) for n in split.train], "held_out": [asdict(n) for n in split.held_out]}
    return json_digest(sides)


# ---------------------------------------------------------------- one run
def run_cell(task: str, mode: str, epsilon: float | None, seed: int, variant: str, notes_path: str,
             bench: ClinicalNLPBenchmark) -> dict[str, Any]:
    """Fine-tune one model, score the held-out notes, attack it; one journal row. The fine-tuning checkpoints
    into its own folder beside ``notes_path`` (every ten minutes and at its end), so an interrupted cell resumes
    where it stopped; the folder is deleted once the row is complete."""
    import torch

    torch.set_num_threads(1)
    split = _load_split(notes_path)
    row = {"task": task, "mode": mode, "target_epsilon": epsilon, "seed": seed, "variant": variant}
    checkpoint = cell_checkpoint(notes_path, task, mode, epsilon, seed, variant)
    if task == "token-ner":
        result = {**row, **_token_ner_cell(split, mode, epsilon, seed, bench, str(checkpoint))}
    else:
        result = {**row, **_lm_cell(split, task, mode, epsilon, seed, variant, bench, str(checkpoint))}
    shutil.rmtree(checkpoint, ignore_errors=True)  # only once the row is complete: a failed cell resumes
    return result


def _lm_cell(split: NoteSplit, task: str, mode: str, epsilon: float | None, seed: int, variant: str,
             bench: ClinicalNLPBenchmark, checkpoint: str) -> dict[str, Any]:
    """Fine-tune the causal LM for ``task`` (or take it untrained for the base row), score and attack it."""
    from dpcare.lm import load_causal_lm
    from dpcare.text.evaluation import perplexity
    from dpcare.text.lm.attacks import insert_canaries, loss_attack_lm, make_note_canaries
    from dpcare.text.lm.finetune import finetune
    from dpcare.text.lm.settings import CAUSAL_LR

    row: dict[str, Any] = {}
    rows = {"task": task, "labels": ENTITY_LABELS, "window": bench.window, "stride": bench.window}
    private = mode not in ("non-private", BASE)
    canaries = make_note_canaries(bench.canaries, seed) if task == "ner" and bench.canaries and mode != BASE else []
    train = split.train
    if canaries:
        train, included = insert_canaries(split.train, canaries, seed)

    def fit(notes: list[Note], checkpoint_dir: str | None = None):
        return finetune(notes, task, mode, epsilon=epsilon, delta=DELTA if private else None, model=bench.model,
                        layers=bench.layers, epochs=bench.epochs, batch_size=bench.batch_size,
                        lr=CAUSAL_LR[mode],  # the published table's rates, for both tasks (not SUMMARY_LR)
                        clip_norm=bench.clip_norm, seed=seed, noise_seed=seed, window=bench.window,
                        stride=bench.window, prefix_init=bench.prefix_init,
                        adaptive_clip=adaptive_clip(variant), max_physical_batch=bench.physical_batch,
                        checkpoint_dir=checkpoint_dir)

    t0 = time.perf_counter()
    model, tokenizer, info = _untrained(bench, task) if mode == BASE else fit(train, checkpoint)
    row["fit_s"] = time.perf_counter() - t0
    model.eval()
    t0 = time.perf_counter()
    test = split.held_out[: bench.eval_notes]
    utility = _utility(model, tokenizer, task, test, bench)
    row["per_note"] = utility.pop("per_note")  # for the verdict against the public baselines
    row["eval_s"] = time.perf_counter() - t0
    base, _ = load_causal_lm(bench.model, bench.layers)
    members = _sample_members(split, len(split.held_out_patients), seed)
    t0 = time.perf_counter()
    attack = loss_attack_lm(model, base, tokenizer, members, split.held_out, seed=seed, **rows)
    held = [attack.target_nll[p] for p in split.held_out_patients]  # the non-members: every held-out patient
    utility["perplexity"] = perplexity(sum(t for t, _ in held), sum(c for _, c in held))
    roc = {a: {"members": attack.scores[a][0].tolist(), "nonmembers": attack.scores[a][1].tolist()}
           for a in ATTACKS}
    if bench.shadows and bench.attacked(task, mode, variant):
        lira = _lira(fit, model, tokenizer, split, members, split.held_out, bench, seed, rows)
        row.update({f"mia_lira_{m}": lira.online[m]["value"] for m in ("auc", "tpr_at_1pct_fpr")})
        row.update(mia_lira_auc_ci=[lira.online["auc"]["low"], lira.online["auc"]["high"]],
                   mia_lira_offline_auc=lira.offline["auc"]["value"], lira_shadows=lira.shadows)
        roc["lira"] = {"members": lira.scores["LiRA online"][0].tolist(),
                       "nonmembers": lira.scores["LiRA online"][1].tolist()}
    row["attack_s"] = time.perf_counter() - t0
    if canaries:
        from dpcare.text.lm.attacks import canary_audit

        audit = canary_audit(model, tokenizer, canaries, included, DELTA, base_model=base, **rows)
        row.update(canary_epsilon_lower_bound=audit.epsilon_lower_bound, canary_correct=audit.correct,
                   canary_guesses=audit.guesses, canaries=audit.canaries, canaries_included=int(included.sum()))
    g = info["guarantee"]
    return {
        **row, "epsilon": g["epsilon"] if g else None, "delta": g["delta"] if g else None,
        "steps": info["steps"], "noise_multiplier": info["noise_multiplier"],
        "gradient_noise_multiplier": info["gradient_noise_multiplier"], "clip_norm": info["clip_norm"],
        "patients": info["patients"], "rows": info["rows"], "trainable_parameters": info["trainable_parameters"],
        "backend": info["backend"], "test_notes": len(test), **{f"test_{k}": v for k, v in utility.items()},
        **{f"mia_{a}_{m}": getattr(attack, a)[m]["value"] for a in ATTACKS for m in ("auc", "tpr_at_1pct_fpr")},
        **{f"mia_{a}_auc_ci": [getattr(attack, a)["auc"]["low"], getattr(attack, a)["auc"]["high"]] for a in ATTACKS},
        "mia_members": attack.members, "mia_nonmembers": attack.nonmembers, "roc": roc, "guarantee": g,
        "guarantee_text": info["guarantee_text"],
    }


def _lira(fit, model, tokenizer, split: NoteSplit, members: list[Note], nonmembers: list[Note],
          bench: ClinicalNLPBenchmark, seed: int, rows: dict):
    """The paper's shadow-model attack: each shadow trains with the target's recipe on the training patients
    that are not attacked plus half of the attacked patients (complementary halves in pairs), so its data set
    has the target's size and each attacked patient is in exactly half of the shadows."""
    from dpcare.text.lm.attacks import lira_lm

    attacked = {n.patient_id for n in members}
    rest = [n for n in split.train if n.patient_id not in attacked]
    return lira_lm(lambda notes: fit(rest + list(notes))[0].eval(), model, tokenizer, members, nonmembers,
                   shadows=bench.shadows, seed=seed, **rows)


def cell_checkpoint(notes_path: str, task: str, mode: str, epsilon: float | None, seed: int, variant: str) -> Path:
    """The folder where one cell's fine-tuning checkpoints: beside the split notes, in the staging folder's
    ``checkpoints/`` (it holds the noise generators' state: never released, deleted with the staging folder)."""
    eps = "none" if epsilon is None else f"{epsilon:g}"
    return Path(notes_path).parent / "cells" / f"{task}_{mode}_eps{eps}_seed{seed}_{variant}"


def _token_ner_cell(split: NoteSplit, mode: str, epsilon: float | None, seed: int,
                    bench: ClinicalNLPBenchmark, checkpoint_dir: str | None = None) -> dict[str, Any]:
    """MiniLM BIO tagger (:func:`dpcare.text.lm.token_ner.train_token_ner`), scored on the same held-out notes."""
    from dpcare.text.evaluation import MICRO
    from dpcare.text.lm.token_ner import evaluate_token_ner, train_token_ner

    t0 = time.perf_counter()
    run = train_token_ner(split.train, mode, epsilon=epsilon, delta=DELTA if mode != "non-private" else None,
                          model=bench.encoder, epochs=bench.epochs, batch_size=bench.batch_size,
                          clip_norm=bench.clip_norm, seed=seed, noise_seed=seed, checkpoint_dir=checkpoint_dir)
    fit_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    test = split.held_out[: bench.eval_notes]
    micro = evaluate_token_ner(run.model, run.tokenizer, test).loc[MICRO]
    result, g = run.result, run.result.guarantee
    return {
        "fit_s": fit_s, "eval_s": time.perf_counter() - t0, "epsilon": g.epsilon if g else None,
        "delta": g.delta if g else None, "steps": result.steps, "noise_multiplier": result.noise_multiplier,
        "gradient_noise_multiplier": result.gradient_noise_multiplier, "clip_norm": result.clip_norm,
        "patients": len(split.train_patients), "rows": None, "backend": result.backend,
        "trainable_parameters": sum(p.numel() for p in run.model.parameters() if p.requires_grad),
        "test_notes": len(test), "test_ner_f1": _nan0(micro["f1"]), "test_ner_precision": _nan0(micro["precision"]),
        "test_ner_recall": float(micro["recall"]), "test_ner_predicted": int(micro["predicted"]),
        "test_ner_gold": int(micro["gold"]), "roc": {}, "guarantee": g.to_dict() if g else None,
        "guarantee_text": g.describe() if g else "no privacy guarantee (non-private fine-tuning)",
    }


def _sample_members(split: NoteSplit, k: int, seed: int) -> list[Note]:
    """The notes of ``k`` training patients drawn at random (as many members as non-members)."""
    patients = split.train_patients
    chosen = set(random.Random(f"{seed}:members").sample(patients, min(k, len(patients))))
    return [n for n in split.train if n.patient_id in chosen]


def _utility(model, tokenizer, task: str, test: list[Note], bench: ClinicalNLPBenchmark) -> dict[str, float]:
    """Scores of the test notes, and ``per_note`` values for the comparisons with the public baselines (patients,
    then ROUGE-L F1 of the model and of LEAD-3, or exact-match span counts [tp, predicted, gold])."""
    from dpcare.text.baselines import lead, rouge_l_per_note

    patients = [n.patient_id for n in test]
    if task == "summarisation":
        from dpcare.text.lm.scoring import score_summaries

        # the recipe's scorer; the base model is a cell of its own here, LEAD-3 is kept per note below
        scored = score_summaries(model, tokenizer, {}, test, bench.summary_tokens, baseline=False, progress=False)
        if scored.scored != len(test):  # prepare_notes checks every scored note's pair: kept as a guard
            raise DataError(f"clinical-nlp: {len(test) - scored.scored} held-out note(s) have no reference summary")
        refs = [n.summary_target for n in test]
        per_note = {"patients": patients, "rougeL": rouge_l_per_note(refs, scored.outputs).tolist(),
                    "lead_rougeL": rouge_l_per_note(refs, [lead(n.summary_source) for n in test]).tolist()}
        return {**{f"rougeL_{k[0] if k != 'fmeasure' else 'f1'}": v for k, v in scored.table.items()},
                "per_note": per_note}
    from dpcare.text.evaluation import MICRO
    from dpcare.text.lm.scoring import score_ner

    # the recipe's scorer with the study's decoding: windows of bench.window tokens without overlap (the
    # recipe's own stride is half a window); the base model is a cell of its own here, not a baseline
    recipe = {"labels": ENTITY_LABELS, "window": bench.window, "stride": bench.window}
    scores = score_ner(model, tokenizer, recipe, test, bench.ner_tokens, baseline=False, progress=False)
    if scores.table is None:  # prepare_notes checks the held-out notes before any cell: kept as a guard
        raise DataError("clinical-nlp: no held-out note carries a gold entity span: nothing to score NER on")
    micro = scores.table.loc[MICRO]
    return {"ner_precision": _nan0(micro["precision"]), "ner_recall": float(micro["recall"]),
            "ner_f1": _nan0(micro["f1"]), "ner_predicted": int(micro["predicted"]), "ner_gold": int(micro["gold"]),
            "per_note": {"patients": patients,
                         "counts": scores.counts.tolist()}}


def _nan0(v: float) -> float:
    """Precision and F1 of a model that predicts nothing: 0, not undefined."""
    return 0.0 if pd.isna(v) else float(v)


# ---------------------------------------------------------------- the grid
def run_clinical_nlp(bench: ClinicalNLPBenchmark, out_dir: str | os.PathLike, notes: list[Note] | None = None,
                     progress: bool = True, train: bool = True, force: bool = False) -> pd.DataFrame:
    """Every cell of ``bench`` into the run folder ``out_dir`` (resumable: rerun with the same settings);
    writes the tables, the plot and run.json. ``train=False`` only rewrites the tables of a finished folder
    (or of an unfinished run's staging folder) from its journal (missing cells show as "-"). The table's
    ``attrs["folder"]`` is where the tables were written."""
    bench.validate()
    if not train:
        return tabulate(bench, out_dir)
    run = RunFolder(out_dir, KIND, bench.run_settings("generated" if notes is None else "supplied"), force=force,
                    command=COMMAND)
    journal = run.path("runs.jsonl")  # the staging folder (made on first use), where an interrupted call resumes
    work = journal.parent
    done = read_journal(journal)
    notes_path, data = prepare_notes(bench, work, notes,
                                     lambda digest: check_settings(journal, done, bench.fingerprint(), digest))
    have = {_key(r) for r in done}
    cells = bench.cells()
    todo = [c for c in cells if "|".join(map(str, c)) not in have]
    bar = tqdm(total=len(cells), initial=len(cells) - len(todo), desc="clinical-nlp runs", disable=not progress)
    with open(journal, "a") as fh:
        for row in parallel_results(run_cell, [(*c, str(notes_path), bench) for c in todo], bench.workers):
            row["settings"], row["data"] = bench.fingerprint(), data
            append_run(fh, row)
            done.append(row)
            bar.update()
            bar.set_postfix(last=f"{row['task']} {row['mode']} eps={row['target_epsilon']}", refresh=False)
    bar.close()
    table, attacks = write_tables(bench, done, work, run.run_id)
    release_journal(journal)
    run.finish(manifest(table, bench, attacks, generated=notes is None))
    table.attrs["folder"] = str(run.out)
    return table


def tabulate(bench: ClinicalNLPBenchmark, out_dir: str | os.PathLike) -> pd.DataFrame:
    """``--tables-only``: the tables, plot and run.json of a finished folder rewritten from its journal (the
    cells of ``bench`` that it holds), or the tables of an unfinished run written in its staging folder."""
    out = Path(out_dir)
    finished = is_run_folder(out)
    folder = out if finished else staging_path(out)
    journal = folder / "runs.jsonl"
    done = read_journal(journal)
    check_settings(journal, done, bench.fingerprint())
    if finished and read_manifest(out).kind != KIND:
        raise SpecError(f"{out} holds a {read_manifest(out).kind!r} run, not a {KIND} study")
    if not {_key(r) for r in done} & {"|".join(map(str, c)) for c in bench.cells()}:
        raise SpecError(f"no finished run of these settings in {journal}: nothing to tabulate")
    run_id = read_manifest(out).run_id if finished else json.loads((folder / PARTIAL).read_text())["run_id"]
    table, attacks = write_tables(bench, done, folder, run_id)
    if finished:  # the same run, its tables rewritten: run id, settings and times kept
        release_journal(journal)  # a folder finished before the digests were dropped
        old = read_manifest(out)
        new = manifest(table, bench, attacks, generated=old.settings.get("notes", "generated") == "generated")
        for key in ("run_id", "kind", "command", "created", "finished", "settings"):
            setattr(new, key, getattr(old, key))
        write_json(out / MANIFEST, new.to_dict())
    table.attrs["folder"] = str(folder)
    return table


def write_tables(bench: ClinicalNLPBenchmark, done: list[dict], folder: Path, run_id: str
                 ) -> tuple[pd.DataFrame, list[dict[str, str]]]:
    """The journal's runs of ``bench``'s cells, in the cells' order, as runs.csv, table.csv/.md, guarantees,
    ROC scores, the plot and the attack files; returns the table and the manifest's attack entries."""
    cells = bench.cells()
    order = {"|".join(map(str, c)): i for i, c in enumerate(cells)}
    ordered = sorted((r for r in done if _key(r) in order), key=lambda r: order[_key(r)])
    runs = pd.DataFrame(ordered)
    table = summarize(runs)
    first = [r for r in done if _key(r) in order and r["seed"] == 0]
    guarantees = {_label(r): r["guarantee"] for r in first if r["guarantee"]}
    roc = {_label(r): r["roc"] for r in first if r["roc"]}
    kept = runs.drop(columns=["guarantee", "settings", "roc", "per_note", "data"], errors="ignore")
    write_text(folder / "runs.csv", kept.to_csv(index=False))
    write_text(folder / "table.csv", table.to_csv(index=False))
    write_json(folder / "settings.json", asdict(bench))
    write_json(folder / "guarantees.json", guarantees)
    write_json(folder / "roc.json", roc)
    verdicts = baseline_verdicts(ordered, bench.seeds)  # in the cells' order, not the order they finished in
    write_json(folder / "baselines.json", verdicts)
    diffs = claim_differences(runs, bench)
    write_text(folder / "paired.csv", diffs.to_csv(index=False))
    write_text(folder / "table.md", markdown(table, bench, diffs) + verdict_markdown(verdicts))
    (folder / "sweep.png").unlink(missing_ok=True)
    plot(table, folder / "sweep.png")
    attacks = []
    for name, payload in attack_payloads(table, roc).items():
        write_json(folder / "attacks" / f"{name}.json", {"run_id": run_id, **payload})
        attacks.append({"name": payload["title"], "file": f"attacks/{name}.json"})
    table = table.assign(guarantee=[guarantees.get(_table_key(r)) for r in table.to_dict("records")])
    table.attrs["baselines"] = verdicts
    return table, attacks


def baseline_verdicts(runs: list[dict], seeds: int | None = None) -> list[dict[str, Any]]:
    """Every fine-tuned NER and summarisation model (each seed's run) against the public baselines on the same
    held-out notes (:mod:`dpcare.text.baselines`): the base model without fine-tuning (the ``base`` run of
    the task and seed, when the grid has it) and, for summarisation, LEAD-3; a paired bootstrap over the
    held-out patients, the verdict from the binding comparison. A run of seed s > 0, or of any seed in a study of
    several ``seeds`` (default: the seeds of ``runs``), is named with `` seed s``. Runs journalled without
    per-note values are left out."""
    from dpcare.text.baselines import BASE_MODEL, compare_on_notes, lead_name

    key = {"ner": ("ner F1", "counts"), "summarisation": ("ROUGE-L F1", "rougeL")}
    base = {(r["task"], r["seed"]): r["per_note"] for r in runs if r["mode"] == BASE and r.get("per_note")}
    several = (len({r["seed"] for r in runs}) if seeds is None else seeds) > 1
    out = []
    for r in runs:
        p = r.get("per_note")
        if r["mode"] == BASE or r["task"] not in key or not p:
            continue
        metric, field = key[r["task"]]
        baselines = {lead_name(): np.array(p["lead_rougeL"])} if r["task"] == "summarisation" else {}
        b = base.get((r["task"], r["seed"]))
        if b is not None and b["patients"] == p["patients"]:  # the same held-out notes
            baselines[BASE_MODEL] = np.array(b[field])
        if baselines:
            result = compare_on_notes(metric, np.array(p[field]), baselines, p["patients"])
            out.append({"name": _label(r) + (f" seed {r['seed']}" if r["seed"] or several else ""), "task": r["task"],
                        "mode": r["mode"], "target_epsilon": r["target_epsilon"], "seed": r["seed"],
                        "variant": r.get("variant", "fixed"), **result})
    return out


def verdict_markdown(verdicts: list[dict[str, Any]]) -> str:
    """The verdicts as a markdown section (empty without any)."""
    if not verdicts:
        return ""
    seeds = len({v.get("seed", 0) for v in verdicts})
    lines = ["", "", (f"Against the public baselines ({'each seed' if seeds > 1 else 'seed 0'}: the same held-out "
                      "notes; 95% paired bootstrap intervals over held-out patients; a model beats them only if it "
                      "beats each):"), "",
             "| model | baseline | metric | model | baseline | improvement [95% interval] |", "|---|---|---|---|---|---|"]
    for v in verdicts:
        for c in v["comparisons"]:
            lines.append(f"| {v['name']} | {c['baseline_name']} | {c['metric']} | {c['model']:.3f} | "
                         f"{c['baseline']:.3f} | {c['difference']:+.3f} [{c['low']:+.3f}, {c['high']:+.3f}] |")
    lines += ["", *(f"* {v['name']}: {v['verdict']}" for v in verdicts), ""]
    return "\n".join(lines)


def _table_key(r: dict) -> str:
    """A table row's key in guarantees.json / roc.json (the :func:`_label` of its runs)."""
    eps, variant = r["target_epsilon"], r.get("variant", "fixed")
    return (f"{r['task']}|{r['mode']}@{'None' if not math.isfinite(eps) else eps}"
            + ("" if variant == "fixed" else f"|{variant}"))


def _model(r: dict) -> str:
    return _table_key(r).replace("|", " ").replace("@None", "").replace("@", " eps=")


def attack_payloads(table: pd.DataFrame, roc: dict[str, dict]) -> dict[str, dict[str, Any]]:
    """The membership attacks (scores of seed 0) and the canary audit of the generative NER models, as attack
    files of the run folder (rows per model; ROC curves where the scores were kept)."""
    titles = {"loss": "LOSS membership attack on patients (held-out patients as non-members)",
              "reference": "Reference-calibrated (base model) LOSS membership attack on patients (held-out "
                           "patients as non-members)",
              "lira": "LiRA (shadow models) membership attack on patients (held-out patients as non-members)"}
    out: dict[str, dict[str, Any]] = {a: {"title": t, "rows": [], "curves": {}} for a, t in titles.items()}
    audit = {"title": "One-run audit with canary patients (empirical epsilon lower bound)", "rows": []}
    for r in table.to_dict("records"):
        model, key = _model(r), _table_key(r)
        for a, payload in out.items():
            if not pd.isna(r.get(f"mia_{a}_auc", math.nan)):
                payload["rows"].append({"model": model, "AUC": r[f"mia_{a}_auc"],
                                        "TPR @ 1% FPR": _finite(r.get(f"mia_{a}_tpr_at_1pct_fpr"))})
                if a in roc.get(key, {}):
                    payload["curves"][model] = roc[key][a]
        if not pd.isna(r.get("canary_epsilon_lower_bound", math.nan)):
            audit["rows"].append({"model": model, "claimed epsilon": _finite(r.get("epsilon")),
                                  "audited lower bound": r["canary_epsilon_lower_bound"]})
    return {name: p for name, p in {**out, "canaries": audit}.items() if p["rows"]}


def _finite(v: Any) -> Any:
    return None if v is None or (isinstance(v, float) and not math.isfinite(v)) else v


def manifest(table: pd.DataFrame, bench: ClinicalNLPBenchmark, attacks: list[dict[str, str]],
             generated: bool = True) -> Manifest:
    """run.json of the study: one model per (task, mode, epsilon, clip variant) with the guarantee of its seed-0
    run, the utility table, fit times, the attack files, what no guarantee covers."""
    m = Manifest(headline=["ner_f1", "rougeL_f1", "perplexity"], attacks=list(attacks),
                 files={"table": "table.md", "runs": "runs.csv", "paired": "paired.csv", "split": "data/split.json"})
    for r in table.to_dict("records"):
        model = _model(r)
        none = ("the pre-trained model, never fine-tuned: it reads no private note" if r["mode"] == BASE
                else "NO differential privacy guarantee (non-private fine-tuning).")
        m.add_model(model, r["guarantee"], None, note="" if r["guarantee"] else none)
        m.metrics.append({"model": model, **{k: r[k] for k in UTILITY if k in r and not pd.isna(r[k])},
                          "seeds": r["seeds"]})
        m.timing.append({"model": model, "fit seconds (mean)": r.get("fit_s")})
    if any(r["guarantee"] for r in table.to_dict("records")):
        m.notes.append("Ledger lines come from each guarantee's release lines (the study keeps the guarantees of "
                       "the seed-0 runs, not their ledger states).")
    m.baselines = list(table.attrs.get("baselines", []))
    m.notes += [f"{v['name']}: {v['verdict']}" for v in m.baselines]
    m.figures = [["NER F1 and attack AUC against epsilon", "sweep.png"]]
    m.not_protected = ["The base model's pre-training data are public and outside every guarantee."]
    if generated:
        m.notes.append("The notes are GENERATED (grounded in real records); results say nothing of real notes.")
    m.notes.append("Nothing is left uncounted in epsilon: no step reads the held-out patients and no hyperparameter "
                   "was chosen on them.")
    return m


def _key(r: dict) -> str:
    """A run's cell, as in :meth:`ClinicalNLPBenchmark.cells` (journals of before the clip variants: fixed)."""
    return "|".join(map(str, (r["task"], r["mode"], r["target_epsilon"], r["seed"], r.get("variant", "fixed"))))


def _label(r: dict) -> str:
    variant = r.get("variant", "fixed")
    return f"{r['task']}|{r['mode']}@{r['target_epsilon']}" + ("" if variant == "fixed" else f"|{variant}")


UTILITY = ("ner_f1", "ner_precision", "ner_recall", "rougeL_f1", "perplexity")
PRIVACY = ("mia_loss_auc", "mia_reference_auc", "mia_lira_auc", "mia_loss_tpr_at_1pct_fpr",
           "mia_reference_tpr_at_1pct_fpr", "mia_lira_tpr_at_1pct_fpr", "canary_epsilon_lower_bound")
GROUP = ["task", "mode", "target_epsilon", "variant"]


def summarize(runs: pd.DataFrame) -> pd.DataFrame:
    """Mean and sd over seeds per (task, mode, target epsilon, clip variant); non-private rows have epsilon
    inf."""
    runs = runs.assign(target_epsilon=runs["target_epsilon"].astype(float).fillna(math.inf),
                       variant=runs["variant"].fillna("fixed") if "variant" in runs else "fixed")
    metrics = [m for m in (*UTILITY, *PRIVACY) if f"test_{m}" in runs or m in runs]
    agg: dict[str, tuple[str, str]] = {}
    for m in metrics:
        col = f"test_{m}" if f"test_{m}" in runs else m
        agg[m], agg[f"{m}_sd"] = (col, "mean"), (col, "std")
    agg.update(epsilon=("epsilon", "max"), seeds=("seed", "count"), steps=("steps", "max"),
               clip_norm=("clip_norm", "mean"), trainable_parameters=("trainable_parameters", "max"),
               fit_s=("fit_s", "mean"))
    return runs.groupby(GROUP, sort=False).agg(**agg).reset_index()


def claim_differences(runs: pd.DataFrame, bench: ClinicalNLPBenchmark) -> pd.DataFrame:
    """:data:`CLAIMS` seed by seed at the main epsilon, per task (fixed clip norm only; see
    :func:`dpcare.studies.paired.paired_differences`)."""
    if runs.empty:
        return paired_differences(runs, (), PAIRED_METRICS)
    fixed = runs[runs["variant"].fillna("fixed") == "fixed"] if "variant" in runs else runs
    fixed = fixed.rename(columns={f"test_{m}": m for m in PAIRED_METRICS})
    return paired_differences(fixed, CLAIMS, PAIRED_METRICS, bench.main_epsilon, method="mode", by=("task",))


def _cell(table: pd.DataFrame, metric: str, task: str, mode: str, eps: float, variant: str = "fixed",
          digits: int = 3) -> str:
    row = table[(table["task"] == task) & (table["mode"] == mode) & (table["target_epsilon"] == eps)
                & (table["variant"] == variant)]
    if row.empty or metric not in row or pd.isna(row[metric].iloc[0]):
        return "-"
    sd = row[f"{metric}_sd"].iloc[0] if f"{metric}_sd" in row else math.nan
    return f"{row[metric].iloc[0]:.{digits}f}" + ("" if pd.isna(sd) else f" ± {sd:.{digits}f}")


def _eps(mode: str, bench: ClinicalNLPBenchmark) -> float:
    return math.inf if mode in ("non-private", BASE) else bench.main_epsilon


def markdown(table: pd.DataFrame, bench: ClinicalNLPBenchmark, diffs: pd.DataFrame | None = None) -> str:
    """The study's table.md (without the baselines' verdicts); ``diffs``: its :func:`claim_differences`, the
    section "Paired differences over seeds"."""
    eps3 = bench.main_epsilon
    lines = [f"# Clinical NLP under DP: {bench.model}"
             + (f" cut to {bench.layers} block(s)" if bench.layers else "") + f", epsilon {eps3:g}, delta {DELTA:g} "
             + seeds_label(bench.seeds),
             "", f"Table 1 (held-out notes; mean ± sd over {bench.seeds} seed(s); the last iterate, nothing tuned):",
             "", ("| method | target eps | NER F1 | NER precision | NER recall | ROUGE-L F1 | perplexity (NER rows) "
             "| trainable parameters |"), "|---|---|---|---|---|---|---|---|"]
    for mode in bench.modes:
        e = _eps(mode, bench)
        params = table[(table["mode"] == mode) & (table["target_epsilon"] == e)
                       & (table["task"] != "token-ner")]["trainable_parameters"]
        cells = [_cell(table, m, t, mode, e) for m, t in (("ner_f1", "ner"), ("ner_precision", "ner"),
                                                         ("ner_recall", "ner"), ("rougeL_f1", "summarisation"),
                                                         ("perplexity", "ner"))]
        cells.append(f"{int(params.max()):,}" if len(params) else "-")
        shown = "0 (never trained)" if mode == BASE else "-" if math.isinf(e) else f"{e:g}"
        lines.append(f"| {mode} | {shown} | " + " | ".join(cells) + " |")
    if "token-ner" in bench.tasks:
        lines += ["", f"Token-classification NER with the {bench.encoder} encoder (BIO tags, same held-out notes):",
                  "", "| method | target eps | NER F1 | NER precision | NER recall | trainable parameters |",
                  "|---|---|---|---|---|---|"]
        for mode in [m for m in bench.modes if m in TOKEN_MODES]:
            e = _eps(mode, bench)
            params = table[(table["task"] == "token-ner") & (table["mode"] == mode)]["trainable_parameters"]
            cells = [_cell(table, m, "token-ner", mode, e) for m in ("ner_f1", "ner_precision", "ner_recall")]
            cells.append(f"{int(params.max()):,}" if len(params) else "-")
            lines.append(f"| {mode} | {'-' if math.isinf(e) else f'{e:g}'} | " + " | ".join(cells) + " |")
    if "ner" in bench.tasks:
        lines += _attack_table(table, bench)
    if bench.clip_ablation and "ner" in bench.tasks:
        lines += ["", f"Clip-norm ablation (DP-LoRA NER at epsilon {eps3:g}; the paper's Section 4.4):", "",
                  "| clip norm | NER F1 | perplexity | final C | epsilon |", "|---|---|---|---|---|"]
        for v in CLIP_VARIANTS:
            lines.append(f"| {v} | " + " | ".join(_cell(table, m, "ner", "dp-lora", eps3, v, d) for m, d in
                                                  (("ner_f1", 3), ("perplexity", 3), ("clip_norm", 3),
                                                   ("epsilon", 3))) + " |")
    if diffs is not None:
        lines += paired_markdown(diffs, bench.seeds, by=("task",),
                                 title=f"Paired differences over seeds at epsilon {eps3:g}")
    lines += ["", ("Nothing is left uncounted in epsilon: no step reads the held-out patients and no hyperparameter "
              "was chosen on them."), ""]
    return "\n".join(lines)


def _attack_table(table: pd.DataFrame, bench: ClinicalNLPBenchmark) -> list[str]:
    attacks = [a for a in (*ATTACKS, "lira") if f"mia_{a}_auc" in table]
    names = {"loss": "LOSS", "reference": "reference", "lira": "LiRA"}
    lines = ["", ("Table 2: membership-inference AUC against the generative NER models (patients; members = "
             "training patients, non-members = held-out patients; " + " / ".join(names[a] for a in attacks)
             + "):"), "", "| method | " + " | ".join(f"eps={e:g}" for e in bench.epsilons) + " | non-private |",
             "|---" * (len(bench.epsilons) + 2) + "|"]
    auc = lambda mode, e: " / ".join(_cell(table, f"mia_{a}_auc", "ner", mode, e) for a in attacks)
    for mode in [m for m in bench.modes if m not in ("non-private", BASE)]:
        lines.append(f"| {mode} | " + " | ".join(auc(mode, e) for e in bench.epsilons) + " | |")
    for mode in [m for m in (BASE, "non-private") if m in bench.modes]:
        name = "base (never trained; the attacks' floor)" if mode == BASE else mode
        lines.append(f"| {name} | " + " | ".join("" for _ in bench.epsilons) + f" | {auc(mode, math.inf)} |")
    if bench.canaries:
        lines += ["", (f"One-run audit: epsilon lower bound from {bench.canaries} canary patients, each included "
                  "with probability 1/2 (95% confidence; the bound can only be as large as the canaries allow):"),
                  "", "| method | " + " | ".join(f"eps={e:g}" for e in bench.epsilons) + " | non-private |",
                  "|---" * (len(bench.epsilons) + 2) + "|"]
        low = lambda mode, e: _cell(table, "canary_epsilon_lower_bound", "ner", mode, e, digits=2)
        for mode in [m for m in bench.modes if m not in ("non-private", BASE)]:
            lines.append(f"| {mode} | " + " | ".join(low(mode, e) for e in bench.epsilons) + " | |")
        if "non-private" in bench.modes:
            lines.append("| non-private | " + " | ".join("" for _ in bench.epsilons)
                         + f" | {low('non-private', math.inf)} |")
    return lines


def plot(table: pd.DataFrame, path: Path) -> None:
    """NER F1 and the attacks' AUC against epsilon (non-private dashed); fixed clip norm only."""
    ner = table[(table["task"] == "ner") & (table["variant"] == "fixed")]
    panels = [m for m in ("ner_f1", "mia_reference_auc", "mia_lira_auc", "mia_loss_auc") if m in ner]
    if ner.empty or not panels:
        return
    fig, axes = new_figure((4.2 * len(panels), 3.6), ncols=len(panels))
    axes = np.atleast_1d(axes)
    for ax, metric in zip(axes, panels):
        epsilon_curves(ax, ner, "mode", metric)
        if metric.endswith("auc"):
            ax.axhline(0.5, color="k", linewidth=0.6, linestyle=":")
        ax.set_xlabel("target epsilon")
        ax.set_ylabel({"ner_f1": "NER span F1 (held-out notes)", "mia_reference_auc": "MIA AUC (reference attack)",
                       "mia_lira_auc": "MIA AUC (LiRA, shadows)", "mia_loss_auc": "MIA AUC (LOSS attack)"}[metric])
    axes[0].legend(fontsize=7)
    save_figure(fig, path)
