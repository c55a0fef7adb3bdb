"""The note-classifier recipe: ICD coding of a hospital's own notes with feature-level DP on the sensitive spans
(Zeng et al., Section 5.3). ``fit(notes, settings)`` -> :class:`NoteClassifier` (``save`` / ``load`` a run
folder, ``predict`` the codes of new notes).

Three views of every note (:mod:`dpcare.text.classify.data`): ``x`` the note, ``x_pub`` the note with its
sensitive spans masked (:mod:`dpcare.text.views.masking`), ``x_hyb`` the masked note with every mask filled by
a language model that reads only the masked text (:mod:`dpcare.text.views.imputation`; without imputation,
the masked note). Each method reads only its views: the private (clipped, noised) loss reads ``x``; the
public branch of the fusion methods reads ``x_pub`` or ``x_hyb`` and the codes; the non-private references
train on one view. Token ids come from a vocabulary of PUBLIC words and the embedding from public vectors.

The privacy unit is the PATIENT: the engine samples patients and clips the sum of a patient's note gradients;
the guarantee's n is the number of training patients, a function of the number of patients alone, so
:func:`plan` states it from that public count before any note is read. Notes are split by patient (train 70 /
validation 10 / test 20). After every epoch the model is scored on the validation notes and the epoch and
decision threshold with the best micro-F1 are kept: that choice reads the validation notes without noise and
every guarantee lists it as NOT counted in epsilon. Test metrics are computed once, by the chosen model, and
compared on the same test notes with the public baseline (:mod:`dpcare.text.classify.baseline`: CAML without
privacy on the masked notes for the feature-level methods, every code of the label set for DP-SGD), a paired
bootstrap over test patients giving the verdict (run.json ``baselines``, the console, ``dpcare report``).

Applied to NEW notes, the model reads the note text (``x``) only: no masking, no imputation, no codes.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from dpcare.engine import TrainConfig, Trainer
from dpcare.engine.trainer import TrainResult
from dpcare.exceptions import DataError, SettingsError
from dpcare.methods import DPSGD, NonPrivate
from dpcare.methods.fusion import HYBRID_METHODS
from dpcare.privacy import Guarantee, PrivacyLedger, ProtectedUnit
from dpcare.runs import Manifest, RunFolder, SavesRunFolder, read_run_of_kind
from dpcare.runs.record import phase
from dpcare.settings import in_effect
from dpcare.text.classify.caml import CAML
from dpcare.text.classify.data import (
    PLACEHOLDER,
    SPLIT_FRACTIONS,
    SPLITS,
    TextViews,
    prepare_text_views,
    public_vocabulary,
    split_positions,
    split_sizes,
)
from dpcare.text.classify.multilabel import choose_threshold, multilabel_metrics, per_example_bce
from dpcare.text.classify.settings import HYBRID_VIEW, NONPRIVATE_VIEWS, NoteClassifierSettings
from dpcare.text.classify.vocab import Vocab
from dpcare.text.spans import Note
from dpcare.verdict import verdict_entry

KIND = "text-classify"
MODEL_FILE, VOCAB_FILE, SPLIT_FILE = "model.pt", "vocabulary.json", "split.json"
METRICS = ("f1_micro", "f1_macro", "precision_micro", "precision_macro", "recall_micro", "recall_macro",
           "auc_micro", "auc_macro")
SELECTION = ("the best epoch and the decision threshold, chosen by micro-F1 on the validation notes (their original "
             "text and codes): a release about the validation patients")
MISSED = "the note text outside those spans, including any sensitive span the masker missed"
LABEL_SET = "the label set (the K most frequent ICD codes of the training notes)"
SPANS = "the sensitive spans the masker found, in all of a patient's notes"
COVERAGE_UNKNOWN = "The masker's recall on annotated notes is in docs/text-masking.md."


def mean_bce(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Per-note binary cross-entropy averaged over the codes."""
    return per_example_bce(logits, targets) / logits.shape[1]


#: the per-note loss: BCE summed over the codes (the note's negative log-likelihood) or averaged.
#: The scale sets how the exact public gradient weighs against the clipped, noised private one.
LOSSES = {"sum": per_example_bce, "mean": mean_bce}


