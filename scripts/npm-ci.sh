#!/usr/bin/env bash
# Installs what DIR/package-lock.json pins into DIR/node_modules (`npm ci`),
# unless the packages installed there were installed from that same
# lockfile: the shared step of the repository's npm folders
# (tests/e2e/node_redis, client/node, scripts/k8s-validate).
#   bash scripts/npm-ci.sh DIR NAME    (NAME: who asks, for the messages)
# Needs node >= 18 and npm (scripts/install-deps.sh --test installs them).
set -euo pipefail
[ $# -eq 2 ] || { echo "usage: scripts/npm-ci.sh DIR NAME" >&2; exit 2; }
dir=$(cd "$1" && pwd)
name=$2
command -v node >/dev/null && command -v npm >/dev/null ||
  { echo "$name: node and npm are needed (scripts/install-deps.sh --test installs them)" >&2; exit 1; }
major=$(node -p 'process.versions.node.split(".")[0]')
[ "$major" -ge 18 ] || { echo "$name: node >= 18 is needed, this is $(node --version)" >&2; exit 1; }
# Installed again whenever the lockfile changed since the last install.
if ! cmp -s "$dir/package-lock.json" "$dir/node_modules/.package-lock.json.installed" 2>/dev/null; then
  (cd "$dir" && npm ci --no-audit --no-fund --loglevel=error >/dev/null) ||
    { echo "$name: npm ci failed in $dir" >&2; exit 1; }
  cp "$dir/package-lock.json" "$dir/node_modules/.package-lock.json.installed"
fi
