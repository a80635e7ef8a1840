#!/usr/bin/env bash
# A long soak of cluster mode against nats-server's defects (docs/CLUSTER.md,
# "Tests and soaks"): runs the chaos test that kills the NATS server leading
# the stream (3 NATS servers, 3 replicas, 2 writers, a checker looking up
# acknowledged keys on every replica) RUNS times, each with its own seed,
# and sums up what happened: runs passed, runs in which the NATS servers'
# copies of the stream diverged, divergences the replicas caught, write
# stalls, consumers the continuity check refused. A run fails when a serving replica answered "absent" for an
# acknowledged key, or a replica was not ready with every acknowledged key
# after a round.
#
#   bash scripts/cluster-soak.sh [RUNS (30)] [ROUNDS per run (10)]
#
# Needs the release build's cluster_chaos_test (scripts/build.sh release
# cluster_chaos_test) and nats-server. Each run's output is kept in
# build/soak/run-N.log; a failed run's test directory too (the NATS stores,
# each NATS server's and each replica's log, replicas logging every position
# they apply with its message id: CUCKOO_KEEP_TEST_DIR,
# CUCKOO_REPLICA_LOG_LEVEL=debug), in build/soak/run-N/.
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${1:-30}
rounds=${2:-10}
case "$runs$rounds" in
  *[!0-9]*) echo "usage: $0 [RUNS] [ROUNDS]: numbers" >&2; exit 2 ;;
esac
test_bin=build/release/tests/e2e/cluster_chaos_test
[ -x "$test_bin" ] || { echo "$0: no $test_bin: bash scripts/build.sh release cluster_chaos_test" >&2; exit 2; }
mkdir -p build/soak
passed=0 failed=0 diverged_runs=0 caught=0 stalls=0 refused=0
for i in $(seq 1 "$runs"); do
  log=build/soak/run-$i.log
  status=passed
  rm -rf "build/soak/run-$i"
  CUCKOO_CHAOS_ROUNDS=$rounds CUCKOO_CHAOS_SEED=$i CUCKOO_KEEP_TEST_DIR=1 \
    CUCKOO_REPLICA_LOG_LEVEL=debug \
    "$test_bin" --gtest_filter='*KillingTheStreamLeader*' >"$log" 2>&1 || status=FAILED
  dir=$(sed -n 's/^\[harness\] test dir //p' "$log" | head -n 1)
  if [ -n "$dir" ] && [ -d "$dir" ]; then
    if [ "$status" = passed ]; then rm -rf "$dir"; else mv "$dir" "build/soak/run-$i"; fi
  fi
  summary=$(grep -o 'chaos (NATS leader): [0-9]* rounds.*' "$log" | tail -n 1 || true)
  run_caught=$(sed -n 's/.*divergences caught by the replicas: \([0-9]*\).*/\1/p' <<<"$summary")
  run_stalls=$(sed -n 's/.*write stalls: \([0-9]*\).*/\1/p' <<<"$summary")
  run_refused=$(sed -n 's/.*refused for another numbering: \([0-9]*\).*/\1/p' <<<"$summary")
  refused=$((refused + ${run_refused:-0}))
  caught=$((caught + ${run_caught:-0}))
  stalls=$((stalls + ${run_stalls:-0}))
  if grep -q 'the NATS copies differ' "$log"; then diverged_runs=$((diverged_runs + 1)); fi
  if [ "$status" = passed ]; then passed=$((passed + 1)); else failed=$((failed + 1)); fi
  echo "run $i: $status; ${summary:-no summary (see $log)}$([ "$status" = passed ] || echo "; kept: build/soak/run-$i")"
done
echo "soak: $runs runs of $rounds NATS leader kills: $passed passed, $failed failed;" \
  "the NATS copies diverged in $diverged_runs runs; the replicas caught $caught divergences;" \
  "$stalls write stalls; $refused consumers refused for numbering the stream differently"
[ "$failed" = 0 ]
