#!/usr/bin/env bash
# Installs everything hmcast needs on Debian 12, from Debian's packages only.
# Safe to run again; uses sudo when not root. --demo installs only what the demo needs. What each package is for: README, "Dependencies".
set -euo pipefail
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
PACKAGES=(
  cmake ninja-build g++ pkg-config python3
  catch2
  libbenchmark-dev
  nlohmann-json3-dev
  libcli11-dev
  libxxhash-dev
  clang libclang-rt-14-dev
  iproute2
  openmpi-bin libopenmpi-dev gfortran
  # the verbs transport (rdma-core) and its Soft-RoCE test VM (tests/rxe/)
  libibverbs-dev librdmacm-dev rdma-core ibverbs-providers ibverbs-utils rdmacm-utils
  qemu-system-x86 linux-image-amd64 busybox-static python3-venv kmod
  python3-matplotlib
  # the Python module (python/) and its tests
  pybind11-dev python3-dev python3-pytest python3-numpy
  # ZooKeeper: its C client (the membership store of issue 19) and the server the tests run
  zookeeper libzookeeper-mt-dev
  # libsodium: the group key's MACs on frames (issue 21)
  libsodium-dev
)
# --demo: only what quick start 1 needs to build and run the demo (the hmcast tool).
if [ "${1:-}" = "--demo" ]; then
  PACKAGES=(cmake ninja-build g++ nlohmann-json3-dev libcli11-dev libxxhash-dev libibverbs-dev librdmacm-dev libsodium-dev)
fi
missing=()
for p in "${PACKAGES[@]}"; do
  case "$p" in \#*) continue;; esac
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ "${#missing[@]}" -gt 0 ]; then
  echo "installing: ${missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
