#include "server/service/filter_service.h"

#include <grpcpp/server_builder.h>
#include <pthread.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "base/guarded.h"
#include "server/observability/logging.h"
#include "server/service/filter_service_internal.h"
#include "server/service/status.h"

namespace cuckoo::server {

using filter_service_internal::ShuttingDown;

// A unary call on the asynchronous API (CallQueues::Call): posted on a
// queue, it is matched to an incoming call, runs on the queue's thread, and
// is deleted once gRPC delivered both its Finish and its done tags. Its
// answer may be sent from any thread (a write is answered by the log's
// committer once durable).
template <typename Request, typename Response>
class FilterServiceImpl::UnaryCall final : public CallReactor, public CallQueues::Call {
 public:
  using RequestFn = void (FilterServiceImpl::*)(grpc::ServerContext*, Request*,
                                                grpc::ServerAsyncResponseWriter<Response>*,
                                                grpc::CompletionQueue*,
                                                grpc::ServerCompletionQueue*, void*);
  // What every call of one method shares.
  struct Kind {
    RpcMethod method;
    RequestFn request;
    std::function<void(UnaryCall*)> handle;
  };

  static void Post(FilterServiceImpl* service, const Kind* kind, grpc::ServerCompletionQueue* cq,
                   size_t queue, int id) {
    auto* call = new UnaryCall(service, kind, queue, id);
    call->ctx_.AsyncNotifyWhenDone(call->done_tag());
    (service->*kind->request)(&call->ctx_, &call->request_, &call->responder_, cq, cq,
                              call->start_tag());
  }

  grpc::ServerContext* context() { return &ctx_; }
  const Request& request() const { return request_; }
  Response* response() { return &response_; }

 private:
  UnaryCall(FilterServiceImpl* service, const Kind* kind, size_t queue, int id)
      : CallReactor(&service->in_flight_, service->metrics_, kind->method, &ctx_),
        CallQueues::Call(service->queues_, id, queue),
        service_(service),
        kind_(kind) {}

  void OnStarted() override {
    Begin();
    if (service_->Admit(this, kind_->method)) kind_->handle(this);
  }
  void OnEnded() override { End(); }

  void Send(const grpc::Status& status) override {
    if (status.ok()) {
      responder_.Finish(response_, status, finish_tag());
    } else {
      responder_.FinishWithError(status, finish_tag());
    }
  }

