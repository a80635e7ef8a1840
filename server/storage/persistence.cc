#include "server/storage/persistence.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <condition_variable>
#include <cstdio>
#include <deque>
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
#include "base/guarded.h"
#include "base/units.h"
#include "boost/asio/post.hpp"
#include "server/wal/wal_apply.h"
#include "spdlog/spdlog.h"

namespace cuckoo::server {
namespace fs = std::filesystem;

namespace {

std::string Ms(absl::Duration d) {
  return absl::StrFormat("%.1fms", absl::ToDoubleMilliseconds(d));
}

absl::Status ShuttingDown() {
  return absl::UnavailableError(
      "cuckood is shutting down; the final snapshot writes every changed filter (retry against "
      "another replica or after the restart)");
}

}  // namespace

// A queued Snapshot or DropFilter request.
struct Persistence::Job {
  enum Kind { kSnapshot, kDrop } kind;
  std::string name;
  bool changed_only = false;
  std::vector<SnapshotDone> snapshot_done;  // kSnapshot: every merged request.
  DropDone drop_done;                       // kDrop.
  std::weak_ptr<CuckooFilter> only;         // kDrop: the filter it is for.
};

Persistence::Persistence(FilterRegistry* registry, std::string data_dir, PersistenceOptions options)
    : registry_(registry), data_dir_(std::move(data_dir)), options_(options) {}

Persistence::~Persistence() {
  Stop();
  if (lock_fd_ >= 0) ::close(lock_fd_);
}

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
  std::vector<fs::path> snapshots;
  for (fs::directory_iterator it(data_dir_, ec), end; !ec && it != end; it.increment(ec)) {
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
               file != std::string(kRequestWindowFile) + ".tmp") {
      spdlog::warn("ignoring {}: not a snapshot (*{})", p.string(), std::string(kSnapshotSuffix));
    }
  }
  if (ec) {
    return absl::InternalError(
        absl::StrFormat("cannot read data directory %s: %s", data_dir_, ec.message()));
  }
  std::sort(snapshots.begin(), snapshots.end());
  for (const fs::path& p : snapshots) {
    const std::string path = p.string();
    const std::string file = p.filename().string();
    const std::string name = file.substr(0, file.size() - kSnapshotSuffix.size());
    if (absl::Status s = FilterRegistry::ValidateName(name); !s.ok()) {
      if (absl::Status q = Quarantine(
              path, absl::DataLossError(absl::StrCat(
                        path, ": the file name is not <filter name>.cuckoo: ", s.message())));
          !q.ok()) {
        return q;
      }
      ++summary.quarantined;
      continue;
    }
    const absl::Time t0 = absl::Now();
    absl::StatusOr<LoadedSnapshot> loaded =
        ReadSnapshotFile(path, name, [&](const SnapshotHeader& h) {
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
    const uint64_t memory = loaded->filter->memory_bytes();
    absl::StatusOr<std::shared_ptr<CuckooFilter>> added =
        registry_->Add(name, std::move(loaded->filter));
    if (!added.ok()) {
      return absl::Status(added.status().code(),
                          absl::StrCat(path, ": ", added.status().message()));
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
        "loaded filter {} from {}: {} items, {} on disk, {} in memory, in {} ({:.2f} GB/s)", name,
        path, loaded->items, FormatByteSize(loaded->header.file_bytes), FormatByteSize(memory),
        Ms(took), loaded->header.file_bytes / 1e9 / std::max(1e-9, absl::ToDoubleSeconds(took)));
    ++summary.loaded;
    summary.items += loaded->items;
    summary.bytes += loaded->header.file_bytes;
  }
  if (external_log_ != nullptr) {
    if (absl::Status s = ReadCheckpoint(&summary); !s.ok()) return s;
  } else {
    if (fs::exists(fs::path(data_dir_) / kCheckpointFile, ec)) {
      return absl::FailedPreconditionError(absl::StrFormat(
          "data directory %s belongs to a cluster replica (it holds %s): start cuckood with "
          "--nats, or give this single node its own --data-dir",
          data_dir_, kCheckpointFile));
    }
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
  std::FILE* f = std::fopen(path.c_str(), "re");
  if (f == nullptr) {
    if (errno == ENOENT) return absl::OkStatus();
    return absl::InternalError(absl::StrFormat(
        "cannot read %s: %s", path, std::error_code(errno, std::generic_category()).message()));
  }
  char identity[512] = {0};
  unsigned long long resume = 0;
  const int got = std::fscanf(f, "cuckood cluster checkpoint v1 identity %511s resume_from %llu",
                              identity, &resume);
  std::fclose(f);
  if (got != 2 || resume == 0) {
    return absl::DataLossError(absl::StrFormat(
        "%s is not a cuckood checkpoint (\"cuckood cluster checkpoint v1 identity <log> "
        "resume_from <position>\"): remove it to replay the whole stream",
        path));
  }
  summary->log_identity = identity;
  summary->resume_from = resume;
  MutexLock lock(&file_mu_);
  checkpoint_ = resume;
  return absl::OkStatus();
}

absl::Status Persistence::WriteCheckpointLocked(const std::string& identity, uint64_t needed) {
  return WriteFileAtomically(
      kCheckpointFile,
      absl::StrFormat("cuckood cluster checkpoint v1\nidentity %s\nresume_from %u\n", identity,
                      needed));
}

absl::Status Persistence::WriteFileAtomically(const std::string& file, absl::string_view text) {
  const std::string path = (fs::path(data_dir_) / file).string();
  const std::string tmp = path + ".tmp";
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  auto fail = [&](const char* what) {
    const absl::Status s = absl::InternalError(absl::StrFormat(
        "%s %s: %s", what, tmp, std::error_code(errno, std::generic_category()).message()));
    if (fd >= 0) ::close(fd);
    ::unlink(tmp.c_str());
    return s;
  };
  if (fd < 0) return fail("create");
  for (size_t done = 0; done < text.size();) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n <= 0) return fail("write");
    done += static_cast<size_t>(n);
  }
  if (::fdatasync(fd) != 0) return fail("fdatasync");
  ::close(fd);
  fd = -1;
  if (::rename(tmp.c_str(), path.c_str()) != 0) return fail("rename");
  return SyncSnapshotDirectory(data_dir_);
}

