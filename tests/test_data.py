"""Schema, loaders, bundled data, splits and the encoder's no-silent-leak rule."""

import json

import numpy as np
import pandas as pd
import pytest
from helpers import SPEC, toy_table

from dpcare.data import (
    TableEncoder,
    TableSchema,
    load_dataset,
    load_spec,
    load_table,
    public_view,
    replace_private,
    save_spec,
    split_table,
)
from dpcare.privacy import PrivacyLedger


def spec_with(**changes):
    d = json.loads(json.dumps(SPEC))
    for name, patch in changes.items():
        col = next(c for c in d["columns"] if c["name"] == name)
        col.update(patch)
        for k in [k for k, v in patch.items() if v is None]:
            del col[k]
    return TableSchema.from_dict(d)


@pytest.mark.parametrize(
    "mutate, match",
    [
        (lambda d: d["target"].update(role="private"), "target 'death' cannot have role 'private'"),
        (lambda d: d["columns"].append({"name": "age", "kind": "numeric"}), r"more than once: \['age'\]"),
        (lambda d: d["columns"][0].update(bounds=[5, 5]), "column 'age': bounds need lo < hi"),
        (lambda d: d["columns"][0].update(kind="text"), "column 'age': kind"),
        (lambda d: d["columns"][0].update(role="secret"), "column 'age': role"),
        (lambda d: d["columns"][1].update(bounds=[0, 1]), "column 'sex': bounds are only for numeric"),
        (lambda d: d["columns"][0].update(colour="red"), "unknown keys"),
        (lambda d: d.pop("target"), "exactly one target"),
        (lambda d: d["target"].pop("categories"), "declared categories"),
        (lambda d: d.update(epsilon=1.0), r"unknown spec key\(s\) \['epsilon'\]: a table spec has 'name', 'target'"),
    ],
)
def test_bad_specs_are_named(mutate, match):
    d = json.loads(json.dumps(SPEC))
    mutate(d)
    with pytest.raises(ValueError, match=match):
        TableSchema.from_dict(d)


def test_spec_round_trips_yaml_and_json(tmp_path):
    schema = TableSchema.from_dict({**SPEC, "source": "a toy table", "licence": "CC0"})  # descriptive keys kept
    assert schema.meta == {"source": "a toy table", "licence": "CC0"}
    for ext in ("yaml", "json"):
        save_spec(schema, tmp_path / f"s.{ext}")
        assert load_spec(tmp_path / f"s.{ext}") == schema
    assert schema.private_columns == ["age", "sex"] and schema.target == "death"
    with pytest.raises(FileNotFoundError, match="nope.yaml"):
        load_spec(tmp_path / "nope.yaml")
    (tmp_path / "empty.yaml").write_text("")
    with pytest.raises(ValueError, match="empty"):
        load_spec(tmp_path / "empty.yaml")


def test_require_public_and_role_changes():
    schema = TableSchema.from_dict(SPEC)
    all_private = schema.with_roles(["age", "sex", "hr", "lab", "group"])
    with pytest.raises(ValueError, match="at least one public column"):
        all_private.require_public()
    with pytest.raises(ValueError, match="unknown feature columns"):
        schema.with_roles(["weight"])


def test_a_spec_narrowed_to_some_columns_keeps_their_order_name_and_meta():
    schema = TableSchema.from_dict(SPEC)
    narrow = schema.select(["group", "death", "age"])
    assert [c.name for c in narrow.columns] == [c.name for c in schema.columns if c.name in {"group", "death", "age"}]
    assert narrow.columns == tuple(schema.column(c.name) for c in narrow.columns)
    assert (narrow.name, narrow.meta) == (schema.name, schema.meta)
    with pytest.raises(ValueError, match="exactly one target column"):
        schema.select(["age", "sex"])


@pytest.mark.parametrize(
    "change, match",
    [
        (lambda df: df.drop(columns=["lab"]), r"lacks the spec columns \['lab'\]"),
        (lambda df: df.assign(hr=df["hr"].astype(object).where(df.index != 3, "high")), "column 'hr' is numeric.*'high'"),
        (lambda df: df.assign(age=df["age"].where(df.index > 4)), "column 'age' has 5 missing"),
        (lambda df: df.assign(group=df["group"].where(df.index != 0, "z")), r"column 'group' has values \['z'\]"),
        (lambda df: df.assign(death=df["death"].where(df.index != 0, 7)), r"column 'death' has values \['7'\]"),
        (lambda df: df.iloc[:0], "no rows"),
    ],
)
def test_bad_tables_are_named(change, match):
    with pytest.raises(ValueError, match=match):
        load_table(change(toy_table()), TableSchema.from_dict(SPEC))


