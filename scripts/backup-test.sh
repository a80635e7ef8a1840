#!/usr/bin/env bash
# Tests deploy/examples/k8s-backup's scripts (cuckood-backup.sh, the CronJob's,
# and cuckood-restore.sh) with the release build's cuckood and cuckooctl
# (build/release; scripts/build.sh release cuckood cuckooctl), as the
# k8s-backup-tls overlay runs them: TLS, mutual TLS and an access token
# (a throwaway CA, made here with openssl, and `cuckooctl hash-token`).
#   - filters with awkward names (spaces, a slash, quotes, a backslash,
#     UTF-8, a leading "-"), one grown past its first table, one with a
#     newline in its name: the run exports the others, fails (exit 1) and
#     leaves a .failed directory, `latest` untouched;
#   - that filter dropped: the next run exports all, `latest` points at it,
#     index.tsv lists every filter;
#   - no token (CUCKOO_TOKEN_FILE naming a missing file is left out): the
#     run fails UNAUTHENTICATED;
#   - restore into a second, empty server: the same `cuckooctl list`, every
#     key present; again: every filter "already there", exit 0; a name not
#     in the backup: exit 1;
#   - BACKUP_KEEP=2 after more runs: two complete backups remain.
# Run by scripts/container-test.sh (seconds).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
cuckood=$root/build/release/server/cuckood
ctl=$root/build/release/client/cuckooctl
for b in "$cuckood" "$ctl"; do
  [ -x "$b" ] || { echo "backup-test: no $b (scripts/build.sh release cuckood cuckooctl)" >&2; exit 2; }
done
backup_sh=$root/deploy/examples/k8s-backup/cuckood-backup.sh
restore_sh=$root/deploy/examples/k8s-backup/cuckood-restore.sh

t=$(mktemp -d)
pids=()
cleanup() {
  local p
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  rm -rf "$t"
}
trap cleanup EXIT
fail() {
  echo "backup-test: FAILED: $*" >&2
  exit 1
}
say() { echo "backup-test: $*"; }

# A CA, the servers' certificate (127.0.0.1) and the backup's client certificate.
mkdir "$t/tls"
(
  cd "$t/tls"
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 1 \
    -subj "/CN=backup-test CA" -keyout ca.key -out ca.crt \
    -addext basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign,cRLSign
  openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj /CN=cuckood \
    -keyout tls.key -out tls.csr
  printf '%s\n' 'subjectAltName = IP:127.0.0.1' 'extendedKeyUsage = serverAuth' >tls.ext
  openssl x509 -req -in tls.csr -CA ca.crt -CAkey ca.key -days 1 -extfile tls.ext -out tls.crt
  openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj /CN=cuckood-backup \
    -keyout client.key -out client.csr
  printf '%s\n' 'extendedKeyUsage = clientAuth' >client.ext
  openssl x509 -req -in client.csr -CA ca.crt -CAkey ca.key -days 1 -extfile client.ext -out client.crt
) >/dev/null 2>&1 || fail "openssl: making the test certificates"
# The backup's token (admin: export needs it); the client certificate gets
# no grant of its own, so only the token lets the backup in.
"$ctl" hash-token backup --grant='admin:*' >"$t/hash"
sed -n 1p "$t/hash" >"$t/token"
sed -n 2p "$t/hash" >"$t/tokens"

# start NAME: a cuckood with TLS, mutual TLS and the tokens; sets $port.
start() {
  "$cuckood" --listen=127.0.0.1:0 --admin-listen= --redis-listen= --data-dir="$t/$1" \
    --tls-cert="$t/tls/tls.crt" --tls-key="$t/tls/tls.key" --tls-client-ca="$t/tls/ca.crt" \
    --auth-tokens="$t/tokens" --memory-budget=256MiB >"$t/$1.log" 2>&1 &
  pids+=($!)
  local i
  for _ in $(seq 100); do
    port=$(grep -o 'serving on 127\.0\.0\.1:[0-9]*' "$t/$1.log" | head -n 1 | grep -o '[0-9]*$') && break
    kill -0 "${pids[-1]}" 2>/dev/null || fail "cuckood $1 exited: $(tail -n 5 "$t/$1.log")"
    sleep 0.1
  done
  [ -n "${port:-}" ] || fail "cuckood $1 not serving after 10 s"
}
export CUCKOO_CA=$t/tls/ca.crt CUCKOO_CERT=$t/tls/client.crt CUCKOO_KEY=$t/tls/client.key
export CUCKOO_TOKEN_FILE=$t/token CUCKOOCTL=$ctl
start a
export CUCKOO_TARGET=127.0.0.1:$port
a=$port

names=("users" "with space" "x/y" 'say "hi"' 'back\slash' "grüße" "-dash")
for n in "${names[@]}"; do
  "$ctl" create --capacity=1000 -- "$n" >/dev/null || fail "create $n"
  seq -f "$n-%g" 1 50 | "$ctl" insert --quiet -- "$n" >/dev/null || fail "insert into $n"
