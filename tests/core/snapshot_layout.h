// The snapshot layout of docs/SNAPSHOT_FORMAT.md, restated independently of
// core/internal/snapshot_format.h, for tests and the fuzzer that build deliberately odd
// files: where each format version puts its header fields and how long its
// sections are; ResealSnapshot, which recomputes every checksum as a writer
// of such a file would; and SnapshotToVersion1, which turns a file this
// build wrote into the version-1 file an older build would have written
// (SnapshotToVersion2, SnapshotToVersion3 and SnapshotToVersion4 the same
// for versions 2, 3 and 4).
#ifndef CUCKOO_TESTS_CORE_SNAPSHOT_LAYOUT_H_
#define CUCKOO_TESTS_CORE_SNAPSHOT_LAYOUT_H_

#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <vector>

#include "core/hash.h"  // xxhash.h

namespace cuckoo::testing {

inline uint32_t SnapshotGet32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}
inline uint64_t SnapshotGet64(const uint8_t* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  return v;
}
inline void SnapshotPut32(uint8_t* p, uint32_t v) { std::memcpy(p, &v, 4); }
inline void SnapshotPut64(uint8_t* p, uint64_t v) { std::memcpy(p, &v, 8); }

// The same in every version.
inline constexpr size_t kSnapshotSectionTrailer = 8;
inline constexpr size_t kSnapshotFooter = 32;

// One format version's layout. Bytes 0..15 (magic, version, header size)
// are the same in every version.
struct SnapshotLayout {
  uint32_t version;
  size_t header;            // Header bytes.
  size_t fields;            // Offset of the settings (hash_id ... taken_unix_micros), below.
  size_t name;              // Offset of the 128-byte name.
  size_t filter_id;         // Offset of the filter id; 0: none.
  size_t reserved;          // Zeros from here to the header checksum.
  size_t header_checksum;   // The header's last 8 bytes.
  size_t section_header;    // Bytes of a section's header.
  size_t section_position;  // Offset of log_position in a section header; 0: none.
  // Version 3: the growth settings' offset in the header, and the bytes of
  // a generation's block header (after the section header, before each
  // table). 0: none.
  size_t growth = 0;
  size_t generation_header = 0;
  // Version 4: the offset of the log identity (48 bytes); 0: none.
  size_t log = 0;
  // Version 5: the offset of the shape in core/shape_format.h's encoding
  // (80 bytes), and the length of the name field; 0: none, 128.
  size_t shape = 0;
  size_t name_bytes = 128;
  // Version 6: the filter's expire_at (i64 Unix ms), in what version 5
  // reserves; 0: none.
  size_t expire_at = 0;

  // The offset of the setting at `field` (kSnapshotHashId, ...: the offsets
  // of versions 1 to 4's settings block), wherever this version puts it.
  constexpr size_t at(size_t field) const;
  // The offset of the growth setting at `field` (kSnapshotGrowthFactor, ...:
  // the offsets of versions 3 and 4's growth block).
  constexpr size_t growth_at(size_t field) const;
  // The offset of the first table in a section: a fixed filter's only one.
  constexpr size_t table() const { return section_header + generation_header; }
  // The length of a file of this version of a fixed filter.
  constexpr uint64_t FileBytes(uint32_t shards, uint64_t table_bytes) const {
    return header + shards * (table() + table_bytes + kSnapshotSectionTrailer) + kSnapshotFooter;
  }
};

inline constexpr SnapshotLayout kSnapshotV1 = {.version = 1,
                                               .header = 256,
                                               .fields = 16,
                                               .name = 88,
                                               .filter_id = 0,
                                               .reserved = 216,
                                               .header_checksum = 248,
                                               .section_header = 32,
                                               .section_position = 0};
inline constexpr SnapshotLayout kSnapshotV2 = {.version = 2,
                                               .header = 320,
                                               .fields = 48,
                                               .name = 120,
                                               .filter_id = 248,
                                               .reserved = 256,
                                               .header_checksum = 312,
                                               .section_header = 40,
                                               .section_position = 32};
inline constexpr SnapshotLayout kSnapshotV3 = {.version = 3,
                                               .header = 480,
                                               .fields = 48,
                                               .name = 120,
                                               .filter_id = 248,
                                               .reserved = 416,
                                               .header_checksum = 472,
                                               .section_header = 24,
                                               .section_position = 16,
                                               .growth = 256,
                                               .generation_header = 40};
