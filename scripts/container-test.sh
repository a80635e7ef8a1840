#!/usr/bin/env bash
# Tests the deployment files (CI runs it as the last step of scripts/test.sh):
#   1. deploy/k8s (the single node) and deploy/k8s/cluster (NATS JetStream +
#      3 cuckood replicas), and the overlays of deploy/examples, which apply
#      every component of deploy/k8s/components (TLS, mTLS, tokens, ...) to
#      them: schema validation of every manifest, as written and as rendered
#      by kustomize, one kustomization at a time, by the project's own
#      validator (scripts/k8s-validate: Kubernetes' schemas from the npm
#      package kubernetes-models, cert-manager's Certificate and Issuer from
#      @kubernetes-models/cert-manager, deploy/monitoring's PodMonitor,
#      ServiceMonitor and PrometheusRule from
#      @kubernetes-models/prometheus-operator, unknown fields too; node >= 18 and npm;
#      its self-test first proves it refuses bad manifests); rendering needs
#      kubectl or kustomize with Components (kustomize >= 3.7): without, it
#      says so and which were not rendered;
#      deploy/k8s/cluster/nats.conf (the NATS ConfigMap), and the NATS
#      configurations with TLS and a user (deploy/k8s/components/nats-tls,
#      deploy/nats-tls; their TLS files made here with openssl) checked by the
#      real nats-server (`nats-server -t`; Debian's nats-server, installed if
#      missing);
#   2. deploy/monitoring/cuckood-rules.yaml, the alerting rules: checked and
#      unit-tested by promtool (Debian's prometheus, installed if missing);
#      the rest of deploy/monitoring by scripts/check-monitoring.py (the
#      PrometheusRule is the rules file's, the monitors match deploy/k8s, the
#      dashboard is valid, every metric used is in a live cuckood's /metrics);
#      deploy/compose.yaml, deploy/compose.cluster.yaml and its NATS TLS
#      override deploy/compose.cluster.nats-tls.yaml: validated against
#      the Compose schema (`docker-compose config`, Debian's docker-compose,
#      installed if missing);
#   3. deploy/examples/k8s-backup's backup and restore scripts, against two
#      cuckoods of the release build (scripts/backup-test.sh);
#   4. the Docker image, with scripts/container-smoke.sh (podman or docker, no
#      registry: it makes the Debian base images itself). It builds
#      the Dockerfile, with the release build's cuckood and cuckooctl
#      (build/release, stripped into build/image/; --build-arg
#      BINARIES=prebuilt: the runtime stage users get, without compiling the
#      server again; CONTAINER_BINARIES=source compiles them in the image as
#      `docker build .` does), and runs the image the way the README does, with TLS and
#      access tokens on (deploy/README.md, TLS and access tokens),
#        run -p 127.0.0.1:P:50051 -p 127.0.0.1:A:9090 -p 127.0.0.1:R:6379
#            -v VOLUME:/var/lib/cuckood
#            -v TLS_DIR:/etc/cuckood/tls:ro -v AUTH_DIR:/etc/cuckood/auth:ro
#            -e CUCKOOD_TLS_CERT=... -e CUCKOOD_TLS_KEY=... -e CUCKOOD_AUTH_TOKENS=...
#            IMAGE
#      (periodic snapshots off, so only the SIGTERM snapshot persists data; a
#      throwaway CA, a server certificate for localhost and 127.0.0.1 and two
#      tokens, made here with the openssl CLI; the image turns the Redis port
#      on, which then serves TLS with the same certificate, published on
#      127.0.0.1 only), then, from the host with
#      build/release/client/cuckooctl --ca=... --token=... and Debian's
#      redis-cli (redis-tools, installed if missing) (the "verify" step
#      below, run by container-smoke.sh while the container runs):
#      - create a filter, insert keys, look them up; /readyz and /metrics on 9090;
#      - no token or an unknown one: UNAUTHENTICATED; a read-only token may
#        look up but not insert (PERMISSION_DENIED); gRPC health needs no
#        token; a plaintext client gets nothing;
#      - the Redis port (EXPOSE 6379, CUCKOOD_REDIS_LISTEN in the image),
#        with redis-cli --tls --pass TOKEN: CF.EXISTS of keys inserted over gRPC
#        is 1, CF.MEXISTS of keys never inserted not all 1; AUTH TOKEN, then
#        CF.ADD of a new item is 1 and CF.EXISTS of it 1, and cuckooctl
#        finds it over gRPC; no token or an unknown one: NOAUTH; the
#        read-only token: CF.EXISTS yes, CF.ADD NOPERM; a plaintext
#        redis-cli gets nothing from it;
#      - the image: cuckood is PID 1 as 10001:10001, no build packages,
#        cuckooctl inside; `cuckood --version` and `cuckooctl --version`
#        there say CMakeLists.txt's version, which is the image's
#        org.opencontainers.image.version label (with revision, source,
#        created and licenses, checked by container-smoke.sh);
#      - SIGTERM (`stop -t 60`): exit code 0 and "final snapshot: 1 filters
#        written" in the log;
#      - a new container on the same volume, hardened as in Kubernetes
#        (--read-only, --cap-drop=ALL, no-new-privileges): every key present
#        (the one added over Redis too), the item count unchanged; SIGTERM
#        again, exit 0;
#      - the first container started again on the volume: keys still present.
#      container-smoke.sh then runs the image's HEALTHCHECK in it (over TLS:
#      the Dockerfile's HEALTHCHECK follows CUCKOOD_TLS_*) and checks that
#      SIGTERM stops it within 3 s.
#
#   scripts/container-test.sh                   # all four
#   scripts/container-test.sh --validate-only   # 1 and 2: no binaries, no image, no engine
#
# Environment: CONTAINER_ENGINE, CONTAINER_SMOKE_CACHE, ... go to
# container-smoke.sh (see its header); CUCKOO_IMAGE is the tag built (default
# localhost/cuckood:ci); CONTAINER_BINARIES is prebuilt (default) or source.
set -euo pipefail
cd "$(dirname "$0")/.."

