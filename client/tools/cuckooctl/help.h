// cuckooctl's help: the usage text and each command's, printed by --help,
// `cuckooctl help [COMMAND]` and, for no command at all, on stderr.
#ifndef CUCKOO_CLIENT_TOOLS_CUCKOOCTL_HELP_H_
#define CUCKOO_CLIENT_TOOLS_CUCKOOCTL_HELP_H_

#include "client/tools/cuckooctl/command_line.h"

namespace cuckoo::ctl {

// The usage of cuckooctl: every command and global flag, and the exit codes.
extern const char kUsage[];

// Prints the help of `command` (null or `help`: kUsage) on stdout; 0, or
// kExitUsage if stdout cannot be written.
int PrintHelp(const CommandSpec* command);

}  // namespace cuckoo::ctl

#endif  // CUCKOO_CLIENT_TOOLS_CUCKOOCTL_HELP_H_
