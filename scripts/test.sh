#!/usr/bin/env bash
# Installs dependencies, builds, and runs every test:
#   1. clang-format check of every C++ file;
#   2. release build (-O3, no debug info) of the binaries, the benchmarks, the
#      kill -9 loops of the cluster, the write-ahead log and the Redis port
#      (CTest label "chaos"), the growing filters' 10^7-key test, the
#      Redis port's memory attacks and its TLS tests, which measure what TLS
#      connections cost (label "slow"), all too slow under the
#      sanitizers (whose builds leave them and the benchmarks out); then the
#      benchmarks in --small mode as a smoke run; beside step 3's build, the
#      Node client's tests (client/node: build, npm pack, node --test against
#      that cuckood);
#   3. AddressSanitizer + UBSan build (clang, with precompiled headers and
#      -Wthread-safety; it holds the fuzzers of step 5 too; the tests' own
#      code at -O0): every other test (each test is compiled once, in the
#      build that checks the most);
#   4. ThreadSanitizer build (at the lowest priority, beside step 3's
#      tests): the engine's concurrency tests, the write-ahead log's and the
#      RESP port's connections' (plaintext and TLS; CTest label
#      "concurrency");
#   5. the libFuzzer targets of the ASan build: the snapshot reader for 30 s,
#      the data path's wire parser (differential against the generated
#      parser) for 20 s, the write-ahead log reader for 20 s, the cluster
#      log's entry decoder for 15 s, the access file's parser for 10 s and
#      the RESP command parser for 20 s (scripts/fuzz.sh);
#   6. the deployment files (scripts/container-test.sh): the Kubernetes
#      manifests and compose file validated, the Docker image built (podman or
#      docker, no registry needed) from step 2's release binaries, and run:
#      create/insert/lookup through the
#      published ports, SIGTERM exits 0 after the final snapshot, and the data
#      is there in a new container on the same volume.
# The kill -9 loops of step 2 and step 6 run beside step 3's build: they
# mostly wait, the build computes (2 cores do both).
# Every build here is a unity build (scripts/build.sh, CUCKOO_UNITY_BUILD:
# a third less CPU time from scratch) linked with lld where it is installed
# (cmake/CuckooHelpers.cmake).
# Exits non-zero on the first failure. Each step's header says how long the
# run has taken so far, and the end (a failure's too) lists each step's time,
# so CI's log shows where the time goes.
set -euo pipefail
cd "$(dirname "$0")/.."
mmss() { echo "$(($1 / 60))m$(($1 % 60))s"; }
# The machine's CPU ticks so far, busy and in all (/proc/stat: user, nice,
# system, irq, softirq; plus idle and iowait), for each step's "N% busy":
# how much of every core the step (and whatever ran beside it) kept busy.
# Near 100% the step waits on the CPU; far below, on something else.
cpu_ticks() { awk '/^cpu /{print $2+$3+$4+$7+$8, $2+$3+$4+$5+$6+$7+$8}' /proc/stat; }
busy_since() {
  local busy total
  read -r busy total < <(cpu_ticks)
  echo $((total > $2 ? 100 * (busy - $1) / (total - $2) : 0))
}
phases=()
phase_start=$SECONDS
read -r phase_busy phase_total < <(cpu_ticks)
phase_name="install dependencies"
phase() {
  phases+=("$(printf '%8s  %3s%% busy  %s' "$(mmss $((SECONDS - phase_start)))" \
    "$(busy_since "$phase_busy" "$phase_total")" "$phase_name")")
  phase_name=$*
  phase_start=$SECONDS
  read -r phase_busy phase_total < <(cpu_ticks)
  echo "== $* (at $(mmss "$SECONDS"))"
}
summary() {
  local status=$?
  # A step run beside one that failed: stopped, not left running.
  for pid in "${beside_pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  [ "$phase_name" = "all tests passed" ] || phase "stopped (exit $status)"
  echo "== time per step (and how busy it kept the CPU):"
  printf '%s\n' "${phases[@]}"
  printf '%8s  %s\n' "$(mmss "$SECONDS")" total
}
trap summary EXIT
# Steps that mostly wait (for processes they kill, for NATS elections, for
# image layers) run beside one that computes: `beside NAME CMD...` starts
# CMD with its output in build/logs/NAME.log; `joined NAME` waits for it,
# prints that log, and fails the run if CMD failed. The log's last line says
# how long CMD ran and the CPU time its processes used (bash's `times`);
# the step list at the end gives the time from start to join.
declare -A beside_pids beside_started
beside() {
  local name=$1
  shift
  mkdir -p build/logs
  echo "== $name: started beside the next steps (at $(mmss "$SECONDS"))"
  beside_started[$name]=$SECONDS
  (
    status=0
    "$@" || status=$?
    echo "== $name: ran $(mmss $((SECONDS - beside_started[$name]))); CPU time (user system)" \
      "of the step's shell, then of its processes:"
    times # Here, not in $(...): a forked shell would count none of them.
    exit "$status"
  ) >"build/logs/$name.log" 2>&1 &
  beside_pids[$name]=$!
}
joined() {
  local name=$1 status=0
  wait "${beside_pids[$name]}" || status=$?
  cat "build/logs/$name.log"
  phases+=("$(printf '%8s  %9s  %s' "$(mmss $((SECONDS - beside_started[$name])))" "" \
    "$name (beside)")")
  echo "== $name: $([ "$status" = 0 ] && echo passed || echo "FAILED (exit $status)") (at $(mmss "$SECONDS"))"
  return "$status"
}
bash scripts/install-deps.sh --test
# node-redis, for tests/e2e/node_redis_test (from npm, as package-lock.json pins).
bash tests/e2e/node_redis/install.sh
# @cuckood/client's dependencies and TypeScript (client/node, as its package-lock.json pins).
bash client/node/install.sh
jobs=$(nproc)
# The release build without debug info (scripts/build.sh): nothing here
# reads it, and it costs about 30% of that build's compile time. Exported,
# so every script below that builds into build/release builds the same.
export CUCKOO_RELEASE_BUILD_TYPE=Release
# Each library's and binary's sources compiled 8 to a file (scripts/build.sh):
# this run builds every tree from scratch, and never edits one.
export CUCKOO_UNITY_BUILD=ON

