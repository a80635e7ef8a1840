// Persistence: the server's snapshots in its data directory, over
// core/snapshot.h, and the bookkeeping of what is on disk.
//
//   Persistence p(&registry, "/var/lib/cuckood");
//   p.LoadAll();                        // at start-up, before serving
//   p.Start(absl::Seconds(60));         // periodic snapshots of changed filters
//   p.SnapshotAsync("users", false, done);  // the Snapshot RPC
//   p.DropAsync("users", filter, done);     // the DropFilter RPC
//   p.CancelQueued();                   // at shutdown: answer what has not started
//   p.Stop();                           // then:
//   p.SnapshotNow("", /*changed_only=*/true);
//
// Data directory layout: <name>.cuckoo per filter; .<name>.cuckoo.tmp while
// one is being written (removed at start-up if a crash left one);
// quarantine/ for files that failed their checks; wal/, the write-ahead log;
// REQUESTS, the request ids' window saved before each truncation of the log;
// IDENTITY (a single node) or CHECKPOINT (a cluster replica), the identity
// of the log the directory follows; .export/ and .import/, private files of
// running exports and imports (removed at start-up).
//
// A data directory follows one log: a single node's write-ahead log, whose
// identity ("node-" and 32 random hex digits) its first start writes to
// IDENTITY, or a cluster's stream ("<stream>@<creation time>", in
// CHECKPOINT). Start-up refuses a directory, or a snapshot in it, that
// belongs to another log (see LoadAll): its filters and positions mean
// nothing against this one, and serving them would answer for keys the log
// never wrote.
//
// Every file operation (a snapshot written, a filter's file removed) runs on
// one background thread (Boost.Asio), which also owns the interval timer, or,
// once that thread has stopped, in the caller; a mutex keeps them one at a
// time either way. So gRPC's threads never wait for a disk, a snapshot and
// the removal of the same file never interleave, and a drop of a name always
// removes the file of the filter it takes out of the registry: the identity
// of the filter is checked under that mutex. The Snapshot, DropFilter and
// RenameFilter RPCs wait in one queue, bounded, in which requests to
// snapshot the same filter are merged.
//
// Thread safety: all methods may be called from any thread.
#ifndef CUCKOO_SERVER_STORAGE_PERSISTENCE_H_
#define CUCKOO_SERVER_STORAGE_PERSISTENCE_H_

#include <atomic>
#include <cstdint>
#include <deque>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "base/mutex.h"
#include "boost/asio/executor_work_guard.hpp"
#include "boost/asio/io_context.hpp"
#include "boost/asio/steady_timer.hpp"
#include "core/registry.h"
#include "core/snapshot.h"
#include "server/storage/request_window.h"
#include "server/wal/wal.h"