done
"$ctl" create grown --capacity=100 --growth-factor=2 --max-capacity=10000 >/dev/null
seq -f 'g-%g' 1 1000 | "$ctl" insert --quiet grown >/dev/null || fail "insert into grown"
names+=(grown)
newline=$(printf 'new\nline')
"$ctl" create --capacity=100 -- "$newline" >/dev/null

mkdir "$t/backup"
export BACKUP_DIR=$t/backup BACKUP_KEEP=2
# 1. A name the script cannot take: the run fails and says which.
rc=0
sh "$backup_sh" >"$t/run1.log" 2>&1 || rc=$?
[ "$rc" = 1 ] || fail "a run with a newline in a name exited $rc, not 1: $(cat "$t/run1.log")"
grep -q 'NOT exported: the filter "new\\nline"' "$t/run1.log" || fail "run 1 does not name the filter: $(cat "$t/run1.log")"
ls -d "$t/backup"/*Z.failed >/dev/null 2>&1 || fail "run 1 left no .failed directory"
[ ! -e "$t/backup/latest" ] || fail "a failed run set latest"
say "a name with a newline: not exported, the run fails (exit 1) and keeps its directory as .failed"

# 2. Every filter.
"$ctl" drop -- "$newline" >/dev/null
sh "$backup_sh" >"$t/run2.log" 2>&1 || fail "backup: $(cat "$t/run2.log")"
latest=$(readlink "$t/backup/latest") || fail "no latest after a run"
[ "$(wc -l <"$t/backup/$latest/index.tsv")" = "${#names[@]}" ] ||
  fail "index.tsv has $(wc -l <"$t/backup/$latest/index.tsv") lines, not ${#names[@]}"
for n in "${names[@]}"; do
  cut -f2- "$t/backup/$latest/index.tsv" | grep -qxF -- "$n" || fail "\"$n\" not in index.tsv"
done
say "every filter exported (${#names[@]}, awkward names included) into $latest; latest points at it"

# 3. Without the token the server refuses (the missing file is left out).
rc=0
CUCKOO_TOKEN_FILE=$t/no-such-token sh "$backup_sh" >"$t/run3.log" 2>&1 || rc=$?
[ "$rc" = 1 ] && grep -q 'UNAUTHENTICATED' "$t/run3.log" && grep -q 'no such file, not used' "$t/run3.log" ||
  fail "a run without a token: exit $rc: $(cat "$t/run3.log")"
[ "$(readlink "$t/backup/latest")" = "$latest" ] || fail "a failed run moved latest"
say "without the token: UNAUTHENTICATED, exit 1, latest unchanged"

# 4. Restore into an empty server.
start b
b=$port
CUCKOO_TARGET=127.0.0.1:$b sh "$restore_sh" "$t/backup/latest" >"$t/restore.log" 2>&1 ||
  fail "restore: $(cat "$t/restore.log")"
diff <("$ctl" --target="127.0.0.1:$a" list) <("$ctl" --target="127.0.0.1:$b" list) >"$t/diff" ||
  fail "the restored server's list differs: $(cat "$t/diff")"
for n in "${names[@]}"; do
  if [ "$n" = grown ]; then keys=(seq -f 'g-%g' 1 1000); else keys=(seq -f "$n-%g" 1 50); fi
  "${keys[@]}" | "$ctl" --target="127.0.0.1:$b" lookup --quiet -- "$n" >/dev/null ||
    fail "restored \"$n\": not every key present"
done
say "restored into an empty server: the same list, every key present"
rc=0
CUCKOO_TARGET=127.0.0.1:$b sh "$restore_sh" "$t/backup/latest" >"$t/restore2.log" 2>&1 || rc=$?
[ "$rc" = 0 ] && grep -q "done: 0 restored, ${#names[@]} already there" "$t/restore2.log" ||
  fail "restore over existing filters: exit $rc: $(cat "$t/restore2.log")"
rc=0
CUCKOO_TARGET=127.0.0.1:$b sh "$restore_sh" "$t/backup/latest" no-such-filter >"$t/restore3.log" 2>&1 || rc=$?
[ "$rc" = 1 ] || fail "restore of a name not in the backup exited $rc, not 1"
say "restore again: every filter already there (exit 0); a name not in the backup: exit 1"

# 5. Retention: BACKUP_KEEP=2 complete backups.
sh "$backup_sh" >"$t/run5.log" 2>&1 || fail "backup: $(cat "$t/run5.log")"
sh "$backup_sh" >"$t/run6.log" 2>&1 || fail "backup: $(cat "$t/run6.log")"
complete=$(find "$t/backup" -mindepth 1 -maxdepth 1 -type d -name '*Z' | wc -l)
[ "$complete" = 2 ] || fail "$complete complete backups after 3 runs with BACKUP_KEEP=2, not 2"
say "BACKUP_KEEP=2: 2 complete backups kept after 3 runs"
say "passed"
