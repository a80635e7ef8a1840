// Fuzzes the access file's parser (server/security/access.h: AccessTable::Parse),
// which reads whatever an operator's Secret holds on every reload, and the
// glob matcher every call runs. Checked beyond "no crash, no sanitizer
// report":
//   - a parsed table's entries are well formed: a valid name, at least one
//     grant with a non-empty pattern, a token's hash findable, a cert's
//     selector set;
//   - a refusal is INVALID_ARGUMENT and names the source and a line;
//   - MatchesPattern agrees with a plain recursive matcher (differential) on
//     a pattern and a name cut from the input.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "server/security/access.h"

namespace {

[[noreturn]] void Fail(const char* what, const std::string& detail) {
  std::fprintf(stderr, "access_fuzz: %s: %s\n", what, detail.c_str());
  std::abort();
}

// The reference: the textbook dynamic programme over (pattern prefix,
// name prefix), O(|p| * |n|), another algorithm than the greedy scan. The
// pattern is first read into units: `*`, `?`, or one literal byte (`\x` is
// a literal x; a lone `\` at the end, which the access file refuses, a
// literal backslash).
bool Reference(std::string_view pattern, std::string_view n) {
  struct Unit {
    char kind;  // '*', '?' or 'l' (literal).
    char c;
  };
  std::vector<Unit> p;
  for (size_t i = 0; i < pattern.size(); ++i) {
    if (pattern[i] == '\\' && i + 1 < pattern.size()) {
      p.push_back({'l', pattern[++i]});
    } else if (pattern[i] == '*' || pattern[i] == '?') {
      p.push_back({pattern[i], 0});
    } else {
      p.push_back({'l', pattern[i]});
    }
  }
  std::vector<std::vector<bool>> m(p.size() + 1, std::vector<bool>(n.size() + 1, false));
  m[0][0] = true;
  for (size_t i = 1; i <= p.size(); ++i) {
    m[i][0] = m[i - 1][0] && p[i - 1].kind == '*';
    for (size_t j = 1; j <= n.size(); ++j) {
      if (p[i - 1].kind == '*') {
        m[i][j] = m[i - 1][j] || m[i][j - 1];
      } else {
        m[i][j] = m[i - 1][j - 1] && (p[i - 1].kind == '?' || p[i - 1].c == n[j - 1]);
      }
    }
  }
  return m[p.size()][n.size()];
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<cuckoo::server::AccessTable> table =
      cuckoo::server::AccessTable::Parse(text, "fuzz");
  if (table.ok()) {
    for (const cuckoo::server::AccessEntry& e : table->entries()) {
      if (e.name.empty() || e.name.size() > 64) Fail("bad name accepted", e.name);
      if (e.grants.empty()) Fail("entry without grants", e.name);
      for (const cuckoo::server::Grant& g : e.grants) {
        if (g.pattern.empty()) Fail("empty pattern accepted", e.name);
      }
      if (e.kind == cuckoo::server::AccessEntry::Kind::kToken) {
        if (table->FindToken(e.sha256) != &e) Fail("token not findable", e.name);
      } else if (e.selector == cuckoo::server::AccessEntry::Selector::kNone || e.value.empty()) {
        Fail("cert without selector", e.name);
      }
    }
  } else {
    const std::string message(table.status().message());
    if (table.status().code() != absl::StatusCode::kInvalidArgument) {
      Fail("refused with another code", message);
    }
    if (message.rfind("fuzz:", 0) != 0) Fail("refusal does not name the source", message);
  }
  // Differential: the input's first half as the pattern, the rest as the
  // name (short: the reference is quadratic).
  const std::string_view all(text);
  const std::string_view pattern = all.substr(0, std::min<size_t>(all.size() / 2, 64));
  const std::string_view name = all.substr(all.size() / 2, 256);
  if (cuckoo::server::MatchesPattern(pattern, name) != Reference(pattern, name)) {
    Fail("matcher disagrees with the reference", std::string(pattern) + " vs " + std::string(name));
  }
  return 0;
}
