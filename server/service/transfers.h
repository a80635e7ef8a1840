// What the transfers of a filter's snapshot through the data directory
// share: ExportFilter and ImportFilter (server/service/filter_transfer.cc), and the
// Redis port's CF.SCANDUMP and CF.LOADCHUNK (server/resp/commands/resp_commands.h). Each
// keeps a private file in the data directory while it runs, and each waits
// on a client between chunks, so each needs two bounds:
//
// - TransferDisk: the disk space of those files. A transfer claims the bytes
//   it is about to write (an import's or a load's declared size, a dump's
//   snapshot size) before it writes them. The claim is refused,
//   RESOURCE_EXHAUSTED naming the sizes, unless the data directory's volume
//   (statvfs) has that much free beyond a reserve kept for the write-ahead
//   log (two --wal-segment-size segments: the one being written and the
//   next, which the log prepares ahead) and beyond what the other transfers
//   running claimed and have not written yet. Without it, one tenant's
//   abandoned upload left no room for the log, and every tenant's writes
//   failed ("no room for the write-ahead log").
//
// - IdleSweeper: a thread that runs registered checks a few times per
//   --transfer-idle-timeout, with which each kind of transfer ends those
//   whose client has sent or taken nothing for that long, freeing their
//   slot, file and disk space when it happens (not when some later command
//   looks).
//
// Thread safety: both may be used from any thread.
#ifndef CUCKOO_SERVER_SERVICE_TRANSFERS_H_
#define CUCKOO_SERVER_SERVICE_TRANSFERS_H_

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "base/env.h"
#include "base/mutex.h"

namespace cuckoo::server {

// ExportFilter and ImportFilter (server/service/filter_service.h): per export a
// 4 MiB snapshot write buffer and a 1 MiB chunk (read, and in gRPC's
// hands), per import one chunk of at most 1 MiB of data (a larger one is
// refused before it is parsed); 2 of each at a time.
inline constexpr uint64_t kTransferMemoryOverhead = uint64_t{16} << 20;

// How far an import may exceed the memory budget before it is refused (a
// snapshot file is slightly larger than its filter's tables): ImportFilter's
// limit, and so CF.LOADCHUNK's.
inline constexpr uint64_t kImportSlackBytes = uint64_t{1} << 20;

class TransferDisk {
 public:
  // Files in `data_dir`; `reserve_bytes` of its volume are kept free, for
  // `reserve_for` (in errors: "the write-ahead log (2 x --wal-segment-size)").
  // `env` answers the disk space (null: PosixEnv()).
  TransferDisk(std::string data_dir, uint64_t reserve_bytes, std::string reserve_for,
               Env* env = nullptr);
  TransferDisk(const TransferDisk&) = delete;
  TransferDisk& operator=(const TransferDisk&) = delete;

  // Bytes a transfer may still write. Movable; gives back what is left when
  // destroyed or Reset.
  class Claim {
   public:
    Claim() = default;
    Claim(Claim&& other) noexcept;
    Claim& operator=(Claim&& other) noexcept;
    ~Claim() { Reset(); }
    // `bytes` of it were written: the volume's free space counts them now.
    void Wrote(uint64_t bytes);
    void Reset();
    uint64_t left() const { return left_; }

   private:
    friend class TransferDisk;
    TransferDisk* disk_ = nullptr;
    uint64_t left_ = 0;
  };

  // Claims `bytes` for the transfer `what` ("the import of filter \"f\""):
  // RESOURCE_EXHAUSTED naming `what`, its size, the volume's free space, the
  // reserve and the other transfers' claims unless they fit. OK without a
  // check when the env does not know the disk space.
  absl::StatusOr<Claim> Take(uint64_t bytes, std::string_view what);
  // Adds `bytes` to `claim` (a transfer that did not declare its size),
  // checked as Take.
  absl::Status Extend(Claim* claim, uint64_t bytes, std::string_view what);

  const std::string& data_dir() const { return data_dir_; }
  uint64_t reserve_bytes() const { return reserve_bytes_; }
  // What the claims have not written yet, together.
  uint64_t claimed_bytes() const;

 private:
  absl::Status Check(uint64_t bytes, std::string_view what) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Release(uint64_t bytes);

  const std::string data_dir_;
  const uint64_t reserve_bytes_;
  const std::string reserve_for_;
  Env* const env_;
  mutable Mutex mu_;
  uint64_t claimed_ ABSL_GUARDED_BY(mu_) = 0;
};

class IdleSweeper {
 public:
  using Clock = std::chrono::steady_clock;
  using Check = std::function<void(Clock::time_point now)>;

  // Checks run every `interval` (while there are any), on the sweeper's
  // own thread, one after another.
  explicit IdleSweeper(absl::Duration interval);
  ~IdleSweeper();
  IdleSweeper(const IdleSweeper&) = delete;
  IdleSweeper& operator=(const IdleSweeper&) = delete;

  // The interval for an idle timeout: a quarter of it, 10 ms to 1 s (so a
  // transfer ends at most that much after its timeout).
  static absl::Duration IntervalFor(absl::Duration timeout);

  // Registers `check`; returns its id for Remove (never 0).
  uint64_t Add(Check check);
  // Once Remove returns, the check neither runs nor will run again. Not
  // from within a check (it would wait for itself); id 0 does nothing.
  void Remove(uint64_t id);

 private:
  void Run();

  const std::chrono::nanoseconds interval_;
  Mutex mu_;
  std::condition_variable cv_;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t next_id_ ABSL_GUARDED_BY(mu_) = 1;
  std::map<uint64_t, Check> checks_ ABSL_GUARDED_BY(mu_);
  std::thread thread_;
};

}  // namespace cuckoo::server

#endif  // CUCKOO_SERVER_SERVICE_TRANSFERS_H_
