"""The text FusionDP study (dpcare.studies.fusiondp_text; Zeng et al., Section 5.3) on a few generated notes:
the nine methods run through the note-classifier recipe, every private run meets its target and lists the
uncounted selection, runs resume from the journal, the study writes a run folder that the report reads, and
bad inputs give clear errors. The imputer is a stub or a tiny GPT-2 here (tests/test_text_imputation.py
covers the language-model imputer; tests/test_isolation_text.py what each method and view may read)."""

import json
import math
from dataclasses import replace

import pytest
import torch

from dpcare.exceptions import DataError, SettingsError, SpecError
from dpcare.runs import read_manifest
from dpcare.runs.folder import staging_path
from dpcare.studies import fusiondp_text as ftb
from dpcare.runs.journal import read_journal
from dpcare.text import SpanMasker, generate_corpus
from dpcare.text.classify.data import PLACEHOLDER, TextViews, label_set, prepare_text_views
from dpcare.text.spans import Note


class LabelImputer:
    """Fills each masked span with its type in lower case; records the notes it was given."""

    def __init__(self):
        self.seen = []

    def impute(self, masked, checkpoint=None):
        self.seen += [(m.note_id, m.text, tuple(m.slots)) for m in masked]
        return [[s.label.lower() for s in m.slots] for m in masked]

    def stats(self):
        return {"notes": len(self.seen)}


@pytest.fixture(scope="module")
def notes():
    return generate_corpus(80, seed=1)


@pytest.fixture(scope="module")
def views_path(notes, tmp_path_factory):
    out = tmp_path_factory.mktemp("views")
    prepare_text_views(notes, out, top_k=8, max_tokens=128, emb_dim=16, imputer=LabelImputer(),
                       masker=SpanMasker(ner=False, placeholder=PLACEHOLDER), progress=False)
    return out / "views.pt"


def tiny(**kw):
    bench = ftb.TextFusionBenchmark(n_notes=80, top_k=8, max_tokens=128, emb_dim=16, n_filters=8, kernel_size=3,
                                    epsilons=(5.0,), seeds=2, epochs=2, batch_size=16, workers=1)
    return replace(bench, **kw)


def test_views_hold_three_encodings_split_by_patient(views_path):
    views = TextViews.load(views_path)
    t = views.tensors
    assert len(views.codes) == 8 and views.embedding.shape[1] == 16
    for split in ("train", "val", "test"):
        assert t[split]["x"].shape == t[split]["x_pub"].shape == t[split]["x_hyb"].shape
        assert t[split]["y"].shape[1] == 8
    mask_id = 2
    assert (t["train"]["x_pub"] == mask_id).any() and not (t["train"]["x_hyb"] == mask_id).any()
    assert sum(views.info["notes"].values()) == 80


@pytest.mark.slow  # end to end
def test_nine_methods_run_with_guarantees_and_resume(views_path, tmp_path, monkeypatch):
    bench = tiny()
    table = ftb.run_text_benchmark(views_path, bench, tmp_path, progress=False)
    assert set(table["method"]) == set(ftb.METHODS) and len(ftb.METHODS) == 9
    runs = [json.loads(line) for line in (tmp_path / "runs.jsonl").read_text().splitlines()]
    assert len(runs) == len(bench.tasks()) == 3 * 2 + 6 * 2
    for r in runs:
        if r["method"] in ftb.NONPRIVATE:
            assert math.isinf(r["epsilon"]) and r["guarantee"] is None
            continue
        g = r["guarantee"]
        assert r["epsilon"] <= 5.0 * 1.001
        assert ftb.SELECTION in g["uncounted"]
        assert (ftb.LABEL_SET in g["uncounted"]) == (r["method"] == "dp-sgd")
        assert g["unit"] == ("patient" if r["method"] == "dp-sgd" else "features")
        assert 1 <= r["best_epoch"] <= 2 and 0 < r["threshold"] < 1
    assert {"claim", "mean_diff", "wins", "wilcoxon_p"} <= set(ftb.pd.read_csv(tmp_path / "paired.csv").columns)
    assert (tmp_path / "f1_vs_epsilon.png").stat().st_size > 0
    assert "Not counted in epsilon" in (tmp_path / "table.md").read_text()
    m = ftb.manifest(table, json.loads((tmp_path / "guarantees.json").read_text()), bench)
    assert len(m.models) == 3 + 6 and m.models[0]["guarantee"] is None  # one per method and epsilon
    assert all(e["guarantee"]["epsilon"] <= 5.0 * 1.001 for e in m.models if e["guarantee"])

    def refuse(*args, **kwargs):
        raise AssertionError("a finished run was trained again")

    monkeypatch.setattr(ftb, "train_text_one", refuse)
    again = ftb.run_text_benchmark(views_path, bench, tmp_path, progress=False)
    assert again.equals(table)
    with pytest.raises(SpecError, match="other settings"):  # a journal of other settings is not reused
        ftb.run_text_benchmark(views_path, replace(bench, lr=0.5), tmp_path, progress=False)
    with pytest.raises(SpecError, match="other data"):  # nor one of other notes
        ftb.run_text_benchmark(views_path, bench, tmp_path, progress=False, data="sha256:other")


