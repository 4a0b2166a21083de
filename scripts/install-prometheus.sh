#!/usr/bin/env bash
# Installs what walkit's operations tests (tests/ops) need, only what is missing (safe to run
# again): Debian's `prometheus` package, which brings the `prometheus` server and `promtool`.
# It starts no service: the tests start their own server on a free loopback port with a data
# dir of their own. (Grafana is not in Debian; the dashboard's queries are checked against
# Prometheus itself.)
# Runs as root (CI) or through sudo.
set -euo pipefail
# shellcheck source=scripts/_apt.sh
source "$(dirname "${BASH_SOURCE[0]}")/_apt.sh"

if command -v prometheus >/dev/null 2>&1 && command -v promtool >/dev/null 2>&1; then
  echo "prometheus and promtool are installed ($(prometheus --version 2>&1 | head -n1))"
  exit 0
fi

apt_prepare install-prometheus.sh "install Prometheus 2.x (prometheus and promtool on PATH) by \
hand" prometheus

# The package's maintainer scripts start the service through invoke-rc.d unless a
# policy-rc.d says no: a server on :9090 that nobody asked for. Say no for this install only.
policy=/usr/sbin/policy-rc.d
made_policy=0
if [ ! -e "$policy" ]; then
  printf '#!/bin/sh\nexit 101\n' | ${sudo[@]+"${sudo[@]}"} tee "$policy" >/dev/null
  ${sudo[@]+"${sudo[@]}"} chmod 755 "$policy"
  made_policy=1
fi
cleanup() {
  if [ "$made_policy" -eq 1 ]; then ${sudo[@]+"${sudo[@]}"} rm -f "$policy"; fi
}
trap cleanup EXIT

apt_install prometheus

for tool in prometheus promtool; do
  command -v "$tool" >/dev/null 2>&1 || { echo "install-prometheus.sh: $tool is still missing" >&2; exit 1; }
done
echo "prometheus and promtool are installed ($(prometheus --version 2>&1 | head -n1))"
