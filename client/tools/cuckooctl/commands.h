// cuckooctl's commands, one function each, given the parsed command line
// and, for those that talk to a server, the connected client. Each returns
// the process's exit code, having reported any failure on stderr.
#ifndef CUCKOO_CLIENT_TOOLS_CUCKOOCTL_COMMANDS_H_
#define CUCKOO_CLIENT_TOOLS_CUCKOOCTL_COMMANDS_H_

#include <memory>
#include <string>

#include "absl/time/time.h"
#include "client/cuckoo_client.h"
#include "client/tools/cuckooctl/command_line.h"

namespace cuckoo::ctl {

// The global flags of a command that talks to a server.
struct GlobalOptions {
  std::string target;
  absl::Duration timeout;
  bool json = false;
  // For --target (one server or a list), with --timeout and --retry-timeout.
  std::unique_ptr<client::Client> client;
};

// insert, lookup, delete and count (key_commands.cc).
int RunKeyCommand(const GlobalOptions& g, const CommandLine& cl, Command cmd);

// Filters and the server (filter_commands.cc).
int RunCreate(const GlobalOptions& g, const CommandLine& cl);
int RunInfo(const GlobalOptions& g, const CommandLine& cl);
int RunList(const GlobalOptions& g, const CommandLine& cl);
int RunDrop(const GlobalOptions& g, const CommandLine& cl);
int RunExpire(const GlobalOptions& g, const CommandLine& cl);
int RunRename(const GlobalOptions& g, const CommandLine& cl);
int RunServerInfo(const GlobalOptions& g, const CommandLine& cl);
int RunSnapshot(const GlobalOptions& g, const CommandLine& cl);
int RunHealth(const GlobalOptions& g, const CommandLine& cl);

// A filter's snapshot file to and from the server (transfer_commands.cc).
int RunExport(const GlobalOptions& g, const CommandLine& cl);
int RunImport(const GlobalOptions& g, const CommandLine& cl);

// hash-token: a token and its entry; talks to no server (security.cc).
int RunHashToken(const CommandLine& cl);

}  // namespace cuckoo::ctl

#endif  // CUCKOO_CLIENT_TOOLS_CUCKOOCTL_COMMANDS_H_
