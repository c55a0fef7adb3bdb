"""The note classifier's public baseline (dpcare.text.classify.baseline): computed on the test notes only, never
reading a private span (the sensitive spans' text changed: the baseline's inputs and scores bit-identical), the
verdict flips when the private model is replaced by the baseline itself, and the run reports it (run.json
``baselines``, the notes the report prints, the console)."""

from __future__ import annotations

import random
from dataclasses import replace

import pytest
import torch
from helpers import GoldMasker
from typer.testing import CliRunner

from dpcare.cli import app
from dpcare.runs import read_manifest
from dpcare.settings import DPSettings
from dpcare.text import generate_corpus, write_jsonl
from dpcare.text.classify import baseline as bl
from dpcare.text.classify.recipe import (
    NoteClassifier,
    fit,
    predict_scores,
    prepare_views,
    train_views,
)
from dpcare.text.classify.settings import NoteClassifierSettings

TINY = {"top_k": 5, "max_tokens": 64, "emb_dim": 16, "n_filters": 8, "kernel_size": 3, "impute": False,
        "mask_ner": False}


def tiny(method: str = "fusiondp", **dp) -> NoteClassifierSettings:
    return NoteClassifierSettings(method=method, **TINY, dp=DPSettings(**{"epsilon": 5.0, "batch_size": 8, "epochs": 2,
                                                                          "accountant": "rdp", "unit": "patient",
                                                                          **dp}))


def other_spans(notes, seed: int = 7):
    """The notes with every PHI span's text replaced by other letters of the same length (same offsets)."""
    rng = random.Random(seed)
    out = []
    for n in notes:
        text = list(n.text)
        for s in n.phi:
            for i in range(s.start, s.end):
                if text[i].isalnum():
                    text[i] = rng.choice("QZXJKVW")
        text = "".join(text)
        out.append(replace(n, text=text, phi=tuple(replace(s, text=text[s.start:s.end]) for s in n.phi)))
    return out


@pytest.fixture(scope="module")
def notes():
    return generate_corpus(60, sources=("support2",), seed=1)


@pytest.fixture(scope="module")
def fusion(notes):
    """FusionDP fitted on the notes and on the same notes with other private-span text (gold masker both)."""
    captured = []
    real = bl.public_views

    def keep(views):
        pub = real(views)
        captured.append((views, pub))
        return pub

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(bl, "public_views", keep)
        a = fit(notes, tiny(), masker=GoldMasker(notes), progress=False)
        changed = other_spans(notes)
        b = fit(changed, tiny(), masker=GoldMasker(changed), progress=False)
    return a, b, captured


def test_the_public_baseline_never_reads_a_private_span(fusion, notes):
    a, b, captured = fusion
    (views_a, pub_a), (views_b, pub_b) = captured
    # the private note differs (red if the span change did not reach the text the private model reads) ...
    assert not torch.equal(views_a.tensors["train"]["x"], views_b.tensors["train"]["x"])
    # ... every tensor the baseline reads is bit-identical, and so is what it scores
    for split in ("train", "val", "test"):
        assert set(pub_a.tensors[split]) == {"x", "x_pub", "y", "patient"}
        for key, t in pub_a.tensors[split].items():
            assert torch.equal(t, pub_b.tensors[split][key]), (split, key)
            assert torch.equal(t, views_a.tensors[split]["x_pub" if key == "x" else key])  # x is the masked note
    assert a.baseline["metrics"] == b.baseline["metrics"]
    assert a.baseline["comparisons"][0]["baseline"] == b.baseline["comparisons"][0]["baseline"]
    assert a.baseline["method"] in ("sgd-pub", "tfidf-logistic") and a.baseline["panel"] == b.baseline["panel"]
    assert [c["name"] for c in a.baseline["panel"]] == [bl.PUBLIC_VIEW, bl.TFIDF]
    best = max(a.baseline["panel"], key=lambda c: c["validation f1_micro"])
    assert a.baseline["name"] == best["name"] and a.baseline["chosen on"] == "validation micro-F1"


def test_the_baseline_is_scored_on_the_test_notes_only(fusion, notes):
    a, _, captured = fusion
    views, _ = captured[0]
    b, c = a.baseline, a.baseline["comparisons"][0]
    test_patients = {notes[i].patient_id for i in a.split["test"]}
    assert b["test notes"] == len(a.split["test"]) == len(views.tensors["test"]["y"])
    assert c["units"] == b["test patients"] == len(test_patients)  # resampled by patient
    assert c["model"] == pytest.approx(a.metrics["test f1_micro"])  # the private model's own test figure
    assert c["baseline"] == pytest.approx(b["metrics"]["test f1_micro"])
    assert c["verdict"].startswith(("beats the public baseline", "no better than the public baseline"))


