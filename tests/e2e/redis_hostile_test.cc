// Bad input on the Redis port of a real cuckood, over plain sockets: lengths
// that are too big or negative, a missing CRLF, a 10^6-argument header, half
// a command then a close, garbage bytes, large declared arguments that never
// arrive, and 200 connections at once. Each bad connection gets an error
// reply (Redis's wording) and is closed, or is just closed; the server stays
// up, answers PING on a new connection afterwards, and its resident memory
// stays bounded (declared lengths are never allocated up front).
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "tests/e2e/redis_test_util.h"

namespace cuckoo::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

class RedisHostileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    server_ = std::make_unique<RedisCuckood>(data_.path());
    ASSERT_TRUE(server_->ready()) << server_->Log();
    ExpectAlive();
    baseline_kib_ = RssKib(server_->process().pid());
    ASSERT_GT(baseline_kib_, 0u);
  }
  void TearDown() override {
    ExpectAlive();
    const uint64_t rss = RssKib(server_->process().pid());
    std::cout << "RSS " << baseline_kib_ / 1024 << " MiB at the start, " << rss / 1024
              << " MiB at the end\n";
    EXPECT_LT(rss, baseline_kib_ + 200 * 1024) << "the server's memory grew by more than 200 MiB";
  }

  // The process runs and a new connection gets PONG.
  void ExpectAlive() {
    ASSERT_EQ(server_->process().Wait(std::chrono::milliseconds(0)), -1)
        << "cuckood exited: " << server_->Log();
    RespConn c(server_->redis_port());
    ASSERT_TRUE(c.ok());
    std::optional<RespReply> pong = c.Call({"PING"});
    ASSERT_TRUE(pong.has_value()) << "no reply to PING";
    EXPECT_EQ(pong->type, '+');
    EXPECT_EQ(pong->str, "PONG");
  }

  // Sends `bytes` on a new connection: the reply must be an error containing
  // `error` and then the connection is closed.
  void ExpectErrorThenClose(const std::string& bytes, const std::string& error) {
    RespConn c(server_->redis_port());
    ASSERT_TRUE(c.ok());
    c.Send(bytes);  // The server may close before all is sent.
    std::optional<RespReply> r = c.Read();
    ASSERT_TRUE(r.has_value()) << "no reply (closed " << c.closed() << ")";
    EXPECT_EQ(r->type, '-') << r->str;
    EXPECT_THAT(r->str, HasSubstr(error));
    EXPECT_TRUE(c.WaitClosed()) << "the connection stayed open after a protocol error";
  }

  TempDir data_;
  std::unique_ptr<RedisCuckood> server_;
  uint64_t baseline_kib_ = 0;
};

TEST_F(RedisHostileTest, TwoGibibyteBulkLengthIsRefusedAtOnce) {
  ExpectErrorThenClose("*2\r\n$4\r\nECHO\r\n$2147483648\r\n",
                       "ERR Protocol error: bulk length 2147483648 is over the limit of ");
  ExpectErrorThenClose("*1\r\n$99999999999999999999999\r\n", "ERR Protocol error: ");
}

TEST_F(RedisHostileTest, NegativeLengthsAreProtocolErrors) {
  ExpectErrorThenClose("*2\r\n$4\r\nECHO\r\n$-5\r\n", "ERR Protocol error: invalid bulk length");
  ExpectErrorThenClose("*2\r\n$4\r\nECHO\r\n$-1\r\n", "ERR Protocol error: invalid bulk length");
  ExpectErrorThenClose("*x\r\n", "ERR Protocol error: invalid multibulk length");
  ExpectErrorThenClose("*2\r\n$x\r\n", "ERR Protocol error: invalid bulk length");
  ExpectErrorThenClose("*2\r\n:4\r\n", "ERR Protocol error: expected '$', got ':'");
  // *0, *-1 and other negative counts are empty commands, skipped without
  // a reply, as in Redis (processMultibulkBuffer: a count <= 0).
  RespConn c(server_->redis_port());
  ASSERT_TRUE(c.Send("*0\r\n*-1\r\n*-5\r\n*1\r\n$4\r\nPING\r\n"));
  std::optional<RespReply> pong = c.Read();
  ASSERT_TRUE(pong.has_value());
  EXPECT_EQ(pong->str, "PONG");
}

TEST_F(RedisHostileTest, MissingCrlfAfterBulkDataIsAnError) {
  ExpectErrorThenClose("*1\r\n$4\r\nPINGXX\r\n", "ERR Protocol error: ");
  ExpectErrorThenClose("*2\r\n$4\r\nECHO\r\n$3\r\nabcdefgh", "ERR Protocol error: ");
}

TEST_F(RedisHostileTest, MillionArgumentHeaderIsRefusedWithoutAllocating) {
  ExpectErrorThenClose("*1000000\r\n",
                       "ERR Protocol error: 1000000 arguments is over the limit of ");
  // And many such headers at once, each followed by some arguments.
  std::vector<std::unique_ptr<RespConn>> conns;
  for (int i = 0; i < 50; ++i) {
    conns.push_back(std::make_unique<RespConn>(server_->redis_port()));
    conns.back()->Send("*1000000\r\n$1\r\na\r\n$1\r\nb\r\n");
  }
  for (auto& c : conns) {
    std::optional<RespReply> r = c->Read();
    ASSERT_TRUE(r.has_value());
    EXPECT_EQ(r->type, '-');
    EXPECT_TRUE(c->WaitClosed());
  }
  // Under the limit but still large: 100,000 arguments, sent whole, is a
  // command (an unknown one here).
  std::string big = "*100000\r\n$3\r\nFOO\r\n";
  for (int i = 1; i < 100000; ++i) big += "$1\r\nx\r\n";
  RespConn c(server_->redis_port());
  ASSERT_TRUE(c.Send(big));
  std::optional<RespReply> r = c.Read();
  ASSERT_TRUE(r.has_value());
  EXPECT_THAT(r->str, StartsWith("ERR unknown command 'FOO', with args beginning with: 'x' "));
}

