// Loading the data directory at start-up: the snapshots (bad ones to
// quarantine/), then the write-ahead log's replay, or a cluster replica's
// checkpoint.
#include <fcntl.h>
#include <sys/file.h>
#include <sys/random.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <filesystem>
#include <system_error>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "base/units.h"
#include "core/hash.h"
#include "server/storage/persistence.h"
#include "server/storage/persistence_internal.h"
#include "server/wal/wal_apply.h"
#include "spdlog/spdlog.h"

namespace cuckoo::server {
namespace fs = std::filesystem;
using persistence_internal::Ms;

absl::Status Persistence::Quarantine(const std::string& path, const absl::Status& why) {
  absl::StatusOr<std::string> target = MoveToQuarantine(path, why);
  if (!target.ok()) return target.status();
  spdlog::error("bad snapshot not loaded, moved to {}: {}", *target, std::string(why.message()));
  return absl::OkStatus();
}

absl::StatusOr<std::string> Persistence::MoveToQuarantine(const std::string& path,
                                                          const absl::Status& why) {
  const fs::path dir = fs::path(data_dir_) / kQuarantineDir;
  std::error_code ec;
  fs::create_directories(dir, ec);
  const std::string stamp = absl::FormatTime("%Y%m%dT%H%M%SZ", absl::Now(), absl::UTCTimeZone());
  fs::path target = dir / absl::StrCat(fs::path(path).filename().string(), ".", stamp);
  auto taken = [](const fs::path& p) {
    std::error_code ignored;
    return fs::symlink_status(p, ignored).type() != fs::file_type::not_found;
  };
  for (int i = 1; taken(target); ++i) {
    target = dir / absl::StrCat(fs::path(path).filename().string(), ".", stamp, ".", i);
  }
  if (!ec) fs::rename(path, target, ec);
  if (!ec) {
    if (absl::Status s = SyncSnapshotDirectory(data_dir_); !s.ok()) {
      ec = std::make_error_code(std::errc::io_error);
    }
  }
  if (ec) {
    // Left in place, a later snapshot of a new filter of this name would
    // overwrite it: refuse to start instead.
    return absl::InternalError(absl::StrFormat(
        "snapshot %s (%s) could not be moved to %s: %s; move it out of the data directory "
        "(or fix the permissions) and start again",
        path, why.message(), target.string(), ec.message()));
  }
  return target.string();
}

namespace {

// The snapshot files in `data_dir`, sorted. What a stop left there is
// removed on the way (the private files of exports, imports and Redis
// dumps, unfinished snapshots), and any other file that is not the
// server's is named in a warning.
absl::StatusOr<std::vector<fs::path>> SnapshotFiles(const std::string& data_dir) {
  std::error_code ec;
  std::vector<fs::path> snapshots;
  for (fs::directory_iterator it(data_dir, ec), end; !ec && it != end; it.increment(ec)) {
    const fs::path& p = it->path();
    const std::string file = p.filename().string();
    if (file == kExportDir || file == kImportDir || file == kRedisDumpDir) {
      // The private copies of exports and imports that were running when
      // the process stopped: nothing in them is needed any more (an import
      // is in the data directory only once its own snapshot file is).
      std::error_code ignored;
      if (fs::recursive_directory_iterator(p, ignored) != fs::recursive_directory_iterator() &&
          !ignored) {
        spdlog::warn(
            "removing {}: the private files of exports, imports or Redis dumps cut short "
            "by a stop",
            p.string());
      }
      fs::remove_all(p, ec);
      ec.clear();
      continue;
    }
    if (file.starts_with(".") && absl::EndsWith(file, kSnapshotTempSuffix)) {
      // A write that never finished (a crash): the snapshot it was to
      // replace, if any, is intact.
      fs::remove(p, ec);
      spdlog::warn("removed {}: an unfinished snapshot left by a crash or kill during a write",
                   p.string());
      ec.clear();
      continue;
    }
    if (absl::EndsWith(file, kSnapshotSuffix)) {
      snapshots.push_back(p);
    } else if (file != kQuarantineDir && file != kLockFile && file != kWalDir &&
               file != kCheckpointFile && file != kRequestWindowFile &&
               file != std::string(kRequestWindowFile) + ".tmp" && file != kIdentityFile &&
               file != std::string(kIdentityFile) + ".tmp") {
      spdlog::warn("ignoring {}: not a snapshot (*{})", p.string(), std::string(kSnapshotSuffix));
    }
  }
  if (ec) {
    return absl::InternalError(
        absl::StrFormat("cannot read data directory %s: %s", data_dir, ec.message()));
  }
  std::sort(snapshots.begin(), snapshots.end());
  return snapshots;
}

// A single node's new log identity: "node-" and 128 random bits in hex.
absl::StatusOr<std::string> NewNodeIdentity() {
  char bytes[16];
  if (::getrandom(bytes, sizeof(bytes), 0) != static_cast<ssize_t>(sizeof(bytes))) {
    return absl::InternalError(
        absl::StrFormat("cannot make up the data directory's log identity: getrandom: %s",
                        std::error_code(errno, std::generic_category()).message()));
  }
  return absl::StrCat("node-", absl::BytesToHexString(absl::string_view(bytes, sizeof(bytes))));
}

std::string IdentityFileText(absl::string_view identity) {
  return absl::StrCat("cuckood log identity v1\nidentity ", identity, "\n");
}

// The identity IDENTITY at `path` records; empty if there is no such file.
absl::StatusOr<std::string> ReadIdentityFile(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "re");
  if (f == nullptr) {
    if (errno == ENOENT) return std::string();
    return absl::InternalError(absl::StrFormat(
        "cannot read %s: %s", path, std::error_code(errno, std::generic_category()).message()));
  }
  char identity[512] = {0};
  unsigned version = 0;
  const int got = std::fscanf(f, "cuckood log identity v%u identity %511s", &version, identity);
  std::fclose(f);
  if (got != 2 || version != 1) {
    return absl::DataLossError(absl::StrFormat(
        "%s is not a cuckood identity file (\"cuckood log identity v1\", \"identity <log>\"): "
        "restore it from a backup of the data directory",
        path));
  }
  return std::string(identity);
}

// Reads the CHECKPOINT at `path` into `summary` (log_identity,
// resume_from, the digest if it names one). OK with nothing filled in when
// there is no such file; DATA_LOSS naming the format for one that is not a
// checkpoint.
absl::Status ParseCheckpoint(const std::string& path, LoadSummary* summary) {
  std::FILE* f = std::fopen(path.c_str(), "re");
  if (f == nullptr) {
    if (errno == ENOENT) return absl::OkStatus();
    return absl::InternalError(absl::StrFormat(
        "cannot read %s: %s", path, std::error_code(errno, std::generic_category()).message()));
  }
  char identity[512] = {0};
  unsigned version = 0;
  unsigned long long resume = 0, digest_position = 0, digest = 0;
  const int got = std::fscanf(f, "cuckood cluster checkpoint v%u identity %511s resume_from %llu",
                              &version, identity, &resume);
  // A version-2 checkpoint has no digest line when the replica knew no
  // digest (upgraded from version 1, before the digests started): EOF.
  const int got_digest =
      got == 3 && version == 2 ? std::fscanf(f, " digest %llu %llx", &digest_position, &digest) : 0;
  std::fclose(f);
  if (got != 3 || resume == 0 || (version != 1 && version != 2) ||
      (got_digest != 0 && got_digest != EOF && got_digest != 2) ||
      (got_digest == 2 && digest_position + 1 < resume)) {
    return absl::DataLossError(absl::StrFormat(
        "%s is not a cuckood checkpoint (\"cuckood cluster checkpoint v2\", \"identity <log>\", "
        "\"resume_from <position>\", \"digest <position> <16 hex digits>\" with a position at "
        "or past resume_from - 1): remove it to replay the whole stream",
        path));
  }
  if (got_digest == 2) {
    summary->has_log_digest = true;
    summary->log_digest_position = digest_position;
    summary->log_digest = digest;
  }
  summary->log_identity = identity;
  summary->resume_from = resume;
  return absl::OkStatus();
}

// The identity a CHECKPOINT names, for messages.
std::string CheckpointIdentity(const std::string& path) {
  LoadSummary checkpoint;
  if (!ParseCheckpoint(path, &checkpoint).ok() || checkpoint.log_identity.empty()) {
    return "(unreadable)";
  }
  return checkpoint.log_identity;
}

// "a.cuckoo" or "a.cuckoo and 2 more", for messages.
std::string FilesNamed(const std::vector<fs::path>& files) {
  if (files.empty()) return "";
  std::string out = files.front().filename().string();
  if (files.size() > 1) absl::StrAppend(&out, " and ", files.size() - 1, " more");
  return out;
}

}  // namespace

