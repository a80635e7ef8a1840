#!/usr/bin/env bash
# The security issue's targets, measured side by side in one run: the same
# cuckood build three times, plain, with an access token only
# (--auth-tokens), and with TLS + the token (--tls-cert/--tls-key too),
# loaded in turn by cuckoo-bench (client on the same box):
#   - batched lookups: 1000 16-byte keys per request, 8 in flight on each of
#     2 connections; target: TLS + token >= 0.85 x plain;
#   - single-key lookups: 1 key per request, 1 in flight, 1 connection;
#     target: p50 latency with TLS + token <= 1.2 x plain.
# Each round starts the three servers afresh (one process's speed differs
# from the next one's by up to ~20% here, whatever its flags: placement of
# its threads and tables), populates each, then loads them in a rotating
# order, so that drift of a shared machine hits all alike; ROUNDS (default
# 5) rounds, and the ratios are of the medians. Besides the client's view it reports each server's CPU time per
# million keys (utime + stime from /proc during the run): on this box the
# client's own TLS work competes with the server for the same cores, which a
# client on another machine would not.
#
#   bash bench/security_bench.sh [OUT_DIR] [ROUNDS] [DURATION]
#     (defaults build/release/security_bench, 5, 5s)
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/bench_lib.sh
out=${1:-build/release/security_bench}
rounds=${2:-5}
duration=${3:-5s}
mkdir -p "$out"
bin=${CUCKOO_BENCH_BIN:-build/release}
[ -x "$bin/server/cuckood" ] && [ -x "$bin/client/cuckoo-bench" ] && [ -x "$bin/client/cuckooctl" ] ||
  build_release cuckood cuckoo-bench cuckooctl

work=$(mktemp -d)
pids=()
trap 'for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done; rm -rf "$work"' EXIT

# A throwaway CA and a server certificate for 127.0.0.1 (ECDSA P-256, what
# cert-manager issues by default), and a token with admin on every filter.
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 \
  -subj /CN=bench-ca -keyout "$work/ca.key" -out "$work/ca.crt" 2>/dev/null
openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj /CN=cuckood \
  -keyout "$work/tls.key" -out "$work/tls.csr" 2>/dev/null
printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\n' >"$work/ext"
openssl x509 -req -in "$work/tls.csr" -CA "$work/ca.crt" -CAkey "$work/ca.key" -CAcreateserial \
  -days 2 -extfile "$work/ext" -out "$work/tls.crt" 2>/dev/null
mapfile -t made < <("$bin/client/cuckooctl" hash-token bench --grant='admin:*')
token=${made[0]}
printf '%s\n' "${made[1]}" >"$work/tokens"

start() {  # start NAME ARGS...: a cuckood on a free port; sets $port
  local name=$1
  shift
  port=$(free_port)
  mkdir -p "$work/$name"
  "$bin/server/cuckood" --listen="127.0.0.1:$port" --admin-listen= --data-dir="$work/$name" \
    --snapshot-interval=0 "$@" >"$out/$name.log" 2>&1 &
  pids+=($!)
  for _ in $(seq 100); do grep -q "serving on" "$out/$name.log" && return 0; sleep 0.1; done
  echo "cuckood ($name) did not start:" >&2
  cat "$out/$name.log" >&2
  exit 1
}
secure_flags=(--ca="$work/ca.crt" --token="$token")
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
bench() {  # bench NAME PID TARGET FLAGS... -- ARGS...: one run, report to NAME.json,
  local name=$1 pid=$2 target=$3  # the server's CPU ticks during it to NAME.cpu
  shift 3
  local flags=()
  while [ "$1" != -- ]; do flags+=("$1"); shift; done
  shift
  local before
  before=$(cpu_ticks "$pid")
  "$bin/client/cuckoo-bench" --target="$target" "${flags[@]}" --json="$out/$name.json" "$@" \
    >"$out/$name.txt"
  echo $(($(cpu_ticks "$pid") - before)) >"$out/$name.cpu"
}

batched=(--filter=b --keyspace=1M --mix=lookup:100 --duration="$duration" --warmup=1s)
single=(--filter=b --keyspace=1M --mix=lookup:100 --duration="$duration" --warmup=1s --batch=1
  --depth=1 --connections=1 --threads=1)
