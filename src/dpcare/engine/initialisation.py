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
    seed alone: two fits in one process (a study's worker) start alike; after the block the generator is
    restored. Only the CPU generator is seeded (models are built on the CPU, then moved): a GPU's generators are
    not touched. ``seed`` None: the generator as it is (fresh randomness, moving on)."""
    if seed is None:  # drawn from the generator, which moves on (restoring it would repeat the draw next time)
        yield
        return
    with seeded_cpu_generator(sub_root(seed, "model initialisation")):
        yield


@contextmanager
def seeded_cpu_generator(value: int) -> Iterator[None]:
    """Inside, torch's global CPU generator starts from ``value``; after the block it is restored. Not
    ``torch.manual_seed``, which would also seed every GPU's generator and leave it seeded after the block."""
    with torch.random.fork_rng(devices=[]):
        torch.random.default_generator.manual_seed(value)
        yield
