#!/bin/sh
# cuckood-restore.sh BACKUP [NAME...]: `cuckooctl import` of the filters of a
# backup made by cuckood-backup.sh (a directory with index.tsv, e.g.
# /backup/latest or /backup/20261129T020000Z): every filter of it, or only
# the NAMEs given. See deploy/README.md, Backups with a CronJob.
#
# A filter that exists already is left as it is (ALREADY_EXISTS, logged):
# drop it first (`cuckooctl drop NAME`) to replace it with the backup's.
# Each import is checked whole by the server before it creates anything,
# and is logged like any write (it survives restarts). Not on a cluster
# replica: cuckood refuses imports there (FAILED_PRECONDITION) for now.
#
# Environment: as cuckood-backup.sh's (cuckooctl's CUCKOO_*; CUCKOOCTL).
# Exit: 0 every filter asked for restored or already there; 1 otherwise.
set -eu
export LC_ALL=C
ctl=${CUCKOOCTL:-cuckooctl}
say() { printf 'cuckood-restore: %s\n' "$*"; }
die() { printf 'cuckood-restore: FAILED: %s\n' "$*" >&2; exit 1; }

[ $# -ge 1 ] || die "usage: cuckood-restore.sh BACKUP_DIRECTORY [NAME...]"
backup=$1
shift
[ -f "$backup/index.tsv" ] || die "$backup: no index.tsv (not a backup of cuckood-backup.sh)"
for v in CUCKOO_TOKEN_FILE CUCKOO_CERT CUCKOO_KEY; do
  eval "f=\${$v:-}"
  if [ -n "$f" ] && [ ! -e "$f" ]; then
    say "$v=$f: no such file, not used"
    unset "$v"
  fi
done
# The names asked for must be in the backup.
for want in "$@"; do
  cut -f2- "$backup/index.tsv" | grep -qxF -- "$want" || die "\"$want\" is not in $backup/index.tsv"
done

err=$(mktemp)
trap 'rm -f "$err"' EXIT
tab=$(printf '\t')
restored=0 present=0 failed=0
while IFS="$tab" read -r file name; do
  if [ $# -gt 0 ]; then
    found=0
    for want in "$@"; do [ "$want" = "$name" ] && found=1; done
    [ "$found" = 1 ] || continue
  fi
  if "$ctl" import --file="$backup/$file" -- "$name" </dev/null >/dev/null 2>"$err"; then
    restored=$((restored + 1))
    say "restored \"$name\" from $file"
  elif grep -q '^cuckooctl: ALREADY_EXISTS:' "$err"; then
    present=$((present + 1))
    say "left as it is: \"$name\" exists (drop it first to restore the backup's)"
  else
    failed=$((failed + 1))
    say "NOT restored: \"$name\": $(tr '\n' ' ' <"$err")"
  fi
done <"$backup/index.tsv"
[ "$failed" = 0 ] || die "$failed filters not restored ($restored restored, $present already there)"
say "done: $restored restored, $present already there, from $backup"
