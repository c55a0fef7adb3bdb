"""Constrained decoding vs the paper's rejection and imputation sampling on the SAME fitted model.

    python benchmarks/bench_synth_sampling.py [FOLDER] [--rows 300] [--mode dp-standard] [--epsilon 1]

FOLDER: a synthesizer saved by ``dpcare synth fit`` (or ``Synthesizer.save``). Without it,
one is fitted on Adult with the settings of ``dpcare benchmark dp2stage`` (stage-1 models are
cached under results/bench_synth_sampling/stage1). Prints valid rows per
second, the valid-row rate (valid rows / generated rows) and each method's speed relative
to constrained decoding, measured in this run.
"""

from __future__ import annotations

import argparse
import os

os.environ.setdefault("OMP_NUM_THREADS", "1")

from dpcare.studies.dp2stage import Dp2StageBenchmark, fitted_synthesizer, prepare, sampling_methods
from dpcare.synth import Synthesizer


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("folder", nargs="?", help="a saved synthesizer (default: fit one on Adult)")
    ap.add_argument("--rows", type=int, default=300, help="valid rows asked of each method")
    ap.add_argument("--mode", default="dp-standard", help="mode of the fitted model when no folder is given")
    ap.add_argument("--epsilon", type=float, default=1.0)
    ap.add_argument("--epochs", type=float, help="stage-2 epochs (default: the benchmark's 2)")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    if args.folder:
        synth = Synthesizer.load(args.folder, progress=False)
    else:
        bench = Dp2StageBenchmark(datasets=("adult",), epsilons=(args.epsilon,))
        dp = bench.settings.dp.replace(seed=args.seed, **({"epochs": args.epochs} if args.epochs else {}))
        bench.settings = bench.settings.replace(dp=dp)
        train, _, schema = prepare("adult", bench)
        synth = fitted_synthesizer(args.mode, args.epsilon, train, schema, bench, "adult",
                                   "results/bench_synth_sampling/stage1")
    results = sampling_methods(synth, args.rows, args.seed)
    base = results["constrained"].rows_per_second
    eps = "" if synth.settings.mode == "non-private" else f", epsilon {synth.settings.dp.epsilon:g}"
    print(f"\n{synth.settings.mode}{eps}, stage-2 epochs {synth.settings.dp.epochs:g}, "
          f"{args.rows} rows asked per method (at most {5 * args.rows} generated)\n")
    print("| sampling | valid rows | generated | valid rate | s | valid rows/s | speed vs constrained |")
    print("|---|---|---|---|---|---|---|")
    for m, st in results.items():
        print(f"| {m} | {st.rows} | {st.attempts} | {st.valid_rate:.3f} | {st.seconds:.1f} | "
              f"{st.rows_per_second:.1f} | {st.rows_per_second / base:.2f}x |")


if __name__ == "__main__":
    main()
