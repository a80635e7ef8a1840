#include "server/observability/metrics.h"

#include <dirent.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <limits>
#include <sstream>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/time/clock.h"
#include "cuckoo_version.h"
#include "prometheus/counter.h"
#include "prometheus/gauge.h"
#include "prometheus/histogram.h"
#include "prometheus/metric_family.h"
#include "prometheus/registry.h"
#include "prometheus/text_serializer.h"
#include "server/observability/metric_families.h"

namespace cuckoo::server {
namespace {

using prometheus::MetricFamily;
using prometheus::MetricType;

constexpr std::string_view kMethodNames[kRpcMethods] = {
    "Insert",       "Lookup",       "Delete",          "Count",         "CreateFilter",
    "GetFilter",    "ListFilters",  "DropFilter",      "GetServerInfo", "Snapshot",
    "ExportFilter", "ImportFilter", "SetFilterExpiry", "RenameFilter"};
static_assert(kMethodNames[kRpcMethods - 1] == "RenameFilter");

constexpr std::string_view kCodeNames[] = {
    "OK",        "CANCELLED",      "UNKNOWN",           "INVALID_ARGUMENT",   "DEADLINE_EXCEEDED",
    "NOT_FOUND", "ALREADY_EXISTS", "PERMISSION_DENIED", "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION",
    "ABORTED",   "OUT_OF_RANGE",   "UNIMPLEMENTED",     "INTERNAL",           "UNAVAILABLE",
    "DATA_LOSS", "UNAUTHENTICATED"};
static_assert(std::size(kCodeNames) == grpc::StatusCode::UNAUTHENTICATED + 1);

constexpr bool IsDataPath(size_t method) {
  return method <= static_cast<size_t>(RpcMethod::kCount);
}

// kRpcDurationBuckets in nanoseconds, for the comparison on the data path.
constexpr std::array<int64_t, kRpcDurationBuckets.size()> kDurationBucketsNs = [] {
  std::array<int64_t, kRpcDurationBuckets.size()> ns{};
  for (size_t i = 0; i < ns.size(); ++i) {
    ns[i] = static_cast<int64_t>(kRpcDurationBuckets[i] * 1e9 + 0.5);
  }
  return ns;
}();

constexpr std::array<uint64_t, kBatchKeysBuckets.size()> kBatchBucketsInt = [] {
  std::array<uint64_t, kBatchKeysBuckets.size()> n{};
  for (size_t i = 0; i < n.size(); ++i) n[i] = static_cast<uint64_t>(kBatchKeysBuckets[i]);
  return n;
}();

const std::vector<double> kSnapshotDurationBuckets = {0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1,
                                                      2.5,   5,     10,   30,   60,  120, 300};

struct ProcStat {
  double cpu_seconds = 0;
  double start_time_seconds = 0;
  double virtual_bytes = 0;
  double resident_bytes = 0;
  bool ok = false;
};

// /proc/self/stat's fields after the command (which may hold spaces and
// parentheses, so the line is split after the last ')').
ProcStat ReadProcStat() {
  ProcStat st;
  std::ifstream in("/proc/self/stat");
  std::string line;
  if (!std::getline(in, line)) return st;
  const size_t paren = line.rfind(')');
  if (paren == std::string::npos) return st;
  // Field 3 (state) is fields[0]; utime is field 14, stime 15, starttime
  // 22, vsize 23, rss 24 (proc(5)).
  std::istringstream in_fields(line.substr(paren + 1));
  std::vector<std::string> fields;
  for (std::string f; fields.size() < 22 && in_fields >> f;) fields.push_back(std::move(f));
  if (fields.size() < 22) return st;
  uint64_t utime = 0, stime = 0, start_ticks = 0, vsize = 0, rss_pages = 0;
  if (!absl::SimpleAtoi(fields[11], &utime) || !absl::SimpleAtoi(fields[12], &stime) ||
      !absl::SimpleAtoi(fields[19], &start_ticks) || !absl::SimpleAtoi(fields[20], &vsize) ||
      !absl::SimpleAtoi(fields[21], &rss_pages)) {
    return st;
  }
  const double ticks = static_cast<double>(sysconf(_SC_CLK_TCK));
  st.cpu_seconds = static_cast<double>(utime + stime) / ticks;
  st.virtual_bytes = static_cast<double>(vsize);
  st.resident_bytes = static_cast<double>(rss_pages) * static_cast<double>(sysconf(_SC_PAGESIZE));
  // Start time is in ticks since boot; boot time is /proc/stat's btime.
  std::ifstream stat("/proc/stat");
  for (std::string l; std::getline(stat, l);) {
    uint64_t btime = 0;
    if (l.starts_with("btime ") && absl::SimpleAtoi(l.substr(6), &btime)) {
      st.start_time_seconds = static_cast<double>(btime) + static_cast<double>(start_ticks) / ticks;
    }
  }
  st.ok = true;
  return st;
}

double OpenFds() {
  DIR* dir = opendir("/proc/self/fd");
  if (dir == nullptr) return 0;
  double n = 0;
  while (dirent* e = readdir(dir)) {
    if (e->d_name[0] != '.') ++n;
  }
  closedir(dir);
  return n - 1;  // The one opendir holds.
}

}  // namespace

std::string_view RpcMethodName(RpcMethod method) {
  return kMethodNames[static_cast<size_t>(method)];
}

std::string_view StatusCodeName(grpc::StatusCode code) {
  const auto i = static_cast<size_t>(code);
  return i < std::size(kCodeNames) ? kCodeNames[i] : "UNKNOWN";
}

Metrics::Metrics(MetricsOptions options)
    : options_(std::move(options)),
      stripes_(std::make_unique<Stripe[]>(kStripes)),
      registry_(std::make_shared<prometheus::Registry>()) {
  auto& snapshots = prometheus::BuildCounter()
                        .Name("cuckood_snapshots_total")
                        .Help(
                            "Snapshot files written (result=ok) or that failed (result=error), "
                            "periodic, requested and final")
                        .Register(*registry_);
  snapshots_ok_ = &snapshots.Add({{"result", "ok"}});
  snapshots_error_ = &snapshots.Add({{"result", "error"}});
  snapshot_bytes_ = &prometheus::BuildCounter()
                         .Name("cuckood_snapshot_bytes_total")
                         .Help("Bytes of snapshot files written")
                         .Register(*registry_)
                         .Add({});
  snapshot_duration_ = &prometheus::BuildHistogram()
                            .Name("cuckood_snapshot_duration_seconds")
                            .Help("Time to write one filter's snapshot file, fsync included")
                            .Register(*registry_)
                            .Add({}, kSnapshotDurationBuckets);
  load_seconds_ = &prometheus::BuildGauge()
                       .Name("cuckood_snapshot_load_seconds")
                       .Help("Time start-up took to load the data directory's snapshots")
                       .Register(*registry_)
                       .Add({});
  loaded_filters_ = &prometheus::BuildGauge()
                         .Name("cuckood_snapshot_loaded_filters")
                         .Help("Filters loaded from snapshots at start-up")
                         .Register(*registry_)
                         .Add({});
  loaded_bytes_ = &prometheus::BuildGauge()
                       .Name("cuckood_snapshot_loaded_bytes")
                       .Help("Bytes of snapshot files loaded at start-up")
                       .Register(*registry_)
                       .Add({});
  quarantined_ = &prometheus::BuildGauge()
                      .Name("cuckood_snapshot_quarantined_files")
                      .Help("Bad snapshot files moved to quarantine/ at start-up")
                      .Register(*registry_)
                      .Add({});
  wal_bytes_ = &prometheus::BuildCounter()
                    .Name("cuckood_wal_written_bytes_total")
                    .Help("Bytes of records written to the write-ahead log")
                    .Register(*registry_)
                    .Add({});
  wal_writes_ = &prometheus::BuildCounter()
                     .Name("cuckood_wal_writes_total")
                     .Help("Group commits: writes of the records appended since the last one")
                     .Register(*registry_)
                     .Add({});
  wal_group_records_ = &prometheus::BuildHistogram()
                            .Name("cuckood_wal_group_records")
                            .Help("Records (shard parts of write batches) per group commit")
                            .Register(*registry_)
                            .Add({}, prometheus::Histogram::BucketBoundaries{
                                         1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 4096});
  wal_sync_duration_ = &prometheus::BuildHistogram()
                            .Name("cuckood_wal_fdatasync_duration_seconds")
                            .Help("Time one fdatasync of the write-ahead log took")
                            .Register(*registry_)
                            .Add({}, prometheus::Histogram::BucketBoundaries{
                                         50e-6, 100e-6, 250e-6, 500e-6, 1e-3, 2.5e-3, 5e-3, 10e-3,
                                         25e-3, 50e-3, 100e-3, 250e-3, 1});
  const ProcStat st = ReadProcStat();
  start_time_seconds_ =
      st.ok && st.start_time_seconds > 0 ? st.start_time_seconds : absl::ToUnixSeconds(absl::Now());
}

Metrics::~Metrics() = default;

Metrics::MethodCounters& Metrics::Counters(RpcMethod method) {
  // Threads spread over the stripes round-robin, once each.
  static std::atomic<size_t> next{0};
  thread_local const size_t stripe = next.fetch_add(1, std::memory_order_relaxed) % kStripes;
  return stripes_[stripe].method[static_cast<size_t>(method)];
}

void Metrics::RecordRpc(RpcMethod method, grpc::StatusCode code, std::chrono::nanoseconds elapsed) {
  MethodCounters& c = Counters(method);
  const auto code_index = static_cast<size_t>(code);
  c.calls[code_index < c.calls.size() ? code_index : size_t{grpc::StatusCode::UNKNOWN}].fetch_add(
      1, std::memory_order_relaxed);
  const int64_t ns = std::max<int64_t>(0, elapsed.count());
  const size_t bucket = std::lower_bound(kDurationBucketsNs.begin(), kDurationBucketsNs.end(), ns) -
                        kDurationBucketsNs.begin();
  c.duration[bucket].fetch_add(1, std::memory_order_relaxed);
  c.duration_ns.fetch_add(static_cast<uint64_t>(ns), std::memory_order_relaxed);
}

void Metrics::RecordAuthFailure(RpcMethod method, size_t reason) {
  auth_failures_[static_cast<size_t>(method)][std::min(reason, kMaxAuthFailureReasons - 1)]
      .fetch_add(1, std::memory_order_relaxed);
}

void Metrics::RecordRedisAuthFailure(size_t command, size_t reason) {
  redis_auth_failures_[std::min(command, kMaxRedisCommands - 1)]
                      [std::min(reason, kMaxAuthFailureReasons - 1)]
                          .fetch_add(1, std::memory_order_relaxed);
}

namespace {
// Why the Redis port closed a connection (resp::ServerOptions::on_close).
constexpr std::array<std::string_view, 15> kRedisCloseReasons = {
    "quit",          "eof",
    "error",         "protocol_error",
    "idle",          "slow_client",
    "shutdown",      "max_clients",
    "client_memory", "unauthenticated_memory",
    "auth_timeout",  "max_unauthenticated",
    "tls_handshake", "killed",
    "other"};
}  // namespace

void Metrics::SetRedisCommands(absl::Span<const std::string_view> names, size_t always_shown) {
  MutexLock lock(&mu_);
  redis_commands_ = names.subspan(0, std::min(names.size(), kMaxRedisCommands));
  redis_always_shown_ = always_shown;
}

void Metrics::AddCollector(MetricsSection section, MetricsCollector collector) {
  MutexLock lock(&mu_);
  collectors_[static_cast<size_t>(section)].push_back(std::move(collector));
}

void Metrics::RecordRedisCommand(size_t command, RedisOutcome outcome,
                                 std::chrono::nanoseconds elapsed, size_t keys) {
  static std::atomic<size_t> next{0};
  thread_local const size_t stripe = next.fetch_add(1, std::memory_order_relaxed) % kStripes;
  RedisCounters& c = stripes_[stripe].redis[std::min(command, kMaxRedisCommands - 1)];
  c.calls[static_cast<size_t>(outcome)].fetch_add(1, std::memory_order_relaxed);
  const int64_t ns = std::max<int64_t>(0, elapsed.count());
  const size_t bucket = std::lower_bound(kDurationBucketsNs.begin(), kDurationBucketsNs.end(), ns) -
                        kDurationBucketsNs.begin();
  c.duration[bucket].fetch_add(1, std::memory_order_relaxed);
  c.duration_ns.fetch_add(static_cast<uint64_t>(ns), std::memory_order_relaxed);
  if (keys > 0) c.keys.fetch_add(keys, std::memory_order_relaxed);
}

void Metrics::RecordRedisConnection() {
  redis_connections_.fetch_add(1, std::memory_order_relaxed);
}

void Metrics::RecordRedisClose(std::string_view reason) {
  size_t i = 0;
  while (i + 1 < kRedisCloseReasons.size() && kRedisCloseReasons[i] != reason) ++i;
  redis_closes_[i].fetch_add(1, std::memory_order_relaxed);
}

void Metrics::RecordAuthReload(bool ok) {
  (ok ? auth_reloads_ok_ : auth_reloads_failed_).fetch_add(1, std::memory_order_relaxed);
}

void Metrics::RecordKeys(RpcMethod method, size_t keys) {
  MethodCounters& c = Counters(method);
  c.keys.fetch_add(keys, std::memory_order_relaxed);
  const size_t bucket =
      std::lower_bound(kBatchBucketsInt.begin(), kBatchBucketsInt.end(), uint64_t{keys}) -
      kBatchBucketsInt.begin();
  c.batch[bucket].fetch_add(1, std::memory_order_relaxed);
}

void Metrics::RecordSnapshotWrite(bool ok, uint64_t bytes, absl::Duration duration) {
  if (!ok) {
    snapshots_error_->Increment();
    return;
  }
  snapshots_ok_->Increment();
  snapshot_bytes_->Increment(static_cast<double>(bytes));
  snapshot_duration_->Observe(absl::ToDoubleSeconds(duration));
}

void Metrics::RecordWalWrite(uint64_t bytes, uint64_t records) {
  wal_bytes_->Increment(static_cast<double>(bytes));
  wal_writes_->Increment();
  wal_group_records_->Observe(static_cast<double>(records));
}

void Metrics::RecordWalSync(absl::Duration duration) {
  wal_sync_duration_->Observe(absl::ToDoubleSeconds(duration));
}

void Metrics::RecordLoad(absl::Duration duration, uint64_t filters, uint64_t bytes,
                         uint64_t quarantined) {
  load_seconds_->Set(absl::ToDoubleSeconds(duration));
  loaded_filters_->Set(static_cast<double>(filters));
  loaded_bytes_->Set(static_cast<double>(bytes));
  quarantined_->Set(static_cast<double>(quarantined));
}

void Metrics::RenderProcess(MetricFamilies* out) const {
  AddSeries(AddFamily(out, "cuckood_build_info", "Always 1; the version of cuckood running",
                      MetricType::Gauge),
            {{"version", kVersion}})
      .gauge.value = 1;
  AddGauge(out, "process_start_time_seconds", "When the process started, seconds since the epoch",
           start_time_seconds_);
  if (const ProcStat st = ReadProcStat(); st.ok) {
    AddCounter(out, "process_cpu_seconds_total", "User and system CPU time used", st.cpu_seconds);
    AddGauge(out, "process_resident_memory_bytes", "Resident set size (RSS)", st.resident_bytes);
    AddGauge(out, "process_virtual_memory_bytes", "Virtual memory size", st.virtual_bytes);
  }
  AddGauge(out, "process_open_fds", "Open file descriptors", OpenFds());
}

// Calls: the stripes summed.
void Metrics::RenderCalls(MetricFamilies* out) const {
  MetricFamily requests =
      NewFamily("cuckood_rpc_requests_total",
                "cuckoo.v1.FilterService calls finished, by method and gRPC status code",
                MetricType::Counter);
  MetricFamily durations =
      NewFamily("cuckood_rpc_duration_seconds",
                "Time from a call's arrival to its status, by method", MetricType::Histogram);
  MetricFamily keys =
      NewFamily("cuckood_keys_total", "Keys in applied Insert, Lookup, Delete and Count calls",
                MetricType::Counter);
  MetricFamily batches =
      NewFamily("cuckood_batch_keys", "Keys per applied Insert, Lookup, Delete and Count call",
                MetricType::Histogram);
  for (size_t m = 0; m < kRpcMethods; ++m) {
    std::array<uint64_t, 17> calls{};
    std::array<uint64_t, kRpcDurationBuckets.size() + 1> duration{};
    std::array<uint64_t, kBatchKeysBuckets.size() + 1> batch{};
    uint64_t duration_ns = 0, key_count = 0;
    for (size_t s = 0; s < kStripes; ++s) {
      const MethodCounters& c = stripes_[s].method[m];
      for (size_t i = 0; i < calls.size(); ++i) {
        calls[i] += c.calls[i].load(std::memory_order_relaxed);
      }
      for (size_t i = 0; i < duration.size(); ++i) {
        duration[i] += c.duration[i].load(std::memory_order_relaxed);
      }
      for (size_t i = 0; i < batch.size(); ++i) {
        batch[i] += c.batch[i].load(std::memory_order_relaxed);
      }
      duration_ns += c.duration_ns.load(std::memory_order_relaxed);
      key_count += c.keys.load(std::memory_order_relaxed);
    }
    const std::string method(kMethodNames[m]);
    for (size_t code = 0; code < calls.size(); ++code) {
      // OK always, so every method's series exists from the start.
      if (calls[code] == 0 && code != 0) continue;
      AddSeries(requests, {{"code", std::string(kCodeNames[code])}, {"method", method}})
          .counter.value = static_cast<double>(calls[code]);
    }
    FillHistogram(duration, kRpcDurationBuckets, static_cast<double>(duration_ns) / 1e9,
                  &AddSeries(durations, {{"method", method}}));
    if (IsDataPath(m)) {
      AddSeries(keys, {{"method", method}}).counter.value = static_cast<double>(key_count);
      FillHistogram(batch, kBatchKeysBuckets, static_cast<double>(key_count),
                    &AddSeries(batches, {{"method", method}}));
    }
  }
  out->push_back(std::move(requests));
  out->push_back(std::move(durations));
  out->push_back(std::move(keys));
  out->push_back(std::move(batches));
}

// The Redis-protocol port's counters, when it is on.
void Metrics::RenderRedis(MetricFamilies* out) const {
  absl::Span<const std::string_view> names;
  size_t always_shown = 0;
  {
    MutexLock lock(&mu_);
    names = redis_commands_;
    always_shown = redis_always_shown_;
  }
  if (names.empty()) return;
  MetricFamily commands =
      NewFamily("cuckood_redis_commands_total",
                "Redis-protocol commands answered, by command and outcome (ok; error: an -ERR "
                "reply; denied: -NOAUTH, -WRONGPASS or -NOPERM)",
                MetricType::Counter);
  MetricFamily redis_durations = NewFamily(
      "cuckood_redis_command_duration_seconds",
      "Time from a Redis command's parse to its reply, by command", MetricType::Histogram);
  MetricFamily items =
      NewFamily("cuckood_redis_items_total", "Items in answered CF.* data commands, by command",
                MetricType::Counter);
  constexpr std::array<std::string_view, kRedisOutcomes> kOutcomes = {"ok", "error", "denied"};
  for (size_t m = 0; m < names.size(); ++m) {
    std::array<uint64_t, kRedisOutcomes> calls{};
    std::array<uint64_t, kRpcDurationBuckets.size() + 1> duration{};
    uint64_t duration_ns = 0, item_count = 0;
    for (size_t s = 0; s < kStripes; ++s) {
      const RedisCounters& c = stripes_[s].redis[m];
      for (size_t i = 0; i < calls.size(); ++i) {
        calls[i] += c.calls[i].load(std::memory_order_relaxed);
      }
      for (size_t i = 0; i < duration.size(); ++i) {
        duration[i] += c.duration[i].load(std::memory_order_relaxed);
      }
      duration_ns += c.duration_ns.load(std::memory_order_relaxed);
      item_count += c.keys.load(std::memory_order_relaxed);
    }
    const uint64_t total = calls[0] + calls[1] + calls[2];
    // The CF.* commands always, the others once used.
    const bool shown = m < always_shown;
    if (total == 0 && !shown) continue;
    const std::string command(names[m]);
    for (size_t o = 0; o < kRedisOutcomes; ++o) {
      if (calls[o] == 0 && o != 0) continue;
      AddSeries(commands, {{"command", command}, {"outcome", std::string(kOutcomes[o])}})
          .counter.value = static_cast<double>(calls[o]);
    }
    FillHistogram(duration, kRpcDurationBuckets, static_cast<double>(duration_ns) / 1e9,
                  &AddSeries(redis_durations, {{"command", command}}));
    if (shown)
      AddSeries(items, {{"command", command}}).counter.value = static_cast<double>(item_count);
  }
  out->push_back(std::move(commands));
  out->push_back(std::move(redis_durations));
  out->push_back(std::move(items));
  AddCounter(out, "cuckood_redis_connections_total", "Redis-protocol connections accepted",
             static_cast<double>(redis_connections_.load(std::memory_order_relaxed)));
  MetricFamily& closed =
      AddFamily(out, "cuckood_redis_connections_closed_total",
                "Redis-protocol connections closed, by reason (quit, eof, error, protocol_error, "
                "idle, slow_client, shutdown, max_clients, client_memory, unauthenticated_memory, "
                "auth_timeout, max_unauthenticated, other)",
                MetricType::Counter);
  for (size_t i = 0; i < kRedisCloseReasons.size(); ++i) {
    AddSeries(closed, {{"reason", std::string(kRedisCloseReasons[i])}}).counter.value =
        static_cast<double>(redis_closes_[i].load(std::memory_order_relaxed));
  }
}

// Refusals and reloads of the access file.
void Metrics::RenderSecurity(MetricFamilies* out) const {
  absl::Span<const std::string_view> redis_commands;
  {
    MutexLock lock(&mu_);
    redis_commands = redis_commands_;
  }
  MetricFamily& denied =
      AddFamily(out, "cuckood_auth_failures_total",
                "Calls refused: UNAUTHENTICATED (missing_credentials, malformed_header, "
                "unknown_token, unknown_certificate) or PERMISSION_DENIED (permission_denied), by "
                "method (AUTH: the Redis port's AUTH and HELLO ... AUTH)",
                MetricType::Counter);
  const auto add = [&](std::string method, const auto& counts) {
    for (size_t r = 0; r < options_.auth_failure_reasons.size() && r < counts.size(); ++r) {
      const uint64_t n = counts[r].load(std::memory_order_relaxed);
      if (n == 0) continue;
      AddSeries(denied,
                {{"method", method}, {"reason", std::string(options_.auth_failure_reasons[r])}})
          .counter.value = static_cast<double>(n);
    }
  };
  for (size_t m = 0; m < kRpcMethods; ++m) {
    add(std::string(RpcMethodName(static_cast<RpcMethod>(m))), auth_failures_[m]);
  }
  for (size_t m = 0; m < redis_commands.size(); ++m) {
    std::string method(redis_commands[m]);
    absl::AsciiStrToUpper(&method);
    add(std::move(method), redis_auth_failures_[m]);
  }
  MetricFamily& reloads =
      AddFamily(out, "cuckood_auth_reloads_total",
                "Reloads of the access file (--auth-tokens), by outcome; a failed one keeps the "
                "previous file in force",
                MetricType::Counter);
  AddSeries(reloads, {{"outcome", "ok"}}).counter.value =
      static_cast<double>(auth_reloads_ok_.load(std::memory_order_relaxed));
  AddSeries(reloads, {{"outcome", "error"}}).counter.value =
      static_cast<double>(auth_reloads_failed_.load(std::memory_order_relaxed));
}

void Metrics::RenderCollectors(MetricsSection section, MetricFamilies* out) const {
  // Copied, so that scrapes do not wait for each other's collectors.
  std::vector<MetricsCollector> collectors;
  {
    MutexLock lock(&mu_);
    collectors = collectors_[static_cast<size_t>(section)];
  }
  for (const MetricsCollector& collect : collectors) collect(out);
}

std::string Metrics::Render() const {
  MetricFamilies out;
  RenderProcess(&out);
  RenderCalls(&out);
  RenderCollectors(MetricsSection::kCalls, &out);
  RenderRedis(&out);
  RenderCollectors(MetricsSection::kRedis, &out);
  RenderCollectors(MetricsSection::kState, &out);
  RenderSecurity(&out);
  RenderCollectors(MetricsSection::kSecurity, &out);
  // Snapshots and start-up.
  std::vector<MetricFamily> rare = registry_->Collect();
  std::move(rare.begin(), rare.end(), std::back_inserter(out));
  std::ostringstream text;
  prometheus::TextSerializer().Serialize(text, out);
  return std::move(text).str();
}

}  // namespace cuckoo::server