absl::Status Persistence::CheckLogIdentity(LoadSummary* summary, bool* write_identity) {
  *write_identity = false;
  const std::string identity_path = (fs::path(data_dir_) / kIdentityFile).string();
  absl::StatusOr<std::string> node = ReadIdentityFile(identity_path);
  if (!node.ok()) return node.status();
  if (external_log_ != nullptr) {
    if (!node->empty()) {
      return absl::FailedPreconditionError(absl::StrFormat(
          "data directory %s belongs to a single node (%s names its write-ahead log %s), not to "
          "%s: a cluster replica serves only what its stream wrote; start it with an empty "
          "--data-dir: it bootstraps from a peer replica (or start this directory's single node "
          "without --nats)",
          data_dir_, identity_path, *node, external_log_->Name()));
    }
    if (absl::Status s = ReadCheckpoint(summary); !s.ok()) return s;
    // Without a checkpoint, snapshots are adopted only if they record this
    // stream (a crash before the first checkpoint): CheckSnapshotLog.
    log_identity_ = summary->log_identity;
    return absl::OkStatus();
  }
  const std::string checkpoint_path = (fs::path(data_dir_) / kCheckpointFile).string();
  std::error_code ec;
  if (fs::exists(checkpoint_path, ec)) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "data directory %s follows the log %s of a cluster (%s), but this cuckood runs as a "
        "single node (no --nats), whose snapshots belong to its own write-ahead log: start it "
        "with --nats and that stream, or give this single node its own --data-dir (an empty one "
        "starts empty)",
        data_dir_, CheckpointIdentity(checkpoint_path), checkpoint_path));
  }
  // None: a new directory, or one of a cuckood before identities, which
  // takes the identity its snapshots record, if any (CheckSnapshotLog), or
  // a new one (LoadAll).
  log_identity_ = *std::move(node);
  *write_identity = log_identity_.empty();
  return absl::OkStatus();
}

std::string Persistence::RecordedLogIdentity() const {
  std::string identity = log_identity_;
  if (identity.empty() && external_log_ != nullptr) identity = external_log_->Identity();
  if (identity.size() <= kSnapshotLogIdentityBytes) return identity;
  // A stream with a long name: its start and a hash of the whole.
  return absl::StrFormat("%s~%016x", identity.substr(0, kSnapshotLogIdentityBytes - 17),
                         XXH3_64bits(identity.data(), identity.size()));
}

