#include "server/observability/logging.h"

#include <grpc/support/log.h>

#include <algorithm>
#include <atomic>
#include <iterator>
#include <memory>
#include <string>
#include <utility>

#include "absl/strings/escaping.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "base/json.h"
#include "spdlog/pattern_formatter.h"
#include "spdlog/sinks/stdout_sinks.h"
#include "spdlog/spdlog.h"

namespace cuckoo::server {
namespace {

// %j in a pattern: the message as the inside of a JSON string.
class JsonMessageFlag final : public spdlog::custom_flag_formatter {
 public:
  void format(const spdlog::details::log_msg& msg, const std::tm&,
              spdlog::memory_buf_t& dest) override {
    AppendJsonEscaped(std::string_view(msg.payload.data(), msg.payload.size()), dest);
  }
  std::unique_ptr<custom_flag_formatter> clone() const override {
    return std::make_unique<JsonMessageFlag>();
  }
};

// Whether the audit logger writes JSON (its messages are then the fields of
// a JSON object, already escaped).
std::atomic<bool> audit_json{false};

// gRPC's own log lines (e.g. why a port could not be bound), through spdlog
// so they share the format and can be parsed with the rest.
void GrpcLog(gpr_log_func_args* args) {
  spdlog::level::level_enum level = spdlog::level::info;
  if (args->severity == GPR_LOG_SEVERITY_ERROR) level = spdlog::level::err;
  if (args->severity == GPR_LOG_SEVERITY_DEBUG) level = spdlog::level::debug;
  spdlog::log(level, "grpc: {} ({}:{})", args->message, args->file, args->line);
}

}  // namespace

void SetUpLogging(const LogOptions& options) {
  auto logger = spdlog::stdout_logger_mt("cuckood");
  auto formatter = std::make_unique<spdlog::pattern_formatter>(spdlog::pattern_time_type::utc);
  if (options.format == "json") {
    formatter->add_flag<JsonMessageFlag>('j').set_pattern(
        R"({"time":"%Y-%m-%dT%H:%M:%S.%fZ","level":"%l","msg":"%j"})");
  } else {
    formatter->set_pattern("%Y-%m-%dT%H:%M:%S.%fZ %l %v");
  }
  logger->set_formatter(std::move(formatter));
  logger->set_level(spdlog::level::from_str(options.level));
  logger->flush_on(spdlog::level::trace);
  spdlog::set_default_logger(logger);
  gpr_set_log_function(&GrpcLog);

  // The audit logger: the same stream, its events' fields in the line. A
  // sink of its own: a formatter belongs to the sink, so sharing the main
  // logger's would turn every line into an audit line. stdout sinks share
  // one process-wide mutex, so the lines of the two do not interleave.
  spdlog::drop("audit");
  auto audit =
      std::make_shared<spdlog::logger>("audit", std::make_shared<spdlog::sinks::stdout_sink_mt>());
  auto audit_formatter =
      std::make_unique<spdlog::pattern_formatter>(spdlog::pattern_time_type::utc);
  if (options.format == "json") {
    audit_formatter->set_pattern(
        R"({"time":"%Y-%m-%dT%H:%M:%S.%fZ","level":"%l","msg":"audit","audit":{%v}})");
  } else {
    audit_formatter->set_pattern("%Y-%m-%dT%H:%M:%S.%fZ %l audit: %v");
  }
  audit->set_formatter(std::move(audit_formatter));
  audit->set_level(spdlog::level::from_str(options.level));
  audit->flush_on(spdlog::level::trace);
  spdlog::register_logger(audit);
  audit_json.store(options.format == "json", std::memory_order_release);
}

void RateLimitedAudit::Refused(const AuditEvent& event) {
  uint64_t suppressed = 0;
  {
    MutexLock lock(&mu_);
    const int64_t second = absl::ToUnixSeconds(absl::Now());
    if (second != second_) {
      suppressed = std::exchange(suppressed_, 0);
      second_ = second;
      lines_ = 0;
    }
    if (++lines_ > per_second_) {
      ++suppressed_;
      return;
    }
  }
  if (suppressed > 0) {
    const std::string detail = absl::StrFormat(
        "%u more %s in an earlier second were not logged one by one (at most %d a second; "
        "cuckood_auth_failures_total counts every one)",
        suppressed, what_, per_second_);
    Audit({.caller = "-", .method = "-", .outcome = "UNAUTHENTICATED", .detail = detail});
  }
  Audit(event);
}

void Audit(const AuditEvent& e) {
  const spdlog::level::level_enum level =
      e.outcome == "PERMISSION_DENIED" || e.outcome == "UNAUTHENTICATED" ? spdlog::level::warn
                                                                         : spdlog::level::info;
  std::shared_ptr<spdlog::logger> audit = spdlog::get("audit");
  spdlog::memory_buf_t line;
  const std::pair<std::string_view, std::string_view> fields[] = {
      {"caller", e.caller}, {"method", e.method},   {"filter", e.filter},
      {"peer", e.peer},     {"outcome", e.outcome}, {"detail", e.detail}};
  if (audit != nullptr && audit_json.load(std::memory_order_acquire)) {
    bool first = true;
    for (const auto& [name, value] : fields) {
      if (value.empty() && name != "filter") continue;
      line.append(std::string_view(first ? "\"" : ",\""));
      line.append(name);
      line.append(std::string_view("\":\""));
      AppendJsonEscaped(value, line);
      line.push_back('"');
      first = false;
    }
  } else {
    for (const auto& [name, value] : fields) {
      if (value.empty()) continue;
      if (line.size() > 0) line.push_back(' ');
      line.append(name);
      line.push_back('=');
      // Names, methods and codes are plain words; the rest is quoted.
      const bool quote = name == "filter" || name == "detail" || name == "caller";
      if (quote) line.push_back('"');
      const std::string escaped = absl::CHexEscape(absl::string_view(value.data(), value.size()));
      line.append(std::string_view(escaped));
      if (quote) line.push_back('"');
    }
  }
  const std::string_view text(line.data(), line.size());
  if (audit != nullptr) {
    audit->log(level, "{}", text);
  } else {
    spdlog::log(level, "audit: {}", text);
  }
}

absl::Status ValidateLogOptions(const LogOptions& options) {
  static constexpr const char* kLevels[] = {"trace", "debug",    "info", "warn",
                                            "error", "critical", "off"};
  if (std::find(std::begin(kLevels), std::end(kLevels), options.level) == std::end(kLevels)) {
    return absl::InvalidArgumentError(absl::StrFormat("--log-level=\"%s\" must be one of: %s",
                                                      options.level, absl::StrJoin(kLevels, ", ")));
  }
  if (options.format != "text" && options.format != "json") {
    return absl::InvalidArgumentError(
        absl::StrFormat("--log-format=\"%s\" must be text or json", options.format));
  }
  return absl::OkStatus();
}

}  // namespace cuckoo::server
