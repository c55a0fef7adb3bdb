"""The release-table aggregation of benchmarks/bench_release_tables.py on fabricated run.json records (no training)."""

import argparse
import json
import math

import pytest

from helpers import benchmark_script


@pytest.fixture(scope="module")
def bench():
    return benchmark_script("bench_release_tables")


def comparison(metric, model, baseline, low, high, higher=True, name="a constant prediction"):
    diff = (model - baseline) if higher else (baseline - model)
    return {"metric": metric, "model": model, "baseline_name": name, "baseline": baseline, "difference": diff,
            "low": low, "high": high, "higher_is_better": higher, "units": 100, "resamples": 1000,
            "beats": low > 0, "verdict": "..."}


def run_json(*comparisons, name="a constant prediction"):
    return {"kind": "tabular", "baselines": [{"name": name, "metrics": {}, "comparisons": list(comparisons)}]}


def row_of(text, method, eps):
    return next(line for line in text.splitlines() if line.startswith(f"| {method} | {eps} |"))


def test_mean_sd_beats_and_intervals(bench):
    cells = {("dp-sgd", 1.0, s): run_json(comparison("test AUPRC", m, 0.66, lo, lo + 0.1))
             for s, m, lo in ((0, 0.80, 0.10), (1, 0.82, 0.12), (2, 0.84, -0.01))}
    text = bench.build_tables(cells, ["dp-sgd"], [1.0], [0, 1, 2])
    row = row_of(text, "dp-sgd", 1)
    cols = [c.strip() for c in row.strip("|").split("|")]
    assert cols[2] == "0.820 ± 0.020"  # mean, sample sd (ddof 1) of 0.80, 0.82, 0.84
    assert cols[3] == "0.660 ± 0.000"
    assert "seed 0: +0.140 [+0.100, +0.200]" in cols[4] and "seed 2: +0.180 [-0.010, +0.090]" in cols[4]
    assert cols[5] == "2/3 seeds"
    assert "#### test AUPRC" in text and "- public baseline of dp-sgd: a constant prediction" in text


def test_missing_cells_are_shown_as_missing(bench):
    cells = {("feature-dp", 3.0, 0): run_json(comparison("test AUROC", 0.75, 0.70, 0.01, 0.09)),
             ("feature-dp", 3.0, 1): None, ("feature-dp", 3.0, 2): None,
             ("feature-dp", 8.0, 0): None, ("feature-dp", 8.0, 1): None, ("feature-dp", 8.0, 2): None}
    text = bench.build_tables(cells, ["feature-dp"], [3.0, 8.0], [0, 1, 2])
    row = row_of(text, "feature-dp", 3)
    assert "0.750 ± 0.000 (1 of 3 seeds)" in row
    assert "seed 1: missing; seed 2: missing" in row
    assert row.rstrip(" |").endswith("1/3 seeds (2 missing)")
    empty = row_of(text, "feature-dp", 8)
    assert empty.count("missing") >= 4 and "0/3 seeds (3 missing)" in empty


def test_lower_is_better_and_undefined(bench):
    fid = comparison("test FID", 30.0, 40.0, 5.0, 15.0, higher=False)
    undefined = {"metric": "test FID", "model": None, "baseline_name": "b", "baseline": 41.0, "beats": False,
                 "undefined": True, "verdict": "undefined"}
    cells = {("fdp-dpsgd", 8.0, 0): run_json(fid), ("fdp-dpsgd", 8.0, 1): run_json(undefined)}
    text = bench.build_tables(cells, ["fdp-dpsgd"], [8.0], [0, 1])
    assert "lower is better" in text and "baseline - DP" in text
    row = row_of(text, "fdp-dpsgd", 8)
    assert "seed 0: +10.000 [+5.000, +15.000]" in row and "seed 1: undefined" in row
    assert "30.000 ± 0.000 (1 of 2 seeds)" in row and "40.500 ± 0.707" in row and "1/2 seeds" in row


def test_several_metrics_and_nothing_finished(bench):
    cells = {("m", 1.0, 0): run_json(comparison("AUC XGB", 0.6, 0.5, 0.01, 0.2),
                                     comparison("AUC LR", 0.55, 0.5, -0.1, 0.2))}
    text = bench.build_tables(cells, ["m"], [1.0], [0])
    assert text.index("#### AUC XGB") < text.index("#### AUC LR")
    assert bench.build_tables({("m", 1.0, 0): None}, ["m"], [1.0], [0]).startswith("no finished run")
    assert bench._mean_sd([None, float("nan")]) is None
    assert bench._mean_sd([1.0])[1] == 0.0 and math.isclose(bench._mean_sd([1.0, 3.0])[1], math.sqrt(2))


