#!/usr/bin/env bash
# Fuzzes the snapshot reader (tests/fuzz/snapshot_fuzz.cc), the data
# path's request parser (tests/fuzz/wire_fuzz.cc, differential against the
# generated protobuf parser), the write-ahead log reader
# (tests/fuzz/wal_fuzz.cc), the cluster log's entry decoder
# (tests/fuzz/log_entry_fuzz.cc), the access file's parser
# (tests/fuzz/access_fuzz.cc) and the RESP command parser
# (tests/fuzz/resp_fuzz.cc, whole against split reads), each for a while:
#   scripts/fuzz.sh [snapshot-seconds] [wire-seconds] [wal-seconds] [entry-seconds] [access-seconds]
#                   [resp-seconds]
#       (defaults 45, 30, 30, 20, 20 and 20; 0 skips that fuzzer)
#
# The fuzzers and their seed corpus generators are targets of the ASan build
# (scripts/build.sh asan: clang + libFuzzer, ASan and UBSan, the libraries
# the fuzzers run with libFuzzer's coverage): after scripts/test.sh's ASan
# step there is nothing left to build; run alone, this builds what is
# missing there. Corpora, logs and crashes go to build/fuzz. Each fuzzer has
# its own corpus directory,
# build/fuzz/corpus (snapshot), build/fuzz/wire-corpus,
# build/fuzz/wal-corpus, build/fuzz/log-entry-corpus,
# build/fuzz/access-corpus and build/fuzz/resp-corpus, seeded by its
# generator; inputs the fuzzer finds are kept there too, so later runs start
# from them, and past 1000 files a corpus is merged down to the inputs that
# add coverage. Two fuzzers run at a time. Quiet on success apart from one
# summary line per fuzzer; on a
# crash prints that fuzzer's report, leaves the input in
# build/fuzz/artifacts/ (named <fuzzer>-crash-...) and exits non-zero after
# the other fuzzers have run.
#
# Without clang++ or libFuzzer (Debian: clang, libclang-rt-14-dev) the ASan
# build is g++'s and has no fuzzers: it prints a notice and runs the corpus
# replays instead
# (snapshot_fuzz_replay, wire_fuzz_replay, wal_fuzz_replay,
# log_entry_fuzz_replay, access_fuzz_replay and resp_fuzz_replay over their
# seed corpora in
# build/asan, via CTest), which check the seeds but do not fuzz; it fails only
# if a replay fails.
set -euo pipefail
cd "$(dirname "$0")/.."
snapshot_seconds=${1:-45}
wire_seconds=${2:-30}
wal_seconds=${3:-30}
entry_seconds=${4:-20}
access_seconds=${5:-20}
resp_seconds=${6:-20}
for s in "$snapshot_seconds" "$wire_seconds" "$wal_seconds" "$entry_seconds" "$access_seconds" \
  "$resp_seconds"; do
  case "$s" in
    '' | *[!0-9]*)
      echo "usage: $0 [snapshot-seconds] [wire-seconds] [wal-seconds] [entry-seconds]" \
        "[access-seconds] [resp-seconds]" >&2
      exit 2
      ;;
  esac
done
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
    "falling back to the g++ ASan corpus replays, no fuzzing" >&2
  bash scripts/build.sh asan snapshot_fuzz_replay wire_fuzz_replay wal_fuzz_replay \
    log_entry_fuzz_replay access_fuzz_replay resp_fuzz_replay >"$log" 2>&1 || { cat "$log" >&2; exit 1; }
  ctest --test-dir build/asan --output-on-failure -R '^(snapshot|wire|wal|log_entry|access|resp)_fuzz_' >>"$log" 2>&1 ||
    { cat "$log" >&2; exit 1; }
  echo "fuzz: corpus replays (g++ ASan+UBSan) passed"
  exit 0
fi