namespace cuckoo::server {

inline constexpr char kQuarantineDir[] = "quarantine";
// The write-ahead log's directory.
inline constexpr char kWalDir[] = "wal";
// Locked (flock) by the cuckood using the directory.
inline constexpr char kLockFile[] = "LOCK";
// Cluster mode: which log the snapshots belong to and where its replay
// starts (see ExternalLog).
inline constexpr char kCheckpointFile[] = "CHECKPOINT";
// Single node: the identity of the write-ahead log the snapshots belong to,
// written at the directory's first start (or at the first start of this
// build on a directory of an older one).
inline constexpr char kIdentityFile[] = "IDENTITY";
// Single node: the request ids still inside --dedup-window, saved before
// the write-ahead log is truncated (server/storage/request_window.h).
inline constexpr char kRequestWindowFile[] = "REQUESTS";
// Private files of ExportFilter and ImportFilter calls (server/
// filter_service.h); removed at start-up with whatever a stop left in them.
inline constexpr char kExportDir[] = ".export";
inline constexpr char kImportDir[] = ".import";
// The Redis port's CF.SCANDUMP and CF.LOADCHUNK files (server/resp/commands/resp_commands.h).
inline constexpr char kRedisDumpDir[] = ".redis-dump";

// A log kept outside the data directory (cluster mode: the JetStream
// stream, server/cluster/cluster.h). Persistence then keeps no write-ahead
// log of its own: after each snapshot run it writes <data-dir>/CHECKPOINT,
// naming the log (Identity) and the first position a restart must apply
// again, computed as the local log's truncation point is (every filter's
// snapshot positions, or its creation when it has no snapshot).
class ExternalLog {
 public:
  virtual ~ExternalLog() = default;
  // Every entry up to this position has been applied.
  virtual uint64_t AppliedPosition() const = 0;
  // Names the log (positions of another log mean nothing here); empty while
  // unknown, and then no checkpoint is written.
  virtual std::string Identity() const = 0;
  // The log for messages written before its Identity() is known (cluster
  // mode: "stream <name>").
  virtual std::string Name() const = 0;
  // The digest of the log (server/cluster/log_digest.h) after `position`,
  // a position already applied, or one the replay under way reaches (at or
  // past the first position the replay applied); false while it is not
  // known.
  virtual bool AppliedDigest(uint64_t* position, uint64_t* digest) const = 0;
  // Called after a checkpoint was written: entries before `needed` are no
  // longer needed by this replica.
  virtual void Checkpointed(uint64_t needed) = 0;
};

struct SnapshotRun {
  // Sorted by filter name.
  std::vector<std::pair<std::string, SnapshotWriteResult>> written;
  // Skipped by changed_only.
  std::vector<std::string> unchanged;
  uint64_t bytes = 0;
  absl::Duration duration;
};

struct LoadSummary {
  size_t loaded = 0;       // Snapshot files loaded.
  size_t quarantined = 0;  // Bad files moved to quarantine/.
  // Snapshot files whose filter the write-ahead log dropped later (a file
  // copied back by hand, or a drop a crash cut short), moved to quarantine/.
  size_t dropped_by_log = 0;
  // What is served once the log is replayed: filters and their items.
  size_t served = 0;
  uint64_t served_items = 0;
  uint64_t items = 0;
  uint64_t bytes = 0;
  // The write-ahead log's replay: records read, applied (the rest were
  // held by snapshots already, or were of filters dropped later), bytes.
  uint64_t log_records = 0;
  uint64_t log_applied = 0;
  uint64_t log_bytes = 0;
  absl::Duration log_duration;
  absl::Duration duration;
  // The identity of the log the data directory follows: a single node's
  // (IDENTITY, written at its first start), or with an ExternalLog the
  // checkpoint's (empty, and resume_from 1, when there was none).
  std::string log_identity;
  uint64_t resume_from = 1;
  // The digest of the log after log_digest_position, if the checkpoint
  // records one (a checkpoint of version 2; none: version 1, whose replica
  // learns it again from a peer).
  bool has_log_digest = false;
  uint64_t log_digest_position = 0;
  uint64_t log_digest = 0;
};

// A filter's latest snapshot on disk.
struct SnapshotRecord {
  bool exists = false;   // A snapshot of this filter is on disk.
  absl::Time time;       // When it was taken (its first shard copied).
  uint64_t bytes = 0;    // Its size.
  uint64_t changes = 0;  // The filter's changes() it holds.
  // The filter id it records (0: a version-1 file, which records none) and
  // the lowest of its shards' log positions: the log is needed from
  // max(min_position, filter_id) + 1 on.
  uint64_t filter_id = 0;
  uint64_t min_position = 0;

  // Changes of `filter` (the filter this is the record of) that the
  // snapshot does not hold: all of them when there is none.
  uint64_t UnsnapshottedChanges(const CuckooFilter& filter) const {
    return filter.changes() - (exists ? changes : 0);
  }
};

// What a rename did (Persistence::RenameNow).
struct RenameResult {
  std::shared_ptr<CuckooFilter> filter;    // The renamed filter.
  std::shared_ptr<CuckooFilter> replaced;  // The filter the new name had; null if none.
  uint64_t lsn = 0;                        // The rename record's (0 without a log).
};

struct PersistenceOptions {
  // The most memory one snapshot write takes for its buffer (see
  // SnapshotWriteOptions): part of the process's fixed overhead.
  size_t snapshot_buffer_bytes = size_t{64} << 20;
  // Snapshot, DropFilter and RenameFilter requests that may wait at once; more get
  // RESOURCE_EXHAUSTED.
  size_t max_queued = 64;

