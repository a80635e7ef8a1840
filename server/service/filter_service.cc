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
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "base/guarded.h"
#include "base/scratch.h"
#include "base/units.h"
#include "cuckoo_version.h"
#include "server/observability/logging.h"
#include "server/service/status.h"
#include "server/service/wire_format.h"
#include "spdlog/spdlog.h"
#include "xxhash.h"

namespace cuckoo::server {
namespace {

void SetTimestamp(absl::Time t, google::protobuf::Timestamp* out) {
  const int64_t ns = absl::ToUnixNanos(t);
  out->set_seconds(ns >= 0 ? ns / 1'000'000'000 : (ns - 999'999'999) / 1'000'000'000);
  out->set_nanos(static_cast<int32_t>(ns - out->seconds() * 1'000'000'000));
}

void SetDuration(absl::Duration d, google::protobuf::Duration* out) {
  const int64_t ns = absl::ToInt64Nanoseconds(d);
  out->set_seconds(ns / 1'000'000'000);
  out->set_nanos(static_cast<int32_t>(ns % 1'000'000'000));
}

}  // namespace

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
  AddUnary<v1::ListFiltersRequest, v1::ListFiltersResponse>(
      queues, RpcMethod::kListFilters, &FilterServiceImpl::RequestListFilters,
      [admin](auto* call) { admin(call, &FilterServiceImpl::DoListFilters); });
  AddUnary<v1::DropFilterRequest, v1::DropFilterResponse>(
      queues, RpcMethod::kDropFilter, &FilterServiceImpl::RequestDropFilter,
      [admin](auto* call) { admin(call, &FilterServiceImpl::DoDropFilter); });
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

void FillFilterInfo(const std::string& name, const CuckooFilter& filter, const SnapshotRecord& snap,
                    v1::FilterInfo* info) {
  const FilterShape& shape = filter.shape();
  const FilterStats st = filter.Stats();
  info->set_name(name);
  info->set_capacity(shape.capacity);
  info->set_fingerprint_bits(shape.fingerprint_bits);
  info->set_bucket_size(shape.bucket_size);
  info->set_shards(shape.shards);
  info->set_max_kicks(shape.max_kicks);
  info->set_seed(shape.seed);
  info->set_hash_id(shape.hash_id);
  info->set_buckets_per_shard(shape.buckets_per_shard);
  info->set_slots(st.slots);
  info->set_semi_sort(shape.semi_sorted());
  info->set_items(st.items);
  info->set_load_factor(st.load_factor);
  info->set_memory_bytes(st.memory_bytes);
  info->set_bits_per_item(st.bits_per_item);
  info->set_expected_false_positive_rate(st.expected_false_positive_rate);
  info->set_false_positive_rate_at_capacity(st.expected_false_positive_rate_at_capacity);
  if (snap.exists) {
    SetTimestamp(snap.time, info->mutable_last_snapshot_time());
    info->set_last_snapshot_bytes(snap.bytes);
  }
  info->set_unsnapshotted_changes(snap.UnsnapshottedChanges(filter));
  info->set_has_unsnapshotted_changes(!snap.exists || info->unsnapshotted_changes() > 0);
  info->set_growth_factor(shape.growth_factor);
  info->set_max_capacity(shape.max_capacity);
  info->set_false_positive_rate(shape.false_positive_rate);
  info->set_false_positive_bound(st.false_positive_bound);
  info->set_reachable_capacity(st.reachable_capacity);
  info->set_max_generations(st.max_generations);
  for (const GenerationStats& g : st.generations) {
    v1::FilterInfo::Generation* out = info->add_generations();
    out->set_fingerprint_bits(g.fingerprint_bits);
    out->set_shards(g.shards);
    out->set_slots(g.slots);
    out->set_items(g.items);
    out->set_memory_bytes(g.memory_bytes);
    out->set_false_positive_bound(g.false_positive_bound);
  }
}

namespace {
// A call that came after StopAccepting.
absl::Status ShuttingDown() {
  return absl::UnavailableError(
      "cuckood is shutting down; retry against another replica or after the restart");
}
}  // namespace

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
    case RpcMethod::kSnapshot:
    case RpcMethod::kExportFilter:
    case RpcMethod::kImportFilter:
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

namespace {
// The answer to a retry whose first try may have been applied in part:
// applying it again could remove a second copy of a key.
absl::Status InDoubt(absl::string_view why) {
  return absl::AbortedError(absl::StrCat(
      "this request_id's first try was not answered and may have been applied in part (", why,
      "); it is not applied again, since a Delete applied twice could remove another key's "
      "fingerprint: Lookup its keys and send what is missing under a new request_id"));
}
}  // namespace

absl::Status ValidateRequestId(std::string_view id) {
  if (id.size() > kMaxRequestIdBytes) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "request_id is %u bytes; at most %u are allowed", id.size(), kMaxRequestIdBytes));
  }
  for (size_t i = 0; i < id.size(); ++i) {
    if (id[i] < '!' || id[i] > '~') {
      return absl::InvalidArgumentError(
          absl::StrFormat("request_id has byte 0x%02x at %u; it must be printable ASCII (! to ~)",
                          static_cast<unsigned char>(id[i]), i));
    }
  }
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
  return registry_->Get(n);
}

namespace {

// Per-key results as RequestWindow and Cluster keep them, and back.
template <typename Result>
std::vector<uint8_t> ResultBytes(absl::Span<const Result> results) {
  std::vector<uint8_t> out(results.size());
  for (size_t i = 0; i < results.size(); ++i) out[i] = static_cast<uint8_t>(results[i]);
  return out;
}
// (Not a std::vector: Result may be bool.)
template <typename Result>
class TypedResults {
 public:
  explicit TypedResults(const std::vector<uint8_t>& bytes)
      : data_(new Result[bytes.size()]), size_(bytes.size()) {
    for (size_t i = 0; i < size_; ++i) data_[i] = static_cast<Result>(bytes[i]);
  }
  absl::Span<const Result> span() const { return absl::Span<const Result>(data_.get(), size_); }
  size_t size() const { return size_; }

 private:
  std::unique_ptr<Result[]> data_;
  size_t size_;
};

// What makes two requests with the same request_id the same request: the
// filter, the keys and if_absent.
uint64_t RequestDigest(const wire::KeysRequest& req) {
  XXH3_state_t* state = XXH3_createState();
  XXH3_64bits_reset(state);
  XXH3_64bits_update(state, req.filter.data(), req.filter.size());
  const uint8_t flags = req.if_absent ? 1 : 0;
  XXH3_64bits_update(state, &flags, 1);
  for (std::string_view k : req.keys) {
    const uint64_t len = k.size();
    XXH3_64bits_update(state, &len, sizeof(len));
    XXH3_64bits_update(state, k.data(), k.size());
  }
  const uint64_t digest = XXH3_64bits_digest(state);
  XXH3_freeState(state);
  return digest;
}

}  // namespace

template <typename Result, typename Encode>
void FilterServiceImpl::ClusterWrite(RpcMethod method, const std::shared_ptr<CuckooFilter>& filter,
                                     std::string_view filter_name,
                                     absl::Span<const std::string_view> keys, bool if_absent,
                                     std::string_view request_id, grpc::ByteBuffer* response,
                                     Encode encode, CallReactor* reactor) {
  // The log carries the keys' hashes, split into entries that fit a NATS
  // message: every replica applies exactly what this one would.
  std::vector<uint64_t> hashes(keys.size());
  for (size_t i = 0; i < keys.size(); ++i) hashes[i] = filter->Hash(keys[i]);
  const size_t per_entry = cluster_->max_hashes_per_entry();
  std::vector<std::string> entries;
  const absl::Span<const uint64_t> all(hashes);
  for (size_t begin = 0; begin < hashes.size() || begin == 0; begin += per_entry) {
    const absl::Span<const uint64_t> part =
        all.subspan(begin, std::min(per_entry, hashes.size() - begin));
    const absl::string_view name(filter_name.data(), filter_name.size());
    entries.push_back(method == RpcMethod::kInsert
                          ? EncodeInsertEntry(filter->id(), name, if_absent, part)
                          : EncodeDeleteEntry(filter->id(), name, part));
    if (hashes.empty()) break;
  }
  std::string id;
  if (!request_id.empty()) {
    // The same id on another method, or with other content, is another
    // request: the content's digest is part of the message id.
    XXH3_state_t* state = XXH3_createState();
    XXH3_64bits_reset(state);
    for (const std::string& e : entries) XXH3_64bits_update(state, e.data(), e.size());
    id = absl::StrFormat("%s/%s/%016x", method == RpcMethod::kInsert ? "i" : "d", request_id,
                         XXH3_64bits_digest(state));
    XXH3_freeState(state);
  }
  const size_t n = keys.size();
  Metrics* metrics = metrics_;
  cluster_->Publish(
      std::move(entries), id,
      [reactor, response, encode, n, method, metrics](Cluster::WriteResult r) {
        if (!r.status.ok()) {
          reactor->Done(ToGrpcStatus(r.status));
          return;
        }
        if (r.results.size() != n) {
          reactor->Done(ToGrpcStatus(absl::InternalError(absl::StrFormat(
              "the log applied %u results for a batch of %u keys", r.results.size(), n))));
          return;
        }
        const TypedResults<Result> typed(r.results);
        *response = encode(typed.span(), r.position);
        if (metrics != nullptr) metrics->RecordKeys(method, n);
        reactor->Done(grpc::Status::OK);
      });
}

template <typename Result, typename Apply, typename Encode>
absl::Status FilterServiceImpl::DataPath(RpcMethod method, grpc::ServerContextBase* ctx,
                                         const grpc::ByteBuffer& request, std::string_view message,
                                         grpc::ByteBuffer* response, Apply apply, Encode encode,
                                         CallReactor* reactor, Next* next) {
  // The request is read where gRPC holds it, its slices, and the limits
  // are enforced while it is parsed: a request pins at most max_batch_keys
  // key views, however many keys it carries, and is rejected at the first
  // key over a limit, before the filter is even looked up.
  thread_local wire::KeysRequest req;
  thread_local std::vector<grpc::Slice> slices;
  thread_local std::vector<std::string_view> chunks;
  struct Release {  // The slices' references, and any large buffers, go with the call.
    ~Release() {
      wire::ReleaseSlices(&slices, &chunks);
      req.Release();
    }
  } release;
  absl::Status s = wire::Slices(request, &slices, &chunks);
  if (s.ok()) {
    s = wire::ParseKeysRequest(chunks, message, KeyLimits(), &req);
  }
  if (!s.ok()) return s;
  if (absl::Status a = Authorize(reactor->caller(), method, req.filter, ctx); !a.ok()) return a;
  const bool write = method == RpcMethod::kInsert || method == RpcMethod::kDelete;
  if (write) {
    if (absl::Status id = ValidateRequestId(req.request_id); !id.ok()) return id;
  }
  if (absl::Status m = CheckMinPosition(req.min_log_position, next);
      !m.ok() || next->min_position != 0) {
    return m;
  }
  absl::StatusOr<std::shared_ptr<CuckooFilter>> filter = FindFilter(req.filter);
  if (!filter.ok()) return filter.status();
  if (write && cluster_ != nullptr) {
    // A retry of an insert this replica applied gets its answer, even if
    // that insert's growth took the memory to the budget.
    if (method == RpcMethod::kInsert &&
        !cluster_->Remembers(absl::string_view(req.request_id.data(), req.request_id.size()))) {
      if (absl::Status m = CheckGrowthBudget(req.filter, **filter); !m.ok()) return m;
    }
    next->answered = true;
    ClusterWrite<Result>(method, *filter, req.filter, req.keys, req.if_absent, req.request_id,
                         response, encode, reactor);
    return absl::OkStatus();
  }
  if (write && !req.request_id.empty()) {
    // A repeat of a request this node took (a retry after a lost response)
    // gets the first one's answer, and is not applied again.
    // The same id on another method, or with other content, is another
    // request: the content's digest is part of the key.
    static_assert(2 + kMaxRequestIdBytes + 1 + 16 <= kWalMaxRequestKeyBytes,
                  "a request's key fits the log's request records");
    const std::string key = absl::StrFormat("%s/%s/%016x", method == RpcMethod::kInsert ? "i" : "d",
                                            req.request_id, RequestDigest(req));
    RequestWindow::Outcome first;
    const size_t n = req.keys.size();
    switch (window_.Start(
        key, &first,
        [reactor, response, encode](const absl::Status& status, const RequestWindow::Outcome& o) {
          if (status.code() == absl::StatusCode::kAborted) {
            reactor->Done(ToGrpcStatus(InDoubt(status.message())));
            return;
          }
          if (!status.ok()) {
            reactor->Done(ToGrpcStatus(
                absl::UnavailableError(absl::StrCat("the first try of this request_id failed (",
                                                    status.message(), "); send it again"))));
            return;
          }
          const TypedResults<Result> typed(o.results);
          *response = encode(typed.span(), o.position);
          reactor->Done(grpc::Status::OK);
        })) {
      case RequestWindow::Begin::kAnswered: {
        const TypedResults<Result> typed(first.results);
        if (typed.size() != n) {
          return absl::InternalError("a remembered request has another number of keys");
        }
        *response = encode(typed.span(), first.position);
        return absl::OkStatus();
      }
      case RequestWindow::Begin::kInDoubt:
        return InDoubt(
            "its first try ended part-way (cut short, or cuckood stopped before "
            "answering it)");
      case RequestWindow::Begin::kWaiting:
        next->answered = true;
        return absl::OkStatus();
      case RequestWindow::Begin::kNew:
        next->window_key = key;
        break;
    }
  }
  // After the window: a retry of a request applied already gets its answer.
  ScratchArray<Result> results(req.keys.size());
  uint64_t position = 0;
  if (absl::Status b = RunBatch<Result>(method, **filter, req.filter, req.keys, req.if_absent,
                                        apply, ctx, results.span(), next, &position);
      !b.ok()) {
    return b;
  }
  *response = encode(absl::Span<const Result>(results.span()), position);
  next->partly_applied = false;  // Applied whole: answered, or remembered as such.
  return absl::OkStatus();
}

absl::Status FilterServiceImpl::StopReason(RpcMethod method,
                                           const grpc::ServerContextBase* ctx) const {
  // Shutdown cuts Inserts short, whose kick chains can take long, but
  // never a Delete (no kicks, so it ends soon anyway): UNAVAILABLE, which
  // clients and gRPC retry policies retry, then always means that none of
  // a Delete was applied. Deleting a prefix twice could remove the
  // fingerprint of another key that shares it.
  if (method != RpcMethod::kDelete && abort_.load(std::memory_order_acquire)) {
    return absl::UnavailableError("cuckood is shutting down");
  }
  if (ctx == nullptr) return absl::OkStatus();
  if (ctx->IsCancelled()) return absl::CancelledError("the call was cancelled");
  if (std::chrono::system_clock::now() > ctx->deadline()) {
    return absl::DeadlineExceededError("the call's deadline passed");
  }
  return absl::OkStatus();
}

template <typename Result, typename Apply>
absl::Status FilterServiceImpl::RunBatch(RpcMethod method, CuckooFilter& filter,
                                         std::string_view filter_name,
                                         absl::Span<const std::string_view> keys, bool if_absent,
                                         Apply apply, const grpc::ServerContextBase* ctx,
                                         absl::Span<Result> results, Next* next,
                                         uint64_t* position) {
  const bool write = method == RpcMethod::kInsert || method == RpcMethod::kDelete;
  // Before the log: a refused insert changed nothing.
  if (method == RpcMethod::kInsert) {
    if (absl::Status m = CheckGrowthBudget(filter_name, filter); !m.ok()) return m;
  }
  const uint64_t read_position = write ? 0 : AppliedPosition();
  // Between the parts of a long batch: is anyone still waiting for it?
  absl::Status stopped;
  auto stop = [&] {
    stopped = StopReason(method, ctx);
    return !stopped.ok();
  };
  // Writes reserve room in the log before they touch the filter (a full
  // disk refuses the batch, applying nothing), and log each shard's part as
  // it is applied.
  Wal* wal = write ? persistence_->wal() : nullptr;
  uint64_t reserved = 0;
  if (wal != nullptr) {
    reserved = WalBytesForBatch(keys.size(), filter.shape().shards);
    if (!next->window_key.empty())
      reserved += WalBytesForRequest(next->window_key.size(), keys.size());
    if (absl::Status r = wal->Reserve(reserved); !r.ok()) return r;
  }
  struct Unreserve {
    Wal* wal;
    uint64_t bytes;
    ~Unreserve() {
      if (wal != nullptr) wal->Unreserve(bytes);
    }
  } unreserve{wal, reserved};
  const uint64_t filter_id = filter.id();
  uint64_t last_lsn = 0;
  // A request id goes to the log before the request's first write (no
  // durable write without its id) and with its results after the last
  // (docs/WAL_FORMAT.md, "Request records").
  WalRequest logged_request;
  auto append = [&](const ShardWrite& w) {
    if (last_lsn == 0 && !next->window_key.empty()) {
      window_.Logged(next->window_key);
      logged_request = {
          .key = next->window_key,
          .method = method == RpcMethod::kInsert ? ShardWrite::kInsert : ShardWrite::kDelete,
          .keys = static_cast<uint32_t>(keys.size()),
          .time = absl::Now()};
      wal->AppendRequestStart(filter_id, logged_request);
    }
    return last_lsn = wal->AppendShardWrite(filter_id, w);
  };
  const WriteLog log(append);
  const size_t applied =
      apply(filter, keys, if_absent, results, stop, wal != nullptr ? &log : nullptr);
  next->durable_lsn = last_lsn;
  next->partly_applied = write && (applied > 0 || last_lsn != 0);
  if (applied < keys.size()) {
    return absl::Status(
        stopped.code(),
        absl::StrFormat("%s: the batch was cut short after its first %u of %u keys were applied",
                        stopped.message(), applied, keys.size()));
  }
  *position = write ? (last_lsn != 0 ? last_lsn : AppliedPosition()) : read_position;
  if (!next->window_key.empty()) {
    next->outcome.results = ResultBytes(absl::Span<const Result>(results));
    if (last_lsn != 0) {
      // The answer's position is the request's last record, its results:
      // a read at the position the answer gave sees them logged.
      logged_request.results = next->outcome.results;
      logged_request.time = absl::Now();
      *position = next->durable_lsn = wal->AppendRequestResults(filter_id, logged_request);
    }
    next->outcome.position = *position;
    if (last_lsn != 0) window_.Recorded(next->window_key, next->durable_lsn, next->outcome);
  }
  if (metrics_ != nullptr) metrics_->RecordKeys(method, keys.size());
  return absl::OkStatus();
}

absl::Status FilterServiceImpl::CheckGrowthBudget(std::string_view name,
                                                  const CuckooFilter& filter) const {
  if (!filter.shape().growing()) return absl::OkStatus();
  if (const uint64_t ceiling = filter.shape().max_capacity; ceiling != 0) {
    if (const uint64_t items = filter.items(); items >= ceiling) {
      return absl::ResourceExhaustedError(absl::StrFormat(
          "filter \"%s\" is full: it holds %u keys and its max_capacity, a hard ceiling, is %u "
          "keys; this request was refused before it was logged (delete keys, or create a filter "
          "with a higher --max-capacity)",
          absl::CHexEscape(absl::string_view(name.data(), name.size())), items, ceiling));
    }
  }
  const uint64_t used = registry_->memory_bytes();
  const uint64_t budget = registry_->limits().memory_budget_bytes;
  if (used < budget) return absl::OkStatus();
  return absl::ResourceExhaustedError(absl::StrFormat(
      "cannot insert into growing filter \"%s\": the server's filters use %u bytes of its memory "
      "budget of %u bytes, and an insert may grow the filter; this request was refused before "
      "it was logged (lookups, deletes and inserts into fixed filters go on; drop filters or "
      "raise --memory-budget)",
      absl::CHexEscape(absl::string_view(name.data(), name.size())), used, budget));
}

absl::Status FilterServiceImpl::DoCreateFilter(const v1::CreateFilterRequest& req,
                                               v1::CreateFilterResponse* resp, CallReactor* reactor,
                                               Next* next) {
  if (absl::Status a =
          Authorize(reactor->caller(), RpcMethod::kCreateFilter, req.name(), reactor->ctx());
      !a.ok()) {
    return a;
  }
  reactor->MarkAudited(req.name());
  FilterOptions options{.capacity = req.capacity(),
                        .false_positive_rate = req.false_positive_rate(),
                        .fingerprint_bits = req.fingerprint_bits(),
                        .bucket_size = req.bucket_size(),
                        .shards = req.shards(),
                        .max_kicks = req.max_kicks(),
                        .growth_factor = req.growth_factor(),
                        .max_capacity = req.max_capacity()};
  if (req.has_seed()) options.seed = req.seed();
  if (req.has_semi_sort()) options.semi_sort = req.semi_sort();
  if (cluster_ != nullptr) {
    // Through the log: the shape (seed included) is fixed here, and every
    // replica creates the same filter when it applies the entry.
    if (absl::Status s = FilterRegistry::ValidateName(req.name()); !s.ok()) return s;
    absl::StatusOr<FilterShape> shape = ComputeShape(options);
    if (!shape.ok()) return shape.status();
    absl::StatusOr<std::shared_ptr<CuckooFilter>> existing =
        registry_->CheckExisting(req.name(), *shape, req.has_seed(), req.if_not_exists());
    if (existing.ok()) {
      FillFilterInfo(req.name(), **existing, persistence_->Record(req.name(), **existing),
                     resp->mutable_filter());
      resp->set_created(false);
      resp->set_log_position(AppliedPosition());
      return absl::OkStatus();
    }
    if (!absl::IsNotFound(existing.status())) return existing.status();
    if (absl::Status room = registry_->CheckRoom(req.name(), CuckooFilter::MemoryBytes(*shape));
        !room.ok()) {
      return room;
    }
    next->answered = true;
    cluster_->Publish(
        {EncodeCreateEntry(req.name(), *shape)}, "",
        [this, reactor, &req, resp, shape = *shape](Cluster::WriteResult r) {
          reactor->Done(ToGrpcStatus(Guarded([&]() -> absl::Status {
            if (absl::IsAlreadyExists(r.status)) {
              // Created meanwhile through another replica: if_not_exists
              // decides, as on a single node.
              absl::StatusOr<std::shared_ptr<CuckooFilter>> now =
                  registry_->CheckExisting(req.name(), shape, req.has_seed(), req.if_not_exists());
              if (!now.ok()) return now.status();
              FillFilterInfo(req.name(), **now, persistence_->Record(req.name(), **now),
                             resp->mutable_filter());
              resp->set_created(false);
              resp->set_log_position(r.position);
              return absl::OkStatus();
            }
            if (!r.status.ok()) return r.status;
            absl::StatusOr<std::shared_ptr<CuckooFilter>> made = registry_->Get(req.name());
            if (!made.ok()) return made.status();
            FillFilterInfo(req.name(), **made, persistence_->Record(req.name(), **made),
                           resp->mutable_filter());
            resp->set_created(r.created);
            resp->set_log_position(r.position);
            return absl::OkStatus();
          })));
        });
    return absl::OkStatus();
  }
  bool created = false;
  // The creation is logged before the filter gets its name, so that the log
  // holds it before any write to it; the call is answered once the record
  // is durable.
  Wal* wal = persistence_->wal();
  const uint64_t reserved = wal != nullptr ? WalCreateFilterBytes(req.name()) : 0;
  if (wal != nullptr) {
    if (absl::Status s = wal->Reserve(reserved); !s.ok()) return s;
  }
  uint64_t lsn = 0;
  absl::StatusOr<std::shared_ptr<CuckooFilter>> filter = registry_->Create(
      req.name(), options, req.if_not_exists(), &created,
      [&](CuckooFilter& f) { return persistence_->LogCreate(req.name(), f, &lsn); });
  if (wal != nullptr) wal->Unreserve(reserved);
  if (!filter.ok()) return filter.status();
  if (created && wal != nullptr) {
    if (absl::Status s = wal->WaitDurable(lsn); !s.ok()) return s;
  }
  FillFilterInfo(req.name(), **filter, persistence_->Record(req.name(), **filter),
                 resp->mutable_filter());
  resp->set_created(created);
  resp->set_log_position(created && lsn != 0 ? lsn : AppliedPosition());
  if (created) {
    const FilterShape& s = (*filter)->shape();
    spdlog::info(
        "created filter {}: capacity {}, fingerprint_bits {}, bucket_size {}, {} table, shards {}, "
        "{} bytes{}",
        req.name(), s.capacity, s.fingerprint_bits, s.bucket_size, TableKindName(s.table_kind),
        s.shards, (*filter)->memory_bytes(),
        s.growing()
            ? absl::StrFormat(
                  "; growing by %u up to %s keys at false_positive_rate %g", s.growth_factor,
                  s.max_capacity != 0 ? absl::StrCat(s.max_capacity) : std::string("the reachable"),
                  s.false_positive_rate)
            : std::string());
  }
  return absl::OkStatus();
}

absl::Status FilterServiceImpl::DoDropFilter(const v1::DropFilterRequest& req,
                                             v1::DropFilterResponse* resp, CallReactor* reactor,
                                             Next* next) {
  if (absl::Status a =
          Authorize(reactor->caller(), RpcMethod::kDropFilter, req.name(), reactor->ctx());
      !a.ok()) {
    return a;
  }
  reactor->MarkAudited(req.name());
  // An unknown name is answered here, so retries for filters gone already
  // never fill the persistence queue.
  absl::StatusOr<std::shared_ptr<CuckooFilter>> found = FindFilter(req.name());
  if (!found.ok()) return found.status();
  next->answered = true;
  if (cluster_ != nullptr) {
    cluster_->Publish({EncodeDropEntry((*found)->id(), req.name())}, "",
                      [reactor, resp](Cluster::WriteResult r) {
                        if (r.status.ok()) {
                          resp->set_freed_bytes(r.freed_bytes);
                          resp->set_log_position(r.position);
                        }
                        reactor->Done(ToGrpcStatus(r.status));
                      });
    return absl::OkStatus();
  }
  // The file is removed on the persistence thread, after any snapshot being
  // written: never on one of gRPC's threads. Only the filter found here is
  // dropped: if the name is dropped and created again while this call
  // waits, the new filter stays. gRPC keeps req and resp alive until the
  // reactor finishes.
  persistence_->DropAsync(
      req.name(), std::weak_ptr<CuckooFilter>(*found),
      [this, reactor, &req, resp](absl::StatusOr<std::shared_ptr<CuckooFilter>> filter) {
        const absl::Status status = Guarded([&]() -> absl::Status {
          if (!filter.ok()) return filter.status();
          resp->set_freed_bytes((*filter)->memory_bytes());
          resp->set_log_position(AppliedPosition());
          spdlog::info("dropped filter {}: {} items, {} bytes freed", req.name(),
                       (*filter)->items(), (*filter)->memory_bytes());
          return absl::OkStatus();
        });
        // The last reference goes before the answer (unless a running call
        // still holds the filter): a client told the bytes are freed can
        // use them at once.
        if (filter.ok()) filter->reset();
        reactor->Done(ToGrpcStatus(status));
      });
  return absl::OkStatus();
}

absl::Status FilterServiceImpl::DoGetFilter(const v1::GetFilterRequest& req,
                                            v1::GetFilterResponse* resp, CallReactor* reactor,
                                            Next* next) {
  if (absl::Status a =
          Authorize(reactor->caller(), RpcMethod::kGetFilter, req.name(), reactor->ctx());
      !a.ok()) {
    return a;
  }
  if (absl::Status m = CheckMinPosition(req.min_log_position(), next);
      !m.ok() || next->min_position != 0) {
    return m;
  }
  const uint64_t position = AppliedPosition();
  absl::StatusOr<std::shared_ptr<CuckooFilter>> filter = FindFilter(req.name());
  if (!filter.ok()) return filter.status();
  FillFilterInfo(req.name(), **filter, persistence_->Record(req.name(), **filter),
                 resp->mutable_filter());
  resp->set_log_position(position);
  return absl::OkStatus();
}

absl::Status FilterServiceImpl::DoListFilters(const v1::ListFiltersRequest& req,
                                              v1::ListFiltersResponse* resp, CallReactor* reactor,
                                              Next* next) {
  if (absl::Status m = CheckMinPosition(req.min_log_position(), next);
      !m.ok() || next->min_position != 0) {
    return m;
  }
  const uint64_t position = AppliedPosition();
  // Only the filters the caller may read: the others' names are not its
  // business.
  const Caller& caller = reactor->caller();
  for (const auto& [name, filter] : registry_->List()) {
    if (!caller.Allows(Access::kRead, name)) continue;
    FillFilterInfo(name, *filter, persistence_->Record(name, *filter), resp->add_filters());
  }
  resp->set_log_position(position);
  return absl::OkStatus();
}

absl::Status FilterServiceImpl::DoGetServerInfo(v1::GetServerInfoResponse* resp) {
  resp->set_version(kVersion);
  resp->set_max_batch_keys(limits_.max_batch_keys);
  resp->set_max_key_bytes(limits_.max_key_bytes);
  resp->set_max_message_bytes(limits_.max_message_bytes);
  resp->set_max_filters(registry_->limits().max_filters);
  resp->set_memory_budget_bytes(registry_->limits().memory_budget_bytes);
  resp->set_memory_used_bytes(registry_->memory_bytes());
  resp->set_filters(static_cast<uint32_t>(registry_->size()));
  resp->set_data_dir(persistence_->data_dir());
  SetDuration(snapshot_interval_, resp->mutable_snapshot_interval());
  if (const Wal* wal = persistence_->wal(); wal != nullptr) {
    resp->set_durability(std::string(DurabilityName(wal->options().durability)));
    SetDuration(wal->options().sync_interval, resp->mutable_wal_sync_interval());
  }
  resp->set_mode(cluster_ != nullptr ? "cluster" : "single");
  resp->set_applied_log_position(AppliedPosition());
  SetDuration(limits_.dedup_window, resp->mutable_dedup_window());
  if (cluster_ != nullptr) {
    const ClusterStatus st = cluster_->Status();
    v1::ClusterInfo* c = resp->mutable_cluster();
    c->set_replica_id(st.replica_id);
    c->set_nats_status(st.nats_status);
    c->set_nats_server(st.nats_server);
    c->set_stream(st.stream);
    c->set_stream_replicas(st.stream_replicas);
    c->set_stream_last_position(st.stream_last);
    c->set_stream_first_position(st.stream_first);
    c->set_lag(st.lag);
    c->set_log_identity(st.identity);
    c->set_problem(st.problem);
    // Acknowledged in the stream, so durable on its replicas.
    resp->set_durability("cluster");
  }
  return absl::OkStatus();
}

namespace {

// What each data-path method does to its filter: the keys applied, or
// looked up, into `out`; returns how many were (fewer when `stop` ended a
// write early). Writes hand each shard's part to `log` when there is one.
using Keys = absl::Span<const std::string_view>;
size_t ApplyInsert(CuckooFilter& f, Keys keys, bool if_absent, absl::Span<InsertResult> out,
                   StopCheck stop, const WriteLog* log) {
  return log != nullptr ? f.InsertBatch(keys, if_absent, out, stop, *log)
                        : f.InsertBatch(keys, if_absent, out, stop);
}
size_t ApplyDelete(CuckooFilter& f, Keys keys, bool, absl::Span<DeleteResult> out, StopCheck stop,
                   const WriteLog* log) {
  return log != nullptr ? f.DeleteBatch(keys, out, stop, *log) : f.DeleteBatch(keys, out, stop);
}
size_t ApplyLookup(const CuckooFilter& f, Keys keys, bool, absl::Span<bool> out, StopCheck,
                   const WriteLog*) {
  f.LookupBatch(keys, out);
  return keys.size();
}
size_t ApplyCount(const CuckooFilter& f, Keys keys, bool, absl::Span<uint32_t> out, StopCheck,
                  const WriteLog*) {
  f.CountBatch(keys, out);
  return keys.size();
}

}  // namespace

absl::Status FilterServiceImpl::DataCall(RpcMethod method, grpc::ServerContextBase* ctx,
                                         const grpc::ByteBuffer& request,
                                         grpc::ByteBuffer* response, CallReactor* reactor,
                                         Next* next) {
  switch (method) {
    case RpcMethod::kInsert:
      return DataPath<InsertResult>(method, ctx, request, "InsertRequest", response, ApplyInsert,
                                    wire::InsertResponse, reactor, next);
    case RpcMethod::kLookup:
      return DataPath<bool>(method, ctx, request, "LookupRequest", response, ApplyLookup,
                            wire::LookupResponse, reactor, next);
    case RpcMethod::kDelete:
      return DataPath<DeleteResult>(method, ctx, request, "DeleteRequest", response, ApplyDelete,
                                    wire::DeleteResponse, reactor, next);
    case RpcMethod::kCount:
      return DataPath<uint32_t>(method, ctx, request, "CountRequest", response, ApplyCount,
                                wire::CountResponse, reactor, next);
    default:
      return absl::InternalError(absl::StrFormat("%s is not a data-path method (a bug in cuckood)",
                                                 RpcMethodName(method)));
  }
}

absl::StatusOr<FilterServiceImpl::AppliedWrite> FilterServiceImpl::InsertNow(
    const LocalWrite& write, absl::Span<InsertResult> results) {
  return WriteNow<InsertResult>(RpcMethod::kInsert, write, ApplyInsert, results);
}

absl::StatusOr<FilterServiceImpl::AppliedWrite> FilterServiceImpl::DeleteNow(
    const LocalWrite& write, absl::Span<DeleteResult> results) {
  return WriteNow<DeleteResult>(RpcMethod::kDelete, write, ApplyDelete, results);
}

template <typename Result, typename Apply>
absl::StatusOr<FilterServiceImpl::AppliedWrite> FilterServiceImpl::WriteNow(
    RpcMethod method, const LocalWrite& write, Apply apply, absl::Span<Result> results) {
  // In flight from here, as a call from Begin (shutdown waits for it).
  const auto start = std::chrono::steady_clock::now();
  in_flight_.fetch_add(1, std::memory_order_acq_rel);
  uint64_t lsn = 0;
  // What the RPC checks, in its order (Admit, then DataPath), less what a
  // local write cannot carry: a request id, a min_log_position, a deadline.
  const absl::Status s = Guarded([&]() -> absl::Status {
    if (!accepting_.load(std::memory_order_acquire)) return ShuttingDown();
    if (cluster_ != nullptr) {
      return absl::InternalError(
          "a local write in cluster mode (a bug in cuckood: please report it)");
    }
    if (write.caller == nullptr || results.size() != write.keys.size()) {
      return absl::InternalError("a malformed local write (a bug in cuckood: please report it)");
    }
    if (absl::Status k = wire::CheckKeysRequest(write.filter, write.keys, KeyLimits()); !k.ok()) {
      return k;
    }
    if (absl::Status a = Authorize(*write.caller, method, write.filter, nullptr, write.peer);
        !a.ok()) {
      return a;
    }
    absl::StatusOr<std::shared_ptr<CuckooFilter>> filter = FindFilter(write.filter);
    if (!filter.ok()) return filter.status();
    Next next;
    uint64_t position = 0;
    absl::Status b = RunBatch<Result>(method, **filter, write.filter, write.keys, write.if_absent,
                                      apply, nullptr, results, &next, &position);
    lsn = next.durable_lsn;
    return b;
  });
  AppliedWrite applied(this, method, start, lsn);
  if (!s.ok()) {
    // Answered now: counted, and no longer in flight.
    applied.service_ = nullptr;
    RecordCall(method, s, start);
    in_flight_.fetch_sub(1, std::memory_order_acq_rel);
    return s;
  }
  return applied;
}

void FilterServiceImpl::RecordCall(RpcMethod method, const absl::Status& status,
                                   std::chrono::steady_clock::time_point start) const {
  if (metrics_ == nullptr) return;
  metrics_->RecordRpc(method, ToGrpcStatus(status).error_code(),
                      std::chrono::steady_clock::now() - start);
}

void FilterServiceImpl::AppliedWrite::Then(std::function<void(absl::Status)> done) && {
  FilterServiceImpl* service = std::exchange(service_, nullptr);
  if (service == nullptr) return;
  auto finish = [service, method = method_, start = start_,
                 done = std::move(done)](const absl::Status& durable) {
    service->RecordCall(method, durable, start);
    if (done) done(durable);
    service->in_flight_.fetch_sub(1, std::memory_order_acq_rel);
  };
  Wal* wal = service->persistence_->wal();
  if (lsn_ == 0 || wal == nullptr) {
    finish(absl::OkStatus());
    return;
  }
  wal->WhenDurable(lsn_, std::move(finish));
}

FilterServiceImpl::AppliedWrite::~AppliedWrite() { std::move(*this).Then(nullptr); }

void FilterServiceImpl::ServeSnapshot(CallReactor* reactor, const v1::SnapshotRequest& req,
                                      v1::SnapshotResponse* resp) {
  if (absl::Status a =
          Authorize(reactor->caller(), RpcMethod::kSnapshot, req.filter(), reactor->ctx());
      !a.ok()) {
    reactor->Done(ToGrpcStatus(a));
    return;
  }
  reactor->MarkAudited(req.filter());
  if (!req.filter().empty()) {
    // As in DropFilter: unknown names never take a place in the queue.
    if (absl::StatusOr<std::shared_ptr<CuckooFilter>> f = FindFilter(req.filter()); !f.ok()) {
      reactor->Done(ToGrpcStatus(f.status()));
      return;
    }
  }
  // The call keeps resp alive until it is answered.
  persistence_->SnapshotAsync(req.filter(), req.changed_only(),
                              [reactor, resp](absl::StatusOr<SnapshotRun> run) {
                                reactor->Done(ToGrpcStatus(Guarded([&]() -> absl::Status {
                                  if (!run.ok()) return run.status();
                                  for (const auto& [name, w] : run->written) {
                                    v1::SnapshotFile* f = resp->add_files();
                                    f->set_filter(name);
                                    f->set_path(w.path);
                                    f->set_bytes(w.bytes);
                                    f->set_items(w.items);
                                    SetTimestamp(w.taken, f->mutable_time());
                                    SetDuration(w.duration, f->mutable_duration());
                                  }
                                  for (const std::string& name : run->unchanged)
                                    resp->add_unchanged(name);
                                  resp->set_bytes(run->bytes);
                                  SetDuration(run->duration, resp->mutable_duration());
                                  return absl::OkStatus();
                                })));
                              });
}

}  // namespace cuckoo::server
