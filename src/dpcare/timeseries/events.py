"""The long event table (patient, stay, time, variable, value) and readers for MEDS, CLIF, MIMIC.

After :func:`validate_events`, ``time`` is float hours since the start of the stay: datetimes
become hours since the stay's first event; numbers (or timedeltas) are taken as already relative
to the stay's start and only scaled to hours.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterable
from datetime import date
from pathlib import Path

import numpy as np
import pandas as pd

from dpcare.exceptions import DataError, MissingFileError, SettingsError, UnknownNameError

EVENT_COLUMNS = ("patient_id", "stay_id", "time", "variable", "value")
TIME_UNITS = {"hours": 1.0, "days": 24.0, "minutes": 1.0 / 60.0}


def _examples(values: pd.Series, limit: int = 3) -> str:
    return ", ".join(f"{v!r} (row {i})" for i, v in values.head(limit).items())


def _ids_as_str(s: pd.Series, column: str) -> pd.Series:
    missing = s.isna()
    if missing.any():
        raise DataError(f"column '{column}' has {int(missing.sum())} missing id(s), "
                         f"first at row {int(np.flatnonzero(missing.to_numpy())[0])}")
    if pd.api.types.is_float_dtype(s) and bool((s == np.floor(s)).all()):
        s = s.astype("int64")  # ids read as floats (a CSV column with gaps): 12.0 -> "12"
    return s.astype(str)


def _parse_datetimes(s: pd.Series) -> pd.Series:
    """Strings and date/time objects -> UTC datetimes; anything else (numbers mixed in) -> NaT."""
    text = s.map(lambda v: isinstance(v, str)).astype(bool)
    ok = text | s.map(lambda v: isinstance(v, (date, np.datetime64))).astype(bool)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        parsed = pd.to_datetime(s.where(ok), errors="coerce", utc=True).dt.as_unit("us")
        retry = parsed.isna() & text
        if retry.any():  # strings in another format than the one pandas inferred first
            again = pd.to_datetime(s[retry], errors="coerce", utc=True, format="mixed")
            parsed[retry] = again.dt.as_unit("us")
    return parsed


def _parse_times(s: pd.Series, time_unit: str) -> tuple[pd.Series, bool]:
    """Times as float hours (numbers, timedeltas) or UTC datetimes; second item: is datetime."""
    if pd.api.types.is_bool_dtype(s):
        raise DataError("column 'time' holds booleans, not times")
    if pd.api.types.is_numeric_dtype(s):
        parsed, is_dt = s.astype("float64") * TIME_UNITS[time_unit], False
    elif pd.api.types.is_timedelta64_dtype(s):
        parsed, is_dt = s / pd.Timedelta(hours=1), False
    elif pd.api.types.is_datetime64_any_dtype(s):
        parsed, is_dt = s, True
    else:
        numbers = pd.to_numeric(s, errors="coerce")
        # all numbers, or mostly: then the few that are not are the unreadable ones (not the numbers)
        if bool(numbers.notna().sum() == s.notna().sum()) or numbers.notna().sum() > s.notna().sum() / 2:
            parsed, is_dt = numbers.astype("float64") * TIME_UNITS[time_unit], False
        else:
            parsed, is_dt = _parse_datetimes(s), True
    if is_dt:
        bad = parsed.isna()
    else:
        bad = pd.Series(~np.isfinite(parsed.to_numpy(dtype="float64", na_value=np.nan)),
                        index=s.index)
    if bad.any():
        raise DataError(f"column 'time': {int(bad.sum())} value(s) cannot be read as a time, "
                         f"e.g. {_examples(s[bad])}")
    return parsed, is_dt


def _parse_values(values: pd.Series, variables: pd.Series) -> pd.Series:
    if pd.api.types.is_bool_dtype(values) or pd.api.types.is_numeric_dtype(values):
        out = values.astype("float64")
        bad = pd.Series(False, index=values.index)
    else:
        out = pd.to_numeric(values, errors="coerce").astype("float64")
        bad = out.isna() & values.notna()
    bad |= np.isinf(out)
    if bad.any():
        i = bad[bad].index[0]
        raise DataError(f"column 'value': variable '{variables[i]}' has a non-numeric or infinite "
                         f"value {values[i]!r} (row {i}); {int(bad.sum())} bad value(s) in all")
    return out


def validate_events(df: pd.DataFrame, *, time_unit: str = "hours") -> pd.DataFrame:
    """Check a long event table and normalise it to EVENT_COLUMNS with time in hours.

    Times may be datetimes or parseable strings (-> hours since each stay's first event), or
    numbers/timedeltas already relative to the stay's start (numbers are in ``time_unit``:
    hours, days or minutes). Values must be numeric; rows with a missing value are dropped.
    Row numbers in error messages are positions in ``df`` (0-based). Row order is kept.
    """
    if not isinstance(df, pd.DataFrame):
        raise TypeError(f"the event table must be a pandas DataFrame, got {type(df).__name__}")
    if time_unit not in TIME_UNITS:
        raise SettingsError(f"time_unit must be one of {sorted(TIME_UNITS)}, got {time_unit!r}")
    missing = [c for c in EVENT_COLUMNS if c not in df.columns]
    if missing:
        raise DataError(f"the event table lacks column(s) {missing}; "
                         f"columns present: {[str(c) for c in df.columns]}")
    if len(df) == 0:
        raise DataError("the event table is empty")
    ev = df[list(EVENT_COLUMNS)].reset_index(drop=True)
    out = pd.DataFrame({c: _ids_as_str(ev[c], c) for c in ("patient_id", "stay_id", "variable")})
    times, is_dt = _parse_times(ev["time"], time_unit)
    out["value"] = _parse_values(ev["value"], out["variable"])
    out["time"] = times
    out = out[out["value"].notna()]
    if len(out) == 0:
        raise DataError("the event table has no non-missing value")
    if is_dt:
        start = out.groupby("stay_id", sort=False)["time"].transform("min")
        out["time"] = (out["time"] - start) / pd.Timedelta(hours=1)
    out["time"] = out["time"].astype("float64")
    owners = out.groupby("stay_id", sort=False)["patient_id"].nunique()
    if (owners > 1).any():
        stay = owners[owners > 1].index[0]
        pats = sorted(out.loc[out["stay_id"] == stay, "patient_id"].unique())
        raise DataError(f"stay '{stay}' belongs to more than one patient: {pats[:5]}")
    return out[list(EVENT_COLUMNS)].reset_index(drop=True)


def _in_file(path: Path | str, table: pd.DataFrame, *, time_unit: str = "hours") -> pd.DataFrame:
    """validate_events with the file's name in every error."""
    try:
        return validate_events(table, time_unit=time_unit)
    except ValueError as err:
        raise DataError(f"{path}: {err}") from None


