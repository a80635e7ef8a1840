#include "server/config/config.h"

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

extern char** environ;

#include "absl/flags/commandlineflag.h"
#include "absl/flags/flag.h"
#include "absl/flags/reflection.h"
#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "base/units.h"
#include "core/filter_options.h"
#include "cuckoo_version.h"
#include "server/wal/wal_format.h"

namespace cuckoo::server {

// A flag holding a number of bytes, written with an optional unit.
struct ByteSizeFlag {
  uint64_t bytes = 0;
};

bool AbslParseFlag(absl::string_view text, ByteSizeFlag* flag, std::string* error) {
  absl::StatusOr<uint64_t> bytes = ParseByteSize(text);
  if (!bytes.ok()) {
    *error = std::string(bytes.status().message());
    return false;
  }
  // A bare number of bytes is refused (issue 29: --memory-budget=1024 was
  // 1 KiB, not the GiB meant); a bare 0 (a flag's "default" value) is not.
  absl::string_view s = absl::StripAsciiWhitespace(text);
  if (*bytes != 0 && !s.empty() && (absl::ascii_isdigit(s.back()) || s.back() == '.')) {
    *error =
        "a size needs a unit: B, KiB, MiB, GiB, TiB, KB, MB, GB or TB (K, M, G, T: KiB...), "
        "e.g. 512MiB (only 0 may be written bare)";
    return false;
  }
  flag->bytes = *bytes;
  return true;
}

std::string AbslUnparseFlag(ByteSizeFlag flag) { return FormatByteSizeExactly(flag.bytes); }

// A file mode, in octal: "0660", "660", "0600".
struct FileModeFlag {
  uint32_t mode = 0;
};

bool AbslParseFlag(absl::string_view text, FileModeFlag* flag, std::string* error) {
  uint32_t mode = 0;
  if (text.empty() || text.size() > 4 ||
      text.find_first_not_of("01234567") != absl::string_view::npos) {
    *error = "expected an octal file mode such as 0660 (owner and group) or 0666 (everyone)";
    return false;
  }
  for (char c : text) mode = mode * 8 + static_cast<uint32_t>(c - '0');
  if (mode > 0777) {
    *error = "only the permission bits (at most 0777) apply to a socket";
    return false;
  }
  flag->mode = mode;
  return true;
}

std::string AbslUnparseFlag(FileModeFlag flag) { return absl::StrFormat("%04o", flag.mode); }

}  // namespace cuckoo::server

namespace {
const cuckoo::server::ServerConfig kDefaults;
}  // namespace

ABSL_FLAG(std::string, listen, kDefaults.listen,
          "gRPC listen address: host:port, unix:PATH or unix:///ABSOLUTE/PATH (a Unix socket), "
          "or a comma-separated list of them, e.g. 0.0.0.0:50051,unix:///run/cuckood/cuckood.sock");
ABSL_FLAG(cuckoo::server::FileModeFlag, listen_socket_mode, {kDefaults.listen_socket_mode},
          "file mode of --listen's Unix sockets, octal; connecting needs write permission: 0660 "
          "(default) lets the owner and group connect, 0666 everyone who can reach the directory");
ABSL_FLAG(std::string, admin_listen, kDefaults.admin_listen,
          "admin HTTP address, host:port, serving /metrics (Prometheus), /healthz and /readyz; "
          "empty: no admin server");
ABSL_FLAG(std::string, data_dir, kDefaults.data_dir,
          "directory for snapshots (created if missing)");
ABSL_FLAG(uint32_t, max_batch_keys, kDefaults.max_batch_keys,
          "most keys one Insert/Lookup/Delete/Count request may carry");
ABSL_FLAG(uint32_t, max_key_bytes, kDefaults.max_key_bytes, "longest key, in bytes");
ABSL_FLAG(uint32_t, max_filters, kDefaults.max_filters, "most filters the server holds");
ABSL_FLAG(cuckoo::server::ByteSizeFlag, memory_budget, {},
          "table memory all filters together may use, e.g. 8GiB; 0 (default): 75% of the "
          "memory available to the process (cgroup limit, else RAM)");
ABSL_FLAG(cuckoo::server::ByteSizeFlag, max_message_size, {kDefaults.max_message_bytes},
          "largest request or response message, e.g. 16MiB");
