// Applying what the stream delivers, in position order, to the filters,
// and waking what waits for a position.
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_format.h"
#include "absl/strings/string_view.h"
#include "server/cluster/cluster_internal.h"
#include "server/cluster/log_digest.h"
#include "spdlog/spdlog.h"

namespace cuckoo::server {

void OnMessageTrampoline(natsConnection*, natsSubscription*, natsMsg* msg, void* closure) {
  static_cast<Cluster*>(closure)->HandleMessage(msg);
  natsMsg_Destroy(msg);
}

bool Cluster::ContinuesThisReplicasCopy(const std::string& consumer, uint64_t position, void* m) {
  natsMsg* msg = static_cast<natsMsg*>(m);
  MutexLock lock(&mu_);
  if (recheck_consumer_) return false;  // Made again by the maintenance thread.
  if (consumer != delivering_consumer_) {
    if (!expect_new_consumer_) {
      // The ordered consumer made itself again (a gap, or its NATS server
      // lost), from the next position, on whichever server: nothing tells
      // whether that server's copy numbers the stream as the last one did.
      // Made again, with the check, by the maintenance thread.
      spdlog::info(
          "cluster: the stream's consumer was made again by the NATS client at position {}; "
          "making one that checks the copy it reads first",
          position);
      recheck_consumer_ = true;
      return false;
    }
    expect_new_consumer_ = false;
    delivering_consumer_ = consumer;
  }
  if (!continuity_.has_value()) return true;
  if (position > continuity_->position) {
    continuity_.reset();  // The copy no longer holds that position: nothing to check.
    return true;
  }
  if (position < continuity_->position) return true;  // Applied already.
  const uint64_t hash = LogEntryHash(
      absl::string_view(natsMsg_GetData(msg), static_cast<size_t>(natsMsg_GetDataLength(msg))));
  const uint64_t want = continuity_->digest;
  continuity_.reset();
  if (hash == want) {
    continuity_failures_ = 0;
    return true;
  }
  ++continuity_failures_;
  spdlog::warn(
      "cluster: the NATS server this replica's new consumer reads holds another entry at "
      "position {} than the one this replica applied there: its copy of the stream numbers the "
      "entries differently (docs/CLUSTER.md, \"nats-server 2.9.10\"); consuming from another "
      "server (try {} of {})",
      position, continuity_failures_, kMaxContinuityFailures);
  recheck_consumer_ = true;
  return false;
}

void Cluster::HandleMessage(void* m) {
  natsMsg* msg = static_cast<natsMsg*>(m);
  jsMsgMetaData* meta = nullptr;
  if (natsMsg_GetMetaData(&meta, msg) != NATS_OK) {
    spdlog::warn("cluster: a delivered message without JetStream metadata; ignored");
    return;
  }
  const uint64_t position = meta->Sequence.Stream;
  const uint64_t pending_after = meta->NumPending;
  const std::string consumer = meta->Consumer != nullptr ? meta->Consumer : "";
  jsMsgMetaData_Destroy(meta);
  MutexLock apply(&apply_mu_);
  if (stopping_.load(std::memory_order_acquire)) return;
  const uint64_t applied = applied_.load(std::memory_order_acquire);
  if (!ContinuesThisReplicasCopy(consumer, position, msg)) return;
  if (position <= applied) return;  // Delivered again (the consumer was recreated).
  if (position != applied + 1) {
    SetProblem(absl::StrFormat(
        "the stream no longer holds positions %u to %u, which this replica needs (it was away "
        "longer than the stream keeps entries, or the stream was purged): it serves reads as of "
        "position %u and applies nothing more; start it with an empty --data-dir to rebuild it "
        "from the stream, or from a copy of another replica's data directory",
        applied + 1, position - 1, applied));
    return;
  }
  const absl::string_view bytes(natsMsg_GetData(msg), natsMsg_GetDataLength(msg));
  const uint64_t entry_hash = LogEntryHash(bytes);
  absl::StatusOr<LogEntry> entry = DecodeLogEntry(bytes);
  WriteResult out;
  if (!entry.ok()) {
    if (absl::IsFailedPrecondition(entry.status())) {
      SetProblem(
          absl::StrFormat("cannot apply position %u: %s", position, entry.status().message()));
      return;
    }
    // Not cuckood's (someone published to the subject), or damaged: every
    // replica skips it alike.
    spdlog::error("cluster: skipped position {}: {}", position,
                  std::string(entry.status().message()));
    out.status = entry.status();
  } else {
    ApplyEntry(*entry, position, &out);
  }
  const char* id = nullptr;
  natsMsgHeader_Get(msg, kMsgIdHeader, &id);
  // Every entry passes here: its arguments are built only when asked for.
  if (entry.ok() && spdlog::should_log(spdlog::level::debug)) {
    spdlog::debug("applied position {}: {} {} ({} keys), message id {}", position,
                  std::string(LogEntryTypeName(entry->type)),
                  FilterRegistry::QuoteName(entry->name), entry->hashes.size(),
                  id != nullptr ? id : "-");
  }
  MutexLock lock(&mu_);
  applied_.store(position, std::memory_order_release);
  ++entries_applied_;
  // The end-to-end check: a new consumer (a restart, a NATS server lost, a
  // bootstrap) may read another server's copy of the stream, so this
  // replica serves nothing more until a majority agrees with it at or past
  // here (CheckServing).
  if (consumer != consumer_name_) {
    consumer_name_ = consumer;
    consumer_from_ = position;
    spdlog::info("cluster: consumer {} applies the stream from position {}", consumer, position);
  }
  if (digest_.has_value()) {
    digest_ = NextLogDigest(*digest_, position, entry_hash);
    history_.Add(position, *digest_, entry_hash);
  } else if (anchor_.has_value() && anchor_->position == position) {
    digest_ = anchor_->digest;
    history_.Add(position, *digest_, entry_hash);
    anchor_.reset();
  }
  lag_hint_ = pending_after;
  if (id != nullptr) {
    const std::string msg_id(id);
    auto it = pending_.find(msg_id);
    if (it != pending_.end()) {
      for (PendingEntry& e : it->second) {
        if (e.applied) continue;
        e.applied = true;
        e.outcome = out;
        if (!e.acked) e.position = position;
      }
    }
    if (absl::StartsWith(msg_id, "r/")) RememberLocked(msg_id, position, out);
    SettleLocked(msg_id);
  }
  for (auto w = waiters_.begin(); w != waiters_.end() && w->first <= position;) {
    completions_.push_back([fn = std::move(w->second.second)] { fn(absl::OkStatus()); });
    w = waiters_.erase(w);
  }
  work_cv_.notify_all();
}

void Cluster::ApplyEntry(const LogEntry& e, uint64_t position, WriteResult* out) {
  absl::StatusOr<std::shared_ptr<CuckooFilter>> filter = registry_->Get(e.name);
  switch (e.type) {
    case LogEntryType::kCreateFilter: {
      if (filter.ok()) {
        if ((*filter)->id() != position) {
          out->status = absl::AlreadyExistsError(
              absl::StrFormat("filter \"%s\" already exists (created at log position %u)",
                              absl::CHexEscape(e.name), (*filter)->id()));
        }
        return;  // Else: loaded from a snapshot taken after this entry.
      }
      if (absl::Status room = registry_->CheckRoom(e.name, CuckooFilter::MemoryBytes(e.shape));
          !room.ok()) {
        out->status = room;
        if (room.code() == absl::StatusCode::kResourceExhausted) {
          spdlog::error(
              "cluster: filter {} (log position {}) does not fit this replica ({}): writes to it "
              "are refused here; give every replica the same --memory-budget and --max-filters",
              FilterRegistry::QuoteName(e.name), position, std::string(room.message()));
        }
        return;
      }
      absl::StatusOr<std::unique_ptr<CuckooFilter>> created = CuckooFilter::FromShape(e.shape);
      if (!created.ok()) {
        out->status = created.status();
        return;
      }
      (*created)->set_id(position);
      absl::StatusOr<std::shared_ptr<CuckooFilter>> added =
          registry_->Add(e.name, *std::move(created));
      if (!added.ok()) {
        out->status = added.status();
        return;
      }
      out->created = true;
      spdlog::info(
          "created filter {} at log position {}: capacity {}, fingerprint_bits {}, {} "
          "table, shards {}, {} bytes",
          FilterRegistry::QuoteName(e.name), position, e.shape.capacity, e.shape.fingerprint_bits,
          TableKindName(e.shape.table_kind), e.shape.shards, (*added)->memory_bytes());
      return;
    }
    case LogEntryType::kDropFilter:
      if (!filter.ok() || (*filter)->id() != e.filter_id) {
        out->status = absl::NotFoundError(
            absl::StrFormat("filter \"%s\" not found: dropped already", absl::CHexEscape(e.name)));
        return;
      }
      out->freed_bytes = (*filter)->memory_bytes();
      spdlog::info("dropped filter {} at log position {}: {} items, {} bytes freed",
                   FilterRegistry::QuoteName(e.name), position, (*filter)->items(),
                   out->freed_bytes);
      persistence_->ApplyDrop(e.name, *filter);
      return;
    case LogEntryType::kSetExpiry:
      // Set whatever the clock says: the drop when it passes is an entry
      // of its own (FilterServiceImpl's expiry timer publishes it).
      if (!filter.ok() || (*filter)->id() != e.filter_id) {
        out->status = absl::NotFoundError(
            absl::StrFormat("filter \"%s\" not found: dropped before its expiry was applied",
                            absl::CHexEscape(e.name)));
        return;
      }
      (*filter)->set_expire_at(e.expire_at);
      return;
    case LogEntryType::kRenameFilter: {
      // Every replica decides from what it holds at this position alone:
      // the source must still be the filter the entry names, and the
      // destination free or the filter it replaces (if it has since been
      // dropped, the rename applies; if another filter took the name since
      // the rename was published, it applies to nothing).
      if (!filter.ok() || (*filter)->id() != e.filter_id) {
        out->status = absl::NotFoundError(absl::StrFormat(
            "filter \"%s\" not found: it was dropped or renamed before this rename was applied",
            absl::CHexEscape(e.name)));
        return;
      }
      if (e.name == e.new_name) return;
      absl::StatusOr<std::shared_ptr<CuckooFilter>> dest = registry_->Get(e.new_name);
      if (dest.ok() && (e.replaced_id == 0 || (*dest)->id() != e.replaced_id)) {
        out->status =
            e.replace
                ? absl::AbortedError(absl::StrFormat(
                      "filter \"%s\" was created again (at log position %u) while this rename "
                      "was published; nothing was renamed: retry",
                      absl::CHexEscape(e.new_name), (*dest)->id()))
                : absl::AlreadyExistsError(
                      absl::StrFormat("filter \"%s\" already exists (created at log position %u)",
                                      absl::CHexEscape(e.new_name), (*dest)->id()));
        return;
      }
      std::shared_ptr<CuckooFilter> replaced;
      if (absl::Status s = persistence_->ApplyRename(e.name, e.new_name, *filter, &replaced);
          !s.ok()) {
        out->status = s;
        return;
      }
      out->replaced = replaced != nullptr;
      out->freed_bytes = replaced != nullptr ? replaced->memory_bytes() : 0;
      spdlog::info("renamed filter {} to {} at log position {}{}",
                   FilterRegistry::QuoteName(e.name), FilterRegistry::QuoteName(e.new_name),
                   position, replaced != nullptr ? " (replacing the filter of that name)" : "");
      return;
    }
    case LogEntryType::kInsert:
    case LogEntryType::kDelete: {
      if (!filter.ok() || (*filter)->id() != e.filter_id) {
        out->status = absl::NotFoundError(
            absl::StrFormat("filter \"%s\" not found: it was dropped before this write was applied",
                            absl::CHexEscape(e.name)));
        return;
      }
      // Any 64-bit value is a valid hash for any filter (the shard and
      // bucket are taken from its bits within range), so a hostile entry
      // can add or remove fingerprints but never reach outside the tables.
      out->results.resize(e.hashes.size());
      if (e.type == LogEntryType::kInsert) {
        std::vector<InsertResult> r(e.hashes.size());
        (*filter)->InsertHashedAt(e.hashes, e.if_absent, absl::MakeSpan(r), position);
        for (size_t i = 0; i < r.size(); ++i) out->results[i] = static_cast<uint8_t>(r[i]);
      } else {
        std::vector<DeleteResult> r(e.hashes.size());
        (*filter)->DeleteHashedAt(e.hashes, absl::MakeSpan(r), position);
        for (size_t i = 0; i < r.size(); ++i) out->results[i] = static_cast<uint8_t>(r[i]);
      }
      return;
    }
  }
}

void Cluster::WhenApplied(uint64_t position, absl::Time deadline,
                          std::function<void(absl::Status)> fn) {
  // Positions come from the stream's leader's acknowledgements; this
  // replica's copy may number them further on (MaintainStream).
  position += position_shift_.load(std::memory_order_acquire);
  if (applied_.load(std::memory_order_acquire) >= position) {
    fn(absl::OkStatus());
    return;
  }
  MutexLock lock(&mu_);
  if (applied_.load(std::memory_order_acquire) >= position) {
    completions_.push_back([fn = std::move(fn)] { fn(absl::OkStatus()); });
    work_cv_.notify_all();
    return;
  }
  if (stopping_.load()) {
    completions_.push_back(
        [fn = std::move(fn)] { fn(absl::UnavailableError("cuckood is shutting down")); });
    work_cv_.notify_all();
    return;
  }
  waiters_.emplace(position, std::make_pair(deadline, std::move(fn)));
}

}  // namespace cuckoo::server
