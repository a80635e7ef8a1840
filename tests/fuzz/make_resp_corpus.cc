// Writes the seed corpus of the RESP fuzzer (tests/fuzz/resp_fuzz.cc) into a
// directory: pipelined commands (RESP arrays, binary-safe bulks, inline
// commands with quotes and escapes, empty commands between them) and one
// stream for each protocol error the parser reports. Each is written with the
// server's default limits read whole and in small reads, and again with small
// limits (see resp_fuzz.cc's header). A few KB in all; generated at build or
// test time, never committed.
//
//   make_resp_corpus <dir>
//
// Every seed must parse (with the default limits) to the commands or the
// error this file expects, so a change that breaks the corpus fails here,
// not silently in the fuzzer. Exits non-zero on any failure.
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

#include "server/resp/resp_protocol.h"
#include "tests/fuzz/resp_fuzz_limits.h"

namespace {

using cuckoo::server::resp::Parser;
using cuckoo::server::resp::ParserLimits;

struct Seed {
  std::string name;
  std::string stream;
  size_t commands;    // How many commands it holds before any error ...
  std::string error;  // ... and the error's text, or "" when it ends cleanly.
  // The limits (resp_fuzz.cc's header bytes 1 and 2); 0xff in b: the defaults.
  uint8_t a = 0, b = 0xff;
};

// A string literal with its NULs.
template <size_t N>
std::string S(const char (&s)[N]) {
  return std::string(s, N - 1);
}

bool Write(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  return static_cast<bool>(out);
}

// Parses the stream whole with the seed's limits: true if it gives the
// seed's commands and error.
bool AsExpected(const Seed& s) {
  Parser parser(cuckoo::testing::RespLimitsFrom(s.a, s.b));
  std::string_view data = s.stream;
  size_t consumed = 0, commands = 0;
  std::vector<std::string_view> args;
  std::string error;
  for (;;) {
    const Parser::Result r = parser.Parse(data, &consumed, &args, &error);
    if (r == Parser::Result::kCommand) {
      ++commands;
      data.remove_prefix(consumed);
      continue;
    }
    if (r == Parser::Result::kNeedMore) error.clear();
    break;
  }
  if (commands == s.commands && error == s.error) return true;
  std::fprintf(stderr, "make_resp_corpus: %s gives %zu commands and error \"%s\"\n", s.name.c_str(),
               commands, error.c_str());
  return false;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s <corpus dir>\n", argv[0]);
    return 2;
  }
  const std::string dir = argv[1];
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) {
    std::fprintf(stderr, "make_resp_corpus: cannot create %s: %s\n", dir.c_str(),
                 ec.message().c_str());
    return 1;
  }
  const std::string e = "ERR Protocol error: ";
  const std::vector<Seed> seeds = {
      {"empty", "", 0, ""},
      {"pipelined",
       "*3\r\n$6\r\nCF.ADD\r\n$1\r\nf\r\n$5\r\nhello\r\n*3\r\n$9\r\nCF.EXISTS\r\n$1\r\nf\r\n"
       "$5\r\nhello\r\n*1\r\n$4\r\nPING\r\n*2\r\n$4\r\nECHO\r\n$0\r\n\r\n",
       4, ""},
      {"binary-bulks", S("*2\r\n$4\r\n\0\r\n\xff\r\n$2\r\n\r\n\r\n"), 1, ""},
      {"partial", "*2\r\n$4\r\nPING\r\n$10\r\nabc", 0, ""},
      {"inline", "PING\r\nCF.ADD f item\nCF.EXISTS\tf  item \r\n", 3, ""},
      {"inline-quotes",
       "ECHO \"a b\" 'c d' \"\\x41\\n\\r\\t\\b\\a\\\\\\\"\\z\" 'it\\'s' \"\" ''\r\n"
       "SET a\"b c\" x\r\n",
       2, ""},
      {"empty-commands", "\r\n\n  \r\n*0\r\n*-1\r\n*-10\r\nPING\r\n*0\r\n", 1, ""},
      {"mixed", "*1\r\n$4\r\nPING\r\nPING\r\n*1\r\n$4\r\nPING\r\n", 3, ""},
      {"nul-in-inline", S("ECHO a\0b\r\n"), 1, ""},
      {"bulk-2gib", "*1\r\n$2147483648\r\n", 0,
       e + "bulk length 2147483648 is over the limit of 67108864 bytes"},
      {"bulk-negative", "*2\r\n$4\r\nPING\r\n$-1\r\n", 0, e + "invalid bulk length"},
      {"bulk-not-a-number", "*1\r\n$x\r\n", 0, e + "invalid bulk length"},
      {"mbulk-negative-skipped-then-bad", "*-2\r\n*x\r\n", 0, e + "invalid multibulk length"},
      {"mbulk-over-int", "*3000000000\r\n", 0, e + "invalid multibulk length"},
      {"mbulk-million", "*1000000\r\n", 0, e + "1000000 arguments is over the limit of 100016"},
      {"expected-dollar", "*3\r\n$3\r\nSET\r\n$1\r\nx\r\nfooz\r\n", 0, e + "expected '$', got 'f'"},
      {"missing-crlf", "*1\r\n$3\r\nabcXY", 0, e + "bulk data not followed by CRLF"},
      {"cr-without-lf", "*1\rx", 0, e + "a length line's CR is not followed by LF"},
      {"unbalanced-double", "PING\r\nECHO \"abc\r\n", 1, e + "unbalanced quotes in request"},
      {"unbalanced-single", "ECHO 'a'b\n", 0, e + "unbalanced quotes in request"},
      // With small limits (0xff, 0x60): arguments of up to 21 bytes, 10 of
      // them, lines of up to 44 bytes, commands of up to 100.
      {"too-big-inline", std::string(45, 'a'), 0, e + "too big inline request", 0xff, 0x60},
      {"too-big-mbulk-count", "*" + std::string(44, '1'), 0, e + "too big mbulk count string", 0xff,
       0x60},
      {"too-big-bulk-count", "*1\r\n$" + std::string(44, '1'), 0, e + "too big bulk count string",
       0xff, 0x60},
      {"bulk-over-small-limit", "*1\r\n$22\r\n", 0,
       e + "bulk length 22 is over the limit of 21 bytes", 0xff, 0x60},
      {"args-over-small-limit", "a b c d e f g h i j k\n", 0,
       e + "11 arguments is over the limit of 10", 0xff, 0x60},
      {"command-over-small-limit",
       "*5\r\n$20\r\n01234567890123456789\r\n$20\r\n01234567890123456789\r\n"
       "$20\r\n01234567890123456789\r\n$20\r\n",
       0, e + "command of 112 bytes or more is over the limit of 100 bytes", 0xff, 0x60},
  };
  bool ok = true;
  size_t files = 0, bytes = 0;
  for (const Seed& s : seeds) {
    if (!AsExpected(s)) {
      ok = false;
      continue;
    }
    // Header: split seed, limits a, limits b. Whole (the seed's limits), in
    // reads of up to 5 bytes, and with small limits.
    const std::string limits = {static_cast<char>(s.a), static_cast<char>(s.b)};
    const std::pair<std::string, std::string> inputs[] = {
        {s.name + ".bin", std::string(1, '\x00') + limits + s.stream},
        {s.name + "-split.bin", std::string(1, '\x04') + limits + s.stream},
        {s.name + "-small.bin", std::string("\x0b\xff\x60", 3) + s.stream},
    };
    for (const auto& [name, input] : inputs) {
      if (!Write(dir + "/" + name, input)) {
        std::fprintf(stderr, "make_resp_corpus: cannot write %s/%s\n", dir.c_str(), name.c_str());
        ok = false;
        continue;
      }
      ++files;
      bytes += input.size();
    }
  }
  std::printf("make_resp_corpus: %zu seeds, %zu bytes in %s\n", files, bytes, dir.c_str());
  return ok ? 0 : 1;
}
