// The access file (--auth-tokens): who may call what on which filters.
//
// One entry per line; blank lines and lines starting with '#' are ignored.
// Fields are separated by spaces or tabs; a field may be double-quoted to
// hold spaces ("..." with \" and \\ escapes).
//
//   # KIND  NAME            CREDENTIAL                GRANT...
//   token   billing-reader  sha256:<64 hex digits>    read:billing.*
//   token   ops             sha256:<64 hex digits>    admin:*
//   cert    batch-job       san:spiffe://acme/batch   write:events.* read:billing.*
//   cert    ops-laptop      subject:"CN=ops,O=Acme"   admin:*
//
// - `token`: the caller sends "authorization: Bearer <token>"; the file holds
//   the SHA-256 of the token's bytes (lowercase or uppercase hex), never the
//   token (`cuckooctl hash-token` makes one).
// - `cert` (mutual TLS): the caller's verified client certificate, by its
//   common name (cn:), any subject alternative name (san:, DNS, URI, email or
//   IP as gRPC reports it) or its whole subject (subject:, RFC 2253 as gRPC
//   reports it, e.g. "CN=ops,O=Acme").
// - GRANT is read:PATTERN, write:PATTERN or admin:PATTERN. PATTERN is a glob
//   over filter names: `*` any run of characters, `?` one, anything else
//   literal; `*` alone is every filter. read allows Lookup, Count, GetFilter
//   and ListFilters (which lists only readable filters); write adds Insert
//   and Delete; admin is everything (CreateFilter, DropFilter,
//   SetFilterExpiry, Snapshot, ExportFilter, ImportFilter). GetServerInfo
//   needs only a known caller.
//
// A bad line makes the whole file bad: ParseAccessFile names the line and
// the problem. Names must be unique, and so must token hashes and
// certificate selectors (two entries for one credential would make its
// grants ambiguous).
//
// No gRPC here: the parser and the matching are plain code (and fuzzed).
#ifndef CUCKOO_SERVER_SECURITY_ACCESS_H_
#define CUCKOO_SERVER_SECURITY_ACCESS_H_

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace cuckoo::server {

// What a call needs on its filter. Each level includes the ones below it.
enum class Access : uint8_t { kRead = 1, kWrite = 2, kAdmin = 3 };
std::string_view AccessName(Access access);

struct Grant {
  Access access;
  std::string pattern;
};

struct AccessEntry {
  enum class Kind : uint8_t { kToken, kCert };
  // What a cert entry matches.
  enum class Selector : uint8_t { kNone, kCommonName, kSan, kSubject };
  Kind kind = Kind::kToken;
  std::string name;
  // kToken: the SHA-256 of the token.
  std::array<uint8_t, 32> sha256{};
  // kCert: what to match, and the value.
  Selector selector = Selector::kNone;
  std::string value;
  std::vector<Grant> grants;
  // Line in the file, for messages.
  int line = 0;

  // Whether this entry grants at least `access` on filter `filter`.
  bool Allows(Access access, std::string_view filter) const;
  // Whether some admin grant's pattern is `*`: every filter, present and
  // future (a whole-server Snapshot needs that).
  bool AdminOfAll() const;
};

// A parsed access file.
class AccessTable {
 public:
  // INVALID_ARGUMENT naming `source` (a file name, for messages), the line
  // and the problem.
  static absl::StatusOr<AccessTable> Parse(absl::string_view text, absl::string_view source);

  // The entry of the token whose SHA-256 is `sha256`, or null.
  const AccessEntry* FindToken(const std::array<uint8_t, 32>& sha256) const;
  // The cert entry that matches the certificate's common name, one of its
  // subject alternative names, or its subject; null if none does. When
  // several entries match (say a cn: and a san: entry of one certificate),
  // null and *ambiguous set: which grants apply would depend on line order.
  const AccessEntry* FindCert(const std::vector<std::string_view>& common_names,
                              const std::vector<std::string_view>& sans,
                              const std::vector<std::string_view>& subjects,
                              bool* ambiguous = nullptr) const;

  const std::vector<AccessEntry>& entries() const { return entries_; }
  size_t tokens() const { return by_hash_.size(); }
  size_t certs() const { return entries_.size() - by_hash_.size(); }

 private:
  std::vector<AccessEntry> entries_;
  // SHA-256 (as 32 raw bytes) -> index into entries_.
  absl::flat_hash_map<std::string, size_t> by_hash_;
};

// SHA-256 of `data` (OpenSSL).
std::array<uint8_t, 32> Sha256(std::string_view data);

// Whether filter name `name` matches glob `pattern` (`*`, `?`).
bool MatchesPattern(std::string_view pattern, std::string_view name);

}  // namespace cuckoo::server

#endif  // CUCKOO_SERVER_SECURITY_ACCESS_H_
