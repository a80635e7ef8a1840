// The data path: Insert, Lookup, Delete and Count (DataCall), and the
// Redis port's InsertNow and DeleteNow.
#include <algorithm>
#include <chrono>
#include <memory>
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
#include "server/service/filter_service.h"
#include "server/service/filter_service_internal.h"
#include "server/service/status.h"
#include "server/service/wire_format.h"
#include "xxhash.h"

namespace cuckoo::server {

using filter_service_internal::ShuttingDown;

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
  if (absl::Status c = ClusterServing(next); !c.ok() || next->wait_serving) return c;
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

absl::StatusOr<uint64_t> FilterServiceImpl::BeginLogTransaction() {
  Wal* wal = local_writes() && persistence_ != nullptr ? persistence_->wal() : nullptr;
  if (wal == nullptr) return 0;
  if (absl::Status s = wal->Reserve(kWalTxnBytes); !s.ok()) return s;
  return wal->BeginTransaction();
}

void FilterServiceImpl::EndLogTransaction(uint64_t begin_lsn) {
  if (begin_lsn == 0) return;
  Wal* wal = persistence_->wal();
  wal->EndTransaction(begin_lsn);
  wal->Unreserve(kWalTxnBytes);
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

}  // namespace cuckoo::server