  // Fault injection, for tests. Runs before each file operation, holding the
  // lock that orders them: op is "write" or "remove", name the filter's; an
  // import (ImportNow) runs it with "import" before its file is written,
  // "import-file-written" once the file is in place, and "import-logged"
  // once the creation record is durable, before the filter is published.
  std::function<void(absl::string_view op, absl::string_view name)> before_file_operation;
  // Told of each snapshot file written (ok, its bytes and how long it took)
  // or failed (not ok, 0, zero), on the thread that wrote it: /metrics
  // counts them. None if empty.
  std::function<void(bool ok, uint64_t bytes, absl::Duration duration)> on_snapshot_written;
  // Replaces the directory fsync after a drop removed a file.
  std::function<absl::Status(absl::string_view dir)> sync_directory;

  // The write-ahead log, in <data-dir>/wal (wal.dir is set by Persistence).
  WalOptions wal;
  // Log size past which changed filters are snapshotted early.
  uint64_t wal_max_bytes = uint64_t{1} << 30;
};

class Persistence {
 public:
  using SnapshotDone = std::function<void(absl::StatusOr<SnapshotRun>)>;
  using DropDone = std::function<void(absl::StatusOr<std::shared_ptr<CuckooFilter>>)>;
  using RenameDone = std::function<void(absl::StatusOr<RenameResult>)>;

  Persistence(FilterRegistry* registry, std::string data_dir, PersistenceOptions options = {});
  ~Persistence();  // Stop()s.
  Persistence(const Persistence&) = delete;
  Persistence& operator=(const Persistence&) = delete;

  const std::string& data_dir() const { return data_dir_; }
  // Cluster mode: the log lives elsewhere (see ExternalLog). Before LoadAll.
  void SetExternalLog(ExternalLog* log) { external_log_ = log; }
  ExternalLog* external_log() const { return external_log_; }
  // With an ExternalLog: the next snapshot run writes the checkpoint
  // whatever position it names (a copy from a peer replaced every filter,
  // and may hold them at earlier positions than the checkpoint on disk).
  void ForgetCheckpoint();
  // Single node: the request ids' window, which LoadAll fills from
  // <data-dir>/REQUESTS and the log's request records, and each truncation
  // of the log saves to REQUESTS first (server/storage/request_window.h). Before
  // LoadAll.
  void SetRequestWindow(RequestWindow* window) { request_window_ = window; }
  // The write-ahead log: null until LoadAll has replayed it and opened it
  // for appending.
  Wal* wal() const { return wal_published_.load(std::memory_order_acquire); }
  const PersistenceOptions& options() const { return options_; }

  // Locks the data directory (<data-dir>/LOCK) for this process until the
  // Persistence is destroyed, then loads every snapshot in it into the
  // registry, logging a line per filter. A damaged file (DATA_LOSS: bad
  // checksums or structure, or not a regular file) is logged with the reason
  // and moved to quarantine/; the rest still load. Fails, and the server
  // must not start (it would later overwrite data it did not load), when:
  // the directory cannot be read; a snapshot cannot be read for another
  // reason (I/O, permissions); a snapshot is intact but this build cannot
  // read it (written by a newer cuckood: FAILED_PRECONDITION naming the
  // writer); a damaged file cannot be moved to quarantine/; a snapshot does
  // not fit the memory budget or filter limit; or another process holds the
  // lock (FAILED_PRECONDITION): two servers writing one directory would
  // destroy each other's snapshots. Also FAILED_PRECONDITION, naming both
  // logs and the fix, before anything in the directory changes, when the
  // directory follows another log than this server's: a single node's
  // directory holds a CHECKPOINT (a cluster replica's); a cluster replica's
  // holds IDENTITY or a write-ahead log (a single node's), or snapshots but
  // no CHECKPOINT (files copied in: an empty directory bootstraps from a
  // peer replica instead). Nothing is deleted. A single node's directory
  // without IDENTITY (a new one, or one of an older cuckood) gets one.
  absl::StatusOr<LoadSummary> LoadAll();

