// Fixed-width little-endian fields in byte buffers, for the on-disk and
// on-the-wire formats (snapshots, the write-ahead log, the cluster log's
// entries). cuckood builds only for little-endian hosts, so a field is a
// memcpy of the native value (alignment-free).
#ifndef CUCKOO_BASE_LITTLE_ENDIAN_H_
#define CUCKOO_BASE_LITTLE_ENDIAN_H_

#include <bit>
#include <cstdint>
#include <cstring>

namespace cuckoo {

static_assert(std::endian::native == std::endian::little,
              "cuckood's file and log formats are written as little-endian memory");

inline void Put32(void* p, uint32_t v) { std::memcpy(p, &v, 4); }
inline void Put64(void* p, uint64_t v) { std::memcpy(p, &v, 8); }
inline uint32_t Get32(const void* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}
inline uint64_t Get64(const void* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  return v;
}

}  // namespace cuckoo

#endif  // CUCKOO_BASE_LITTLE_ENDIAN_H_