  FilterServiceImpl* const service_;
  const Kind* const kind_;
  grpc::ServerContext ctx_;
  Request request_;
  Response response_;
  grpc::ServerAsyncResponseWriter<Response> responder_{&ctx_};
};

namespace {
// Calls of each method posted ahead on each queue: a burst of calls finds
// them waiting (more wait in gRPC until one is posted again). The data
// path's get more.
constexpr int kPostedDataCalls = 8;
constexpr int kPostedAdminCalls = 2;
}  // namespace

template <typename Request, typename Response, typename RequestFn, typename Handle>
void FilterServiceImpl::AddUnary(CallQueues* queues, RpcMethod method, RequestFn request,
                                 Handle handle) {
  using Call = UnaryCall<Request, Response>;
  auto kind = std::make_shared<typename Call::Kind>();
  kind->method = method;
  kind->request = request;
  kind->handle = std::move(handle);
  const typename Call::Kind* k = kind.get();
  const bool data = method == RpcMethod::kInsert || method == RpcMethod::kLookup ||
                    method == RpcMethod::kDelete || method == RpcMethod::kCount;
  queues->AddMethod([this, k](grpc::ServerCompletionQueue* cq, size_t queue,
                              int id) { Call::Post(this, k, cq, queue, id); },
                    data ? kPostedDataCalls : kPostedAdminCalls);
  call_kinds_.push_back(std::move(kind));
}

void FilterServiceImpl::RegisterCalls(CallQueues* queues) {
  queues_ = queues;
  using Bytes = grpc::ByteBuffer;
  using DataCallType = UnaryCall<Bytes, Bytes>;
  const std::pair<RpcMethod, DataCallType::RequestFn> data[] = {
      {RpcMethod::kInsert, &FilterServiceImpl::RequestInsert},
      {RpcMethod::kLookup, &FilterServiceImpl::RequestLookup},
      {RpcMethod::kDelete, &FilterServiceImpl::RequestDelete},
      {RpcMethod::kCount, &FilterServiceImpl::RequestCount}};
  for (const auto& [method, request] : data) {
    AddUnary<Bytes, Bytes>(queues, method, request, [this](DataCallType* call) {
      Continue(call, call->context(), [this, call](CallReactor* r, Next* next) {
        return DataCall(call->method(), call->context(), call->request(), call->response(), r,
                        next);
      });
    });
  }
  // The admin methods' bodies run as the data path's do (Continue).
  auto admin = [this](auto* call, auto body) {
    Continue(call, call->context(), [this, call, body](CallReactor* r, Next* next) {
      return (this->*body)(call->request(), call->response(), r, next);
    });
  };
  AddUnary<v1::CreateFilterRequest, v1::CreateFilterResponse>(
      queues, RpcMethod::kCreateFilter, &FilterServiceImpl::RequestCreateFilter,
      [admin](auto* call) { admin(call, &FilterServiceImpl::DoCreateFilter); });
  AddUnary<v1::GetFilterRequest, v1::GetFilterResponse>(
      queues, RpcMethod::kGetFilter, &FilterServiceImpl::RequestGetFilter,
      [admin](auto* call) { admin(call, &FilterServiceImpl::DoGetFilter); });
  AddUnary<v1::SetFilterExpiryRequest, v1::SetFilterExpiryResponse>(
      queues, RpcMethod::kSetFilterExpiry, &FilterServiceImpl::RequestSetFilterExpiry,
      [admin](auto* call) { admin(call, &FilterServiceImpl::DoSetFilterExpiry); });
  AddUnary<v1::ListFiltersRequest, v1::ListFiltersResponse>(
      queues, RpcMethod::kListFilters, &FilterServiceImpl::RequestListFilters,
      [admin](auto* call) { admin(call, &FilterServiceImpl::DoListFilters); });
  AddUnary<v1::DropFilterRequest, v1::DropFilterResponse>(
      queues, RpcMethod::kDropFilter, &FilterServiceImpl::RequestDropFilter,
      [admin](auto* call) { admin(call, &FilterServiceImpl::DoDropFilter); });
  AddUnary<v1::RenameFilterRequest, v1::RenameFilterResponse>(
      queues, RpcMethod::kRenameFilter, &FilterServiceImpl::RequestRenameFilter,
      [admin](auto* call) { admin(call, &FilterServiceImpl::DoRenameFilter); });
  AddUnary<v1::GetServerInfoRequest, v1::GetServerInfoResponse>(
      queues, RpcMethod::kGetServerInfo, &FilterServiceImpl::RequestGetServerInfo,
      [this](auto* call) {
        call->Done(ToGrpcStatus(Guarded([&] { return DoGetServerInfo(call->response()); })));
      });
  AddUnary<v1::SnapshotRequest, v1::SnapshotResponse>(
      queues, RpcMethod::kSnapshot, &FilterServiceImpl::RequestSnapshot,
      [this](auto* call) { ServeSnapshot(call, call->request(), call->response()); });
  AddTransfers(queues);
}

bool FilterServiceImpl::Admit(CallReactor* reactor, RpcMethod method) {
  // The call is counted before the check, so that shutdown, which stops
  // accepting and then waits for the count to drop, never misses a call
  // that got in.
  if (!accepting_.load(std::memory_order_acquire)) {
    reactor->Done(ToGrpcStatus(ShuttingDown()));
    return false;
  }
  if (auth_ != nullptr) {
    absl::StatusOr<Caller> caller = Authenticate(method, reactor->ctx());
    if (!caller.ok()) {
      reactor->Done(ToGrpcStatus(caller.status()));
      return false;
    }
    reactor->set_caller(*std::move(caller));
  }
  return true;
}

namespace {

// What each method needs on its filter (GetServerInfo: nothing).
std::optional<Access> RequiredAccess(RpcMethod method) {
  switch (method) {
    case RpcMethod::kLookup:
    case RpcMethod::kCount:
    case RpcMethod::kGetFilter:
    case RpcMethod::kListFilters:
      return Access::kRead;
    case RpcMethod::kInsert:
    case RpcMethod::kDelete:
      return Access::kWrite;
    case RpcMethod::kCreateFilter:
    case RpcMethod::kDropFilter:
    case RpcMethod::kSetFilterExpiry:  // An expiry is a scheduled drop.
    case RpcMethod::kSnapshot:
    case RpcMethod::kExportFilter:
    case RpcMethod::kImportFilter:
    case RpcMethod::kRenameFilter:  // On both names (DoRenameFilter).
      return Access::kAdmin;
    case RpcMethod::kGetServerInfo:
      break;
  }
  return std::nullopt;
}

}  // namespace

absl::StatusOr<Caller> FilterServiceImpl::Authenticate(RpcMethod method,
                                                       grpc::ServerContextBase* ctx) const {
  if (auth_ == nullptr) return Caller();
  AuthFailure why = AuthFailure::kMissingCredentials;
  absl::StatusOr<Caller> caller = auth_->Authenticate(*ctx, &why);
  if (!caller.ok()) {
    if (metrics_ != nullptr) metrics_->RecordAuthFailure(method, static_cast<size_t>(why));
    const std::string peer = ctx->peer();
    unauthenticated_audit_.Refused({.caller = "-",
                                    .method = RpcMethodName(method),
                                    .peer = peer,
                                    .outcome = "UNAUTHENTICATED",
                                    .detail = AuthFailureName(why)});
  }
  return caller;
}

absl::Status FilterServiceImpl::Authorize(const Caller& caller, RpcMethod method,
                                          std::string_view filter,
                                          const grpc::ServerContextBase* ctx,
                                          std::string_view peer) const {
  if (auth_ == nullptr) return absl::OkStatus();
  // With authentication on every call has a caller (Accept, Authenticate):
  // one without is a path that skipped them, refused rather than let in.
  if (caller.anyone()) {
    return absl::UnauthenticatedError(absl::StrFormat(
        "%s: no authenticated caller (a bug in cuckood: please report it)", RpcMethodName(method)));
  }
  const std::optional<Access> need = RequiredAccess(method);
  if (!need.has_value()) return absl::OkStatus();
  // Only a Snapshot may name no filter (then it means every filter).
  const bool whole_server = filter.empty() && method == RpcMethod::kSnapshot;
  if (filter.empty() && !whole_server) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: the request names no filter", RpcMethodName(method)));
  }
  if (whole_server ? caller.AdminOfAll() : caller.Allows(*need, filter)) return absl::OkStatus();
  if (metrics_ != nullptr)
    metrics_->RecordAuthFailure(method, static_cast<size_t>(AuthFailure::kPermissionDenied));
  const std::string message =
      whole_server
          ? absl::StrFormat(
                "\"%s\" may not call %s on every filter: that needs the grant admin:* (its grants: "
                "%s); name a filter",
                caller.name(), RpcMethodName(method), caller.GrantsText())
          : absl::StrFormat(
                "\"%s\" may not call %s on filter \"%s\": that needs the %s grant on it (its "
                "grants: %s)",
                caller.name(), RpcMethodName(method),
                absl::CHexEscape(absl::string_view(filter.data(), filter.size())),
                AccessName(*need), caller.GrantsText());
  const std::string peer_name = ctx != nullptr ? ctx->peer() : std::string(peer);
  Audit({.caller = caller.name(),
         .method = RpcMethodName(method),
         .filter = filter,
         .peer = peer_name,
         .outcome = "PERMISSION_DENIED",
         .detail = AccessName(*need)});
  return absl::PermissionDeniedError(message);
}

