#!/usr/bin/env bash
# What replication costs, measured side by side in one run, on this machine:
#   - batched inserts (1000 16-byte keys per request, 8 in flight on each of
#     3 connections; cuckoo-bench's populate phase of KEYS keys into a 10^8-key
#     filter) into a single node with --durability=sync, and into a cluster of
#     3 replicas on a 3-node nats-server JetStream cluster (R=3 file stream),
#     the connections spread over the replicas;
#   - batched lookups (1000 keys, 8 in flight, 3 connections, 10 s) against
#     one replica, and spread over the 3;
#   - the time from kill -9 of a replica to its restart serving again (its
#     /readyz 200), and the error window a retrying client (cuckooctl, its
#     default 30 s retry budget) sees while the NATS stream leader is killed.
# Alternating single node / cluster, ROUNDS rounds. Everything runs on
# loopback and is stopped at the end.
#
#   bash bench/cluster_bench.sh [OUT_DIR] [ROUNDS] [KEYS]
#       (default build/release/cluster_bench, 2, 10M)
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/bench_lib.sh
out=${1:-build/release/cluster_bench}
rounds=${2:-2}
keys=${3:-10M}
mkdir -p "$out"
bin=${CUCKOO_BENCH_BIN:-build/release}
[ -x "$bin/server/cuckood" ] && [ -x "$bin/client/cuckoo-bench" ] && [ -x "$bin/client/cuckooctl" ] ||
  build_release cuckood cuckoo-bench cuckooctl
py=/usr/bin/python3
nats=$(command -v nats-server || echo /usr/sbin/nats-server)
work=$(mktemp -d -p "${TMPDIR:-/tmp}")
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT
summary="$out/summary.txt"
: >"$summary"

wait_ready() {  # wait_ready ADMIN_PORT
  for _ in $(seq 600); do
    [ "$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$1/readyz")" = 200 ] && return 0
    sleep 0.1
  done
  echo "cluster_bench: 127.0.0.1:$1 never became ready" >&2
  return 1
}

# start_nats ROUND: three JetStream servers; sets nats_urls, nats_pids, monitor ports.
start_nats() {
  local r=$1 routes="" i
  nats_client=() nats_route=() nats_mon=() nats_pids=()
  for i in 0 1 2; do
    nats_client[$i]=$(free_port) nats_route[$i]=$(free_port) nats_mon[$i]=$(free_port)
    routes+="nats-route://127.0.0.1:${nats_route[$i]},"
  done
  for i in 0 1 2; do
    cat >"$work/n$r-$i.conf" <<EOF
server_name: n$i
listen: 127.0.0.1:${nats_client[$i]}
http: 127.0.0.1:${nats_mon[$i]}
jetstream { store_dir: "$work/js$r-$i" }
cluster { name: bench, listen: 127.0.0.1:${nats_route[$i]}, routes: [${routes%,}] }
EOF
    start_nats_server "$r" "$i"
  done
  nats_urls="nats://127.0.0.1:${nats_client[0]},nats://127.0.0.1:${nats_client[1]},nats://127.0.0.1:${nats_client[2]}"
}
start_nats_server() {  # start_nats_server ROUND I
  "$nats" -c "$work/n$1-$2.conf" >>"$out/nats-$1-$2.log" 2>&1 &
  nats_pids[$2]=$!
  pids+=($!)
}

# start_replica ROUND I: cuckood I of the cluster; sets rep_port[I], rep_admin[I].
start_replica() {
  local r=$1 i=$2
  rep_port[$i]=${rep_port[$i]:-$(free_port)}
  rep_admin[$i]=${rep_admin[$i]:-$(free_port)}
  "$bin/server/cuckood" --listen=127.0.0.1:${rep_port[$i]} --admin-listen=127.0.0.1:${rep_admin[$i]} \
    --data-dir="$work/r$r-$i" --nats="$nats_urls" --nats-stream=BENCH --replica-id=r$i \
    --snapshot-interval=0 >>"$out/cuckood-$r-$i.log" 2>&1 &
  rep_pid[$i]=$!
  pids+=($!)
}

bench() {  # bench NAME TARGETS ARGS...
  local name=$1 targets=$2
  shift 2
  "$bin/client/cuckoo-bench" --target="$targets" --filter=b --connections=3 --depth=8 \
    --json="$out/$name.json" "$@" >"$out/$name.txt"
}
keys_per_s() {  # keys_per_s JSON PHASE: keys/s and p99 latency (us)
  $py -c "import json,sys; p=json.load(open('$1'))['$2']; p=p.get('total', p); print(f\"{p['keys_per_s']:.0f} {p['latency_us']['p99']:.0f}\")"
}

