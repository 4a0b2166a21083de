#!/usr/bin/env bash
# Installs what the documentation site's browser test (tests/docs/test_site.py) needs, only
# what is missing (safe to run again): Debian's `chromium`, run headless by the test.
# Runs as root (CI) or through sudo.
set -euo pipefail
# shellcheck source=scripts/_apt.sh
source "$(dirname "${BASH_SOURCE[0]}")/_apt.sh"

if command -v chromium >/dev/null 2>&1; then
  echo "chromium is installed ($(chromium --version 2>/dev/null | head -n1))"
  exit 0
fi

apt_prepare install-chromium.sh "install Chromium (chromium on PATH) by hand" chromium
apt_install chromium
command -v chromium >/dev/null 2>&1 || { echo "install-chromium.sh: chromium is not on PATH" >&2; exit 1; }