TEST_F(RedisHostileTest, HalfCommandThenCloseIsQuiet) {
  for (int i = 0; i < 20; ++i) {
    RespConn c(server_->redis_port());
    ASSERT_TRUE(c.Send("*3\r\n$6\r\nCF.ADD\r\n$1\r\nf\r\n$10\r\nhal"));
    if (i % 2 == 0) {
      c.ShutdownWrite();
      EXPECT_TRUE(c.WaitClosed());  // No reply: closed.
      EXPECT_EQ(c.Unparsed(), "");
    }
  }
  ExpectAlive();
  // Nothing of it was run.
  RespConn c(server_->redis_port());
  std::optional<RespReply> r = c.Call({"EXISTS", "f"});
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->integer, 0);
}

TEST_F(RedisHostileTest, GarbageBytesGetErrorsOrAClose) {
  std::mt19937 rng(17);
  for (int round = 0; round < 20; ++round) {
    std::string junk(4096 + round * 5000, '\0');
    for (char& ch : junk) ch = static_cast<char>(rng());
    if (round % 3 == 0) junk[0] = '*';  // A broken multibulk header.
    if (round % 3 == 1) junk[0] = '$';
    RespConn c(server_->redis_port(), std::chrono::seconds(5));
    ASSERT_TRUE(c.ok());
    c.Send(junk);
    c.ShutdownWrite();
    // Every reply is an error, and the connection ends.
    int replies = 0;
    while (std::optional<RespReply> r = c.Read()) {
      EXPECT_EQ(r->type, '-') << "round " << round << ": " << r->str;
      ++replies;
    }
    EXPECT_TRUE(c.closed()) << "round " << round << ": still open after " << replies << " replies";
  }
  // An endless inline line: refused once it passes the inline limit.
  ExpectErrorThenClose(std::string(200 << 10, 'a'), "ERR Protocol error: too big inline request");
  ExpectErrorThenClose("PING \"unbalanced\r\n", "ERR Protocol error: unbalanced quotes in request");
}

TEST_F(RedisHostileTest, LargeDeclaredArgumentsThatNeverArriveKeepMemoryBounded) {
  // 100 connections each declaring a 1 MiB argument (under the limit) and
  // sending half of it: at most what was sent is held.
  std::vector<std::unique_ptr<RespConn>> conns;
  const std::string half(512 << 10, 'x');
  for (int i = 0; i < 100; ++i) {
    conns.push_back(std::make_unique<RespConn>(server_->redis_port()));
    ASSERT_TRUE(conns.back()->Send("*3\r\n$6\r\nCF.ADD\r\n$1\r\nf\r\n$1048576\r\n"));
    ASSERT_TRUE(conns.back()->Send(half));
  }
  ExpectAlive();
  const uint64_t rss = RssKib(server_->process().pid());
  std::cout << "100 half-sent 1 MiB arguments: RSS " << rss / 1024 << " MiB\n";
  EXPECT_LT(rss, baseline_kib_ + 200 * 1024);
  conns.clear();
  // An argument over the limit is refused from its header.
  ExpectErrorThenClose("*3\r\n$6\r\nCF.ADD\r\n$1\r\nf\r\n$200000000\r\n",
                       "ERR Protocol error: bulk length 200000000 is over the limit of ");
}

TEST_F(RedisHostileTest, TwoHundredConnectionsAtOnceAreAllServed) {
  std::vector<std::unique_ptr<RespConn>> conns;
  for (int i = 0; i < 200; ++i) {
    conns.push_back(std::make_unique<RespConn>(server_->redis_port()));
    ASSERT_TRUE(conns.back()->ok()) << i;
  }
  // Every connection sends its pipeline before any reads.
  for (int i = 0; i < 200; ++i) {
    std::string pipeline = RespConn::Encode({"PING"});
    pipeline += RespConn::Encode({"CF.ADD", "many", "k" + std::to_string(i)});
    pipeline += RespConn::Encode({"CF.EXISTS", "many", "k" + std::to_string(i)});
    if (i % 10 == 0) pipeline += "*1\r\n$-7\r\n";  // and some end with a protocol error
    ASSERT_TRUE(conns[i]->Send(pipeline));
  }
  for (int i = 0; i < 200; ++i) {
    std::optional<RespReply> pong = conns[i]->Read(), add = conns[i]->Read(),
                             exists = conns[i]->Read();
    ASSERT_TRUE(pong && add && exists) << i;
    EXPECT_EQ(pong->str, "PONG");
    EXPECT_EQ(add->type, ':');
    EXPECT_EQ(add->integer, 1) << i;
    EXPECT_EQ(exists->integer, 1) << i;
    if (i % 10 == 0) {
      std::optional<RespReply> error = conns[i]->Read();
      ASSERT_TRUE(error.has_value());
      EXPECT_EQ(error->type, '-');
      EXPECT_TRUE(conns[i]->WaitClosed());
    }
  }
  RespConn c(server_->redis_port());
  std::optional<RespReply> info = c.Call({"CF.INFO", "many"});
  ASSERT_TRUE(info.has_value());
  ASSERT_EQ(info->type, '*');
  EXPECT_EQ(info->elems.at(6).str, "Number of items inserted");
  EXPECT_EQ(info->elems.at(7).integer, 200);
}

}  // namespace
}  // namespace cuckoo::testing
