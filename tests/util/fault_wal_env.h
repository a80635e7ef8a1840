// FaultWalEnv: a Env over the real file system that can simulate a power
// cut and inject errors (the model is leveldb's fault_injection_test).
//
// It remembers every file's contents as of its last Sync (or its creation,
// which syncs), which files were created since the directory was last
// synced, and what each file renamed over since then held. PowerCut() then
// puts back the synced contents of every file (so everything written and
// not fdatasync'ed is gone), optionally keeping each unsynced 4 KiB page
// with some probability (a disk persists dirty pages in any order), deletes
// files whose directory entry was never synced, and undoes the renames the
// directory's sync did not make durable (the file renamed over is back, as
// it was; a snapshot's temporary file, written and renamed into place, is
// the case that matters).
// From then on every write, sync, create and removal fails with EIO, as for
// a process that lost its disk, until Revive(): so the log under test can be
// closed normally and cannot touch the files after the cut.
//
// Errors: SetFail(fn), fn(op, path) returning an errno for an operation
// ("write", "sync", "create", "syncdir", "remove", "rename"), 0 to let it
// run. fn runs without the env's lock: it may call PowerCut().
//
// For tests only: it keeps a copy of every file in memory. A sync copies
// only the ranges written (or truncated) since the file's last sync, so a
// log segment of 64 MiB synced after each small record costs what the
// record does.
#ifndef CUCKOO_TESTS_UTIL_FAULT_WAL_ENV_H_
#define CUCKOO_TESTS_UTIL_FAULT_WAL_ENV_H_

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "base/env.h"

namespace cuckoo::server::testing {

class FaultWalEnv : public Env {
 public:
  using FailFn = std::function<int(const std::string& op, const std::string& path)>;
  void Revive() {
    std::lock_guard<std::mutex> lock(mu_);
    dead_ = false;
  }
  void SetFail(FailFn fn) {
    std::lock_guard<std::mutex> lock(mu_);
    fail_ = std::move(fn);
  }

