// Snapshots: a filter written to one file and read back bit for bit.
//
// The format (versioned, little-endian, an XXH3-64 checksum per section and
// one over the whole) is specified in docs/SNAPSHOT_FORMAT.md. The file of
// filter "name" is <dir>/f-<SHA-256 of the name in hex>.cuckoo
// (SnapshotPath): a name is a Redis key ("a/b", "../x", "my filter") and
// never becomes a path; the file holds the name. Builds before format
// version 5 named it <dir>/name.cuckoo (LegacySnapshotPath).
//
//   absl::StatusOr<SnapshotWriteResult> w = WriteSnapshotFile(*filter, "users:seen",
//   "/var/lib/cuckood"); absl::StatusOr<LoadedSnapshot> r =
//   ReadSnapshotFile(w->path, "users:seen");
//
// Writing copies one shard at a time under that shard's shared lock and
// writes the copy with no lock held, so inserts into other shards go on and
// inserts into the shard being copied wait only for a memcpy. A shard larger
// than the write buffer (SnapshotWriteOptions) is written through the buffer
// in pieces while its shared lock is held instead: memory stays bounded, and
// inserts into that one shard wait for its write. The file is written under a
// temporary name, fsync'ed, renamed over the old snapshot and the directory
// fsync'ed: a crash at any instant leaves the old snapshot or the new one,
// never a torn file.
//
// A snapshot also carries what a write-ahead log needs to resume after it:
// the filter's id() and, per shard, the log position of the last write the
// shard's copy holds (CuckooFilter::ShardState::position). Start-up replays
// the log after each shard's position. Files of format version 1, which
// hold neither, still load, with id 0 and every position 0. From format
// version 4 on a file also records which log it belongs to (an opaque
// string the caller gives, SnapshotWriteOptions::log_identity), so that a
// file copied from another server's data directory can be told apart.
//
// A growing filter's shard (FilterShape::growing()) has one table per
// generation it has reached; its section holds them all, copied under the
// same lock. Format version 3 exists for them; files of versions 1 and 2
// load as fixed filters, as they were written.
//
// Reading checks everything before the filter is handed out: a file that
// fails any check yields DATA_LOSS with a message naming the file and the
// check, and no filter. FAILED_PRECONDITION means the file is intact but
// this build cannot read it (a newer format version, table kind, hash or
// settings: written by a newer cuckood); the message says which and, when
// the file records it, which build wrote it. Other statuses (NOT_FOUND,
// PERMISSION_DENIED, INTERNAL for I/O errors) mean the file could not be
// read, not that it is bad.
//
// Thread safety: WriteSnapshotFile may run concurrently with any use of the
// filter. Two writes of the same file at once are the caller's to prevent
// (cuckood writes every file from one thread; server/storage/persistence.h).
#ifndef CUCKOO_CORE_SNAPSHOT_H_
#define CUCKOO_CORE_SNAPSHOT_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "base/env.h"
#include "core/cuckoo_filter.h"

