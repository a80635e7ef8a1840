// ServerConfig: everything cuckood can be told, with defaults that work with
// no flags and no config file, and how it is read from flags and environment.
//
// Every setting is a flag (--max-batch-keys=10000 or --max_batch_keys=10000)
// and an environment variable (CUCKOOD_MAX_BATCH_KEYS=10000); a flag given on
// the command line wins over the environment. Sizes need a unit (B, KiB,
// MiB, GiB, TiB, or KB/MB/GB/TB for powers of ten; only 0 may be bare); durations take absl's form
// ("10s", "1m30s").
#ifndef CUCKOO_SERVER_CONFIG_CONFIG_H_
#define CUCKOO_SERVER_CONFIG_CONFIG_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "base/units.h"
#include "server/cluster/cluster_options.h"
#include "server/observability/logging.h"
#include "server/resp/commands/redis_options.h"
#include "server/security/auth.h"
#include "server/security/tls.h"
#include "server/service/service_limits.h"
#include "server/service/transfers.h"
#include "server/wal/wal.h"

namespace cuckoo::server {

struct ServerConfig {
  // gRPC listen addresses (server/service/listen.h): host:port, unix:PATH or
  // unix:///ABS/PATH, or a comma-separated list of them, each its own
  // listening port. Port 0 picks a free port (tests).
  std::string listen = "0.0.0.0:50051";
  // The file mode of the Unix sockets of `listen` (connecting needs write
  // permission): 0660, the owner and the group.
  uint32_t listen_socket_mode = 0660;
  // Admin HTTP listen address (/metrics, /healthz, /readyz), host:port; port
  // 0 picks a free port (tests); empty: no admin server.
  std::string admin_listen = "0.0.0.0:9090";
  // Where snapshots live; created if missing.
  std::string data_dir = "./data";
  // Most keys one Insert / Lookup / Delete / Count request may carry.
  uint32_t max_batch_keys = 100'000;
  // Longest key in bytes.
  uint32_t max_key_bytes = 4096;
  // Most filters the server holds.
  uint32_t max_filters = 1024;
  // Table memory of all filters together; 0: 75% of the memory available to
  // the process (its cgroup's limit, else the machine's RAM), less when the
  // stated overhead (StatedMemoryOverhead) would not fit beside that, but
  // at least 1/8 of it.
  uint64_t memory_budget_bytes = 0;
  // Largest request or response message.
  uint64_t max_message_bytes = uint64_t{16} << 20;
  // Memory gRPC may use for connections and the messages it is receiving
  // or sending (a grpc::ResourceQuota); 0: 1/32 of the memory available to
  // the process, between 32 MiB and 1 GiB, and at least 2 * max_message_bytes.
  // Past it, gRPC resets streams (RESOURCE_EXHAUSTED) instead of growing.
  uint64_t transport_memory_bytes = 0;
  // How long in-flight requests may take to finish on shutdown.
  absl::Duration drain_timeout = absl::Seconds(10);
  // How often filters changed since their last snapshot are snapshotted;
  // zero: only on the Snapshot RPC and at shutdown. A crash loses at most
  // this much of the changes not covered by a Snapshot call.
  absl::Duration snapshot_interval = absl::Seconds(60);
  // The most memory one snapshot write buffers; 0: 1/16 of the memory
  // available to the process, at least 16 MiB and at most 128 MiB. A shard
  // whose section (header, table and checksum) fits is copied, then
  // written with no lock held; a larger one is written in pieces while
  // inserts into it wait (reads do not).
  uint64_t snapshot_buffer_bytes = 0;
  // When a write is acknowledged (server/wal/wal.h): kSync once its log record
  // is fdatasync'ed (group commit); kInterval once written, with an
  // fdatasync every wal_sync_interval; kNone once written.
  Durability durability = Durability::kSync;
  absl::Duration wal_sync_interval = absl::Seconds(1);
  // Size of one write-ahead log segment file (preallocated).
  uint64_t wal_segment_bytes = uint64_t{64} << 20;
  // When the log's segments hold more than this, changed filters are
  // snapshotted early so that the log can be truncated: it bounds the log's
  // size and the replay time at start-up.
  uint64_t wal_max_bytes = uint64_t{1} << 30;
  // Cluster mode (server/cluster/cluster.h): the NATS servers whose
  // JetStream stream is the log; empty: a single node with its local log.
  std::vector<std::string> nats_urls;
  // The stream's name, and its replication factor when this replica creates
  // it (0: 3 when the NATS cluster has 3 or more servers, else 1).
  std::string nats_stream = "CUCKOOD";
  uint32_t nats_replicas = 0;
  // This replica's name; empty: the host name.
  std::string replica_id;
  // Cluster: host:port at which peer replicas reach this one's gRPC port to
  // copy its filters when they bootstrap; empty: the host name and the port
  // of --listen's first TCP address (or that address itself when it names a
  // host). Required when --listen has no TCP address.
  std::string advertise;
  // Cluster: a replica not heard of for this long no longer holds the
  // stream's retention back (and bootstraps from a peer when it returns).
  absl::Duration replica_expiry = absl::Hours(24);
  // Repeats of an Insert's or Delete's request_id within this long get the
  // first one's results (JetStream's duplicate window in a cluster).
  absl::Duration dedup_window = absl::Minutes(2);
  // The longest a read with min_log_position waits for this replica to
  // apply that far (less if the call's deadline is sooner).
  absl::Duration max_read_wait = absl::Seconds(5);
  // A transfer (ExportFilter, ImportFilter, CF.SCANDUMP, CF.LOADCHUNK) whose
  // client sends or takes no chunk for this long is ended, and its slot,
  // private file and disk space freed (server/service/transfers.h). A chunk is
  // 1 MiB at most: a client that moves none in a minute has gone, or is too
  // slow to hold one of the few slots.
  absl::Duration transfer_idle_timeout = absl::Seconds(60);
  // Cluster: a write not acknowledged and applied within this fails with
  // UNAVAILABLE.
  absl::Duration cluster_write_timeout = absl::Seconds(10);
  // Cluster: /readyz is 200 only while the replica is at most this many log
  // entries behind the stream.
  uint64_t ready_max_lag = 1000;
  // TLS on the gRPC port (server/security/tls.h): the certificate (chain) and its
  // private key, PEM files, both or neither; re-read every
  // tls_reload_interval, so replacing the files rotates them.
  std::string tls_cert;
  std::string tls_key;
  // Mutual TLS: clients must present a certificate this CA (PEM) signed.
  std::string tls_client_ca;
  absl::Duration tls_reload_interval = absl::Seconds(10);
  // Serve the admin HTTP port over TLS too, with the same certificate.
  bool admin_tls = false;
  // The access file (server/security/access.h); empty: no authentication, every
  // call is allowed. Re-read when it changes (checked every
  // auth_reload_interval) and on SIGHUP.
  std::string auth_tokens;
  absl::Duration auth_reload_interval = absl::Seconds(5);
  // Serve gRPC server reflection (grpc.reflection.v1alpha).
  bool reflection = true;
  // Threads of the data path (Insert, Lookup, Delete, Count), each with its
  // own completion queue; 0: one per CPU.
  uint32_t grpc_threads = 0;
  // Cluster: the file holding the token this replica sends when it copies
  // filters from a peer (it needs admin on every filter), and the CA its
  // certificate is checked against with TLS (default: tls_client_ca, else
  // the system's roots).
  std::string peer_token_file;
  std::string peer_ca;
  // Cluster: TLS and credentials for the connections to NATS
  // (ClusterOptions::nats_security, server/cluster/cluster_options.h): the
  // CA the NATS servers' certificates are checked against (set: TLS), a
  // client certificate and key for mutual TLS, and at most one kind of
  // credentials: a .creds file, a user with a password file, or a token
  // file. Read at start-up (the .creds file again by nats.c at every
  // connect).
  std::string nats_tls_ca;
  std::string nats_tls_cert;
  std::string nats_tls_key;
  std::string nats_creds;
  std::string nats_user;
  std::string nats_password_file;
  std::string nats_token_file;
  // The Redis-protocol port (server/resp/resp_server.h, server/resp/commands/resp_commands.h):
  // host:port serving RESP2/RESP3 and RedisBloom's CF.* commands over the
  // same filters; empty: off. Port 0 picks a free port (tests).
  std::string redis_listen;
  // Its I/O threads; 0: one per CPU.
  uint32_t redis_threads = 0;
  // Most open connections (more are refused with an error reply).
  uint32_t redis_max_clients = 10'000;
  // Memory all its connections may hold together (buffers, arguments,
  // replies, names); past it the connections using the most are closed.
  // 0: EffectiveRedisClientMemory's default.
  uint64_t redis_client_memory_bytes = 0;
  // A connection idle this long is closed; zero: never (Redis's default).
  absl::Duration redis_idle_timeout = absl::ZeroDuration();
  // Filters made over the Redis port: the capacity of one that CF.ADD or
  // CF.INSERT creates, the false-positive rate of all (RedisBloom has no
  // argument for it), and the growth factor when CF.RESERVE gives no
  // EXPANSION (0 fixed, 2 to 8).
  uint64_t redis_default_capacity = 1024;
  double redis_error_rate = 0.002;
  uint32_t redis_default_expansion = 2;
  // The Redis port has no TLS: with --tls-cert it is refused unless this
  // says plaintext is meant (a sidecar on localhost, a private network).
  bool redis_plaintext = false;
  // spdlog level name: trace, debug, info, warn, error, critical, off.
  std::string log_level = "info";
  // "text" or "json" (one JSON object per line).
  std::string log_format = "text";
};

// Each subsystem's options as `config` sets them (the parts that flags
// set: callbacks and other run-time parts are the wiring's), for the
// wiring (server/server.cc) and for ValidateConfig, which checks each with
// the subsystem's own Validate... function.
TlsOptions TlsOptionsOf(const ServerConfig& config);
ServiceLimits ServiceLimitsOf(const ServerConfig& config);
WalOptions WalOptionsOf(const ServerConfig& config);
ClusterOptions ClusterOptionsOf(const ServerConfig& config);
RedisOptions RedisOptionsOf(const ServerConfig& config);
LogOptions LogOptionsOf(const ServerConfig& config);
Authenticator::Options AuthOptionsOf(const ServerConfig& config);
// --advertise, or an address of --listen (DefaultAdvertiseAddress).
std::string AdvertiseAddress(const ServerConfig& config);

// Checks values that flags alone cannot (ranges, formats). INVALID_ARGUMENT
// names the setting and the value.
absl::Status ValidateConfig(const ServerConfig& config);

// Bytes of memory this process may use: its cgroup's memory limit (v2 or v1)
// if one is set, else the machine's physical memory.
uint64_t AvailableMemoryBytes();

// The budget actually used: config.memory_budget_bytes, or the default above.
uint64_t EffectiveMemoryBudget(const ServerConfig& config);
// The snapshot buffer actually used: config.snapshot_buffer_bytes, or the
// default above.
uint64_t EffectiveSnapshotBuffer(const ServerConfig& config);
// gRPC's memory quota actually used: config.transport_memory_bytes, or the
// default above.
uint64_t EffectiveTransportMemory(const ServerConfig& config);
// The Redis port's client memory actually used: config.redis_client_memory_bytes,
// or 1/16 of the available memory, 32 MiB to 1 GiB, and at least four of
// the largest commands (RedisMaxCommandBytes).
uint64_t EffectiveRedisClientMemory(const ServerConfig& config);
// The largest command the Redis port reads: one gRPC message at most
// (--max-message-size), and room for a CF.LOADCHUNK chunk (1 MiB + 8 KiB).
uint64_t RedisMaxCommandBytes(const ServerConfig& config);
// The Redis port's share of the stated overhead (0 when it is off): its
// clients' memory (EffectiveRedisClientMemory), what each I/O thread may
// allocate before the evictions it causes free memory (a largest command
// and a read chunk), a thread's scratch (1 MiB), the AUTH throttle's
// table of peers and delayed replies (kRedisAuthThrottleBytes), and the
// CF.SCANDUMP/CF.LOADCHUNK threads' chunks (kRedisTransferBytes).
uint64_t RedisMemoryOverhead(const ServerConfig& config);

// The memory cuckood may use besides its filters (--memory-budget), whatever
// clients send within the limits: 32 MiB (code, libraries, idle threads),
// 4 MiB per CPU (a handler thread keeps up to ~1.5 MiB of scratch; gRPC
// runs about two per CPU), three times --transport-memory (gRPC enforces its quota after the
// fact, by resetting streams: 2.2 times was the worst measured), one
// --snapshot-buffer, the write-ahead log's (WalMemoryOverhead) and the
// request ids' results (kRequestWindowBytes) on a single node, or the
// cluster's buffers (ClusterMemoryOverhead) in cluster mode, and the
// exports' and imports' (kTransferMemoryOverhead), and the Redis port's
// (RedisMemoryOverhead). Logged at start-up and measured by
// tests/e2e/hostile_client_test.cc and tests/e2e/redis_hostile_test.cc.
uint64_t StatedMemoryOverhead(const ServerConfig& config);
// The most the results of recent request ids take (a single node's
// RequestWindow, a cluster replica's remembered results); the oldest go
// first past it.
inline constexpr uint64_t kRequestWindowBytes = uint64_t{16} << 20;
// Cluster mode: the request ids' results (kRequestWindowBytes), entries
// delivered by the stream and waiting for the apply (64 MiB), the log
// entries of writes waiting for their acknowledgement (8 bytes a key, at
// most half of the requests gRPC holds: half of --transport-memory), and
// the end-to-end check's digests (kClusterDigestBytes).
uint64_t ClusterMemoryOverhead(const ServerConfig& config);
// The end-to-end check of the log (server/cluster/log_digest.h): this
// replica's last 65,536 digests and entry hashes (1 MiB) and the other
// replicas' reports (at most 64 kept, of at most 4 KiB each: 256 KiB).
inline constexpr uint64_t kClusterDigestBytes = (uint64_t{3} << 20) / 2;  // 1.5 MiB
// The larger of the log's buffers while running (WalMemoryBound: 2 x 16 MiB
// plus two batches' records) and a start-up replay's
// (WalApplier::ReplayMemoryBound: one --wal-segment-size segment, a 16 MiB
// queue and ~1 MiB per worker): 82 MiB on 2 CPUs with the defaults.
uint64_t WalMemoryOverhead(const ServerConfig& config);

// Reads the configuration from the environment (CUCKOOD_*) and the command
// line, which wins; --flagfile=PATH reads flags from a file. INVALID_ARGUMENT,
// one line, for an unknown flag, a bad value (a size without a unit, a bad
// bool), an unreadable flag file, an environment variable that does not
// parse or an unknown CUCKOOD_* variable (naming it and the closest flag;
// Kubernetes' service-link variables such as CUCKOOD_SERVICE_HOST are
// ignored). Positional arguments are an error too. --help prints HelpText()
// and --version the version, both on stdout, and exit 0.
absl::StatusOr<ServerConfig> ConfigFromCommandLine(int argc, char** argv);

// cuckood --help: every flag as operators spell it (--tls-key), grouped,
// with its environment variable, default and description.
std::string HelpText();

// The environment variable that sets flag `flag_name` (e.g. "max_batch_keys"
// -> "CUCKOOD_MAX_BATCH_KEYS").
std::string EnvironmentVariableFor(absl::string_view flag_name);

}  // namespace cuckoo::server

#endif  // CUCKOO_SERVER_CONFIG_CONFIG_H_
