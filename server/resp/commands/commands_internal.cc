#include "server/resp/commands/commands_internal.h"

#include <fnmatch.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace cuckoo::server::redis {

// A strict decimal integer, as Redis's string2ll: no spaces, no '+'.
bool ParseInt(std::string_view s, int64_t* out) {
  if (s.empty() || s.size() > 20) return false;
  size_t i = 0;
  const bool negative = s[0] == '-';
  if (negative) i = 1;
  if (i == s.size()) return false;
  uint64_t v = 0;
  for (; i < s.size(); ++i) {
    if (s[i] < '0' || s[i] > '9') return false;
    const uint64_t d = static_cast<uint64_t>(s[i] - '0');
    if (v > (UINT64_MAX - d) / 10) return false;
    v = v * 10 + d;
  }
  if (negative) {
    if (v > uint64_t{1} << 63) return false;
    *out = static_cast<int64_t>(0 - v);
  } else {
    if (v > static_cast<uint64_t>(INT64_MAX)) return false;
    *out = static_cast<int64_t>(v);
  }
  return true;
}

// `s` shown in a message: at most 64 bytes, non-printable bytes escaped.
std::string Shown(std::string_view s) {
  std::string out;
  for (size_t i = 0; i < s.size() && i < 64; ++i) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (c >= 0x20 && c < 0x7f && c != '\'') {
      out.push_back(static_cast<char>(c));
    } else {
      absl::StrAppendFormat(&out, "\\x%02x", c);
    }
  }
  if (s.size() > 64) out += "...";
  return out;
}

// The error reply for a failed gRPC call of this server's own service.
std::string StatusError(const grpc::Status& st) {
  switch (st.error_code()) {
    case grpc::StatusCode::UNAUTHENTICATED:
      return "NOAUTH " + st.error_message();
    case grpc::StatusCode::PERMISSION_DENIED:
      return "NOPERM " + st.error_message();
    default:
      return "ERR " + st.error_message();
  }
}

// The filter name check of the registry, as an error reply.
std::string NameError(std::string_view key, const absl::Status& s) {
  return absl::StrFormat("ERR invalid filter name '%s': %s", Shown(key), s.message());
}

bool Matches(std::string_view pattern, const std::string& name) {
  if (pattern == "*") return true;
  const std::string p(pattern);
  return ::fnmatch(p.c_str(), name.c_str(), 0) == 0;
}

// What an item check says of one item: "" if it is a valid key.
std::string ItemError(std::string_view item, uint32_t max_key_bytes) {
  if (item.empty()) {
    return absl::StrFormat("ERR item is empty; cuckood items are 1 to %u bytes", max_key_bytes);
  }
  if (item.size() > max_key_bytes) {
    return absl::StrFormat("ERR item is %u bytes; the server's limit (--max-key-bytes) is %u bytes",
                           item.size(), max_key_bytes);
  }
  return std::string();
}

}  // namespace cuckoo::server::redis