  // What is on disk for `filter` under `name`: its latest snapshot, or none
  // (also when `name` now names another filter).
  SnapshotRecord Record(absl::string_view name, const CuckooFilter& filter) const;

  // Writes snapshots of filter `name` (all filters when empty) in the
  // calling thread. NOT_FOUND for an unknown filter. When some filters fail,
  // the others are still written and the first error is returned.
  absl::StatusOr<SnapshotRun> SnapshotNow(absl::string_view name, bool changed_only);
  // SnapshotNow on the background thread; `done` runs there. A request for a
  // filter (or for all) that is already waiting is merged into it (written
  // once, unless one of them asked for every filter and the other not).
  // RESOURCE_EXHAUSTED at once when max_queued requests are waiting;
  // UNAVAILABLE if the request is cancelled (CancelQueued). After Stop() it
  // runs in the calling thread.
  void SnapshotAsync(std::string name, bool changed_only, SnapshotDone done);

  // Removes filter `name` and its snapshot file: NOT_FOUND for an unknown
  // filter; INTERNAL naming the file if it cannot be removed, or if the
  // directory cannot be synced after the removal (the filter is then kept,
  // and its snapshot written again at the next periodic or final snapshot).
  // Returns the dropped filter. Drops only `only`, the filter the caller
  // found under `name`: NOT_FOUND if the name has meanwhile been dropped,
  // or dropped and created again (a DropFilter waiting in the queue when a
  // client recreated the name must not take the new filter).
  absl::StatusOr<std::shared_ptr<CuckooFilter>> DropNow(absl::string_view name,
                                                        const std::weak_ptr<CuckooFilter>& only);
  // DropNow on the background thread, queued like SnapshotAsync.
  void DropAsync(std::string name, std::weak_ptr<CuckooFilter> only, DropDone done);

  // Renames filter `name` (only `only`, the filter the caller found there:
  // NOT_FOUND otherwise) to `new_name`, replacing the filter there if
  // `replace` (else ALREADY_EXISTS naming it), as FilterRegistry::Rename.
  // Single node only (FAILED_PRECONDITION with an ExternalLog). In order,
  // holding the lock of file operations throughout, so that a crash at any
  // instant leaves the whole rename or none (docs/WAL_FORMAT.md):
  //  1. the rename record (filter id, new name, replaced filter's id) is
  //     appended under the registry's lock as the registry renames, and
  //     made durable (whatever the durability mode);
  //  2. the filter's snapshot is written under its new name's file (which
  //     replaces the replaced filter's), the file of its old name removed,
  //     the directory synced.
  // Until 2 is done, the filter counts as not snapshotted, so the log keeps
  // the rename; should 2 fail, the old file stays, recorded as the
  // filter's (no other filter's snapshot may overwrite it), and the next
  // snapshot run retries. Start-up replays a rename over the old file (and
  // removes the replaced filter's), then writes the file under the new
  // name before serving; of two files that hold one filter id (a crash
  // between 2's write and removal), the one that reaches the later log
  // position is kept.
  absl::StatusOr<RenameResult> RenameNow(absl::string_view name, absl::string_view new_name,
                                         bool replace, const std::weak_ptr<CuckooFilter>& only);
  // RenameNow on the background thread, queued like SnapshotAsync.
  void RenameAsync(std::string name, std::string new_name, bool replace,
                   std::weak_ptr<CuckooFilter> only, RenameDone done);

  // Starts the background thread, with a snapshot of changed filters every
  // `interval` (none when zero).
  void Start(absl::Duration interval);
  // Answers every queued request that has not started with UNAVAILABLE (the
  // final snapshot writes every changed filter anyway); later requests are
  // answered so at once. For shutdown, so that it waits at most for the one
  // request being carried out.
  void CancelQueued();
  // Stops the timer and the thread after the request being carried out, if
  // any; cancels the queued ones. Idempotent.
  void Stop();
  // After Stop and the final snapshot: truncates the log and closes it
  // (every record appended is written and synced). Idempotent.
  void CloseLog();

