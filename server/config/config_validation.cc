// ValidateConfig: each subsystem's own check of its options, then what
// only the whole configuration can check.
#include <algorithm>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "base/units.h"
#include "server/config/config.h"
#include "server/service/listen.h"

namespace cuckoo::server {

namespace {

// The gRPC port's and the admin port's addresses, and the address peers
// reach this replica at.
absl::Status ValidateListen(const ServerConfig& c, const std::vector<ListenAddress>& listen) {
  if (c.listen_socket_mode > 0777) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "--listen-socket-mode=%o: only the permission bits (at most 0777) apply to a socket",
        c.listen_socket_mode));
  }
  const bool has_tcp = std::any_of(listen.begin(), listen.end(),
                                   [](const ListenAddress& a) { return !a.is_unix(); });
  if (!c.nats_urls.empty() && c.advertise.empty() && !has_tcp) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "--listen=\"%s\" has no TCP address, from which cluster mode (--nats) would take the "
        "address peer replicas copy filters from: set --advertise=HOST:PORT (an address that "
        "reaches this replica's gRPC port), or add a TCP address to --listen",
        c.listen));
  }
  if (!c.admin_listen.empty()) {
    const size_t colon = c.admin_listen.rfind(':');
    uint32_t port = 0;
    if (colon == std::string::npos ||
        !absl::SimpleAtoi(absl::string_view(c.admin_listen).substr(colon + 1), &port) ||
        port > 65535) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "--admin-listen=\"%s\" must be host:port (e.g. 0.0.0.0:9090), or empty for no admin "
          "server",
          c.admin_listen));
    }
  }
  if (!c.advertise.empty()) {
    const size_t colon = c.advertise.rfind(':');
    uint32_t port = 0;
    if (colon == std::string::npos || colon == 0 ||
        !absl::SimpleAtoi(c.advertise.substr(colon + 1), &port) || port == 0 || port > 65535) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "--advertise=\"%s\": expected host:port (the address peers reach this replica at)",
          absl::CHexEscape(c.advertise)));
    }
  }
  if (c.grpc_threads > 1024) {
    return absl::InvalidArgumentError(
        absl::StrFormat("--grpc-threads=%u must be 0 (one per CPU) to 1024", c.grpc_threads));
  }
  return absl::OkStatus();
}

// The Redis port's own settings (ValidateRedisOptions has the commands').
absl::Status ValidateRedisPort(const ServerConfig& c, const std::vector<ListenAddress>& listen) {
  if (!c.redis_listen.empty()) {
    const bool also_grpc = std::any_of(listen.begin(), listen.end(), [&](const ListenAddress& a) {
      return a.text == c.redis_listen;
    });
    if (!absl::EndsWith(c.redis_listen, ":0") && (also_grpc || c.redis_listen == c.admin_listen)) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "--redis-listen=%s is also --listen or --admin-listen: give each port its own address",
          c.redis_listen));
    }
  }
  if (c.redis_threads > 1024) {
    return absl::InvalidArgumentError(
        absl::StrFormat("--redis-threads=%u must be 0 (one per CPU) to 1024", c.redis_threads));
  }
  if (c.redis_client_memory_bytes != 0 &&
      c.redis_client_memory_bytes < 2 * RedisMaxCommandBytes(c)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "--redis-client-memory=%s must be 0 (automatic) or at least twice the largest Redis "
        "command (%s, from --max-message-size), or a client sending one would be closed",
        FormatByteSize(c.redis_client_memory_bytes), FormatByteSize(2 * RedisMaxCommandBytes(c))));
  }
  if (c.redis_max_clients == 0) {
    return absl::InvalidArgumentError("--redis-max-clients must be at least 1");
  }
  if (c.redis_idle_timeout < absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        absl::StrFormat("--redis-idle-timeout=%s must not be negative",
                        absl::FormatDuration(c.redis_idle_timeout)));
  }
  return absl::OkStatus();
}