ABSL_FLAG(cuckoo::server::ByteSizeFlag, transport_memory, {kDefaults.transport_memory_bytes},
          "memory gRPC may use for connections and messages in transit, e.g. 128MiB; past it "
          "gRPC resets streams (RESOURCE_EXHAUSTED); 0 (default): 1/32 of the available memory, "
          "between 32MiB and 1GiB, and at least twice --max-message-size");
ABSL_FLAG(absl::Duration, drain_timeout, kDefaults.drain_timeout,
          "on SIGTERM/SIGINT, how long in-flight requests may take to finish");
ABSL_FLAG(absl::Duration, snapshot_interval, kDefaults.snapshot_interval,
          "how often filters changed since their last snapshot are written to --data-dir; 0: "
          "only on the Snapshot RPC and at shutdown");
ABSL_FLAG(cuckoo::server::ByteSizeFlag, snapshot_buffer, {kDefaults.snapshot_buffer_bytes},
          "most memory one snapshot write buffers, e.g. 64MiB; a shard whose table is larger "
          "is written while inserts into it wait; 0 (default): 1/16 of the available memory, "
          "16MiB to 128MiB");
ABSL_FLAG(std::string, durability, "sync",
          "when a write is acknowledged: sync (its log record is on disk: group commit, the "
          "default), interval (written; fdatasync every --wal-sync-interval: a power cut loses "
          "at most about that much) or none (written; the OS flushes when it likes)");
ABSL_FLAG(absl::Duration, wal_sync_interval, kDefaults.wal_sync_interval,
          "with --durability=interval, how often the log is fdatasync'ed");
ABSL_FLAG(cuckoo::server::ByteSizeFlag, wal_segment_size, {kDefaults.wal_segment_bytes},
          "size of one write-ahead log segment file in <data-dir>/wal, e.g. 64MiB");
ABSL_FLAG(cuckoo::server::ByteSizeFlag, wal_max_size, {kDefaults.wal_max_bytes},
          "when the write-ahead log holds more than this, changed filters are snapshotted early "
          "so that it can be truncated (bounds its size and the replay at start-up), e.g. 1GiB");
ABSL_FLAG(std::string, nats, "",
          "cluster mode: comma-separated NATS server URLs (nats://host:4222,...) whose JetStream "
          "stream is the replicated log; empty (default): a single node with its local "
          "write-ahead log");
ABSL_FLAG(std::string, nats_stream, kDefaults.nats_stream,
          "cluster mode: the JetStream stream that is the log (created if missing; subject "
          "cuckood.<stream>.log)");
ABSL_FLAG(uint32_t, nats_replicas, kDefaults.nats_replicas,
          "cluster mode: the stream's replication factor when this replica creates it; 0 "
          "(default): 3 when the NATS cluster has 3 or more servers, else 1");
ABSL_FLAG(std::string, replica_id, "", "cluster mode: this replica's name; default: the host name");
ABSL_FLAG(std::string, advertise, "",
          "cluster mode: host:port at which peer replicas reach this one's gRPC port, to copy "
          "its filters when they bootstrap; default: the host name and the --listen port");
ABSL_FLAG(absl::Duration, replica_expiry, kDefaults.replica_expiry,
          "cluster mode: the stream keeps what every replica still needs, but a replica not "
          "heard of for this long no longer holds it back (it bootstraps from a peer when it "
          "returns)");
ABSL_FLAG(absl::Duration, dedup_window, kDefaults.dedup_window,
          "an Insert or Delete repeating a request_id within this long gets the first one's "
          "results and is not applied again");
ABSL_FLAG(absl::Duration, max_read_wait, kDefaults.max_read_wait,
          "the longest a read with min_log_position waits for this server to apply that far "
          "(less if the call's deadline is sooner); then UNAVAILABLE");
ABSL_FLAG(absl::Duration, transfer_idle_timeout, kDefaults.transfer_idle_timeout,
          "an ExportFilter, ImportFilter, CF.SCANDUMP or CF.LOADCHUNK whose client sends or "
          "takes no chunk for this long is ended, and its slot, file and disk space freed "
          "(100ms to 24h)");
ABSL_FLAG(absl::Duration, cluster_write_timeout, kDefaults.cluster_write_timeout,
          "cluster mode: a write not acknowledged by the stream and applied here within this "
          "fails with UNAVAILABLE (retry with the same request_id)");
ABSL_FLAG(uint64_t, ready_max_lag, kDefaults.ready_max_lag,
          "cluster mode: /readyz is 200 only while this replica is at most this many log "
          "entries behind the stream");
