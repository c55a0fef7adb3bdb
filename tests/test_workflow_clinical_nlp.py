"""`dpcare benchmark clinical-nlp` (dpcare.studies.clinical_nlp) on a tiny GPT-2 saved as a local model folder:
the grid, the run folder (run.json read by the report, one run per folder, resume by rerun from the staging
folder's journal, --tables-only on a finished folder), the patient split, and what the held-out side sees
(bit-identical when the training notes change)."""

from __future__ import annotations

import hashlib
import json
import math
import pickle
import shutil
from dataclasses import replace

import pytest
import torch

from dpcare.exceptions import DataError, SettingsError, SpecError
from dpcare.runs import read_manifest
from dpcare.runs.folder import staging_path
from dpcare.runs.journal import read_journal
from dpcare.studies import clinical_nlp as cnb
from dpcare.text import generate_corpus
from dpcare.text.baselines import BASE_MODEL, lead_name
from dpcare.text.spans import Note
from lm_fixtures import tiny_gpt2


@pytest.fixture(scope="module")
def tiny_folder(tmp_path_factory):
    model, tok = tiny_gpt2()
    folder = tmp_path_factory.mktemp("tiny-gpt2")
    model.config.architectures = ["GPT2LMHeadModel"]
    model.save_pretrained(folder)
    tok.save_pretrained(folder)
    return str(folder)


@pytest.fixture(scope="module")
def corpus():
    return generate_corpus(12, sources=("support2",), seed=3)


def small(folder: str, **kw) -> cnb.ClinicalNLPBenchmark:
    base = dict(n_notes=12, held_out=0.34, model=folder, layers=None, epochs=1.0, batch_size=4, epsilons=(3.0,),
                eval_notes=2, summary_tokens=8, ner_tokens=16, window=64, workers=1)
    return cnb.ClinicalNLPBenchmark(**{**base, **kw})


def test_the_grid_has_table_1_and_the_epsilon_sweep_of_table_2():
    bench = cnb.ClinicalNLPBenchmark(sweep_modes=("dp-lora",), tasks=cnb.TASKS, clip_ablation=True)
    cells = bench.cells()
    ner = [(m, e) for t, m, e, _, v in cells if t == "ner" and v == "fixed"]
    assert ("non-private", None) in ner and ("dp-full", 3.0) in ner and ("dp-prefix", 3.0) in ner
    assert [e for m, e in ner if m == "dp-lora"] == [1.0, 3.0, 8.0]
    summ = [(m, e) for t, m, e, _, _ in cells if t == "summarisation"]
    assert sorted(summ, key=str) == sorted([("base", None), ("non-private", None), ("dp-full", 3.0),
                                            ("dp-lora", 3.0), ("dp-prefix", 3.0)], key=str)
    assert ("base", None) in ner  # the pre-trained model, never fine-tuned: the floor
    token = [(m, e) for t, m, e, _, _ in cells if t == "token-ner"]
    assert token == [("non-private", None), ("dp-full", 3.0), ("dp-lora", 3.0)]  # no prefix tuning for MiniLM
    assert [(m, e, v) for t, m, e, _, v in cells if v != "fixed"] == [
        ("dp-lora", 3.0, "adaptive-median"), ("dp-lora", 3.0, "warmup-p80")]
    attacked = [(m, e) for t, m, e, _, v in cells if bench.attacked(t, m, v)]
    assert attacked == [("non-private", None), ("dp-lora", 1.0), ("dp-lora", 3.0), ("dp-lora", 8.0)]


@pytest.mark.parametrize("change, message", [
    (dict(modes=("dp-foo",)), "unknown modes"), (dict(sweep_modes=("non-private",)), "private modes"),
    (dict(sweep_modes=("base",)), "private modes"),
    (dict(epsilons=(0.0,)), "epsilons"), (dict(epsilons=(1.0,), main_epsilon=3.0), "main_epsilon"),
    (dict(held_out=1.0), "held_out"), (dict(model="/no/such/folder"), "unknown model path"),
    (dict(tasks=("translation",)), "unknown tasks"), (dict(epochs=0), "epochs"), (dict(shadows=3), "even"),
    (dict(canaries=-1), "canaries")])