template <typename Body>
void FilterServiceImpl::Continue(CallReactor* reactor, grpc::ServerContextBase* ctx, Body body) {
  Next next;
  const absl::Status s = Guarded([&] { return body(reactor, &next); });
  if (!s.ok()) {
    if (!next.window_key.empty()) {
      if (next.partly_applied) {
        window_.Abandon(next.window_key, s);
      } else {
        window_.Abort(next.window_key, s);
      }
    }
    reactor->Done(ToGrpcStatus(s));
    return;
  }
  if (next.answered) return;
  if (next.expired != nullptr) {
    // An expired filter holds the name: its logged drop first, then the
    // body again (which then finds the name free, or taken by a filter
    // created meanwhile).
    DropExpired(next.expired_name, next.expired,
                [this, reactor, ctx, body = std::move(body)](absl::Status dropped, uint64_t) {
                  if (!dropped.ok() && !absl::IsNotFound(dropped)) {
                    reactor->Done(ToGrpcStatus(dropped));
                    return;
                  }
                  Continue(reactor, ctx, body);
                });
    return;
  }
  if (next.wait_serving) {
    // A new consumer's copy of the log is being checked: wait for it
    // (bounded as a min_log_position wait), then run the body again.
    const absl::Time deadline =
        std::min(absl::FromChrono(ctx->deadline()), absl::Now() + limits_.max_read_wait);
    cluster_->WhenServing(deadline,
                          [this, reactor, ctx, body = std::move(body)](absl::Status serving) {
                            if (!serving.ok()) {
                              reactor->Done(ToGrpcStatus(serving));
                              return;
                            }
                            Continue(reactor, ctx, body);
                          });
    return;
  }
  if (next.min_position != 0) {
    // Not applied this far yet: wait (bounded by the call's deadline and
    // --max-read-wait), then run the body again.
    const absl::Time deadline =
        std::min(absl::FromChrono(ctx->deadline()), absl::Now() + limits_.max_read_wait);
    cluster_->WhenApplied(next.min_position, deadline,
                          [this, reactor, ctx, body = std::move(body)](absl::Status applied) {
                            if (!applied.ok()) {
                              reactor->Done(ToGrpcStatus(applied));
                              return;
                            }
                            Continue(reactor, ctx, body);
                          });
    return;
  }
  if (next.durable_lsn == 0) {
    if (!next.window_key.empty()) window_.Finish(next.window_key, std::move(next.outcome));
    reactor->Done(grpc::Status::OK);
    return;
  }
  // A write is answered once its log records are durable (per
  // --durability): by the log's committer thread, or here if they are
  // already. The call stays in flight until then, so shutdown waits for it.
  persistence_->wal()->WhenDurable(
      next.durable_lsn, [this, reactor, key = std::move(next.window_key),
                         outcome = std::move(next.outcome)](absl::Status durable) mutable {
        if (!key.empty()) {
          if (durable.ok()) {
            window_.Finish(key, std::move(outcome));
          } else {
            // Applied, and maybe on disk: a restart replays what is.
            window_.Abandon(key, durable);
          }
        }
        reactor->Done(ToGrpcStatus(durable));
      });
}

