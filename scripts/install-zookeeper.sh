#!/usr/bin/env bash
# Installs what walkit's ZooKeeper tests need, only what is missing (safe to run again):
# Debian's `zookeeper` package (/usr/share/java/zookeeper.jar), slf4j-simple for its logging,
# and a Java runtime that Spark 4 accepts (17 or newer; ZooKeeper runs on it too). It starts no
# service: the tests start their own server.
# Runs as root (CI) or through sudo.
set -euo pipefail
# shellcheck source=scripts/_apt.sh
source "$(dirname "${BASH_SOURCE[0]}")/_apt.sh"

# The major version of the `java` on PATH (0 when there is none): Spark 4 needs 17 or newer.
java_major() {
  command -v java >/dev/null 2>&1 || { echo 0; return; }
  java -version 2>&1 | sed -n 's/.*version "\([0-9]*\)[."].*/\1/p' | head -n1 | grep . || echo 0
}

need=()
[ -f /usr/share/java/zookeeper.jar ] || need+=(zookeeper)
[ -f /usr/share/java/slf4j-simple.jar ] || need+=(libslf4j-java)
if [ "$(java_major)" -lt 17 ]; then
  # Debian 12's default JRE is 17, Debian 13's is 21: both run Spark 4 and ZooKeeper.
  need+=(default-jre-headless)
fi

if [ "${#need[@]}" -eq 0 ]; then
  echo "ZooKeeper and Java $(java_major) are installed"
  exit 0
fi

apt_prepare install-zookeeper.sh "install ZooKeeper 3.8 (zookeeper.jar and slf4j-simple.jar in \
/usr/share/java) and Java 17 by hand" "${need[@]}"
apt_install "${need[@]}"

for file in /usr/share/java/zookeeper.jar /usr/share/java/slf4j-simple.jar; do
  [ -f "$file" ] || { echo "install-zookeeper.sh: $file is still missing" >&2; exit 1; }
done
if [ "$(java_major)" -lt 17 ]; then
  echo "install-zookeeper.sh: need Java 17 or newer on PATH (Spark 4), found:" \
       "$(java -version 2>&1 | head -n1 || echo none)" >&2
  exit 1
fi
echo "ZooKeeper and Java $(java_major) are installed"
