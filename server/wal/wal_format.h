// The write-ahead log's on-disk format (docs/WAL_FORMAT.md): segment
// headers, framed records, and the reader that finds where a log ends and
// tells a write torn by a crash from damage.
//
//   uint8_t buf[WalShardWriteBytes(n)];
//   EncodeShardWrite(lsn, synced_lsn, filter_id, write, buf);
//   ...
//   absl::StatusOr<WalScan> scan = ScanWal(env, dir, [&](const WalRecord& r) {
//     return Apply(r);  // every valid record, in log order
//   });
//
// Thread safety: functions only; ScanWal calls its callback on the calling
// thread.
#ifndef CUCKOO_SERVER_WAL_WAL_FORMAT_H_
#define CUCKOO_SERVER_WAL_WAL_FORMAT_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "base/env.h"
#include "core/cuckoo_filter.h"
#include "core/filter_options.h"

namespace cuckoo::server {

inline constexpr uint32_t kWalFormatVersion = 1;
inline constexpr size_t kWalSegmentHeaderBytes = 64;
inline constexpr size_t kWalRecordHeaderBytes = 32;
inline constexpr size_t kWalRecordTrailerBytes = 8;  // The checksum.
// No record is longer: a shard write holds at most CuckooFilter::kBatchPartKeys
// hashes (32 KiB).
inline constexpr size_t kWalMaxRecordBytes = size_t{64} << 10;
static_assert(kWalMaxRecordBytes >= kWalRecordHeaderBytes + 8 + 8 * CuckooFilter::kBatchPartKeys +
                                        kWalRecordTrailerBytes);
// Segment files are <16 hex digits of their sequence number>.wal.
inline constexpr absl::string_view kWalSegmentSuffix = ".wal";

enum class WalRecordType : uint8_t {
  // On disk type 7 (the shape as core/shape_format.h encodes it), or type
  // 1 as builds before wrote it (an older field order); both decode as 1.
  kCreateFilter = 1,
  kDropFilter = 2,
  kInsert = 3,
  kDelete = 4,
  // A request's id (docs/WAL_FORMAT.md, "Request records"): before its
  // first shard write, and its results after its last.
  kRequestStart = 5,
  kRequestResults = 6,
  // 7: taken by kCreateFilter's current encoding.
  // Filter `filter_id` takes the name `name`; the filter that had it,
  // `replaced_id` (0: none), is dropped with it (docs/WAL_FORMAT.md).
  kRenameFilter = 8,
  // The filter's expiry set (expire_at, Unix milliseconds) or cleared (0):
  // docs/WAL_FORMAT.md, "Expiry records". The drop when it passes is a
  // kDropFilter record, as any drop.
  kSetExpiry = 9,
  // 10: reserved for filter expiry.
  // A transaction's bounds (docs/WAL_FORMAT.md, "Transactions"): the
  // records between a kTxnBegin and the kTxnEnd that names it (its
  // filter_id field holds the begin's lsn) are replayed all or none. A
  // log that ends after a begin without its end is cut at that begin:
  // nothing from there on was acknowledged (Wal::BeginTransaction).
  kTxnBegin = 11,
  kTxnEnd = 12,
};

// The longest request key a request record holds (RequestWindow's key: the
// method, the request_id of at most 128 bytes, a digest).
inline constexpr size_t kWalMaxRequestKeyBytes = 256;
// Results per kRequestResults record; a batch's results take as many
// records as they need.
inline constexpr size_t kWalResultsPerRecord = 32768;
static_assert(kWalMaxRecordBytes >= kWalRecordHeaderBytes + 32 + kWalMaxRequestKeyBytes +
                                        kWalResultsPerRecord + kWalRecordTrailerBytes);

// A request record's fields. kRequestStart: key, method, keys, time (when
// it started). kRequestResults: also offset, results (keys [offset, offset +
// results.size()) of the batch) and time (when it finished); the answer's
// log position is the lsn of the request's last kRequestResults record.
// `position` is written as is and read back (cuckood writes 0).
struct WalRequest {
  std::string key;
  ShardWrite::Kind method = ShardWrite::kInsert;
  uint32_t keys = 0;
  uint32_t offset = 0;
  uint64_t position = 0;
  absl::Time time;
  std::vector<uint8_t> results;
};

// A decoded record. For kInsert and kDelete, `write` (its hashes in
// `hashes`); for kCreateFilter, `name` and `shape` (the filter's id is the
// record's lsn); kDropFilter has only the header; kRenameFilter: `name` (the
// new one), `replaced_id` and `replace`; kTxnBegin has only the header, and
// kTxnEnd's `filter_id` is its begin's lsn.
struct WalRecord {
  WalRecordType type = WalRecordType::kInsert;
  uint64_t lsn = 0;
  // Every record up to this one was durable when this one was written.
  uint64_t synced_lsn = 0;
  uint64_t filter_id = 0;
  ShardWrite write;
  std::vector<uint64_t> hashes;
  std::string name;
  FilterShape shape;
  WalRequest request;        // kRequestStart, kRequestResults.
  int64_t expire_at = 0;     // kSetExpiry: Unix milliseconds, 0 when cleared.
  uint64_t replaced_id = 0;  // kRenameFilter.
  bool replace = false;      // kRenameFilter: RENAME (true) or RENAMENX.
};

struct WalSegmentHeader {
  uint64_t sequence = 0;
  uint64_t first_lsn = 0;
  // The last lsn of the segment before this one (0 if none): a reader
  // continues into this segment only from exactly there.
  uint64_t prev_last_lsn = 0;
  uint64_t segment_bytes = 0;
  absl::Time created;
};

// <dir>/<16 hex digits>.wal
std::string WalSegmentPath(absl::string_view dir, uint64_t sequence);

void EncodeSegmentHeader(const WalSegmentHeader& h, uint8_t out[kWalSegmentHeaderBytes]);

// Record sizes and encoders: each writes exactly that many bytes to `out`.
inline constexpr size_t WalShardWriteBytes(size_t keys) {
  return kWalRecordHeaderBytes + 8 + 8 * keys + kWalRecordTrailerBytes;
}
// A create record of filter `name` of `shape` (longer for a growing one).
size_t WalCreateFilterBytes(absl::string_view name, const FilterShape& shape);
// The most a create record of `name` takes, whatever its shape: what to
// reserve before the shape is known.
size_t WalCreateFilterBytes(absl::string_view name);
inline constexpr size_t kWalDropFilterBytes = kWalRecordHeaderBytes + kWalRecordTrailerBytes;
// A transaction's begin and end records: headers only.
inline constexpr size_t kWalTxnRecordBytes = kWalRecordHeaderBytes + kWalRecordTrailerBytes;
void EncodeTxnBegin(uint64_t lsn, uint64_t synced_lsn, uint8_t* out);
void EncodeTxnEnd(uint64_t lsn, uint64_t synced_lsn, uint64_t begin_lsn, uint8_t* out);
void EncodeShardWrite(uint64_t lsn, uint64_t synced_lsn, uint64_t filter_id, const ShardWrite& w,
                      uint8_t* out);
void EncodeCreateFilter(uint64_t lsn, uint64_t synced_lsn, absl::string_view name,
                        const FilterShape& shape, uint8_t* out);
void EncodeDropFilter(uint64_t lsn, uint64_t synced_lsn, uint64_t filter_id, uint8_t* out);
// The expiry record: `expire_at` in [0, kWalMaxExpireAt].
inline constexpr size_t kWalSetExpiryBytes = kWalRecordHeaderBytes + 8 + kWalRecordTrailerBytes;
// The latest expiry a record holds: the year 9999 (Unix milliseconds), as
// far as the Timestamps of the gRPC API go.
inline constexpr int64_t kWalMaxExpireAt = int64_t{253402300799999};
void EncodeSetExpiry(uint64_t lsn, uint64_t synced_lsn, uint64_t filter_id, int64_t expire_at,
                     uint8_t* out);
// A rename record: filter `filter_id` becomes `new_name`, dropping
// `replaced_id` (0: none) that had it.
size_t WalRenameFilterBytes(absl::string_view new_name);
void EncodeRenameFilter(uint64_t lsn, uint64_t synced_lsn, uint64_t filter_id,
                        absl::string_view new_name, uint64_t replaced_id, bool replace,
                        uint8_t* out);
// Request records: the key at most kWalMaxRequestKeyBytes, at most
// kWalResultsPerRecord results.
size_t WalRequestStartBytes(absl::string_view key);
size_t WalRequestResultsBytes(absl::string_view key, size_t results);
void EncodeRequestStart(uint64_t lsn, uint64_t synced_lsn, uint64_t filter_id, const WalRequest& r,
                        uint8_t* out);
void EncodeRequestResults(uint64_t lsn, uint64_t synced_lsn, uint64_t filter_id,
                          const WalRequest& r, absl::Span<const uint8_t> results, uint8_t* out);

// The length and lsn fields of the (framed, checked) record at `record`: for
// the writer, which walks the records it framed without decoding them.
uint32_t WalRecordLength(const uint8_t* record);
uint64_t WalRecordLsn(const uint8_t* record);

// Decodes the record at the start of `data`. kRecord: *out and *length
// set. kEnd: the length field is zero (no record was written here). kBad:
// *why says what is wrong (too short, bad length, checksum, structure).
// kUnknown: the checksum matches, but the record holds a type, flags or
// filter settings this build does not know (a newer cuckood wrote it).
enum class WalParse { kRecord, kEnd, kBad, kUnknown };
WalParse ParseWalRecord(absl::Span<const uint8_t> data, WalRecord* out, size_t* length,
                        std::string* why);

// A segment as ScanWal found it.
struct WalSegmentInfo {
  std::string path;
  uint64_t sequence = 0;
  uint64_t first_lsn = 0;
  uint64_t last_lsn = 0;  // first_lsn - 1 when it holds no record.
  uint64_t end = 0;       // Offset after its last valid record.
  uint64_t file_bytes = 0;
};

// The record of a clean close (docs/WAL_FORMAT.md, "The clean-close file"):
// Wal::Close writes <dir>/CLOSED once everything appended is on disk, and
// Wal::Open removes it before anything is appended again. With it, a
// start reads only the written part of the last segment and leaves the
// prepared one unread.
inline constexpr absl::string_view kWalClosedName = "CLOSED";
inline constexpr size_t kWalClosedBytes = 64;
struct WalClosed {
  uint64_t segment_sequence = 0;   // The last segment; 0 if the log had none.
  uint64_t end = 0;                // Where its records end (a byte offset).
  uint64_t last_lsn = 0;           // Its last record's lsn (first_lsn - 1 if none).
  uint64_t prepared_sequence = 0;  // The prepared segment; 0 if none.
  uint64_t prepared_bytes = 0;     // Its size.
};
void EncodeWalClosed(const WalClosed& c, uint8_t out[kWalClosedBytes]);
// Whether `data` is a valid clean-close record of this format version.
bool ParseWalClosed(absl::Span<const uint8_t> data, WalClosed* c);

struct WalScan {
  // The segments that hold the log, in order; the last is where appending
  // resumes (at its `end`).
  std::vector<WalSegmentInfo> segments;
  // Files to delete: segments after the end of the log (never written, or
  // after a cut).
  std::vector<std::string> unused;
  // The last file when it is all zeros (a prepared segment never started,
  // empty path if none): Wal::Open reuses it if it has the configured size.
  WalSegmentInfo prepared;
  uint64_t last_lsn = 0;  // 0 for an empty log.
  uint64_t records = 0;
  uint64_t bytes = 0;
  // Set when the log ended in a torn write that was cut off: where, and why.
  std::string cut;
  // The clean-close file, if there was one (Wal::Open removes it).
  std::string closed_file;
  // Whether it matched the log, so that only the written part of the last
  // segment was read; else why it was not used ("" when there was none).
  bool closed_cleanly = false;
  std::string closed_ignored;
  // Bytes read from the log's files.
  uint64_t read_bytes = 0;
  // The lsn of the unfinished transaction's begin the log was cut at (0:
  // none), and how many valid records from there on were not applied.
  uint64_t cut_transaction = 0;
  uint64_t cut_records = 0;
};

// Reads the log in `dir` from its first segment, calling `apply` with
// every valid record in order; a non-OK status from `apply` stops the scan
// and is returned. The log ends at the first place where no valid record
// with the next LSN is (docs/WAL_FORMAT.md, "Where a log ends"). That is a
// torn write, cut off (WalScan::cut), unless a later valid record says the
// missing one had been made durable: then it is damage, and the result is
// DATA_LOSS naming the segment and offset, and what to do. Segment files
// with bad names or headers before the end are DATA_LOSS too. A segment or
// record this build cannot read although its checksum matches (written by a
// newer cuckood) is FAILED_PRECONDITION naming it. I/O errors are returned
// as is. After a clean close (a valid CLOSED file that matches the log),
// the last segment is read only up to its end plus kWalClosedCheckBytes,
// which must be zeros, and a prepared segment only its first
// kWalClosedCheckBytes; anything that does not match means a full read.
// Transactions (kTxnBegin ... kTxnEnd): a log whose end comes after a begin
// without its end is cut at the first begin of the run of overlapping
// transactions open at its end (WalScan::cut says so,
// WalScan::cut_transaction is its lsn), and no record from there on is
// applied. Records after a begin are held (up to kWalScanHeldBytes) until
// every transaction open then has ended; a log cut inside a transaction,
// or one whose held records passed the bound, is read a second time.
inline constexpr size_t kWalClosedCheckBytes = 4096;
// The most ScanWal holds of the records read inside transactions, waiting
// for their ends; past it, a second read of the log applies them.
inline constexpr uint64_t kWalScanHeldBytes = uint64_t{16} << 20;
absl::StatusOr<WalScan> ScanWal(Env* env, const std::string& dir,
                                const std::function<absl::Status(const WalRecord&)>& apply);

}  // namespace cuckoo::server

#endif  // CUCKOO_SERVER_WAL_WAL_FORMAT_H_
