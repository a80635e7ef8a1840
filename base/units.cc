#include "base/units.h"

#include <algorithm>
#include <cmath>
#include <iterator>
#include <limits>
#include <string>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "absl/strings/strip.h"

namespace cuckoo {
namespace {

struct Unit {
  const char* name;
  uint64_t factor;
};
constexpr Unit kUnits[] = {
    {"kib", uint64_t{1} << 10},
    {"mib", uint64_t{1} << 20},
    {"gib", uint64_t{1} << 30},
    {"tib", uint64_t{1} << 40},
    {"kb", 1'000},
    {"mb", 1'000'000},
    {"gb", 1'000'000'000},
    {"tb", 1'000'000'000'000},
    {"k", uint64_t{1} << 10},
    {"m", uint64_t{1} << 20},
    {"g", uint64_t{1} << 30},
    {"t", uint64_t{1} << 40},
    {"b", 1},
};

}  // namespace

absl::StatusOr<uint64_t> ParseByteSize(absl::string_view text) {
  absl::string_view s = absl::StripAsciiWhitespace(text);
  size_t digits = 0;
  while (digits < s.size() && (absl::ascii_isdigit(s[digits]) || s[digits] == '.')) ++digits;
  absl::string_view number = s.substr(0, digits);
  std::string unit = absl::AsciiStrToLower(absl::StripAsciiWhitespace(s.substr(digits)));
  double value = 0;
  if (number.empty() || !absl::SimpleAtod(number, &value)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "\"%s\" is not a size: expected a number of bytes with an optional unit such as "
        "512MiB or 8GiB",
        text));
  }
  uint64_t factor = 1;
  if (!unit.empty()) {
    auto it = std::find_if(std::begin(kUnits), std::end(kUnits),
                           [&](const Unit& u) { return unit == u.name; });
    if (it == std::end(kUnits)) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "\"%s\" has unknown unit \"%s\": use B, KiB, MiB, GiB, TiB, KB, MB, GB or TB", text,
          unit));
    }
    factor = it->factor;
  }
  double bytes = value * static_cast<double>(factor);
  if (bytes >= 18446744073709551615.0) {
    return absl::InvalidArgumentError(absl::StrFormat("\"%s\" is too large", text));
  }
  return static_cast<uint64_t>(std::llround(bytes));
}

absl::StatusOr<uint64_t> ParseCount(absl::string_view text) {
  absl::string_view digits = text;
  uint64_t factor = 1;
  if (!digits.empty()) {
    switch (absl::ascii_tolower(static_cast<unsigned char>(digits.back()))) {
      case 'k':
        factor = 1'000;
        break;
      case 'm':
        factor = 1'000'000;
        break;
      case 'g':
        factor = 1'000'000'000;
        break;
      case 't':
        factor = 1'000'000'000'000;
        break;
    }
    if (factor != 1) digits.remove_suffix(1);
  }
  // SimpleAtoi alone would also take a sign and white space around.
  if (digits.empty() || !std::all_of(digits.begin(), digits.end(), absl::ascii_isdigit)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "\"%s\" is not a count: expected digits with an optional k, M, G or T (10^3, 10^6, "
        "10^9, 10^12), such as 10M",
        text));
  }
  uint64_t value = 0;
  if (!absl::SimpleAtoi(digits, &value) || value > std::numeric_limits<uint64_t>::max() / factor) {
    return absl::InvalidArgumentError(absl::StrFormat("\"%s\" is too large", text));
  }
  return value * factor;
}

namespace {
constexpr std::pair<const char*, int> kBinaryUnits[] = {
    {"TiB", 40}, {"GiB", 30}, {"MiB", 20}, {"KiB", 10}};
}  // namespace

std::string FormatByteSize(uint64_t bytes) {
  for (const auto& [unit, shift] : kBinaryUnits) {
    const uint64_t one = uint64_t{1} << shift;
    if (bytes < one) continue;
    if (bytes % one == 0) return absl::StrFormat("%u%s", bytes >> shift, unit);
    return absl::StrFormat("%.1f%s", static_cast<double>(bytes) / one, unit);
  }
  return absl::StrFormat("%uB", bytes);
}

// Exact, so that it parses back to the same value.
std::string FormatByteSizeExactly(uint64_t bytes) {
  for (const auto& [unit, shift] : kBinaryUnits) {
    const uint64_t one = uint64_t{1} << shift;
    if (bytes >= one && bytes % one == 0) return absl::StrFormat("%u%s", bytes >> shift, unit);
  }
  return bytes == 0 ? std::string("0") : absl::StrFormat("%uB", bytes);
}

}  // namespace cuckoo
