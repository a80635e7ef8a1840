#include "server/storage/persistence.h"

#include <unistd.h>

#include <deque>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "base/guarded.h"
#include "base/units.h"
#include "boost/asio/post.hpp"
#include "spdlog/spdlog.h"

namespace cuckoo::server {

namespace {

absl::Status ShuttingDown() {
  return absl::UnavailableError(
      "cuckood is shutting down; the final snapshot writes every changed filter (retry against "
      "another replica or after the restart)");
}

}  // namespace

// A queued Snapshot or DropFilter request.
struct Persistence::Job {
  enum Kind { kSnapshot, kDrop, kRename } kind;
  std::string name;
  bool changed_only = false;
  std::vector<SnapshotDone> snapshot_done;  // kSnapshot: every merged request.
  DropDone drop_done;                       // kDrop.
  std::weak_ptr<CuckooFilter> only;         // kDrop, kRename: the filter it is for.
  std::string new_name;                     // kRename.
  bool replace = false;                     // kRename.
  RenameDone rename_done;                   // kRename.
};

Persistence::Persistence(FilterRegistry* registry, std::string data_dir, PersistenceOptions options)
    : registry_(registry), data_dir_(std::move(data_dir)), options_(options) {}

Persistence::~Persistence() {
  Stop();
  if (lock_fd_ >= 0) ::close(lock_fd_);
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

void Persistence::RenameAsync(std::string name, std::string new_name, bool replace,
                              std::weak_ptr<CuckooFilter> only, RenameDone done) {
  auto job = std::make_unique<Job>();
  job->kind = Job::kRename;
  job->name = std::move(name);
  job->new_name = std::move(new_name);
  job->replace = replace;
  job->only = std::move(only);
  job->rename_done = std::move(done);
  Enqueue(std::move(job));
}

void Persistence::Finish(Job& job, const absl::Status& status) {
  if (job.kind == Job::kRename) {
    job.rename_done(status);
    return;
  }
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
  if (job->kind == Job::kRename) {
    job->rename_done(
        Guarded([&] { return RenameNow(job->name, job->new_name, job->replace, job->only); }));
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
