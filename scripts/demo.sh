#!/usr/bin/env bash
# Set everything up and run dpcare's main job on the bundled SUPPORT2 ICU table.
set -euo pipefail
cd "$(dirname "$0")/.."
DPCARE_BASELINES=0 bash scripts/setup.sh   # the demo needs no SmartNoise baseline
. .venv/bin/activate
export OMP_NUM_THREADS=1
exec dpcare demo "$@"