def make_objective(method: str, beta: float = 0.0, loss: str = "sum"):
    """The method's objective with the multi-label loss (``beta``: FusionDP's consistency weight)."""
    fn = LOSSES[loss]
    if method in NONPRIVATE_VIEWS:
        return NonPrivate(fn)
    if method == "dp-sgd":
        return DPSGD(fn)
    factory = HYBRID_METHODS.get(method)
    return factory(beta, loss=fn) if method == "fusiondp" else factory(loss=fn)


def make_ledger(method: str, n_patients: int, delta: float | None = None, accountant: str = "pld") -> PrivacyLedger:
    """The ledger of a private method over ``n_patients`` training patients: every note of a patient (DP-SGD,
    the label set an uncounted release) or the masked spans of a patient's notes; the validation selection is
    listed as uncounted."""
    if method == "dp-sgd":
        ledger = PrivacyLedger(n_patients, delta, accountant, unit=ProtectedUnit.PATIENT)
        ledger.note_uncounted(LABEL_SET)
    else:
        ledger = PrivacyLedger(n_patients, delta, accountant, unit=ProtectedUnit.FEATURES, protected_columns=(SPANS,),
                               public_columns=(MISSED, "the ICD codes"))
    ledger.note_uncounted(SELECTION)
    return ledger


def plan(settings: NoteClassifierSettings, patients: int) -> Guarantee | None:
    """What :func:`fit` will release on notes of ``patients`` distinct patients, from the settings and that
    public count alone (a budget checks it before any note is read). None for a non-private method."""
    if not settings.private:
        return None
    n = split_sizes(patients, settings.split_seed, settings.split_fractions)["train"]
    ledger = make_ledger(settings.method, n, settings.dp.delta, settings.dp.accountant)
    return dataclasses.replace(ledger.guarantee(), epsilon=settings.dp.epsilon)


# --------------------------------------------------------------------------- training on the views
class EpochSelection:
    """``on_step`` callback: at each epoch's end (step round(k T / E), the last at T), score the
    validation notes and keep the best state."""

    def __init__(self, model: torch.nn.Module, val: dict[str, torch.Tensor], total_steps: int, epochs: int):
        self.model, self.val = model, val
        self.ends = {max(1, round(k * total_steps / epochs)): k for k in range(1, epochs + 1)}
        self.best: dict[str, Any] = {"f1_micro": -1.0}

    def __call__(self, step: int) -> None:
        if step not in self.ends:
            return
        scores = predict_scores(self.model, self.val["x"])
        threshold = choose_threshold(scores, self.val["y"])
        f1 = multilabel_metrics(scores, self.val["y"], threshold)["f1_micro"]
        if f1 > self.best["f1_micro"]:
            state = {k: v.detach().clone() for k, v in self.model.state_dict().items()}
            self.best = {"f1_micro": f1, "epoch": self.ends[step], "threshold": threshold, "state": state}


@torch.no_grad()
def predict_scores(model: torch.nn.Module, ids: torch.Tensor, batch: int = 256) -> torch.Tensor:
    """Sigmoid scores [notes, codes] of token ids [notes, tokens]."""
    model.eval()
    return torch.cat([torch.sigmoid(model(ids[i:i + batch])) for i in range(0, len(ids), batch)])


@dataclass
class Trained:
    """What :func:`train_views` returns: the model at the chosen epoch, the selection, ledger and engine result."""

    model: CAML
    best: dict[str, Any]
    ledger: PrivacyLedger | None
    result: TrainResult
    units: int  # the privacy units sampled: training patients (notes for the non-private references)


def train_views(views: TextViews, settings: NoteClassifierSettings, progress: bool = False) -> Trained:
    """Train ``settings.method`` on the training views (each method reads only its own) and keep the epoch with
    the best validation micro-F1. The building block of :func:`fit` and of the text FusionDP study."""
    train, val = views.tensors["train"], views.tensors["val"]
    method, dp = settings.method, settings.dp
    torch.manual_seed(dp.seed)
    model = CAML(views.embedding.shape[0], len(views.codes), settings.emb_dim, settings.n_filters,
                 settings.kernel_size, embeddings=views.embedding, activation="relu")
    model.embed.weight.requires_grad_(settings.train_embeddings)
    objective = make_objective(method, settings.beta, settings.loss)
    n_patients = int(train["patient"].max()) + 1
    units = len(train["y"]) if method in NONPRIVATE_VIEWS else n_patients
    selection = EpochSelection(model, val, math.ceil(dp.epochs * units / dp.batch_size), settings.epochs)
    config = TrainConfig(dp=dp, compute=settings.compute, lr=settings.lr, alpha=settings.alpha, progress=progress)
    ledger = None
    if method in NONPRIVATE_VIEWS:
        result = Trainer(model, objective, config).fit({"x": train[NONPRIVATE_VIEWS[method]], "y": train["y"]},
                                                       on_step=selection)
    else:
        ledger = make_ledger(method, n_patients, dp.delta, dp.accountant)
        public = {k: train[k] for k in objective.public_keys} if objective.has_public_branch else None
        result = Trainer(model, objective, config, ledger=ledger).fit(
            {k: train[k] for k in objective.private_keys}, public, groups=train["patient"], on_step=selection)
    model.load_state_dict(selection.best["state"])
    model.eval()
    return Trained(model, {k: v for k, v in selection.best.items() if k != "state"}, ledger, result, units)


