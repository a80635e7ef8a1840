// Writing raw bits of a table's bytes, for tests that build buckets by hand.
#ifndef CUCKOO_TESTS_CORE_TABLE_BITS_H_
#define CUCKOO_TESTS_CORE_TABLE_BITS_H_

#include <cstdint>

#include "absl/types/span.h"

namespace cuckoo::testing {

// Writes the n-bit value v at bit `at` of `bytes` (little-endian bit order,
// the table layout of core/internal/cuckoo_table.h).
inline void PutBits(absl::Span<uint8_t> bytes, uint64_t at, uint32_t n, uint64_t v) {
  for (uint32_t k = 0; k < n; ++k) {
    const uint8_t bit = static_cast<uint8_t>(1u << ((at + k) % 8));
    if ((v >> k) & 1) {
      bytes[(at + k) / 8] |= bit;
    } else {
      bytes[(at + k) / 8] &= static_cast<uint8_t>(~bit);
    }
  }
}

}  // namespace cuckoo::testing

#endif  // CUCKOO_TESTS_CORE_TABLE_BITS_H_
