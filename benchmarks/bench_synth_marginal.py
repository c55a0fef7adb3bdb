"""SmartNoise's marginal-based DP synthesizers (MST, AIM) scored like ``dpcare synth fit``: is the DP-2Stage
language model what holds a table back, or is its signal out of reach of any DP synthesizer at this size?

Each cell runs ``run_baseline`` on the training rows at (epsilon, delta = min(1e-5, 0.01/n)), draws 500 rows and
compares them with 500 declared-support rows on the real held-out rows (``compare_to_public``, the verdict of
``synth fit``). Rows: the tuning rows of ``synth_tuning_rows.py`` (``--train`` / ``--validation`` files), or the
release tables' random sample (``--rows N``: ``df.sample(N, random_state=0)`` of the dp2stage columns, split per
seed with ``--holdout`` as ``synth fit --holdout`` splits it). Needs ``.venv-baselines`` (scripts/setup.sh).

    OMP_NUM_THREADS=1 python benchmarks/bench_synth_marginal.py --dataset support2 --rows 5000 --holdout 0.1
    OMP_NUM_THREADS=1 python benchmarks/bench_synth_marginal.py --dataset support2 \\
        --train results/tune/support2-train.csv --validation results/tune/support2-validation.csv
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Sequence
from pathlib import Path


def release_sample(dataset: str, rows: int):
    """(rows, spec): the release tables' ``rows``-row random sample of the dp2stage columns, as ``synth fit`` reads it."""
    from dpcare.data import load_dataset, load_table
    from dpcare.studies.dp2stage import COLUMNS

    df, schema = load_dataset(dataset)
    keep = COLUMNS[dataset]
    spec = schema.select(keep)
    return load_table(df[keep].sample(min(rows, len(df)), random_state=0).reset_index(drop=True), spec), spec


def split_rows(data, holdout: float, seed: int):
    """(training rows, held-out rows) of ``data`` as ``synth fit --holdout H --seed S`` splits it."""
    from dpcare.data.splits import holdout_split

    train, test = holdout_split(len(data), holdout, seed)
    return data.iloc[train].reset_index(drop=True), data.iloc[test].reset_index(drop=True)


def file_rows(dataset: str, train: Path, validation: Path):
    """(training rows, validation rows, spec) from files written by ``synth_tuning_rows.py``."""
    from dpcare.data import load_table
    from dpcare.data.schema import load_spec

    spec = load_spec(train.parent / f"{dataset}-10cols.yaml")
    return load_table(train, spec), load_table(validation, spec), spec


def cell(method: str, train, test, spec, epsilon: float, seed: int, rows: int = 500) -> dict:
    """One synthesizer run and its comparison with the public baseline on ``test``."""
    from dpcare.privacy.validation import default_delta
    from dpcare.synth.baselines import run_baseline
    from dpcare.synth.support_baseline import compare_to_public

    start = time.perf_counter()
    fake = run_baseline(method, train, spec, epsilon, default_delta(len(train)), rows, seed=seed)
    seconds = time.perf_counter() - start
    verdict = compare_to_public(fake, test, spec, seed=seed)["comparisons"][0]
    return {**verdict, "seconds": seconds}


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--dataset", default="support2", choices=("adult", "support2"))
    p.add_argument("--rows", type=int, help="the release sample's size (with --holdout)")
    p.add_argument("--holdout", type=float, default=0.1)
    p.add_argument("--train", type=Path, help="tuning rows (with --validation) instead of --rows")
    p.add_argument("--validation", type=Path)
    p.add_argument("--methods", default="mst,aim")
    p.add_argument("--seeds", default="0,1,2")
    p.add_argument("--epsilon", type=float, default=8.0)
    a = p.parse_args(argv)
    if (a.rows is None) == (a.train is None) or (a.train is None) != (a.validation is None):
        p.error("give either --rows or both --train and --validation")
    if not 0 < a.holdout < 1:
        p.error(f"--holdout must be in (0, 1): the held-out rows score the comparison, got {a.holdout}")
    print("| method | seed | train rows | test rows | AUC XGB | declared-support baseline | improvement [95% interval] "
          "| beats | fit s |\n|---|---|---|---|---|---|---|---|---|", flush=True)
    if a.rows is not None:
        data, spec = release_sample(a.dataset, a.rows)
    else:
        train, test, spec = file_rows(a.dataset, a.train, a.validation)
    for method in a.methods.split(","):
        for seed in (int(s) for s in a.seeds.split(",")):
            if a.rows is not None:
                train, test = split_rows(data, a.holdout, seed)
            c = cell(method, train, test, spec, a.epsilon, seed)
            head = f"| {method} | {seed} | {len(train)} | {len(test)} |"
            if c.get("undefined"):  # a one-class table (or baseline): synth fit's verdict says so, and so do we
                print(f"{head} {c['verdict']} | | | False | {c['seconds']:.0f} |", flush=True)
                continue
            print(f"{head} {c['model']:.3f} | {c['baseline']:.3f} | {c['difference']:+.3f} [{c['low']:+.3f}, "
                  f"{c['high']:+.3f}] | {c['beats']} | {c['seconds']:.0f} |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
