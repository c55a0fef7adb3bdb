"""What every saved synthesizer shares, whichever kind fitted it (DP-2Stage's language model or AIM): the
run-folder checks, the real test rows of the public-baseline comparison, and :func:`load_synthesizer`.
No torch here: an AIM run loads without it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd

from dpcare.data import TableSchema
from dpcare.exceptions import DataError, MissingFileError
from dpcare.runs import MANIFEST, Manifest, read_manifest

KIND = "synth"  # the run kind of a saved synthesizer
STATE_FILE = "synthesizer.json"
#: the smallest real test split the public-baseline comparison is run on
MIN_TEST_ROWS = 10
BASELINE_NOTE = ("The public-baseline comparison at fit (run.json baselines) scores models on real held-out test "
                 "rows: a release outside the guarantee, for those allowed to see the data (the rows did not train "
                 "the synthesizer).")


def check_test_rows(test: pd.DataFrame, schema: TableSchema, where: str) -> None:
    """Refuse, before anything trains, real test rows the comparison cannot be scored on."""
    if len(test) < MIN_TEST_ROWS:
        raise DataError(f"{where} holds {len(test)} rows: at least {MIN_TEST_ROWS} are needed to compare the "
                        "synthetic table with the public baseline; hold out more rows (--holdout), pass --test, or "
                        "--holdout 0 to skip the comparison")
    if test[schema.target].nunique() < 2:
        raise DataError(f"{where} holds a single class of '{schema.target}': AUROC is undefined there; hold out more "
                        "rows (--holdout), use another --seed or pass --test")


def read_state(folder: str | Path) -> tuple[Manifest, dict[str, Any]]:
    """run.json and synthesizer.json of a saved synthesizer folder, checked to be one."""
    folder = Path(folder)
    if not folder.is_dir():
        raise MissingFileError(f"{folder} is not a saved synthesizer: no such folder")
    if not (folder / MANIFEST).is_file() and (folder / STATE_FILE).is_file():
        raise DataError(f"{folder} holds a synthesizer saved before dpcare's run-folder format (no {MANIFEST}): "
                        "that format no longer loads; fit the synthesizer again")
    manifest = read_manifest(folder)
    if manifest.kind != KIND:
        raise DataError(f"{folder} holds a {manifest.kind!r} run, not a saved synthesizer")
    if not (folder / STATE_FILE).is_file():
        raise MissingFileError(f"{folder} is not a saved synthesizer (no {STATE_FILE})")
    return manifest, json.loads((folder / STATE_FILE).read_text())


def load_synthesizer(folder: str | Path, progress: bool = True):
    """The synthesizer saved in ``folder``: an :class:`~dpcare.synth.aim.AIMSynthesizer` or a DP-2Stage
    :class:`~dpcare.synth.synthesizer.Synthesizer`, by the format of its state."""
    from dpcare.synth.aim import STATE_FORMAT, AIMSynthesizer

    _, state = read_state(folder)
    if state.get("format") == STATE_FORMAT:
        return AIMSynthesizer.load(folder, progress=progress)
    from dpcare.synth.synthesizer import Synthesizer

    return Synthesizer.load(folder, progress=progress)


__all__ = ["BASELINE_NOTE", "KIND", "MIN_TEST_ROWS", "STATE_FILE", "check_test_rows", "load_synthesizer",
           "read_state"]
