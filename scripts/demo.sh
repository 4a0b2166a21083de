#!/usr/bin/env bash
# Sets up walkit and runs the main demo on the embedded default: a 3-bookie sandbox (sqlite
# metadata, bookie processes on loopback), then the log's promise (examples/log_takeover.py):
# a writer process SIGKILLed mid-stream, a second writer taking the log over and fencing it,
# and every acknowledged record read back.
# WALKIT_DEMO_NO_SETUP=1 skips the set-up (the test suite runs the demo in its own venv).
set -euo pipefail
cd "$(dirname "$0")/.."
[ -n "${WALKIT_DEMO_NO_SETUP:-}" ] || bash scripts/setup.sh
data_dir="${WALKIT_DEMO_DIR:-.walkit/demo}"
log="$(mktemp -t walkit-sandbox.XXXXXX)"
.venv/bin/walkit sandbox --bookies 3 --data-dir "$data_dir" >"$log" 2>&1 &
sandbox=$!
trap 'kill -TERM $sandbox 2>/dev/null; wait $sandbox 2>/dev/null; rm -f "$log"' EXIT
for _ in $(seq 1 300); do
  if grep -q '^metadata URL: ' "$log"; then break; fi
  if ! kill -0 $sandbox 2>/dev/null; then cat "$log" >&2; echo "the sandbox failed to start" >&2; exit 1; fi
  sleep 0.1
done
url="$(grep '^metadata URL: ' "$log" | head -n1 | sed 's/^metadata URL: //')"
[ -n "$url" ] || { cat "$log" >&2; echo "the sandbox did not start in 30 s" >&2; exit 1; }
echo "sandbox running: 3 bookies, metadata at $url"
.venv/bin/python examples/log_takeover.py "$url"
