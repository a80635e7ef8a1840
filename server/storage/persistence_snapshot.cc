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
  // The file of a filter renamed away from `name` that has not been written
  // under its new name yet is that filter's, not this one's.
  const bool renamed_away = !RenamedAwayFrom(name).empty();
  for (const std::string& path :
       {renamed_away ? std::string() : SnapshotPath(data_dir_, name), legacy}) {
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
    if (path == SnapshotPath(data_dir_, name)) {  // Renamed back to the name of its file.
      legacy_files_.erase(it);
      return absl::OkStatus();
    }
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
  spdlog::info(
      "filter {} is in {} now: removed {}, its earlier file (of an older build's naming, or of "
      "its name before a rename)",
      FilterRegistry::QuoteName(name), SnapshotPath(data_dir_, name), path);
  return absl::OkStatus();
}

std::string Persistence::RenamedAwayFrom(absl::string_view name) {
  const std::string path = SnapshotPath(data_dir_, name);
  MutexLock lock(&legacy_mu_);
  for (const auto& [other, file] : legacy_files_) {
    if (other != name && file == path) return other;
  }
  return "";
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
  // Filters renamed away from the file they still have first: until they
  // are written under their new names, a filter created under an old name
  // may not overwrite its file (WriteSnapshotLocked).
  {
    std::vector<std::string> moving;
    {
      MutexLock lock(&legacy_mu_);
      for (const auto& [n, path] : legacy_files_) moving.push_back(n);
    }
    std::stable_partition(filters.begin(), filters.end(), [&](const auto& f) {
      return std::find(moving.begin(), moving.end(), f.first) != moving.end();
    });
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
    absl::StatusOr<SnapshotWriteResult> w = WriteSnapshotLocked(filter_name, filter);
    if (!w.ok()) {
      if (first_error.ok()) first_error = w.status();
      continue;
    }
    run.bytes += w->bytes;
    run.written.emplace_back(filter_name, *std::move(w));
  }
  {
    MutexLock file_lock(&file_mu_);
    TruncateLogLocked();
  }
  if (!first_error.ok()) return first_error;
  std::sort(run.written.begin(), run.written.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  std::sort(run.unchanged.begin(), run.unchanged.end());
  run.duration = absl::Now() - start;
  return run;
}

absl::StatusOr<SnapshotWriteResult> Persistence::WriteSnapshotLocked(
    const std::string& name, const std::shared_ptr<CuckooFilter>& filter) {
  // The file of a filter renamed away from this name that has not been
  // written under its new one yet: never overwritten (it is that filter's
  // only copy of what the log no longer holds).
  if (const std::string other = RenamedAwayFrom(name); !other.empty()) {
    absl::StatusOr<std::shared_ptr<CuckooFilter>> renamed = registry_->Get(other);
    // Written under its new name already (only the old file's removal
    // failed): the old file goes now.
    if (renamed.ok() && Record(other, **renamed).exists) {
      if (absl::Status s = RemoveLegacyFile(other); !s.ok()) return s;
    } else {
      const absl::Status s = absl::FailedPreconditionError(absl::StrFormat(
          "snapshot of filter %s not written: %s still holds filter %s, renamed from it, whose "
          "snapshot under its new name has not been written yet (retried at the next snapshot)",
          FilterRegistry::QuoteName(name), SnapshotPath(data_dir_, name),
          FilterRegistry::QuoteName(other)));
      spdlog::error("{}", std::string(s.message()));
      return s;
    }
  }
  if (options_.before_file_operation) options_.before_file_operation("write", name);
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
      WriteSnapshotFile(*filter, name, data_dir_, write_options);
  if (!w.ok()) {
    if (options_.on_snapshot_written) options_.on_snapshot_written(false, 0, absl::ZeroDuration());
    spdlog::error("snapshot of filter {} failed: {}", FilterRegistry::QuoteName(name),
                  std::string(w.status().message()));
    return w.status();
  }
  SetRecord(name, filter,
            {.exists = true,
             .time = w->taken,
             .bytes = w->bytes,
             .changes = w->changes,
             .filter_id = w->filter_id,
             .min_position = w->min_position},
            std::move(floors));
  if (absl::Status s = RemoveLegacyFile(name); !s.ok()) {
    // Served from the new file; the old one stays until the next
    // snapshot, and a restart keeps the later of the two.
    spdlog::error("snapshot of filter {}: {}", FilterRegistry::QuoteName(name),
                  std::string(s.message()));
  }
  spdlog::info("snapshot of filter {}: {} items, {} to {} in {} ({:.2f} GB/s)",
               FilterRegistry::QuoteName(name), w->items, FormatByteSize(w->bytes), w->path,
               Ms(w->duration),
               w->bytes / 1e9 / std::max(1e-9, absl::ToDoubleSeconds(w->duration)));
  if (options_.on_snapshot_written) options_.on_snapshot_written(true, w->bytes, w->duration);
  return w;
}

absl::StatusOr<RenameResult> Persistence::RenameNow(absl::string_view name,
                                                    absl::string_view new_name, bool replace,
                                                    const std::weak_ptr<CuckooFilter>& only) {
  MutexLock file_lock(&file_mu_);
  if (external_log_ != nullptr) {
    return absl::FailedPreconditionError("a cluster replica renames through its stream");
  }
  if (options_.before_file_operation) options_.before_file_operation("rename", name);
  absl::StatusOr<std::shared_ptr<CuckooFilter>> found = registry_->Get(name);
  if (!found.ok()) return found.status();
  if (only.lock() != *found) {
    return absl::NotFoundError(absl::StrFormat(
        "filter %s not found: it was dropped or renamed while this call waited (a filter of "
        "that name created since is kept)",
        FilterRegistry::QuoteName(name)));
  }
  // Where the filter's data is on disk now, and the replaced filter's
  // older-build file, if any (its SnapshotPath is overwritten below).
  const std::string old_path = LoadedPath(name);
  std::string replaced_legacy;
  {
    MutexLock lock(&legacy_mu_);
    if (auto it = legacy_files_.find(new_name); it != legacy_files_.end()) {
      replaced_legacy = it->second;
    }
  }
  RenameResult result;
  const size_t reserved = WalRenameFilterBytes(new_name);
  if (wal_ != nullptr) {
    if (absl::Status s = wal_->Reserve(reserved); !s.ok()) return s;
  }
  absl::StatusOr<std::shared_ptr<CuckooFilter>> renamed = registry_->Rename(
      name, new_name, replace, found->get(), &result.replaced,
      [&](CuckooFilter& filter, const CuckooFilter* replaced) {
        if (wal_ != nullptr && name != new_name) {
          result.lsn = wal_->AppendRenameFilter(filter.id(), new_name,
                                                replaced != nullptr ? replaced->id() : 0, replace);
        }
        return absl::OkStatus();
      });
  if (wal_ != nullptr) wal_->Unreserve(reserved);
  if (!renamed.ok()) return renamed.status();
  result.filter = *renamed;
  if (name == new_name) return result;
  // Durable whatever the durability mode: the files change next. A failure
  // of the log ends the process (WalOptions::on_failure).
  if (wal_ != nullptr) {
    if (absl::Status s = wal_->SyncTo(result.lsn); !s.ok()) return s;
  }
  // The filter counts as not snapshotted until its file has its new name,
  // so the log is kept from its creation (the rename included).
  {
    MutexLock lock(&records_mu_);
    records_.erase(name);
  }
  SetRecord(new_name, result.filter, {});
  {
    MutexLock lock(&legacy_mu_);
    legacy_files_.erase(name);
    if (old_path != SnapshotPath(data_dir_, new_name)) legacy_files_[new_name] = old_path;
  }
  // The file under the new name replaces the replaced filter's; the old
  // one is removed after it (RemoveLegacyFile).
  const std::string new_string(new_name);
  absl::StatusOr<SnapshotWriteResult> w = WriteSnapshotLocked(new_string, result.filter);
  if (!w.ok()) {
    spdlog::error(
        "renamed filter {} to {}, but its snapshot under the new name failed: {}; {} stays its "
        "file until the next snapshot run writes it (a restart replays the rename)",
        FilterRegistry::QuoteName(name), FilterRegistry::QuoteName(new_name),
        std::string(w.status().message()), old_path);
  } else if (!replaced_legacy.empty() && replaced_legacy != old_path) {
    if (::unlink(replaced_legacy.c_str()) != 0 && errno != ENOENT) {
      spdlog::error("renamed filter {} over {}: could not remove the replaced filter's file {}",
                    FilterRegistry::QuoteName(name), FilterRegistry::QuoteName(new_name),
                    replaced_legacy);
    }
  }
  spdlog::info("renamed filter {} to {}{} at log position {}", FilterRegistry::QuoteName(name),
               FilterRegistry::QuoteName(new_name),
               result.replaced != nullptr ? " (replacing the filter of that name)" : "",
               result.lsn);
  return result;
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
