#!/usr/bin/env bash
# The repository stands alone: no tracked file may read, run, link or name a
# folder beside the repository (the sibling guidance folder the developers
# have) or a path of one machine (/work/..., /home/..., /root/...). Prints
# each offending line as FILE:LINE: TEXT and exits 1; exits 0 when none.
#   tests/repo/standalone_check.sh [REPOSITORY_ROOT]
#   tests/repo/standalone_check.sh --selftest   it finds both kinds in a
#                                              throwaway repository
set -euo pipefail
if [ "${1:-}" = --selftest ]; then
  t=$(mktemp -d)
  trap 'rm -rf "$t"' EXIT
  git -C "$t" init -q
  printf 'fine\nsee ..%s/docs/DESIGN.md\n' /shared >"$t/a.md"
  printf 'kept at %s/spec/x.cc\n' /work >"$t/b.md"
  git -C "$t" add a.md b.md
  out=$(bash "$0" "$t" 2>&1) && { echo "self-test: the check passed a repository that names outside paths" >&2; exit 1; }
  grep -q '^a.md:2:' <<<"$out" && grep -q '^b.md:1:' <<<"$out" ||
    { echo "self-test: expected a.md:2 and b.md:1, got: $out" >&2; exit 1; }
  echo "standalone_check: self-test passed"
  exit 0
fi
cd "${1:-$(dirname "$0")/../..}"
# The patterns are built so that this file does not match them itself.
dotdot='\.\.'
# A machine path: /work/, /home/ or /root/ then a name (not "...", as in
# prose that describes the rule).
pattern="${dotdot}/shared\\b|(^|[^A-Za-z0-9_.~-])/(work|home|root)/[A-Za-z0-9_-]"
if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  mapfile -t files < <(git ls-files)
else # an exported tree: every file but build trees
  mapfile -t files < <(find . -type f -not -path './build*' -not -path './.git/*' \
    -not -path '*/node_modules/*' | sed 's|^\./||')
fi
found=0
for f in "${files[@]}"; do
  [ -f "$f" ] || continue
  # Binary files (fuzz corpora, ...) are not read.
  grep -Iq . "$f" 2>/dev/null || continue
  if grep -nHE "$pattern" "$f"; then found=1; fi
done
if [ "$found" = 1 ]; then
  echo "standalone_check: the lines above refer to something outside the repository" >&2
  exit 1
fi
echo "standalone_check: ${#files[@]} files, none refers outside the repository"
