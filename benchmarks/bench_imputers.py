"""Imputation quality and speed of the imputers on a real table (validation rows).

    python benchmarks/bench_imputers.py [--dataset support2] [--rows 60]

The support set is FusionDP's public 10% split; the LM imputer is slow on CPU
(every row is a prompt), so it is scored on the first --rows validation rows and
GBM on the same rows for a like-for-like comparison.
"""

from __future__ import annotations

import argparse
import time

from dpcare.data import load_dataset, split_table
from dpcare.fusion import imputation_quality, make_imputer
from dpcare.studies.fusiondp import FRACTIONS


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dataset", default="support2")
    ap.add_argument("--rows", type=int, default=60)
    args = ap.parse_args()
    df, schema = load_dataset(args.dataset)
    parts = split_table(df, FRACTIONS, seed=0)
    rows = parts["val"].iloc[: args.rows]
    for name, options in (("gbm", {}), ("lm", {"shots": 4, "batch_size": 8})):
        t0 = time.perf_counter()
        imp = make_imputer(name, **options).fit(parts["public"], schema)
        quality = imputation_quality(imp, rows)
        dt = time.perf_counter() - t0
        print(f"{name}: {dt:.1f} s for fit + {len(rows)} rows ({dt / len(rows):.2f} s/row)")
        for col, q in quality.items():
            print(f"  {col}: " + ", ".join(f"{k} {v:.3f}" for k, v in q.items()))
        if name == "lm":
            print(f"  numeric parse failures (fell back to the support median): {imp.parse_failures}")


if __name__ == "__main__":
    main()