ABSL_FLAG(std::string, tls_cert, "",
          "PEM certificate (chain) for TLS on the gRPC port; re-read when it changes");
ABSL_FLAG(std::string, tls_key, "", "PEM private key of --tls-cert");
ABSL_FLAG(std::string, tls_client_ca, "",
          "PEM CA certificate(s): mutual TLS, clients must present a certificate it signed");
ABSL_FLAG(absl::Duration, tls_reload_interval, kDefaults.tls_reload_interval,
          "how often the TLS files are checked for a new certificate");
ABSL_FLAG(bool, admin_tls, kDefaults.admin_tls,
          "serve the admin HTTP port over TLS with --tls-cert as well");
ABSL_FLAG(std::string, auth_tokens, "",
          "access file of tokens, client certificates and their grants; empty: no "
          "authentication");
ABSL_FLAG(absl::Duration, auth_reload_interval, kDefaults.auth_reload_interval,
          "how often the access file is checked for changes (SIGHUP re-reads it at once)");
ABSL_FLAG(bool, reflection, kDefaults.reflection, "serve gRPC server reflection");
ABSL_FLAG(uint32_t, grpc_threads, kDefaults.grpc_threads,
          "threads serving Insert, Lookup, Delete and Count, each polling its own completion "
          "queue; 0: one per CPU");
ABSL_FLAG(std::string, peer_token_file, "",
          "cluster mode: file with the token sent when copying filters from a peer");
ABSL_FLAG(std::string, peer_ca, "",
          "cluster mode with TLS: CA that peers' certificates are checked against; default "
          "--tls-client-ca, else the system's roots");
ABSL_FLAG(std::string, nats_tls_ca, "",
          "cluster mode: PEM CA certificate(s) the NATS servers' certificates (and host names) "
          "are checked against; set: TLS to NATS (as are tls:// URLs in --nats); read at start");
ABSL_FLAG(std::string, nats_tls_cert, "",
          "cluster mode: PEM client certificate (chain) for mutual TLS to NATS, with "
          "--nats-tls-key; read at start");
ABSL_FLAG(std::string, nats_tls_key, "", "PEM private key of --nats-tls-cert");
ABSL_FLAG(std::string, nats_creds, "",
          "cluster mode: NATS credentials file (user JWT and NKey seed, as nsc writes it); "
          "nats.c reads it again at every connect");
ABSL_FLAG(std::string, nats_user, "",
          "cluster mode: the NATS user name, with --nats-password-file");
ABSL_FLAG(std::string, nats_password_file, "",
          "cluster mode: file holding the password of --nats-user (surrounding whitespace "
          "ignored); read at start");
ABSL_FLAG(std::string, nats_token_file, "",
          "cluster mode: file holding the NATS authentication token (surrounding whitespace "
          "ignored); read at start");
ABSL_FLAG(std::string, redis_listen, "",
          "host:port of the Redis-protocol port (RESP2/RESP3, RedisBloom's CF.* commands); "
          "empty: off");
ABSL_FLAG(uint32_t, redis_threads, kDefaults.redis_threads,
          "I/O threads of the Redis port; 0: one per CPU");
ABSL_FLAG(uint32_t, redis_max_clients, kDefaults.redis_max_clients,
          "most open connections on the Redis port");
ABSL_FLAG(cuckoo::server::ByteSizeFlag, redis_client_memory, {kDefaults.redis_client_memory_bytes},
          "memory all Redis-port connections may hold together (buffers, arguments, replies, "
          "names), e.g. 128MiB; past it the connections using the most are closed; 0 (default): "
          "1/16 of the available memory, 32MiB to 1GiB, and at least four of the largest "
          "commands");
ABSL_FLAG(absl::Duration, redis_idle_timeout, kDefaults.redis_idle_timeout,
          "close Redis-port connections idle this long; 0: never");
ABSL_FLAG(uint64_t, redis_default_capacity, kDefaults.redis_default_capacity,
          "capacity of a filter that CF.ADD or CF.INSERT creates");
ABSL_FLAG(double, redis_error_rate, kDefaults.redis_error_rate,
          "false-positive rate of filters made over the Redis port");
ABSL_FLAG(uint32_t, redis_default_expansion, kDefaults.redis_default_expansion,
          "growth factor of Redis-made filters without EXPANSION: 0 fixed, 2 to 8");
ABSL_FLAG(bool, redis_plaintext, kDefaults.redis_plaintext,
          "serve the Redis port in plaintext even with --tls-cert (else it uses TLS with the "
          "gRPC port's certificate)");
