#include "server/service/transfers.h"

#include <algorithm>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"
#include "base/units.h"

namespace cuckoo::server {

// ---- TransferDisk ----

TransferDisk::TransferDisk(std::string data_dir, uint64_t reserve_bytes, std::string reserve_for,
                           Env* env)
    : data_dir_(std::move(data_dir)),
      reserve_bytes_(reserve_bytes),
      reserve_for_(std::move(reserve_for)),
      env_(env != nullptr ? env : PosixEnv()) {}

TransferDisk::Claim::Claim(Claim&& other) noexcept
    : disk_(std::exchange(other.disk_, nullptr)), left_(std::exchange(other.left_, 0)) {}

TransferDisk::Claim& TransferDisk::Claim::operator=(Claim&& other) noexcept {
  if (this != &other) {
    Reset();
    disk_ = std::exchange(other.disk_, nullptr);
    left_ = std::exchange(other.left_, 0);
  }
  return *this;
}

void TransferDisk::Claim::Wrote(uint64_t bytes) {
  bytes = std::min(bytes, left_);
  if (disk_ != nullptr && bytes > 0) disk_->Release(bytes);
  left_ -= bytes;
}

void TransferDisk::Claim::Reset() {
  if (disk_ != nullptr && left_ > 0) disk_->Release(left_);
  disk_ = nullptr;
  left_ = 0;
}

void TransferDisk::Release(uint64_t bytes) {
  MutexLock lock(&mu_);
  claimed_ -= std::min(claimed_, bytes);
}

uint64_t TransferDisk::claimed_bytes() const {
  MutexLock lock(&mu_);
  return claimed_;
}

absl::Status TransferDisk::Check(uint64_t bytes, std::string_view what) {
  absl::StatusOr<VolumeSpace> space = env_->DiskSpace(data_dir_);
  if (absl::IsUnimplemented(space.status())) return absl::OkStatus();
  if (!space.ok()) return space.status();
  const uint64_t kept = reserve_bytes_ + claimed_;
  const uint64_t room = space->free_bytes > kept ? space->free_bytes - kept : 0;
  if (bytes <= room) return absl::OkStatus();
  std::string kept_text;
  if (reserve_bytes_ > 0) {
    kept_text = absl::StrFormat(", of which %s is kept for %s", FormatByteSize(reserve_bytes_),
                                reserve_for_);
  }
  if (claimed_ > 0) {
    absl::StrAppendFormat(&kept_text, "%s%s is promised to other transfers under way",
                          kept_text.empty() ? ", of which " : " and ", FormatByteSize(claimed_));
  }
  return absl::ResourceExhaustedError(absl::StrFormat(
      "%s needs %s (%u bytes) of disk, but the volume of the data directory %s has %s free%s: "
      "only %s is left for it; free space there, or retry once other transfers ended",
      what, FormatByteSize(bytes), bytes, data_dir_, FormatByteSize(space->free_bytes), kept_text,
      FormatByteSize(room)));
}

absl::StatusOr<TransferDisk::Claim> TransferDisk::Take(uint64_t bytes, std::string_view what) {
  Claim claim;
  if (absl::Status s = Extend(&claim, bytes, what); !s.ok()) return s;
  return claim;
}

absl::Status TransferDisk::Extend(Claim* claim, uint64_t bytes, std::string_view what) {
  MutexLock lock(&mu_);
  if (absl::Status s = Check(bytes, what); !s.ok()) return s;
  claimed_ += bytes;
  claim->disk_ = this;
  claim->left_ += bytes;
  return absl::OkStatus();
}

// ---- IdleSweeper ----

IdleSweeper::IdleSweeper(absl::Duration interval)
    : interval_(absl::ToChronoNanoseconds(std::max(interval, absl::Milliseconds(1)))) {
  thread_ = std::thread([this] { Run(); });
}

IdleSweeper::~IdleSweeper() {
  {
    MutexLock lock(&mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

absl::Duration IdleSweeper::IntervalFor(absl::Duration timeout) {
  return std::clamp(timeout / 4, absl::Milliseconds(10), absl::Seconds(1));
}

uint64_t IdleSweeper::Add(Check check) {
  MutexLock lock(&mu_);
  const uint64_t id = next_id_++;
  checks_.emplace(id, std::move(check));
  cv_.notify_all();
  return id;
}

void IdleSweeper::Remove(uint64_t id) {
  if (id == 0) return;
  MutexLock lock(&mu_);
  checks_.erase(id);
}

void IdleSweeper::Run() {
  MutexLock lock(&mu_);
  while (!stop_) {
    if (checks_.empty()) {
      mu_.Wait(&cv_);
      continue;
    }
    // Checks run with mu_ held: Remove waits for one running.
    const Clock::time_point wake = Clock::now() + interval_;
    while (!stop_ && Clock::now() < wake) mu_.WaitFor(&cv_, wake - Clock::now());
    if (stop_) break;
    const Clock::time_point now = Clock::now();
    for (auto& [id, check] : checks_) check(now);
  }
}

}  // namespace cuckoo::server
