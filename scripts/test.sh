#!/usr/bin/env bash
# Set everything up and run the test suite (slow end-to-end tests excluded unless DPCARE_SLOW=1).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
. .venv/bin/activate
export OMP_NUM_THREADS=1
export GLIBC_TUNABLES=glibc.malloc.mmap_max=0:glibc.malloc.trim_threshold=4294967295
if [ "${DPCARE_SLOW:-0}" = "1" ]; then marks=""; else marks="not slow"; fi
# one pytest worker per core (DPCARE_TEST_WORKERS overrides; 0 runs in this process); a module stays on one worker
workers=${DPCARE_TEST_WORKERS:-$(python -c 'import os; print(min(4, len(os.sched_getaffinity(0))))')}
if [ "$workers" -gt 1 ]; then par=(-n "$workers" --dist loadfile); else par=(); fi
exec python -m pytest -q -m "$marks" --durations=15 "${par[@]}" "$@"
