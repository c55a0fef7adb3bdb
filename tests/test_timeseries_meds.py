"""MEDS folders read lazily (dpcare.timeseries.meds): the same windows as the in-memory reader, the MEDS
subject splits used as given, a patient's windows in one split only, windows spilled to memory-mapped files,
bad folders named; ``dpcare forecast fit --layout meds`` trains patient-level DP-SGD on them."""

import json
from dataclasses import replace

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
from typer.testing import CliRunner

from dpcare.cli import app
from dpcare.exceptions import DataError, DPCareError
from dpcare.runs import read_manifest
from dpcare.timeseries import user_dataset
from dpcare.timeseries.binning import Standardizer, bin_events
from dpcare.timeseries.meds import (
    meds_splits,
    meds_subject_ids,
    meds_windows,
    synthetic_meds,
    synthetic_meds_spec,
)
from dpcare.timeseries.recipe import SPLIT_NAMES, prepare_lazy, prepare_tsf

SPEC = synthetic_meds_spec()


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return synthetic_meds(tmp_path_factory.mktemp("meds") / "m", 120, shards=3, events_per_patient=16, seed=1)


def _in_memory(dataset):
    """The in-memory reader's windows (read_meds, bin_events, make_windows) on the lazy reader's split."""
    memory = replace(dataset, windows=None, given_splits=None)
    return prepare_tsf(memory, population=memory.patient_ids())


def _sorted(ws):
    order = np.lexsort((ws.start, ws.patient))
    return ws.subset(order)


def _all(parts):
    ws = [parts[s] for s in SPLIT_NAMES if s in parts]
    patient = np.concatenate([w.patient for w in ws])
    start = np.concatenate([w.start for w in ws])
    order = np.lexsort((start, patient))
    t = torch.from_numpy(order)
    return (torch.cat([w.x for w in ws])[t], torch.cat([w.y for w in ws])[t], torch.cat([w.mask for w in ws])[t],
            patient[order], start[order])


def test_lazy_windows_equal_the_in_memory_windows(folder, tmp_path):
    dataset = user_dataset(folder, "meds", SPEC)
    memory = _sorted(_in_memory(dataset).windows)
    splits = meds_splits(folder)
    # 40-row batches: subjects (17 rows with the birth row) run across batches
    for kwargs in ({}, {"spill_dir": tmp_path / "spill", "memory_bound": 0}):
        read = meds_windows(folder, ["HR", "SBP"], splits, input_len=6, output_len=2, stride=2,
                            standardizer=Standardizer.declared(SPEC["variables"]), batch_rows=40, **kwargs)
        x, y, mask, patient, start = _all(read.parts)
        assert read.subjects_read == 120 and read.spilled == bool(kwargs)
        assert len(x) == len(memory) > 120
        assert torch.equal(x, memory.x) and torch.equal(y, memory.y) and torch.equal(mask, memory.mask)
        assert (patient == memory.patient).all() and (start == memory.start).all()
    assert sorted(p.name for p in (tmp_path / "spill").iterdir()) == sorted(
        f"{s}_{k}.f32" for s in SPLIT_NAMES for k in ("x", "y", "mask"))


def test_fitted_statistics_match_the_in_memory_fit(folder):
    # nothing declared (a partly declared spec is refused): every variable's statistics fitted on the training subjects
    undeclared = {**SPEC, "variables": {}}
    dataset = user_dataset(folder, "meds", undeclared)
    lazy = prepare_lazy(dataset)
    memory = replace(dataset, windows=None, given_splits=None)
    binned = bin_events(memory.load(["HR", "SBP"]), ["HR", "SBP"], "hour")
    want = Standardizer.fit(binned, lazy.splits["train"])
    assert lazy.standardizer.source == "fitted"
    for v in ("HR", "SBP"):
        assert lazy.standardizer.center[v] == pytest.approx(want.center[v], rel=1e-12)
        assert lazy.standardizer.scale[v] == pytest.approx(want.scale[v], rel=1e-9)


