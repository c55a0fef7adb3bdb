"""`dpcare text`: saving and loading fine-tuned models (every mode), and the commands end to end on a tiny
GPT-2 folder: generate, mask, finetune (with a budget), ner, summarise, and their errors."""

from __future__ import annotations

import json

import pytest
import torch
from typer.testing import CliRunner

from dpcare.cli import app
from dpcare.exceptions import DataError, SettingsError
from dpcare.lm import load_causal_lm
from dpcare.runs import read_manifest
from dpcare.text import generate_corpus, read_jsonl, write_jsonl
from dpcare.text.lm.finetune import finetune
from dpcare.text.lm.saved import WEIGHTS, load_finetuned, save_finetuned

runner = CliRunner()
MODES = ("non-private", "dp-full", "dp-lora", "dp-prefix")


@pytest.fixture(scope="module")
def notes_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("notes") / "notes.jsonl"
    write_jsonl(generate_corpus(8, sources=("support2",), seed=5), path)
    return path


def logits(model, tok, text="Admitted with chest pain; troponin drawn."):
    ids = tok(text, return_tensors="pt")
    with torch.no_grad():
        return model(**ids).logits


@pytest.mark.slow  # end to end
@pytest.mark.parametrize("mode", MODES)
def test_a_saved_model_loads_to_the_same_outputs(mode, gpt2_folder, notes_file, tmp_path):
    notes = read_jsonl(notes_file)
    eps = None if mode == "non-private" else 3.0
    model, tok, info = finetune(notes, "ner", mode, epsilon=eps, model=gpt2_folder, epochs=1, batch_size=4,
                                window=64, stride=64, lr=1e-2)
    model.eval()
    save_finetuned(model, info, tmp_path / "m")
    loaded, tok2, meta = load_finetuned(tmp_path / "m")
    assert meta["recipe"]["mode"] == mode and meta["info"]["steps"] == info["steps"]
    assert torch.equal(logits(model, tok), logits(loaded, tok2))
    base = load_causal_lm(gpt2_folder)[0].eval()  # the trained weights did change
    assert not torch.allclose(logits(base, tok), logits(loaded, tok2))
    if eps is not None:
        assert json.loads((tmp_path / "m" / "guarantee.json").read_text())["unit"] == "patient"


def test_weights_of_another_recipe_are_refused(gpt2_folder, notes_file, tmp_path):
    notes = read_jsonl(notes_file)
    lora, _, info = finetune(notes, "ner", "dp-lora", epsilon=3.0, model=gpt2_folder, epochs=0.5, batch_size=4,
                             window=64, stride=64)
    save_finetuned(lora, info, tmp_path / "m")
    meta = json.loads((tmp_path / "m" / "finetune.json").read_text())
    meta["recipe"]["mode"] = "dp-prefix"
    (tmp_path / "m" / "finetune.json").write_text(json.dumps(meta))
    with pytest.raises(DataError, match="do not match the recipe"):
        load_finetuned(tmp_path / "m")
    (tmp_path / "m" / WEIGHTS).unlink()
    with pytest.raises(FileNotFoundError, match="not a fine-tuned model folder"):
        load_finetuned(tmp_path / "m")