servers=(plain token secure)
populate=(--filter=b --create=2M --populate --keyspace=1M --mix=lookup:100 --requests=1 --warmup=0)
for r in $(seq "$rounds"); do
  echo "== round $r of $rounds: three fresh servers, 1M keys each"
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done
  pids=()
  rm -rf "$work/plain" "$work/token" "$work/secure"
  start plain
  plain_target=127.0.0.1:$port
  plain_pid=${pids[-1]}
  start token --auth-tokens="$work/tokens"
  token_target=127.0.0.1:$port
  token_pid=${pids[-1]}
  start secure --tls-cert="$work/tls.crt" --tls-key="$work/tls.key" --auth-tokens="$work/tokens"
  secure_target=127.0.0.1:$port
  secure_pid=${pids[-1]}
  bench "populate-plain-$r" "$plain_pid" "$plain_target" -- "${populate[@]}"
  bench "populate-token-$r" "$token_pid" "$token_target" --token="$token" -- "${populate[@]}"
  bench "populate-secure-$r" "$secure_pid" "$secure_target" "${secure_flags[@]}" -- "${populate[@]}"
  for i in 0 1 2; do
    which=${servers[$(((r + i) % 3))]}
    case $which in
      plain) args=("$plain_pid" "$plain_target") ;;
      token) args=("$token_pid" "$token_target" --token="$token") ;;
      secure) args=("$secure_pid" "$secure_target" "${secure_flags[@]}") ;;
    esac
    bench "batched-$which-$r" "${args[@]}" -- "${batched[@]}"
    bench "single-$which-$r" "${args[@]}" -- "${single[@]}"
  done
done

/usr/bin/python3 - "$out" "$rounds" "$(getconf CLK_TCK)" <<'PY'
import json, statistics, sys
out, rounds, hz = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
servers = ("plain", "token", "secure")
label = {"plain": "plain", "token": "token only", "secure": "TLS + token"}
def run(kind, which, r):
    with open(f"{out}/{kind}-{which}-{r}.json") as f:
        op = json.load(f)["run"]["ops"]["lookup"]
    with open(f"{out}/{kind}-{which}-{r}.cpu") as f:
        cpu_s = int(f.read()) / hz
    op["server_cpu_s_per_mkey"] = cpu_s / (op["keys"] / 1e6) if op["keys"] else float("nan")
    return op
rows = {(k, w): [run(k, w, r) for r in range(1, rounds + 1)]
        for k in ("batched", "single") for w in servers}
def med(kind, which, get):
    return statistics.median(get(op) for op in rows[(kind, which)])
kps = lambda op: op["keys_per_s"]
p50 = lambda op: op["latency_us"]["p50"]
p99 = lambda op: op["latency_us"]["p99"]
cpu = lambda op: op["server_cpu_s_per_mkey"]
print(f"medians of {rounds} rounds; ratios against plain")
print("batched lookups (1000 keys/request, 2 connections x 8 in flight):")
for w in servers:
    print(f"  {label[w]:12} {med('batched', w, kps)/1e6:6.2f} M keys/s"
          f" (ratio {med('batched', w, kps)/med('batched', 'plain', kps):.3f}),"
          f" server CPU {med('batched', w, cpu):.3f} s per M keys"
          f" (ratio {med('batched', w, cpu)/med('batched', 'plain', cpu):.3f})")
print("single-key lookups (1 key/request, 1 in flight):")
for w in servers:
    print(f"  {label[w]:12} p50 {med('single', w, p50):7.1f} us"
          f" (ratio {med('single', w, p50)/med('single', 'plain', p50):.3f}),"
          f" p99 {med('single', w, p99):7.1f} us,"
          f" server CPU {med('single', w, cpu):.1f} s per M keys")
print("targets: batched TLS + token >= 0.85 x plain; single-key p50 TLS + token <= 1.2 x plain")
for k in ("batched", "single"):
    for w in servers:
        vals = [kps(op) / 1e6 if k == "batched" else p50(op) for op in rows[(k, w)]]
        unit = "M keys/s" if k == "batched" else "p50 us"
        print(f"  {k:7} {label[w]:12} {unit}: " + ", ".join(f"{v:.3g}" for v in vals))
PY