def prepare_views(notes: Sequence[Note], settings: NoteClassifierSettings, *, imputer: Any = None,
                  masker: Any = None, work_dir: str | os.PathLike | None = None, impute_workers: int = 1,
                  progress: bool = True, tag: dict[str, Any] | None = None,
                  info_path: str | os.PathLike | None = None) -> TextViews:
    """The three views of the notes as ``settings`` ask (split by patient, masked, imputed, encoded).
    ``imputer`` / ``masker``: instead of the settings' (tests, other models); ``work_dir``: the imputation
    journal and the encoded views, for a resumable run (they hold private notes: keep them out of a
    release; views saved there with other settings are refused); ``tag``: kept in the views' info
    (``settings``; default: the settings the views depend on); ``info_path``: where to write the views' info
    (sizes, masker recall on gold spans, imputation statistics, two public examples)."""
    tag = tag if tag is not None else view_settings(settings)
    if work_dir is not None and (Path(work_dir) / "views.pt").exists():
        views = TextViews.load(Path(work_dir) / "views.pt")
        if views.info.get("settings") != tag:
            raise SettingsError(f"{work_dir} holds views prepared with other settings ({views.info.get('settings')}, "
                                f"now {tag}): use another folder")
        return views
    if settings.impute and imputer is None:
        from dpcare.text.views.imputation import SpanImputer

        imputer = SpanImputer(settings.lm, context_chars=settings.impute_context_chars, batch_size=32,
                              progress=progress and impute_workers <= 1)
    if masker is None:
        from dpcare.text.views.masking import SpanMasker

        masker = SpanMasker(ner=settings.mask_ner, placeholder=PLACEHOLDER)
    return prepare_text_views(notes, work_dir, top_k=settings.top_k, max_tokens=settings.max_tokens,
                              emb_dim=settings.emb_dim, split_seed=settings.split_seed,
                              split_fractions=settings.split_fractions, imputer=imputer,
                              masker=masker, impute=settings.impute, impute_workers=impute_workers,
                              progress=progress, settings=tag, info_path=info_path)


def view_settings(settings: NoteClassifierSettings) -> dict[str, Any]:
    """The settings the three views depend on (not the method or the training)."""
    tag = {k: getattr(settings, k) for k in ("top_k", "max_tokens", "emb_dim", "split_seed", "impute", "lm",
                                             "impute_context_chars", "mask_ner")}
    if settings.split_fractions != SPLIT_FRACTIONS:  # views saved before the shares were settings used the default
        tag.update(validation_share=settings.validation_share, test_share=settings.test_share)
    return tag


