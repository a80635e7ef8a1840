#!/usr/bin/env bash
# The Redis port's targets (issue 17) in one run, on this machine, with
# Debian's redis-benchmark as the client: the server pinned to CPU0, the
# client to CPU1 (taskset), as in the issue's RedisBloom figures.
#
#   bash bench/redis_bench.sh [--smoke] [--reads | --writes] [OUT_DIR]
#                                         (default OUT_DIR build/release/redis_bench)
#
# Reads (--reads alone):
# 1. Depth 1 (-c 1 -P 1): plain `EXISTS key:N` on Debian's redis-server
#    against `CF.EXISTS f key:N` on cuckood's Redis port (keys preloaded),
#    three alternating rounds; p50/p99 latency and requests/s.
# 2. Pipelined `CF.MEXISTS f key:N ... (1000 keys)`, -P 8 -c 2: keys/s.
#    Then, alternating, CF.MEXISTS x1000 from bench/resp_load (see 3.) on a
#    growing filter `grow` (what CF.RESERVE makes by default, not grown) and
#    on a fixed one with the same keys (`fixed`, CF.RESERVE ... EXPANSION 0),
#    at 10^6 keys and at 10^7 (grow7, fixed7): the "growing >= 0.9 x fixed"
#    target of issue 30.
# 3. The gRPC batched lookup of cuckoo-bench (1000 keys a request, 8 in
#    flight on each of 2 connections) on the same cuckood: keys/s, for the
#    "MEXISTS >= 0.8 x gRPC" target; then CF.MEXISTS x1000 of the same keys
#    on the same filter from bench/resp_load, which loads the Redis port as
#    cuckoo-bench loads gRPC (a window of 8 per connection, a request sent as
#    each reply arrives, keys made without a CPU's worth of formatting):
#    redis-benchmark takes its whole CPU at about 17,000 such commands/s.
# Writes (--writes alone; cuckood with --durability=sync), issue 30 item 7:
# 4. Three alternating rounds, each into fresh 10^8-key filters: Redis-port
#    `CF.INSERT w NOCREATE ITEMS key:N ... (1000 keys)`, -P 8 -c 2, 4 * 10^7
#    items; cuckoo-bench's populate of as many 16-byte keys, 1000 a request,
#    8 in flight on each of 2 connections (the gRPC batched insert) on the
#    same cuckood; and a fresh Debian redis-server with appendonly yes,
#    appendfsync always under `SADD s key:N ... (1000 members)`, -P 8 -c 2,
#    10^7 members (Redis holds a set in memory: 4 * 10^7 would take GBs).
#    The CF.INSERT load again from bench/resp_load (cuckoo-bench's keys and
#    window: redis-benchmark's -P sends 8 and waits for all 8 replies, so its
#    connections sit idle through each group's fdatasync). Items/s and p99
#    per request, and the log's fdatasyncs per CF.INSERT (cuckood's /metrics).
#    And the resp_load load with each CF.INSERT in MULTI ... EXEC (--exec):
#    what an EXEC's write-ahead log transaction costs (issue 33).
# 5. `CF.ADD a key:N` at depth 1 (-c 1 -P 1) and 16 (-c 1 -P 16): requests/s
#    and fdatasyncs per CF.ADD.
# Then a table. Each redis-benchmark report is OUT_DIR/<phase>.csv. About
# four minutes; --smoke runs every phase for a second or so (for CI).
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/bench_lib.sh
smoke=0 reads=1 writes=1
while [ $# -gt 0 ]; do
  case $1 in
    --smoke) smoke=1 ;;
    --reads) writes=0 ;;
    --writes) reads=0 ;;
    -*) echo "redis_bench: unknown flag $1" >&2; exit 2 ;;
    *) break ;;
  esac
  shift
done
out=${1:-build/release/redis_bench}
mkdir -p "$out"
bin=${CUCKOO_BENCH_BIN:-build/release}
[ -x "$bin/server/cuckood" ] && [ -x "$bin/client/cuckoo-bench" ] && [ -x "$bin/client/cuckooctl" ] &&
  [ -x "$bin/bench/resp_load" ] ||
  build_release cuckood cuckoo-bench cuckooctl resp_load
