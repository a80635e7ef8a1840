// The words of the access file (cuckood --auth-tokens, the grammar in
// server/security/access.h) that both its parser and the tools that write
// its entries (cuckooctl hash-token, client/access_token.h) check: entry
// names, grant kinds, filter-name patterns, and how long a token may be.
// Hashing a token (SHA-256) is OpenSSL's, so it is not here.
#ifndef CUCKOO_BASE_ACCESS_FILE_H_
#define CUCKOO_BASE_ACCESS_FILE_H_

#include <algorithm>
#include <cstddef>
#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/str_format.h"
#include "absl/strings/string_view.h"
#include "base/utf8.h"

namespace cuckoo {

// An entry's NAME: 1 to 64 of A-Z a-z 0-9 . _ -
inline constexpr size_t kMaxAccessNameBytes = 64;
// A grant's PATTERN: 1 to 1024 bytes of UTF-8 (a filter name is up to 512
// bytes, and each of its bytes may need an escape), no control characters:
// a glob over filter names (Redis keys), `*` any run of bytes, `?` one byte,
// `\` before any character makes it literal (`\*`, `\?`, `\\`, `\[`).
// `[` unescaped is refused: character classes are not supported (yet), and
// a pattern that means one thing today must not mean another later.
inline constexpr size_t kMaxAccessPatternBytes = 1024;
// A bearer token: 1 to 512 bytes.
inline constexpr size_t kMaxAccessTokenBytes = 512;

inline bool IsAccessName(absl::string_view name) {
  return !name.empty() && name.size() <= kMaxAccessNameBytes &&
         std::all_of(name.begin(), name.end(), [](char c) {
           return absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' ||
                  c == '-';
         });
}

// What is wrong with `pattern` as a grant's PATTERN (above), or "" if
// nothing is.
inline std::string AccessPatternError(absl::string_view pattern) {
  if (pattern.empty()) return "the pattern is empty";
  if (pattern.size() > kMaxAccessPatternBytes) {
    return absl::StrFormat("the pattern is %u bytes; at most %u are allowed", pattern.size(),
                           kMaxAccessPatternBytes);
  }
  if (const size_t bad = FirstInvalidUtf8Byte(pattern); bad != absl::string_view::npos) {
    return absl::StrFormat("the pattern is not valid UTF-8 (byte 0x%02x at offset %u)",
                           static_cast<unsigned char>(pattern[bad]), bad);
  }
  for (size_t i = 0; i < pattern.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(pattern[i]);
    if (c < 0x20 || c == 0x7F) {
      return absl::StrFormat("the pattern has control character 0x%02x at offset %u", c, i);
    }
    if (c == '\\') {
      if (++i == pattern.size()) {
        return "the pattern ends in a lone backslash (write \\\\ for a backslash)";
      }
      continue;
    }
    if (c == '[') {
      return absl::StrFormat(
          "the pattern has '[' at offset %u: character classes are not supported; write \\[ "
          "for a literal [",
          i);
    }
  }
  return "";
}

inline bool IsAccessPattern(absl::string_view pattern) {
  return AccessPatternError(pattern).empty();
}

// A grant's KIND, before the colon of KIND:PATTERN.
inline bool IsAccessGrantKind(absl::string_view kind) {
  return kind == "read" || kind == "write" || kind == "admin";
}

}  // namespace cuckoo

#endif  // CUCKOO_BASE_ACCESS_FILE_H_
