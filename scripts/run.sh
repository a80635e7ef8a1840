#!/usr/bin/env bash
# Installs dependencies, builds cuckood and cuckooctl, and starts the server
# with its embedded defaults: gRPC on 0.0.0.0:50051, admin HTTP (/metrics,
# /healthz, /readyz) on 0.0.0.0:9090, data in ./data. Extra arguments go to
# cuckood (e.g. --listen=127.0.0.1:6000); so do CUCKOOD_* environment
# variables.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
bash scripts/build.sh release cuckood cuckooctl
exec build/release/server/cuckood "$@"
