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

template <typename Body>
grpc::ServerUnaryReactor* FilterServiceImpl::RunDataPath(RpcMethod method, Body body) {
  bool accepted;
  CallReactor* reactor = Accept(method, &accepted);
  if (!accepted) return reactor;
  uint64_t lsn = 0;
  const absl::Status s = Guarded([&] { return body(&lsn); });
  if (!s.ok() || lsn == 0) {
    reactor->Done(ToGrpcStatus(s));
    return reactor;
  }
  // A write is answered once its log records are durable (per
  // --durability): by the log's committer thread, or here if they are
  // already. The call stays in flight until then, so shutdown waits for it.
  persistence_->wal()->WhenDurable(
      lsn, [reactor](absl::Status durable) { reactor->Done(ToGrpcStatus(durable)); });
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
                                         grpc::ByteBuffer* response, Apply apply, Encode encode,
                                         uint64_t* wait_lsn) {
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
  // Writes reserve room in the log before they touch the filter (a full
  // disk refuses the batch, applying nothing), and log each shard's part as
  // it is applied.
  Wal* wal =
      method == RpcMethod::kInsert || method == RpcMethod::kDelete ? persistence_->wal() : nullptr;
  uint64_t reserved = 0;
  if (wal != nullptr) {
    reserved = WalBytesForBatch(req.keys.size(), (*filter)->shape().shards);
    if (absl::Status r = wal->Reserve(reserved); !r.ok()) return r;
  }
  struct Unreserve {
    Wal* wal;
    uint64_t bytes;
    ~Unreserve() {
      if (wal != nullptr) wal->Unreserve(bytes);
    }
  } unreserve{wal, reserved};
  const uint64_t filter_id = (*filter)->id();
  uint64_t last_lsn = 0;
  auto append = [&](const ShardWrite& w) { return last_lsn = wal->AppendShardWrite(filter_id, w); };
  const WriteLog log(append);
  const size_t applied =
      apply(**filter, req, results.span(), stop, wal != nullptr ? &log : nullptr);
  *wait_lsn = last_lsn;
  if (applied < req.keys.size()) {
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
  if (const Wal* wal = persistence_->wal(); wal != nullptr) {
    resp->set_durability(std::string(DurabilityName(wal->options().durability)));
    SetDuration(wal->options().sync_interval, resp->mutable_wal_sync_interval());
  }
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
  return RunDataPath(RpcMethod::kInsert, [&](uint64_t* lsn) {
    return DataPath<InsertResult>(
        RpcMethod::kInsert, ctx, *req, "InsertRequest", resp,
        [](CuckooFilter& f, const wire::KeysRequest& r, absl::Span<InsertResult> out,
           StopCheck stop, const WriteLog* log) {
          return log != nullptr ? f.InsertBatch(r.keys, r.if_absent, out, stop, *log)
                                : f.InsertBatch(r.keys, r.if_absent, out, stop);
        },
        wire::InsertResponse, lsn);
  });
}

grpc::ServerUnaryReactor* FilterServiceImpl::Lookup(grpc::CallbackServerContext* ctx,
                                                    const grpc::ByteBuffer* req,
                                                    grpc::ByteBuffer* resp) {
  return RunDataPath(RpcMethod::kLookup, [&](uint64_t* lsn) {
    return DataPath<bool>(
        RpcMethod::kLookup, ctx, *req, "LookupRequest", resp,
        [](const CuckooFilter& f, const wire::KeysRequest& r, absl::Span<bool> out, StopCheck,
           const WriteLog*) {
          f.LookupBatch(r.keys, out);
          return r.keys.size();
        },
        wire::LookupResponse, lsn);
  });
}

grpc::ServerUnaryReactor* FilterServiceImpl::Delete(grpc::CallbackServerContext* ctx,
                                                    const grpc::ByteBuffer* req,
                                                    grpc::ByteBuffer* resp) {
  return RunDataPath(RpcMethod::kDelete, [&](uint64_t* lsn) {
    return DataPath<DeleteResult>(
        RpcMethod::kDelete, ctx, *req, "DeleteRequest", resp,
        [](CuckooFilter& f, const wire::KeysRequest& r, absl::Span<DeleteResult> out,
           StopCheck stop, const WriteLog* log) {
          return log != nullptr ? f.DeleteBatch(r.keys, out, stop, *log)
                                : f.DeleteBatch(r.keys, out, stop);
        },
        wire::DeleteResponse, lsn);
  });
}

grpc::ServerUnaryReactor* FilterServiceImpl::Count(grpc::CallbackServerContext* ctx,
                                                   const grpc::ByteBuffer* req,
                                                   grpc::ByteBuffer* resp) {
  return RunDataPath(RpcMethod::kCount, [&](uint64_t* lsn) {
    return DataPath<uint32_t>(
        RpcMethod::kCount, ctx, *req, "CountRequest", resp,
        [](const CuckooFilter& f, const wire::KeysRequest& r, absl::Span<uint32_t> out, StopCheck,
           const WriteLog*) {
          f.CountBatch(r.keys, out);
          return r.keys.size();
        },
        wire::CountResponse, lsn);
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
