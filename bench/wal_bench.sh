#!/usr/bin/env bash
# What the write-ahead log costs, measured side by side in one run: batched
# inserts (1000 16-byte keys per request, 8 in flight on each of 2
# connections, 2 * 10^7 keys into a 10^8-key filter, cuckoo-bench's populate
# phase) against a fresh cuckood with --durability=none, sync and interval,
# alternating, ROUNDS rounds; and this disk's fdatasync latency (dd with
# oflag=dsync, 4 KiB writes) before and after.
#
#   bash bench/wal_bench.sh [OUT_DIR] [ROUNDS]   (default build/release/wal_bench, 2)
#
# Prints per run: keys/s, p99 batch latency, the log's mean group size
# (records per write) and mean fdatasync time from cuckood's /metrics; then
# the ratio sync / none per round. Needs ~1 GiB of RAM and a few minutes.
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/bench_lib.sh
out=${1:-build/release/wal_bench}
rounds=${2:-2}
mkdir -p "$out"
bin=${CUCKOO_BENCH_BIN:-build/release}
[ -x "$bin/server/cuckood" ] && [ -x "$bin/client/cuckoo-bench" ] ||
  build_release cuckood cuckoo-bench
py=/usr/bin/python3

# The disk under the data directory: mean latency of one 4 KiB O_DSYNC write.
probe_dir=$(mktemp -d -p "${TMPDIR:-/tmp}")
fsync_probe() {
  local t
  t=$( { dd if=/dev/zero of="$probe_dir/probe" bs=4k count=2000 oflag=dsync 2>&1 >/dev/null; } |
    awk '/copied/ {for (i = 1; i <= NF; i++) if ($i ~ /^s,?$/) print $(i-1)}' | tr -d ,)
  rm -f "$probe_dir/probe"
  $py -c "print(f'{$t / 2000 * 1e6:.0f}')"
}
echo "fdatasync (dd oflag=dsync, 4 KiB): $(fsync_probe) us per write"

summary="$out/summary.txt"
: >"$summary"
run() {  # run MODE ROUND
  local mode=$1 round=$2 port admin data server
  port=$(free_port)
  admin=$(free_port)
  data=$(mktemp -d -p "${TMPDIR:-/tmp}")
  "$bin/server/cuckood" --listen=127.0.0.1:$port --admin-listen=127.0.0.1:$admin \
    --data-dir="$data" --durability="$mode" --snapshot-interval=0 >"$out/cuckood-$mode-$round.log" 2>&1 &
  server=$!
  for _ in $(seq 100); do grep -q "serving on" "$out/cuckood-$mode-$round.log" && break; sleep 0.1; done
  "$bin/client/cuckoo-bench" --target=127.0.0.1:$port --filter=w --create=100M --populate \
    --keyspace=20M --mix=lookup:100 --requests=1 --warmup=0 \
    --json="$out/$mode-$round.json" >/dev/null
  $py - "$out/$mode-$round.json" "$mode" "$round" "$admin" >>"$summary" <<'PY'
import json, sys, urllib.request
path, mode, rnd, admin = sys.argv[1:]
p = json.load(open(path))["populate"]
metrics = urllib.request.urlopen(f"http://127.0.0.1:{admin}/metrics").read().decode()
def value(name):
    for line in metrics.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    return 0.0
groups = value("cuckood_wal_group_records_count")
records = value("cuckood_wal_group_records_sum")
syncs = value("cuckood_wal_fdatasync_duration_seconds_count")
sync_s = value("cuckood_wal_fdatasync_duration_seconds_sum")
print(f"{mode} {rnd} {p['keys_per_s']:.0f} {p['latency_us']['p99']:.0f} "
      f"{records / max(groups, 1):.1f} {sync_s / max(syncs, 1) * 1e6:.0f} {int(syncs)}")
PY
  kill -TERM $server
  wait $server || true
  rm -rf "$data"
}
for round in $(seq "$rounds"); do
  for mode in none sync interval; do
    echo "== round $round, --durability=$mode"
    run "$mode" "$round"
  done
done
echo "fdatasync (dd oflag=dsync, 4 KiB): $(fsync_probe) us per write"
rm -rf "$probe_dir"

$py - "$summary" <<'PY'
import sys
rows = [l.split() for l in open(sys.argv[1]) if l.strip()]
print(f"{'mode':9} {'round':>5} {'M keys/s':>9} {'p99 ms':>7} {'records/write':>13} {'fdatasync us':>12} {'syncs':>7}")
for mode, rnd, kps, p99, group, sync_us, syncs in rows:
    print(f"{mode:9} {rnd:>5} {float(kps)/1e6:9.2f} {float(p99)/1e3:7.1f} {float(group):13.1f} {sync_us:>12} {syncs:>7}")
by = {(m, r): float(k) for m, r, k, *_ in rows}
for rnd in sorted({r for _, r, *_ in rows}):
    if (("sync", rnd) in by) and (("none", rnd) in by):
        print(f"round {rnd}: sync / none = {by[('sync', rnd)] / by[('none', rnd)]:.2f}")
PY
