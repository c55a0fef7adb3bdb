"""Accounting speed: epsilon for 100,000 steps, sigma calibration, PLD (1e-4 grid) vs RDP.

    OMP_NUM_THREADS=1 python benchmarks/bench_accounting.py
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

from dpcare.privacy import (
    PrivacyLedger,
    calibrate_noise_multiplier,
    compute_epsilon,
    sampled_gaussian_event,
)

T = TypeVar("T")
DELTA = 1e-5


def timed(fn: Callable[[], T]) -> tuple[T, float]:
    start = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - start


def epsilon_rows() -> None:
    print(f"epsilon of T Poisson-sampled Gaussian steps (q = 0.01, sigma = 1.0, delta = {DELTA:g})")
    for steps in (10_000, 100_000):
        event = sampled_gaussian_event(0.01, 1.0, steps)
        for name, acc, grid in (("PLD 1e-4", "pld", 1e-4), ("PLD 1e-3", "pld", 1e-3), ("RDP", "rdp", 1e-4)):
            eps, dt = timed(lambda e=event, a=acc, g=grid: compute_epsilon(e, DELTA, a, g))
            print(f"  T = {steps:>7,}  {name:8}: epsilon = {eps:8.4f}  in {dt:.3f} s")
    event = sampled_gaussian_event(0.01, 15.0, 100_000)  # large sigma, many steps: 1e-3 is looser than RDP
    eps = {g: compute_epsilon(event, DELTA, "pld", g) for g in (1e-3, 1e-4)}
    rdp = compute_epsilon(event, DELTA, "rdp")
    print(f"  sigma = 15, T = 100,000: PLD 1e-3 {eps[1e-3]:.4f}, PLD 1e-4 {eps[1e-4]:.4f}, RDP {rdp:.4f}")


def golden() -> None:
    event = sampled_gaussian_event(0.04, 1.5, 2250)
    print("golden: sigma = 1.5, q = 0.04, 2,250 steps (90 epochs), delta = 1e-5")
    print(f"  PLD 1e-4: {compute_epsilon(event, DELTA):.4f}   RDP: {compute_epsilon(event, DELTA, 'rdp'):.4f}")


def calibration_rows() -> None:
    print(f"calibrating sigma (q = 0.01, 10,000 steps, delta = {DELTA:g})")
    for target in (0.5, 1.0, 3.0, 8.0):
        s_pld, dt = timed(lambda t=target: calibrate_noise_multiplier(0.01, 10_000, t, DELTA))
        s_rdp, dt_rdp = timed(lambda t=target: calibrate_noise_multiplier(0.01, 10_000, t, DELTA, accountant="rdp"))
        eps = compute_epsilon(sampled_gaussian_event(0.01, s_pld, 10_000), DELTA)
        print(f"  target {target:>4}: PLD sigma {s_pld:.4f} (epsilon {eps:.4f}) in {dt:.2f} s;"
              f"  RDP sigma {s_rdp:.4f} in {dt_rdp:.2f} s;  PLD/RDP sigma {s_pld / s_rdp:.3f}")


def ledger_rows() -> None:
    ledger = PrivacyLedger(100_000)
    _, dt = timed(lambda: [ledger.charge_sampled_gaussian("train", 0.01, 1.0) for _ in range(10_000)])
    first, dt1 = timed(ledger.running_epsilon)
    ledger.charge_sampled_gaussian("train", 0.01, 1.0)
    _, dt2 = timed(ledger.running_epsilon)
    print(f"ledger: 10,000 per-step charges in {dt * 1e3:.1f} ms; running_epsilon {first:.4f} "
          f"in {dt1 * 1e3:.1f} ms (first), {dt2 * 1e3:.2f} ms (cached); PLD epsilon {ledger.epsilon():.4f}")


def main() -> None:
    epsilon_rows()
    golden()
    calibration_rows()
    ledger_rows()


if __name__ == "__main__":
    main()
