"""Small generated clinical-like tables for tests (no download, no real patients), and benchmark scripts loaded
as modules."""

from __future__ import annotations

import numpy as np
import pandas as pd

SPEC = {
    "name": "toy-icu",
    "target": {"name": "death", "kind": "categorical", "categories": [0, 1]},
    "columns": [
        {"name": "age", "kind": "numeric", "role": "private", "bounds": [18, 100]},
        {"name": "sex", "kind": "categorical", "role": "private", "categories": ["female", "male"]},
        {"name": "hr", "kind": "numeric", "role": "public", "bounds": [20, 250]},
        {"name": "lab", "kind": "numeric", "role": "public", "bounds": [0, 50], "nullable": True,
         "transform": "log1p"},
        {"name": "group", "kind": "categorical", "role": "public", "categories": ["a", "b", "c"]},
    ],
}


def toy_table(n: int = 400, seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    age = rng.uniform(20, 95, n)
    sex = rng.choice(["female", "male"], n)
    hr = rng.normal(90, 20, n).clip(30, 200)
    lab = rng.lognormal(1.0, 0.8, n).clip(0, 49)
    lab[rng.random(n) < 0.1] = np.nan
    group = rng.choice(["a", "b", "c"], n)
    logit = 0.04 * (age - 60) + 0.02 * (hr - 90) + 0.5 * (group == "c") + 0.3 * (sex == "male")
    death = (rng.random(n) < 1 / (1 + np.exp(-logit))).astype(int)
    return pd.DataFrame({"age": age, "sex": sex, "hr": hr, "lab": lab, "group": group, "death": death})


def crash_at_step(trainer, step: int) -> None:
    """Make ``trainer`` raise KeyboardInterrupt (a simulated kill) when its private step ``step`` begins."""
    original = trainer.private_step

    def crashing(*args, **kwargs):
        if trainer.step_count == step:
            raise KeyboardInterrupt("simulated kill")
        return original(*args, **kwargs)

    trainer.private_step = crashing


def benchmark_script(name: str):
    """The module of ``benchmarks/<name>.py`` (benchmarks are scripts, not a package)."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "benchmarks" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def needs_smartnoise(name: str) -> None:
    """Skip the calling test when SmartNoise's ``name`` (mst, aim, dpctgan) cannot run on this machine."""
    import pytest

    from dpcare.synth.baselines import available_baselines

    error = available_baselines()[name]
    if error is not None:
        pytest.skip(f"SmartNoise {name} unavailable: {error}")


class GoldMasker:
    """Masks exactly the notes' gold PHI spans (so that which spans are masked cannot depend on their text)."""

    def __init__(self, notes):
        self.spans = {n.note_id: tuple(n.phi) for n in notes}

    def mask(self, note):
        from dpcare.text.classify.data import PLACEHOLDER
        from dpcare.text.spans import Span
        from dpcare.text.views.masking import MaskedNote

        out, slots, private, pos, at = [], [], [], 0, 0
        for s in sorted(note.phi, key=lambda s: s.start):
            if s.start < pos:
                continue
            out.append(note.text[pos:s.start])
            at += s.start - pos
            ph = PLACEHOLDER.format(label=s.label)
            slots.append(Span(at, at + len(ph), s.label, ph))
            private.append(s)
            out.append(ph)
            at += len(ph)
            pos = s.end
        out.append(note.text[pos:])
        return MaskedNote(note.note_id, note.patient_id, "".join(out), tuple(slots), tuple(private))

    def mask_many(self, notes, note_ids=None):
        return [self.mask(n) for n in notes]

    def find_many(self, texts, note_ids, show_progress=None):
        return [list(self.spans[i]) for i in note_ids]
