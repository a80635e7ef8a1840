// Sizes in bytes for people: parsed from flags, files and command lines
// ("64MiB", "1.5GiB", "10GB") and written in logs and messages ("17.7GiB").
// One suffix set for the whole project: B, KiB, MiB, GiB, TiB (powers of
// two), KB, MB, GB, TB (powers of ten), and K, M, G, T as binary
// shorthands; case-insensitive.
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

}  // namespace cuckoo

#endif  // CUCKOO_BASE_UNITS_H_
