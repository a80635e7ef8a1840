#include "server/config.h"

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <mutex>
#include <string>
#include <vector>

#include "absl/flags/commandlineflag.h"
#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/reflection.h"
#include "absl/flags/usage.h"
#include "absl/flags/usage_config.h"
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
#include "core/filter_options.h"
#include "cuckoo_version.h"
#include "server/listen.h"
#include "server/wal_apply.h"
#include "server/wal_format.h"

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
ABSL_FLAG(std::string, redis_listen, "",
          "host:port of the Redis-protocol port (RESP2/RESP3, RedisBloom's CF.* commands); "
          "empty: off");
ABSL_FLAG(uint32_t, redis_threads, kDefaults.redis_threads,
          "I/O threads of the Redis port; 0: one per CPU");
ABSL_FLAG(uint32_t, redis_max_clients, kDefaults.redis_max_clients,
          "most open connections on the Redis port");
ABSL_FLAG(absl::Duration, redis_idle_timeout, kDefaults.redis_idle_timeout,
          "close Redis-port connections idle this long; 0: never");
ABSL_FLAG(uint64_t, redis_default_capacity, kDefaults.redis_default_capacity,
          "capacity of a filter that CF.ADD or CF.INSERT creates");
ABSL_FLAG(double, redis_error_rate, kDefaults.redis_error_rate,
          "false-positive rate of filters made over the Redis port");
ABSL_FLAG(uint32_t, redis_default_expansion, kDefaults.redis_default_expansion,
          "growth factor of Redis-made filters without EXPANSION: 0 fixed, 2 to 8");
ABSL_FLAG(bool, redis_plaintext, kDefaults.redis_plaintext,
          "allow the Redis port (which has no TLS) when --tls-cert is set");
ABSL_FLAG(std::string, log_level, kDefaults.log_level,
          "trace, debug, info, warn, error, critical or off");
ABSL_FLAG(std::string, log_format, kDefaults.log_format, "text or json (one object per line)");

namespace cuckoo::server {
namespace {

// Every flag of the server, for the environment fallback.
constexpr const char* kFlagNames[] = {
    "listen",
    "listen_socket_mode",
    "admin_listen",
    "data_dir",
    "max_batch_keys",
    "max_key_bytes",
    "max_filters",
    "memory_budget",
    "max_message_size",
    "drain_timeout",
    "log_level",
    "log_format",
    "snapshot_interval",
    "snapshot_buffer",
    "transport_memory",
    "durability",
    "wal_sync_interval",
    "wal_segment_size",
    "wal_max_size",
    "nats",
    "nats_stream",
    "nats_replicas",
    "replica_id",
    "advertise",
    "replica_expiry",
    "dedup_window",
    "max_read_wait",
    "cluster_write_timeout",
    "ready_max_lag",
    "tls_cert",
    "tls_key",
    "tls_client_ca",
    "tls_reload_interval",
    "admin_tls",
    "auth_tokens",
    "auth_reload_interval",
    "reflection",
    "grpc_threads",
    "peer_token_file",
    "peer_ca",
    "redis_listen",
    "redis_threads",
    "redis_max_clients",
    "redis_idle_timeout",
    "redis_default_capacity",
    "redis_error_rate",
    "redis_default_expansion",
    "redis_plaintext",
};

struct Unit {
  const char* name;
  uint64_t factor;
};
constexpr Unit kUnits[] = {
    {"kib", uint64_t{1} << 10},
    {"mib", uint64_t{1} << 20},
    {"gib", uint64_t{1} << 30},
    {"tib", uint64_t{1} << 40},
    {"kb", 1'000},
    {"mb", 1'000'000},
    {"gb", 1'000'000'000},
    {"tb", 1'000'000'000'000},
    {"k", uint64_t{1} << 10},
    {"m", uint64_t{1} << 20},
    {"g", uint64_t{1} << 30},
    {"t", uint64_t{1} << 40},
    {"b", 1},
};

// "--max-batch-keys=5" -> "--max_batch_keys=5": absl flag names cannot hold
// dashes, but dashed names are what operators type.
std::string NormalizeFlag(absl::string_view arg) {
  std::string out(arg);
  if (!absl::StartsWith(arg, "--") || arg == "--") return out;
  size_t end = out.find('=');
  if (end == std::string::npos) end = out.size();
  std::replace(out.begin() + 2, out.begin() + end, '-', '_');
  return out;
}

uint64_t ReadCgroupLimit() {
  for (const char* path : {"/sys/fs/cgroup/memory.max",  // cgroup v2
                           "/sys/fs/cgroup/memory/memory.limit_in_bytes"}) {
    std::ifstream in(path);
    std::string value;
    if (!(in >> value)) continue;
    uint64_t limit = 0;
    // "max" (v2) or a huge number (v1) mean no limit.
    if (absl::SimpleAtoi(value, &limit) && limit < (uint64_t{1} << 60)) return limit;
  }
  return 0;
}

}  // namespace

absl::StatusOr<uint64_t> ParseByteSize(absl::string_view text) {
  absl::string_view s = absl::StripAsciiWhitespace(text);
  size_t digits = 0;
  while (digits < s.size() && (absl::ascii_isdigit(s[digits]) || s[digits] == '.')) ++digits;
  absl::string_view number = s.substr(0, digits);
  std::string unit = absl::AsciiStrToLower(absl::StripAsciiWhitespace(s.substr(digits)));
  double value = 0;
  if (number.empty() || !absl::SimpleAtod(number, &value)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "\"%s\" is not a size: expected a number of bytes with an optional unit such as "
        "512MiB or 8GiB",
        text));
  }
  uint64_t factor = 1;
  if (!unit.empty()) {
    auto it = std::find_if(std::begin(kUnits), std::end(kUnits),
                           [&](const Unit& u) { return unit == u.name; });
    if (it == std::end(kUnits)) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "\"%s\" has unknown unit \"%s\": use B, KiB, MiB, GiB, TiB, KB, MB, GB or TB", text,
          unit));
    }
    factor = it->factor;
  }
  double bytes = value * static_cast<double>(factor);
  if (bytes >= 18446744073709551615.0) {
    return absl::InvalidArgumentError(absl::StrFormat("\"%s\" is too large", text));
  }
  return static_cast<uint64_t>(std::llround(bytes));
}