def _need_file(path: Path | str) -> Path:
    path = Path(path)
    if not path.exists():
        raise MissingFileError(f"no such file or folder: {path}")
    return path


def _need_columns(path: Path, present: Iterable[str], needed: Iterable[str],
                  shown: Iterable[str] | None = None) -> None:
    present = list(present)
    missing = [c for c in needed if c not in present]
    if missing:
        raise DataError(f"{path}: missing column(s) {missing}; "
                         f"columns present: {list(shown if shown is not None else present)}")


def _need_csv_columns(df: pd.DataFrame, needed: Iterable[str]) -> None:
    _need_columns(df.attrs["path"], df.columns, needed, shown=df.attrs["header"])


def _parquet_names(path: Path) -> list[str]:
    import pyarrow.parquet as pq

    return list(pq.read_schema(path).names)


# ---------------------------------------------------------------------------------------- MEDS

def read_meds(path: Path | str, codes: Iterable[str] | None = None) -> pd.DataFrame:
    """Events from a MEDS parquet file or folder (its ``data/`` shards, read recursively, whole, into memory):
    subject_id, time, code, numeric_value. Patient = stay = subject_id; rows without numeric_value or time
    (static measurements) are dropped; ``codes`` keeps only those codes. A folder larger than memory:
    :func:`dpcare.timeseries.meds.meds_windows` reads it lazily into windows."""
    from dpcare.timeseries.meds import meds_shards

    path = _need_file(path)
    files = meds_shards(path)  # data/ of a MEDS folder (not metadata/), else every .parquet under it
    needed = ["subject_id", "time", "code", "numeric_value"]
    frames = []
    for f in files:
        _need_columns(f, _parquet_names(f), needed)
        frames.append(pd.read_parquet(f, columns=needed))
    meds = pd.concat(frames, ignore_index=True)
    if codes is not None:
        wanted = [str(c) for c in codes]
        meds = meds[meds["code"].astype(str).isin(wanted)]
        if len(meds) == 0:
            raise DataError(f"{path}: none of the codes {wanted[:10]} occurs")
    meds = meds[meds["time"].notna() & meds["numeric_value"].notna()]
    table = pd.DataFrame({"patient_id": meds["subject_id"], "stay_id": meds["subject_id"],
                          "time": meds["time"], "variable": meds["code"],
                          "value": meds["numeric_value"]})
    return _in_file(path, table)