inline constexpr SnapshotLayout kSnapshotV4 = {.version = 4,
                                               .header = 480,
                                               .fields = 48,
                                               .name = 120,
                                               .filter_id = 248,
                                               .reserved = 464,
                                               .header_checksum = 472,
                                               .section_header = 24,
                                               .section_position = 16,
                                               .growth = 256,
                                               .generation_header = 40,
                                               .log = 416};
inline constexpr SnapshotLayout kSnapshotV5 = {.version = 5,
                                               .header = 1024,
                                               .fields = 0,
                                               .name = 344,
                                               .filter_id = 152,
                                               .reserved = 856,
                                               .header_checksum = 1016,
                                               .section_header = 24,
                                               .section_position = 16,
                                               .growth = 0,
                                               .generation_header = 40,
                                               .log = 296,
                                               .shape = 48,
                                               .name_bytes = 512};
// Version 5 and the filter's expiry at 856 (written only for a filter that
// has one).
inline constexpr SnapshotLayout kSnapshotV6 = [] {
  SnapshotLayout v6 = kSnapshotV5;
  v6.version = 6;
  v6.expire_at = kSnapshotV5.reserved;
  v6.reserved = kSnapshotV5.reserved + 8;
  return v6;
}();
inline constexpr size_t kSnapshotLogBytes = 48;
// The version this build writes for a filter without an expiry (with one:
// kSnapshotV6).
inline constexpr const SnapshotLayout& kSnapshotWritten = kSnapshotV5;

// The settings, as offsets from SnapshotLayout::fields (SnapshotLayout::at).
inline constexpr size_t kSnapshotHashId = 0;
inline constexpr size_t kSnapshotTableKind = 4;
inline constexpr size_t kSnapshotFingerprintBits = 8;
inline constexpr size_t kSnapshotBucketSize = 12;
inline constexpr size_t kSnapshotShards = 16;
inline constexpr size_t kSnapshotShardBits = 20;
inline constexpr size_t kSnapshotMaxKicks = 24;
inline constexpr size_t kSnapshotNameLength = 28;
inline constexpr size_t kSnapshotSeed = 32;
inline constexpr size_t kSnapshotCapacity = 40;
inline constexpr size_t kSnapshotBucketsPerShard = 48;
inline constexpr size_t kSnapshotTableBytes = 56;
inline constexpr size_t kSnapshotTaken = 64;
inline constexpr size_t kSnapshotFieldsBytes = 72;

// Section header fields: shard_index, reserved, items, rng_state,
// table_bytes, and (version 2) log_position.
inline constexpr size_t kSnapshotSectionItems = 8;
inline constexpr size_t kSnapshotSectionRng = 16;
inline constexpr size_t kSnapshotSectionTableBytes = 24;

// Version 3. The growth settings, as offsets from SnapshotLayout::growth.
inline constexpr size_t kSnapshotGrowthFactor = 0;
inline constexpr size_t kSnapshotScheduleGenerations = 4;
inline constexpr size_t kSnapshotMaxCapacity = 8;
inline constexpr size_t kSnapshotFalsePositiveRate = 16;
inline constexpr size_t kSnapshotScheduleChecksum = 24;
inline constexpr size_t kSnapshotShardsWithGeneration = 32;  // 32 u32s.
// A section's header: shard_index, generations, items, log_position.
inline constexpr size_t kSnapshotV3Generations = 4;
inline constexpr size_t kSnapshotV3Items = 8;
// A generation's block header, at SnapshotLayout::section_header and after
// each table: generation, fingerprint_bits, buckets, items, rng_state,
// table_bytes.
inline constexpr size_t kSnapshotGenIndex = 0;
inline constexpr size_t kSnapshotGenFingerprintBits = 4;
inline constexpr size_t kSnapshotGenBuckets = 8;
inline constexpr size_t kSnapshotGenItems = 16;
inline constexpr size_t kSnapshotGenRng = 24;
inline constexpr size_t kSnapshotGenTableBytes = 32;

