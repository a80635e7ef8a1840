// Access tokens for cuckood's --auth-tokens file (docs: client/README.md,
// "Authentication"): making a new one and the entry that grants it.
//
//   absl::StatusOr<std::string> token = cuckoo::client::NewAccessToken();
//   absl::StatusOr<std::string> entry =
//       cuckoo::client::TokenEntry("billing-reader", *token, {"read:billing.*"});
//   // entry: "token billing-reader sha256:<64 hex> read:billing.*"
//
// The server keeps only the SHA-256 of a token, so the file can be read by
// more people than may use the tokens; the token itself is shown once, to the
// one who makes it.
#ifndef CUCKOO_CLIENT_ACCESS_TOKEN_H_
#define CUCKOO_CLIENT_ACCESS_TOKEN_H_

#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace cuckoo::client {

// "ck_" then 32 random bytes (OpenSSL's RAND_bytes) in base64url without
// padding: 46 characters. INTERNAL if the random generator fails.
absl::StatusOr<std::string> NewAccessToken();

// The lowercase hex SHA-256 of the token's bytes: what
// `printf %s "$TOKEN" | sha256sum` prints.
std::string TokenSha256Hex(std::string_view token);

// The access-file line for `token`, "token NAME sha256:HEX GRANT...", after
// checking what the server would refuse (the rules of base/access_file.h):
// NAME is 1 to 64 of A-Z a-z 0-9 . _ -; each GRANT is read:PATTERN,
// write:PATTERN or admin:PATTERN with PATTERN a glob over filter names (*
// any run of bytes, ? one, \ before a character makes it literal; an
// unescaped [ is refused, base/access_file.h); at least one grant; the
// token as ValidateToken (cuckoo_client.h) wants it. INVALID_ARGUMENT
// naming the bad value otherwise.
absl::StatusOr<std::string> TokenEntry(std::string_view name, std::string_view token,
                                       const std::vector<std::string>& grants);

}  // namespace cuckoo::client

#endif  // CUCKOO_CLIENT_ACCESS_TOKEN_H_
