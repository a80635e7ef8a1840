// CuckooServer: a running cuckood, minus process concerns (flags, signals,
// logging setup), so tests can run one in-process on an ephemeral port.
//
//   ServerConfig config;
//   config.listen = "127.0.0.1:0";
//   auto server = CuckooServer::Start(config);
//   ... connect to (*server)->address() ...
//   (*server)->Shutdown(absl::Seconds(5));
//
// Start first opens the admin HTTP server (config.admin_listen, unless empty:
// /metrics, /healthz, /readyz; see admin_http.h and metrics.h), so that an
// orchestrator sees the process live but not ready while it loads. It then
// loads every snapshot in the data directory (see persistence.h), then binds
// the gRPC port and serves cuckoo.v1.FilterService, the standard
// grpc.health.v1.Health service (SERVING for "" and "cuckoo.v1.FilterService"
// while up) and server reflection; /readyz turns 200 only then. Filters
// changed since their last snapshot are snapshotted every
// config.snapshot_interval and at Shutdown.
//
// Thread safety: Shutdown and Wait may be called from any thread.
#ifndef CUCKOO_SERVER_SERVER_H_
#define CUCKOO_SERVER_SERVER_H_

#include <grpcpp/resource_quota.h>
#include <grpcpp/server.h>

#include <atomic>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "core/registry.h"
#include "server/cluster/cluster.h"
#include "server/config/config.h"
#include "server/observability/admin_http.h"
#include "server/observability/metrics.h"
#include "server/resp/commands/resp_commands.h"
#include "server/resp/resp_server.h"
#include "server/security/auth.h"
#include "server/security/tls.h"
#include "server/service/call_queues.h"
#include "server/service/filter_service.h"
#include "server/service/health_service.h"
#include "server/service/listen.h"
#include "server/service/transfers.h"
#include "server/storage/persistence.h"

namespace cuckoo::server {

// The exit code after the write-ahead log failed (see Wal).
inline constexpr int kExitWalFailed = 3;
// The exit code of a cluster replica whose stream, first read after the
// start, is another log than the one its data directory follows
// (ClusterOptions::on_foreign_log).
inline constexpr int kExitForeignLog = 4;

class CuckooServer {
 public:
  // UNAVAILABLE if the address (or the admin address) cannot be bound; INVALID_ARGUMENT for a bad
  // config; INTERNAL if the data directory cannot be created or read;
  // the snapshot's error if one cannot be loaded for a reason other than a
  // bad file (bad files are quarantined), e.g. the memory budget.
  static absl::StatusOr<std::unique_ptr<CuckooServer>> Start(const ServerConfig& config);
  // The same with the persistence's fault-injection hooks (tests):
  // PersistenceOptions::before_file_operation and sync_directory.
  static absl::StatusOr<std::unique_ptr<CuckooServer>> Start(const ServerConfig& config,
                                                             const PersistenceOptions& hooks);

  CuckooServer(const CuckooServer&) = delete;
  CuckooServer& operator=(const CuckooServer&) = delete;
  // Shuts down with no drain time if still running.
  ~CuckooServer();  // Then stops the admin server.

  // The addresses actually bound, as config.listen (a comma-separated list
  // if it is one) with every TCP port resolved (":0" ends in the port
  // chosen).
  const std::string& address() const { return address_; }
  // The Redis port's host:port and port ("" and 0 when config.redis_listen
  // is empty).
  std::string redis_address() const { return redis_server_ ? redis_server_->address() : ""; }
  int redis_port() const { return redis_server_ ? redis_server_->port() : 0; }
  // The first TCP port of config.listen; 0 when it has only Unix sockets.
  int port() const { return port_; }
  // The admin HTTP server's host:port and port ("" and 0 when
  // config.admin_listen is empty).
  std::string admin_address() const { return admin_ ? admin_->address() : std::string(); }
  int admin_port() const { return admin_ ? admin_->port() : 0; }
  Metrics& metrics() { return *metrics_; }
  // Whether /readyz says ready: snapshots loaded, gRPC serving, not
  // shutting down.
  bool ready() const { return state_.load(std::memory_order_acquire) == State::kServing; }
  FilterRegistry& registry() { return *registry_; }
  FilterServiceImpl& service() { return *service_; }
  Persistence& persistence() { return *persistence_; }
  // Cluster mode (config.nats_urls set); null on a single node.
  Cluster* cluster() { return cluster_.get(); }
  // What start-up loaded.
  const LoadSummary& loaded() const { return loaded_; }
  const ServerConfig& config() const { return config_; }