if [ "${1:-}" = --verify ]; then
  # ---------------------------------------------------------------- verify
  # Run by container-smoke.sh, retried once a second until it exits 0. It
  # sees $SMOKE_ENGINE and $SMOKE_CONTAINER, and from the main part below
  # $CT_STATE, $CT_IMAGE, $CT_GRPC_PORT, $CT_GRPC_PORT2, $CT_ADMIN_PORT,
  # $CT_REDIS_PORT, $CT_VOLUME, $CT_CTL, $CT_SECURE_ARGS (the run arguments
  # for TLS and tokens), $CT_TOKEN (admin:*) and $CT_READER_TOKEN (read:*).
  # Until the server answers, failing just means "not yet". Past that point a
  # failure is final: it is recorded in $CT_STATE/failed (later retries only
  # repeat it) and the smoke container is stopped, so container-smoke.sh stops
  # retrying and prints the container's logs.
  engine=$SMOKE_ENGINE
  smoke=$SMOKE_CONTAINER
  second=$smoke-restarted
  # (podman cannot schedule HEALTHCHECKs without systemd, and says so.)
  no_hc=()
  [ "$engine" = podman ] && no_hc=(--no-healthcheck)
  # Every call over TLS, checked against the throwaway CA (the certificate
  # names 127.0.0.1, the address dialled), with the admin token.
  ca=$CT_STATE/tls/ca.crt
  ctl() { "$CT_CTL" --timeout=10s --ca="$ca" --token="$CT_TOKEN" "$@"; }
  if [ -e "$CT_STATE/failed" ]; then cat "$CT_STATE/failed"; exit 1; fi
  ctl --target="127.0.0.1:$CT_GRPC_PORT" health --quiet --timeout=2s || exit 1

  fail() {
    {
      echo "container-test: FAILED: $*"
      if "$engine" inspect "$second" >/dev/null 2>&1; then
        echo "container-test: logs of $second:"
        "$engine" logs "$second" 2>&1 | tail -n 30
        "$engine" rm -f "$second" >/dev/null 2>&1 || true
      fi
    } | tee "$CT_STATE/failed"
    "$engine" stop -t 10 "$smoke" >/dev/null 2>&1 || true
    exit 1
  }
  say() { echo "container-test: $*"; }
  # wait_serving PORT CONTAINER: until cuckooctl health answers SERVING (60 s).
  wait_serving() {
    local i
    for i in $(seq 60); do
      ctl --target="127.0.0.1:$1" health --quiet --timeout=2s 2>/dev/null && return 0
      [ "$("$engine" inspect -f '{{.State.Running}}' "$2" 2>/dev/null)" = true ] ||
        fail "$2 exited ($("$engine" inspect -f '{{.State.ExitCode}}' "$2" 2>/dev/null)) before serving"
      sleep 1
    done
    fail "$2 not SERVING on 127.0.0.1:$1 after 60 s"
  }
  # stop_sigterm CONTAINER: SIGTERM, as docker stop / Kubernetes; must exit 0
  # after writing the final snapshot of WANT filters.
  stop_sigterm() {
    local code i log=$CT_STATE/$1.log
    "$engine" stop -t 60 "$1" >/dev/null || fail "$engine stop $1"
    code=$("$engine" inspect -f '{{.State.ExitCode}}' "$1")
    [ "$code" = 0 ] || fail "$1 exited $code on SIGTERM, not 0"
    # `podman logs` right after a stop can miss output (containers/podman
    # #18501): read them again before giving up.
    for i in 1 2 3 4 5; do
      "$engine" logs "$1" >"$log" 2>&1 || true
      grep -qF "final snapshot: $2 filters written" "$log" && break
      [ "$i" = 5 ] && fail "no 'final snapshot: $2 filters written' in the log of $1" \
        "($(wc -l <"$log") lines)"
      sleep "$i"
    done
    say "$1: SIGTERM -> final snapshot of $2 filter(s), exit 0"
  }
  # http_get PORT PATH: the body; fails unless the status is 200.
  http_get() {
    if command -v curl >/dev/null; then
      curl -fsS --max-time 5 "http://127.0.0.1:$1$2"
    else
      local resp
      exec 3<>"/dev/tcp/127.0.0.1/$1" || return 1
      printf 'GET %s HTTP/1.0\r\nHost: localhost\r\n\r\n' "$2" >&3
      resp=$(timeout 5 cat <&3) || true
      exec 3<&-
      [[ $resp == "HTTP/1."?" 200 "* ]] || return 1
      printf '%s\n' "${resp#*$'\r\n\r\n'}"
    fi
  }

  keys=$CT_STATE/keys
  seq -f 'key-%06.0f' 1 20000 >"$keys"
  filter=container_test
  grpc=127.0.0.1:$CT_GRPC_PORT

  # 1. The image serves: create, insert, lookup, from the host through -p.
  ctl --target="$grpc" create "$filter" --capacity=100000 --fpr=0.001 >/dev/null ||
    fail "cuckooctl create"
  ctl --target="$grpc" insert "$filter" --file="$keys" --quiet >/dev/null || fail "cuckooctl insert"
  ctl --target="$grpc" lookup "$filter" --file="$keys" --quiet >/dev/null ||
    fail "cuckooctl lookup: not every inserted key present"
  # Keys never inserted: some may be false positives, not all 100.
  seq -f 'absent-%03.0f' 1 100 >"$CT_STATE/absent"
  ctl --target="$grpc" lookup "$filter" --file="$CT_STATE/absent" --quiet >/dev/null &&
    fail "lookup: 100 keys never inserted all present"
  # The first "items" is the filter's (each generation has one too).
  items=$(ctl --target="$grpc" --format=json info "$filter" | grep -o '"items": *"\?[0-9]*' |
    head -n 1 | grep -o '[0-9]*$') ||
    fail "cuckooctl info $filter"
  [ "$items" = 20000 ] || fail "info: $items items, expected 20000"
  say "create/insert/lookup of 20000 keys through 127.0.0.1:$CT_GRPC_PORT -> container port 50051"

  # 1b. Who may call. cuckooctl exits 3 on a server error, with
  # "cuckooctl: CODE: message" on stderr.
  # expect_code CODE WHAT CUCKOOCTL_ARGS...: the call fails with CODE.
  expect_code() {
    local want=$1 what=$2 rc=0
    shift 2
    "$CT_CTL" --timeout=10s --target="$grpc" "$@" >/dev/null 2>"$CT_STATE/stderr" || rc=$?
    if [ "$rc" != 3 ] || ! grep -q "cuckooctl: $want:" "$CT_STATE/stderr"; then
      fail "$what: exit $rc, not 3 with $want: $(head -c 300 "$CT_STATE/stderr")"
    fi
  }
  expect_code UNAUTHENTICATED "list without a token" --ca="$ca" list
  expect_code UNAUTHENTICATED "list with an unknown token" --ca="$ca" \
    --token=ck_not-a-token-of-this-server list
  expect_code PERMISSION_DENIED "insert with a read:* token" --ca="$ca" --token="$CT_READER_TOKEN" \
    insert "$filter" some-key
  "$CT_CTL" --timeout=10s --target="$grpc" --ca="$ca" --token="$CT_READER_TOKEN" \
    lookup "$filter" --quiet key-000001 >/dev/null || fail "lookup with a read:* token"
  # gRPC health stays open (probes carry no token); --tls-server-name: the
  # name checked is localhost, not the address dialled.
  "$CT_CTL" --timeout=10s --target="$grpc" --ca="$ca" --tls-server-name=localhost \
    health --quiet --timeout=2s || fail "health over TLS without a token"
  # A plaintext client (no --tls/--ca) must not get an answer, not even health.
  rc=0
  "$CT_CTL" --timeout=5s --target="$grpc" --token="$CT_TOKEN" list >/dev/null 2>&1 || rc=$?
  [ "$rc" != 0 ] || fail "a plaintext client got an answer from the TLS port"
  rc=0
  "$CT_CTL" --timeout=5s --target="$grpc" health --quiet --timeout=2s >/dev/null 2>&1 || rc=$?
  [ "$rc" != 0 ] || fail "plaintext health got SERVING from the TLS port"
  say "TLS only; no token or an unknown one: UNAUTHENTICATED; read:* token: lookup yes," \
    "insert PERMISSION_DENIED; health open"

  # 1c. The Redis port, the same filters, with Debian's redis-cli. It prints
  # an error reply as "CODE message" on stdout and still exits 0, so the
  # replies are compared, not exit codes.
  # rcli REDIS_CLI_ARGS...: the replies, one a line.
  # TLS, as the gRPC port (the same certificate).
  rcli() {
    timeout 10 redis-cli -h 127.0.0.1 -p "$CT_REDIS_PORT" --tls --cacert "$ca" \
      --no-auth-warning "$@" 2>>"$CT_STATE/redis-cli.stderr"
  }
  # expect_redis WANT WHAT REDIS_CLI_ARGS...: the replies match WANT (an
  # extended regular expression of the whole output, newlines as spaces).
  expect_redis() {
    local want=$1 what=$2 got
    shift 2
    got=$(rcli "$@" | tr -s '\n' ' ') || true
    got=${got% }
    [[ $got =~ ^($want)$ ]] ||
      fail "Redis port, $what: got '$got', not '$want'" \
        "($(tail -n 3 "$CT_STATE/redis-cli.stderr" 2>/dev/null | tr '\n' ' '))"
  }
  # The Redis port opens after the gRPC port: give it 10 s.
  for i in $(seq 10); do
    [ "$(rcli --pass "$CT_TOKEN" PING)" = PONG ] && break
    [ "$i" = 10 ] && fail "no PONG from the Redis port 127.0.0.1:$CT_REDIS_PORT (container port 6379)"
    sleep 1
  done
  expect_redis 1 "CF.EXISTS of a key inserted over gRPC" --pass "$CT_TOKEN" \
    CF.EXISTS "$filter" key-000001
  expect_redis "1 1 1" "CF.MEXISTS of keys inserted over gRPC" --pass "$CT_TOKEN" \
    CF.MEXISTS "$filter" key-000002 key-010000 key-020000
  mapfile -t absent <"$CT_STATE/absent"
  got=$(rcli --pass "$CT_TOKEN" CF.MEXISTS "$filter" "${absent[@]}") || true
  [ "$(grep -c '^[01]$' <<<"$got")" = 100 ] ||
    fail "Redis port, CF.MEXISTS of 100 keys: not 100 integer replies: $(head -c 200 <<<"$got")"
  grep -q '^0$' <<<"$got" || fail "Redis port, CF.MEXISTS: 100 keys never inserted all present"
  # AUTH as a command (what clients send on connect), then a write: it goes
  # through the gRPC service's path, so gRPC sees it (and the restart in 5.
  # finds it: the item count is 20001 from here).
  got=$(printf 'AUTH %s\nCF.ADD %s %s\nCF.EXISTS %s %s\n' "$CT_TOKEN" "$filter" redis-item-1 \
    "$filter" redis-item-1 | rcli | tr -s '\n' ' ') || true
  [ "$got" = "OK 1 1 " ] || fail "Redis port, AUTH then CF.ADD and CF.EXISTS: got '$got', not 'OK 1 1'"
  ctl --target="$grpc" lookup "$filter" --quiet redis-item-1 >/dev/null ||
    fail "an item added over the Redis port (CF.ADD) is not there over gRPC"
  expect_redis "NOAUTH .*" "CF.EXISTS without a token" CF.EXISTS "$filter" key-000001
  expect_redis "NOAUTH .*" "CF.EXISTS with an unknown token" \
    --pass ck_not-a-token-of-this-server CF.EXISTS "$filter" key-000001
  expect_redis 1 "CF.EXISTS with a read:* token" --pass "$CT_READER_TOKEN" \
    CF.EXISTS "$filter" key-000001
  expect_redis "NOPERM .*" "CF.ADD with a read:* token" --pass "$CT_READER_TOKEN" \
    CF.ADD "$filter" reader-item
  # With TLS on, the image's Redis port is TLS only: a plaintext client
  # gets no reply.
  got=$(timeout 10 redis-cli -h 127.0.0.1 -p "$CT_REDIS_PORT" --pass "$CT_TOKEN" \
    --no-auth-warning PING 2>/dev/null) || true
  [ "$got" != PONG ] || fail "a plaintext redis-cli got PONG from the Redis port with TLS on"
  say "Redis port 127.0.0.1:$CT_REDIS_PORT -> container port 6379 (redis-cli --tls):" \
    "CF.EXISTS/CF.MEXISTS of gRPC's keys 1; AUTH + CF.ADD seen by gRPC; no token or an" \
    "unknown one: NOAUTH; read:* token: CF.EXISTS yes, CF.ADD NOPERM; plaintext: nothing"

  # 2. The admin HTTP port (EXPOSE 9090, default --admin-listen).
  http_get "$CT_ADMIN_PORT" /readyz >/dev/null || fail "GET /readyz on 127.0.0.1:$CT_ADMIN_PORT"
  # (Into a file first: `http_get | grep -q` fails under pipefail when grep
  # stops reading early.)
  http_get "$CT_ADMIN_PORT" /metrics >"$CT_STATE/metrics" ||
    fail "GET /metrics on 127.0.0.1:$CT_ADMIN_PORT"
  grep -q '^# TYPE cuckood_' "$CT_STATE/metrics" ||
    fail "GET /metrics on 127.0.0.1:$CT_ADMIN_PORT: no cuckood_ metrics"
  # The Redis port's commands of 1c are counted: CF.EXISTS answered, the
  # read:* token's CF.ADD denied.
  for want in 'cf.exists.*outcome="ok"' 'cf.add".*outcome="denied"'; do
    awk -v want="$want" '/^cuckood_redis_commands_total\{/ && $0 ~ want && $NF > 0 {found = 1}
      END {exit !found}' "$CT_STATE/metrics" ||
      fail "GET /metrics on 127.0.0.1:$CT_ADMIN_PORT: no cuckood_redis_commands_total" \
        "matching $want above 0"
  done
  say "/readyz and /metrics (the Redis port's commands counted) answer through" \
    "127.0.0.1:$CT_ADMIN_PORT -> container port 9090"

  # 3. The image: cuckood is PID 1 (SIGTERM reaches it) as 10001:10001;
  # runtime libraries only; cuckooctl in it.
  pid1=$("$engine" exec "$smoke" cat /proc/1/comm) || fail "$engine exec $smoke"
  [ "$pid1" = cuckood ] || fail "PID 1 in the container is $pid1, not cuckood"
  # shellcheck disable=SC2016  # awk's $2
  ids=$("$engine" exec "$smoke" awk '/^Uid:/ {u = $2} /^Gid:/ {g = $2} END {print u ":" g}' /proc/1/status)
  [ "$ids" = 10001:10001 ] || fail "cuckood runs as $ids, not 10001:10001"
  # shellcheck disable=SC2016  # ${Package} is dpkg-query's, not the shell's
  dev=$("$engine" exec "$smoke" dpkg-query -W -f '${Package}\n' |
    grep -E -- '-dev$|^(gcc|g\+\+|cpp|clang)(-[0-9]+)?$|^(cmake|ninja-build|make|protobuf-compiler.*|python3.*)$' || true)
  [ -z "$dev" ] || fail "build-only packages in the runtime image: ${dev//$'\n'/ }"
  "$engine" exec "$smoke" cuckooctl --ca=/etc/cuckood/tls/ca.crt --tls-server-name=localhost \
    --token="$CT_TOKEN" info "$filter" >/dev/null || fail "cuckooctl inside the image"
  # The binaries' version (CMake's, built in) is the image's label's.
  for bin in cuckood cuckooctl; do
    got=$("$engine" exec "$smoke" "$bin" --version) || fail "$bin --version in the image"
    [ "$got" = "$bin $CT_VERSION" ] ||
      fail "$bin --version in the image says '$got', not '$bin $CT_VERSION' (CMakeLists.txt, the label)"
  done
  say "cuckood is PID 1 as 10001:10001; no build packages; cuckooctl inside;" \
    "both say version $CT_VERSION"

  # 4. SIGTERM: drain, final snapshot, exit 0.
  stop_sigterm "$smoke" 1

  # 5. A new container on the same volume, hardened as in deploy/k8s.
  "$engine" rm -f "$second" >/dev/null 2>&1 || true
  read -r -a secure <<<"$CT_SECURE_ARGS"
  "$engine" run -d --name "$second" "${no_hc[@]}" --read-only --cap-drop=ALL \
    --security-opt=no-new-privileges -p "127.0.0.1:$CT_GRPC_PORT2:50051" \
    -v "$CT_VOLUME:/var/lib/cuckood" -e CUCKOOD_SNAPSHOT_INTERVAL=0 "${secure[@]}" \
    "$CT_IMAGE" >/dev/null || fail "$engine run $second"
  wait_serving "$CT_GRPC_PORT2" "$second"
  ctl --target="127.0.0.1:$CT_GRPC_PORT2" lookup "$filter" --file="$keys" --quiet >/dev/null ||
    fail "after the restart, not every key present"
  items=$(ctl --target="127.0.0.1:$CT_GRPC_PORT2" --format=json info "$filter" |
    grep -o '"items": *"\?[0-9]*' | head -n 1 | grep -o '[0-9]*$') ||
    fail "cuckooctl info after the restart"
  # 20000 over gRPC and redis-item-1 over the Redis port.
  [ "$items" = 20001 ] || fail "after the restart: $items items, expected 20001"
  ctl --target="127.0.0.1:$CT_GRPC_PORT2" lookup "$filter" --quiet redis-item-1 >/dev/null ||
    fail "after the restart, the item added over the Redis port is missing"
  say "new container on volume $CT_VOLUME (read-only root, no capabilities): all 20000 keys" \
    "and the one added over Redis present"
  stop_sigterm "$second" 0
  "$engine" rm -f "$second" >/dev/null

  # 6. The first container again (container-smoke.sh goes on with it).
  "$engine" start "$smoke" >/dev/null || fail "$engine start $smoke"
  wait_serving "$CT_GRPC_PORT" "$smoke"
  ctl --target="$grpc" lookup "$filter" --file="$keys" --quiet >/dev/null ||
    fail "after restarting $smoke, not every key present"
  say "first container restarted on the same volume: all keys present"
  exit 0
