#include "server/metrics_collectors.h"

#include <algorithm>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/time/clock.h"
#include "server/observability/metric_families.h"

namespace cuckoo::server {

using prometheus::MetricFamily;
using prometheus::MetricType;

void AppendCallsInFlight(int64_t calls_in_flight, MetricFamilies* out) {
  AddGauge(out, "cuckood_rpc_in_flight", "Calls started and not yet finished",
           static_cast<double>(calls_in_flight));
}

void AppendReadiness(bool ready, MetricFamilies* out) {
  AddGauge(out, "cuckood_ready",
           "1 while /readyz answers 200: snapshots loaded, serving, and (a cluster replica) its "
           "log applied and agreed",
           ready ? 1 : 0);
}

void AppendRedisPortMetrics(const RedisPortGauges& redis, MetricFamilies* out) {
  AddGauge(out, "cuckood_redis_connections", "Open Redis-protocol connections",
           static_cast<double>(redis.connections));
  AddGauge(out, "cuckood_redis_commands_in_flight",
           "Redis-protocol commands parsed and not yet answered",
           static_cast<double>(redis.commands_in_flight));
  AddGauge(out, "cuckood_redis_client_memory_bytes",
           "Memory the Redis-protocol connections hold, as counted for --redis-client-memory",
           static_cast<double>(redis.client_memory));
  AddGauge(out, "cuckood_redis_client_memory_limit_bytes",
           "--redis-client-memory: past it the connections using the most are closed",
           static_cast<double>(redis.client_memory_limit));
  AddGauge(out, "cuckood_redis_unauthenticated_connections",
           "Redis-protocol connections that have not authenticated (with --auth-tokens)",
           static_cast<double>(redis.unauthenticated_connections));
}

void AppendFilterMetrics(const FilterRegistry& registry, const Persistence* persistence,
                         MetricFamilies* out) {
  std::vector<std::pair<std::string, std::shared_ptr<CuckooFilter>>> filters = registry.List();
  std::sort(filters.begin(), filters.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  AddGauge(out, "cuckood_filters", "Filters held", static_cast<double>(filters.size()));
  AddGauge(out, "cuckood_max_filters", "Most filters the server holds (--max-filters)",
           static_cast<double>(registry.limits().max_filters));
  AddGauge(out, "cuckood_memory_budget_bytes",
           "Table memory all filters together may use (--memory-budget)",
           static_cast<double>(registry.limits().memory_budget_bytes));
  AddGauge(out, "cuckood_memory_used_bytes",
           "Memory of all filters (dropped ones until the last call using them ends)",
           static_cast<double>(registry.memory_bytes()));

  enum {
    kItems,
    kCapacity,
    kLoad,
    kBytes,
    kFpr,
    kAge,
    kChanges,
    kGenerations,
    kBound,
    kTarget,
    kReachable,
    kGrowth
  };
  const size_t first = out->size();
  AddFamily(out, "cuckood_filter_items", "Keys stored (inserted minus deleted)", MetricType::Gauge);
  AddFamily(out, "cuckood_filter_capacity", "Capacity asked for at creation", MetricType::Gauge);
  AddFamily(out, "cuckood_filter_load_factor", "Fraction of fingerprint slots in use",
            MetricType::Gauge);
  AddFamily(out, "cuckood_filter_memory_bytes", "Memory of the filter's tables and shards",
            MetricType::Gauge);
  AddFamily(out, "cuckood_filter_expected_false_positive_rate",
            "False-positive rate expected at the current load", MetricType::Gauge);
  AddFamily(out, "cuckood_filter_last_snapshot_age_seconds",
            "Seconds since the last snapshot was taken; absent if never", MetricType::Gauge);
  AddFamily(out, "cuckood_filter_unsnapshotted_changes",
            "Keys inserted or deleted since the last snapshot", MetricType::Gauge);
  AddFamily(out, "cuckood_filter_generations",
            "Table generations of the filter (1 until a growing filter grows)", MetricType::Gauge);
  AddFamily(out, "cuckood_filter_false_positive_bound",
            "Highest false-positive rate a lookup can have, at any load", MetricType::Gauge);
  AddFamily(out, "cuckood_filter_false_positive_target",
            "False-positive rate the filter is made for: a growing filter's rate, a fixed "
            "filter's expected rate at its capacity",
            MetricType::Gauge);
  AddFamily(out, "cuckood_filter_reachable_capacity",
            "Keys the filter can come to hold: its capacity if fixed; if growing, what its "
            "generations plan, at most max_capacity",
            MetricType::Gauge);
  AddFamily(out, "cuckood_filter_growth_factor", "Growth factor (0: a fixed-size filter)",
            MetricType::Gauge);
  const absl::Time now = absl::Now();
  for (const auto& [name, filter] : filters) {
    const FilterStats st = filter->Stats();
    const SnapshotRecord snap =
        persistence != nullptr ? persistence->Record(name, *filter) : SnapshotRecord{};
    auto gauge = [&, name = name](int family, double value) {
      AddSeries((*out)[first + family], {{"filter", name}}).gauge.value = value;
    };
    gauge(kItems, static_cast<double>(st.items));
    gauge(kCapacity, static_cast<double>(st.capacity));
    gauge(kLoad, st.load_factor);
    gauge(kBytes, static_cast<double>(st.memory_bytes));
    gauge(kFpr, st.expected_false_positive_rate);
    if (snap.exists) gauge(kAge, std::max(0.0, absl::ToDoubleSeconds(now - snap.time)));
    gauge(kChanges, static_cast<double>(snap.UnsnapshottedChanges(*filter)));
    gauge(kGenerations, static_cast<double>(st.generations.size()));
    gauge(kBound, st.false_positive_bound);
    gauge(kTarget, st.false_positive_target);
    gauge(kReachable, static_cast<double>(st.reachable_capacity));
    gauge(kGrowth, static_cast<double>(filter->shape().growth_factor));
  }
}

void AppendWalMetrics(const Wal& wal, MetricFamilies* out) {
  const WalStats w = wal.Stats();
  AddGauge(out, "cuckood_wal_segments", "Write-ahead log segment files, the prepared one included",
           static_cast<double>(w.segments));
  AddGauge(out, "cuckood_wal_disk_bytes", "Size of the write-ahead log's segment files",
           static_cast<double>(w.disk_bytes));
  AddGauge(out, "cuckood_wal_appended_lsn", "Log sequence number of the last record appended",
           static_cast<double>(w.appended_lsn));
  AddGauge(out, "cuckood_wal_durable_lsn",
           "Log sequence number up to which writes are acknowledged (per --durability)",
           static_cast<double>(w.durable_lsn));
  AddGauge(out, "cuckood_wal_failed", "1 once an append or fdatasync of the log failed",
           wal.health().ok() ? 0 : 1);
}

void AppendClusterMetrics(const ClusterStatus& c, MetricFamilies* out) {
  MetricFamily& nats = AddFamily(out, "cuckood_cluster_nats_connected",
                                 "1 while connected to NATS; the label says the connection's state",
                                 MetricType::Gauge);
  AddSeries(nats, {{"state", c.nats_status}}).gauge.value = c.nats_status == "connected" ? 1 : 0;
  AddGauge(out, "cuckood_cluster_applied_position",
           "Log position (stream sequence) this replica has applied",
           static_cast<double>(c.applied));
  AddGauge(out, "cuckood_cluster_stream_last_position",
           "Last log position in the stream, as this replica last saw it",
           static_cast<double>(c.stream_last));
  AddGauge(out, "cuckood_cluster_stream_first_position",
           "First log position the stream still holds", static_cast<double>(c.stream_first));
  AddGauge(out, "cuckood_cluster_lag_entries", "Log entries this replica has not applied yet",
           static_cast<double>(c.lag));
  AddGauge(out, "cuckood_cluster_consuming", "1 while this replica consumes the stream",
           c.consuming ? 1 : 0);
  AddGauge(out, "cuckood_cluster_problem",
           "1 while this replica cannot apply the stream (the log says why)",
           c.problem.empty() ? 0 : 1);
  MetricFamily& check = AddFamily(
      out, "cuckood_cluster_log_check",
      "1 for the state of this replica's end-to-end check of the log: agreed, unverified, "
      "diverged, healing or no majority (docs/CLUSTER.md)",
      MetricType::Gauge);
  for (const char* state : {"agreed", "unverified", "diverged", "healing", "no majority"}) {
    AddSeries(check, {{"state", state}}).gauge.value = c.digest_state == state ? 1 : 0;
  }
  AddGauge(out, "cuckood_cluster_verified_position",
           "Highest log position at which a majority of the replicas agreed with this one's digest",
           static_cast<double>(c.verified_position));
  AddGauge(out, "cuckood_cluster_digest_replicas",
           "Replicas reporting a digest of the log, this one included",
           static_cast<double>(c.digest_voters));
  AddCounter(out, "cuckood_cluster_divergences_total",
             "Times this replica found its copy of the log disagreeing with another replica's "
             "(diverged or no majority)",
             static_cast<double>(c.divergences));
  MetricFamily& entries =
      AddFamily(out, "cuckood_cluster_entries_total",
                "Log entries: applied by this replica, published by it, acknowledged as duplicates "
                "of a request id, failed to publish",
                MetricType::Counter);
  AddSeries(entries, {{"what", "applied"}}).counter.value = static_cast<double>(c.entries_applied);
  AddSeries(entries, {{"what", "published"}}).counter.value =
      static_cast<double>(c.entries_published);
  AddSeries(entries, {{"what", "duplicate"}}).counter.value = static_cast<double>(c.duplicates);
  AddSeries(entries, {{"what", "publish_failed"}}).counter.value =
      static_cast<double>(c.publish_failures);
  AddCounter(out, "cuckood_cluster_stream_purges_total",
             "Retention purges of the stream this replica made (up to what every replica's "
             "checkpoint has passed)",
             static_cast<double>(c.purges));
  AddCounter(out, "cuckood_cluster_bootstraps_total",
             "Times this replica copied every filter from a peer",
             static_cast<double>(c.bootstraps));
}

void AppendTlsMetrics(double not_after_seconds, MetricFamilies* out) {
  AddGauge(out, "cuckood_tls_certificate_expiry_seconds",
           "When the served TLS certificate expires, seconds since the epoch", not_after_seconds);
}

}  // namespace cuckoo::server
