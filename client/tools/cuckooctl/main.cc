// cuckooctl: the operator's command-line client for cuckood.
//
//   cuckooctl create users --capacity=100M --fpr=0.001
//   cuckooctl insert users --file=ids.txt --quiet
//   cuckooctl lookup users alice bob          # present<TAB>alice ...; exit 1 if any absent
//   cuckooctl export users --file=users.cuckoo  # a backup; import NAME --file=... restores it
//   cuckooctl health --timeout=2s             # Docker HEALTHCHECK
//   cuckooctl --tls --ca=ca.pem --token-file=ops.token list
//   cuckooctl hash-token billing-reader --grant=read:billing.*  # a token and its entry
//
// Everything a user can type is documented in help.cc (kUsage, kCommands;
// printed by --help); client/README.md repeats it with examples.
//
// Design notes:
// - Flags are parsed by hand: one table (kFlags, command_line.cc) says which
//   flag takes a value and which commands accept it, so "--flag value" is
//   unambiguous and a flag may stand before or after the command.
// - Key commands stream: keys are read in chunks (kChunkKeys keys or
//   kChunkBytes bytes), each chunk is sent while the next one is read, and its
//   results are printed before the next is sent. Memory stays bounded for any
//   input size; a slow producer (tail -f) gets its answers without waiting for
//   a full chunk, because a chunk is cut short when no more input is ready.
// - stdout carries only results (one line or JSON object per key); the text
//   summary and progress go to stderr, so `cuckooctl lookup ... | grep absent`
//   works. With --quiet the summary is the only result and goes to stdout.
//
// The files: command_line (arguments, flags, failures), help, security
// (token and TLS), output (stdout, JSON, text), key_input and key_commands
// (insert, lookup, delete, count), filter_commands (create, info, list, drop,
// server-info, snapshot, health), transfer_commands (export, import).
#include <grpc/grpc.h>
#include <openssl/crypto.h>
#include <stdio.h>
#include <stdlib.h>

#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"
#include "absl/time/time.h"
#include "client/cuckoo_client.h"
#include "client/tools/cuckooctl/command_line.h"
#include "client/tools/cuckooctl/commands.h"
#include "client/tools/cuckooctl/help.h"
#include "client/tools/cuckooctl/security.h"
#include "cuckoo_version.h"

