// Deterministic key streams shared by the core tests.
#ifndef CUCKOO_TESTS_CORE_TEST_KEYS_H_
#define CUCKOO_TESTS_CORE_TEST_KEYS_H_

#include <cstdint>
#include <string>

namespace cuckoo::testing {

// splitmix64: distinct inputs give distinct, well-mixed outputs.
inline uint64_t Mix(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// The i-th key of stream `stream` as a string: streams never overlap, so
// stream 0 can be "inserted" and stream 1 "absent".
inline std::string Key(uint64_t stream, uint64_t i) {
  return "k" + std::to_string(stream) + ":" + std::to_string(Mix(i ^ (stream << 48)));
}

// The i-th pre-hashed key of `stream` for table-level tests.
inline uint64_t HashedKey(uint64_t stream, uint64_t i) { return Mix(Mix(i) ^ Mix(~stream)); }

}  // namespace cuckoo::testing

#endif  // CUCKOO_TESTS_CORE_TEST_KEYS_H_
