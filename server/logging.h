// Logging setup for cuckood: spdlog to stdout, one line per event, in UTC.
//
//   text: 2026-11-22T18:33:37.123456Z info created filter users: ...
//   json: {"time":"2026-11-22T18:33:37.123456Z","level":"info","msg":"created filter users: ..."}
#ifndef CUCKOO_SERVER_LOGGING_H_
#define CUCKOO_SERVER_LOGGING_H_

#include "server/config.h"

namespace cuckoo::server {

// Makes the default spdlog logger write to stdout in config.log_format at
// config.log_level (both already validated), flushing every line.
void SetUpLogging(const ServerConfig& config);

}  // namespace cuckoo::server

#endif  // CUCKOO_SERVER_LOGGING_H_
