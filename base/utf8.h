// UTF-8 validity, as protobuf checks its string fields: filter names
// (core/registry.h) and access-file patterns (access_file.h) must be valid
// UTF-8, so that every filter is reachable over gRPC.
#ifndef CUCKOO_BASE_UTF8_H_
#define CUCKOO_BASE_UTF8_H_

#include <cstddef>

#include "absl/strings/string_view.h"

namespace cuckoo {

// The offset of the first byte of `s` that does not start or continue a
// valid UTF-8 sequence (overlong forms, UTF-16 surrogates and code points
// above U+10FFFF are invalid, as in protobuf); npos if `s` is valid UTF-8.
inline size_t FirstInvalidUtf8Byte(absl::string_view s) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  const size_t n = s.size();
  size_t i = 0;
  while (i < n) {
    const unsigned char c = p[i];
    if (c < 0x80) {
      ++i;
      continue;
    }
    // The sequence's length, and the range its second byte must be in.
    size_t len = 0;
    unsigned char lo = 0x80;
    unsigned char hi = 0xBF;
    if (c >= 0xC2 && c <= 0xDF) {
      len = 2;
    } else if (c >= 0xE0 && c <= 0xEF) {
      len = 3;
      if (c == 0xE0) lo = 0xA0;  // Overlong below.
      if (c == 0xED) hi = 0x9F;  // Surrogates above.
    } else if (c >= 0xF0 && c <= 0xF4) {
      len = 4;
      if (c == 0xF0) lo = 0x90;  // Overlong below.
      if (c == 0xF4) hi = 0x8F;  // Past U+10FFFF above.
    } else {
      return i;  // A continuation byte, an overlong lead (C0, C1) or F5..FF.
    }
    if (i + 1 >= n || p[i + 1] < lo || p[i + 1] > hi) return i;
    for (size_t k = 2; k < len; ++k) {
      if (i + k >= n || p[i + k] < 0x80 || p[i + k] > 0xBF) return i;
    }
    i += len;
  }
  return absl::string_view::npos;
}

}  // namespace cuckoo

#endif  // CUCKOO_BASE_UTF8_H_