def test_journal_cuts_a_half_written_last_line(tmp_path):
    path = tmp_path / "runs.jsonl"
    first = json.dumps({"method": "sgd-org"}) + "\n"
    path.write_text(first + '{"method": "dp-')
    assert read_journal(path) == [{"method": "sgd-org"}]
    assert path.read_text() == first  # the next record starts on a fresh line


def test_epoch_selection_keeps_the_best_validation_state():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Embedding(10, 3), torch.nn.Flatten(), torch.nn.Linear(6, 2))
    val = {"x": torch.randint(0, 10, (20, 2)), "y": (torch.rand(20, 2) < 0.5).float()}
    sel = ftb.EpochSelection(model, val, total_steps=13, epochs=2)  # 100 units, batch 16: epochs end at 6 and 13
    assert set(sel.ends) == {6, 13}  # the last step is always scored
    sel(1)
    assert sel.best["f1_micro"] == -1.0  # not an epoch's end
    sel(6)
    first = sel.best
    with torch.no_grad():
        model[2].bias.fill_(-50.0)  # predicts nothing: micro-F1 0, not better
    sel(13)
    assert sel.best is first and first["epoch"] == 1


def test_bad_inputs_give_clear_errors(notes):
    with pytest.raises(DataError, match="no ICD codes"):
        prepare_text_views([replace(notes[0], icd_codes=())], "unused", imputer=LabelImputer())
    with pytest.raises(DataError, match="empty"):
        prepare_text_views([], "unused", imputer=LabelImputer())
    with pytest.raises(DataError, match="too few"):
        prepare_text_views(notes[:2], "unused", imputer=LabelImputer())
    with pytest.raises(DataError, match="occur in no training note"):
        label_set(notes[:10], 5, codes=["Z999999"])
    dates_only = [Note(f"n{i}", f"p{i}", "03/04/2021", icd_codes=("A41.9",)) for i in range(10)]
    with pytest.raises(DataError, match="nothing public left after masking"):
        prepare_text_views(dates_only, "unused", imputer=LabelImputer(),
                           masker=SpanMasker(ner=False, placeholder=PLACEHOLDER))
    for bad in ({"methods": ("sgd-org", "magic")}, {"epsilons": (0.0,)}, {"main_epsilon": 3.0}, {"seeds": 0}):
        with pytest.raises(SpecError):
            tiny(**bad).validate()
    with pytest.raises(SettingsError, match="max_tokens"):  # every run's recipe settings are checked up front
        tiny(max_tokens=0).validate()


@pytest.mark.slow  # end to end
def test_the_study_runs_each_cell_as_the_recipe_would(views_path):
    """A study cell is the recipe's training on the same views with the study's settings for that cell."""
    from dpcare.text.classify.recipe import train_views

    bench = tiny()
    row = ftb.train_text_one("fusiondp", 5.0, 1, str(views_path), bench)
    views = TextViews.load(views_path)
    s = bench.settings_for("fusiondp", 5.0, 1, patients=int(views.tensors["train"]["patient"].max()) + 1)
    assert s.dp.delta == row["delta"]  # the study's pinned 1/n^1.1 (tests/test_study_delta_pins.py)
    assert (s.method, s.dp.clip_norm, s.alpha, s.beta, s.dp.seed, s.dp.epsilon) == ("fusiondp", 1.0, 0.5, 0.5, 1, 5.0)
    trained = train_views(views, s)
    assert (row["best_epoch"], row["threshold"], row["epsilon"]) == (trained.best["epoch"], trained.best["threshold"],
                                                                      trained.ledger.epsilon())


