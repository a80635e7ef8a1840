// MemWalEnv: a Env over files held in memory, for the log reader's
// fuzzer and its corpus generator (no disk per input). Reads and listing
// only are needed by ScanWal; writes work too, for completeness.
#ifndef CUCKOO_TESTS_FUZZ_MEM_WAL_ENV_H_
#define CUCKOO_TESTS_FUZZ_MEM_WAL_ENV_H_

#include <algorithm>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "base/env.h"

namespace cuckoo::fuzz {

class MemWalEnv : public Env {
 public:
  // The files, by full path ("<dir>/<name>").
  std::map<std::string, std::vector<uint8_t>> files;

  absl::StatusOr<std::unique_ptr<EnvFile>> Open(const std::string& path) override {
    if (!files.count(path)) return absl::NotFoundError(path + ": no such file");
    return std::unique_ptr<EnvFile>(new File(this, path));
  }
  absl::StatusOr<std::unique_ptr<EnvFile>> Create(const std::string& path, uint64_t bytes,
                                                  const std::atomic<bool>* = nullptr) override {
    files[path].assign(bytes, 0);
    return std::unique_ptr<EnvFile>(new File(this, path));
  }
  absl::Status Rename(const std::string& from, const std::string& to) override {
    auto it = files.find(from);
    if (it == files.end()) return absl::NotFoundError(from);
    files[to] = std::move(it->second);
    files.erase(from);
    return absl::OkStatus();
  }
  absl::Status Remove(const std::string& path) override {
    files.erase(path);
    return absl::OkStatus();
  }
  absl::StatusOr<std::vector<std::string>> List(const std::string& dir) override {
    std::vector<std::string> names;
    for (const auto& [path, bytes] : files) {
      if (absl::StartsWith(path, dir + "/")) names.push_back(path.substr(dir.size() + 1));
    }
    return names;
  }
  absl::Status CreateDir(const std::string&) override { return absl::OkStatus(); }
  absl::Status SyncDir(const std::string&) override { return absl::OkStatus(); }

 private:
  class File : public EnvFile {
   public:
    File(MemWalEnv* env, std::string path) : env_(env), path_(std::move(path)) {}
    absl::Status Write(uint64_t offset, absl::Span<const uint8_t> data) override {
      std::vector<uint8_t>& f = env_->files[path_];
      if (f.size() < offset + data.size()) f.resize(offset + data.size());
      std::memcpy(f.data() + offset, data.data(), data.size());
      return absl::OkStatus();
    }
    absl::Status Sync() override { return absl::OkStatus(); }
    absl::StatusOr<size_t> Read(uint64_t offset, absl::Span<uint8_t> out) override {
      const std::vector<uint8_t>& f = env_->files[path_];
      if (offset >= f.size()) return 0;
      const size_t n = std::min<uint64_t>(out.size(), f.size() - offset);
      std::memcpy(out.data(), f.data() + offset, n);
      return n;
    }
    absl::Status Truncate(uint64_t size) override {
      env_->files[path_].resize(size);
      return absl::OkStatus();
    }
    absl::StatusOr<uint64_t> Size() override { return env_->files[path_].size(); }
    const std::string& path() const override { return path_; }

   private:
    MemWalEnv* env_;
    std::string path_;
  };
};

}  // namespace cuckoo::fuzz

#endif  // CUCKOO_TESTS_FUZZ_MEM_WAL_ENV_H_