  // Cluster mode: applies a drop that the log holds. Takes `filter` (the one
  // the entry names) out of the registry at once; its snapshot file is
  // removed on the background thread (or before the next checkpoint, which
  // waits for it).
  void ApplyDrop(absl::string_view name, const std::shared_ptr<CuckooFilter>& filter);

  // Cluster mode: applies a rename that the log holds. Renames `filter`
  // (named `name`) to `new_name` at once, replacing the filter there
  // (*replaced; the caller checked it is the one the entry names). Its file
  // follows at the next snapshot run: until then it counts as not
  // snapshotted (so the checkpoint keeps the entry), and its old name's
  // file is kept as its own (legacy_files_).
  absl::Status ApplyRename(absl::string_view name, absl::string_view new_name,
                           const std::shared_ptr<CuckooFilter>& filter,
                           std::shared_ptr<CuckooFilter>* replaced);

  // Logs the creation of `filter` named `name` (a FilterRegistry
  // BeforePublish hook) and sets its id; *lsn is the record's lsn, to wait
  // for before answering.
  absl::Status LogCreate(absl::string_view name, CuckooFilter& filter, uint64_t* lsn);

  // Single node: if applies(current expiry), sets `filter`'s expiry to
  // `expire_at` (Unix milliseconds, 0 clears; at most kWalMaxExpireAt) and
  // logs it (a kSetExpiry record naming its id), *changed telling whether
  // it did. The value is set before the record is appended, so that no
  // snapshot whose positions pass the record lacks the value
  // (WriteSnapshotFile reads it after the shards' positions); the check,
  // the change and the append of every expiry change are one at a time,
  // so the log has them in the order they were made. Returns the record's
  // lsn, to wait for before answering (0 without the log, or unchanged).
  // RESOURCE_EXHAUSTED / UNAVAILABLE when the log has no room or has
  // failed: then nothing changed.
  absl::StatusOr<uint64_t> LogExpiry(CuckooFilter& filter, int64_t expire_at,
                                     const std::function<bool(int64_t current)>& applies,
                                     bool* changed);

  // Makes `filter`, read from an imported snapshot and seen by no other
  // thread, the filter claim.name() (the claim holds the name and memory:
  // FilterRegistry::ClaimName), durable before it is visible. Single node
  // only: FAILED_PRECONDITION without the write-ahead log. In the calling
  // thread, holding the lock of file operations throughout (snapshots,
  // drops and log truncation wait; the caller is not one of gRPC's threads).
  //
  // The order, so that a crash at any instant leaves the whole filter or
  // none:
  //  1. its snapshot file, <name>.cuckoo (written, fsync'ed, renamed, the
  //     directory fsync'ed), recording filter id 0 and every shard's
  //     position at the log's last lsn then (the positions of the file it
  //     came from belong to another log);
  //  2. its creation record in the log, whose lsn becomes its id, fsync'ed;
  //  3. published in the registry.
  // A crash before 1's rename leaves no file: no filter. After it, start-up
  // loads the file; a record from 2 that reached the disk gives the filter
  // its id (start-up takes a creation of the name after the file's
  // positions for its own; one at or before them is of an earlier filter of
  // the name), and without one start-up logs a creation for it (as for a
  // version-1 snapshot). Either way its later writes replay onto it. The
  // next snapshot of the filter writes its id into the file.
  // On failure nothing changes: a file that failed to be written is removed,
  // and should publishing fail after 2 (an allocation), the creation is
  // logged as dropped and the file removed. The exception is a failure of
  // the log itself in 2: the file then stays, and the process exits
  // (WalOptions::on_failure), so the restart has the whole filter; the call
  // is answered with the log's error (or not at all).
  absl::StatusOr<std::shared_ptr<CuckooFilter>> ImportNow(FilterRegistry::Claim claim,
                                                          std::unique_ptr<CuckooFilter> filter,
                                                          SnapshotWriteResult* written,
                                                          uint64_t* lsn);

 private:
  struct Job;

