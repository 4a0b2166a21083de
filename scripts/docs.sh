#!/usr/bin/env bash
# Builds the documentation site from docs/ into site/ (MkDocs with Material, and an API
# reference that mkdocstrings generates from the docstrings): open site/index.html.
# Strict: a broken link or a missing reference fails the build. Extra arguments go to
# `mkdocs build` (for example --site-dir DIR); `bash scripts/docs.sh serve` serves it instead,
# rebuilding as the pages change.
set -euo pipefail
cd "$(dirname "$0")/.."
if ! .venv/bin/python -c 'import mkdocs, mkdocstrings, material' 2>/dev/null; then
  bash scripts/setup.sh docs
fi
export NO_MKDOCS_2_WARNING=1
if [ "${1:-}" = serve ]; then
  shift
  exec .venv/bin/python -m mkdocs serve --dev-addr 127.0.0.1:8000 "$@"
fi
.venv/bin/python -m mkdocs build --strict "$@"
echo "docs: built (open site/index.html unless --site-dir said otherwise)"
