#include "server/service/service_limits.h"

#include "absl/strings/str_format.h"
#include "absl/time/time.h"
#include "base/units.h"

namespace cuckoo::server {

absl::Status ValidateServiceLimits(const ServiceLimits& l) {
  if (l.max_batch_keys == 0) {
    return absl::InvalidArgumentError("--max-batch-keys must be at least 1");
  }
  if (l.max_key_bytes == 0) return absl::InvalidArgumentError("--max-key-bytes must be at least 1");
  if (l.max_message_bytes < 4096 || l.max_message_bytes > (uint64_t{1} << 31) - 1) {
    return absl::InvalidArgumentError(
        absl::StrFormat("--max-message-size=%s must be between 4KiB and 2GiB",
                        FormatByteSize(l.max_message_bytes)));
  }
  if (l.max_read_wait < absl::ZeroDuration()) {
    return absl::InvalidArgumentError(absl::StrFormat("--max-read-wait=%s must not be negative",
                                                      absl::FormatDuration(l.max_read_wait)));
  }
  if (l.transfer_idle_timeout < absl::Milliseconds(100) ||
      l.transfer_idle_timeout > absl::Hours(24)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("--transfer-idle-timeout=%s must be between 100ms and 24h",
                        absl::FormatDuration(l.transfer_idle_timeout)));
  }
  return absl::OkStatus();
}

}  // namespace cuckoo::server