  void ArmTimer();
  // Queues `job` (merging it when it can), or answers it at once.
  void Enqueue(std::unique_ptr<Job> job);
  // Carries out the oldest queued job (on the background thread).
  void RunOne();
  static void Finish(Job& job, const absl::Status& status);
  // Moves a bad file to quarantine/, logging why. Fails if it cannot.
  absl::Status Quarantine(const std::string& path, const absl::Status& why);
  // Moves `path` to quarantine/ (a name of its own there), without logging;
  // the new path. Fails, naming `why`, if it cannot.
  absl::StatusOr<std::string> MoveToQuarantine(const std::string& path, const absl::Status& why);
  // `bounds`: see Entry.
  void SetRecord(absl::string_view name, const std::shared_ptr<CuckooFilter>& filter,
                 const SnapshotRecord& record, std::vector<uint64_t> bounds = {});
  // Whether no log entry has reached `filter` (named `name`) since its
  // snapshot: every shard's position is at most its bound (Entry). If so,
  // the snapshot holds every entry of the filter up to any lsn read before
  // the call. False without bounds.
  bool UntouchedSinceSnapshot(absl::string_view name, const CuckooFilter& filter) const;
  // Replays the log over the loaded snapshots and opens it for appending.
  absl::Status ReplayAndOpenLog(LoadSummary* summary);
  // The replay's records (persistence_load.cc).
  class LogReplay;
  // Logs what the replay found: a torn end, a clean-close file that did not
  // match, the records read.
  static void LogReplayed(const WalScan& scan, const LoadSummary& summary);
  // Gives the filters loaded from version-1 snapshots a create record.
  absl::Status LogVersionOneFilters();
  // Deletes the log segments no filter needs any more (after snapshots),
  // first retrying the removal of dropped filters' files. Holds file_mu_.
  void TruncateLogLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(file_mu_);
  // Writes filter `name`'s snapshot (the caller checked it is the filter of
  // that name, under file_mu_), records it and removes an older file of
  // it; logs and counts the outcome.
  absl::StatusOr<SnapshotWriteResult> WriteSnapshotLocked(
      const std::string& name, const std::shared_ptr<CuckooFilter>& filter)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(file_mu_);
  // The name of the filter renamed away from `name` whose file is still
  // SnapshotPath(name) (legacy_files_); empty if none.
  std::string RenamedAwayFrom(absl::string_view name);
  // Start-up: writes the snapshot of every filter the log's replay renamed
  // away from its file, and removes that file.
  absl::Status MoveRenamedFiles();
  // Removes a dropped filter's snapshot file and syncs the directory.
  absl::Status RemoveSnapshotFile(absl::string_view name);
  void ArmLogCheck();
  // Which log the directory follows (before any snapshot is loaded): a
  // single node's IDENTITY, read or made up (*write_identity: to be written
  // once the directory has loaded), or a cluster replica's CHECKPOINT;
  // FAILED_PRECONDITION for a directory of another log (LoadAll). Each
  // snapshot is then checked as it is read (CheckSnapshotLog).
  absl::Status CheckLogIdentity(LoadSummary* summary, bool* write_identity);
  // The log identity snapshot file `path` records (`recorded`; empty: none)
  // against the directory's: FAILED_PRECONDITION for another log's. A
  // directory that records none yet takes the file's (a single node's
  // directory of an older cuckood; a replica's before its first
  // checkpoint, which must record this stream: `snapshots`, every file, for
  // the message).
  absl::Status CheckSnapshotLog(const std::string& path, const std::string& recorded,
                                const std::vector<std::filesystem::path>& snapshots);
  // What snapshots record as their log: the directory's log identity (or,
  // for a new replica's directory, the stream's once known), shortened to
  // kSnapshotLogIdentityBytes (its start and a hash of the whole).
  std::string RecordedLogIdentity() const;
  // Cluster mode: the checkpoint's reading and writing.
  absl::Status ReadCheckpoint(LoadSummary* summary);
  // Writes <data-dir>/<file> atomically (a temporary file, fdatasync'ed,
  // renamed over it, the directory synced).
  absl::Status WriteFileAtomically(const std::string& file, absl::string_view bytes);
  // Single node: REQUESTS into the request window, at start-up.
  absl::Status LoadRequestWindow();
  // Version 2, with the digest of the log after `digest_position` when
  // `has_digest` (version 1's lines and this one).
  absl::Status WriteCheckpointLocked(const std::string& identity, uint64_t needed, bool has_digest,
                                     uint64_t digest_position, uint64_t digest)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(file_mu_);
  // Moves requested_removals_ into pending_removals_.
  void TakeRequestedRemovalsLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(file_mu_);