namespace {
constexpr std::pair<const char*, int> kBinaryUnits[] = {
    {"TiB", 40}, {"GiB", 30}, {"MiB", 20}, {"KiB", 10}};
}  // namespace

std::string FormatByteSize(uint64_t bytes) {
  for (const auto& [unit, shift] : kBinaryUnits) {
    const uint64_t one = uint64_t{1} << shift;
    if (bytes < one) continue;
    if (bytes % one == 0) return absl::StrFormat("%u%s", bytes >> shift, unit);
    return absl::StrFormat("%.1f%s", static_cast<double>(bytes) / one, unit);
  }
  return absl::StrFormat("%uB", bytes);
}

// Exact, so that it parses back to the same value.
std::string FormatByteSizeExactly(uint64_t bytes) {
  for (const auto& [unit, shift] : kBinaryUnits) {
    const uint64_t one = uint64_t{1} << shift;
    if (bytes >= one && bytes % one == 0) return absl::StrFormat("%u%s", bytes >> shift, unit);
  }
  return absl::StrFormat("%u", bytes);
}

std::string EnvironmentVariableFor(absl::string_view flag_name) {
  return "CUCKOOD_" + absl::AsciiStrToUpper(flag_name);
}

uint64_t AvailableMemoryBytes() {
  uint64_t physical =
      static_cast<uint64_t>(sysconf(_SC_PHYS_PAGES)) * static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  uint64_t cgroup = ReadCgroupLimit();
  return cgroup > 0 ? std::min(cgroup, physical) : physical;
}

uint64_t EffectiveMemoryBudget(const ServerConfig& config) {
  if (config.memory_budget_bytes != 0) return config.memory_budget_bytes;
  // 75%, less if the stated overhead would not fit beside it (many CPUs in
  // a small container).
  const uint64_t available = AvailableMemoryBytes();
  const uint64_t overhead = StatedMemoryOverhead(config);
  const uint64_t room = available > overhead ? available - overhead : 0;
  return std::max(std::min(available / 4 * 3, room), available / 8);
}

uint64_t EffectiveSnapshotBuffer(const ServerConfig& config) {
  if (config.snapshot_buffer_bytes != 0) return config.snapshot_buffer_bytes;
  return std::clamp<uint64_t>(AvailableMemoryBytes() / 16, uint64_t{16} << 20, uint64_t{128} << 20);
}

