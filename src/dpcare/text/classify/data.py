"""The data of note classification under FusionDP (Zeng et al., Section 5.3): three views of every note.

    x      the original note                      read by the private (clipped, noised) loss only
    x_pub  the note with sensitive spans masked   Psi(x): the public features, one <mask> per span
    x_hyb  the note with every mask filled by an LM that saw only x_pub (the hybrid note)

The masker (``dpcare.text.views.masking``) finds the sensitive spans; the imputer
(``dpcare.text.views.imputation``) fills them from the masked text alone. Token ids come from a
vocabulary of PUBLIC resources only (``safe_vocabulary``: stop-words, clinical wording, drug names,
ICD-10-CM descriptions), so that no note, private or masked, decides which words the model knows;
the embedding starts from public word2vec vectors. The ICD label set is the K most frequent codes
of the TRAINING notes: public under feature-level DP (the label is public there), an uncounted
release for DP-SGD (listed in its guarantee). Notes are split by patient (train 70 / validation 10 /
test 20), as a function of the set of patient ids and the seed only.

Without imputation (``impute=False``) the hybrid view is the masked note itself.
"""

from __future__ import annotations

import itertools
import logging
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from dpcare.exceptions import DataError, SpecError
from dpcare.io import torch_save, write_json
from dpcare.text.classify.multilabel import LabelSet
from dpcare.text.classify.vocab import Vocab, tokenize, word_vectors
from dpcare.text.spans import Note
from dpcare.text.views.masking import MaskedNote, SpanMasker
from dpcare.timeseries.windows import split_patients

log = logging.getLogger(__name__)

SPLITS = ("train", "val", "test")
SPLIT_FRACTIONS = (0.7, 0.1, 0.2)
#: the public text of a masked span: tokenised as <mask> (``dpcare.text.classify.vocab.tokenize``)
PLACEHOLDER = "[**{label}**]"


@dataclass
class TextViews:
    """Everything a text FusionDP run reads: per split the token ids of the three views, the
    multi-hot ICD targets and each note's patient index (the privacy unit)."""

    tensors: dict[str, dict[str, torch.Tensor]]
    codes: tuple[str, ...]
    embedding: torch.Tensor  # the public word-vector initialisation [vocab, emb_dim]
    info: dict[str, Any] = field(default_factory=dict)

    def save(self, path: str | os.PathLike) -> None:
        torch_save(path, {"tensors": self.tensors, "codes": self.codes, "embedding": self.embedding,
                          "info": self.info})

    @classmethod
    def load(cls, path: str | os.PathLike) -> TextViews:
        return cls(**torch.load(path, weights_only=False))


def public_vocabulary() -> Vocab:
    """The vocabulary of public resources (``dpcare.text.views.safe_words.safe_vocabulary``)."""
    from dpcare.text.views.safe_words import safe_vocabulary

    return Vocab(sorted(w for w in safe_vocabulary() if tokenize(w) == [w]))


def check_notes(notes: Sequence[Note]) -> None:
    """Clear errors for an empty corpus and for notes without ICD labels."""
    if not notes:
        raise DataError("the note corpus is empty")
    unlabelled = [n.note_id for n in notes if not n.icd_codes]
    if unlabelled:
        raise DataError(f"{len(unlabelled)} note(s) have no ICD codes (the label of this task), e.g. "
                        f"{unlabelled[:3]}; drop them or supply their codes")


def split_positions(patient_ids: Sequence[str], seed: int = 0,
                    fractions: tuple[float, float, float] = SPLIT_FRACTIONS) -> dict[str, list[int]]:
    """Positions of the train / validation / test notes (in input order), every note of a patient in one split,
    ``fractions`` of the patients in each."""
    try:
        parts = split_patients(patient_ids, fractions, seed=seed, names=SPLITS, method="permutation")
    except ValueError as err:
        shares = "/".join(f"{round(100 * f):g}" for f in fractions)
        raise DataError(f"cannot split the notes by patient {shares}: {err}") from None
    where = {p: name for name, ids in parts.items() for p in ids}
    return {name: [i for i, p in enumerate(patient_ids) if where[str(p)] == name] for name in SPLITS}