absl::Status Persistence::CheckSnapshotLog(const std::string& path, const std::string& recorded,
                                           const std::vector<fs::path>& snapshots) {
  const bool node = recorded.starts_with("node-");
  if (log_identity_.empty()) {
    if (external_log_ != nullptr) {
      if (recorded.empty() || node) {
        return absl::FailedPreconditionError(absl::StrFormat(
            "data directory %s holds snapshots (%s) but no %s, and %s belongs to %s, so they do "
            "not follow %s (a single node's files copied in?): a cluster replica serves only "
            "what its stream wrote; start it with an empty --data-dir: it bootstraps from a peer "
            "replica (move the files aside; nothing was changed)",
            data_dir_, FilesNamed(snapshots), kCheckpointFile, path,
            recorded.empty() ? std::string("a log it does not record (a cuckood before "
                                           "identities wrote it)")
                             : absl::StrCat("the log ", recorded),
            external_log_->Name()));
      }
    } else if (!recorded.empty() && !node) {
      return absl::FailedPreconditionError(absl::StrFormat(
          "snapshot %s belongs to the log %s of a cluster, but this cuckood runs as a single "
          "node (no --nats) and data directory %s records no log: start it with --nats and that "
          "stream, or give this single node its own --data-dir (an empty one starts empty)",
          path, recorded, data_dir_));
    }
    // The directory's log from now on (written to IDENTITY once the
    // directory has loaded), if the snapshot records one.
    log_identity_ = recorded;
    return absl::OkStatus();
  }
  // A file of an older cuckood records no log: it is the directory's.
  if (recorded.empty() || recorded == RecordedLogIdentity()) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrFormat(
      "snapshot %s belongs to the log %s, but data directory %s follows the log %s (%s): a "
      "snapshot copied from another server's data directory is not served, since its filter "
      "and positions are not this log's; move it out of the data directory (%s)",
      path, recorded, data_dir_, log_identity_,
      external_log_ != nullptr ? kCheckpointFile : kIdentityFile,
      external_log_ != nullptr
          ? "or start this replica with an empty --data-dir: it bootstraps from a peer replica"
          : "to add another server's filter, use cuckooctl export there and cuckooctl import "
            "here"));
}