def test_bad_settings_are_named(change, message):
    with pytest.raises(SpecError, match=message):
        replace(cnb.ClinicalNLPBenchmark(), **change).validate()


def test_split_holds_out_whole_patients(corpus):
    notes = corpus + [Note("extra", corpus[0].patient_id, corpus[0].text)]  # a second note of one patient
    split = cnb.split_patients(notes, 0.34, seed=0)
    assert not set(split.train_patients) & set(split.held_out_patients)
    assert len(split.train) + len(split.held_out) == len(notes)
    assert split.held_out_patients == cnb.split_patients(notes, 0.34, seed=0).held_out_patients
    with pytest.raises(DataError, match="empty"):
        cnb.split_patients([], 0.3)
    with pytest.raises(DataError, match="at least 4"):
        cnb.split_patients(corpus[:3], 0.3)


def _digest(model: torch.nn.Module) -> str:
    h = hashlib.sha256()
    for name, p in sorted(model.state_dict().items()):
        h.update(name.encode() + p.detach().cpu().numpy().tobytes())
    return h.hexdigest()


def test_the_held_out_side_never_sees_the_training_notes(tiny_folder, corpus, tmp_path, monkeypatch):
    """The attack's reference model, the non-members and the test notes are bit-identical when every
    training note's text changes; the fine-tuned model is not (the change reached training)."""
    import dpcare.text.lm.attacks as attacks
    import dpcare.text.lm.finetune as finetune

    bench = small(tiny_folder, canaries=4)
    split = cnb.split_patients(corpus, bench.held_out, 0)
    seen: dict[str, list] = {}
    real_attack, real_finetune, real_utility = attacks.loss_attack_lm, finetune.finetune, cnb._utility

    def spy_attack(target, base, tok, members, nonmembers, **kw):
        seen.setdefault("base", []).append(_digest(base))
        seen.setdefault("nonmembers", []).append([(n.patient_id, n.text) for n in nonmembers])
        seen.setdefault("target", []).append(_digest(target))
        return real_attack(target, base, tok, members, nonmembers, **kw)

    def spy_finetune(notes, *a, **kw):
        notes = list(notes)
        seen.setdefault("trained_patients", []).append({n.patient_id for n in notes})
        return real_finetune(notes, *a, **kw)

    def spy_utility(model, tok, task, test, b):
        seen.setdefault("test", []).append([(n.patient_id, n.text) for n in test])
        return real_utility(model, tok, task, test, b)

    monkeypatch.setattr(attacks, "loss_attack_lm", spy_attack)
    monkeypatch.setattr(finetune, "finetune", spy_finetune)
    monkeypatch.setattr(cnb, "_utility", spy_utility)
    for k, notes in enumerate((split.train, [replace(n, text=n.text.replace("a", "o")) for n in split.train])):
        path = tmp_path / f"notes{k}.pkl"
        path.write_bytes(__import__("pickle").dumps({"settings": {}, "split": cnb.NoteSplit(notes, split.held_out)}))
        cnb.run_cell("ner", "dp-lora", 3.0, 0, "fixed", str(path), bench)
    held = set(split.held_out_patients)
    assert all(not (p & held) for p in seen["trained_patients"])
    for part in ("base", "nonmembers", "test"):
        assert seen[part][0] == seen[part][1], part
    assert {p for p, _ in seen["nonmembers"][0]} == held
    assert seen["target"][0] != seen["target"][1]