ABSL_FLAG(std::string, log_level, kDefaults.log_level,
          "trace, debug, info, warn, error, critical or off");
ABSL_FLAG(std::string, log_format, kDefaults.log_format, "text or json (one object per line)");

namespace cuckoo::server {
namespace {

// Every flag of the server, in the groups --help shows: for the environment
// fallback and the help text.
struct FlagEntry {
  const char* group;
  const char* name;
};
constexpr FlagEntry kFlags[] = {
    {"Listening", "listen"},
    {"Listening", "listen_socket_mode"},
    {"Listening", "admin_listen"},
    {"Listening", "grpc_threads"},
    {"Listening", "reflection"},
    {"Limits and memory", "max_batch_keys"},
    {"Limits and memory", "max_key_bytes"},
    {"Limits and memory", "max_filters"},
    {"Limits and memory", "memory_budget"},
    {"Limits and memory", "max_message_size"},
    {"Limits and memory", "transport_memory"},
    {"Limits and memory", "max_read_wait"},
    {"Limits and memory", "transfer_idle_timeout"},
    {"Storage and durability", "data_dir"},
    {"Storage and durability", "snapshot_interval"},
    {"Storage and durability", "snapshot_buffer"},
    {"Storage and durability", "durability"},
    {"Storage and durability", "wal_sync_interval"},
    {"Storage and durability", "wal_segment_size"},
    {"Storage and durability", "wal_max_size"},
    {"Storage and durability", "dedup_window"},
    {"Storage and durability", "drain_timeout"},
    {"TLS and authentication", "tls_cert"},
    {"TLS and authentication", "tls_key"},
    {"TLS and authentication", "tls_client_ca"},
    {"TLS and authentication", "tls_reload_interval"},
    {"TLS and authentication", "admin_tls"},
    {"TLS and authentication", "auth_tokens"},
    {"TLS and authentication", "auth_reload_interval"},
    {"Cluster mode", "nats"},
    {"Cluster mode", "nats_stream"},
    {"Cluster mode", "nats_replicas"},
    {"Cluster mode", "replica_id"},
    {"Cluster mode", "advertise"},
    {"Cluster mode", "replica_expiry"},
    {"Cluster mode", "cluster_write_timeout"},
    {"Cluster mode", "ready_max_lag"},
    {"Cluster mode", "peer_token_file"},
    {"Cluster mode", "peer_ca"},
    {"Cluster mode", "nats_tls_ca"},
    {"Cluster mode", "nats_tls_cert"},
    {"Cluster mode", "nats_tls_key"},
    {"Cluster mode", "nats_creds"},
    {"Cluster mode", "nats_user"},
    {"Cluster mode", "nats_password_file"},
    {"Cluster mode", "nats_token_file"},
    {"Redis-protocol port", "redis_listen"},
    {"Redis-protocol port", "redis_threads"},
    {"Redis-protocol port", "redis_max_clients"},
    {"Redis-protocol port", "redis_client_memory"},
    {"Redis-protocol port", "redis_idle_timeout"},
    {"Redis-protocol port", "redis_default_capacity"},
    {"Redis-protocol port", "redis_error_rate"},
    {"Redis-protocol port", "redis_default_expansion"},
    {"Redis-protocol port", "redis_plaintext"},
    {"Logging", "log_level"},
    {"Logging", "log_format"},
};

}  // namespace

std::string EnvironmentVariableFor(absl::string_view flag_name) {
  return "CUCKOOD_" + absl::AsciiStrToUpper(flag_name);
}

namespace {

// Kubernetes' service links: for every Service in the namespace (one named
// cuckood, cuckood-headless, cuckood-ready...) it sets {SVCNAME}_SERVICE_HOST,
// {SVCNAME}_SERVICE_PORT, {SVCNAME}_SERVICE_PORT_{PORTNAME}, {SVCNAME}_PORT
// (tcp://IP:PORT) and {SVCNAME}_PORT_{PORT}_{PROTO}[_PROTO|_PORT|_ADDR] in
// every pod, unless the pod sets enableServiceLinks: false.
// (Matched by hand: std::regex trips g++ 12's -Wmaybe-uninitialized in the
// sanitizer builds.)
bool IsKubernetesServiceLink(const std::string& name, absl::string_view value) {
  constexpr absl::string_view kPrefix = "CUCKOOD";
  if (!absl::StartsWith(name, kPrefix)) return false;
  for (char c : name) {
    if (!((c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_')) return false;
  }
  const absl::string_view n = name;
  // Every place `part` starts at or after the prefix, with what follows it.
  auto tails = [&](absl::string_view part) {
    std::vector<absl::string_view> out;
    for (size_t at = n.find(part, kPrefix.size()); at != absl::string_view::npos;
         at = n.find(part, at + 1)) {
      out.push_back(n.substr(at + part.size()));
    }
    return out;
  };
  if (absl::EndsWith(n, "_SERVICE_HOST")) return true;
  for (absl::string_view rest : tails("_SERVICE_PORT")) {
    if (rest.empty() || (rest.size() > 1 && rest[0] == '_')) return true;
  }
  // _PORT_{digits}_{TCP|UDP|SCTP}[_PROTO|_PORT|_ADDR]
  for (absl::string_view rest : tails("_PORT_")) {
    size_t digits = 0;
    while (digits < rest.size() && rest[digits] >= '0' && rest[digits] <= '9') ++digits;
    if (digits == 0 || digits == rest.size() || rest[digits] != '_') continue;
    rest.remove_prefix(digits + 1);
    for (absl::string_view proto : {"TCP", "UDP", "SCTP"}) {
      if (!absl::StartsWith(rest, proto)) continue;
      absl::string_view after = rest.substr(proto.size());
      if (after.empty() || after == "_PROTO" || after == "_PORT" || after == "_ADDR") return true;
    }
  }
  // {SVCNAME}_PORT alone only with its URL value: CUCKOOD_REDIS_PORT=6379 is
  // a typo, not a service link.
  return n.size() > kPrefix.size() && absl::EndsWith(n, "_PORT") &&
         (absl::StartsWith(value, "tcp://") || absl::StartsWith(value, "udp://") ||
          absl::StartsWith(value, "sctp://"));
}

size_t EditDistance(absl::string_view a, absl::string_view b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

// The flag whose name is closest to `name` (underscores).
std::string ClosestFlag(absl::string_view name) {
  const char* best = kFlags[0].name;
  size_t best_distance = SIZE_MAX;
  for (const FlagEntry& f : kFlags) {
    const size_t d = EditDistance(name, f.name);
    if (d < best_distance) best = f.name, best_distance = d;
  }
  return best;
}

std::string Dashed(absl::string_view name) { return absl::StrReplaceAll(name, {{"_", "-"}}); }

// absl's CommandLineFlag::ParseFrom error without its prefix ("Illegal value
// 'V' specified for flag 'name'; "): the callers name the flag and the value
// the way the operator wrote them.
std::string ParseError(std::string error) {
  if (absl::StartsWith(error, "Illegal value '")) {
    if (size_t semi = error.find("'; "); semi != std::string::npos) error.erase(0, semi + 3);
  }
  return error;
}

// Applies the CUCKOOD_* variables; an unknown one (a typo) is an error, as
// the server would otherwise run on a default the operator meant to change.
absl::Status ApplyEnvironment() {
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    absl::string_view entry(*e);
    if (!absl::StartsWith(entry, "CUCKOOD_")) continue;
    const size_t eq = entry.find('=');
    const std::string var(entry.substr(0, eq));
    const absl::string_view value = eq == absl::string_view::npos ? "" : entry.substr(eq + 1);
    const std::string name = absl::AsciiStrToLower(absl::string_view(var).substr(8));
    const bool known = std::any_of(std::begin(kFlags), std::end(kFlags),
                                   [&](const FlagEntry& f) { return name == f.name; });
    if (known) continue;
    if (IsKubernetesServiceLink(var, value)) continue;
    const std::string closest = ClosestFlag(name);
    return absl::InvalidArgumentError(
        absl::StrFormat("unknown environment variable %s (did you mean %s, --%s?)", var,
                        EnvironmentVariableFor(closest), Dashed(closest)));
  }
  for (const FlagEntry& f : kFlags) {
    std::string var = EnvironmentVariableFor(f.name);
    const char* value = std::getenv(var.c_str());
    if (value == nullptr) continue;
    absl::CommandLineFlag* flag = absl::FindCommandLineFlag(f.name);
    std::string error;
    if (flag == nullptr || !flag->ParseFrom(value, &error)) {
      return absl::InvalidArgumentError(absl::StrFormat("environment variable %s=\"%s\" (--%s): %s",
                                                        var, value, Dashed(f.name),
                                                        ParseError(error)));
    }
  }
  return absl::OkStatus();
}

// "--max-batch-keys=5" or "-max-batch-keys=5" -> "max_batch_keys=5": absl
// flag names cannot hold dashes, but dashed names are what operators type.
// nullopt if `arg` is not a flag.
std::optional<std::string> FlagText(absl::string_view arg) {
  if (!absl::ConsumePrefix(&arg, "--") && !absl::ConsumePrefix(&arg, "-")) return std::nullopt;
  if (arg.empty()) return std::nullopt;
  std::string out(arg);
  size_t end = out.find('=');
  if (end == std::string::npos) end = out.size();
  std::replace(out.begin(), out.begin() + end, '-', '_');
  return out;
}

constexpr int kMaxFlagfileDepth = 8;

// What the command line asked for besides the flags' values.
struct CommandLineRequest {
  bool help = false;
  bool version = false;
};

// Sets the flags named in `args` (the command line, or a --flagfile's
// lines), checking every name and value itself so that each error is one
// line and exit code 2 (absl's parser prints its own and exits 1).
absl::Status ApplyArgs(const std::vector<std::string>& args, int depth,
                       CommandLineRequest& request) {
  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i] == "--") {
      if (i + 1 < args.size()) {
        return absl::InvalidArgumentError(absl::StrFormat(
            "unexpected argument \"%s\": cuckood takes only flags (see --help)", args[i + 1]));
      }
      break;
    }
    std::optional<std::string> text = FlagText(args[i]);
    if (!text) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "unexpected argument \"%s\": cuckood takes only flags (see --help)", args[i]));
    }
    const size_t eq = text->find('=');
    const std::string name = text->substr(0, eq);
    const std::string dashed = Dashed(name);
    if (absl::StartsWith(name, "help") || name == "h") {
      request.help = true;
      continue;
    }
    if (name == "version") {
      request.version = true;
      continue;
    }
    absl::CommandLineFlag* flag = absl::FindCommandLineFlag(name);
    const bool ours = std::any_of(std::begin(kFlags), std::end(kFlags),
                                  [&](const FlagEntry& f) { return name == f.name; });
    // --noadmin-tls: absl's negation of a bool flag.
    if (!ours && name != "flagfile" && absl::StartsWith(name, "no") && eq == std::string::npos) {
      absl::CommandLineFlag* negated = absl::FindCommandLineFlag(name.substr(2));
      if (negated != nullptr && negated->IsOfType<bool>()) {
        std::string error;
        negated->ParseFrom("false", &error);
        continue;
      }
    }
    if (name != "flagfile" && (flag == nullptr || !ours)) {
      return absl::InvalidArgumentError(absl::StrFormat("unknown flag --%s (see --help)", dashed));
    }
    std::string value;
    if (eq != std::string::npos) {
      value = text->substr(eq + 1);
    } else if (flag != nullptr && flag->IsOfType<bool>()) {
      value = "true";
    } else if (i + 1 < args.size()) {
      value = args[++i];
    } else {
      return absl::InvalidArgumentError(absl::StrFormat("flag --%s needs a value", dashed));
    }
    if (name == "flagfile") {
      if (depth >= kMaxFlagfileDepth) {
        return absl::InvalidArgumentError(absl::StrFormat(
            "--flagfile=\"%s\": flag files nest more than %d deep", value, kMaxFlagfileDepth));
      }
      for (absl::string_view path : absl::StrSplit(value, ',', absl::SkipEmpty())) {
        std::ifstream in{std::string(path)};
        if (!in) {
          return absl::InvalidArgumentError(
              absl::StrFormat("--flagfile=\"%s\": cannot read it: %s", path, std::strerror(errno)));
        }
        std::vector<std::string> lines;
        std::string line;
        int number = 0;
        while (std::getline(in, line)) {
          ++number;
          absl::string_view l = absl::StripAsciiWhitespace(line);
          if (l.empty() || absl::StartsWith(l, "#")) continue;
          if (!absl::StartsWith(l, "-")) {
            return absl::InvalidArgumentError(absl::StrFormat(
                "--flagfile=\"%s\" line %d: \"%s\" is not a flag (--name=value)", path, number, l));
          }
          lines.emplace_back(l);
        }
        if (absl::Status s = ApplyArgs(lines, depth + 1, request); !s.ok()) {
          return absl::InvalidArgumentError(
              absl::StrFormat("--flagfile=\"%s\": %s", path, s.message()));
        }
      }
      continue;
    }
    std::string error;
    if (!flag->ParseFrom(value, &error)) {
      return absl::InvalidArgumentError(
          absl::StrFormat("--%s=\"%s\": %s", dashed, value, ParseError(error)));
    }
  }
  return absl::OkStatus();
}

