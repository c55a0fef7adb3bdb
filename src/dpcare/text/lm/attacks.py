"""Membership inference and one-run audits of causal LMs fine-tuned on clinical notes
(Lopez and Hill, Section 4.3 and Table 2: membership-inference AUC of models fine-tuned at
epsilon 1, 3, 8 and non-private).

The privacy unit is the PATIENT. Every attack scores a patient by :func:`note_losses`: the next-token NLL
of the model over ALL target tokens (and EOS) of all the fine-tuning rows of all the patient's notes
(:func:`dpcare.text.lm.finetune.make_examples`: NER windows or summarisation pairs; pass the task, labels,
window and stride used for fine-tuning), divided by their number: a token-weighted mean, so a patient's
longer targets weigh more than short ones, and an entity seen by two overlapping NER windows counts twice,
as in training.

* LOSS (Yeom et al. 2018), score = -(loss under the fine-tuned target). It measures how much better the
  model fits a patient's text, which mixes memorisation with how easy that text is.
* Reference-calibrated LOSS, score = loss under the BASE model - loss under the target: how much
  fine-tuning lowered the patient's loss. The reference is the pre-trained base model the target started
  from, never fine-tuned (Carlini et al. 2021, "Extracting training data from large language models",
  zlib/reference-model calibration; Mireshghallah et al. 2022): it has seen no patient, so it calibrates
  each patient's difficulty at no extra training cost. The paper (Section 4.3) names a shadow-model
  likelihood-ratio attack, which is :func:`lira_lm`.
* LiRA (Carlini et al. 2022), :func:`lira_lm`: shadow models trained with the caller's recipe on
  complementary random halves of the attacked patients, so each patient is in exactly half of them; the
  per-patient statistic is the logit of the mean-token probability, phi = log(p / (1 - p)), p = exp(-loss).
* One-run audit (Steinke, Nasr, Jagielski 2023): fake canary patients with rare random identifiers, each
  inserted into the training notes with probability 1/2 (:func:`make_note_canaries`,
  :func:`insert_canaries`); :func:`canary_audit` turns their scores into an epsilon lower bound.

Evaluation data. Members are the target's training patients; non-members are held-out patients never used
for training NOR for any selection step (learning rate, epochs, checkpoint, thresholds): a patient that
steered a selection is no longer a clean non-member. Every attack scores patients, and its bootstrap
intervals (:func:`dpcare.audit.attack_metrics`) resample patients.
"""

from __future__ import annotations

import random
import string
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
import torch
from torch import nn

from dpcare.audit.likelihood_ratio import lira_scores
from dpcare.audit.lira import LiraResult
from dpcare.audit.metrics import attack_metrics
from dpcare.audit.one_run import OneRunAudit, one_run_audit
from dpcare.exceptions import DataError, SettingsError
from dpcare.text.lm.finetune import (
    Example,
    TargetLoss,
    _max_positions,
    encode,
    make_examples,
    patient_groups,
)
from dpcare.text.lm.token_ner import model_hints, patient_token_losses, training_windows
from dpcare.text.spans import ENTITY_LABELS, Note, Span, check_spans

Items = Sequence[Note] | Sequence[Example]
CANARY_PROBLEMS = ("pneumonia", "cellulitis", "atrial fibrillation", "acute kidney injury", "syncope",
                   "urinary tract infection", "COPD exacerbation", "hyponatremia")


# --------------------------------------------------------------------------- per-patient losses
def note_losses(model: nn.Module, tokenizer, items: Items, task: str = "ner", labels: Sequence[str] = ENTITY_LABELS,
                window: int | None = 256, stride: int | None = 128, batch_size: int = 8) -> np.ndarray:
    """Per-patient loss of a causal LM (see the module docstring) on ``items``, notes (turned into the
    rows of ``task``) or examples, in the order of :func:`patient_ids` (sorted patient ids)."""
    losses = _patient_losses(model, tokenizer, _examples(items, task, tokenizer, labels, window, stride), batch_size)
    return np.array([losses[p] for p in sorted(losses)])


