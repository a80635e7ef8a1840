// CuckooServer: a running cuckood, minus process concerns (flags, signals,
// logging setup), so tests can run one in-process on an ephemeral port.
//
//   ServerConfig config;
//   config.listen = "127.0.0.1:0";
//   auto server = CuckooServer::Start(config);
//   ... connect to (*server)->address() ...
//   (*server)->Shutdown(absl::Seconds(5));
//
// Start loads every snapshot in the data directory (see persistence.h), then
// binds the port and serves cuckoo.v1.FilterService, the standard
// grpc.health.v1.Health service (SERVING for "" and "cuckoo.v1.FilterService"
// while up) and server reflection. Filters changed since their last snapshot
// are snapshotted every config.snapshot_interval and at Shutdown.
//
// Thread safety: Shutdown and Wait may be called from any thread.
#ifndef CUCKOO_SERVER_SERVER_H_
#define CUCKOO_SERVER_SERVER_H_

#include <grpcpp/server.h>

#include <memory>
#include <mutex>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "core/registry.h"
#include "server/config.h"
#include "server/filter_service.h"
#include "server/persistence.h"

namespace cuckoo::server {

class CuckooServer {
 public:
  // UNAVAILABLE if the address cannot be bound; INVALID_ARGUMENT for a bad
  // config; INTERNAL if the data directory cannot be created or read;
  // the snapshot's error if one cannot be loaded for a reason other than a
  // bad file (bad files are quarantined), e.g. the memory budget.
  static absl::StatusOr<std::unique_ptr<CuckooServer>> Start(const ServerConfig& config);

  CuckooServer(const CuckooServer&) = delete;
  CuckooServer& operator=(const CuckooServer&) = delete;
  // Shuts down with no drain time if still running.
  ~CuckooServer();

  // host:port actually bound (the port resolved when config.listen ends in :0).
  const std::string& address() const { return address_; }
  int port() const { return port_; }
  FilterRegistry& registry() { return *registry_; }
  Persistence& persistence() { return *persistence_; }
  // What start-up loaded.
  const LoadSummary& loaded() const { return loaded_; }
  const ServerConfig& config() const { return config_; }

  // Stops serving: health turns NOT_SERVING, new calls fail with UNAVAILABLE,
  // and calls in flight get up to `drain` to finish before they are
  // cancelled. Then writes a final snapshot of every changed filter.
  // Returns when the server has stopped. Idempotent.
  void Shutdown(absl::Duration drain);
  // After Shutdown: whether the final snapshot was written.
  absl::Status final_snapshot_status() const { return final_snapshot_status_; }
  // Blocks until Shutdown has completed.
  void Wait();

 private:
  explicit CuckooServer(const ServerConfig& config);

  const ServerConfig config_;
  std::unique_ptr<FilterRegistry> registry_;
  std::unique_ptr<Persistence> persistence_;
  LoadSummary loaded_;
  std::unique_ptr<FilterServiceImpl> service_;
  std::unique_ptr<grpc::Server> grpc_server_;
  std::string address_;
  int port_ = 0;
  std::once_flag shutdown_once_;
  absl::Status final_snapshot_status_;
};

}  // namespace cuckoo::server

#endif  // CUCKOO_SERVER_SERVER_H_
