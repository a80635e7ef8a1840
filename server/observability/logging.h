// Logging setup for cuckood: spdlog to stdout, one line per event, in UTC.
//
//   text: 2026-11-22T18:33:37.123456Z info created filter users: ...
//   json: {"time":"2026-11-22T18:33:37.123456Z","level":"info","msg":"created filter users: ..."}
#ifndef CUCKOO_SERVER_OBSERVABILITY_LOGGING_H_
#define CUCKOO_SERVER_OBSERVABILITY_LOGGING_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>

#include "absl/status/status.h"
#include "base/mutex.h"

namespace cuckoo::server {

// How cuckood logs (--log-format, --log-level; validated by the
// configuration).
struct LogOptions {
  std::string format = "text";  // "text" or "json".
  std::string level = "info";   // spdlog's names: "trace" ... "off".
};

// INVALID_ARGUMENT unless format is text or json and level one of spdlog's
// names; the message names the flag (--log-format, --log-level).
absl::Status ValidateLogOptions(const LogOptions& options);

// Makes the default spdlog logger write to stdout in options.format at
// options.level (both already validated), flushing every line.
void SetUpLogging(const LogOptions& options);

// One audit event: a call refused by authentication or authorization, or an
// admin call (CreateFilter, DropFilter, Snapshot, ExportFilter,
// ImportFilter) with its outcome. Logged by the "audit" logger, which
// SetUpLogging makes (else the default logger):
//
//   text: ... warning audit: caller=billing-ro method=DropFilter filter="billing.users"
//         peer=ipv4:10.0.0.7:51234 outcome=PERMISSION_DENIED detail="..."
//   json: {"time":"...","level":"warning","msg":"audit","audit":{"caller":"billing-ro",
//         "method":"DropFilter","filter":"billing.users","peer":"ipv4:10.0.0.7:51234",
//         "outcome":"PERMISSION_DENIED","detail":"..."}}
//
// Refused calls are logged at warn (spdlog names the level "warning"), admin
// calls at info.
struct AuditEvent {
  std::string_view caller;  // the access file's entry name; "-" when unknown
  std::string_view method;
  std::string_view filter;   // "" when the call names none
  std::string_view peer;     // gRPC's peer string
  std::string_view outcome;  // a gRPC status code name
  std::string_view detail;   // why it was refused; "" otherwise
};
void Audit(const AuditEvent& event);

// The audit lines of refused authentications, at most `per_second` a
// second: anyone who reaches a port can cause them and must not be able to
// flood the log. The rest are counted and summed up in one line in the
// next second that logs one (the metrics count every one).
class RateLimitedAudit {
 public:
  // `what` names the events in the summary line ("calls refused as
  // UNAUTHENTICATED").
  RateLimitedAudit(int per_second, std::string what)
      : per_second_(per_second), what_(std::move(what)) {}
  void Refused(const AuditEvent& event);

 private:
  const int per_second_;
  const std::string what_;
  Mutex mu_;
  int64_t second_ ABSL_GUARDED_BY(mu_) = 0;
  int lines_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t suppressed_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace cuckoo::server

#endif  // CUCKOO_SERVER_OBSERVABILITY_LOGGING_H_