def test_the_verdict_flips_when_the_model_is_the_baseline_itself(fusion, notes, monkeypatch):
    """The sgd-pub model, retrained as the baseline is (same seed, same public views), stands in for the private
    model: difference 0, no better. An oracle of the test codes beats it. (The TF-IDF coder made to lose the
    validation choice, so that sgd-pub is the baseline.)"""
    real = bl.tfidf_coder
    monkeypatch.setattr(bl, "tfidf_coder", lambda views, seed=0: {**real(views, seed), "validation f1_micro": -1.0})
    _, _, captured = fusion
    views, pub = captured[0]
    settings = tiny()
    same = train_views(pub, replace(settings, method="sgd-pub"))
    test = views.tensors["test"]
    rows = {tuple(x.tolist()): p for x, p in zip(test["x"], test["x_pub"])}

    class AsBaseline(torch.nn.Module):  # reads the private note, answers as the baseline on its masked view
        def forward(self, ids):
            return same.model(torch.stack([rows[tuple(x.tolist())] for x in ids]))

    targets = {tuple(x.tolist()): y for x, y in zip(test["x"], test["y"])}

    class Oracle(torch.nn.Module):
        def forward(self, ids):
            return torch.stack([targets[tuple(x.tolist())] for x in ids]) * 40 - 20

    flat = bl.public_baseline(views, settings, predict_scores(AsBaseline(), test["x"]),
                              same.best["threshold"])["comparisons"][0]
    assert flat["difference"] == 0 and not flat["beats"] and flat["verdict"].startswith("no better")
    oracle = bl.public_baseline(views, settings, predict_scores(Oracle(), test["x"]), 0.5)["comparisons"][0]
    assert oracle["beats"] and oracle["verdict"].startswith("beats the public baseline")


def test_the_verdict_flips_when_the_model_is_the_tfidf_coder(fusion, monkeypatch):
    """The TF-IDF coder, refitted on the same public views, stands in for the private model: difference 0."""
    _, _, captured = fusion
    views, pub = captured[0]
    coder = bl.tfidf_coder(pub)
    monkeypatch.setattr(bl, "tfidf_coder", lambda views, seed=0: {**coder, "validation f1_micro": 2.0})
    b = bl.public_baseline(views, tiny(), coder["scores"], coder["threshold"])
    assert b["method"] == "tfidf-logistic" and b["comparisons"][0]["difference"] == 0
    assert not b["comparisons"][0]["beats"]
    assert 0 <= coder["validation f1_micro"] <= 1 and coder["scores"].shape == views.tensors["test"]["y"].shape


def test_dp_sgd_is_compared_with_the_constant_prediction(notes):
    views = prepare_views(notes, tiny("dp-sgd"), progress=False)
    test = views.tensors["test"]
    b = bl.public_baseline(views, tiny("dp-sgd"), torch.ones(len(test["y"]), 5), 0.5)
    assert b["method"] == "constant" and b["name"] == bl.CONSTANT
    y = test["y"]
    assert b["metrics"]["test f1_micro"] == pytest.approx(2 * y.sum().item() / (y.numel() + y.sum().item()))
    c = b["comparisons"][0]
    assert c["difference"] == 0 and not c["beats"]  # predicting every code IS the baseline


def test_classify_reports_the_baseline(notes, tmp_path):
    path = write_jsonl(notes, tmp_path / "notes.jsonl")
    run = tmp_path / "run"
    r = CliRunner().invoke(app, ["text", "classify", str(path), "--method", "dp-sgd", "--top-k", "5", "--max-tokens",
                                 "64", "--emb-dim", "16", "--filters", "8", "--kernel", "3", "--no-impute",
                                 "--no-mask-ner", "--epochs", "1", "--batch-size", "8", "--accountant", "rdp",
                                 "--out", str(run)])
    assert r.exit_code == 0, r.output
    m = read_manifest(run)
    verdict = m.baselines[0]["comparisons"][0]["verdict"]
    assert f"dp-sgd {verdict}" in r.output and f"dp-sgd: {verdict}" in m.notes
    assert m.metrics[1]["model"] == f"public baseline: {bl.CONSTANT}"
    assert NoteClassifier.load(run).baseline == m.baselines[0]
    r = CliRunner().invoke(app, ["report", str(run), "--out", str(tmp_path / "report.html")])
    assert r.exit_code == 0, r.output
    assert "public baseline" in (tmp_path / "report.html").read_text()
