#!/usr/bin/env bash
# The 3-seed clinical-nlp study (about 13 h on 2 CPU cores) over several sittings on fresh machines.
#
#   bash scripts/clinical_nlp_3seeds.sh         restore the journal kept in git, resume the study
#   bash scripts/clinical_nlp_3seeds.sh save    copy the journal of the finished cells back into git's folder
#
# The study resumes from its staging folder (results/.clinical-nlp-3seeds.partial), which a fresh clone lacks
# (results/ is not tracked). benchmarks/journals/clinical-nlp-3seeds/ keeps what a resume needs: runs.jsonl (one
# row per finished cell, with the settings fingerprint and the digest of the split notes) and partial.json (run
# id and settings fingerprint); split.json records the patients of each side. The split notes are regenerated
# from their seed, and the study refuses to resume if their digest is not the rows' one. Unfinished cells
# restart from scratch (their checkpoints hold noise-generator state and are never kept). Once the study has
# finished, `save` keeps the finished folder's journal, whose rows no longer carry the digest.
set -euo pipefail
cd "$(dirname "$0")/.."
KEPT=benchmarks/journals/clinical-nlp-3seeds
OUT=results/clinical-nlp-3seeds
STAGING="$(dirname "$OUT")/.$(basename "$OUT").partial"  # dpcare.runs.folder.staging_path

if [ "${1:-}" = save ]; then
    FROM="$STAGING"
    [ -s "$OUT/run.json" ] && FROM="$OUT"  # finished: its journal (the digests dropped), nothing left to resume
    [ -s "$FROM/runs.jsonl" ] || { echo "no journal in $FROM to save" >&2; exit 2; }
    mkdir -p "$KEPT"
    cp "$FROM/runs.jsonl" "$FROM/data/split.json" "$KEPT/"
    [ "$FROM" = "$STAGING" ] && cp "$STAGING/partial.json" "$KEPT/"
    echo "$(wc -l < "$KEPT/runs.jsonl") finished cells kept in $KEPT (commit it)"
    exit 0
fi

bash scripts/setup.sh
export OMP_NUM_THREADS=1
if [ ! -e "$OUT" ] && [ ! -e "$STAGING/partial.json" ] && [ -e "$KEPT/partial.json" ]; then
    mkdir -p "$STAGING"
    cp "$KEPT/runs.jsonl" "$KEPT/partial.json" "$STAGING/"
    echo "restored $(wc -l < "$KEPT/runs.jsonl") finished cells from $KEPT"
fi
exec .venv/bin/dpcare benchmark clinical-nlp --seeds 3 --workers 2 --out "$OUT" "$@"
