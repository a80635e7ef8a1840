// libFuzzer target for the RESP command parser (server/resp/resp_protocol.h).
//
// An input is a small header, then the bytes a client sends:
//   byte 0      seeds the sizes of the reads the stream is split into
//   bytes 1, 2  the parser's limits (see resp_fuzz_limits.h; 0xff in byte 2:
//               the server's defaults)
//   the rest    the stream
// The stream is parsed
//   1. whole, as one read, and
//   2. split into reads of pseudo-random sizes (some empty: the same bytes
//      again), each read appended to a fresh copy of the unconsumed bytes so
//      that the data moves between calls,
// and both must give the same commands, the same error and leave the same
// bytes unconsumed. Every result is checked: consumed <= the bytes given and
// > 0, kNeedMore consumes nothing, at least one and at most max_args
// arguments, none over max_bulk_bytes, each a view into the consumed bytes
// unless the command had quotes or escapes to undo (then it is the parser's
// own storage), and the bytes a pending command holds stay within
// max_command_bytes + max_inline_bytes + 1. Each command is then written as a
// RESP array and parsed again by a fresh parser: the same arguments, every
// byte consumed. Any mismatch is printed and __builtin_trap().
//
// Built with -fsanitize=fuzzer,address,undefined by clang (scripts/fuzz.sh),
// or with tests/fuzz/standalone_main.cc as a corpus replay under g++.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "server/resp/resp_protocol.h"
#include "tests/fuzz/resp_fuzz_limits.h"