for tool in redis-server redis-benchmark redis-cli taskset; do
  command -v "$tool" >/dev/null || { echo "redis_bench: $tool is missing (apt-get install redis-server redis-tools util-linux)" >&2; exit 2; }
done

if [ "$smoke" = 1 ]; then
  requests=2000 mexists_requests=200 keys=20000 big_keys=0 grpc_duration=1s rounds=1
  write_items=200000 redis_write_items=100000 write_rounds=1 add_requests=200
else
  requests=100000 mexists_requests=20000 keys=1000000 big_keys=10000000 grpc_duration=10s rounds=3
  write_items=40000000 redis_write_items=10000000 write_rounds=3 add_requests=5000
fi
# Pinning needs two CPUs; with one, both share it (the figures then mean less).
if [ "$(nproc)" -ge 2 ]; then server_cpu=0 client_cpu=1; else server_cpu=0 client_cpu=0; fi

redis_port=$(free_port)
grpc_port=$(free_port)
resp_port=$(free_port)
admin_port=$(free_port)
data=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  rm -rf "$data"
}
trap cleanup EXIT

taskset -c "$server_cpu" redis-server --port "$redis_port" --bind 127.0.0.1 --save '' \
  --appendonly no --daemonize no >"$out/redis-server.log" 2>&1 &
pids+=($!)
taskset -c "$server_cpu" "$bin/server/cuckood" --listen="127.0.0.1:$grpc_port" \
  --redis-listen="127.0.0.1:$resp_port" --data-dir="$data/cuckood" --durability=sync \
  --snapshot-interval=0 --admin-listen="127.0.0.1:$admin_port" >"$out/cuckood.log" 2>&1 &
pids+=($!)
wait_for_cuckood_and_redis "$out/cuckood.log" "$redis_port"

bench() {  # bench NAME PORT ARGS...: one redis-benchmark run, its CSV to NAME.csv
  local name=$1 port=$2
  shift 2
  taskset -c "$client_cpu" redis-benchmark -h 127.0.0.1 -p "$port" --csv "$@" >"$out/$name.csv"
}

if [ "$reads" = 1 ]; then

# preload NAME N [RESERVE ARGS...]: a filter made by CF.RESERVE NAME N ARGS,
# preloaded with redis-benchmark's key names (key:%012d, what __rand_int__
# becomes with -r) 0..N-1.
preload() {
/usr/bin/python3 - "$resp_port" "$@" <<'PY'
import socket, sys
port, name, n, extra = int(sys.argv[1]), sys.argv[2], int(sys.argv[3]), sys.argv[4:]
s = socket.create_connection(("127.0.0.1", port))
f = s.makefile("rb")
def command(*args):
    out = [b"*%d\r\n" % len(args)]
    for a in args:
        a = a if isinstance(a, bytes) else str(a).encode()
        out.append(b"$%d\r\n%s\r\n" % (len(a), a))
    s.sendall(b"".join(out))
def reply():
    line = f.readline()
    if line[:1] == b"*":
        return [reply() for _ in range(int(line[1:]))]
    if line[:1] == b"-":
        sys.exit("preload: " + line.decode().strip())
    return line.strip()
command("CF.RESERVE", name, n, *extra)
reply()
batch = 10000
sent = 0
for start in range(0, n, batch):
    command("CF.INSERT", name, "ITEMS", *[b"key:%012d" % i for i in range(start, min(n, start + batch))])
    sent += 1
    if sent >= 8:  # a few in flight
        r = reply(); sent -= 1
        assert all(x == b":1" for x in r), "preload: an item was not inserted"
while sent:
    reply(); sent -= 1
PY
}
preload f "$keys"
# grow: what CF.RESERVE makes by default, a growing filter (EXPANSION 2, as
# RedisBloom), not grown; fixed: the same keys in a fixed one (EXPANSION 0);
# grow7, fixed7: the same at 10^7 keys (where the growing one has 256 shards).
# Loaded by resp_load with cuckoo-bench's keys.
sizes=("$keys")
[ "$smoke" = 1 ] || sizes+=("$big_keys")
for n in "${sizes[@]}"; do
  suffix=""
  [ "$n" = "$keys" ] || suffix=7
  redis-cli -p "$resp_port" CF.RESERVE "grow$suffix" "$n" >/dev/null
  redis-cli -p "$resp_port" CF.RESERVE "fixed$suffix" "$n" EXPANSION 0 >/dev/null
  for kind in grow fixed; do  # 90% full, so that no shard of grow grows
    "$bin/bench/resp_load" --port="$resp_port" --mode=insert --filter="$kind$suffix" --keys="$((n * 9 / 10))" \
      >"$out/preload-$kind$suffix.log" || { cat "$out/preload-$kind$suffix.log" >&2; exit 1; }
  done
  # Not grown: one generation (cuckooctl info lists a line for each).
  [ "$("$bin/client/cuckooctl" --target="127.0.0.1:$grpc_port" info "grow$suffix" | grep -c '^generation [0-9]')" -le 1 ] ||
    { echo "redis_bench: filter grow$suffix grew while loaded" >&2; exit 1; }
