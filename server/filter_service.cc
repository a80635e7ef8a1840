#include "server/filter_service.h"

#include <chrono>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "core/scratch.h"
#include "cuckoo_version.h"
#include "server/status.h"
#include "server/wire_format.h"
#include "spdlog/spdlog.h"

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

// A unary call's reactor that counts the call as in flight until gRPC is
// done with it (response sent or call cancelled), so shutdown can wait for
// exactly the calls that are running, and records the call in the metrics
// when it is finished.
class FilterServiceImpl::CallReactor final : public grpc::ServerUnaryReactor {
 public:
  CallReactor(std::atomic<int64_t>* in_flight, Metrics* metrics, RpcMethod method)
      : in_flight_(in_flight),
        metrics_(metrics),
        method_(method),
        start_(std::chrono::steady_clock::now()) {
    in_flight_->fetch_add(1, std::memory_order_acq_rel);
  }
  // Finish(status), counted.
  void Done(const grpc::Status& status) {
    if (metrics_ != nullptr) {
      metrics_->RecordRpc(method_, status.error_code(), std::chrono::steady_clock::now() - start_);
    }
    Finish(status);
  }
  void OnDone() override {
    in_flight_->fetch_sub(1, std::memory_order_acq_rel);
    delete this;
  }

 private:
  std::atomic<int64_t>* const in_flight_;
  Metrics* const metrics_;
  const RpcMethod method_;
  const std::chrono::steady_clock::time_point start_;
};

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
}

FilterServiceImpl::CallReactor* FilterServiceImpl::Accept(RpcMethod method, bool* accepted) {
  // Counted before the check, so that shutdown, which stops accepting and
  // then waits for the count to drop, never misses a call that got in.
  CallReactor* reactor = new CallReactor(&in_flight_, metrics_, method);
  if (!accepting_.load(std::memory_order_acquire)) {
    reactor->Done(grpc::Status(grpc::StatusCode::UNAVAILABLE,
                               "cuckood is shutting down; retry against another replica or "
                               "after the restart"));
    *accepted = false;
    return reactor;
  }
  *accepted = true;
  return reactor;
}

template <typename Body>
grpc::ServerUnaryReactor* FilterServiceImpl::Run(RpcMethod method, Body body) {
  bool accepted;
  CallReactor* reactor = Accept(method, &accepted);
  if (accepted) reactor->Done(ToGrpcStatus(Guarded(body)));
  return reactor;
}

absl::StatusOr<std::shared_ptr<CuckooFilter>> FilterServiceImpl::FindFilter(
    std::string_view name) const {
  const absl::string_view n(name.data(), name.size());
  if (absl::Status s = FilterRegistry::ValidateName(n); !s.ok()) return s;
  return registry_->Get(n);
}

template <typename Result, typename Apply, typename Encode>
absl::Status FilterServiceImpl::DataPath(RpcMethod method, grpc::CallbackServerContext* ctx,
                                         const grpc::ByteBuffer& request, std::string_view message,
                                         grpc::ByteBuffer* response, Apply apply, Encode encode) {
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
    s = wire::ParseKeysRequest(chunks, message,
                               {.max_keys = limits_.max_batch_keys,
                                .min_key_bytes = 1,
                                .max_key_bytes = limits_.max_key_bytes,
                                .max_filter_bytes = kMaxFilterNameBytes},
                               &req);
  }
  if (!s.ok()) return s;
  absl::StatusOr<std::shared_ptr<CuckooFilter>> filter = FindFilter(req.filter);
  if (!filter.ok()) return filter.status();
  ScratchArray<Result, 3> results(req.keys.size());
  // Between the parts of a long batch: is anyone still waiting for it?
  const auto deadline = ctx->deadline();
  absl::Status stopped;
  auto stop = [&] {
    // Shutdown cuts Inserts short, whose kick chains can take long, but
    // never a Delete (no kicks, so it ends soon anyway): UNAVAILABLE, which
    // clients and gRPC retry policies retry, then always means that none of
    // a Delete was applied. Deleting a prefix twice could remove the
    // fingerprint of another key that shares it.
    if (method != RpcMethod::kDelete && abort_.load(std::memory_order_acquire)) {
      stopped = absl::UnavailableError("cuckood is shutting down");
    } else if (ctx->IsCancelled()) {
      stopped = absl::CancelledError("the call was cancelled");
    } else if (std::chrono::system_clock::now() > deadline) {
      stopped = absl::DeadlineExceededError("the call's deadline passed");
    }
    return !stopped.ok();
  };
  if (const size_t applied = apply(**filter, req, results.span(), stop);
      applied < req.keys.size()) {
    return absl::Status(
        stopped.code(),
        absl::StrFormat("%s: the batch was cut short after its first %u of %u keys were applied",
                        stopped.message(), applied, req.keys.size()));
  }
  *response = encode(absl::Span<const Result>(results.span()));
  if (metrics_ != nullptr) metrics_->RecordKeys(method, req.keys.size());
  return absl::OkStatus();
}

