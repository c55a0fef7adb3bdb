"""Forecasting windows (input steps -> output steps) within stays, and patient-level splits."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import torch

from dpcare.exceptions import DataError, SettingsError
from dpcare.timeseries.binning import BinnedStays
from dpcare.timeseries.settings import SPLIT_METHODS


@dataclass
class WindowSet:
    """N windows: x [N, T_in, 2V] (values with NaN -> 0, then 0/1 masks), y and mask [N, T_out, V].

    ``patient``/``stay`` name each window's owner, ``start`` its anchor step (first output step).
    """

    x: torch.Tensor
    y: torch.Tensor
    mask: torch.Tensor
    patient: np.ndarray
    stay: np.ndarray
    start: np.ndarray
    variables: tuple[str, ...]

    def __len__(self) -> int:
        return int(self.x.shape[0])

    def subset(self, idx) -> WindowSet:
        """Windows at positions ``idx`` (ints or a boolean mask; numpy, list or tensor)."""
        idx = np.asarray(idx.cpu() if isinstance(idx, torch.Tensor) else idx)
        if idx.dtype == bool:
            idx = np.flatnonzero(idx)
        idx = idx.astype(np.int64).reshape(-1)
        t = torch.from_numpy(idx)
        return WindowSet(x=self.x[t], y=self.y[t], mask=self.mask[t], patient=self.patient[idx],
                         stay=self.stay[idx], start=self.start[idx], variables=self.variables)

    def patients(self) -> list[str]:
        """Distinct patients in order of first appearance."""
        return list(dict.fromkeys(self.patient.tolist()))

    def groups(self) -> torch.Tensor:
        """Per window the index of its patient in ``patients()`` (LongTensor [N])."""
        index = {p: i for i, p in enumerate(self.patients())}
        return torch.tensor([index[p] for p in self.patient.tolist()], dtype=torch.long)

    def tensors(self) -> dict[str, torch.Tensor]:
        return {"x": self.x, "y": self.y, "mask": self.mask}


def _check_int(name: str, value: int, low: int) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < low:
        raise SettingsError(f"{name} must be an integer >= {low}, got {value!r}")
    return int(value)


def make_windows(binned: BinnedStays, input_len: int = 24, output_len: int = 24, stride: int = 4,
                 min_obs_input: int = 1, min_obs_output: int = 1) -> WindowSet:
    """Windows anchored at w = input_len, input_len + stride, ... with w + output_len <= T_stay.

    Input = steps [w - input_len, w), target = [w, w + output_len) of the same stay (windows
    never cross stays, hence never patients). A window is kept if its input has at least
    ``min_obs_input`` observed cells and its target at least ``min_obs_output``. Pass binned
    data that is already standardised (Standardizer.transform).
    """
    t_in, t_out = _check_int("input_len", input_len, 1), _check_int("output_len", output_len, 1)
    stride = _check_int("stride", stride, 1)
    min_in = _check_int("min_obs_input", min_obs_input, 0)
    min_out = _check_int("min_obs_output", min_obs_output, 0)
    lengths = binned.lengths() if len(binned) else np.zeros(0, dtype=np.int64)
    if len(lengths) == 0 or lengths.max() < t_in + t_out:
        longest = int(lengths.max()) if len(lengths) else 0
        raise DataError(f"the window (input_len + output_len = {t_in + t_out} {binned.step} "
                        f"steps) is longer than every stay (longest: {longest} steps)")
    arrays = window_arrays(binned, t_in, t_out, stride, min_in, min_out)
    if arrays is None:
        raise DataError(f"no window has >= {min_in} observed input cells and >= {min_out} "
                        f"observed target cells")
    x, y, mask, owners, stays, starts = arrays
    return WindowSet(x=torch.from_numpy(x), y=torch.from_numpy(y), mask=torch.from_numpy(mask),
                     patient=np.array(owners, dtype=str), stay=np.array(stays, dtype=str),
                     start=starts, variables=binned.variables)


def window_arrays(binned: BinnedStays, t_in: int, t_out: int, stride: int, min_in: int, min_out: int):
    """The windows of :func:`make_windows` as numpy arrays (x, y, mask float32; owners, stays as lists;
    starts int64), or None when no stay has one. No check of the arguments (make_windows checks them)."""
    inputs, targets, owners, stays, starts = [], [], [], [], []
    offsets = np.arange(-t_in, t_out)
    for values, stay, patient in zip(binned.values, binned.stay_ids, binned.patient_ids):
        anchors = np.arange(t_in, len(values) - t_out + 1, stride)
        if len(anchors) == 0:
            continue
        cells = values[anchors[:, None] + offsets]  # [n, t_in + t_out, V]
        seen = ~np.isnan(cells)
        keep = ((seen[:, :t_in].sum(axis=(1, 2)) >= min_in)
                & (seen[:, t_in:].sum(axis=(1, 2)) >= min_out))
        if not keep.any():
            continue
        inputs.append(cells[keep, :t_in])
        targets.append(cells[keep, t_in:])
        starts.append(anchors[keep])
        owners += [patient] * int(keep.sum())
        stays += [stay] * int(keep.sum())
    if not inputs:
        return None
    x_val, y_val = np.concatenate(inputs), np.concatenate(targets)
    x_seen, y_seen = ~np.isnan(x_val), ~np.isnan(y_val)
    x = np.concatenate([np.nan_to_num(x_val, nan=0.0), x_seen], axis=2).astype(np.float32)
    return (x, np.nan_to_num(y_val, nan=0.0).astype(np.float32), y_seen.astype(np.float32), owners, stays,
            np.concatenate(starts).astype(np.int64))


def split_sizes(patients: int, fractions: Sequence[float] = (0.64, 0.16, 0.20)) -> list[int]:
    """How many of ``patients`` patients each split of :func:`split_patients` holds: a function of the
    count and the fractions only (the seed decides who, not how many)."""
    frac = np.asarray(fractions, dtype=float)
    if (frac <= 0).any() or abs(frac.sum() - 1) > 1e-6:
        raise SettingsError(f"fractions must be positive and sum to 1, got {list(fractions)}")
    bounds = np.round(np.cumsum(frac) * patients).astype(int)
    bounds[-1] = patients
    return np.diff(np.r_[0, bounds]).astype(int).tolist()


def split_patients(patient_ids: Iterable[str], fractions: Sequence[float] = (0.64, 0.16, 0.20),
                   seed: int = 0, names: Sequence[str] = ("train", "validation", "test"), method: str = "hash",
                   ) -> dict[str, list[str]]:
    """Disjoint patient lists (sorted) per split; depends only on the set of ids and the seed.

    ``hash``: a patient's split is decided by a hash of the seed and its id alone (sha256 mapped to [0, 1),
    cut at the cumulative fractions), so adding or removing one patient moves no other patient; the sizes vary
    around the fractions. ``permutation``: a seeded permutation of the sorted ids cut at exact sizes
    (:func:`split_sizes`); one new patient reshuffles every split (the studies' published splits)."""
    if len(fractions) != len(names) or len(set(names)) != len(names):
        raise SettingsError(f"need one fraction per distinct split name, got {list(fractions)} "
                            f"for {list(names)}")
    if method not in SPLIT_METHODS:
        raise SettingsError(f"unknown split method {method!r}; choose one of {list(SPLIT_METHODS)}")
    ids = sorted({str(p) for p in patient_ids})
    sizes = split_sizes(len(ids), fractions)  # validates the fractions
    if method == "hash":
        edges = np.cumsum(np.asarray(fractions, dtype=float))[:-1]
        which = np.searchsorted(edges, [_unit_interval(seed, p) for p in ids], side="right")
        parts = [np.flatnonzero(which == k) for k in range(len(names))]
    else:
        order = np.random.default_rng(seed).permutation(len(ids))
        parts = np.split(order, np.cumsum(sizes)[:-1])
    empty = [n for n, part in zip(names, parts) if len(part) == 0]
    if empty:
        hint = ("; a hash split places each patient at random: 'permutation' (--split permutation) cuts exact "
                "sizes" if method == "hash" and min(sizes) > 0 else "")
        raise DataError(f"split(s) {empty} would be empty: {len(ids)} patients are too few "
                        f"for fractions {list(fractions)}{hint}")
    return {n: sorted(ids[i] for i in part) for n, part in zip(names, parts)}


def _unit_interval(seed: int, patient_id: str) -> float:
    """A number in [0, 1) fixed by the seed and the patient id (sha256): the patient's place in a hash split."""
    digest = hashlib.sha256(f"{int(seed)}\x00{patient_id}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2.0 ** 64


def check_patient_splits(splits: Mapping[str, Iterable[str]]) -> None:
    """Raise DataError if a patient appears in two splits."""
    seen: dict[str, str] = {}
    for name, patients in splits.items():
        for p in patients:
            p = str(p)
            if p in seen and seen[p] != name:
                raise DataError(f"patient '{p}' is in two splits: '{seen[p]}' and '{name}'")
            seen[p] = name


def windows_for(ws: WindowSet, patients: Iterable[str]) -> WindowSet:
    """The windows of these patients (DataError if none of them has a window)."""
    wanted = {str(p) for p in patients}
    keep = np.isin(ws.patient, list(wanted))
    if not keep.any():
        raise DataError(f"none of the {len(wanted)} given patients has a window")
    return ws.subset(keep)
