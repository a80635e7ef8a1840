#include "server/service/health_service.h"

#include <cassert>
#include <utility>

namespace cuckoo::server {

using grpc::health::v1::HealthCheckRequest;
using grpc::health::v1::HealthCheckResponse;

HealthService::Status HealthService::Get(const std::string& service) {
  auto it = statuses_.find(service);
  return it == statuses_.end() ? HealthCheckResponse::SERVICE_UNKNOWN : it->second;
}

// One Check: answered on the queue's thread as soon as it starts.
class HealthService::CheckCall final : public CallQueues::Call {
 public:
  static void Post(HealthService* service, grpc::ServerCompletionQueue* cq, size_t queue, int id) {
    auto* call = new CheckCall(service, id, queue);
    call->ctx_.AsyncNotifyWhenDone(call->done_tag());
    service->RequestCheck(&call->ctx_, &call->request_, &call->responder_, cq, cq,
                          call->start_tag());
  }

 private:
  CheckCall(HealthService* service, int id, size_t queue)
      : CallQueues::Call(service->queues_, id, queue), service_(service) {}

  void OnStarted() override {
    Status status;
    {
      MutexLock lock(&service_->mu_);
      status = service_->Get(request_.service());
    }
    if (status == HealthCheckResponse::SERVICE_UNKNOWN) {
      responder_.FinishWithError(grpc::Status(grpc::StatusCode::NOT_FOUND,
                                              "unknown service \"" + request_.service() + "\""),
                                 finish_tag());
      return;
    }
    HealthCheckResponse response;
    response.set_status(status);
    responder_.Finish(response, grpc::Status::OK, finish_tag());
  }

  HealthService* const service_;
  grpc::ServerContext ctx_;
  HealthCheckRequest request_;
  grpc::ServerAsyncResponseWriter<HealthCheckResponse> responder_{&ctx_};
};

// One Watch: one write in flight at a time; a change that comes meanwhile
// is sent when it completes (the latest one). Ends when the client goes or
// the server shuts down (gRPC then cancels the call): it sends no Finish,
// and is done with gRPC once its end (done tag, or a failed write) came and
// no write is in flight.
class HealthService::WatchCall final : public CallQueues::Call {
 public:
  static void Post(HealthService* service, grpc::ServerCompletionQueue* cq, size_t queue, int id) {
    auto* call = new WatchCall(service, id, queue);
    call->ctx_.AsyncNotifyWhenDone(call->done_tag());
    service->RequestWatch(&call->ctx_, &call->request_, &call->writer_, cq, cq, call->start_tag());
  }

  // A change of the watched service's status, from `held`'s SetServing
  // with its mu_ held. `held` is service_: watchers_ holds only the service's
  // own calls, which the analysis cannot follow through the pointer.
  void Changed(HealthService* held, const std::string& service, Status status)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(held->mu_) {
    assert(held == service_);
    (void)held;
    service_->mu_.AssertHeld();
    if (service == request_.service()) SendLocked(status);
  }

 private:
  enum Event { kWrite };
  WatchCall(HealthService* service, int id, size_t queue)
      : CallQueues::Call(service->queues_, id, queue), service_(service) {}

  void OnStarted() override {
    MutexLock lock(&service_->mu_);
    service_->watchers_.insert(this);
    SendLocked(service_->Get(request_.service()));
  }
  void OnEvent(int event, bool ok) override {
    if (event != kWrite) return;
    MutexLock lock(&service_->mu_);
    writing_ = false;
    if (!ok) {
      ended_ = true;
    } else if (pending_) {
      pending_ = false;
      SendLocked(next_);
    }
    if (ended_ && !writing_) Finished();
  }
  void OnDone() override {
    MutexLock lock(&service_->mu_);
    ended_ = true;
    if (!writing_) Finished();
  }
  void OnEnded() override {
    MutexLock lock(&service_->mu_);
    service_->watchers_.erase(this);
  }

  void SendLocked(Status status) ABSL_EXCLUSIVE_LOCKS_REQUIRED(service_->mu_) {
    if (ended_) return;
    if (writing_) {
      pending_ = true;
      next_ = status;
      return;
    }
    writing_ = true;
    response_.set_status(status);
    writer_.Write(response_, &write_tag_);
  }

  HealthService* const service_;
  grpc::ServerContext ctx_;
  HealthCheckRequest request_;
  HealthCheckResponse response_;
  grpc::ServerAsyncWriter<HealthCheckResponse> writer_{&ctx_};
  CallQueues::Tag write_tag_{this, kWrite};
  // Under service_->mu_.
  bool writing_ = false;
  bool pending_ = false;
  bool ended_ = false;
  Status next_ = HealthCheckResponse::UNKNOWN;
};

void HealthService::SetServing(const std::string& service, bool serving) {
  MutexLock lock(&mu_);
  const Status status = serving ? HealthCheckResponse::SERVING : HealthCheckResponse::NOT_SERVING;
  statuses_[service] = status;
  for (WatchCall* w : watchers_) w->Changed(this, service, status);
}

void HealthService::RegisterCalls(CallQueues* queues) {
  queues_ = queues;
  queues->AddMethod([this](grpc::ServerCompletionQueue* cq, size_t queue,
                           int id) { CheckCall::Post(this, cq, queue, id); },
                    1);
  queues->AddMethod([this](grpc::ServerCompletionQueue* cq, size_t queue,
                           int id) { WatchCall::Post(this, cq, queue, id); },
                    1);
}

}  // namespace cuckoo::server
