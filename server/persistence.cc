#include "server/persistence.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <system_error>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "boost/asio/post.hpp"
#include "server/config.h"
#include "server/metrics.h"
#include "spdlog/spdlog.h"

namespace cuckoo::server {
namespace fs = std::filesystem;

namespace {

std::string Ms(absl::Duration d) {
  return absl::StrFormat("%.1fms", absl::ToDoubleMilliseconds(d));
}

bool Changed(const CuckooFilter& f) {
  return !f.last_snapshot().exists || f.unsnapshotted_changes() > 0;
}

}  // namespace

Persistence::Persistence(FilterRegistry* registry, std::string data_dir, Metrics* metrics)
    : registry_(registry), data_dir_(std::move(data_dir)), metrics_(metrics) {}

Persistence::~Persistence() {
  Stop();
  if (lock_fd_ >= 0) ::close(lock_fd_);
}

void Persistence::Quarantine(const std::string& path, const absl::Status& why) {
  const fs::path dir = fs::path(data_dir_) / kQuarantineDir;
  std::error_code ec;
  fs::create_directories(dir, ec);
  const std::string stamp = absl::FormatTime("%Y%m%dT%H%M%SZ", absl::Now(), absl::UTCTimeZone());
  fs::path target = dir / absl::StrCat(fs::path(path).filename().string(), ".", stamp);
  for (int i = 1; fs::exists(target, ec); ++i) {
    target = dir / absl::StrCat(fs::path(path).filename().string(), ".", stamp, ".", i);
  }
  if (!ec) fs::rename(path, target, ec);
  if (ec) {
    spdlog::error("bad snapshot {} not loaded ({}); moving it to {} failed: {}", path,
                  std::string(why.message()), target.string(), ec.message());
    return;
  }
  spdlog::error("bad snapshot not loaded, moved to {}: {}", target.string(),
                std::string(why.message()));
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
      Quarantine(path, absl::DataLossError(absl::StrCat(
                           path, ": the file name is not <filter name>.cuckoo: ", s.message())));
      ++summary.quarantined;
      continue;
    }
    const absl::Time t0 = absl::Now();
    absl::StatusOr<LoadedSnapshot> loaded =
        ReadSnapshotFile(path, name, [&](const SnapshotHeader& h) {
          uint64_t bytes = CuckooTable::AllocationBytes(h.shape) * h.shape.shards;
          absl::Status room = registry_->CheckRoom(name, bytes);
          if (room.ok()) return room;
          return absl::Status(room.code(),
                              absl::StrCat(path, ": ", room.message(),
                                           "; raise --memory-budget / --max-filters, or move the "
                                           "file out of the data directory"));
        });
    if (!loaded.ok()) {
      if (absl::IsDataLoss(loaded.status())) {
        Quarantine(path, loaded.status());
        ++summary.quarantined;
        continue;
      }
      return loaded.status();
    }
    const uint64_t memory = loaded->filter->memory_bytes();
    if (absl::Status s = registry_->Add(name, std::move(loaded->filter)); !s.ok()) {
      return absl::Status(s.code(), absl::StrCat(path, ": ", s.message()));
    }
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
    if (changed_only && !Changed(*filter)) {
      run.unchanged.push_back(filter_name);
      continue;
    }
    absl::StatusOr<SnapshotWriteResult> w = WriteSnapshotFile(*filter, filter_name, data_dir_);
    if (!w.ok()) {
      // Dropped since the list was taken: nothing to write.
      if (absl::IsFailedPrecondition(w.status()) && name.empty()) continue;
      if (metrics_ != nullptr) metrics_->RecordSnapshotWrite(false, 0, absl::ZeroDuration());
      spdlog::error("snapshot of filter {} failed: {}", filter_name,
                    std::string(w.status().message()));
      if (first_error.ok()) first_error = w.status();
      continue;
    }
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

void Persistence::SnapshotAsync(std::string name, bool changed_only,
                                std::function<void(absl::StatusOr<SnapshotRun>)> done) {
  {
    std::lock_guard<std::mutex> lock(state_mu_);
    if (running_) {
      boost::asio::post(io_, [this, name = std::move(name), changed_only, done = std::move(done)] {
        done(SnapshotNow(name, changed_only));
      });
      return;
    }
  }
  done(SnapshotNow(name, changed_only));
}

absl::StatusOr<std::shared_ptr<CuckooFilter>> Persistence::Drop(absl::string_view name) {
  absl::StatusOr<std::shared_ptr<CuckooFilter>> filter = registry_->Get(name);
  if (!filter.ok()) return filter.status();
  if (absl::Status s = RemoveSnapshotFile(**filter, name, data_dir_); !s.ok()) {
    return absl::InternalError(absl::StrCat("filter \"", name, "\" not dropped: ", s.message()));
  }
  if (absl::Status s = registry_->Drop(name, filter->get()); !s.ok()) return s;
  return filter;
}

void Persistence::Start(absl::Duration interval) {
  std::lock_guard<std::mutex> lock(state_mu_);
  if (running_) return;
  running_ = true;
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
    running_ = false;
    // The timer belongs to the background thread: cancel it there.
    boost::asio::post(io_, [this] { timer_->cancel(); });
    work_.reset();
  }
  thread_.join();
  timer_.reset();
}

}  // namespace cuckoo::server
