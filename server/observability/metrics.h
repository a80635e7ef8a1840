// Metrics: what cuckood exposes on the admin server's /metrics, in the
// Prometheus text format (version 0.0.4), rendered by prometheus-cpp's
// TextSerializer. Every metric is listed in server/README.md.
//
//   Metrics metrics;
//   metrics.RecordRpc(RpcMethod::kInsert, grpc::StatusCode::OK, elapsed);  // per call
//   metrics.RecordKeys(RpcMethod::kInsert, keys.size());                  // per data-path call
//   std::string text = metrics.Render({.registry = &registry});           // per scrape
//
// The per-call counters are on the data path (millions of keys a second
// arrive in batches on gRPC's threads), so they are not prometheus-cpp's
// Counter and Histogram (a compare-and-swap loop on one shared double, and a
// mutex per histogram): each thread adds with relaxed atomics to one of a
// few cache-line-aligned stripes, and a scrape sums the stripes. A call
// costs one counter, one duration bucket and the duration sum; a data-path
// call adds the key counter and one batch-size bucket; nothing is per key.
// Snapshot and start-up metrics, which change rarely, are prometheus-cpp
// families in a prometheus::Registry. Per-filter, memory and process gauges
// are computed at scrape time, so a dropped filter's series disappear with it.
//
// Thread safety: all methods may be called from any thread.
#ifndef CUCKOO_SERVER_OBSERVABILITY_METRICS_H_
#define CUCKOO_SERVER_OBSERVABILITY_METRICS_H_

#include <grpcpp/support/status.h>

#include <array>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "absl/time/time.h"
#include "core/registry.h"
#include "server/security/auth.h"
#include "server/storage/persistence.h"

namespace prometheus {
class Counter;
class Gauge;
class Histogram;
class Registry;
}  // namespace prometheus

namespace cuckoo::server {

// The RPCs of cuckoo.v1.FilterService, the `method` label.
enum class RpcMethod : uint8_t {
  kInsert,
  kLookup,
  kDelete,
  kCount,
  kCreateFilter,
  kGetFilter,
  kListFilters,
  kDropFilter,
  kGetServerInfo,
  kSnapshot,
  kExportFilter,
  kImportFilter,
};
inline constexpr size_t kRpcMethods = 12;
// "Insert", "CreateFilter", ...: the proto's method name.
std::string_view RpcMethodName(RpcMethod method);
// "OK", "INVALID_ARGUMENT", ...: gRPC's name for the code.
std::string_view StatusCodeName(grpc::StatusCode code);

// Upper bounds (seconds) of cuckood_rpc_duration_seconds' buckets: 10us to 10s.
inline constexpr std::array<double, 19> kRpcDurationBuckets = {
    10e-6, 25e-6, 50e-6,  100e-6, 250e-6, 500e-6, 1e-3, 2.5e-3, 5e-3, 10e-3,
    25e-3, 50e-3, 100e-3, 250e-3, 500e-3, 1,      2.5,  5,      10};
// Upper bounds of cuckood_batch_keys' buckets (keys per request).
inline constexpr std::array<double, 11> kBatchKeysBuckets = {1,    5,    10,    50,    100,   500,
                                                             1000, 5000, 10000, 50000, 100000};

// The Redis-protocol port's commands (server/resp/commands/resp_commands.h), the `command`
// label of cuckood_redis_*: lower case, "unknown" for every command
// cuckood does not serve (a client cannot add series by sending names).
inline constexpr std::array<std::string_view, 30> kRedisCommandNames = {
    "cf.reserve", "cf.add",  "cf.addnx", "cf.insert", "cf.insertnx", "cf.exists",
    "cf.mexists", "cf.del",  "cf.count", "cf.info",   "cf.scandump", "cf.loadchunk",
    "ping",       "echo",    "hello",    "auth",      "select",      "client",
    "quit",       "command", "info",     "del",       "exists",      "type",
    "scan",       "keys",    "dbsize",   "config",    "reset",       "unknown"};
inline constexpr size_t kRedisCommands = kRedisCommandNames.size();
// A Redis command's index in kRedisCommandNames (lower-cases `name`):
// kRedisCommands - 1 ("unknown") for one not served.
size_t RedisCommandIndex(std::string_view name);
// How a Redis command ended, the `outcome` label: answered, refused for its
// input or state (an -ERR reply), or refused for its credentials (-NOAUTH,
// -WRONGPASS, -NOPERM).
enum class RedisOutcome : uint8_t { kOk, kError, kDenied };
inline constexpr size_t kRedisOutcomes = 3;

// State read at scrape time.
class Persistence;
class Wal;
struct ClusterStatus;

struct ScrapeState {
  const FilterRegistry* registry = nullptr;
  // For each filter's latest snapshot (none if null).
  const Persistence* persistence = nullptr;
  // Calls started and not yet done (FilterServiceImpl::calls_in_flight()).
  int64_t calls_in_flight = 0;
  // The Redis-protocol port (--redis-listen): whether it is on, its open
  // connections and its commands running.
  bool redis = false;
  int64_t redis_connections = 0;
  int64_t redis_commands_in_flight = 0;
  // Its connections' memory as counted, and the limit (--redis-client-memory);
  // its connections that have not authenticated.
  int64_t redis_client_memory = 0;
  int64_t redis_client_memory_limit = 0;
  int64_t redis_unauthenticated_connections = 0;
  // The write-ahead log's state (none if null).
  const Wal* wal = nullptr;
  // Cluster mode: the replica's view of its cluster (null on a single node).
  const ClusterStatus* cluster = nullptr;
  // TLS: the served certificate's expiry, seconds since the epoch (0: no
  // TLS).
  double tls_not_after_seconds = 0;
};

class Metrics {
 public:
  Metrics();
  ~Metrics();
  Metrics(const Metrics&) = delete;
  Metrics& operator=(const Metrics&) = delete;