# ---------------------------------------------------------------------------------------- CLIF

# table -> (time column(s), first one preferred per row; category column; value column)
CLIF_TABLES = {
    "vitals": (("recorded_dttm",), "vital_category", "vital_value"),
    "labs": (("lab_result_dttm", "lab_collect_dttm"), "lab_category", "lab_value_numeric"),
    "patient_assessments": (("recorded_dttm",), "assessment_category", "numerical_value"),
}


def _clif_table(folder: Path, table: str, variables: list[str] | None) -> pd.DataFrame:
    times, category, value = CLIF_TABLES[table]
    path = _need_file(folder / f"clif_{table}.parquet")
    names = _parquet_names(path)
    time_cols = [c for c in times if c in names]
    if not time_cols:
        raise DataError(f"{path}: no time column (looked for {list(times)}); columns present: "
                         f"{names}")
    _need_columns(path, names, ["hospitalization_id", category, value])
    df = pd.read_parquet(path, columns=["hospitalization_id", category, value, *time_cols])
    if variables is not None:
        df = df[df[category].isin(variables)]
    time = df[time_cols[0]]
    for col in time_cols[1:]:  # per row: the next column where the preferred one is missing
        time = time.fillna(df[col])
    return pd.DataFrame({"stay_id": df["hospitalization_id"].astype(str), "time": time,
                         "variable": df[category], "value": df[value]})


def read_clif(folder: Path | str, tables: Iterable[str] = ("vitals", "labs"),
              variables: Iterable[str] | None = None) -> pd.DataFrame:
    """Events from a CLIF parquet folder: ``clif_<table>.parquet`` for tables in CLIF_TABLES
    (vitals, labs, patient_assessments) plus ``clif_hospitalization.parquet`` for patient_id.
    Stay = hospitalization_id, variable = the CLIF category (e.g. heart_rate), lab time = result
    time, else collection time. ``variables`` keeps only those categories."""
    folder = _need_file(folder)
    tables = list(tables)
    unknown = [t for t in tables if t not in CLIF_TABLES]
    if unknown or not tables:
        raise UnknownNameError(f"unknown CLIF table(s) {unknown or tables}; "
                               f"choose from {list(CLIF_TABLES)}")
    chosen = None if variables is None else [str(v) for v in variables]
    events = pd.concat([_clif_table(folder, t, chosen) for t in tables], ignore_index=True)
    if chosen is not None:
        absent = sorted(set(chosen) - set(events["variable"].astype(str)))
        if absent:
            raise DataError(f"{folder}: variable(s) {absent} not found in tables {tables}")
    hosp_path = _need_file(folder / "clif_hospitalization.parquet")
    _need_columns(hosp_path, _parquet_names(hosp_path), ["hospitalization_id", "patient_id"])
    hosp = pd.read_parquet(hosp_path, columns=["hospitalization_id", "patient_id"])
    owner = dict(zip(hosp["hospitalization_id"].astype(str), hosp["patient_id"].astype(str)))
    events["patient_id"] = events["stay_id"].map(owner)
    orphans = events.loc[events["patient_id"].isna(), "stay_id"]
    if len(orphans):
        raise DataError(f"{hosp_path}: {orphans.nunique()} hospitalization_id(s) of the events "
                         f"are not listed, e.g. {orphans.iloc[0]!r}")
    return _in_file(folder, events[list(EVENT_COLUMNS)])


# ---------------------------------------------------------------------------------------- MIMIC

def _read_csv(path: Path | str, needed: set[str], itemids: set[int] | None) -> pd.DataFrame:
    """Lower-cased columns in ``needed`` (MIMIC-III is upper case), filtered by itemid."""
    path = _need_file(path)
    header = pd.read_csv(path, nrows=0).columns
    chunks = []
    for chunk in pd.read_csv(path, usecols=lambda c: c.lower() in needed, chunksize=1_000_000,
                             low_memory=False):
        chunk.columns = [c.lower() for c in chunk.columns]
        if itemids is not None and "itemid" in chunk.columns:
            chunk = chunk[chunk["itemid"].isin(itemids)]
        chunks.append(chunk)
    df = pd.concat(chunks, ignore_index=True) if chunks else pd.DataFrame(columns=sorted(needed))
    df.attrs["path"], df.attrs["header"] = path, [str(c) for c in header]
    return df


def _labels(path: Path | str | None) -> dict[int, str]:
    if path is None:
        return {}
    df = _read_csv(path, {"itemid", "label"}, None)
    _need_csv_columns(df, ["itemid", "label"])
    df = df.dropna()
    return dict(zip(df["itemid"].astype("int64"), df["label"].astype(str)))


