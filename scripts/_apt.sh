# Sourced by the install scripts: installing Debian packages as root, or through sudo.

# apt_prepare SCRIPT HINT PACKAGE...: sets the array `sudo` (empty as root, else `sudo`), or
# exits 1 naming SCRIPT when there is neither root nor sudo, or no apt-get (then HINT says
# what to install by hand).
apt_prepare() {
  local script=$1 hint=$2
  shift 2
  if [ "$(id -u)" -eq 0 ]; then
    sudo=()
  elif command -v sudo >/dev/null 2>&1; then
    sudo=(sudo)
  else
    echo "$script: need root or sudo to install: $*" >&2
    exit 1
  fi
  if ! command -v apt-get >/dev/null 2>&1; then
    echo "$script: no apt-get here; $hint: $*" >&2
    exit 1
  fi
}

# apt_install PACKAGE...: apt-get update, then install them without recommends.
apt_install() {
  echo "installing: $*"
  ${sudo[@]+"${sudo[@]}"} env DEBIAN_FRONTEND=noninteractive apt-get update -q
  ${sudo[@]+"${sudo[@]}"} env DEBIAN_FRONTEND=noninteractive \
    apt-get install -y -q --no-install-recommends "$@"
}