absl::Status FilterServiceImpl::DoCreateFilter(const v1::CreateFilterRequest& req,
                                               v1::CreateFilterResponse* resp) {
  FilterOptions options{.capacity = req.capacity(),
                        .false_positive_rate = req.false_positive_rate(),
                        .fingerprint_bits = req.fingerprint_bits(),
                        .bucket_size = req.bucket_size(),
                        .shards = req.shards(),
                        .max_kicks = req.max_kicks()};
  if (req.has_seed()) options.seed = req.seed();
  if (req.has_semi_sort()) options.semi_sort = req.semi_sort();
  bool created = false;
  absl::StatusOr<std::shared_ptr<CuckooFilter>> filter =
      registry_->Create(req.name(), options, req.if_not_exists(), &created);
  if (!filter.ok()) return filter.status();
  FillFilterInfo(req.name(), **filter, persistence_->Record(req.name(), **filter),
                 resp->mutable_filter());
  resp->set_created(created);
  if (created) {
    const FilterShape& s = (*filter)->shape();
    spdlog::info(
        "created filter {}: capacity {}, fingerprint_bits {}, bucket_size {}, {} table, shards {}, "
        "{} bytes",
        req.name(), s.capacity, s.fingerprint_bits, s.bucket_size, TableKindName(s.table_kind),
        s.shards, (*filter)->memory_bytes());
  }
  return absl::OkStatus();
}

absl::Status FilterServiceImpl::DoGetFilter(const v1::GetFilterRequest& req,
                                            v1::GetFilterResponse* resp) {
  absl::StatusOr<std::shared_ptr<CuckooFilter>> filter = FindFilter(req.name());
  if (!filter.ok()) return filter.status();
  FillFilterInfo(req.name(), **filter, persistence_->Record(req.name(), **filter),
                 resp->mutable_filter());
  return absl::OkStatus();
}

absl::Status FilterServiceImpl::DoListFilters(v1::ListFiltersResponse* resp) {
  for (const auto& [name, filter] : registry_->List()) {
    FillFilterInfo(name, *filter, persistence_->Record(name, *filter), resp->add_filters());
  }
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
  return absl::OkStatus();
}

grpc::ServerUnaryReactor* FilterServiceImpl::CreateFilter(grpc::CallbackServerContext*,
                                                          const v1::CreateFilterRequest* req,
                                                          v1::CreateFilterResponse* resp) {
  return Run(RpcMethod::kCreateFilter, [&] { return DoCreateFilter(*req, resp); });
}

grpc::ServerUnaryReactor* FilterServiceImpl::GetFilter(grpc::CallbackServerContext*,
                                                       const v1::GetFilterRequest* req,
                                                       v1::GetFilterResponse* resp) {
  return Run(RpcMethod::kGetFilter, [&] { return DoGetFilter(*req, resp); });
}

grpc::ServerUnaryReactor* FilterServiceImpl::ListFilters(grpc::CallbackServerContext*,
                                                         const v1::ListFiltersRequest*,
                                                         v1::ListFiltersResponse* resp) {
  return Run(RpcMethod::kListFilters, [&] { return DoListFilters(resp); });
}

grpc::ServerUnaryReactor* FilterServiceImpl::DropFilter(grpc::CallbackServerContext*,
                                                        const v1::DropFilterRequest* req,
                                                        v1::DropFilterResponse* resp) {
  bool accepted;
  CallReactor* reactor = Accept(RpcMethod::kDropFilter, &accepted);
  if (!accepted) return reactor;
  // An unknown name is answered here, so retries for filters gone already
  // never fill the persistence queue.
  absl::StatusOr<std::shared_ptr<CuckooFilter>> found = FindFilter(req->name());
  if (!found.ok()) {
    reactor->Done(ToGrpcStatus(found.status()));
    return reactor;
  }
  // The file is removed on the persistence thread, after any snapshot being
  // written: never on one of gRPC's threads. Only the filter found here is
  // dropped: if the name is dropped and created again while this call
  // waits, the new filter stays. gRPC keeps req and resp alive until the
  // reactor finishes.
  persistence_->DropAsync(
      req->name(), std::weak_ptr<CuckooFilter>(*found),
      [reactor, req, resp](absl::StatusOr<std::shared_ptr<CuckooFilter>> filter) {
        const absl::Status status = Guarded([&]() -> absl::Status {
          if (!filter.ok()) return filter.status();
          resp->set_freed_bytes((*filter)->memory_bytes());
          spdlog::info("dropped filter {}: {} items, {} bytes freed", req->name(),
                       (*filter)->items(), (*filter)->memory_bytes());
          return absl::OkStatus();
        });
        // The last reference goes before the answer (unless a running call
        // still holds the filter): a client told the bytes are freed can
        // use them at once.
        if (filter.ok()) filter->reset();
        reactor->Done(ToGrpcStatus(status));
      });
  return reactor;
}

