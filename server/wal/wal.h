// Wal: cuckood's write-ahead log, <data-dir>/wal/ (format: server/wal/wal_format.h,
// docs/WAL_FORMAT.md; design: docs/SERVER_DESIGN.md, Durability).
//
//   absl::StatusOr<WalScan> scan = ScanWal(env, dir, replay);   // start-up
//   auto wal = Wal::Open({.dir = dir, .durability = Durability::kSync}, *scan, next);
//   // A batch: reserve room, apply it logging each shard's part, then
//   // answer once it is durable.
//   wal->Reserve(bound);
//   filter.InsertBatch(keys, false, out, stop, [&](const ShardWrite& w) {
//     return lsn = wal->AppendShardWrite(filter.id(), w);
//   });
//   wal->Unreserve(bound);
//   wal->WhenDurable(lsn, [](absl::Status s) { /* answer the call */ });
//
// Appending frames a record into an in-memory buffer under a mutex and
// gives it the next log sequence number (lsn); it never waits for a disk.
// One thread, the committer, takes everything appended so far and writes it
// with one write and (in sync mode) one fdatasync, then answers every
// waiter the write made durable: group commit, with no timer in the way of
// a lone writer. Durability modes:
//   kSync      a record is durable once fdatasync'ed (the default);
//   kInterval  once written (the page cache survives a process crash);
//              fdatasync every sync_interval, so a power cut loses at most
//              about that much;
//   kNone      once written; the OS flushes when it likes.
// SyncTo forces an fdatasync in every mode (snapshots and drops use it).
//
// Segments are preallocated (written with zeros) one ahead, on a helper
// thread, so that appends never extend a file. Reserve is the admission
// check that keeps a full disk from failing a write after it was applied:
// a batch reserves the bytes its records can take before it touches the
// filter, and gets RESOURCE_EXHAUSTED when the log cannot get them.
//
// Failure: when a write or fdatasync fails, every waiter gets the error
// (RESOURCE_EXHAUSTED for a full disk, UNAVAILABLE otherwise, naming the
// system error) and the log never acknowledges again: Linux may have dropped
// the dirty pages of a failed fdatasync, so a retry that succeeds would prove
// nothing. on_failure runs once; cuckood exits then so that a restart
// replays the log (what was acknowledged is on disk).
//
// Thread safety: all methods may be called from any thread.
#ifndef CUCKOO_SERVER_WAL_WAL_H_
#define CUCKOO_SERVER_WAL_WAL_H_

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "base/env.h"
#include "base/mutex.h"
#include "server/wal/wal_format.h"