@pytest.mark.slow  # end to end
def test_the_study_writes_a_run_folder_resumes_and_is_reported(notes, gpt2_folder, tmp_path, monkeypatch):
    """The whole study on a tiny GPT-2 imputer: interrupted after one run it resumes from the staging folder's
    journal (the views are not prepared again; on other notes it is refused before any run), finishes with
    run.json read by the report, releases no views, and a finished folder is not overwritten."""
    bench = tiny(methods=("sgd-org", "dp-sgd", "fusiondp"), seeds=1, epochs=1)
    out = tmp_path / "study"
    real, calls = ftb.train_text_one, []

    def failing(method, *args):
        calls.append(method)
        if method == "fusiondp":
            raise RuntimeError("interrupted")
        return real(method, *args)

    monkeypatch.setattr(ftb, "train_text_one", failing)
    with pytest.raises(RuntimeError, match="interrupted"):
        ftb.run_fusiondp_text(bench, out, notes=notes, lm=gpt2_folder, progress=False)
    assert len(read_journal(staging_path(out) / "runs.jsonl")) == 2 and not out.exists()
    with pytest.raises(SettingsError, match="other settings"):
        ftb.run_fusiondp_text(replace(bench, lr=0.5), out, notes=notes, lm=gpt2_folder, progress=False)
    assert {r["data"] for r in read_journal(staging_path(out) / "runs.jsonl")} == {ftb.notes_digest(notes)}
    other = [replace(notes[0], text=notes[0].text + " Seen again in clinic.")] + list(notes[1:])
    calls.clear()  # failing() records any training
    with pytest.raises(SpecError, match="other data"):  # one changed note: the journal is refused
        ftb.run_fusiondp_text(bench, out, notes=other, lm=gpt2_folder, progress=False)
    journal = staging_path(out) / "runs.jsonl"
    journal.rename(kept := tmp_path / "runs.jsonl")  # as if stopped during the first run: the views alone
    with pytest.raises(SpecError, match="other notes"):
        ftb.run_fusiondp_text(bench, out, notes=other, lm=gpt2_folder, progress=False)
    kept.rename(journal)
    assert calls == []

    def no_preparing(*a, **k):
        raise AssertionError("the views were prepared again")

    calls.clear()
    monkeypatch.setattr(ftb, "train_text_one", lambda method, *a: (calls.append(method), real(method, *a))[1])
    monkeypatch.setattr(ftb, "prepare_views", no_preparing)
    table = ftb.run_fusiondp_text(bench, out, notes=notes, lm=gpt2_folder, progress=False)
    assert calls == ["fusiondp"] and set(table["method"]) == {"sgd-org", "dp-sgd", "fusiondp"}
    m = read_manifest(out)
    assert m.kind == "study:fusiondp-text" and [e["name"] for e in m.models] == ["sgd-org", "dp-sgd eps=5",
                                                                              "fusiondp eps=5"]
    assert m.models[2]["guarantee"]["unit"] == "features" and ftb.SELECTION in m.models[2]["guarantee"]["uncounted"]
    assert not (out / "checkpoints").exists() and (out / "data" / "data.json").exists()
    digest = ftb.notes_digest(notes)  # resuming needed it; nothing released holds it
    assert not [f for f in out.rglob("*") if f.is_file() and digest.encode() in f.read_bytes()]
    assert "data" not in read_journal(out / "runs.jsonl")[0]
    assert json.loads((out / "data" / "data.json").read_text())["imputation"]["notes"] == len(notes)
    from dpcare.report import write_report

    html = write_report([out], tmp_path / "report.html").read_text()
    assert "fusiondp-text" in html and "NOT counted in epsilon" in html and "masker missed" in html
    with pytest.raises(SettingsError, match="not empty"):
        ftb.run_fusiondp_text(bench, out, notes=notes, lm=gpt2_folder, progress=False)
