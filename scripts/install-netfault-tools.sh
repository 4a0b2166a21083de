#!/usr/bin/env bash
# Installs what walkit's network-fault tests (tests/netfaults) need, only what is missing (safe
# to run again): `ip` and `tc` (iproute2) and `nft` (nftables). Those tests also need root
# (network namespaces); without root, or where nothing can be installed, they skip and say why,
# so this script only warns then.
set -uo pipefail

need=()
command -v ip >/dev/null 2>&1 && command -v tc >/dev/null 2>&1 || need+=(iproute2)
command -v nft >/dev/null 2>&1 || need+=(nftables)
if [ "${#need[@]}" -eq 0 ]; then
  echo "ip, tc and nft are installed"
  exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
  echo "install-netfault-tools.sh: not root: the network-fault tests will skip (${need[*]} missing)"
  exit 0
fi
if ! command -v apt-get >/dev/null 2>&1; then
  echo "install-netfault-tools.sh: no apt-get: the network-fault tests will skip (${need[*]} missing)"
  exit 0
fi
echo "installing: ${need[*]}"
if ! { env DEBIAN_FRONTEND=noninteractive apt-get update -q &&
       env DEBIAN_FRONTEND=noninteractive \
         apt-get install -y -q --no-install-recommends "${need[@]}"; }; then
  echo "install-netfault-tools.sh: apt-get failed: the network-fault tests will skip" >&2
fi
exit 0