namespace cuckoo::server {

enum class Durability { kSync, kInterval, kNone };
// "sync", "interval", "none".
absl::string_view DurabilityName(Durability d);
// INVALID_ARGUMENT naming the value and the choices.
absl::StatusOr<Durability> ParseDurability(absl::string_view s);

inline constexpr uint64_t kWalDefaultMaxPendingBytes = uint64_t{16} << 20;
// What a transaction's records take (Wal::BeginTransaction).
inline constexpr uint64_t kWalTxnBytes = 2 * kWalTxnRecordBytes;
// How long a run of overlapping transactions may take new ones: a begin
// after that waits until the run's transactions have ended.
inline constexpr absl::Duration kWalMaxRunGrowth = absl::Milliseconds(5);

struct WalOptions {
  std::string dir;  // <data-dir>/wal
  Durability durability = Durability::kSync;
  absl::Duration sync_interval = absl::Seconds(1);  // kInterval.
  uint64_t segment_bytes = uint64_t{64} << 20;
  // Records appended and not yet written, with the reservations for more,
  // are held to this: Reserve waits while it is reached. It bounds the log's
  // memory (WalMemoryBound); a group commit is far smaller.
  uint64_t max_pending_bytes = kWalDefaultMaxPendingBytes;
  Env* env = nullptr;  // PosixEnv() when null.
  // Observers for metrics, called on the committer thread: each group
  // commit's bytes and records, and each fdatasync's duration.
  std::function<void(uint64_t bytes, uint64_t records)> on_write;
  std::function<void(absl::Duration)> on_sync;
  // Runs once, on the committer thread, after a write or fdatasync failed
  // and the waiters were answered.
  std::function<void(const absl::Status&)> on_failure;
};

// Smallest segment_bytes accepted.
inline constexpr uint64_t kWalMinSegmentBytes = uint64_t{256} << 10;

// INVALID_ARGUMENT unless sync_interval is 10ms to 1h and segment_bytes a
// multiple of 4KiB from kWalMinSegmentBytes to 1GiB; the message names the
// flag that sets it (--wal-sync-interval, --wal-segment-size).
absl::Status ValidateWalOptions(const WalOptions& options);

// The most memory the log holds while running: the pending buffer and the
// committer's copy of it, each up to max_pending_bytes plus one batch's
// records beyond its reservation (`batch_bytes`, a batch's largest log
// size). Start-up replay is bounded separately
// (WalApplier::ReplayMemoryBound).
inline constexpr uint64_t WalMemoryBound(uint64_t max_pending_bytes, uint64_t batch_bytes) {
  return 2 * (max_pending_bytes + batch_bytes);
}

struct WalStats {
  uint64_t appended_lsn = 0;  // The last lsn given out.
  uint64_t durable_lsn = 0;   // The last lsn acknowledged as durable (per the mode).
  uint64_t synced_lsn = 0;    // The last lsn fdatasync'ed (both: short of an unended transaction).
  uint64_t open_transactions = 0;         // Begun, their end not appended yet.
  uint64_t tracked_transactions = 0;      // Kept for the durable positions (bounded).
  uint64_t segments = 0;                  // Segment files, the prepared one included.
  uint64_t disk_bytes = 0;                // Their total size.
  uint64_t bytes_written = 0;             // Record bytes written since Open.
  uint64_t first_needed_segment_lsn = 0;  // First lsn of the oldest segment kept.
};

class Wal {
 public:
  using Done = std::function<void(absl::Status)>;

  // Opens the log in options.dir for appending after `scan` (ScanWal over
  // the same directory): removes the scan's unused segments, zeroes a torn
  // tail after the last valid record, and continues at lsn
  // max(scan.last_lsn, at_least - 1) + 1 (at_least: one past every position
  // a loaded snapshot holds). Creates the directory if needed.
  static absl::StatusOr<std::unique_ptr<Wal>> Open(WalOptions options, const WalScan& scan,
                                                   uint64_t at_least);
  ~Wal();  // Close()s.
  Wal(const Wal&) = delete;
  Wal& operator=(const Wal&) = delete;

  const WalOptions& options() const { return options_; }

  // Reserves room for `bytes` of records (see WalBytesForBatch; at most one
  // segment's worth is held): OK, or RESOURCE_EXHAUSTED when the disk has no
  // room for the log (nothing may be applied then), or the log's failure.
  // Unreserve the same amount once the records are appended (or were not
  // needed).
  absl::Status Reserve(uint64_t bytes);
  void Unreserve(uint64_t bytes);

  // Append a record; returns its lsn. Never blocks on I/O; after a failure
  // the record is dropped (its waiters get the failure).
  uint64_t AppendShardWrite(uint64_t filter_id, const ShardWrite& write);
  uint64_t AppendCreateFilter(absl::string_view name, const FilterShape& shape);
  uint64_t AppendDropFilter(uint64_t filter_id);
  // A kSetExpiry record: `expire_at` in [0, kWalMaxExpireAt] (0 clears).
  uint64_t AppendSetExpiry(uint64_t filter_id, int64_t expire_at);
  uint64_t AppendRenameFilter(uint64_t filter_id, absl::string_view new_name, uint64_t replaced_id,
                              bool replace);
  // A request's id (docs/WAL_FORMAT.md, "Request records"): its
  // RequestStart record, appended before the request's first shard write,
  // and its RequestResults records (as many as request.results need),
  // appended after the last; returns the last one's lsn.
  uint64_t AppendRequestStart(uint64_t filter_id, const WalRequest& request);
  uint64_t AppendRequestResults(uint64_t filter_id, const WalRequest& request);

