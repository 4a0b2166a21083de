#!/usr/bin/env bash
# Installs what bench/kv.py compares against and loads with, only what is missing (safe to run
# again): etcd 3.4 (Debian `etcd-server`, the `etcd` binary) and wrk (Debian `wrk`, the HTTP
# load generator in C). It starts no service: the benchmark starts its own etcd members.
# Runs as root or through sudo.
set -euo pipefail
# shellcheck source=scripts/_apt.sh
source "$(dirname "${BASH_SOURCE[0]}")/_apt.sh"

need=()
command -v etcd >/dev/null 2>&1 || need+=(etcd-server)
command -v wrk >/dev/null 2>&1 || need+=(wrk)

if [ "${#need[@]}" -eq 0 ]; then
  echo "etcd and wrk are installed"
  exit 0
fi

apt_prepare install-bench-peers.sh "install etcd 3.4 and wrk 4 by hand" "${need[@]}"
apt_install "${need[@]}"
# Debian's etcd-server package may start a system etcd on 2379/2380; the benchmark uses its
# own ports, so leave it to the administrator.
for tool in etcd wrk; do
  command -v "$tool" >/dev/null 2>&1 || { echo "install-bench-peers.sh: $tool is still missing" >&2; exit 1; }
done
echo "etcd and wrk are installed"