absl::StatusOr<LoadSummary> Persistence::LoadAll() {
  const absl::Time start = absl::Now();
  if (lock_fd_ < 0) {
    const std::string lock_path = (fs::path(data_dir_) / kLockFile).string();
    int fd = ::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) {
      return absl::InternalError(
          absl::StrFormat("cannot open %s: %s", lock_path,
                          std::error_code(errno, std::generic_category()).message()));
    }
    if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
      ::close(fd);
      return absl::FailedPreconditionError(absl::StrFormat(
          "data directory %s is in use by another cuckood (%s is locked); give each server its "
          "own --data-dir",
          data_dir_, lock_path));
    }
    lock_fd_ = fd;
  }
  LoadSummary summary;
  std::error_code ec;
  absl::StatusOr<std::vector<fs::path>> snapshots = SnapshotFiles(data_dir_);
  if (!snapshots.ok()) return snapshots.status();
  bool write_identity = false;
  if (absl::Status s = CheckLogIdentity(&summary, &write_identity); !s.ok()) return s;
  // The file each filter was loaded from, and the log position it reaches:
  // after a crash between a migrated filter's first snapshot under its own
  // file name and the removal of its older build's <name>.cuckoo, both
  // exist; the later one is kept.
  struct Loaded {
    std::string path;
    uint64_t max_position = 0;
    uint64_t bytes = 0;
  };
  absl::flat_hash_map<std::string, Loaded> loaded_from;
  for (const fs::path& p : *snapshots) {
    const std::string path = p.string();
    const std::string file = p.filename().string();
    const std::string stem = file.substr(0, file.size() - kSnapshotSuffix.size());
    // f-<SHA-256 of the name>.cuckoo, or an older build's <name>.cuckoo.
    if (!IsSnapshotFileName(file) && !IsLegacySnapshotName(stem)) {
      if (absl::Status q = Quarantine(
              path, absl::DataLossError(absl::StrCat(
                        path,
                        ": the file name is neither f-<SHA-256 of the filter name>.cuckoo nor an "
                        "older build's <filter name>.cuckoo")));
          !q.ok()) {
        return q;
      }
      ++summary.quarantined;
      continue;
    }
    std::string name;
    bool legacy = false;
    const absl::Time t0 = absl::Now();
    absl::StatusOr<LoadedSnapshot> loaded =
        ReadSnapshotFile(path, "", [&](const SnapshotHeader& h) -> absl::Status {
          name = h.name;
          if (SnapshotFileName(name) != file) {
            // An older build's file holds the filter its name says.
            legacy = IsLegacySnapshotName(stem) && name == stem;
            if (!legacy) {
              return absl::DataLossError(absl::StrFormat("%s: holds filter %s, whose file is %s",
                                                         path, FilterRegistry::QuoteName(name),
                                                         SnapshotFileName(name)));
            }
          }
          // Another log's file is refused before its tables are read.
          if (absl::Status s = CheckSnapshotLog(path, h.log_identity, *snapshots); !s.ok()) {
            return s;
          }
          // The second file of a filter: it replaces the first, so the
          // budget has room.
          if (loaded_from.contains(name)) return absl::OkStatus();
          // What the filter's creation was admitted for: the tables it grew
          // since are charged whatever the budget (FilterRegistry::Add).
          absl::Status room = registry_->CheckRoom(name, CuckooFilter::MemoryBytes(h.shape));
          if (room.ok()) return room;
          return absl::Status(room.code(),
                              absl::StrCat(path, ": ", room.message(),
                                           "; raise --memory-budget / --max-filters, or move the "
                                           "file out of the data directory"));
        });
    if (!loaded.ok()) {
      if (absl::IsDataLoss(loaded.status())) {
        if (absl::Status q = Quarantine(path, loaded.status()); !q.ok()) return q;
        ++summary.quarantined;
        continue;
      }
      return loaded.status();
    }
    if (auto first = loaded_from.find(name); first != loaded_from.end()) {
      // Keep the file that reaches the later log position; on a tie the one
      // named by this build's rule (written last: the older one's removal
      // comes after it).
      const bool keep_new = loaded->max_position > first->second.max_position ||
                            (loaded->max_position == first->second.max_position && !legacy);
      const std::string& removed = keep_new ? first->second.path : path;
      spdlog::info(
          "filter {} has two snapshot files, {} and {} (a crash while its file was renamed "
          "to this build's name): kept {} (log position {}), removed {} (log position {})",
          FilterRegistry::QuoteName(name), first->second.path, path, keep_new ? path : removed,
          keep_new ? loaded->max_position : first->second.max_position, removed,
          keep_new ? first->second.max_position : loaded->max_position);
      if (::unlink(removed.c_str()) != 0 && errno != ENOENT) {
        return absl::InternalError(absl::StrFormat(
            "remove %s: %s", removed, std::error_code(errno, std::generic_category()).message()));
      }
      if (absl::Status s = SyncSnapshotDirectory(data_dir_, options_.wal.env); !s.ok()) return s;
      if (!keep_new) continue;
      absl::StatusOr<std::shared_ptr<CuckooFilter>> old = registry_->Get(name);
      if (old.ok()) {
        summary.items -= (*old)->items();
        (void)registry_->Drop(name, old->get());
      }
      --summary.loaded;
      summary.bytes -= first->second.bytes;
      {
        MutexLock lock(&legacy_mu_);
        legacy_files_.erase(name);
      }
    }
    const uint64_t memory = loaded->filter->memory_bytes();
    absl::StatusOr<std::shared_ptr<CuckooFilter>> added =
        registry_->Add(name, std::move(loaded->filter));
    if (!added.ok()) {
      return absl::Status(added.status().code(),
                          absl::StrCat(path, ": ", added.status().message()));
    }
    loaded_from[name] = Loaded{
        .path = path, .max_position = loaded->max_position, .bytes = loaded->header.file_bytes};
    if (legacy) {
      MutexLock lock(&legacy_mu_);
      legacy_files_[name] = path;
    }
    SetRecord(name, *added,
              {.exists = true,
               .time = loaded->header.taken,
               .bytes = loaded->header.file_bytes,
               .changes = (*added)->changes(),
               .filter_id = loaded->filter_id,
               .min_position = loaded->min_position},
              // Before the log's replay: the file's own positions.
              (*added)->ShardPositions());
    const absl::Duration took = absl::Now() - t0;
    spdlog::info(
        "loaded filter {} from {}: {} items, {} on disk, {} in memory, in {} ({:.2f} GB/s)",
        FilterRegistry::QuoteName(name), path, loaded->items,
        FormatByteSize(loaded->header.file_bytes), FormatByteSize(memory), Ms(took),
        loaded->header.file_bytes / 1e9 / std::max(1e-9, absl::ToDoubleSeconds(took)));
    ++summary.loaded;
    summary.items += loaded->items;
    summary.bytes += loaded->header.file_bytes;
  }
  // Two files that hold one filter id under two names: a crash between a
  // renamed filter's snapshot under its new name and the removal of its old
  // name's file (RenameNow). The one that reaches the later log position is
  // kept (the new one: its positions are past the rename's).
  {
    absl::flat_hash_map<uint64_t, std::string> by_id;
    for (const auto& [name, filter] : registry_->List()) {
      const uint64_t id = filter->id();
      if (id == 0) continue;
      auto [first, fresh] = by_id.try_emplace(id, name);
      if (fresh) continue;
      const Loaded& a = loaded_from[first->second];
      const Loaded& b = loaded_from[name];
      const bool keep_b = b.max_position > a.max_position;
      const std::string lose = keep_b ? first->second : name;
      const Loaded& lost = keep_b ? a : b;
      spdlog::info(
          "filter id {} has two snapshot files, {} (filter {}, log position {}) and {} (filter "
          "{}, log position {}): a crash while a rename moved its file; kept {}, removed {}",
          id, a.path, FilterRegistry::QuoteName(first->second), a.max_position, b.path,
          FilterRegistry::QuoteName(name), b.max_position, keep_b ? b.path : a.path, lost.path);
      if (::unlink(lost.path.c_str()) != 0 && errno != ENOENT) {
        return absl::InternalError(absl::StrFormat(
            "remove %s: %s", lost.path, std::error_code(errno, std::generic_category()).message()));
      }
      if (absl::Status s = SyncSnapshotDirectory(data_dir_, options_.wal.env); !s.ok()) return s;
      absl::StatusOr<std::shared_ptr<CuckooFilter>> gone = registry_->Get(lose);
      if (gone.ok()) {
        summary.items -= (*gone)->items();
        (void)registry_->Drop(lose, gone->get());
      }
      --summary.loaded;
      summary.bytes -= lost.bytes;
      {
        MutexLock lock(&records_mu_);
        records_.erase(lose);
      }
      {
        MutexLock lock(&legacy_mu_);
        legacy_files_.erase(lose);
      }
      if (keep_b) first->second = name;
    }
  }
  if (write_identity) {
    if (log_identity_.empty()) {
      absl::StatusOr<std::string> made = NewNodeIdentity();
      if (!made.ok()) return made.status();
      log_identity_ = *std::move(made);
    }
    // Every snapshot loaded: the directory is this log's from now on.
    if (absl::Status s = WriteFileAtomically(kIdentityFile, IdentityFileText(log_identity_));
        !s.ok()) {
      return s;
    }
    if (snapshots->empty() && !fs::exists(fs::path(data_dir_) / kWalDir, ec)) {
      spdlog::info("new data directory {}: its write-ahead log is {} (recorded in {})", data_dir_,
                   log_identity_, kIdentityFile);
    } else {
      spdlog::info(
          "data directory {} records no log identity (an older cuckood's directory, or its {} "
          "lost): its snapshots and write-ahead log are adopted as the log {} (recorded in {})",
          data_dir_, kIdentityFile, log_identity_, kIdentityFile);
    }
  }
  summary.log_identity = log_identity_;
  if (external_log_ == nullptr) {
    if (absl::Status s = ReplayAndOpenLog(&summary); !s.ok()) return s;
  }
  for (const auto& [name, filter] : registry_->List()) {
    ++summary.served;
    summary.served_items += filter->items();
  }
  summary.duration = absl::Now() - start;
  return summary;
}

