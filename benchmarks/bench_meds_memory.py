"""Peak memory of windowing a MEDS folder: the lazy reader (dpcare.timeseries.meds) vs the in-memory reader.

Synthetic MEDS folders (dpcare.timeseries.meds.synthetic_meds: 4 shards, a birth row plus ``--events``
measurements over 2 codes a patient) of 1k, 10k and 100k patients are windowed (hourly, 6 h in / 2 h out,
stride 2, declared statistics) by each reader in a fresh subprocess (OMP_NUM_THREADS=1, the glibc allocator
setting): peak RSS (ru_maxrss), the RSS after the imports (the floor every process pays), pyarrow's peak
pool allocation and the bytes of the windows kept. "lazy, spilled" writes every window to memory-mapped
files (a memory bound of 0 bytes: the windows are read back from disk when used). "above floor" = peak - floor: what reading cost. The
in-memory reader (read_meds: every shard into pandas, then bin_events over the whole table) is skipped at a
size where the floor-corrected peak projected from the previous size exceeds ``--max-in-memory-gib``; the
table says so. ``--train`` then trains one DP-SGD epoch (the recipe's linear parameterisation, patient-level,
epsilon 3) on the largest folder's training windows read lazily, and reports its time and peak RSS.

    python benchmarks/bench_meds_memory.py [--sizes 1000 10000 100000] [--events 20] [--train]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from dpcare.runtime import FAST_ALLOCATOR

WINDOW = {"input_len": 6, "output_len": 2, "stride": 2}


def _rss_mib() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def child(mode: str, folder: str, epochs: float) -> dict:
    from dataclasses import replace

    import pyarrow as pa

    from dpcare.timeseries import user_dataset
    from dpcare.timeseries.meds import synthetic_meds_spec
    from dpcare.timeseries.recipe import prepare_lazy, prepare_tsf

    floor = _rss_mib()
    dataset = user_dataset(folder, "meds", synthetic_meds_spec(**WINDOW))
    t0 = time.perf_counter()
    if mode == "in-memory":
        memory = replace(dataset, windows=None, given_splits=None)
        data = prepare_tsf(memory, population=memory.patient_ids())
        parts = {s: data.part(s) for s in ("train", "validation", "test")}
    elif mode == "lazy, spilled":  # every window to memory-mapped files (a bound of 0 bytes)
        data = prepare_lazy(dataset, spill_dir=tempfile.mkdtemp(prefix="meds_windows_"), memory_bound=0)
        parts = data.parts
    else:
        data = prepare_lazy(dataset)
        parts = data.parts
    seconds = time.perf_counter() - t0
    kept = sum(w.x.nbytes + w.y.nbytes + w.mask.nbytes for w in parts.values())
    out = {"mode": mode, "seconds": seconds, "windows": sum(len(w) for w in parts.values()),
           "window_mib": kept / 2 ** 20, "floor_mib": floor,
           "peak_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
           "arrow_peak_mib": pa.default_memory_pool().max_memory() / 2 ** 20}
    if epochs:
        from dpcare.timeseries.recipe import ForecastSettings, dp_sgd

        settings = ForecastSettings()
        settings = replace(settings, dp=settings.dp.replace(epochs=epochs, epsilon=3.0))
        train = parts["train"]
        t1 = time.perf_counter()
        _, result = dp_sgd(train, settings, data.standardizer, len(data.splits["train"]), progress=False)
        out.update(train_seconds=time.perf_counter() - t1, train_steps=result.steps,
                   train_patients=len(data.splits["train"]), train_windows=len(train),
                   epsilon=result.guarantee.epsilon, delta=result.guarantee.delta,
                   train_peak_mib=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
    return out


def run_child(mode: str, folder: Path, epochs: float = 0.0) -> dict:
    env = {**os.environ, "OMP_NUM_THREADS": "1", **FAST_ALLOCATOR}
    p = subprocess.run([sys.executable, __file__, "--child", mode, str(folder), str(epochs)], env=env,
                       capture_output=True, text=True, check=False)
    if p.returncode:
        raise RuntimeError(f"{mode} on {folder} failed:\n{p.stderr[-3000:]}")
    return json.loads(p.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", type=int, nargs="+", default=[1000, 10_000, 100_000])
    ap.add_argument("--events", type=int, default=20, help="measurements a patient")
    ap.add_argument("--max-in-memory-gib", type=float, default=8.0)
    ap.add_argument("--train", action="store_true", help="one DP-SGD epoch on the largest folder, read lazily")
    ap.add_argument("--keep", type=Path, default=None, help="write the folders here (default: a temp folder)")
    ap.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        mode, folder, epochs = args.child
        print(json.dumps(child(mode, folder, float(epochs))))
        return

    from dpcare.timeseries.meds import synthetic_meds

    root = args.keep or Path(tempfile.mkdtemp(prefix="bench_meds_"))
    print(f"{'patients':>9} {'reader':<14}{'s':>7}{'windows':>9}{'windows MiB':>12}{'peak MiB':>10}"
          f"{'floor MiB':>10}{'above floor':>12}{'arrow MiB':>10}")
    last_above = None
    for n in sorted(args.sizes):
        folder = root / f"meds_{n}"
        if not (folder / "data").is_dir():
            t = time.perf_counter()
            synthetic_meds(folder, n, shards=4, events_per_patient=args.events, seed=0)
            print(f"# wrote {folder} in {time.perf_counter() - t:.1f} s "
                  f"({sum(f.stat().st_size for f in (folder / 'data').iterdir()) / 2 ** 20:.1f} MiB of shards)")
        rows = {"lazy": run_child("lazy", folder), "lazy, spilled": run_child("lazy, spilled", folder)}
        projected = None if last_above is None else last_above[1] * n / last_above[0]
        if projected is not None and projected > args.max_in_memory_gib * 1024:
            print(f"# in-memory skipped at {n} patients: projected {projected / 1024:.1f} GiB above the floor "
                  f"> --max-in-memory-gib {args.max_in_memory_gib}")
        else:
            rows["in-memory"] = run_child("in-memory", folder)
            last_above = (n, rows["in-memory"]["peak_mib"] - rows["in-memory"]["floor_mib"])
        for mode, r in rows.items():
            print(f"{n:>9} {mode:<14}{r['seconds']:>7.1f}{r['windows']:>9}{r['window_mib']:>12.1f}"
                  f"{r['peak_mib']:>10.0f}{r['floor_mib']:>10.0f}{r['peak_mib'] - r['floor_mib']:>12.0f}"
                  f"{r['arrow_peak_mib']:>10.1f}")
        if "in-memory" in rows:
            lazy, mem = rows["lazy"], rows["in-memory"]
            print(f"# {n} patients: in-memory / lazy peak RSS {mem['peak_mib'] / lazy['peak_mib']:.2f}, above the "
                  f"floor {(mem['peak_mib'] - mem['floor_mib']) / max(1e-9, lazy['peak_mib'] - lazy['floor_mib']):.2f}"
                  f"; same windows: {mem['windows'] == lazy['windows']}")
    if args.train:
        n = max(args.sizes)
        r = run_child("lazy", root / f"meds_{n}", epochs=1.0)
        print(f"# one DP-SGD epoch on {n} patients read lazily: {r['train_patients']} training patients, "
              f"{r['train_windows']} windows, {r['train_steps']} steps in {r['train_seconds']:.1f} s "
              f"(reading {r['seconds']:.1f} s); peak RSS {r['train_peak_mib']:.0f} MiB "
              f"(floor {r['floor_mib']:.0f}); ({r['epsilon']:g}, {r['delta']:.2g})-DP at the patient level")


if __name__ == "__main__":
    main()
