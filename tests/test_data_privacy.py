"""The encoder's core promise: statistics of protected columns come from the spec or a charged DP estimate."""

import json

import numpy as np
import pandas as pd
import pytest
from dp_accounting import dp_event
from helpers import SPEC, toy_table

from dpcare.data import TableEncoder, TableSchema, load_table, public_view, replace_private
from dpcare.exceptions import NotFittedError
from dpcare.privacy import compute_epsilon


class FakeLedger:
    """Records charges; ``delta`` only when given (the real ledger always has one)."""

    def __init__(self, delta: float | None = None):
        if delta is not None:
            self.delta = delta
        self.charges: list[tuple[str, dp_event.DpEvent, str]] = []

    def charge(self, name: str, event: dp_event.DpEvent, description: str = "") -> None:
        self.charges.append((name, event, description))


def schema_without(**drop: str) -> TableSchema:
    """SPEC with the given key ('bounds' or 'categories') removed from the named columns."""
    d = json.loads(json.dumps(SPEC))
    for col in d["columns"]:
        if col["name"] in drop:
            del col[drop[col["name"]]]
    return TableSchema.from_dict(d)


@pytest.fixture
def table():
    return load_table(toy_table(3000), TableSchema.from_dict(SPEC))


def test_undeclared_private_bounds_need_a_ledger_and_a_budget(table):
    schema = schema_without(age="bounds")
    for kwargs in ({}, {"ledger": FakeLedger(1e-5)}, {"stats_epsilon": 1.0}):
        with pytest.raises(ValueError, match=r"\['age'\].*declare bounds in the spec, or give a DP budget"):
            TableEncoder(schema, protect="private").fit(table, **kwargs)
    with pytest.raises(ValueError, match="delta"):  # calibration needs the ledger's delta
        TableEncoder(schema, protect="private").fit(table, ledger=FakeLedger(), stats_epsilon=1.0)


def test_dp_bounds_charge_exactly_once_and_are_not_the_exact_range(table):
    schema = schema_without(age="bounds")
    ledger = FakeLedger()
    enc = TableEncoder(schema, protect="private").fit(table, ledger=ledger, stats_noise_multiplier=3.0,
                                                      noise_seed=1)
    assert len(ledger.charges) == 1
    name, event, description = ledger.charges[0]
    assert "age" in name and "age" in description
    assert event == dp_event.GaussianDpEvent(3.0)
    lo, hi = enc.stats["age"]["range"]
    assert 10 < lo <= 25 and 90 <= hi < 150  # the data span 20..95; the grid is coarse (0.05 decades)
    assert (lo, hi) != (table["age"].min(), table["age"].max())
    again = TableEncoder(schema, protect="private").fit(table, ledger=FakeLedger(), stats_noise_multiplier=3.0,
                                                        noise_seed=1)
    assert again.stats == enc.stats  # the noise is seeded by noise_seed
    x = enc.transform(table)
    assert np.abs(x).max() <= 1  # values outside the estimated bounds are clipped


def test_calibrated_dp_bounds_meet_the_stats_budget(table):
    schema = schema_without(age="bounds", hr="bounds")
    ledger = FakeLedger(delta=1e-5)
    TableEncoder(schema, protect="all").fit(table, ledger=ledger, stats_epsilon=1.0)
    assert [c[0] for c in ledger.charges] == ["dp bounds of age", "dp bounds of hr"]
    assert ledger.charges[0][1] == ledger.charges[1][1]  # the budget is split evenly
    spent = compute_epsilon(dp_event.ComposedDpEvent([c[1] for c in ledger.charges]), 1e-5)
    assert 0.9 < spent <= 1.0 + 1e-6


def test_a_failed_estimate_is_still_charged():
    schema = schema_without(age="bounds")
    tiny = load_table(toy_table(5), schema)
    ledger = FakeLedger()
    with pytest.raises(ValueError, match="too few rows"):
        TableEncoder(schema).fit(tiny, ledger=ledger, stats_noise_multiplier=50.0, noise_seed=0)
    assert len(ledger.charges) == 1  # the error depends on the noisy histogram: it is a release


def test_what_is_protected_depends_on_the_method(table):
    hr_open = schema_without(hr="bounds")
    ledger = FakeLedger()
    TableEncoder(hr_open, protect="private").fit(table, ledger=ledger, stats_noise_multiplier=2.0)
    assert ledger.charges == []  # public column under feature-level DP: fitted from data
    with pytest.raises(ValueError, match="hr"):
        TableEncoder(hr_open, protect="all").fit(table)  # DP-SGD protects every column
    age_open = schema_without(age="bounds", sex="categories")
    enc = TableEncoder(age_open, protect="label").fit(table)  # Label-DP protects only the target
    assert enc.stats["age"]["range"] == (table["age"].min(), table["age"].max())
    assert enc.stats["sex"]["categories"] == ["female", "male"]
    with pytest.raises(ValueError, match="'sex'.*declare its categories"):
        TableEncoder(age_open.with_roles(["sex"]), protect="private").fit(table)
    with pytest.raises(ValueError, match="protect must be"):
        TableEncoder(age_open, protect="features")