  // A transaction (docs/WAL_FORMAT.md, "Transactions"): the records
  // appended after BeginTransaction's begin record, by anyone, up to the
  // end record EndTransaction appends, are replayed all or none. Until that
  // end is durable (and those of the transactions that overlap it, one run
  // from the first begin to the last end), no record from the begin (the
  // run's first) on counts as durable: waiters
  // (WhenDurable, WaitDurable, SyncTo) past the begin wait, Stats stops
  // short of it, and Truncate keeps it; so a replay that cuts the log at a
  // begin without its end cuts off nothing acknowledged. The cost is that
  // every write after the begin waits for the end: a transaction must end
  // promptly, and its own records must not wait for durability before it
  // does (the Redis port ends one wherever an EXEC would wait). A begin
  // waits while the run open has gone on for kWalMaxRunGrowth, until it
  // closes, so a run is at most that long plus its longest transaction.
  // Returns the begin's lsn, to pass to EndTransaction exactly once, from
  // a thread that has no other transaction open. Reserve kWalTxnBytes
  // first.
  uint64_t BeginTransaction();
  void EndTransaction(uint64_t begin_lsn);

  // Calls done(OK) once `lsn` is durable per the mode, or done(error) if the
  // log failed first; at once (on this thread) if that is known already,
  // else on the committer thread.
  void WhenDurable(uint64_t lsn, Done done);
  // The same, waiting.
  absl::Status WaitDurable(uint64_t lsn);
  // Waits until `lsn` is fdatasync'ed, whatever the mode.
  absl::Status SyncTo(uint64_t lsn);

  // Removes the segments whose records all have lsns below `needed_lsn`
  // (never the one being written, nor one holding the begin of a
  // transaction whose end is not synced).
  absl::Status Truncate(uint64_t needed_lsn);

  WalStats Stats() const;
  // The last lsn given out (WalStats::appended_lsn), without the lock.
  uint64_t AppendedLsn() const { return appended_published_.load(std::memory_order_acquire); }
  // The log's failure, or OK.
  absl::Status health() const;

  // Writes and fdatasyncs everything appended, then stops the committer.
  // Later appends are dropped and their waiters get UNAVAILABLE.
  void Close();

 private:
  struct Segment {
    uint64_t sequence = 0;
    uint64_t first_lsn = 0;  // 0 while prepared but not started.
    uint64_t last_lsn = 0;
    std::string path;
    uint64_t file_bytes = 0;
  };

  explicit Wal(WalOptions options);
  // The committer thread's loop.
  void Run();
  // The preparer thread's loop: creates the next segment when asked.
  void Prepare();
  // Asks the preparer for the next segment, unless it is ready or coming.
  void PrepareNextLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Append's body: frames `bytes` bytes with encode(lsn, synced, out).
  uint64_t Append(size_t bytes, const std::function<void(uint64_t, uint64_t, uint8_t*)>& encode);
  // Writes `data` (whole records) at the end of the log, starting segments
  // as needed; counts the records in *records. On the committer thread.
  absl::Status WriteOut(const std::vector<uint8_t>& data, uint64_t* records);
  // Writes <dir>/CLOSED (atomically: a temporary file, synced, renamed).
  absl::Status WriteClosedFile(const WalClosed& c);
  // Makes the prepared segment the current one, its first record `first_lsn`.
  absl::Status StartSegment(uint64_t first_lsn);
  uint64_t DurableLsnLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  uint64_t SyncedLsnLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Forgets the runs HeldLocked no longer needs, so that transactions_
  // holds only the open runs, those not all written, and the one the synced
  // position is inside (whatever the mode).
  void PruneTransactionsLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // `lsn` (a written or synced lsn), held short of the first begin of a
  // run of overlapping transactions that is still open at it.
  uint64_t HeldLocked(uint64_t lsn) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  uint64_t AppendLocked(size_t bytes,
                        const std::function<void(uint64_t, uint64_t, uint8_t*)>& encode)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The most one Reserve holds (see Reserve).
  uint64_t MaxReservation() const;
  // Bytes the log can still take without another segment being prepared.
  uint64_t RoomLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Answers the waiters that are durable now (or all, with the failure).
  void AnswerLocked(std::vector<std::pair<Done, absl::Status>>* out)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const WalOptions options_;
  Env* const env_;

