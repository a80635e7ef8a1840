// HealthService: the standard gRPC health protocol (grpc.health.v1.Health:
// Check and Watch) on gRPC's asynchronous API, on the server's CallQueues.
//
// gRPC's own default health service is built on the callback API, whose
// threads would take part in polling and put hand-offs back on every call
// (server/service/call_queues.h); this one answers as it does: "" (the server) and
// each service set with SetServing answer SERVING or NOT_SERVING; Check of
// an unknown service is NOT_FOUND; Watch sends the current status at once
// (SERVICE_UNKNOWN for an unknown service) and each change after, the
// latest only when the client reads slowly. cuckood (server.cc) says
// NOT_SERVING for "" and cuckoo.v1.FilterService until every part of it
// has started, SERVING then, and NOT_SERVING again from the start of a
// shutdown.
//
// Thread safety: SetServing may be called from any thread.
#ifndef CUCKOO_SERVER_SERVICE_HEALTH_SERVICE_H_
#define CUCKOO_SERVER_SERVICE_HEALTH_SERVICE_H_

#include <map>
#include <memory>
#include <set>
#include <string>

#include "base/mutex.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "server/service/call_queues.h"

namespace cuckoo::server {

class HealthService final : public grpc::health::v1::Health::AsyncService {
 public:
  using Status = grpc::health::v1::HealthCheckResponse::ServingStatus;

  // Sets `service`'s status ("" is the whole server), and tells watchers.
  void SetServing(const std::string& service, bool serving);
  // Registers Check and Watch on `queues` (before queues->Start), which
  // must outlive the calls.
  void RegisterCalls(CallQueues* queues);

 private:
  class CheckCall;
  class WatchCall;

  // The status of `service`: SERVICE_UNKNOWN when never set.
  Status Get(const std::string& service) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  CallQueues* queues_ = nullptr;
  Mutex mu_;
  std::map<std::string, Status> statuses_ ABSL_GUARDED_BY(mu_);
  std::set<WatchCall*> watchers_ ABSL_GUARDED_BY(mu_);
};

}  // namespace cuckoo::server

#endif  // CUCKOO_SERVER_SERVICE_HEALTH_SERVICE_H_
