// Env: the file operations of the write-ahead log (server/wal/wal.h) and of
// snapshots (core/snapshot.h), behind an interface so that tests can inject
// faults: a layer that drops every byte not fdatasync'ed at a simulated
// power cut, ENOSPC and EIO on a write or a sync
// (tests/util/fault_wal_env.h). cuckood uses PosixEnv().
//
// Errors are INTERNAL naming the path and the system error, except a full
// disk (ENOSPC, EDQUOT), which is RESOURCE_EXHAUSTED: callers tell the two
// apart by code. The system errno is also kept in the status payload
// "errno" for tests.
//
// Thread safety: an EnvFile is used by one thread at a time; the env's
// methods may be called from any thread.
#ifndef CUCKOO_BASE_ENV_H_
#define CUCKOO_BASE_ENV_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace cuckoo {

// An open log segment.
class EnvFile {
 public:
  virtual ~EnvFile() = default;
  // Writes all of `data` at `offset`.
  virtual absl::Status Write(uint64_t offset, absl::Span<const uint8_t> data) = 0;
  // Makes everything written so far durable (fdatasync).
  virtual absl::Status Sync() = 0;
  // Reads up to out.size() bytes at `offset`; returns how many (fewer only
  // at the end of the file).
  virtual absl::StatusOr<size_t> Read(uint64_t offset, absl::Span<uint8_t> out) = 0;
  // Cuts the file to `size` bytes.
  virtual absl::Status Truncate(uint64_t size) = 0;
  virtual absl::StatusOr<uint64_t> Size() = 0;
  virtual const std::string& path() const = 0;
};

// The size of a volume and its space free to an unprivileged user.
struct VolumeSpace {
  uint64_t total_bytes = 0;
  uint64_t free_bytes = 0;
};

class Env {
 public:
  virtual ~Env() = default;
  // The volume holding `path` (statvfs). UNIMPLEMENTED in environments
  // that do not know (then nothing is checked against it).
  virtual absl::StatusOr<VolumeSpace> DiskSpace(const std::string& path) {
    return absl::UnimplementedError(path + ": this environment does not know its disk space");
  }
  // Opens an existing file for reading and writing.
  virtual absl::StatusOr<std::unique_ptr<EnvFile>> Open(const std::string& path) = 0;
  // Creates `path` (it must not exist) holding `bytes` zero bytes that are
  // allocated on disk and written (so that later writes into it change no
  // file metadata, and fdatasync need not update any), then syncs it.
  // RESOURCE_EXHAUSTED, leaving no file, when the disk is full; CANCELLED,
  // leaving no file, once *cancel (if not null) turns true while the zeros
  // are written (shutdown does not wait for a preparation).
  virtual absl::StatusOr<std::unique_ptr<EnvFile>> Create(
      const std::string& path, uint64_t bytes, const std::atomic<bool>* cancel = nullptr) = 0;
  virtual absl::Status Rename(const std::string& from, const std::string& to) = 0;
  virtual absl::Status Remove(const std::string& path) = 0;
  // The names (not paths) of the entries of `dir`.
  virtual absl::StatusOr<std::vector<std::string>> List(const std::string& dir) = 0;
  // Creates `dir` if it does not exist.
  virtual absl::Status CreateDir(const std::string& dir) = 0;
  // fsyncs directory `dir`, after a file in it was created, renamed or
  // removed.
  virtual absl::Status SyncDir(const std::string& dir) = 0;
};

// The real file system.
Env* PosixEnv();

// `op` on `path` failed with `err` (errno): RESOURCE_EXHAUSTED for a full
// disk, else INTERNAL; the message names both, and the payload "errno"
// holds err.
absl::Status EnvIoError(absl::string_view op, absl::string_view path, int err);
// The errno a EnvIoError carries, or 0.
int EnvErrno(const absl::Status& status);

}  // namespace cuckoo

#endif  // CUCKOO_BASE_ENV_H_