uint64_t EffectiveTransportMemory(const ServerConfig& config) {
  if (config.transport_memory_bytes != 0) return config.transport_memory_bytes;
  return std::max(
      std::clamp<uint64_t>(AvailableMemoryBytes() / 32, uint64_t{32} << 20, uint64_t{1} << 30),
      2 * config.max_message_bytes);
}

uint64_t WalMemoryOverhead(const ServerConfig& config) {
  const uint64_t cpus = std::max<long>(1, sysconf(_SC_NPROCESSORS_ONLN));
  const uint64_t batch_bytes = WalBytesForBatch(config.max_batch_keys, kMaxShards);
  // Start-up (replay) and running (the pending buffer) never overlap.
  return std::max(
      WalMemoryBound(kWalDefaultMaxPendingBytes, batch_bytes),
      WalApplier::ReplayMemoryBound(config.wal_segment_bytes, std::max<uint64_t>(2, cpus)));
}

uint64_t ClusterMemoryOverhead(const ServerConfig& config) {
  return kRequestWindowBytes + (uint64_t{64} << 20) + EffectiveTransportMemory(config) / 2;
}

uint64_t StatedMemoryOverhead(const ServerConfig& config) {
  const uint64_t cpus = std::max<long>(1, sysconf(_SC_NPROCESSORS_ONLN));
  // A cluster replica keeps no write-ahead log of its own.
  const uint64_t log = config.nats_urls.empty() ? WalMemoryOverhead(config) + kRequestWindowBytes
                                                : ClusterMemoryOverhead(config);
  return (uint64_t{32} << 20) + cpus * (uint64_t{4} << 20) + 3 * EffectiveTransportMemory(config) +
         EffectiveSnapshotBuffer(config) + log + kTransferMemoryOverhead;
}

