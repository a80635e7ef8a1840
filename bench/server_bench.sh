#!/usr/bin/env bash
# The issue's server measurements in one run, on this machine: a cuckood and
# cuckoo-bench side by side (client on the same box, as in the comparison
# with Redis + RedisBloom), a filter of 10^8 keys, 1000 16-byte keys per
# request, 8 requests in flight on each of 2 connections.
#
#   bash bench/server_bench.sh [--smoke] [--no-pin] [OUT_DIR]
#                                          (default build/release/server_bench)
#
# Pinning: with 2 or more CPUs, cuckood (and redis-server) run on CPU0
# (taskset -c 0) and cuckoo-bench and redis-benchmark on CPU1 (--pin-cpu=1,
# taskset -c 1), so that single-key latency is measured the same way every
# time (bench/LOADGEN.md). --no-pin runs everything where the kernel likes
# (the batched figures of docs/BENCHMARKS.md before issue 18 were taken so).
#
# Phases: populate 10^8 keys (batched insert into a filling filter), batched
# lookups (50% present), batched inserts and deletes on a churn window, then
# ROUNDS (3) alternating rounds of single-key measurements at depth 1 on one
# connection: cuckood's gRPC Lookup of one key over TCP loopback, the same
# over cuckood's Unix socket (it listens on both), and Debian's redis-server
# answering `EXISTS key` (redis-benchmark -c 1 -P 1, a plain key: Redis's
# floor for one request's round trip); then the server's resident memory
# against its table bytes. Each phase's full report is OUT_DIR/<phase>.json
# (redis-benchmark's OUT_DIR/<phase>.csv); a summary with the medians (and
# ranges) of the rounds is printed at the end. Needs ~0.5 GiB of RAM and
# about three minutes. --smoke: a 10^6-key filter and short phases (a check
# that the script works, not a measurement).
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/bench_lib.sh
smoke=0 pin=1
while [ $# -gt 0 ]; do
  case "$1" in
    --smoke) smoke=1 ;;
    --no-pin) pin=0 ;;
    --*) echo "usage: $0 [--smoke] [--no-pin] [OUT_DIR]" >&2; exit 2 ;;
    *) break ;;
  esac
  shift
done
out=${1:-build/release/server_bench}
mkdir -p "$out"
bin=${CUCKOO_BENCH_BIN:-build/release}
[ -x "$bin/server/cuckood" ] && [ -x "$bin/client/cuckoo-bench" ] && [ -x "$bin/client/cuckooctl" ] ||
  build_release cuckood cuckoo-bench cuckooctl
for tool in redis-server redis-benchmark redis-cli taskset; do
  command -v "$tool" >/dev/null || { echo "server_bench: $tool is missing (apt-get install redis-server redis-tools util-linux)" >&2; exit 2; }
done

if [ "$smoke" = 1 ]; then
  keys=1M churn_keys=500k churn_window=200k churn_requests=200 duration=1s single=1s
  redis_requests=2000 rounds=1
else
  keys=100M churn_keys=50M churn_window=20M churn_requests=20000 duration=10s single=10s
  redis_requests=100000 rounds=${ROUNDS:-3}
fi
# Pinning needs two CPUs; with one (or --no-pin) nothing is pinned.
if [ "$pin" = 1 ] && [ "$(nproc)" -ge 2 ]; then
  server_pin=(taskset -c 0) client_pin=(taskset -c 1) bench_pin=(--pin-cpu=1)
  pinning="server on CPU0, client on CPU1"
else
  server_pin=() client_pin=() bench_pin=()
  pinning="not pinned"
fi

port=$(free_port)
redis_port=$(free_port)
target=127.0.0.1:$port
data=$(mktemp -d)
# The socket in a directory of its own (short: sun_path holds 107 bytes).
sockdir=$(mktemp -d /tmp/cuckood-bench.XXXXXX)
socket=unix://$sockdir/cuckood.sock
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  rm -rf "$data" "$sockdir"
}
trap cleanup EXIT

"${server_pin[@]}" "$bin/server/cuckood" --listen="$target,$socket" --data-dir="$data" \
  --admin-listen=127.0.0.1:0 >"$out/cuckood.log" 2>&1 &
server=$!
pids+=("$server")
"${server_pin[@]}" redis-server --port "$redis_port" --bind 127.0.0.1 --save '' --appendonly no \
  --daemonize no >"$out/redis-server.log" 2>&1 &
pids+=($!)
wait_for_cuckood_and_redis "$out/cuckood.log" "$redis_port"
redis-cli -p "$redis_port" set key 1 >/dev/null
echo "server_bench: $pinning; $(nproc) CPUs; cuckood on $target and $socket"

bench() {  # bench NAME TARGET ARGS...: one cuckoo-bench run, report to NAME.json
  local name=$1 to=$2
  shift 2
  echo "== $name: cuckoo-bench --target=$to $*"
  "$bin/client/cuckoo-bench" "${bench_pin[@]}" --target="$to" --json="$out/$name.json" "$@" |
    grep -E "^(populate|  (lookup|insert|delete|total)|result)" || true
}

# "bench": 10^8 keys filling a 10^8-capacity filter to ~95% load (the
# populate phase is the insert rate into a filling filter), then lookups.
bench lookup "$target" --filter=bench --create="$keys" --populate --keyspace="$keys" \
  --mix=lookup:100 --duration="$duration"
