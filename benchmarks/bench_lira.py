"""LiRA with 16 shadow models of the tabular MLP on 2 cores: wall time and attack strength.

    python benchmarks/bench_lira.py [--rows 2000] [--shadows 16] [--workers 2]
"""

from __future__ import annotations

import argparse

from dpcare.data import load_dataset
from dpcare.settings import DPSettings
from dpcare.tabular.audit import tabular_lira
from dpcare.tabular.settings import TabularSettings


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=2000)
    ap.add_argument("--shadows", type=int, default=16)
    ap.add_argument("--workers", type=int, default=2)
    args = ap.parse_args()
    df, schema = load_dataset("support2")
    df = df.sample(args.rows, random_state=0)
    runs = {"non-private, 100 epochs": TabularSettings(method="non-private", dp=DPSettings(epochs=100, batch_size=64)),
            "DP-SGD eps=1, 10 epochs": TabularSettings(method="dp-sgd", dp=DPSettings(epsilon=1.0, epochs=10,
                                                                                       batch_size=64))}
    print(f"SUPPORT2, {args.rows} rows (target and shadows each train on a random half), MLP 256 wide")
    for name, run in runs.items():
        r = tabular_lira(df, schema, run, shadows=args.shadows, workers=args.workers)
        on, off = r.online, r.offline
        print(f"{name}: {args.shadows} shadows + target in {r.seconds_shadows:.1f} s on {args.workers} workers; "
              f"online AUC {on['auc']['value']:.3f} [{on['auc']['low']:.3f}, {on['auc']['high']:.3f}], "
              f"TPR@1%FPR {on['tpr_at_1pct_fpr']['value']:.3f}; offline AUC {off['auc']['value']:.3f}")


if __name__ == "__main__":
    main()
