#!/usr/bin/env bash
# Creates .venv (if missing) and installs walkit with the bookie extra (the sandbox's bookies)
# and the given extras into it.
# Usage: scripts/setup.sh [extras]   e.g. scripts/setup.sh dev
set -euo pipefail
cd "$(dirname "$0")/.."
extras="bookie${1:+,$1}"
if ! command -v python3 >/dev/null; then
  echo "walkit needs python3 (>= 3.11); install it first" >&2; exit 1
fi
if ! python3 -c 'import sys; sys.exit(sys.version_info < (3, 11))'; then
  echo "walkit needs Python >= 3.11, found $(python3 --version)" >&2; exit 1
fi
if [ ! -x .venv/bin/python ]; then
  python3 -m venv .venv
fi
log=.venv/setup.log
pip_install() {
  if ! .venv/bin/python -m pip install --disable-pip-version-check "$@" >>"$log" 2>&1; then
    cat "$log" >&2; echo "setup: pip install $* failed (log above, also in $log)" >&2; exit 1
  fi
}
: >"$log"
pip_install --upgrade pip
echo "setup: installing walkit with extras [$extras] into .venv"
pip_install -e ".[${extras}]"
.venv/bin/python -c 'import walkit, walkit_bookie' || { echo "setup: install failed" >&2; exit 1; }