# "churn": inserts and deletes alone, on a window of 20 M keys in a filter
# holding 50 M of its 10^8 capacity (--requests: the window is used once).
bench insert "$target" --filter=churn --create="$keys" --populate --keyspace="$churn_keys" \
  --mix=insert:100 --churn="$churn_window" --warmup=0 --requests="$churn_requests"
bench delete "$target" --filter=churn --keyspace="$churn_keys" --mix=delete:100 \
  --churn="$churn_window" --warmup=0 --requests="$churn_requests"

# Single keys, one request at a time, alternating: TCP, the socket, Redis.
single=(--filter=bench --keyspace="$keys" --mix=lookup:100 --duration="$single" --batch=1
        --depth=1 --connections=1)
for round in $(seq "$rounds"); do
  bench "single-tcp-$round" "$target" "${single[@]}"
  bench "single-unix-$round" "$socket" "${single[@]}"
  echo "== redis-exists-$round: redis-benchmark -c 1 -P 1 -n $redis_requests EXISTS key"
  "${client_pin[@]}" redis-benchmark -h 127.0.0.1 -p "$redis_port" -c 1 -P 1 \
    -n "$redis_requests" --csv EXISTS key >"$out/redis-exists-$round.csv"
done

rss_kib=$(awk '/^VmRSS/ {print $2}' "/proc/$server/status")
hwm_kib=$(awk '/^VmHWM/ {print $2}' "/proc/$server/status")
tables=$("$bin/client/cuckooctl" --target="$target" --format=json server-info |
  /usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin)["memory_used_bytes"])')

/usr/bin/python3 - "$out" "$rss_kib" "$hwm_kib" "$tables" "$rounds" "$pinning" "$keys" <<'PY'
import csv, json, sys
out, rss_kib, hwm_kib, tables = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
rounds, pinning, keys = int(sys.argv[5]), sys.argv[6], sys.argv[7]
def load(name):
    with open(f"{out}/{name}.json") as f:
        return json.load(f)
def op(report, name):
    return report["run"]["ops"][name]
def median(xs):
    xs = sorted(xs)
    n = len(xs)
    return xs[n // 2] if n % 2 else (xs[n // 2 - 1] + xs[n // 2]) / 2
lookup, insert, delete = load("lookup"), load("insert"), load("delete")
rows = [
    (f"populate (insert 0 -> {keys} keys, 95% load)", lookup["populate"]["keys_per_s"] / 1e6,
     "M keys/s"),
    ("batched lookup", op(lookup, "lookup")["keys_per_s"] / 1e6, "M keys/s"),
    ("batched insert (50% -> 69% load)", op(insert, "insert")["keys_per_s"] / 1e6, "M keys/s"),
    ("batched delete", op(delete, "delete")["keys_per_s"] / 1e6, "M keys/s"),
    ("server RSS", rss_kib / 1024, "MiB"),
    ("table bytes (both filters)", tables / 2**20, "MiB"),
    ("RSS limit: 1.1 x tables + 64 MiB", 1.1 * tables / 2**20 + 64, "MiB"),
]
print(f"\n== summary ({pinning})")
for name, value, unit in rows:
    print(f"{name:44s} {value:10.2f} {unit}")
print(f"{'peak RSS':44s} {hwm_kib / 1024:10.2f} MiB")

# Single key, depth 1, one connection: p50 / p99 in us and requests/s, per
# round, then the median of the rounds [min-max].
single = {"tcp": [], "unix": [], "redis": []}
for i in range(1, rounds + 1):
    for kind in ("tcp", "unix"):
        r = load(f"single-{kind}-{i}")
        l = op(r, "lookup")
        single[kind].append((l["latency_us"]["p50"], l["latency_us"]["p99"], l["requests_per_s"], r))
    with open(f"{out}/redis-exists-{i}.csv") as f:
        row = list(csv.DictReader(f))[0]
    single["redis"].append((float(row["p50_latency_ms"]) * 1000, float(row["p99_latency_ms"]) * 1000,
                            float(row["rps"]), None))
names = {"tcp": "cuckood Lookup, TCP loopback", "unix": "cuckood Lookup, Unix socket",
         "redis": "redis-server EXISTS (the floor)"}
print(f"\n== single key, depth 1, 1 connection, {rounds} round{'s' if rounds > 1 else ''} "
      f"(median [min-max])")
print(f"{'':34s} {'p50 us':>18s} {'p99 us':>18s} {'requests/s':>22s}")
def cell(xs, fmt):
    m = median(xs)
    if len(xs) == 1:
        return format(m, fmt)
    return f"{format(m, fmt)} [{format(min(xs), fmt)}-{format(max(xs), fmt)}]"
for kind in ("tcp", "unix", "redis"):
    v = single[kind]
    print(f"{names[kind]:34s} {cell([x[0] for x in v], '.0f'):>18s} "
          f"{cell([x[1] for x in v], '.0f'):>18s} {cell([x[2] for x in v], '.0f'):>22s}")
for i in range(rounds):
    print(f"  round {i + 1}: " + ", ".join(
        f"{kind} {single[kind][i][0]:.0f}/{single[kind][i][1]:.0f} us {single[kind][i][2]:.0f}/s"
        for kind in ("tcp", "unix", "redis")))

failed = [name for name, r in [("lookup", lookup), ("insert", insert), ("delete", delete)] +
          [(f"single-{k}-{i + 1}", single[k][i][3]) for k in ("tcp", "unix") for i in range(rounds)]
          if not r.get("ok", False)]
for name in failed:
    print(f"run {name} reported errors or false negatives: see {out}/{name}.json")
sys.exit(1 if failed else 0)
PY
