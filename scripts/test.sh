#!/usr/bin/env bash
# Installs everything walkit's tests need (Python packages with the spark extra, ZooKeeper,
# Java 17+ for ZooKeeper and Spark, iproute2 and nftables for the network-fault tests,
# Prometheus and promtool for the operations tests, MkDocs and Chromium for the documentation
# site's tests) and
# runs the whole suite: lint, types, then pytest. Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh dev,spark,lake,docs
bash scripts/install-zookeeper.sh
bash scripts/install-netfault-tools.sh
bash scripts/install-prometheus.sh
bash scripts/install-chromium.sh
echo "== ruff"; .venv/bin/ruff check walkit walkit_bookie tests bench examples
.venv/bin/ruff format --check walkit walkit_bookie tests bench examples
echo "== mypy"; .venv/bin/mypy
echo "== pytest"
exec .venv/bin/python -m pytest -q -p no:cacheprovider "$@"