done

echo "== depth 1: EXISTS (redis-server) vs CF.EXISTS (cuckood), $requests requests, $rounds rounds"
for round in $(seq "$rounds"); do
  bench "exists-redis-$round" "$redis_port" -c 1 -P 1 -n "$requests" -r "$keys" EXISTS 'key:__rand_int__'
  bench "exists-cuckood-$round" "$resp_port" -c 1 -P 1 -n "$requests" -r "$keys" CF.EXISTS f 'key:__rand_int__'
done

echo "== pipelined CF.MEXISTS of 1000 keys, -P 8 -c 2, $mexists_requests requests"
mexists=(CF.MEXISTS f)
for _ in $(seq 1000); do mexists+=('key:__rand_int__'); done
bench mexists "$resp_port" -c 2 -P 8 -n "$mexists_requests" -r "$keys" "${mexists[@]}"

echo "== CF.MEXISTS x1000 (resp_load) on a growing filter that has not grown and on a fixed one, same keys, $rounds rounds alternating"
for round in $(seq "$rounds"); do
  for n in "${sizes[@]}"; do
    suffix=""
    [ "$n" = "$keys" ] || suffix=7
    for kind in grow fixed; do
      taskset -c "$client_cpu" "$bin/bench/resp_load" --port="$resp_port" --mode=mexists \
        --filter="$kind$suffix" --keyspace="$((n * 9 / 10))" --requests="$mexists_requests" --expect-present \
        --json="$out/mexists-$kind$suffix-$round.json" >"$out/mexists-$kind$suffix-$round.log" ||
        { cat "$out/mexists-$kind$suffix-$round.log" >&2; exit 1; }
    done
  done
done

echo "== gRPC batched lookup (cuckoo-bench), $grpc_duration"
taskset -c "$client_cpu" "$bin/client/cuckoo-bench" --target="127.0.0.1:$grpc_port" \
  --json="$out/grpc.json" --filter=grpc --create="$keys" --populate --keyspace="$keys" \
  --mix=lookup:100 --duration="$grpc_duration" >"$out/grpc.log" 2>&1 ||
  { cat "$out/grpc.log" >&2; exit 1; }
# The same lookups from resp_load on the same filter: cuckoo-bench's keys
# (present ones, random) and window, CF.MEXISTS x1000.
taskset -c "$client_cpu" "$bin/bench/resp_load" --port="$resp_port" --mode=mexists \
  --filter=grpc --keyspace="$keys" --requests="$mexists_requests" --expect-present \
  --json="$out/mexists-resp-load.json" >"$out/mexists-resp-load.log" ||
  { cat "$out/mexists-resp-load.log" >&2; exit 1; }

/usr/bin/python3 - "$out" "$rounds" "$keys" "$big_keys" <<'PY'
import csv, json, sys
out, rounds, keys, big_keys = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
def row(name):
    with open(f"{out}/{name}.csv") as f:
        r = list(csv.DictReader(f))
    assert len(r) == 1, (name, r)
    return r[0]
def us(r, field):
    return float(r[field]) * 1000
