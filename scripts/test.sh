#!/usr/bin/env bash
# Set everything up and run the test suite (slow end-to-end tests excluded unless DPCARE_SLOW=1).
# Every test runs under a time limit (pytest-timeout; tests/conftest.py), a lost pytest worker ends the run at
# once with the test it was running (pyproject's --max-worker-restart=0), and the whole run is stopped after
# DPCARE_TEST_LIMIT seconds (default 60 min, inside CI's 90; 120 min with the slow tests, which CI does not run),
# so it can never hang CI.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
. .venv/bin/activate
export OMP_NUM_THREADS=1
export GLIBC_TUNABLES=glibc.malloc.mmap_max=0:glibc.malloc.trim_threshold=4294967295
if [ "${DPCARE_SLOW:-0}" = "1" ]; then marks=""; target=90; limit=7200; else marks="not slow"; target=10; limit=3600; fi
limit=${DPCARE_TEST_LIMIT:-$limit}
# one pytest worker per core (DPCARE_TEST_WORKERS overrides; 0 runs in this process); a module stays on one worker
workers=${DPCARE_TEST_WORKERS:-$(python -c 'import os; print(min(4, len(os.sched_getaffinity(0))))')}
if [ "$workers" -gt 1 ]; then par=(-n "$workers" --dist loadfile); else par=(); fi
# where a test stuck past its limit leaves every thread's stack (tests/conftest.py), printed below
DPCARE_TEST_DUMPS=$(mktemp -d)
export DPCARE_TEST_DUMPS
start=$SECONDS
set +e
# pytest-timeout's session limit ends the run 2 min before the hard one, so the summary names what failed
timeout -k 30 "$limit" python -m pytest -q -m "$marks" --durations=15 --session-timeout $((limit - 120)) \
  "${par[@]}" "$@"
rc=$?
set -e
took=$((SECONDS - start))
for dump in "$DPCARE_TEST_DUMPS"/*; do  # faulthandler's "Timeout (h:mm:ss)!": a test dumped and ended
  if grep -q '^Timeout (' "$dump" 2>/dev/null; then echo "--- stuck test ($(basename "$dump")):"; cat "$dump"; fi
done
rm -rf "$DPCARE_TEST_DUMPS"
if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
  echo "error: the test run passed its limit of ${limit} s (DPCARE_TEST_LIMIT) and was stopped" >&2
fi
printf 'test time: %dm%02ds of wall time on %s worker(s) (target: %d min)\n' $((took / 60)) $((took % 60)) \
  "$workers" "$target"
exit "$rc"