fi

# ---------------------------------------------------------------- main
image=${CUCKOO_IMAGE:-localhost/cuckood:ci}
t_start=$SECONDS

# apt_install PACKAGE COMMAND: Debian's PACKAGE unless COMMAND is there
# (for the checks below only; quiet unless it fails).
apt_install() {
  command -v "$2" >/dev/null && return 0
  echo "container-test: installing $1 (for the checks below)"
  export DEBIAN_FRONTEND=noninteractive
  apt-get install -y -qq --no-install-recommends "$1" >/dev/null 2>&1 ||
    { apt-get update -qq && apt-get install -y -qq --no-install-recommends "$1" >/dev/null; }
}

echo "== deploy/k8s, deploy/k8s/cluster, deploy/examples: schema validation"
t0=$SECONDS
validate=scripts/k8s-validate/k8s-validate.sh
bash "$validate" --selftest
# The components (kind: Component) render only as part of a kustomization:
# each is used by at least one overlay of deploy/examples.
kustomizations=(deploy/k8s deploy/k8s/cluster deploy/examples/*/)
kustomizations=("${kustomizations[@]%/}")
for c in deploy/k8s/components/*/; do
  grep -qrF "k8s/components/$(basename "$c")" deploy/examples ||
    { echo "container-test: no overlay in deploy/examples uses $c" >&2; exit 1; }
done
for k in "${kustomizations[@]}"; do
  [ -f "$k/kustomization.yaml" ] || { echo "container-test: no $k/kustomization.yaml" >&2; exit 1; }
done
# As written: every manifest under deploy/k8s, cluster/ included, the
# examples' own (k8s-validate walks folders; kustomization.yaml is no
# resource and is left out), and deploy/monitoring's Prometheus Operator
# objects (@kubernetes-models/prometheus-operator).
bash "$validate" deploy/k8s deploy/examples deploy/monitoring/cuckood-podmonitor.yaml \
  deploy/monitoring/cuckood-servicemonitor.yaml deploy/monitoring/cuckood-prometheusrule.yaml
# As rendered: what `kubectl apply -k` would send, generated ConfigMaps and
# image overrides included.
# Components need kustomize 3.7 or later: Debian's kubernetes-client (1.20)
# has an older one built in, so its kubectl does not count.
render=()
kustomize_version() { grep -o 'v[0-9][0-9.]*' | head -n 1 | tr -d v; }
recent() { [ -n "$1" ] && [ "$(printf '%s\n3.7\n' "$1" | sort -V | head -n 1)" = 3.7 ]; }
if command -v kubectl >/dev/null &&
  recent "$(kubectl version --client 2>/dev/null | grep -i kustomize | kustomize_version)"; then
  render=(kubectl kustomize)
elif command -v kustomize >/dev/null && recent "$(kustomize version 2>/dev/null | kustomize_version)"; then
  render=(kustomize build)
else
  echo "container-test: SKIPPED: no kubectl or kustomize with kustomize >= 3.7, so" \
    "${kustomizations[*]} not rendered (only validated as written)"
fi
if [ ${#render[@]} -gt 0 ]; then
  # Each rendering to its own file, named after its folder, and one run of
  # the validator over all of them (each run starts TypeScript: seconds of
  # CPU, taken from the build this step runs beside).
  rendered=$(mktemp -d)
  for k in "${kustomizations[@]}"; do
    out="$rendered/$(tr / _ <<<"$k").rendered.yaml"
    "${render[@]}" "$k" >"$out"
    echo "rendered $k ($(grep -c '^kind:' "$out") resources) -> $(basename "$out")"
  done
  bash "$validate" --quiet "$rendered"
  rm -rf "$rendered"
fi
# The NATS configuration (the ConfigMap nats-config): parsed by the real
# server with $POD_NAME set as the pod's environment sets it.
apt_install nats-server nats-server
echo "deploy/k8s/cluster/nats.conf ($(nats-server --version)):"
for i in 0 1 2; do
  POD_NAME=nats-$i nats-server -c deploy/k8s/cluster/nats.conf -t 2>&1
done
# The nats-tls component's nats.conf (TLS, routes over TLS, a user) and
# deploy/compose.cluster.nats-tls.yaml's: on copies whose TLS files are a
# throwaway CA and a certificate it signs (EC P-256, a day), made here with
# the openssl CLI, the password from the environment as the pods and the
# containers set it. nats-server -t loads the certificates and resolves
# every variable, so a missing file or variable fails here.
apt_install openssl openssl
nats_tls=$(mktemp -d)
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 1 \
  -subj "/CN=container-test NATS CA" -keyout "$nats_tls/ca.key" -out "$nats_tls/ca.crt" \
  -addext basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign,cRLSign \
  >/dev/null 2>&1
printf '%s\n' 'extendedKeyUsage = serverAuth, clientAuth' \
  'subjectAltName = DNS:nats-0.nats-headless, DNS:nats-1.nats-headless, DNS:nats-2.nats-headless, DNS:nats-0, DNS:nats-1, DNS:nats-2' \
  >"$nats_tls/tls.ext"
openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj /CN=nats \
  -keyout "$nats_tls/tls.key" -out "$nats_tls/tls.csr" >/dev/null 2>&1
openssl x509 -req -in "$nats_tls/tls.csr" -CA "$nats_tls/ca.crt" -CAkey "$nats_tls/ca.key" \
  -days 1 -sha256 -extfile "$nats_tls/tls.ext" -out "$nats_tls/tls.crt" >/dev/null 2>&1
sed "s#/etc/nats/tls/#$nats_tls/#g" deploy/k8s/components/nats-tls/nats.conf >"$nats_tls/k8s.conf"
echo "deploy/k8s/components/nats-tls/nats.conf:"
for i in 0 1 2; do
  POD_NAME=nats-$i CUCKOOD_NATS_PASSWORD=container-test nats-server -c "$nats_tls/k8s.conf" -t 2>&1
done
sed "s#/etc/nats/tls/#$nats_tls/#g" deploy/nats-tls/nats.conf >"$nats_tls/compose.conf"
echo "deploy/nats-tls/nats.conf:"
CUCKOOD_NATS_PASSWORD=container-test nats-server -c "$nats_tls/compose.conf" -t 2>&1
rm -rf "$nats_tls"
echo "== deploy/k8s: done in $((SECONDS - t0))s"

echo "== deploy/monitoring: the alerting rules (promtool check rules, promtool test rules), prometheus.example.yml"
command -v promtool >/dev/null || apt_install prometheus promtool
promtool check rules deploy/monitoring/cuckood-rules.yaml
(cd deploy/monitoring && promtool test rules cuckood-rules.test.yaml)
promtool check config deploy/monitoring/prometheus.example.yml
# The PrometheusRule (generated from the rules file), the alerts' runbook
# sections, the Pod/ServiceMonitor against deploy/k8s, the dashboard's JSON,
# and every metric the rules and the dashboard use against the /metrics of a
# live release cuckood and cluster replica (scripts/check-monitoring.py; a
# few seconds). Without a release build (--validate-only only): all but the
# live part, said so.
echo "== deploy/monitoring: monitors, PrometheusRule, dashboard, metric names (scripts/check-monitoring.py)"
# (apt_install's second argument is a command to look for: a module has none.)
/usr/bin/python3 -c 'import yaml' 2>/dev/null || apt_install python3-yaml /nonexistent
if [ "${1:-}" = --validate-only ] && [ ! -x build/release/server/cuckood ]; then
  echo "container-test: no build/release/server/cuckood: the metric names are not checked against a live server"
  /usr/bin/python3 scripts/check-monitoring.py --static
else
  /usr/bin/python3 scripts/check-monitoring.py
fi

echo "== deploy/compose.yaml, deploy/compose.cluster.yaml: schema validation"
apt_install docker-compose docker-compose
for f in deploy/compose.yaml deploy/compose.cluster.yaml; do
  docker-compose -f "$f" config -q
  echo "$f: valid ($(docker-compose -f "$f" config --services | wc -l) services)"
done
# The NATS TLS variant: an override of compose.cluster.yaml, valid merged.
nats_tls_files=(-f deploy/compose.cluster.yaml -f deploy/compose.cluster.nats-tls.yaml)
docker-compose "${nats_tls_files[@]}" config -q
echo "deploy/compose.cluster.yaml + deploy/compose.cluster.nats-tls.yaml: valid" \
  "($(docker-compose "${nats_tls_files[@]}" config --services | wc -l) services)"

if [ "${1:-}" = --validate-only ]; then
  echo "== container image: not built (--validate-only)"
  echo "== deployment files valid in $((SECONDS - t_start))s"
  exit 0
fi

# The backup CronJob's scripts (deploy/examples/k8s-backup), run as the
# k8s-backup-tls overlay runs them, against two real cuckoods of the release
# build (TLS, mutual TLS, a token): export, restore, retention, refusals.
echo "== deploy/examples/k8s-backup: cuckood-backup.sh and cuckood-restore.sh (scripts/backup-test.sh)"
t0=$SECONDS
bash scripts/build.sh release cuckood cuckooctl >/dev/null
bash scripts/backup-test.sh
echo "== deploy/examples/k8s-backup: done in $((SECONDS - t0))s"

echo "== container image: build, run, persistence across restarts"
t0=$SECONDS
# cuckooctl for the host side, and the image's two binaries (scripts/test.sh
# has built them already): the release build's, stripped into build/image/
# for the Dockerfile's --build-arg BINARIES=prebuilt, so the image's runtime
# stage, the one users get, is tested without compiling the server again.
# The same -O3 -DNDEBUG code as the Dockerfile's own Release build;
# CONTAINER_BINARIES=source builds the image from the source instead, as
# `docker build .` does.
binaries=${CONTAINER_BINARIES:-prebuilt}
case "$binaries" in
  prebuilt)
    bash scripts/build.sh release cuckood cuckooctl >/dev/null
    mkdir -p build/image
    strip -o build/image/cuckood build/release/server/cuckood
    strip -o build/image/cuckooctl build/release/client/cuckooctl
    ;;
  source) bash scripts/build.sh release cuckooctl >/dev/null ;;
  *) echo "container-test: CONTAINER_BINARIES=$binaries: prebuilt or source" >&2; exit 2 ;;