# The fuzzers in the ASan build (Debug, asserts on, at -O1; -g1).
bin=build/asan/tests/fuzz
targets=()
[ "$snapshot_seconds" -gt 0 ] && targets+=(snapshot_fuzz make_snapshot_corpus)
[ "$wire_seconds" -gt 0 ] && targets+=(wire_fuzz make_wire_corpus)
[ "$wal_seconds" -gt 0 ] && targets+=(wal_fuzz make_wal_corpus)
[ "$entry_seconds" -gt 0 ] && targets+=(log_entry_fuzz make_log_entry_corpus)
[ "$access_seconds" -gt 0 ] && targets+=(access_fuzz make_access_corpus)
[ "$resp_seconds" -gt 0 ] && targets+=(resp_fuzz make_resp_corpus)
[ ${#targets[@]} -eq 0 ] && exit 0
bash scripts/build.sh asan "${targets[@]}" >"$log" 2>&1 || { cat "$log" >&2; exit 1; }

# run_fuzzer NAME SECONDS CORPUS_DIR CORPUS_TOOL MAX_LEN
run_fuzzer() {
  local name=$1 seconds=$2 corpus=$3 tool=$4 max_len=$5
  local fuzzer=$bin/$name flog=$out/$name.log status=0
  # Inputs found by earlier runs stay in the corpus; once there are many,
  # keep only those that add coverage (libFuzzer's merge) so it cannot grow
  # without bound.
  if [ -d "$corpus" ] && [ "$(find "$corpus" -type f | wc -l)" -gt 1000 ]; then
    rm -rf "$corpus.merged"
    mkdir "$corpus.merged"
    "$fuzzer" -merge=1 -max_len="$max_len" -rss_limit_mb=2048 "$corpus.merged" "$corpus" \
      >"$flog" 2>&1 || { cat "$flog" >&2; return 1; }
    rm -rf "$corpus"
    mv "$corpus.merged" "$corpus"
  fi
  "$bin/$tool" "$corpus" >"$flog" 2>&1 || { cat "$flog" >&2; return 1; }

  mkdir -p "$out/artifacts"
  ASAN_OPTIONS="${ASAN_OPTIONS:-abort_on_error=0:detect_leaks=1}" \
    UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}" \
    "$fuzzer" -max_total_time="$seconds" -max_len="$max_len" \
    -rss_limit_mb=2048 -timeout=20 -print_final_stats=1 \
    -artifact_prefix="$out/artifacts/$name-" "$corpus" >"$flog" 2>&1 || status=$?
  if [ "$status" -ne 0 ]; then
    cat "$flog" >&2
    local artifact
    artifact=$(sed -n 's/.*Test unit written to \(.*\)$/\1/p' "$flog" | tail -n 1)
    echo "fuzz: $name FAILED (exit $status); the input is ${artifact:-in $out/artifacts/};" \
      "reproduce with $fuzzer <input>" >&2
    return 1
  fi
  # "stat::number_of_executed_units: N" and the last status line,
  # "#N DONE cov: C ft: F corp: K/S lim: L exec/s: E rss: R".
  local runs last corp
  runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$flog" | tail -n 1)
  last=$(grep -E '^#[0-9]+' "$flog" | tail -n 1)
  field() { sed -n "s|.* $1: \\([^ ]*\\).*|\\1|p" <<<"$last"; }
  corp=$(field corp)
  echo "fuzz: $name ok: ${runs:-?} execs in ${seconds}s ($(field exec/s) exec/s)," \
    "coverage $(field cov) edges, $(field ft) features, corpus ${corp%%/*} inputs (${corp#*/})"
}

# Two fuzzers at a time (each is one process on one core): the same
# fuzzing per target in about half the wall time on a 2-core machine.
failed=0
pids=()
start() { run_fuzzer "$@" & pids+=($!); }
wait_all() {
  local pid
  for pid in "${pids[@]}"; do wait "$pid" || failed=1; done
  pids=()
}
[ "$snapshot_seconds" -gt 0 ] &&
  start snapshot_fuzz "$snapshot_seconds" "$out/corpus" make_snapshot_corpus 16384
[ "$wire_seconds" -gt 0 ] && start wire_fuzz "$wire_seconds" "$out/wire-corpus" make_wire_corpus 4096
wait_all
[ "$wal_seconds" -gt 0 ] && start wal_fuzz "$wal_seconds" "$out/wal-corpus" make_wal_corpus 16384
[ "$entry_seconds" -gt 0 ] &&
  start log_entry_fuzz "$entry_seconds" "$out/log-entry-corpus" make_log_entry_corpus 8192
wait_all
[ "$access_seconds" -gt 0 ] && start access_fuzz "$access_seconds" "$out/access-corpus" make_access_corpus 4096
[ "$resp_seconds" -gt 0 ] && start resp_fuzz "$resp_seconds" "$out/resp-corpus" make_resp_corpus 4096
wait_all
exit "$failed"