absl::Status ValidateConfig(const ServerConfig& c) {
  absl::StatusOr<std::vector<ListenAddress>> listen = ParseListenAddresses(c.listen);
  if (!listen.ok()) return listen.status();
  if (c.listen_socket_mode > 0777) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "--listen-socket-mode=%o: only the permission bits (at most 0777) apply to a socket",
        c.listen_socket_mode));
  }
  const bool has_tcp = std::any_of(listen->begin(), listen->end(),
                                   [](const ListenAddress& a) { return !a.is_unix(); });
  if (!c.nats_urls.empty() && c.advertise.empty() && !has_tcp) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "--listen=\"%s\" has no TCP address, from which cluster mode (--nats) would take the "
        "address peer replicas copy filters from: set --advertise=HOST:PORT (an address that "
        "reaches this replica's gRPC port), or add a TCP address to --listen",
        c.listen));
  }
  if (!c.admin_listen.empty()) {
    const size_t colon = c.admin_listen.rfind(':');
    uint32_t port = 0;
    if (colon == std::string::npos ||
        !absl::SimpleAtoi(absl::string_view(c.admin_listen).substr(colon + 1), &port) ||
        port > 65535) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "--admin-listen=\"%s\" must be host:port (e.g. 0.0.0.0:9090), or empty for no admin "
          "server",
          c.admin_listen));
    }
  }
  if (c.data_dir.empty()) return absl::InvalidArgumentError("--data-dir must not be empty");
  if (c.max_batch_keys == 0) {
    return absl::InvalidArgumentError("--max-batch-keys must be at least 1");
  }
  if (c.max_key_bytes == 0) return absl::InvalidArgumentError("--max-key-bytes must be at least 1");
  if (c.max_filters == 0) return absl::InvalidArgumentError("--max-filters must be at least 1");
  if (c.max_message_bytes < 4096 || c.max_message_bytes > (uint64_t{1} << 31) - 1) {
    return absl::InvalidArgumentError(
        absl::StrFormat("--max-message-size=%s must be between 4KiB and 2GiB",
                        FormatByteSize(c.max_message_bytes)));
  }
  if (!c.redis_listen.empty()) {
    const bool also_grpc = std::any_of(listen->begin(), listen->end(), [&](const ListenAddress& a) {
      return a.text == c.redis_listen;
    });
    if (!absl::EndsWith(c.redis_listen, ":0") && (also_grpc || c.redis_listen == c.admin_listen)) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "--redis-listen=%s is also --listen or --admin-listen: give each port its own address",
          c.redis_listen));
    }
    if (!c.tls_cert.empty() && !c.redis_plaintext) {
      return absl::InvalidArgumentError(
          "--redis-listen serves plaintext (the Redis port has no TLS), and --tls-cert says "
          "clients must use TLS: set --redis-plaintext=true if plaintext is meant there (a "
          "sidecar on localhost, a private network), or leave --redis-listen empty");
    }
  }
  if (c.grpc_threads > 1024) {
    return absl::InvalidArgumentError(
        absl::StrFormat("--grpc-threads=%u must be 0 (one per CPU) to 1024", c.grpc_threads));
  }
  if (c.redis_threads > 1024) {
    return absl::InvalidArgumentError(
        absl::StrFormat("--redis-threads=%u must be 0 (one per CPU) to 1024", c.redis_threads));
  }
  if (c.redis_max_clients == 0) {
    return absl::InvalidArgumentError("--redis-max-clients must be at least 1");
  }
  if (c.redis_idle_timeout < absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        absl::StrFormat("--redis-idle-timeout=%s must not be negative",
                        absl::FormatDuration(c.redis_idle_timeout)));
  }
  if (c.redis_default_capacity < 1 || c.redis_default_capacity > (uint64_t{1} << 40)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("--redis-default-capacity=%u must be 1 to 2^40", c.redis_default_capacity));
  }
  if (!(c.redis_error_rate > 0 && c.redis_error_rate < 1)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "--redis-error-rate=%g must be more than 0 and less than 1", c.redis_error_rate));
  }
  if (c.redis_default_expansion == 1 || c.redis_default_expansion > 8) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "--redis-default-expansion=%u must be 0 (fixed) or 2 to 8", c.redis_default_expansion));
  }
  if (c.drain_timeout < absl::ZeroDuration()) {
    return absl::InvalidArgumentError(absl::StrFormat("--drain-timeout=%s must not be negative",
                                                      absl::FormatDuration(c.drain_timeout)));
  }
  if (c.wal_sync_interval < absl::Milliseconds(10) || c.wal_sync_interval > absl::Hours(1)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("--wal-sync-interval=%s must be between 10ms and 1h",
                        absl::FormatDuration(c.wal_sync_interval)));
  }
  if (c.wal_segment_bytes < kWalMinSegmentBytes || c.wal_segment_bytes > (uint64_t{1} << 30) ||
      c.wal_segment_bytes % 4096 != 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "--wal-segment-size=%s must be a multiple of 4KiB between %s and 1GiB",
        FormatByteSizeExactly(c.wal_segment_bytes), FormatByteSizeExactly(kWalMinSegmentBytes)));
  }
  if (c.wal_max_bytes < 2 * c.wal_segment_bytes) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "--wal-max-size=%s must be at least twice --wal-segment-size=%s",
        FormatByteSizeExactly(c.wal_max_bytes), FormatByteSizeExactly(c.wal_segment_bytes)));
  }
  if (c.snapshot_interval < absl::ZeroDuration() ||
      (c.snapshot_interval > absl::ZeroDuration() && c.snapshot_interval < absl::Seconds(1))) {
    return absl::InvalidArgumentError(
        absl::StrFormat("--snapshot-interval=%s must be 0 (off) or at least 1s",
                        absl::FormatDuration(c.snapshot_interval)));
  }
  if (c.transport_memory_bytes != 0 && c.transport_memory_bytes < 2 * c.max_message_bytes) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "--transport-memory=%s must be 0 (automatic) or at least twice --max-message-size (%s), "
        "or a message of the largest size could not be received",
        FormatByteSize(c.transport_memory_bytes), FormatByteSize(c.max_message_bytes)));
  }
  if (c.snapshot_buffer_bytes != 0 && c.snapshot_buffer_bytes < 4096) {
    return absl::InvalidArgumentError(
        absl::StrFormat("--snapshot-buffer=%s must be 0 (automatic) or at least 4KiB",
                        FormatByteSize(c.snapshot_buffer_bytes)));
  }
  static constexpr const char* kLevels[] = {"trace", "debug",    "info", "warn",
                                            "error", "critical", "off"};
  if (std::find(std::begin(kLevels), std::end(kLevels), c.log_level) == std::end(kLevels)) {
    return absl::InvalidArgumentError(absl::StrFormat("--log-level=\"%s\" must be one of: %s",
                                                      c.log_level, absl::StrJoin(kLevels, ", ")));
  }
  for (const std::string& url : c.nats_urls) {
    if (url.empty() || url.find("://") == std::string::npos || url.find(',') != std::string::npos) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "--nats: \"%s\" is not a NATS URL; expected nats://host:port[,nats://host:port...]",
          url));
    }
  }
  if (c.nats_replicas > 5) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "--nats-replicas=%u: JetStream replicates a stream to 1 to 5 servers (0: automatic)",
        c.nats_replicas));
  }
  if (c.dedup_window < absl::Seconds(1) || c.dedup_window > absl::Hours(24)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "--dedup-window=%s must be between 1s and 24h", absl::FormatDuration(c.dedup_window)));
  }
  if (c.replica_expiry < absl::Seconds(2) || c.replica_expiry > absl::Hours(24 * 30)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "--replica-expiry=%s must be between 2s and 720h", absl::FormatDuration(c.replica_expiry)));
  }
  if (!c.advertise.empty()) {
    const size_t colon = c.advertise.rfind(':');
    uint32_t port = 0;
    if (colon == std::string::npos || colon == 0 ||
        !absl::SimpleAtoi(c.advertise.substr(colon + 1), &port) || port == 0 || port > 65535) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "--advertise=\"%s\": expected host:port (the address peers reach this replica at)",
          absl::CHexEscape(c.advertise)));
    }
  }
  if (c.max_read_wait < absl::ZeroDuration()) {
    return absl::InvalidArgumentError(absl::StrFormat("--max-read-wait=%s must not be negative",
                                                      absl::FormatDuration(c.max_read_wait)));
  }
  if (c.cluster_write_timeout < absl::Milliseconds(100)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("--cluster-write-timeout=%s must be at least 100ms",
                        absl::FormatDuration(c.cluster_write_timeout)));
  }
  if (c.tls_cert.empty() != c.tls_key.empty()) {
    return absl::InvalidArgumentError(c.tls_cert.empty()
                                          ? "--tls-key is set without --tls-cert: TLS needs both"
                                          : "--tls-cert is set without --tls-key: TLS needs both");
  }
  if (c.tls_cert.empty()) {
    if (!c.tls_client_ca.empty()) {
      return absl::InvalidArgumentError(
          "--tls-client-ca (mutual TLS) needs TLS: set --tls-cert and --tls-key too");
    }
    if (c.admin_tls) {
      return absl::InvalidArgumentError(
          "--admin-tls serves the admin port with --tls-cert: set --tls-cert and --tls-key too");
    }
    if (!c.peer_ca.empty()) {
      return absl::InvalidArgumentError(
          "--peer-ca is used only with TLS: set --tls-cert and --tls-key too");
    }
  }
  if (!c.peer_token_file.empty() && !c.tls_cert.empty() && c.peer_ca.empty() &&
      c.tls_client_ca.empty()) {
    // Peers' addresses come from the cluster's NATS records: checked against
    // the system's public roots, any host with a public certificate that got
    // its address there would receive the token.
    return absl::InvalidArgumentError(
        "--peer-token-file with TLS needs --peer-ca (or --tls-client-ca): the peers' "
        "certificates must come from a private CA, so that the token goes only to a replica of "
        "this cluster");
  }
  if (c.tls_reload_interval < absl::Seconds(1) || c.tls_reload_interval > absl::Hours(24)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("--tls-reload-interval=%s must be between 1s and 24h",
                        absl::FormatDuration(c.tls_reload_interval)));
  }
  if (c.auth_reload_interval < absl::Milliseconds(100) ||
      c.auth_reload_interval > absl::Hours(24)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("--auth-reload-interval=%s must be between 100ms and 24h",
                        absl::FormatDuration(c.auth_reload_interval)));
  }
  if (c.log_format != "text" && c.log_format != "json") {
    return absl::InvalidArgumentError(
        absl::StrFormat("--log-format=\"%s\" must be text or json", c.log_format));
  }
  return absl::OkStatus();
}

