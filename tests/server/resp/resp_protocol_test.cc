// The RESP parser and reply writer (server/resp/resp_protocol.h): Redis's
// accepted syntax and error wordings, the limits refused from a header before
// its bytes arrive, identical results however the input is split into reads,
// and byte-exact replies in RESP2 and RESP3.
#include "server/resp/resp_protocol.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <new>
#include <string>
#include <string_view>
#include <vector>

// Counts the bytes the process allocates, to show that a header declaring
// many arguments does not allocate for them.
namespace {
std::atomic<size_t> g_allocated{0};
}  // namespace

// g++ sees the frees of memory from this operator new, inlined, and would
// call them mismatched.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
#endif
void* operator new(size_t n) {
  g_allocated.fetch_add(n, std::memory_order_relaxed);
  if (void* p = std::malloc(n == 0 ? 1 : n)) return p;
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, size_t) noexcept { std::free(p); }

namespace cuckoo::server::resp {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using Result = Parser::Result;
using namespace std::string_literals;

ParserLimits SmallLimits() {
  ParserLimits l;
  l.max_bulk_bytes = 16;
  l.max_args = 8;
  l.max_inline_bytes = 32;
  l.max_command_bytes = 128;
  return l;
}

std::string Show(const std::vector<std::string_view>& args) {
  std::string s = "[";
  for (size_t i = 0; i < args.size(); ++i) {
    if (i > 0) s += ",";
    s += "'";
    s.append(args[i]);
    s += "'";
  }
  return s + "]";
}

// What a connection would see: each command (with its byte count) and the
// error if any, then the bytes left unconsumed.
std::vector<std::string> FeedWhole(const ParserLimits& limits, std::string_view input) {
  Parser parser(limits);
  std::vector<std::string> out;
  std::string buf(input);
  size_t consumed = 0;
  std::vector<std::string_view> args;
  std::string error;
  for (;;) {
    const Result r = parser.Parse(buf, &consumed, &args, &error);
    if (r == Result::kCommand) {
      out.push_back(std::to_string(consumed) + " " + Show(args));
      buf.erase(0, consumed);
      continue;
    }
    if (r == Result::kError) out.push_back("error: " + error);
    break;
  }
  out.push_back("left " + std::to_string(buf.size()));
  return out;
}

// The same input arriving one byte at a time, each time into a freshly
// allocated buffer (so the data moves between calls).
std::vector<std::string> FeedBytewise(const ParserLimits& limits, std::string_view input) {
  Parser parser(limits);
  std::vector<std::string> out;
  std::string buf;
  size_t consumed = 0;
  std::vector<std::string_view> args;
  std::string error;
  for (size_t i = 0; i < input.size(); ++i) {
    std::string moved = buf;
    moved.push_back(input[i]);
    buf.swap(moved);
    for (;;) {
      const Result r = parser.Parse(buf, &consumed, &args, &error);
      if (r == Result::kCommand) {
        out.push_back(std::to_string(consumed) + " " + Show(args));
        buf.erase(0, consumed);
        continue;
      }
      if (r == Result::kError) {
        out.push_back("error: " + error);
        out.push_back("left " + std::to_string(buf.size() + input.size() - i - 1));
        return out;
      }
      EXPECT_EQ(consumed, 0u);
      EXPECT_TRUE(args.empty());
      break;
    }
  }
  out.push_back("left " + std::to_string(buf.size()));
  return out;
}

// The only command in `input`, or its error.
std::string ParseOne(const ParserLimits& limits, std::string_view input) {
  Parser parser(limits);
  size_t consumed = 0;
  std::vector<std::string_view> args;
  std::string error;
  switch (parser.Parse(input, &consumed, &args, &error)) {
    case Result::kCommand:
      return Show(args) + " +" + std::to_string(consumed);
    case Result::kNeedMore:
      return "need more";
    case Result::kError:
      return "error: " + error;
  }
  return "?";
}

TEST(RespParser, ParsesAnArrayOfBulkStrings) {
  EXPECT_EQ(ParseOne({}, "*2\r\n$6\r\nCF.ADD\r\n$1\r\nk\r\n"), "['CF.ADD','k'] +23");
  EXPECT_EQ(ParseOne({}, "*1\r\n$0\r\n\r\n"), "[''] +10");
}

TEST(RespParser, WaitsForTheRestOfACommand) {
  EXPECT_EQ(ParseOne({}, ""), "need more");
  EXPECT_EQ(ParseOne({}, "*2\r\n$4\r\nPING"), "need more");
  EXPECT_EQ(ParseOne({}, "*2\r\n$4\r\nPING\r"), "need more");
  EXPECT_EQ(ParseOne({}, "*2\r\n$4\r\nPING\r\n$3"), "need more");
  EXPECT_EQ(ParseOne({}, "PING"), "need more");
}

TEST(RespParser, PipelinedCommandsComeOneAtATime) {
  const std::string in = "*1\r\n$4\r\nPING\r\n*2\r\n$4\r\nECHO\r\n$2\r\nhi\r\nPING x\r\n*1\r\n$1";
  EXPECT_THAT(FeedWhole({}, in),
              ElementsAre("14 ['PING']", "22 ['ECHO','hi']", "8 ['PING','x']", "left 6"));
}

TEST(RespParser, BulksAreBinarySafe) {
  const std::string in = "*2\r\n$5\r\na\0\r\nb\r\n$2\r\n\r\n\r\n"s;
  Parser parser({});
  size_t consumed = 0;
  std::vector<std::string_view> args;
  std::string error;
  ASSERT_EQ(parser.Parse(in, &consumed, &args, &error), Result::kCommand);
  EXPECT_EQ(consumed, in.size());
  ASSERT_EQ(args.size(), 2u);
  EXPECT_EQ(args[0], std::string_view("a\0\r\nb", 5));
  EXPECT_EQ(args[1], "\r\n");
}

TEST(RespParser, ArgumentsAreViewsIntoTheData) {
  const std::string in = "*2\r\n$3\r\nGET\r\n$1\r\nk\r\n";
  Parser parser({});
  size_t consumed = 0;
  std::vector<std::string_view> args;
  std::string error;
  ASSERT_EQ(parser.Parse(in, &consumed, &args, &error), Result::kCommand);
  EXPECT_EQ(args[0].data(), in.data() + 8);
  EXPECT_EQ(args[1].data(), in.data() + 17);
}

TEST(RespParser, ACommandSplitAtEveryByteParsesIdentically) {
  const std::vector<std::string> inputs = {
      "*3\r\n$6\r\nCF.ADD\r\n$1\r\nk\r\n$5\r\nhello\r\n*1\r\n$4\r\nPING\r\n",
      "*2\r\n$3\r\na\0b\r\n$4\r\n\r\n\r\n\r\n"s,
      "PING\r\nECHO \"a b\" 'c d'\n\r\n  \n*0\r\n*-1\r\n*1\r\n$1\r\nx\r\n",
      "set \"\\x41\\n\" '\\'q'\r\n",
      "*2\r\n$3\r\nabcXY",
      "*1\r\n$-1\r\n",
      "*x\r\n",
      "*1\r\nfoo\r\n",
      "\"unbalanced\r\n",
      "*1\r\n$2000000000\r\n",
      std::string(40, 'a') + "\r\n",
      "*1\r\n$" + std::string(40, '1'),
      "*" + std::string(40, '1'),
      "*9\r\n",
      "*1\r\n$16\r\n0123456789abcdef\r\n",
      "*8\r\n$16\r\n0123456789abcdef\r\n$16\r\n0123456789abcdef\r\n$16\r\n0123456789abcdef\r\n"
      "$16\r\n0123456789abcdef\r\n",
      "*1\rx",
  };
  for (const std::string& in : inputs) {
    SCOPED_TRACE(in);
    EXPECT_EQ(FeedWhole(SmallLimits(), in), FeedBytewise(SmallLimits(), in));
    EXPECT_EQ(FeedWhole({}, in), FeedBytewise({}, in));
  }
}

TEST(RespParser, BulkHeadersWithMoreDataAfterThemParseAsWhenTheyArriveAlone) {
  // With a dozen bytes or more after its '$', a header takes a shorter path
  // (FeedBytewise never has them): the two must agree, errors included.
  const std::string tail = "$16\r\n0123456789abcdef\r\n";
  const std::vector<std::string> headers = {
      "$0\r\n\r\n",
      "$3\r\nabc\r\n",
      "$03\r\nabc\r\n",
      "$00\r\n\r\n",
      "$16\r\n" + std::string(16, 'x') + "\r\n",
      "$17\r\n" + std::string(17, 'x') + "\r\n",
      "$999999999\r\n",
      "$1000000000\r\n",
      "$+3\r\nabc\r\n",
      "$ 3\r\nabc\r\n",
      "$3 \r\nabc\r\n",
      "$3\nabc\r\n",
      "$3\r\rabc\r\n",
      "$-3\r\nabc\r\n",
      "$3\r\nabcd\r\n",
      "$3\r\nab\r\n\r\n",
      "$\r\n",
      "$3x\r\nabc\r\n",
      "$123456789012\r\n",
  };
  for (const std::string& h : headers) {
    const std::string in = "*3\r\n" + tail + h + tail + tail + tail;
    SCOPED_TRACE(in);
    EXPECT_EQ(FeedWhole(SmallLimits(), in), FeedBytewise(SmallLimits(), in));
    EXPECT_EQ(FeedWhole({}, in), FeedBytewise({}, in));
    ParserLimits tight;
    tight.max_command_bytes = 40;  // the second argument's end is past it
    EXPECT_EQ(FeedWhole(tight, in), FeedBytewise(tight, in));
  }
}

TEST(RespParser, APrefixThenTheWholeParsesLikeTheWhole) {
  const std::string in = "*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$5\r\nva\r\nl\r\nECHO \"x\\ty\"\r\n";
  const std::vector<std::string> whole = FeedWhole({}, in);
  for (size_t cut = 0; cut <= in.size(); ++cut) {
    Parser parser({});
    size_t consumed = 0;
    std::vector<std::string_view> args;
    std::string error;
    std::vector<std::string> out;
    std::string buf = in.substr(0, cut);
    Result r = parser.Parse(buf, &consumed, &args, &error);
    if (r == Result::kCommand) {
      out.push_back(std::to_string(consumed) + " " + Show(args));
      buf.erase(0, consumed);
      buf += in.substr(cut);
    } else {
      ASSERT_EQ(r, Result::kNeedMore) << cut;
      buf = in;
    }
    while ((r = parser.Parse(buf, &consumed, &args, &error)) == Result::kCommand) {
      out.push_back(std::to_string(consumed) + " " + Show(args));
      buf.erase(0, consumed);
    }
    out.push_back("left " + std::to_string(buf.size()));
    EXPECT_EQ(out, whole) << "cut at " << cut;
  }
}

TEST(RespParser, InlineCommandsSplitOnSpacesAndTabs) {
  EXPECT_EQ(ParseOne({}, "CF.ADD  f\titem\r\n"), "['CF.ADD','f','item'] +16");
  EXPECT_EQ(ParseOne({}, "PING\n"), "['PING'] +5");
  EXPECT_EQ(ParseOne({}, "  PING  \r\n"), "['PING'] +10");
}

TEST(RespParser, InlineQuotesAsSdssplitargs) {
  EXPECT_EQ(ParseOne({}, "ECHO \"a b\"\r\n"), "['ECHO','a b'] +12");
  EXPECT_EQ(ParseOne({}, "ECHO 'a b'\r\n"), "['ECHO','a b'] +12");
  EXPECT_EQ(ParseOne({}, "ECHO \"\\x41\\n\\r\\t\\b\\a\\\\\\\"\\z\"\r\n"),
            "['ECHO','A\n\r\t\b\a\\\"z'] +29");
  EXPECT_EQ(ParseOne({}, "ECHO 'it\\'s' '\\n'\r\n"), "['ECHO','it's','\\n'] +19");
  EXPECT_EQ(ParseOne({}, "ECHO \"\\xZZ\"\n"), "['ECHO','xZZ'] +12");
  EXPECT_EQ(ParseOne({}, "ECHO \"\" ''\n"), "['ECHO','',''] +11");
  // A quote inside an unquoted argument opens a quoted part of it.
  EXPECT_EQ(ParseOne({}, "ECHO a\"b c\"\n"), "['ECHO','ab c'] +12");
  // A NUL ends the line's arguments, as in sdssplitargs (a C string).
  EXPECT_EQ(ParseOne({}, std::string("ECHO a\0b c\n", 11)), "['ECHO','a'] +11");
}

TEST(RespParser, UnescapedInlineArgumentsOutliveLaterCommands) {
  const std::string in = "ECHO \"a\\x41\"\r\nECHO \"b\\x42\"\r\n";
  Parser parser({});
  size_t consumed = 0;
  std::vector<std::string_view> first, second;
  std::string error;
  ASSERT_EQ(parser.Parse(in, &consumed, &first, &error), Result::kCommand);
  ASSERT_EQ(parser.Parse(std::string_view(in).substr(consumed), &consumed, &second, &error),
            Result::kCommand);
  EXPECT_EQ(Show(first), "['ECHO','aA']");
  EXPECT_EQ(Show(second), "['ECHO','bB']");
  parser.ReleaseArgs();
}

TEST(RespParser, UnbalancedInlineQuotesAreAnError) {
  for (std::string_view in :
       {"ECHO \"abc\r\n", "ECHO 'abc\n", "ECHO \"a\"b\n", "ECHO 'a'b\n", "ECHO \"abc\\\"\n"}) {
    EXPECT_EQ(ParseOne({}, in), "error: ERR Protocol error: unbalanced quotes in request") << in;
  }
}

TEST(RespParser, EmptyCommandsAreSkippedAndCounted) {
  EXPECT_THAT(FeedWhole({}, "\r\n\n  \t\r\n*0\r\n*-1\r\n*-10\r\nPING\r\n"),
              ElementsAre("29 ['PING']", "left 0"));
  EXPECT_THAT(FeedWhole({}, "\r\n*0\r\n"), ElementsAre("left 6"));
}

TEST(RespParser, BulkLengthOf2GiBIsRefusedFromItsHeader) {
  EXPECT_EQ(
      ParseOne({}, "*1\r\n$2147483648\r\n"),
      "error: ERR Protocol error: bulk length 2147483648 is over the limit of 67108864 bytes");
}

TEST(RespParser, ADeclaredBulkOverTheLimitIsRefusedBeforeItsData) {
  EXPECT_EQ(ParseOne(SmallLimits(), "*1\r\n$17\r\n"),
            "error: ERR Protocol error: bulk length 17 is over the limit of 16 bytes");
  EXPECT_EQ(ParseOne({}, "*1\r\n$99999999999999999999\r\n"),
            "error: ERR Protocol error: invalid bulk length");
}

TEST(RespParser, NegativeBulkLengthsAreInvalid) {
  // "$-1" is a null in replies; as an argument Redis refuses it.
  EXPECT_EQ(ParseOne({}, "*2\r\n$4\r\nPING\r\n$-1\r\n"),
            "error: ERR Protocol error: invalid bulk length");
  EXPECT_EQ(ParseOne({}, "*1\r\n$-5\r\n"), "error: ERR Protocol error: invalid bulk length");
  EXPECT_EQ(ParseOne({}, "*1\r\n$\r\n"), "error: ERR Protocol error: invalid bulk length");
  EXPECT_EQ(ParseOne({}, "*1\r\n$01\r\n"), "error: ERR Protocol error: invalid bulk length");
  EXPECT_EQ(ParseOne({}, "*1\r\n$+1\r\n"), "error: ERR Protocol error: invalid bulk length");
}

TEST(RespParser, MalformedMultibulkLengthsAreInvalid) {
  for (std::string_view in : {"*x\r\n", "*\r\n", "*01\r\n", "*+1\r\n", "*-0\r\n", "*1 \r\n",
                              "*3000000000\r\n", "*99999999999999999999999\r\n"}) {
    EXPECT_EQ(ParseOne({}, in), "error: ERR Protocol error: invalid multibulk length") << in;
  }
}

TEST(RespParser, AMillionArgumentsAreRefusedFromTheHeaderAlone) {
  EXPECT_EQ(ParseOne({}, "*1000000\r\n"),
            "error: ERR Protocol error: 1000000 arguments is over the limit of 100016");
  // At the limit, the header alone allocates no room for 100016 arguments.
  Parser parser({});
  size_t consumed = 0;
  std::vector<std::string_view> args;
  std::string error;
  const size_t before = g_allocated.load();
  EXPECT_EQ(parser.Parse("*100016\r\n", &consumed, &args, &error), Result::kNeedMore);
  EXPECT_LT(g_allocated.load() - before, size_t{64} << 10);
}

TEST(RespParser, ExpectsDollarBeforeEachBulk) {
  EXPECT_EQ(ParseOne({}, "*3\r\n$3\r\nSET\r\n$1\r\nx\r\nfooz\r\n"),
            "error: ERR Protocol error: expected '$', got 'f'");
  EXPECT_EQ(ParseOne({}, "*1\r\n:1\r\n"), "error: ERR Protocol error: expected '$', got ':'");
}

TEST(RespParser, MissingCrlfAfterBulkDataIsAnError) {
  EXPECT_EQ(ParseOne({}, "*1\r\n$3\r\nabcXY"),
            "error: ERR Protocol error: bulk data not followed by CRLF");
  EXPECT_EQ(ParseOne({}, "*1\r\n$3\r\nabcX"),
            "error: ERR Protocol error: bulk data not followed by CRLF");
  EXPECT_EQ(ParseOne({}, "*1\r\n$3\r\nabc\rX"),
            "error: ERR Protocol error: bulk data not followed by CRLF");
}

TEST(RespParser, ALengthLineNeedsCrlf) {
  EXPECT_EQ(ParseOne({}, "*1\rx"),
            "error: ERR Protocol error: a length line's CR is not followed by LF");
}

TEST(RespParser, OverlongLinesAreRefused) {
  const ParserLimits l = SmallLimits();
  EXPECT_EQ(ParseOne(l, std::string(33, 'a')), "error: ERR Protocol error: too big inline request");
  EXPECT_EQ(ParseOne(l, std::string(33, 'a') + "\n"),
            "error: ERR Protocol error: too big inline request");
  const std::string a16(16, 'a'), b15(15, 'b');
  EXPECT_EQ(ParseOne(l, a16 + " " + b15 + "\n"), "['" + a16 + "','" + b15 + "'] +33");
  EXPECT_EQ(ParseOne(l, "*" + std::string(32, '1')),
            "error: ERR Protocol error: too big mbulk count string");
  EXPECT_EQ(ParseOne(l, "*1\r\n$" + std::string(32, '1')),
            "error: ERR Protocol error: too big bulk count string");
  EXPECT_EQ(ParseOne({}, std::string(64 << 10, 'a')), "need more");
  EXPECT_EQ(ParseOne({}, std::string((64 << 10) + 1, 'a')),
            "error: ERR Protocol error: too big inline request");
}

TEST(RespParser, ACommandOverMaxCommandBytesIsRefusedFromItsHeaders) {
  ParserLimits l = SmallLimits();
  l.max_command_bytes = 37;
  // 4 + 3 * (4 + 7) = 37 bytes: fits.
  EXPECT_EQ(ParseOne(l, "*3\r\n$5\r\naaaaa\r\n$5\r\nbbbbb\r\n$5\r\nccccc\r\n"),
            "['aaaaa','bbbbb','ccccc'] +37");
  EXPECT_EQ(ParseOne(l, "*3\r\n$5\r\naaaaa\r\n$5\r\nbbbbb\r\n$6\r\n"),
            "error: ERR Protocol error: command of 38 bytes or more is over the limit of 37 bytes");
}

TEST(RespParser, InlineArgumentsObeyTheLimits) {
  EXPECT_EQ(ParseOne(SmallLimits(), "a b c d e f g h i\n"),
            "error: ERR Protocol error: 9 arguments is over the limit of 8");
  EXPECT_EQ(ParseOne(SmallLimits(), "ECHO 0123456789abcdefg\n"),
            "error: ERR Protocol error: bulk length 17 is over the limit of 16 bytes");
}

TEST(RespParser, AnErrorStaysUntilReset) {
  Parser parser({});
  size_t consumed = 0;
  std::vector<std::string_view> args;
  std::string error;
  EXPECT_EQ(parser.Parse("*x\r\n", &consumed, &args, &error), Result::kError);
  error.clear();
  EXPECT_EQ(parser.Parse("PING\r\n", &consumed, &args, &error), Result::kError);
  EXPECT_EQ(error, "ERR Protocol error: invalid multibulk length");
  parser.Reset();
  EXPECT_EQ(parser.Parse("PING\r\n", &consumed, &args, &error), Result::kCommand);
  EXPECT_EQ(Show(args), "['PING']");
}

TEST(RespParser, PendingHintIsTheEndOfTheAwaitedBulk) {
  Parser parser({});
  size_t consumed = 0;
  std::vector<std::string_view> args;
  std::string error;
  EXPECT_EQ(parser.pending_hint(), 0u);
  EXPECT_EQ(parser.Parse("*1\r\n$1000\r\nabc", &consumed, &args, &error), Result::kNeedMore);
  EXPECT_EQ(parser.pending_hint(), 4u + 7u + 1000u + 2u);
}

TEST(RespWriter, WritesRESP2) {
  std::string out;
  Writer w(&out, 2);
  EXPECT_EQ(w.protocol(), 2);
  w.SimpleString("OK");
  w.Error("ERR bad\r\nthing");
  w.Integer(-42);
  w.Integer(std::numeric_limits<int64_t>::min());
  w.Bulk(std::string_view("a\0b", 3));
  w.Bulk("");
  w.Null();
  w.NullArray();
  w.Array(2);
  w.Map(3);
  w.Set(1);
  w.Double(1.5);
  w.Boolean(true);
  w.Boolean(false);
  w.Verbatim("txt", "hello");
  w.Push(2);
  EXPECT_EQ(out,
            "+OK\r\n"
            "-ERR bad  thing\r\n"
            ":-42\r\n"
            ":-9223372036854775808\r\n"
            "$3\r\na\0b\r\n"
            "$0\r\n\r\n"
            "$-1\r\n"
            "*-1\r\n"
            "*2\r\n"
            "*6\r\n"
            "*1\r\n"
            "$3\r\n1.5\r\n"
            ":1\r\n"
            ":0\r\n"
            "$5\r\nhello\r\n"
            "*2\r\n"s);
}

TEST(RespWriter, SmallIntegersWritesWhatIntegerWrites) {
  std::string one_by_one, at_once = "x";
  Writer a(&one_by_one, 2), b(&at_once, 2);
  one_by_one = "x";
  for (int v = -9; v <= 9; ++v) a.Integer(v);
  b.SmallIntegers(19, [](size_t i) { return static_cast<int>(i) - 9; });
  EXPECT_EQ(at_once, one_by_one);
  b.SmallIntegers(0, [](size_t) { return 1; });
  EXPECT_EQ(at_once, one_by_one);
}

TEST(RespWriter, WritesRESP3) {
  std::string out;
  Writer w(&out, 3);
  EXPECT_EQ(w.protocol(), 3);
  w.SimpleString("a\nb");
  w.Error("WRONGTYPE x");
  w.Integer(7);
  w.Bulk("xy");
  w.Null();
  w.NullArray();
  w.Array(0);
  w.Map(3);
  w.Set(1);
  w.Double(1.5);
  w.Double(-std::numeric_limits<double>::infinity());
  w.Boolean(true);
  w.Boolean(false);
  w.Verbatim("txt", "hello");
  w.Verbatim("toolong", "x");
  w.Push(2);
  EXPECT_EQ(out,
            "+a b\r\n"
            "-WRONGTYPE x\r\n"
            ":7\r\n"
            "$2\r\nxy\r\n"
            "_\r\n"
            "_\r\n"
            "*0\r\n"
            "%3\r\n"
            "~1\r\n"
            ",1.5\r\n"
            ",-inf\r\n"
            "#t\r\n"
            "#f\r\n"
            "=9\r\ntxt:hello\r\n"
            "=5\r\ntxt:x\r\n"
            ">2\r\n");
}

TEST(RespWriter, DoublesAreTheShortestRoundTripInPercentGLayout) {
  EXPECT_EQ(FormatDouble(0), "0");
  EXPECT_EQ(FormatDouble(-0.0), "-0");
  EXPECT_EQ(FormatDouble(3), "3");
  EXPECT_EQ(FormatDouble(1.1), "1.1");
  EXPECT_EQ(FormatDouble(0.1 + 0.2), "0.30000000000000004");
  EXPECT_EQ(FormatDouble(100000), "100000");
  EXPECT_EQ(FormatDouble(0.0001), "0.0001");
  EXPECT_EQ(FormatDouble(0.00001), "1e-05");
  EXPECT_EQ(FormatDouble(1e16), "10000000000000000");
  EXPECT_EQ(FormatDouble(1e17), "1e+17");
  EXPECT_EQ(FormatDouble(-1.25e100), "-1.25e+100");
  EXPECT_EQ(FormatDouble(5e-324), "5e-324");
  EXPECT_EQ(FormatDouble(std::numeric_limits<double>::infinity()), "inf");
  EXPECT_EQ(FormatDouble(std::nan("")), "nan");
  for (double d : {1.0 / 3, 2.0 / 3, 1e300 / 7, 123456.789, 0.001}) {
    EXPECT_EQ(std::strtod(FormatDouble(d).c_str(), nullptr), d) << FormatDouble(d);
  }
}

}  // namespace
}  // namespace cuckoo::server::resp