void Persistence::TakeRequestedRemovalsLocked() {
  MutexLock lock(&removals_mu_);
  for (std::string& name : requested_removals_) pending_removals_.push_back(std::move(name));
  requested_removals_.clear();
}

void Persistence::ApplyDrop(absl::string_view name, const std::shared_ptr<CuckooFilter>& filter) {
  if (!registry_->Drop(name, filter.get()).ok()) return;
  {
    MutexLock lock(&records_mu_);
    records_.erase(name);
  }
  {
    MutexLock lock(&removals_mu_);
    requested_removals_.emplace_back(name);
  }
  boost::asio::post(io_, [this] {
    MutexLock file_lock(&file_mu_);
    TakeRequestedRemovalsLocked();
    TruncateLogLocked();
  });
}

absl::Status Persistence::ReplayAndOpenLog(LoadSummary* summary) {
  WalOptions wal_options = options_.wal;
  wal_options.dir = (fs::path(data_dir_) / kWalDir).string();
  Env* env = wal_options.env != nullptr ? wal_options.env : PosixEnv();
  // The filters the log writes to, by id; stable addresses for the applier.
  using Live = WalApplier::Target;
  absl::flat_hash_map<uint64_t, std::unique_ptr<Live>> live;
  auto add_live = [&](uint64_t id, std::string name, std::shared_ptr<CuckooFilter> filter) {
    live[id] = std::make_unique<Live>(Live{std::move(filter), std::move(name)});
  };
  // The filters loaded from snapshot files: a drop the log replays moves
  // their file to quarantine/ instead of deleting it.
  absl::flat_hash_set<const CuckooFilter*> from_file;
  // Appending goes on past every position a snapshot holds.
  uint64_t at_least = 1;
  for (auto& [name, filter] : registry_->List()) {
    from_file.insert(filter.get());
    const uint64_t id = filter->id();
    if (id != 0) add_live(id, name, filter);
    at_least = std::max(at_least, id + 1);
    for (uint64_t p : filter->ShardPositions()) at_least = std::max(at_least, p + 1);
  }
  // The request ids saved before the log was last truncated; the log's
  // request records come on top of them.
  if (absl::Status s = LoadRequestWindow(); !s.ok()) return s;
  // A request's results, as its records are read (a batch's may take more
  // than one).
  absl::flat_hash_map<std::string, RequestWindow::Outcome> results_read;
  const absl::Time t0 = absl::Now();
  bool removed_files = false;
  // Shard writes are applied by these workers while this thread reads the
  // log; creations and drops here. A drop first waits for the writes queued
  // before it (drops are rare), so that the dropped filter's memory is
  // given back before the log creates more.
  WalApplier applier(std::max(2u, std::thread::hardware_concurrency()));
  uint64_t writes_applied = 0;
  absl::StatusOr<WalScan> scan =
      ScanWal(env, wal_options.dir, [&](const WalRecord& r) -> absl::Status {
        switch (r.type) {
          case WalRecordType::kCreateFilter: {
            if (live.contains(r.lsn)) return absl::OkStatus();  // Loaded from its snapshot.
            absl::StatusOr<std::shared_ptr<CuckooFilter>> existing = registry_->Get(r.name);
            if (existing.ok()) {
              const uint64_t id = (*existing)->id();
              if (id == 0) {
                // A snapshot that records no id: a version-1 file (its
                // positions are 0), or an imported filter's, which ImportNow
                // writes before the log creates the filter, with every
                // shard's position set to the log's last lsn then. A
                // creation at or before that is of an earlier filter of the
                // name, dropped before the import.
                const std::vector<uint64_t> positions = (*existing)->ShardPositions();
                if (!positions.empty() &&
                    r.lsn <= *std::max_element(positions.begin(), positions.end())) {
                  return absl::OkStatus();
                }
                // The record that gave the filter its id: from here the log
                // holds its writes.
                (*existing)->set_id(r.lsn);
                add_live(r.lsn, r.name, *existing);
                ++summary->log_applied;
                return absl::OkStatus();
              }
              // An earlier filter of this name, dropped before the one
              // whose snapshot was loaded was created.
              if (id > r.lsn) return absl::OkStatus();
              return absl::DataLossError(absl::StrFormat(
                  "the write-ahead log creates filter \"%s\" at lsn %u, but the filter of that "
                  "name created at lsn %u (loaded from %s) was never dropped: the log in %s and "
                  "the snapshots do not belong together",
                  r.name, r.lsn, id, SnapshotPath(data_dir_, r.name), wal_options.dir));
            }
            if (absl::Status room =
                    registry_->CheckRoom(r.name, CuckooFilter::MemoryBytes(r.shape));
                !room.ok()) {
              return absl::Status(room.code(),
                                  absl::StrCat("replaying the write-ahead log (filter \"", r.name,
                                               "\" created at lsn ", r.lsn, "): ", room.message(),
                                               "; raise --memory-budget / --max-filters"));
            }
            absl::StatusOr<std::unique_ptr<CuckooFilter>> f = CuckooFilter::FromShape(r.shape);
            if (!f.ok()) return f.status();
            (*f)->set_id(r.lsn);
            absl::StatusOr<std::shared_ptr<CuckooFilter>> added =
                registry_->Add(r.name, *std::move(f));
            if (!added.ok()) return added.status();
            add_live(r.lsn, r.name, *added);
            ++summary->log_applied;
            return absl::OkStatus();
          }
          case WalRecordType::kDropFilter: {
            auto it = live.find(r.filter_id);
            if (it == live.end()) return absl::OkStatus();
            if (absl::Status s = applier.Drain(&writes_applied); !s.ok()) return s;
            const Live& dropped = *it->second;
            (void)registry_->Drop(dropped.name, dropped.filter.get());
            {
              MutexLock lock(&records_mu_);
              records_.erase(dropped.name);
            }
            if (from_file.contains(dropped.filter.get())) {
              // A file the log's history does not account for: copied back
              // after the drop (a restore: cuckooctl import is the way), or
              // a drop whose file removal a crash cut short. Never deleted
              // without a word: moved to quarantine/.
              const std::vector<uint64_t> positions = dropped.filter->ShardPositions();
              const uint64_t at =
                  positions.empty() ? 0 : *std::max_element(positions.begin(), positions.end());
              const std::string path = SnapshotPath(data_dir_, dropped.name);
              absl::StatusOr<std::string> moved = MoveToQuarantine(
                  path, absl::FailedPreconditionError(absl::StrFormat(
                            "the write-ahead log drops filter \"%s\" at log position %u",
                            dropped.name, r.lsn)));
              if (!moved.ok()) return moved.status();
              spdlog::warn(
                  "snapshot {} of filter {} (log position {}) is dropped by the write-ahead log "
                  "at log position {}: not served, moved to {} (to restore a filter, use "
                  "cuckooctl import)",
                  path, dropped.name, at, r.lsn, *moved);
              ++summary->dropped_by_log;
            } else {
              ::unlink(SnapshotPath(data_dir_, dropped.name).c_str());  // None expected.
            }
            removed_files = true;
            from_file.erase(dropped.filter.get());  // Its address may be reused.
            live.erase(it);
            ++summary->log_applied;
            return absl::OkStatus();
          }
          case WalRecordType::kInsert:
          case WalRecordType::kDelete: {
            auto it = live.find(r.filter_id);
            if (it == live.end()) return absl::OkStatus();  // Of a filter dropped since.
            applier.Apply(it->second.get(), r);
            return absl::OkStatus();
          }
          case WalRecordType::kRequestStart:
            if (request_window_ != nullptr) {
              request_window_->RestoreInDoubt(r.request.key, r.request.time);
            }
            return absl::OkStatus();
          case WalRecordType::kRequestResults: {
            if (request_window_ == nullptr) return absl::OkStatus();
            const WalRequest& q = r.request;
            RequestWindow::Outcome& o = results_read[q.key];
            if (q.offset == 0) o = {.position = 0, .results = {}};
            if (o.results.size() != q.offset) {  // Not a chunk of the one being read.
              results_read.erase(q.key);
              return absl::OkStatus();
            }
            o.results.insert(o.results.end(), q.results.begin(), q.results.end());
            if (o.results.size() == q.keys) {
              o.position = r.lsn;  // The answer's position: the last results record.
              request_window_->RestoreDone(q.key, q.time, std::move(o));
              results_read.erase(q.key);
            }
            return absl::OkStatus();
          }
        }
        return absl::OkStatus();
      });
  const absl::Status applied = applier.Drain(&writes_applied);
  summary->log_applied += writes_applied;
  if (!scan.ok()) return scan.status();
  if (!applied.ok()) return applied;
  if (removed_files) {
    if (absl::Status s = SyncSnapshotDirectory(data_dir_, options_.wal.env); !s.ok()) return s;
  }
  if (!scan->cut.empty()) {
    spdlog::warn(
        "write-ahead log: cut off a write torn by a crash at {} (what followed had not been made "
        "durable when the process or machine stopped)",
        scan->cut);
  }
  if (!scan->closed_ignored.empty()) {
    spdlog::warn(
        "write-ahead log: the clean-close file {} does not match the log ({}): its end was "
        "checked by reading its files whole",
        scan->closed_file, scan->closed_ignored);
  }
  summary->log_records = scan->records;
  summary->log_bytes = scan->bytes;
  summary->log_duration = absl::Now() - t0;
  if (scan->records > 0) {
    spdlog::info("replayed the write-ahead log: {} records ({} applied), {} in {} (read {}{})",
                 scan->records, summary->log_applied, FormatByteSize(scan->bytes),
                 Ms(summary->log_duration), FormatByteSize(scan->read_bytes),
                 scan->closed_cleanly ? ", closed cleanly" : "");
  }
  absl::StatusOr<std::unique_ptr<Wal>> wal = Wal::Open(wal_options, *scan, at_least);
  if (!wal.ok()) return wal.status();
  wal_ = *std::move(wal);
  wal_published_.store(wal_.get(), std::memory_order_release);
  // Filters loaded from version-1 snapshots (written before the log
  // existed) get an id now: a create record, which a replay before their
  // next snapshot adopts them by (above). They count as not snapshotted, so
  // that the next snapshot writes them in the current format.
  for (auto& [name, filter] : registry_->List()) {
    if (filter->id() != 0) continue;
    const uint64_t lsn = wal_->AppendCreateFilter(name, filter->shape());
    filter->set_id(lsn);
    if (absl::Status s = wal_->SyncTo(lsn); !s.ok()) return s;
    SetRecord(name, filter, {});
    spdlog::info(
        "filter {} was loaded from a version-1 snapshot; from now on its writes are logged", name);
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

absl::Status Persistence::LogCreate(absl::string_view name, CuckooFilter& filter, uint64_t* lsn) {
  if (wal_ == nullptr) return absl::OkStatus();
  *lsn = wal_->AppendCreateFilter(name, filter.shape());
  filter.set_id(*lsn);
  return absl::OkStatus();
}

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
                        {.buffer_bytes = options_.snapshot_buffer_bytes, .env = options_.wal.env});
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
  const std::string path = SnapshotPath(data_dir_, name);
  if (::unlink(path.c_str()) != 0 && errno != ENOENT) {
    return absl::InternalError(absl::StrFormat(
        "remove %s: %s", path, std::error_code(errno, std::generic_category()).message()));
  }
  ::unlink(SnapshotTempPath(data_dir_, name).c_str());
  return options_.sync_directory ? options_.sync_directory(data_dir_)
                                 : SyncSnapshotDirectory(data_dir_, options_.wal.env);
}

