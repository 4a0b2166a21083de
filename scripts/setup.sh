#!/usr/bin/env bash
# Creates .venv (if missing) and installs walkit with the given extras into it.
# Usage: scripts/setup.sh [extras]   e.g. scripts/setup.sh dev
set -euo pipefail
cd "$(dirname "$0")/.."
extras="${1:-}"
if ! command -v python3 >/dev/null; then
  echo "walkit needs python3 (>= 3.11); install it first" >&2; exit 1
fi
if ! python3 -c 'import sys; sys.exit(sys.version_info < (3, 11))'; then
  echo "walkit needs Python >= 3.11, found $(python3 --version)" >&2; exit 1
fi
if [ ! -x .venv/bin/python ]; then
  python3 -m venv .venv
fi
.venv/bin/python -m pip install -q --disable-pip-version-check --upgrade pip 2>&1 | grep -v '^WARNING: Location' || true
spec="."
[ -n "$extras" ] && spec=".[${extras}]"
.venv/bin/python -m pip install -q --disable-pip-version-check -e "$spec" 2>&1 | grep -v '^WARNING: Location' || true
.venv/bin/python -c 'import walkit, walkit_bookie' || { echo "install failed" >&2; exit 1; }