absl::Status Persistence::ReadCheckpoint(LoadSummary* summary) {
  std::error_code ec;
  const fs::path wal = fs::path(data_dir_) / kWalDir;
  for (fs::directory_iterator it(wal, ec), end; !ec && it != end; it.increment(ec)) {
    if (absl::EndsWith(it->path().filename().string(), kWalSegmentSuffix)) {
      return absl::FailedPreconditionError(absl::StrFormat(
          "data directory %s holds a single node's write-ahead log (%s): a cluster replica "
          "starts from an empty data directory (it replays the stream) or from another "
          "replica's; start this one without --nats, or give the replica its own --data-dir",
          data_dir_, it->path().string()));
    }
  }
  const std::string path = (fs::path(data_dir_) / kCheckpointFile).string();
  if (absl::Status s = ParseCheckpoint(path, summary); !s.ok()) return s;
  if (summary->resume_from == 0) return absl::OkStatus();  // None.
  MutexLock lock(&file_mu_);
  checkpoint_ = summary->resume_from;
  checkpoint_has_digest_ = summary->has_log_digest;
  return absl::OkStatus();
}

// Replays the write-ahead log's records over the filters loaded from
// snapshot files: creations and drops on this thread, shard writes on the
// applier's workers, request records into the request window.
class Persistence::LogReplay {
 public:
  LogReplay(Persistence* persistence, LoadSummary* summary, std::string wal_dir)
      : p_(*persistence),
        summary_(*summary),
        wal_dir_(std::move(wal_dir)),
        applier_(std::max(2u, std::thread::hardware_concurrency())) {
    for (auto& [name, filter] : p_.registry_->List()) {
      from_file_.insert(filter.get());
      const uint64_t id = filter->id();
      if (id != 0) AddLive(id, name, filter);
      at_least_ = std::max(at_least_, id + 1);
      for (uint64_t pos : filter->ShardPositions()) at_least_ = std::max(at_least_, pos + 1);
    }
  }

  absl::Status Apply(const WalRecord& r) {
    switch (r.type) {
      case WalRecordType::kCreateFilter:
        return Create(r);
      case WalRecordType::kDropFilter:
        return Drop(r);
      case WalRecordType::kSetExpiry: {
        // Applied whether or not a snapshot holds it: the log is a suffix
        // of the filter's history, so its last expiry record is the
        // filter's latest expiry. Never a drop: that is a logged record of
        // its own (the filter's expiry passing during the replay drops it
        // only once the server runs: FilterServiceImpl's expiry timer).
        auto it = live_.find(r.filter_id);
        if (it == live_.end()) return absl::OkStatus();  // Of a filter dropped since.
        it->second->filter->set_expire_at(r.expire_at);
        ++summary_.log_applied;
        return absl::OkStatus();
      }
      case WalRecordType::kRenameFilter:
        return Rename(r);
      case WalRecordType::kInsert:
      case WalRecordType::kDelete: {
        auto it = live_.find(r.filter_id);
        if (it == live_.end()) return absl::OkStatus();  // Of a filter dropped since.
        applier_.Apply(it->second.get(), r);
        return absl::OkStatus();
      }
      case WalRecordType::kRequestStart:
        if (p_.request_window_ != nullptr) {
          p_.request_window_->RestoreInDoubt(r.request.key, r.request.time);
        }
        return absl::OkStatus();
      case WalRecordType::kRequestResults:
        RequestResults(r);
        return absl::OkStatus();
      case WalRecordType::kTxnBegin:
      case WalRecordType::kTxnEnd:
        // Bounds only: ScanWal passes a transaction's records once its end
        // is in the log, and cuts the log at a begin without one.
        return absl::OkStatus();
    }
    return absl::OkStatus();
  }

  // Waits for the shard writes still queued; counts them as applied.
  absl::Status Drain() {
    uint64_t writes_applied = 0;
    const absl::Status applied = applier_.Drain(&writes_applied);
    summary_.log_applied += writes_applied;
    return applied;
  }

  // Appending goes on past every position a snapshot holds.
  uint64_t at_least() const { return at_least_; }
  // Whether a drop removed or moved a snapshot file (the directory needs a sync).
  bool removed_files() const { return removed_files_; }

 private:
  using Live = WalApplier::Target;

