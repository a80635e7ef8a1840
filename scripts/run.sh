#!/usr/bin/env bash
# Installs dependencies, builds, and starts the server with its embedded
# defaults (gRPC on 0.0.0.0:50051, data in ./data).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
bash scripts/build.sh release
if [ -x build/release/server/cuckood ]; then
  exec build/release/server/cuckood "$@"
fi
cat <<'MSG'
cuckood: the core engine (core/, library cuckoo_core) is built, and its
benchmark is at build/release/bench/filter_bench. The gRPC server binary
arrives with the next milestone (issue "The gRPC service ..."); there is
no server to start yet.
MSG
