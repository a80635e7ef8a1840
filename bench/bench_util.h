// Small pieces the benchmarks share: a wall clock, the key generator, and
// the parser of a comma-separated list flag (--threads=1,2).
#ifndef CUCKOO_BENCH_BENCH_UTIL_H_
#define CUCKOO_BENCH_BENCH_UTIL_H_

#include <chrono>
#include <cstdint>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"

namespace cuckoo::bench {

// Seconds on a monotonic clock.
inline double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

inline uint64_t SplitMix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// "1,2,4" into *out (replacing it); false unless every item is in [1, 256].
template <typename T>
bool ParseCountList(absl::string_view value, std::vector<T>* out) {
  out->clear();
  bool ok = true;
  for (absl::string_view item : absl::StrSplit(value, ',')) {
    T n = 0;
    ok = ok && absl::SimpleAtoi(item, &n) && n > 0 && n <= 256;
    out->push_back(n);
  }
  return ok;
}

}  // namespace cuckoo::bench

#endif  // CUCKOO_BENCH_BENCH_UTIL_H_
