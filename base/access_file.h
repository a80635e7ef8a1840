// The words of the access file (cuckood --auth-tokens, the grammar in
// server/security/access.h) that both its parser and the tools that write
// its entries (cuckooctl hash-token, client/access_token.h) check: entry
// names, grant kinds, filter-name patterns, and how long a token may be.
// Hashing a token (SHA-256) is OpenSSL's, so it is not here.
#ifndef CUCKOO_BASE_ACCESS_FILE_H_
#define CUCKOO_BASE_ACCESS_FILE_H_

#include <algorithm>
#include <cstddef>

#include "absl/strings/ascii.h"
#include "absl/strings/string_view.h"

namespace cuckoo {

// An entry's NAME: 1 to 64 of A-Z a-z 0-9 . _ -
inline constexpr size_t kMaxAccessNameBytes = 64;
// A grant's PATTERN: 1 to 256 of A-Z a-z 0-9 . _ - and the wildcards * ?
inline constexpr size_t kMaxAccessPatternBytes = 256;
// A bearer token: 1 to 512 bytes.
inline constexpr size_t kMaxAccessTokenBytes = 512;

inline bool IsAccessName(absl::string_view name) {
  return !name.empty() && name.size() <= kMaxAccessNameBytes &&
         std::all_of(name.begin(), name.end(), [](char c) {
           return absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' ||
                  c == '-';
         });
}

// A glob over filter names: `*` any run of characters, `?` one.
inline bool IsAccessPattern(absl::string_view pattern) {
  return !pattern.empty() && pattern.size() <= kMaxAccessPatternBytes &&
         std::all_of(pattern.begin(), pattern.end(), [](char c) {
           return absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' ||
                  c == '-' || c == '*' || c == '?';
         });
}

// A grant's KIND, before the colon of KIND:PATTERN.
inline bool IsAccessGrantKind(absl::string_view kind) {
  return kind == "read" || kind == "write" || kind == "admin";
}

}  // namespace cuckoo

#endif  // CUCKOO_BASE_ACCESS_FILE_H_