void Persistence::TruncateLogLocked() {
  if (external_log_ != nullptr) TakeRequestedRemovalsLocked();
  if (wal_ == nullptr && external_log_ == nullptr) return;
  for (auto it = pending_removals_.begin(); it != pending_removals_.end();) {
    absl::StatusOr<std::shared_ptr<CuckooFilter>> now = registry_->Get(*it);
    // A new filter of the name whose snapshot replaced the file, or the
    // file removed now.
    if ((now.ok() && Record(*it, **now).exists) || RemoveSnapshotFile(*it).ok()) {
      it = pending_removals_.erase(it);
    } else {
      ++it;
    }
  }
  if (!pending_removals_.empty()) return;
  // The lsn is read before the list: a filter created after it has a
  // larger id, and one created before is in the list (creations log and
  // publish under the registry's lock).
  uint64_t needed =
      wal_ != nullptr ? wal_->Stats().appended_lsn + 1 : external_log_->AppliedPosition() + 1;
  for (const auto& [name, filter] : registry_->List()) {
    const uint64_t id = filter->id();
    const SnapshotRecord r = Record(name, *filter);
    const bool snapshotted = r.exists && r.filter_id == id && id != 0;
    const uint64_t from = snapshotted ? std::max(r.min_position, id) + 1 : id;
    // A filter no entry has reached since its snapshot needs nothing of the
    // log up to the position read above (see UntouchedSinceSnapshot),
    // however old its snapshot: an idle filter holds no log back (nor a
    // cluster's stream).
    if (from < needed && snapshotted && UntouchedSinceSnapshot(name, *filter)) {
      continue;
    }
    needed = std::min(needed, from);
  }
  if (external_log_ != nullptr) {
    const std::string identity = external_log_->Identity();
    if (identity.empty() || needed <= checkpoint_) return;
    if (absl::Status s = WriteCheckpointLocked(identity, needed); !s.ok()) {
      spdlog::error("could not write the cluster checkpoint: {}", std::string(s.message()));
      return;
    }
    checkpoint_ = needed;
    external_log_->Checkpointed(needed);
    return;
  }
  if (request_window_ != nullptr) {
    // Truncation may drop request records: the ids still inside the window
    // go to REQUESTS first (those whose results are not synced yet, in
    // doubt: their records are past `needed`, kept).
    const std::vector<RequestWindow::Saved> live = request_window_->Save(wal_->Stats().synced_lsn);
    std::error_code ec;
    const bool none = live.empty() && !fs::exists(fs::path(data_dir_) / kRequestWindowFile, ec);
    if (absl::Status s = none
                             ? absl::OkStatus()
                             : WriteFileAtomically(kRequestWindowFile, RequestWindow::Encode(live));
        !s.ok()) {
      spdlog::error(
          "could not save the request window, so the write-ahead log is not truncated: {}",
          std::string(s.message()));
      return;
    }
  }
  if (absl::Status s = wal_->Truncate(needed); !s.ok()) {
    spdlog::error("could not truncate the write-ahead log: {}", std::string(s.message()));
  }
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
      return absl::NotFoundError(
          absl::StrFormat("filter \"%s\" was dropped before its snapshot was written", name));
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
      spdlog::error("snapshot of filter {} failed: {}", filter_name,
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
    spdlog::info("snapshot of filter {}: {} items, {} to {} in {} ({:.2f} GB/s)", filter_name,
                 w->items, FormatByteSize(w->bytes), w->path, Ms(w->duration),
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
    return absl::Status(why.code() == absl::StatusCode::kInternal ||
                                why.code() == absl::StatusCode::kResourceExhausted ||
                                why.code() == absl::StatusCode::kUnavailable
                            ? why.code()
                            : absl::StatusCode::kInternal,
                        absl::StrCat("filter \"", name, "\" not dropped: ", why.message()));
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
        std::string(name), std::string(s.message()));
    pending_removals_.emplace_back(name);
  }
  return filter;
}

