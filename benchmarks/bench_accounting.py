"""Accounting speed: epsilon for 100,000 steps and sigma calibration, PLD (1e-4 grid) vs RDP.

    python benchmarks/bench_accounting.py
"""

from __future__ import annotations

import time

from dpcare.privacy import calibrate_noise_multiplier, compute_epsilon, sampled_gaussian_event


def timed(fn):
    t0 = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t0


def main() -> None:
    delta = 1e-5
    print("epsilon of T Poisson-subsampled Gaussian steps (q = 0.01, sigma = 1.0, delta = 1e-5)")
    for steps in (10_000, 100_000):
        event = sampled_gaussian_event(0.01, 1.0, steps)
        for acc in ("pld", "rdp"):
            eps, dt = timed(lambda: compute_epsilon(event, delta, acc))
            print(f"  T = {steps:>7,}  {acc}: epsilon = {eps:8.4f}  in {dt:.3f} s")
    print("golden: sigma = 1.5, q = 0.04, 2,250 steps (90 epochs), delta = 1e-5")
    for acc in ("pld", "rdp"):
        print(f"  {acc}: epsilon = {compute_epsilon(sampled_gaussian_event(0.04, 1.5, 2250), delta, acc):.4f}")
    print("calibrating sigma (q = 0.01, 10,000 steps, delta = 1e-5): PLD 1e-4 result vs RDP")
    for target in (0.5, 1.0, 3.0, 8.0):
        s_pld, dt = timed(lambda: calibrate_noise_multiplier(0.01, 10_000, target, delta))
        s_rdp, dt_rdp = timed(lambda: calibrate_noise_multiplier(0.01, 10_000, target, delta, accountant="rdp"))
        eps = compute_epsilon(sampled_gaussian_event(0.01, s_pld, 10_000), delta)
        print(f"  target {target:>4}: sigma_pld = {s_pld:.4f} (eps {eps:.4f}) in {dt:.2f} s;"
              f" sigma_rdp = {s_rdp:.4f} in {dt_rdp:.2f} s; ratio {s_pld / s_rdp:.3f}")


if __name__ == "__main__":
    main()