def test_files_csv_parquet_and_errors(tmp_path):
    schema = TableSchema.from_dict(SPEC)
    df = toy_table(50)
    df.to_csv(tmp_path / "t.csv", index=False)
    df.to_parquet(tmp_path / "t.parquet")
    a, b = load_table(tmp_path / "t.csv", schema), load_table(tmp_path / "t.parquet", schema)
    pd.testing.assert_frame_equal(a, b)
    assert a["death"].isin(["0", "1"]).all()
    (tmp_path / "empty.csv").write_text("")
    with pytest.raises(ValueError, match="empty"):
        load_table(tmp_path / "empty.csv", schema)
    with pytest.raises(FileNotFoundError, match="missing.csv"):
        load_table(tmp_path / "missing.csv", schema)
    (tmp_path / "t.xlsx").write_text("x")
    with pytest.raises(ValueError, match="unknown format"):
        load_table(tmp_path / "t.xlsx", schema)


@pytest.mark.parametrize("name, rows, private", [
    ("support2", 9105, ["age", "sex", "race", "income"]),
    ("rhc", 5735, ["age", "sex", "race", "income", "ninsclas", "edu"]),
    ("adult", 48842, ["age", "marital-status", "relationship", "race", "sex", "native-country"]),
])
def test_bundled_data_sets(name, rows, private):
    df, schema = load_dataset(name)
    assert len(df) == rows and schema.private_columns == private
    leaks = {"time", "pid", "surv2m", "surv6m", "sfdm2", "hday", "sps", "surv2md1", "fnlwgt"}
    assert not leaks & set(df.columns)
    assert schema.meta.get("licence") and schema.meta.get("source")
    # every column's encoding statistics are declared: DP-SGD needs no data-dependent statistic
    TableEncoder(schema, protect="all").fit(df.head(50))


def test_splits_are_deterministic_and_disjoint():
    df = toy_table(101).reset_index().rename(columns={"index": "row"})
    a = split_table(df, {"train": 0.7, "val": 0.15, "test": 0.15}, seed=3)
    b = split_table(df, {"train": 0.7, "val": 0.15, "test": 0.15}, seed=3)
    assert all(a[k].equals(b[k]) for k in a)
    rows = [set(p["row"]) for p in a.values()]
    assert sum(map(len, rows)) == 101 and set.union(*rows) == set(range(101))
    assert not split_table(df, {"train": 0.7, "val": 0.15, "test": 0.15}, seed=4)["test"].equals(a["test"])
    with pytest.raises(ValueError, match="sum to 1"):
        split_table(df, {"train": 0.7, "test": 0.2}, seed=0)


def test_protected_statistics_are_never_read_silently():
    schema = spec_with(age={"bounds": None})
    df = load_table(toy_table(2000), schema)
    with pytest.raises(ValueError, match="'age'.*no declared bounds|age.*declare bounds"):
        TableEncoder(schema, protect="private").fit(df)
    ledger = PrivacyLedger(len(df))
    enc = TableEncoder(schema, protect="private").fit(df, ledger=ledger, stats_epsilon=0.5, noise_seed=0)
    assert [e.name for e in ledger.entries] == ["dp bounds of age"]
    assert 0 < ledger.epsilon() <= 0.5
    lo, hi = enc.stats["age"]["range"]
    assert lo <= 25 and hi >= 90 and lo > 5 and hi < 300  # near the real range (20..95), from a coarse grid
    # a public column without bounds is fitted freely under feature-level DP, but not under DP-SGD
    schema2 = spec_with(hr={"bounds": None})
    TableEncoder(schema2, protect="private").fit(load_table(toy_table(), schema2))
    with pytest.raises(ValueError, match="hr"):
        TableEncoder(schema2, protect="all").fit(load_table(toy_table(), schema2))
    schema3 = spec_with(sex={"categories": None})
    with pytest.raises(ValueError, match="'sex'.*declare its categories"):
        TableEncoder(schema3, protect="private").fit(load_table(toy_table(), schema3))


