// Deterministic keys for the tests of every folder (core, server, client,
// e2e, the fuzzers' corpora): key streams that never overlap, numbered
// keys, pre-hashed keys, and string_views over a batch of keys.
#ifndef CUCKOO_TESTS_UTIL_KEYS_H_
#define CUCKOO_TESTS_UTIL_KEYS_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

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

// Keys from, ..., from + n - 1 of stream `stream`.
inline std::vector<std::string> Keys(uint64_t stream, uint64_t n, uint64_t from = 0) {
  std::vector<std::string> keys;
  keys.reserve(n);
  for (uint64_t i = from; i < from + n; ++i) keys.push_back(Key(stream, i));
  return keys;
}

// "<prefix>0", ..., "<prefix>(n-1)".
inline std::vector<std::string> NumberedKeys(std::string_view prefix, int n) {
  std::vector<std::string> keys;
  keys.reserve(static_cast<size_t>(n));
  const absl::string_view p(prefix.data(), prefix.size());
  for (int i = 0; i < n; ++i) keys.push_back(absl::StrCat(p, i));
  return keys;
}

// Views of `keys`, as the batch calls take them.
inline std::vector<std::string_view> Views(const std::vector<std::string>& keys) {
  return {keys.begin(), keys.end()};
}

// The i-th pre-hashed key of `stream` for table-level tests.
inline uint64_t HashedKey(uint64_t stream, uint64_t i) { return Mix(Mix(i) ^ Mix(~stream)); }

}  // namespace cuckoo::testing

#endif  // CUCKOO_TESTS_UTIL_KEYS_H_
