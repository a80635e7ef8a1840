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
// and a glob over filter names (base/access_file.h).
absl::Status ValidateGrant(std::string_view grant_view) {
  const absl::string_view grant(grant_view.data(), grant_view.size());
  const size_t colon = grant.find(':');
  if (colon == absl::string_view::npos || !IsAccessGrantKind(grant.substr(0, colon))) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "grant \"%s\" must be KIND:PATTERN with KIND read, write or admin and PATTERN a glob "
        "over filter names, e.g. read:billing.* or write:users:*",
        absl::CEscape(grant)));
  }
  if (const std::string why = AccessPatternError(grant.substr(colon + 1)); !why.empty()) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "grant \"%s\": %s (a pattern is a glob over filter names: * any run of bytes, ? one, "
        "\\ before a character makes it literal)",
        absl::CEscape(grant), why));
  }
  return absl::OkStatus();
}

// A valid grant as the access file's line holds it: a pattern with a space,
// a tab or a double quote is quoted (the parser's rule: \" and \\ inside).
std::string GrantField(absl::string_view grant) {
  const size_t colon = grant.find(':');
  const absl::string_view pattern = grant.substr(colon + 1);
  if (pattern.find_first_of(" \t\"") == absl::string_view::npos) return std::string(grant);
  std::string out = absl::StrCat(grant.substr(0, colon + 1), "\"");
  for (char c : pattern) {
    if (c == '"' || c == '\\') out.push_back('\\');
    out.push_back(c);
  }
  out.push_back('"');
  return out;
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
  std::vector<std::string> fields;
  fields.reserve(grants.size());
  for (const std::string& grant : grants) fields.push_back(GrantField(grant));
  return absl::StrCat("token ", absl::string_view(name.data(), name.size()),
                      " sha256:", TokenSha256Hex(token), " ", absl::StrJoin(fields, " "));
}

}  // namespace cuckoo::client