@pytest.mark.slow  # end to end: 9 fine-tuning runs, LiRA shadows, canaries, a token tagger (~2 min)
def test_a_grid_runs_resumes_and_refuses_other_settings(tiny_folder, bert_folder, corpus, tmp_path):
    bench = small(tiny_folder, modes=("base", "non-private", "dp-lora"), sweep_modes=("dp-lora",), epsilons=(1.0, 3.0),
                  tasks=cnb.TASKS, canaries=4, shadows=2, clip_ablation=True, encoder=bert_folder)
    out = tmp_path / "run"
    table = cnb.run_clinical_nlp(bench, out, notes=corpus, progress=False)
    runs = [json.loads(line) for line in (out / "runs.jsonl").read_text().splitlines()]
    # ner: base, non-private, lora@1, lora@3 and two clip variants; summarisation: three; token-ner: two
    assert len(runs) == len(bench.cells()) == 11
    base = next(r for r in runs if r["task"] == "ner" and r["mode"] == "base")
    assert base["guarantee"] is None and base["steps"] == 0 and base["mia_reference_auc"] == 0.5
    lora1 = next(r for r in runs if r["task"] == "ner" and r["target_epsilon"] == 1.0)
    assert lora1["epsilon"] <= 1.0 + 1e-6 and lora1["guarantee"]["unit"] == "patient"
    assert lora1["mia_members"] == lora1["mia_nonmembers"] == len(json.loads((out / "data/split.json").read_text())
                                                                  ["held_out_patients"])
    assert 0 <= lora1["mia_reference_auc"] <= 1 and lora1["test_perplexity"] > 1
    assert lora1["lira_shadows"] == 2 and 0 <= lora1["mia_lira_auc"] <= 1 and "lira" in lora1["roc"]
    assert lora1["canaries"] == 4 and lora1["canary_epsilon_lower_bound"] >= 0
    assert lora1["patients"] == len(json.loads((out / "data/split.json").read_text())["train_patients"]) \
        + lora1["canaries_included"]  # the included canaries are training patients
    summ = next(r for r in runs if r["task"] == "summarisation" and r["mode"] == "non-private")
    assert summ["guarantee"] is None and 0 <= summ["test_rougeL_f1"] <= 1 and "canaries" not in summ
    token = next(r for r in runs if r["task"] == "token-ner" and r["mode"] == "dp-lora")
    assert token["epsilon"] <= 3.0 + 1e-6 and 0 <= token["test_ner_f1"] <= 1 and token["backend"] == "fast"
    warm = next(r for r in runs if r["variant"] == "warmup-p80")
    assert any("warm-up" in release for release in warm["guarantee"]["releases"]), warm["guarantee"]["releases"]
    assert warm["epsilon"] <= 3.0 + 1e-6 and warm["clip_norm"] != bench.clip_norm
    assert set(table["target_epsilon"]) == {1.0, 3.0, math.inf}
    md = (out / "table.md").read_text()
    for part in ("Table 1", "Table 2", "| dp-lora |", "Token-classification", "One-run audit",
                 "LiRA", "Clip-norm ablation", "| warmup-p80 |"):
        assert part in md, part
    assert (out / "sweep.png").stat().st_size > 0
    m = read_manifest(out)
    assert m.kind == "study:clinical-nlp" and {a["file"] for a in m.attacks} >= {"attacks/lira.json",
                                                                                 "attacks/canaries.json"}
    lora = next(e for e in m.models if e["name"] == "ner dp-lora eps=1.0")
    assert lora["guarantee"]["unit"] == "patient" and lora["guarantee"]["epsilon"] <= 1.0 + 1e-6
    assert not (out / "checkpoints").exists()  # the split notes are not released with the folder
    from dpcare.report import write_report

    html = write_report([out], tmp_path / "report.html").read_text()
    assert "LiRA" in html and "canary" in html and "ner dp-lora eps=1.0" in html
    # a finished folder holds one run: a second run into it is refused
    with pytest.raises(SettingsError, match="not empty"):
        cnb.run_clinical_nlp(bench, out, notes=corpus, progress=False)


def interrupted_at_summarisation(bench, out, corpus, monkeypatch) -> list[str]:
    """Run ``bench`` into ``out`` with the summarisation cell failing; then count the tasks of later calls."""
    real, calls = cnb.run_cell, []

    def failing(task, *args):
        if task == "summarisation":
            raise RuntimeError("interrupted")
        return real(task, *args)

    monkeypatch.setattr(cnb, "run_cell", failing)
    with pytest.raises(RuntimeError, match="interrupted"):
        cnb.run_clinical_nlp(bench, out, notes=corpus, progress=False)
    monkeypatch.setattr(cnb, "run_cell", lambda task, *a: (calls.append(task), real(task, *a))[1])
    return calls


