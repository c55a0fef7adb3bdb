"""MEDS folders read lazily: shards scanned batch by batch into forecasting windows, never the whole table.

A MEDS folder (https://github.com/Medical-Event-Data-Standard/meds) holds ``data/**/*.parquet`` shards with
the columns subject_id, time, code, numeric_value, each shard sorted by (subject_id, time) and each subject in
one shard, and ``metadata/subject_splits.parquet`` (subject_id, split in train / tuning / held_out) and
``metadata/codes.parquet``. :func:`meds_windows` scans the shards with ``pyarrow.dataset`` (the four columns
only; rows of the spec's codes with a numeric value only, each of which needs a time), takes the rows of one
subject at a time, grids and windows each few thousand subjects exactly as the in-memory path does
(:func:`dpcare.timeseries.binning.bin_events`, :func:`dpcare.timeseries.windows.make_windows`), and keeps
only the windows (float32) and a per-window patient index, split by split. Past ``memory_bound`` bytes of
windows they go to memory-mapped files in ``spill_dir`` (the run's staging folder under ``dpcare forecast
fit``). ``subject_id`` is the patient (the privacy unit; a subject is one stay); the MEDS splits are used as
given: train -> train, tuning -> validation, held_out -> test.

:func:`synthetic_meds` writes a MEDS folder of N synthetic patients (tests, benchmarks).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from dpcare.exceptions import DataError, MissingFileError
from dpcare.timeseries.binning import STEPS, BinnedStays, Standardizer, grid_events

MEDS_COLUMNS = ("subject_id", "time", "code", "numeric_value")
SPLITS_FILE = ("metadata", "subject_splits.parquet")
MEDS_SPLITS = {"train": "train", "tuning": "validation", "held_out": "test"}  # MEDS name -> the recipe's
DEFAULT_MEMORY_BOUND = 1 << 30  # bytes of windows held in memory before they go to memory-mapped files
BATCH_ROWS = 65_536


# --------------------------------------------------------------------------- files
def meds_shards(path: Path | str) -> list[Path]:
    """The data shards of a MEDS folder: ``data/**/*.parquet`` (a folder without ``data/``: every .parquet
    under it except ``metadata/``), sorted by path; a single .parquet file is its own shard."""
    path = Path(path)
    if not path.exists():
        raise MissingFileError(f"no such file or folder: {path}")
    if path.is_file():
        return [path]
    root = path / "data" if (path / "data").is_dir() else path
    shards = sorted(f for f in root.rglob("*.parquet") if "metadata" not in f.relative_to(path).parts[:1])
    if not shards:
        raise DataError(f"{path}: the MEDS folder holds no .parquet shard (looked in {root})")
    return shards


def _schema(shard: Path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        return pq.read_schema(shard)
    except (pa.ArrowException, OSError) as err:
        raise DataError(f"{shard}: not a readable parquet file (empty or damaged: {err})") from None


def _check_schema(shard: Path) -> None:
    import pyarrow as pa

    schema = _schema(shard)
    missing = [c for c in MEDS_COLUMNS if c not in schema.names]
    if missing:
        raise DataError(f"{shard}: missing MEDS column(s) {missing}; columns present: {list(schema.names)}")
    kinds = {"subject_id": (pa.types.is_integer, pa.types.is_string, pa.types.is_large_string),
             "time": (pa.types.is_timestamp, pa.types.is_integer, pa.types.is_floating, pa.types.is_null),
             "code": (pa.types.is_string, pa.types.is_large_string, pa.types.is_dictionary),
             "numeric_value": (pa.types.is_integer, pa.types.is_floating, pa.types.is_null)}
    need = {"subject_id": "integers (or strings)", "time": "timestamps (or numbers: hours since the start)",
            "code": "strings", "numeric_value": "numbers"}
    for column, checks in kinds.items():
        kind = schema.field(column).type
        if not any(check(kind) for check in checks):
            raise DataError(f"{shard}: column '{column}' has type {kind}; MEDS needs {need[column]}")


def meds_subject_ids(path: Path | str) -> list[str]:
    """Every subject_id of the shards (sorted, as strings), read from that column alone, batch by batch."""
    import pyarrow.dataset as ds

    ids: set = set()
    for shard in meds_shards(path):
        _check_schema(shard)
        for batch in ds.dataset(shard, format="parquet").to_batches(columns=["subject_id"], batch_size=BATCH_ROWS):
            column = batch.column(0)
            if column.null_count:
                raise DataError(f"{shard}: column 'subject_id' has {column.null_count} missing id(s)")
            ids.update(column.unique().to_pylist())
    if not ids:
        raise DataError(f"{path}: the MEDS shards hold no row")
    return sorted(str(i) for i in ids)


def meds_splits(path: Path | str) -> dict[str, list[str]] | None:
    """The MEDS subject splits of a folder as the recipe's train / validation / test lists (sorted subject ids
    as strings), or None when the folder has no ``metadata/subject_splits.parquet``. A subject in two splits,
    or a split name other than train, tuning and held_out, is a DataError naming the file."""
    file = Path(path).joinpath(*SPLITS_FILE)
    if not Path(path).is_dir() or not file.exists():
        return None
    names = list(_schema(file).names)
    missing = [c for c in ("subject_id", "split") if c not in names]
    if missing:
        raise DataError(f"{file}: missing column(s) {missing}; columns present: {names}")
    table = pd.read_parquet(file, columns=["subject_id", "split"])  # one row a subject: small
    if table["subject_id"].isna().any() or table["split"].isna().any():
        raise DataError(f"{file}: {int(table.isna().any(axis=1).sum())} row(s) lack a subject_id or a split")
    unknown = sorted(set(table["split"].astype(str)) - set(MEDS_SPLITS))
    if unknown:
        raise DataError(f"{file}: unknown split name(s) {unknown}; MEDS splits are {list(MEDS_SPLITS)}")
    table = table.assign(subject_id=table["subject_id"].astype(str), split=table["split"].astype(str))
    table = table.drop_duplicates()
    twice = table["subject_id"].duplicated(keep=False)
    if twice.any():
        subject = table.loc[twice, "subject_id"].iloc[0]
        where = sorted(table.loc[table["subject_id"] == subject, "split"])
        raise DataError(f"{file}: subject {subject} is in two splits ({where[0]} and {where[1]}); "
                        f"{table.loc[twice, 'subject_id'].nunique()} subject(s) are in more than one")
    out = {ours: sorted(table.loc[table["split"] == meds, "subject_id"]) for meds, ours in MEDS_SPLITS.items()}
    empty = [s for s, ids in out.items() if not ids]
    if empty:
        raise DataError(f"{file}: split(s) {empty} hold no subject (train, tuning and held_out are all needed)")
    return out


# --------------------------------------------------------------------------- streaming subjects
def _as_hours(batch, shard: Path) -> tuple[np.ndarray, bool]:
    """The time column of a batch (rows of the spec's codes with a numeric value) -> (int64 microseconds, True)
    for timestamps, or (float hours, False). A missing (null, NaN) or infinite time is a DataError: MEDS leaves
    the time empty for static measurements only, and those cannot be forecast."""
    import pyarrow as pa

    time = batch.column("time")
    if pa.types.is_timestamp(time.type):
        bad = time.is_null().to_numpy(zero_copy_only=False)
        out, is_dt = time.cast(pa.timestamp("us", tz=time.type.tz)).cast(pa.int64()).fill_null(0).to_numpy(), True
    else:
        out, is_dt = time.cast(pa.float64()).to_numpy(zero_copy_only=False), False  # null -> NaN
        bad = ~np.isfinite(out)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise DataError(f"{shard}: column 'time' is missing (null or NaN) or infinite in {int(bad.sum())} row(s) "
                        f"of the spec's codes with a numeric value, e.g. code '{batch.column('code')[i]}' of subject "
                        f"{batch.column('subject_id')[i]}; MEDS leaves the time empty only for static measurements, "
                        "which cannot be forecast: give these rows a time or leave their code out of the spec")
    return out, is_dt


def event_chunks(path: Path | str, codes: Sequence[str], batch_rows: int = BATCH_ROWS
                    ) -> Iterator[pd.DataFrame]:
    """Validated event tables (the EVENT_COLUMNS, time in hours since each subject's first kept event) of a
    few subjects at a time, every subject whole, in shard order: the rows of ``codes`` with a numeric value
    (each needs a time). Checks each shard's sort order and that no subject is in two shards."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.dataset as ds

    wanted = pa.array([str(c) for c in codes], type=pa.string())
    keep = pc.field("code").isin(wanted) & pc.field("numeric_value").is_valid()
    finished: dict[str, Path] = {}  # subject -> its shard (the per-subject index)
    for shard in meds_shards(path):
        _check_schema(shard)
        scanner = ds.dataset(shard, format="parquet").scanner(columns=list(MEDS_COLUMNS), filter=keep,
                                                               batch_size=batch_rows, use_threads=False)
        carry: pd.DataFrame | None = None  # the last subject of the batches read so far (it may go on)
        last = None  # (subject, time) of the last row read: the sort check spans batches
        for batch in scanner.to_batches():
            if batch.num_rows == 0:
                continue
            sid = batch.column("subject_id")
            if sid.null_count:
                raise DataError(f"{shard}: column 'subject_id' has missing id(s)")
            sid = sid.to_numpy(zero_copy_only=False)
            time, is_dt = _as_hours(batch, shard)
            code = batch.column("code")
            if pa.types.is_dictionary(code.type):
                code = code.cast(pa.string())
            value = batch.column("numeric_value").cast(pa.float64()).to_numpy(zero_copy_only=False)
            _check_sorted(shard, sid, time, is_dt, last)
            last = (sid[-1], time[-1])
            frame = pd.DataFrame({"sid": sid, "time": time, "variable": code.to_numpy(zero_copy_only=False),
                                  "value": value})
            frame = frame[~np.isnan(value)]  # NaN numeric values: missing, as the in-memory reader drops them
            bad = np.isinf(frame["value"].to_numpy())
            if bad.any():
                row = frame[bad].iloc[0]
                raise DataError(f"{shard}: column 'numeric_value': code '{row['variable']}' of subject "
                                f"{row['sid']} has an infinite value; {int(bad.sum())} in this batch")
            if carry is not None:
                frame = pd.concat([carry, frame], ignore_index=True)
            if len(frame) == 0:
                continue
            ids = frame["sid"].to_numpy()
            tail = int(np.flatnonzero(ids != ids[-1])[-1] + 1) if (ids != ids[-1]).any() else 0
            carry = frame.iloc[tail:]
            if tail:
                yield _events(frame.iloc[:tail], is_dt, shard, finished)
        if carry is not None and len(carry):
            yield _events(carry, is_dt, shard, finished)


def _check_sorted(shard: Path, sid: np.ndarray, time: np.ndarray, is_dt: bool, last) -> None:
    if last is not None:
        sid, time = np.concatenate([[last[0]], sid]), np.concatenate([[last[1]], time])
    back = sid[1:] < sid[:-1]
    back |= (sid[1:] == sid[:-1]) & (time[1:] < time[:-1])
    if back.any():
        i = int(np.flatnonzero(back)[0])
        show = (lambda t: str(np.datetime64(int(t), "us").astype("datetime64[s]"))) if is_dt else (lambda t: f"{t:g} h")
        raise DataError(f"{shard}: rows are not sorted by (subject_id, time): subject {sid[i + 1]} at "
                        f"{show(time[i + 1])} comes after subject {sid[i]} at {show(time[i])}; MEDS shards are "
                        "sorted by subject_id, then time (sort the shard, e.g. "
                        "table.sort_by([('subject_id', 'ascending'), ('time', 'ascending')]))")


def _events(frame: pd.DataFrame, is_dt: bool, shard: Path, finished: dict[str, Path]) -> pd.DataFrame:
    """Whole subjects' rows -> the canonical event table (what validate_events makes of read_meds' table)."""
    ids = frame["sid"].astype(str).to_numpy()
    starts = np.r_[0, np.flatnonzero(ids[1:] != ids[:-1]) + 1]
    for subject in ids[starts]:
        if subject in finished:
            raise DataError(f"subject {subject} has rows in two shards ({finished[subject]} and {shard}); MEDS "
                            "keeps each subject's events in one shard")
        finished[subject] = shard
    time = frame["time"].to_numpy()
    if is_dt:  # hours since the subject's first kept event (sorted: the first row)
        first = np.repeat(time[starts], np.diff(np.r_[starts, len(time)]))
        time = (time - first) / 3.6e9
    return pd.DataFrame({"patient_id": ids, "stay_id": ids, "time": time.astype("float64"),
                         "variable": frame["variable"].astype(str).to_numpy(), "value": frame["value"].to_numpy()})


def binned_chunks(path: Path | str, variables: Sequence[str], step: str = "hour",
                  batch_rows: int = BATCH_ROWS, duplicates: str = "refuse") -> Iterator[BinnedStays]:
    """The MEDS folder's subjects gridded a few at a time (raw values; subjects without an observation of the
    variables left out), as :func:`dpcare.timeseries.binning.bin_events` grids the whole table."""
    chosen = tuple(str(v) for v in variables)
    if step not in STEPS:
        raise DataError(f"step must be one of {STEPS}, got {step!r}")
    for events in event_chunks(path, chosen, batch_rows):
        if step == "hour" and (events["time"] < 0).any():
            raise DataError(f"{path}: negative time {events['time'].min()} h: numeric MEDS times must be hours "
                            "since the subject's start")
        yield grid_events(events, chosen, step, duplicates)


# --------------------------------------------------------------------------- windows
@dataclass
class _Store:
    """Windows of one split: chunks in memory, or appended to raw float32 files once spilled."""

    name: str
    spill_dir: Path | None
    arrays: dict[str, list[np.ndarray]] = field(default_factory=lambda: {"x": [], "y": [], "mask": []})
    shapes: dict[str, tuple[int, ...]] = field(default_factory=dict)
    rows: int = 0
    patient: list[np.ndarray] = field(default_factory=list)
    start: list[np.ndarray] = field(default_factory=list)
    spilled: bool = False

    def add(self, x, y, mask, owners, starts) -> None:
        for key, a in (("x", x), ("y", y), ("mask", mask)):
            self.arrays[key].append(a)
            self.shapes[key] = a.shape[1:]
        self.rows += len(x)
        self.patient.append(np.asarray(owners, dtype=str))
        self.start.append(starts)

    def held_bytes(self) -> int:
        return sum(a.nbytes for parts in self.arrays.values() for a in parts)

    def spill(self) -> None:
        self.spill_dir.mkdir(parents=True, exist_ok=True)
        for key, parts in self.arrays.items():
            with open(self.spill_dir / f"{self.name}_{key}.f32", "ab") as f:
                f.writelines(np.ascontiguousarray(a, dtype=np.float32).tobytes() for a in parts)
            parts.clear()
        self.spilled = True

    def windows(self, variables: tuple[str, ...]):
        import torch

        from dpcare.timeseries.windows import WindowSet

        def array(key: str) -> np.ndarray:
            if self.spilled:
                self.spill()  # what is still in memory goes after the rows already written
                file = self.spill_dir / f"{self.name}_{key}.f32"
                return np.memmap(file, dtype=np.float32, mode="c", shape=(self.rows, *self.shapes[key]))
            whole = np.concatenate(self.arrays[key])
            self.arrays[key].clear()  # the chunks go as their copy comes: at most one array held twice
            return whole

        x, y, mask = (torch.from_numpy(array(k)) for k in ("x", "y", "mask"))
        patient = np.concatenate(self.patient)
        return WindowSet(x=x, y=y, mask=mask, patient=patient, stay=patient.copy(),
                         start=np.concatenate(self.start), variables=variables)


@dataclass
class MedsWindows:
    """What :func:`meds_windows` read: the windows of each split, and facts about the read."""

    parts: dict[str, object]  # split -> WindowSet
    subjects_read: int
    spilled: bool


def _fitted_standardizer(path, variables, step, train: set[str], batch_rows: int,
                         duplicates: str = "refuse") -> Standardizer:
    """Mean and std (ddof 0) of the training subjects' observed steps, merged chunk by chunk (Chan et al.):
    :meth:`Standardizer.fit` without the whole grid in memory."""
    n = np.zeros(len(variables))
    mean = np.zeros(len(variables))
    m2 = np.zeros(len(variables))
    for binned in binned_chunks(path, variables, step, batch_rows, duplicates):
        rows = [v for v, p in zip(binned.values, binned.patient_ids) if p in train]
        if not rows:
            continue
        grid = np.concatenate(rows)
        for j in range(len(variables)):
            col = grid[:, j][~np.isnan(grid[:, j])]
            if col.size == 0:
                continue
            k, mu = col.size, float(col.mean())
            delta = mu - mean[j]
            total = n[j] + k
            mean[j] += delta * k / total
            m2[j] += float(((col - mu) ** 2).sum()) + delta ** 2 * n[j] * k / total
            n[j] = total
    unseen = [v for v, c in zip(variables, n) if c == 0]
    if unseen:
        raise DataError(f"variable(s) {unseen} have no observation among the training subjects")
    sd = np.sqrt(m2 / n)
    scale = {v: float(s) if np.isfinite(s) and s > 0 else 1.0 for v, s in zip(variables, sd)}
    return Standardizer(dict(zip(variables, mean.tolist())), scale, source="fitted")


def meds_windows(path: Path | str, variables: Sequence[str], splits: Mapping[str, Iterable[str]], *,
                 step: str = "hour", input_len: int = 24, output_len: int = 24, stride: int = 4,
                 standardizer: Standardizer | None = None, clip_z: float = 6.0,
                 min_obs_input: int = 1, min_obs_output: int = 1, spill_dir: Path | str | None = None,
                 memory_bound: int = DEFAULT_MEMORY_BOUND, batch_rows: int = BATCH_ROWS,
                 standardizer_out: list | None = None, duplicates: str = "refuse") -> MedsWindows:
    """Standardised windows of a MEDS folder, split by split, read lazily (see the module docstring).

    ``splits``: split name -> subject ids (as strings); a subject with windows in none of them is a DataError
    (every subject must be assigned). ``standardizer``: declared statistics; None fits them on the ``train``
    split's subjects in a first pass (a statistic outside every guarantee: non-private methods only).
    ``duplicates``: how differing values at one time are combined (binning.resolve_duplicates).
    Windows past ``memory_bound`` bytes go to memory-mapped files in ``spill_dir`` (kept in memory without
    one)."""
    from dpcare.timeseries.recipe import clipped
    from dpcare.timeseries.windows import _check_int, window_arrays

    variables = tuple(str(v) for v in variables)
    t_in, t_out = _check_int("input_len", input_len, 1), _check_int("output_len", output_len, 1)
    stride = _check_int("stride", stride, 1)
    owner = {str(p): name for name, ids in splits.items() for p in ids}
    if standardizer is None:
        standardizer = _fitted_standardizer(path, variables, step, set(splits.get("train", ())), batch_rows,
                                            duplicates)
    if standardizer_out is not None:
        standardizer_out.append(standardizer)
    spill = None if spill_dir is None else Path(spill_dir)
    if spill is not None and spill.is_dir():  # a resumed run's files: rewritten from the start
        for old in spill.glob("*.f32"):
            old.unlink()
    stores = {name: _Store(name, spill) for name in splits}
    subjects = 0
    longest = 0
    for binned in binned_chunks(path, variables, step, batch_rows, duplicates):
        subjects += len(binned)
        longest = max(longest, int(binned.lengths().max()))
        stray = [p for p in binned.patient_ids if p not in owner]
        if stray:
            raise DataError(f"{path}: subject(s) {stray[:5]} have events but are in no split (every subject needs "
                            f"a row in {'/'.join(SPLITS_FILE)})")
        z = clipped(standardizer.transform(binned), clip_z)
        arrays = window_arrays(z, t_in, t_out, stride, min_obs_input, min_obs_output)
        if arrays is None:
            continue
        x, y, mask, owners, _, starts = arrays
        where = np.array([owner[p] for p in owners])
        for name, store in stores.items():
            sel = where == name
            if sel.any():
                store.add(x[sel], y[sel], mask[sel], np.asarray(owners)[sel], starts[sel])
        if spill is not None and sum(s.held_bytes() for s in stores.values()) > memory_bound:
            for store in stores.values():
                store.spill()
    if subjects == 0:
        raise DataError(f"{path}: no row of the codes {list(variables)} with a numeric value")
    if not any(s.rows for s in stores.values()):
        raise DataError(f"{path}: the window (input_len + output_len = {t_in + t_out} {step} steps) is longer "
                        f"than every subject's events allow, or no window has an observation "
                        f"(longest subject: {longest} steps)")
    return MedsWindows({name: s.windows(variables) for name, s in stores.items() if s.rows},
                       subjects, any(s.spilled for s in stores.values()))


# --------------------------------------------------------------------------- synthetic folders
def synthetic_meds(folder: Path | str, patients: int, *, shards: int = 4, events_per_patient: int = 20,
                   codes: Sequence[str] = ("HR", "SBP"), seed: int = 0, with_splits: bool = True,
                   fractions: Sequence[float] = (0.8, 0.1, 0.1)) -> Path:
    """Write a synthetic MEDS folder of ``patients`` patients (subject_id 1..N) across ``shards`` shards
    (``data/<i>.parquet``, each sorted by subject_id then time), written a shard at a time.

    Each patient has a birth row (code MEDS_BIRTH, no value), then ``events_per_patient`` measurements about
    hourly over ``codes`` in turn: a per-patient level plus a slow random walk (HR around 80, SBP around 120,
    any other code around 50), timestamps from a per-patient start in 2020. With ``with_splits``,
    ``metadata/subject_splits.parquet`` assigns train / tuning / held_out by ``fractions`` (seeded);
    ``metadata/codes.parquet`` lists the codes. For tests and benchmarks: no real patient is in it."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    folder = Path(folder)
    (folder / "data").mkdir(parents=True, exist_ok=True)
    (folder / "metadata").mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    centre = {"HR": 80.0, "SBP": 120.0}
    codes = [str(c) for c in codes]
    bounds = np.linspace(0, patients, shards + 1).astype(np.int64)
    base = np.datetime64("2020-01-01T00:00:00", "us").astype(np.int64)
    hour = 3_600_000_000
    for i in range(shards):
        ids = np.arange(bounds[i], bounds[i + 1], dtype=np.int64) + 1
        n, k = len(ids), events_per_patient
        start = base + rng.integers(0, 365 * 24, n) * hour
        gaps = rng.uniform(0.5, 1.0, (n, k)) * hour / max(1, len(codes) // 2)
        times = start[:, None] + np.cumsum(gaps, axis=1).astype(np.int64)
        which = np.tile(np.arange(k) % len(codes), (n, 1))
        level = np.array([centre.get(c, 50.0) for c in codes])[which]
        values = level + rng.normal(0, 8, (n, 1)) + np.cumsum(rng.normal(0, 1.5, (n, k)), axis=1)
        sid = np.concatenate([ids, np.repeat(ids, k)])
        time = np.concatenate([start - 24 * 365 * 40 * hour, times.ravel()])
        code = np.concatenate([np.full(n, "MEDS_BIRTH", dtype=object), np.array(codes, dtype=object)[which].ravel()])
        value = np.concatenate([np.full(n, np.nan), values.ravel()]).astype(np.float32)
        order = np.lexsort((time, sid))
        table = pa.table({"subject_id": pa.array(sid[order], pa.int64()),
                          "time": pa.array(time[order], pa.timestamp("us")),
                          "code": pa.array(code[order], pa.string()),
                          "numeric_value": pa.array(value[order], pa.float32(), mask=np.isnan(value[order]))})
        pq.write_table(table, folder / "data" / f"{i}.parquet", row_group_size=200_000)
    if with_splits:
        order = np.random.default_rng(seed + 1).permutation(patients) + 1
        cut = np.round(np.cumsum(fractions) * patients).astype(int)
        names = np.empty(patients, dtype=object)
        names[:cut[0]], names[cut[0]:cut[1]], names[cut[1]:] = "train", "tuning", "held_out"
        pq.write_table(pa.table({"subject_id": pa.array(order, pa.int64()), "split": pa.array(names, pa.string())}),
                       folder / "metadata" / "subject_splits.parquet")
    pq.write_table(pa.table({"code": ["MEDS_BIRTH", *codes],
                             "description": ["birth", *(f"synthetic measurement {c}" for c in codes)]}),
                   folder / "metadata" / "codes.parquet")
    (folder / "metadata" / "dataset.json").write_text(json.dumps({"dataset_name": "dpcare synthetic MEDS",
                                                                  "patients": patients, "seed": seed}))
    return folder


def synthetic_meds_spec(codes: Sequence[str] = ("HR", "SBP"), input_len: int = 6, output_len: int = 2,
                        stride: int = 2) -> dict:
    """A time-series spec (the ``user_dataset`` format) for :func:`synthetic_meds` folders: hourly steps, the
    codes with declared center/scale (public numbers chosen for the generator, not read from its data)."""
    centre = {"HR": (80.0, 12.0), "SBP": (120.0, 15.0)}
    return {"name": "synthetic_meds", "step": "hour",
            "window": {"input_len": input_len, "output_len": output_len, "stride": stride},
            "default_variables": list(codes),
            "variables": {c: dict(zip(("center", "scale"), centre.get(c, (50.0, 10.0)))) for c in codes}}


__all__ = ["MEDS_COLUMNS", "MEDS_SPLITS", "MedsWindows", "binned_chunks", "event_chunks", "meds_shards", "meds_splits",
           "meds_subject_ids", "meds_windows", "synthetic_meds", "synthetic_meds_spec"]
