#include "server/security/access.h"

#include <openssl/evp.h>

#include <algorithm>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "base/access_file.h"
#include "base/utf8.h"

namespace cuckoo::server {
namespace {

constexpr size_t kMaxValueBytes = 1024;
constexpr size_t kMaxEntries = 100'000;

// Splits a line into fields: runs of spaces or tabs separate them, and a
// field may be double-quoted, whole ("cn:a b") or from some point to its end
// (subject:"CN=a b,O=Acme", as the spec writes it), to hold spaces and \" or
// \\. An error names what is wrong (the caller adds the line).
absl::StatusOr<std::vector<std::string>> Fields(absl::string_view line) {
  std::vector<std::string> out;
  size_t i = 0;
  while (true) {
    while (i < line.size() && (line[i] == ' ' || line[i] == '\t')) ++i;
    if (i == line.size()) return out;
    std::string field;
    // Unquoted characters, then maybe a quoted rest: "cn:a b" and
    // subject:"CN=a b,O=Acme" are both one field.
    while (i < line.size() && line[i] != ' ' && line[i] != '\t' && line[i] != '"') {
      field.push_back(line[i++]);
    }
    if (i < line.size() && line[i] == '"') {
      ++i;
      bool closed = false;
      while (i < line.size()) {
        const char c = line[i++];
        if (c == '"') {
          closed = true;
          break;
        }
        if (c == '\\') {
          if (i == line.size() || (line[i] != '"' && line[i] != '\\')) {
            return absl::InvalidArgumentError("a backslash in quotes must be followed by \" or \\");
          }
          field.push_back(line[i++]);
          continue;
        }
        field.push_back(c);
      }
      if (!closed) return absl::InvalidArgumentError("a quoted field is not closed");
      if (i < line.size() && line[i] != ' ' && line[i] != '\t') {
        return absl::InvalidArgumentError("a closing quote must be followed by a space or the end");
      }
    }
    out.push_back(std::move(field));
  }
}

bool Printable(absl::string_view s) {
  return FirstInvalidUtf8Byte(s) == absl::string_view::npos &&
         std::all_of(s.begin(), s.end(), [](char c) {
           const auto u = static_cast<unsigned char>(c);
           return u >= ' ' && u != 0x7F;
         });
}

}  // namespace

std::string_view AccessName(Access access) {
  switch (access) {
    case Access::kRead:
      return "read";
    case Access::kWrite:
      return "write";
    case Access::kAdmin:
      return "admin";
  }
  return "?";
}

std::array<uint8_t, 32> Sha256(std::string_view data) {
  std::array<uint8_t, 32> out{};
  unsigned int len = 0;
  EVP_Digest(data.data(), data.size(), out.data(), &len, EVP_sha256(), nullptr);
  return out;
}

// Glob matching with `*`, `?` and `\` escapes (base/access_file.h) by the
// usual greedy scan that backtracks only to the last `*`: linear in
// practice, at worst |pattern| * |name|. Bytes, as fnmatch(3) in the C
// locale: `?` is one byte. fnmatch would need NUL-terminated copies of both.
bool MatchesPattern(std::string_view pattern, std::string_view name) {
  size_t p = 0, n = 0;
  size_t star = std::string_view::npos, star_n = 0;
  while (n < name.size()) {
    if (p < pattern.size() && pattern[p] == '*') {
      star = p++;
      star_n = n;
      continue;
    }
    // The pattern's next byte, `\x` as a literal x.
    const bool escaped = p + 1 < pattern.size() && pattern[p] == '\\';
    if (p < pattern.size() &&
        ((!escaped && pattern[p] == '?') || pattern[escaped ? p + 1 : p] == name[n])) {
      p += escaped ? 2 : 1;
      ++n;
    } else if (star != std::string_view::npos) {
      p = star + 1;
      n = ++star_n;
    } else {
      return false;
    }
  }
  while (p < pattern.size() && pattern[p] == '*') ++p;
  return p == pattern.size();
}

bool AccessEntry::Allows(Access access, std::string_view filter) const {
  for (const Grant& g : grants) {
    if (g.access >= access && MatchesPattern(g.pattern, filter)) return true;
  }
  return false;
}

bool AccessEntry::AdminOfAll() const {
  return std::any_of(grants.begin(), grants.end(),
                     [](const Grant& g) { return g.access == Access::kAdmin && g.pattern == "*"; });
}

absl::StatusOr<AccessTable> AccessTable::Parse(absl::string_view text, absl::string_view source) {
  AccessTable table;
  absl::flat_hash_map<std::string, int> names;
  absl::flat_hash_map<std::string, int> selectors;
  int line_no = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    auto bad = [&](absl::string_view why) {
      return absl::InvalidArgumentError(absl::StrFormat("%s:%d: %s", source, line_no, why));
    };
    // UTF-8 (filter names, and so grant patterns, are), no control
    // characters but tabs.
    if (!Printable(absl::StrReplaceAll(line, {{"\t", " "}}))) {
      return bad("the line holds a control character or bytes that are not UTF-8");
    }
    const absl::string_view trimmed = absl::StripAsciiWhitespace(line);
    if (trimmed.empty() || trimmed.front() == '#') continue;
    absl::StatusOr<std::vector<std::string>> fields = Fields(trimmed);
    if (!fields.ok()) return bad(fields.status().message());
    if (fields->size() < 4) {
      return bad(absl::StrFormat(
          "expected KIND NAME CREDENTIAL GRANT... (e.g. \"token billing-reader sha256:<hex> "
          "read:billing.*\"); found %d fields",
          fields->size()));
    }
    if (table.entries_.size() == kMaxEntries) {
      return bad(absl::StrFormat("more than %d entries", kMaxEntries));
    }
    AccessEntry e;
    e.line = line_no;
    const std::string& kind = (*fields)[0];
    if (kind == "token") {
      e.kind = AccessEntry::Kind::kToken;
    } else if (kind == "cert") {
      e.kind = AccessEntry::Kind::kCert;
    } else {
      return bad(
          absl::StrFormat("unknown kind \"%s\": expected token or cert", absl::CHexEscape(kind)));
    }
    e.name = (*fields)[1];
    if (!IsAccessName(e.name)) {
      return bad(absl::StrFormat(
          "name \"%s\" must be 1 to %d characters of letters, digits, '.', '_' and '-'",
          absl::CHexEscape(e.name), kMaxAccessNameBytes));
    }
    if (auto [it, fresh] = names.emplace(e.name, line_no); !fresh) {
      return bad(absl::StrFormat("name \"%s\" is already used on line %d", e.name, it->second));
    }
    const std::string& credential = (*fields)[2];
    std::string selector_key;
    if (e.kind == AccessEntry::Kind::kToken) {
      absl::string_view hex = credential;
      std::string bytes;
      if (!absl::ConsumePrefix(&hex, "sha256:") || hex.size() != 64 ||
          !std::all_of(hex.begin(), hex.end(), absl::ascii_isxdigit)) {
        return bad(absl::StrFormat(
            "a token's credential must be sha256:<64 hex digits>, the SHA-256 of the token "
            "(cuckooctl hash-token makes one); found \"%s\"",
            absl::CHexEscape(credential.substr(0, 80))));
      }
      bytes = absl::HexStringToBytes(absl::AsciiStrToLower(std::string(hex)));
      std::copy(bytes.begin(), bytes.end(), e.sha256.begin());
      selector_key = "token/" + bytes;
    } else {
      const size_t colon = credential.find(':');
      const absl::string_view what = absl::string_view(credential).substr(0, colon);
      if (colon == std::string::npos || colon + 1 == credential.size()) {
        return bad(absl::StrFormat(
            "a cert's credential must be cn:VALUE, san:VALUE or subject:VALUE; found \"%s\"",
            absl::CHexEscape(credential.substr(0, 80))));
      }
      if (what == "cn") {
        e.selector = AccessEntry::Selector::kCommonName;
      } else if (what == "san") {
        e.selector = AccessEntry::Selector::kSan;
      } else if (what == "subject") {
        e.selector = AccessEntry::Selector::kSubject;
      } else {
        return bad(absl::StrFormat(
            "a cert's credential must start with cn:, san: or subject:; found \"%s:\"",
            absl::CHexEscape(what)));
      }
      e.value = credential.substr(colon + 1);
      if (e.value.size() > kMaxValueBytes) {
        return bad(absl::StrFormat("the certificate value is over %d bytes", kMaxValueBytes));
      }
      selector_key = absl::StrCat("cert/", what, ":", e.value);
    }
    if (auto [it, fresh] = selectors.emplace(selector_key, line_no); !fresh) {
      return bad(absl::StrFormat("the same credential is already given on line %d", it->second));
    }
    for (size_t i = 3; i < fields->size(); ++i) {
      absl::string_view grant = (*fields)[i];
      const size_t colon = grant.find(':');
      const absl::string_view level = grant.substr(0, colon);
      Grant g;
      if (level == "read") {
        g.access = Access::kRead;
      } else if (level == "write") {
        g.access = Access::kWrite;
      } else if (level == "admin") {
        g.access = Access::kAdmin;
      }
      if (colon == absl::string_view::npos || !IsAccessGrantKind(level)) {
        return bad(
            absl::StrFormat("grant \"%s\" must be read:PATTERN, write:PATTERN or admin:PATTERN",
                            absl::CHexEscape(grant.substr(0, 80))));
      }
      g.pattern = std::string(grant.substr(colon + 1));
      if (const std::string why = AccessPatternError(g.pattern); !why.empty()) {
        return bad(absl::StrFormat(
            "grant \"%s\": %s (a pattern is a glob over filter names: '*' any run of bytes, '?' "
            "one, '\\' before a character makes it literal; quote a pattern with spaces: "
            "read:\"my filter*\")",
            absl::CHexEscape(grant.substr(0, 80)), why));
      }
      e.grants.push_back(std::move(g));
    }
    if (e.kind == AccessEntry::Kind::kToken) {
      table.by_hash_.emplace(std::string(e.sha256.begin(), e.sha256.end()), table.entries_.size());
    }
    table.entries_.push_back(std::move(e));
  }
  return table;
}

