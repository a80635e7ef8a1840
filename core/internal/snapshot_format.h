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
  size_t fields;     // The settings, kFieldsBytes bytes (below), the same in every version.
  size_t name;       // kMaxFilterNameBytes bytes.
  size_t filter_id;  // 0: the version has none.
  size_t growth;     // The growth settings and generation counts; 0: none.
  size_t log;        // kSnapshotLogIdentityBytes bytes: the log identity; 0: none.
  size_t reserved;   // Zeros from here to the checksum.
  size_t checksum;   // The header's last 8 bytes.
  size_t section_header_bytes;
  constexpr bool has_writer() const { return version >= 2; }  // At kSnapshotWriterOffset.
  constexpr bool has_positions() const { return version >= 2; }
  // Sections hold a generation count and one block per generation.
  constexpr bool has_generations() const { return version >= 3; }
};
inline constexpr HeaderLayout kVersion1 = {.version = 1,
                                           .header_bytes = 256,
                                           .fields = 16,
                                           .name = 88,
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
                                           .filter_id = 248,
                                           .growth = 256,
                                           .log = 416,
                                           .reserved = 464,
                                           .checksum = 472,
                                           .section_header_bytes = 24};
inline constexpr HeaderLayout kLayouts[] = {kVersion1, kVersion2, kVersion3, kVersion4};
// What WriteSnapshotFile writes.
inline constexpr const HeaderLayout& kWriteLayout = kVersion4;
inline constexpr size_t kMinHeaderBytes = kVersion1.header_bytes;
inline constexpr size_t kMaxHeaderBytes = kVersion4.header_bytes;
inline constexpr size_t kMaxSectionHeaderBytes = kVersion2.section_header_bytes;
static_assert(kWriteLayout.version == kSnapshotFormatVersion);
static_assert(kVersion1.name + kMaxFilterNameBytes == kVersion1.reserved);
static_assert(kVersion1.checksum == kVersion1.header_bytes - 8);
static_assert(kVersion2.fields == kSnapshotWriterOffset + kSnapshotWriterBytes);
static_assert(kVersion2.name + kMaxFilterNameBytes == kVersion2.filter_id);
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
