// ClusterOptions: how a replica reaches its log (the NATS servers, the
// stream) and its peers, as the configuration builds them
// (ClusterOptionsOf, server/config/config.h), apart from Cluster (cluster.h)
// so that the configuration does not include NATS or the replica's machinery.
#ifndef CUCKOO_SERVER_CLUSTER_CLUSTER_OPTIONS_H_
#define CUCKOO_SERVER_CLUSTER_CLUSTER_OPTIONS_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace cuckoo::server {

struct PeerAccess;  // server/cluster/peer_copy.h

struct ClusterOptions {
  // NATS server URLs (nats://host:port).
  std::vector<std::string> nats_urls;
  // The stream that is the log; its subject is "cuckood.<stream>.log".
  std::string stream = "CUCKOOD";
  // Replication factor of the stream when this replica creates it; 0: 3 when
  // the NATS cluster has 3 or more servers, else 1.
  uint32_t stream_replicas = 0;
  // This replica's name (logs, metrics, the NATS connection's name).
  std::string replica_id;
  // JetStream's duplicate window for the stream this replica creates, and
  // how long every replica keeps the results of entries with a request id.
  absl::Duration dedup_window = absl::Minutes(2);
  // Most memory those results take; the oldest go first past it.
  uint64_t max_dedup_bytes = uint64_t{16} << 20;  // kRequestWindowBytes
  // A write not acknowledged and applied within this fails with UNAVAILABLE
  // (it may still be applied later: retry with the same request id).
  absl::Duration write_timeout = absl::Seconds(10);
  // /readyz: ready while the replica is at most this many entries behind
  // the stream.
  uint64_t ready_max_lag = 1000;
  // Largest entry; 0: the NATS server's max_payload.
  size_t max_entry_bytes = 0;
  // host:port at which peers reach this replica's gRPC service, to copy its
  // filters when they bootstrap (empty: none can).
  std::string advertise;
  // Retention: every replica records in the KV bucket "<stream>_replicas"
  // the first position it needs (its checkpoint's) and refreshes it; the
  // stream is purged up to the least of them. A replica not heard of for
  // this long no longer holds the stream back (its record expires), and
  // bootstraps from a peer when it comes back.
  absl::Duration replica_expiry = absl::Hours(24);
  // How to reach a peer for a bootstrap copy (TLS credentials, token), read
  // anew for each bootstrap so that rotated files are used; null: insecure,
  // no token.
  std::function<absl::StatusOr<PeerAccess>()> peer_access;
};

// INVALID_ARGUMENT for a NATS URL that is not one (nats_urls holds one URL
// per entry), stream_replicas over 5, a dedup_window outside 1s to 24h, a
// replica_expiry outside 2s to 720h or a write_timeout under 100ms; the
// message names the flag that sets it (--nats, --nats-replicas,
// --dedup-window, --replica-expiry, --cluster-write-timeout).
// (advertise is checked by the configuration: it depends on --listen.)
absl::Status ValidateClusterOptions(const ClusterOptions& options);

}  // namespace cuckoo::server

#endif  // CUCKOO_SERVER_CLUSTER_CLUSTER_OPTIONS_H_
