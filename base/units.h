// Sizes in bytes and counts for people: parsed from flags, files and command
// lines ("64MiB", "1.5GiB", "10GB"; "10M" keys) and written in logs and
// messages ("17.7GiB").
//
// One suffix set for the whole project, case-insensitive:
// - sizes: B, KiB, MiB, GiB, TiB (powers of two), KB, MB, GB, TB (powers of
//   ten), and K, M, G, T as binary shorthands (a size is memory or a file);
// - counts (keys, requests, capacities): k, M, G, T as powers of ten, 10^3,
//   10^6, 10^9, 10^12 (10M keys are ten million keys).
#ifndef CUCKOO_BASE_UNITS_H_
#define CUCKOO_BASE_UNITS_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace cuckoo {

// Parses "123", "64KiB", "1.5GiB", "10GB" into bytes. Whitespace between the
// number and the unit is allowed; the unit is case-insensitive.
absl::StatusOr<uint64_t> ParseByteSize(absl::string_view text);
// "17.7GiB", "64MiB", "512B": for people, to one decimal.
std::string FormatByteSize(uint64_t bytes);
// "64MiB", "1536KiB", "1000000": exact, parses back to `bytes`.
std::string FormatByteSizeExactly(uint64_t bytes);

// Parses a count, "1000", "10k", "1M", "2g", "1T", into a number: digits
// and at most one suffix k, m, g or t (either case) for 10^3, 10^6, 10^9 or
// 10^12. No sign, fraction, unit or white space. INVALID_ARGUMENT saying
// what is wrong otherwise, and when it is above 2^64 - 1.
absl::StatusOr<uint64_t> ParseCount(absl::string_view text);

}  // namespace cuckoo

#endif  // CUCKOO_BASE_UNITS_H_