@pytest.mark.slow  # end to end
def test_an_interrupted_study_resumes_from_its_staging_journal(tiny_folder, corpus, tmp_path, monkeypatch):
    """A failing cell leaves the finished ones in the staging folder's journal; the same call trains only the
    rest, other settings are refused while it is unfinished, and the finished folder has run.json."""
    bench = small(tiny_folder, modes=("base",), tasks=("ner", "summarisation"))
    out = tmp_path / "run"
    calls = interrupted_at_summarisation(bench, out, corpus, monkeypatch)
    journal = staging_path(out) / "runs.jsonl"
    assert [json.loads(line)["task"] for line in journal.read_text().splitlines()] == ["ner"] and not out.exists()
    with pytest.raises(SettingsError, match="other settings"):
        cnb.run_clinical_nlp(replace(bench, epochs=2.0), out, notes=corpus, progress=False)
    assert calls == []  # refused before any cell
    table = cnb.run_clinical_nlp(bench, out, notes=corpus, progress=False)
    assert calls == ["summarisation"] and set(table["task"]) == {"ner", "summarisation"}
    assert read_manifest(out).kind == "study:clinical-nlp" and not staging_path(out).exists()
    assert len((out / "runs.jsonl").read_text().splitlines()) == 2


@pytest.mark.slow  # end to end
def test_a_journal_resumed_on_other_notes_is_refused_before_any_cell(tiny_folder, corpus, tmp_path, monkeypatch):
    """The journal kept from another machine (notes.pkl is not kept: the notes are made again) resumes only on
    the notes its rows were trained on: each row carries the split's digest, and other notes of the same size
    and settings are refused before a cell runs. The finished folder releases no digest."""
    bench = small(tiny_folder, modes=("base",), tasks=("ner", "summarisation"))
    out = tmp_path / "run"
    calls = interrupted_at_summarisation(bench, out, corpus, monkeypatch)
    staging = staging_path(out)
    row, = [json.loads(line) for line in (staging / "runs.jsonl").read_text().splitlines()]
    split = pickle.loads((staging / "checkpoints" / "notes.pkl").read_bytes())["split"]
    assert row["data"] == cnb.split_digest(split)
    other = generate_corpus(12, sources=("support2",), seed=4)
    shutil.rmtree(staging / "checkpoints")  # as on a fresh clone: only runs.jsonl and partial.json are kept
    with pytest.raises(SpecError, match="other data"):
        cnb.run_clinical_nlp(bench, out, notes=other, progress=False)
    assert calls == [] and not (staging / "checkpoints").exists()  # refused before the notes were written
    cnb.run_clinical_nlp(bench, out, notes=corpus, progress=False)  # the same notes made again: resumed
    assert calls == ["summarisation"]
    # resuming needed the digest; nothing the finished folder releases holds it
    assert not [f for f in out.rglob("*") if f.is_file() and row["data"].encode() in f.read_bytes()]
    assert [set(r) & {"data"} for r in read_journal(out / "runs.jsonl")] == [set(), set()]


@pytest.mark.slow  # end to end
def test_an_interrupted_cell_resumes_from_its_fine_tuning_checkpoint(tiny_folder, corpus, tmp_path, monkeypatch):
    """A cell stopped after its fine-tuning (while scoring) trains no step again when the study is rerun: it
    resumes from the cell's checkpoint and journals the row of an uninterrupted run; the checkpoint is then
    deleted."""
    from dpcare.engine.trainer import Trainer

    bench = small(tiny_folder, modes=("dp-lora",), tasks=("ner",))
    cnb.run_clinical_nlp(bench, tmp_path / "whole", notes=corpus, progress=False)
    real_utility, real_step, steps = cnb._utility, Trainer.private_step, []

    def stopped(*args, **kwargs):
        raise KeyboardInterrupt("stopped while scoring")

    def counted(self, *args, **kwargs):
        steps.append(self.step_count)
        return real_step(self, *args, **kwargs)

    monkeypatch.setattr(Trainer, "private_step", counted)
    monkeypatch.setattr(cnb, "_utility", stopped)
    out = tmp_path / "run"
    with pytest.raises(KeyboardInterrupt):
        cnb.run_clinical_nlp(bench, out, notes=corpus, progress=False)
    trained, cells = len(steps), staging_path(out) / "checkpoints" / "cells"
    assert trained > 0 and [p.name for p in cells.iterdir()] == ["ner_dp-lora_eps3_seed0_fixed"]
    monkeypatch.setattr(cnb, "_utility", real_utility)
    cnb.run_clinical_nlp(bench, out, notes=corpus, progress=False)
    assert len(steps) == trained  # no step trained again
    assert not staging_path(out).exists() and not (out / "checkpoints").exists()
    resumed, = [json.loads(line) for line in (out / "runs.jsonl").read_text().splitlines()]
    reference, = [json.loads(line) for line in (tmp_path / "whole" / "runs.jsonl").read_text().splitlines()]
    for key in ("test_ner_f1", "test_perplexity", "epsilon", "steps", "noise_multiplier", "mia_loss_auc", "roc"):
        assert resumed[key] == reference[key], key


