// ForwardingWalEnv: the real file system (PosixEnv) behind the Env
// interface, for a test environment to override the part it changes (a
// gated segment preparation, counted reads, a volume of a given size) and
// forward the rest. DiskSpace is not forwarded: it stays UNIMPLEMENTED (no
// disk check) unless the test's environment says what the volume holds.
#ifndef CUCKOO_TESTS_UTIL_FORWARDING_WAL_ENV_H_
#define CUCKOO_TESTS_UTIL_FORWARDING_WAL_ENV_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "base/env.h"

namespace cuckoo::server::testing {

class ForwardingWalEnv : public Env {
 public:
  absl::StatusOr<std::unique_ptr<EnvFile>> Create(const std::string& path, uint64_t bytes,
                                                  const std::atomic<bool>* cancel) override {
    return base_->Create(path, bytes, cancel);
  }
  absl::StatusOr<std::unique_ptr<EnvFile>> Open(const std::string& path) override {
    return base_->Open(path);
  }
  absl::Status Rename(const std::string& from, const std::string& to) override {
    return base_->Rename(from, to);
  }
  absl::Status Remove(const std::string& path) override { return base_->Remove(path); }
  absl::StatusOr<std::vector<std::string>> List(const std::string& dir) override {
    return base_->List(dir);
  }
  absl::Status CreateDir(const std::string& dir) override { return base_->CreateDir(dir); }
  absl::Status SyncDir(const std::string& dir) override { return base_->SyncDir(dir); }

 protected:
  Env* const base_ = PosixEnv();
};

}  // namespace cuckoo::server::testing

#endif  // CUCKOO_TESTS_UTIL_FORWARDING_WAL_ENV_H_
