"""Model initialisation drawn from the run's public seed, not from whatever used torch's generator before."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch

from dpcare.privacy.randomness import sub_root


@contextmanager
def seeded_initialisation(seed: int | None) -> Iterator[None]:
    """Inside, torch's global generator is seeded from ``seed`` (public: recorded with the run), so the new
    parameters a model builder draws there (LoRA adapters, a fresh classification head) are a function of the
    seed alone: two fits in one process (a study's worker) start alike. Outside, the global generator is left
    as it was. ``seed`` None: the generator as it is (fresh randomness)."""
    with torch.random.fork_rng(devices=[]):
        if seed is not None:
            torch.manual_seed(sub_root(seed, "model initialisation"))
        yield