phase "format check"
git ls-files '*.cc' '*.h' | xargs clang-format --dry-run --Werror

phase "release build: binaries, benchmarks, kill -9 loops"
bash scripts/build.sh release cuckood cuckooctl cuckoo-bench filter_bench growth_bench \
  snapshot_bench replay_bench resp_load \
  cluster_chaos_test redis_crash_test wal_crash_test growth_scale_test redis_memory_test \
  redis_tls_test
phase "release: the 10^7-key growth, the Redis port's memory attacks and TLS (label slow)"
# Alone: they time a normal client's answers while the attacks run.
ctest --test-dir build/release --output-on-failure -j "$jobs" -L slow
phase "benchmark smoke run (--small)"
build/release/bench/filter_bench --small --json=build/release/filter_bench_small.json >/dev/null
build/release/bench/growth_bench --small --json=build/release/growth_bench_small.json >/dev/null
bash bench/redis_bench.sh --smoke build/release/redis_bench_smoke >/dev/null

phase "ASan+UBSan build (clang); beside it the kill -9 loops, the deployment files and the Node client"
# The Node client (client/node): tsc, then the tests against the release
# cuckood, each file with its own; test/package.test.mjs packs the package
# and installs the tarball into a temporary directory. Mostly waiting on
# the servers it starts.
beside "Node client: build, npm pack, node --test against the release cuckood" \
  env CUCKOO_NODE_TEST_CUCKOOD="$PWD/build/release/server/cuckood" \
  bash -c 'cd client/node && npm run --silent build && npm test --silent'
# The kill -9 loops (label chaos) wait on processes and NATS elections
# most of the time; they retry through what they cause, with generous
# deadlines. The deployment files and the image (release binaries): the
# image's layers and the containers' start and stop are mostly waiting.
beside "kill -9 loops (release, label chaos)" \
  ctest --test-dir build/release --output-on-failure -j "$jobs" -L chaos
beside "deployment: k8s manifests, compose file, container image" bash scripts/container-test.sh
bash scripts/build.sh asan
joined "kill -9 loops (release, label chaos)"
joined "Node client: build, npm pack, node --test against the release cuckood"
phase "ASan+UBSan: every test but the kill -9 loops; beside it the TSan build"
# The TSan build (only the engine's, the write-ahead log's and the RESP
# connections' concurrency tests, no gRPC in them: TSan cannot see the
# synchronisation inside Debian's uninstrumented gRPC and abseil, so server
# tests report races there that are not real; they run under ASan instead)
# compiles at the lowest priority in the CPU time the ASan tests leave
# while they wait for the processes they start: it takes nothing from them
# when they compute.
beside "TSan build (nice 19, beside the ASan tests)" \
  nice -n 19 bash scripts/build.sh tsan -j "$jobs" \
  concurrency_test wal_test wal_apply_test resp_server_test resp_tls_test
# One more test than cores: the end-to-end tests spend much of their time
# waiting for the processes they start.
ctest --test-dir build/asan --output-on-failure -j "$((jobs + 1))" -LE 'chaos|slow'

phase "deployment (joined)"
joined "deployment: k8s manifests, compose file, container image"
phase "TSan build (joined) + concurrency tests"
joined "TSan build (nice 19, beside the ASan tests)"
TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1" \
  ctest --test-dir build/tsan --output-on-failure -j "$jobs" -L concurrency
phase "fuzzing: snapshot reader, wire parser, write-ahead log reader, cluster log entries, access file, RESP parser"
bash scripts/fuzz.sh 30 20 20 15 10 20
phase "all tests passed"
