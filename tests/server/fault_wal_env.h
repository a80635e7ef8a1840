// FaultWalEnv: a WalEnv over the real file system that can simulate a power
// cut and inject errors (the model is leveldb's fault_injection_test).
//
// It remembers every file's contents as of its last Sync (or its creation,
// which syncs), and which files were created since the directory was last
// synced. PowerCut() then puts back the synced contents of every file (so
// everything written and not fdatasync'ed is gone), optionally keeping each
// unsynced 4 KiB page with some probability (a disk persists dirty pages in
// any order), and deletes files whose directory entry was never synced.
// From then on every write, sync, create and removal fails with EIO, as for
// a process that lost its disk, until Revive(): so the log under test can be
// closed normally and cannot touch the files after the cut.
//
// Errors: SetFail(fn), fn(op, path) returning an errno for an operation
// ("write", "sync", "create", "syncdir", "remove"), 0 to let it run.
//
// For tests only: it keeps a copy of every file in memory.
#ifndef CUCKOO_TESTS_SERVER_FAULT_WAL_ENV_H_
#define CUCKOO_TESTS_SERVER_FAULT_WAL_ENV_H_

#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "server/wal/wal_env.h"

namespace cuckoo::server::testing {

class FaultWalEnv : public WalEnv {
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

  absl::StatusOr<std::unique_ptr<WalFile>> Open(const std::string& path) override {
    absl::StatusOr<std::unique_ptr<WalFile>> f = base_->Open(path);
    if (!f.ok()) return f;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!synced_.count(path)) synced_[path] = ReadAll(**f);
    }
    return std::unique_ptr<WalFile>(new File(this, *std::move(f)));
  }

  absl::StatusOr<std::unique_ptr<WalFile>> Create(
      const std::string& path, uint64_t bytes, const std::atomic<bool>* cancel = nullptr) override {
    if (int err = Inject("create", path)) return WalIoError("allocate", path, err);
    std::lock_guard<std::mutex> lock(mu_);
    if (dead_) return WalIoError("create", path, EIO);
    absl::StatusOr<std::unique_ptr<WalFile>> f = base_->Create(path, bytes, cancel);
    if (!f.ok()) return f;
    synced_[path] = std::vector<uint8_t>(bytes, 0);
    unsynced_entries_.insert(path);
    return std::unique_ptr<WalFile>(new File(this, *std::move(f)));
  }

  absl::Status Rename(const std::string& from, const std::string& to) override {
    return base_->Rename(from, to);
  }
  absl::Status Remove(const std::string& path) override {
    if (int err = Inject("remove", path)) return WalIoError("remove", path, err);
    std::lock_guard<std::mutex> lock(mu_);
    if (dead_) return WalIoError("remove", path, EIO);
    synced_.erase(path);
    unsynced_entries_.erase(path);
    return base_->Remove(path);
  }
  absl::StatusOr<std::vector<std::string>> List(const std::string& dir) override {
    return base_->List(dir);
  }
  absl::Status CreateDir(const std::string& dir) override { return base_->CreateDir(dir); }
  absl::Status SyncDir(const std::string& dir) override {
    if (int err = Inject("syncdir", dir)) return WalIoError("fsync directory", dir, err);
    std::lock_guard<std::mutex> lock(mu_);
    if (dead_) return WalIoError("fsync directory", dir, EIO);
    unsynced_entries_.clear();
    return base_->SyncDir(dir);
  }

  // The power cut: see the top. With keep_page_probability 0 exactly what
  // was synced survives.
  void PowerCut(double keep_page_probability = 0, uint32_t seed = 1) {
    std::lock_guard<std::mutex> lock(mu_);
    dead_ = true;
    std::mt19937 rng(seed);
    std::bernoulli_distribution keep(keep_page_probability);
    for (const std::string& path : unsynced_entries_) {
      (void)base_->Remove(path);
      synced_.erase(path);
    }
    unsynced_entries_.clear();
    for (auto& [path, image] : synced_) {
      absl::StatusOr<std::unique_ptr<WalFile>> f = base_->Open(path);
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
    }
  }

 private:
  class File : public WalFile {
   public:
    File(FaultWalEnv* env, std::unique_ptr<WalFile> base) : env_(env), base_(std::move(base)) {}
    absl::Status Write(uint64_t offset, absl::Span<const uint8_t> data) override {
      if (int err = env_->Inject("write", path())) return WalIoError("write", path(), err);
      std::lock_guard<std::mutex> lock(env_->mu_);  // Not across a power cut.
      if (env_->dead_) return WalIoError("write", path(), EIO);
      return base_->Write(offset, data);
    }
    absl::Status Sync() override {
      if (int err = env_->Inject("sync", path())) return WalIoError("fdatasync", path(), err);
      std::lock_guard<std::mutex> lock(env_->mu_);
      if (env_->dead_) return WalIoError("fdatasync", path(), EIO);
      absl::Status s = base_->Sync();
      if (s.ok()) env_->synced_[path()] = ReadAll(*base_);
      return s;
    }
    absl::StatusOr<size_t> Read(uint64_t offset, absl::Span<uint8_t> out) override {
      return base_->Read(offset, out);
    }
    absl::Status Truncate(uint64_t size) override { return base_->Truncate(size); }
    absl::StatusOr<uint64_t> Size() override { return base_->Size(); }
    const std::string& path() const override { return base_->path(); }

   private:
    FaultWalEnv* const env_;
    std::unique_ptr<WalFile> base_;
  };

  static std::vector<uint8_t> ReadAll(WalFile& f) {
    absl::StatusOr<uint64_t> size = f.Size();
    std::vector<uint8_t> bytes(size.ok() ? *size : 0);
    absl::StatusOr<size_t> n = f.Read(0, absl::MakeSpan(bytes));
    bytes.resize(n.ok() ? *n : 0);
    return bytes;
  }

  int Inject(const std::string& op, const std::string& path) {
    FailFn fn;
    {
      std::lock_guard<std::mutex> lock(mu_);
      fn = fail_;
    }
    return fn ? fn(op, path) : 0;
  }

  WalEnv* const base_ = PosixWalEnv();
  std::mutex mu_;
  std::map<std::string, std::vector<uint8_t>> synced_;
  std::set<std::string> unsynced_entries_;
  FailFn fail_;
  bool dead_ = false;
};

}  // namespace cuckoo::server::testing

#endif  // CUCKOO_TESTS_SERVER_FAULT_WAL_ENV_H_
