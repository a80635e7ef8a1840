// ServiceLimits: the gRPC service's limits as the configuration builds them
// (ServiceLimitsOf, server/config/config.h), and the service's fixed limits,
// apart from the service (filter_service.h) so that the configuration does
// not include gRPC's generated code.
#ifndef CUCKOO_SERVER_SERVICE_SERVICE_LIMITS_H_
#define CUCKOO_SERVER_SERVICE_SERVICE_LIMITS_H_

#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"
#include "absl/time/time.h"

namespace cuckoo::server {

struct ServiceLimits {
  uint32_t max_batch_keys = 100'000;
  uint32_t max_key_bytes = 4096;
  uint64_t max_message_bytes = uint64_t{64} << 20;
  // How long a request id's results are kept (--dedup-window).
  absl::Duration dedup_window = absl::Minutes(2);
  // Most memory those results take on a single node.
  uint64_t max_dedup_bytes = uint64_t{16} << 20;  // kRequestWindowBytes
  // Longest wait for min_log_position (--max-read-wait).
  absl::Duration max_read_wait = absl::Seconds(5);
  // An ExportFilter or ImportFilter whose client takes or sends no chunk
  // for this long is ended (--transfer-idle-timeout).
  absl::Duration transfer_idle_timeout = absl::Seconds(60);
};

// INVALID_ARGUMENT when max_batch_keys or max_key_bytes is 0,
// max_message_bytes is outside 4KiB to 2GiB, max_read_wait is negative or
// transfer_idle_timeout outside 100ms to 24h; the message names the flag
// (--max-batch-keys, --max-key-bytes, --max-message-size, --max-read-wait,
// --transfer-idle-timeout). (dedup_window: ValidateClusterOptions.)
absl::Status ValidateServiceLimits(const ServiceLimits& limits);

// Longest request_id.
inline constexpr size_t kMaxRequestIdBytes = 128;

// ExportFilter and ImportFilter (see the proto): exports and imports that
// may run at once (more get RESOURCE_EXHAUSTED), the most snapshot bytes
// per export chunk and per import chunk, and the write buffer of an
// export's snapshot. (How far an import may exceed the memory budget before
// it is refused: kImportSlackBytes, server/service/transfers.h.)
inline constexpr int kMaxExports = 2;
inline constexpr int kMaxImports = 2;
inline constexpr size_t kExportChunkBytes = size_t{1} << 20;
inline constexpr size_t kImportChunkBytes = size_t{1} << 20;
inline constexpr size_t kExportBufferBytes = size_t{4} << 20;

}  // namespace cuckoo::server

#endif  // CUCKOO_SERVER_SERVICE_SERVICE_LIMITS_H_