// Version 5's shape block (the encoding of core/shape_format.h).
inline constexpr size_t kShapeHashId = 0;
inline constexpr size_t kShapeFingerprintBits = 4;
inline constexpr size_t kShapeBucketSize = 8;
inline constexpr size_t kShapeShards = 12;
inline constexpr size_t kShapeShardBits = 16;
inline constexpr size_t kShapeMaxKicks = 20;
inline constexpr size_t kShapeTableKind = 24;
inline constexpr size_t kShapeSeed = 32;
inline constexpr size_t kShapeCapacity = 40;
inline constexpr size_t kShapeBucketsPerShard = 48;
inline constexpr size_t kShapeGrowthFactor = 56;
inline constexpr size_t kShapeMaxCapacity = 64;
inline constexpr size_t kShapeFalsePositiveRate = 72;
inline constexpr size_t kShapeBytes = 80;
// Version 5's other settings (absolute offsets).
inline constexpr size_t kSnapshotV5NameLength = 128;
inline constexpr size_t kSnapshotV5ScheduleGenerations = 132;
inline constexpr size_t kSnapshotV5TableBytes = 136;
inline constexpr size_t kSnapshotV5Taken = 144;
inline constexpr size_t kSnapshotV5ScheduleChecksum = 160;
inline constexpr size_t kSnapshotV5ShardsWithGeneration = 168;

constexpr size_t SnapshotLayout::at(size_t field) const {
  if (shape == 0) return fields + field;
  switch (field) {
    case kSnapshotHashId:
      return shape + kShapeHashId;
    case kSnapshotTableKind:
      return shape + kShapeTableKind;
    case kSnapshotFingerprintBits:
      return shape + kShapeFingerprintBits;
    case kSnapshotBucketSize:
      return shape + kShapeBucketSize;
    case kSnapshotShards:
      return shape + kShapeShards;
    case kSnapshotShardBits:
      return shape + kShapeShardBits;
    case kSnapshotMaxKicks:
      return shape + kShapeMaxKicks;
    case kSnapshotNameLength:
      return kSnapshotV5NameLength;
    case kSnapshotSeed:
      return shape + kShapeSeed;
    case kSnapshotCapacity:
      return shape + kShapeCapacity;
    case kSnapshotBucketsPerShard:
      return shape + kShapeBucketsPerShard;
    case kSnapshotTableBytes:
      return kSnapshotV5TableBytes;
    default:
      return kSnapshotV5Taken;  // kSnapshotTaken
  }
}

constexpr size_t SnapshotLayout::growth_at(size_t field) const {
  if (shape == 0) return growth + field;
  switch (field) {
    case kSnapshotGrowthFactor:
      return shape + kShapeGrowthFactor;
    case kSnapshotScheduleGenerations:
      return kSnapshotV5ScheduleGenerations;
    case kSnapshotMaxCapacity:
      return shape + kShapeMaxCapacity;
    case kSnapshotFalsePositiveRate:
      return shape + kShapeFalsePositiveRate;
    case kSnapshotScheduleChecksum:
      return kSnapshotV5ScheduleChecksum;
    default:
      return kSnapshotV5ShardsWithGeneration;  // kSnapshotShardsWithGeneration
  }
}

// The layout of `b`'s format version (bytes 8..11), or null for a version
// this build does not know or a file too short to say.
inline const SnapshotLayout* SnapshotLayoutOf(const std::vector<uint8_t>& b) {
  if (b.size() < 12) return nullptr;
  switch (SnapshotGet32(b.data() + 8)) {
    case 1:
      return &kSnapshotV1;
    case 2:
      return &kSnapshotV2;
    case 3:
      return &kSnapshotV3;
    case 4:
      return &kSnapshotV4;
    case 5:
      return &kSnapshotV5;
    case 6:
      return &kSnapshotV6;
    default:
      return nullptr;
  }
}