@pytest.mark.slow  # end to end
def test_commands_end_to_end(gpt2_folder, tmp_path):
    notes = tmp_path / "notes.jsonl"
    r = runner.invoke(app, ["text", "generate", "--n-notes", "6", "--seed", "2", "--out", str(notes)])
    assert r.exit_code == 0, r.output
    assert len(read_jsonl(notes)) == 6

    r = runner.invoke(app, ["text", "mask", str(notes), "--out", str(tmp_path / "masked.jsonl")])
    assert r.exit_code == 0, r.output
    masked = [json.loads(line) for line in (tmp_path / "masked.jsonl").read_text().splitlines()]
    for m, n in zip(masked, read_jsonl(notes)):
        assert m["note_id"] == n.note_id and m["slots"]
        assert not any(s.text in m["text"] for s in n.phi if s.label in ("PATIENT", "MEDICALRECORD") and len(s.text) > 3)

    common = ["--model", gpt2_folder, "--epochs", "1", "--batch-size", "4", "--window", "64", "--stride", "64"]
    r = runner.invoke(app, ["text", "finetune", str(notes), "--task", "ner", "--mode", "dp-lora", "--epsilon", "3",
                            *common, "--out", str(tmp_path / "ner")])
    assert r.exit_code == 0, r.output
    assert "differential privacy" in r.output and "patient" in r.output
    manifest = read_manifest(tmp_path / "ner")  # the run-folder contract
    assert manifest.kind == "text-finetune" and manifest.models[0]["guarantee"]["unit"] == "patient"
    assert manifest.models[0]["ledger"] and manifest.settings["info"]["mode"] == "dp-lora"
    r = runner.invoke(app, ["text", "ner", str(tmp_path / "ner"), str(notes), "--max-tokens", "16",
                            "--out", str(tmp_path / "pred.jsonl")])
    assert r.exit_code == 0, r.output
    predicted = [json.loads(line) for line in (tmp_path / "pred.jsonl").read_text().splitlines()]
    assert all(set(row) == {"note_id", "entities"} for row in predicted)  # no note text unless --include-text
    assert [row["note_id"] for row in predicted] == [n.note_id for n in read_jsonl(notes)] and "micro" in r.output
    r = runner.invoke(app, ["report", str(tmp_path / "ner"), "--out", str(tmp_path / "report.html")])
    assert r.exit_code == 0, r.output
    html = (tmp_path / "report.html").read_text()
    assert "dpcare text finetune" in html and "patient" in html and "dp-lora" in html

    r = runner.invoke(app, ["text", "finetune", str(notes), "--task", "summarisation", "--mode", "non-private",
                            *common, "--out", str(tmp_path / "sum")])
    assert r.exit_code == 0, r.output
    assert "no privacy guarantee" in r.output and not (tmp_path / "sum" / "guarantee.json").exists()
    r = runner.invoke(app, ["text", "summarise", str(tmp_path / "sum"), str(notes), "--max-tokens", "8",
                            "--out", str(tmp_path / "sum.jsonl")])
    assert r.exit_code == 0, r.output
    assert "ROUGE-L" in r.output and len((tmp_path / "sum.jsonl").read_text().splitlines()) == 6
    wrong = runner.invoke(app, ["text", "summarise", str(tmp_path / "ner"), str(notes), "--out", str(tmp_path / "x")])
    assert wrong.exit_code == 2 and "not summarisation" in wrong.output


def test_summarisation_left_off_trains_on_its_measured_schedule(notes_file, tmp_path, monkeypatch):
    """`text finetune --task summarisation` without --batch-size / --epochs gets summarisation's measured 64
    patients a step for 2 epochs (issue 55); NER keeps the tagger's 128 for 5; what is given is kept."""
    seen = []

    def stop(settings, patients):  # before the run folder, the budget and the notes' text
        seen.append(settings)
        raise SettingsError("stopped by the test")

    monkeypatch.setattr("dpcare.text.lm.finetune.plan", stop)
    base = ["text", "finetune", str(notes_file), "--out", str(tmp_path / "run")]
    for args in (["--task", "summarisation"], ["--task", "summarisation", "--batch-size", "128", "--epochs", "5"],
                 ["--task", "summarisation", "--batch-size", "128"], ["--task", "ner"]):
        r = runner.invoke(app, [*base, *args])
        assert r.exit_code == 2 and "stopped by the test" in r.output
    summaries, given, one_given, ner = (s.dp for s in seen)
    assert (summaries.batch_size, summaries.epochs) == (64, 2.0) and summaries.epsilon == 3.0
    assert (given.batch_size, given.epochs) == (128, 5.0)
    assert (one_given.batch_size, one_given.epochs) == (128, 2.0)
    assert (ner.batch_size, ner.epochs) == (128, 5.0)
    assert not (tmp_path / "run").exists()


def test_finetune_with_a_budget_is_refused_before_any_note_is_read(gpt2_folder, notes_file, tmp_path, monkeypatch):
    budget = tmp_path / "budget.json"
    patients = len({n.patient_id for n in read_jsonl(notes_file)})
    # a second run of epsilon 3 (at the default delta, min(1e-5, 0.01/n)) cannot fit in epsilon 3.5 at delta 1e-4
    r = runner.invoke(app, ["budget", "init", str(budget), "--epsilon", "3.5", "--delta", str(min(1e-4, 0.9 / patients)),
                            "--dataset", "notes", "--unit", "patient", "--data", str(notes_file)])
    assert r.exit_code == 0, r.output
    args = ["text", "finetune", str(notes_file), "--mode", "dp-lora", "--epsilon", "3", "--model", gpt2_folder,
            "--epochs", "0.5", "--batch-size", "4", "--window", "64", "--stride", "64", "--budget", str(budget)]
    assert runner.invoke(app, [*args, "--out", str(tmp_path / "a")]).exit_code == 0
    release = json.loads(budget.read_text())["releases"][0]
    assert release["status"] == "done" and release["unit"] == "patient"
    assert release["epsilon"] == pytest.approx(3.0, abs=0.05)

    def no_reading(*a, **k):
        raise AssertionError("the notes were read before the budget check")

    monkeypatch.setattr("dpcare.text.readers.read_jsonl", no_reading)  # what read_notes calls for --format jsonl
    refused = runner.invoke(app, [*args, "--out", str(tmp_path / "b")])
    assert refused.exit_code == 2 and "budget" in refused.output.lower()
    assert not (tmp_path / "b").exists()


