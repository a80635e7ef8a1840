#include "client/tools/cuckooctl/command_line.h"

#include <stdio.h>

#include <algorithm>
#include <cmath>
#include <utility>

#include "absl/strings/str_format.h"
#include "base/units.h"

namespace cuckoo::ctl {
namespace {

constexpr FlagSpec kFlags[] = {
    {"target", true, kServerCommands},
    {"timeout", true, kServerCommands},
    {"retry-timeout", true, kServerCommands},
    {"format", true, kServerCommands},
    {"token", true, kServerCommands},
    {"token-file", true, kServerCommands},
    {"tls", false, kServerCommands},
    {"ca", true, kServerCommands},
    {"cert", true, kServerCommands},
    {"key", true, kServerCommands},
    {"tls-server-name", true, kServerCommands},
    {"help", false, kAllCommands},
    {"version", false, kAllCommands},
    {"capacity", true, kCreate},
    {"fpr", true, kCreate},
    {"fingerprint-bits", true, kCreate},
    {"bucket-size", true, kCreate},
    {"semi-sort", false, kCreate},
    {"shards", true, kCreate},
    {"max-kicks", true, kCreate},
    {"seed", true, kCreate},
    {"growth-factor", true, kCreate},
    {"max-capacity", true, kCreate},
    {"grow-on-repeats", false, kCreate},
    {"if-not-exists", false, kCreate},
    {"ttl", true, kCreate | kExpire},
    {"expire-at", true, kCreate | kExpire},
    {"at", true, kExpire},
    {"persist", false, kExpire},
    {"changed-only", false, kSnapshot},
    {"replace", false, kRename},
    {"if-absent", false, kInsert},
    {"request-id", true, kInsert | kDelete},
    {"file", true, kKeyCommands | kExport | kImport},
    {"quiet", false, kKeyCommands | kHealth},
    {"progress", false, kKeyCommands},
    {"no-progress", false, kKeyCommands},
    {"grant", true, kHashToken},
    {"stdin", false, kHashToken},
};

}  // namespace

Failure UsageError(std::string message) { return {kExitUsage, std::move(message)}; }

Failure ServerError(const absl::Status& status, const std::string& target) {
  std::string message =
      absl::StrFormat("%s: %s", absl::StatusCodeToString(status.code()), status.message());
  if ((status.code() == absl::StatusCode::kUnavailable ||
       status.code() == absl::StatusCode::kDeadlineExceeded) &&
      message.find(target) == std::string::npos) {
    message += absl::StrFormat(" (target %s)", target);
  }
  return {kExitServer, std::move(message)};
}

int Fail(const Failure& f) {
  absl::FPrintF(stderr, "cuckooctl: %s\n", f.message);
  return f.code;
}

const FlagSpec* FindFlag(std::string_view name) {
  for (const FlagSpec& f : kFlags) {
    if (name == f.name) return &f;
  }
  return nullptr;
}

std::optional<Failure> ParseArgs(int argc, char** argv, CommandLine& cl) {
  bool only_positional = false;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (only_positional) {
      cl.positional.push_back(std::move(arg));
      continue;
    }
    if (arg == "--") {
      only_positional = true;
      continue;
    }
    if (arg == "-h") {
      cl.flags["help"] = "true";
      continue;
    }
    if (arg.size() < 2 || arg[0] != '-') {
      cl.positional.push_back(std::move(arg));
      continue;
    }
    if (arg[1] != '-') {
      return UsageError(
          absl::StrFormat("unknown flag %s (see cuckooctl --help; put keys that start with \"-\" "
                          "after \"--\")",
                          arg));
    }
    const size_t eq = arg.find('=');
    std::string typed = arg.substr(0, eq);
    std::string name = typed.substr(2);
    std::replace(name.begin(), name.end(), '_', '-');  // --max_kicks works too.
    const FlagSpec* spec = FindFlag(name);
    if (spec == nullptr) {
      return UsageError(absl::StrFormat("unknown flag %s (see cuckooctl --help)", typed));
    }
    std::string value;
    if (spec->takes_value) {
      if (eq != std::string::npos) {
        value = arg.substr(eq + 1);
      } else if (i + 1 < argc) {
        value = argv[++i];
      } else {
        return UsageError(absl::StrFormat("flag %s needs a value: %s=VALUE", typed, typed));
      }
    } else if (eq == std::string::npos) {
      value = "true";
    } else {
      value = arg.substr(eq + 1);
      if (value == "true" || value == "1" || value == "yes") {
        value = "true";
      } else if (value == "false" || value == "0" || value == "no") {
        value = "false";
      } else {
        return UsageError(
            absl::StrFormat("%s=\"%s\": expected true or false, or no value", typed, value));
      }
    }
    cl.all[name].push_back(value);
    cl.flags[name] = std::move(value);
    cl.spelled[name] = typed;
  }
  return std::nullopt;
}

std::optional<Failure> ParseUintFlag(const CommandLine& cl, const std::string& name, uint64_t max,
                                     uint64_t& out) {
  const std::string text = *cl.Get(name);
  uint64_t value = 0;
  bool ok;
  if (name == "capacity" || name == "max-capacity") {
    const absl::StatusOr<uint64_t> count = ParseCount(text);
    ok = count.ok();
    if (ok) value = *count;
  } else {
    ok = ParseNumber(std::string_view(text), value);
  }
  if (!ok || value > max) {
    return UsageError(
        absl::StrFormat("--%s=\"%s\" is not a whole number from 0 to %u", name, text, max));
  }
  out = value;
  return std::nullopt;
}

std::optional<absl::Duration> ParseTimeout(const std::string& text, bool allow_zero) {
  absl::Duration d;
  double seconds = 0;
  if (ParseNumber(std::string_view(text), seconds)) {
    if (!std::isfinite(seconds)) return std::nullopt;
    d = absl::Seconds(seconds);
  } else if (!absl::ParseDuration(text, &d)) {
    return std::nullopt;
  }
  if (d < absl::ZeroDuration() || (d == absl::ZeroDuration() && !allow_zero) ||
      d == absl::InfiniteDuration()) {
    return std::nullopt;
  }
  return d;
}

std::optional<Failure> ExpectArgs(const CommandLine& cl, size_t min, size_t max, const char* what) {
  const std::string& cmd = cl.positional[0];
  const size_t n = cl.positional.size() - 1;
  if (n < min) {
    return UsageError(absl::StrFormat("%s needs %s (see cuckooctl %s --help)", cmd, what, cmd));
  }
  if (n > max) {
    return UsageError(absl::StrFormat("unexpected argument \"%s\" (see cuckooctl %s --help)",
                                      cl.positional[max + 1], cmd));
  }
  return std::nullopt;
}

}  // namespace cuckoo::ctl