  FilterRegistry* const registry_;
  const std::string data_dir_;
  const PersistenceOptions options_;
  absl::Duration interval_;
  boost::asio::io_context io_;
  std::optional<boost::asio::executor_work_guard<boost::asio::io_context::executor_type>> work_;
  std::unique_ptr<boost::asio::steady_timer> timer_;
  std::thread thread_;
  int lock_fd_ = -1;

  // Held by every file operation: one at a time.
  Mutex file_mu_;
  std::unique_ptr<Wal> wal_;
  // wal_.get() once it is open, for other threads (the admin server's
  // scrapes run while LoadAll replays).
  std::atomic<Wal*> wal_published_{nullptr};
  // Checks the log's size every second (on the background thread).
  std::unique_ptr<boost::asio::steady_timer> log_timer_;
  absl::Time last_early_snapshot_ = absl::InfinitePast();  // Background thread only.
  // Names of dropped filters whose snapshot file could not be removed (or
  // the removal not synced): the log is not truncated until they are gone,
  // so that a restart still replays their drop.
  std::vector<std::string> pending_removals_ ABSL_GUARDED_BY(file_mu_);
  ExternalLog* external_log_ = nullptr;
  RequestWindow* request_window_ = nullptr;
  // The identity of the log the directory follows (LoadAll; empty for a
  // cluster replica's new directory: RecordedLogIdentity then asks the
  // stream).
  std::string log_identity_;
  // The checkpoint last written (cluster mode).
  uint64_t checkpoint_ ABSL_GUARDED_BY(file_mu_) = 0;
  // Whether the checkpoint on disk records the log's digest.
  bool checkpoint_has_digest_ ABSL_GUARDED_BY(file_mu_) = false;
  // Orders LogExpiry's set-and-append pairs.
  Mutex expiry_mu_;
  // Drops applied from the cluster log whose files are still to go.
  Mutex removals_mu_;
  std::vector<std::string> requested_removals_ ABSL_GUARDED_BY(removals_mu_);

  Mutex state_mu_;
  bool running_ ABSL_GUARDED_BY(state_mu_) = false;
  bool cancelled_ ABSL_GUARDED_BY(state_mu_) = false;
  std::deque<std::unique_ptr<Job>> queue_ ABSL_GUARDED_BY(state_mu_);

  struct Entry {
    std::weak_ptr<const CuckooFilter> filter;  // The filter the record is of.
    SnapshotRecord record;
    // Per shard, an lsn up to which the snapshot holds every entry of the
    // shard, and past which lies every entry applied to the shard since
    // its copy: the position floor read before the copy (SnapshotNow), or
    // the shard's position in the file loaded (LoadAll; replay and later
    // writes apply only entries past it). A shard whose position is still
    // at most its bound has had no entry since. Empty when unknown.
    std::vector<uint64_t> bounds;
  };
  mutable Mutex records_mu_;
  absl::flat_hash_map<std::string, Entry> records_ ABSL_GUARDED_BY(records_mu_);
  // Filters loaded from an older build's file, <name>.cuckoo
  // (LegacySnapshotPath), or renamed while their file is still their old
  // name's (RenameNow): name -> that path. The filter's first snapshot
  // under its own file name (SnapshotPath), or its drop, removes the file.
  Mutex legacy_mu_;
  absl::flat_hash_map<std::string, std::string> legacy_files_ ABSL_GUARDED_BY(legacy_mu_);
  // Removes filter `name`'s older-build file, if it was loaded from one
  // (legacy_files_), and syncs the directory.
  absl::Status RemoveLegacyFile(absl::string_view name);
  // The file filter `name` was loaded from: its older-build file if it has
  // one, else SnapshotPath.
  std::string LoadedPath(absl::string_view name);
};

}  // namespace cuckoo::server

#endif  // CUCKOO_SERVER_STORAGE_PERSISTENCE_H_
