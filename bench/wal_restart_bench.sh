#!/usr/bin/env bash
# Restart time with a large log to replay: a filter of CAPACITY keys filled
# with ITEMS keys and snapshotted, then churn (batched inserts and deletes on
# a window of keys) until the log holds about LOG_GIB GiB, then kill -9 and
# a restart on the same data directory: the time from the restart to
# "serving on", and cuckood's own account of loading and replaying.
#
#   bash bench/wal_restart_bench.sh [CAPACITY] [ITEMS] [LOG_GIB]
#       (default 1000M 950M 1; needs ~2 GiB of RAM and ~3 GiB of disk in TMPDIR)
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/bench_lib.sh
capacity=${1:-1000M}
items=${2:-950M}
log_gib=${3:-1}
bin=${CUCKOO_BENCH_BIN:-build/release}
[ -x "$bin/server/cuckood" ] && [ -x "$bin/client/cuckoo-bench" ] ||
  build_release cuckood cuckoo-bench cuckooctl
py=/usr/bin/python3
port=$(free_port)
target=127.0.0.1:$port
data=$(mktemp -d -p "${TMPDIR:-/tmp}")
log=$(mktemp)
trap 'kill -9 $server 2>/dev/null || true; rm -rf "$data" "$log"' EXIT
start() {
  "$bin/server/cuckood" --listen="$target" --admin-listen= --data-dir="$data" \
    --snapshot-interval=0 --wal-max-size=64GiB >"$log" 2>&1 &
  server=$!
  for _ in $(seq 3000); do grep -q "serving on" "$log" && return; sleep 0.01; done
  echo "cuckood did not start:"; cat "$log"; exit 1
}
start
echo "== filling a $capacity filter with $items keys"
"$bin/client/cuckoo-bench" --target="$target" --filter=big --create="$capacity" --populate \
  --keyspace="$items" --mix=lookup:100 --requests=1 --warmup=0 | grep -E "^populate: [0-9]" || true
"$bin/client/cuckooctl" --target="$target" snapshot big | tail -1
# ~8.4 bytes of log per key: 1000-key requests, half inserts, half deletes.
requests=$($py -c "print(int($log_gib * 2**30 / 8.4 / 1000))")
echo "== churn: $requests requests of 1000 keys into the log"
"$bin/client/cuckoo-bench" --target="$target" --filter=big --keyspace="$items" \
  --mix=insert:50,delete:50 --churn=20M --warmup=0 --requests="$requests" |
  grep -E "^  total" || true
echo "log: $(du -sh "$data/wal" | cut -f1)"
kill -9 $server
wait $server 2>/dev/null || true
sync
echo "== restart (page cache warm: the files were just written)"
t0=$($py -c 'import time; print(time.time())')
start
t1=$($py -c 'import time; print(time.time())')
grep -E "loaded filter|replayed|serving [0-9]+ filters" "$log" | sed 's/^\[[^]]*\] \[[a-z]*\] //'
$py -c "print(f'restart to serving: {$t1 - $t0:.2f} s')"
