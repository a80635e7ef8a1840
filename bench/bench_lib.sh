# Shell functions shared by the benchmark scripts (sourced, not run, from the
# repository's root: `. bench/bench_lib.sh`).

# free_port: prints a TCP port of 127.0.0.1 that nothing is bound to now
# (the kernel's pick for port 0), for a server the script starts.
free_port() {
  /usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

# wait_for_cuckood_and_redis CUCKOOD_LOG REDIS_PORT: waits up to 10 s until
# cuckood's log says "serving on" and redis-server answers PING; exits with
# cuckood's log on stderr if cuckood did not start.
wait_for_cuckood_and_redis() {
  local log=$1 redis_port=$2
  for _ in $(seq 100); do
    grep -q "serving on" "$log" && redis-cli -p "$redis_port" ping >/dev/null 2>&1 && break
    sleep 0.1
  done
  grep -q "serving on" "$log" || { echo "cuckood did not start:" >&2; cat "$log" >&2; exit 1; }
}

# build_release TARGET...: builds the targets into build/release, the build
# the scripts run; with CUCKOO_BENCH_BIN (another build's directory) it
# builds nothing and stops, naming the directory: a measurement of another
# build must not compile this tree while it runs.
build_release() {
  if [ -n "${CUCKOO_BENCH_BIN:-}" ]; then
    echo "$(basename "$0"): CUCKOO_BENCH_BIN=$CUCKOO_BENCH_BIN lacks one of: $*; build them there" >&2
    exit 2
  fi
  bash scripts/build.sh release "$@" >/dev/null
}
