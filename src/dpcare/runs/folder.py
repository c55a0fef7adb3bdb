"""A run folder holds exactly one run: written in a staging folder, put in place whole when it is done.

``RunFolder(out, kind, settings=...)`` checks the output path BEFORE any private value is read or any
budget is reserved: ``out`` must not be a file, and an existing folder that is not empty is refused
unless ``force`` (then it is replaced whole when the new run finishes, never mixed with it). Every file
of the run is written into ``.<out>.partial/`` beside ``out``; :meth:`RunFolder.finish` writes
``run.json`` (the manifest, :mod:`dpcare.runs.manifest`) last, deletes the training checkpoints (they
hold the noise generators' state and the run's secret noise root, :mod:`dpcare.privacy.randomness`) and moves the staging folder into place.

The staging folder is made when the run first writes (a run refused while it checks its input leaves
nothing). An interrupted run leaves its staging folder: the same command with the same settings resumes in it
(its checkpoints are there, and its run id, so a budget reservation is taken over, not doubled); other
settings are refused unless ``force`` starts over.
"""

from __future__ import annotations

import atexit
import hashlib
import json
import os
import shutil
import tempfile
import uuid
import weakref
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, ClassVar

from dpcare.exceptions import DPCareError, SettingsError
from dpcare.io import torch_save, write_json, write_text
from dpcare.privacy.randomness import reproducible_noise_note
from dpcare.runs.manifest import MANIFEST, Manifest, is_run_folder, read_manifest
from dpcare.runs.record import close_record, open_record
from dpcare.runtime import process_rank
from dpcare.units import units_for

EXACT_WARNINGS = ("Some warnings in this file state exact statistics of the private data (e.g. how many values lay "
                  "outside their declared bounds): they are outside the guarantee; remove them before publishing "
                  "run.json.")
PARTIAL = "partial.json"  # in the staging folder: run id, kind and settings fingerprint of the unfinished run
CHECKPOINTS = "checkpoints"  # resumable training state, deleted when the run finishes
_OPEN: weakref.WeakSet[RunFolder] = weakref.WeakSet()  # run folders made and not finished, in this process


