#!/usr/bin/env bash
# Installs every build and test dependency of Tianshu from Debian 12's packages.
# Idempotent and quiet when everything is already there. Needs root (or sudo).
set -euo pipefail

PACKAGES=(
  build-essential cmake ninja-build lld pkg-config git zlib1g-dev
  libyaml-cpp-dev nlohmann-json3-dev libcli11-dev libfmt-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  libsqlite3-dev libcpp-httplib-dev libssl-dev openssl libhwloc-dev
  coinor-libcbc-dev
  clang-format clang-tidy clang-14 libclang-rt-14-dev
  python3 python3-torch python3-numpy
  chromium libjs-dygraphs
  dpkg-dev lintian systemd adduser
  etcd-server curl
  libspdlog-dev prometheus
)

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
[ ${#missing[@]} -eq 0 ] && exit 0

SUDO=""
[ "$(id -u)" -ne 0 ] && SUDO="sudo"
echo "install-deps: installing ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
