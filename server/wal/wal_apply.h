// WalApplier: applies the shard writes of a log replay (start-up) on worker
// threads while the caller reads the log.
//
//   WalApplier applier(workers);
//   ScanWal(env, dir, [&](const WalRecord& r) {
//     applier.Apply(&target, r);           // Insert and Delete records
//     ...
//   });
//   absl::Status s = applier.Drain(&applied);
//
// A shard's writes always go to the same worker and are applied in the order
// they were queued (the log's), so every shard sees exactly the log's order,
// which is what makes a replay reproduce the live run's table bytes;
// different shards and filters proceed in parallel. Records are handed over
// in batches of many records (one lock and wake-up per batch, not per
// record), and a worker applies a batch's consecutive writes to one filter
// with CuckooFilter::ApplyShardWrites, whose prefetch pipeline runs from one
// write into the next: a 1000-key request split over 16 shards leaves ~60
// keys per record, too few to hide memory latency one record at a time.
// Memory: at most max_queued_bytes of batches queued, plus one batch being
// filled per worker.
//
// Thread safety: Apply and Drain from one thread (the reader).
#ifndef CUCKOO_SERVER_WAL_WAL_APPLY_H_
#define CUCKOO_SERVER_WAL_WAL_APPLY_H_

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "base/mutex.h"
#include "core/cuckoo_filter.h"
#include "server/wal/wal_format.h"

namespace cuckoo::server {

class WalApplier {
 public:
  // A filter records are applied to, and its name for error messages.
  struct Target {
    std::shared_ptr<CuckooFilter> filter;
    std::string name;
  };
  struct Options {
    // A batch goes to its worker once it holds this many key hashes.
    size_t batch_hashes = 16384;
    uint64_t max_queued_bytes = uint64_t{16} << 20;
  };

  // The most memory a start-up replay holds besides the filters: the
  // segment ScanWal has read (segment_bytes), the records it holds inside
  // transactions (kWalScanHeldBytes), and an applier with
  // default Options and `workers` workers: its queue and a batch being
  // filled per worker.
  static uint64_t ReplayMemoryBound(uint64_t segment_bytes, size_t workers);

  explicit WalApplier(size_t workers) : WalApplier(workers, Options{}) {}
  WalApplier(size_t workers, Options options);
  // Applies what is still queued, then stops the workers.
  ~WalApplier();
  WalApplier(const WalApplier&) = delete;
  WalApplier& operator=(const WalApplier&) = delete;

  // Queues Insert or Delete record `r` for `target`, which must stay alive
  // and unchanged until the next Drain returns. Waits while
  // max_queued_bytes are queued. After an error, records not yet applied
  // may be dropped (the error ends the replay).
  void Apply(const Target* target, const WalRecord& r);

  // Hands every queued record to the workers and waits until all are
  // applied. Returns the first error (DATA_LOSS naming the record's lsn and
  // filter) and sets *applied to how many records so far changed a shard
  // (a record a snapshot already held changes none).
  absl::Status Drain(uint64_t* applied);

 private:
  struct Item {
    const Target* target;
    uint64_t lsn;
    ShardWrite write;  // Without hashes: those are Batch::hashes[offset, +count).
    size_t offset;
    size_t count;
  };
  struct Batch {
    std::vector<Item> items;
    std::vector<uint64_t> hashes;
    // Handed over once either holds batch_hashes; one record more can follow
    // (at most kWalMaxRecordBytes / 8 hashes), so reserving this much up
    // front means the vectors never grow by doubling.
    static uint64_t ItemCapacity(const Options& o) { return o.batch_hashes; }
    static uint64_t HashCapacity(const Options& o) {
      return o.batch_hashes + kWalMaxRecordBytes / 8;
    }
    static uint64_t CapacityBytes(const Options& o) {
      return ItemCapacity(o) * sizeof(Item) + HashCapacity(o) * 8;
    }
    void Reserve(const Options& o) {
      items.reserve(ItemCapacity(o));
      hashes.reserve(HashCapacity(o));
    }
    uint64_t Bytes() const { return items.capacity() * sizeof(Item) + hashes.capacity() * 8; }
  };
  struct Worker {
    Mutex mu;
    std::condition_variable cv;
    std::deque<Batch> queue ABSL_GUARDED_BY(mu);
    bool stop ABSL_GUARDED_BY(mu) = false;
    Batch filling;  // The reader's, not yet handed over.
    std::thread thread;
  };

  void Hand(Worker& w);
  void Run(Worker& w);
  // Applies a run of items of one target; false after an error.
  bool ApplyRun(const Batch& b, size_t begin, size_t end);

  const Options options_;
  std::vector<std::unique_ptr<Worker>> workers_;
  Mutex mu_;
  std::condition_variable room_cv_;
  uint64_t queued_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t applied_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Status error_ ABSL_GUARDED_BY(mu_);
};

}  // namespace cuckoo::server

#endif  // CUCKOO_SERVER_WAL_WAL_APPLY_H_
