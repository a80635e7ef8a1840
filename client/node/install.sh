#!/usr/bin/env bash
# Installs what package-lock.json pins for @cuckood/client (the package in
# this directory) into node_modules/ beside this file (`npm ci`): grpc-js,
# proto-loader, and TypeScript to build it. scripts/test.sh runs it; by hand:
#   bash client/node/install.sh
# Needs node >= 18 and npm (scripts/install-deps.sh --test installs them);
# does nothing when the installed packages match the lockfile.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
exec bash "$here/../../scripts/npm-ci.sh" "$here" client/node/install.sh
