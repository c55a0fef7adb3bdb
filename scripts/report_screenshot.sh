#!/usr/bin/env bash
# Screenshot of a `dpcare report` page with headless Chromium (Debian: apt-get install -y chromium).
# Usage: scripts/report_screenshot.sh REPORT.html OUT.png [WIDTH,HEIGHT]
set -euo pipefail
if [ $# -lt 2 ]; then
  echo "usage: $0 REPORT.html OUT.png [WIDTH,HEIGHT]" >&2
  exit 2
fi
report=$(realpath "$1")
out=$(realpath -m "$2")
size=${3:-1280,2000}
[ -f "$report" ] || { echo "error: no report at $1" >&2; exit 2; }
browser=$(command -v chromium || command -v chromium-browser || true)
[ -n "$browser" ] || { echo "error: chromium not found (Debian: apt-get install -y chromium)" >&2; exit 2; }
mkdir -p "$(dirname "$out")"
"$browser" --headless --no-sandbox --disable-gpu --hide-scrollbars --screenshot="$out" \
  --window-size="$size" "file://$report" 2>/dev/null
[ -s "$out" ] || { echo "error: chromium wrote no screenshot to $out" >&2; exit 1; }
echo "wrote $out"
