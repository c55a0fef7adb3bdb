"""SmartNoise baselines (MST, AIM, DP-CTGAN) run in .venv-baselines: output shape, bounds, categories, errors."""

import json

import numpy as np
import pandas as pd
import pytest
from helpers import SPEC, needs_smartnoise, toy_table

from dpcare.data import TableSchema, load_dataset, load_table
from dpcare.synth.baselines import (
    _decode,
    _encode,
    _layout,
    run_baseline,
)


def toy():
    schema = TableSchema.from_dict(SPEC)
    return load_table(toy_table(200), schema), schema


def check_output(out, df, schema, n):
    assert list(out.columns) == [c.name for c in schema.columns] and len(out) == n
    for c in schema.columns:
        s = out[c.name]
        if not c.nullable:
            assert s.notna().all(), c.name
        if c.kind == "numeric":
            assert s.dtype == float
            lo, hi = c.bounds
            assert s.dropna().between(lo, hi).all(), c.name
        else:
            assert set(s.dropna()) <= set(c.categories), c.name
    load_table(out, schema)  # the synthetic table passes the schema's own checks


def test_unknown_name_and_bad_budgets_are_refused():
    df, schema = toy()
    with pytest.raises(ValueError, match="unknown baseline 'pategan'"):
        run_baseline("pategan", df, schema, 1.0, 1e-5, 10)
    for eps in (0, -1.0, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="epsilon must be a finite number > 0"):
            run_baseline("mst", df, schema, eps, 1e-5, 10)
    for delta in (0.0, 1.0, -1e-5):
        with pytest.raises(ValueError, match="delta must be in"):
            run_baseline("aim", df, schema, 1.0, delta, 10)
    with pytest.raises(ValueError, match="n_samples"):
        run_baseline("mst", df, schema, 1.0, 1e-5, 0)
    with pytest.raises(ValueError, match="calibrated"):
        run_baseline("dpctgan", df, schema, 1.0, 1e-5, 10, options={"sigma": 1.0})


def test_columns_without_public_bounds_are_refused():
    d = json.loads(json.dumps(SPEC))
    del d["columns"][0]["bounds"]  # age
    schema = TableSchema.from_dict(d)
    with pytest.raises(ValueError, match="column 'age'.*public bounds"):
        run_baseline("mst", toy_table(20), schema, 1.0, 1e-5, 10)


def test_encoding_uses_only_the_schema_and_round_trips():
    df, schema = toy()
    layout = _layout(schema, bins=10)
    for style in ("cube", "gan"):
        enc, specs = _encode(df, layout, style, 10)
        assert {s["name"] for s in specs} == set(enc.columns)
        back = _decode(enc, layout, style, 10, np.random.default_rng(0))
        pd.testing.assert_series_equal(back["group"], df["group"], check_dtype=False)
        assert back["lab"].isna().equals(df["lab"].isna())  # missing is its own level
        tol = (100 - 18) / 10 if style == "cube" else 1e-9  # one bin width
        assert np.allclose(back["age"], df["age"], atol=tol)
    enc, specs = _encode(df, layout, "cube", 10)
    cards = {s["name"]: s["card"] for s in specs}
    assert cards == {"death": 2, "age": 10, "sex": 2, "hr": 10, "lab": 11, "group": 3}  # public, not data


@pytest.mark.slow  # end to end
@pytest.mark.parametrize("name", ["mst", "dpctgan"])
def test_baseline_on_toy_table(name):
    needs_smartnoise(name)
    df, schema = toy()
    out = run_baseline(name, df, schema, 1.0, 1e-5, 60, seed=1, bins=8, epochs=2, batch_size=100, timeout=300)
    check_output(out, df, schema, 60)
    acc = out.attrs["dp"]
    assert acc["epsilon"] == 1.0 and acc["preprocessor_epsilon"] == 0.0
    if name == "dpctgan":
        assert acc["epsilon_spent"] <= 1.0 and acc["steps"] == 2 * 2 * 2  # 2 epochs x 2 batches x (fake, real)


@pytest.mark.parametrize("name", [pytest.param("mst", marks=pytest.mark.slow),  # ~60 s each (XLA compiles)
                                  pytest.param("aim", marks=pytest.mark.slow), "dpctgan"])
def test_baseline_on_adult(name):
    needs_smartnoise(name)
    df, schema = load_dataset("adult", part="train")
    df = df.sample(300, random_state=0).reset_index(drop=True)
    out = run_baseline(name, df, schema, 1.0, 1e-5, 100, epochs=2, timeout=600)
    check_output(out, df, schema, 100)


def test_timeout_is_reported():
    needs_smartnoise("mst")
    df, schema = toy()
    with pytest.raises(TimeoutError, match="within 0.5 s"):
        run_baseline("mst", df, schema, 1.0, 1e-5, 10, timeout=0.5)


def test_dpctgan_calibration_uses_the_engine_orders():
    """The benchmark's setting (1,500 Adult rows, batch 500, 5 epochs, epsilon 1) once picked order 11, which
    SmartNoise's engine does not use, and overspent (1.0005 > 1): calibration must use the engine's orders."""
    needs_smartnoise("dpctgan")
    df, schema = load_dataset("adult", part="train")
    df = df.sample(1500, random_state=0).reset_index(drop=True)
    out = run_baseline("dpctgan", df, schema, 1.0, 1500 ** -1.1, 20, epochs=5, batch_size=500, timeout=600)
    acc = out.attrs["dp"]
    assert acc["steps"] == 2 * 3 * 5 and 0.99 < acc["epsilon_spent"] <= 1.0


def test_dpctgan_refusals_are_privacy_and_data_errors():
    """Settings the worker finds impossible come back as a PrivacyParameterError (the worker's interpreter has no
    dpcare to raise it); too few rows are refused before any worker starts."""
    from dpcare.exceptions import DataError, PrivacyParameterError

    df, schema = toy()
    with pytest.raises(DataError, match="at least 2 training rows"):
        run_baseline("dpctgan", df.iloc[:1], schema, 1.0, 1e-5, 10)
    needs_smartnoise("dpctgan")
    with pytest.raises(PrivacyParameterError, match="DP-CTGAN cannot meet epsilon = 0.01"):
        run_baseline("dpctgan", df, schema, 0.01, 1e-5, 10, epochs=1, batch_size=100, timeout=300)
