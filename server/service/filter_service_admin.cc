// The admin methods: CreateFilter, DropFilter, GetFilter, ListFilters,
// GetServerInfo and Snapshot.
#include <memory>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/time.h"
#include "base/guarded.h"
#include "cuckoo_version.h"
#include "server/cluster/log_entry.h"
#include "server/service/filter_service.h"
#include "server/service/filter_service_internal.h"
#include "server/service/status.h"
#include "server/wal/wal_format.h"
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
  info->set_grow_on_repeats(shape.grow_on_repeats);
  if (const int64_t at = filter.expire_at(); at != 0) SetExpireAt(at, info->mutable_expire_at());
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

absl::Status FilterServiceImpl::DoCreateFilter(const v1::CreateFilterRequest& req,
                                               v1::CreateFilterResponse* resp, CallReactor* reactor,
                                               Next* next) {
  if (absl::Status a =
          Authorize(reactor->caller(), RpcMethod::kCreateFilter, req.name(), reactor->ctx());
      !a.ok()) {
    return a;
  }
  if (absl::Status c = ClusterServing(next); !c.ok() || next->wait_serving) return c;
  reactor->MarkAudited(req.name());
  int64_t expire_at = 0;
  if (req.has_expire_at()) {
    absl::StatusOr<int64_t> at = ExpireAtMillis(req.expire_at(), "expire_at");
    if (!at.ok()) return at.status();
    if (*at <= registry_->NowMs()) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "expire_at %s is not in the future",
          absl::FormatTime(absl::RFC3339_full, absl::FromUnixMillis(*at), absl::UTCTimeZone())));
    }
    expire_at = *at;
  }
  // An expired filter of the name is gone for clients: its logged drop
  // first, then the creation (Continue runs this body again).
  if (absl::StatusOr<std::shared_ptr<CuckooFilter>> old = registry_->Get(req.name());
      old.ok() && registry_->Expired(**old)) {
    next->expired = *old;
    next->expired_name = req.name();
    return absl::OkStatus();
  }
  FilterOptions options{.capacity = req.capacity(),
                        .false_positive_rate = req.false_positive_rate(),
                        .fingerprint_bits = req.fingerprint_bits(),
                        .bucket_size = req.bucket_size(),
                        .shards = req.shards(),
                        .max_kicks = req.max_kicks(),
                        .growth_factor = req.growth_factor(),
                        .max_capacity = req.max_capacity(),
                        .grow_on_repeats = req.grow_on_repeats()};
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
        [this, reactor, &req, resp, shape = *shape, expire_at](Cluster::WriteResult r) {
          bool handed_on = false;  // To the expiry's publish, which answers.
          const absl::Status status = Guarded([&]() -> absl::Status {
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
            if (expire_at != 0 && r.created) {
              // The expiry is an entry of its own, naming the new filter's
              // id (its creation's position), published once that is known:
              // answered when both are applied. A failure between the two
              // leaves the filter without an expiry, and the call answered
              // with the error (docs/CLUSTER.md).
              cluster_->Publish({EncodeSetExpiryEntry((*made)->id(), req.name(), expire_at)}, "",
                                [this, reactor, &req, resp, made = *made](Cluster::WriteResult e) {
                                  reactor->Done(ToGrpcStatus(Guarded([&]() -> absl::Status {
                                    if (!e.status.ok()) return e.status;
                                    FillFilterInfo(req.name(), *made,
                                                   persistence_->Record(req.name(), *made),
                                                   resp->mutable_filter());
                                    resp->set_created(true);
                                    resp->set_log_position(e.position);
                                    return absl::OkStatus();
                                  })));
                                });
              handed_on = true;
              return absl::OkStatus();
            }
            FillFilterInfo(req.name(), **made, persistence_->Record(req.name(), **made),
                           resp->mutable_filter());
            resp->set_created(r.created);
            resp->set_log_position(r.position);
            return absl::OkStatus();
          });
          if (!handed_on) reactor->Done(ToGrpcStatus(status));
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
  const uint64_t expiry_reserved = wal != nullptr && expire_at != 0 ? kWalSetExpiryBytes : 0;
  if (expiry_reserved != 0) {
    if (absl::Status s = wal->Reserve(expiry_reserved); !s.ok()) {
      wal->Unreserve(reserved);
      return s;
    }
  }
  absl::StatusOr<std::shared_ptr<CuckooFilter>> filter =
      registry_->Create(req.name(), options, req.if_not_exists(), &created, [&](CuckooFilter& f) {
        if (absl::Status s = persistence_->LogCreate(req.name(), f, &lsn); !s.ok()) return s;
        if (expire_at == 0) return absl::OkStatus();
        // Right after its creation record, before the filter is published
        // (no other change of it can come between). Answered once both are
        // durable; a crash that keeps the creation and tears off the
        // expiry record leaves a filter without expiry that was never
        // acknowledged (docs/WAL_FORMAT.md).
        f.set_expire_at(expire_at);
        if (wal != nullptr) lsn = wal->AppendSetExpiry(f.id(), expire_at);
        return absl::OkStatus();
      });
  if (expiry_reserved != 0) wal->Unreserve(expiry_reserved);
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
        FilterRegistry::QuoteName(req.name()), s.capacity, s.fingerprint_bits, s.bucket_size,
        TableKindName(s.table_kind), s.shards, (*filter)->memory_bytes(),
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
  if (absl::Status c = ClusterServing(next); !c.ok() || next->wait_serving) return c;
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
          spdlog::info("dropped filter {}: {} items, {} bytes freed",
                       FilterRegistry::QuoteName(req.name()), (*filter)->items(),
                       (*filter)->memory_bytes());
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

absl::Status FilterServiceImpl::DoRenameFilter(const v1::RenameFilterRequest& req,
                                               v1::RenameFilterResponse* resp, CallReactor* reactor,
                                               Next* next) {
  // A rename drops the old name and creates (or replaces) the new one: the
  // admin grant, which creating and dropping need, on both names.
  for (const std::string* name : {&req.name(), &req.new_name()}) {
    if (absl::Status a =
            Authorize(reactor->caller(), RpcMethod::kRenameFilter, *name, reactor->ctx());
        !a.ok()) {
      return a;
    }
  }
  if (absl::Status c = ClusterServing(next); !c.ok() || next->wait_serving) return c;
  reactor->MarkAudited(req.name());
  if (absl::Status s = FilterRegistry::ValidateName(
          absl::string_view(req.new_name().data(), req.new_name().size()));
      !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("new_name: ", s.message()));
  }
  // As in DropFilter: unknown names never take a place in the queue.
  absl::StatusOr<std::shared_ptr<CuckooFilter>> found = FindFilter(req.name());
  if (!found.ok()) return found.status();
  // A destination past its expiry is gone for clients (RENAMENX takes its
  // name, as Redis's does): the rename replaces it, which drops it in the
  // same record, as its own expiry drop would have.
  bool replace = req.replace();
  if (!replace && req.name() != req.new_name()) {
    absl::StatusOr<std::shared_ptr<CuckooFilter>> dest =
        registry_->Get(absl::string_view(req.new_name().data(), req.new_name().size()));
    replace = dest.ok() && registry_->Expired(**dest);
  }
  if (cluster_ != nullptr) {
    // One entry; every replica applies it at its position (ApplyEntry),
    // checking there that the destination still holds what it holds here.
    const absl::string_view new_name(req.new_name().data(), req.new_name().size());
    uint64_t replaced_id = 0;
    if (req.name() != req.new_name()) {
      if (absl::StatusOr<std::shared_ptr<CuckooFilter>> dest = registry_->Get(new_name);
          dest.ok()) {
        if (!replace) {
          return absl::AlreadyExistsError(
              absl::StrFormat("filter %s already exists", FilterRegistry::QuoteName(new_name)));
        }
        replaced_id = (*dest)->id();
      }
    }
    next->answered = true;
    cluster_->Publish(
        {EncodeRenameEntry((*found)->id(), req.name(), req.new_name(), replaced_id, replace)}, "",
        [reactor, resp](Cluster::WriteResult r) {
          if (r.status.ok()) {
            resp->set_log_position(r.position);
            resp->set_replaced(r.replaced);
            resp->set_replaced_freed_bytes(r.freed_bytes);
          }
          reactor->Done(ToGrpcStatus(r.status));
        });
    return absl::OkStatus();
  }
  if (persistence_ == nullptr) {
    return absl::FailedPreconditionError("RenameFilter needs the server's persistence");
  }
  next->answered = true;
  // On the persistence thread, as a drop: the rename is logged, then the
  // file follows the name. gRPC keeps req and resp alive until the reactor
  // finishes.
  persistence_->RenameAsync(req.name(), req.new_name(), replace,
                            std::weak_ptr<CuckooFilter>(*found),
                            [this, reactor, resp](absl::StatusOr<RenameResult> r) {
                              const absl::Status status = Guarded([&]() -> absl::Status {
                                if (!r.ok()) return r.status();
                                resp->set_log_position(r->lsn != 0 ? r->lsn : AppliedPosition());
                                resp->set_replaced(r->replaced != nullptr);
                                if (r->replaced != nullptr)
                                  resp->set_replaced_freed_bytes(r->replaced->memory_bytes());
                                return absl::OkStatus();
                              });
                              // The replaced filter's last reference goes before the answer
                              // (unless a running call still holds it), as in DropFilter.
                              if (r.ok()) *r = RenameResult{};
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
  if (absl::Status c = ClusterServing(next); !c.ok() || next->wait_serving) return c;
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
  if (absl::Status c = ClusterServing(next); !c.ok() || next->wait_serving) return c;
  if (absl::Status m = CheckMinPosition(req.min_log_position(), next);
      !m.ok() || next->min_position != 0) {
    return m;
  }
  const uint64_t position = AppliedPosition();
  // Only the filters the caller may read: the others' names are not its
  // business.
  const Caller& caller = reactor->caller();
  for (const auto& [name, filter] : registry_->ListLive()) {
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
    c->set_log_check(st.digest_state);
    c->set_log_digest_known(st.digest_known);
    c->set_log_digest(st.digest);
    c->set_log_digest_position(st.digest_position);
    c->set_verified_log_position(st.verified_position);
    c->set_digest_replicas(static_cast<uint32_t>(st.digest_voters));
    c->set_consumer_from_position(st.consumer_from);
    c->set_divergences(st.divergences);
    // Acknowledged in the stream, so durable on its replicas.
    resp->set_durability("cluster");
  }
  return absl::OkStatus();
}

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
