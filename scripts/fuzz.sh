#!/usr/bin/env bash
# Fuzzes the snapshot reader (tests/fuzz/snapshot_fuzz.cc) for a while:
#   scripts/fuzz.sh [seconds]        (default 45)
#
# Builds snapshot_fuzz and the seed corpus generator with clang + libFuzzer,
# ASan and UBSan into build/fuzz, writes the seed corpus into build/fuzz/corpus
# (inputs the fuzzer finds are kept there too, so later runs start from them;
# past 1000 files it is merged down to the inputs that add coverage)
# and runs the fuzzer for the given time. Quiet on success apart from a
# one-line summary; on a crash prints the fuzzer's report, leaves the input in
# build/fuzz/artifacts/ and exits non-zero.
#
# Without clang++ or libFuzzer (Debian: clang, libclang-rt-14-dev) it prints a
# notice and falls back to the g++ ASan+UBSan corpus replay instead
# (snapshot_fuzz_replay over the seed corpus in build/asan, via CTest), which
# checks the seeds but does not fuzz; it fails only if that replay fails.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-45}
case "$seconds" in
  '' | *[!0-9]*) echo "usage: $0 [seconds]" >&2; exit 2 ;;
esac
out=build/fuzz
mkdir -p "$out"
log=$out/fuzz.log

# Can clang++ link a libFuzzer target?
have_libfuzzer() {
  command -v clang >/dev/null && command -v clang++ >/dev/null || return 1
  printf '%s\n' '#include <stddef.h>' '#include <stdint.h>' \
    'extern "C" int LLVMFuzzerTestOneInput(const uint8_t*, size_t) { return 0; }' |
    clang++ -x c++ -fsanitize=fuzzer -o "$out/libfuzzer-probe" - >/dev/null 2>&1
}

if ! have_libfuzzer; then
  echo "fuzz: clang++ with libFuzzer not found (install clang and libclang-rt-14-dev);" \
    "falling back to the g++ ASan corpus replay, no fuzzing" >&2
  bash scripts/build.sh asan snapshot_fuzz_replay >"$log" 2>&1 || { cat "$log" >&2; exit 1; }
  ctest --test-dir build/asan --output-on-failure -R '^snapshot_fuzz_' >>"$log" 2>&1 ||
    { cat "$log" >&2; exit 1; }
  echo "fuzz: corpus replay (g++ ASan+UBSan) passed"
  exit 0
fi

# Debug (asserts on) at -O1, every target instrumented for coverage, ASan and
# UBSan; the fuzzer's own link flag is set on snapshot_fuzz only.
CC=clang CXX=clang++ cmake -S . -B "$out" -G Ninja -DCMAKE_BUILD_TYPE=Debug \
  -DCMAKE_CXX_FLAGS="-O1 -fsanitize=fuzzer-no-link" -DCUCKOO_SANITIZE=address \
  -DCUCKOO_BUILD_BENCH=OFF >"$log" 2>&1 || { cat "$log" >&2; exit 1; }
ninja -C "$out" snapshot_fuzz make_snapshot_corpus >>"$log" 2>&1 || { cat "$log" >&2; exit 1; }
fuzzer=$out/tests/fuzz/snapshot_fuzz
# Inputs found by earlier runs stay in the corpus; once there are many,
# keep only those that add coverage (libFuzzer's merge) so it cannot grow
# without bound.
if [ -d "$out/corpus" ] && [ "$(find "$out/corpus" -type f | wc -l)" -gt 1000 ]; then
  rm -rf "$out/corpus.merged"
  mkdir "$out/corpus.merged"
  "$fuzzer" -merge=1 -max_len=16384 -rss_limit_mb=2048 "$out/corpus.merged" "$out/corpus" \
    >>"$log" 2>&1 || { cat "$log" >&2; exit 1; }
  rm -rf "$out/corpus"
  mv "$out/corpus.merged" "$out/corpus"
fi
"$out/tests/fuzz/make_snapshot_corpus" "$out/corpus" >>"$log" 2>&1 || { cat "$log" >&2; exit 1; }

mkdir -p "$out/artifacts"
status=0
ASAN_OPTIONS="${ASAN_OPTIONS:-abort_on_error=0:detect_leaks=1}" \
  UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}" \
  "$fuzzer" -max_total_time="$seconds" -max_len=16384 \
  -rss_limit_mb=2048 -timeout=20 -print_final_stats=1 \
  -artifact_prefix="$out/artifacts/" "$out/corpus" >"$log" 2>&1 || status=$?
if [ "$status" -ne 0 ]; then
  cat "$log" >&2
  echo "fuzz: snapshot_fuzz FAILED (exit $status); the input is in $out/artifacts/;" \
    "reproduce with $fuzzer <input>" >&2
  exit 1
fi
# "stat::number_of_executed_units: N" and the last status line,
# "#N DONE cov: C ft: F corp: K/S lim: L exec/s: E rss: R".
runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1)
last=$(grep -E '^#[0-9]+' "$log" | tail -n 1)
field() { sed -n "s|.* $1: \\([^ ]*\\).*|\\1|p" <<<"$last"; }
corp=$(field corp)
echo "fuzz: snapshot_fuzz ok: ${runs:-?} execs in ${seconds}s ($(field exec/s) exec/s)," \
  "coverage $(field cov) edges, $(field ft) features, corpus ${corp%%/*} inputs (${corp#*/})"
