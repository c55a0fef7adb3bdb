"""Read a run folder into a :class:`~dpcare.report.model.Run`: from its ``run.json`` manifest and the attack files
it lists (:mod:`dpcare.runs`), the contract every recipe and study writes. The report knows no recipe or study.

It takes only what the folder holds: where a run saves no guarantee, ledger lines, ROC scores or timing, the
report says so instead of filling in a value.
"""

from __future__ import annotations

from pathlib import Path

from dpcare.exceptions import DPCareError, MissingFileError
from dpcare.report.model import Attack, Privacy, Run, finite, privacy_from_guarantee
from dpcare.runs import MANIFEST, is_run_folder, read_attacks, read_manifest


class UnknownRunFolder(DPCareError):
    """A folder that holds no run manifest."""


def read_run(folder: Path) -> Run:
    """Everything the report shows of one run folder: the manifest and its own attack files."""
    m = read_manifest(folder)
    privacy = [privacy_from_guarantee(e["name"], e.get("guarantee"), e.get("ledger"),
                                      none_note=e.get("note") or "NO differential privacy guarantee.")
               if e.get("guarantee") or e.get("epsilon") is None else
               Privacy(e["name"], finite(e["epsilon"]), e.get("delta"), note=e.get("note", ""),
                       ledger_note="not saved: the run keeps this model's epsilon, not its ledger lines")
               for e in m.models]
    attacks = []
    for a in read_attacks(folder, m):
        curves = {model: (c["members"], c["nonmembers"]) for model, c in (a.get("curves") or {}).items()}
        plots = [folder / p for p in a.get("plots", []) if (folder / p).exists()]
        attacks.append(Attack(a.get("title", "attack"), list(a.get("rows", [])), curves, plots))
    figures = [(caption, folder / file) for caption, file in m.figures if (folder / file).exists()]
    settings = m.settings_in_effect or {k: v for k, v in m.settings.items() if k != "info"}
    config = {**settings, **({"data": m.data} if m.data else {}), "run id": m.run_id}
    resolved = m.settings.get("info") if isinstance(m.settings.get("info"), dict) else {}
    return Run(folder, m.command or m.kind, privacy, list(m.metrics), list(m.headline), attacks, config,
               list(m.timing), list(m.not_protected), figures, list(m.notes), list(m.verdicts), dict(m.units),
               list(m.phases), list(m.warnings), resolved)


def collect(folder: str | Path) -> Run:
    """The :class:`Run` of one run folder; a clear error for anything else."""
    folder = Path(folder)
    if not folder.is_dir():
        raise MissingFileError(f"run folder {folder} does not exist or is not a folder")
    if not is_run_folder(folder):
        if (folder.parent / f".{folder.name}.partial").exists():
            read_manifest(folder)  # raises: the run is unfinished, and says how to finish it
        raise UnknownRunFolder(f"{folder} is not a dpcare run folder: it holds no {MANIFEST} (every dpcare command "
                               "that trains or audits writes one into its --out folder)")
    return read_run(folder)
