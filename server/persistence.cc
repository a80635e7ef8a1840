#include "server/persistence.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <filesystem>
#include <system_error>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "boost/asio/post.hpp"
#include "server/config.h"
#include "server/metrics.h"
#include "server/status.h"
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

Persistence::Persistence(FilterRegistry* registry, std::string data_dir, Metrics* metrics,
                         PersistenceOptions options)
    : registry_(registry), data_dir_(std::move(data_dir)), metrics_(metrics), options_(options) {}

Persistence::~Persistence() {
  Stop();
  if (lock_fd_ >= 0) ::close(lock_fd_);
}

absl::Status Persistence::Quarantine(const std::string& path, const absl::Status& why) {
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
        "bad snapshot %s (%s) could not be moved to %s: %s; move it out of the data directory "
        "(or fix the permissions) and start again",
        path, why.message(), target.string(), ec.message()));
  }
  spdlog::error("bad snapshot not loaded, moved to {}: {}", target.string(),
                std::string(why.message()));
  return absl::OkStatus();
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
    } else if (file != kQuarantineDir && file != kLockFile) {
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
               .changes = (*added)->changes()});
    const absl::Duration took = absl::Now() - t0;
    spdlog::info(
        "loaded filter {} from {}: {} items, {} on disk, {} in memory, in {} ({:.2f} GB/s)", name,
        path, loaded->items, FormatByteSize(loaded->header.file_bytes), FormatByteSize(memory),
        Ms(took), loaded->header.file_bytes / 1e9 / std::max(1e-9, absl::ToDoubleSeconds(took)));
    ++summary.loaded;
    summary.items += loaded->items;
    summary.bytes += loaded->header.file_bytes;
  }
  summary.duration = absl::Now() - start;
  return summary;
}

void Persistence::SetRecord(absl::string_view name, const std::shared_ptr<CuckooFilter>& filter,
                            const SnapshotRecord& record) {
  std::lock_guard<std::mutex> lock(records_mu_);
  records_[name] = Entry{.filter = filter, .record = record};
}

SnapshotRecord Persistence::Record(absl::string_view name, const CuckooFilter& filter) const {
  std::lock_guard<std::mutex> lock(records_mu_);
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
      if (r.exists && r.UnsnapshottedChanges(*filter) == 0) {
        run.unchanged.push_back(filter_name);
        continue;
      }
    }
    std::lock_guard<std::mutex> file_lock(file_mu_);
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
    absl::StatusOr<SnapshotWriteResult> w = WriteSnapshotFile(
        *filter, filter_name, data_dir_, {.buffer_bytes = options_.snapshot_buffer_bytes});
    if (!w.ok()) {
      if (metrics_ != nullptr) metrics_->RecordSnapshotWrite(false, 0, absl::ZeroDuration());
      spdlog::error("snapshot of filter {} failed: {}", filter_name,
                    std::string(w.status().message()));
      if (first_error.ok()) first_error = w.status();
      continue;
    }
    SetRecord(filter_name, filter,
              {.exists = true, .time = w->taken, .bytes = w->bytes, .changes = w->changes});
    spdlog::info("snapshot of filter {}: {} items, {} to {} in {} ({:.2f} GB/s)", filter_name,
                 w->items, FormatByteSize(w->bytes), w->path, Ms(w->duration),
                 w->bytes / 1e9 / std::max(1e-9, absl::ToDoubleSeconds(w->duration)));
    if (metrics_ != nullptr) metrics_->RecordSnapshotWrite(true, w->bytes, w->duration);
    run.bytes += w->bytes;
    run.written.emplace_back(filter_name, *std::move(w));
  }
  if (!first_error.ok()) return first_error;
  run.duration = absl::Now() - start;
  return run;
}

absl::StatusOr<std::shared_ptr<CuckooFilter>> Persistence::DropNow(
    absl::string_view name, const std::weak_ptr<CuckooFilter>& only) {
  std::lock_guard<std::mutex> file_lock(file_mu_);
  if (options_.before_file_operation) options_.before_file_operation("remove", name);
  absl::StatusOr<std::shared_ptr<CuckooFilter>> filter = registry_->Get(name);
  if (!filter.ok()) return filter.status();
  if (only.lock() != *filter) {
    return absl::NotFoundError(absl::StrFormat(
        "filter \"%s\" not found: it was dropped while this call waited (a filter of that name "
        "created since is kept)",
        absl::CHexEscape(name)));
  }
  const std::string path = SnapshotPath(data_dir_, name);
  auto not_dropped = [&](absl::string_view why) {
    return absl::InternalError(absl::StrCat("filter \"", name, "\" not dropped: ", why));
  };
  if (::unlink(path.c_str()) != 0 && errno != ENOENT) {
    return not_dropped(absl::StrFormat("remove %s: %s", path,
                                       std::error_code(errno, std::generic_category()).message()));
  }
  ::unlink(SnapshotTempPath(data_dir_, name).c_str());
  if (absl::Status s = options_.sync_directory ? options_.sync_directory(data_dir_)
                                               : SyncSnapshotDirectory(data_dir_);
      !s.ok()) {
    // The file is gone, or will be after a crash: the filter is kept, so
    // its snapshot must be written again.
    SetRecord(name, *filter, {});
    return not_dropped(
        absl::StrCat(s.message(), "; its snapshot will be written again at the next snapshot"));
  }
  if (absl::Status s = registry_->Drop(name, filter->get()); !s.ok()) return s;
  std::lock_guard<std::mutex> lock(records_mu_);
  records_.erase(name);
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
    std::unique_lock<std::mutex> lock(state_mu_);
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
      lock.unlock();
      Finish(*job, absl::ResourceExhaustedError(absl::StrFormat(
                       "%u snapshot and drop requests are waiting already; retry later",
                       options_.max_queued)));
      return;
    }
    if (cancelled_) {
      lock.unlock();
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
    std::lock_guard<std::mutex> lock(state_mu_);
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
    std::lock_guard<std::mutex> lock(state_mu_);
    cancelled_ = true;
    cancelled.swap(queue_);
  }
  for (std::unique_ptr<Job>& job : cancelled) Finish(*job, ShuttingDown());
}

void Persistence::Start(absl::Duration interval) {
  std::lock_guard<std::mutex> lock(state_mu_);
  if (running_) return;
  running_ = true;
  cancelled_ = false;
  interval_ = interval;
  io_.restart();
  work_.emplace(io_.get_executor());
  timer_ = std::make_unique<boost::asio::steady_timer>(io_);
  if (interval_ > absl::ZeroDuration()) ArmTimer();
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
    std::lock_guard<std::mutex> lock(state_mu_);
    if (running_) ArmTimer();
  });
}

void Persistence::Stop() {
  {
    std::lock_guard<std::mutex> lock(state_mu_);
    if (!running_) return;
  }
  CancelQueued();
  {
    std::lock_guard<std::mutex> lock(state_mu_);
    running_ = false;
    // The timer belongs to the background thread: cancel it there.
    boost::asio::post(io_, [this] { timer_->cancel(); });
    work_.reset();
  }
  thread_.join();
  timer_.reset();
  std::lock_guard<std::mutex> lock(state_mu_);
  cancelled_ = false;  // From now on requests run in the caller.
}

}  // namespace cuckoo::server
