// cuckooctl's access token and TLS settings: each from its global flag
// (--token, --token-file, --tls, --ca, --cert, --key, --tls-server-name),
// else from its environment variable ($CUCKOO_TOKEN, ...).
#ifndef CUCKOO_CLIENT_TOOLS_CUCKOOCTL_SECURITY_H_
#define CUCKOO_CLIENT_TOOLS_CUCKOOCTL_SECURITY_H_

#include <optional>

#include "client/cuckoo_client.h"
#include "client/tools/cuckooctl/command_line.h"

namespace cuckoo::ctl {

// Sets options.token and options.tls from the flags and the environment; a
// usage failure names the flag or variable at fault (and the file).
std::optional<Failure> ParseSecurity(const CommandLine& cl, client::ClientOptions& options);

}  // namespace cuckoo::ctl

#endif  // CUCKOO_CLIENT_TOOLS_CUCKOOCTL_SECURITY_H_
