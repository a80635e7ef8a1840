// What keeps the log short: its truncation behind the snapshots (or a
// cluster replica's checkpoint), with the request window saved first, and
// the creations and drops the log is told of.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <filesystem>
#include <system_error>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"
#include "boost/asio/post.hpp"
#include "server/storage/persistence.h"
#include "spdlog/spdlog.h"

namespace cuckoo::server {
namespace fs = std::filesystem;

void Persistence::ForgetCheckpoint() {
  MutexLock lock(&file_mu_);
  checkpoint_ = 0;
  checkpoint_has_digest_ = false;
}

absl::Status Persistence::WriteCheckpointLocked(const std::string& identity, uint64_t needed,
                                                bool has_digest, uint64_t digest_position,
                                                uint64_t digest) {
  std::string text = absl::StrFormat("cuckood cluster checkpoint v2\nidentity %s\nresume_from %u\n",
                                     identity, needed);
  if (has_digest) absl::StrAppendFormat(&text, "digest %u %016x\n", digest_position, digest);
  return WriteFileAtomically(kCheckpointFile, text);
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

absl::Status Persistence::ApplyRename(absl::string_view name, absl::string_view new_name,
                                      const std::shared_ptr<CuckooFilter>& filter,
                                      std::shared_ptr<CuckooFilter>* replaced) {
  const std::string old_path = LoadedPath(name);
  const std::string replaced_path = LoadedPath(new_name);
  absl::StatusOr<std::shared_ptr<CuckooFilter>> renamed =
      registry_->Rename(name, new_name, /*replace=*/true, filter.get(), replaced);
  if (!renamed.ok()) return renamed.status();
  // A replaced filter's older build's file (its SnapshotPath is overwritten
  // by the renamed filter's next snapshot): a restart before then replays
  // the rename from the checkpoint, which finds the name free.
  if (*replaced != nullptr && replaced_path != SnapshotPath(data_dir_, new_name) &&
      replaced_path != old_path) {
    ::unlink(replaced_path.c_str());
  }
  {
    MutexLock lock(&records_mu_);
    records_.erase(name);
  }
  SetRecord(new_name, filter, {});
  MutexLock lock(&legacy_mu_);
  legacy_files_.erase(name);
  legacy_files_.erase(new_name);
  if (old_path != SnapshotPath(data_dir_, new_name)) legacy_files_[new_name] = old_path;
  return absl::OkStatus();
}

absl::Status Persistence::LogCreate(absl::string_view name, CuckooFilter& filter, uint64_t* lsn) {
  if (wal_ == nullptr) return absl::OkStatus();
  *lsn = wal_->AppendCreateFilter(name, filter.shape());
  filter.set_id(*lsn);
  return absl::OkStatus();
}

absl::StatusOr<uint64_t> Persistence::LogExpiry(CuckooFilter& filter, int64_t expire_at,
                                                const std::function<bool(int64_t current)>& applies,
                                                bool* changed) {
  *changed = false;
  if (wal_ == nullptr) {
    MutexLock lock(&expiry_mu_);
    if (!applies(filter.expire_at())) return uint64_t{0};
    filter.set_expire_at(expire_at);
    *changed = true;
    return uint64_t{0};
  }
  if (absl::Status s = wal_->Reserve(kWalSetExpiryBytes); !s.ok()) return s;
  uint64_t lsn = 0;
  {
    MutexLock lock(&expiry_mu_);
    if (applies(filter.expire_at())) {
      filter.set_expire_at(expire_at);
      lsn = wal_->AppendSetExpiry(filter.id(), expire_at);
      *changed = true;
    }
  }
  wal_->Unreserve(kWalSetExpiryBytes);
  return lsn;
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
    if (identity.empty() || needed < checkpoint_) return;
    // The digest after a position at or past needed - 1 (read after
    // `needed`): a restart applies the entries from `needed` on, and chains
    // the digest on from that position. Unknown only for a replica whose
    // checkpoint recorded none (an older cuckood's): the checkpoint that
    // named a digest is not replaced by one without.
    uint64_t digest_position = 0, digest = 0;
    const bool has_digest = external_log_->AppliedDigest(&digest_position, &digest);
    if (!has_digest && checkpoint_has_digest_) return;
    // The same position again: only to add the digest a checkpoint of an
    // older cuckood lacked.
    if (needed == checkpoint_ && (checkpoint_has_digest_ || !has_digest)) return;
    if (absl::Status s =
            WriteCheckpointLocked(identity, needed, has_digest, digest_position, digest);
        !s.ok()) {
      spdlog::error("could not write the cluster checkpoint: {}", std::string(s.message()));
      return;
    }
    checkpoint_ = needed;
    checkpoint_has_digest_ = has_digest;
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

}  // namespace cuckoo::server
