"""The run-folder contract: one run per folder, ``run.json`` its manifest (what was run, the guarantee and
ledger of every released model, metrics, baselines, attack scores, files). Every recipe and study writes it;
``report`` and ``budget`` read only it."""

from dpcare.runs.folder import CHECKPOINTS, RunFolder, SavesRunFolder, abandon_unwritten, check_output, fingerprint
from dpcare.runs.manifest import (
    FORMAT,
    MANIFEST,
    Manifest,
    attach_attack,
    is_run_folder,
    read_attacks,
    read_manifest,
    read_run_of_kind,
)

__all__ = ["CHECKPOINTS", "FORMAT", "MANIFEST", "Manifest", "RunFolder", "SavesRunFolder", "abandon_unwritten",
           "attach_attack", "check_output", "fingerprint", "is_run_folder", "read_attacks", "read_manifest",
           "read_run_of_kind"]
