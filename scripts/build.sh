#!/usr/bin/env bash
# Configures and builds one flavour of the tree into build/<flavour>.
#   scripts/build.sh [release|asan|tsan] [ninja targets...]
set -euo pipefail
cd "$(dirname "$0")/.."
flavour=${1:-release}
shift || true
case "$flavour" in
  release) args=(-DCMAKE_BUILD_TYPE=RelWithDebInfo) ;;
  # -g1: line tables only, enough for the sanitizers' reports, and a third
  # less compile time than -g (no local variables for a debugger).
  asan) args=(-DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_FLAGS=-O1 -DCMAKE_CXX_FLAGS_DEBUG=-g1
              -DCUCKOO_SANITIZE=address) ;;
  tsan) args=(-DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_FLAGS=-O1 -DCMAKE_CXX_FLAGS_DEBUG=-g1
              -DCUCKOO_SANITIZE=thread) ;;
  *) echo "usage: $0 [release|asan|tsan] [targets...]" >&2; exit 2 ;;
esac
cmake -S . -B "build/$flavour" -G Ninja "${args[@]}" >/dev/null
ninja -C "build/$flavour" "$@"
