"""``run.json``: the contract every recipe and study writes, and all that ``report`` and ``budget`` read.

One manifest per run folder::

    {"format": "dpcare-run/1", "run_id": ..., "kind": "tabular", "command": "dpcare train",
     "created": ..., "finished": ..., "settings": {...}, "data": {...},
     "models": [{"name": "dp-sgd", "guarantee": {...} | null, "ledger": {...} | null, "note": ...}],
     "metrics": [{"model": "dp-sgd", "test AUPRC": 0.84, ...}], "headline": ["test AUPRC", ...],
     "baselines": [...], "attacks": [{"name": ..., "file": "attacks/loss.json"}],
     "timing": [...], "not_protected": [...], "figures": [[caption, file]], "notes": [...],
     "files": {"model": "model.pt", "split": "split.json"},
     "phases": [{"phase": "training", "seconds": 12.3}], "warnings": [...],
     "units": {"test MSE": "..."}, "verdicts": [{"model": ..., "verdict": "worth releasing", ...}],
     "settings_in_effect": {...}}

``models`` are the released models with their guarantees (``guarantee`` null: none) and ledger states;
``phases`` are the seconds of each phase of the run (:mod:`dpcare.runs.record`), ``warnings`` every warning the
command printed; ``units`` says the unit and scale of a metric column; ``verdicts`` are the plain verdicts against
the public baselines (:func:`dpcare.verdict.verdict_entry`); ``settings_in_effect`` are the settings the run used,
defaults resolved and other methods' settings left out (:func:`dpcare.settings.in_effect`).
``metrics`` and ``timing`` rows name their model; attack files carry the run id and are read only if it
matches the manifest's (a file of another run is never shown as this run's). An attack file::

    {"run_id": ..., "title": "LOSS membership attack", "rows": [{"model": ..., "AUC": ...}],
     "curves": {model: {"members": [scores], "nonmembers": [scores]}}, "plots": ["attacks/loss.png"]}

with scores higher for "more likely a member".
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from dpcare.exceptions import DataError, MissingFileError
from dpcare.io import write_json

FORMAT = "dpcare-run/1"
MANIFEST = "run.json"


@dataclass
class Manifest:
    """What one run folder holds (see the module docstring)."""

    kind: str = ""
    command: str = ""
    run_id: str = ""
    created: str = ""
    finished: str = ""
    settings: dict[str, Any] = field(default_factory=dict)
    data: dict[str, Any] = field(default_factory=dict)
    models: list[dict[str, Any]] = field(default_factory=list)
    metrics: list[dict[str, Any]] = field(default_factory=list)
    headline: list[str] = field(default_factory=list)
    baselines: list[dict[str, Any]] = field(default_factory=list)
    attacks: list[dict[str, str]] = field(default_factory=list)
    timing: list[dict[str, Any]] = field(default_factory=list)
    phases: list[dict[str, Any]] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    units: dict[str, str] = field(default_factory=dict)
    verdicts: list[dict[str, Any]] = field(default_factory=list)
    settings_in_effect: dict[str, Any] = field(default_factory=dict)
    not_protected: list[str] = field(default_factory=list)
    figures: list[list[str]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    files: dict[str, str] = field(default_factory=dict)

    def add_model(self, name: str, guarantee: dict[str, Any] | None, ledger: dict[str, Any] | None = None,
                  note: str = "", epsilon: float | None = None, delta: float | None = None) -> None:
        """A released model: its guarantee (None: no formal guarantee, ``note`` says why) and ledger state.
        A study that keeps only a model's (``epsilon``, ``delta``) gives those, and ``note`` says what they
        protect."""
        entry = {"name": name, "guarantee": guarantee, "ledger": ledger, "note": note}
        if guarantee is None and epsilon is not None:
            entry |= {"epsilon": epsilon, "delta": delta}
        self.models.append(entry)

    def to_dict(self) -> dict[str, Any]:
        return {"format": FORMAT, **asdict(self)}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Manifest:
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in known})


def is_run_folder(folder: str | os.PathLike) -> bool:
    return (Path(folder) / MANIFEST).is_file()


def read_manifest(folder: str | os.PathLike) -> Manifest:
    """The manifest of a finished run folder; clear errors for a missing folder or a foreign file."""
    folder = Path(folder)
    if not folder.is_dir():
        raise MissingFileError(f"run folder {folder} does not exist or is not a folder")
    path = folder / MANIFEST
    if not path.is_file():
        partial = folder.parent / f".{folder.name}.partial"
        hint = f" (an unfinished run is in {partial}: rerun its command to finish it)" if partial.exists() else ""
        raise DataError(f"{folder} holds no {MANIFEST}: it is not a finished dpcare run folder{hint}")
    try:
        d = json.loads(path.read_text())
    except json.JSONDecodeError as err:
        raise DataError(f"{path} is not valid JSON ({err})") from None
    if not isinstance(d, dict) or d.get("format") != FORMAT:
        raise DataError(f"{path} is not a dpcare run manifest (format {FORMAT!r} expected, "
                        f"got {d.get('format') if isinstance(d, dict) else type(d).__name__!r})")
    return Manifest.from_dict(d)


def read_run_of_kind(folder: str | os.PathLike, kind: str, what: str) -> tuple[Manifest, dict[str, Any],
                                                                                  dict[str, Any]]:
    """The manifest of a finished run of ``kind`` (a saved model being loaded), its settings and the run facts
    kept under ``settings["info"]``; another kind of run is an error naming both (``what``: the model, in
    words)."""
    manifest = read_manifest(folder)
    if manifest.kind != kind:
        raise DataError(f"{folder} holds a {manifest.kind!r} run, not {what} ({kind!r})")
    settings = dict(manifest.settings)
    return manifest, settings, settings.pop("info", {})


def read_attacks(folder: str | os.PathLike, manifest: Manifest) -> list[dict[str, Any]]:
    """The attack files the manifest lists, each checked to belong to this run."""
    out = []
    for entry in manifest.attacks:
        path = Path(folder) / entry["file"]
        payload = json.loads(path.read_text())
        if payload.get("run_id") != manifest.run_id:
            raise DataError(f"{path} belongs to run {payload.get('run_id')!r}, not to this folder's run "
                            f"{manifest.run_id!r}: it is not shown")
        out.append(payload)
    return out


def attach_attack(folder: str | os.PathLike, name: str, payload: dict[str, Any]) -> Path:
    """Add an attack run later (``dpcare audit ... --run FOLDER``) to a finished run: ``attacks/<name>.json``
    tied to the run id, and its entry in run.json (an attack of the same name is replaced)."""
    folder = Path(folder)
    manifest = read_manifest(folder)
    file = f"attacks/{name}.json"
    path = write_json(folder / file, {"run_id": manifest.run_id, **payload})
    manifest.attacks = [a for a in manifest.attacks if a["file"] != file] + [
        {"name": payload.get("title", name), "file": file}]
    write_json(folder / MANIFEST, manifest.to_dict())
    return path


__all__ = ["FORMAT", "MANIFEST", "Manifest", "attach_attack", "is_run_folder", "read_attacks", "read_manifest",
           "read_run_of_kind"]
