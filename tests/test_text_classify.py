"""The note-classifier recipe (dpcare.text.classify) and `dpcare text classify | codes` on a few generated notes:
settings rules, the plan from the patient count alone, the guarantee's n equal to the patients the engine
samples, save / load, predictions that read the note text only, and the commands end to end (a fresh
process applies the saved model, the report reads the run, a budget refuses before any note is read, a
non-empty --out is refused). Masking-only public views (no imputation LM) and the RDP accountant keep it fast."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace

import pytest
import torch
from typer.testing import CliRunner

from dpcare.cli import app
from dpcare.engine.trainer import Trainer
from dpcare.exceptions import DataError, SettingsError
from dpcare.methods.fusion import HYBRID_METHODS
from dpcare.runs import read_manifest
from dpcare.settings import DPSettings
from dpcare.text import generate_corpus, write_jsonl
from dpcare.text.classify.data import split_sizes
from dpcare.text.classify.recipe import SELECTION, NoteClassifier, fit, plan
from dpcare.text.classify.settings import (
    METHOD_NAMES,
    NONPRIVATE_VIEWS,
    NoteClassifierSettings,
    paper_settings,
    with_method,
)
from dpcare.text.views.masking import SpanMasker

runner = CliRunner()
TINY = dict(top_k=5, max_tokens=64, emb_dim=16, n_filters=8, kernel_size=3, impute=False, mask_ner=False)
TINY_CLI = ["--top-k", "5", "--max-tokens", "64", "--emb-dim", "16", "--filters", "8", "--kernel", "3", "--no-impute",
            "--no-mask-ner", "--epochs", "1", "--batch-size", "8", "--accountant", "rdp"]


def tiny(method: str = "fusiondp", **dp) -> NoteClassifierSettings:
    return NoteClassifierSettings(method=method, **TINY, dp=DPSettings(**{"epsilon": 5.0, "batch_size": 8, "epochs": 1,
                                                                          "accountant": "rdp", "unit": "patient",
                                                                          **dp}))


@pytest.fixture(scope="module")
def notes():
    return generate_corpus(60, sources=("support2",), seed=1)


@pytest.fixture(scope="module")
def notes_file(notes, tmp_path_factory):
    return write_jsonl(notes, tmp_path_factory.mktemp("notes") / "notes.jsonl")


@pytest.fixture(scope="module")
def fitted(notes):
    """A FusionDP fit with what the engine sampled: the number of distinct patient groups it was given."""
    sampled = []
    real = Trainer.fit

    def spy(self, data, public=None, groups=None, **kw):
        if groups is not None:  # the private model (the public baseline trains without privacy, on notes)
            sampled.append(len(torch.unique(groups)))
        return real(self, data, public, groups=groups, **kw)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(Trainer, "fit", spy)
        model = fit(notes, replace(tiny(), test_share=0.3), progress=False)  # not the default shares: they reach
    return model, sampled  # the split, the plan and the engine alike


# --------------------------------------------------------------------------- settings and plan
def test_methods_are_those_of_the_engine_registry():
    assert METHOD_NAMES == (*NONPRIVATE_VIEWS, "dp-sgd", *HYBRID_METHODS.names())


@pytest.mark.parametrize("change, message", [
    (dict(dp=DPSettings(unit="example")), "unit must be 'patient', got unit = 'example'"),
    (dict(dp=DPSettings(unit="patient", steps=10)), "set epochs, not steps"),
    (dict(dp=DPSettings(unit="patient", epochs=1.5)), "whole number"),
    (dict(method="magic"), "method must be one of"),
    (dict(top_k=0), "top_k must be an integer >= 1"),
    (dict(loss="max"), "loss must be one of"),
    (dict(validation_share=0.45, test_share=0.45), "leave at least 10% of the patients to train"),
    (dict(test_share=0.0), "test_share"),
])
def test_bad_settings_name_the_setting(change, message):
    with pytest.raises(SettingsError, match=message):
        replace(NoteClassifierSettings(), **change)


def test_paper_settings_and_plan_from_the_patient_count_alone():
    s = with_method(NoteClassifierSettings(), "calibrated-fusion", **paper_settings("calibrated-fusion"))
    assert (s.dp.clip_norm, s.alpha) == (0.05, 8.0) and paper_settings("sgd-org") == {}
    g = plan(tiny(), 60)
    assert g.n == split_sizes(60)["train"] == 42 and g.epsilon == 5.0 and g.unit.value == "features"
    assert SELECTION in g.uncounted
    dpsgd = plan(tiny("dp-sgd"), 60)
    assert dpsgd.unit.value == "patient" and any("label set" in u for u in dpsgd.uncounted)
    assert plan(tiny("sgd-org"), 60) is None
    with pytest.raises(DataError, match="too few"):
        plan(tiny(), 2)


def test_the_split_shares_are_settings_and_the_plan_follows_them(notes_file, tmp_path):
    """Issue 54: a larger test share (more test patients, a verdict that detects smaller differences) moves
    patients out of training, and the planned n counts them from the patient count alone."""
    wide = replace(tiny(), test_share=0.4)
    assert wide.split_fractions == (0.5, 0.1, 0.4)
    assert split_sizes(60, 0, wide.split_fractions) == {"train": 30, "val": 6, "test": 24}
    assert plan(wide, 60).n == 30 and plan(tiny(), 60).n == 42
    r = runner.invoke(app, ["text", "classify", str(notes_file), "--test-share", "0.95", *TINY_CLI,
                            "--out", str(tmp_path / "x")])
    assert r.exit_code == 2 and "test_share" in r.output.replace("-", "_")


# --------------------------------------------------------------------------- fit, save, load, predict
def test_the_guarantee_n_is_the_patients_the_engine_sampled(fitted, notes):
    model, sampled = fitted
    patients = len({n.patient_id for n in notes})
    assert sampled == [model.guarantee.n] == [plan(model.settings, patients).n] == [model.info["units"]]
    assert model.guarantee.unit.value == "features" and model.guarantee.epsilon <= 5.0 + 1e-6
    assert SELECTION in model.guarantee.uncounted
    assert set(model.split) >= {"train", "val", "test"} and model.split["notes"] == len(notes)
    train_patients = {notes[i].patient_id for i in model.split["train"]}
    assert len(train_patients) == model.guarantee.n == split_sizes(patients, 0, (0.6, 0.1, 0.3))["train"]
    assert model.split["fractions"] == [0.6, 0.1, 0.3]
    assert not train_patients & {notes[i].patient_id for i in model.split["test"]}  # split by patient
    assert 0 <= model.metrics["test f1_micro"] <= 1 and len(model.codes) == 5


def test_a_saved_classifier_loads_and_predicts_from_the_note_text_only(fitted, notes, tmp_path):
    model, _ = fitted
    model.save(tmp_path / "run")
    loaded = NoteClassifier.load(tmp_path / "run")
    assert loaded.codes == model.codes and loaded.threshold == model.threshold
    assert loaded.guarantee == model.guarantee and loaded.metrics == pytest.approx(model.metrics)
    assert (loaded.predict_proba(notes) == model.predict_proba(notes)).all()
    # the text is all a prediction reads: no codes, spans or patient; a plain string works the same
    bare = [replace(n, patient_id="other", icd_codes=(), phi=(), entities=()) for n in notes]
    assert loaded.predict(bare) == loaded.predict([n.text for n in notes]) == model.predict(notes)
    with pytest.raises(SettingsError, match="not empty"):
        model.save(tmp_path / "run")


def test_fit_refuses_notes_without_codes(notes):
    with pytest.raises(DataError, match="no ICD codes"):
        fit([replace(notes[0], icd_codes=())] + notes[1:], tiny(), progress=False)


# --------------------------------------------------------------------------- the commands
@pytest.mark.slow  # end to end
def test_classify_and_codes_end_to_end(notes_file, notes, tmp_path):
    run = tmp_path / "run"
    r = runner.invoke(app, ["text", "classify", str(notes_file), "--method", "fusiondp", "--epsilon", "5", *TINY_CLI,
                            "--out", str(run)])
    assert r.exit_code == 0, r.output
    assert "differential privacy" in r.output and "NOT counted in epsilon" in r.output
    m = read_manifest(run)
    assert m.kind == "text-classify" and m.models[0]["guarantee"]["n"] == plan(tiny(), 60).n
    assert m.models[0]["ledger"] and set(m.files.values()) <= {p.name for p in run.iterdir()}
    assert not (run / "checkpoints").exists()  # the encoded views (private notes) are not released
    # a fresh process loads the run and codes new notes
    codes = tmp_path / "codes.jsonl"
    p = subprocess.run([sys.executable, "-m", "dpcare.cli", "text", "codes", str(run), str(notes_file),
                        "--out", str(codes)], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    assert "micro-F1" in p.stdout
    rows = [json.loads(line) for line in codes.read_text().splitlines()]
    expected = NoteClassifier.load(run).predict(notes)
    assert [r["note_id"] for r in rows] == [n.note_id for n in notes]
    assert [tuple(r["codes"]) for r in rows] == expected and len(rows[0]["scores"]) == 5
    r = runner.invoke(app, ["report", str(run), "--out", str(tmp_path / "report.html")])
    assert r.exit_code == 0, r.output
    html = (tmp_path / "report.html").read_text()
    assert "dpcare text classify" in html and "fusiondp" in html and "masker missed" in html
    # one run per folder
    r = runner.invoke(app, ["text", "classify", str(notes_file), *TINY_CLI, "--out", str(run)])
    assert r.exit_code == 2 and "not empty" in r.output


def test_a_budget_refuses_the_run_before_any_note_is_read(notes_file, tmp_path, monkeypatch):
    budget = tmp_path / "budget.json"
    r = runner.invoke(app, ["budget", "init", str(budget), "--epsilon", "0.1", "--delta", "0.05", "--dataset", "notes",
                            "--unit", "features", "--data", str(notes_file)])
    assert r.exit_code == 0, r.output

    def no_reading(*a, **k):
        raise AssertionError("the notes were read before the budget check")

    monkeypatch.setattr("dpcare.text.readers.read_jsonl", no_reading)
    r = runner.invoke(app, ["text", "classify", str(notes_file), "--epsilon", "1", *TINY_CLI, "--budget", str(budget),
                            "--out", str(tmp_path / "run")])
    assert r.exit_code == 2 and "budget" in r.output.lower(), r.output
    assert not (tmp_path / "run").exists()
    assert json.loads(budget.read_text())["releases"] == []


@pytest.mark.parametrize("args, message", [
    (["--format", "brat"], "only --format jsonl or json carries"),
    (["--method", "dp-magic"], "--method must be one of"),
    (["--epsilon", "0"], "--epsilon must be"),
    (["--lm", "/no/such/lm"], "unknown model path"),
])
def test_classify_errors_name_the_problem(args, message, notes_file, tmp_path):
    r = runner.invoke(app, ["text", "classify", str(notes_file), *args, "--out", str(tmp_path / "run")])
    assert r.exit_code == 2 and message in r.output, r.output


def test_codes_reads_other_formats_and_names_a_wrong_one(fitted, notes, tmp_path):
    model, _ = fitted
    model.save(tmp_path / "run")
    folder = tmp_path / "txt"
    folder.mkdir()
    for n in notes[:3]:
        (folder / f"{n.note_id}.txt").write_text(n.text)
    r = runner.invoke(app, ["text", "codes", str(tmp_path / "run"), str(folder), "--format", "brat",
                            "--out", str(tmp_path / "codes.jsonl")])
    assert r.exit_code == 0, r.output
    rows = [json.loads(line) for line in (tmp_path / "codes.jsonl").read_text().splitlines()]
    by_id = dict(zip([n.note_id for n in notes[:3]], model.predict(notes[:3])))
    assert {r["note_id"]: tuple(r["codes"]) for r in rows} == by_id
    r = runner.invoke(app, ["text", "codes", str(tmp_path / "run"), str(folder), "--out", str(tmp_path / "c.jsonl")])
    assert r.exit_code == 2 and "is a folder; --format jsonl reads" in r.output
    r = runner.invoke(app, ["text", "codes", str(tmp_path / "run"), str(folder), "--format", "docx",
                            "--out", str(tmp_path / "c.jsonl")])
    assert r.exit_code == 2 and "unknown notes format 'docx'" in r.output


@pytest.mark.slow  # end to end
def test_classify_with_an_imputation_lm_and_the_ner_masker(notes, gpt2_folder, tmp_path):
    s = replace(tiny(), impute=True, mask_ner=True, lm=gpt2_folder)
    s = replace(s, dp=s.dp.replace(noise_seed=0))  # two runs compared: the same (reproducible) noise
    model = fit(notes, s, masker=SpanMasker(placeholder="[**{label}**]"), work_dir=tmp_path / "work", progress=False)
    assert model.info["imputation"]["notes"] == len(notes) and "filled by" in model.info["hybrid_view"]
    assert (tmp_path / "work" / "views.pt").exists()  # a rerun resumes from here
    again = fit(notes, s, work_dir=tmp_path / "work", progress=False)
    assert (again.predict_proba(notes) == model.predict_proba(notes)).all()
    with pytest.raises(SettingsError, match="other settings"):  # views of other settings are not reused
        fit(notes, replace(s, top_k=4), work_dir=tmp_path / "work", progress=False)


def test_selection_reads_only_the_validation_notes_and_the_test_notes_are_read_once(notes):
    """The epoch and threshold are chosen on the validation split; the test split is scored once, by the chosen
    model, after training (red when EpochSelection was handed the test tensors, checked)."""
    from dpcare.text.classify import recipe

    seen = []
    real = recipe.predict_scores

    def spy(model, ids, batch=256):
        seen.append(ids)
        return real(model, ids, batch)

    captured = {}
    real_train = recipe.train_views

    def keep_views(views, settings, progress=False):
        captured.setdefault("views", views)  # the first call trains the private model
        return real_train(views, settings, progress)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(recipe, "predict_scores", spy)
        mp.setattr(recipe, "train_views", keep_views)
        fit(notes, tiny(epochs=2), progress=False)
    val, test = captured["views"].tensors["val"]["x"], captured["views"].tensors["test"]["x"]
    private = [ids for ids in seen if any(ids is t["x"] for t in captured["views"].tensors.values())]
    during, after = private[:-1], private[-1]
    assert len(during) == 2 and all(ids is val for ids in during)  # one validation pass per epoch
    assert after is test and [i for i, ids in enumerate(seen) if ids is after] == [2]  # read once, after training
    # then the public baseline (dpcare.text.classify.baseline): it reads the masked views only
    assert all(any(ids is t["x_pub"] for t in captured["views"].tensors.values()) for ids in seen[3:])
