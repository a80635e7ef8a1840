// The Redis port's commands (server/resp/commands/resp_commands.h) against an in-process
// cuckood, over a socket, with a small RESP client of the test's own: the
// replies byte for byte as RedisBloom's clients read them, pipelines, the
// filters shared with gRPC, authentication and grants, CF.SCANDUMP /
// CF.LOADCHUNK, durability across a restart, and the metrics. (Real clients,
// redis-cli and redis-py, are in tests/e2e/redis_*.)
#include "server/resp/commands/resp_commands.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <malloc.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "base/little_endian.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/security/access.h"
#include "tests/util/fault_wal_env.h"
#include "tests/util/loopback.h"
#include "tests/util/sanitizers.h"
#include "tests/util/test_server.h"

#if defined(CUCKOO_ASAN)
// ASan's runtime (sanitizer/allocator_interface.h, which g++ 12 does not
// install): bytes allocated and not freed, quarantine excluded.
extern "C" size_t __sanitizer_get_current_allocated_bytes();
#endif

namespace cuckoo::testing {
namespace {

using ::testing::HasSubstr;

// One connection: sends commands as RESP arrays, reads replies as text:
// "OK" (simple), "-ERR ..." (error), ":1" (integer), "$abc" (bulk), "nil",
// "[a,b]" (array / set / map flattened), ",0.5" (double), "#t" (boolean).
class RespClient {
 public:
  explicit RespClient(int port) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    connected_ = ConnectLoopback(fd_, port);
    const int one = 1;
    ::setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  }
  ~RespClient() { ::close(fd_); }
  bool connected() const { return connected_; }
  // A reply not read within `timeout` reads as "<closed>" (default: wait).
  void SetReadTimeout(std::chrono::seconds timeout) {
    timeval tv{};
    tv.tv_sec = static_cast<time_t>(timeout.count());
    ::setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  }

  static std::string Encode(const std::vector<std::string>& args) {
    std::string out = absl::StrCat("*", args.size(), "\r\n");
    for (const std::string& a : args) absl::StrAppend(&out, "$", a.size(), "\r\n", a, "\r\n");
    return out;
  }
  void SendRaw(const std::string& bytes) {
    size_t off = 0;
    while (off < bytes.size()) {
      const ssize_t n = ::send(fd_, bytes.data() + off, bytes.size() - off, MSG_NOSIGNAL);
      if (n <= 0) return;
      off += static_cast<size_t>(n);
    }
  }
  void Send(const std::vector<std::string>& args) { SendRaw(Encode(args)); }
  std::string Call(const std::vector<std::string>& args) {
    Send(args);
    return Read();
  }
  // The next reply; "<closed>" if the connection ended.
  std::string Read() {
    std::string line;
    if (!Line(&line)) return "<closed>";
    const char type = line[0];
    const std::string rest = line.substr(1);
    switch (type) {
      case '+':
        return rest;
      case '-':
        return "-" + rest;
      case ':':
        return ":" + rest;
      case ',':
        return "," + rest;
      case '#':
        return "#" + rest;
      case '_':
        return "nil";
      case '$':
      case '=': {
        const long n = std::stol(rest);
        if (n < 0) return "nil";
        std::string data;
        if (!Bytes(static_cast<size_t>(n) + 2, &data)) return "<closed>";
        data.resize(static_cast<size_t>(n));
        return "$" + data;
      }
      case '*':
      case '~':
      case '%':
      case '>': {
        long n = std::stol(rest);
        if (n < 0) return "nil";
        if (type == '%') n *= 2;
        std::vector<std::string> items;
        for (long i = 0; i < n; ++i) items.push_back(Read());
        return "[" + absl::StrJoin(items, ",") + "]";
      }
      default:
        return "<bad reply " + line + ">";
    }
  }
  // The raw bulk bytes of the next reply, which must be [integer, bulk].
  bool ReadDumpChunk(int64_t* iterator, std::string* data) {
    std::string line;
    if (!Line(&line) || line != "*2") return false;
    if (!Line(&line) || line[0] != ':') return false;
    *iterator = std::stoll(line.substr(1));
    if (!Line(&line) || line[0] != '$') return false;
    const long n = std::stol(line.substr(1));
    if (!Bytes(static_cast<size_t>(n) + 2, data)) return false;
    data->resize(static_cast<size_t>(n));
    return true;
  }

 private:
  bool Fill() {
    char buf[65536];
    const ssize_t n = ::recv(fd_, buf, sizeof(buf), 0);
    if (n <= 0) return false;
    in_.append(buf, static_cast<size_t>(n));
    return true;
  }
  bool Line(std::string* line) {
    size_t end;
    while ((end = in_.find("\r\n")) == std::string::npos) {
      if (!Fill()) return false;
    }
    *line = in_.substr(0, end);
    in_.erase(0, end + 2);
    return !line->empty();
  }
  bool Bytes(size_t n, std::string* out) {
    while (in_.size() < n) {
      if (!Fill()) return false;
    }
    *out = in_.substr(0, n);
    in_.erase(0, n);
    return true;
  }

