"""Public baselines of the fine-tuned note models (dpcare.text.baselines) and their verdicts in `dpcare text ner`
and `dpcare text summarise`: LEAD-k, per-note metrics that agree with the corpus metrics, the comparison
resampling patients, and the verdict flipping when the fine-tuned model is replaced by the baseline itself."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from typer.testing import CliRunner

from dpcare.cli import app
from dpcare.exceptions import DataError
from dpcare.text import generate_corpus, read_jsonl, write_jsonl
from dpcare.text.baselines import (
    BASE_MODEL,
    compare_on_notes,
    lead,
    lead_name,
    micro_f1,
    rouge_l_per_note,
    span_counts,
)
from dpcare.text.evaluation import MICRO, rouge_l, span_scores
from dpcare.text.lexicon_ner import NAME as LEXICON
from dpcare.text.lexicon_ner import lexicon_spans
from dpcare.text.spans import ENTITY_LABELS, Span

runner = CliRunner()


def test_lead_takes_the_first_sentences():
    text = "Admitted with chest pain. Troponin negative!  Discharged home?\nFollow up in clinic. Extra."
    assert lead(text, 2) == "Admitted with chest pain. Troponin negative!"
    assert lead(text) == "Admitted with chest pain. Troponin negative! Discharged home?"
    assert lead("one line\nsecond line", 1) == "one line"
    with pytest.raises(DataError, match="k >= 1"):
        lead(text, 0)


def test_per_note_metrics_agree_with_the_corpus_metrics():
    notes = generate_corpus(12, seed=3)
    gold = [[s for s in n.entities if s.label in ENTITY_LABELS] for n in notes]
    predicted = [g[::2] + [Span(0, 3, "test", n.text[:3])] for g, n in zip(gold, notes)]
    counts = span_counts(gold, predicted)
    assert micro_f1(None, counts) == pytest.approx(span_scores(gold, predicted).loc[MICRO, "f1"])
    refs, preds = [n.summary_target for n in notes], [lead(n.summary_source) for n in notes]
    assert rouge_l_per_note(refs, preds).mean() == pytest.approx(rouge_l(refs, preds)["fmeasure"])


def test_the_verdict_flips_when_the_model_is_the_baseline_itself():
    rng = np.random.default_rng(0)
    patients = [f"p{i // 2}" for i in range(40)]  # two notes per patient
    base = rng.uniform(0.1, 0.4, 40)
    same = compare_on_notes("ROUGE-L F1", base.copy(), {BASE_MODEL: base}, patients)
    c = same["comparisons"][0]
    assert c["difference"] == 0 and not same["beats"] and same["verdict"].startswith("no better")
    assert c["units"] == same["patients"] == 20  # resampled by patient
    better = compare_on_notes("ROUGE-L F1", base + 0.2, {BASE_MODEL: base}, patients)
    assert better["beats"] and better["verdict"].startswith("beats the public baseline")
    # against every baseline: one it does not beat decides
    both = compare_on_notes("ROUGE-L F1", base + 0.2, {BASE_MODEL: base, lead_name(): base + 0.2}, patients)
    assert not both["beats"] and lead_name() in both["verdict"]
    # NER: per-note counts [tp, predicted, gold]
    gold = rng.integers(1, 5, 40)
    perfect = np.stack([gold, gold, gold], 1).astype(float)
    none = np.stack([0 * gold, 0 * gold, gold], 1).astype(float)
    assert compare_on_notes("ner F1", perfect, {BASE_MODEL: none}, patients)["beats"]
    assert not compare_on_notes("ner F1", none, {BASE_MODEL: none}, patients)["beats"]


@pytest.fixture(scope="module")
def notes_file(tmp_path_factory):
    return write_jsonl(generate_corpus(6, seed=2), tmp_path_factory.mktemp("notes") / "notes.jsonl")


@pytest.mark.parametrize("task", ["ner", "summarisation"])
def test_the_commands_report_no_better_when_the_model_is_the_base_model(task, gpt2_folder, notes_file, tmp_path,
                                                                        monkeypatch):
    """The 'fine-tuned' folder loads as the untouched base model: the base-model comparison is exactly 0 and
    the verdict says do not release; the baselines are scored on the notes given only."""
    from dpcare.lm import load_causal_lm
    from dpcare.text.lm import saved

    recipe = {"task": task, "mode": "dp-lora", "model": gpt2_folder, "layers": None, "labels": list(ENTITY_LABELS),
              "window": 64, "stride": 64}
    monkeypatch.setattr(saved, "load_finetuned", lambda folder: (*load_causal_lm(gpt2_folder), {"recipe": recipe}))
    if task == "ner":
        args = ["text", "ner", str(tmp_path), str(notes_file), "--max-tokens", "8"]
    else:
        args = ["text", "summarise", str(tmp_path), str(notes_file), "--max-tokens", "6", "--keep-identifiers"]
    r = runner.invoke(app, [*args, "--out", str(tmp_path / "o.jsonl")])
    assert r.exit_code == 0, r.output
    assert "dp-lora no better than the public baseline: do not release" in r.output
    patients = len({n.patient_id for n in read_jsonl(notes_file)})  # the notes given, resampled by patient
    # one line per baseline; the verdict is the binding one's
    line = next(x for x in r.output.splitlines() if x.startswith(f"  vs {BASE_MODEL}"))
    assert line.endswith("improvement +0.000 [+0.000, +0.000]")
    first = LEXICON if task == "ner" else lead_name()
    assert f"  vs {first}: {'ner F1' if task == 'ner' else 'ROUGE-L F1'}" in r.output
    assert f"over {patients} test units" in r.output
    r = runner.invoke(app, [*args, "--no-baseline", "--out", str(tmp_path / "p.jsonl")])
    assert r.exit_code == 0 and BASE_MODEL not in r.output and (task != "ner" or f"  vs {LEXICON}" in r.output)


def _split_by_patient(notes_file, tmp_path):
    """The notes file cut into a training and a held-out file with disjoint patients."""
    notes = read_jsonl(notes_file)
    patients = sorted({n.patient_id for n in notes})
    held = set(patients[: len(patients) // 2])
    train = write_jsonl([n for n in notes if n.patient_id not in held], tmp_path / "train.jsonl")
    test = write_jsonl([n for n in notes if n.patient_id in held], tmp_path / "test.jsonl")
    return train, test, held


@pytest.mark.slow  # end to end
@pytest.mark.parametrize("task", ["ner", "summarisation"])
def test_finetune_test_scores_the_held_out_notes_beside_the_base_model(task, gpt2_folder, notes_file, tmp_path):
    """`text finetune --test`: the model and its public baselines are scored on the held-out patients only, in
    run.json, on the console and in the report; a model that is the base model (non-private, learning rate
    1e-12: greedy decoding unchanged) gets an improvement of exactly 0 and the verdict 'do not release'."""
    from dpcare.runs import read_manifest

    train, test, held = _split_by_patient(notes_file, tmp_path)
    args = ["text", "finetune", str(train), "--test", str(test), "--task", task, "--mode", "non-private",
            "--lr", "1e-12", "--model", gpt2_folder, "--epochs", "1", "--batch-size", "4", "--window", "64",
            "--stride", "64", "--out", str(tmp_path / "m")]
    r = runner.invoke(app, args)
    assert r.exit_code == 0, r.output
    assert "non-private no better than the public baseline: do not release" in r.output
    m = read_manifest(tmp_path / "m")
    record = m.baselines[0]
    assert record["patients"] == len(held) and record["notes"] == len(read_jsonl(test))  # the held-out notes only
    names = [c["baseline_name"] for c in record["comparisons"]]
    assert names == ([LEXICON, BASE_MODEL] if task == "ner" else [lead_name(), BASE_MODEL])
    base = next(c for c in record["comparisons"] if c["baseline_name"] == BASE_MODEL)
    assert base["difference"] == 0 and base["units"] == len(held) and not record["beats"]
    assert m.data["test patients"] == len(held) and m.headline == [f"test {record['comparisons'][0]['metric']}"]
    assert any(n.endswith("do not release") or "do not release" in n for n in m.notes)
    r = runner.invoke(app, ["report", str(tmp_path / "m"), "--out", str(tmp_path / "r.html")])
    assert r.exit_code == 0 and "do not release" in (tmp_path / "r.html").read_text()


def test_finetune_test_is_checked_before_training(gpt2_folder, notes_file, tmp_path, monkeypatch):
    """--test sharing a patient with the training notes, or without gold annotations, is refused before any
    training note is read and leaves no run folder."""
    train, test, held = _split_by_patient(notes_file, tmp_path)
    mixed = write_jsonl(read_jsonl(test) + read_jsonl(train)[:1], tmp_path / "mixed.jsonl")
    bare = write_jsonl([replace(n, entities=(), phi=(), summary_target="") for n in read_jsonl(test)],
                       tmp_path / "bare.jsonl")

    def no_training(*a, **k):
        raise AssertionError("training started before --test was checked")

    monkeypatch.setattr("dpcare.text.lm.finetune.finetune_with", no_training)
    base = ["text", "finetune", str(train), "--model", gpt2_folder, "--epochs", "1", "--batch-size", "2"]
    for path, task, message in [(mixed, "ner", "also in the training notes"), (bare, "ner", "no note has a gold span"),
                                (bare, "summarisation", "no note has a reference summary"),
                                (tmp_path / "none.jsonl", "ner", "no such file")]:
        r = runner.invoke(app, [*base, "--task", task, "--test", str(path), "--out", str(tmp_path / "m")])
        assert r.exit_code == 2 and message in r.output, r.output
        assert not (tmp_path / "m").exists()


def test_the_lexicon_finds_public_vocabulary_by_longest_match():
    text = ("Hx of Paroxysmal atrial fibrillation and obstructive sleep apnea (adult) (pediatric). Started potassium chloride "
            "and metformin; potassium 3.1, platelet count 140. Pt was seen and the pain is better.")
    found = {(s.text, s.label) for s in lexicon_spans(text)}
    assert ("Paroxysmal atrial fibrillation", "problem") in found and ("metformin", "treatment") in found
    assert ("obstructive sleep apnea (adult) (pediatric)", "problem") in found  # the opened bracket closed
    assert ("potassium chloride", "treatment") in found and ("potassium", "test") in found  # longest, then test
    assert ("platelet count", "test") in found
    assert not {w for w, _ in found} & {"and", "was", "the", "Pt", "of"}  # stop words and short words never match
    assert all(text[s.start:s.end] == s.text for s in lexicon_spans(text))


def test_ner_scoring_beats_only_what_beats_the_lexicon():
    """The lexicon is a baseline of every NER score with i2b2 labels: its own spans as the model's give
    difference 0 and 'do not release'; the gold spans beat it."""
    from dpcare.text.baselines import compare_on_notes, span_counts

    notes = generate_corpus(12, seed=1)
    gold = [list(n.entities) for n in notes]
    lexicon = span_counts(gold, [lexicon_spans(n.text) for n in notes])
    patients = [n.patient_id for n in notes]
    same = compare_on_notes("ner F1", lexicon.copy(), {LEXICON: lexicon}, patients)
    assert not same["beats"] and same["comparisons"][0]["difference"] == 0
    assert compare_on_notes("ner F1", span_counts(gold, gold), {LEXICON: lexicon}, patients)["beats"]
