#!/usr/bin/env bash
# Installs what walkit's ZooKeeper tests need, only what is missing (safe to run again):
# Debian's `zookeeper` package (/usr/share/java/zookeeper.jar), slf4j-simple for its logging,
# and a Java runtime. It starts no service: the tests start their own server.
# Runs as root (CI) or through sudo.
set -euo pipefail

need=()
[ -f /usr/share/java/zookeeper.jar ] || need+=(zookeeper)
[ -f /usr/share/java/slf4j-simple.jar ] || need+=(libslf4j-java)
command -v java >/dev/null 2>&1 || need+=(default-jre-headless)

if [ "${#need[@]}" -eq 0 ]; then
  echo "ZooKeeper and Java are installed"
  exit 0
fi

if [ "$(id -u)" -eq 0 ]; then
  sudo=()
elif command -v sudo >/dev/null 2>&1; then
  sudo=(sudo)
else
  echo "install-zookeeper.sh: need root or sudo to install: ${need[*]}" >&2
  exit 1
fi
if ! command -v apt-get >/dev/null 2>&1; then
  echo "install-zookeeper.sh: no apt-get here; install ZooKeeper 3.8 (zookeeper.jar and" \
       "slf4j-simple.jar in /usr/share/java) and Java 17 by hand: ${need[*]}" >&2
  exit 1
fi

echo "installing: ${need[*]}"
${sudo[@]+"${sudo[@]}"} env DEBIAN_FRONTEND=noninteractive apt-get update -q
${sudo[@]+"${sudo[@]}"} env DEBIAN_FRONTEND=noninteractive \
  apt-get install -y -q --no-install-recommends "${need[@]}"

for file in /usr/share/java/zookeeper.jar /usr/share/java/slf4j-simple.jar; do
  [ -f "$file" ] || { echo "install-zookeeper.sh: $file is still missing" >&2; exit 1; }
done
command -v java >/dev/null 2>&1 || { echo "install-zookeeper.sh: java is still missing" >&2; exit 1; }
echo "ZooKeeper and Java are installed"
