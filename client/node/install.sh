#!/usr/bin/env bash
# Installs what package-lock.json pins for @cuckood/client (the package in
# this directory) into node_modules/ beside this file (`npm ci`): grpc-js,
# proto-loader, and TypeScript to build it. scripts/test.sh runs it; by hand:
#   bash client/node/install.sh
# Needs node >= 18 and npm (scripts/install-deps.sh --test installs them);
# does nothing when the installed packages match the lockfile.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
command -v node >/dev/null && command -v npm >/dev/null ||
  { echo "client/node/install.sh: node and npm are needed (scripts/install-deps.sh --test installs them)" >&2; exit 1; }
if ! cmp -s "$here/package-lock.json" "$here/node_modules/.package-lock.json.installed" 2>/dev/null; then
  (cd "$here" && npm ci --no-audit --no-fund --loglevel=error >/dev/null) ||
    { echo "client/node/install.sh: npm ci failed in $here" >&2; exit 1; }
  cp "$here/package-lock.json" "$here/node_modules/.package-lock.json.installed"
fi
