#!/usr/bin/env bash
# Installs, from Debian bookworm's archive, exactly what building cuckood
# needs, and with --test what the test command (scripts/test.sh) needs too.
# Idempotent and quiet: installs nothing when all is present.
#   scripts/install-deps.sh           build and run (scripts/run.sh)
#   scripts/install-deps.sh --test    also the tests' tools: redis-server,
#       redis-tools and python3-redis (real peers of the tests), the sanitizer
#       runtimes and clang for the fuzzers, clang-format, node and
#       npm (the manifest validator, node-redis), podman, runc and mmdebstrap (the image
#       test), docker-compose (the compose files' check), prometheus (promtool,
#       for the alerting rules), python3-yaml (deploy/monitoring's check),
#       python3-venv (README.md's venv for the Python client's wheel)
# Debian's redis-server, nats-server and prometheus packages start a server
# at boot on 6379, 4222 and 9090, ports the README's examples use (9090:
# cuckood's admin port): the tests start their own, so those services are
# disabled and stopped here (on every run).
# Run as root (or with sudo available).
set -euo pipefail

PACKAGES=(
  build-essential cmake ninja-build pkg-config git
  lld   # the linker the build uses when it is there (cmake/CuckooHelpers.cmake)
  libabsl-dev libxxhash-dev
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  libspdlog-dev libboost-dev prometheus-cpp-dev
  python3 python3-grpcio
  # The Python client's wheel (target cuckoo_python_wheel, which the tests
  # build and install into a venv made --without-pip: no python3-venv needed):
  # pip wheel --no-build-isolation with Debian's setuptools and wheel.
  python3-pip python3-setuptools python3-wheel
  libnats-dev libssl-dev openssl
  libgtest-dev libgmock-dev libbenchmark-dev
  # The build's configuration looks the tests' libraries and nats-server up
  # (tests/e2e starts real NATS servers), even when only cuckood is built.
  nats-server
)
TEST_PACKAGES=(
  clang-format clang libclang-rt-14-dev
  redis-tools python3-redis redis-server
  podman runc mmdebstrap docker-compose
  jq iproute2   # client/README's examples (jq); the doc test (ip: its namespace's loopback)
  prometheus    # promtool: the alerting rules' check and unit tests (deploy/monitoring)
  python3-yaml  # scripts/check-monitoring.py reads deploy/monitoring's YAML
  python3-venv  # the doc test: README.md's Python example makes a venv with pip (ensurepip)
)
case "${1:-}" in
  "") ;;
  --test) PACKAGES+=("${TEST_PACKAGES[@]}") ;;
  *) echo "usage: $0 [--test]" >&2; exit 2 ;;
esac

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
# node and npm for the manifest validator (scripts/k8s-validate) and the
# node-redis tests (tests/e2e/node_redis) and the Node client (client/node): Debian's,
# unless a node >= 18 with npm is there already (from another source).
if [ "${1:-}" = --test ] && ! { command -v npm >/dev/null &&
  [ "$(node -p 'process.versions.node.split(".")[0]' 2>/dev/null || echo 0)" -ge 18 ]; }; then
  missing+=(nodejs npm)
fi

SUDO=""
[ "$(id -u)" -ne 0 ] && SUDO="sudo"
if [ ${#missing[@]} -gt 0 ]; then
  echo "install-deps: installing ${missing[*]}" >&2
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# No redis-server, nats-server or prometheus of Debian's running on the
# README's ports.
for unit in redis-server nats-server prometheus; do
  dpkg-query -W -f='${Status}' "$unit" 2>/dev/null | grep -q "install ok installed" || continue
  if [ -d /run/systemd/system ]; then
    if systemctl is-enabled --quiet "$unit" 2>/dev/null || systemctl is-active --quiet "$unit" 2>/dev/null; then
      echo "install-deps: disabling and stopping Debian's $unit service (the tests run their own)" >&2
      $SUDO systemctl disable --now --quiet "$unit" 2>/dev/null || true
    fi
  elif [ -x "/etc/init.d/$unit" ]; then
    $SUDO service "$unit" stop >/dev/null 2>&1 || true
    $SUDO update-rc.d "$unit" disable >/dev/null 2>&1 || true
  fi
done
