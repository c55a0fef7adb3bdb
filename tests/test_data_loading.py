"""Specs, table loading, splits and the bundled real data sets."""

import builtins
import json
import logging
from importlib import resources

import numpy as np
import pytest
from helpers import SPEC, toy_table

from dpcare.data import (
    BUNDLED,
    ColumnSpec,
    TableSchema,
    bundled_spec,
    load_dataset,
    load_spec,
    load_table,
    split_table,
)


def test_spec_forms_are_equivalent(tmp_path):
    a = TableSchema.from_dict(SPEC)
    inline = {"name": SPEC["name"], "columns": [{**SPEC["target"], "role": "target"}, *SPEC["columns"]]}
    b = TableSchema.from_dict(inline)
    assert b.target == "death" and b.feature_columns == a.feature_columns
    assert TableSchema(list(a.columns), a.name) == TableSchema(a.columns, a.name)
    assert ColumnSpec("x").role == "public" and ColumnSpec("x").kind == "numeric"
    (tmp_path / "s.json").write_text(json.dumps(SPEC))
    assert load_spec(tmp_path / "s.json") == a
    (tmp_path / "s.toml").write_text("x")
    with pytest.raises(ValueError, match="yaml, .yml or .json"):
        load_spec(tmp_path / "s.toml")
    with pytest.raises(ValueError, match="found 2"):
        TableSchema.from_dict({**inline, "target": {**SPEC["target"], "name": "died"}})
    with pytest.raises(ValueError, match="column 'lab': log1p needs bounds above -1"):
        TableSchema.from_dict({**SPEC, "columns": [{"name": "lab", "bounds": [-2, 5], "transform": "log1p"}]})
    with pytest.raises(ValueError, match="column 'g': categories must be a non-empty list without repeats"):
        TableSchema.from_dict({**SPEC, "columns": [{"name": "g", "kind": "categorical", "categories": ["a", "a"]}]})
    with pytest.raises(KeyError, match="'weight' is not in the spec"):
        a.column("weight")


def test_loading_cleans_and_orders(caplog):
    schema = TableSchema.from_dict(SPEC)
    raw = toy_table(30)
    raw = raw[raw.columns[::-1]].assign(note="free text", death=raw["death"].astype(float))
    with caplog.at_level(logging.WARNING, logger="dpcare.data.tables"):
        df = load_table(raw, schema)
    assert "note" in caplog.text and "note" not in df
    assert list(df.columns) == [c.name for c in schema.columns]
    assert df["death"].isin(["0", "1"]).all()  # 1.0 read from a file equals the declared 1
    assert df["hr"].dtype == float
    assert raw.columns[0] == "death"  # the caller's frame is untouched


def test_infinite_numbers_are_named():
    bad = toy_table(20).assign(hr=lambda d: d["hr"].where(d.index != 2, np.inf))
    with pytest.raises(ValueError, match="column 'hr' has 1 infinite"):
        load_table(bad, TableSchema.from_dict(SPEC))


def test_header_only_csv_and_bad_numbers_in_files(tmp_path):
    schema = TableSchema.from_dict(SPEC)
    toy_table(5).iloc[:0].to_csv(tmp_path / "header.csv", index=False)
    with pytest.raises(ValueError, match="header.csv has no rows"):
        load_table(tmp_path / "header.csv", schema)
    toy_table(5).assign(age=["1", "2", "n/a?", "4", "5"]).to_csv(tmp_path / "t.csv", index=False)
    with pytest.raises(ValueError, match="column 'age' is numeric.*'n/a\\?'"):
        load_table(tmp_path / "t.csv", schema)


def test_stratified_split_keeps_every_row_and_the_class_balance():
    df = toy_table(1000).reset_index()
    df.loc[::50, "group"] = np.nan  # a stratum of missing values is not lost
    parts = split_table(df, {"public": 0.1, "train": 0.7, "val": 0.1, "test": 0.1}, seed=0, stratify="group")
    assert sorted(np.concatenate([p["index"] for p in parts.values()])) == list(range(1000))
    assert [len(p) for p in parts.values()] == pytest.approx([100, 700, 100, 100], abs=3)
    rate = df["death"].mean()
    strat = split_table(df, {"train": 0.8, "test": 0.2}, seed=5, stratify="death")
    assert all(abs(p["death"].mean() - rate) < 0.005 for p in strat.values())
    with pytest.raises(ValueError, match="cannot stratify on 'outcome'"):
        split_table(df, {"train": 0.8, "test": 0.2}, seed=0, stratify="outcome")
    with pytest.raises(ValueError, match="positive"):
        split_table(df, {"train": 1.0, "test": 0.0}, seed=0)
    with pytest.raises(ValueError, match="'test' is empty"):
        split_table(df.head(3), {"train": 0.9, "test": 0.1}, seed=0)


def test_bundled_specs_are_self_contained():
    for name in BUNDLED:
        text = (resources.files("dpcare.data") / "specs" / f"{name}.yaml").read_text()
        assert "&id" not in text and "*id" not in text  # no YAML aliases: each column reads on its own
        schema = bundled_spec(name)
        assert all(c.bounds is not None or c.categories is not None for c in schema.columns)
    with pytest.raises(ValueError, match="unknown bundled data set 'mimic'"):
        bundled_spec("mimic")


def test_support2_columns():
    df, schema = load_dataset("support2")
    assert df.shape == (9105, 28)
    assert set(schema.public_columns) == {
        "num_co", "scoma", "meanbp", "wblc", "hrt", "resp", "temp", "pafi", "alb", "bili", "crea", "sod", "ph",
        "glucose", "bun", "urine", "adlp", "adls", "dzgroup", "dzclass", "diabetes", "dementia", "ca"}
    assert not {"edu", "dnr", "sfdm2", "surv2m", "surv6m", "sps", "aps", "hday", "time", "pid", "event"} & set(df)
    assert 0.6 < df["death"].eq("1").mean() < 0.75
    nullable = {c.name for c in schema.columns if c.nullable}
    assert set(df.columns[df.isna().any()]) <= nullable


def test_rhc_and_adult_parts():
    df, schema = load_dataset("rhc")
    assert df.shape == (5735, 51) and schema.target == "death"
    assert not {"surv2md1", "time", "pid", "event"} & set(df)
    train, _ = load_dataset("adult", part="train")
    test, schema = load_dataset("adult", part="test")
    assert len(train) == 32561 and len(test) == 16281 and "fnlwgt" not in train
    assert set(test["income"]) == {"<=50K", ">50K"}  # adult.test's trailing "." is gone
    assert not (train == "?").any().any() and train["occupation"].isna().any()
    with pytest.raises(ValueError, match="part must be"):
        load_dataset("adult", part="validation")


def test_missing_survset_says_how_to_install(monkeypatch):
    real_import = builtins.__import__

    def no_survset(name, *args, **kwargs):
        if name.startswith("SurvSet"):
            raise ImportError(name)
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_survset)
    with pytest.raises(ImportError, match=r"pip install 'dpcare\[data\]'"):
        load_dataset("support2")