  // Re-reads the access file now (SIGHUP): OK if reloaded or authentication
  // is off; else the error, and the previous file stays in force.
  absl::Status ReloadAccess();
  // The access table in force (null when authentication is off).
  const Authenticator* authenticator() const { return auth_.get(); }

  // Stops serving: /healthz and /readyz answer 503 and gRPC health turns
  // NOT_SERVING; the Redis port stops taking commands and gets up to
  // `drain` for those running (their writes are gRPC calls, which go on
  // meanwhile); then new calls fail with UNAVAILABLE, queued Snapshot and
  // DropFilter calls are answered UNAVAILABLE, and calls in flight get up to
  // `drain` to finish. Insert and Delete batches still running then stop at
  // their next part with UNAVAILABLE (Persistence, FilterServiceImpl), and
  // whatever is left after another second is cancelled. Then writes a final
  // snapshot of every changed filter. Returns when the server has stopped.
  // Idempotent; a second call waits for the first.
  void Shutdown(absl::Duration drain);
  // Ends a Shutdown's drain now (the final snapshot is still written): for
  // an operator who signals again.
  void Hurry();
  // After Shutdown: whether the final snapshot was written.
  absl::Status final_snapshot_status() const { return final_snapshot_status_; }
  // Blocks until Shutdown has completed (final snapshot included).
  void Wait();

 private:
  enum class State { kStarting, kServing, kStopping };

  explicit CuckooServer(const ServerConfig& config);
  // The admin server's endpoints.
  AdminResponse Healthz() const;
  AdminResponse Readyz() const;
  AdminResponse MetricsPage() const;
  // Registers the collectors of /metrics' gauges (server/metrics_collectors.h).
  void AddMetricsCollectors();
  // Start's steps, in order: the metrics, the registry, persistence and
  // cluster mode's log; TLS certificates and the access file (the first
  // certificate's summary, for the log); the gRPC service and the transfers'
  // disk; the admin HTTP server; every snapshot loaded and the log replayed
  // or consumed; the gRPC server; the security in force logged; the Redis
  // port.
  absl::Status OpenStorage(const PersistenceOptions& hooks);
  absl::Status StartSecurity(std::optional<CertificateSummary>* certificate);
  void MakeService();
  absl::Status StartAdmin();
  absl::Status LoadFilters();
  absl::Status StartGrpc();
  void LogSecurity(const std::optional<CertificateSummary>& certificate) const;
  absl::Status StartRedis();

  const ServerConfig config_;
  std::atomic<State> state_{State::kStarting};
  std::unique_ptr<Metrics> metrics_;
  std::unique_ptr<FilterRegistry> registry_;
  std::unique_ptr<Persistence> persistence_;
  // The files' environment persistence writes through (its options'
  // wal.env; null: the real file system), which transfers claim disk from.
  Env* file_env_ = nullptr;
  // After persistence_, which it applies drops through: it goes first.
  std::unique_ptr<Cluster> cluster_;
  LoadSummary loaded_;
  // Before service_, which reads them while it serves.
  std::unique_ptr<Authenticator> auth_;
  std::unique_ptr<CertificateWatcher> certificate_watcher_;
  // The transfers' disk space claims (server/service/transfers.h): before service_
  // and redis_commands_, which claim from it.
  std::unique_ptr<TransferDisk> transfer_disk_;
  std::unique_ptr<FilterServiceImpl> service_;
  std::unique_ptr<grpc::ResourceQuota> transport_quota_;
  // The gRPC port's addresses (server/service/listen.h); before grpc_server_, so
  // that it removes its socket files after the server is gone.
  std::unique_ptr<Listeners> listeners_;
  std::unique_ptr<grpc::Server> grpc_server_;
  // The queues and threads serving every gRPC call (server/service/call_queues.h),
  // and the health service on them.
  std::unique_ptr<HealthService> health_;
  std::unique_ptr<CallQueues> call_queues_;
  std::string address_;
  int port_ = 0;
  // The Redis port (config.redis_listen), after grpc_server_: its commands
  // call the service through an in-process channel. Stopped first.
  std::unique_ptr<RedisCommands> redis_commands_;
  std::unique_ptr<resp::RespServer> redis_server_;
  size_t redis_client_memory_limit_ = 0;  // --redis-client-memory, as used
  std::once_flag shutdown_once_;
  std::atomic<bool> hurry_{false};
  absl::Notification shutdown_done_;
  absl::Status final_snapshot_status_;
  // Last, so it stops first: its handlers read the members above.
  std::unique_ptr<AdminHttpServer> admin_;
};

}  // namespace cuckoo::server

#endif  // CUCKOO_SERVER_SERVER_H_