// Recomputes the header, section and whole-file checksums of `b` laid out
// as `layout`, for as many sections as its header announces and the file
// holds; the footer's only if every section and the footer are there.
inline void ResealSnapshot(std::vector<uint8_t>& b, const SnapshotLayout& layout) {
  if (b.size() < layout.header) return;
  SnapshotPut64(b.data() + layout.header_checksum, XXH3_64bits(b.data(), layout.header_checksum));
  if (layout.generation_header != 0) {
    // Version 3: each section's length is in its generations' block headers.
    const uint32_t shards = SnapshotGet32(b.data() + layout.at(kSnapshotShards));
    std::vector<uint8_t> chain(b.begin() + layout.header_checksum, b.begin() + layout.header);
    uint64_t offset = layout.header;
    for (uint32_t i = 0; i < shards; ++i) {
      if (b.size() - offset < layout.section_header) return;
      const uint32_t generations = SnapshotGet32(b.data() + offset + kSnapshotV3Generations);
      uint64_t at = offset + layout.section_header;
      for (uint32_t g = 0; g < generations; ++g) {
        if (b.size() - at < layout.generation_header) return;
        const uint64_t table = SnapshotGet64(b.data() + at + kSnapshotGenTableBytes);
        if (table > b.size() - at - layout.generation_header) return;
        at += layout.generation_header + table;
      }
      if (b.size() - at < kSnapshotSectionTrailer) return;
      SnapshotPut64(b.data() + at, XXH3_64bits(b.data() + offset, at - offset));
      chain.insert(chain.end(), b.begin() + at, b.begin() + at + kSnapshotSectionTrailer);
      offset = at + kSnapshotSectionTrailer;
    }
    if (b.size() - offset < kSnapshotFooter) return;
    chain.insert(chain.end(), b.begin() + offset, b.begin() + offset + kSnapshotFooter - 8);
    SnapshotPut64(b.data() + offset + kSnapshotFooter - 8, XXH3_64bits(chain.data(), chain.size()));
    return;
  }
  const uint32_t shards = SnapshotGet32(b.data() + layout.at(kSnapshotShards));
  const uint64_t table_bytes = SnapshotGet64(b.data() + layout.at(kSnapshotTableBytes));
  if (table_bytes > b.size()) return;
  const uint64_t section = layout.section_header + table_bytes + kSnapshotSectionTrailer;
  std::vector<uint8_t> chain(b.begin() + layout.header_checksum, b.begin() + layout.header);
  uint64_t offset = layout.header;
  for (uint32_t i = 0; i < shards; ++i) {
    if (b.size() - offset < section) return;
    uint8_t* trailer = b.data() + offset + layout.section_header + table_bytes;
    SnapshotPut64(trailer, XXH3_64bits(b.data() + offset, layout.section_header + table_bytes));
    chain.insert(chain.end(), trailer, trailer + kSnapshotSectionTrailer);
    offset += section;
  }
  if (b.size() - offset < kSnapshotFooter) return;
  chain.insert(chain.end(), b.begin() + offset, b.begin() + offset + kSnapshotFooter - 8);
  SnapshotPut64(b.data() + offset + kSnapshotFooter - 8, XXH3_64bits(chain.data(), chain.size()));
}

// The same, laid out as its format version says; as the version this build
// writes if the version is unknown.
inline void ResealSnapshot(std::vector<uint8_t>& b) {
  const SnapshotLayout* layout = SnapshotLayoutOf(b);
  ResealSnapshot(b, layout != nullptr ? *layout : kSnapshotWritten);
}

// The version-6 file holding what the version-5 file `v5` holds (its
// expire_at zeros, which the writer never writes but a reader takes as
// none): the corruption tests' version 6. Empty if `v5` is not a version-5
// file.
inline std::vector<uint8_t> SnapshotToVersion6(std::vector<uint8_t> v5) {
  if (SnapshotLayoutOf(v5) != &kSnapshotV5) return {};
  SnapshotPut32(v5.data() + 8, 6);
  ResealSnapshot(v5, kSnapshotV6);
  return v5;
}