  void AddLive(uint64_t id, std::string name, std::shared_ptr<CuckooFilter> filter) {
    live_[id] = std::make_unique<Live>(Live{std::move(filter), std::move(name)});
  }

  absl::Status Create(const WalRecord& r) {
    if (live_.contains(r.lsn)) return absl::OkStatus();  // Loaded from its snapshot.
    absl::StatusOr<std::shared_ptr<CuckooFilter>> existing = p_.registry_->Get(r.name);
    if (existing.ok()) return CreateOverLoaded(r, *existing);
    if (absl::Status room = p_.registry_->CheckRoom(r.name, CuckooFilter::MemoryBytes(r.shape));
        !room.ok()) {
      return absl::Status(room.code(), absl::StrCat("replaying the write-ahead log (filter \"",
                                                    absl::CHexEscape(r.name), "\" created at lsn ",
                                                    r.lsn, "): ", room.message(),
                                                    "; raise --memory-budget / --max-filters"));
    }
    absl::StatusOr<std::unique_ptr<CuckooFilter>> f = CuckooFilter::FromShape(r.shape);
    if (!f.ok()) return f.status();
    (*f)->set_id(r.lsn);
    absl::StatusOr<std::shared_ptr<CuckooFilter>> added = p_.registry_->Add(r.name, *std::move(f));
    if (!added.ok()) return added.status();
    AddLive(r.lsn, r.name, *added);
    ++summary_.log_applied;
    return absl::OkStatus();
  }

  // A creation of a name a snapshot file loaded.
  absl::Status CreateOverLoaded(const WalRecord& r, const std::shared_ptr<CuckooFilter>& existing) {
    const uint64_t id = existing->id();
    if (id == 0) {
      // A snapshot that records no id: a version-1 file (its
      // positions are 0), or an imported filter's, which ImportNow
      // writes before the log creates the filter, with every
      // shard's position set to the log's last lsn then. A
      // creation at or before that is of an earlier filter of the
      // name, dropped before the import.
      const std::vector<uint64_t> positions = existing->ShardPositions();
      if (!positions.empty() && r.lsn <= *std::max_element(positions.begin(), positions.end())) {
        return absl::OkStatus();
      }
      // The record that gave the filter its id: from here the log
      // holds its writes.
      existing->set_id(r.lsn);
      AddLive(r.lsn, r.name, existing);
      ++summary_.log_applied;
      return absl::OkStatus();
    }
    // An earlier filter of this name, dropped before the one
    // whose snapshot was loaded was created.
    if (id > r.lsn) return absl::OkStatus();
    // An earlier filter of this name, replaced by a rename of the loaded
    // (older) filter to it: the file was written after that rename, so its
    // positions are past the creation.
    const std::vector<uint64_t> positions = existing->ShardPositions();
    if (!positions.empty() && r.lsn <= *std::max_element(positions.begin(), positions.end())) {
      return absl::OkStatus();
    }
    return absl::DataLossError(absl::StrFormat(
        "the write-ahead log creates filter %s at lsn %u, but the filter of that "
        "name created at lsn %u (loaded from %s) was never dropped: the log in %s and "
        "the snapshots do not belong together",
        FilterRegistry::QuoteName(r.name), r.lsn, id, p_.LoadedPath(r.name), wal_dir_));
  }

  absl::Status Drop(const WalRecord& r) {
    auto it = live_.find(r.filter_id);
    if (it == live_.end()) return absl::OkStatus();
    // A drop first waits for the writes queued before it (drops are
    // rare), so that the dropped filter's memory is given back before the
    // log creates more.
    if (absl::Status s = Drain(); !s.ok()) return s;
    const Live& dropped = *it->second;
    (void)p_.registry_->Drop(dropped.name, dropped.filter.get());
    {
      MutexLock lock(&p_.records_mu_);
      p_.records_.erase(dropped.name);
    }
    if (from_file_.contains(dropped.filter.get())) {
      if (absl::Status s = QuarantineDropped(dropped, r.lsn); !s.ok()) return s;
    } else if (p_.RenamedAwayFrom(dropped.name).empty()) {
      // None expected (and a file there that a filter renamed away from the
      // name still needs is that filter's).
      ::unlink(SnapshotPath(p_.data_dir_, dropped.name).c_str());
    }
    {
      MutexLock lock(&p_.legacy_mu_);
      p_.legacy_files_.erase(dropped.name);
    }
    removed_files_ = true;
    from_file_.erase(dropped.filter.get());  // Its address may be reused.
    live_.erase(it);
    ++summary_.log_applied;
    return absl::OkStatus();
  }

