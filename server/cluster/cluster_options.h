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

// How a replica authenticates the NATS servers and itself to them: paths of
// files, read when the connection is set up (Cluster::Create), never the
// secrets themselves, which would otherwise sit on the command line.
struct NatsSecurity {
  // TLS: the CA (PEM) the NATS servers' certificates are checked against
  // (host names included). Set, or any URL tls://: TLS on every connection.
  std::string tls_ca;
  // Mutual TLS: this replica's client certificate (chain) and key, PEM;
  // both or neither.
  std::string tls_cert;
  std::string tls_key;
  // At most one way of credentials: a .creds file (the user's JWT and NKey
  // seed, nats.c reads it again at every connect), a user with a file
  // holding the password, or a file holding a token.
  std::string creds_file;
  std::string user;
  std::string password_file;
  std::string token_file;
};

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
  // Called (on the maintenance thread) when the stream, first read after
  // the start, is another log than the one the data directory follows (its
  // checkpoint's): the status names both and the fix. cuckood then exits
  // (kExitForeignLog, server/server.h). Null, or once the replica has read
  // the stream before (the stream replaced while it runs): it serves
  // nothing, reads included (Cluster::CheckServing).
  std::function<void(const absl::Status&)> on_foreign_log;
  // TLS and credentials for the NATS connections.
  NatsSecurity nats_security;
};

// Whether the connections to NATS use TLS: --nats-tls-ca is set or the
// URLs are tls://.
bool NatsTlsOn(const ClusterOptions& options);

// `url` without the user[:password]@ it may hold, to be logged or shown.
std::string NatsUrlWithoutUserInfo(const std::string& url);

// INVALID_ARGUMENT for a NATS URL that is not one (nats_urls holds one URL
// per entry), stream_replicas over 5, a dedup_window outside 1s to 24h, a
// replica_expiry outside 2s to 720h or a write_timeout under 100ms; the
// message names the flag that sets it (--nats, --nats-replicas,
// --dedup-window, --replica-expiry, --cluster-write-timeout). Also the
// NATS security flags' combinations (not their files, which
// Cluster::Create reads): any of them without --nats; --nats mixing tls://
// and other URLs; --nats-tls-cert without --nats-tls-key or the reverse;
// a client certificate without TLS; more than one kind of credentials
// (--nats-creds, --nats-user with --nats-password-file, --nats-token-file);
// --nats-user without --nats-password-file or the reverse; credentials
// flags beside a URL that holds credentials (user@host).
// (advertise is checked by the configuration: it depends on --listen.)
absl::Status ValidateClusterOptions(const ClusterOptions& options);

}  // namespace cuckoo::server

#endif  // CUCKOO_SERVER_CLUSTER_CLUSTER_OPTIONS_H_
