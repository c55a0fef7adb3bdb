"""The public-baseline rows of the dp2stage table (docs/results/dp2stage.md): the benchmark's own train/test
rows (prepare), n_synth rows drawn independently from the spec's declared support (no private value read),
evaluated as every method of `dpcare benchmark dp2stage` is (same real test rows, same models, the
benchmark's seed).

    python benchmarks/bench_synth_public_baseline.py
"""
import time

from dpcare.studies.dp2stage import Dp2StageBenchmark, prepare
from dpcare.synth.evaluate import evaluate_synthetic, summary
from dpcare.synth.support_baseline import support_table

bench = Dp2StageBenchmark()
print("bench", bench.n_train, bench.n_test, bench.n_synth, bench.seed)
for name in bench.datasets:
    t = time.perf_counter()
    train, test, schema = prepare(name, bench)
    fake = support_table(schema, bench.n_synth, seed=bench.seed)
    rep = evaluate_synthetic(fake, train, test, schema, seed=bench.seed, baseline=False)
    s = summary(rep)
    print(name, {k: (round(v, 3) if isinstance(v, float) else v) for k, v in s.items()}, f"{time.perf_counter()-t:.1f}s")
