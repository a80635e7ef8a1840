#!/usr/bin/env bash
# Installs the node-redis versions that package-lock.json pins into
# node_modules/ beside this file (`npm ci`), for check.mjs
# (tests/e2e/node_redis_test.cc). scripts/test.sh runs it; by hand:
#   bash tests/e2e/node_redis/install.sh
# Needs node >= 18 and npm (scripts/install-deps.sh --test installs them);
# does nothing when the installed packages match the lockfile.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
exec bash "$here/../../../scripts/npm-ci.sh" "$here" node_redis/install.sh