print("\n== summary (server on one CPU, client on another)")
print(f"{'':34s} {'p50 us':>8s} {'p99 us':>8s} {'req/s':>10s}")
ok = True
for i in range(1, rounds + 1):
    for who in ("redis", "cuckood"):
        r = row(f"exists-{who}-{i}")
        label = f"round {i}: " + ("EXISTS (redis-server)" if who == "redis" else "CF.EXISTS (cuckood)")
        print(f"{label:34s} {us(r, 'p50_latency_ms'):8.0f} {us(r, 'p99_latency_ms'):8.0f} {float(r['rps']):10.0f}")
def median(xs):
    xs = sorted(xs)
    return xs[len(xs) // 2]
p50 = {w: median([us(row(f"exists-{w}-{i}"), "p50_latency_ms") for i in range(1, rounds + 1)]) for w in ("redis", "cuckood")}
p99 = {w: median([us(row(f"exists-{w}-{i}"), "p99_latency_ms") for i in range(1, rounds + 1)]) for w in ("redis", "cuckood")}
mex = row("mexists")
mex_keys = float(mex["rps"]) * 1000
with open(f"{out}/grpc.json") as f:
    grpc = json.load(f)
grpc_keys = grpc["run"]["ops"]["lookup"]["keys_per_s"]
print(f"\n{'median p50 / p99, EXISTS (redis)':34s} {p50['redis']:8.0f} {p99['redis']:8.0f}")
print(f"{'median p50 / p99, CF.EXISTS':34s} {p50['cuckood']:8.0f} {p99['cuckood']:8.0f}")
print(f"{'CF.MEXISTS x1000, -P 8 -c 2':34s} {mex_keys / 1e6:8.2f} M keys/s")
print(f"{'gRPC batched lookup':34s} {grpc_keys / 1e6:8.2f} M keys/s")
with open(f"{out}/mexists-resp-load.json") as f:
    rl_keys = json.load(f)["items_per_s"]
print(f"{'CF.MEXISTS x1000, resp_load':34s} {rl_keys / 1e6:8.2f} M keys/s")
print(f"{'MEXISTS / gRPC, resp_load':34s} {rl_keys / grpc_keys:8.2f}   (target >= 0.8)")
print(f"{'MEXISTS / gRPC, redis-benchmark':34s} {mex_keys / grpc_keys:8.2f}   (redis-benchmark takes its CPU)")
print(f"{'MEXISTS / 6.1 M (RedisBloom)':34s} {mex_keys / 6.1e6:8.2f}   (target >= 2)")
print(f"{'CF.EXISTS p50, p99 <= EXISTS':34s} {'yes' if p50['cuckood'] <= p50['redis'] else 'no':>8s} {'yes' if p99['cuckood'] <= p99['redis'] else 'no':>8s}")
print("\nCF.MEXISTS x1000 (resp_load), M keys/s: growing (not grown) / fixed, same keys (target >= 0.9)")
def rate(name):
    with open(f"{out}/{name}.json") as f:
        return json.load(f)["items_per_s"]
for suffix, n in (("", keys), ("7", big_keys)):
    try:
        pairs = [(rate(f"mexists-grow{suffix}-{i}"), rate(f"mexists-fixed{suffix}-{i}"))
                 for i in range(1, rounds + 1)]
    except FileNotFoundError:
        continue
    for i, (g, x) in enumerate(pairs, 1):
        print(f"{f'{n:,} keys, round {i}':34s} {g / 1e6:8.2f} / {x / 1e6:5.2f} = {g / x:4.2f}")
if not grpc.get("ok", False):
    print(f"cuckoo-bench reported errors: see {out}/grpc.json")
    sys.exit(1)
PY
fi
[ "$writes" = 1 ] || exit 0

syncs() {  # the log's fdatasyncs so far (cuckood's /metrics)
  /usr/bin/python3 - "$admin_port" <<'PY'
import sys, urllib.request
text = urllib.request.urlopen(f"http://127.0.0.1:{sys.argv[1]}/metrics").read().decode()
print(next((int(float(l.split()[1])) for l in text.splitlines()
            if l.startswith("cuckood_wal_fdatasync_duration_seconds_count ")), 0))
PY
}
ctl() { "$bin/client/cuckooctl" --target="127.0.0.1:$grpc_port" "$@" >/dev/null; }
# Rounds alternate the three loads; each gets fresh filters (dropped after)
# and a fresh redis-server, so no round writes into another's data.
insert=(CF.INSERT w NOCREATE ITEMS)
sadd=(SADD s)
for _ in $(seq 1000); do insert+=('key:__rand_int__') sadd+=('key:__rand_int__'); done
summary_writes="$out/writes.txt"
: >"$summary_writes"
for round in $(seq "$write_rounds"); do
  echo "== writes, round $round: CF.INSERT x1000 (Redis port), gRPC batched insert, SADD x1000 (redis-server, appendfsync always); -P 8 -c 2"
  ctl create w --capacity=100M
  before=$(syncs)
  # -r 2*10^9 (its most, an int): key:%012d, 16 bytes like cuckoo-bench's keys.
  bench "insert-resp-$round" "$resp_port" -c 2 -P 8 -n "$((write_items / 1000))" -r 2000000000 \
    "${insert[@]}"
  echo "resp-syncs $round $(($(syncs) - before)) $((write_items / 1000))" >>"$summary_writes"
  ctl drop w
  # The same load from resp_load: cuckoo-bench's keys and sliding window.
  ctl create l --capacity=100M
  before=$(syncs)
  taskset -c "$client_cpu" "$bin/bench/resp_load" --port="$resp_port" --mode=insert --filter=l \
    --keys="$write_items" --json="$out/insert-resp-load-$round.json" >"$out/insert-resp-load-$round.log"
  echo "resp-load-syncs $round $(($(syncs) - before)) $((write_items / 1000))" >>"$summary_writes"
  ctl drop l
  # And each CF.INSERT inside MULTI ... EXEC: a write-ahead log transaction
  # each (issue 33), whose records are acknowledged only once it ended.
  ctl create x --capacity=100M
  before=$(syncs)
  taskset -c "$client_cpu" "$bin/bench/resp_load" --port="$resp_port" --mode=insert --filter=x \
    --exec --keys="$write_items" --json="$out/insert-resp-exec-$round.json" >"$out/insert-resp-exec-$round.log"
  echo "resp-exec-syncs $round $(($(syncs) - before)) $((write_items / 1000))" >>"$summary_writes"
  ctl drop x
  taskset -c "$client_cpu" "$bin/client/cuckoo-bench" --target="127.0.0.1:$grpc_port" \
    --json="$out/insert-grpc-$round.json" --filter=g --create=100M --populate \
    --keyspace="$write_items" --mix=lookup:100 --requests=1 --warmup=0 \
    >"$out/insert-grpc-$round.log" 2>&1 || { cat "$out/insert-grpc-$round.log" >&2; exit 1; }
  ctl drop g
  aof_port=$(free_port)
  mkdir -p "$data/redis-aof-$round"
  taskset -c "$server_cpu" redis-server --port "$aof_port" --bind 127.0.0.1 --save '' \
    --appendonly yes --appendfsync always --dir "$data/redis-aof-$round" \
    --daemonize no >"$out/redis-server-aof-$round.log" 2>&1 &
  aof_pid=$!
  pids+=($aof_pid)
  for _ in $(seq 100); do redis-cli -p "$aof_port" ping >/dev/null 2>&1 && break; sleep 0.1; done
  bench "sadd-redis-$round" "$aof_port" -c 2 -P 8 -n "$((redis_write_items / 1000))" \
    -r 2000000000 "${sadd[@]}"
  kill "$aof_pid"
  wait "$aof_pid" 2>/dev/null || true
  rm -rf "$data/redis-aof-$round"
done

echo "== CF.ADD at depth 1 and 16 (-c 1), $add_requests and $((add_requests * 16)) requests"
ctl create a --capacity=100M
for depth in 1 16; do
  before=$(syncs)
  bench "add-depth-$depth" "$resp_port" -c 1 -P "$depth" -n "$((add_requests * depth))" \
    -r 2000000000 CF.ADD a 'key:__rand_int__'
  echo "add-syncs $depth $(($(syncs) - before)) $((add_requests * depth))" >>"$summary_writes"
done
ctl drop a

/usr/bin/python3 - "$out" "$write_rounds" "$summary_writes" <<'PY'
import csv, json, sys
out, rounds, summary = sys.argv[1], int(sys.argv[2]), sys.argv[3]
def row(name):
    with open(f"{out}/{name}.csv") as f:
        r = list(csv.DictReader(f))
    assert len(r) == 1, (name, r)
    return r[0]
counts = {}
for line in open(summary):
    kind, key, syncs, requests = line.split()
    counts[(kind, key)] = int(syncs) / int(requests)
print("\n== writes, --durability=sync (server on one CPU, client on another)")
print(f"{'':48s} {'M items/s':>9s} {'p99 ms':>7s} {'syncs/cmd':>9s}")
ok = True
for i in range(1, rounds + 1):
    resp = row(f"insert-resp-{i}")
    resp_items = float(resp["rps"]) * 1000
    with open(f"{out}/insert-grpc-{i}.json") as f:
        g = json.load(f)
    ok = ok and g.get("ok", False)
    grpc_items = g["populate"]["keys_per_s"]
    sadd = row(f"sadd-redis-{i}")
    print(f"{f'round {i}: CF.INSERT x1000 (Redis port)':48s} {resp_items / 1e6:9.2f} "
          f"{float(resp['p99_latency_ms']):7.1f} {counts[('resp-syncs', str(i))]:9.2f}")
    with open(f"{out}/insert-resp-load-{i}.json") as f:
        rl = json.load(f)
    ok = ok and rl["ok"] and rl["full"] == 0
    print(f"{f'round {i}: CF.INSERT x1000 (Redis port, resp_load)':48s} {rl['items_per_s'] / 1e6:9.2f} "
          f"{rl['p99_us'] / 1e3:7.1f} {counts[('resp-load-syncs', str(i))]:9.2f}")
    with open(f"{out}/insert-resp-exec-{i}.json") as f:
        rx = json.load(f)
    ok = ok and rx["ok"] and rx["full"] == 0
    print(f"{f'round {i}: the same, each in MULTI ... EXEC':48s} {rx['items_per_s'] / 1e6:9.2f} "
          f"{rx['p99_us'] / 1e3:7.1f} {counts[('resp-exec-syncs', str(i))]:9.2f}")
    print(f"{f'round {i}: in EXEC / plain (resp_load)':48s} {rx['items_per_s'] / rl['items_per_s']:9.2f}")
    print(f"{f'round {i}: gRPC batched insert x1000':48s} {grpc_items / 1e6:9.2f} "
          f"{g['populate']['latency_us']['p99'] / 1e3:7.1f}")
    print(f"{f'round {i}: SADD x1000 (redis, appendfsync always)':48s} "
          f"{float(sadd['rps']) * 1000 / 1e6:9.2f} {float(sadd['p99_latency_ms']):7.1f}")
    print(f"{f'round {i}: CF.INSERT / gRPC, resp_load':48s} {rl['items_per_s'] / grpc_items:9.2f}   (target >= 0.8; p99 < 20 ms)")
    print(f"{f'round {i}: CF.INSERT / gRPC, redis-benchmark':48s} {resp_items / grpc_items:9.2f}   (its -P sends 8, then waits for all 8)")
print(f"\n{'':48s} {'k req/s':>9s} {'p99 ms':>7s} {'syncs/cmd':>9s}")
for depth in (1, 16):
    r = row(f"add-depth-{depth}")
    print(f"{f'CF.ADD, depth {depth} (-c 1 -P {depth})':48s} {float(r['rps']) / 1e3:9.1f} "
          f"{float(r['p99_latency_ms']):7.1f} {counts[('add-syncs', str(depth))]:9.3f}")
if not ok:
    print(f"cuckoo-bench or resp_load reported errors: see {out}/insert-grpc-*.json, insert-resp-load-*.json, insert-resp-exec-*.json")
    sys.exit(1)
PY
