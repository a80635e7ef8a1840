#!/usr/bin/env bash
# Snapshot measurements in one go: dd's own sequential write and read on the
# data directory's filesystem (a cross-check of the O_DIRECT rows that
# snapshot_bench measures itself), then snapshot_bench with the given flags.
# With --restart-items, also a real restart: a new cuckood process loading
# the snapshot just written, dropped from the page cache, timed from process
# start to "serving on" (RESTART_IDLE=S: seconds to wait first, default 10).
#
#   bash bench/snapshot_bench.sh                          # 10^8 items, ~1 minute
#   DD_COUNT=100 bash bench/snapshot_bench.sh --restart-items=1e9   # ~4 min, 3.3 GiB
#
# DD_COUNT=N sets dd's size in 16 MiB blocks (default 64: 1 GiB).
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/bench_lib.sh
bin=${CUCKOO_BENCH_BIN:-build/release}
[ -n "${CUCKOO_BENCH_BIN:-}" ] && [ -x "$bin/bench/snapshot_bench" ] && [ -x "$bin/server/cuckood" ] ||
  build_release snapshot_bench cuckood
dir=build/release/bench/snapshot-bench-data
restart=0 keep=0
for a in "$@"; do
  case $a in
    --dir=*) dir=${a#--dir=} ;;
    --restart-items=*) restart=1 ;;
    --keep) keep=1 ;;
  esac
done
mkdir -p "$dir"
df -h "$dir" | tail -1
count=${DD_COUNT:-64}
echo "== dd write: bs=16M count=$count oflag=direct conv=fsync"
dd if=/dev/zero of="$dir/dd.tmp" bs=16M count="$count" oflag=direct conv=fsync 2>&1 | tail -1
echo "== dd read: bs=16M iflag=direct"
dd if="$dir/dd.tmp" of=/dev/null bs=16M iflag=direct 2>&1 | tail -1
rm -f "$dir/dd.tmp"
if [ $restart = 0 ]; then
  "$bin/bench/snapshot_bench" --dir="$dir" "$@"
else
  "$bin/bench/snapshot_bench" --dir="$dir" "$@" --keep
  snap=$dir/bench.cuckoo log=$dir/cuckood.log
  # Twice: after RESTART_IDLE seconds (default 10), by when this VM has handed
  # the memory freed by snapshot_bench back to the host, so the new table
  # pays for re-backing it as after a real outage; then at once again.
  for when in "after ${RESTART_IDLE:-10} s idle" "right after the previous one"; do
    case $when in after*) sleep "${RESTART_IDLE:-10}" ;; esac
    dd if="$snap" iflag=nocache count=0 status=none # Drops it from the page cache.
    echo "== cuckood restart $when; page cache holds$(fincore --noheadings --output=RES "$snap") of the file"
    port=$(free_port)
    t0=$(date +%s.%N)
    "$bin/server/cuckood" --listen=127.0.0.1:"$port" --data-dir="$dir" >"$log" 2>&1 &
    server=$!
    for _ in $(seq 1200); do grep -q "serving on" "$log" && break; sleep 0.05; done
    t1=$(date +%s.%N)
    kill $server
    wait $server || true
    grep -o "loaded filter.*" "$log" || cat "$log"
    printf "process start to serving: %.2f s (polled every 0.05 s)\n" "$(echo "$t1 - $t0" | bc)"
  done
  rm -f "$log" "$dir/LOCK"  # cuckood's lock file.
  [ $keep = 1 ] || rm -f "$snap"
fi
rmdir "$dir" 2>/dev/null || true  # Unless --keep left files in it.
