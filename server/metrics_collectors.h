// The gauges /metrics reads from the server's parts at scrape time, as
// MetricsCollector bodies (server/observability/metrics.h): Metrics knows
// none of these parts, and these parts know nothing of Metrics; server.cc
// registers one collector per part, at its section of the page:
//
//   metrics.AddCollector(MetricsSection::kState, [wal](MetricFamilies* out) {
//     AppendWalMetrics(*wal, out);
//   });
//
// Every family is listed in server/README.md (Metrics).
#ifndef CUCKOO_SERVER_METRICS_COLLECTORS_H_
#define CUCKOO_SERVER_METRICS_COLLECTORS_H_

#include <cstdint>

#include "core/registry.h"
#include "server/cluster/cluster.h"
#include "server/observability/metrics.h"
#include "server/storage/persistence.h"
#include "server/wal/wal.h"

namespace cuckoo::server {

// MetricsSection::kCalls: cuckood_rpc_in_flight, the calls started and not
// yet done (FilterServiceImpl::calls_in_flight()).
void AppendCallsInFlight(int64_t calls_in_flight, MetricFamilies* out);

// cuckood_ready: 1 while /readyz answers 200, so that an alert can see a
// server that is up but not taking traffic (loading, a replica's log check).
void AppendReadiness(bool ready, MetricFamilies* out);

// MetricsSection::kRedis: the Redis-protocol port's gauges.
struct RedisPortGauges {
  // Open connections and commands running.
  int64_t connections = 0;
  int64_t commands_in_flight = 0;
  // The connections' memory as counted, and the limit
  // (--redis-client-memory).
  int64_t client_memory = 0;
  int64_t client_memory_limit = 0;
  // Connections that have not authenticated.
  int64_t unauthenticated_connections = 0;
};
void AppendRedisPortMetrics(const RedisPortGauges& redis, MetricFamilies* out);

// MetricsSection::kState: the registry's totals and each filter's gauges,
// with its latest snapshot (none if `persistence` is null).
void AppendFilterMetrics(const FilterRegistry& registry, const Persistence* persistence,
                         MetricFamilies* out);
// MetricsSection::kState: the write-ahead log's state.
void AppendWalMetrics(const Wal& wal, MetricFamilies* out);
// MetricsSection::kState: cluster mode, the replica's view of its cluster.
void AppendClusterMetrics(const ClusterStatus& cluster, MetricFamilies* out);

// MetricsSection::kSecurity: the served TLS certificate's expiry, seconds
// since the epoch.
void AppendTlsMetrics(double not_after_seconds, MetricFamilies* out);

}  // namespace cuckoo::server

#endif  // CUCKOO_SERVER_METRICS_COLLECTORS_H_