# --------------------------------------------------------------------------- the fitted model
@dataclass
class NoteClassifier(SavesRunFolder):
    """A fitted note classifier: CAML over a public vocabulary, the codes it predicts and the decision threshold
    chosen on validation, the guarantee (None: non-private) and ledger, the metrics ("validation f1_micro",
    "test f1_micro", "test auc_macro", ...) and the split."""

    RUN_KIND = KIND

    settings: NoteClassifierSettings
    model: CAML
    vocab: Vocab
    codes: tuple[str, ...]
    threshold: float
    guarantee: Guarantee | None = None
    ledger: PrivacyLedger | None = field(default=None, repr=False)
    metrics: dict[str, float] = field(default_factory=dict)
    split: dict[str, Any] = field(default_factory=dict)
    info: dict[str, Any] = field(default_factory=dict)
    baseline: dict[str, Any] | None = None  # the public baseline on the same test notes, and the verdict

    def token_ids(self, notes: Sequence[Note | str]) -> torch.Tensor:
        """Token ids of the notes' TEXT (all a prediction reads: no masking, imputation or codes)."""
        texts = [n if isinstance(n, str) else n.text for n in notes]
        if not all(isinstance(t, str) for t in texts):
            raise DataError("predict takes notes (dpcare.text.Note) or their texts (str)")
        return self.vocab.encode(texts, self.settings.max_tokens)

    def predict_proba(self, notes: Sequence[Note | str]) -> np.ndarray:
        """Scores [notes, codes] in the order of :attr:`codes`."""
        notes = list(notes)
        if not notes:
            return np.zeros((0, len(self.codes)))
        return predict_scores(self.model, self.token_ids(notes)).double().numpy()

    def predict(self, notes: Sequence[Note | str]) -> list[tuple[str, ...]]:
        """The codes of each note: those scored at or above the threshold chosen on validation."""
        scores = self.predict_proba(notes)
        return [tuple(c for c, s in zip(self.codes, row) if s >= self.threshold) for row in scores]

    def evaluate(self, notes: Sequence[Note]) -> dict[str, float]:
        """Multi-label metrics of notes that carry their codes (codes outside :attr:`codes` are not scored)."""
        from dpcare.text.classify.multilabel import LabelSet

        targets = LabelSet(list(self.codes)).encode([n.icd_codes for n in notes])
        return multilabel_metrics(torch.from_numpy(self.predict_proba(notes)).float(), targets, self.threshold)

    # ----------------------------------------------------------------- run folders
    def manifest(self, data: dict[str, Any] | None = None) -> Manifest:
        method = self.settings.method
        m = Manifest(settings=self.settings.to_dict(), data=data or {}, headline=["test f1_micro", "test auc_macro"],
                     files={"model": MODEL_FILE, "vocabulary": VOCAB_FILE, "split": SPLIT_FILE})
        m.add_model(method, self.guarantee.to_dict() if self.guarantee else None,
                    self.ledger.state_dict() if self.ledger is not None else None,
                    note="" if self.guarantee else "NO differential privacy guarantee (a non-private reference).")
        m.metrics = [{"model": method, **self.metrics}]
        if self.baseline is not None:
            b = self.baseline
            m.baselines = [b]
            m.metrics.append({"model": f"public baseline: {b['name']}", **b["metrics"]})
            m.notes.append(f"{method}: {b['comparisons'][0]['verdict']}")
        m.settings["info"] = self.info
        if self.baseline is not None:
            m.verdicts = [verdict_entry(method, self.baseline["comparisons"][0])]
        m.settings_in_effect = in_effect(self.settings, {"dp.delta": self.guarantee.delta} if self.guarantee else {})
        if method != "dp-sgd" and method != "sgd-org":
            m.not_protected.append("Sensitive spans the masker missed are part of the public view (the masked and "
                                   "hybrid notes): no guarantee covers them. "
                                   + self.info.get("masker_coverage", COVERAGE_UNKNOWN))
        if method in (*HYBRID_VIEW, "sgd-hybrid") and self.settings.impute:
            m.not_protected.append(f"The imputation language model ({self.settings.lm}) is public: its pre-training "
                                   "data are outside every guarantee; it reads only the masked notes.")
        if self.guarantee is not None:
            m.not_protected.append("The choice of the epoch and threshold on the validation notes is NOT counted in "
                                   "epsilon (listed in the guarantee).")
        return m

    def write(self, run: RunFolder, data: dict[str, Any] | None = None) -> Path:
        """Write the model, its vocabulary, its split and the manifest into ``run`` and finish it."""
        run.save_torch(MODEL_FILE, {"model": self.model.state_dict(), "config": caml_config(self.model),
                                    "codes": list(self.codes),
                                    "threshold": self.threshold})
        run.write_json(VOCAB_FILE, list(self.vocab.tokens))
        run.write_json(SPLIT_FILE, self.split)
        return run.finish(self.manifest(data))

    @classmethod
    def load(cls, folder: str | os.PathLike) -> NoteClassifier:
        """A classifier saved by :meth:`save` or ``dpcare text classify`` (in eval mode), in any process."""
        folder = Path(folder)
        manifest, settings, info = read_run_of_kind(folder, KIND, "a note classifier")
        saved = torch.load(folder / MODEL_FILE, map_location="cpu", weights_only=False)
        model = CAML(**saved["config"])
        model.load_state_dict(saved["model"])
        model.eval()
        vocab = Vocab(json.loads((folder / VOCAB_FILE).read_text()))
        split = json.loads((folder / SPLIT_FILE).read_text()) if (folder / SPLIT_FILE).exists() else {}
        entry = manifest.models[0]
        metrics = {k: v for k, v in manifest.metrics[0].items() if k != "model"}
        return cls(NoteClassifierSettings.from_dict(settings), model, vocab, tuple(saved["codes"]),
                   float(saved["threshold"]), Guarantee.from_dict(entry["guarantee"]) if entry["guarantee"] else None,
                   PrivacyLedger.from_state_dict(entry["ledger"]) if entry["ledger"] else None, metrics, split, info,
                   manifest.baselines[0] if manifest.baselines else None)


