// Metrics: what cuckood exposes on the admin server's /metrics, in the
// Prometheus text format (version 0.0.4), rendered by prometheus-cpp's
// TextSerializer. Every metric is listed in server/README.md.
//
//   Metrics metrics({.auth_failure_reasons = ...});
//   metrics.RecordRpc(RpcMethod::kInsert, grpc::StatusCode::OK, elapsed);  // per call
//   metrics.RecordKeys(RpcMethod::kInsert, keys.size());                  // per data-path call
//   metrics.AddCollector(MetricsSection::kState, [&](MetricFamilies* out) { ... });  // at start
//   std::string text = metrics.Render();                                  // per scrape
//
// A leaf: Metrics knows no other part of the server. It counts what is
// counted on the call path (calls, keys, the Redis port's commands,
// refusals, snapshot and log writes), with label values its owners give it
// (the Redis commands' names from server/resp/commands/command_names.h, the
// refusal reasons from server/security/auth.h); the gauges read at scrape
// time from other parts (filters, the write-ahead log, cluster mode, TLS,
// connections) come from collectors their owners register
// (server/metrics_collectors.h), each at its place on the page.
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
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "base/mutex.h"

namespace prometheus {
class Counter;
class Gauge;
class Histogram;
class Registry;
struct MetricFamily;
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
  kSetFilterExpiry,
  kRenameFilter,
};
inline constexpr size_t kRpcMethods = 14;
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

// Most Redis-port commands (the `command` label of cuckood_redis_*) and
// refusal reasons (the `reason` label of cuckood_auth_failures_total) the
// counters have room for; their names are their owners'.
inline constexpr size_t kMaxRedisCommands = 64;
inline constexpr size_t kMaxAuthFailureReasons = 8;
// How a Redis command ended, the `outcome` label: answered, refused for its
// input or state (an -ERR reply), or refused for its credentials (-NOAUTH,
// -WRONGPASS, -NOPERM).
enum class RedisOutcome : uint8_t { kOk, kError, kDenied };
inline constexpr size_t kRedisOutcomes = 3;

// What a collector appends to: metric families, in the order served
// (server/observability/metric_families.h has the helpers to build them).
using MetricFamilies = std::vector<prometheus::MetricFamily>;
// Appends the families of one part of the server, read at scrape time.
// Called by Render, on the scraping thread, while that part is alive (its
// owner registers it for as long as it lives).
using MetricsCollector = std::function<void(MetricFamilies* out)>;

// Where on the page a collector's families go: each section is Metrics's own
// families, then the collectors registered for it, in registration order.
enum class MetricsSection : uint8_t {
  // After the calls' counters (cuckood_rpc_*, cuckood_keys_total,
  // cuckood_batch_keys).
  kCalls,
  // After the Redis port's counters (shown once SetRedisCommands is called).
  kRedis,
  // The state of the server: filters, memory, the log, cluster mode.
  kState,
  // After the access counters (cuckood_auth_failures_total,
  // cuckood_auth_reloads_total).
  kSecurity,
};
inline constexpr size_t kMetricsSections = 4;

struct MetricsOptions {
  // The refusal reasons, the `reason` label of cuckood_auth_failures_total,
  // by the index RecordAuthFailure takes (server/security/auth.h:
  // AuthFailureName of each AuthFailure); at most kMaxAuthFailureReasons.
  std::vector<std::string_view> auth_failure_reasons;
};

class Metrics {
 public:
  explicit Metrics(MetricsOptions options = {});
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
  // What start-up loaded: how long it took, the filters and bytes loaded,
  // the files quarantined.
  void RecordLoad(absl::Duration duration, uint64_t filters, uint64_t bytes, uint64_t quarantined);

  // One group commit of the write-ahead log: bytes and records written
  // with one write.
  void RecordWalWrite(uint64_t bytes, uint64_t records);
  // One fdatasync of the log, and how long it took.
  void RecordWalSync(absl::Duration duration);

  // A call refused by authentication or authorization, `reason` an index
  // into MetricsOptions::auth_failure_reasons.
  void RecordAuthFailure(RpcMethod method, size_t reason);
  // A Redis-port command (an index into SetRedisCommands' names) refused by
  // authentication or authorization: counted with `method` its name in
  // upper case ("AUTH" for a failed AUTH or HELLO ... AUTH, "CF.ADD" for a
  // CF.ADD refused with NOPERM).
  void RecordRedisAuthFailure(size_t command, size_t reason);
  // A reload of the access file (file changed, or SIGHUP).
  void RecordAuthReload(bool ok);

  // The Redis-protocol port's commands, the `command` label of
  // cuckood_redis_*: `names` in lower case, the last one for every command
  // not served (a client cannot add series by sending names), at most
  // kMaxRedisCommands; the first `always_shown` have series from the start,
  // the others once used. Until this is called (no Redis port), the
  // cuckood_redis_* counters are not served. Call it once, before the
  // commands are counted; `names` must outlive this.
  void SetRedisCommands(absl::Span<const std::string_view> names, size_t always_shown);
  // One command (an index into those names) answered, how, and how long from
  // its parse to its reply; `keys` is the items of a CF.* data command (0
  // for others).
  void RecordRedisCommand(size_t command, RedisOutcome outcome, std::chrono::nanoseconds elapsed,
                          size_t keys);
  // A connection accepted, and one closed with `reason` (kRedisCloseReasons).
  void RecordRedisConnection();
  void RecordRedisClose(std::string_view reason);

  // Adds `collector` at the end of `section`; it is called by every Render
  // from then on, as long as this Metrics lives.
  void AddCollector(MetricsSection section, MetricsCollector collector);

  // The whole exposition: the counters above, the process's gauges from
  // /proc/self, and every collector's families.
  std::string Render() const;

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
    std::array<RedisCounters, kMaxRedisCommands> redis;
  };
  static constexpr size_t kStripes = 16;
  // This thread's stripe.
  MethodCounters& Counters(RpcMethod method);

  // Render's steps, each appending its families to `out`.
  void RenderProcess(MetricFamilies* out) const;
  void RenderCalls(MetricFamilies* out) const;
  void RenderRedis(MetricFamilies* out) const;
  void RenderSecurity(MetricFamilies* out) const;
  void RenderCollectors(MetricsSection section, MetricFamilies* out) const;

  const MetricsOptions options_;
  std::unique_ptr<Stripe[]> stripes_;
  std::array<std::array<std::atomic<uint64_t>, kMaxAuthFailureReasons>, kRpcMethods>
      auth_failures_{};
  std::array<std::array<std::atomic<uint64_t>, kMaxAuthFailureReasons>, kMaxRedisCommands>
      redis_auth_failures_{};
  std::atomic<uint64_t> auth_reloads_ok_{0};
  std::atomic<uint64_t> redis_connections_{0};
  // By reason, in the order of kRedisCloseReasons (metrics.cc).
  std::array<std::atomic<uint64_t>, 14> redis_closes_{};
  std::atomic<uint64_t> auth_reloads_failed_{0};
  // When this process started (/proc/self/stat), seconds since the epoch.
  double start_time_seconds_ = 0;

  mutable Mutex mu_;
  // SetRedisCommands' names (empty: no Redis port) and how many are always
  // shown.
  absl::Span<const std::string_view> redis_commands_ ABSL_GUARDED_BY(mu_);
  size_t redis_always_shown_ ABSL_GUARDED_BY(mu_) = 0;
  std::array<std::vector<MetricsCollector>, kMetricsSections> collectors_ ABSL_GUARDED_BY(mu_);

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