esac
if [ "$binaries" = prebuilt ]; then
  # What the build stage, not run here, would build from: the files its
  # COPY lines bring in must hold every source and header the release build
  # read for the two binaries (ninja's record of the headers), and CMake
  # must configure from them alone as the stage configures.
  mapfile -t copied < <(awk 'toupper($1) == "FROM" {stage = tolower($NF)}
    stage == "build" && toupper($1) == "COPY" && $2 !~ /^--/ {
      for (i = 2; i < NF; i++) { sub(/\/$/, "", $i); print $i } }' Dockerfile)
  [ ${#copied[@]} -gt 0 ] || { echo "container-test: no COPY in the Dockerfile's build stage" >&2; exit 1; }
  objects=$(ninja -C build/release -t commands cuckood cuckooctl | grep -o ' -o [^ ]*\.o' | cut -d' ' -f3)
  # shellcheck disable=SC2086  # one object a word
  missing=$( (cd build/release && ninja -t deps $objects) |
    awk -v root="$PWD/" -v build="$PWD/build/" '/^ / {f = $1; if (f !~ /^\//) next
      if (index(f, root) == 1 && index(f, build) != 1) print substr(f, length(root) + 1)}' |
    sort -u | while read -r f; do
      ok=0
      for c in "${copied[@]}"; do
        case "$f" in "$c" | "$c"/*) ok=1 ;; esac
      done
      [ "$ok" = 1 ] || echo "$f"
    done)
  [ -z "$missing" ] || { echo "container-test: the Dockerfile's build stage does not COPY" \
    "what cuckood and cuckooctl are built from: ${missing//$'\n'/ }" >&2; exit 1; }
  stage=$(mktemp -d /tmp/cuckood-build-stage.XXXXXX)
  cp -r "${copied[@]}" "$stage"/
  cmake -S "$stage" -B "$stage/build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DCUCKOO_BUILD_TESTS=OFF -DCUCKOO_BUILD_BENCH=OFF >"$stage/cmake.log" 2>&1 &&
    ninja -C "$stage/build" -n cuckood cuckooctl >>"$stage/cmake.log" 2>&1 ||
    { cat "$stage/cmake.log" >&2; echo "container-test: the build stage's sources (${copied[*]})" \
      "do not configure as the Dockerfile does" >&2; exit 1; }
  rm -rf "$stage"
  echo "the Dockerfile's build stage: its COPY lines (${copied[*]}) hold all $(wc -w <<<"$objects")" \
    "objects' sources and headers, and configure"
fi
free_port() {
  local p
  for _ in $(seq 100); do
    p=$((20000 + RANDOM % 30000))
    (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null || { echo "$p"; return 0; }
  done
  return 1
}
CT_STATE=$(mktemp -d /tmp/cuckood-container-test.XXXXXX)
CT_GRPC_PORT=$(free_port)
CT_GRPC_PORT2=$(free_port)
CT_ADMIN_PORT=$(free_port)
CT_REDIS_PORT=$(free_port)
CT_VOLUME=cuckood-container-test-$$
CT_CTL=$PWD/build/release/client/cuckooctl
CT_IMAGE=$image
export CT_STATE CT_IMAGE CT_GRPC_PORT CT_GRPC_PORT2 CT_ADMIN_PORT CT_REDIS_PORT CT_VOLUME CT_CTL
# The volume outlives container-smoke.sh's containers; remove it with the
# engine it used (podman with its private containers.conf, or docker). With
# CONTAINER_ENGINE=dockerd the private daemon is gone by then: it stays there.
remove_volume() {
  local cache=${CONTAINER_SMOKE_CACHE:-/var/tmp/container-smoke}
  if command -v podman >/dev/null && [ -s "$cache/podman/containers.conf" ] &&
    CONTAINERS_CONF=$cache/podman/containers.conf podman volume exists "$CT_VOLUME" 2>/dev/null; then
    CONTAINERS_CONF=$cache/podman/containers.conf podman volume rm -f "$CT_VOLUME" >/dev/null || true
  elif command -v docker >/dev/null && timeout 10 docker info >/dev/null 2>&1; then
    docker volume rm -f "$CT_VOLUME" >/dev/null 2>&1 || true
  fi
  rm -rf "$CT_STATE"
}
trap remove_volume EXIT

# TLS and tokens, as deploy/k8s/components/{tls,auth} set them up: a
# throwaway CA and a server certificate it signs (EC P-256, two days, SANs
# localhost and 127.0.0.1), and two tokens, `ck_` + 43 base64url characters
# like `cuckooctl hash-token` makes, stored as their SHA-256. Bind-mounted
# read-only; the container runs as 10001, so the files are world-readable
# (a throwaway key: fine here, not in production, where the Secret volume
# gives the pod's group alone read access).
apt_install openssl openssl
mkdir -m 0755 "$CT_STATE/tls" "$CT_STATE/auth"
# quiet COMMAND...: its output only if it fails (set -e then stops here).
quiet() {
  "$@" >"$CT_STATE/quiet.log" 2>&1 || { cat "$CT_STATE/quiet.log" >&2; return 1; }
}
tls=$CT_STATE/tls
quiet openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 \
  -subj "/CN=cuckood container-test CA" -keyout "$CT_STATE/ca.key" -out "$tls/ca.crt" \
  -addext basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign,cRLSign
printf '%s\n' 'basicConstraints = critical, CA:FALSE' 'keyUsage = critical, digitalSignature' \
  'extendedKeyUsage = serverAuth, clientAuth' 'subjectAltName = DNS:localhost, IP:127.0.0.1' \
  >"$CT_STATE/server.ext"
quiet openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj /CN=localhost \
  -keyout "$tls/tls.key" -out "$CT_STATE/server.csr"
quiet openssl x509 -req -in "$CT_STATE/server.csr" -CA "$tls/ca.crt" -CAkey "$CT_STATE/ca.key" \
  -days 2 -sha256 -extfile "$CT_STATE/server.ext" -out "$tls/tls.crt"
quiet openssl verify -CAfile "$tls/ca.crt" -purpose sslserver -verify_ip 127.0.0.1 "$tls/tls.crt"
# The CA's key stays out of the mounted directory; ca.crt goes in, for the
# HEALTHCHECK (it trusts ca.crt beside the certificate).
chmod 0644 "$tls/ca.crt" "$tls/tls.crt" "$tls/tls.key"
new_token() { printf 'ck_%s' "$(openssl rand -base64 32 | tr '+/' '-_' | tr -d '=\n')"; }
token_hash() { printf %s "$1" | sha256sum | cut -d' ' -f1; }
CT_TOKEN=$(new_token)
CT_READER_TOKEN=$(new_token)
{
  echo "# container-test: throwaway tokens"
  printf 'token\tcontainer-test\tsha256:%s\tadmin:*\n' "$(token_hash "$CT_TOKEN")"
  printf 'token\treader\tsha256:%s\tread:*\n' "$(token_hash "$CT_READER_TOKEN")"
} >"$CT_STATE/auth/tokens"
chmod 0644 "$CT_STATE/auth/tokens"
# `cuckooctl hash-token --stdin` must store a token as sha256sum does (the
# spec of the access file): otherwise the tokens above prove nothing about
# the files users make with it.
ctl_hash=$(printf %s "$CT_TOKEN" | "$CT_CTL" hash-token container-test --stdin --grant='admin:*' |
  grep -o 'sha256:[0-9a-f]\{64\}') || { echo "container-test: cuckooctl hash-token --stdin failed" >&2; exit 1; }
[ "$ctl_hash" = "sha256:$(token_hash "$CT_TOKEN")" ] ||
  { echo "container-test: cuckooctl hash-token gives $ctl_hash, sha256sum another" >&2; exit 1; }
CT_SECURE_ARGS="-v $CT_STATE/tls:/etc/cuckood/tls:ro -v $CT_STATE/auth:/etc/cuckood/auth:ro \
-e CUCKOOD_TLS_CERT=/etc/cuckood/tls/tls.crt -e CUCKOOD_TLS_KEY=/etc/cuckood/tls/tls.key \
-e CUCKOOD_AUTH_TOKENS=/etc/cuckood/auth/tokens"
export CT_TOKEN CT_READER_TOKEN CT_SECURE_ARGS
# redis-cli for the checks of the Redis port, from the host.
apt_install redis-tools redis-cli

# The image's labels: the version from CMakeLists.txt, the commit, the
# repository it was cloned from (see the Dockerfile). Passed as --label too:
# podman 4.3's builder keys its layer cache on the LABEL line as written,
# ${REVISION} unexpanded, so a cached layer of another commit would keep that
# commit's labels.
version=$(sed -n 's/^project(cuckood VERSION \([0-9.]*\).*/\1/p' CMakeLists.txt)
[ -n "$version" ] || { echo "container-test: no version in CMakeLists.txt" >&2; exit 1; }
# The Dockerfile's ARG VERSION (and every other copy) is CMakeLists.txt's.
python3 scripts/set-version.py --check
revision=$(git rev-parse HEAD)
created=$(TZ=UTC git log -1 --format=%cd --date=format-local:%Y-%m-%dT%H:%M:%SZ HEAD)
# The binaries in the image must say the same version (the verify step).
CT_VERSION=$version
export CT_VERSION
src_url=$(git remote get-url origin 2>/dev/null | tr -d ' ' || true)
src_url=${src_url:-unknown}
RUN_ARGS="-p 127.0.0.1:$CT_GRPC_PORT:50051 -p 127.0.0.1:$CT_ADMIN_PORT:9090 \
-p 127.0.0.1:$CT_REDIS_PORT:6379 -v $CT_VOLUME:/var/lib/cuckood -e CUCKOOD_SNAPSHOT_INTERVAL=0 \
$CT_SECURE_ARGS" \
  VERIFY_TIMEOUT=${VERIFY_TIMEOUT:-120} SMOKE_REQUIRE_SIGTERM=1 \
  BUILD_ARGS="--build-arg BINARIES=$binaries --build-arg VERSION=$version --build-arg REVISION=$revision --build-arg SOURCE=$src_url \
--build-arg CREATED=$created \
--label org.opencontainers.image.version=$version --label org.opencontainers.image.revision=$revision \
--label org.opencontainers.image.source=$src_url --label org.opencontainers.image.created=$created" \
  SMOKE_LABELS="org.opencontainers.image.licenses=Apache-2.0 org.opencontainers.image.version=$version
org.opencontainers.image.revision=$revision org.opencontainers.image.source=$src_url
org.opencontainers.image.created=$created" \
  bash scripts/container-smoke.sh Dockerfile . "$image" "bash scripts/container-test.sh --verify"
echo "== container image: done in $((SECONDS - t0))s"
echo "== container tests passed in $((SECONDS - t_start))s"
