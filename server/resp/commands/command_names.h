// The Redis-protocol port's commands by name: the `command` label of
// cuckood_redis_* (server/observability/metrics.h counts them by their index
// here) and the index RedisCommands dispatches on.
#ifndef CUCKOO_SERVER_RESP_COMMANDS_COMMAND_NAMES_H_
#define CUCKOO_SERVER_RESP_COMMANDS_COMMAND_NAMES_H_

#include <array>
#include <cstddef>
#include <string_view>

#include "absl/strings/ascii.h"

namespace cuckoo::server {

// Lower case, "unknown" last for every command cuckood does not serve (a
// client cannot add series by sending names).
inline constexpr std::array<std::string_view, 51> kRedisCommandNames = {
    "cf.reserve", "cf.add",   "cf.addnx", "cf.insert", "cf.insertnx", "cf.exists",
    "cf.mexists", "cf.del",   "cf.count", "cf.info",   "cf.scandump", "cf.loadchunk",
    "ping",       "echo",     "hello",    "auth",      "select",      "client",
    "quit",       "command",  "info",     "del",       "exists",      "type",
    "scan",       "keys",     "dbsize",   "config",    "reset",       "multi",
    "exec",       "discard",  "watch",    "unwatch",   "unlink",      "flushall",
    "flushdb",    "memory",   "module",   "expire",    "pexpire",     "expireat",
    "pexpireat",  "ttl",      "pttl",     "persist",   "expiretime",  "pexpiretime",
    "rename",     "renamenx", "unknown"};
inline constexpr size_t kRedisCommands = kRedisCommandNames.size();
// The CF.* commands, the first ones: their series are served from the start,
// the others' once used.
inline constexpr size_t kRedisCfCommands = 12;
static_assert(kRedisCommandNames[kRedisCfCommands - 1] == "cf.loadchunk");

// A Redis command's index in kRedisCommandNames (lower-cases `name`):
// kRedisCommands - 1 ("unknown") for one not served.
inline size_t RedisCommandIndex(std::string_view name) {
  char lower[16];
  if (name.size() > sizeof(lower)) return kRedisCommands - 1;
  for (size_t i = 0; i < name.size(); ++i) lower[i] = absl::ascii_tolower(name[i]);
  const std::string_view l(lower, name.size());
  for (size_t i = 0; i + 1 < kRedisCommands; ++i) {
    if (kRedisCommandNames[i] == l) return i;
  }
  return kRedisCommands - 1;
}

}  // namespace cuckoo::server

#endif  // CUCKOO_SERVER_RESP_COMMANDS_COMMAND_NAMES_H_
