// cuckooctl's command line without a process or a server: how flags and
// arguments are read, the strict number and duration parsers, and the
// messages of the failures they report. tests/e2e/cuckooctl_test.cc runs
// the binary.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "client/tools/cuckooctl/command_line.h"
#include "client/tools/cuckooctl/output.h"

namespace cuckoo::ctl {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// ParseArgs over `args` (argv[0] added).
std::optional<Failure> Parse(std::vector<std::string> args, CommandLine& cl) {
  args.insert(args.begin(), "cuckooctl");
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  return ParseArgs(static_cast<int>(argv.size()), argv.data(), cl);
}

TEST(CuckooctlCommandLineTest, FlagsStandBeforeOrAfterTheCommandWithEqualsOrASpace) {
  CommandLine cl;
  ASSERT_EQ(Parse({"--target", "h:1", "create", "users", "--capacity=1M", "--max_kicks", "50"}, cl),
            std::nullopt);
  EXPECT_THAT(cl.positional, ElementsAre("create", "users"));
  EXPECT_EQ(cl.Get("target"), "h:1");
  EXPECT_EQ(cl.Get("capacity"), "1M");
  EXPECT_EQ(cl.Get("max-kicks"), "50");  // Underscores read as dashes.
  EXPECT_EQ(cl.spelled.at("max-kicks"), "--max_kicks");
  EXPECT_FALSE(cl.Has("fpr"));
}

TEST(CuckooctlCommandLineTest, DoubleDashEndsTheFlagsSoKeysMayStartWithADash) {
  CommandLine cl;
  ASSERT_EQ(Parse({"lookup", "users", "--", "--not-a-flag", "-x"}, cl), std::nullopt);
  EXPECT_THAT(cl.positional, ElementsAre("lookup", "users", "--not-a-flag", "-x"));
}

TEST(CuckooctlCommandLineTest, BooleanFlagsTakeNoValueOrTrueFalseOneZeroYesNo) {
  CommandLine cl;
  ASSERT_EQ(Parse({"insert", "u", "--quiet", "--if-absent=no", "--progress=1", "-h"}, cl),
            std::nullopt);
  EXPECT_TRUE(cl.Bool("quiet"));
  EXPECT_FALSE(cl.Bool("if-absent"));
  EXPECT_TRUE(cl.Has("if-absent"));
  EXPECT_TRUE(cl.Bool("progress"));
  EXPECT_TRUE(cl.Bool("help"));

  CommandLine bad;
  std::optional<Failure> f = Parse({"create", "u", "--semi-sort=maybe"}, bad);
  ASSERT_NE(f, std::nullopt);
  EXPECT_EQ(f->code, kExitUsage);
  EXPECT_EQ(f->message, "--semi-sort=\"maybe\": expected true or false, or no value");
}

TEST(CuckooctlCommandLineTest, ARepeatedFlagKeepsEveryValueAndTheLastWins) {
  CommandLine cl;
  ASSERT_EQ(Parse({"hash-token", "n", "--grant=read:a", "--grant", "write:b"}, cl), std::nullopt);
  EXPECT_THAT(cl.all.at("grant"), ElementsAre("read:a", "write:b"));
  EXPECT_EQ(cl.Get("grant"), "write:b");
}

TEST(CuckooctlCommandLineTest, UnknownAndIncompleteFlagsAreUsageErrorsNamingThem) {
  CommandLine a, b, c;
  std::optional<Failure> unknown = Parse({"create", "--capcity=3"}, a);
  ASSERT_NE(unknown, std::nullopt);
  EXPECT_EQ(unknown->code, kExitUsage);
  EXPECT_EQ(unknown->message, "unknown flag --capcity (see cuckooctl --help)");
  std::optional<Failure> dash = Parse({"lookup", "u", "-k"}, b);
  ASSERT_NE(dash, std::nullopt);
  EXPECT_THAT(dash->message, HasSubstr("put keys that start with \"-\" after \"--\""));
  std::optional<Failure> no_value = Parse({"create", "u", "--capacity"}, c);
  ASSERT_NE(no_value, std::nullopt);
  EXPECT_EQ(no_value->message, "flag --capacity needs a value: --capacity=VALUE");
}

TEST(CuckooctlCommandLineTest, TimeoutsAreAbslDurationsOrSeconds) {
  EXPECT_EQ(ParseTimeout("500ms"), absl::Milliseconds(500));
  EXPECT_EQ(ParseTimeout("1m30s"), absl::Seconds(90));
  EXPECT_EQ(ParseTimeout("2.5"), absl::Milliseconds(2500));
  EXPECT_EQ(ParseTimeout("0"), std::nullopt);
  EXPECT_EQ(ParseTimeout("0", /*allow_zero=*/true), absl::ZeroDuration());
  EXPECT_EQ(ParseTimeout("-1s", true), std::nullopt);
  EXPECT_EQ(ParseTimeout("inf"), std::nullopt);
  EXPECT_EQ(ParseTimeout("2 s"), std::nullopt);
  EXPECT_EQ(ParseTimeout(""), std::nullopt);
}

TEST(CuckooctlCommandLineTest, CapacitiesTakeACountSuffixOtherNumbersMustBePlain) {
  CommandLine cl;
  ASSERT_EQ(Parse({"create", "u", "--capacity=10k", "--shards=1k", "--seed=7"}, cl), std::nullopt);
  uint64_t v = 0;
  EXPECT_EQ(ParseUintFlag(cl, "capacity", UINT64_MAX, v), std::nullopt);
  EXPECT_EQ(v, 10'000u);
  EXPECT_EQ(ParseUintFlag(cl, "seed", UINT64_MAX, v), std::nullopt);
  EXPECT_EQ(v, 7u);
  std::optional<Failure> f = ParseUintFlag(cl, "shards", UINT32_MAX, v);
  ASSERT_NE(f, std::nullopt);
  EXPECT_EQ(f->message, "--shards=\"1k\" is not a whole number from 0 to 4294967295");
  EXPECT_EQ(v, 7u);  // Unchanged by a failure.
}

TEST(CuckooctlCommandLineTest, ArgumentCountsAreCheckedWithTheCommandsName) {
  CommandLine none, extra;
  ASSERT_EQ(Parse({"info"}, none), std::nullopt);
  std::optional<Failure> missing = ExpectArgs(none, 1, 1, "a filter NAME");
  ASSERT_NE(missing, std::nullopt);
  EXPECT_EQ(missing->message, "info needs a filter NAME (see cuckooctl info --help)");
  ASSERT_EQ(Parse({"list", "x"}, extra), std::nullopt);
  std::optional<Failure> unexpected = ExpectArgs(extra, 0, 0, "");
  ASSERT_NE(unexpected, std::nullopt);
  EXPECT_EQ(unexpected->message, "unexpected argument \"x\" (see cuckooctl list --help)");
}

TEST(CuckooctlCommandLineTest, AnUnreachableServersErrorNamesTheTargetOnce) {
  const Failure timeout = ServerError(absl::DeadlineExceededError("Deadline Exceeded"), "h:1");
  EXPECT_EQ(timeout.code, kExitServer);
  EXPECT_EQ(timeout.message, "DEADLINE_EXCEEDED: Deadline Exceeded (target h:1)");
  EXPECT_EQ(ServerError(absl::UnavailableError("h:1: refused"), "h:1").message,
            "UNAVAILABLE: h:1: refused");
  EXPECT_EQ(ServerError(absl::NotFoundError("filter \"x\" not found"), "h:1").message,
            "NOT_FOUND: filter \"x\" not found");
}

// Filter names are any UTF-8 without NUL: list and info show them with
// control characters escaped, so a name never drives the terminal.
TEST(CuckooctlCommandLineTest, NamesAreShownWithControlCharactersEscaped) {
  EXPECT_EQ(TerminalName("users:seen"), "users:seen");
  EXPECT_EQ(TerminalName("my filter/a"), "my filter/a");
  EXPECT_EQ(TerminalName("caf\xC3\xA9"), "caf\xC3\xA9");
  EXPECT_EQ(TerminalName("red\x1b[31m\n"), "red\\x1b[31m\\x0a");
  EXPECT_EQ(TerminalName("del\x7f c1\xC2\x9B"), "del\\x7f c1\\u009b");
  EXPECT_EQ(TerminalName("back\\slash"), "back\\\\slash");
}

}  // namespace
}  // namespace cuckoo::ctl