absl::Status FilterServiceImpl::CheckClusterServing() const {
  return cluster_ != nullptr ? cluster_->CheckServing() : absl::OkStatus();
}

absl::Status FilterServiceImpl::ClusterServing(Next* next) const {
  if (cluster_ == nullptr) return absl::OkStatus();
  bool transient = false;
  absl::Status s = cluster_->CheckServing(&transient);
  if (s.ok() || !transient) return s;
  next->wait_serving = true;
  return absl::OkStatus();
}

uint64_t FilterServiceImpl::AppliedPosition() const {
  if (cluster_ != nullptr) return cluster_->AppliedPosition();
  const Wal* wal = persistence_->wal();
  return wal != nullptr ? wal->AppendedLsn() : 0;
}

absl::Status FilterServiceImpl::CheckMinPosition(uint64_t min_position, Next* next) const {
  if (min_position == 0) return absl::OkStatus();
  const uint64_t applied = AppliedPosition();
  if (min_position <= applied) return absl::OkStatus();
  if (cluster_ != nullptr) {
    next->min_position = min_position;
    return absl::OkStatus();
  }
  return absl::OutOfRangeError(absl::StrFormat(
      "min_log_position %u is past this server's log, which ends at %u: the position did not "
      "come from this server (a single node answers every write it acknowledged from its own "
      "state)",
      min_position, applied));
}

absl::StatusOr<std::shared_ptr<CuckooFilter>> FilterServiceImpl::FindFilter(
    std::string_view name) const {
  const absl::string_view n(name.data(), name.size());
  if (absl::Status s = FilterRegistry::ValidateName(n); !s.ok()) return s;
  return registry_->GetLive(n);
}

}  // namespace cuckoo::server