  int fd_ = -1;
  bool connected_ = false;
  std::string in_;
};

// Commands sent at once, and the reply each must get, in order.
struct Pipeline {
  std::string bytes;
  std::vector<std::string> expected;
  void Add(const std::vector<std::string>& command, std::string reply) {
    bytes += RespClient::Encode(command);
    expected.push_back(std::move(reply));
  }
  // Sends them all, then reads every reply.
  void SendAndCheck(RespClient& c) const {
    c.SendRaw(bytes);
    for (size_t i = 0; i < expected.size(); ++i) ASSERT_EQ(c.Read(), expected[i]) << "reply " << i;
  }
};

class RedisPortTest : public ServerTest {
 protected:
  void SetUp() override { StartServer(Config()); }
  server::ServerConfig Config() {
    server::ServerConfig c = TestConfig(dir_.path());
    c.redis_listen = "127.0.0.1:0";
    c.max_filters = 64;
    c.max_key_bytes = 64;
    c.max_batch_keys = 5000;
    c.max_message_bytes = 4 << 20;
    return c;
  }
  int port() { return server_->redis_port(); }
};

TEST_F(RedisPortTest, CfCommandsAnswerAsRedisBloom) {
  RespClient c(port());
  ASSERT_TRUE(c.connected());
  EXPECT_EQ(c.Call({"PING"}), "PONG");
  EXPECT_EQ(c.Call({"CF.RESERVE", "f", "1000"}), "OK");
  EXPECT_EQ(c.Call({"CF.RESERVE", "f", "1000"}), "-ERR item exists");
  EXPECT_EQ(c.Call({"cf.add", "f", "a"}), ":1");
  EXPECT_EQ(c.Call({"CF.ADDNX", "f", "a"}), ":0");
  EXPECT_EQ(c.Call({"CF.ADDNX", "f", "b"}), ":1");
  EXPECT_EQ(c.Call({"CF.EXISTS", "f", "a"}), ":1");
  EXPECT_EQ(c.Call({"CF.EXISTS", "f", "zz"}), ":0");
  EXPECT_EQ(c.Call({"CF.EXISTS", "nofilter", "a"}), ":0");
  EXPECT_EQ(c.Call({"CF.MEXISTS", "f", "a", "zz", "b"}), "[:1,:0,:1]");
  EXPECT_EQ(c.Call({"CF.MEXISTS", "nofilter", "a", "b"}), "[:0,:0]");
  EXPECT_EQ(c.Call({"CF.ADD", "f", "a"}), ":1");
  EXPECT_EQ(c.Call({"CF.COUNT", "f", "a"}), ":2");
  EXPECT_EQ(c.Call({"CF.COUNT", "nofilter", "a"}), ":0");
  EXPECT_EQ(c.Call({"CF.DEL", "f", "a"}), ":1");
  EXPECT_EQ(c.Call({"CF.COUNT", "f", "a"}), ":1");
  EXPECT_EQ(c.Call({"CF.DEL", "f", "never"}), ":0");
  EXPECT_EQ(c.Call({"CF.DEL", "nofilter", "a"}), "-ERR Not found");
  EXPECT_EQ(c.Call({"CF.INSERT", "g", "ITEMS", "x", "y"}), "[:1,:1]");
  EXPECT_EQ(c.Call({"CF.INSERTNX", "g", "CAPACITY", "10", "ITEMS", "x", "w"}), "[:0,:1]");
  EXPECT_EQ(c.Call({"CF.INSERT", "h", "NOCREATE", "ITEMS", "x"}), "-ERR not found");
  EXPECT_EQ(c.Call({"CF.INSERT", "h", "ITEMS"}).substr(0, 4), "-ERR");
  EXPECT_EQ(c.Call({"CF.INSERT", "h", "BOGUS", "x"}).substr(0, 25), "-ERR unknown argument 'BO");
  EXPECT_EQ(c.Call({"CF.ADD", "f"}), "-ERR wrong number of arguments for 'cf.add' command");
  EXPECT_EQ(c.Call({"CF.ADD", "f", ""}).substr(0, 22), "-ERR item is empty; cu");
  EXPECT_EQ(c.Call({"CF.ADD", "f", std::string(65, 'k')}).substr(0, 21), "-ERR item is 65 bytes");
  EXPECT_EQ(c.Call({"CF.ADD", "a\xff", "x"}).substr(0, 34), "-ERR invalid filter name 'a\\xff': ");
  EXPECT_EQ(c.Call({"CF.RESERVE", "r", "abc"}).substr(0, 22), "-ERR Bad capacity 'abc");
  EXPECT_EQ(c.Call({"CF.RESERVE", "r", "100", "BUCKETSIZE", "9"}).substr(0, 22),
            "-ERR Bad bucket size 9");
  EXPECT_EQ(c.Call({"CF.RESERVE", "r", "100", "BUCKETSIZE", "3", "MAXITERATIONS", "20", "EXPANSION",
                    "0"}),
            "OK");
  // CF.INFO: RedisBloom's eight fields first.
  const std::string info = c.Call({"CF.INFO", "r"});
  EXPECT_EQ(info.substr(0, info.find(",Capacity")),
            "[Size,:" + info.substr(7, info.find(',', 7) - 7) + ",Number of buckets,:" +
                info.substr(info.find("buckets,:") + 9, info.find(',', info.find("buckets,:") + 9) -
                                                            (info.find("buckets,:") + 9)) +
                ",Number of filters,:1,Number of items inserted,:0,Number of items deleted,:0,"
                "Bucket size,:4,Expansion rate,:0,Max iterations,:20");
  EXPECT_EQ(c.Call({"CF.INFO", "nofilter"}), "-ERR not found");
  EXPECT_EQ(c.Call({"CF.FROB", "f"}),
            "-ERR unknown command 'CF.FROB', with args beginning with: 'f' ");
}

TEST_F(RedisPortTest, Resp3AfterHello) {
  RespClient c(port());
  const std::string hello = c.Call({"HELLO", "3"});
  EXPECT_NE(hello.find("$server,$cuckood,$version,$7.0.0,$proto,:3"), std::string::npos) << hello;
  EXPECT_EQ(c.Call({"HELLO", "4"}), "-NOPROTO unsupported protocol version");
  EXPECT_EQ(c.Call({"CF.ADD", "f", "a"}), ":1");
  // A map, with doubles as doubles.
  const std::string info = c.Call({"CF.INFO", "f"});
  EXPECT_NE(info.find("Error rate,,0.002"), std::string::npos) << info;
  EXPECT_EQ(c.Call({"CLIENT", "GETNAME"}), "nil");
  EXPECT_EQ(c.Call({"CLIENT", "SETNAME", "svc"}), "OK");
  EXPECT_EQ(c.Call({"CLIENT", "GETNAME"}), "$svc");
  EXPECT_EQ(c.Call({"CLIENT", "SETNAME", "a b"}).substr(0, 30), "-ERR Client names cannot conta");
  // Issue 30: names had no limit (300 idle connections with 1 MiB names
  // pinned 320 MB). At most 256 bytes, like lib-name and lib-ver.
  EXPECT_EQ(c.Call({"CLIENT", "SETNAME", std::string(256, 'n')}), "OK");
  EXPECT_EQ(c.Call({"CLIENT", "SETNAME", std::string(1 << 20, 'n')}),
            "-ERR Client names may be at most 256 bytes (this one is 1048576)");
  EXPECT_EQ(c.Call({"CLIENT", "GETNAME"}), "$" + std::string(256, 'n')) << "the name is kept";
  EXPECT_EQ(c.Call({"HELLO", "3", "SETNAME", std::string(257, 'n')}),
            "-ERR Client names may be at most 256 bytes (this one is 257)");
  EXPECT_EQ(c.Call({"CLIENT", "SETINFO", "LIB-NAME", std::string(300, 'l')}),
            "-ERR lib-name and lib-ver may be at most 256 bytes (this one is 300)");
  EXPECT_EQ(c.Call({"CLIENT", "SETINFO", "LIB-VER", "1.2.3"}), "OK");
  EXPECT_EQ(c.Call({"CONFIG", "GET", "save"}), "[$save,$]");
  EXPECT_EQ(c.Call({"HELLO", "2"}).substr(0, 8), "[$server");
  EXPECT_EQ(c.Call({"CONFIG", "GET", "appendonly", "nope"}), "[$appendonly,$yes]");
  EXPECT_EQ(c.Call({"CONFIG", "SET", "save", ""}).substr(0, 35),
            "-ERR CONFIG SET is not supported: c");
}

TEST_F(RedisPortTest, ConnectionAndKeyspaceCommands) {
  RespClient c(port());
  EXPECT_EQ(c.Call({"PING", "hi"}), "$hi");
  EXPECT_EQ(c.Call({"ECHO", "x\r\ny"}), "$x\r\ny");
  EXPECT_EQ(c.Call({"SELECT", "0"}), "OK");
  EXPECT_EQ(c.Call({"SELECT", "1"}).substr(0, 33), "-ERR DB index is out of range (cu");
  EXPECT_EQ(c.Call({"AUTH", "x"}).substr(0, 30), "-ERR AUTH <password> called wi");
  EXPECT_EQ(c.Call({"CLIENT", "SETINFO", "LIB-NAME", "redis-py"}), "OK");
  EXPECT_EQ(c.Call({"CLIENT", "ID"}).substr(0, 1), ":");
  EXPECT_EQ(c.Call({"COMMAND", "COUNT"}), ":29");
  EXPECT_EQ(c.Call({"COMMAND", "INFO", "cf.add", "nope"}).substr(0, 17), "[[$cf.add,:3,[wri");
  EXPECT_EQ(c.Call({"DBSIZE"}), ":0");
  for (const char* f : {"users", "urls", "tokens"}) {
    EXPECT_EQ(c.Call({"CF.ADD", f, "k"}), ":1");
  }
  EXPECT_EQ(c.Call({"DBSIZE"}), ":3");
  EXPECT_EQ(c.Call({"KEYS", "u*"}), "[$urls,$users]");
  EXPECT_EQ(c.Call({"KEYS", "*"}), "[$tokens,$urls,$users]");
  EXPECT_EQ(c.Call({"EXISTS", "users", "nope", "urls", "bad/name"}), ":2");
  EXPECT_EQ(c.Call({"TYPE", "users"}), "MBbloomCF");
  EXPECT_EQ(c.Call({"TYPE", "nope"}), "none");
  // SCAN one name at a time visits each once.
  std::vector<std::string> seen;
  std::string cursor = "0";
  for (int i = 0; i < 10; ++i) {
    const std::string r = c.Call({"SCAN", cursor, "COUNT", "1"});
    ASSERT_EQ(r.substr(0, 2), "[$") << r;
    cursor = r.substr(2, r.find(',') - 2);
    const std::string names = r.substr(r.find(",[") + 2, r.size() - r.find(",[") - 4);
    if (!names.empty()) seen.push_back(names);
    if (cursor == "0") break;
  }
  std::sort(seen.begin(), seen.end());
  EXPECT_EQ(absl::StrJoin(seen, " "), "$tokens $urls $users");
  EXPECT_EQ(c.Call({"SCAN", "0", "MATCH", "t*", "COUNT", "100"}), "[$0,[$tokens]]");
  EXPECT_EQ(c.Call({"SCAN", "0", "TYPE", "string"}), "[$0,[]]");
  EXPECT_EQ(c.Call({"SCAN", "x"}), "-ERR invalid cursor");
  EXPECT_EQ(c.Call({"DEL", "users", "nope", "urls"}), ":2");
  EXPECT_EQ(c.Call({"KEYS", "*"}), "[$tokens]");
  EXPECT_NE(c.Call({"INFO"}).find("redis_version:7.0.0"), std::string::npos);
  EXPECT_EQ(c.Call({"RESET"}), "RESET");
  EXPECT_EQ(c.Call({"QUIT"}), "OK");
  EXPECT_EQ(c.Read(), "<closed>");
}

TEST_F(RedisPortTest, PipelinedWritesAndReadsKeepTheirOrder) {
  RespClient c(port());
  ASSERT_EQ(c.Call({"CF.RESERVE", "p", "100000"}), "OK");
  // Runs of one command are merged into batches; every reply must still be
  // the one of its own command, in order, seeing the writes before it.
  std::string pipeline;
  std::vector<std::string> expected;
  // Blocks of 10 keys: each step is a run of 10 (20 for the first ADDs).
  const std::vector<std::pair<std::string, std::string>> steps = {
      {"CF.ADD", ":1"},    {"CF.ADD", ":1"}, {"CF.COUNT", ":2"}, {"CF.DEL", ":1"},
      {"CF.EXISTS", ":1"}, {"CF.DEL", ":1"}, {"CF.ADD", ":1"}};
  for (int block = 0; block < 50; ++block) {
    for (const auto& [command, reply] : steps) {
      for (int k = 0; k < 10; ++k) {
        pipeline += RespClient::Encode({command, "p", absl::StrCat("key-", block, "-", k)});
        expected.push_back(reply);
      }
    }
  }
  c.SendRaw(pipeline);
  for (size_t i = 0; i < expected.size(); ++i) {
    ASSERT_EQ(c.Read(), expected[i]) << "reply " << i;
  }
  EXPECT_NE(c.Call({"CF.INFO", "p"}).find("Number of items inserted,:500,"), std::string::npos);
}

TEST_F(RedisPortTest, FiltersAreSharedWithTheGrpcApi) {
  {
    grpc::ClientContext ctx;
    v1::CreateFilterRequest req;
    req.set_name("shared");
    req.set_capacity(1000);
    v1::CreateFilterResponse resp;
    ASSERT_TRUE(stub_->CreateFilter(&ctx, req, &resp).ok());
    grpc::ClientContext ictx;
    v1::InsertRequest ins;
    ins.set_filter("shared");
    ins.add_keys("from-grpc");
    v1::InsertResponse iresp;
    ASSERT_TRUE(stub_->Insert(&ictx, ins, &iresp).ok());
  }
  RespClient c(port());
  EXPECT_EQ(c.Call({"CF.EXISTS", "shared", "from-grpc"}), ":1");
  EXPECT_EQ(c.Call({"CF.ADD", "shared", "from-redis"}), ":1");
  EXPECT_EQ(c.Call({"CF.ADD", "made-by-redis", "k"}), ":1");
  grpc::ClientContext ctx;
  v1::LookupRequest req;
  req.set_filter("shared");
  req.add_keys("from-redis");
  v1::LookupResponse resp;
  ASSERT_TRUE(stub_->Lookup(&ctx, req, &resp).ok());
  EXPECT_TRUE(resp.present(0));
  grpc::ClientContext gctx;
  v1::GetFilterRequest get;
  get.set_name("made-by-redis");
  v1::GetFilterResponse got;
  ASSERT_TRUE(stub_->GetFilter(&gctx, get, &got).ok());
  // Made by CF.ADD: growing, at --redis-error-rate.
  EXPECT_EQ(got.filter().growth_factor(), 2u);
  EXPECT_EQ(got.filter().capacity(), 1024u);
  EXPECT_DOUBLE_EQ(got.filter().false_positive_rate(), 0.002);
  EXPECT_EQ(got.filter().items(), 1u);
}

// Issue 29, item 10: a growing filter's max_capacity (set over gRPC;
// CF.RESERVE has no such option) is a hard ceiling over the Redis port too:
// items past it answer -1, and once the filter holds that many an add is an
// error naming the ceiling.
TEST_F(RedisPortTest, CfInsertIntoAGrowingFilterStopsAtItsMaxCapacity) {
  grpc::ClientContext ctx;
  v1::CreateFilterRequest req;
  req.set_name("capped");
  req.set_capacity(1000);
  req.set_growth_factor(2);
  req.set_max_capacity(5000);
  v1::CreateFilterResponse resp;
  ASSERT_TRUE(stub_->CreateFilter(&ctx, req, &resp).ok());
  ASSERT_EQ(resp.filter().shards(), 1u);
  RespClient c(port());
  size_t added = 0;
  size_t full = 0;
  for (int round = 0; round < 6; ++round) {  // 5400 items.
    std::vector<std::string> args = {"CF.INSERT", "capped", "ITEMS"};
    for (int i = 0; i < 900; ++i) args.push_back(absl::StrCat("item-", round, "-", i));
    const std::string reply = c.Call(args);
    ASSERT_TRUE(reply.starts_with("[")) << reply;
    for (absl::string_view r : absl::StrSplit(reply.substr(1, reply.size() - 2), ',')) {
      added += r == ":1" ? 1 : 0;
      full += r == ":-1" ? 1 : 0;
    }
  }
  EXPECT_EQ(added, 5000u);
  EXPECT_EQ(full, 400u);
  const std::string refused = c.Call({"CF.ADD", "capped", "one-more"});
  EXPECT_TRUE(absl::StartsWith(refused, "-ERR filter \"capped\" is full: it holds 5000 keys"))
      << refused;
  EXPECT_NE(refused.find("max_capacity"), std::string::npos) << refused;
  EXPECT_EQ(c.Call({"CF.EXISTS", "capped", "item-0-0"}), ":1");
}

TEST_F(RedisPortTest, AcknowledgedWritesSurviveARestart) {
  {
    RespClient c(port());
    std::string pipeline;
    for (int i = 0; i < 2000; ++i) {
      pipeline += RespClient::Encode({"CF.ADD", "durable", absl::StrCat("item-", i)});
    }
    c.SendRaw(pipeline);
    for (int i = 0; i < 2000; ++i) ASSERT_EQ(c.Read(), ":1") << i;
  }
  // No final snapshot: the write-ahead log alone brings them back.
  server::ServerConfig config = Config();
  server_->persistence().wal();  // (the log is on by default)
  StartServer(config);
  RespClient c(port());
  std::vector<std::string> cmd = {"CF.MEXISTS", "durable"};
  for (int i = 0; i < 2000; ++i) cmd.push_back(absl::StrCat("item-", i));
  const std::string r = c.Call(cmd);
  EXPECT_EQ(r.find(":0"), std::string::npos);
  EXPECT_EQ(std::count(r.begin(), r.end(), '1'), 2000);
}

// The Redis port over a write-ahead log whose file operations a test can
// slow or fail (FaultWalEnv).
class RedisWalEnvTest : public RedisPortTest {
 protected:
  void SetUp() override {}
  void TearDown() override { server_.reset(); }  // Before env_.
  void Start(uint64_t segment_bytes) {
    server::PersistenceOptions hooks;
    hooks.wal.env = &env_;
    server::ServerConfig config = Config();
    config.wal_segment_bytes = segment_bytes;
    StartServer(config, hooks);
  }
  // fdatasyncs of the log so far.
  uint64_t Syncs() {
    const std::string m = server_->metrics().Render();
    constexpr std::string_view kName = "cuckood_wal_fdatasync_duration_seconds_count ";
    const size_t at = m.find(kName);
    return at == std::string::npos ? 0 : std::stoull(m.substr(at + kName.size()));
  }