def test_splits_come_from_subject_splits_and_windows_never_cross_them(folder):
    table = pd.read_parquet(folder / "metadata" / "subject_splits.parquet")
    given = {m: set(table.loc[table["split"] == m, "subject_id"].astype(str)) for m in ("train", "tuning", "held_out")}
    data = prepare_lazy(user_dataset(folder, "meds", SPEC), seed=123)  # the seed draws nothing: the file decides
    assert {s: set(ids) for s, ids in data.splits.items()} == {
        "train": given["train"], "validation": given["tuning"], "test": given["held_out"]}
    owner = {}
    for split in SPLIT_NAMES:
        for p in data.part(split).patient:
            assert owner.setdefault(p, split) == split
            assert p in data.splits[split]
    assert len(owner) == 120 and data.summary()["splits_file"].endswith("subject_splits.parquet")
    assert data.summary()["patients"] == {"train": 96, "validation": 12, "test": 12}


def test_without_subject_splits_the_recipe_draws_the_split(folder, tmp_path):
    bare = tmp_path / "bare"
    (bare / "data").mkdir(parents=True)
    for f in (folder / "data").iterdir():
        (bare / "data" / f.name).write_bytes(f.read_bytes())
    dataset = user_dataset(bare, "meds", SPEC)
    assert dataset.splits() is None and dataset.patient_ids() == meds_subject_ids(folder)
    a, b = prepare_lazy(dataset, seed=0), prepare_lazy(dataset, seed=1)
    assert a.splits != b.splits and a.splits_file is None
    assert a.splits == _in_memory(dataset).splits  # the same draw as the in-memory recipe


def _write(path, table):
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pandas(table, preserve_index=False), path)
    return path


def _rows(times, subjects=(1, 1, 2, 2)):
    return pd.DataFrame({"subject_id": np.array(subjects, dtype="int64"), "time": times,
                         "code": ["HR", "SBP", "HR", "SBP"], "numeric_value": [80.0, 120.0, 81.0, 119.0]})


T = pd.to_datetime(["2020-01-01 00:00", "2020-01-01 01:00", "2020-01-02 00:00", "2020-01-02 03:00"])


def _read(path):
    return meds_windows(path, ["HR", "SBP"], {"train": ["1", "2"]}, input_len=1, output_len=1, stride=1,
                        standardizer=Standardizer.declared(SPEC["variables"]))


def test_bad_folders_are_named(tmp_path):
    _write(tmp_path / "ok" / "data" / "0.parquet", _rows(T))
    assert len(_read(tmp_path / "ok").parts["train"]) == 1  # subject 1: hours 0 and 1 -> one window

    shard = _write(tmp_path / "unsorted" / "data" / "0.parquet", _rows(T, subjects=(2, 2, 1, 1)))
    with pytest.raises(DataError, match=r"0.parquet: rows are not sorted by \(subject_id, time\): subject 1"):
        _read(tmp_path / "unsorted")
    _write(shard, _rows(T[[1, 0, 2, 3]]))
    with pytest.raises(DataError, match="not sorted.*subject 1 at 2020-01-01T00:00:00 comes after subject 1"):
        _read(tmp_path / "unsorted")

    _write(tmp_path / "nocode" / "data" / "0.parquet", _rows(T).drop(columns="code"))
    with pytest.raises(DataError, match=r"0.parquet: missing MEDS column\(s\) \['code'\]"):
        _read(tmp_path / "nocode")

    nan_time = _rows([0.0, float("nan"), 0.0, 3.0])
    _write(tmp_path / "nantime" / "data" / "0.parquet", nan_time)
    with pytest.raises(DataError, match=r"0.parquet: column 'time' is missing \(null or NaN\) or infinite in 1 "
                                         "row.*code 'SBP' of subject 1"):
        _read(tmp_path / "nantime")
    _write(tmp_path / "nantime" / "data" / "0.parquet", _rows(T.where(T.hour != 3)))  # a NaT timestamp
    with pytest.raises(DataError, match="missing .* in 1 row.*code 'SBP' of subject 2"):
        _read(tmp_path / "nantime")

    _write(tmp_path / "texttime" / "data" / "0.parquet", _rows(["2020-01-01", "x", "2020-01-02", "y"]))
    with pytest.raises(DataError, match="column 'time' has type (large_)?string; MEDS needs timestamps"):
        _read(tmp_path / "texttime")

    (tmp_path / "empty" / "data").mkdir(parents=True)
    with pytest.raises(DataError, match="holds no .parquet shard"):
        _read(tmp_path / "empty")
    (tmp_path / "empty" / "data" / "0.parquet").write_bytes(b"")
    with pytest.raises(DataError, match="0.parquet: not a readable parquet file"):
        _read(tmp_path / "empty")
    with pytest.raises(FileNotFoundError, match="nowhere"):
        _read(tmp_path / "nowhere")

    _write(tmp_path / "twoshards" / "data" / "0.parquet", _rows(T))
    _write(tmp_path / "twoshards" / "data" / "1.parquet", _rows(T).iloc[:2])
    with pytest.raises(DataError, match="subject 1 has rows in two shards"):
        _read(tmp_path / "twoshards")

    with pytest.raises(DataError, match=r"subject\(s\) \['2'\] have events but are in no split"):
        meds_windows(tmp_path / "ok", ["HR", "SBP"], {"train": ["1"]}, input_len=1, output_len=1, stride=1,
                     standardizer=Standardizer.declared(SPEC["variables"]))
    with pytest.raises(DataError, match=r"no row of the codes \['TEMP'\]"):
        meds_windows(tmp_path / "ok", ["TEMP"], {"train": ["1", "2"]}, standardizer=Standardizer({"TEMP": 37},
                                                                                                 {"TEMP": 1}))