const AccessEntry* AccessTable::FindToken(const std::array<uint8_t, 32>& sha256) const {
  auto it = by_hash_.find(absl::string_view(reinterpret_cast<const char*>(sha256.data()), 32));
  return it == by_hash_.end() ? nullptr : &entries_[it->second];
}

const AccessEntry* AccessTable::FindCert(const std::vector<std::string_view>& common_names,
                                         const std::vector<std::string_view>& sans,
                                         const std::vector<std::string_view>& subjects,
                                         bool* ambiguous) const {
  if (ambiguous != nullptr) *ambiguous = false;
  const AccessEntry* found = nullptr;
  for (const AccessEntry& e : entries_) {
    if (e.kind != AccessEntry::Kind::kCert) continue;
    const std::vector<std::string_view>* values = nullptr;
    switch (e.selector) {
      case AccessEntry::Selector::kCommonName:
        values = &common_names;
        break;
      case AccessEntry::Selector::kSan:
        values = &sans;
        break;
      case AccessEntry::Selector::kSubject:
        values = &subjects;
        break;
      case AccessEntry::Selector::kNone:
        continue;
    }
    if (std::find(values->begin(), values->end(), e.value) == values->end()) continue;
    if (found != nullptr) {
      if (ambiguous != nullptr) *ambiguous = true;
      return nullptr;
    }
    found = &e;
  }
  return found;
}

}  // namespace cuckoo::server
