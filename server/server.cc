#include "server/server.h"

#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/impl/server_builder_option.h>
#include <grpcpp/resource_quota.h>
#include <grpcpp/security/server_credentials.h>
#include <grpcpp/server_builder.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <mutex>
#include <optional>
#include <system_error>
#include <thread>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "base/file.h"
#include "server/metrics_collectors.h"
#include "server/resp/commands/command_names.h"
#include "server/resp/resp_tls.h"
#include "spdlog/spdlog.h"

namespace cuckoo::server {
namespace {

// The Redis port's evictions (--redis-client-memory), logged as Redis
// does ("Evicting client: ..."), at most 10 lines a second and then one
// line for the rest: an attack of thousands of connections cannot flood
// the log.
class EvictionLog {
 public:
  void Evicted(std::string_view client, size_t total, size_t limit) {
    std::lock_guard<std::mutex> lock(mu_);
    const int64_t now = absl::ToUnixSeconds(absl::Now());
    if (now != second_) {
      if (suppressed_ > 0) {
        spdlog::warn("{} more Redis clients evicted for --redis-client-memory in that second",
                     suppressed_);
      }
      second_ = now;
      lines_ = 0;
      suppressed_ = 0;
    }
    if (lines_ >= 10) {
      ++suppressed_;
      return;
    }
    ++lines_;
    spdlog::warn(
        "Evicting client: {} (the Redis port's connections held {}, over --redis-client-memory "
        "{}: the ones using the most are closed)",
        client, FormatByteSize(total), FormatByteSize(limit));
  }

 private:
  std::mutex mu_;
  int64_t second_ = 0;
  int lines_ = 0;
  uint64_t suppressed_ = 0;
};

// The `reason` label values of cuckood_auth_failures_total, by AuthFailure.
MetricsOptions MetricsOptionsFor() {
  MetricsOptions options;
  for (size_t r = 0; r < kAuthFailures; ++r) {
    options.auth_failure_reasons.push_back(AuthFailureName(static_cast<AuthFailure>(r)));
  }
  return options;
}

// --advertise, or the host name with the port of --listen's first TCP
// address (that address itself when it names a host); empty when the port
// is chosen at start-up.
// Server reflection on or off for one builder. Linking grpc++_reflection
// registers its plugin for every server of the process (a static
// initializer), so "off" removes it and "on" makes sure it is there once.
class ReflectionOption final : public grpc::ServerBuilderOption {
 public:
  explicit ReflectionOption(bool enabled) : enabled_(enabled) {}
  void UpdateArguments(grpc::ChannelArguments*) override {}
  void UpdatePlugins(std::vector<std::unique_ptr<grpc::ServerBuilderPlugin>>* plugins) override {
    const std::string name = grpc::reflection::ProtoServerReflectionPlugin().name();
    std::erase_if(*plugins, [&](const std::unique_ptr<grpc::ServerBuilderPlugin>& p) {
      return p->name() == name;
    });
    if (enabled_) {
      plugins->push_back(std::make_unique<grpc::reflection::ProtoServerReflectionPlugin>());
    }
  }