def patient_ids(items: Items) -> list[str]:
    """The sorted patient ids of ``items``: the order of :func:`note_losses`."""
    return sorted({x.patient_id for x in items})


def _examples(items: Items, task: str, tokenizer, labels, window, stride) -> list[Example]:
    items = list(items)
    if not items:
        raise DataError("no notes or examples to score")
    if all(isinstance(x, Example) for x in items):
        return items
    if not all(isinstance(x, Note) for x in items):
        raise DataError("pass notes or fine-tuning examples, not a mixture or other objects")
    return make_examples(items, task, tokenizer, labels, window, stride)


def _patient_losses(model: nn.Module, tokenizer, examples: Sequence[Example], batch_size: int) -> dict[str, float]:
    """{patient id: total target NLL / target tokens} over ``examples`` (sums, then one division)."""
    return {p: total / count for p, (total, count) in _patient_nll(model, tokenizer, examples, batch_size).items()}


def _patient_nll(model: nn.Module, tokenizer, examples: Sequence[Example], batch_size: int
                 ) -> dict[str, tuple[float, int]]:
    """{patient id: (total target NLL, target tokens)} over ``examples``."""
    ids, sums, counts = _patient_sums(model, tokenizer, examples, batch_size)
    return {p: (float(total), int(count)) for p, total, count in zip(ids, sums.tolist(), counts.tolist())}


def _patient_sums(model: nn.Module, tokenizer, examples: Sequence[Example], batch_size: int):
    """(sorted patient ids, summed target NLL per patient, target tokens per patient)."""
    virtual = _virtual_tokens(model)
    data = encode(examples, tokenizer, _max_positions(model, virtual))
    groups = patient_groups(examples)
    objective = TargetLoss(private=False, positions=virtual == 0, reduction="sum")
    device = next(model.parameters()).device
    sums = torch.zeros(int(groups.max()) + 1, dtype=torch.float64)
    counts = torch.zeros_like(sums)
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            for idx in torch.argsort(data["mask"].sum(1)).split(batch_size):  # similar lengths: less padding
                batch = {k: v[idx].to(device) for k, v in data.items()}
                sums.index_add_(0, groups[idx], objective.private_loss(model, batch).double().cpu())
                counts.index_add_(0, groups[idx], data["loss_mask"][idx].sum(1).double())
    finally:
        model.train(was_training)
    return sorted({ex.patient_id for ex in examples}), sums, counts  # patient_groups' numbering


def _virtual_tokens(model: nn.Module) -> int:
    """Virtual tokens of a peft prompt-learning model (prefix tuning), else 0."""
    config = getattr(model, "active_peft_config", None)
    return int(config.num_virtual_tokens) if getattr(config, "is_prompt_learning", False) else 0


# --------------------------------------------------------------------------- members and non-members
def _attack_rows(tokenizer, members: Items, nonmembers: Items, rows: dict):
    """Rows of both sets (one make_examples pass) and their patient ids; DataError on an empty set, an
    overlap or a patient without rows."""
    members, nonmembers = list(members), list(nonmembers)
    m_ids, n_ids = _member_ids(members, nonmembers)
    examples = _examples(members + nonmembers, tokenizer=tokenizer, **_row_options(rows))
    missing = sorted(set(m_ids + n_ids) - {ex.patient_id for ex in examples})
    if missing:
        raise DataError(f"{len(missing)} patient(s) have no {rows.get('task', 'ner')} rows, e.g. {missing[:3]}")
    return examples, m_ids, n_ids