def fingerprint(settings: Any) -> str:
    """A short hash of the settings (JSON, sorted keys): two runs resume each other only if it matches."""
    text = json.dumps(settings, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def new_run_id() -> str:
    return datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ") + "-" + uuid.uuid4().hex[:8]


def staging_path(out: Path) -> Path:
    return out.parent / f".{out.name}.partial"


def check_output(out: str | os.PathLike, force: bool = False, flag: str = "--out", kind: str | None = None,
                 settings: Any = None) -> Path:
    """The output folder, refused (before any work) if it is a file, or a non-empty folder without ``force``;
    one that holds a finished run says so (the same run, when ``kind`` and ``settings`` match it)."""
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise SettingsError(f"{flag} {out} is a file, not a folder: choose a folder for the run's outputs")
    if out.is_dir() and any(out.iterdir()) and not force:
        finished = _finished_run(out, kind, settings)
        if finished:
            raise SettingsError(f"{flag} {out} is not empty (it {finished}; `dpcare report {out} --out report.html` "
                                "shows its results): choose a new folder for another run, or pass --force to run "
                                "again and replace it whole when the new run finishes")
        raise SettingsError(f"{flag} {out} is not empty (a run folder holds exactly one run): choose a new folder, "
                            "or pass --force to replace it whole when the new run finishes")
    if not os.access(out.parent if out.parent.exists() else Path.cwd(), os.W_OK):
        raise SettingsError(f"{flag} {out}: its parent folder is not writable")
    return out



def _finished_run(out: Path, kind: str | None, settings: Any) -> str | None:
    """How to name the finished run ``out`` holds ("holds this run, finished ...": same kind and settings), or
    None when it holds no readable run.json."""
    if not is_run_folder(out):
        return None
    try:
        manifest = read_manifest(out)
    except DPCareError:  # a run.json no dpcare run wrote: just "not empty"
        return None
    recorded = manifest.settings or {}
    wanted = json.loads(json.dumps(settings or {}, default=str))  # as run.json stores them
    # the run may record more than it was given (what it resolved: steps, noise multiplier): compare what was given
    same = (kind is not None and manifest.kind == kind and isinstance(recorded, dict)
            and isinstance(wanted, dict) and all(recorded.get(k) == v for k, v in wanted.items()))
    if same:
        return "already holds this run, finished with these settings"
    return f"already holds a finished {manifest.kind or 'dpcare'} run"


def _throwaway_folder() -> Path:
    """A run folder for a worker rank of a distributed run, removed when the process exits."""
    root = Path(tempfile.mkdtemp(prefix="dpcare-rank"))
    atexit.register(shutil.rmtree, root, True)
    return root / "run"

class RunFolder:
    """The one run an output folder will hold. Files go to :attr:`staging` until :meth:`finish`."""

    def __init__(self, out: str | os.PathLike, kind: str, settings: Any = None, force: bool = False,
                 command: str = "", flag: str = "--out"):
        if process_rank() != 0:  # a torch.distributed worker: rank 0 writes the run; this rank's copy is thrown away
            out = _throwaway_folder()
        self.out = check_output(out, force, flag, kind, settings)
        self._made = [p for p in self.out.parents if not p.exists()]  # folders this run would create, deepest first
        self.kind, self.command, self.force = kind, command, force
        self.settings = settings or {}
        self.staging = staging_path(self.out)
        key = fingerprint({"kind": kind, "settings": self.settings})
        partial = self.staging / PARTIAL
        self.resumed = False
        if partial.exists():
            old = json.loads(partial.read_text())
            if old.get("fingerprint") == key and old.get("kind") == kind:
                self.run_id, self.created, self.resumed = old["run_id"], old["created"], True
            elif force:
                shutil.rmtree(self.staging)
            else:
                raise SettingsError(f"{self.staging} holds an unfinished {old.get('kind')} run with other settings: "
                                    "rerun it with its own settings to resume it, or pass --force to start over")
        elif self.staging.exists():
            shutil.rmtree(self.staging)  # a staging folder without its partial.json holds nothing to resume
        self._key = key
        if not self.resumed:  # the staging folder is made when the run first writes: a refused run leaves nothing
            self.run_id, self.created = new_run_id(), datetime.now(UTC).isoformat(timespec="seconds")
        self.record = open_record()  # its phases' seconds and the warnings shown, for run.json
        _OPEN.add(self)

    def abandon(self) -> None:
        """Remove what a run refused before it wrote anything left behind: a staging folder holding only its
        partial.json, and the empty parent folders it made. A staging folder with checkpoints or files stays
        (a rerun resumes it)."""
        _OPEN.discard(self)
        close_record(self.record)
        if self.staging.is_dir() and {p.name for p in self.staging.iterdir()} <= {PARTIAL}:
            shutil.rmtree(self.staging)
        for folder in self._made:
            if folder.is_dir() and not any(folder.iterdir()):
                folder.rmdir()

    def _staged(self) -> Path:
        """The staging folder, made (with its partial.json: what a rerun resumes) on first use."""
        partial = self.staging / PARTIAL
        if not partial.exists():
            write_json(partial, {"run_id": self.run_id, "kind": self.kind, "created": self.created,
                                 "fingerprint": self._key})
        return self.staging

    @property
    def checkpoint_dir(self) -> str:
        """Where training checkpoints go (inside the staging folder; deleted by :meth:`finish`)."""
        return str(self._staged() / CHECKPOINTS)

    def path(self, name: str) -> Path:
        """Where the file ``name`` (relative) of this run is written now."""
        p = self._staged() / name
        p.parent.mkdir(parents=True, exist_ok=True)
        return p

    def write_json(self, name: str, obj: Any) -> Path:
        return write_json(self.path(name), obj)

    def write_text(self, name: str, text: str) -> Path:
        return write_text(self.path(name), text)

    def save_torch(self, name: str, obj: Any) -> Path:
        return torch_save(self.path(name), obj)

    def attack(self, name: str, payload: dict[str, Any]) -> dict[str, str]:
        """Write ``attacks/<name>.json`` tied to this run; returns the manifest's entry for it."""
        file = f"attacks/{name}.json"
        self.write_json(file, {"run_id": self.run_id, **payload})
        return {"name": payload.get("title", name), "file": file}

    def finish(self, manifest: Manifest) -> Path:
        """Write run.json and move the run into place (replacing a ``force``-d old folder whole)."""
        manifest.run_id, manifest.kind, manifest.created = self.run_id, self.kind, self.created
        manifest.command = manifest.command or self.command
        manifest.settings = manifest.settings or self.settings
        manifest.finished = datetime.now(UTC).isoformat(timespec="seconds")
        manifest.phases = [*manifest.phases, *self.record.timing_rows(resumed=self.resumed)]
        manifest.warnings = list(dict.fromkeys([*manifest.warnings, *self.record.warnings]))
        manifest.units = {**units_for(manifest.metrics), **manifest.units}  # a writer's own unit wins
        if self.record.exact_statistics and EXACT_WARNINGS not in manifest.not_protected:
            manifest.not_protected.append(EXACT_WARNINGS)
        close_record(self.record)
        # a given noise_seed voids the guarantee against whoever knows it: run.json says so
        note = reproducible_noise_note(pinned_noise_seed(manifest.settings))
        if note is not None and note not in manifest.not_protected:
            manifest.not_protected.append(note)
        self._staged()
        (self.staging / PARTIAL).unlink(missing_ok=True)
        # checkpoints hold the noise generators' state: released beside the model, they would let anyone
        # recompute (and subtract) the noise. They exist only to resume an unfinished run.
        shutil.rmtree(self.staging / CHECKPOINTS, ignore_errors=True)
        write_json(self.staging / MANIFEST, manifest.to_dict())
        old = None
        if self.out.exists():
            if any(self.out.iterdir()) and not self.force:  # something wrote there while we ran
                raise SettingsError(f"{self.out} was filled by something else during the run; the run is kept in "
                                    f"{self.staging}")
            old = self.out.parent / f".{self.out.name}.replaced-{self.run_id}"
            os.rename(self.out, old)
        os.rename(self.staging, self.out)
        if old is not None:
            shutil.rmtree(old)
        _OPEN.discard(self)
        return self.out


class SavesRunFolder:
    """Mixin of a fitted recipe model: ``save(folder)`` writes it into a new run folder of kind ``RUN_KIND``
    through the model's own ``write(run)``, with its ``settings.to_dict()`` as the run's settings."""

    RUN_KIND: ClassVar[str]

    def save(self, folder: str | os.PathLike, force: bool = False) -> Path:
        """Write a run folder (refused if ``folder`` holds something, unless ``force``)."""
        return self.write(RunFolder(folder, self.RUN_KIND, self.settings.to_dict(), force=force))


def pinned_noise_seed(settings: Any) -> int | None:
    """The integer ``noise_seed`` somewhere in a run's settings (nested dicts and lists), else None. The
    default None (fresh OS entropy) is recorded as null: the drawn root is never written to run.json."""
    if isinstance(settings, dict):
        if isinstance(settings.get("noise_seed"), int) and not isinstance(settings["noise_seed"], bool):
            return settings["noise_seed"]
        values = settings.values()
    elif isinstance(settings, (list, tuple)):
        values = settings
    else:
        return None
    return next((seed for v in values if (seed := pinned_noise_seed(v)) is not None), None)


def abandon_unwritten() -> None:
    """:meth:`RunFolder.abandon` every run folder of this process that has not finished (the command line calls
    it when it reports a user error: nothing half-written is left)."""
    for run in list(_OPEN):
        run.abandon()


def unfinished_staging() -> list[Path]:
    """The staging folders of this process's unfinished runs that hold something to resume (an interrupted
    command names them)."""
    return [run.staging for run in list(_OPEN) if run.staging.is_dir()]


__all__ = ["CHECKPOINTS", "PARTIAL", "RunFolder", "SavesRunFolder", "abandon_unwritten", "check_output",
           "fingerprint", "new_run_id", "pinned_noise_seed", "staging_path", "unfinished_staging"]