  // One finished call: its status code and how long the handler took from
  // the call's arrival to its Finish.
  void RecordRpc(RpcMethod method, grpc::StatusCode code, std::chrono::nanoseconds elapsed);
  // The keys of one data-path call (Insert, Lookup, Delete, Count) that was
  // applied.
  void RecordKeys(RpcMethod method, size_t keys);

  // One snapshot file written (ok) or failed, by any of: the interval timer,
  // the Snapshot RPC, the final snapshot.
  void RecordSnapshotWrite(bool ok, uint64_t bytes, absl::Duration duration);
  // What start-up loaded.
  void RecordLoad(const LoadSummary& loaded);

  // One group commit of the write-ahead log: bytes and records written
  // with one write.
  void RecordWalWrite(uint64_t bytes, uint64_t records);
  // One fdatasync of the log, and how long it took.
  void RecordWalSync(absl::Duration duration);

  // A call refused by authentication or authorization (server/security/auth.h).
  void RecordAuthFailure(RpcMethod method, AuthFailure reason);
  // A failed AUTH (or HELLO ... AUTH) on the Redis port: method "AUTH".
  void RecordRedisAuthFailure(AuthFailure reason);
  // A reload of the access file (file changed, or SIGHUP).
  void RecordAuthReload(bool ok);

  // The Redis-protocol port: one command (index into kRedisCommandNames)
  // answered, how, and how long from its parse to its reply; `keys` is the
  // items of a CF.* data command (0 for others).
  void RecordRedisCommand(size_t command, RedisOutcome outcome, std::chrono::nanoseconds elapsed,
                          size_t keys);
  // A connection accepted, and one closed with `reason` (kRedisCloseReasons).
  void RecordRedisConnection();
  void RecordRedisClose(std::string_view reason);

  // The whole exposition: the counters above, plus gauges computed now from
  // `state` and /proc/self.
  std::string Render(const ScrapeState& state) const;

 private:
  struct alignas(64) MethodCounters {
    std::array<std::atomic<uint64_t>, 17> calls{};  // By grpc::StatusCode.
    // Not cumulative; the last one is +Inf.
    std::array<std::atomic<uint64_t>, kRpcDurationBuckets.size() + 1> duration{};
    std::atomic<uint64_t> duration_ns{0};
    std::atomic<uint64_t> keys{0};
    std::array<std::atomic<uint64_t>, kBatchKeysBuckets.size() + 1> batch{};
  };
  struct alignas(64) RedisCounters {
    std::array<std::atomic<uint64_t>, kRedisOutcomes> calls{};
    std::array<std::atomic<uint64_t>, kRpcDurationBuckets.size() + 1> duration{};
    std::atomic<uint64_t> duration_ns{0};
    std::atomic<uint64_t> keys{0};
  };
  struct Stripe {
    std::array<MethodCounters, kRpcMethods> method;
    std::array<RedisCounters, kRedisCommands> redis;
  };
  static constexpr size_t kStripes = 16;
  // This thread's stripe.
  MethodCounters& Counters(RpcMethod method);

  std::unique_ptr<Stripe[]> stripes_;
  std::array<std::array<std::atomic<uint64_t>, kAuthFailures>, kRpcMethods> auth_failures_{};
  std::array<std::atomic<uint64_t>, kAuthFailures> redis_auth_failures_{};
  std::atomic<uint64_t> auth_reloads_ok_{0};
  std::atomic<uint64_t> redis_connections_{0};
  // By reason, in the order of kRedisCloseReasons (metrics.cc).
  std::array<std::atomic<uint64_t>, 13> redis_closes_{};
  std::atomic<uint64_t> auth_reloads_failed_{0};
  // When this process started (/proc/self/stat), seconds since the epoch.
  double start_time_seconds_ = 0;

  std::shared_ptr<prometheus::Registry> registry_;
  prometheus::Counter* snapshots_ok_;
  prometheus::Counter* snapshots_error_;
  prometheus::Counter* snapshot_bytes_;
  prometheus::Histogram* snapshot_duration_;
  prometheus::Gauge* load_seconds_;
  prometheus::Gauge* loaded_filters_;
  prometheus::Gauge* loaded_bytes_;
  prometheus::Gauge* quarantined_;
  prometheus::Counter* wal_bytes_;
  prometheus::Counter* wal_writes_;
  prometheus::Histogram* wal_group_records_;
  prometheus::Histogram* wal_sync_duration_;
};

}  // namespace cuckoo::server

#endif  // CUCKOO_SERVER_OBSERVABILITY_METRICS_H_
