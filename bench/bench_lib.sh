# Shell functions shared by the benchmark scripts (sourced, not run).

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
