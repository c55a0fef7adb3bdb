"""Static checks that catch what only a rarely taken branch would show at run time."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_no_undefined_names_or_unused_imports():
    """ruff's pyflakes rules (F): an undefined name in the LiRA branch of the clinical NLP benchmark once
    passed the default tests and failed in CI."""
    run = subprocess.run([sys.executable, "-m", "ruff", "check", "--select", "F", "--no-cache", "src", "tests",
                          "benchmarks"], cwd=ROOT, capture_output=True, text=True)
    assert run.returncode == 0, run.stdout + run.stderr
