#!/usr/bin/env bash
# Installs, from Debian bookworm's archive, exactly what building and testing
# cuckood needs. Idempotent and quiet: does nothing when all is present.
# Run as root (or with sudo available).
set -euo pipefail

PACKAGES=(
  build-essential cmake ninja-build pkg-config git clang-format
  libabsl-dev libxxhash-dev
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  libspdlog-dev libboost-dev prometheus-cpp-dev
  python3 python3-grpcio
  libgtest-dev libgmock-dev libbenchmark-dev
  clang libclang-rt-14-dev
  libnats-dev nats-server
  libssl-dev openssl
  redis-tools python3-redis redis-server
  jq iproute2   # the README examples (jq) and the doc test (ip: its namespace's loopback)
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
