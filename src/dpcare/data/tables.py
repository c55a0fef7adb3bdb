"""Load a table (CSV, Parquet, DataFrame) and check it against its schema, with errors that name the problem."""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import pandas as pd

from dpcare.data.schema import TableSchema
from dpcare.exceptions import DataError, ExactStatisticWarning, MissingFileError

log = logging.getLogger(__name__)


def read_table(source: str | Path | pd.DataFrame) -> pd.DataFrame:
    if isinstance(source, pd.DataFrame):
        return source.copy()
    path = _existing_file(source)
    suffix = path.suffix.lower()
    if suffix in (".csv", ".txt"):
        _check_header(path)
        try:
            return pd.read_csv(path, encoding="utf-8")
        except UnicodeDecodeError:
            raise not_utf8(path) from None
        except pd.errors.EmptyDataError:
            raise DataError(f"data file {path} is empty") from None
        except pd.errors.ParserError as err:
            raise DataError(f"data file {path} cannot be parsed as CSV: {err}") from None
    if suffix in (".parquet", ".pq"):
        frame = pd.read_parquet(path)
        if frame.columns.duplicated().any():
            raise DataError(f"data file {path} names the columns {sorted(set(frame.columns[frame.columns.duplicated()]))} "
                            "more than once")
        return frame
    raise DataError(f"data file {path}: unknown format {suffix!r} (use .csv or .parquet)")


def _existing_file(source: str | Path) -> Path:
    """``source`` as a path to a file that exists and is not empty (else the error that names it)."""
    path = Path(source)
    if not path.exists():
        raise MissingFileError(f"data file not found: {path}")
    if path.stat().st_size == 0:
        raise DataError(f"data file {path} is empty")
    return path


def not_utf8(path: Path) -> DataError:
    """The error for a text file that is not UTF-8: the first byte that is not, by line, and how to convert."""
    import codecs

    decoder, offset, line, where = codecs.getincrementaldecoder("utf-8")(), 0, 1, ""
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            try:
                decoder.decode(chunk)
            except UnicodeDecodeError as e:
                bad = offset + e.start
                line += chunk[:e.start].count(b"\n")
                where = f" (line {line}, byte 0x{chunk[e.start]:02x} at offset {bad})"
                break
            offset += len(chunk)
            line += chunk.count(b"\n")
    return DataError(f"data file {path} is not UTF-8 text{where}: save it as UTF-8, e.g. `iconv -f latin1 -t utf-8 "
                     f"{path.name} > {path.stem}.utf8{path.suffix}` for a Latin-1 (Windows) export")


def _check_header(path: Path) -> None:
    """pandas renames a repeated CSV column to 'age.1' without a word: a repeated name is an error instead."""
    import csv

    try:
        with open(path, newline="", encoding="utf-8") as f:
            header = next(csv.reader(f), [])
    except UnicodeDecodeError:
        raise not_utf8(path) from None
    seen, repeated = set(), []
    for name in header:
        if name in seen and name not in repeated:
            repeated.append(name)
        seen.add(name)
    if repeated:
        raise DataError(f"data file {path} names the columns {repeated} more than once in its header")


def count_rows(source: str | Path) -> int:
    """The number of data rows of a CSV or Parquet file without parsing its values (the row count is
    public: every ledger states n). A budget uses it to check a run before any private value is read."""
    import csv

    path = _existing_file(source)
    suffix = path.suffix.lower()
    if suffix in (".parquet", ".pq"):
        import pyarrow.parquet as pq

        return int(pq.ParquetFile(path).metadata.num_rows)
    if suffix in (".csv", ".txt"):
        try:
            with open(path, newline="", encoding="utf-8") as f:
                return max(sum(1 for _ in csv.reader(f)) - 1, 0)
        except UnicodeDecodeError:
            raise not_utf8(path) from None
    raise DataError(f"data file {path}: unknown format {suffix!r} (use .csv or .parquet)")


