#!/usr/bin/env bash
# Installs dependencies, builds cuckood, cuckooctl and the Python package
# (build/release/python), and starts the server with its embedded defaults:
# gRPC on 0.0.0.0:50051, admin HTTP (/metrics, /healthz, /readyz) on
# 0.0.0.0:9090, data in ./data; plus the Redis-protocol port on
# 127.0.0.1:6379 (CUCKOOD_REDIS_LISTEN= turns it off; a --redis-listen
# argument wins), so that every example in README.md works after it. Extra
# arguments go to cuckood (e.g. --listen=127.0.0.1:6000); so do CUCKOOD_*
# environment variables. tests/e2e/readme_doctest.py starts cuckood the same
# way: keep the two in step.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
bash scripts/build.sh release cuckood cuckooctl cuckoo_python
export CUCKOOD_REDIS_LISTEN="${CUCKOOD_REDIS_LISTEN-127.0.0.1:6379}"
exec build/release/server/cuckood "$@"