// The version-4 file holding what the version-5 file `v5` holds: what the
// previous build wrote for the same filter (its name at most 128 bytes).
// Empty if `v5` is not a whole version-5 file or its name is longer.
inline std::vector<uint8_t> SnapshotToVersion4(const std::vector<uint8_t>& v5) {
  const SnapshotLayout& from = kSnapshotV5;
  const SnapshotLayout& to = kSnapshotV4;
  if (SnapshotLayoutOf(v5) != &kSnapshotV5 || v5.size() < from.header + kSnapshotFooter) return {};
  const uint8_t* f = v5.data();
  const uint32_t name_length = SnapshotGet32(f + kSnapshotV5NameLength);
  if (name_length > to.name_bytes) return {};
  std::vector<uint8_t> v4(v5.size() - from.header + to.header);
  uint8_t* t = v4.data();
  std::memcpy(t, f, 48);  // Magic, version, header size, writer.
  SnapshotPut32(t + 8, to.version);
  SnapshotPut32(t + 12, static_cast<uint32_t>(to.header));
  auto u32 = [&](size_t field, size_t shape_field) {
    SnapshotPut32(t + to.at(field), SnapshotGet32(f + from.shape + shape_field));
  };
  auto u64 = [&](size_t field, size_t shape_field) {
    SnapshotPut64(t + to.at(field), SnapshotGet64(f + from.shape + shape_field));
  };
  u32(kSnapshotHashId, kShapeHashId);
  u32(kSnapshotTableKind, kShapeTableKind);
  u32(kSnapshotFingerprintBits, kShapeFingerprintBits);
  u32(kSnapshotBucketSize, kShapeBucketSize);
  u32(kSnapshotShards, kShapeShards);
  u32(kSnapshotShardBits, kShapeShardBits);
  u32(kSnapshotMaxKicks, kShapeMaxKicks);
  u64(kSnapshotSeed, kShapeSeed);
  u64(kSnapshotCapacity, kShapeCapacity);
  u64(kSnapshotBucketsPerShard, kShapeBucketsPerShard);
  SnapshotPut32(t + to.at(kSnapshotNameLength), name_length);
  SnapshotPut64(t + to.at(kSnapshotTableBytes), SnapshotGet64(f + kSnapshotV5TableBytes));
  SnapshotPut64(t + to.at(kSnapshotTaken), SnapshotGet64(f + kSnapshotV5Taken));
  std::memcpy(t + to.name, f + from.name, name_length);
  SnapshotPut64(t + to.filter_id, SnapshotGet64(f + from.filter_id));
  SnapshotPut32(t + to.growth_at(kSnapshotGrowthFactor),
                SnapshotGet32(f + from.growth_at(kSnapshotGrowthFactor)));
  SnapshotPut32(t + to.growth_at(kSnapshotScheduleGenerations),
                SnapshotGet32(f + from.growth_at(kSnapshotScheduleGenerations)));
  for (size_t field :
       {kSnapshotMaxCapacity, kSnapshotFalsePositiveRate, kSnapshotScheduleChecksum}) {
    SnapshotPut64(t + to.growth_at(field), SnapshotGet64(f + from.growth_at(field)));
  }
  std::memcpy(t + to.growth_at(kSnapshotShardsWithGeneration),
              f + from.growth_at(kSnapshotShardsWithGeneration), 128);
  std::memcpy(t + to.log, f + from.log, kSnapshotLogBytes);
  // Sections and footer are laid out alike.
  std::memcpy(t + to.header, f + from.header, v5.size() - from.header);
  SnapshotPut64(t + v4.size() - kSnapshotFooter + 8, v4.size());
  ResealSnapshot(v4, to);
  return v4;
}

// The version-3 file holding what the version-4 file `v4` holds but its log
// identity (or the version-5 file's): what an older build wrote for the
// same filter. Empty if `v4` is not a version-4 or -5 file.
inline std::vector<uint8_t> SnapshotToVersion3(const std::vector<uint8_t>& v4) {
  if (SnapshotLayoutOf(v4) == &kSnapshotV5) return SnapshotToVersion3(SnapshotToVersion4(v4));
  if (SnapshotLayoutOf(v4) != &kSnapshotV4 || v4.size() < kSnapshotV4.header) return {};
  std::vector<uint8_t> v3 = v4;
  SnapshotPut32(v3.data() + 8, kSnapshotV3.version);
  std::memset(v3.data() + kSnapshotV4.log, 0, kSnapshotLogBytes);
  ResealSnapshot(v3, kSnapshotV3);
  return v3;
}