  // Filter r.filter_id takes the name r.name, dropping the filter there,
  // which must be r.replaced_id; a rename of a filter that is gone applies
  // to nothing, as do writes to it. Deterministic for a destination that
  // holds another filter than the record names (a damaged log, or snapshots
  // that do not belong with it): nothing changes, with a warning. One that
  // holds none (the replaced filter's file removed by this replay before a
  // crash cut it short) takes the filter.
  absl::Status Rename(const WalRecord& r) {
    auto it = live_.find(r.filter_id);
    if (it == live_.end()) return absl::OkStatus();
    Live& renamed = *it->second;
    if (renamed.name == r.name) return absl::OkStatus();  // Its file has the new name already.
    absl::StatusOr<std::shared_ptr<CuckooFilter>> dest = p_.registry_->Get(r.name);
    if (dest.ok() && ((*dest)->id() != r.replaced_id || r.replaced_id == 0)) {
      spdlog::warn(
          "the write-ahead log renames filter {} (id {}) to {} at lsn {}, replacing filter id {}, "
          "but {} holds filter id {}: the rename applies to nothing",
          FilterRegistry::QuoteName(renamed.name), r.filter_id, FilterRegistry::QuoteName(r.name),
          r.lsn, r.replaced_id, FilterRegistry::QuoteName(r.name), (*dest)->id());
      return absl::OkStatus();
    }
    // The Targets' names are read by the workers' messages.
    if (absl::Status s = Drain(); !s.ok()) return s;
    const std::string old_name = renamed.name;
    const std::string old_path = p_.LoadedPath(old_name);
    const std::string dest_path = p_.LoadedPath(r.name);
    std::shared_ptr<CuckooFilter> replaced;
    absl::StatusOr<std::shared_ptr<CuckooFilter>> done =
        p_.registry_->Rename(old_name, r.name, /*replace=*/true, renamed.filter.get(), &replaced);
    if (!done.ok()) return done.status();
    {
      MutexLock lock(&p_.records_mu_);
      p_.records_.erase(old_name);
      p_.records_.erase(r.name);
    }
    if (replaced != nullptr) {
      // Acknowledged as replaced: its file goes (the rename's filter is in
      // another file until start-up writes it under the new name).
      if (from_file_.contains(replaced.get()) && dest_path != old_path) {
        if (::unlink(dest_path.c_str()) != 0 && errno != ENOENT) {
          return absl::InternalError(
              absl::StrFormat("remove %s (filter %s, replaced by a rename at lsn %u): %s",
                              dest_path, FilterRegistry::QuoteName(r.name), r.lsn,
                              std::error_code(errno, std::generic_category()).message()));
        }
        spdlog::info("removed {}: filter {} was replaced by a rename at log position {}", dest_path,
                     FilterRegistry::QuoteName(r.name), r.lsn);
        removed_files_ = true;
      }
      from_file_.erase(replaced.get());
      live_.erase(replaced->id());
    }
    {
      MutexLock lock(&p_.legacy_mu_);
      p_.legacy_files_.erase(old_name);
      p_.legacy_files_.erase(r.name);
      if (from_file_.contains(renamed.filter.get()) &&
          old_path != SnapshotPath(p_.data_dir_, r.name)) {
        p_.legacy_files_[r.name] = old_path;
      }
    }
    // Not snapshotted under its new name: written before serving
    // (MoveRenamedFiles).
    p_.SetRecord(r.name, renamed.filter, {});
    renamed.name = r.name;
    ++summary_.log_applied;
    return absl::OkStatus();
  }

  // A file the log's history does not account for: copied back after the
  // drop (a restore: cuckooctl import is the way), or a drop whose file
  // removal a crash cut short. Never deleted without a word: moved to
  // quarantine/.
  absl::Status QuarantineDropped(const Live& dropped, uint64_t lsn) {
    const std::vector<uint64_t> positions = dropped.filter->ShardPositions();
    const uint64_t at =
        positions.empty() ? 0 : *std::max_element(positions.begin(), positions.end());
    const std::string path = p_.LoadedPath(dropped.name);
    absl::StatusOr<std::string> moved =
        p_.MoveToQuarantine(path, absl::FailedPreconditionError(absl::StrFormat(
                                      "the write-ahead log drops filter %s at log position %u",
                                      FilterRegistry::QuoteName(dropped.name), lsn)));
    if (!moved.ok()) return moved.status();
    spdlog::warn(
        "snapshot {} of filter {} (log position {}) is dropped by the write-ahead log "
        "at log position {}: not served, moved to {} (to restore a filter, use "
        "cuckooctl import)",
        path, FilterRegistry::QuoteName(dropped.name), at, lsn, *moved);
    ++summary_.dropped_by_log;
    return absl::OkStatus();
  }

  // A request's results, as its records are read (a batch's may take more
  // than one).
  void RequestResults(const WalRecord& r) {
    if (p_.request_window_ == nullptr) return;
    const WalRequest& q = r.request;
    RequestWindow::Outcome& o = results_read_[q.key];
    if (q.offset == 0) o = {.position = 0, .results = {}};
    if (o.results.size() != q.offset) {  // Not a chunk of the one being read.
      results_read_.erase(q.key);
      return;
    }
    o.results.insert(o.results.end(), q.results.begin(), q.results.end());
    if (o.results.size() == q.keys) {
      o.position = r.lsn;  // The answer's position: the last results record.
      p_.request_window_->RestoreDone(q.key, q.time, std::move(o));
      results_read_.erase(q.key);
    }
  }

  Persistence& p_;
  LoadSummary& summary_;
  const std::string wal_dir_;
  // The filters the log writes to, by id; stable addresses for the applier.
  absl::flat_hash_map<uint64_t, std::unique_ptr<Live>> live_;
  // The filters loaded from snapshot files: a drop the log replays moves
  // their file to quarantine/ instead of deleting it.
  absl::flat_hash_set<const CuckooFilter*> from_file_;
  uint64_t at_least_ = 1;
  absl::flat_hash_map<std::string, RequestWindow::Outcome> results_read_;
  bool removed_files_ = false;
  // Shard writes are applied by these workers while this thread reads the log.
  WalApplier applier_;
};