@pytest.mark.parametrize("extra, message", [
    (["--epsilon", "0"], "epsilon"),
    (["--model", "/no/such/model"], "unknown model path"),
    (["--mode", "dp-magic"], "dp-magic"),
    (["--clip-variant", "p99"], "--clip-variant must be one of"),
    (["--clip-variant", "adaptive-median", "--adaptive-clip", "0.5"], "give one"),
    (["--steps", "5"], "No such option"),
    (["--task", "summarisation", "--hints", "lexicon"], "is for a token tagger"),
    (["--hints", "umls"], "--hints must be one of"),
    ([], "--batch-size 128 expected patients a step, but the notes hold"),  # the default batch: every patient
])
def test_finetune_errors_name_the_problem(extra, message, notes_file, tmp_path):
    r = runner.invoke(app, ["text", "finetune", str(notes_file), *extra, "--out", str(tmp_path / "m")])
    assert r.exit_code == 2 and message in r.output, r.output


def test_a_non_empty_out_is_refused_before_any_note_is_read(notes_file, tmp_path, monkeypatch):
    out = tmp_path / "m"
    out.mkdir()
    (out / "other.txt").write_text("another run's file")

    def no_reading(*a, **k):
        raise AssertionError("the notes were read before the output folder was checked")

    monkeypatch.setattr("dpcare.text.read_jsonl", no_reading)
    r = runner.invoke(app, ["text", "finetune", str(notes_file), "--batch-size", "2", "--out", str(out)])
    assert r.exit_code == 2 and "not empty" in r.output, r.output
    assert (out / "other.txt").read_text() == "another run's file"


def test_missing_or_malformed_notes_are_named(tmp_path):
    r = runner.invoke(app, ["text", "finetune", str(tmp_path / "none.jsonl"), "--out", str(tmp_path / "m")])
    assert r.exit_code == 2 and "no such file" in r.output
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"note_id": "a", "patient_id": "p", "text": "x"}\nnot json\n')
    r = runner.invoke(app, ["text", "finetune", str(bad), "--out", str(tmp_path / "m")])
    assert r.exit_code == 2 and "bad.jsonl:2" in r.output
    r = runner.invoke(app, ["text", "ner", str(tmp_path), str(bad), "--out", str(tmp_path / "p.jsonl")])
    assert r.exit_code == 2 and "not a fine-tuned model folder" in r.output


def test_the_text_commands_read_a_folder_of_txt_notes_and_a_json_array(tmp_path):
    folder = tmp_path / "notes"
    folder.mkdir()
    (folder / "a.txt").write_text("Mr. John Smith was seen on 3/14/2019 for chest pain.")
    (folder / "b.txt").write_text("Patient Mary Jones, MRN 123-45-678, discharged home.")
    out = tmp_path / "masked.jsonl"
    r = runner.invoke(app, ["text", "mask", str(folder), "--format", "txt", "--out", str(out)])
    assert r.exit_code == 0, r.output
    views = [json.loads(line) for line in out.read_text().splitlines()]
    assert sorted(v["note_id"] for v in views) == ["a", "b"] and "Smith" not in out.read_text()
    array = tmp_path / "notes.json"
    array.write_text(json.dumps({"note_id": "a", "patient_id": "p", "text": "x"}))
    r = runner.invoke(app, ["text", "mask", str(array), "--format", "json", "--out", str(tmp_path / "m.jsonl")])
    assert r.exit_code == 2 and "one JSON array of note objects" in r.output, r.output
    r = runner.invoke(app, ["text", "mask", str(array), "--out", str(tmp_path / "m.jsonl")])  # jsonl by default
    assert r.exit_code == 0, r.output
    r = runner.invoke(app, ["text", "mask", str(folder), "--out", str(tmp_path / "m2.jsonl")])
    assert r.exit_code == 2 and "--format jsonl" in r.output, r.output