def caml_config(model: CAML) -> dict[str, Any]:
    """The keywords that rebuild ``model`` (its shapes; the relu activation of the FusionDP variant)."""
    return {"vocab_size": model.embed.num_embeddings, "n_labels": model.attention.out_features,
            "emb_dim": model.embed.embedding_dim, "n_filters": model.conv.out_channels,
            "kernel_size": model.conv.kernel_size[0], "activation": "relu"}


# --------------------------------------------------------------------------- fitting
def fit(notes: Sequence[Note], settings: NoteClassifierSettings | None = None, *, imputer: Any = None,
        masker: Any = None, work_dir: str | os.PathLike | None = None, impute_workers: int = 1,
        progress: bool = True) -> NoteClassifier:
    """Train ``settings.method`` on the notes (each with its ``patient_id`` and ``icd_codes``): split by patient,
    masked, imputed (``impute_workers`` processes; resumable in ``work_dir``), trained on the training
    patients, the epoch and threshold chosen on the validation notes, scored on the test notes."""
    settings = settings or NoteClassifierSettings()
    notes = list(notes)
    with phase("masking, imputing and encoding the notes (the views)"):
        views = prepare_views(notes, settings, imputer=imputer, masker=masker, work_dir=work_dir,
                              impute_workers=impute_workers, progress=progress)
    vocab = public_vocabulary()
    if len(vocab) != views.embedding.shape[0]:
        raise RuntimeError(f"the views were encoded with {views.embedding.shape[0]} tokens, the public vocabulary "
                           f"has {len(vocab)}")
    with phase(f"training ({settings.method}) and choosing the epoch on the validation notes"):
        trained = train_views(views, settings, progress=progress)
    test = views.tensors["test"]
    with phase("scoring the test notes"):
        test_scores = predict_scores(trained.model, test["x"])  # the test notes, read once by the chosen model
        scores = multilabel_metrics(test_scores, test["y"], trained.best["threshold"])
    metrics = {"validation f1_micro": trained.best["f1_micro"], **{f"test {k}": scores[k] for k in METRICS}}
    # the best coder that needs no private data, on the same test notes (dpcare.text.classify.baseline)
    from dpcare.text.classify.baseline import public_baseline

    with phase("public baseline and the verdict"):
        baseline = public_baseline(views, settings, test_scores, float(trained.best["threshold"]))
    parts = split_positions([n.patient_id for n in notes], settings.split_seed, settings.split_fractions)
    split = {"notes": len(notes), "seed": settings.split_seed, "fractions": list(settings.split_fractions), **parts}
    result, v = trained.result, views.info
    info = {"codes": list(views.codes), "threshold": trained.best["threshold"], "best_epoch": trained.best["epoch"],
            "steps": result.steps, "sampling_rate": result.sampling_rate,
            "noise_multiplier": result.noise_multiplier, "backend": result.backend, "units": trained.units,
            "hybrid_view": ("the masked note filled by " + settings.lm) if settings.impute else "the masked note",
            **{k: v[k] for k in ("notes", "patients", "vocab_size", "vector_source", "vector_coverage",
                                 "codes_without_training_note", "train_notes_without_top_code", "imputation",
                                 "masker", "masker_coverage") if k in v}}
    g = trained.ledger.guarantee() if trained.ledger is not None else None
    return NoteClassifier(settings, trained.model, vocab, tuple(views.codes), float(trained.best["threshold"]), g,
                          trained.ledger, metrics, split, info, baseline)


__all__ = ["KIND", "LABEL_SET", "LOSSES", "METRICS", "MISSED", "SELECTION", "SPLITS", "EpochSelection",
           "NoteClassifier", "Trained", "fit", "make_ledger", "make_objective", "mean_bce", "plan", "predict_scores",
           "prepare_views", "train_views"]