def test_synth_cells_pass_the_held_out_share_only_when_given(bench):
    files = {"data": "t.csv", "spec": "t.yaml"}
    given = bench.cell_command(argparse.Namespace(modality="synth", holdout=0.33), files, "dp-2stage-u", 8.0, 1, "r")
    assert given[given.index("--holdout") + 1] == "0.33"
    default = bench.cell_command(argparse.Namespace(modality="synth", holdout=None), files, "dp-2stage-u", 8.0, 1, "r")
    assert "--holdout" not in default
    # the language model's cells name it (AIM is synth fit's default now); AIM's cells never pin the noise
    assert default[default.index("--synthesizer") + 1] == "dp-2stage" and "--mode" in default
    aim = bench.cell_command(argparse.Namespace(modality="synth", holdout=None), files, "aim", 8.0, 1, "r")
    assert aim[aim.index("--synthesizer") + 1] == "aim" and "--mode" not in aim and "aim" in bench.UNPINNED


def _png_rows(part):
    """Each image of an ImageSet as (label, 8-bit pixels) bytes, sorted: the split's content, order aside."""
    import numpy as np

    pixels = ((part.images.flatten(1).numpy() + 1.0) / 2.0 * 255.0).round().astype(np.uint8)
    return sorted(bytes([int(y)]) + row.tobytes() for y, row in zip(part.labels.numpy(), pixels, strict=True))


