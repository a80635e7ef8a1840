#!/bin/sh
# cuckood-backup.sh: `cuckooctl export` of every filter of one cuckood (a
# single node, or any ready replica of a cluster: each holds every filter)
# into a new directory BACKUP_DIR/YYYYMMDDTHHMMSSZ/, then keeps the newest
# BACKUP_KEEP of them. Run by the CronJob of deploy/examples/k8s-backup (see
# deploy/README.md, Backups with a CronJob); runs anywhere cuckooctl does.
#
# Environment: cuckooctl's own (CUCKOO_TARGET, CUCKOO_CA, CUCKOO_TOKEN_FILE,
# CUCKOO_CERT, CUCKOO_KEY, CUCKOO_TLS_SERVER_NAME, ...); a CUCKOO_TOKEN_FILE,
# CUCKOO_CERT or CUCKOO_KEY that names a missing file (an optional Secret not
# created) is left out, and the log says so. BACKUP_DIR (default /backup),
# BACKUP_KEEP (default 7), CUCKOOCTL (default cuckooctl).
#
# A backup directory holds:
#   f-<SHA-256 of the name>.cuckoo   each filter's snapshot file, as
#                                    `cuckooctl export` writes it (fsync'ed)
#   index.tsv                        FILE<TAB>NAME, a line per filter
#   filters.json                     `cuckooctl --format=json list` at the start
# It gets its final name only once every filter is in it; a run that failed
# leaves YYYYMMDDTHHMMSSZ.failed (the newest BACKUP_KEEP are kept), one that
# was killed .partial-*, removed by the next run. `latest` points at the
# newest complete one. cuckood-restore.sh imports a backup.
#
# A filter dropped (or expired) between the list and its export is left out
# and logged. A filter whose name holds a control character (a newline, a
# tab, ...: escaped in the JSON list other than as \" \\ \/) is not
# exported and fails the run: export it by hand (`cuckooctl export NAME
# --file=...`). Any other name works (spaces, slashes, quotes, UTF-8, a
# leading "-").
#
# Exit: 0 every listed filter exported; 1 otherwise (the log says which).
set -eu
export LC_ALL=C
dir=${BACKUP_DIR:-/backup}
keep=${BACKUP_KEEP:-7}
ctl=${CUCKOOCTL:-cuckooctl}

say() { printf 'cuckood-backup: %s\n' "$*"; }
die() { printf 'cuckood-backup: FAILED: %s\n' "$*" >&2; exit 1; }

case $keep in '' | *[!0-9]*) die "BACKUP_KEEP=$keep: not a number" ;; esac
[ "$keep" -ge 1 ] || die "BACKUP_KEEP=$keep: keep at least 1"
mkdir -p -- "$dir" 2>/dev/null || true
[ -d "$dir" ] && [ -w "$dir" ] || die "BACKUP_DIR=$dir: not a writable directory"
for v in CUCKOO_TOKEN_FILE CUCKOO_CERT CUCKOO_KEY; do
  eval "f=\${$v:-}"
  if [ -n "$f" ] && [ ! -e "$f" ]; then
    say "$v=$f: no such file, not used"
    unset "$v"
  fi
done

stamp=$(date -u +%Y%m%dT%H%M%SZ)
# A second run within the same second (by hand) waits for a name of its own.
while [ -e "$dir/$stamp" ] || [ -e "$dir/$stamp.failed" ]; do
  sleep 1
  stamp=$(date -u +%Y%m%dT%H%M%SZ)
done
work=$dir/.partial-$stamp
rm -rf "$dir"/.partial-*
mkdir "$work"
say "target ${CUCKOO_TARGET:-localhost:50051}, into $dir/$stamp;" \
  "CA: ${CUCKOO_CA:-none}, token file: ${CUCKOO_TOKEN_FILE:-none}, client certificate: ${CUCKOO_CERT:-none}"

"$ctl" --format=json list >"$work/filters.json" || die "cuckooctl list (above)"
# Each filter object starts with its name: {"name":"...". A name's own
# quotes are escaped (\"), so this finds the filters and nothing inside
# a name.
{ grep -oE '\{"name":"([^"\\]|\\.)*"' "$work/filters.json" || [ $? = 1 ]; } |
  sed -e 's/^{"name":"//' -e 's/"$//' >"$work/names"

listed=0 exported=0 gone=0 failed=0
: >"$work/index.tsv"
while IFS= read -r json; do
  listed=$((listed + 1))
  # JSON escapes: \" \\ \/ are decoded; any other (a control character,
  # \uXXXX) is not handled here.
  case $(printf '%s' "$json" | sed 's/\\["\\/]//g') in
    *\\*)
      say "NOT exported: the filter \"$json\" (as JSON): its name holds a control character; export it by hand"
      failed=$((failed + 1))
      continue
      ;;
  esac
  name=$(printf '%s' "$json" | sed 's/\\\(["\\/]\)/\1/g')
  file=f-$(printf '%s' "$name" | sha256sum | cut -c1-64).cuckoo
  if "$ctl" export --file="$work/$file" -- "$name" </dev/null >"$work/.out" 2>"$work/.err"; then
    printf '%s\t%s\n' "$file" "$name" >>"$work/index.tsv"
    exported=$((exported + 1))
    say "exported \"$name\" -> $file: $(tr '\n' ' ' <"$work/.out")"
  elif grep -q '^cuckooctl: NOT_FOUND:' "$work/.err"; then
    gone=$((gone + 1))
    say "left out \"$name\": dropped since the list ($(tr '\n' ' ' <"$work/.err"))"
  else
    failed=$((failed + 1))
    say "NOT exported: \"$name\": $(tr '\n' ' ' <"$work/.err")"
  fi
done <"$work/names"
rm -f "$work/names" "$work/.out" "$work/.err"
sync "$work/index.tsv" "$work/filters.json" "$work"

prune() { # GLOB: the newest $keep directories matching it stay
  ls -1d "$dir"/$1 2>/dev/null | sort -r | tail -n +$((keep + 1)) | while IFS= read -r old; do
    rm -rf "$old"
    say "removed the old backup $old"
  done
}
if [ "$failed" -gt 0 ]; then
  mv "$work" "$dir/$stamp.failed"
  prune '20[0-9][0-9][0-9][0-9][0-9][0-9]T[0-9][0-9][0-9][0-9][0-9][0-9]Z.failed'
  die "$failed of $listed filters not exported ($exported exported, $gone dropped meanwhile): $dir/$stamp.failed"
fi
mv "$work" "$dir/$stamp"
ln -sfn "$stamp" "$dir/latest"
sync "$dir"
prune '20[0-9][0-9][0-9][0-9][0-9][0-9]T[0-9][0-9][0-9][0-9][0-9][0-9]Z'
say "done: $exported of $listed filters exported ($gone dropped meanwhile) into $dir/$stamp"