def split_notes(notes: Sequence[Note], seed: int = 0,
                fractions: tuple[float, float, float] = SPLIT_FRACTIONS) -> dict[str, list[Note]]:
    """Train / validation / test notes, every note of a patient in one split."""
    parts = split_positions([n.patient_id for n in notes], seed, fractions)
    return {name: [notes[i] for i in parts[name]] for name in SPLITS}


def split_sizes(patients: int, seed: int = 0,
                fractions: tuple[float, float, float] = SPLIT_FRACTIONS) -> dict[str, int]:
    """Patients per split for ``patients`` distinct patients (a public count: the split's sizes depend on it
    alone, not on which patients)."""
    if patients < 1:
        raise DataError("no patients: the notes are empty")
    parts = split_positions([str(i) for i in range(patients)], seed, fractions)
    return {name: len(ids) for name, ids in parts.items()}


def label_set(train: Sequence[Note], k: int, codes: Sequence[str] | None = None) -> LabelSet:
    """The ``k`` most frequent training codes, or the given ``codes`` (each must occur in training)."""
    if k < 1:
        raise SpecError(f"top_k must be >= 1, got {k}")
    counts = LabelSet.top_k([n.icd_codes for n in train], 10**9).train_counts
    if codes is None:
        return LabelSet.top_k([n.icd_codes for n in train], k)
    labels = LabelSet(list(codes), {c: counts.get(c, 0) for c in codes})
    if missing := labels.missing_from_training():
        raise DataError(f"label set code(s) {missing[:5]} occur in no training note: nothing to learn them from")
    return labels


def build_views(parts: dict[str, list[Note]], masked: dict[str, list[MaskedNote]],
                hybrid: dict[str, list[str]], labels: LabelSet, max_tokens: int, emb_dim: int,
                vocab: Vocab | None = None) -> TextViews:
    """Token ids of the three views per split; the vocabulary and embedding are public (see module)."""
    vocab = vocab or public_vocabulary()
    vectors = word_vectors(vocab, dim=emb_dim)
    tensors = {}
    for name in SPLITS:
        notes = parts[name]
        patients = {p: i for i, p in enumerate(dict.fromkeys(n.patient_id for n in notes))}
        tensors[name] = {
            "x": vocab.encode([n.text for n in notes], max_tokens),
            "x_pub": vocab.encode([m.text for m in masked[name]], max_tokens),
            "x_hyb": vocab.encode(hybrid[name], max_tokens),
            "y": labels.encode([n.icd_codes for n in notes]),
            "patient": torch.tensor([patients[n.patient_id] for n in notes]),
        }
    info = {"vocab_size": len(vocab), "vector_source": vectors.source, "vector_coverage": vectors.coverage,
            "notes": {s: len(parts[s]) for s in SPLITS},
            "patients": {s: len({n.patient_id for n in parts[s]}) for s in SPLITS},
            "codes_without_training_note": labels.missing_from_training(),
            "train_notes_without_top_code": int((tensors["train"]["y"].sum(1) == 0).sum())}
    return TextViews(tensors, labels.codes, vectors.weight, info)


def _impute_shard(imputer: Any, masked: list[MaskedNote], journal: Path | None) -> tuple[list[list[str]], dict]:
    values = imputer.impute(masked, checkpoint=journal)
    return values, imputer.stats()