def test_images_keep_n_per_digit_and_split_each_seed_apart(bench, tmp_path):
    """--images-per-class keeps that many of each digit; each seed writes its own disjoint public / train / test
    PNG folders that read back as that seed's split (8-bit pixels and labels)."""
    import numpy as np

    from dpcare.images.data import load_image_folder, load_mnist, split_images

    a = argparse.Namespace(modality="images", seeds=[0, 1], images_per_class=5)
    folders = bench.prepare(a, tmp_path, [])["folders"]
    mnist = load_mnist()
    labels = mnist.labels.numpy()
    kept = mnist.subset(np.sort(np.concatenate([np.flatnonzero(labels == k)[:5] for k in range(10)])))
    trains = []
    for seed in (0, 1):
        expected = split_images(kept, seed=seed)
        read = {k: load_image_folder(path, grayscale=True) for k, path in folders[seed].items()}
        trains.append(_png_rows(read["train"]))
        assert {k: len(v) for k, v in read.items()} == {"train": 30, "test": 10, "public": 10}
        for name, part in read.items():
            assert np.bincount(part.labels.numpy(), minlength=10).tolist() == [len(part) // 10] * 10
            assert _png_rows(part) == _png_rows(expected[name])
        assert len({r for part in read.values() for r in _png_rows(part)}) == 50  # disjoint
        assert (tmp_path / f"split-seed{seed}" / "done").exists()
    assert trains[0] != trains[1]  # each seed its own split


def test_finetune_splits_each_seed_by_patient_and_passes_the_held_out_notes(bench, tmp_path):
    """finetune: each seed splits the generated notes by patient (the clinical-nlp study's split), the two sides
    share no patient and together are every note; the cell trains on its seed's train file and scores --test."""
    from dpcare.studies.clinical_nlp import split_patients
    from dpcare.text import read_jsonl

    a = argparse.Namespace(modality="finetune", seeds=[0, 1], n_notes=12, task="ner", physical_batch=None)
    files = bench.prepare(a, tmp_path, [])
    every = read_jsonl(tmp_path / "notes-12.jsonl")
    held = []
    for seed in (0, 1):
        train, test = (read_jsonl(files["splits"][seed][k]) for k in ("train", "test"))
        assert not {n.patient_id for n in train} & {n.patient_id for n in test}
        assert sorted(n.note_id for n in train + test) == sorted(n.note_id for n in every)
        assert [n.note_id for n in test] == [n.note_id for n in split_patients(every, bench.HELD_OUT, seed).held_out]
        held.append({n.patient_id for n in test})
        cmd = [str(c) for c in bench.cell_command(a, files, "dp-lora", 8.0, seed, tmp_path / "run")]
        assert cmd[cmd.index("finetune") + 1] == str(files["splits"][seed]["train"])
        assert cmd[cmd.index("--test") + 1] == str(files["splits"][seed]["test"])
        assert cmd[cmd.index("--seed") + 1] == str(seed) and cmd[cmd.index("--mode") + 1] == "dp-lora"
    assert held[0] != held[1]  # each seed its own split
    assert "--physical-batch" not in cmd  # the command's default unless asked (memory only)
    a.physical_batch = 4
    cmd = [str(c) for c in bench.cell_command(a, files, "dp-lora", 8.0, 0, tmp_path / "run")]
    assert cmd[cmd.index("--physical-batch") + 1] == "4"
    for wrong in (["--modality", "images", "--physical-batch", "4"], ["--modality", "finetune", "--physical-batch",
                                                                       "0"]):
        with pytest.raises(SystemExit):  # refused before any data is made
            bench.main([*wrong, "--out", str(tmp_path / "refused")])
        assert not (tmp_path / "refused").exists()


def test_two_processes_filling_one_folder_leave_the_whole_table_and_every_time(bench, tmp_path, capsys):
    """Each cell's wall time is its own file (no merge that a second process could undo) and tables.md holds
    every finished run on disk, while the console shows the asked selection."""
    out = tmp_path / "out"
    for eps, seed, model in ((1.0, 0, 0.70), (8.0, 0, 0.80), (8.0, 1, 0.82)):
        name = bench.cell_name("dp-sgd", eps, seed)
        run = out / "runs" / name
        run.mkdir(parents=True)
        (run / "run.json").write_text(json.dumps(run_json(comparison("test AUPRC", model, 0.66, 0.01, 0.2))))
        bench.write_seconds(out, name, 10.0 * (seed + 1))
    (out / "wall_seconds.json").write_text(json.dumps({"dp-sgd/eps1/seed0": 99.0, "dp-sgd/eps8/seed0": 5.0}))
    assert bench.main(["--modality", "tabular", "--methods", "dp-sgd", "--epsilons", "8", "--seeds", "0,1",
                       "--out", str(out), "--tables-only"]) == 0
    shown_text = capsys.readouterr().out
    assert "| dp-sgd | 8 |" in shown_text and "| dp-sgd | 1 |" not in shown_text
    assert "2 runs): mean 15 s" in shown_text  # the per-cell files win over the old merged file
    whole = (out / "tables.md").read_text()
    assert "| dp-sgd | 1 |" in whole and "| dp-sgd | 8 |" in whole and "epsilon 1,8, seeds [0, 1]" in whole
    assert "1/2 seeds (1 missing)" in row_of(whole, "dp-sgd", 1)  # eps 1 has no seed 1: shown as missing
    assert "3 runs): mean 13 s" in whole
    (out / "timing" / "dp-sgd" / "eps1" / "seed0.json").unlink()  # a cell timed before the per-cell files
    assert bench.read_seconds(out, ["dp-sgd/eps1/seed0", "dp-sgd/eps8/seed0", "nothing"]) == [99.0, 10.0]


def test_cell_options_reach_every_cell_and_one_folder_holds_one_setting(bench, tmp_path):
    out = tmp_path / "synth"
    out.mkdir()
    options = bench.check_cell_options(out, "--order target-last --lr 5e-3", tables_only=False)
    assert options == ["--order", "target-last", "--lr", "5e-3"] and not (out / "cell_options.json").exists()
    a = argparse.Namespace(modality="synth", holdout=None, cell_options=options)
    cmd = [str(c) for c in bench.full_command(a, {"data": "d.csv", "spec": "s.yaml"}, "dp-2stage-u", 8.0, 2,
                                              out / "runs" / "r", pin_noise=True)]
    assert cmd[-10:-2] == ["--seed", "2", "--order", "target-last", "--lr", "5e-3", "--noise-seed", "2"]
    assert cmd[-2:] == ["--out", str(out / "runs" / "r")]
    bench.keep_cell_options(out, options)  # as the first cell starts
    assert bench.check_cell_options(out, "--order target-last --lr 5e-3", tables_only=False) == options  # resume
    with pytest.raises(SystemExit, match="was filled with --cell-options"):
        bench.check_cell_options(out, "", tables_only=False)
    assert bench.check_cell_options(out, "", tables_only=True) == options  # the tables read the folder's own
    for clash in ("--seed 5", "--epsilon=1", "--noise-seed 3", "--out x"):  # the last value would win, unlabelled
        with pytest.raises(SystemExit, match="may not set"):
            bench.check_cell_options(tmp_path / "other", clash, tables_only=False)
    plain = tmp_path / "plain"  # filled without options: a cell's folder, finished or not
    (plain / "runs" / bench.cell_name("dp-2stage-u", 8.0, 0)).mkdir(parents=True)
    with pytest.raises(SystemExit, match="was filled with --cell-options ''"):
        bench.check_cell_options(plain, "--lr 5e-3", tables_only=False)
    assert bench.check_cell_options(plain, "", tables_only=False) == []
    assert bench.check_cell_options(plain, "--lr 5e-3", tables_only=True) == []  # no file: no options shown