// The version-2 file holding what the version-3 file `v3` of a fixed
// filter (one generation per shard) holds (or the version-4 file's): what
// an older build wrote for the same filter. Empty if `v3` is not a whole
// version-3 or -4 file of a fixed filter.
inline std::vector<uint8_t> SnapshotToVersion2(const std::vector<uint8_t>& v3) {
  if (SnapshotLayoutOf(v3) == &kSnapshotV4 || SnapshotLayoutOf(v3) == &kSnapshotV5) {
    return SnapshotToVersion2(SnapshotToVersion3(v3));
  }
  const SnapshotLayout& from = kSnapshotV3;
  const SnapshotLayout& to = kSnapshotV2;
  if (SnapshotLayoutOf(v3) != &kSnapshotV3 || v3.size() < from.header) return {};
  const uint32_t shards = SnapshotGet32(v3.data() + from.at(kSnapshotShards));
  const uint64_t table_bytes = SnapshotGet64(v3.data() + from.at(kSnapshotTableBytes));
  if (SnapshotGet32(v3.data() + from.growth + kSnapshotGrowthFactor) != 0) return {};
  if (v3.size() != from.FileBytes(shards, table_bytes)) return {};
  std::vector<uint8_t> v2(to.FileBytes(shards, table_bytes));
  // Magic, writer, settings, name and filter id are where they were.
  std::memcpy(v2.data(), v3.data(), to.reserved);
  SnapshotPut32(v2.data() + 8, to.version);
  SnapshotPut32(v2.data() + 12, static_cast<uint32_t>(to.header));
  uint64_t in = from.header;
  uint64_t out = to.header;
  for (uint32_t i = 0; i < shards; ++i) {
    const uint8_t* s = v3.data() + in;
    const uint8_t* g = s + from.section_header;
    uint8_t* d = v2.data() + out;
    SnapshotPut32(d, SnapshotGet32(s));  // shard_index; reserved stays 0.
    SnapshotPut64(d + kSnapshotSectionItems, SnapshotGet64(g + kSnapshotGenItems));
    SnapshotPut64(d + kSnapshotSectionRng, SnapshotGet64(g + kSnapshotGenRng));
    SnapshotPut64(d + kSnapshotSectionTableBytes, table_bytes);
    SnapshotPut64(d + to.section_position, SnapshotGet64(s + from.section_position));
    std::memcpy(d + to.section_header, g + from.generation_header, table_bytes);
    in += from.table() + table_bytes + kSnapshotSectionTrailer;
    out += to.table() + table_bytes + kSnapshotSectionTrailer;
  }
  std::memcpy(v2.data() + out, v3.data() + in, kSnapshotFooter);
  SnapshotPut64(v2.data() + out + 8, v2.size());
  ResealSnapshot(v2, to);
  return v2;
}

// The version-1 file holding what the version-2 file `v2` holds (or the
// version-3 file of a fixed filter), except its filter id and log
// positions, which version 1 cannot hold: what an older build wrote for
// the same filter. Empty if `v2` is not a whole file of either kind.
inline std::vector<uint8_t> SnapshotToVersion1(const std::vector<uint8_t>& file) {
  if (SnapshotLayoutOf(file) == &kSnapshotV3 || SnapshotLayoutOf(file) == &kSnapshotV4 ||
      SnapshotLayoutOf(file) == &kSnapshotV5) {
    return SnapshotToVersion1(SnapshotToVersion2(file));
  }
  const std::vector<uint8_t>& v2 = file;
  const SnapshotLayout& from = kSnapshotV2;
  const SnapshotLayout& to = kSnapshotV1;
  if (SnapshotLayoutOf(v2) != &kSnapshotV2 || v2.size() < from.header) return {};
  const uint32_t shards = SnapshotGet32(v2.data() + from.at(kSnapshotShards));
  const uint64_t table_bytes = SnapshotGet64(v2.data() + from.at(kSnapshotTableBytes));
  if (v2.size() != from.FileBytes(shards, table_bytes)) return {};
  std::vector<uint8_t> v1(to.FileBytes(shards, table_bytes));
  std::memcpy(v1.data(), v2.data(), 8);  // Magic.
  SnapshotPut32(v1.data() + 8, to.version);
  SnapshotPut32(v1.data() + 12, static_cast<uint32_t>(to.header));
  std::memcpy(v1.data() + to.fields, v2.data() + from.fields, kSnapshotFieldsBytes);
  std::memcpy(v1.data() + to.name, v2.data() + from.name, to.reserved - to.name);
  uint64_t in = from.header;
  uint64_t out = to.header;
  for (uint32_t i = 0; i < shards; ++i) {
    // The section header without its log position, then the table.
    std::memcpy(v1.data() + out, v2.data() + in, to.section_header);
    std::memcpy(v1.data() + out + to.section_header, v2.data() + in + from.section_header,
                table_bytes);
    in += from.section_header + table_bytes + kSnapshotSectionTrailer;
    out += to.section_header + table_bytes + kSnapshotSectionTrailer;
  }
  std::memcpy(v1.data() + out, v2.data() + in, kSnapshotFooter);
  SnapshotPut64(v1.data() + out + 8, v1.size());
  ResealSnapshot(v1, to);
  return v1;
}

}  // namespace cuckoo::testing

#endif  // CUCKOO_TESTS_CORE_SNAPSHOT_LAYOUT_H_