@pytest.mark.parametrize("protect", ["private", "all"])
def test_declared_statistics_ignore_private_values(table, protect):
    schema = TableSchema.from_dict(SPEC)
    other = table.assign(age=np.linspace(200, 300, len(table)), sex="male")  # even out-of-bounds values
    a = TableEncoder(schema, protect=protect).fit(table).state_dict()
    assert a == TableEncoder(schema, protect=protect).fit(other).state_dict()
    if protect == "private":  # the private columns need not even be there
        assert a == TableEncoder(schema, protect=protect).fit(public_view(table, schema)).state_dict()


@pytest.mark.parametrize("pad", ["gaussian", "zeros"])
def test_public_branch_never_reads_private_values(table, pad):
    schema = TableSchema.from_dict(SPEC)
    enc = TableEncoder(schema).fit(table)
    changed = table.assign(age=np.full(len(table), 99.0), sex=np.where(table["sex"] == "male", "female", "male"))
    a = enc.transform_public(public_view(table, schema), pad=pad, seed=7)
    b = enc.transform_public(public_view(changed, schema), pad=pad, seed=7)
    assert a.dtype == np.float32 and a.tobytes() == b.tobytes()
    pub_only = table[schema.public_columns]  # no target either
    assert enc.transform_public(pub_only, pad=pad, seed=7).tobytes() == a.tobytes()
    mask = enc.private_feature_mask
    assert np.array_equal(a[:, ~mask], enc.transform(table)[:, ~mask])
    with pytest.raises(ValueError, match="pad must be"):
        enc.transform_public(pub_only, pad="mean")


def test_encoding_details(table):
    schema = TableSchema.from_dict(SPEC)
    enc = TableEncoder(schema).fit(table)
    x = enc.transform(table)
    sl = enc.column_slices
    assert list(sl) == schema.feature_columns and sl["lab"] == slice(4, 6)
    lab, flag = x[:, 4], x[:, 5]
    assert np.array_equal(flag == 1, table["lab"].isna().to_numpy()) and (lab[flag == 1] == 0).all()  # midpoint
    edge = table.head(2).assign(hr=[-5.0, 1e6])  # outside [20, 250]: clipped, not an error
    assert enc.transform(edge)[:, 3].tolist() == [-1.0, 1.0]
    with pytest.raises(ValueError, match="column 'hr' has 1 missing"):
        enc.transform(table.head(3).assign(hr=[1.0, np.nan, 2.0]))
    y = enc.encode_target(table)
    assert y.dtype == np.float32 and set(np.unique(y)) == {0.0, 1.0}
    with pytest.raises(NotFittedError, match="fit"):
        TableEncoder(schema).transform(table)


def test_multiclass_target_and_state_round_trip(table):
    d = json.loads(json.dumps(SPEC))
    d["target"] = {"name": "group", "categories": ["a", "b", "c"]}
    d["columns"] = [c for c in d["columns"] if c["name"] != "group"] + [
        {"name": "death", "kind": "categorical", "categories": [0, 1]}]
    del d["columns"][0]["bounds"]  # age: a DP estimate
    schema = TableSchema.from_dict(d)
    enc = TableEncoder(schema).fit(table, ledger=FakeLedger(), stats_noise_multiplier=2.0)
    y = enc.encode_target(table)
    assert y.dtype == np.int64 and set(np.unique(y)) == {0, 1, 2}
    back = TableEncoder.from_state_dict(json.loads(json.dumps(enc.state_dict())))
    assert back.feature_names == enc.feature_names and back.protect == enc.protect
    assert back.transform(table).tobytes() == enc.transform(table).tobytes()


def test_hybrid_rows(table):
    schema = TableSchema.from_dict(SPEC)
    imputed = pd.DataFrame({"age": np.full(len(table), 40.0), "sex": np.where(np.arange(len(table)) % 2, 1, 0)})
    with pytest.raises(ValueError, match=r"imputed column 'sex' has values \['0', '1'\]"):
        replace_private(table, imputed, schema)
    imputed["sex"] = "male"
    hybrid = replace_private(table, imputed, schema)
    keep = [*schema.public_columns, schema.target]
    pd.testing.assert_frame_equal(hybrid[keep], table[keep])
    assert (hybrid["sex"] == "male").all() and (table["sex"] != "male").any()  # the input is not modified
    with pytest.raises(ValueError, match="rows"):
        replace_private(table, imputed.head(3), schema)
