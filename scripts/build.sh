#!/usr/bin/env bash
# Configures and builds one flavour of the tree into build/<flavour>.
#   scripts/build.sh [release|asan|tsan] [ninja targets...]
set -euo pipefail
cd "$(dirname "$0")/.."
flavour=${1:-release}
shift || true
# The sanitizer builds leave out what only the release build runs: the
# benchmarks and the tests labelled chaos and slow (CMakeLists.txt).
sanitizer_build=(-DCUCKOO_BUILD_BENCH=OFF -DCUCKOO_BUILD_SLOW_TESTS=OFF)
case "$flavour" in
  # RelWithDebInfo (-O3 -g); CUCKOO_RELEASE_BUILD_TYPE=Release leaves out the
  # debug info (scripts/test.sh: about 30% less compile time; the same code,
  # and what the Dockerfile builds).
  release)
    type=${CUCKOO_RELEASE_BUILD_TYPE:-RelWithDebInfo}
    case "$type" in
      RelWithDebInfo | Release) ;;
      *) echo "$0: CUCKOO_RELEASE_BUILD_TYPE=$type: RelWithDebInfo or Release" >&2; exit 2 ;;
    esac
    args=(-DCMAKE_BUILD_TYPE="$type")
    ;;
  # -g1: line tables only, enough for the sanitizers' reports, and a third
  # less compile time than -g (no local variables for a debugger).
  # clang when it has libFuzzer (Debian: clang, libclang-rt-14-dev), else
  # g++. With clang this one build also holds the fuzzers (CUCKOO_FUZZ:
  # scripts/fuzz.sh builds nothing of its own), compiles with the
  # precompiled headers (cmake/CuckooHelpers.cmake: about half the CPU time
  # of g++'s ASan build) and checks the lock annotations (-Wthread-safety).
  asan)
    args=(-DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_FLAGS=-O1 -DCMAKE_CXX_FLAGS_DEBUG=-g1
          -DCUCKOO_SANITIZE=address "${sanitizer_build[@]}")
    mkdir -p build
    if command -v clang++ >/dev/null && printf '%s\n' '#include <stddef.h>' '#include <stdint.h>' \
      'extern "C" int LLVMFuzzerTestOneInput(const uint8_t*, size_t) { return 0; }' |
      clang++ -x c++ -fsanitize=fuzzer -o build/libfuzzer-probe - >/dev/null 2>&1; then
      args+=(-DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ -DCUCKOO_FUZZ=ON)
    else
      args+=(-DCMAKE_C_COMPILER=gcc -DCMAKE_CXX_COMPILER=g++ -DCUCKOO_FUZZ=OFF)
    fi
    rm -f build/libfuzzer-probe
    ;;
  tsan) args=(-DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_FLAGS=-O1 -DCMAKE_CXX_FLAGS_DEBUG=-g1
              -DCUCKOO_SANITIZE=thread "${sanitizer_build[@]}") ;;
  *) echo "usage: $0 [release|asan|tsan] [targets...]" >&2; exit 2 ;;
esac
# CUCKOO_UNITY_BUILD=ON (scripts/test.sh): each library's and binary's
# sources compiled as one file per 8 (CMake's unity build), so the gRPC,
# protobuf and Boost headers are parsed, and their inline code optimised,
# once per group instead of once per file. For builds from scratch (a
# third less CPU time); an edit recompiles its whole group, so not the
# default.
case "${CUCKOO_UNITY_BUILD:=OFF}" in
  ON | OFF) args+=(-DCMAKE_UNITY_BUILD="$CUCKOO_UNITY_BUILD") ;;
  *) echo "$0: CUCKOO_UNITY_BUILD=$CUCKOO_UNITY_BUILD: ON or OFF" >&2; exit 2 ;;
esac
cmake -S . -B "build/$flavour" -G Ninja "${args[@]}" >/dev/null
ninja -C "build/$flavour" "$@"