namespace {

using cuckoo::server::resp::Parser;
using cuckoo::server::resp::ParserLimits;
using Result = Parser::Result;

std::string Printable(std::string_view s) {
  std::string out;
  for (unsigned char c : s) {
    if (c >= 0x20 && c < 0x7f && c != '\\') {
      out.push_back(static_cast<char>(c));
    } else {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\x%02x", c);
      out += buf;
    }
  }
  return out;
}

[[noreturn]] void Fail(const std::string& what, std::string_view stream) {
  std::fprintf(stderr, "resp_fuzz: %s\n  stream (%zu bytes): \"%s\"\n", what.c_str(), stream.size(),
               Printable(stream).c_str());
  __builtin_trap();
}

// What the connection saw: each command's byte count and arguments, then the
// error (if any) and the bytes left.
struct Transcript {
  std::vector<std::pair<size_t, std::vector<std::string>>> commands;
  std::string error;
  size_t left = 0;
  bool operator==(const Transcript&) const = default;
};

std::string Show(const Transcript& t) {
  std::string s;
  for (const auto& [consumed, args] : t.commands) {
    s += std::to_string(consumed) + " [";
    // absl::StrAppend, not "literal" + std::string: g++ 12 at -O3 reports a
    // false -Wrestrict inside that operator+ (as tests/util/keys.h says).
    for (const std::string& a : args) absl::StrAppend(&s, "\"", Printable(a), "\" ");
    s += "] ";
  }
  return s + "error \"" + t.error + "\" left " + std::to_string(t.left);
}

bool Within(std::string_view inner, std::string_view outer) {
  if (inner.empty()) return true;
  const char* b = outer.data();
  return b != nullptr && inner.data() >= b && inner.data() + inner.size() <= b + outer.size();
}

// Checks one Parse result on `data`; on kCommand appends it to *t.
void CheckResult(Result r, std::string_view data, size_t consumed,
                 const std::vector<std::string_view>& args, const ParserLimits& limits,
                 const Parser& parser, Transcript* t, std::string_view stream) {
  if (r == Result::kNeedMore) {
    if (consumed != 0 || !args.empty()) Fail("kNeedMore consumed bytes or gave args", stream);
    if (data.size() > limits.max_command_bytes + limits.max_inline_bytes + 1) {
      Fail("a pending command holds " + std::to_string(data.size()) + " bytes", stream);
    }
    const size_t hint = parser.pending_hint();
    if (hint != 0 && (hint <= data.size() || hint > limits.max_command_bytes)) {
      Fail("pending_hint " + std::to_string(hint) + " with " + std::to_string(data.size()) +
               " bytes",
           stream);
    }
    return;
  }
  if (r != Result::kCommand) return;
  if (consumed == 0 || consumed > data.size()) {
    Fail("consumed " + std::to_string(consumed) + " of " + std::to_string(data.size()), stream);
  }
  if (args.empty() || args.size() > limits.max_args) {
    Fail(std::to_string(args.size()) + " arguments", stream);
  }
  const std::string_view bytes = data.substr(0, consumed);
  const bool unescaped = bytes.find_first_of("\"'\\") != std::string_view::npos;
  std::vector<std::string> copy;
  for (std::string_view a : args) {
    if (a.size() > limits.max_bulk_bytes) Fail("an argument over max_bulk_bytes", stream);
    if (!Within(a, bytes) && !unescaped) Fail("an argument outside the command's bytes", stream);
    copy.emplace_back(a);
  }
  t->commands.emplace_back(consumed, std::move(copy));
}

Transcript FeedWhole(const ParserLimits& limits, std::string_view stream) {
  Parser parser(limits);
  Transcript t;
  std::string_view data = stream;
  size_t consumed = 0;
  std::vector<std::string_view> args;
  std::string error;
  for (;;) {
    const Result r = parser.Parse(data, &consumed, &args, &error);
    CheckResult(r, data, consumed, args, limits, parser, &t, stream);
    if (r == Result::kCommand) {
      data.remove_prefix(consumed);
      continue;
    }
    if (r == Result::kError) t.error = error;
    break;
  }
  t.left = data.size();
  return t;
}

Transcript FeedSplit(const ParserLimits& limits, std::string_view stream, uint8_t seed) {
  Parser parser(limits);
  Transcript t;
  std::string buf;
  size_t consumed = 0;
  std::vector<std::string_view> args;
  std::string error;
  uint32_t rng = (0x9e3779b9u ^ (seed * 0x01000193u)) | 1u;  // never 0
  const uint32_t max_chunk = 1u + seed % 17u;
  size_t at = 0;
  for (;;) {
    rng ^= rng << 13;
    rng ^= rng >> 17;
    rng ^= rng << 5;
    const size_t n = std::min<size_t>(rng % (max_chunk + 1), stream.size() - at);
    std::string moved;
    moved.reserve(buf.size() + n);
    moved.append(buf);
    moved.append(stream.substr(at, n));
    buf.swap(moved);
    at += n;
    for (;;) {
      const Result r = parser.Parse(buf, &consumed, &args, &error);
      CheckResult(r, buf, consumed, args, limits, parser, &t, stream);
      if (r == Result::kCommand) {
        buf.erase(0, consumed);
        parser.ReleaseArgs();
        continue;
      }
      if (r == Result::kError) {
        t.error = error;
        t.left = buf.size() + (stream.size() - at);
        return t;
      }
      break;
    }
    if (at == stream.size()) break;
  }
  t.left = buf.size();
  return t;
}

// Writes each command as a RESP array and parses it again.
void CheckReencoded(const Transcript& t, std::string_view stream) {
  for (const auto& [consumed, args] : t.commands) {
    std::string encoded = absl::StrCat("*", args.size(), "\r\n");
    for (const std::string& a : args) {
      absl::StrAppend(&encoded, "$", a.size(), "\r\n");
      encoded += a;
      encoded += "\r\n";
    }
    Parser parser(ParserLimits{});
    size_t n = 0;
    std::vector<std::string_view> again;
    std::string error;
    if (parser.Parse(encoded, &n, &again, &error) != Result::kCommand || n != encoded.size() ||
        std::vector<std::string>(again.begin(), again.end()) != args) {
      Fail("re-encoded command parsed differently: \"" + Printable(encoded) + "\" " + error,
           stream);
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view in(reinterpret_cast<const char*>(data), size);
  uint8_t seed = 0, a = 0, b = 0xff;
  if (in.size() >= 3) {
    seed = static_cast<uint8_t>(in[0]);
    a = static_cast<uint8_t>(in[1]);
    b = static_cast<uint8_t>(in[2]);
    in.remove_prefix(3);
  }
  const ParserLimits limits = cuckoo::testing::RespLimitsFrom(a, b);
  const Transcript whole = FeedWhole(limits, in);
  const Transcript split = FeedSplit(limits, in, seed);
  if (!(whole == split)) {
    Fail("whole and split differ:\n  whole: " + Show(whole) + "\n  split: " + Show(split), in);
  }
  CheckReencoded(whole, in);
  return 0;
}