absl::Status Persistence::ReplayAndOpenLog(LoadSummary* summary) {
  WalOptions wal_options = options_.wal;
  wal_options.dir = (fs::path(data_dir_) / kWalDir).string();
  Env* env = wal_options.env != nullptr ? wal_options.env : PosixEnv();
  LogReplay replay(this, summary, wal_options.dir);
  // The request ids saved before the log was last truncated; the log's
  // request records come on top of them.
  if (absl::Status s = LoadRequestWindow(); !s.ok()) return s;
  const absl::Time t0 = absl::Now();
  absl::StatusOr<WalScan> scan =
      ScanWal(env, wal_options.dir, [&](const WalRecord& r) { return replay.Apply(r); });
  const absl::Status applied = replay.Drain();
  if (!scan.ok()) return scan.status();
  if (!applied.ok()) return applied;
  if (replay.removed_files()) {
    if (absl::Status s = SyncSnapshotDirectory(data_dir_, options_.wal.env); !s.ok()) return s;
  }
  summary->log_records = scan->records;
  summary->log_bytes = scan->bytes;
  summary->log_duration = absl::Now() - t0;
  LogReplayed(*scan, *summary);
  absl::StatusOr<std::unique_ptr<Wal>> wal = Wal::Open(wal_options, *scan, replay.at_least());
  if (!wal.ok()) return wal.status();
  wal_ = *std::move(wal);
  wal_published_.store(wal_.get(), std::memory_order_release);
  if (absl::Status s = LogVersionOneFilters(); !s.ok()) return s;
  return MoveRenamedFiles();
}

absl::Status Persistence::MoveRenamedFiles() {
  // A filter the replay renamed whose file is still its old name's: written
  // under its new name now, before anything can be created under the old
  // one (and snapshotted over its file).
  std::vector<std::string> names;
  {
    MutexLock lock(&legacy_mu_);
    for (const auto& [name, path] : legacy_files_) {
      // Not its own older build's file (which moves at its next snapshot as
      // before): the file of the name it had before a rename.
      if (path != LegacySnapshotPath(data_dir_, name)) names.push_back(name);
    }
  }
  std::sort(names.begin(), names.end());
  for (const std::string& name : names) {
    absl::StatusOr<SnapshotRun> run = SnapshotNow(name, /*changed_only=*/false);
    if (!run.ok()) {
      return absl::Status(run.status().code(),
                          absl::StrCat("writing filter ", FilterRegistry::QuoteName(name),
                                       ", renamed by the write-ahead log, under its new name: ",
                                       run.status().message()));
    }
  }
  return absl::OkStatus();
}

void Persistence::LogReplayed(const WalScan& scan, const LoadSummary& summary) {
  if (scan.cut_transaction != 0) {
    spdlog::warn(
        "write-ahead log: cut off a transaction (a Redis EXEC's writes) that a crash left "
        "unfinished, at {}",
        scan.cut);
  } else if (!scan.cut.empty()) {
    spdlog::warn(
        "write-ahead log: cut off a write torn by a crash at {} (what followed had not been made "
        "durable when the process or machine stopped)",
        scan.cut);
  }
  if (!scan.closed_ignored.empty()) {
    spdlog::warn(
        "write-ahead log: the clean-close file {} does not match the log ({}): its end was "
        "checked by reading its files whole",
        scan.closed_file, scan.closed_ignored);
  }
  if (scan.records > 0) {
    spdlog::info("replayed the write-ahead log: {} records ({} applied), {} in {} (read {}{})",
                 scan.records, summary.log_applied, FormatByteSize(scan.bytes),
                 Ms(summary.log_duration), FormatByteSize(scan.read_bytes),
                 scan.closed_cleanly ? ", closed cleanly" : "");
  }
}

absl::Status Persistence::LogVersionOneFilters() {
  // Filters loaded from version-1 snapshots (written before the log
  // existed) get an id now: a create record, which a replay before their
  // next snapshot adopts them by (LogReplay::CreateOverLoaded). They count
  // as not snapshotted, so that the next snapshot writes them in the
  // current format.
  for (auto& [name, filter] : registry_->List()) {
    if (filter->id() != 0) continue;
    const uint64_t lsn = wal_->AppendCreateFilter(name, filter->shape());
    filter->set_id(lsn);
    if (absl::Status s = wal_->SyncTo(lsn); !s.ok()) return s;
    SetRecord(name, filter, {});
    spdlog::info(
        "filter {} was loaded from a version-1 snapshot; from now on its writes are logged",
        FilterRegistry::QuoteName(name));
  }
  return absl::OkStatus();
}

absl::Status Persistence::LoadRequestWindow() {
  const std::string path = (fs::path(data_dir_) / kRequestWindowFile).string();
  ::unlink((path + ".tmp").c_str());  // A save a crash cut short.
  if (request_window_ == nullptr) return absl::OkStatus();
  std::error_code ec;
  if (!fs::exists(path, ec)) return absl::OkStatus();
  std::string bytes;
  {
    FILE* f = std::fopen(path.c_str(), "rb");
    if (f == nullptr) {
      return absl::InternalError(absl::StrFormat(
          "cannot open %s: %s", path, std::error_code(errno, std::generic_category()).message()));
    }
    char buf[1 << 16];
    size_t n;
    while ((n = std::fread(buf, 1, sizeof(buf), f)) > 0) bytes.append(buf, n);
    const bool failed = std::ferror(f) != 0;
    std::fclose(f);
    if (failed) return absl::InternalError(absl::StrCat("cannot read ", path));
  }
  absl::StatusOr<std::vector<RequestWindow::Saved>> saved = RequestWindow::Decode(bytes, path);
  if (!saved.ok()) return saved.status();
  for (RequestWindow::Saved& e : *saved) {
    if (e.in_doubt) {
      request_window_->RestoreInDoubt(e.key, e.time);
    } else {
      request_window_->RestoreDone(e.key, e.time, std::move(e.outcome));
    }
  }
  return absl::OkStatus();
}

}  // namespace cuckoo::server
