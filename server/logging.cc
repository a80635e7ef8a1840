#include "server/logging.h"

#include <grpc/support/log.h>

#include <memory>
#include <string>

#include "absl/strings/str_format.h"
#include "spdlog/pattern_formatter.h"
#include "spdlog/sinks/stdout_sinks.h"
#include "spdlog/spdlog.h"

namespace cuckoo::server {
namespace {

// %j in a pattern: the message as the inside of a JSON string (quotes,
// backslashes and control characters escaped).
class JsonMessageFlag final : public spdlog::custom_flag_formatter {
 public:
  void format(const spdlog::details::log_msg& msg, const std::tm&,
              spdlog::memory_buf_t& dest) override {
    for (char c : msg.payload) {
      switch (c) {
        case '"':
          dest.append(std::string_view("\\\""));
          break;
        case '\\':
          dest.append(std::string_view("\\\\"));
          break;
        case '\n':
          dest.append(std::string_view("\\n"));
          break;
        case '\t':
          dest.append(std::string_view("\\t"));
          break;
        default:
          if (static_cast<unsigned char>(c) < 0x20) {
            std::string esc = absl::StrFormat("\\u%04x", c);
            dest.append(std::string_view(esc));
          } else {
            dest.push_back(c);
          }
      }
    }
  }
  std::unique_ptr<custom_flag_formatter> clone() const override {
    return std::make_unique<JsonMessageFlag>();
  }
};

// gRPC's own log lines (e.g. why a port could not be bound), through spdlog
// so they share the format and can be parsed with the rest.
void GrpcLog(gpr_log_func_args* args) {
  spdlog::level::level_enum level = spdlog::level::info;
  if (args->severity == GPR_LOG_SEVERITY_ERROR) level = spdlog::level::err;
  if (args->severity == GPR_LOG_SEVERITY_DEBUG) level = spdlog::level::debug;
  spdlog::log(level, "grpc: {} ({}:{})", args->message, args->file, args->line);
}

}  // namespace

void SetUpLogging(const ServerConfig& config) {
  auto logger = spdlog::stdout_logger_mt("cuckood");
  auto formatter = std::make_unique<spdlog::pattern_formatter>(spdlog::pattern_time_type::utc);
  if (config.log_format == "json") {
    formatter->add_flag<JsonMessageFlag>('j').set_pattern(
        R"({"time":"%Y-%m-%dT%H:%M:%S.%fZ","level":"%l","msg":"%j"})");
  } else {
    formatter->set_pattern("%Y-%m-%dT%H:%M:%S.%fZ %l %v");
  }
  logger->set_formatter(std::move(formatter));
  logger->set_level(spdlog::level::from_str(config.log_level));
  logger->flush_on(spdlog::level::trace);
  spdlog::set_default_logger(logger);
  gpr_set_log_function(&GrpcLog);
}

}  // namespace cuckoo::server
