"""Events -> per-stay grids [T_stay, V] (hourly bins or visits), and per-variable z-scoring."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import numpy as np
import pandas as pd

from dpcare.exceptions import DataError, SettingsError, SpecError
from dpcare.timeseries.events import EVENT_COLUMNS

STEPS = ("hour", "visit")
#: what to do with several values of one variable at one time of one stay that differ: refuse them (the default:
#: silently keeping one would decide the data for the user), or the rule the data's spec declares
DUPLICATE_RULES = ("refuse", "first", "last", "mean")


@dataclass
class BinnedStays:
    """Per stay a float array [T_stay, V] (NaN = not observed), stays sorted by stay_id."""

    variables: tuple[str, ...]
    stay_ids: list[str]
    patient_ids: list[str]  # one per stay
    values: list[np.ndarray]
    step: str

    def __len__(self) -> int:
        return len(self.stay_ids)

    def lengths(self) -> np.ndarray:
        return np.array([len(v) for v in self.values], dtype=np.int64)

    def missing_rate(self) -> dict[str, float]:
        """Share of steps (over all stays) where each variable is not observed."""
        stacked = np.concatenate(self.values, axis=0)
        return {v: float(np.isnan(stacked[:, j]).mean()) for j, v in enumerate(self.variables)}


def bin_events(events: pd.DataFrame, variables: Iterable[str] | None = None,
               step: str = "hour", duplicates: str = "refuse") -> BinnedStays:
    """Grid a validated event table (see validate_events) per stay.

    ``step="hour"``: bin floor(time) (time in hours since the stay's start), T_stay = last bin + 1.
    ``step="visit"``: each distinct time of a stay is one step, in time order. Per (stay, step,
    variable) the FIRST value is kept (earliest time; ties by row order). Values that differ at the SAME
    time are first resolved by ``duplicates`` (:func:`resolve_duplicates`: refused by default).
    ``variables=None``: all, sorted. Stays without any observation of the chosen variables are left out.
    """
    if step not in STEPS:
        raise SettingsError(f"step must be one of {STEPS}, got {step!r}")
    check_duplicate_rule(duplicates)
    missing = [c for c in EVENT_COLUMNS if c not in events.columns]
    if missing:
        raise DataError(f"the event table lacks column(s) {missing}; run validate_events first")
    present = set(events["variable"].unique())
    if variables is None:
        chosen = tuple(sorted(present))
    else:
        chosen = tuple(str(v) for v in variables)
        absent = [v for v in chosen if v not in present]
        if absent:
            raise DataError(f"variable(s) {absent} have no observation; observed variables: "
                            f"{sorted(present)[:30]}")
        if len(set(chosen)) != len(chosen):
            raise SettingsError(f"variables are repeated: {list(chosen)}")
    if not chosen:
        raise DataError("the event table is empty")
    return grid_events(events, chosen, step, duplicates)


def check_duplicate_rule(rule: str, where: str = "duplicates") -> str:
    if rule not in DUPLICATE_RULES:
        raise SettingsError(f"{where} must be one of {list(DUPLICATE_RULES)}, got {rule!r}")
    return rule


def resolve_duplicates(events: pd.DataFrame, rule: str = "refuse") -> pd.DataFrame:
    """``events`` with every (stay, time, variable) holding one value: values that differ there are refused
    (``"refuse"``, naming how many and one example) or combined by the declared rule: ``"first"`` / ``"last"``
    (in row order) or ``"mean"``. Repeats of one value are harmless and kept as they are (binning keeps one)."""
    check_duplicate_rule(rule)
    keys = ["stay_id", "time", "variable"]
    spread = events.groupby(keys, sort=False)["value"].transform("nunique")
    conflicting = spread > 1
    if not conflicting.any():
        return events
    if rule == "refuse":
        clash = events[conflicting]
        first = clash.iloc[0]
        same = clash[(clash["stay_id"] == first["stay_id"]) & (clash["time"] == first["time"])
                     & (clash["variable"] == first["variable"])]["value"].tolist()
        triples = int(clash.groupby(keys, sort=False).ngroups)
        raise DataError(f"{triples} (stay, time, variable) triple(s) hold differing values, e.g. stay "
                        f"'{first['stay_id']}' at {first['time']:g} h: {first['variable']} = {same[:5]}; declare how "
                        f"to combine them (duplicates: first, last or mean in the time-series spec) or clean the "
                        "data")
    if rule == "mean":
        events = events.assign(value=events.groupby(keys, sort=False)["value"].transform("mean"))
        return events[~events.duplicated(keys, keep="first")]
    return events[~(conflicting & events.duplicated(keys, keep="first" if rule == "first" else "last"))]


def grid_events(events: pd.DataFrame, chosen: tuple[str, ...], step: str, duplicates: str = "refuse") -> BinnedStays:
    """:func:`bin_events` without its checks that every chosen variable is observed (a lazy reader grids a
    few subjects at a time: a chunk may lack a variable). ``events``: validated, ``chosen``: distinct."""
    ev = resolve_duplicates(events.loc[events["variable"].isin(chosen), list(EVENT_COLUMNS)], duplicates)
    if step == "hour" and (ev["time"] < 0).any():
        raise DataError(f"negative time {ev['time'].min()} h: times must be hours since the "
                        "stay's start (shift them so that every stay starts at 0)")
    ev = ev.assign(_row=np.arange(len(ev))).sort_values(["stay_id", "time", "_row"])
    if step == "hour":
        bins = np.floor(ev["time"].to_numpy()).astype(np.int64)
    else:
        bins = ev.groupby("stay_id", sort=False)["time"].rank(method="dense").to_numpy()
        bins = bins.astype(np.int64) - 1
    ev = ev.assign(bin=bins).drop_duplicates(["stay_id", "bin", "variable"], keep="first")
    stays, stay_codes = np.unique(ev["stay_id"].to_numpy(dtype=str), return_inverse=True)
    var_codes = pd.Categorical(ev["variable"], categories=list(chosen)).codes
    lengths = np.zeros(len(stays), dtype=np.int64)
    np.maximum.at(lengths, stay_codes, ev["bin"].to_numpy() + 1)
    offsets = np.concatenate([[0], np.cumsum(lengths)])
    grid = np.full((int(offsets[-1]), len(chosen)), np.nan)
    grid[offsets[stay_codes] + ev["bin"].to_numpy(), var_codes] = ev["value"].to_numpy()
    owner = ev.drop_duplicates("stay_id").set_index("stay_id")["patient_id"]
    return BinnedStays(variables=chosen, stay_ids=[str(s) for s in stays],
                       patient_ids=[str(owner[s]) for s in stays],
                       values=[grid[offsets[i]:offsets[i + 1]].copy() for i in range(len(stays))],
                       step=step)


class Standardizer:
    """Per-variable z-scoring (x - center) / scale.

    ``fit`` computes mean/std from the stays of the given (training) patients only: a
    statistic of private data that is NOT differentially private. DP runs must use
    ``declared`` statistics (public knowledge, e.g. the bundled dataset specs).
    """

    def __init__(self, center: Mapping[str, float], scale: Mapping[str, float],
                 source: str = "declared"):
        self.center = {str(k): float(v) for k, v in center.items()}
        self.scale = {str(k): float(v) for k, v in scale.items()}
        bad = [k for k, v in self.scale.items() if not (np.isfinite(v) and v > 0)]
        bad += [k for k, v in self.center.items() if not np.isfinite(v)]
        if bad or set(self.center) != set(self.scale):
            raise SpecError(f"every variable needs a finite center and a positive scale; "
                            f"check {sorted(set(bad) | (set(self.center) ^ set(self.scale)))}")
        self.source = source  # "declared" (public) or "fitted" (from private data)

    def __repr__(self) -> str:
        return f"Standardizer({self.source}, {len(self.center)} variables)"

    @classmethod
    def declared(cls, mapping: Mapping[str, object]) -> Standardizer:
        """From public numbers: {variable: (center, scale)} or {variable: {center:, scale:}}."""
        center, scale = {}, {}
        for name, spec in mapping.items():
            c, s = (spec["center"], spec["scale"]) if isinstance(spec, Mapping) else spec
            center[name], scale[name] = c, s
        return cls(center, scale, source="declared")

    @classmethod
    def fit(cls, binned: BinnedStays, patients: Iterable[str]) -> Standardizer:
        """Mean and std (ddof 0; 0 or NaN -> 1) of the observed steps of these patients' stays."""
        wanted = {str(p) for p in patients}
        rows = [v for v, p in zip(binned.values, binned.patient_ids) if p in wanted]
        if not rows:
            raise DataError("none of the given patients has a stay in the binned data")
        stacked = np.concatenate(rows, axis=0)
        center, scale = {}, {}
        for j, name in enumerate(binned.variables):
            col = stacked[:, j][~np.isnan(stacked[:, j])]
            if col.size == 0:
                raise DataError(f"variable '{name}' has no observation among the "
                                f"{len(wanted)} given patients")
            sd = float(col.std())
            center[name], scale[name] = float(col.mean()), sd if np.isfinite(sd) and sd > 0 else 1.0
        return cls(center, scale, source="fitted")

    def transform(self, binned: BinnedStays) -> BinnedStays:
        missing = [v for v in binned.variables if v not in self.center]
        if missing:
            raise SpecError(f"no center/scale for variable(s) {missing}")
        c = np.array([self.center[v] for v in binned.variables])
        s = np.array([self.scale[v] for v in binned.variables])
        return BinnedStays(variables=binned.variables, stay_ids=list(binned.stay_ids),
                           patient_ids=list(binned.patient_ids),
                           values=[(v - c) / s for v in binned.values], step=binned.step)