  mutable Mutex mu_;
  std::condition_variable work_cv_;     // To the committer: something to do.
  std::condition_variable done_cv_;     // From the committer and preparer: progress.
  std::condition_variable prepare_cv_;  // To the preparer.
  std::vector<uint8_t> buffer_ ABSL_GUARDED_BY(mu_);
  uint64_t appended_lsn_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t buffered_first_lsn_ ABSL_GUARDED_BY(mu_) = 0;  // Of buffer_'s first record.
  uint64_t written_lsn_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t synced_lsn_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t sync_wanted_lsn_ ABSL_GUARDED_BY(mu_) = 0;  // SyncTo.
  uint64_t reserved_ ABSL_GUARDED_BY(mu_) = 0;
  bool closing_ ABSL_GUARDED_BY(mu_) = false;
  bool stop_preparer_ ABSL_GUARDED_BY(mu_) = false;  // Set once the committer has stopped.
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;  // Close has run.
  absl::Status failure_ ABSL_GUARDED_BY(mu_);
  std::multimap<uint64_t, Done> waiters_ ABSL_GUARDED_BY(mu_);
  // Transactions of the runs HeldLocked may need (PruneTransactionsLocked):
  // begin lsn -> end lsn (0 while open).
  std::map<uint64_t, uint64_t> transactions_ ABSL_GUARDED_BY(mu_);
  uint64_t open_transactions_ ABSL_GUARDED_BY(mu_) = 0;  // Begun, not ended.
  absl::Time run_started_ ABSL_GUARDED_BY(mu_);          // When the run open now began.
  std::condition_variable run_cv_;                       // The run closed (no transaction open).
  std::vector<Segment> segments_ ABSL_GUARDED_BY(mu_);   // Oldest first; back() is current.
  uint64_t current_end_ ABSL_GUARDED_BY(mu_) = 0;        // Write offset in current_.
  uint64_t current_bytes_ ABSL_GUARDED_BY(mu_) = 0;      // current_'s size.
  uint64_t in_write_ ABSL_GUARDED_BY(mu_) = 0;       // Bytes taken from buffer_, not yet written.
  uint64_t next_sequence_ ABSL_GUARDED_BY(mu_) = 1;  // Of the segment to prepare next.
  // The next segment, ready to start (written with zeros), if any.
  std::unique_ptr<EnvFile> prepared_ ABSL_GUARDED_BY(mu_);
  bool preparing_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status prepare_error_ ABSL_GUARDED_BY(mu_);
  absl::Time prepare_failed_at_ ABSL_GUARDED_BY(mu_);
  uint64_t bytes_written_ ABSL_GUARDED_BY(mu_) = 0;
  std::atomic<uint64_t> appended_published_{0};  // appended_lsn_, for AppendedLsn().
  std::atomic<bool> cancel_prepare_{false};      // Set by Close once the committer stopped.

  // The segment being written (null before the first): set and used by the
  // committer (and Open and Close, when it is not running); others only
  // test it for null under mu_.
  std::unique_ptr<EnvFile> current_;
  absl::Time last_sync_ = absl::InfinitePast();  // Committer only.
  std::thread committer_;
  std::thread preparer_;
};

// Whether the volume of `data_dir` can hold the log beside the snapshots:
// two segments of `segment_bytes` (the one being written and the prepared
// next one) and a temporary copy of the largest snapshot file (a snapshot
// is written beside the file it replaces) must fit in the free space plus
// what the log's files in `wal_dir` already take. Otherwise
// FAILED_PRECONDITION naming --wal-segment-size, the volume's size and free
// space, and the largest segment size that would fit. OK when the env does
// not know the disk space.
absl::Status CheckWalDiskSpace(Env* env, const std::string& data_dir, const std::string& wal_dir,
                               uint64_t segment_bytes);

// Upper bounds for Reserve: the record bytes of a write batch of `keys` keys
// on a filter of `shards` shards, and of the filter records.
uint64_t WalBytesForBatch(size_t keys, uint32_t shards);
// And of a request's id records, for a request key of `key_bytes` bytes on
// a batch of `keys` keys.
uint64_t WalBytesForRequest(size_t key_bytes, size_t keys);

}  // namespace cuckoo::server

#endif  // CUCKOO_SERVER_WAL_WAL_H_