def impute_notes(imputer: Any, masked: list[MaskedNote], out: Path | None, workers: int = 1) -> tuple[list, dict]:
    """Every note's imputed values, in ``workers`` Ray tasks (:mod:`dpcare.parallel`) over contiguous shards
    (each with its own resumable journal ``out/imputation.<k>.jsonl``; ``out`` None: no journal); merged
    statistics."""
    journal = (lambda name: out / name) if out is not None else (lambda name: None)
    if workers <= 1 or len(masked) < 2 * workers:
        return _impute_shard(imputer, masked, journal("imputation.jsonl"))
    from collections import Counter

    from dpcare.parallel import map_tasks

    bounds = [round(k * len(masked) / workers) for k in range(workers + 1)]
    shards = [masked[a:b] for a, b in itertools.pairwise(bounds)]
    start = time.perf_counter()
    parts = map_tasks(_impute_shard, [(imputer, shard, journal(f"imputation.{k}.jsonl"))
                                      for k, shard in enumerate(shards)], workers)
    values = [v for part, _ in parts for v in part]
    stats: dict[str, Any] = {}
    for _, st in parts:
        for k, v in st.items():
            if isinstance(v, (int, float)) and k != "seconds_per_note":
                stats[k] = stats.get(k, 0) + v
    stats["failures"] = dict(sum((Counter(st.get("failures", {})) for _, st in parts), Counter()))
    pending = stats.get("notes", 0)  # imputed in this call (not read back from a journal)
    stats["seconds_per_note"] = (time.perf_counter() - start) / pending if pending else None  # wall time
    stats["workers"] = workers
    return values, stats


def prepare_text_views(notes: Sequence[Note], out_dir: str | os.PathLike | None, *, top_k: int = 50,
                       codes: Sequence[str] | None = None, max_tokens: int = 512, emb_dim: int = 100,
                       split_seed: int = 0, split_fractions: tuple[float, float, float] = SPLIT_FRACTIONS,
                       imputer: Any = None, masker: SpanMasker | None = None,
                       impute: bool = True, impute_workers: int = 1, progress: bool = True,
                       settings: dict[str, Any] | None = None, info_path: str | os.PathLike | None = None
                       ) -> TextViews:
    """Split, mask, impute (resumable: ``out_dir/imputation*.jsonl``, ``impute_workers`` processes; without
    ``impute`` the hybrid view is the masked note) and encode; saves ``out_dir/views.pt`` and reuses it when
    present (``out_dir`` None: nothing saved, nothing resumed). ``info_path``: where ``data.json`` goes
    (default ``out_dir/data.json``)."""
    out = Path(out_dir) if out_dir is not None else None
    if out is not None and (out / "views.pt").exists():
        return TextViews.load(out / "views.pt")
    check_notes(notes)
    parts = split_notes(notes, split_seed, split_fractions)
    labels = label_set(parts["train"], top_k, codes)
    masker = masker or SpanMasker(placeholder=PLACEHOLDER)
    masked, hybrid = {}, {}
    for name in SPLITS:
        masked[name] = masker.mask_many(parts[name])  # raises on a note with nothing public left
    every = [m for name in SPLITS for m in masked[name]]  # one imputation run (and journal) for all splits
    if impute:
        if imputer is None:
            from dpcare.text.views.imputation import SpanImputer

            imputer = SpanImputer(progress=progress)
        values, stats = impute_notes(imputer, every, out, impute_workers)
        filled = iter(m.fill(v) for m, v in zip(every, values))
    else:  # the hybrid view is the masked note: no language model
        stats = {"imputer": None}
        filled = iter(m.text for m in every)
    for name in SPLITS:
        hybrid[name] = [next(filled) for _ in masked[name]]
    views = build_views(parts, masked, hybrid, labels, max_tokens, emb_dim)
    views.info["imputation"] = stats
    views.info["settings"] = settings
    if hasattr(masker, "coverage"):  # the masker's measured recall; its misses are not protected
        views.info["masker_coverage"] = masker.coverage()
    if any(n.phi for n in parts["test"]):  # gold PHI (generated notes): how much the masker finds
        from dpcare.text.views.masking import evaluate_masker

        scores = evaluate_masker(masker, parts["test"][:300], show_progress=False)
        views.info["masker"] = scores.to_dict(orient="records")
    views.info["examples"] = [{"masked": m.text[:600], "hybrid": h[:600]}
                              for m, h in zip(masked["val"][:2], hybrid["val"][:2])]
    if info_path is not None or out is not None:
        write_json(Path(info_path) if info_path is not None else out / "data.json", views.info)
    if out is not None:
        views.save(out / "views.pt")  # last: its presence marks the data as complete
    return views