// Snapshots, the write-ahead log's size and the memory settings that
// depend on other settings.
absl::Status ValidateStorage(const ServerConfig& c) {
  if (c.wal_max_bytes < 2 * c.wal_segment_bytes) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "--wal-max-size=%s must be at least twice --wal-segment-size=%s",
        FormatByteSizeExactly(c.wal_max_bytes), FormatByteSizeExactly(c.wal_segment_bytes)));
  }
  if (c.snapshot_interval < absl::ZeroDuration() ||
      (c.snapshot_interval > absl::ZeroDuration() && c.snapshot_interval < absl::Seconds(1))) {
    return absl::InvalidArgumentError(
        absl::StrFormat("--snapshot-interval=%s must be 0 (off) or at least 1s",
                        absl::FormatDuration(c.snapshot_interval)));
  }
  if (c.transport_memory_bytes != 0 && c.transport_memory_bytes < 2 * c.max_message_bytes) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "--transport-memory=%s must be 0 (automatic) or at least twice --max-message-size (%s), "
        "or a message of the largest size could not be received",
        FormatByteSize(c.transport_memory_bytes), FormatByteSize(c.max_message_bytes)));
  }
  if (c.snapshot_buffer_bytes != 0 && c.snapshot_buffer_bytes < 4096) {
    return absl::InvalidArgumentError(
        absl::StrFormat("--snapshot-buffer=%s must be 0 (automatic) or at least 4KiB",
                        FormatByteSize(c.snapshot_buffer_bytes)));
  }
  return absl::OkStatus();
}

// What TLS and the peer token need of each other (ValidateTlsOptions has
// the TLS files' own rules).
absl::Status ValidateTlsUse(const ServerConfig& c) {
  if (c.tls_cert.empty() && c.admin_tls) {
    return absl::InvalidArgumentError(
        "--admin-tls serves the admin port with --tls-cert: set --tls-cert and --tls-key too");
  }
  if (!c.peer_token_file.empty() && !c.tls_cert.empty() && c.peer_ca.empty() &&
      c.tls_client_ca.empty()) {
    // Peers' addresses come from the cluster's NATS records: checked against
    // the system's public roots, any host with a public certificate that got
    // its address there would receive the token.
    return absl::InvalidArgumentError(
        "--peer-token-file with TLS needs --peer-ca (or --tls-client-ca): the peers' "
        "certificates must come from a private CA, so that the token goes only to a replica of "
        "this cluster");
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ValidateConfig(const ServerConfig& c) {
  absl::StatusOr<std::vector<ListenAddress>> listen = ParseListenAddresses(c.listen);
  if (!listen.ok()) return listen.status();
  if (c.data_dir.empty()) return absl::InvalidArgumentError("--data-dir must not be empty");
  if (c.max_filters == 0) return absl::InvalidArgumentError("--max-filters must be at least 1");
  if (c.drain_timeout < absl::ZeroDuration()) {
    return absl::InvalidArgumentError(absl::StrFormat("--drain-timeout=%s must not be negative",
                                                      absl::FormatDuration(c.drain_timeout)));
  }
  // Each subsystem checks its own options (beside them), then what only
  // the whole configuration can check.
  for (absl::Status s :
       {ValidateServiceLimits(ServiceLimitsOf(c)), ValidateListen(c, *listen),
        ValidateRedisOptions(RedisOptionsOf(c)), ValidateRedisPort(c, *listen),
        ValidateWalOptions(WalOptionsOf(c)), ValidateStorage(c),
        ValidateLogOptions(LogOptionsOf(c)), ValidateClusterOptions(ClusterOptionsOf(c)),
        ValidateTlsOptions(TlsOptionsOf(c)), ValidateTlsUse(c),
        Authenticator::Validate(AuthOptionsOf(c))}) {
    if (!s.ok()) return s;
  }
  return absl::OkStatus();
}

}  // namespace cuckoo::server
