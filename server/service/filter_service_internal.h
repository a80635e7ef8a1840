// What the files of FilterServiceImpl share (private to server/service/):
// the reactor every unary call is answered through (CallReactor) and the
// answer to a call that came after StopAccepting.
//
// The files: filter_service.cc holds the calls' registration on the call
// queues, admission, authentication and authorization, and how a call goes
// on after its body (Continue); filter_service_data.cc the data path
// (Insert, Lookup, Delete, Count, and InsertNow/DeleteNow for the Redis
// port); filter_service_admin.cc the admin methods (CreateFilter,
// DropFilter, GetFilter, ListFilters, GetServerInfo, Snapshot);
// filter_transfer.cc ExportFilter and ImportFilter.
#ifndef CUCKOO_SERVER_SERVICE_FILTER_SERVICE_INTERNAL_H_
#define CUCKOO_SERVER_SERVICE_FILTER_SERVICE_INTERNAL_H_

#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>

#include "absl/status/status.h"
#include "server/observability/logging.h"
#include "server/observability/metrics.h"
#include "server/service/filter_service.h"

namespace cuckoo::server {

// One unary call being answered: counted in in_flight from
// Begin until the API is done with it (response sent or call cancelled), so
// shutdown can wait for exactly the calls that are running, and recorded in
// the metrics when it is finished.
class FilterServiceImpl::CallReactor {
 public:
  CallReactor(std::atomic<int64_t>* in_flight, Metrics* metrics, RpcMethod method,
              grpc::ServerContextBase* ctx)
      : in_flight_(in_flight), metrics_(metrics), method_(method), ctx_(ctx) {}
  virtual ~CallReactor() = default;
  CallReactor(const CallReactor&) = delete;
  CallReactor& operator=(const CallReactor&) = delete;

  // The call has started: counted in flight, its duration from now.
  void Begin() {
    start_ = std::chrono::steady_clock::now();
    in_flight_->fetch_add(1, std::memory_order_acq_rel);
  }
  // Answers with `status` (and the response, when OK), counted, and
  // audited if MarkAudited. From any thread.
  void Done(const grpc::Status& status) {
    if (metrics_ != nullptr) {
      metrics_->RecordRpc(method_, status.error_code(), std::chrono::steady_clock::now() - start_);
    }
    if (audited_) {
      const std::string peer = ctx_ != nullptr ? ctx_->peer() : std::string();
      Audit(
          {.caller = caller_.name(),
           .method = RpcMethodName(method_),
           .filter = audit_filter_,
           .peer = peer,
           .outcome = StatusCodeName(status.error_code()),
           .detail = status.ok() ? std::string_view() : std::string_view(status.error_message())});
    }
    Send(status);
  }

  grpc::ServerContextBase* ctx() const { return ctx_; }
  RpcMethod method() const { return method_; }
  const Caller& caller() const { return caller_; }
  void set_caller(Caller caller) { caller_ = std::move(caller); }
  // An admin call: Done logs an audit line with its outcome.
  void MarkAudited(std::string_view filter) {
    audited_ = true;
    audit_filter_ = std::string(filter);
  }

 protected:
  // Hands the answer to gRPC.
  virtual void Send(const grpc::Status& status) = 0;
  // The API is done with the call.
  void End() { in_flight_->fetch_sub(1, std::memory_order_acq_rel); }

 private:
  std::atomic<int64_t>* const in_flight_;
  Metrics* const metrics_;
  const RpcMethod method_;
  grpc::ServerContextBase* const ctx_;
  std::chrono::steady_clock::time_point start_;
  Caller caller_;
  bool audited_ = false;
  std::string audit_filter_;
};

namespace filter_service_internal {

// A call that came after StopAccepting.
inline absl::Status ShuttingDown() {
  return absl::UnavailableError(
      "cuckood is shutting down; retry against another replica or after the restart");
}

}  // namespace filter_service_internal
}  // namespace cuckoo::server

#endif  // CUCKOO_SERVER_SERVICE_FILTER_SERVICE_INTERNAL_H_
