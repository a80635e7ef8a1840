// The Redis port (--redis-listen) as Redis users meet it: Debian's redis-cli
// (a client nobody here wrote) runs every command cuckood serves, in RESP2
// and in RESP3 (redis-cli -3, which sends HELLO 3 first), and its printed
// output is compared exactly. redis-cli --no-raw prints each reply's type
// ("(integer) 1", "(error) ERR ...", "(nil)", RESP3 maps as "1# key => value",
// doubles as "(double) 0.5"), so the comparisons also check the reply types.
// A filter created over gRPC (cuckooctl) answers over RESP and one created
// over RESP is seen by cuckooctl.
//
// The filters made over the port here use --redis-error-rate=1e-7, so a key
// never added answers 0 (a false positive has a probability of about 1e-7
// per key) and the expected outputs are exact.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "tests/e2e/redis_test_util.h"

namespace cuckoo::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

std::vector<std::string> Lines(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

std::string Trim(const std::string& s) {
  const size_t b = s.find_first_not_of(' ');
  return b == std::string::npos ? "" : s.substr(b);
}

// The arity error, as Redis words it.
std::string Arity(const std::string& command) {
  return "(error) ERR wrong number of arguments for '" + command + "' command\n";
}

std::string Ints(const std::vector<int>& values) {
  std::string out;
  for (size_t i = 0; i < values.size(); ++i) {
    out += std::to_string(i + 1) + ") (integer) " + std::to_string(values[i]) + "\n";
  }
  return out;
}

class RedisCliTest : public ::testing::TestWithParam<int> {
 protected:
  void SetUp() override { Start({"--redis-error-rate=1e-7"}); }

  void Start(std::vector<std::string> flags) {
    server_.reset();
    server_ = std::make_unique<RedisCuckood>(data_.path(), std::move(flags));
    ASSERT_TRUE(server_->ready()) << server_->Log();
  }

  int protocol() const { return GetParam(); }
  // `resp2` in RESP2, `resp3` in RESP3.
  std::string P(const std::string& resp2, const std::string& resp3) const {
    return protocol() == 3 ? resp3 : resp2;
  }
  // A 1 or 0 that RedisBloom answers as a boolean in RESP3 (CF.ADD,
  // CF.ADDNX, CF.EXISTS, CF.DEL), as redis-cli prints it, without the
  // newline.
  std::string Bool(int v) const {
    return P(v ? "(integer) 1" : "(integer) 0", v ? "(true)" : "(false)");
  }
  std::string B(int v) const { return Bool(v) + "\n"; }
  // An array of them (CF.MEXISTS; CF.INSERT, whose -1 stays an integer).
  std::string Bools(const std::vector<int>& values) const {
    std::string out;
    for (size_t i = 0; i < values.size(); ++i) {
      out +=
          std::to_string(i + 1) + ") " + (values[i] < 0 ? "(integer) -1" : Bool(values[i])) + "\n";
    }
    return out;
  }

  // redis-cli [-3] --no-raw <extra> <args>, with `stdin_data` on its stdin.
  Result Cli(const std::vector<std::string>& args, const std::string& stdin_data = "",
             const std::vector<std::string>& extra = {}, bool raw = false) {
    std::vector<std::string> argv = {kRedisCli,
                                     "-h",
                                     "127.0.0.1",
                                     "-p",
                                     std::to_string(server_->redis_port()),
                                     raw ? "--raw" : "--no-raw"};
    if (protocol() == 3) argv.push_back("-3");
    argv.insert(argv.end(), extra.begin(), extra.end());
    argv.insert(argv.end(), args.begin(), args.end());
    return RunProcess(argv, stdin_data);
  }
  // One command; its printed reply.
  std::string Run(const std::vector<std::string>& args) {
    Result r = Cli(args);
    EXPECT_EQ(r.code, 0) << r.out << r.err;
    return r.out;
  }
  // Commands, one a line (redis-cli's quoting), on one connection: the
  // replies printed one after another.
  std::string Script(const std::string& lines, const std::vector<std::string>& extra = {}) {
    Result r = Cli({}, lines, extra);
    EXPECT_EQ(r.code, 0) << r.out << r.err;
    EXPECT_EQ(r.err, "");
    return r.out;
  }

  // CF.INFO's fields in order, from either protocol's printing ("N) key",
  // "N+1) value" in RESP2; "N# key => value" in RESP3).
  std::vector<std::pair<std::string, std::string>> Info(const std::string& filter) {
    const std::string out = Run({"CF.INFO", filter});
    std::vector<std::pair<std::string, std::string>> fields;
    std::vector<std::string> lines = Lines(out);
    if (protocol() == 3) {
      for (const std::string& line : lines) {
        const std::string t = Trim(line);
        const size_t hash = t.find("# ");
        const size_t arrow = t.find(" => ");
        EXPECT_NE(hash, std::string::npos) << out;
        EXPECT_NE(arrow, std::string::npos) << out;
        if (hash == std::string::npos || arrow == std::string::npos) return {};
        fields.emplace_back(t.substr(hash + 2, arrow - hash - 2), t.substr(arrow + 4));
      }
    } else {
      EXPECT_EQ(lines.size() % 2, 0u) << out;
      for (size_t i = 0; i + 1 < lines.size(); i += 2) {
        const std::string k = Trim(lines[i]), v = Trim(lines[i + 1]);
        fields.emplace_back(k.substr(k.find(") ") + 2), v.substr(v.find(") ") + 2));
      }
    }
    return fields;
  }
  std::map<std::string, std::string> InfoMap(const std::string& filter) {
    std::map<std::string, std::string> m;
    for (auto& [k, v] : Info(filter)) m[k] = v;
    return m;
  }

  // cuckooctl --target=<the gRPC port> args...
  Result Ctl(const std::vector<std::string>& args) {
    std::vector<std::string> argv = {CUCKOOCTL_PATH, "--target=" + server_->address()};
    argv.insert(argv.end(), args.begin(), args.end());
    return RunProcess(argv);
  }

  TempDir data_;
  std::unique_ptr<RedisCuckood> server_;
};

INSTANTIATE_TEST_SUITE_P(Resp, RedisCliTest, ::testing::Values(2, 3),
                         [](const ::testing::TestParamInfo<int>& p) {
                           return "Resp" + std::to_string(p.param);
                         });

TEST_P(RedisCliTest, ReserveTakesRedisBloomOptionsAndNamesBadValues) {
  EXPECT_EQ(Script("CF.RESERVE f 1000\n"
                   "CF.RESERVE f 1000\n"
                   "CF.RESERVE b 1000 BUCKETSIZE 4 MAXITERATIONS 50 EXPANSION 4\n"
                   "cf.reserve fixed 1000 expansion 0\n"
                   "CF.RESERVE b3 1000 BUCKETSIZE 3 EXPANSION 1 MAXITERATIONS 20000\n"
                   "CF.RESERVE big 1000 EXPANSION 100\n"
                   "CF.RESERVE c abc\n"
                   "CF.RESERVE c 0\n"
                   "CF.RESERVE c -5\n"
                   "CF.RESERVE c 100 BUCKETSIZE 9\n"
                   "CF.RESERVE c 100 BUCKETSIZE 0\n"
                   "CF.RESERVE c 100 MAXITERATIONS 0\n"
                   "CF.RESERVE c 100 EXPANSION -1\n"
                   "CF.RESERVE c 100 EXPANSION 40000\n"
                   "CF.RESERVE c 100 BUCKETSIZE\n"
                   "CF.RESERVE c 100 BUCKETSIZE x\n"
                   "CF.RESERVE c 100 FOO 1\n"
                   "CF.RESERVE c\n"
                   "EXISTS c\n"),
            "OK\n"
            "(error) ERR item exists\n"
            "OK\n"
            "OK\n"
            "OK\n"
            "OK\n"
            "(error) Bad capacity\n"
            "(error) Capacity must be at least (BucketSize * 2)\n"
            "(error) Capacity must be at least (BucketSize * 2)\n"
            "(error) ERR Bad bucket size 9: cuckood supports 1 to 8 (1 and 2 give 2, 3 and 4 "
            "give 4, 5 to 8 give 8)\n"
            "(error) BUCKETSIZE: value must be an integer between 1 and 255, inclusive.\n"
            "(error) MAXITERATIONS: value must be an integer between 1 and 65535, inclusive.\n"
            "(error) EXPANSION: value must be an integer between 0 and 32768, inclusive.\n"
            "(error) EXPANSION: value must be an integer between 0 and 32768, inclusive.\n" +
                Arity("cf.reserve") +
                "(error) Couldn't parse BUCKETSIZE\n"
                "(error) ERR unknown argument 'FOO' (expected BUCKETSIZE, MAXITERATIONS or "
                "EXPANSION)\n" +
                Arity("cf.reserve") + "(integer) 0\n");

  std::map<std::string, std::string> b = InfoMap("b");
  EXPECT_EQ(b["Bucket size"], "(integer) 4");
  EXPECT_EQ(b["Max iterations"], "(integer) 50");
  EXPECT_EQ(b["Expansion rate"], "(integer) 4");
  EXPECT_EQ(b["Capacity"], "(integer) 1000");
  EXPECT_EQ(b["Number of filters"], "(integer) 1");
  EXPECT_EQ(b["Number of items inserted"], "(integer) 0");
  std::map<std::string, std::string> b3 = InfoMap("b3");
  EXPECT_EQ(b3["Bucket size"], "(integer) 4");         // 3 -> 4
  EXPECT_EQ(b3["Expansion rate"], "(integer) 2");      // 1 -> 2 (cuckood's smallest growth)
  EXPECT_EQ(b3["Max iterations"], "(integer) 10000");  // capped
  EXPECT_EQ(InfoMap("big")["Expansion rate"], "(integer) 8");
  EXPECT_EQ(InfoMap("fixed")["Expansion rate"], "(integer) 0");
  EXPECT_EQ(InfoMap("f")["Expansion rate"], "(integer) 2");  // --redis-default-expansion
}

TEST_P(RedisCliTest, InfoListsRedisBloomsFieldsFirstThenCuckoodsInTheProtocolsTypes) {
  ASSERT_EQ(Run({"CF.RESERVE", "f", "5000", "BUCKETSIZE", "2"}), "OK\n");
  ASSERT_EQ(Run({"CF.INSERT", "f", "ITEMS", "a", "b", "c"}), Bools({1, 1, 1}));
  std::vector<std::pair<std::string, std::string>> info = Info("f");
  std::vector<std::string> names;
  for (auto& [k, v] : info) names.push_back(k);
  EXPECT_EQ(names, (std::vector<std::string>{
                       "Size", "Number of buckets", "Number of filters", "Number of items inserted",
                       "Number of items deleted", "Bucket size", "Expansion rate", "Max iterations",
                       "Capacity", "Max capacity", "Max filters", "Fingerprint bits", "Shards",
                       "Semi-sorted", "Load factor", "Error rate", "Error rate bound"}));
  std::map<std::string, std::string> m(info.begin(), info.end());
  EXPECT_EQ(m["Number of items inserted"], "(integer) 3");
  EXPECT_EQ(m["Number of items deleted"], "(integer) 0");
  EXPECT_EQ(m["Bucket size"], "(integer) 2");
  EXPECT_EQ(m["Capacity"], "(integer) 5000");
  EXPECT_THAT(m["Size"], StartsWith("(integer) "));
  EXPECT_THAT(m["Number of buckets"], StartsWith("(integer) "));
  // Doubles: bulk strings in RESP2, RESP3 doubles.
  EXPECT_THAT(m["Load factor"], StartsWith(P("\"", "(double) ")));
  EXPECT_THAT(m["Error rate"], StartsWith(P("\"", "(double) ")));
  EXPECT_EQ(m["Error rate"], P("\"1e-07\"", "(double) 1e-07"))
      << "the filter's rate is --redis-error-rate";
  // The first line shows the reply's type: an array in RESP2, a map in RESP3.
  EXPECT_THAT(Run({"CF.INFO", "f"}),
              StartsWith(P(" 1) Size\n 2) (integer) ", " 1# Size => (integer) ")));
  EXPECT_EQ(Run({"CF.INFO", "missing"}), "(error) ERR not found\n");
  EXPECT_EQ(Run({"CF.INFO"}), Arity("cf.info"));
  EXPECT_EQ(Run({"CF.INFO", "f", "g"}), Arity("cf.info"));
}

TEST_P(RedisCliTest, AddAddNxInsertInsertNxAnswerAsRedisBloom) {
  EXPECT_EQ(Script("CF.ADD f a\n"
                   "CF.ADD f a\n"
                   "CF.ADDNX f a\n"
                   "CF.ADDNX f b\n"
                   "CF.INSERT f ITEMS c d\n"
                   "CF.INSERTNX f ITEMS c e\n"
                   "CF.INSERT g CAPACITY 500 ITEMS x\n"
                   "CF.INSERT f NOCREATE ITEMS z\n"
                   "CF.INSERTNX f CAPACITY 7 NOCREATE ITEMS z y\n"
                   "CF.INSERT f ITEMS\n"
                   "CF.INSERT \"bad\\xff\" ITEMS a\n"
                   "CF.ADD\n"
                   "CF.ADD f a b\n"
                   "CF.ADDNX f\n"
                   "EXISTS nope\n"),
            B(1) + B(1) + B(0) + B(1) + Bools({1, 1}) + Ints({0, 1}) + Bools({1}) + Bools({1}) +
                Ints({0, 1}) + Arity("cf.insert") +
                "(error) ERR invalid filter name 'bad\\xff': filter name \"bad\\xff\" is not "
                "valid UTF-8 (byte 0xff at offset 3); names must be UTF-8 so that every filter "
                "is reachable over gRPC, whose strings are UTF-8\n" +
                Arity("cf.add") + Arity("cf.add") + Arity("cf.addnx") + "(integer) 0\n");
  // CF.ADD made f with --redis-default-capacity (1024) and growth 2; CAPACITY
  // sized g.
  std::map<std::string, std::string> f = InfoMap("f");
  EXPECT_EQ(f["Capacity"], "(integer) 1024");
  EXPECT_EQ(f["Expansion rate"], "(integer) 2");
  EXPECT_EQ(f["Number of items inserted"], "(integer) 8");
  EXPECT_EQ(InfoMap("g")["Capacity"], "(integer) 500");
}

// Every error a write command finds in its arguments is answered (a
// regression: these were once never answered and the connection hung).
TEST_P(RedisCliTest, WriteArgumentErrorsAreAnswered) {
  ASSERT_EQ(Run({"CF.ADD", "f", "a"}), B(1));
  EXPECT_EQ(Script("CF.INSERT nope NOCREATE ITEMS x\n"
                   "CF.INSERTNX nope NOCREATE ITEMS x\n"
                   "CF.INSERT f NOCREATE a\n"
                   "CF.INSERT f CAPACITY x ITEMS a\n"
                   "CF.INSERT f CAPACITY 10 NOCREATE\n"
                   "CF.INSERT f ITEMS a \"\"\n"
                   "CF.ADD f \"\"\n"
                   "CF.ADDNX f \"\"\n"
                   "CF.DEL f \"\"\n"
                   "CF.DEL missing a\n"
                   "EXISTS nope\n"
                   "PING\n"),
            "(error) ERR not found\n"
            "(error) ERR not found\n"
            "(error) Unknown argument received\n"
            "(error) Bad capacity\n" +
                Arity("cf.insert") +
                "(error) ERR item is empty; cuckood items are 1 to 4096 bytes (item 2)\n"
                "(error) ERR item is empty; cuckood items are 1 to 4096 bytes\n"
                "(error) ERR item is empty; cuckood items are 1 to 4096 bytes\n"
                "(error) ERR item is empty; cuckood items are 1 to 4096 bytes\n"
                "(error) Not found\n"
                "(integer) 0\n"
                "PONG\n");
  EXPECT_EQ(Run({"CF.ADD", "f", std::string(4097, 'x')}),
            "(error) ERR item is 4097 bytes; the server's limit (--max-key-bytes) is 4096 bytes\n");
}

// CF.MEXISTS of present and absent items mixed, on a multi-shard filter (a
// regression: its answers once shared scratch memory with the filter's own
// batch path, and came out wrong, false negatives among them).
TEST_P(RedisCliTest, MExistsOfPresentAndAbsentItemsOnALargeFilter) {
  ASSERT_EQ(Run({"CF.RESERVE", "big", "100000"}), "OK\n");
  std::vector<std::string> insert = {"CF.INSERT", "big", "ITEMS"};
  std::vector<std::string> mexists = {"CF.MEXISTS", "big"};
  std::string expected;
  for (int i = 0; i < 50; ++i) {
    insert.push_back("p" + std::to_string(i));
    mexists.push_back("p" + std::to_string(i));
    mexists.push_back("absent" + std::to_string(i));
  }
  for (int i = 1; i <= 100; ++i) {
    const std::string idx = std::to_string(i);
    expected += std::string(3 - idx.size(), ' ') + idx + ") " + Bool(i % 2) + "\n";
  }
  ASSERT_EQ(Lines(Run(insert)).size(), 50u);
  EXPECT_EQ(Run(mexists), expected);
}

TEST_P(RedisCliTest, FullFixedFilterSaysFilterIsFullAndInsertAnswersMinusOne) {
  std::string script = "CF.RESERVE tiny 64 EXPANSION 0\n";
  for (int i = 0; i < 1500; ++i) script += "CF.ADD tiny k" + std::to_string(i) + "\n";
  script += "CF.INSERT tiny ITEMS x1 x2 x3\nCF.ADDNX tiny y1\nCF.INSERTNX tiny ITEMS k0 y2\n";
  std::vector<std::string> lines = Lines(Script(script));
  ASSERT_EQ(lines.size(), 1u + 1500 + 3 + 1 + 2) << lines.size();
  EXPECT_EQ(lines[0], "OK");
  size_t added = 0, full = 0;
  for (size_t i = 1; i <= 1500; ++i) {
    // (Near full an insert may fail and a later one find room: both kinds
    // mix at the end.)
    if (lines[i] == Bool(1)) {
      ++added;
    } else {
      EXPECT_EQ(lines[i], "(error) Filter is full") << i;
      ++full;
    }
  }
  EXPECT_GE(added, 64u);
  EXPECT_GT(full, 0u);
  EXPECT_EQ(lines[1501], "1) (integer) -1");
  EXPECT_EQ(lines[1502], "2) (integer) -1");
  EXPECT_EQ(lines[1503], "3) (integer) -1");
  EXPECT_EQ(lines[1504], "(error) Filter is full");
  EXPECT_EQ(lines[1505], "1) (integer) 0");  // CF.INSERTNX: integers in RESP3 too
  EXPECT_EQ(lines[1506], "2) (integer) -1");
}

TEST_P(RedisCliTest, ExistsMExistsCountDel) {
  EXPECT_EQ(Script("CF.INSERT f ITEMS a b c\n"
                   "CF.ADD f a\n"
                   "CF.EXISTS f a\n"
                   "CF.EXISTS f nope\n"
                   "CF.EXISTS missing a\n"
                   "CF.MEXISTS f a nope b\n"
                   "CF.MEXISTS missing a b\n"
                   "CF.COUNT f a\n"
                   "CF.COUNT f nope\n"
                   "CF.COUNT missing a\n"
                   "CF.DEL f a\n"
                   "CF.COUNT f a\n"
                   "CF.EXISTS f a\n"
                   "CF.DEL f a\n"
                   "CF.EXISTS f a\n"
                   "CF.DEL f nope\n"
                   "CF.EXISTS f \"\"\n"
                   "CF.EXISTS f\n"
                   "CF.MEXISTS f\n"
                   "CF.COUNT f\n"
                   "CF.DEL f\n"
                   "CF.EXISTS f a b\n"),
            Bools({1, 1, 1}) + B(1) + B(1) + B(0) + B(0) + Bools({1, 0, 1}) + Bools({0, 0}) +
                "(integer) 2\n"  // CF.COUNT
                "(integer) 0\n"
                "(integer) 0\n" +
                B(1) +             // CF.DEL f a
                "(integer) 1\n" +  // CF.COUNT f a
                B(1) + B(1) + B(0) + B(0) +
                "(error) ERR item is empty; cuckood items are 1 to 4096 bytes\n" +
                Arity("cf.exists") + Arity("cf.mexists") + Arity("cf.count") + Arity("cf.del") +
                Arity("cf.exists"));
  std::map<std::string, std::string> f = InfoMap("f");
  EXPECT_EQ(f["Number of items inserted"], "(integer) 2");
  EXPECT_EQ(f["Number of items deleted"], "(integer) 2");
  // Binary-safe items: a \0 and CRLF inside one.
  EXPECT_EQ(Script("CF.ADD f \"x\\x00y\\r\\nz\"\nCF.EXISTS f \"x\\x00y\\r\\nz\"\nCF.EXISTS f "
                   "\"x\\x00y\"\n"),
            B(1) + B(1) + B(0));
}

// Keys are filter names, and filter names are Redis keys: "a/b", "a:b",
// "bad name" are names. A key that is not (empty, over 512 bytes, a NUL,
// not UTF-8) is refused naming the rule; the existence reads answer it as a
// missing key.
TEST_P(RedisCliTest, KeysThatCannotBeFilterNamesAreRefusedNamingTheRule) {
  const std::string long_name(513, 'n');
  const std::string utf8 =
      "; names must be UTF-8 so that every filter is reachable over gRPC, whose strings are "
      "UTF-8\n";
  EXPECT_EQ(Script("CF.ADD \"bad\\xff\" x\n"
                   "CF.EXISTS \"bad\\xff\" a\n"
                   "CF.RESERVE \"\" 10\n"
                   "CF.MEXISTS \"a\\xc3\" x\n"
                   "CF.INSERT \"a\\x00b\" ITEMS x\n"
                   "CF.COUNT \"\\xff\" x\n"
                   "CF.DEL \"\\xff\" x\n"
                   "CF.INFO " +
                   long_name +
                   "\n"
                   "CF.SCANDUMP \"\\xff\" 0\n"
                   "TYPE \"\\xff\"\n"
                   "EXISTS \"\\xff\"\n"
                   "DEL \"\\xff\"\n"
                   "DBSIZE\n"),
            "(error) ERR invalid filter name 'bad\\xff': filter name \"bad\\xff\" is not valid "
            "UTF-8 (byte 0xff at offset 3)" +
                utf8 + B(0) + "(error) ERR invalid filter name '': filter name is empty\n" +
                Bools({0}) +
                "(error) ERR invalid filter name 'a\\x00b': filter name \"a\\x00\\x62\" has a NUL "
                "byte at offset 1; names may hold any byte but NUL\n"
                "(integer) 0\n"
                "(error) ERR invalid filter name '\\xff': filter name \"\\xff\" is not valid "
                "UTF-8 (byte 0xff at offset 0)" +
                utf8 + "(error) ERR invalid filter name '" + std::string(64, 'n') +
                "...': filter name is 513 bytes; at most 512 are allowed\n"
                "(error) ERR invalid filter name '\\xff': filter name \"\\xff\" is not valid "
                "UTF-8 (byte 0xff at offset 0)" +
                utf8 +
                "none\n"
                "(integer) 0\n"
                "(integer) 0\n"
                "(integer) 0\n");
  // Key-shaped names are names.
  EXPECT_EQ(Script("CF.ADD \"bad name\" x\n"
                   "CF.ADD a/b x\n"
                   "CF.ADD users:seen x\n"
                   "CF.EXISTS users:seen x\n"
                   "KEYS users:*\n"
                   "EXISTS \"bad name\" a/b users:seen\n"),
            B(1) + B(1) + B(1) + B(1) + "1) \"users:seen\"\n(integer) 3\n");
}

TEST_P(RedisCliTest, ConnectionCommandsAnswerAsRedis) {
  EXPECT_EQ(Script("PING\n"
                   "PING hello\n"
                   "PING a b\n"
                   "ECHO \"hi there\"\n"
                   "ECHO\n"
                   "SELECT 0\n"
                   "SELECT 1\n"
                   "SELECT x\n"
                   "CLIENT GETNAME\n"
                   "CLIENT SETNAME app1\n"
                   "CLIENT GETNAME\n"
                   "CLIENT SETNAME \"a b\"\n"
                   "CLIENT SETINFO LIB-NAME mylib\n"
                   "CLIENT SETINFO lib-ver 1.2\n"
                   "CLIENT SETINFO FOO x\n"
                   "CLIENT NOPE\n"
                   "CLIENT\n"
                   "AUTH sometoken\n"
                   "AUTH default sometoken\n"
                   "AUTH a b c\n"
                   "FOO bar baz\n"
                   "foo\n"),
            "PONG\n"
            "\"hello\"\n" +
                Arity("ping") + "\"hi there\"\n" + Arity("echo") +
                "OK\n"
                "(error) ERR DB index is out of range (cuckood has one keyspace: database 0)\n"
                "(error) ERR value is not an integer or out of range\n"
                "(nil)\n"
                "OK\n"
                "\"app1\"\n"
                "(error) ERR Client names cannot contain spaces, newlines or special characters.\n"
                "OK\n"
                "OK\n"
                "(error) ERR Unrecognized option 'FOO'\n"
                "(error) ERR unknown subcommand or wrong number of arguments for 'NOPE'. cuckood "
                "serves CLIENT SETNAME, GETNAME, SETINFO, ID, INFO, LIST and KILL\n" +
                Arity("client") +
                "(error) ERR AUTH <password> called without any password configured for the "
                "default user. Are you sure your configuration is correct?\n"
                "OK\n"
                "(error) ERR syntax error\n"
                "(error) ERR unknown command 'FOO', with args beginning with: 'bar' 'baz' \n"
                "(error) ERR unknown command 'foo', with args beginning with: \n");
  // CLIENT ID: positive, one per connection.
  const std::string a = Run({"CLIENT", "ID"}), b = Run({"CLIENT", "ID"});
  EXPECT_THAT(a, StartsWith("(integer) "));
  EXPECT_NE(a, b);
  EXPECT_GT(std::stoll(a.substr(10)), 0);
}

TEST_P(RedisCliTest, HelloSwitchesTheProtocolAndDescribesTheServer) {
  // Placeholders for what varies: the connection's id, cuckood's version.
  auto normalise = [](std::string out) {
    for (const std::string marker : {"\"id\"\n 8) (integer) ", "\"id\" => (integer) "}) {
      if (size_t at = out.find(marker); at != std::string::npos) {
        at += marker.size();
        out.replace(at, out.find('\n', at) - at, "ID");
      }
    }
    for (const std::string marker : {"\"cuckood_version\"\n16) \"", "\"cuckood_version\" => \""}) {
      if (size_t at = out.find(marker); at != std::string::npos) {
        at += marker.size();
        out.replace(at, out.find('"', at) - at, "VERSION");
      }
    }
    return out;
  };
  const std::string resp2 =
      " 1) \"server\"\n"
      " 2) \"cuckood\"\n"
      " 3) \"version\"\n"
      " 4) \"7.0.0\"\n"
      " 5) \"proto\"\n"
      " 6) (integer) 2\n"
      " 7) \"id\"\n"
      " 8) (integer) ID\n"
      " 9) \"mode\"\n"
      "10) \"standalone\"\n"
      "11) \"role\"\n"
      "12) \"master\"\n"
      "13) \"modules\"\n"
      "14) 1) 1) \"name\"\n"
      "       2) \"bf\"\n"
      "       3) \"ver\"\n"
      "       4) (integer) 20612\n"
      "       5) \"path\"\n"
      "       6) \"\"\n"
      "       7) \"args\"\n"
      "       8) (empty array)\n"
      "15) \"cuckood_version\"\n"
      "16) \"VERSION\"\n";
  const std::string resp3 =
      "1# \"server\" => \"cuckood\"\n"
      "2# \"version\" => \"7.0.0\"\n"
      "3# \"proto\" => (integer) 3\n"
      "4# \"id\" => (integer) ID\n"
      "5# \"mode\" => \"standalone\"\n"
      "6# \"role\" => \"master\"\n"
      "7# \"modules\" => \n"
      "   1) 1# \"name\" => \"bf\"\n"
      "      2# \"ver\" => (integer) 20612\n"
      "      3# \"path\" => \"\"\n"
      "      4# \"args\" => (empty array)\n"
      "8# \"cuckood_version\" => \"VERSION\"\n";
  EXPECT_EQ(normalise(Run({"HELLO", "2"})), resp2);
  EXPECT_EQ(normalise(Run({"HELLO", "3"})), resp3);
  EXPECT_EQ(normalise(Run({"HELLO"})), P(resp2, resp3));  // No version: the connection's.
  // HELLO 3 then HELLO 2 on one connection: each reply in the protocol it chose.
  EXPECT_EQ(normalise(Script("HELLO 3\nHELLO 2\n")), resp3 + resp2);
  EXPECT_EQ(normalise(Script("HELLO 4\n"
                             "HELLO x\n"
                             "HELLO 3 FOO\n"
                             "HELLO 2 SETNAME\n"
                             "HELLO 2 SETNAME me\n"
                             "CLIENT GETNAME\n")),
            "(error) NOPROTO unsupported protocol version\n"
            "(error) ERR Protocol version is not an integer or out of range\n"
            "(error) ERR Syntax error in HELLO option 'FOO'\n"
            "(error) ERR Syntax error in HELLO option 'SETNAME'\n" +
                normalise(resp2) + "\"me\"\n");
}

TEST_P(RedisCliTest, CommandAndInfoAreEnoughForRedisCli) {
  EXPECT_EQ(Run({"COMMAND", "COUNT"}), "(integer) 50\n");
  EXPECT_EQ(Run({"COMMAND", "DOCS"}), P("(empty array)\n", "(empty hash)\n"));
  EXPECT_EQ(Run({"COMMAND", "DOCS", "cf.add"}), P("(empty array)\n", "(empty hash)\n"));
  EXPECT_EQ(Run({"COMMAND", "INFO", "nosuch"}), "1) (nil)\n");
  // Flags and ACL categories are sets: "1~" in RESP3.
  EXPECT_EQ(Run({"COMMAND", "INFO", "CF.MEXISTS"}),
            "1)  1) \"cf.mexists\"\n"
            "    2) (integer) -3\n" +
                P("    3) 1) readonly\n       2) fast\n", "    3) 1~ readonly\n       2~ fast\n") +
                "    4) (integer) 1\n"
                "    5) (integer) 1\n"
                "    6) (integer) 1\n" +
                P("    7) (empty array)\n    8) (empty array)\n",
                  "    7) (empty set)\n    8) (empty set)\n") +
                "    9) (empty array)\n"
                "   10) (empty array)\n");
  EXPECT_EQ(Run({"COMMAND", "FOO"}),
            "(error) ERR unknown subcommand 'FOO'. cuckood serves COMMAND, COMMAND COUNT, INFO, "
            "DOCS and LIST\n");
  const std::string all = Run({"COMMAND"});
  const std::string list = Run({"COMMAND", "LIST"});
  for (const char* name :
       {"cf.reserve", "cf.add",  "cf.addnx", "cf.insert", "cf.insertnx", "cf.exists",
        "cf.mexists", "cf.del",  "cf.count", "cf.info",   "cf.scandump", "cf.loadchunk",
        "ping",       "echo",    "hello",    "auth",      "select",      "client",
        "quit",       "command", "info",     "del",       "exists",      "type",
        "scan",       "keys",    "dbsize",   "config",    "reset",       "multi",
        "exec",       "discard", "watch",    "unwatch",   "unlink",      "flushall",
        "flushdb",    "memory",  "module",   "expire",    "pexpire",     "expireat",
        "pexpireat",  "ttl",     "pttl",     "persist",   "expiretime",  "pexpiretime",
        "rename",     "renamenx"}) {
    EXPECT_THAT(all, HasSubstr(std::string("\"") + name + "\"\n")) << name;
    EXPECT_THAT(list, HasSubstr(std::string("\"") + name + "\"\n")) << name;
  }
  EXPECT_EQ(Lines(list).size(), 50u) << list;

  ASSERT_EQ(Run({"CF.ADD", "a", "x"}), B(1));
  ASSERT_EQ(Run({"CF.ADD", "b", "x"}), B(1));
  // INFO is printed raw by redis-cli (RESP3: a verbatim string, its text).
  const std::string info = Run({"INFO"});
  for (const char* line :
       {"# Server", "redis_version:7.0.0", "redis_mode:standalone", "# Clients",
        "connected_clients:1", "# Memory", "# Keyspace", "db0:keys=2,expires=0,avg_ttl=0"}) {
    EXPECT_THAT(info, HasSubstr(std::string(line) + "\r\n")) << info;
  }
  EXPECT_THAT(info, HasSubstr("tcp_port:" + std::to_string(server_->redis_port()) + "\r\n"));
  const std::string keyspace = Run({"INFO", "keyspace"});
  EXPECT_EQ(keyspace, "# Keyspace\r\ndb0:keys=2,expires=0,avg_ttl=0\r\n");
  EXPECT_THAT(Run({"INFO", "modules"}), HasSubstr("module:name=bf,ver=20612,"));
  EXPECT_THAT(Run({"INFO", "modules"}), Not(HasSubstr("# Server")));
}

TEST_P(RedisCliTest, KeyspaceCommandsSeeFilters) {
  EXPECT_EQ(Script("CF.ADD alpha x\n"
                   "CF.ADD beta x\n"
                   "CF.ADD gamma.1 x\n"
                   "CF.RESERVE delta 100\n"
                   "DBSIZE\n"
                   "EXISTS alpha beta nope\n"
                   "EXISTS alpha alpha\n"
                   "TYPE alpha\n"
                   "TYPE nope\n"
                   "KEYS *\n"
                   "KEYS g*\n"
                   "KEYS zz*\n"
                   "KEYS [ab]*\n"
                   "SCAN 0 COUNT 0\n"
                   "SCAN x\n"
                   "SCAN 0 COUNT x\n"
                   "SCAN 0 FOO\n"
                   "SCAN 0 MATCH\n"
                   "SCAN 0 TYPE string COUNT 100\n"
                   "SCAN 0 MATCH gamma* COUNT 100\n"
                   "SCAN 0 MATCH gamma* TYPE mbbloomcf COUNT 100\n"
                   "KEYS\n"
                   "DBSIZE x\n"
                   "TYPE\n"
                   "EXISTS\n"
                   "SCAN\n"
                   "DEL alpha nope \"bad name\"\n"
                   "DEL\n"
                   "DBSIZE\n"
                   "TYPE alpha\n"
                   "CF.EXISTS alpha x\n"),
            B(1) + B(1) + B(1) +
                "OK\n"
                "(integer) 4\n"
                "(integer) 2\n"
                "(integer) 2\n"
                "MBbloomCF\n"
                "none\n"
                "1) \"alpha\"\n2) \"beta\"\n3) \"delta\"\n4) \"gamma.1\"\n"
                "1) \"gamma.1\"\n"
                "(empty array)\n"
                "1) \"alpha\"\n2) \"beta\"\n"
                "(error) ERR syntax error\n"
                "(error) ERR invalid cursor\n"
                "(error) ERR value is not an integer or out of range\n"
                "(error) ERR syntax error\n"
                "(error) ERR syntax error\n"
                "1) \"0\"\n2) (empty array)\n"
                "1) \"0\"\n2) 1) \"gamma.1\"\n"
                "1) \"0\"\n2) 1) \"gamma.1\"\n" +
                Arity("keys") + Arity("dbsize") + Arity("type") + Arity("exists") + Arity("scan") +
                "(integer) 1\n" + Arity("del") +
                "(integer) 3\n"
                "none\n" +
                B(0));

  // A whole SCAN, one name at a time (raw output: the cursor, then names):
  // every filter exactly once, and it ends at cursor 0.
  std::multiset<std::string> seen;
  std::string cursor = "0";
  int calls = 0;
  do {
    Result r = Cli({"SCAN", cursor, "COUNT", "1"}, "", {}, /*raw=*/true);
    ASSERT_EQ(r.code, 0) << r.err;
    std::vector<std::string> lines = Lines(r.out);
    ASSERT_FALSE(lines.empty());
    cursor = lines[0];
    seen.insert(lines.begin() + 1, lines.end());
    ASSERT_LT(++calls, 10);
  } while (cursor != "0");
  EXPECT_EQ(seen, (std::multiset<std::string>{"beta", "delta", "gamma.1"}));
}

TEST_P(RedisCliTest, ScanDumpAndLoadChunkCopyAFilter) {
  std::string items;
  for (int i = 0; i < 500; ++i) items += " item" + std::to_string(i);
  ASSERT_EQ(Script("CF.RESERVE d 1000\nCF.INSERT d ITEMS" + items + "\n").substr(0, 3), "OK\n");
  // The first call as redis-cli prints it: the iterator, then the header
  // chunk ("CKDUMP01", then the snapshot's size and items, u64 LE).
  const std::string first = Run({"CF.SCANDUMP", "d", "0"});
  EXPECT_THAT(first, StartsWith("1) (integer) 4294967297\n2) \"CKDUMP01"));
  EXPECT_THAT(first, HasSubstr("\\xf4\\x01\\x00\\x00\\x00\\x00\\x00\\x00\"\n"));  // 500 items
  // A dump belongs to its connection, and each redis-cli run is a
  // connection of its own: the dump above ended with it, and its iterators
  // are refused on another.
  const std::string first_it = first.substr(13, first.find('\n') - 13);
  EXPECT_THAT(Run({"CF.SCANDUMP", "d", first_it}),
              StartsWith("(error) ERR no CF.SCANDUMP of 'd' is in progress on this connection"));
  // So the loop runs on one connection (one redis-cli reading commands).
  // Its iterators are the dump's id (high 32 bits) and the chunk numbers:
  // this server makes no other dumps, so the ids follow the first one's
  // (the raw run below takes the next, the loop the one after), and the
  // header gives the number of chunks. (The first reply's iterator is
  // checked below: a wrong guess fails there.)
  const uint64_t id = (std::stoull(first_it) >> 32) + 1;
  ASSERT_THAT(first, HasSubstr("\"CKDUMP01"));
  std::string script = "CF.SCANDUMP d 0\n";
  uint64_t snapshot_bytes = 0;
  {
    // The header's snapshot size, printed escaped: read it back from a raw
    // run (binary: 8 bytes after the magic).
    Result raw = Cli({"CF.SCANDUMP", "d", "0"}, "", {}, /*raw=*/true);
    ASSERT_EQ(raw.code, 0) << raw.err;
    const size_t magic = raw.out.find("CKDUMP01");
    ASSERT_NE(magic, std::string::npos);
    for (int i = 7; i >= 0; --i) {
      snapshot_bytes = snapshot_bytes << 8 | static_cast<uint8_t>(raw.out[magic + 8 + i]);
    }
  }
  const uint64_t data_chunks = (snapshot_bytes + (1 << 20) - 1) >> 20;
  ASSERT_GE(data_chunks, 1u);
  for (uint64_t chunk = 1; chunk <= data_chunks + 1; ++chunk) {
    script += "CF.SCANDUMP d " + std::to_string(((id + 1) << 32) | chunk) + "\n";
  }
  // Each reply: "1) (integer) <iterator>", then "2) <the chunk as
  // redis-cli prints it>", which it also reads back as the same bytes.
  const std::string dumped = Script(script);
  const std::vector<std::string> printed = Lines(dumped);
  ASSERT_EQ(printed.size(), 2 * (data_chunks + 2)) << dumped;
  std::vector<std::pair<std::string, std::string>> chunks;
  for (size_t i = 0; i + 1 < printed.size(); i += 2) {
    ASSERT_THAT(printed[i], StartsWith("1) (integer) "));
    ASSERT_THAT(printed[i + 1], StartsWith("2) "));
    chunks.emplace_back(printed[i].substr(13), printed[i + 1].substr(3));
  }
  // The last reply is iterator 0 and nil, as RedisBloom's.
  EXPECT_EQ(chunks.back(), (std::pair<std::string, std::string>{"0", "(nil)"}));
  chunks.pop_back();
  EXPECT_EQ(chunks[0].first, std::to_string(((id + 1) << 32) | 1));
  ASSERT_GE(chunks.size(), 2u);
  // Loaded on one connection too (a load belongs to its connection).
  std::string load;
  for (const auto& [it, data] : chunks) load += "CF.LOADCHUNK copy " + it + " " + data + "\n";
  EXPECT_EQ(Script(load), [&] {
    std::string ok;
    for (size_t i = 0; i < chunks.size(); ++i) ok += "OK\n";
    return ok;
  }());
  // An empty filter's dump is [0, nil] at once, as RedisBloom's.
  ASSERT_EQ(Run({"CF.RESERVE", "empty", "100"}), "OK\n");
  EXPECT_EQ(Run({"CF.SCANDUMP", "empty", "0"}), "1) (integer) 0\n2) (nil)\n");
  std::vector<int> ones(500, 1);
  EXPECT_EQ(Run([&] {
              std::vector<std::string> args = {"CF.MEXISTS", "copy"};
              for (int i = 0; i < 500; ++i) args.push_back("item" + std::to_string(i));
              return args;
            }()),
            [&] {
              // 500 elements: redis-cli pads the indices to 3 columns.
              std::string out;
              for (int i = 1; i <= 500; ++i) {
                std::string idx = std::to_string(i);
                out += std::string(3 - idx.size(), ' ') + idx + ") " + Bool(1) + "\n";
              }
              return out;
            }());
  EXPECT_EQ(InfoMap("copy")["Number of items inserted"], "(integer) 500");
  EXPECT_EQ(Run({"CF.EXISTS", "copy", "nope"}), B(0));

  EXPECT_EQ(Script("CF.SCANDUMP missing 0\n"
                   "CF.SCANDUMP d x\n"
                   "CF.SCANDUMP d -1\n"
                   "CF.SCANDUMP d\n"
                   "CF.LOADCHUNK other 0 x\n"
                   "CF.LOADCHUNK other 1 garbage\n"
                   "CF.LOADCHUNK other 2 x\n"
                   "CF.LOADCHUNK copy 1\n"),
            "(error) ERR not found\n"
            "(error) Invalid position: the iterator is a non-negative integer, 0 to start\n"
            "(error) Invalid position: the iterator is a non-negative integer, 0 to start\n" +
                Arity("cf.scandump") +
                "(error) Invalid position: use the iterator CF.SCANDUMP returned with this chunk\n"
                "(error) Invalid header: this is not the first chunk of a cuckood CF.SCANDUMP "
                "(chunks of RedisBloom's own dumps cannot be loaded: see "
                "docs/REDIS_COMPATIBILITY.md)\n"
                "(error) ERR no CF.LOADCHUNK of 'other' is in progress on this connection (a load "
                "ends with the connection that sent its first chunk): load the dump's first "
                "chunk first\n" +
                Arity("cf.loadchunk"));
  EXPECT_THAT(Run({"CF.SCANDUMP", "d", "999"}),
              StartsWith("(error) ERR no CF.SCANDUMP of 'd' is in progress on this connection "
                         "with iterator 999 "));
  // Loading the header again onto an existing filter is refused.
  EXPECT_THAT(Script("CF.LOADCHUNK copy " + chunks[0].first + " " + chunks[0].second + "\n"),
              StartsWith("(error) ERR item exists: filter 'copy' exists; DEL it first"));
}

TEST_P(RedisCliTest, FiltersAreSharedWithTheGrpcApi) {
  // Made over gRPC, used over RESP.
  Result created = Ctl({"create", "grpcf", "--capacity=1000", "--fingerprint-bits=32", "--seed=7"});
  ASSERT_EQ(created.code, 0) << created.out << created.err;
  ASSERT_EQ(Ctl({"insert", "grpcf", "k1", "k2"}).code, 0);
  EXPECT_EQ(Script("TYPE grpcf\n"
                   "CF.EXISTS grpcf k1\n"
                   "CF.MEXISTS grpcf k1 k2 k3\n"
                   "CF.ADD grpcf k3\n"
                   "CF.RESERVE grpcf 10\n"),
            "MBbloomCF\n" + B(1) + Bools({1, 1, 0}) + B(1) + "(error) ERR item exists\n");
  std::map<std::string, std::string> info = InfoMap("grpcf");
  EXPECT_EQ(info["Capacity"], "(integer) 1000");
  EXPECT_EQ(info["Fingerprint bits"], "(integer) 32");
  EXPECT_EQ(info["Number of items inserted"], "(integer) 3");
  EXPECT_EQ(info["Expansion rate"], "(integer) 0");
  Result lookup = Ctl({"lookup", "grpcf", "k3"});
  EXPECT_EQ(lookup.code, 0) << lookup.err;
  EXPECT_EQ(lookup.out, "present\tk3\n");

  // Made over RESP, seen over gRPC.
  ASSERT_EQ(Run({"CF.RESERVE", "respf", "5000", "BUCKETSIZE", "2"}), "OK\n");
  ASSERT_EQ(Run({"CF.INSERT", "respf", "ITEMS", "x", "y"}), Bools({1, 1}));
  Result ctl_info = Ctl({"info", "respf"});
  ASSERT_EQ(ctl_info.code, 0) << ctl_info.out << ctl_info.err;
  EXPECT_THAT(ctl_info.out, HasSubstr("name:"));
  EXPECT_THAT(ctl_info.out, HasSubstr("respf"));
  EXPECT_THAT(ctl_info.out, HasSubstr("5000"));
  Result found = Ctl({"lookup", "respf", "x", "y", "z"});
  EXPECT_EQ(found.out, "present\tx\npresent\ty\nabsent\tz\n") << found.err;
  // Dropped on one side, gone on the other.
  ASSERT_EQ(Ctl({"drop", "respf"}).code, 0);
  EXPECT_EQ(Run({"TYPE", "respf"}), "none\n");
  EXPECT_EQ(Run({"DEL", "grpcf"}), "(integer) 1\n");
  EXPECT_NE(Ctl({"info", "grpcf"}).code, 0);
}

// QUIT: +OK, then the server closes the connection (redis-cli handles QUIT
// itself, so a plain socket checks it).
TEST_P(RedisCliTest, QuitRepliesOkThenCloses) {
  RespConn c(server_->redis_port());
  ASSERT_TRUE(c.ok());
  if (protocol() == 3) {
    std::optional<RespReply> hello = c.Call({"HELLO", "3"});
    ASSERT_TRUE(hello.has_value());
    EXPECT_EQ(hello->type, '%');
  }
  std::optional<RespReply> ok = c.Call({"QUIT"});
  ASSERT_TRUE(ok.has_value());
  EXPECT_EQ(ok->type, '+');
  EXPECT_EQ(ok->str, "OK");
  EXPECT_TRUE(c.WaitClosed());
  // And redis-cli's own QUIT ends its session quietly.
  Result r = Cli({}, "PING\nQUIT\n");
  EXPECT_EQ(r.code, 0);
  EXPECT_EQ(r.out, "PONG\n");
}

// --auth-tokens: AUTH with a token (or HELLO ... AUTH), grants as on gRPC.
class RedisCliAuthTest : public RedisCliTest {
 protected:
  struct Token {
    std::string token, entry;
  };
  static Token HashToken(const std::string& name, const std::string& grant) {
    Result r = RunProcess({CUCKOOCTL_PATH, "hash-token", name, "--grant=" + grant});
    EXPECT_EQ(r.code, 0) << r.out << r.err;
    std::vector<std::string> lines = Lines(r.out);
    EXPECT_EQ(lines.size(), 2u) << r.out;
    if (lines.size() != 2) return {};
    return {lines[0], lines[1]};
  }
  void SetUp() override {
    admin_ = HashToken("ops", "admin:*");
    reader_ = HashToken("reader", "read:*");
    writer_ = HashToken("app-writer", "write:app.*");
    const std::string path = dir_.path() + "/access.conf";
    WriteFile(path, admin_.entry + "\n" + reader_.entry + "\n" + writer_.entry + "\n");
    Start({"--redis-error-rate=1e-7", "--auth-tokens=" + path});
  }
  TempDir dir_;
  Token admin_, reader_, writer_;
};

INSTANTIATE_TEST_SUITE_P(Resp, RedisCliAuthTest, ::testing::Values(2, 3),
                         [](const ::testing::TestParamInfo<int>& p) {
                           return "Resp" + std::to_string(p.param);
                         });

TEST_P(RedisCliAuthTest, TokensAuthenticateAndGrantsApply) {
  // redis-cli -a TOKEN: AUTH first (then HELLO 3 with -3).
  auto as = [&](const Token& t, const std::string& script) {
    return Script(script, {"--no-auth-warning", "-a", t.token});
  };
  EXPECT_EQ(as(admin_, "CF.RESERVE app.f 1000\nCF.ADD app.f a\nCF.RESERVE other 100\n"),
            "OK\n" + B(1) + "OK\n");
  EXPECT_EQ(as(reader_, "CF.EXISTS app.f a\nCF.MEXISTS app.f a b\nDBSIZE\nCF.COUNT app.f a\n"),
            B(1) + Bools({1, 0}) + "(integer) 2\n(integer) 1\n");
  std::vector<std::string> denied = Lines(as(reader_,
                                             "CF.ADD app.f b\nCF.RESERVE x 10\nDEL "
                                             "app.f\nCF.SCANDUMP app.f 0\n"));
  ASSERT_EQ(denied.size(), 4u);
  for (const std::string& line : denied) EXPECT_THAT(line, StartsWith("(error) NOPERM ")) << line;
  EXPECT_THAT(denied[2], HasSubstr("\"reader\" may not run DEL on filter 'app.f'"));
  EXPECT_EQ(as(writer_, "CF.ADD app.f b\nCF.INSERT app.f ITEMS c\nCF.DEL app.f c\n"),
            B(1) + Bools({1}) + B(1));
  std::vector<std::string> writer_denied =
      Lines(as(writer_, "CF.ADD other b\nCF.EXISTS other b\nCF.RESERVE app.g 10\n"));
  ASSERT_EQ(writer_denied.size(), 3u);
  for (const std::string& line : writer_denied) EXPECT_THAT(line, StartsWith("(error) NOPERM "));
  // What a reader may not read is not listed.
  EXPECT_EQ(as(writer_, "KEYS *\nDBSIZE\nEXISTS other app.f\n"),
            "1) \"app.f\"\n(integer) 1\n(integer) 1\n");
  // --user/--pass sends AUTH user pass: the user name is ignored.
  EXPECT_EQ(Script("CF.EXISTS app.f a\n",
                   {"--no-auth-warning", "--user", "someone", "--pass", reader_.token}),
            B(1));
}

TEST_P(RedisCliAuthTest, WithoutAuthOnlyAuthHelloAndQuitRun) {
  if (protocol() == 3) GTEST_SKIP() << "redis-cli -3 sends HELLO 3 first, which needs AUTH";
  const std::string noauth = "(error) NOAUTH Authentication required.\n";
  std::vector<std::string> lines =
      Lines(Script("PING\n"
                   "CF.EXISTS f a\n"
                   "CF.RESERVE f 10\n"
                   "KEYS *\n"
                   "HELLO 3\n"
                   "AUTH not-a-token\n"
                   "AUTH " +
                   reader_.token +
                   "\n"
                   "PING\n"
                   "CF.RESERVE f 10\n"
                   "HELLO 2 AUTH default " +
                   admin_.token +
                   " SETNAME adm\n"
                   "CF.RESERVE f 10\n"
                   "CLIENT GETNAME\n"
                   "HELLO 2 AUTH default nope\n"));
  ASSERT_GE(lines.size(), 12u);
  EXPECT_EQ(lines[0] + "\n", noauth);
  EXPECT_EQ(lines[1] + "\n", noauth);
  EXPECT_EQ(lines[2] + "\n", noauth);
  EXPECT_EQ(lines[3] + "\n", noauth);
  EXPECT_THAT(lines[4], StartsWith("(error) NOAUTH HELLO must be called with the client already "
                                   "authenticated"));
  EXPECT_THAT(lines[5], StartsWith("(error) WRONGPASS invalid username-password pair or user is "
                                   "disabled."));
  EXPECT_EQ(lines[6], "OK");
  EXPECT_EQ(lines[7], "PONG");
  EXPECT_THAT(lines[8], StartsWith("(error) NOPERM "));
  EXPECT_EQ(lines[9], " 1) \"server\"");  // HELLO 2's map, as an array
  ASSERT_EQ(lines.size(), 9u + 23 + 3) << Script("");
  EXPECT_EQ(lines[32], "OK");
  EXPECT_EQ(lines[33], "\"adm\"");
  EXPECT_THAT(lines[34], StartsWith("(error) WRONGPASS "));
}

}  // namespace
}  // namespace cuckoo::testing