def _member_ids(members: list, nonmembers: list) -> tuple[list[str], list[str]]:
    """The sorted patient ids of both sets; DataError on an empty set or a patient in both."""
    for name, items in (("member", members), ("non-member", nonmembers)):
        if not items:
            raise DataError(f"no {name} notes: membership inference needs members and non-members")
    m_ids, n_ids = patient_ids(members), patient_ids(nonmembers)
    both = sorted(set(m_ids) & set(n_ids))
    if both:
        raise DataError(f"{len(both)} patient(s) are both members and non-members, e.g. {both[:3]}: "
                        "non-members must be patients never used for training")
    return m_ids, n_ids


def _row_options(rows: dict) -> dict:
    unknown = set(rows) - {"task", "labels", "window", "stride"}
    if unknown:
        raise TypeError(f"unknown row option(s) {sorted(unknown)}: use task, labels, window, stride")
    return {"task": "ner", "labels": ENTITY_LABELS, "window": 256, "stride": 128, **rows}


def _split(scores: dict[str, float], m_ids: list[str], n_ids: list[str]) -> tuple[np.ndarray, np.ndarray]:
    return np.array([scores[p] for p in m_ids]), np.array([scores[p] for p in n_ids])


# --------------------------------------------------------------------------- LOSS and reference attacks
@dataclass
class LMAttackResult:
    """``loss`` and ``reference``: :func:`dpcare.audit.attack_metrics` of the two attacks; ``scores``:
    attack name -> (member scores, non-member scores), one per patient."""

    loss: dict
    reference: dict
    members: int
    nonmembers: int
    scores: dict = field(default_factory=dict, repr=False)
    target_nll: dict = field(default_factory=dict, repr=False)  # patient id -> (target NLL sum, target tokens)

    def to_dict(self) -> dict:
        return {"attack": "lm-loss", "unit": "patient", "members": self.members, "nonmembers": self.nonmembers,
                "loss": self.loss, "reference": self.reference}


def loss_attack_lm(target_model: nn.Module, base_model: nn.Module, tokenizer, members: Items, nonmembers: Items,
                   batch_size: int = 8, bootstrap: int = 200, seed: int = 0, **rows) -> LMAttackResult:
    """LOSS (-target loss) and reference-calibrated (base loss - target loss) attacks on patients.
    ``rows``: task, labels, window, stride of the fine-tuning rows (as :func:`note_losses`)."""
    examples, m_ids, n_ids = _attack_rows(tokenizer, members, nonmembers, rows)
    nll = _patient_nll(target_model, tokenizer, examples, batch_size)
    target = {p: total / count for p, (total, count) in nll.items()}
    base = _patient_losses(base_model, tokenizer, examples, batch_size)
    return _loss_and_reference(target, base, m_ids, n_ids, bootstrap, seed, nll)


def loss_attack_tagger(target_model: nn.Module, base_model: nn.Module, tokenizer, members: Sequence[Note],
                       nonmembers: Sequence[Note], bootstrap: int = 200, seed: int = 0, **windows) -> LMAttackResult:
    """The LOSS and reference attacks on a BIO token tagger (:mod:`dpcare.text.lm.token_ner`): a patient's loss is
    the token cross-entropy over the tagged pieces of its windows (:func:`patient_token_losses`; ``windows``:
    its labels, window and stride); the reference is the tagger training started from (the pre-trained encoder
    with the head drawn from the training seed, :func:`dpcare.text.lm.token_ner.load_tagger`)."""
    members, nonmembers = list(members), list(nonmembers)
    m_ids, n_ids = _member_ids(members, nonmembers)
    notes = members + nonmembers
    rows = training_windows(notes, tokenizer, target_model, **windows)
    target = patient_token_losses(target_model, rows, tokenizer.pad_token_id)
    if model_hints(base_model) != model_hints(target_model):  # each model reads the hints it was built for
        rows = training_windows(notes, tokenizer, base_model, **windows)
    base = patient_token_losses(base_model, rows, tokenizer.pad_token_id)
    missing = sorted(set(m_ids + n_ids) - set(target))
    if missing:
        raise DataError(f"{len(missing)} patient(s) have no tagged pieces, e.g. {missing[:3]}")
    return _loss_and_reference(target, base, m_ids, n_ids, bootstrap, seed)


