#!/usr/bin/env bash
# The issue's server measurements in one run, on this machine: a cuckood and
# cuckoo-bench side by side (client on the same box, as in the comparison
# with Redis + RedisBloom), a filter of 10^8 keys, 1000 16-byte keys per
# request, 8 requests in flight on each of 2 connections.
#
#   bash bench/server_bench.sh [OUT_DIR]     (default build/release/server_bench)
#
# Phases: populate 10^8 keys (batched insert into a filling filter), batched
# lookups (50% present), batched inserts and deletes on a churn window,
# single-key lookups at depth 1, then the server's resident memory against
# its table bytes. Each phase's full report is OUT_DIR/<phase>.json; a summary
# is printed at the end. Needs ~0.5 GiB of RAM and about a minute.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-build/release/server_bench}
mkdir -p "$out"
bin=build/release
[ -x "$bin/server/cuckood" ] && [ -x "$bin/client/cuckoo-bench" ] ||
  bash scripts/build.sh release cuckood cuckoo-bench cuckooctl >/dev/null

port=$(/usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
target=127.0.0.1:$port
data=$(mktemp -d)
"$bin/server/cuckood" --listen="$target" --data-dir="$data" >"$out/cuckood.log" 2>&1 &
server=$!
trap 'kill $server 2>/dev/null || true; wait $server 2>/dev/null || true; rm -rf "$data"' EXIT
for _ in $(seq 100); do grep -q "serving on" "$out/cuckood.log" && break; sleep 0.1; done

bench() {  # bench NAME ARGS...: one cuckoo-bench run, report to NAME.json
  local name=$1
  shift
  echo "== $name: cuckoo-bench $*"
  "$bin/client/cuckoo-bench" --target="$target" --json="$out/$name.json" "$@" |
    grep -E "^(populate|  (lookup|insert|delete|total)|result)" || true
}

# "bench": 10^8 keys filling a 10^8-capacity filter to ~95% load (the
# populate phase is the insert rate into a filling filter), then lookups.
bench lookup --filter=bench --create=100M --populate --keyspace=100M --mix=lookup:100 --duration=10s
# "churn": inserts and deletes alone, on a window of 20 M keys in a filter
# holding 50 M of its 10^8 capacity (--requests: the window is used once).
bench insert --filter=churn --create=100M --populate --keyspace=50M --mix=insert:100 \
  --churn=20M --warmup=0 --requests=20000
bench delete --filter=churn --keyspace=50M --mix=delete:100 --churn=20M --warmup=0 \
  --requests=20000
bench single --filter=bench --keyspace=100M --mix=lookup:100 --duration=10s --batch=1 --depth=1 --connections=1

rss_kib=$(awk '/^VmRSS/ {print $2}' "/proc/$server/status")
hwm_kib=$(awk '/^VmHWM/ {print $2}' "/proc/$server/status")
tables=$("$bin/client/cuckooctl" --target="$target" --format=json server-info |
  /usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin)["memory_used_bytes"])')

/usr/bin/python3 - "$out" "$rss_kib" "$hwm_kib" "$tables" <<'PY'
import json, sys
out, rss_kib, hwm_kib, tables = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
def load(name):
    with open(f"{out}/{name}.json") as f:
        return json.load(f)
def op(report, name):
    return report["run"]["ops"][name]
lookup, insert, delete, single = load("lookup"), load("insert"), load("delete"), load("single")
rows = [
    ("populate (insert 0 -> 10^8 keys, 95% load)", lookup["populate"]["keys_per_s"] / 1e6,
     "M keys/s"),
    ("batched lookup", op(lookup, "lookup")["keys_per_s"] / 1e6, "M keys/s"),
    ("batched insert (50% -> 69% load)", op(insert, "insert")["keys_per_s"] / 1e6, "M keys/s"),
    ("batched delete", op(delete, "delete")["keys_per_s"] / 1e6, "M keys/s"),
    ("single-key lookup p50", op(single, "lookup")["latency_us"]["p50"], "us"),
    ("single-key lookup p99", op(single, "lookup")["latency_us"]["p99"], "us"),
    ("server RSS", rss_kib / 1024, "MiB"),
    ("table bytes (both filters)", tables / 2**20, "MiB"),
    ("RSS limit: 1.1 x tables + 64 MiB", 1.1 * tables / 2**20 + 64, "MiB"),
]
print("\n== summary")
for name, value, unit in rows:
    print(f"{name:44s} {value:10.2f} {unit}")
print(f"{'peak RSS':44s} {hwm_kib / 1024:10.2f} MiB")
for name, r in (("lookup", lookup), ("insert", insert), ("delete", delete), ("single", single)):
    if not r.get("ok", False):
        print(f"run {name} reported errors or false negatives: see {out}/{name}.json")
        sys.exit(1)
PY
