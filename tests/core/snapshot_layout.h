// The snapshot layout of docs/SNAPSHOT_FORMAT.md, restated independently of
// core/snapshot.cc, for tests and the fuzzer that build deliberately odd
// files: the section sizes, and ResealSnapshot, which recomputes every
// checksum as a writer of such a file would.
#ifndef CUCKOO_TESTS_CORE_SNAPSHOT_LAYOUT_H_
#define CUCKOO_TESTS_CORE_SNAPSHOT_LAYOUT_H_

#include <cstdint>
#include <cstring>
#include <vector>

#include "core/hash.h"  // xxhash.h

namespace cuckoo::testing {

inline constexpr size_t kSnapshotHeader = 256;
inline constexpr size_t kSnapshotHeaderChecksum = kSnapshotHeader - 8;
inline constexpr size_t kSnapshotSectionHeader = 32;
inline constexpr size_t kSnapshotSectionTrailer = 8;
inline constexpr size_t kSnapshotFooter = 32;

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
inline void SnapshotPut64(uint8_t* p, uint64_t v) { std::memcpy(p, &v, 8); }

// Recomputes the header, section and whole-file checksums of `b`, for as
// many sections as its header announces (shards at byte 32, table bytes at
// 72) and the file holds; the footer's only if every section and the footer
// are there.
inline void ResealSnapshot(std::vector<uint8_t>& b) {
  if (b.size() < kSnapshotHeader) return;
  SnapshotPut64(b.data() + kSnapshotHeaderChecksum, XXH3_64bits(b.data(), kSnapshotHeaderChecksum));
  const uint32_t shards = SnapshotGet32(b.data() + 32);
  const uint64_t table_bytes = SnapshotGet64(b.data() + 72);
  if (table_bytes > b.size()) return;
  const uint64_t section = kSnapshotSectionHeader + table_bytes + kSnapshotSectionTrailer;
  std::vector<uint8_t> chain(b.begin() + kSnapshotHeaderChecksum, b.begin() + kSnapshotHeader);
  uint64_t offset = kSnapshotHeader;
  for (uint32_t i = 0; i < shards; ++i) {
    if (b.size() - offset < section) return;
    uint8_t* trailer = b.data() + offset + kSnapshotSectionHeader + table_bytes;
    SnapshotPut64(trailer, XXH3_64bits(b.data() + offset, kSnapshotSectionHeader + table_bytes));
    chain.insert(chain.end(), trailer, trailer + kSnapshotSectionTrailer);
    offset += section;
  }
  if (b.size() - offset < kSnapshotFooter) return;
  chain.insert(chain.end(), b.begin() + offset, b.begin() + offset + kSnapshotFooter - 8);
  SnapshotPut64(b.data() + offset + kSnapshotFooter - 8, XXH3_64bits(chain.data(), chain.size()));
}

}  // namespace cuckoo::testing

#endif  // CUCKOO_TESTS_CORE_SNAPSHOT_LAYOUT_H_