def test_encoder_with_declared_bounds_ignores_private_values():
    schema = TableSchema.from_dict(SPEC)
    df = load_table(toy_table(), schema)
    other = df.assign(age=np.linspace(18, 100, len(df)), sex="male")
    assert TableEncoder(schema).fit(df).state_dict() == TableEncoder(schema).fit(other).state_dict()


def test_encoding_layout_and_public_transform():
    schema = TableSchema.from_dict(SPEC)
    df = load_table(toy_table(), schema)
    enc = TableEncoder(schema).fit(df)
    x = enc.transform(df)
    assert x.shape == (len(df), len(enc.feature_names)) and np.abs(x).max() <= 1
    assert enc.feature_names == ["age", "sex=female", "sex=male", "hr", "lab", "lab__missing", "group=a",
                                 "group=b", "group=c"]
    assert enc.private_feature_mask.tolist() == [True, True, True] + [False] * 6
    pub = public_view(df, schema)
    assert "age" not in pub and "sex" not in pub
    zeros = enc.transform_public(pub, pad="zeros")
    assert np.array_equal(zeros[:, ~enc.private_feature_mask], x[:, ~enc.private_feature_mask])
    assert not zeros[:, enc.private_feature_mask].any()
    gauss = enc.transform_public(pub, pad="gaussian", seed=1)
    assert gauss[:, enc.private_feature_mask].std() == pytest.approx(1.0, rel=0.1)
    with pytest.raises(ValueError, match="private columns"):
        enc.transform_public(df)
    again = TableEncoder.from_state_dict(json.loads(json.dumps(enc.state_dict())))
    assert np.array_equal(again.transform(df), x)


def test_hybrid_rows_keep_public_values_exactly():
    schema = TableSchema.from_dict(SPEC)
    df = load_table(toy_table(), schema)
    imputed = pd.DataFrame({"age": np.full(len(df), 50.0), "sex": ["female"] * len(df)})
    hybrid = replace_private(df, imputed, schema)
    pd.testing.assert_frame_equal(hybrid[schema.public_columns + [schema.target]],
                                  df[schema.public_columns + [schema.target]])
    assert (hybrid["age"] == 50).all()
    with pytest.raises(ValueError, match="private columns"):
        replace_private(df, imputed.drop(columns=["sex"]), schema)


def test_values_outside_their_declared_bounds_are_counted_and_refused_above_the_spec_share():
    """Issue 54 part 4: the encoder clips to the declared bounds, so a table in other units (negated, scaled)
    was silently scored; now each column's values outside its bounds are counted, refused above the spec's
    max_out_of_range, else said in a warning that holds exact counts (ExactStatisticWarning)."""
    import warnings

    from dpcare.data.tables import OutOfRangeWarning
    from dpcare.exceptions import DataError, ExactStatisticWarning, SpecError

    SCHEMA = TableSchema.from_dict(SPEC)

    table = toy_table(200)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        load_table(table, SCHEMA)  # inside the bounds: nothing said
    few = table.assign(hr=[300.0] * 4 + list(table["hr"][4:]))  # 2% above 250: kept, clipped, said
    with pytest.warns(OutOfRangeWarning, match=r"'hr' 4 of 200 \(2.0%\): 0 below 20, 4 above 250"):
        load_table(few, SCHEMA)
    assert issubclass(OutOfRangeWarning, ExactStatisticWarning)
    with pytest.raises(DataError, match=r"'age' 200 of 200 \(100.0%\): 200 below 18, 0 above 100"):
        load_table(table.assign(age=-table["age"]), SCHEMA)
    strict = TableSchema.from_dict({**SPEC, "max_out_of_range": 0.0})
    with pytest.raises(DataError, match=r"'hr' 4 of 200.*at most 0.0%"):
        load_table(few, strict)
    loose = TableSchema.from_dict({**SPEC, "max_out_of_range": 1.0})
    with pytest.warns(OutOfRangeWarning):
        load_table(table.assign(age=-table["age"]), loose)
    with pytest.raises(SpecError, match="max_out_of_range must be a share"):
        TableSchema.from_dict({**SPEC, "max_out_of_range": "high"})