def _loss_and_reference(target: dict[str, float], base: dict[str, float], m_ids: list[str], n_ids: list[str],
                        bootstrap: int, seed: int, nll: dict | None = None) -> LMAttackResult:
    """LOSS (-target loss) and reference (base loss - target loss) scores per patient, and their metrics."""
    scores = {"loss": _split({p: -v for p, v in target.items()}, m_ids, n_ids),
              "reference": _split({p: base[p] - v for p, v in target.items()}, m_ids, n_ids)}
    metrics = {k: attack_metrics(*v, bootstrap=bootstrap, seed=seed) for k, v in scores.items()}
    return LMAttackResult(metrics["loss"], metrics["reference"], len(m_ids), len(n_ids), scores, nll or {})


# --------------------------------------------------------------------------- LiRA
def loss_logit(loss: np.ndarray) -> np.ndarray:
    """phi = log(p / (1 - p)) of the mean-token probability p = exp(-loss), computed stably."""
    loss = np.maximum(np.asarray(loss, float), 1e-12)
    return -loss - np.log(-np.expm1(-loss))


def lira_lm(train_fn: Callable[[list], nn.Module], target_model: nn.Module, tokenizer, members: Items,
            nonmembers: Items, shadows: int = 4, seed: int = 0, batch_size: int = 8, bootstrap: int = 200,
            **rows) -> LiraResult:
    """LiRA on patients. ``train_fn(items) -> model`` trains one shadow with the target's recipe on the
    given members' and non-members' items (notes, usually); the shadows train on complementary random
    halves of those patients (pairs: a half and its complement), so each is in exactly half of them."""
    if shadows < 2 or shadows % 2:
        raise SettingsError(f"LiRA needs an even number (>= 2) of shadow models, got {shadows}")
    examples, m_ids, n_ids = _attack_rows(tokenizer, members, nonmembers, rows)
    patients = sorted(m_ids + n_ids)
    by_patient: dict[str, list] = {p: [] for p in patients}
    for x in [*members, *nonmembers]:
        by_patient[x.patient_id].append(x)
    rng = np.random.default_rng(seed)
    shadow_in = np.zeros((shadows, len(patients)), dtype=bool)
    for s in range(0, shadows, 2):
        shadow_in[s, rng.permutation(len(patients))[: len(patients) // 2]] = True
        shadow_in[s + 1] = ~shadow_in[s]
    t0 = time.perf_counter()
    shadow_phi = np.stack([_phi(train_fn([x for p, i in zip(patients, ins) if i for x in by_patient[p]]),
                                tokenizer, examples, patients, batch_size) for ins in shadow_in])
    elapsed = time.perf_counter() - t0
    online, offline = lira_scores(_phi(target_model, tokenizer, examples, patients, batch_size), shadow_phi, shadow_in)
    member = np.isin(patients, m_ids)
    scores = {"LiRA online": (online[member], online[~member]), "LiRA offline": (offline[member], offline[~member])}
    return LiraResult(attack_metrics(*scores["LiRA online"], bootstrap=bootstrap, seed=seed),
                      attack_metrics(*scores["LiRA offline"], bootstrap=bootstrap, seed=seed), shadows, elapsed,
                      scores)


def _phi(model, tokenizer, examples, patients, batch_size) -> np.ndarray:
    losses = _patient_losses(model, tokenizer, examples, batch_size)
    return loss_logit(np.array([losses[p] for p in patients]))


# --------------------------------------------------------------------------- canaries: one-run audit
def make_note_canaries(m: int, seed: int = 0, prefix: str = "canary") -> list[Note]:
    """``m`` fake patients, one short discharge note each, with rare random identifiers: a 10-letter name,
    an 8-digit MRN (PHI spans) and a 10-letter drug (a treatment entity, so it is in the NER target). The
    summary target repeats the name and MRN, absent from the summary source: only memorisation predicts
    them (a worst-case record, unlike the generated corpus, whose targets hold no PHI)."""
    if m < 1:
        raise DataError(f"need at least one canary, got m={m}")
    rng = random.Random(f"{prefix}:{seed}")
    words: set[str] = set()
    out = []
    for i in range(m):
        name, drug = _rare_word(rng, words), _rare_word(rng, words)
        mrn = "".join(rng.choices(string.digits, k=8))
        problem = rng.choice(CANARY_PROBLEMS)
        pieces = [("DISCHARGE SUMMARY\nPatient: ", None), (name, "PATIENT"), ("\nMRN: ", None), (mrn, "MEDICALRECORD"),
                  ("\n\nHospital course: ", None), (name, "PATIENT"), (" was admitted with ", None),
                  (problem, "problem"), (". Treated with ", None), (drug, "treatment"), ("; improved.\n", None)]
        text, phi, entities = "", [], []
        for piece, label in pieces:
            if label:
                (entities if label in ENTITY_LABELS else phi).append(Span(len(text), len(text) + len(piece), label,
                                                                          piece))
            text += piece
        pid = f"{prefix}-{seed}-{i:05d}"
        out.append(check_spans(Note(
            f"{pid}-n1", pid, text, tuple(phi), tuple(entities),
            summary_source=f"Admitted with {problem}. Treated with {drug}; improved.",
            summary_target=f"Discharge diagnoses: {problem}\nSummary: {name}, MRN {mrn}, treated with {drug}.",
            meta={"canary": True})))
    return out


def _rare_word(rng: random.Random, taken: set[str]) -> str:
    while True:
        word = rng.choice(string.ascii_uppercase) + "".join(rng.choices(string.ascii_lowercase, k=9))
        if word not in taken:
            taken.add(word)
            return word


def insert_canaries(notes: Sequence[Note], canaries: Sequence[Note], seed: int = 0) -> tuple[list[Note], np.ndarray]:
    """(notes followed by the included canaries, inclusion mask): each canary is included independently
    with probability 1/2."""
    if not canaries:
        raise DataError("no canaries to insert")
    clash = sorted(set(patient_ids(notes)) & set(patient_ids(canaries)))
    if clash:
        raise DataError(f"canary patient id(s) {clash[:3]} also occur among the notes")
    included = np.random.default_rng(seed).random(len(canaries)) < 0.5
    return [*notes, *(c for c, i in zip(canaries, included) if i)], included


def canary_scores(model: nn.Module, tokenizer, canaries: Sequence[Note], base_model: nn.Module | None = None,
                  batch_size: int = 8, **rows) -> np.ndarray:
    """One score per canary, in order (higher: more likely included): base loss - loss with a base model,
    else -loss."""
    examples = _examples(canaries, tokenizer=tokenizer, **_row_options(rows))
    loss = _patient_losses(model, tokenizer, examples, batch_size)
    base = _patient_losses(base_model, tokenizer, examples, batch_size) if base_model is not None else None
    return np.array([(base[c.patient_id] if base is not None else 0.0) - loss[c.patient_id] for c in canaries])


def canary_audit(model: nn.Module, tokenizer, canaries: Sequence[Note], included: np.ndarray, delta: float,
                 base_model: nn.Module | None = None, confidence: float = 0.95, batch_size: int = 8,
                 **rows) -> OneRunAudit:
    """Epsilon lower bound of a one-run audit (:func:`dpcare.audit.one_run_audit`) from the canaries' scores
    (:func:`canary_scores`) and their inclusion bits."""
    included = np.asarray(included, bool)
    if len(included) != len(canaries):
        raise DataError(f"{len(canaries)} canaries but {len(included)} inclusion bits")
    if len({c.patient_id for c in canaries}) != len(canaries):
        raise DataError("each canary must be its own patient (one note per canary patient)")
    scores = canary_scores(model, tokenizer, canaries, base_model, batch_size, **rows)
    return one_run_audit(scores, included, delta, confidence)