  server::testing::FaultWalEnv env_;
};

// Issue 30, item 7: a connection's writes are applied when they run and
// answered once durable, the commands after them running meanwhile. The
// log's fdatasyncs take 50 ms here, so that many writes wait at once.
class RedisPipelineTest : public RedisWalEnvTest {
 protected:
  void SetUp() override {
    env_.SetFail([](const std::string& op, const std::string&) {
      if (op == "sync") absl::SleepFor(absl::Milliseconds(50));
      return 0;
    });
    Start(1 << 20);
  }
};

TEST_F(RedisPipelineTest, PipelinedWritesApplyInOrderAndTheCommandsAfterThemSeeThem) {
  RespClient c(port());
  ASSERT_EQ(c.Call({"CF.RESERVE", "a", "100000"}), "OK");
  ASSERT_EQ(c.Call({"CF.RESERVE", "b", "100000"}), "OK");
  // No two neighbours are the same command on the same filter, so none are
  // merged: each write is its own, and each reply shows whether the one
  // before it had been applied.
  Pipeline p;
  for (int i = 0; i < 100; ++i) {
    const std::string k = absl::StrCat("key-", i), x = absl::StrCat("x-", i);
    p.Add({"CF.ADD", "a", k}, ":1");
    p.Add({"CF.EXISTS", "a", k}, ":1");
    p.Add({"CF.ADD", "b", k}, ":1");
    p.Add({"CF.DEL", "a", k}, ":1");
    p.Add({"CF.COUNT", "a", k}, ":0");
    p.Add({"CF.INSERT", "b", "ITEMS", k, x}, "[:1,:1]");
    p.Add({"CF.COUNT", "b", k}, ":2");
    p.Add({"CF.INSERTNX", "b", "ITEMS", x, k, "y"}, "[:0,:0,:1]");
    p.Add({"CF.DEL", "b", "y"}, ":1");
    p.Add({"CF.ADDNX", "a", k}, ":1");
    p.Add({"CF.ADD", "a\xff", k}, "-ERR invalid filter name 'a\\xff': " +
                                      std::string(FilterRegistry::ValidateName("a\xff").message()));
    p.Add({"CF.ADDNX", "a", k}, ":0");
  }
  const uint64_t syncs = Syncs();
  ASSERT_NO_FATAL_FAILURE(p.SendAndCheck(c));
  // 800 writes, each its own: had each waited for its fdatasync (50 ms)
  // before the next ran, 800 of them and 40 s; up to 32 wait at once.
  EXPECT_LT(Syncs() - syncs, 200u);
  EXPECT_EQ(c.Call({"CF.COUNT", "a", "key-7"}), ":1");
  EXPECT_EQ(c.Call({"CF.COUNT", "b", "key-7"}), ":2");
}

TEST_F(RedisPipelineTest, ACfAddCostsOneFdatasyncAndSixteenPipelinedFarFewerThanSixteen) {
  RespClient c(port());
  ASSERT_EQ(c.Call({"CF.RESERVE", "a", "100000"}), "OK");
  ASSERT_EQ(c.Call({"CF.RESERVE", "b", "100000"}), "OK");
  // Depth 1: each waits for its own.
  uint64_t before = Syncs();
  for (int i = 0; i < 5; ++i) ASSERT_EQ(c.Call({"CF.ADD", "a", absl::StrCat("one-", i)}), ":1");
  EXPECT_EQ(Syncs() - before, 5u);
  // Depth 16 on one filter: one run, one batch (two if the pipeline is
  // read in two parts: the connection's first reads are small).
  std::string pipeline;
  for (int i = 0; i < 16; ++i)
    pipeline += RespClient::Encode({"CF.ADD", "a", absl::StrCat("run-", i)});
  before = Syncs();
  c.SendRaw(pipeline);
  for (int i = 0; i < 16; ++i) ASSERT_EQ(c.Read(), ":1") << i;
  EXPECT_LE(Syncs() - before, 2u);
  // Depth 16 alternating between two filters: 16 writes, which share the
  // log's group commits (the first, then the other fifteen, applied while
  // the first one's fdatasync ran).
  pipeline.clear();
  for (int i = 0; i < 16; ++i) {
    pipeline += RespClient::Encode({"CF.ADD", i % 2 == 0 ? "a" : "b", absl::StrCat("alt-", i)});
  }
  before = Syncs();
  c.SendRaw(pipeline);
  for (int i = 0; i < 16; ++i) ASSERT_EQ(c.Read(), ":1") << i;
  EXPECT_LE(Syncs() - before, 4u);
}

// Consecutive CF.INSERTs of one filter with the same options go as one
// batch (one log write); each still gets its own reply, and a command that
// cannot join (another filter or options, a bad item) gets its own.
TEST_F(RedisPipelineTest, PipelinedInsertsAreMergedAndEachGetsItsOwnReply) {
  RespClient c(port());
  ASSERT_EQ(c.Call({"CF.RESERVE", "m", "100000"}), "OK");
  Pipeline p;
  for (int n = 1; n <= 5; ++n) {
    std::vector<std::string> command = {"CF.INSERT", "m", "ITEMS"};
    std::vector<std::string> replies;
    for (int i = 0; i < n; ++i) {
      command.push_back(absl::StrCat("i", n, "-", i));
      replies.push_back(":1");
    }
    p.Add(command, "[" + absl::StrJoin(replies, ",") + "]");
  }
  p.Add({"CF.INSERT", "m", "ITEMS", "i1-0", ""},
        "-ERR item is empty; cuckood items are 1 to 64 bytes (item 2)");
  p.Add({"CF.INSERTNX", "m", "ITEMS", "i1-0", "nx"}, "[:0,:1]");
  p.Add({"CF.INSERTNX", "m", "ITEMS", "nx", "nx2"}, "[:0,:1]");
  p.Add({"CF.INSERT", "m", "NOCREATE", "ITEMS", "i1-0"}, "[:1]");
  p.Add({"CF.INSERT", "m", "ITEMS", "i1-0"}, "[:1]");
  p.Add({"CF.INSERT", "other", "NOCREATE", "ITEMS", "x"}, "-ERR not found");
  p.Add({"CF.INSERT", "m", "ITEMS", "i1-0"}, "[:1]");
  const uint64_t syncs = Syncs();
  ASSERT_NO_FATAL_FAILURE(p.SendAndCheck(c));
  EXPECT_LE(Syncs() - syncs, 4u);
  EXPECT_EQ(c.Call({"CF.COUNT", "m", "i1-0"}), ":4");
  EXPECT_EQ(c.Call({"CF.COUNT", "m", "i5-4"}), ":1");
  const std::string metrics = server_->metrics().Render();
  EXPECT_NE(metrics.find(R"(cuckood_redis_items_total{command="cf.insert"} 18)"), std::string::npos)
      << metrics;
  // Five batches for the ten commands that got an array: the first five
  // CF.INSERTs, the two CF.INSERTNX, and three alone.
  EXPECT_NE(metrics.find(R"(cuckood_rpc_requests_total{code="OK",method="Insert"} 5)"),
            std::string::npos)
      << metrics;
  // A run that creates its filter goes as one in-process call after the
  // creation; each command still gets its own reply.
  Pipeline fresh;
  fresh.Add({"CF.INSERT", "new", "ITEMS", "a"}, "[:1]");
  fresh.Add({"CF.INSERT", "new", "ITEMS", "b", "a"}, "[:1,:1]");
  fresh.Add({"CF.INSERT", "new", "ITEMS", "c", "d", "e"}, "[:1,:1,:1]");
  ASSERT_NO_FATAL_FAILURE(fresh.SendAndCheck(c));
  EXPECT_EQ(c.Call({"CF.COUNT", "new", "a"}), ":2");
}

// A refused write gets the same error as the same write over gRPC (and as
// when the Redis port's writes were in-process gRPC calls): "ERR " and the
// status's message.
TEST_F(RedisPortTest, RefusedWritesGetTheServicesErrorText) {
  grpc::ClientContext ctx;
  v1::CreateFilterRequest req;
  req.set_name("capped");
  req.set_capacity(1000);
  req.set_growth_factor(2);
  req.set_max_capacity(2000);
  v1::CreateFilterResponse resp;
  ASSERT_TRUE(stub_->CreateFilter(&ctx, req, &resp).ok());
  RespClient c(port());
  std::vector<std::string> fill = {"CF.INSERT", "capped", "ITEMS"};
  for (int i = 0; i < 2400; ++i) fill.push_back(absl::StrCat("k", i));
  ASSERT_EQ(c.Call(fill).substr(0, 4), "[:1,");
  auto grpc_insert = [&](const std::string& filter, const std::string& key) {
    grpc::ClientContext ictx;
    v1::InsertRequest ins;
    ins.set_filter(filter);
    ins.add_keys(key);
    v1::InsertResponse iresp;
    return stub_->Insert(&ictx, ins, &iresp);
  };
  const grpc::Status full = grpc_insert("capped", "more");
  ASSERT_EQ(full.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_EQ(c.Call({"CF.ADD", "capped", "more"}), "-ERR " + full.error_message());
  EXPECT_EQ(c.Call({"CF.INSERT", "capped", "ITEMS", "more", "most"}),
            "-ERR " + full.error_message());
  // A run of merged adds: the error once per command.
  c.SendRaw(RespClient::Encode({"CF.ADD", "capped", "m1"}) +
            RespClient::Encode({"CF.ADD", "capped", "m2"}));
  EXPECT_EQ(c.Read(), "-ERR " + full.error_message());
  EXPECT_EQ(c.Read(), "-ERR " + full.error_message());
  EXPECT_EQ(c.Call({"CF.ADD", "a\xff", "x"}),
            "-ERR invalid filter name 'a\\xff': " +
                std::string(FilterRegistry::ValidateName("a\xff").message()));
  EXPECT_EQ(c.Call({"CF.DEL", "nofilter", "x"}), "-ERR Not found");
}

TEST_F(RedisWalEnvTest, AWriteRefusedForAFullDiskGetsTheLogsErrorAndChangesNothing) {
  std::atomic<bool> full{false};
  env_.SetFail([&](const std::string& op, const std::string&) {
    return op == "create" && full.load() ? ENOSPC : 0;
  });
  Start(256 << 10);
  RespClient c(port());
  ASSERT_EQ(c.Call({"CF.RESERVE", "f", "1000000"}), "OK");
  full = true;
  // Until the current segment and the one prepared are full.
  std::string refused;
  std::vector<std::string> insert;
  for (int round = 0; round < 1000 && refused.empty(); ++round) {
    insert = {"CF.INSERT", "f", "ITEMS"};
    for (int i = 0; i < 500; ++i) insert.push_back(absl::StrCat("r", round, "-", i));
    const std::string r = c.Call(insert);
    if (r[0] == '-') refused = r;
  }
  ASSERT_TRUE(absl::StartsWith(refused, "-ERR no room for the write-ahead log (")) << refused;
  // The same write over gRPC, at once (the log refuses for a second
  // before it tries to prepare a segment again).
  grpc::ClientContext ictx;
  v1::InsertRequest ins;
  ins.set_filter("f");
  for (size_t i = 3; i < insert.size(); ++i) ins.add_keys(insert[i]);
  v1::InsertResponse iresp;
  const grpc::Status st = stub_->Insert(&ictx, ins, &iresp);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_EQ(refused, "-ERR " + st.error_message());
  std::vector<std::string> exists = {"CF.MEXISTS", "f"};
  exists.insert(exists.end(), insert.begin() + 3, insert.end());
  const std::string present = c.Call(exists);
  EXPECT_LT(std::count(present.begin(), present.end(), '1'), 3) << "nothing was applied";
  full = false;
  server_.reset();  // Before `full`.
}

TEST_F(RedisPortTest, ScanDumpThenLoadChunkRestoresTheFilter) {
  RespClient c(port());
  std::vector<std::string> insert = {"CF.INSERT", "src", "CAPACITY", "50000", "ITEMS"};
  for (int i = 0; i < 4000; ++i) insert.push_back(absl::StrCat("member-", i));
  ASSERT_EQ(c.Call(insert).find(":-1"), std::string::npos);
  std::vector<std::pair<int64_t, std::string>> chunks;
  int64_t it = 0;
  for (int guard = 0; guard < 100; ++guard) {
    c.Send({"CF.SCANDUMP", "src", absl::StrCat(it)});
    std::string data;
    ASSERT_TRUE(c.ReadDumpChunk(&it, &data));
    if (it == 0) {
      EXPECT_TRUE(data.empty());
      break;
    }
    chunks.emplace_back(it, data);
  }
  ASSERT_GE(chunks.size(), 2u);
  EXPECT_EQ(chunks[0].second.substr(0, 8), "CKDUMP01");
  // Out of order: refused, and the load can start again.
  EXPECT_EQ(c.Call({"CF.LOADCHUNK", "copy", absl::StrCat(chunks[0].first), chunks[0].second}),
            "OK");
  if (chunks.size() > 2) {
    EXPECT_EQ(c.Call({"CF.LOADCHUNK", "copy", absl::StrCat(chunks[2].first), chunks[2].second})
                  .substr(0, 10),
              "-ERR chunk");
  }
  for (const auto& [iter, data] : chunks) {
    ASSERT_EQ(c.Call({"CF.LOADCHUNK", "copy", absl::StrCat(iter), data}), "OK");
  }
  std::vector<std::string> check = {"CF.MEXISTS", "copy"};
  for (int i = 0; i < 4000; ++i) check.push_back(absl::StrCat("member-", i));
  const std::string r = c.Call(check);
  EXPECT_EQ(r.find(":0"), std::string::npos);
  // Not a cuckood dump; an iterator of no dump.
  EXPECT_EQ(c.Call({"CF.LOADCHUNK", "other", "1", "RedisBloom-bytes"}).substr(0, 41),
            "-ERR this is not the first chunk of a cuc");
  EXPECT_EQ(c.Call({"CF.SCANDUMP", "src", "99999999999"}).substr(0, 25),
            "-ERR no CF.SCANDUMP of 's");
  EXPECT_EQ(c.Call({"CF.LOADCHUNK", "copy", absl::StrCat(chunks[0].first), chunks[0].second})
                .substr(0, 25),
            "-ERR filter 'copy' exists");
}

std::string Hex(const std::array<uint8_t, 32>& h) {
  return absl::BytesToHexString(
      absl::string_view(reinterpret_cast<const char*>(h.data()), h.size()));
}

TEST_F(RedisPortTest, TokensAndGrantsApplyAsOnGrpc) {
  const std::string path = dir_.path() + "/access";
  auto write_access = [&](bool with_reader) {
    std::ofstream out(path);
    out << "token root sha256:" << Hex(server::Sha256("tok-root")) << " admin:*\n";
    if (with_reader) {
      out << "token reader sha256:" << Hex(server::Sha256("tok-reader")) << " read:billing.*\n";
    }
  };
  write_access(true);
  server::ServerConfig config = Config();
  config.auth_tokens = path;
  StartServer(config);
  {
    // Before AUTH, Redis's small limits (CVE-2021-32675).
    RespClient c(port());
    std::vector<std::string> many = {"CF.MEXISTS", "billing.x"};
    for (int i = 0; i < 10; ++i) many.push_back("k");
    EXPECT_EQ(c.Call(many),
              "-ERR Protocol error: 12 arguments is over the limit of 10 before AUTH");
    EXPECT_EQ(c.Read(), "<closed>");
    RespClient d(port());
    EXPECT_EQ(d.Call({"AUTH", std::string(20000, 'x')}).substr(0, 52),
              "-ERR Protocol error: bulk length 20000 is over the l");
  }
  RespClient root(port());
  EXPECT_EQ(root.Call({"CF.ADD", "billing.x", "k"}), "-NOAUTH Authentication required.");
  EXPECT_EQ(root.Call({"AUTH", "wrong"}).substr(0, 68),
            "-WRONGPASS invalid username-password pair or user is disabled. (the ");
  EXPECT_EQ(root.Call({"AUTH", "default", "tok-root"}), "OK");
  EXPECT_EQ(root.Call({"CF.ADD", "billing.x", "k"}), ":1");
  EXPECT_EQ(root.Call({"CF.ADD", "cart.y", "k"}), ":1");
  RespClient reader(port());
  EXPECT_EQ(reader.Call({"HELLO", "3", "AUTH", "u", "tok-reader"}).substr(0, 8), "[$server");
  EXPECT_EQ(reader.Call({"CF.EXISTS", "billing.x", "k"}), ":1");
  EXPECT_EQ(reader.Call({"CF.EXISTS", "cart.y", "k"}).substr(0, 48),
            "-NOPERM \"reader\" may not run CF.EXISTS on filter");
  EXPECT_EQ(reader.Call({"CF.ADD", "billing.x", "k2"}).substr(0, 8), "-NOPERM ");
  EXPECT_EQ(reader.Call({"DEL", "billing.x"}).substr(0, 8), "-NOPERM ");
  EXPECT_EQ(reader.Call({"KEYS", "*"}), "[$billing.x]");
  EXPECT_EQ(reader.Call({"DBSIZE"}), ":1");
  // Revoked: the open connection stops working at once.
  write_access(false);
  ASSERT_TRUE(server_->ReloadAccess().ok());
  EXPECT_EQ(reader.Call({"CF.EXISTS", "billing.x", "k"}).substr(0, 7), "-NOAUTH");
  EXPECT_EQ(reader.Call({"PING"}).substr(0, 7), "-NOAUTH");
  EXPECT_EQ(reader.Call({"INFO"}).substr(0, 7), "-NOAUTH");
  // Whether a filter exists is not told to callers without a grant on it.
  RespClient other(port());
  EXPECT_EQ(other.Call({"AUTH", "tok-root"}), "OK");
  write_access(true);
  ASSERT_TRUE(server_->ReloadAccess().ok());
  RespClient reader2(port());
  EXPECT_EQ(reader2.Call({"AUTH", "tok-reader"}), "OK");
  EXPECT_EQ(reader2.Call({"CF.DEL", "cart.y", "k"}).substr(0, 8), "-NOPERM ");
  EXPECT_EQ(reader2.Call({"CF.DEL", "cart.nope", "k"}).substr(0, 8), "-NOPERM ");
  EXPECT_EQ(root.Call({"CF.EXISTS", "billing.x", "k"}), ":1");
}

// Issue 30: wrong AUTHs were answered at 630-740 thousand a second, with no
// delay, no audit line and no count in cuckood_auth_failures_total. After
// three failures (of the connection or of its peer address) each reply
// waits 100 ms, doubling; replies stay in order; a good AUTH still works.
TEST_F(RedisPortTest, FailedAuthsAreCountedAndSlowedPerConnectionAndPeer) {
  const std::string path = dir_.path() + "/access";
  {
    std::ofstream out(path);
    out << "token root sha256:" << Hex(server::Sha256("tok-root")) << " admin:*\n";
  }
  server::ServerConfig config = Config();
  config.auth_tokens = path;
  StartServer(config);
  using Clock = std::chrono::steady_clock;
  auto timed = [](RespClient& c, const std::vector<std::string>& args, std::string* reply) {
    const Clock::time_point t0 = Clock::now();
    *reply = c.Call(args);
    return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t0).count();
  };
  RespClient a(port());
  std::string reply;
  for (int i = 0; i < 3; ++i) {
    EXPECT_LT(timed(a, {"AUTH", "wrong"}, &reply), 90) << "failure " << i + 1 << " is not slowed";
    EXPECT_EQ(reply.substr(0, 10), "-WRONGPASS");
  }
  EXPECT_GE(timed(a, {"AUTH", "wrong"}, &reply), 100);
  EXPECT_EQ(reply.substr(0, 10), "-WRONGPASS");
  EXPECT_GE(timed(a, {"AUTH", "default", "wrong"}, &reply), 200);
  EXPECT_EQ(reply.substr(0, 10), "-WRONGPASS");
  // Pipelined: the delayed reply comes first, then the next command's.
  a.SendRaw(RespClient::Encode({"AUTH", "wrong"}) + RespClient::Encode({"AUTH", "tok-root"}) +
            RespClient::Encode({"PING"}));
  EXPECT_EQ(a.Read().substr(0, 10), "-WRONGPASS");
  EXPECT_EQ(a.Read(), "OK");
  EXPECT_EQ(a.Read(), "PONG");
  // The connection's count starts again after a good AUTH, but its peer's
  // does not: a new connection from the same address (HELLO ... AUTH too)
  // is slowed from its first failure (7th of the address: 800 ms).
  RespClient b(port());
  EXPECT_GE(timed(b, {"HELLO", "3", "AUTH", "u", "wrong"}, &reply), 700);
  EXPECT_EQ(reply.substr(0, 10), "-WRONGPASS");
  EXPECT_EQ(b.Call({"AUTH", "tok-root"}), "OK");
  EXPECT_EQ(b.Call({"PING"}), "PONG");
  const std::string metrics = server_->metrics().Render();
  EXPECT_NE(metrics.find(R"(cuckood_auth_failures_total{method="AUTH",reason="unknown_token"} 7)"),
            std::string::npos)
      << metrics;
}

TEST_F(RedisPortTest, HostileInputGetsAnErrorAndTheServerGoesOn) {
  {
    RespClient c(port());
    c.SendRaw("*1\r\n$2147483648\r\n");
    EXPECT_EQ(c.Read().substr(0, 40), "-ERR Protocol error: bulk length 2147483");
    EXPECT_EQ(c.Read(), "<closed>");
  }
  {
    RespClient c(port());
    c.SendRaw("*1000000\r\n");
    EXPECT_EQ(c.Read().substr(0, 20), "-ERR Protocol error:");
  }
  {
    RespClient c(port());
    c.SendRaw("*2\r\n$4\r\nPINGxx$1\r\n");
    EXPECT_EQ(c.Read().substr(0, 20), "-ERR Protocol error:");
  }
  {
    RespClient c(port());
    c.SendRaw("*3\r\n$6\r\nCF.ADD\r\n$1\r\nf\r\n$100\r\nabc");
  }  // Half a command, then closed.
  RespClient c(port());
  EXPECT_EQ(c.Call({"PING"}), "PONG");
  EXPECT_EQ(c.Call({"DBSIZE"}), ":0");
}

// A key that cannot be a filter's name (not UTF-8) is a missing key to
// the existence reads, as RedisBloom answers for a key that does not exist.
TEST_F(RedisPortTest, PipelinedLookupsOfAKeyThatCannotBeANameAnswerMissingEach) {
  RespClient c(port());
  c.SendRaw(RespClient::Encode({"CF.EXISTS", "bad\xff", "a"}) +
            RespClient::Encode({"CF.EXISTS", "bad\xff", "b"}) + RespClient::Encode({"PING"}));
  EXPECT_EQ(c.Read(), ":0");
  EXPECT_EQ(c.Read(), ":0");
  EXPECT_EQ(c.Read(), "PONG");
}

// Filter names are Redis keys: ':' '/' spaces, dots, any UTF-8, up to 512
// bytes. None of them becomes a path.
TEST_F(RedisPortTest, RedisStyleKeysAreFilterNames) {
  RespClient c(port());
  const std::string longest(512, 'k');
  const std::vector<std::string> names = {"users:seen", "my filter", "a/b",   "../../etc/passwd",
                                          ".",          "star*name", longest, "caf\xC3\xA9"};
  for (const std::string& n : names) {
    EXPECT_EQ(c.Call({"CF.ADD", n, "k"}), ":1") << n;
    EXPECT_EQ(c.Call({"CF.EXISTS", n, "k"}), ":1") << n;
    EXPECT_EQ(c.Call({"TYPE", n}), "MBbloomCF") << n;
  }
  EXPECT_EQ(c.Call({"DBSIZE"}), absl::StrCat(":", names.size()));
  EXPECT_EQ(c.Call({"EXISTS", "users:seen", "my filter", "a/b", "nope"}), ":3");
  EXPECT_EQ(c.Call({"KEYS", "users:*"}), "[$users:seen]");
  EXPECT_EQ(c.Call({"KEYS", "a/*"}), "[$a/b]");
  EXPECT_EQ(c.Call({"KEYS", "my?filter"}), "[$my filter]");
  // As Redis's glob: a backslash makes '*' literal.
  EXPECT_EQ(c.Call({"KEYS", "star\\*name"}), "[$star*name]");
  EXPECT_EQ(c.Call({"KEYS", "*\\**"}), "[$star*name]");
  EXPECT_EQ(c.Call({"SCAN", "0", "MATCH", "../*", "COUNT", "100"}), "[$0,[$../../etc/passwd]]");
  // 513 bytes, a NUL, bytes that are not UTF-8: refused, saying why.
  EXPECT_EQ(c.Call({"CF.ADD", longest + "k", "x"}),
            "-ERR invalid filter name '" + std::string(64, 'k') +
                "...': filter name is 513 bytes; at most 512 are allowed");
  EXPECT_THAT(c.Call({"CF.ADD", std::string("a\0b", 3), "x"}),
              HasSubstr("has a NUL byte at offset 1"));
  EXPECT_THAT(c.Call({"CF.RESERVE", "users:\xff", "100"}),
              HasSubstr("is not valid UTF-8 (byte 0xff at offset 6)"));
  EXPECT_THAT(c.Call({"CF.INFO", "users:\xff"}),
              HasSubstr("is not valid UTF-8 (byte 0xff at offset 6)"));
  // The existence reads answer such a key as a missing one.
  EXPECT_EQ(c.Call({"CF.EXISTS", "users:\xff", "k"}), ":0");
  EXPECT_EQ(c.Call({"CF.MEXISTS", "users:\xff", "k", "l"}), "[:0,:0]");
  EXPECT_EQ(c.Call({"CF.COUNT", "users:\xff", "k"}), ":0");
  EXPECT_EQ(c.Call({"EXISTS", "users:\xff"}), ":0");
  EXPECT_EQ(c.Call({"TYPE", "users:\xff"}), "none");
  EXPECT_EQ(c.Call({"DBSIZE"}), absl::StrCat(":", names.size()));
  EXPECT_EQ(c.Call({"DEL", "a/b", "../../etc/passwd"}), ":2");
  EXPECT_EQ(c.Call({"EXISTS", "a/b"}), ":0");
}

// Bytes the process's heap holds allocated now (not RSS: ASan keeps freed
// memory in quarantine, and glibc keeps it for reuse).
size_t AllocatedBytes() {
#if defined(CUCKOO_ASAN)
  return __sanitizer_get_current_allocated_bytes();
#else
  const struct mallinfo2 m = mallinfo2();
  return m.uordblks + m.hblkhd;
#endif
}

TEST_F(RedisPortTest, QuotedInlineCommandsDoNotAccumulateMemory) {
  // Unescaped inline arguments live in the parser's own storage: it must be
  // given back as commands finish (it once grew for the connection's life).
  RespClient c(port());
  std::string escaped;
  for (int i = 0; i < 15000; ++i) escaped += "\\x41";
  const std::string line = "ECHO \"" + escaped + "\"\r\n";
  ASSERT_EQ(c.Call({"PING"}), "PONG");
  const size_t before = AllocatedBytes();
  for (int round = 0; round < 40; ++round) {
    std::string batch;
    for (int i = 0; i < 50; ++i) batch += line;
    c.SendRaw(batch);
    for (int i = 0; i < 50; ++i) ASSERT_EQ(c.Read().size(), 15001u);
  }
  // 2000 arguments of 15,000 bytes: 30 MB if kept.
  const size_t after = AllocatedBytes();
  EXPECT_LT(after > before ? after - before : 0, size_t{20} << 20);
}

TEST_F(RedisPortTest, CommandsAreCountedInTheMetrics) {
  RespClient c(port());
  EXPECT_EQ(c.Call({"CF.ADD", "m", "k"}), ":1");
  EXPECT_EQ(c.Call({"CF.EXISTS", "m", "k"}), ":1");
  EXPECT_EQ(c.Call({"CF.EXISTS", "m", ""}).substr(0, 4), "-ERR");  // An empty item.
  EXPECT_EQ(c.Call({"NOPE"}).substr(0, 4), "-ERR");
  const std::string metrics = server_->metrics().Render();
  EXPECT_NE(metrics.find(R"(cuckood_redis_commands_total{command="cf.add",outcome="ok"} 1)"),
            std::string::npos)
      << metrics;
  EXPECT_NE(metrics.find(R"(cuckood_redis_commands_total{command="cf.exists",outcome="ok"} 1)"),
            std::string::npos);
  EXPECT_NE(metrics.find(R"(cuckood_redis_commands_total{command="cf.exists",outcome="error"} 1)"),
            std::string::npos);
  EXPECT_NE(metrics.find(R"(cuckood_redis_commands_total{command="unknown",outcome="error"} 1)"),
            std::string::npos);
  EXPECT_NE(metrics.find("cuckood_redis_connections_total 1"), std::string::npos);
  EXPECT_NE(metrics.find(R"(cuckood_redis_items_total{command="cf.add"} 1)"), std::string::npos);
}

// ---- CF.SCANDUMP and CF.LOADCHUNK: idle time, disk space, a stalled disk ----

class RedisTransferTest : public RedisPortTest {
 protected:
  void SetUp() override {}  // Each test starts its own server.
  server::ServerConfig TransferConfig() {
    server::ServerConfig c = Config();
    c.transfer_idle_timeout = absl::Seconds(2);
    c.redis_threads = 2;
    return c;
  }
  static std::string Header(uint64_t bytes, uint64_t items = 0) {
    char h[server::kRedisDumpHeaderBytes];
    std::memcpy(h, server::kRedisDumpMagic, 8);
    Put64(h + 8, bytes);
    Put64(h + 16, items);
    return std::string(h, sizeof(h));
  }
  // The files in the data directory's .redis-dump/.
  std::vector<std::string> TransferFiles() {
    std::vector<std::string> files;
    std::error_code ec;
    for (const auto& e :
         std::filesystem::directory_iterator(dir_.path() + "/" + server::kRedisDumpDir, ec)) {
      files.push_back(e.path().filename().string());
    }
    return files;
  }
  // Descriptors of this process on files there, removed ones included:
  // a removed file's space is free only once none is left.
  static int OpenTransferFiles() {
    int n = 0;
    std::error_code ec;
    for (const auto& e : std::filesystem::directory_iterator("/proc/self/fd", ec)) {
      std::error_code link_ec;
      const std::string target = std::filesystem::read_symlink(e.path(), link_ec).string();
      n += absl::StrContains(target, std::string("/") + server::kRedisDumpDir + "/");
    }
    return n;
  }
};

// An abandoned dump and load are dropped by a timer after
// --transfer-idle-timeout, without any command arriving: their files go
// (and their space: no descriptor is left on them), and the client that
// comes back is told what happened.
TEST_F(RedisTransferTest, AnAbandonedDumpAndLoadAreDroppedByATimerWithTheirFiles) {
  StartServer(TransferConfig());
  RespClient c(port());
  ASSERT_EQ(c.Call({"CF.RESERVE", "src", "1000000"}), "OK");  // A snapshot of about 1.4 MB.
  // A dump read to its first data chunk, and a load sent that far.
  c.Send({"CF.SCANDUMP", "src", "0"});
  int64_t header_it = 0, data_it = 0, next_it = 0;
  std::string header, data;
  ASSERT_TRUE(c.ReadDumpChunk(&header_it, &header));
  c.Send({"CF.SCANDUMP", "src", absl::StrCat(header_it)});
  ASSERT_TRUE(c.ReadDumpChunk(&data_it, &data));
  ASSERT_EQ(data.size(), server::kRedisDumpChunkBytes);
  ASSERT_EQ(c.Call({"CF.LOADCHUNK", "copy", absl::StrCat(header_it), header}), "OK");
  ASSERT_EQ(c.Call({"CF.LOADCHUNK", "copy", absl::StrCat(data_it), data}), "OK");
  EXPECT_EQ(TransferFiles().size(), 2u);
  // Then nothing: the timer drops both.
  for (int i = 0; i < 600 && (!TransferFiles().empty() || OpenTransferFiles() > 0); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_TRUE(TransferFiles().empty()) << absl::StrJoin(TransferFiles(), ", ");
  EXPECT_EQ(OpenTransferFiles(), 0);
  // The client that comes back hears why.
  c.Send({"CF.SCANDUMP", "src", absl::StrCat(data_it)});
  const std::string dump_error = c.Read();
  EXPECT_TRUE(absl::StartsWith(dump_error, "-ERR the CF.SCANDUMP of 'src' with iterator"))
      << dump_error;
  EXPECT_THAT(dump_error, ::testing::HasSubstr("was abandoned: no chunk was asked for in 2s "
                                               "(--transfer-idle-timeout)"));
  next_it = data_it + 1;
  const std::string load_error =
      c.Call({"CF.LOADCHUNK", "copy", absl::StrCat(next_it), std::string(100, 'x')});
  EXPECT_THAT(load_error, ::testing::HasSubstr("-ERR the CF.LOADCHUNK of 'copy' (dump "));
  EXPECT_THAT(load_error, ::testing::HasSubstr("was abandoned: no chunk arrived for 2s "
                                               "(--transfer-idle-timeout), so the 1MiB received "
                                               "were removed"));
  EXPECT_EQ(c.Call({"EXISTS", "copy"}), ":0");
  // Done again without pauses, the whole dump loads.
  std::vector<std::pair<int64_t, std::string>> chunks;
  int64_t it = 0;
  for (int guard = 0; guard < 100; ++guard) {
    c.Send({"CF.SCANDUMP", "src", absl::StrCat(it)});
    std::string chunk;
    ASSERT_TRUE(c.ReadDumpChunk(&it, &chunk));
    if (it == 0) break;
    chunks.emplace_back(it, chunk);
  }
  for (const auto& [iter, bytes] : chunks) {
    ASSERT_EQ(c.Call({"CF.LOADCHUNK", "copy", absl::StrCat(iter), bytes}), "OK");
  }
  EXPECT_EQ(c.Call({"EXISTS", "copy"}), ":1");
  EXPECT_TRUE(TransferFiles().empty()) << absl::StrJoin(TransferFiles(), ", ");
}

// A load's declared size is checked before anything is written: against
// what ImportFilter would take (the memory budget plus 1 MiB), and against
// the free disk less the write-ahead log's reserve. So is a dump's copy.
TEST_F(RedisTransferTest, ALoadOrDumpLargerThanTheImportLimitOrTheFreeDiskIsRefused) {
  // 2 MiB free beyond the reserve of 2 x 64 MiB.
  SmallDiskEnv env((uint64_t{128} << 20) + (2 << 20));
  StopServerFirst stop_first(&server_);  // before `env` goes
  server::PersistenceOptions hooks;
  hooks.wal.env = &env;
  StartServer(TransferConfig(), hooks);
  RespClient c(port());
  const uint64_t budget = server_->registry().limits().memory_budget_bytes;
  const std::string over =
      c.Call({"CF.LOADCHUNK", "copy", "4294967297", Header(budget + (1 << 20) + 1)});
  EXPECT_THAT(over, ::testing::HasSubstr(absl::StrCat(
                        "-ERR the dump's header declares a snapshot of ", budget + (1 << 20) + 1,
                        " bytes (65.0MiB), more than this server imports: its memory budget of "
                        "64MiB plus 1MiB")));
  const std::string disk = c.Call({"CF.LOADCHUNK", "copy", "4294967297", Header(4 << 20)});
  EXPECT_THAT(disk, ::testing::HasSubstr(
                        "-ERR the CF.LOADCHUNK of 'copy' needs 4MiB (4194304 bytes) of disk"));
  EXPECT_THAT(disk, ::testing::HasSubstr("has 130MiB free, of which 128MiB is kept for the "
                                         "write-ahead log (2 x --wal-segment-size): only 2MiB "
                                         "is left for it"));
  // Refused loads hold no slot: two that fit start.
  EXPECT_EQ(c.Call({"CF.LOADCHUNK", "a", "4294967297", Header(1 << 20)}), "OK");
  EXPECT_EQ(c.Call({"CF.LOADCHUNK", "b", "4294967297", Header(512 << 10)}), "OK");
  // A dump whose copy does not fit: the export it reads from claims the
  // filter's memory first, and is refused naming it.
  ASSERT_EQ(c.Call({"CF.RESERVE", "big", "2000000"}), "OK");  // About 3.6 MB.
  const std::string dump = c.Call({"CF.SCANDUMP", "big", "0"});
  EXPECT_THAT(dump, ::testing::HasSubstr("-ERR the export of filter \"big\" needs 3.6MiB"));
  EXPECT_THAT(dump, ::testing::HasSubstr("and 1.5MiB is promised to other transfers under way"));
  EXPECT_EQ(TransferFiles().size(), 2u);  // The two loads'.
}

// A chunk's write that stalls (a FIFO nobody reads, in place of the load's
// file: what a stalled disk does to a write) holds up only its own
// command: other connections, on either I/O thread, are answered, dumps
// included. (Before, the write ran on the connection's I/O thread under the
// lock every dump and load takes.)
TEST_F(RedisTransferTest, AStalledLoadChunkWriteDoesNotStopOtherConnections) {
  StartServer(TransferConfig());
  RespClient setup(port());
  ASSERT_EQ(setup.Call({"CF.RESERVE", "small", "1000"}), "OK");
  // The first load of this server writes .redis-dump/load-1.
  const std::string dir = dir_.path() + "/" + server::kRedisDumpDir;
  std::filesystem::create_directories(dir);
  const std::string fifo = dir + "/load-1";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0) << std::strerror(errno);
  // Open for reading, so that the server's open does not wait; not read.
  const int reader = ::open(fifo.c_str(), O_RDONLY | O_NONBLOCK);
  ASSERT_GE(reader, 0) << std::strerror(errno);
  RespClient loader(port());
  ASSERT_EQ(loader.Call({"CF.LOADCHUNK", "stalled", "4294967297", Header(3 << 20)}), "OK");
  loader.Send({"CF.LOADCHUNK", "stalled", "4294967298", std::string(1 << 20, 'x')});
  // The write fills the pipe and waits.
  int pending = 0;
  for (int i = 0; i < 600 && pending < (64 << 10); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    ASSERT_EQ(::ioctl(reader, FIONREAD, &pending), 0);
  }
  ASSERT_GE(pending, 64 << 10) << "the chunk's write did not start";
  // Four new connections: both I/O threads, the loader's included.
  for (int i = 0; i < 4; ++i) {
    SCOPED_TRACE(i);
    RespClient other(port());
    other.SetReadTimeout(std::chrono::seconds(20));
    EXPECT_EQ(other.Call({"PING"}), "PONG");
    EXPECT_EQ(other.Call({"CF.ADD", "small", absl::StrCat("key-", i)}), ":1");
    other.Send({"CF.SCANDUMP", "small", "0"});
    int64_t it = 0;
    std::string header;
    EXPECT_TRUE(other.ReadDumpChunk(&it, &header));
    EXPECT_EQ(header.substr(0, 8), "CKDUMP01");
  }
  // The disk "recovers": the chunk is written and answered.
  std::thread drain([&] {
    const int flags = ::fcntl(reader, F_GETFL);
    ::fcntl(reader, F_SETFL, flags & ~O_NONBLOCK);
    std::string buffer(64 << 10, '\0');
    for (size_t got = 0; got < (1 << 20);) {
      const ssize_t n = ::read(reader, buffer.data(), buffer.size());
      if (n <= 0) break;
      got += static_cast<size_t>(n);
    }
  });
  loader.SetReadTimeout(std::chrono::seconds(60));
  EXPECT_EQ(loader.Read(), "OK");
  drain.join();
  ::close(reader);
}

}  // namespace
}  // namespace cuckoo::testing