namespace cuckoo {

// The newest format version WriteSnapshotFile writes: 6 for a filter that
// has an expiry, 5 (the same layout without it) for one that has none.
// Readers read every version from 1 to this one.
inline constexpr uint32_t kSnapshotFormatVersion = 6;
// Every format version after 1 starts with the same 16 bytes (magic,
// version, header size) and then, at bytes 16..47, the name and version of
// the build that wrote it (ASCII, NUL-padded), so that a build that cannot
// read a file can still say which build wrote it (docs/SNAPSHOT_FORMAT.md).
inline constexpr size_t kSnapshotWriterOffset = 16;
inline constexpr size_t kSnapshotWriterBytes = 32;
// The most bytes of the log identity a file records (format version 4 on):
// printable ASCII.
inline constexpr size_t kSnapshotLogIdentityBytes = 48;
inline constexpr absl::string_view kSnapshotSuffix = ".cuckoo";
// Temporary files are "." + file name + kSnapshotTempSuffix: snapshot file
// names never start with '.', so they cannot collide with a snapshot.
inline constexpr absl::string_view kSnapshotTempSuffix = ".tmp";

// "f-" + the SHA-256 of `name` in lowercase hex + kSnapshotSuffix: the file
// name of filter `name`'s snapshot, whatever bytes the name holds (a
// collision-resistant hash: no client can choose a name whose file is
// another filter's).
std::string SnapshotFileName(absl::string_view name);
// Whether `file` has the shape SnapshotFileName gives (f-<64 hex>.cuckoo).
bool IsSnapshotFileName(absl::string_view file);
// <dir>/SnapshotFileName(name)
std::string SnapshotPath(absl::string_view dir, absl::string_view name);
// <dir>/.SnapshotFileName(name).tmp: where a snapshot is written before its
// rename.
std::string SnapshotTempPath(absl::string_view dir, absl::string_view name);
// Whether `name` is one builds before format version 5 accepted
// ([A-Za-z0-9][A-Za-z0-9._-]{0,127}), the only names whose files they named
// <name>.cuckoo.
bool IsLegacySnapshotName(absl::string_view name);
// <dir>/<name>.cuckoo, what those builds wrote; only for such names.
std::string LegacySnapshotPath(absl::string_view dir, absl::string_view name);

struct SnapshotWriteResult {
  std::string path;
  uint64_t bytes = 0;      // File size.
  uint64_t items = 0;      // Items in the snapshot (each shard's as it was copied).
  uint64_t changes = 0;    // The filter's changes() the snapshot holds.
  uint64_t filter_id = 0;  // The filter's id() the snapshot holds.
  int64_t expire_at = 0;   // The filter's expire_at() the snapshot holds.
  // The least and the greatest of the shards' log positions, each as its
  // table was copied: the snapshot holds every logged write up to
  // min_position, and none after max_position.
  uint64_t min_position = 0;
  uint64_t max_position = 0;
  absl::Time taken;         // When the first shard was copied.
  absl::Duration duration;  // So far, when before_commit sees it.
};

struct SnapshotWriteOptions {
  // The most memory the write may take for its buffer: a shard whose section
  // fits is copied whole, a larger one written through it in pieces (above).
  size_t buffer_bytes = size_t{64} << 20;
  // When set, called once the new file is completely written and fsync'ed
  // under its temporary name, before it replaces the previous snapshot,
  // with the result filled in. A non-OK status aborts the write: the
  // temporary file is removed, the previous snapshot stays, and the write
  // returns that status. (cuckood waits here until its log is durable up to
  // max_position, so that no snapshot on disk is ahead of the log.)
  std::function<absl::Status(const SnapshotWriteResult&)> before_commit;
  // When set, called before each shard is copied: a log position every
  // entry up to which is applied to the shard by the time its lock is next
  // taken (or does not concern it). The shard's section records the
  // greater of this and the shard's own position (that of the last entry
  // that wrote to it), so a shard no entry has written to for a while does
  // not hold back the log's truncation. (cuckood: the write-ahead log's
  // last lsn given out, or a cluster replica's applied position.)
  std::function<uint64_t()> position_floor;
  // Which log the positions and the id belong to, recorded in the file
  // (SnapshotHeader::log_identity): at most kSnapshotLogIdentityBytes of
  // printable ASCII, else INVALID_ARGUMENT. Empty: none recorded.
  std::string log_identity;
  // The file operations (tests inject faults); PosixEnv() when null.
  Env* env = nullptr;
};

// Writes `filter`'s snapshot (format version kSnapshotFormatVersion) to
// SnapshotPath(dir, name). INTERNAL (RESOURCE_EXHAUSTED when the disk is
// full) naming the file and the system error when it cannot be written, or
// before_commit's status; the previous snapshot, if any, is then still in
// place.
absl::StatusOr<SnapshotWriteResult> WriteSnapshotFile(const CuckooFilter& filter,
                                                      absl::string_view name, absl::string_view dir,
                                                      const SnapshotWriteOptions& options = {});

// fsyncs directory `dir` (after a file in it was created, renamed or
// removed), through `env` (PosixEnv() when null). INTERNAL naming the
// directory and the system error.
absl::Status SyncSnapshotDirectory(absl::string_view dir, Env* env = nullptr);

// What a snapshot's header says, checked.
struct SnapshotHeader {
  std::string name;
  FilterShape shape;
  absl::Time taken;
  uint64_t file_bytes = 0;
  // shards_with_generation[g]: shards that have generation g
  // (GenerationSchedule(shape)[g]); [0] is every shard. One entry for a
  // fixed filter, and for every file of format version 1 or 2.
  std::vector<uint32_t> shards_with_generation;
  // What the loaded filter's memory_bytes() will be: CuckooFilter::
  // MemoryBytes(shape) plus every grown table the file holds. For budgets:
  // a growing filter may need far more than MemoryBytes(shape).
  uint64_t memory_bytes = 0;
  // The log the file belongs to (SnapshotWriteOptions::log_identity): empty
  // if the writer gave none, and in files of format versions 1 to 3, which
  // have no room for it.
  std::string log_identity;
};

struct LoadedSnapshot {
  SnapshotHeader header;
  uint32_t format_version = 0;  // The file's: 1 to 4.
  uint64_t items = 0;
  // The filter's id (0 in a version-1 file); filter->id() returns it.
  uint64_t filter_id = 0;
  // The filter's expire_at() (0: none; always 0 before format version 5);
  // filter->expire_at() returns it.
  int64_t expire_at = 0;
  // The least and the greatest of the shards' log positions (0 in a
  // version-1 file); each shard of `filter` has its own position restored
  // (CuckooFilter::ShardPositions).
  uint64_t min_position = 0;
  uint64_t max_position = 0;
  std::unique_ptr<CuckooFilter> filter;
};

// Called with the checked header before the tables are allocated; a non-OK
// status stops the load and is returned as is (e.g. a memory budget check).
using SnapshotAdmit = std::function<absl::Status(const SnapshotHeader&)>;

// Reads the snapshot at `path`. With a non-empty `expected_name` the filter
// name stored in it must match. DATA_LOSS "<path>: <reason>" for a bad file.
absl::StatusOr<LoadedSnapshot> ReadSnapshotFile(const std::string& path,
                                                absl::string_view expected_name = {},
                                                const SnapshotAdmit& admit = nullptr);

// The same for a snapshot held in memory; `label` stands for the path in
// messages. For tests and the fuzzer.
absl::StatusOr<LoadedSnapshot> ParseSnapshot(absl::Span<const uint8_t> data,
                                             absl::string_view label,
                                             absl::string_view expected_name = {},
                                             const SnapshotAdmit& admit = nullptr);

}  // namespace cuckoo

#endif  // CUCKOO_CORE_SNAPSHOT_H_