void Persistence::SnapshotAsync(std::string name, bool changed_only, SnapshotDone done) {
  auto job = std::make_unique<Job>();
  job->kind = Job::kSnapshot;
  job->name = std::move(name);
  job->changed_only = changed_only;
  job->snapshot_done.push_back(std::move(done));
  Enqueue(std::move(job));
}

void Persistence::DropAsync(std::string name, std::weak_ptr<CuckooFilter> only, DropDone done) {
  auto job = std::make_unique<Job>();
  job->kind = Job::kDrop;
  job->name = std::move(name);
  job->only = std::move(only);
  job->drop_done = std::move(done);
  Enqueue(std::move(job));
}

void Persistence::Finish(Job& job, const absl::Status& status) {
  if (job.kind == Job::kDrop) {
    job.drop_done(status);
    return;
  }
  for (SnapshotDone& done : job.snapshot_done) done(status);
}

void Persistence::Enqueue(std::unique_ptr<Job> job) {
  {
    MutexLock lock(&state_mu_);
    if (running_ && !cancelled_) {
      if (job->kind == Job::kSnapshot) {
        for (const std::unique_ptr<Job>& queued : queue_) {
          if (queued->kind == Job::kSnapshot && queued->name == job->name) {
            // Waiting already: one write answers both.
            queued->changed_only = queued->changed_only && job->changed_only;
            for (SnapshotDone& done : job->snapshot_done) {
              queued->snapshot_done.push_back(std::move(done));
            }
            return;
          }
        }
      }
      if (queue_.size() < options_.max_queued) {
        queue_.push_back(std::move(job));
        boost::asio::post(io_, [this] { RunOne(); });
        return;
      }
      lock.Unlock();
      Finish(*job, absl::ResourceExhaustedError(absl::StrFormat(
                       "%u snapshot and drop requests are waiting already; retry later",
                       options_.max_queued)));
      return;
    }
    if (cancelled_) {
      lock.Unlock();
      Finish(*job, ShuttingDown());
      return;
    }
  }
  // Not started, or stopped: carry it out here.
  if (job->kind == Job::kDrop) {
    job->drop_done(DropNow(job->name, job->only));
  } else {
    absl::StatusOr<SnapshotRun> run = SnapshotNow(job->name, job->changed_only);
    for (SnapshotDone& done : job->snapshot_done) done(run);
  }
}