def _stay_ids(df: pd.DataFrame, needed: list[str]) -> pd.Series:
    """ICU stay ids as str from stay_id (MIMIC-IV) or icustay_id (MIMIC-III); rows without one
    are dropped by the caller."""
    col = next((c for c in ("stay_id", "icustay_id") if c in df.columns), None)
    if col is None:
        raise DataError(f"{df.attrs['path']}: missing column stay_id (or icustay_id); "
                         f"columns present: {df.attrs['header']}")
    _need_csv_columns(df, needed)
    return df[col]


def _labs_to_icu(labs: pd.DataFrame, icustays: Path | str) -> pd.DataFrame:
    icu = _read_csv(icustays, {"hadm_id", "stay_id", "icustay_id", "intime", "outtime"}, None)
    icu = icu.assign(stay=_stay_ids(icu, ["hadm_id", "intime", "outtime"]))
    icu = icu.dropna(subset=["hadm_id", "stay"])
    icu["hadm_id"] = _ids_as_str(icu["hadm_id"], "hadm_id")
    icu["stay"] = _ids_as_str(icu["stay"], "stay_id")
    labs = labs.assign(hadm_id=_ids_as_str(labs["hadm_id"], "hadm_id"), _row=np.arange(len(labs)))
    both = labs.merge(icu[["hadm_id", "stay", "intime", "outtime"]], on="hadm_id", how="inner")
    t = pd.to_datetime(both["charttime"], errors="coerce")
    inside = (t >= pd.to_datetime(both["intime"])) & (t <= pd.to_datetime(both["outtime"]))
    both = both[inside].sort_values("_row", kind="stable").drop_duplicates("_row")
    return both.drop(columns=["_row", "intime", "outtime"])


def read_mimic_csv(*, chartevents: Path | str | None = None, labevents: Path | str | None = None,
                   d_items: Path | str | None = None, d_labitems: Path | str | None = None,
                   icustays: Path | str | None = None,
                   itemids: Iterable[int] | None = None) -> pd.DataFrame:
    """Events from MIMIC-III/IV CSV extracts (column names in either case; .csv.gz works).

    Patient = subject_id. Chart events: stay = stay_id (IV) or icustay_id (III); rows without
    one are dropped. Lab events: stay = ``"hadm_<hadm_id>"``, or, when ``icustays`` is given,
    the ICU stay of the same admission whose [intime, outtime] holds charttime (labs outside
    every ICU stay are dropped). Variable = label from d_items/d_labitems, else ``item_<itemid>``
    (equal labels merge into one variable). ``itemids`` keeps only those items. Times become
    hours since each stay's first kept event (see validate_events).
    """
    if chartevents is None and labevents is None:
        raise SettingsError("read_mimic_csv needs chartevents and/or labevents")
    keep = None if itemids is None else {int(i) for i in itemids}
    base = {"subject_id", "hadm_id", "charttime", "itemid", "valuenum"}
    columns = ["subject_id", "charttime", "itemid", "valuenum"]
    parts = []
    if chartevents is not None:
        ce = _read_csv(chartevents, base | {"stay_id", "icustay_id"}, keep)
        ce = ce.assign(stay=_stay_ids(ce, columns)).dropna(subset=["stay"])
        ce["stay"] = _ids_as_str(ce["stay"], "stay_id")
        parts.append((ce, _labels(d_items)))
    if labevents is not None:
        le = _read_csv(labevents, base, keep)
        _need_csv_columns(le, ["hadm_id", *columns])
        le = le.dropna(subset=["hadm_id"])
        if icustays is not None:
            le = _labs_to_icu(le, icustays)
        else:
            le["stay"] = "hadm_" + _ids_as_str(le["hadm_id"], "hadm_id")
        parts.append((le, _labels(d_labitems)))
    frames = []
    for df, labels in parts:
        if len(df) == 0:
            continue
        items = df["itemid"].astype("int64")
        names = items.map(labels).astype(object).fillna("item_" + items.astype(str))
        frames.append(pd.DataFrame({
            "patient_id": _ids_as_str(df["subject_id"], "subject_id"), "stay_id": df["stay"],
            "time": df["charttime"], "variable": names, "value": df["valuenum"]}))
    where = ", ".join(str(p) for p in (chartevents, labevents) if p is not None)
    if not frames:
        raise DataError(f"{where}: the event table is empty (after the itemid and stay filters)")
    return _in_file(where, pd.concat(frames, ignore_index=True))
