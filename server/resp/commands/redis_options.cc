// ValidateRedisOptions (redis_options.h): the Redis port's settings.
#include "server/resp/commands/redis_options.h"

#include "absl/status/status.h"
#include "absl/strings/str_format.h"

namespace cuckoo::server {

absl::Status ValidateRedisOptions(const RedisOptions& o) {
  if (o.default_capacity < 1 || o.default_capacity > (uint64_t{1} << 40)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("--redis-default-capacity=%u must be 1 to 2^40", o.default_capacity));
  }
  if (!(o.error_rate > 0 && o.error_rate < 1)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("--redis-error-rate=%g must be more than 0 and less than 1", o.error_rate));
  }
  if (o.default_expansion == 1 || o.default_expansion > 8) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "--redis-default-expansion=%u must be 0 (fixed) or 2 to 8", o.default_expansion));
  }
  return absl::OkStatus();
}

}  // namespace cuckoo::server
