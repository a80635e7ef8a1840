// cuckooctl's command line: the commands and flags it knows, the parsed
// arguments, the strict number and duration parsers, and the failures it
// reports (one stderr line and an exit code).
#ifndef CUCKOO_CLIENT_TOOLS_CUCKOOCTL_COMMAND_LINE_H_
#define CUCKOO_CLIENT_TOOLS_CUCKOOCTL_COMMAND_LINE_H_

#include <charconv>
#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"

namespace cuckoo::ctl {

// Exit codes; part of the interface (see kUsage).
constexpr int kExitOk = 0;
constexpr int kExitSomeKeys = 1;
constexpr int kExitUsage = 2;
constexpr int kExitServer = 3;

// Commands, as bits so a flag can list the commands that accept it.
enum Command : uint32_t {
  kCreate = 1 << 0,
  kInfo = 1 << 1,
  kList = 1 << 2,
  kDrop = 1 << 3,
  kServerInfo = 1 << 4,
  kHealth = 1 << 5,
  kInsert = 1 << 6,
  kLookup = 1 << 7,
  kDelete = 1 << 8,
  kCount = 1 << 9,
  kHelp = 1 << 10,
  kSnapshot = 1 << 11,
  kExport = 1 << 12,
  kImport = 1 << 13,
  kHashToken = 1 << 14,
  kExpire = 1 << 15,
  kRename = 1 << 16,
};
constexpr uint32_t kKeyCommands = kInsert | kLookup | kDelete | kCount;
constexpr uint32_t kAllCommands = ~uint32_t{0};
// The commands that talk to a server: all but hash-token.
constexpr uint32_t kServerCommands = kAllCommands & ~uint32_t{kHashToken};

struct CommandSpec {
  const char* name;
  Command id;
  const char* help;  // Printed by `cuckooctl help NAME`.
};

struct FlagSpec {
  const char* name;
  bool takes_value;
  uint32_t commands;  // Which commands accept it.
};

// A problem to report on one stderr line, with the exit code it implies.
struct Failure {
  int code;
  std::string message;
};

Failure UsageError(std::string message);

// `target` is added when the server could not be reached and the message
// does not say where (it does for "connection refused", not for timeouts).
Failure ServerError(const absl::Status& status, const std::string& target);

// Prints "cuckooctl: MESSAGE" on stderr; returns the failure's exit code.
int Fail(const Failure& f);

// The command called `name` (help.cc), or null.
const CommandSpec* FindCommand(std::string_view name);
// The flag called `name` (canonical: dashes), or null.
const FlagSpec* FindFlag(std::string_view name);

struct CommandLine {
  std::vector<std::string> positional;         // The command, then its arguments.
  std::map<std::string, std::string> flags;    // Canonical name -> value ("true" for booleans).
  std::map<std::string, std::string> spelled;  // Canonical name -> as typed, for errors.
  // Canonical name -> every value given, in order (flags, above, keeps the
  // last): for --grant, which may be repeated.
  std::map<std::string, std::vector<std::string>> all;

  bool Has(const std::string& name) const { return flags.count(name) > 0; }
  std::optional<std::string> Get(const std::string& name) const {
    auto it = flags.find(name);
    if (it == flags.end()) return std::nullopt;
    return it->second;
  }
  bool Bool(const std::string& name) const {
    auto v = Get(name);
    return v && *v == "true";
  }
};

// Parses argv into `cl`: flags anywhere (as --flag=value or --flag value),
// the rest positional; "--" ends the flags.
std::optional<Failure> ParseArgs(int argc, char** argv, CommandLine& cl);

// Strict parsers: the whole text must be the number.
template <typename T>
bool ParseNumber(std::string_view text, T& out) {
  if (text.empty()) return false;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), out);
  return ec == std::errc() && end == text.data() + text.size();
}

// Capacities take a count's suffix (k, M, G, T: base/units.h); the rest are
// plain numbers.
std::optional<Failure> ParseUintFlag(const CommandLine& cl, const std::string& name, uint64_t max,
                                     uint64_t& out);

// "30s", "500ms", "1m30s" (absl's form), or a plain number of seconds;
// positive, or also zero with allow_zero.
std::optional<absl::Duration> ParseTimeout(const std::string& text, bool allow_zero = false);

// Between `min` and `max` arguments after the command; `what` names the
// missing ones ("a filter NAME").
std::optional<Failure> ExpectArgs(const CommandLine& cl, size_t min, size_t max, const char* what);

}  // namespace cuckoo::ctl

#endif  // CUCKOO_CLIENT_TOOLS_CUCKOOCTL_COMMAND_LINE_H_
