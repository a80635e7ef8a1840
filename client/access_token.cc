#include "client/access_token.h"

#include <openssl/evp.h>
#include <openssl/rand.h>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "base/access_file.h"
#include "client/cuckoo_client.h"

namespace cuckoo::client {

absl::StatusOr<std::string> NewAccessToken() {
  unsigned char bytes[32];
  if (RAND_bytes(bytes, sizeof bytes) != 1) {
    return absl::InternalError("OpenSSL's RAND_bytes failed: no randomness for a token");
  }
  return absl::StrCat(
      "ck_", absl::WebSafeBase64Escape(absl::string_view(reinterpret_cast<char*>(bytes), 32)));
}

std::string TokenSha256Hex(std::string_view token) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int size = 0;
  // Cannot fail for SHA-256 on memory short of an allocation failure, which
  // would leave `size` 0 and make an entry no token matches.
  EVP_Digest(token.data(), token.size(), digest, &size, EVP_sha256(), nullptr);
  // BytesToHexString is lowercase, as the access file wants.
  return absl::BytesToHexString(absl::string_view(reinterpret_cast<char*>(digest), size));
}

namespace {

absl::Status ValidateName(std::string_view name) {
  if (IsAccessName(absl::string_view(name.data(), name.size()))) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrFormat(
      "NAME \"%s\" must be 1 to %u of the characters A-Z a-z 0-9 . _ -",
      absl::CEscape(absl::string_view(name.data(), name.size())), kMaxAccessNameBytes));
}

// What the server's access file takes (server/security/access.cc): a kind
// and a pattern of filter-name characters and the wildcards.
absl::Status ValidateGrant(std::string_view grant_view) {
  const absl::string_view grant(grant_view.data(), grant_view.size());
  const size_t colon = grant.find(':');
  if (colon != absl::string_view::npos && IsAccessGrantKind(grant.substr(0, colon)) &&
      IsAccessPattern(grant.substr(colon + 1))) {
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(absl::StrFormat(
      "grant \"%s\" must be KIND:PATTERN with KIND read, write or admin and PATTERN a filter "
      "name glob (* any run of characters, ? one) of 1 to %u of the characters A-Z a-z 0-9 . _ "
      "- * ?, e.g. read:billing.*",
      absl::CEscape(grant), kMaxAccessPatternBytes));
}

}  // namespace

absl::StatusOr<std::string> TokenEntry(std::string_view name, std::string_view token,
                                       const std::vector<std::string>& grants) {
  if (absl::Status s = ValidateName(name); !s.ok()) return s;
  if (grants.empty()) return absl::InvalidArgumentError("an entry needs at least one grant");
  for (const std::string& grant : grants) {
    if (absl::Status s = ValidateGrant(grant); !s.ok()) return s;
  }
  if (absl::Status s = ValidateToken(token); !s.ok()) return s;
  return absl::StrCat("token ", absl::string_view(name.data(), name.size()),
                      " sha256:", TokenSha256Hex(token), " ", absl::StrJoin(grants, " "));
}

}  // namespace cuckoo::client