@pytest.mark.slow  # end to end
@pytest.mark.parametrize("task", ["ner", "token-ner"])
def test_a_finished_cell_deletes_its_checkpoint(task, tiny_folder, bert_folder, corpus, tmp_path):
    """The checkpoint holds the noise generators' state: it goes as soon as the cell's row is complete."""
    notes = tmp_path / "checkpoints" / "notes.pkl"
    notes.parent.mkdir()
    notes.write_bytes(pickle.dumps({"split": cnb.split_patients(corpus, 0.34)}))
    folder = cnb.cell_checkpoint(str(notes), task, "dp-lora", 3.0, 0, "fixed")
    assert folder.parent == tmp_path / "checkpoints" / "cells"
    row = cnb.run_cell(task, "dp-lora", 3.0, 0, "fixed", str(notes), small(tiny_folder, encoder=bert_folder))
    assert row["steps"] > 0 and folder.parent.is_dir() and not folder.exists()


@pytest.mark.slow  # end to end
def test_tables_only_tabulates_the_finished_runs_and_trains_nothing(tiny_folder, corpus, tmp_path):
    out = tmp_path / "run"
    with pytest.raises(SpecError, match="no finished run"):
        cnb.run_clinical_nlp(small(tiny_folder, modes=("base",), tasks=("ner",)), out, notes=corpus,
                             progress=False, train=False)
    cnb.run_clinical_nlp(small(tiny_folder, modes=("base",), tasks=("ner",)), out, notes=corpus, progress=False)
    before, run_id = (out / "runs.jsonl").read_text(), read_manifest(out).run_id
    table = cnb.run_clinical_nlp(small(tiny_folder, modes=("base", "dp-lora"), tasks=("ner",)), out, notes=corpus,
                                 progress=False, train=False)
    assert (out / "runs.jsonl").read_text() == before  # nothing trained
    assert list(table["mode"]) == ["base"] and table.attrs["folder"] == str(out)
    md = (out / "table.md").read_text()
    assert "| base | 0 (never trained) |" in md and "| dp-lora | 3 | - | - |" in md
    m = read_manifest(out)  # the same run, its manifest rewritten from the journal
    assert m.run_id == run_id and [e["name"] for e in m.models] == ["ner base"]
    assert m.models[0]["guarantee"] is None and "never fine-tuned" in m.models[0]["note"]
    from dpcare.report import collect

    run = collect(out)
    assert [a.name for a in run.attacks][0].startswith("LOSS") and run.attacks[0].curves
    # a folder finished before digests were dropped loses them when its tables are rewritten
    rows = read_journal(out / "runs.jsonl")
    (out / "runs.jsonl").write_text("".join(json.dumps({**r, "data": "sha256:abc"}) + "\n" for r in rows))
    cnb.run_clinical_nlp(small(tiny_folder, modes=("base",), tasks=("ner",)), out, progress=False, train=False)
    assert read_journal(out / "runs.jsonl") == rows


