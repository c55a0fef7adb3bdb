"""Tuning rows for the synthesizer's defaults: rows of a bundled table that no release cell and no published
study cell reads, so that a default chosen on them is not tuned on a reported number.

Excluded: the release tables' samples (``bench_release_tables.py --modality synth --rows k`` keeps
``df[columns].sample(k, random_state=0)``; these samples are nested, so the largest one, 5,000 rows, holds
every smaller one) and, of the dp2stage study's seed-0 split, the whole test part and the training sample.
From the rest: ``--train`` training rows and ``--validation`` validation rows (``random_state=1``), with the
study's 10 columns and their spec.

    OMP_NUM_THREADS=1 python benchmarks/synth_tuning_rows.py --dataset adult --out results/synth-tune2
    dpcare synth fit results/synth-tune2/adult-train.csv --spec results/synth-tune2/adult-10cols.yaml \\
        --synthesizer dp-2stage --test results/synth-tune2/adult-validation.csv --epsilon 8 --seed 0 --out RUN
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path

import pandas as pd

RELEASE_SAMPLE = 5000  # the largest release sample; the smaller ones are inside it


def excluded_rows(table: pd.DataFrame) -> set:
    """Index labels of ``table`` (a data set's study columns) that a release cell or the dp2stage study reads."""
    from dpcare.data.splits import split_table
    from dpcare.studies.dp2stage import Dp2StageBenchmark

    used = set(table.sample(min(RELEASE_SAMPLE, len(table)), random_state=0).index)
    bench = Dp2StageBenchmark()
    parts = split_table(table.assign(_row=table.index), {"train": 0.7, "test": 0.3}, seed=bench.seed)  # resets index
    train = parts["train"].sample(min(bench.n_train, len(parts["train"])), random_state=bench.seed)
    return used | set(parts["test"]["_row"]) | set(train["_row"])


def tuning_rows(dataset: str, train: int, validation: int) -> tuple[pd.DataFrame, pd.DataFrame, object]:
    """(training rows, validation rows, spec) outside :func:`excluded_rows`."""
    from dpcare.data import load_dataset
    from dpcare.studies.dp2stage import COLUMNS

    df, schema = load_dataset(dataset)
    keep = COLUMNS[dataset]
    table = df[keep]
    rest = table.loc[~table.index.isin(excluded_rows(table))]
    if len(rest) < train + validation:
        raise SystemExit(f"{dataset}: only {len(rest)} rows outside the release and study rows, asked for "
                         f"{train} + {validation}")
    pick = rest.sample(train + validation, random_state=1)
    spec = schema.select(keep)
    return pick.iloc[:train], pick.iloc[train:], spec


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--dataset", default="adult", choices=("adult", "support2"))
    p.add_argument("--train", type=int, default=2000)
    p.add_argument("--validation", type=int, default=1000)
    p.add_argument("--out", type=Path, required=True)
    a = p.parse_args(argv)
    from dpcare.data import save_spec

    train, validation, spec = tuning_rows(a.dataset, a.train, a.validation)
    a.out.mkdir(parents=True, exist_ok=True)
    train.to_csv(a.out / f"{a.dataset}-train.csv", index=False)
    validation.to_csv(a.out / f"{a.dataset}-validation.csv", index=False)
    save_spec(spec, a.out / f"{a.dataset}-10cols.yaml")
    print(f"wrote {len(train)} training and {len(validation)} validation rows of {a.dataset} to {a.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