// Word-wraps `text` to lines of at most `width` characters after `indent`.
std::string Wrap(absl::string_view text, size_t indent, size_t width) {
  std::string out;
  size_t column = 0;
  for (absl::string_view word : absl::StrSplit(text, ' ', absl::SkipEmpty())) {
    if (column > 0 && column + 1 + word.size() > width) {
      out += '\n';
      column = 0;
    }
    if (column == 0) {
      out.append(indent, ' ');
    } else {
      out += ' ';
      ++column;
    }
    absl::StrAppend(&out, word);
    column += word.size();
  }
  return out + '\n';
}

}  // namespace

std::string HelpText() {
  std::string out = absl::StrCat(
      "Usage: cuckood [--flag=value ...]\n\n"
      "cuckood ",
      kVersion,
      ": a membership-query server of named cuckoo filters over gRPC.\n"
      "Every flag can also be set by the environment variable shown with it; the\n"
      "command line wins, and an unknown CUCKOOD_* variable is an error (Kubernetes'\n"
      "service links, CUCKOOD_SERVICE_HOST and the like, are ignored). Flags may be\n"
      "written with dashes or underscores (--max-batch-keys, --max_batch_keys).\n"
      "Sizes need a unit: B, KiB, MiB, GiB, TiB, KB, MB, GB, TB (only 0 may be\n"
      "written bare); durations are like 500ms, 10s, 1m30s, 24h.\n");
  absl::string_view group;
  for (const FlagEntry& f : kFlags) {
    if (f.group != group) {
      group = f.group;
      absl::StrAppend(&out, "\n", group, ":\n");
    }
    const absl::CommandLineFlag* flag = absl::FindCommandLineFlag(f.name);
    if (flag == nullptr) continue;
    std::string def = flag->DefaultValue();
    absl::StrAppend(&out, "  --", Dashed(f.name), "  (", EnvironmentVariableFor(f.name),
                    "; default ", def.empty() ? "empty" : absl::StrCat("\"", def, "\""), ")\n",
                    Wrap(flag->Help(), 6, 78));
  }
  absl::StrAppend(&out,
                  "\nOther:\n"
                  "  --flagfile=PATH[,PATH...]\n"
                  "      read flags from files, one --name=value a line (# starts a comment)\n"
                  "  --help  this text\n"
                  "  --version  print the version\n"
                  "\nExit codes: 0 after a signal-initiated shutdown, 1 if the server cannot\n"
                  "start, 2 for a bad configuration, 3 after the write-ahead log failed.\n");
  return out;
}