namespace cuckoo::ctl {
namespace {

// `cuckooctl help [COMMAND]`.
int RunHelp(const CommandLine& cl) {
  if (cl.positional.size() > 2) {
    return Fail(
        UsageError(absl::StrFormat("unexpected argument \"%s\" (usage: cuckooctl help "
                                   "[COMMAND])",
                                   cl.positional[2])));
  }
  if (cl.positional.size() == 2) {
    const CommandSpec* about = FindCommand(cl.positional[1]);
    if (about == nullptr) {
      return Fail(UsageError(
          absl::StrFormat("unknown command \"%s\" (see cuckooctl --help)", cl.positional[1])));
    }
    return PrintHelp(about);
  }
  return PrintHelp(nullptr);
}

// Every flag given must be one `command` accepts.
std::optional<Failure> CheckFlagsApply(const CommandLine& cl, const CommandSpec& command) {
  for (const auto& [name, value] : cl.flags) {
    if ((FindFlag(name)->commands & command.id) == 0) {
      return UsageError(absl::StrFormat("flag %s does not apply to %s (see cuckooctl %s --help)",
                                        cl.spelled.at(name), command.name, command.name));
    }
  }
  return std::nullopt;
}

// The global flags of a command that talks to a server (--target,
// --timeout, --retry-timeout, --format, the token and TLS), and the client
// they make.
std::optional<Failure> ConnectGlobal(const CommandLine& cl, GlobalOptions& g) {
  if (std::optional<std::string> target = cl.Get("target")) {
    g.target = *target;
  } else if (const char* env = getenv("CUCKOO_TARGET"); env != nullptr && *env != '\0') {
    g.target = env;
  } else {
    g.target = "localhost:50051";
  }
  if (g.target.empty())
    return UsageError("--target must not be empty: give HOST:PORT or unix:PATH");
  g.timeout = absl::Seconds(30);
  if (std::optional<std::string> timeout = cl.Get("timeout")) {
    std::optional<absl::Duration> d = ParseTimeout(*timeout);
    if (!d) {
      return UsageError(absl::StrFormat(
          "--timeout=\"%s\" is not a positive duration such as 500ms, 2s or 1m", *timeout));
    }
    g.timeout = *d;
  }
  client::ClientOptions options;
  options.timeout = g.timeout;
  if (std::optional<std::string> retry = cl.Get("retry-timeout")) {
    std::optional<absl::Duration> d = ParseTimeout(*retry, /*allow_zero=*/true);
    if (!d) {
      return UsageError(
          absl::StrFormat("--retry-timeout=\"%s\" is not a duration such as 0, 10s or 1m", *retry));
    }
    options.retry_timeout = *d;
  }
  const std::string format = cl.Get("format").value_or("text");
  if (format != "text" && format != "json") {
    return UsageError(absl::StrFormat("--format=\"%s\" must be text or json", format));
  }
  g.json = format == "json";
  if (std::optional<Failure> f = ParseSecurity(cl, options)) return f;
  g.client = client::Client::Connect(g.target, options);
  if (const absl::Status& s = g.client->connect_status(); !s.ok()) {
    // A list that is not HOST:PORT,...: the user's; no name resolves: the network's.
    return s.code() == absl::StatusCode::kInvalidArgument
               ? UsageError(absl::StrFormat("--target: %s", s.message()))
               : ServerError(s, g.target);
  }
  return std::nullopt;
}

int RunCommand(const GlobalOptions& g, const CommandLine& cl, Command command) {
  switch (command) {
    case kCreate:
      return RunCreate(g, cl);
    case kInfo:
      return RunInfo(g, cl);
    case kList:
      return RunList(g, cl);
    case kDrop:
      return RunDrop(g, cl);
    case kExpire:
      return RunExpire(g, cl);
    case kRename:
      return RunRename(g, cl);
    case kServerInfo:
      return RunServerInfo(g, cl);
    case kHealth:
      return RunHealth(g, cl);
    case kSnapshot:
      return RunSnapshot(g, cl);
    case kExport:
      return RunExport(g, cl);
    case kImport:
      return RunImport(g, cl);
    default:
      return RunKeyCommand(g, cl, command);
  }
}

int Main(int argc, char** argv) {
  CommandLine cl;
  if (std::optional<Failure> f = ParseArgs(argc, argv, cl)) return Fail(*f);

  const CommandSpec* command = nullptr;
  if (!cl.positional.empty()) {
    command = FindCommand(cl.positional[0]);
    if (command == nullptr) {
      return Fail(UsageError(
          absl::StrFormat("unknown command \"%s\" (see cuckooctl --help)", cl.positional[0])));
    }
  }
  if (cl.Bool("help")) return PrintHelp(command);
  if (cl.Bool("version")) {
    absl::PrintF("cuckooctl %s\n", kVersion);
    return fflush(stdout) == 0 ? kExitOk : kExitUsage;
  }
  if (command == nullptr) {
    fputs(kUsage, stderr);
    return kExitUsage;
  }
  if (command->id == kHelp) return RunHelp(cl);
  if (std::optional<Failure> f = CheckFlagsApply(cl, *command)) return Fail(*f);

  // Local: no server, so none of the server settings (or their variables).
  if (command->id == kHashToken) return RunHashToken(cl);

  GlobalOptions g;
  if (std::optional<Failure> f = ConnectGlobal(cl, g)) return Fail(*f);
  return RunCommand(g, cl, command->id);
}

}  // namespace
}  // namespace cuckoo::ctl

int main(int argc, char** argv) {
  // Before anything starts OpenSSL (gRPC's TLS, RAND_bytes): no OpenSSL
  // cleanup at exit. That cleanup deletes OpenSSL's thread-local keys, so a
  // gRPC thread still finishing its exit at that moment lost its error queue
  // (OpenSSL 3's 904-byte ERR_STATE) without the destructor that frees it,
  // and LeakSanitizer failed the run (seen twice in CI, after quick
  // PERMISSION_DENIED and UNAUTHENTICATED exits over TLS). The process ends
  // anyway; with the keys kept, every exiting thread frees its own state.
  OPENSSL_init_crypto(OPENSSL_INIT_NO_ATEXIT, nullptr);
  grpc_init();
  const int code = cuckoo::ctl::Main(argc, argv);
  // Every channel is gone by now, but gRPC lets go of what it held (its
  // subchannels, its threads) on its own threads: wait for that, so that
  // the process ends with as little as possible still running.
  grpc_shutdown_blocking();
  return code;
}