  absl::StatusOr<std::unique_ptr<EnvFile>> Open(const std::string& path) override {
    absl::StatusOr<std::unique_ptr<EnvFile>> f = base_->Open(path);
    if (!f.ok()) return f;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!synced_.count(path)) synced_[path] = ReadAll(**f);
    }
    return std::unique_ptr<EnvFile>(new File(this, *std::move(f)));
  }

  absl::StatusOr<std::unique_ptr<EnvFile>> Create(
      const std::string& path, uint64_t bytes, const std::atomic<bool>* cancel = nullptr) override {
    if (int err = Inject("create", path)) return EnvIoError("allocate", path, err);
    std::lock_guard<std::mutex> lock(mu_);
    if (dead_) return EnvIoError("create", path, EIO);
    absl::StatusOr<std::unique_ptr<EnvFile>> f = base_->Create(path, bytes, cancel);
    if (!f.ok()) return f;
    synced_[path] = std::vector<uint8_t>(bytes, 0);
    dirty_.erase(path);
    unsynced_entries_.insert(path);
    return std::unique_ptr<EnvFile>(new File(this, *std::move(f)));
  }

  absl::Status Rename(const std::string& from, const std::string& to) override {
    if (int err = Inject("rename", from)) return EnvIoError("rename", from, err);
    std::lock_guard<std::mutex> lock(mu_);
    if (dead_) return EnvIoError("rename", from, EIO);
    if (!renamed_over_.count(to)) {
      // What `to` holds for good until the directory is synced.
      std::optional<std::vector<uint8_t>> before;
      if (auto it = synced_.find(to); it != synced_.end()) {
        before = it->second;
      } else if (absl::StatusOr<std::unique_ptr<EnvFile>> f = base_->Open(to); f.ok()) {
        before = ReadAll(**f);
      }
      renamed_over_[to] = std::move(before);
    }
    if (absl::Status s = base_->Rename(from, to); !s.ok()) return s;
    if (auto it = synced_.find(from); it != synced_.end()) {
      synced_[to] = std::move(it->second);
      synced_.erase(it);
    } else {
      synced_.erase(to);  // Untracked, as `from` was: left as it is at a cut.
    }
    dirty_.erase(to);
    if (auto it = dirty_.find(from); it != dirty_.end()) {
      dirty_[to] = std::move(it->second);
      dirty_.erase(it);
    }
    unsynced_entries_.erase(from);
    return absl::OkStatus();
  }
  absl::Status Remove(const std::string& path) override {
    if (int err = Inject("remove", path)) return EnvIoError("remove", path, err);
    std::lock_guard<std::mutex> lock(mu_);
    if (dead_) return EnvIoError("remove", path, EIO);
    synced_.erase(path);
    dirty_.erase(path);
    unsynced_entries_.erase(path);
    return base_->Remove(path);
  }
  absl::StatusOr<std::vector<std::string>> List(const std::string& dir) override {
    return base_->List(dir);
  }
  absl::Status CreateDir(const std::string& dir) override { return base_->CreateDir(dir); }
  absl::Status SyncDir(const std::string& dir) override {
    if (int err = Inject("syncdir", dir)) return EnvIoError("fsync directory", dir, err);
    std::lock_guard<std::mutex> lock(mu_);
    if (dead_) return EnvIoError("fsync directory", dir, EIO);
    unsynced_entries_.clear();
    renamed_over_.clear();
    return base_->SyncDir(dir);
  }

  // The power cut: see the top. With keep_page_probability 0 exactly what
  // was synced survives.
  void PowerCut(double keep_page_probability = 0, uint32_t seed = 1) {
    std::lock_guard<std::mutex> lock(mu_);
    dead_ = true;
    dirty_.clear();
    std::mt19937 rng(seed);
    std::bernoulli_distribution keep(keep_page_probability);
    for (const std::string& path : unsynced_entries_) {
      (void)base_->Remove(path);
      synced_.erase(path);
    }
    unsynced_entries_.clear();
    for (auto& [path, before] : renamed_over_) {
      if (!before.has_value()) {
        (void)base_->Remove(path);
        synced_.erase(path);
        continue;
      }
      if (!base_->Open(path).ok()) {
        absl::StatusOr<std::unique_ptr<EnvFile>> f = base_->Create(path, 0);
        if (!f.ok()) continue;
      }
      synced_[path] = *std::move(before);
    }
    renamed_over_.clear();
    for (auto& [path, image] : synced_) {
      absl::StatusOr<std::unique_ptr<EnvFile>> f = base_->Open(path);
      if (!f.ok()) continue;
      std::vector<uint8_t> now = ReadAll(**f);
      std::vector<uint8_t> after = image;
      if (keep_page_probability > 0) {
        for (size_t page = 0; page < now.size(); page += 4096) {
          const size_t n = std::min<size_t>(4096, now.size() - page);
          if (page + n <= after.size() &&
              std::memcmp(now.data() + page, after.data() + page, n) != 0 && keep(rng)) {
            std::memcpy(after.data() + page, now.data() + page, n);
          }
        }
      }
      (void)(*f)->Truncate(after.size());
      (void)(*f)->Write(0, after);
      (void)(*f)->Sync();
      image = std::move(after);  // What the disk holds now, kept pages included.
    }
  }

 private:
  class File : public EnvFile {
   public:
    File(FaultWalEnv* env, std::unique_ptr<EnvFile> base) : env_(env), base_(std::move(base)) {}
    absl::Status Write(uint64_t offset, absl::Span<const uint8_t> data) override {
      if (int err = env_->Inject("write", path())) return EnvIoError("write", path(), err);
      std::lock_guard<std::mutex> lock(env_->mu_);  // Not across a power cut.
      if (env_->dead_) return EnvIoError("write", path(), EIO);
      env_->MarkDirty(path(), offset, data.size());
      return base_->Write(offset, data);
    }
    absl::Status Sync() override {
      if (int err = env_->Inject("sync", path())) return EnvIoError("fdatasync", path(), err);
      std::lock_guard<std::mutex> lock(env_->mu_);
      if (env_->dead_) return EnvIoError("fdatasync", path(), EIO);
      absl::Status s = base_->Sync();
      if (s.ok()) env_->CopyDirty(*base_);
      return s;
    }
    absl::StatusOr<size_t> Read(uint64_t offset, absl::Span<uint8_t> out) override {
      return base_->Read(offset, out);
    }
    absl::Status Truncate(uint64_t size) override {
      {
        std::lock_guard<std::mutex> lock(env_->mu_);
        // Everything from the new end on, to the end the file has at its sync.
        env_->MarkDirty(path(), size, UINT64_MAX - size);
      }
      return base_->Truncate(size);
    }
    absl::StatusOr<uint64_t> Size() override { return base_->Size(); }
    const std::string& path() const override { return base_->path(); }

   private:
    FaultWalEnv* const env_;
    std::unique_ptr<EnvFile> base_;
  };

  static std::vector<uint8_t> ReadAll(EnvFile& f) {
    absl::StatusOr<uint64_t> size = f.Size();
    std::vector<uint8_t> bytes(size.ok() ? *size : 0);
    absl::StatusOr<size_t> n = f.Read(0, absl::MakeSpan(bytes));
    bytes.resize(n.ok() ? *n : 0);
    return bytes;
  }

  // Under mu_: [offset, offset + bytes) of `path` changed since its last
  // sync. Appends extend the last range.
  void MarkDirty(const std::string& path, uint64_t offset, uint64_t bytes) {
    std::vector<std::pair<uint64_t, uint64_t>>& ranges = dirty_[path];
    if (!ranges.empty() && ranges.back().first + ranges.back().second == offset) {
      ranges.back().second += bytes;
    } else {
      ranges.emplace_back(offset, bytes);
    }
  }
  // Under mu_, after a successful sync of `f`: its synced image takes the
  // file's size and the bytes of the ranges written since the last sync.
  void CopyDirty(EnvFile& f) {
    auto it = dirty_.find(f.path());
    std::vector<uint8_t>& image = synced_[f.path()];
    absl::StatusOr<uint64_t> size = f.Size();
    if (!size.ok()) {
      image = ReadAll(f);
    } else {
      image.resize(*size);
      if (it != dirty_.end()) {
        for (const auto& [offset, bytes] : it->second) {
          if (offset >= *size) continue;
          const uint64_t n = std::min<uint64_t>(bytes, *size - offset);
          (void)f.Read(offset, absl::MakeSpan(image.data() + offset, n));
        }
      }
    }
    if (it != dirty_.end()) dirty_.erase(it);
  }

  int Inject(const std::string& op, const std::string& path) {
    FailFn fn;
    {
      std::lock_guard<std::mutex> lock(mu_);
      fn = fail_;
    }
    return fn ? fn(op, path) : 0;
  }

  Env* const base_ = PosixEnv();
  std::mutex mu_;
  std::map<std::string, std::vector<uint8_t>> synced_;
  // Per file, the ranges (offset, bytes) changed since its last sync.
  std::map<std::string, std::vector<std::pair<uint64_t, uint64_t>>> dirty_;
  std::set<std::string> unsynced_entries_;
  // Renamed over since the directory was last synced: what each held
  // before (nothing: it did not exist).
  std::map<std::string, std::optional<std::vector<uint8_t>>> renamed_over_;
  FailFn fail_;
  bool dead_ = false;
};

}  // namespace cuckoo::server::testing

#endif  // CUCKOO_TESTS_UTIL_FAULT_WAL_ENV_H_
