// Writing snapshots, imports and drops, and the records of what each
// filter's last snapshot holds.
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <system_error>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "base/guarded.h"
#include "base/units.h"
#include "server/storage/persistence.h"
#include "server/storage/persistence_internal.h"
#include "spdlog/spdlog.h"

namespace cuckoo::server {
using persistence_internal::Ms;

absl::StatusOr<std::shared_ptr<CuckooFilter>> Persistence::ImportNow(
    FilterRegistry::Claim claim, std::unique_ptr<CuckooFilter> filter, SnapshotWriteResult* written,
    uint64_t* lsn) {
  const std::string name = claim.name();
  MutexLock file_lock(&file_mu_);
  if (wal_ == nullptr || external_log_ != nullptr) {
    return absl::FailedPreconditionError(
        "import needs the write-ahead log of a single node (this server has none)");
  }
  if (options_.before_file_operation) options_.before_file_operation("import", name);
  // Room for the creation record first: a full disk refuses the import
  // before anything is written.
  const uint64_t reserved = WalCreateFilterBytes(name) + kWalDropFilterBytes;
  if (absl::Status s = wal_->Reserve(reserved); !s.ok()) return s;
  struct Unreserve {
    Wal* wal;
    uint64_t bytes;
    ~Unreserve() { wal->Unreserve(bytes); }
  } unreserve{wal_.get(), reserved};
  // 1. The file, before the log knows the filter (see persistence.h). No
  // creation of this name can be logged after `floor`: the claim holds it.
  const uint64_t floor = wal_->AppendedLsn();
  filter->set_id(0);
  filter->SetShardPositionsForLoad(floor);
  absl::StatusOr<SnapshotWriteResult> w =
      WriteSnapshotFile(*filter, name, data_dir_,
                        {.buffer_bytes = options_.snapshot_buffer_bytes,
                         .log_identity = RecordedLogIdentity(),
                         .env = options_.wal.env});
  if (!w.ok()) {
    if (options_.on_snapshot_written) options_.on_snapshot_written(false, 0, absl::ZeroDuration());
    return w.status();  // The previous state: no file (WriteSnapshotFile removed its own).
  }
  if (options_.on_snapshot_written) options_.on_snapshot_written(true, w->bytes, w->duration);
  if (options_.before_file_operation) {
    options_.before_file_operation("import-file-written", name);
  }
  // 2. The creation, durable whatever the mode.
  const uint64_t created = wal_->AppendCreateFilter(name, filter->shape());
  if (absl::Status s = wal_->SyncTo(created); !s.ok()) {
    // The log failed, and the process exits (WalOptions::on_failure). The
    // file stays: whether or not the record reached the disk, the restart
    // has the whole filter (removing the file could leave the record alone,
    // an empty filter).
    return s;
  }
  filter->set_id(created);
  if (options_.before_file_operation) options_.before_file_operation("import-logged", name);
  // 3. Visible. The claim keeps the name and memory, so only an allocation
  // failure can get in the way; then the creation is undone.
  absl::StatusOr<std::shared_ptr<CuckooFilter>> added =
      Guarded([&] { return registry_->AddClaimed(std::move(claim), std::move(filter)); });
  if (!added.ok()) {
    const uint64_t dropped = wal_->AppendDropFilter(created);
    if (wal_->SyncTo(dropped).ok()) (void)RemoveSnapshotFile(name);
    return added.status();
  }
  SetRecord(name, *added,
            {.exists = true,
             .time = w->taken,
             .bytes = w->bytes,
             .changes = w->changes,
             .filter_id = 0,  // What the file records: rewritten at the next snapshot.
             .min_position = floor});
  *written = *std::move(w);
  *lsn = created;
  return added;
}

absl::Status Persistence::RemoveSnapshotFile(absl::string_view name) {
  std::string legacy;
  {
    MutexLock lock(&legacy_mu_);
    if (auto it = legacy_files_.find(name); it != legacy_files_.end()) {
      legacy = it->second;
      legacy_files_.erase(it);
    }
  }
  for (const std::string& path : {SnapshotPath(data_dir_, name), legacy}) {
    if (path.empty()) continue;
    if (::unlink(path.c_str()) != 0 && errno != ENOENT) {
      return absl::InternalError(absl::StrFormat(
          "remove %s: %s", path, std::error_code(errno, std::generic_category()).message()));
    }
  }
  ::unlink(SnapshotTempPath(data_dir_, name).c_str());
  return options_.sync_directory ? options_.sync_directory(data_dir_)
                                 : SyncSnapshotDirectory(data_dir_, options_.wal.env);
}

absl::Status Persistence::RemoveLegacyFile(absl::string_view name) {
  std::string path;
  {
    MutexLock lock(&legacy_mu_);
    auto it = legacy_files_.find(name);
    if (it == legacy_files_.end()) return absl::OkStatus();
    path = it->second;
  }
  // The new file is durable (WriteSnapshotFile synced the directory): a
  // crash from here leaves both, and start-up keeps the new one.
  if (::unlink(path.c_str()) != 0 && errno != ENOENT) {
    return absl::InternalError(absl::StrFormat(
        "remove %s: %s", path, std::error_code(errno, std::generic_category()).message()));
  }
  if (absl::Status s = options_.sync_directory ? options_.sync_directory(data_dir_)
                                               : SyncSnapshotDirectory(data_dir_, options_.wal.env);
      !s.ok()) {
    return s;
  }
  MutexLock lock(&legacy_mu_);
  legacy_files_.erase(name);
  spdlog::info("filter {} is in {} now: removed {}, the file an older build named after it",
               FilterRegistry::QuoteName(name), SnapshotPath(data_dir_, name), path);
  return absl::OkStatus();
}

std::string Persistence::LoadedPath(absl::string_view name) {
  MutexLock lock(&legacy_mu_);
  auto it = legacy_files_.find(name);
  return it != legacy_files_.end() ? it->second : SnapshotPath(data_dir_, name);
}

void Persistence::SetRecord(absl::string_view name, const std::shared_ptr<CuckooFilter>& filter,
                            const SnapshotRecord& record, std::vector<uint64_t> bounds) {
  MutexLock lock(&records_mu_);
  records_[name] = Entry{.filter = filter, .record = record, .bounds = std::move(bounds)};
}

bool Persistence::UntouchedSinceSnapshot(absl::string_view name, const CuckooFilter& filter) const {
  // Every entry up to an lsn read before this call was appended inside its
  // shard's write section, so it is applied, and the shard's position is
  // at least its lsn, once the shard's lock is taken here.
  const std::vector<uint64_t> positions = filter.ShardPositions();
  MutexLock lock(&records_mu_);
  auto it = records_.find(name);
  if (it == records_.end() || it->second.filter.lock().get() != &filter) return false;
  const std::vector<uint64_t>& bounds = it->second.bounds;
  if (bounds.size() != positions.size()) return false;
  for (size_t i = 0; i < positions.size(); ++i) {
    if (positions[i] > bounds[i]) return false;
  }
  return true;
}

SnapshotRecord Persistence::Record(absl::string_view name, const CuckooFilter& filter) const {
  MutexLock lock(&records_mu_);
  auto it = records_.find(name);
  if (it == records_.end() || it->second.filter.lock().get() != &filter) return {};
  return it->second.record;
}

absl::StatusOr<SnapshotRun> Persistence::SnapshotNow(absl::string_view name, bool changed_only) {
  const absl::Time start = absl::Now();
  std::vector<std::pair<std::string, std::shared_ptr<CuckooFilter>>> filters;
  if (name.empty()) {
    filters = registry_->List();
  } else {
    absl::StatusOr<std::shared_ptr<CuckooFilter>> f = registry_->Get(name);
    if (!f.ok()) return f.status();
    filters.emplace_back(std::string(name), *std::move(f));
  }
  SnapshotRun run;
  absl::Status first_error;
  for (auto& [filter_name, filter] : filters) {
    if (changed_only) {
      const SnapshotRecord r = Record(filter_name, *filter);
      // An imported filter's first file records no id (see ImportNow): it
      // is written again, so that the log can be truncated past its
      // creation.
      if (r.exists && r.UnsnapshottedChanges(*filter) == 0 && r.filter_id == filter->id()) {
        run.unchanged.push_back(filter_name);
        continue;
      }
    }
    MutexLock file_lock(&file_mu_);
    // Still the filter of that name? Drops also hold file_mu_, so it stays
    // so until the file is written: a dropped filter's file never comes
    // back, and a new filter's is never written as the old one's.
    absl::StatusOr<std::shared_ptr<CuckooFilter>> current = registry_->Get(filter_name);
    if (!current.ok() || current->get() != filter.get()) {
      if (name.empty()) continue;  // Dropped since the list was taken.
      return absl::NotFoundError(absl::StrFormat(
          "filter \"%s\" was dropped before its snapshot was written", absl::CHexEscape(name)));
    }
    if (options_.before_file_operation) options_.before_file_operation("write", filter_name);
    // A snapshot replaces the old one only once every log record it holds
    // is durable: after a crash the filter is then always a prefix of its
    // log, whatever the durability mode.
    SnapshotWriteOptions write_options{
        .buffer_bytes = options_.snapshot_buffer_bytes,
        .before_commit =
            [this](const SnapshotWriteResult& r) {
              // The creation record too (a filter never written has positions
              // 0); with the floor below, the log up to the floor.
              return wal_ != nullptr ? wal_->SyncTo(std::max(r.max_position, r.filter_id))
                                     : absl::OkStatus();
            },
        .log_identity = RecordedLogIdentity(),
        .env = options_.wal.env};
    // Per shard, the floor read before its copy.
    std::vector<uint64_t> floors;
    floors.reserve(filter->shape().shards);
    if (wal_ != nullptr) {
      // The write-ahead log's floor: the last lsn given out. A shard's write
      // is applied and its record appended (given its lsn) in one write
      // section, under the shard's lock (CuckooFilter's WriteLog); a batch
      // spanning shards is one record per shard, each in its shard's
      // section; replay at start-up has ended before any snapshot. So every
      // record up to an lsn read before the shard's lock is taken is applied
      // to the shard once the copy holds the lock, or concerns another
      // shard (or filter creations and drops, which the id and file_mu_
      // cover). A shard no write reached for a while then records the
      // floor, not its last write's lsn, and holds no log back.
      write_options.position_floor = [this, &floors] {
        floors.push_back(wal_->AppendedLsn());
        return floors.back();
      };
    } else if (external_log_ != nullptr) {
      // A cluster replica's floor: its applied position. It applies the
      // stream in order, one entry at a time, and moves the position on
      // once the entry is in every shard it concerns; so every entry up to
      // the position read before a shard's lock is taken is in the copy.
      write_options.position_floor = [this, &floors] {
        floors.push_back(external_log_->AppliedPosition());
        return floors.back();
      };
    }
    absl::StatusOr<SnapshotWriteResult> w =
        WriteSnapshotFile(*filter, filter_name, data_dir_, write_options);
    if (!w.ok()) {
      if (options_.on_snapshot_written)
        options_.on_snapshot_written(false, 0, absl::ZeroDuration());
      spdlog::error("snapshot of filter {} failed: {}", FilterRegistry::QuoteName(filter_name),
                    std::string(w.status().message()));
      if (first_error.ok()) first_error = w.status();
      continue;
    }
    SetRecord(filter_name, filter,
              {.exists = true,
               .time = w->taken,
               .bytes = w->bytes,
               .changes = w->changes,
               .filter_id = w->filter_id,
               .min_position = w->min_position},
              std::move(floors));
    if (absl::Status s = RemoveLegacyFile(filter_name); !s.ok()) {
      // Served from the new file; the old one stays until the next
      // snapshot, and a restart keeps the later of the two.
      spdlog::error("snapshot of filter {}: {}", FilterRegistry::QuoteName(filter_name),
                    std::string(s.message()));
    }
    spdlog::info("snapshot of filter {}: {} items, {} to {} in {} ({:.2f} GB/s)",
                 FilterRegistry::QuoteName(filter_name), w->items, FormatByteSize(w->bytes),
                 w->path, Ms(w->duration),
                 w->bytes / 1e9 / std::max(1e-9, absl::ToDoubleSeconds(w->duration)));
    if (options_.on_snapshot_written) options_.on_snapshot_written(true, w->bytes, w->duration);
    run.bytes += w->bytes;
    run.written.emplace_back(filter_name, *std::move(w));
  }
  {
    MutexLock file_lock(&file_mu_);
    TruncateLogLocked();
  }
  if (!first_error.ok()) return first_error;
  run.duration = absl::Now() - start;
  return run;
}

absl::StatusOr<std::shared_ptr<CuckooFilter>> Persistence::DropNow(
    absl::string_view name, const std::weak_ptr<CuckooFilter>& only) {
  MutexLock file_lock(&file_mu_);
  if (options_.before_file_operation) options_.before_file_operation("remove", name);
  absl::StatusOr<std::shared_ptr<CuckooFilter>> filter = registry_->Get(name);
  if (!filter.ok()) return filter.status();
  if (only.lock() != *filter) {
    return absl::NotFoundError(absl::StrFormat(
        "filter \"%s\" not found: it was dropped while this call waited (a filter of that name "
        "created since is kept)",
        absl::CHexEscape(name)));
  }
  auto not_dropped = [&](const absl::Status& why) {
    return absl::Status(
        why.code() == absl::StatusCode::kInternal ||
                why.code() == absl::StatusCode::kResourceExhausted ||
                why.code() == absl::StatusCode::kUnavailable
            ? why.code()
            : absl::StatusCode::kInternal,
        absl::StrCat("filter \"", absl::CHexEscape(name), "\" not dropped: ", why.message()));
  };
  if (wal_ == nullptr) {
    // No log: the file goes first, and the filter stays if it cannot.
    if (absl::Status s = RemoveSnapshotFile(name); !s.ok()) {
      SetRecord(name, *filter, {});
      return not_dropped(s);
    }
  } else {
    // With the log, the drop is done once its record is on disk (whatever
    // the durability mode: a snapshot file removed for a drop the log then
    // lost would take the filter's older writes with it).
    if (absl::Status s = wal_->Reserve(kWalDropFilterBytes); !s.ok()) return not_dropped(s);
    const uint64_t lsn = wal_->AppendDropFilter((*filter)->id());
    wal_->Unreserve(kWalDropFilterBytes);
    if (absl::Status s = wal_->SyncTo(lsn); !s.ok()) return not_dropped(s);
  }
  if (absl::Status s = registry_->Drop(name, filter->get()); !s.ok()) return s;
  {
    MutexLock lock(&records_mu_);
    records_.erase(name);
  }
  if (absl::Status s = wal_ != nullptr ? RemoveSnapshotFile(name) : absl::OkStatus(); !s.ok()) {
    // Dropped (the log says so); the file goes at the next attempt, and a
    // restart before that replays the drop and removes it.
    spdlog::error(
        "dropped filter {}, but its snapshot file is not gone yet: {}; retried before "
        "the log is next truncated",
        FilterRegistry::QuoteName(name), std::string(s.message()));
    pending_removals_.emplace_back(name);
  }
  return filter;
}

}  // namespace cuckoo::server