def test_a_subject_in_two_splits_names_the_file(tmp_path):
    _write(tmp_path / "data" / "0.parquet", _rows(T))
    file = _write(tmp_path / "metadata" / "subject_splits.parquet",
                  pd.DataFrame({"subject_id": [1, 2, 2], "split": ["train", "tuning", "held_out"]}))
    with pytest.raises(DataError, match=r"subject_splits.parquet: subject 2 is in two splits \(held_out and tuning\)"):
        meds_splits(tmp_path)
    _write(file, pd.DataFrame({"subject_id": [1, 2], "split": ["train", "test"]}))
    with pytest.raises(DataError, match=r"subject_splits.parquet: unknown split name\(s\) \['test'\]"):
        meds_splits(tmp_path)
    _write(file, pd.DataFrame({"subject_id": [1, 2], "group": ["train", "tuning"]}))
    with pytest.raises(DPCareError, match=r"subject_splits.parquet: missing column\(s\) \['split'\]"):
        meds_splits(tmp_path)


def test_cli_fit_trains_patient_level_dp_sgd_on_a_meds_folder(folder, tmp_path):
    (tmp_path / "spec.yaml").write_text(json.dumps(SPEC))
    run = tmp_path / "run"
    r = CliRunner().invoke(app, ["forecast", "fit", str(folder), "--layout", "meds", "--spec",
                                 str(tmp_path / "spec.yaml"), "--epsilon", "3", "--epochs", "1", "--out", str(run)],
                           catch_exceptions=False)
    assert r.exit_code == 0, r.output
    m = read_manifest(run)
    split = json.loads((run / "split.json").read_text())
    assert split["splits_file"].endswith("subject_splits.parquet") and split["fractions"] is None
    assert len(split["train"]) == 96 and m.models[0]["guarantee"]["n"] == 96  # every train subject has a window
    assert m.models[0]["guarantee"]["unit"] == "patient"
    assert not (run / "checkpoints").exists()

    # applied to a MEDS folder the model reads it lazily, a few subjects at a time, with the same forecasts
    from dpcare.timeseries import ForecastModel, datasets, load_events

    model = ForecastModel.load(run)
    whole = model.forecast(load_events(folder, "meds", variables=model.variables))

    def no_whole_read(*args, **kwargs):
        raise AssertionError("forecast read the MEDS folder whole")

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(datasets, "read_meds", no_whole_read)
        lazy = model.forecast(folder, "meds")
    pd.testing.assert_frame_equal(lazy.sort_values(["stay_id", "horizon"], ignore_index=True),
                                  whole.sort_values(["stay_id", "horizon"], ignore_index=True))
    assert lazy["stay_id"].nunique() == 120


def test_dp_sgd_trains_on_windows_spilled_to_memory_mapped_files(folder, tmp_path):
    from dpcare.timeseries.recipe import ForecastSettings, dp_sgd

    data = prepare_lazy(user_dataset(folder, "meds", SPEC), spill_dir=tmp_path / "windows", memory_bound=0)
    train = data.part("train")
    assert (tmp_path / "windows" / "train_x.f32").stat().st_size == train.x.numel() * 4  # the windows are on disk
    settings = ForecastSettings()
    settings = replace(settings, dp=settings.dp.replace(epochs=1.0))
    model, result = dp_sgd(train, settings, data.standardizer, len(data.splits["train"]), progress=False)
    assert result.steps == 4 and result.guarantee.n == 96 and result.guarantee.unit == "patient"
    assert all(torch.isfinite(p).all() for p in model.parameters())