absl::StatusOr<ServerConfig> ConfigFromCommandLine(int argc, char** argv) {
  if (absl::Status s = ApplyEnvironment(); !s.ok()) return s;
  CommandLineRequest request;
  std::vector<std::string> args(argv + std::min(argc, 1), argv + argc);
  if (absl::Status s = ApplyArgs(args, 0, request); !s.ok()) return s;
  if (request.help) {
    std::fputs(HelpText().c_str(), stdout);
    std::exit(std::fflush(stdout) == 0 ? 0 : 2);
  }
  if (request.version) {
    absl::PrintF("cuckood %s\n", kVersion);
    std::exit(std::fflush(stdout) == 0 ? 0 : 2);
  }

  ServerConfig c;
  c.listen = absl::GetFlag(FLAGS_listen);
  c.listen_socket_mode = absl::GetFlag(FLAGS_listen_socket_mode).mode;
  c.admin_listen = absl::GetFlag(FLAGS_admin_listen);
  c.data_dir = absl::GetFlag(FLAGS_data_dir);
  c.max_batch_keys = absl::GetFlag(FLAGS_max_batch_keys);
  c.max_key_bytes = absl::GetFlag(FLAGS_max_key_bytes);
  c.max_filters = absl::GetFlag(FLAGS_max_filters);
  c.memory_budget_bytes = absl::GetFlag(FLAGS_memory_budget).bytes;
  c.max_message_bytes = absl::GetFlag(FLAGS_max_message_size).bytes;
  c.drain_timeout = absl::GetFlag(FLAGS_drain_timeout);
  c.snapshot_interval = absl::GetFlag(FLAGS_snapshot_interval);
  c.snapshot_buffer_bytes = absl::GetFlag(FLAGS_snapshot_buffer).bytes;
  c.transport_memory_bytes = absl::GetFlag(FLAGS_transport_memory).bytes;
  c.log_level = absl::GetFlag(FLAGS_log_level);
  c.log_format = absl::GetFlag(FLAGS_log_format);
  absl::StatusOr<Durability> durability = ParseDurability(absl::GetFlag(FLAGS_durability));
  if (!durability.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--durability: ", durability.status().message()));
  }
  c.durability = *durability;
  c.wal_sync_interval = absl::GetFlag(FLAGS_wal_sync_interval);
  c.wal_segment_bytes = absl::GetFlag(FLAGS_wal_segment_size).bytes;
  c.wal_max_bytes = absl::GetFlag(FLAGS_wal_max_size).bytes;
  for (absl::string_view url :
       absl::StrSplit(absl::GetFlag(FLAGS_nats), ',', absl::SkipWhitespace())) {
    c.nats_urls.emplace_back(absl::StripAsciiWhitespace(url));
  }
  c.nats_stream = absl::GetFlag(FLAGS_nats_stream);
  c.nats_replicas = absl::GetFlag(FLAGS_nats_replicas);
  c.replica_id = absl::GetFlag(FLAGS_replica_id);
  c.advertise = absl::GetFlag(FLAGS_advertise);
  c.replica_expiry = absl::GetFlag(FLAGS_replica_expiry);
  c.dedup_window = absl::GetFlag(FLAGS_dedup_window);
  c.max_read_wait = absl::GetFlag(FLAGS_max_read_wait);
  c.transfer_idle_timeout = absl::GetFlag(FLAGS_transfer_idle_timeout);
  c.cluster_write_timeout = absl::GetFlag(FLAGS_cluster_write_timeout);
  c.ready_max_lag = absl::GetFlag(FLAGS_ready_max_lag);
  c.tls_cert = absl::GetFlag(FLAGS_tls_cert);
  c.tls_key = absl::GetFlag(FLAGS_tls_key);
  c.tls_client_ca = absl::GetFlag(FLAGS_tls_client_ca);
  c.tls_reload_interval = absl::GetFlag(FLAGS_tls_reload_interval);
  c.admin_tls = absl::GetFlag(FLAGS_admin_tls);
  c.auth_tokens = absl::GetFlag(FLAGS_auth_tokens);
  c.auth_reload_interval = absl::GetFlag(FLAGS_auth_reload_interval);
  c.reflection = absl::GetFlag(FLAGS_reflection);
  c.grpc_threads = absl::GetFlag(FLAGS_grpc_threads);
  c.peer_token_file = absl::GetFlag(FLAGS_peer_token_file);
  c.peer_ca = absl::GetFlag(FLAGS_peer_ca);
  c.nats_tls_ca = absl::GetFlag(FLAGS_nats_tls_ca);
  c.nats_tls_cert = absl::GetFlag(FLAGS_nats_tls_cert);
  c.nats_tls_key = absl::GetFlag(FLAGS_nats_tls_key);
  c.nats_creds = absl::GetFlag(FLAGS_nats_creds);
  c.nats_user = absl::GetFlag(FLAGS_nats_user);
  c.nats_password_file = absl::GetFlag(FLAGS_nats_password_file);
  c.nats_token_file = absl::GetFlag(FLAGS_nats_token_file);
  c.redis_listen = absl::GetFlag(FLAGS_redis_listen);
  c.redis_threads = absl::GetFlag(FLAGS_redis_threads);
  c.redis_max_clients = absl::GetFlag(FLAGS_redis_max_clients);
  c.redis_client_memory_bytes = absl::GetFlag(FLAGS_redis_client_memory).bytes;
  c.redis_idle_timeout = absl::GetFlag(FLAGS_redis_idle_timeout);
  c.redis_default_capacity = absl::GetFlag(FLAGS_redis_default_capacity);
  c.redis_error_rate = absl::GetFlag(FLAGS_redis_error_rate);
  c.redis_default_expansion = absl::GetFlag(FLAGS_redis_default_expansion);
  c.redis_plaintext = absl::GetFlag(FLAGS_redis_plaintext);
  if (absl::Status s = ValidateConfig(c); !s.ok()) return s;
  return c;
}

}  // namespace cuckoo::server
