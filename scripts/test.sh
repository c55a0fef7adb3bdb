#!/usr/bin/env bash
# Set everything up and run the test suite (slow end-to-end tests excluded unless DPCARE_SLOW=1).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
. .venv/bin/activate
export OMP_NUM_THREADS=1
export GLIBC_TUNABLES=glibc.malloc.mmap_max=0:glibc.malloc.trim_threshold=4294967295
if [ "${DPCARE_SLOW:-0}" = "1" ]; then marks=""; else marks="not slow"; fi
exec python -m pytest -q -m "$marks" "$@"
