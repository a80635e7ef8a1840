// The snapshot format of docs/SNAPSHOT_FORMAT.md as this build reads and
// writes it: where each format version puts its header fields and how long
// its sections are, and the helpers the writer (core/snapshot_write.cc) and
// the reader (core/snapshot_read.cc) share. (tests/core/snapshot_layout.h
// restates the layout independently, for the tests.)
#ifndef CUCKOO_CORE_INTERNAL_SNAPSHOT_FORMAT_H_
#define CUCKOO_CORE_INTERNAL_SNAPSHOT_FORMAT_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "core/filter_options.h"
#include "core/hash.h"  // xxhash.h
#include "core/registry.h"
#include "core/shape_format.h"
#include "core/snapshot.h"

namespace cuckoo {

// An xxHash streaming state, freed when it goes out of scope.
struct XxhStateFree {
  void operator()(XXH3_state_t* s) const { XXH3_freeState(s); }
};
using XxhState = std::unique_ptr<XXH3_state_t, XxhStateFree>;
XxhState NewXxhState();
absl::Status NoMemoryForChecksums();

// Layout; docs/SNAPSHOT_FORMAT.md is the specification.
inline constexpr char kMagic[8] = {'\x89', 'C', 'U', 'C', 'K', 'O', 'O', '\n'};
inline constexpr char kFooterMagic[8] = {'\x89', 'C', 'K', 'F', 'E', 'N', 'D', '\n'};

// Where a format version puts the parts of its header, and how long its
// section headers are. Bytes 0..15 (magic, version, header size) are the
// same in every version.
struct HeaderLayout {
  uint32_t version;
  size_t header_bytes;
  size_t fields;      // Versions 1-4: the settings, kFieldsBytes bytes (below); 0 from 5 on.
  size_t name;        // name_bytes bytes: the name, then zeros.
  size_t name_bytes;  // kLegacyNameBytes before version 5, kSnapshotNameBytes from it on.
  // Version 5 on: the shape as EncodeShape writes it (kMaxEncodedShapeBytes,
  // the growth block zeros for a fixed filter), then the other settings at
  // the kV5* offsets below. 0 before version 5 (the shape is in `fields` and
  // `growth`, in kLegacyShapeLayout).
  size_t shape;
  size_t filter_id;  // 0: the version has none.
  size_t growth;     // The growth settings and generation counts; 0: none.
  size_t log;        // kSnapshotLogIdentityBytes bytes: the log identity; 0: none.
  // 8 bytes: the filter's expire_at (i64, Unix milliseconds; 0: none),
  // within the reserved bytes; 0: the version has none.
  size_t expire_at = 0;
  size_t reserved;  // Zeros from here to the checksum.
  size_t checksum;  // The header's last 8 bytes.
  size_t section_header_bytes;
  constexpr bool has_writer() const { return version >= 2; }  // At kSnapshotWriterOffset.
  constexpr bool has_positions() const { return version >= 2; }
  // Sections hold a generation count and one block per generation.
  constexpr bool has_generations() const { return version >= 3; }
  // Absolute offsets of the settings every version 3 on has, wherever the
  // version puts them.
  constexpr size_t name_length_at() const;
  constexpr size_t table_bytes_at() const;
  constexpr size_t taken_at() const;
  constexpr size_t schedule_generations_at() const;
  constexpr size_t schedule_checksum_at() const;
  constexpr size_t shards_with_generation_at() const;
};
// The longest name versions 1 to 4 hold.
inline constexpr size_t kLegacyNameBytes = 128;
// The longest name version 5 holds: kMaxFilterNameBytes (core/registry.h)
// may grow up to it without a format change.
inline constexpr size_t kSnapshotNameBytes = 512;
static_assert(kMaxFilterNameBytes <= kSnapshotNameBytes);
inline constexpr HeaderLayout kVersion1 = {.version = 1,
                                           .header_bytes = 256,
                                           .fields = 16,
                                           .name = 88,
                                           .name_bytes = kLegacyNameBytes,
                                           .shape = 0,
                                           .filter_id = 0,
                                           .growth = 0,
                                           .log = 0,
                                           .reserved = 216,
                                           .checksum = 248,
                                           .section_header_bytes = 32};
inline constexpr HeaderLayout kVersion2 = {.version = 2,
                                           .header_bytes = 320,
                                           .fields = 48,
                                           .name = 120,
                                           .name_bytes = kLegacyNameBytes,
                                           .shape = 0,
                                           .filter_id = 248,
                                           .growth = 0,
                                           .log = 0,
                                           .reserved = 256,
                                           .checksum = 312,
                                           .section_header_bytes = 40};
inline constexpr HeaderLayout kVersion3 = {.version = 3,
                                           .header_bytes = 480,
                                           .fields = 48,
                                           .name = 120,
                                           .name_bytes = kLegacyNameBytes,
                                           .shape = 0,
                                           .filter_id = 248,
                                           .growth = 256,
                                           .log = 0,
                                           .reserved = 416,
                                           .checksum = 472,
                                           .section_header_bytes = 24};
// Version 3 with the log identity in the first 48 of its reserved bytes.
inline constexpr HeaderLayout kVersion4 = {.version = 4,
                                           .header_bytes = 480,
                                           .fields = 48,
                                           .name = 120,
                                           .name_bytes = kLegacyNameBytes,
                                           .shape = 0,
                                           .filter_id = 248,
                                           .growth = 256,
                                           .log = 416,
                                           .reserved = 464,
                                           .checksum = 472,
                                           .section_header_bytes = 24};
// Version 5: names up to kSnapshotNameBytes, and the shape in the encoding
// of core/shape_format.h (EncodeShape), so that a field added to that
// encoding is carried without another format change:
//
//   48  shape (80 bytes: EncodeShape; its growth block zeros when fixed)
//   128 name_length u32      132 schedule_generations u32
//   136 table_bytes u64      144 taken_unix_micros u64
//   152 filter_id u64        160 schedule_checksum u64
//   168 shards_with_generation (kMaxGenerations u32s)
//   296 log identity (48)    344 name (512, zero-padded)
//   856 reserved zeros       1016 checksum
inline constexpr HeaderLayout kVersion5 = {.version = 5,
                                           .header_bytes = 1024,
                                           .fields = 0,
                                           .name = 344,
                                           .name_bytes = kSnapshotNameBytes,
                                           .shape = 48,
                                           .filter_id = 152,
                                           .growth = 0,
                                           .log = 296,
                                           .reserved = 856,
                                           .checksum = 1016,
                                           .section_header_bytes = 24};
// Version 6: version 5 and the filter's expiry.
//
//   856 expire_at i64 (Unix milliseconds, > 0)
//   864 reserved zeros       1016 checksum
//
// The writer writes it only for a filter that has an expiry, and version 5
// for one that has none: a build before filter expiry refuses the file of
// a filter that would expire (a newer version: it must not serve that
// filter past its expiry, nor quarantine it), and loads the others.
inline constexpr HeaderLayout kVersion6 = [] {
  HeaderLayout v6 = kVersion5;
  v6.version = 6;
  v6.expire_at = kVersion5.reserved;
  return v6;
}();
// The version a file of a filter that has no expiry is written as (the
// layout is kVersion6's, its expire_at bytes zeros, as version 5's).
inline constexpr uint32_t kNoExpiryWriteVersion = 5;
inline constexpr size_t kV5NameLength = 128;
inline constexpr size_t kV5ScheduleGenerations = 132;
inline constexpr size_t kV5TableBytes = 136;
inline constexpr size_t kV5Taken = 144;
inline constexpr size_t kV5ScheduleChecksum = 160;
inline constexpr size_t kV5ShardsWithGeneration = 168;
static_assert(kVersion5.shape + kMaxEncodedShapeBytes == kV5NameLength);
static_assert(kV5Taken + 8 == kVersion5.filter_id);
static_assert(kVersion5.filter_id + 8 == kV5ScheduleChecksum);
static_assert(kV5ShardsWithGeneration + 4 * kMaxGenerations == kVersion5.log);
static_assert(kVersion5.log + kSnapshotLogIdentityBytes == kVersion5.name);
static_assert(kVersion5.name + kSnapshotNameBytes == kVersion5.reserved);
static_assert(kVersion5.checksum == kVersion5.header_bytes - 8);
inline constexpr HeaderLayout kLayouts[] = {kVersion1, kVersion2, kVersion3,
                                            kVersion4, kVersion5, kVersion6};
// What WriteSnapshotFile writes (as kNoExpiryWriteVersion for a filter
// without an expiry).
inline constexpr const HeaderLayout& kWriteLayout = kVersion6;
inline constexpr size_t kMinHeaderBytes = kVersion1.header_bytes;
inline constexpr size_t kMaxHeaderBytes = kVersion6.header_bytes;
inline constexpr size_t kMaxSectionHeaderBytes = kVersion2.section_header_bytes;
static_assert(kWriteLayout.version == kSnapshotFormatVersion);
static_assert(kVersion1.name + kLegacyNameBytes == kVersion1.reserved);
static_assert(kVersion1.checksum == kVersion1.header_bytes - 8);
static_assert(kVersion2.fields == kSnapshotWriterOffset + kSnapshotWriterBytes);
static_assert(kVersion2.name + kLegacyNameBytes == kVersion2.filter_id);
static_assert(kVersion2.filter_id + 8 == kVersion2.reserved);
static_assert(kVersion2.checksum == kVersion2.header_bytes - 8);
static_assert(kVersion3.filter_id + 8 == kVersion3.growth);
static_assert(kVersion3.checksum == kVersion3.header_bytes - 8);

// The settings, at these offsets from HeaderLayout::fields: the shape in
// core/shape_format.h's older order (kLegacyShapeLayout), whose spare u32
// holds the name's length, then two more.
inline constexpr size_t kNameLength = kLegacyShapeLayout.spare;
inline constexpr size_t kTableBytes = kShapeBytes;
inline constexpr size_t kTakenUnixMicros = 64;
inline constexpr size_t kFieldsBytes = 72;
static_assert(kVersion1.fields + kFieldsBytes == kVersion1.name);
static_assert(kVersion2.fields + kFieldsBytes == kVersion2.name);
static_assert(kVersion3.fields + kFieldsBytes == kVersion3.name);

// Version 3's growth settings, at these offsets from HeaderLayout::growth:
// the shape's growth block (core/shape_format.h), whose spare u32 holds the
// length of the writer's generation schedule, a checksum of the schedule's
// tables' sizes and, per generation g, the number of shards that have it.
inline constexpr size_t kScheduleGenerations = 4;
inline constexpr size_t kScheduleChecksum = kShapeGrowthBytes;
inline constexpr size_t kShardsWithGeneration = 32;  // kMaxGenerations u32s.
inline constexpr size_t kGrowthBytes = kShardsWithGeneration + 4 * kMaxGenerations;
static_assert(kVersion3.growth + kGrowthBytes == kVersion3.reserved);
static_assert(kVersion4.growth + kGrowthBytes == kVersion4.log);
static_assert(kVersion4.log + kSnapshotLogIdentityBytes == kVersion4.reserved);
static_assert(kVersion4.checksum == kVersion4.header_bytes - 8);

constexpr size_t HeaderLayout::name_length_at() const {
  return shape != 0 ? kV5NameLength : fields + kNameLength;
}
constexpr size_t HeaderLayout::table_bytes_at() const {
  return shape != 0 ? kV5TableBytes : fields + kTableBytes;
}
constexpr size_t HeaderLayout::taken_at() const {
  return shape != 0 ? kV5Taken : fields + kTakenUnixMicros;
}
constexpr size_t HeaderLayout::schedule_generations_at() const {
  return shape != 0 ? kV5ScheduleGenerations : growth + kScheduleGenerations;
}
constexpr size_t HeaderLayout::schedule_checksum_at() const {
  return shape != 0 ? kV5ScheduleChecksum : growth + kScheduleChecksum;
}
constexpr size_t HeaderLayout::shards_with_generation_at() const {
  return shape != 0 ? kV5ShardsWithGeneration : growth + kShardsWithGeneration;
}

// Version 3's section header: shard_index u32, generations u32, items u64
// (all generations'), log_position u64; then per generation a block header
// (generation u32, fingerprint_bits u32, buckets u64, items u64, rng_state
// u64, table_bytes u64) and the table.
inline constexpr size_t kV3Generations = 4;
inline constexpr size_t kV3Items = 8;
inline constexpr size_t kV3Position = 16;
inline constexpr size_t kGenerationHeaderBytes = 40;
inline constexpr size_t kGenIndex = 0;
inline constexpr size_t kGenFingerprintBits = 4;
inline constexpr size_t kGenBuckets = 8;
inline constexpr size_t kGenItems = 16;
inline constexpr size_t kGenRng = 24;
inline constexpr size_t kGenTableBytes = 32;
// The write buffer is at least this long (a block header fits).
inline constexpr size_t kMinBufferBytes = 64;

// A section header: shard_index u32, reserved u32, items, rng_state,
// table_bytes, and from version 2 on log_position (u64 each).
inline constexpr size_t kSectionPosition = 32;
inline constexpr size_t kSectionTrailerBytes = 8;
inline constexpr size_t kFooterBytes = 32;

// The layout of format version `version`, or null for a version this build
// does not know.
const HeaderLayout* LayoutOf(uint32_t version);

// An I/O error of `op` on `path`, errno `err`: RESOURCE_EXHAUSTED for a full
// disk, NOT_FOUND, PERMISSION_DENIED, else INTERNAL.
absl::Status IoError(absl::string_view op, absl::string_view path, int err);

// Generation `g`'s table shape (a fixed filter's shape).
FilterShape TableShape(const FilterShape& s, const GenerationShape& g);

// A checksum of the tables' sizes of `schedule`: two builds whose schedules
// agree on it grow a shard's tables the same way.
uint64_t ScheduleChecksum(const std::vector<GenerationShape>& schedule);

// `op` on `path` failed as `s` says: the env's errno as this file's
// messages and codes say it (IoError), or `s` itself when it has none.
absl::Status EnvError(absl::string_view op, absl::string_view path, absl::Status s);

// "cuckood 0.1.0": what this build writes as a file's writer.
std::string ThisBuild();

}  // namespace cuckoo

#endif  // CUCKOO_CORE_INTERNAL_SNAPSHOT_FORMAT_H_