for round in $(seq "$rounds"); do
  echo "== round $round: single node, --durability=sync"
  port=$(free_port) admin=$(free_port)
  "$bin/server/cuckood" --listen=127.0.0.1:$port --admin-listen=127.0.0.1:$admin \
    --data-dir="$work/single-$round" --snapshot-interval=0 >"$out/single-$round.log" 2>&1 &
  single=$!
  pids+=($single)
  wait_ready "$admin"
  bench "single-insert-$round" "127.0.0.1:$port" --create=100M --populate --keyspace="$keys" \
    --mix=lookup:100 --requests=1 --warmup=0
  echo "single insert $round $(keys_per_s "$out/single-insert-$round.json" populate)" >>"$summary"
  kill -TERM $single
  wait $single || true

  echo "== round $round: 3 replicas on a 3-node JetStream cluster"
  start_nats "$round"
  rep_port=() rep_admin=() rep_pid=()
  for i in 0 1 2; do start_replica "$round" $i; done
  for i in 0 1 2; do wait_ready "${rep_admin[$i]}"; done
  all="127.0.0.1:${rep_port[0]},127.0.0.1:${rep_port[1]},127.0.0.1:${rep_port[2]}"
  "$bin/client/cuckooctl" --target="127.0.0.1:${rep_port[0]}" create b --capacity=100M >/dev/null
  for i in 0 1 2; do
    until "$bin/client/cuckooctl" --target="127.0.0.1:${rep_port[$i]}" --retry-timeout=0 info b \
      >/dev/null 2>&1; do sleep 0.1; done
  done
  bench "cluster-insert-$round" "$all" --populate --keyspace="$keys" --mix=lookup:100 \
    --requests=1 --warmup=0
  echo "cluster insert $round $(keys_per_s "$out/cluster-insert-$round.json" populate)" >>"$summary"
  last=$("$bin/client/cuckooctl" --target="127.0.0.1:${rep_port[0]}" --format=json server-info |
    $py -c 'import json,sys; print(json.load(sys.stdin)["applied_log_position"])')
  for i in 0 1 2; do wait_ready "${rep_admin[$i]}"; done
  sleep 2  # Every replica has applied the populate (ready: lag <= 1000 entries).
  bench "one-replica-lookup-$round" "127.0.0.1:${rep_port[1]}" --keyspace="$keys" \
    --mix=lookup:100 --duration=10s
  echo "lookup one $round $(keys_per_s "$out/one-replica-lookup-$round.json" run)" >>"$summary"
  bench "three-replica-lookup-$round" "$all" --keyspace="$keys" --mix=lookup:100 --duration=10s
  echo "lookup three $round $(keys_per_s "$out/three-replica-lookup-$round.json" run)" >>"$summary"

  # kill -9 of a replica: until it serves again.
  kill -9 "${rep_pid[2]}"
  wait "${rep_pid[2]}" 2>/dev/null || true
  t0=$(date +%s.%N)
  start_replica "$round" 2
  wait_ready "${rep_admin[2]}"
  t1=$(date +%s.%N)
  echo "restart replica $round $($py -c "print(f'{$t1 - $t0:.2f}')") s (log position $last)" >>"$summary"

  # kill -9 of the stream leader under a retrying client: each insert's time.
  leader=$(for i in 0 1 2; do curl -s "http://127.0.0.1:${nats_mon[$i]}/jsz?streams=true"; done |
    $py -c 'import sys,re; m=re.search(r"\"name\": \"BENCH\".*?\"leader\": \"n(\d)\"", sys.stdin.read(), re.S); print(m.group(1) if m else 0)')
  (
    for j in $(seq 80); do
      s=$(date +%s.%N)
      if "$bin/client/cuckooctl" --target="$all" insert b "failover-$round-$j" --quiet >/dev/null 2>&1; then
        r=ok
      else
        r=failed
      fi
      echo "$s $(date +%s.%N) $r"
      sleep 0.1
    done
  ) >"$out/failover-$round.txt" &
  writer=$!
  sleep 1
  kill -9 "${nats_pids[$leader]}"
  sleep 3
  start_nats_server "$round" "$leader"
  wait $writer
  $py - "$out/failover-$round.txt" "$round" >>"$summary" <<'PY'
import sys
rows = [l.split() for l in open(sys.argv[1]) if l.strip()]
slowest = max(float(e) - float(s) for s, e, _ in rows)
failed = sum(1 for *_, r in rows if r != "ok")
print(f"failover {sys.argv[2]} {len(rows)} inserts, {failed} failed, slowest {slowest:.2f} s")
PY
  for p in "${rep_pid[@]}" "${nats_pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done
  sleep 1
done

cat "$summary"
$py - "$summary" <<'PY'
import sys
rows = [l.split() for l in open(sys.argv[1]) if l.strip()]
v = {}
for r in rows:
    if r[0] in ("single", "cluster", "lookup"):
        v[(r[0], r[1], r[2])] = float(r[3])
for rnd in sorted({r[2] for r in rows if r[0] == "single"}):
    s, c = v.get(("single", "insert", rnd)), v.get(("cluster", "insert", rnd))
    one, three = v.get(("lookup", "one", rnd)), v.get(("lookup", "three", rnd))
    if s and c:
        print(f"round {rnd}: cluster insert / single sync = {c / s:.2f} ({c/1e6:.2f} vs {s/1e6:.2f} M keys/s)")
    if one and three:
        print(f"round {rnd}: lookups over 3 replicas / 1 replica = {three / one:.2f} ({three/1e6:.2f} vs {one/1e6:.2f} M keys/s)")
PY