void Persistence::RunOne() {
  std::unique_ptr<Job> job;
  {
    MutexLock lock(&state_mu_);
    if (queue_.empty()) return;  // Cancelled.
    job = std::move(queue_.front());
    queue_.pop_front();
  }
  // Whatever happens (std::bad_alloc), the job is answered and this thread
  // goes on.
  if (job->kind == Job::kDrop) {
    job->drop_done(Guarded([&] { return DropNow(job->name, job->only); }));
    return;
  }
  absl::StatusOr<SnapshotRun> run =
      Guarded([&] { return SnapshotNow(job->name, job->changed_only); });
  for (SnapshotDone& done : job->snapshot_done) done(run);
}

void Persistence::CancelQueued() {
  std::deque<std::unique_ptr<Job>> cancelled;
  {
    MutexLock lock(&state_mu_);
    cancelled_ = true;
    cancelled.swap(queue_);
  }
  for (std::unique_ptr<Job>& job : cancelled) Finish(*job, ShuttingDown());
}

void Persistence::Start(absl::Duration interval) {
  MutexLock lock(&state_mu_);
  if (running_) return;
  running_ = true;
  cancelled_ = false;
  interval_ = interval;
  io_.restart();
  work_.emplace(io_.get_executor());
  timer_ = std::make_unique<boost::asio::steady_timer>(io_);
  if (interval_ > absl::ZeroDuration()) ArmTimer();
  log_timer_ = std::make_unique<boost::asio::steady_timer>(io_);
  ArmLogCheck();
  thread_ = std::thread([this] { io_.run(); });
}

