#!/usr/bin/env bash
# Installs what walkit's operations tests (tests/ops) need, only what is missing (safe to run
# again): Debian's `prometheus` package, which brings the `prometheus` server and `promtool`.
# It starts no service: the tests start their own server on a free loopback port with a data
# dir of their own. (Grafana is not in Debian; the dashboard's queries are checked against
# Prometheus itself.)
# Runs as root (CI) or through sudo.
set -euo pipefail

if command -v prometheus >/dev/null 2>&1 && command -v promtool >/dev/null 2>&1; then
  echo "prometheus and promtool are installed ($(prometheus --version 2>&1 | head -n1))"
  exit 0
fi

if [ "$(id -u)" -eq 0 ]; then
  sudo=()
elif command -v sudo >/dev/null 2>&1; then
  sudo=(sudo)
else
  echo "install-prometheus.sh: need root or sudo to install prometheus (promtool)" >&2
  exit 1
fi
if ! command -v apt-get >/dev/null 2>&1; then
  echo "install-prometheus.sh: no apt-get here; install Prometheus 2.x (prometheus and" \
       "promtool on PATH) by hand" >&2
  exit 1
fi

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

echo "installing: prometheus"
${sudo[@]+"${sudo[@]}"} env DEBIAN_FRONTEND=noninteractive apt-get update -q
${sudo[@]+"${sudo[@]}"} env DEBIAN_FRONTEND=noninteractive \
  apt-get install -y -q --no-install-recommends prometheus

for tool in prometheus promtool; do
  command -v "$tool" >/dev/null 2>&1 || { echo "install-prometheus.sh: $tool is still missing" >&2; exit 1; }
done
echo "prometheus and promtool are installed ($(prometheus --version 2>&1 | head -n1))"
