// A filter's shape (FilterShape) as bytes: the one encoding that every
// format recording a shape writes (the cluster log's create entry, the
// write-ahead log's create record; docs/CLUSTER.md, docs/WAL_FORMAT.md), and
// the older field order that write-ahead logs and snapshots hold, so that
// what older builds wrote still loads.
//
//   uint8_t buf[kMaxEncodedShapeBytes];
//   EncodeShape(shape, buf);  // EncodedShapeBytes(shape) bytes.
//   absl::StatusOr<FilterShape> s =
//       DecodeShape(absl::MakeConstSpan(buf, EncodedShapeBytes(shape)), shape.growing());
//
// The encoding (little-endian; the cluster log's since its first version):
//
//   0  hash_id u32        4  fingerprint_bits u32   8  bucket_size u32
//   12 shards u32         16 shard_bits u32         20 max_kicks u32
//   24 table_kind u32     28 reserved u32 (0)
//   32 seed u64           40 capacity u64           48 buckets_per_shard u64
//
// and for a growing filter (the container's flag says so) a growth block:
//
//   56 growth_factor u32 (not 0)   60 growth flags u32
//   64 max_capacity u64            72 false_positive_rate u64 (IEEE-754 bits)
//
// Growth flags: bit 0 grow_on_repeats (kGrowthFlagGrowOnRepeats); the other
// bits are 0. Builds from before the flags read the u32 as reserved and
// refuse a shape with a flag set ("reserved growth bytes 60..63 are not
// zero"); this build refuses bits it does not know, naming them.
//
// Thread safety: functions only.
#ifndef CUCKOO_CORE_SHAPE_FORMAT_H_
#define CUCKOO_CORE_SHAPE_FORMAT_H_

#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "core/filter_options.h"

namespace cuckoo {

inline constexpr size_t kShapeBytes = 56;
inline constexpr size_t kShapeGrowthBytes = 24;
inline constexpr size_t kMaxEncodedShapeBytes = kShapeBytes + kShapeGrowthBytes;

// The growth block's flags (byte 60 of the encoding).
inline constexpr uint32_t kGrowthFlagGrowOnRepeats = 1;
inline constexpr uint32_t kKnownGrowthFlags = kGrowthFlagGrowOnRepeats;
// The growth flags of `s` (0 for a fixed filter's shape).
uint32_t GrowthFlags(const FilterShape& s);

// Where a layout puts the u32 fields of the 56-byte block (byte offsets);
// seed, capacity and buckets_per_shard are at 32, 40 and 48 in every
// layout, and the growth block is the same in every layout. `spare` is the
// u32 no field takes, and growth block byte 4 another.
struct ShapeLayout {
  uint8_t hash_id;
  uint8_t fingerprint_bits;
  uint8_t bucket_size;
  uint8_t shards;
  uint8_t shard_bits;
  uint8_t max_kicks;
  uint8_t table_kind;
  uint8_t spare;
};
// The encoding above; its spare u32s are reserved (zero).
inline constexpr ShapeLayout kShapeLayout = {.hash_id = 0,
                                             .fingerprint_bits = 4,
                                             .bucket_size = 8,
                                             .shards = 12,
                                             .shard_bits = 16,
                                             .max_kicks = 20,
                                             .table_kind = 24,
                                             .spare = 28};
// The older order: write-ahead log create records of type 1 (spares zero)
// and snapshot headers of format versions 1 to 3 (the spare holds the name's
// length, growth byte 4 the growth schedule's length).
inline constexpr ShapeLayout kLegacyShapeLayout = {.hash_id = 0,
                                                   .fingerprint_bits = 8,
                                                   .bucket_size = 12,
                                                   .shards = 16,
                                                   .shard_bits = 20,
                                                   .max_kicks = 24,
                                                   .table_kind = 4,
                                                   .spare = 28};

// kShapeBytes, plus kShapeGrowthBytes for a growing filter.
inline size_t EncodedShapeBytes(const FilterShape& s) {
  return kShapeBytes + (s.growing() ? kShapeGrowthBytes : 0);
}

// Writes EncodedShapeBytes(s) bytes to `out`: the block, and the growth
// block if s.growing().
void EncodeShape(const FilterShape& s, uint8_t* out);

// Decodes `bytes`, exactly kShapeBytes, or with `growth` (the container's
// flag) kShapeBytes + kShapeGrowthBytes, and checks it; the message names
// the field. DATA_LOSS for bytes no writer writes (a wrong length, reserved
// bytes not zero, a growth block without a factor); FAILED_PRECONDITION for
// a table kind or growth flags this build does not know (a newer build wrote
// them); and
// INVALID_ARGUMENT for settings this build cannot use (CheckShape).
absl::StatusOr<FilterShape> DecodeShape(absl::Span<const uint8_t> bytes, bool growth);

// What DecodeShape checks once the fields are read, for shapes read with
// ReadShapeFields: FAILED_PRECONDITION for an unknown table kind, then
// ValidateShape (INVALID_ARGUMENT).
absl::Status CheckShape(const FilterShape& s);

// The fields as `layout` puts them in `block` (kShapeBytes) and, unless
// `growth` is null, in the growth block (kShapeGrowthBytes), unchecked; the
// spare u32s (and the growth flags) are the caller's to check or read. For
// older layouts.
FilterShape ReadShapeFields(const ShapeLayout& layout, const uint8_t* block, const uint8_t* growth);
// The same the other way: writes every field (not the spares) of `s`,
// the growth fields only if `growth` is not null.
void WriteShapeFields(const ShapeLayout& layout, const FilterShape& s, uint8_t* block,
                      uint8_t* growth);

}  // namespace cuckoo

#endif  // CUCKOO_CORE_SHAPE_FORMAT_H_
