#!/usr/bin/env bash
# Installs the node-redis versions that package-lock.json pins into
# node_modules/ beside this file (`npm ci`), for check.mjs
# (tests/e2e/node_redis_test.cc). scripts/test.sh runs it; by hand:
#   bash tests/e2e/node_redis/install.sh
# Needs node >= 18 and npm (scripts/install-deps.sh --test installs them);
# does nothing when the installed packages match the lockfile.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
command -v node >/dev/null && command -v npm >/dev/null ||
  { echo "node_redis/install.sh: node and npm are needed (scripts/install-deps.sh --test installs them)" >&2; exit 1; }
if ! cmp -s "$here/package-lock.json" "$here/node_modules/.package-lock.json.installed" 2>/dev/null; then
  (cd "$here" && npm ci --no-audit --no-fund --loglevel=error >/dev/null) ||
    { echo "node_redis/install.sh: npm ci failed in $here" >&2; exit 1; }
  cp "$here/package-lock.json" "$here/node_modules/.package-lock.json.installed"
fi