grpc::ServerUnaryReactor* FilterServiceImpl::Insert(grpc::CallbackServerContext* ctx,
                                                    const grpc::ByteBuffer* req,
                                                    grpc::ByteBuffer* resp) {
  return Run(RpcMethod::kInsert, [&] {
    return DataPath<InsertResult>(
        RpcMethod::kInsert, ctx, *req, "InsertRequest", resp,
        [](CuckooFilter& f, const wire::KeysRequest& r, absl::Span<InsertResult> out,
           StopCheck stop) { return f.InsertBatch(r.keys, r.if_absent, out, stop); },
        wire::InsertResponse);
  });
}

grpc::ServerUnaryReactor* FilterServiceImpl::Lookup(grpc::CallbackServerContext* ctx,
                                                    const grpc::ByteBuffer* req,
                                                    grpc::ByteBuffer* resp) {
  return Run(RpcMethod::kLookup, [&] {
    return DataPath<bool>(
        RpcMethod::kLookup, ctx, *req, "LookupRequest", resp,
        [](const CuckooFilter& f, const wire::KeysRequest& r, absl::Span<bool> out, StopCheck) {
          f.LookupBatch(r.keys, out);
          return r.keys.size();
        },
        wire::LookupResponse);
  });
}

grpc::ServerUnaryReactor* FilterServiceImpl::Delete(grpc::CallbackServerContext* ctx,
                                                    const grpc::ByteBuffer* req,
                                                    grpc::ByteBuffer* resp) {
  return Run(RpcMethod::kDelete, [&] {
    return DataPath<DeleteResult>(
        RpcMethod::kDelete, ctx, *req, "DeleteRequest", resp,
        [](CuckooFilter& f, const wire::KeysRequest& r, absl::Span<DeleteResult> out,
           StopCheck stop) { return f.DeleteBatch(r.keys, out, stop); },
        wire::DeleteResponse);
  });
}

grpc::ServerUnaryReactor* FilterServiceImpl::Count(grpc::CallbackServerContext* ctx,
                                                   const grpc::ByteBuffer* req,
                                                   grpc::ByteBuffer* resp) {
  return Run(RpcMethod::kCount, [&] {
    return DataPath<uint32_t>(
        RpcMethod::kCount, ctx, *req, "CountRequest", resp,
        [](const CuckooFilter& f, const wire::KeysRequest& r, absl::Span<uint32_t> out, StopCheck) {
          f.CountBatch(r.keys, out);
          return r.keys.size();
        },
        wire::CountResponse);
  });
}

grpc::ServerUnaryReactor* FilterServiceImpl::Snapshot(grpc::CallbackServerContext*,
                                                      const v1::SnapshotRequest* req,
                                                      v1::SnapshotResponse* resp) {
  bool accepted;
  CallReactor* reactor = Accept(RpcMethod::kSnapshot, &accepted);
  if (!accepted) return reactor;
  if (!req->filter().empty()) {
    // As in DropFilter: unknown names never take a place in the queue.
    if (absl::StatusOr<std::shared_ptr<CuckooFilter>> f = FindFilter(req->filter()); !f.ok()) {
      reactor->Done(ToGrpcStatus(f.status()));
      return reactor;
    }
  }
  // gRPC keeps req and resp alive until the reactor finishes.
  persistence_->SnapshotAsync(req->filter(), req->changed_only(),
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
  return reactor;
}

grpc::ServerUnaryReactor* FilterServiceImpl::GetServerInfo(grpc::CallbackServerContext*,
                                                           const v1::GetServerInfoRequest*,
                                                           v1::GetServerInfoResponse* resp) {
  return Run(RpcMethod::kGetServerInfo, [&] { return DoGetServerInfo(resp); });
}

}  // namespace cuckoo::server