 private:
  const bool enabled_;
};

// Every address local to this machine: loopback or a Unix socket.
bool Loopback(const std::string& listen) { return ListenIsLocal(listen); }

absl::StatusOr<std::string> ReadTokenFile(const std::string& path) {
  absl::StatusOr<std::string> text = ReadFileToString(path);
  if (!text.ok()) {
    return absl::InvalidArgumentError(
        absl::StrFormat("--peer-token-file=%s: cannot read: %s", path, text.status().message()));
  }
  std::string token(absl::StripAsciiWhitespace(*text));
  if (token.empty()) {
    return absl::InvalidArgumentError(absl::StrFormat("--peer-token-file=%s is empty", path));
  }
  return token;
}

}  // namespace

constexpr char kServiceName[] = "cuckoo.v1.FilterService";

CuckooServer::CuckooServer(const ServerConfig& config) : config_(config) {}

absl::StatusOr<std::unique_ptr<CuckooServer>> CuckooServer::Start(const ServerConfig& config) {
  return Start(config, PersistenceOptions{});
}

absl::StatusOr<std::unique_ptr<CuckooServer>> CuckooServer::Start(const ServerConfig& config,
                                                                  const PersistenceOptions& hooks) {
  if (absl::Status s = ValidateConfig(config); !s.ok()) return s;
  std::error_code ec;
  std::filesystem::create_directories(config.data_dir, ec);
  if (ec) {
    return absl::InternalError(
        absl::StrFormat("cannot create data directory \"%s\": %s", config.data_dir, ec.message()));
  }
  std::unique_ptr<CuckooServer> s(new CuckooServer(config));
  if (absl::Status st = s->OpenStorage(hooks); !st.ok()) return st;
  std::optional<CertificateSummary> certificate;
  if (absl::Status st = s->StartSecurity(&certificate); !st.ok()) return st;
  s->MakeService();
  s->AddMetricsCollectors();
  // The admin server first, so that while snapshots load /healthz answers
  // and /readyz says why it is not ready.
  if (absl::Status st = s->StartAdmin(); !st.ok()) return st;
  // Every snapshot is loaded before the port opens: a client never sees a
  // filter missing because it has not been loaded yet.
  if (absl::Status st = s->LoadFilters(); !st.ok()) return st;
  if (absl::Status st = s->StartGrpc(); !st.ok()) return st;
  s->LogSecurity(certificate);
  if (absl::Status st = s->StartRedis(); !st.ok()) return st;
  s->health_->SetServing("", true);
  s->health_->SetServing(kServiceName, true);
  // Expired filters are dropped from now on (those that expired while the
  // server was down: at the first check).
  s->service_->StartExpiry();
  s->state_.store(State::kServing, std::memory_order_release);
  return s;
}

absl::Status CuckooServer::OpenStorage(const PersistenceOptions& hooks) {
  const ServerConfig& config = config_;
  metrics_ = std::make_unique<Metrics>(MetricsOptionsFor());
  registry_ = std::make_unique<FilterRegistry>(RegistryLimits{
      .memory_budget_bytes = EffectiveMemoryBudget(config), .max_filters = config.max_filters});
  PersistenceOptions persistence = hooks;
  persistence.snapshot_buffer_bytes = EffectiveSnapshotBuffer(config);
  {
    const WalOptions wal = WalOptionsOf(config);
    persistence.wal.durability = wal.durability;
    persistence.wal.sync_interval = wal.sync_interval;
    persistence.wal.segment_bytes = wal.segment_bytes;
  }
  Metrics* metrics = metrics_.get();
  persistence.wal.on_write = [metrics](uint64_t bytes, uint64_t records) {
    metrics->RecordWalWrite(bytes, records);
  };
  persistence.wal.on_sync = [metrics](absl::Duration d) { metrics->RecordWalSync(d); };
  persistence.wal_max_bytes = config.wal_max_bytes;
  if (!persistence.wal.on_failure) {
    // Linux may have dropped the pages of a failed fdatasync: this process
    // can never again be sure what is on disk. Exit, and let the restart
    // replay the log, which holds every write acknowledged (the waiting
    // ones were answered with the error).
    const bool sync = config.durability == Durability::kSync;
    persistence.wal.on_failure = [sync](const absl::Status& s) {
      spdlog::critical(
          "the write-ahead log failed ({}): exiting with code {} so that a restart "
          "replays it; {}",
          std::string(s.message()), kExitWalFailed,
          sync ? "no acknowledged write is lost"
               : "writes acknowledged since its last fdatasync may be lost if the "
                 "disk lost them too");
      spdlog::shutdown();
      std::_Exit(kExitWalFailed);
    };
  }
  persistence.on_snapshot_written = [metrics = metrics_.get()](bool ok, uint64_t bytes,
                                                               absl::Duration duration) {
    metrics->RecordSnapshotWrite(ok, bytes, duration);
  };
  persistence_ = std::make_unique<Persistence>(registry_.get(), config.data_dir, persistence);
  file_env_ = persistence.wal.env;
  if (!config.nats_urls.empty()) {
    ClusterOptions options = ClusterOptionsOf(config);
    // Read anew for each bootstrap copy, so that rotated files are used.
    options.peer_access = [tls = TlsOptionsOf(config),
                           token_file = config.peer_token_file]() -> absl::StatusOr<PeerAccess> {
      PeerAccess access;
      absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> creds = PeerChannelCredentials(tls);
      if (!creds.ok()) return creds.status();
      access.credentials = *std::move(creds);
      if (!token_file.empty()) {
        absl::StatusOr<std::string> token = ReadTokenFile(token_file);
        if (!token.ok()) return token.status();
        access.token = *std::move(token);
      }
      return access;
    };
    // Nothing is written after it: no snapshot, no checkpoint (they would
    // mix the directory's log with the stream's).
    options.on_foreign_log = [](const absl::Status& s) {
      spdlog::critical("cannot start: {}; exiting with code {}", std::string(s.message()),
                       kExitForeignLog);
      spdlog::shutdown();
      std::_Exit(kExitForeignLog);
    };
    absl::StatusOr<std::unique_ptr<Cluster>> cluster =
        Cluster::Create(std::move(options), registry_.get(), persistence_.get());
    if (!cluster.ok()) return cluster.status();
    cluster_ = *std::move(cluster);
    // The stream is the log: no local write-ahead log.
    persistence_->SetExternalLog(cluster_.get());
  }
  return absl::OkStatus();
}

// Every file is checked now, so that a bad one stops the start with a
// message rather than failing every handshake or call later.
absl::Status CuckooServer::StartSecurity(std::optional<CertificateSummary>* certificate) {
  const ServerConfig& config = config_;
  Metrics* metrics = metrics_.get();
  if (!config.tls_cert.empty()) {
    absl::StatusOr<std::unique_ptr<CertificateWatcher>> watcher =
        CertificateWatcher::Start(TlsOptionsOf(config));
    if (!watcher.ok()) return watcher.status();
    *certificate = (*watcher)->initial();
    // Now: the admin server, which reads it, starts below.
    certificate_watcher_ = *std::move(watcher);
  }
  if (!config.auth_tokens.empty()) {
    Authenticator::Options options = AuthOptionsOf(config);
    options.on_reload = [metrics](const absl::Status& st) { metrics->RecordAuthReload(st.ok()); };
    absl::StatusOr<std::unique_ptr<Authenticator>> auth = Authenticator::Start(std::move(options));
    if (!auth.ok()) return auth.status();
    auth_ = *std::move(auth);
  }
  if (!config.peer_token_file.empty()) {
    if (absl::StatusOr<std::string> t = ReadTokenFile(config.peer_token_file); !t.ok()) {
      return t.status();
    }
  }
  return absl::OkStatus();
}

void CuckooServer::MakeService() {
  const ServerConfig& config = config_;
  service_ = std::make_unique<FilterServiceImpl>(registry_.get(), persistence_.get(),
                                                 metrics_.get(), ServiceLimitsOf(config),
                                                 config.snapshot_interval, cluster_.get());
  service_->SetAuthenticator(auth_.get());
  // The write-ahead log prepares its next segment ahead of the one being
  // written: transfers' files leave room for both. (A cluster replica has
  // no log of its own; it keeps the same room for its snapshots.)
  transfer_disk_ = std::make_unique<TransferDisk>(
      config.data_dir, 2 * config.wal_segment_bytes,
      config.nats_urls.empty() ? "the write-ahead log (2 x --wal-segment-size)"
                               : "snapshots (2 x --wal-segment-size)",
      file_env_);
  service_->SetTransferDisk(transfer_disk_.get());
}

// Its handlers only read members that are set by now (and state_).
absl::Status CuckooServer::StartAdmin() {
  const ServerConfig& config = config_;
  if (config.admin_listen.empty()) return absl::OkStatus();
  const CuckooServer* server = this;
  std::optional<AdminTlsOptions> admin_tls;
  if (config.admin_tls) {
    // The gRPC port's files, checked as often as gRPC checks them.
    admin_tls =
        AdminTlsOptions{.cert_file = config.tls_cert,
                        .key_file = config.tls_key,
                        .check_interval = absl::ToChronoMilliseconds(config.tls_reload_interval)};
  }
  absl::StatusOr<std::unique_ptr<AdminHttpServer>> admin =
      AdminHttpServer::Start(config.admin_listen,
                             AdminHandlers{.metrics = [server] { return server->MetricsPage(); },
                                           .healthz = [server] { return server->Healthz(); },
                                           .readyz = [server] { return server->Readyz(); }},
                             std::move(admin_tls));
  if (!admin.ok()) return admin.status();
  admin_ = *std::move(admin);
  spdlog::info("admin {} on {} (/metrics, /healthz, /readyz)", admin_->tls() ? "HTTPS" : "HTTP",
               admin_->address());
  return absl::OkStatus();
}

absl::Status CuckooServer::LoadFilters() {
  const ServerConfig& config = config_;
  absl::StatusOr<LoadSummary> loaded = persistence_->LoadAll();
  if (!loaded.ok()) return loaded.status();
  loaded_ = *std::move(loaded);
  metrics_->RecordLoad(loaded_.duration, loaded_.loaded, loaded_.bytes, loaded_.quarantined);
  if (cluster_ != nullptr) {
    spdlog::info(
        "cluster mode: replica {} of stream {} on NATS {}; a write is acknowledged once the "
        "stream has stored it and this replica applied it; applying from log position {}",
        cluster_->options().replica_id, config.nats_stream,
        absl::StrJoin(config.nats_urls, ",",
                      [](std::string* out, const std::string& url) {
                        out->append(NatsUrlWithoutUserInfo(url));
                      }),
        loaded_.resume_from);
    cluster_->Start(loaded_.resume_from, loaded_.log_identity,
                    loaded_.has_log_digest ? std::optional<DigestPoint>(DigestPoint{
                                                 loaded_.log_digest_position, loaded_.log_digest})
                                           : std::nullopt);
  } else {
    spdlog::info(
        "durability {}{}: a write is acknowledged {}; write-ahead log in {}/{} ({} segments, early "
        "snapshots past {})",
        std::string(DurabilityName(config.durability)),
        config.durability == Durability::kInterval
            ? absl::StrCat(" (fdatasync every ", absl::FormatDuration(config.wal_sync_interval),
                           ")")
            : std::string(),
        config.durability == Durability::kSync ? "once its log record is fdatasync'ed"
                                               : "once its log record is written (a power cut may "
                                                 "lose the writes not yet synced)",
        config.data_dir, kWalDir, FormatByteSize(config.wal_segment_bytes),
        FormatByteSize(config.wal_max_bytes));
  }
  // What is served, after the log's replay; then what the files gave.
  spdlog::info("serving {} filters ({} items) from {}: {} snapshot files loaded ({}) in {}{}{}",
               loaded_.served, loaded_.served_items, config.data_dir, loaded_.loaded,
               FormatByteSize(loaded_.bytes), absl::FormatDuration(loaded_.duration),
               loaded_.quarantined == 0
                   ? std::string()
                   : absl::StrFormat("; %d bad files moved to %s/%s", loaded_.quarantined,
                                     config.data_dir, kQuarantineDir),
               loaded_.dropped_by_log == 0
                   ? std::string()
                   : absl::StrFormat("; %d files of filters the log drops moved to %s/%s",
                                     loaded_.dropped_by_log, config.data_dir, kQuarantineDir));
  return absl::OkStatus();
}

absl::Status CuckooServer::StartGrpc() {
  const ServerConfig& config = config_;
  // The health service is cuckood's own: gRPC's default one is on the
  // callback API (server/service/call_queues.h).
  grpc::EnableDefaultHealthCheckService(false);
  health_ = std::make_unique<HealthService>();
  call_queues_ = std::make_unique<CallQueues>();
  grpc::ServerBuilder builder;
  builder.SetOption(std::make_unique<ReflectionOption>(config.reflection));
  // gRPC sets SO_REUSEPORT by default, which lets a second cuckood bind the
  // same port and silently take half the traffic; refuse instead.
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  // gRPC 1.51 inflates a compressed message whole before it checks its size
  // against the limit: 64 KiB of gzip can become 64 MiB, and a 64 MiB
  // message 64 GiB. cuckood therefore takes no compressed requests: a client
  // that sends one gets UNIMPLEMENTED naming the algorithm (and the
  // grpc-accept-encoding header says what is accepted). Keys are mostly
  // random bytes that compress poorly anyway.
  builder.SetCompressionAlgorithmSupportStatus(GRPC_COMPRESS_DEFLATE, false);
  builder.SetCompressionAlgorithmSupportStatus(GRPC_COMPRESS_GZIP, false);
  // gRPC's buffers (connections, messages being received or sent) within a
  // quota: many large requests at once get some of their streams reset
  // instead of growing the process without bound.
  transport_quota_ = std::make_unique<grpc::ResourceQuota>("cuckood-transport");
  transport_quota_->Resize(EffectiveTransportMemory(config));
  builder.SetResourceQuota(*transport_quota_);
  // Every address of --listen (TCP and Unix sockets; a stale socket file
  // removed first), with the same credentials.
  absl::StatusOr<std::unique_ptr<Listeners>> listeners =
      Listeners::Prepare(config.listen, config.listen_socket_mode);
  if (!listeners.ok()) return listeners.status();
  listeners_ = *std::move(listeners);
  listeners_->AddTo(builder,
                    ServerCredentialsFor(TlsOptionsOf(config), certificate_watcher_.get()));
  builder.RegisterService(service_.get());
  builder.RegisterService(health_.get());
  call_queues_->AddQueues(&builder, config.grpc_threads != 0 ? static_cast<int>(config.grpc_threads)
                                                             : DefaultCallThreads());
  service_->RegisterCalls(call_queues_.get());
  health_->RegisterCalls(call_queues_.get());
  // Not serving until every part is up (below).
  health_->SetServing("", false);
  health_->SetServing(kServiceName, false);
  builder.SetMaxReceiveMessageSize(static_cast<int>(config.max_message_bytes));
  builder.SetMaxSendMessageSize(static_cast<int>(config.max_message_bytes));
  // The persistence thread first: Snapshot and DropFilter calls are queued
  // for it from the first call on.
  persistence_->Start(config.snapshot_interval);
  grpc_server_ = builder.BuildAndStart();
  if (absl::Status st = listeners_->Started(grpc_server_ != nullptr); !st.ok()) return st;
  call_queues_->Start();
  address_ = listeners_->address();
  port_ = listeners_->port();
  return absl::OkStatus();
}

// What the operator should know of the security in force.
void CuckooServer::LogSecurity(const std::optional<CertificateSummary>& certificate) const {
  const ServerConfig& config = config_;
  if (certificate.has_value()) {
    spdlog::info(
        "TLS on {}{}: certificate {} ({} in the chain), valid {} to {}; the files are re-read "
        "every "
        "{}",
        address_,
        config.tls_client_ca.empty()
            ? std::string()
            : absl::StrCat(" with mutual TLS (client certificates signed by ", config.tls_client_ca,
                           ")"),
        certificate->subject, certificate->chain_length,
        absl::FormatTime("%Y-%m-%dT%H:%M:%SZ", certificate->not_before, absl::UTCTimeZone()),
        absl::FormatTime("%Y-%m-%dT%H:%M:%SZ", certificate->not_after, absl::UTCTimeZone()),
        absl::FormatDuration(config.tls_reload_interval));
    if (certificate->not_after < absl::Now()) {
      spdlog::warn(
          "the TLS certificate {} has expired: clients will refuse it until it is replaced",
          certificate->subject);
    }
  }
  if (!config.peer_token_file.empty() && config.tls_cert.empty()) {
    spdlog::warn(
        "--peer-token-file without TLS: the peer token (admin of every filter) is sent "
        "in plaintext to whatever address the cluster's records name");
  }
  if (auth_ != nullptr) {
    spdlog::info(
        "authentication on: every call but grpc.health.v1 needs a token or certificate "
        "of {} (re-read when it changes and on SIGHUP)",
        config.auth_tokens);
    if (config.tls_cert.empty() && !Loopback(config.listen)) {
      spdlog::warn(
          "tokens are sent in plaintext: without --tls-cert anyone on the network path "
          "can read and reuse them");
    }
  } else if (!Loopback(config.listen)) {
    spdlog::warn(
        "no --auth-tokens: every client that reaches {} may read, write and drop every "
        "filter",
        address_);
  }
}

absl::Status CuckooServer::StartRedis() {
  const ServerConfig& config = config_;
  if (config.redis_listen.empty()) return absl::OkStatus();
  // Its writes go through the service itself: on a single node applied
  // on the port's threads (FilterServiceImpl::InsertNow), otherwise, and
  // for the other changes, as calls over an in-process channel.
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(-1);
  args.SetMaxSendMessageSize(-1);
  RedisOptions commands = RedisOptionsOf(config);
  commands.disk = transfer_disk_.get();
  redis_commands_ =
      std::make_unique<RedisCommands>(registry_.get(), auth_.get(), metrics_.get(), service_.get(),
                                      grpc_server_->InProcessChannel(args), std::move(commands));
  resp::ServerOptions options;
  options.listen = config.redis_listen;
  options.threads = static_cast<int>(config.redis_threads);
  options.max_connections = config.redis_max_clients;
  options.idle_timeout = config.redis_idle_timeout;
  // A command's bytes become one gRPC message at most (CF.INSERT): RESP
  // spends more bytes per key than protobuf does.
  options.limits.max_args = config.max_batch_keys + 16;
  options.limits.max_bulk_bytes =
      std::max<size_t>(config.max_key_bytes, kRedisDumpChunkBytes + 4096);
  options.limits.max_command_bytes = RedisMaxCommandBytes(config);
  static_assert(kRedisDumpChunkBytes + 8192 == (size_t{1} << 20) + 8192,
                "RedisMaxCommandBytes leaves room for a CF.LOADCHUNK chunk");
  options.auth_required = auth_ != nullptr;
  redis_client_memory_limit_ = EffectiveRedisClientMemory(config);
  options.client_memory = redis_client_memory_limit_;
  // Connections before AUTH: a small share of it.
  options.unauthenticated_memory =
      std::min<size_t>(options.unauthenticated_memory, options.client_memory / 4);
  options.on_evict = [log = std::make_shared<EvictionLog>(), limit = options.client_memory](
                         std::string_view client, size_t total) {
    log->Evicted(client, total, limit);
  };
  Metrics* metrics = metrics_.get();
  options.on_connect = [metrics] { metrics->RecordRedisConnection(); };
  options.on_close = [metrics](std::string_view reason) { metrics->RecordRedisClose(reason); };
  const bool tls = certificate_watcher_ != nullptr && !config.redis_plaintext;
  if (tls) {
    // The gRPC port's certificate (its watcher's checked copies), reloaded
    // with it: new connections get a context made from the new files, open
    // ones keep theirs. A context that does not build from files the
    // watcher took (which checked them) keeps the last good one, as gRPC.
    const CertificateWatcher* watcher = certificate_watcher_.get();
    const std::string client_ca = config.tls_client_ca.empty() ? "" : watcher->client_ca_path();
    struct Served {
      Mutex mu;
      uint64_t generation ABSL_GUARDED_BY(mu) = 0;
      std::shared_ptr<boost::asio::ssl::context> context ABSL_GUARDED_BY(mu);
    };
    auto served = std::make_shared<Served>();
    const uint64_t generation = watcher->generation();
    absl::StatusOr<std::shared_ptr<boost::asio::ssl::context>> first =
        resp::MakeTlsContext(watcher->pair_path(), client_ca);
    if (!first.ok()) return first.status();
    {
      MutexLock lock(&served->mu);
      served->generation = generation;
      served->context = *std::move(first);
    }
    options.tls_context = [watcher, client_ca, served] {
      MutexLock lock(&served->mu);
      if (const uint64_t g = watcher->generation(); g != served->generation) {
        served->generation = g;
        absl::StatusOr<std::shared_ptr<boost::asio::ssl::context>> next =
            resp::MakeTlsContext(watcher->pair_path(), client_ca);
        if (next.ok()) {
          served->context = *std::move(next);
        } else {
          spdlog::warn("the Redis port keeps its last TLS certificate: {}",
                       std::string(next.status().message()));
        }
      }
      return served->context;
    };
  }
  absl::StatusOr<std::unique_ptr<resp::RespServer>> redis =
      resp::RespServer::Start(options, redis_commands_.get());
  if (!redis.ok()) return redis.status();
  redis_server_ = *std::move(redis);
  resp::RespServer* server = redis_server_.get();
  redis_commands_->set_connection_count([server] { return server->connections(); });
  redis_commands_->set_client_memory([server] {
    return RedisCommands::ClientMemory{.bytes = server->client_memory(),
                                       .evicted = server->evicted_clients()};
  });
  redis_commands_->set_port(redis_server_->port());
  redis_commands_->set_clients(
      [server](std::function<void(std::vector<resp::ClientInfo>)> done) {
        server->ListClients(std::move(done));
      },
      [server](resp::ClientFilter filter, std::function<void(size_t)> done) {
        server->KillClients(std::move(filter), std::move(done));
      });
  static_assert(kRedisCommands <= kMaxRedisCommands, "a metrics series for every Redis command");
  metrics->SetRedisCommands(kRedisCommandNames, kRedisCfCommands);
  metrics->AddCollector(
      MetricsSection::kRedis, [server, limit = redis_client_memory_limit_](MetricFamilies* out) {
        AppendRedisPortMetrics(
            {.connections = static_cast<int64_t>(server->connections()),
             .commands_in_flight = static_cast<int64_t>(server->commands_in_flight()),
             .client_memory = static_cast<int64_t>(server->client_memory()),
             .client_memory_limit = static_cast<int64_t>(limit),
             .unauthenticated_connections =
                 static_cast<int64_t>(server->unauthenticated_connections())},
            out);
      });
  spdlog::info("Redis protocol (RESP2/RESP3, CF.* commands) on {}{}", redis_server_->address(),
               !tls                           ? ""
               : config.tls_client_ca.empty() ? " with TLS"
                                              : " with mutual TLS");
  if (auth_ != nullptr && !config.tls_cert.empty() && !tls && !Loopback(config.redis_listen)) {
    spdlog::warn(
        "the Redis port {} is plaintext (--redis-plaintext): the tokens clients send with AUTH "
        "cross the network in plaintext, while the gRPC port uses TLS; keep the Redis port on a "
        "trusted network or loopback (--redis-listen), or give it tokens that grant only what it "
        "needs",
        redis_server_->address());
  }
  if (auth_ == nullptr && !Loopback(config.redis_listen)) {
    spdlog::warn(
        "no --auth-tokens: every client that reaches the Redis port {} may read, "
        "write and drop every filter",
        redis_server_->address());
  }
  return absl::OkStatus();
}

absl::Status CuckooServer::ReloadAccess() {
  if (auth_ == nullptr) return absl::OkStatus();
  return auth_->Reload();
}

CuckooServer::~CuckooServer() {
  Shutdown(absl::ZeroDuration());
  if (admin_ != nullptr) admin_->Stop();
}

AdminResponse CuckooServer::Healthz() const {
  if (state_.load(std::memory_order_acquire) == State::kStopping) {
    return {.status = 503, .body = "shutting down\n"};
  }
  return {.status = 200, .body = "ok\n"};
}

AdminResponse CuckooServer::Readyz() const {
  switch (state_.load(std::memory_order_acquire)) {
    case State::kStarting:
      return {.status = 503, .body = "not ready: loading snapshots\n"};
    case State::kServing: {
      std::string why;
      if (cluster_ != nullptr && !cluster_->Ready(&why)) {
        return {.status = 503, .body = absl::StrCat("not ready: ", why, "\n")};
      }
      return {.status = 200, .body = "ready\n"};
    }
    case State::kStopping:
      break;
  }
  return {.status = 503, .body = "not ready: shutting down\n"};
}

AdminResponse CuckooServer::MetricsPage() const {
  return {.status = 200, .content_type = kPrometheusContentType, .body = metrics_->Render()};
}

// Each part's gauges at its section of /metrics (server/metrics_collectors.h),
// read at every scrape. The parts outlive the admin server, which stops
// first; the Redis port's are added when it starts.
void CuckooServer::AddMetricsCollectors() {
  metrics_->AddCollector(MetricsSection::kCalls, [service = service_.get()](MetricFamilies* out) {
    AppendCallsInFlight(service->calls_in_flight(), out);
  });
  metrics_->AddCollector(MetricsSection::kCalls, [server = this](MetricFamilies* out) {
    AppendReadiness(server->Readyz().status == 200, out);
  });
  metrics_->AddCollector(
      MetricsSection::kState,
      [registry = registry_.get(), persistence = persistence_.get()](MetricFamilies* out) {
        AppendFilterMetrics(*registry, persistence, out);
        // None until start-up opens it, nor in cluster mode.
        if (const Wal* wal = persistence->wal(); wal != nullptr) AppendWalMetrics(*wal, out);
      });
  if (cluster_ != nullptr) {
    metrics_->AddCollector(MetricsSection::kState, [cluster = cluster_.get()](MetricFamilies* out) {
      AppendClusterMetrics(cluster->Status(), out);
    });
  }
  if (certificate_watcher_ != nullptr) {
    metrics_->AddCollector(MetricsSection::kSecurity,
                           [watcher = certificate_watcher_.get()](MetricFamilies* out) {
                             if (const double t = watcher->not_after_seconds(); t != 0) {
                               AppendTlsMetrics(t, out);
                             }
                           });
  }
}

void CuckooServer::Hurry() { hurry_.store(true, std::memory_order_release); }

void CuckooServer::Shutdown(absl::Duration drain) {
  std::call_once(shutdown_once_, [&] {
    struct Done {
      absl::Notification* n;
      ~Done() { n->Notify(); }
    } done{&shutdown_done_};
    // Not ready and not healthy from here on: load balancers stop sending.
    state_.store(State::kStopping, std::memory_order_release);
    if (grpc_server_ == nullptr) return;
    health_->SetServing("", false);
    health_->SetServing(kServiceName, false);
    // The Redis port first: the writes of its commands still running are
    // calls of the service, which must still take them.
    const absl::Time deadline = absl::Now() + drain;
    if (redis_server_ != nullptr) redis_server_->Shutdown(drain);
    service_->StopExpiry();
    service_->StopAccepting();
    // Snapshot and DropFilter calls still waiting for the persistence
    // thread answer now; the final snapshot writes every changed filter.
    persistence_->CancelQueued();
    // Calls in flight get up to `drain` (less if Hurry()). Then running
    // batches stop at their next part and answer UNAVAILABLE, which clients
    // retry, rather than being cancelled; what still runs a second later is.
    // (Passing the drain deadline to gRPC alone would also wait that long for
    // idle client connections to go away.)
    auto idle_or = [&](absl::Time until, bool hurry_ends) {
      while (service_->calls_in_flight() > 0) {
        if (absl::Now() >= until || (hurry_ends && hurry_.load(std::memory_order_acquire))) {
          return false;
        }
        absl::SleepFor(absl::Milliseconds(2));
      }
      return true;
    };
    if (!idle_or(deadline, /*hurry_ends=*/true)) {
      spdlog::warn("{} calls still running {}; stopping them", service_->calls_in_flight(),
                   hurry_.load()
                       ? "when told to hurry"
                       : absl::StrCat("after the drain time of ", absl::FormatDuration(drain)));
      service_->AbortRunning();
      idle_or(absl::Now() + absl::Seconds(1), /*hurry_ends=*/false);
    }
    grpc_server_->Shutdown(std::chrono::system_clock::now());
    grpc_server_->Wait();
    // Waits for every call to be answered and gone, then the queues go.
    call_queues_->Stop();
    // Nothing more is applied from the stream: the final snapshot and
    // checkpoint hold a replica at rest.
    if (cluster_ != nullptr) cluster_->Stop();
    // No more changes can come in: the final snapshot holds every one.
    persistence_->Stop();
    absl::StatusOr<SnapshotRun> run = persistence_->SnapshotNow("", /*changed_only=*/true);
    // The log holds every write either way; it is truncated as far as the
    // snapshots allow, and closed.
    persistence_->CloseLog();
    if (!run.ok()) {
      final_snapshot_status_ = run.status();
      spdlog::error("final snapshot failed: {}", std::string(run.status().message()));
      return;
    }
    spdlog::info("final snapshot: {} filters written ({}), {} unchanged, in {}",
                 run->written.size(), FormatByteSize(run->bytes), run->unchanged.size(),
                 absl::FormatDuration(run->duration));
  });
  shutdown_done_.WaitForNotification();
}

void CuckooServer::Wait() { shutdown_done_.WaitForNotification(); }

}  // namespace cuckoo::server