absl::StatusOr<ServerConfig> ConfigFromCommandLine(int argc, char** argv) {
  static std::once_flag usage_once;  // absl allows setting these once only.
  std::call_once(usage_once, [] {
    absl::SetProgramUsageMessage(
        "cuckood: a membership-query server of named cuckoo filters over gRPC.\n"
        "Every flag can also be set by an environment variable CUCKOOD_<FLAG>, e.g.\n"
        "CUCKOOD_LISTEN=0.0.0.0:50051; the command line wins. Flags may be written\n"
        "with dashes or underscores: --max-batch-keys or --max_batch_keys.");
    absl::FlagsUsageConfig usage;
    usage.version_string = [] { return absl::StrCat("cuckood ", kVersion, "\n"); };
    usage.contains_helpshort_flags = [](absl::string_view file) {
      return absl::StrContains(file, "server/config");
    };
    usage.contains_help_flags = usage.contains_helpshort_flags;
    absl::SetFlagsUsageConfig(usage);
  });

  for (const char* name : kFlagNames) {
    std::string var = EnvironmentVariableFor(name);
    const char* value = std::getenv(var.c_str());
    if (value == nullptr) continue;
    absl::CommandLineFlag* flag = absl::FindCommandLineFlag(name);
    std::string error;
    if (flag == nullptr || !flag->ParseFrom(value, &error)) {
      return absl::InvalidArgumentError(
          absl::StrFormat("environment variable %s=\"%s\": %s", var, value, error));
    }
  }

  std::vector<std::string> normalized;
  normalized.reserve(argc);
  for (int i = 0; i < argc; ++i) normalized.push_back(NormalizeFlag(argv[i]));
  // Check names and values first, so that a bad flag is reported like every
  // other configuration error (absl's parser would print and exit 1 itself).
  for (size_t i = 1; i < normalized.size(); ++i) {
    absl::string_view arg = normalized[i];
    if (arg == "--") break;
    if (!absl::ConsumePrefix(&arg, "--") && !absl::ConsumePrefix(&arg, "-")) continue;
    const size_t eq = arg.find('=');
    const std::string name(arg.substr(0, eq));
    const std::string dashed = absl::StrReplaceAll(name, {{"_", "-"}});
    // absl's own usage flags, which its parser handles (and exits on).
    static constexpr absl::string_view kBuiltin[] = {
        "help",    "helpfull",        "helpshort", "helppackage", "helpon",     "helpmatch",
        "version", "only_check_args", "flagfile",  "fromenv",     "tryfromenv", "undefok"};
    if (std::find(std::begin(kBuiltin), std::end(kBuiltin), name) != std::end(kBuiltin)) {
      continue;
    }
    absl::CommandLineFlag* flag = absl::FindCommandLineFlag(name);
    if (flag == nullptr) {
      return absl::InvalidArgumentError(absl::StrFormat("unknown flag --%s (see --help)", dashed));
    }
    if (flag->IsOfType<bool>()) continue;
    std::string value;
    if (eq != absl::string_view::npos) {
      value = std::string(arg.substr(eq + 1));
    } else if (i + 1 < normalized.size()) {
      value = normalized[++i];
    } else {
      return absl::InvalidArgumentError(absl::StrFormat("flag --%s needs a value", dashed));
    }
    std::string error;
    if (!flag->ParseFrom(value, &error)) {
      return absl::InvalidArgumentError(absl::StrFormat("--%s=\"%s\": %s", dashed, value, error));
    }
  }
  std::vector<char*> args;
  for (std::string& a : normalized) args.push_back(a.data());
  std::vector<char*> rest = absl::ParseCommandLine(static_cast<int>(args.size()), args.data());
  if (rest.size() > 1) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "unexpected argument \"%s\": cuckood takes only flags (see --help)", rest[1]));
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
  c.redis_listen = absl::GetFlag(FLAGS_redis_listen);
  c.redis_threads = absl::GetFlag(FLAGS_redis_threads);
  c.redis_max_clients = absl::GetFlag(FLAGS_redis_max_clients);
  c.redis_idle_timeout = absl::GetFlag(FLAGS_redis_idle_timeout);
  c.redis_default_capacity = absl::GetFlag(FLAGS_redis_default_capacity);
  c.redis_error_rate = absl::GetFlag(FLAGS_redis_error_rate);
  c.redis_default_expansion = absl::GetFlag(FLAGS_redis_default_expansion);
  c.redis_plaintext = absl::GetFlag(FLAGS_redis_plaintext);
  if (absl::Status s = ValidateConfig(c); !s.ok()) return s;
  return c;
}

}  // namespace cuckoo::server
