// Deterministic key streams shared by the core tests.
#ifndef CUCKOO_TESTS_CORE_TEST_KEYS_H_
#define CUCKOO_TESTS_CORE_TEST_KEYS_H_

#include <cstdint>
#include <string>

#include "absl/strings/str_cat.h"

namespace cuckoo::testing {

// splitmix64: distinct inputs give distinct, well-mixed outputs.
inline uint64_t Mix(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// The i-th key of stream `stream` as a string: streams never overlap, so
// stream 0 can be "inserted" and stream 1 "absent". (absl::StrCat rather
// than "k" + std::to_string(...): g++ 12 at -O3 reports a false -Wrestrict
// inside std::operator+(const char*, std::string&&), and make_snapshot_corpus
// is no cuckoo_test, which turns that warning off.)
inline std::string Key(uint64_t stream, uint64_t i) {
  return absl::StrCat("k", stream, ":", Mix(i ^ (stream << 48)));
}

// The i-th pre-hashed key of `stream` for table-level tests.
inline uint64_t HashedKey(uint64_t stream, uint64_t i) { return Mix(Mix(i) ^ Mix(~stream)); }

}  // namespace cuckoo::testing

#endif  // CUCKOO_TESTS_CORE_TEST_KEYS_H_
