#include "server/cluster/cluster_options.h"

#include <string>

#include "absl/strings/str_format.h"
#include "absl/time/time.h"

namespace cuckoo::server {

absl::Status ValidateClusterOptions(const ClusterOptions& o) {
  for (const std::string& url : o.nats_urls) {
    if (url.empty() || url.find("://") == std::string::npos || url.find(',') != std::string::npos) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "--nats: \"%s\" is not a NATS URL; expected nats://host:port[,nats://host:port...]",
          url));
    }
  }
  if (o.stream_replicas > 5) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "--nats-replicas=%u: JetStream replicates a stream to 1 to 5 servers (0: automatic)",
        o.stream_replicas));
  }
  if (o.dedup_window < absl::Seconds(1) || o.dedup_window > absl::Hours(24)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "--dedup-window=%s must be between 1s and 24h", absl::FormatDuration(o.dedup_window)));
  }
  if (o.replica_expiry < absl::Seconds(2) || o.replica_expiry > absl::Hours(24 * 30)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "--replica-expiry=%s must be between 2s and 720h", absl::FormatDuration(o.replica_expiry)));
  }
  if (o.write_timeout < absl::Milliseconds(100)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("--cluster-write-timeout=%s must be at least 100ms",
                        absl::FormatDuration(o.write_timeout)));
  }
  return absl::OkStatus();
}

}  // namespace cuckoo::server
