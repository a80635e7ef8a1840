// LogEntry: one state change as cuckood's cluster log holds it, the payload
// of one message in the JetStream stream (server/cluster/cluster.h). The
// stream sequence of the message is the entry's log position; every
// replica applies the entries in that order (ApplyEntry in cluster.cc).
//
//   std::string bytes = EncodeInsertEntry(filter_id, if_absent, hashes);
//   absl::StatusOr<LogEntry> e = DecodeLogEntry(bytes);
//
// Writes carry the keys' XXH3-64 hashes (8 bytes a key, whatever the key's
// length), so a 100,000-key batch of 4 KiB keys is an 800 KB entry, not
// 400 MB. The format (little-endian, docs/CLUSTER.md "Log entries"):
//
//   0   u32 magic "CKLE"      4  u8 version (1)   5  u8 type   6  u8 flags
//                                                 (insert bit 0: if_absent;
//                                                 create bit 1: growth)
//   7   u8  0                 8  u64 filter id (the log position of the
//                                filter's creation; 0 in a create)
//   16  u32 hashes            20 u32 name bytes (1 to 512)
//   24  the filter's name, zero-padded to a multiple of 8 bytes; then for a
//       create the shape as core/shape_format.h encodes it (hash_id,
//       fingerprint_bits, bucket_size, shards, shard_bits, max_kicks,
//       table_kind, a u32 0, seed, capacity, buckets_per_shard), with the
//       growth flag followed by its growth block (growth_factor, a u32 0,
//       max_capacity, false_positive_rate); for an insert or delete the
//       hashes (u64 each); for a rename (flag bit 0: it may replace) the
//       replaced filter's id (u64, 0: none), the new name's bytes (u32,
//       1 to 512), a u32 0 and the new name, zero-padded to 8 bytes
//   end u64 XXH3-64 of every byte before it
//
// Writes name their filter by id and name: an entry for a filter that was
// dropped (and perhaps created again under the name) applies to nothing.
//
// Decoding checks everything (length, magic, checksum, counts, the shape)
// before anything is applied: the stream is shared with every client of
// the NATS server, so a message there may be damaged or hostile.
//
// Thread safety: functions only.
#ifndef CUCKOO_SERVER_CLUSTER_LOG_ENTRY_H_
#define CUCKOO_SERVER_CLUSTER_LOG_ENTRY_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "core/filter_options.h"
#include "core/shape_format.h"

namespace cuckoo::server {

inline constexpr uint8_t kLogEntryVersion = 1;
inline constexpr size_t kLogEntryHeaderBytes = 24;
inline constexpr size_t kLogEntryTrailerBytes = 8;
// A create's shape, as core/shape_format.h encodes it; a growing filter's
// create has the growth block after it (docs/CLUSTER.md).
inline constexpr size_t kLogEntryShapeBytes = kShapeBytes;
inline constexpr size_t kLogEntryGrowthBytes = kShapeGrowthBytes;

// 7: reserved for filter expiry (the drop when an expiry passes is a
// kDropFilter, as any drop).
enum class LogEntryType : uint8_t {
  kCreateFilter = 1,
  kDropFilter = 2,
  kInsert = 3,
  kDelete = 4,
  // Filter `filter_id`, named `name`, takes `new_name`, dropping the filter
  // there, which must be `replaced_id` (0: none).
  kRenameFilter = 5,
  // A filter's expiry set or cleared (its body one i64, Unix milliseconds,
  // 0 clears; docs/CLUSTER.md).
  kSetExpiry = 6,
};
// "create", "drop", "insert", "delete", "rename", "expire".
absl::string_view LogEntryTypeName(LogEntryType type);

struct LogEntry {
  LogEntryType type = LogEntryType::kInsert;
  uint64_t filter_id = 0;  // Insert, delete, drop.
  bool if_absent = false;  // Insert.
  std::string name;
  FilterShape shape;      // Create.
  int64_t expire_at = 0;  // SetExpiry: Unix milliseconds, 0 when cleared.
  // Rename: the new name, the id of the filter it replaces (0: none), and
  // whether it could replace one (RENAME; false: RENAMENX).
  std::string new_name;
  uint64_t replaced_id = 0;
  bool replace = false;
  // Insert, delete: the hashes, in request order (a view into the decoded
  // bytes when they are 8-byte aligned, else into `owned`).
  absl::Span<const uint64_t> hashes;
  std::vector<uint64_t> owned;
};

// The longest name an entry holds (core/registry.h's kMaxFilterNameBytes;
// log_entry.cc checks they agree).
inline constexpr size_t kLogEntryMaxNameBytes = 512;
// The bytes an insert or delete entry of `keys` hashes takes (at most:
// with a name of the longest length).
constexpr size_t LogEntryBytesForHashes(size_t keys) {
  return kLogEntryHeaderBytes + kLogEntryMaxNameBytes + 8 * keys + kLogEntryTrailerBytes;
}
// The most hashes an entry of at most `max_bytes` can carry.
constexpr size_t MaxHashesPerLogEntry(size_t max_bytes) {
  return max_bytes <= LogEntryBytesForHashes(0) ? 0 : (max_bytes - LogEntryBytesForHashes(0)) / 8;
}

std::string EncodeInsertEntry(uint64_t filter_id, absl::string_view name, bool if_absent,
                              absl::Span<const uint64_t> hashes);
std::string EncodeDeleteEntry(uint64_t filter_id, absl::string_view name,
                              absl::Span<const uint64_t> hashes);
std::string EncodeCreateEntry(absl::string_view name, const FilterShape& shape);
std::string EncodeDropEntry(uint64_t filter_id, absl::string_view name);
// The most an expiry entry holds: the year 9999 (Unix milliseconds), as
// the write-ahead log's (kWalMaxExpireAt).
inline constexpr int64_t kLogEntryMaxExpireAt = int64_t{253402300799999};
// `expire_at` in [0, kLogEntryMaxExpireAt].
std::string EncodeSetExpiryEntry(uint64_t filter_id, absl::string_view name, int64_t expire_at);
std::string EncodeRenameEntry(uint64_t filter_id, absl::string_view name,
                              absl::string_view new_name, uint64_t replaced_id, bool replace);

// The entry's `hashes` may point into `bytes`: keep them alive while it is
// used. DATA_LOSS naming what is wrong for a damaged or foreign entry;
// FAILED_PRECONDITION for an intact entry of a newer version or type (a
// newer cuckood wrote it: upgrade this replica).
absl::StatusOr<LogEntry> DecodeLogEntry(absl::string_view bytes);

}  // namespace cuckoo::server

#endif  // CUCKOO_SERVER_CLUSTER_LOG_ENTRY_H_