@pytest.mark.slow  # end to end
def test_every_fine_tuned_model_is_judged_against_the_public_baselines(tiny_folder, corpus, tmp_path):
    """NER and summarisation models against the base model (and LEAD-3) on the same held-out notes: the verdicts
    in table.md, baselines.json and run.json (its notes, which the report prints); the verdict flips when a
    model's per-note values are the base model's own."""
    bench = small(tiny_folder, modes=("base", "dp-lora"), tasks=("ner", "summarisation"))
    out = tmp_path / "run"
    cnb.run_clinical_nlp(bench, out, notes=corpus, progress=False)
    m = read_manifest(out)
    verdicts = {v["name"]: v for v in m.baselines}
    assert set(verdicts) == {"ner|dp-lora@3.0", "summarisation|dp-lora@3.0"}  # the base rows are the baselines
    names = {v["name"]: [c["baseline_name"] for c in v["comparisons"]] for v in m.baselines}
    assert names["ner|dp-lora@3.0"] == [BASE_MODEL]
    assert names["summarisation|dp-lora@3.0"] == [lead_name(), BASE_MODEL]
    runs = [json.loads(line) for line in (out / "runs.jsonl").read_text().splitlines()]
    held_out = {r["task"]: r["per_note"]["patients"] for r in runs}
    assert all(p == held_out["ner"] and len(p) == bench.eval_notes for p in held_out.values())  # the same notes
    for v in m.baselines:
        assert v["patients"] == len(set(held_out["ner"])) == v["comparisons"][0]["units"]
        assert f"{v['name']}: {v['verdict']}" in m.notes and v["verdict"] in (out / "table.md").read_text()
    assert json.loads((out / "baselines.json").read_text()) == m.baselines
    # listed in the cells' order, whatever order the runs finished (were journalled) in
    again, _ = cnb.write_tables(bench, list(reversed(runs)), tmp_path / "again", m.run_id)
    assert [v["name"] for v in again.attrs["baselines"]] == ["ner|dp-lora@3.0", "summarisation|dp-lora@3.0"]
    # the same per-note values as the base model: no better, whatever the data
    base = next(r for r in runs if r["task"] == "summarisation" and r["mode"] == "base")
    clone = {**base, "mode": "dp-lora", "target_epsilon": 3.0,
             "per_note": {**base["per_note"], "lead_rougeL": [1.0] * len(base["per_note"]["rougeL"])}}
    (flip,) = cnb.baseline_verdicts([base, clone])
    assert not flip["beats"] and flip["comparisons"][1]["difference"] == 0
    better = {**clone, "per_note": {**clone["per_note"], "rougeL": [1.0] * len(base["per_note"]["rougeL"]),
                                    "lead_rougeL": [0.0] * len(base["per_note"]["rougeL"])}}
    assert cnb.baseline_verdicts([base, better])[0]["beats"]
    # every seed's run, against the base run of its own seed
    (one,) = cnb.baseline_verdicts([{**base, "seed": 1}, {**better, "seed": 1}])
    assert one["name"] == "summarisation|dp-lora@3.0 seed 1" and len(one["comparisons"]) == 2 and one["beats"]
    (alone,) = cnb.baseline_verdicts([base, {**better, "seed": 1}])  # seed 0's base is not seed 1's
    assert [c["baseline_name"] for c in alone["comparisons"]] == [lead_name()]
    both = cnb.baseline_verdicts([base, better, {**base, "seed": 1}, {**better, "seed": 1}])
    assert [v["name"] for v in both] == ["summarisation|dp-lora@3.0 seed 0", "summarisation|dp-lora@3.0 seed 1"]
    # a study of several seeds names seed 0 so from its first tabulation on (only seed 0's runs finished)
    assert cnb.baseline_verdicts([base, better], seeds=3)[0]["name"] == "summarisation|dp-lora@3.0 seed 0"


@pytest.mark.parametrize("task, strip, message", [
    ("ner", dict(entities=()), "no note has a gold span"),
    ("summarisation", dict(summary_target=""), "no summarisation pair")])
def test_held_out_notes_without_gold_are_refused_before_any_cell_trains(tiny_folder, corpus, tmp_path, monkeypatch,
                                                                         task, strip, message):
    """Supplied notes whose scored held-out notes lack the task's gold annotations: a clear error before the
    first cell (no run_cell call, no journal)."""
    monkeypatch.setattr(cnb, "run_cell", lambda *a: pytest.fail("a cell ran before the notes were checked"))
    notes = [replace(n, **strip) for n in corpus]
    with pytest.raises(DataError, match=message):
        cnb.run_clinical_nlp(small(tiny_folder, modes=("base",), tasks=(task,)), tmp_path / "run", notes=notes,
                             progress=False)
    assert not (staging_path(tmp_path / "run") / "runs.jsonl").exists()
