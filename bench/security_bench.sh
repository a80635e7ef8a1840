#!/usr/bin/env bash
# The security issue's targets, measured side by side in one run: the same
# cuckood build twice, plain and with TLS + an access token
# (--tls-cert/--tls-key, --auth-tokens), loaded in turn by cuckoo-bench
# (client on the same box):
#   - batched lookups: 1000 16-byte keys per request, 8 in flight on each of
#     2 connections; target: TLS + token >= 0.85 x plain;
#   - single-key lookups: 1 key per request, 1 in flight, 1 connection;
#     target: p50 latency with TLS + token <= 1.2 x plain.
# Each pair runs ROUNDS times (default 3), alternating which server goes
# first, so that drift of a shared machine hits both alike; the ratios are
# of the medians.
#
#   bash bench/security_bench.sh [OUT_DIR] [ROUNDS] [DURATION]
#     (defaults build/release/security_bench, 3, 8s)
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-build/release/security_bench}
rounds=${2:-3}
duration=${3:-8s}
mkdir -p "$out"
bin=build/release
[ -x "$bin/server/cuckood" ] && [ -x "$bin/client/cuckoo-bench" ] && [ -x "$bin/client/cuckooctl" ] ||
  bash scripts/build.sh release cuckood cuckoo-bench cuckooctl >/dev/null

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

free_port() { /usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
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
start plain
plain_target=127.0.0.1:$port
start secure --tls-cert="$work/tls.crt" --tls-key="$work/tls.key" --auth-tokens="$work/tokens"
secure_target=127.0.0.1:$port
secure_flags=(--ca="$work/ca.crt" --token="$token")

bench() {  # bench NAME TARGET FLAGS... -- ARGS...: one run, report to NAME.json
  local name=$1 target=$2
  shift 2
  local flags=()
  while [ "$1" != -- ]; do flags+=("$1"); shift; done
  shift
  "$bin/client/cuckoo-bench" --target="$target" "${flags[@]}" --json="$out/$name.json" "$@" \
    >"$out/$name.txt"
}

echo "== populating 1M keys in each server"
bench populate-plain "$plain_target" -- --filter=b --create=2M --populate --keyspace=1M \
  --mix=lookup:100 --requests=1 --warmup=0
bench populate-secure "$secure_target" "${secure_flags[@]}" -- --filter=b --create=2M \
  --populate --keyspace=1M --mix=lookup:100 --requests=1 --warmup=0

batched=(--filter=b --keyspace=1M --mix=lookup:100 --duration="$duration" --warmup=1s)
single=(--filter=b --keyspace=1M --mix=lookup:100 --duration="$duration" --warmup=1s --batch=1
  --depth=1 --connections=1 --threads=1)
for r in $(seq "$rounds"); do
  echo "== round $r of $rounds"
  order=(plain secure)
  [ $((r % 2)) -eq 0 ] && order=(secure plain)
  for which in "${order[@]}"; do
    if [ "$which" = plain ]; then
      bench "batched-plain-$r" "$plain_target" -- "${batched[@]}"
      bench "single-plain-$r" "$plain_target" -- "${single[@]}"
    else
      bench "batched-secure-$r" "$secure_target" "${secure_flags[@]}" -- "${batched[@]}"
      bench "single-secure-$r" "$secure_target" "${secure_flags[@]}" -- "${single[@]}"
    fi
  done
done

/usr/bin/python3 - "$out" "$rounds" <<'PY'
import json, statistics, sys
out, rounds = sys.argv[1], int(sys.argv[2])
def load(name):
    with open(f"{out}/{name}.json") as f:
        return json.load(f)
def lookup(report):
    return report["run"]["ops"]["lookup"]
rows = {}
for kind in ("batched", "single"):
    for which in ("plain", "secure"):
        ops = [lookup(load(f"{kind}-{which}-{r}")) for r in range(1, rounds + 1)]
        rows[(kind, which)] = ops
def med(kind, which, field):
    return statistics.median(op[field] for op in rows[(kind, which)])
kps_p, kps_s = med("batched", "plain", "keys_per_s"), med("batched", "secure", "keys_per_s")
def lat(kind, which, q):
    return statistics.median(op["latency_us"][q] for op in rows[(kind, which)])
p50_p, p50_s = lat("single", "plain", "p50"), lat("single", "secure", "p50")
p99_p, p99_s = lat("single", "plain", "p99"), lat("single", "secure", "p99")
print(f"batched lookups (keys/s, median of {rounds}): plain {kps_p/1e6:.2f} M, TLS+token {kps_s/1e6:.2f} M"
      f" -> ratio {kps_s/kps_p:.3f} (target >= 0.85)")
print(f"single-key lookups p50 (us): plain {p50_p:.1f}, TLS+token {p50_s:.1f}"
      f" -> ratio {p50_s/p50_p:.3f} (target <= 1.2); p99 {p99_p:.1f} vs {p99_s:.1f}")
for kind in ("batched", "single"):
    for which in ("plain", "secure"):
        if kind == "batched":
            vals = [op["keys_per_s"] for op in rows[(kind, which)]]
            field = "keys/s"
        else:
            vals = [op["latency_us"]["p50"] for op in rows[(kind, which)]]
            field = "p50 us"
        print(f"  {kind:7} {which:6} {field}: " + ", ".join(f"{v:.4g}" for v in vals))
PY
