"""The secret randomness of a run: one root for every draw a guarantee relies on.

A DP release is private only while its noise is unknown. ``DPSettings.seed`` is public (it is recorded in
run.json and seeds the splits, the initialisation, public sampling and dropout), so the noise must not be
a function of it. Every draw of the mechanism (the engine's Poisson sampling of the private units and its
Gaussian noise, the adaptive-clip count's noise and sample, every noisy statistic charged to a ledger)
comes from :func:`secret_seed` of ``DPSettings.noise_seed``:

* ``None`` (the default): fresh OS entropy (:mod:`secrets`), never recorded. Given ``keep`` (a run's
  checkpoint folder, deleted when the run finishes) the drawn root is kept there, so that an interrupted
  run resumes with the same noise instead of releasing a second, uncounted draw.
* an integer: the noise is reproducible bit for bit by whoever knows it (a :class:`ReproducibleNoiseWarning`);
  for tests and for reproducing published numbers only.

In a torch.distributed run every rank takes rank 0's root (the same Poisson draw, one noise vector).

Two mechanisms of one run never share a stream: each use other than the engine's names its ``purpose`` and
gets its own sub-root, derived from the root and the purpose through NumPy's ``SeedSequence`` (composition
assumes independent noise; two generators seeded alike would repeat one noise sequence in two releases).
"""

from __future__ import annotations

import os
import secrets
import sys
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import numpy as np

from dpcare.caller import user_stacklevel

ROOT_FILE = "secret_root"  # in ``keep``: the drawn root of an unfinished run
ROOT_BITS = 128  # of OS entropy in a drawn root (streams are spawned from it: engine/noise.py, sub_root)


class ReproducibleNoiseWarning(UserWarning):
    """An integer ``noise_seed``: whoever knows it can regenerate the noise and subtract it."""


def reproducible_noise_note(noise_seed: int | None) -> str | None:
    """The plain statement a run makes about an integer ``noise_seed`` (None: nothing to say)."""
    if noise_seed is None:
        return None
    return (f"noise_seed = {noise_seed} was given: the DP noise and sampling of this run are reproducible by "
            "whoever knows it, who can recompute and subtract the noise. The guarantee holds only against "
            "those who do not know it (use noise_seed = None, the default, for a real release).")


def warn_if_reproducible(noise_seed: int | None) -> None:
    """Warn (:class:`ReproducibleNoiseWarning`, at the user's call) when ``noise_seed`` is an integer."""
    note = reproducible_noise_note(noise_seed)
    if note is not None:
        warnings.warn(note, ReproducibleNoiseWarning, stacklevel=user_stacklevel())


def secret_seed(noise_seed: int | None, keep: str | os.PathLike | None = None, purpose: str | None = None) -> int:
    """The root of the run's secret randomness: ``noise_seed``, or fresh OS entropy when None (kept in the
    folder ``keep`` when given, and read back from it on resume). Rank 0's root in a distributed run.
    Given ``purpose`` (a name per use: "table bounds", "tuning selection"), a sub-root of it for that use."""
    if noise_seed is not None:
        root = int(noise_seed)
    elif keep is None:
        root = secrets.randbits(ROOT_BITS)
    else:
        path = Path(keep) / ROOT_FILE
        if path.is_file():
            root = int(path.read_text())
        else:
            from dpcare.io import write_text

            root = secrets.randbits(ROOT_BITS)
            write_text(path, str(root))
    if "torch.distributed" in sys.modules:  # every rank calls this at the same point of the run
        from dpcare.ranks import from_main

        root = from_main(root)
    return root if purpose is None else sub_root(root, purpose)


def sub_root(root: int, purpose: str) -> int:
    """The root of one use's stream: ``SeedSequence`` of ``root`` with ``purpose`` (as bytes) as spawn key."""
    key = tuple(purpose.encode())
    if not key:
        raise TypeError("purpose must be a non-empty name")
    state = np.random.SeedSequence(root, spawn_key=key).generate_state(1, np.uint64)
    return int(state[0]) >> 2  # 62 bits (torch generators take up to 64)


#: Gaussian draws summed per coordinate by :func:`secure_normal` (each of std sigma / sqrt(SECURE_SUMMANDS))
SECURE_SUMMANDS = 4
T = TypeVar("T")


def summed_normal(standard_normal: Callable[[], T], std: float) -> T:
    """N(0, std^2) noise as the sum of :data:`SECURE_SUMMANDS` draws of std / 2: again Gaussian with std ``std``,
    but without the floating-point artefacts of one sampler's output that let an observer tell neighbouring
    inputs apart (Holohan & Braghin 2021, "Secure random sampling in differential privacy", ESORICS; the defence
    of Opacus' ``secure_mode``). ``standard_normal()`` draws one N(0, 1) array (NumPy or torch), summed in place."""
    total = standard_normal()
    for _ in range(SECURE_SUMMANDS - 1):
        total += standard_normal()
    total *= std / SECURE_SUMMANDS ** 0.5
    return total


def secure_normal(rng: np.random.Generator, std: float, shape: tuple[int, ...] = ()) -> np.ndarray:
    """:func:`summed_normal` of float32 draws of ``rng``."""
    return np.asarray(summed_normal(lambda: rng.standard_normal(shape, dtype=np.float32), std), np.float32)


def secret_rng(noise_seed: int | None, keep: str | os.PathLike | None = None, *,
               purpose: str) -> np.random.Generator:
    """A NumPy generator for the noise of one statistic (``purpose`` names it), from :func:`secret_seed`."""
    return np.random.default_rng(secret_seed(noise_seed, keep, purpose))


__all__ = ["ROOT_FILE", "SECURE_SUMMANDS", "ReproducibleNoiseWarning", "reproducible_noise_note", "secret_rng",
           "secret_seed", "secure_normal", "sub_root", "summed_normal", "warn_if_reproducible"]