def load_table(source: str | Path | pd.DataFrame, schema: TableSchema) -> pd.DataFrame:
    """The spec's columns, in spec order, validated: numeric columns as float, categorical as str."""
    df = read_table(source)
    what = source if not isinstance(source, pd.DataFrame) else "the table"
    if len(df) == 0:
        raise DataError(f"{what} has no rows")
    names = [c.name for c in schema.columns]
    missing = [n for n in names if n not in df.columns]
    if missing:
        raise DataError(f"{what} lacks the spec columns {missing} (it has {list(df.columns)})")
    extra = [c for c in df.columns if c not in names]
    if extra:
        log.warning("dropping %d columns not in the spec: %s", len(extra), extra)
    out = pd.DataFrame(index=df.index)
    for col in schema.columns:
        s = df[col.name]
        if col.kind == "numeric":
            num = pd.to_numeric(s, errors="coerce")
            bad = s[num.isna() & s.notna()]
            if len(bad):
                raise DataError(f"column '{col.name}' is numeric in the spec but has values like {bad.iloc[0]!r}")
            s = num.astype(float)
            inf = int(np.isinf(s).sum())
            if inf:
                raise DataError(f"column '{col.name}' has {inf} infinite values; use NaN (nullable: true) or a "
                                 "finite number")
        else:
            s = s.map(category_text, na_action="ignore").astype(object)
        nans = int(s.isna().sum())
        if nans and not col.nullable:
            raise DataError(f"column '{col.name}' has {nans} missing values (NaN); declare it nullable: true in "
                             "the spec or clean the data")
        if col.categories is not None:
            unknown = sorted(set(s.dropna()) - set(col.categories))
            if unknown:
                raise DataError(f"column '{col.name}' has values {unknown[:5]} outside its declared categories "
                                 f"{list(col.categories)}")
        out[col.name] = s
    check_ranges(out, schema, str(what))
    return out.reset_index(drop=True)


class OutOfRangeWarning(ExactStatisticWarning):
    """Values outside a column's declared bounds (clipped to them): exact counts of the data, said to its holder."""


def check_ranges(table: pd.DataFrame, schema: TableSchema, what: str = "the table") -> None:
    """Count each numeric column's values outside its declared bounds (the encoder clips them to the bounds, so
    they are changed silently otherwise): refused when a column's share exceeds the spec's ``max_out_of_range``
    (the table is in other units than the spec, or the bounds are wrong), else said in a warning. The counts are
    exact statistics of the data: shown to whoever runs the command, outside any guarantee."""
    columns = [(col.name, table[col.name].to_numpy(float), *col.bounds) for col in schema.columns
               if col.kind == "numeric" and col.bounds is not None and col.name in table.columns]
    judge_ranges(columns, schema.max_out_of_range, what, "clipped to them",
                 " (e.g. negated, or standardised by a scaler before DPClassifier in a Pipeline: one fitted on the "
                 "private rows is itself a release outside epsilon, so give the raw columns)")


def judge_ranges(columns, limit: float, what: str, handled: str, hint: str = "") -> None:
    """``columns``: (name, values, low, high) with None for an open side. Refuse (DataError) when a column's share
    of values outside [low, high] (NaN not counted) exceeds ``limit``, else warn (:class:`OutOfRangeWarning`,
    saying what was done with them: ``handled``) with every column's counts."""
    import warnings

    found, over = [], []
    for name, values, low, high in columns:
        values = np.asarray(values, float)
        values = values[~np.isnan(values)]
        below = int((values < low).sum()) if low is not None else 0
        above = int((values > high).sum()) if high is not None else 0
        if below + above:
            share = (below + above) / len(values)
            pct = f"{share:.1%}" if share >= 0.001 else "<0.1%"
            sides = [f"{below} below {low:g}" if low is not None else "", f"{above} above {high:g}" if high is not None
                     else ""]
            text = f"'{name}' {below + above} of {len(values)} ({pct}): {', '.join(x for x in sides if x)}"
            found.append(text)
            if share > limit:
                over.append(text)
    if over:
        raise DataError(f"{what}: values outside the spec's declared bounds in {'; '.join(over)}; at most "
                        f"{limit:.1%} of a column may lie outside (spec key max_out_of_range). The data are not in "
                        f"the units the spec declares{hint}, or the bounds are wrong: fix them")
    if found:
        warnings.warn(f"{what}: values outside the spec's declared bounds, {handled}: {'; '.join(found)}",
                      OutOfRangeWarning, stacklevel=3)


def category_text(v) -> str:
    """Category values as text; 1.0 read from a CSV equals the declared 1."""
    if isinstance(v, float) and v.is_integer():
        return str(int(v))
    return str(v)
