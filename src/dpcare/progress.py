"""Progress output: a tqdm bar on a terminal, a few plain lines elsewhere (log files, CI, pipes).

``progress(...)`` takes the arguments of ``tqdm`` that dpcare uses and returns an object with
the same interface (iteration, ``update``, ``set_postfix``, ``set_description``, ``close``,
context manager). When the stream is not a terminal it writes one line per ~10 percent,
``desc: 40% (400/1000) 12.3s, ~18s left``, and never a carriage return.
``DPCARE_PROGRESS=bar|plain|off`` overrides the choice.

``quiet_loading()`` silences third-party chatter while a model is loaded (transformers and
huggingface_hub logging and progress bars, tokenizers' fork warning).
"""

from __future__ import annotations

import contextlib
import math
import os
import sys
import time
import warnings
from collections.abc import Iterable, Iterator
from typing import IO, Any, Self

from tqdm import tqdm

STEP = 0.1  # plain mode: one line per this fraction of the total


def progress(iterable: Iterable | None = None, total: float | None = None, desc: str = "", disable: bool = False,
             file: IO[str] | None = None, **kwargs: Any):
    """A progress bar over ``iterable`` (or ``total`` manual ``update`` steps); see the module docstring."""
    stream = file if file is not None else sys.stderr
    mode = os.environ.get("DPCARE_PROGRESS", "").lower()
    if disable or mode == "off":
        return tqdm(iterable, total=total, disable=True)
    if mode == "bar" or (mode != "plain" and _interactive(stream)):
        return tqdm(iterable, total=total, desc=desc, file=stream, **kwargs)
    return PlainProgress(iterable, total, desc, stream, initial=kwargs.get("initial", 0))


def _interactive(stream: IO[str]) -> bool:
    """A terminal, or a notebook kernel (tqdm draws there without a TTY)."""
    try:
        if stream.isatty():
            return True
    except (AttributeError, ValueError):  # no isatty, or a closed stream
        return False
    return "ipykernel" in sys.modules and stream in (sys.stderr, sys.stdout)


class PlainProgress:
    """tqdm's interface, writing a plain line at every ``STEP`` of the total (and at the end)."""

    def __init__(self, iterable: Iterable | None, total: float | None, desc: str, stream: IO[str], initial: float = 0):
        if total is None and iterable is not None and hasattr(iterable, "__len__"):
            total = len(iterable)
        self.iterable, self.total, self.desc, self.stream = iterable, total, desc, stream
        self.n = self._shown = self._initial = initial
        self.postfix = ""
        self._start = time.perf_counter()
        self._next = self._threshold(initial)
        self._closed = False

    def _threshold(self, n: float) -> float:
        """The count at which the next line is due: the next multiple of STEP * total after ``n``."""
        if not self.total:
            return math.inf
        step = STEP * self.total
        return (math.floor(n / step + 1e-9) + 1) * step

    def __iter__(self) -> Iterator:
        try:
            for item in self.iterable:
                yield item
                self.update(1)
        finally:
            self.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def update(self, n: float = 1) -> None:
        self.n += n
        if self.n >= self._next - 1e-9:
            self._write()
            self._next = self._threshold(self.n)

    def set_postfix(self, ordered_dict: dict | None = None, refresh: bool = True, **kwargs: Any) -> None:
        items = {**(ordered_dict or {}), **kwargs}
        self.postfix = ", ".join(f"{k}={v}" for k, v in items.items())

    def set_description(self, desc: str | None = None, refresh: bool = True) -> None:
        self.desc = desc or ""

    def refresh(self) -> None:
        """Nothing to redraw: lines are written as the count passes each step."""

    def close(self) -> None:
        if not self._closed and self.n != self._shown:
            self._write()
        self._closed = True

    def _write(self) -> None:
        elapsed = time.perf_counter() - self._start
        if self.total:
            line = f"{self.n / self.total:.0%} ({_count(self.n)}/{_count(self.total)}) {elapsed:.1f}s"
            done = self.n - self._initial
            if 0 < done and self.n < self.total:
                line += f", ~{elapsed / done * (self.total - self.n):.0f}s left"
        else:
            line = f"{_count(self.n)} {elapsed:.1f}s"
        prefix = f"{self.desc}: " if self.desc else ""
        suffix = f" [{self.postfix}]" if self.postfix else ""
        self.stream.write(f"{prefix}{line}{suffix}\n")
        self.stream.flush()
        self._shown = self.n


def _count(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else f"{x:.1f}"


@contextlib.contextmanager
def quiet_loading():
    """Within the block: transformers / huggingface_hub / peft log errors only, draw no bars and their
    Python warnings are hidden; tokenizers does not warn about forking (``TOKENIZERS_PARALLELISM=false``
    stays set)."""
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    from huggingface_hub import utils as hub
    from transformers.utils import logging as hf_logging

    verbosity, bars, hub_bars = (hf_logging.get_verbosity(), hf_logging.is_progress_bar_enabled(),
                                 not hub.are_progress_bars_disabled())
    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    hub.disable_progress_bars()
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", module=r"(transformers|huggingface_hub|peft|accelerate|gguf)(\.|$)")
            yield
    finally:
        hf_logging.set_verbosity(verbosity)
        if bars:
            hf_logging.enable_progress_bar()
        if hub_bars:
            hub.enable_progress_bars()