void Persistence::ArmTimer() {
  timer_->expires_after(absl::ToChronoNanoseconds(interval_));
  timer_->async_wait([this](const boost::system::error_code& ec) {
    if (ec) return;  // Cancelled by Stop().
    absl::StatusOr<SnapshotRun> run = SnapshotNow("", /*changed_only=*/true);
    if (!run.ok()) {
      spdlog::error("periodic snapshot: {}", std::string(run.status().message()));
    }
    MutexLock lock(&state_mu_);
    if (running_) ArmTimer();
  });
}

void Persistence::ArmLogCheck() {
  log_timer_->expires_after(std::chrono::seconds(1));
  log_timer_->async_wait([this](const boost::system::error_code& ec) {
    if (ec) return;  // Cancelled by Stop().
    if (wal_ != nullptr && wal_->Stats().disk_bytes > options_.wal_max_bytes &&
        absl::Now() - last_early_snapshot_ >= absl::Seconds(2)) {
      last_early_snapshot_ = absl::Now();
      spdlog::info(
          "the write-ahead log holds {} (more than --wal-max-size={}): snapshotting changed "
          "filters so that it can be truncated",
          FormatByteSize(wal_->Stats().disk_bytes), FormatByteSize(options_.wal_max_bytes));
      absl::StatusOr<SnapshotRun> run = Guarded([&] { return SnapshotNow("", true); });
      if (!run.ok()) {
        spdlog::error("early snapshot: {}", std::string(run.status().message()));
      }
    }
    MutexLock lock(&state_mu_);
    if (running_) ArmLogCheck();
  });
}

void Persistence::CloseLog() {
  if (external_log_ != nullptr) {
    MutexLock file_lock(&file_mu_);
    TruncateLogLocked();
    return;
  }
  if (wal_ == nullptr) return;
  {
    MutexLock file_lock(&file_mu_);
    TruncateLogLocked();
  }
  wal_->Close();
}

void Persistence::Stop() {
  {
    MutexLock lock(&state_mu_);
    if (!running_) return;
  }
  CancelQueued();
  {
    MutexLock lock(&state_mu_);
    running_ = false;
    // The timer belongs to the background thread: cancel it there.
    boost::asio::post(io_, [this] {
      timer_->cancel();
      log_timer_->cancel();
    });
    work_.reset();
  }
  thread_.join();
  timer_.reset();
  log_timer_.reset();
  MutexLock lock(&state_mu_);
  cancelled_ = false;  // From now on requests run in the caller.
}

}  // namespace cuckoo::server
