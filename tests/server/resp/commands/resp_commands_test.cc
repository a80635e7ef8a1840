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
#include <map>
#include <memory>
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
#include "server/wal/wal_format.h"
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
  // The next line of the reply stream, as sent (without its CRLF).
  std::string RawLine() {
    std::string line;
    return Line(&line) ? line : "<closed>";
  }
  // The raw bulk bytes of the next reply, which must be [integer, bulk]
  // or [integer, nil] (then *null is set, if given, and data is empty).
  bool ReadDumpChunk(int64_t* iterator, std::string* data, bool* null = nullptr) {
    std::string line;
    if (!Line(&line) || line != "*2") return false;
    if (!Line(&line) || line[0] != ':') return false;
    *iterator = std::stoll(line.substr(1));
    if (!Line(&line)) return false;
    if (null != nullptr) *null = line == "$-1" || line == "_";
    if (line == "$-1" || line == "_") {
      data->clear();
      return true;
    }
    if (line[0] != '$') return false;
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
  EXPECT_EQ(c.Call({"CF.DEL", "nofilter", "a"}), "-Not found");
  EXPECT_EQ(c.Call({"CF.INSERT", "g", "ITEMS", "x", "y"}), "[:1,:1]");
  EXPECT_EQ(c.Call({"CF.INSERTNX", "g", "CAPACITY", "10", "ITEMS", "x", "w"}), "[:0,:1]");
  EXPECT_EQ(c.Call({"CF.INSERT", "h", "NOCREATE", "ITEMS", "x"}), "-ERR not found");
  EXPECT_EQ(c.Call({"CF.INSERT", "h", "ITEMS"}).substr(0, 4), "-ERR");
  EXPECT_EQ(c.Call({"CF.INSERT", "h", "BOGUS", "x"}), "-Unknown argument received");
  EXPECT_EQ(c.Call({"CF.ADD", "f"}), "-ERR wrong number of arguments for 'cf.add' command");
  EXPECT_EQ(c.Call({"CF.ADD", "f", ""}).substr(0, 22), "-ERR item is empty; cu");
  EXPECT_EQ(c.Call({"CF.ADD", "f", std::string(65, 'k')}).substr(0, 21), "-ERR item is 65 bytes");
  EXPECT_EQ(c.Call({"CF.ADD", "a\xff", "x"}).substr(0, 34), "-ERR invalid filter name 'a\\xff': ");
  EXPECT_EQ(c.Call({"CF.RESERVE", "r", "abc"}), "-Bad capacity");
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
  EXPECT_EQ(c.Call({"CF.ADD", "f", "a"}), "#t");  // A boolean, as RedisBloom's.
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

// Key expiry: Redis 7's replies byte for byte (RESP2 integers), its error
// texts, and an expired key missing for every command at once.
TEST_F(RedisPortTest, ExpiryCommandsAnswerAsRedisSeven) {
  RespClient c(port());
  EXPECT_EQ(c.Call({"TTL", "f"}), ":-2");
  EXPECT_EQ(c.Call({"PTTL", "f"}), ":-2");
  EXPECT_EQ(c.Call({"EXPIRETIME", "f"}), ":-2");
  EXPECT_EQ(c.Call({"EXPIRE", "f", "10"}), ":0");
  EXPECT_EQ(c.Call({"PERSIST", "f"}), ":0");
  EXPECT_EQ(c.Call({"CF.RESERVE", "f", "1000"}), "OK");
  EXPECT_EQ(c.Call({"TTL", "f"}), ":-1");
  EXPECT_EQ(c.Call({"PEXPIRETIME", "f"}), ":-1");
  EXPECT_EQ(c.Call({"EXPIRE", "f", "100"}), ":1");
  EXPECT_EQ(c.Call({"TTL", "f"}), ":100");
  EXPECT_EQ(c.Call({"EXPIRE", "f", "50", "GT"}), ":0");
  EXPECT_EQ(c.Call({"EXPIRE", "f", "50", "LT"}), ":1");
  EXPECT_EQ(c.Call({"TTL", "f"}), ":50");
  EXPECT_EQ(c.Call({"EXPIREAT", "f", "4102444800"}), ":1");  // 2100-01-01.
  EXPECT_EQ(c.Call({"EXPIRETIME", "f"}), ":4102444800");
  EXPECT_EQ(c.Call({"PEXPIRETIME", "f"}), ":4102444800000");
  EXPECT_EQ(c.Call({"PEXPIREAT", "f", "4102444800123"}), ":1");
  EXPECT_EQ(c.Call({"PEXPIRETIME", "f"}), ":4102444800123");
  EXPECT_EQ(c.Call({"EXPIRETIME", "f"}), ":4102444800");
  EXPECT_EQ(c.Call({"PERSIST", "f"}), ":1");
  EXPECT_EQ(c.Call({"TTL", "f"}), ":-1");
  EXPECT_EQ(c.Call({"EXPIRE", "f", "x"}), "-ERR value is not an integer or out of range");
  EXPECT_EQ(c.Call({"EXPIRE", "f", "1.5"}), "-ERR value is not an integer or out of range");
  EXPECT_EQ(c.Call({"EXPIRE", "f", "9223372036854775807"}),
            "-ERR invalid expire time in 'expire' command");
  EXPECT_EQ(c.Call({"PEXPIRE", "f", "9223372036854775000"}),
            "-ERR invalid expire time in 'pexpire' command");
  EXPECT_EQ(c.Call({"EXPIREAT", "f", "253402300800"}),
            "-ERR invalid expire time in 'expireat' command");
  EXPECT_EQ(c.Call({"EXPIRE", "f", "10", "NX", "GT"}),
            "-ERR NX and XX, GT or LT options at the same time are not compatible");
  EXPECT_EQ(c.Call({"EXPIRE", "f", "10", "GT", "LT"}),
            "-ERR GT and LT options at the same time are not compatible");
  EXPECT_EQ(c.Call({"EXPIRE", "f", "10", "NOW"}), "-ERR Unsupported option NOW");
  EXPECT_EQ(c.Call({"EXPIRE", "f"}).substr(0, 37), "-ERR wrong number of arguments for 'e");
  EXPECT_EQ(c.Call({"TTL", "f"}), ":-1");
  // Queued in a transaction like any command.
  EXPECT_EQ(c.Call({"MULTI"}), "OK");
  EXPECT_EQ(c.Call({"EXPIRE", "f", "30"}), "QUEUED");
  EXPECT_EQ(c.Call({"TTL", "f"}), "QUEUED");
  EXPECT_EQ(c.Call({"EXEC"}), "[:1,:30]");
  // A time in the past deletes the key now.
  EXPECT_EQ(c.Call({"CF.ADD", "f", "k"}), ":1");
  EXPECT_EQ(c.Call({"PEXPIRE", "f", "-5"}), ":1");
  EXPECT_EQ(c.Call({"EXISTS", "f"}), ":0");
  EXPECT_EQ(c.Call({"CF.EXISTS", "f", "k"}), ":0");
  EXPECT_FALSE(server_->registry().Get("f").ok());
  // Expired, whether dropped yet or not: missing for every command; CF.ADD
  // makes a new filter.
  EXPECT_EQ(c.Call({"CF.ADD", "g", "k"}), ":1");
  EXPECT_EQ(c.Call({"PEXPIRE", "g", "150"}), ":1");
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  EXPECT_EQ(c.Call({"EXISTS", "g"}), ":0");
  EXPECT_EQ(c.Call({"TYPE", "g"}), "none");
  EXPECT_EQ(c.Call({"CF.EXISTS", "g", "k"}), ":0");
  EXPECT_EQ(c.Call({"CF.INFO", "g"}), "-ERR not found");
  EXPECT_EQ(c.Call({"DBSIZE"}), ":0");
  EXPECT_EQ(c.Call({"CF.ADD", "g", "other"}), ":1");
  EXPECT_EQ(c.Call({"CF.EXISTS", "g", "k"}), ":0");
  EXPECT_EQ(c.Call({"TTL", "g"}), ":-1");
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
  EXPECT_EQ(c.Call({"COMMAND", "COUNT"}), ":50");
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
  // RedisBloom's answer once a filter can grow no more.
  EXPECT_EQ(c.Call({"CF.ADD", "capped", "one-more"}), "-Maximum expansions reached");
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

  // Starts with a 256 KiB log whose new segments fail with ENOSPC while
  // disk_full_ is set, makes the filter "f" and sets disk_full_.
  void StartOnADiskThatFills() {
    env_.SetFail([this](const std::string& op, const std::string&) {
      return op == "create" && disk_full_.load() ? ENOSPC : 0;
    });
    Start(256 << 10);
    ASSERT_EQ(RespClient(port()).Call({"CF.RESERVE", "f", "1000000"}), "OK");
    disk_full_ = true;
  }
  // CF.INSERTs of `items` new items into "f", at most `rounds` of them,
  // until one is refused: returns its answer ("" if none was refused) and
  // sets `*insert` to its command.
  static std::string InsertUntilRefused(RespClient& c, int items, int rounds,
                                        std::vector<std::string>* insert) {
    for (int round = 0; round < rounds; ++round) {
      *insert = {"CF.INSERT", "f", "ITEMS"};
      for (int i = 0; i < items; ++i)
        insert->push_back(absl::StrCat("r", items, "-", round, "-", i));
      const std::string r = c.Call(*insert);
      if (r[0] == '-') return r;
    }
    return "";
  }

  server::testing::FaultWalEnv env_;
  std::atomic<bool> disk_full_{false};
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

// A refused write gets RedisBloom's error where RedisBloom has one (a
// filter at its ceiling: "Maximum expansions reached"), else the same error
// as the same write over gRPC: "ERR " and the status's message.
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
  // The text the port recognises the ceiling's refusal by.
  ASSERT_NE(full.error_message().find("max_capacity, a hard ceiling"), std::string::npos)
      << full.error_message();
  EXPECT_EQ(c.Call({"CF.ADD", "capped", "more"}), "-Maximum expansions reached");
  EXPECT_EQ(c.Call({"CF.INSERT", "capped", "ITEMS", "more", "most"}),
            "-Maximum expansions reached");
  // A run of merged adds: the error once per command.
  c.SendRaw(RespClient::Encode({"CF.ADD", "capped", "m1"}) +
            RespClient::Encode({"CF.ADD", "capped", "m2"}));
  EXPECT_EQ(c.Read(), "-Maximum expansions reached");
  EXPECT_EQ(c.Read(), "-Maximum expansions reached");
  // Deletes are not refused: a write that is not an insert keeps the
  // service's text (here none: it succeeds).
  EXPECT_EQ(c.Call({"CF.DEL", "capped", "k0"}), ":1");
  EXPECT_EQ(c.Call({"CF.ADD", "a\xff", "x"}),
            "-ERR invalid filter name 'a\\xff': " +
                std::string(FilterRegistry::ValidateName("a\xff").message()));
  EXPECT_EQ(c.Call({"CF.DEL", "nofilter", "x"}), "-Not found");
}

// RedisBloom 2.4's error texts, bare (no "ERR "), where it has one; its
// capacity minimum; cuckood's own errors (with "ERR ") where it has none.
TEST_F(RedisPortTest, CfCommandsAnswerRedisBloomsErrorTexts) {
  RespClient c(port());
  // CF.RESERVE: RedisBloom's checks in its order.
  EXPECT_EQ(c.Call({"CF.RESERVE", "r", "abc"}), "-Bad capacity");
  EXPECT_EQ(c.Call({"CF.RESERVE", "r", "3"}), "-Capacity must be at least (BucketSize * 2)");
  EXPECT_EQ(c.Call({"CF.RESERVE", "r", "0"}), "-Capacity must be at least (BucketSize * 2)");
  EXPECT_EQ(c.Call({"CF.RESERVE", "r", "-5"}), "-Capacity must be at least (BucketSize * 2)");
  EXPECT_EQ(c.Call({"CF.RESERVE", "r", "1"}), "-Capacity must be at least (BucketSize * 2)");
  EXPECT_EQ(c.Call({"CF.RESERVE", "r", "7", "BUCKETSIZE", "4"}),
            "-Capacity must be at least (BucketSize * 2)");
  EXPECT_EQ(c.Call({"CF.RESERVE", "r", "x", "BUCKETSIZE", "4"}), "-Bad capacity");
  EXPECT_EQ(c.Call({"CF.RESERVE", "r", "100", "BUCKETSIZE", "x"}), "-Couldn't parse BUCKETSIZE");
  EXPECT_EQ(c.Call({"CF.RESERVE", "r", "100", "BUCKETSIZE", "0"}),
            "-BUCKETSIZE: value must be an integer between 1 and 255, inclusive.");
  EXPECT_EQ(c.Call({"CF.RESERVE", "r", "100", "BUCKETSIZE", "256"}),
            "-BUCKETSIZE: value must be an integer between 1 and 255, inclusive.");
  // RedisBloom takes 9 to 255; cuckood's own error says what it supports.
  EXPECT_EQ(c.Call({"CF.RESERVE", "r", "100", "BUCKETSIZE", "9"}),
            "-ERR Bad bucket size 9: cuckood supports 1 to 8 (1 and 2 give 2, 3 and 4 give 4, 5 "
            "to 8 give 8)");
  EXPECT_EQ(c.Call({"CF.RESERVE", "r", "100", "MAXITERATIONS", "x"}),
            "-Couldn't parse MAXITERATIONS");
  EXPECT_EQ(c.Call({"CF.RESERVE", "r", "100", "MAXITERATIONS", "0"}),
            "-MAXITERATIONS: value must be an integer between 1 and 65535, inclusive.");
  EXPECT_EQ(c.Call({"CF.RESERVE", "r", "100", "MAXITERATIONS", "65536"}),
            "-MAXITERATIONS: value must be an integer between 1 and 65535, inclusive.");
  EXPECT_EQ(c.Call({"CF.RESERVE", "r", "100", "EXPANSION", "x"}), "-Couldn't parse EXPANSION");
  EXPECT_EQ(c.Call({"CF.RESERVE", "r", "100", "EXPANSION", "-1"}),
            "-EXPANSION: value must be an integer between 0 and 32768, inclusive.");
  EXPECT_EQ(c.Call({"CF.RESERVE", "r", "100", "EXPANSION", "32769"}),
            "-EXPANSION: value must be an integer between 0 and 32768, inclusive.");
  EXPECT_EQ(c.Call({"CF.RESERVE", "r", "100", "EXPANSION"}),
            "-ERR wrong number of arguments for 'cf.reserve' command");
  EXPECT_EQ(c.Call({"CF.RESERVE", "r", "100", "FOO", "1"}),
            "-ERR unknown argument 'FOO' (expected BUCKETSIZE, MAXITERATIONS or EXPANSION)");
  // Too large: what to ask for instead, never shards.
  const std::string big = c.Call({"CF.RESERVE", "big", "1099511627776"});
  EXPECT_TRUE(absl::StartsWith(big,
                               "-ERR capacity 1099511627776 is more than a filter made over "
                               "the Redis port can have with these settings"))
      << big;
  EXPECT_EQ(big.find("shards"), std::string::npos) << big;
  const size_t at = big.find("the largest accepted is ");
  ASSERT_NE(at, std::string::npos) << big;
  const std::string largest = big.substr(at + 24, big.find(':', at) - at - 24);
  // The largest passes the capacity check (and meets the memory budget's);
  // one more does not.
  const std::string at_largest = c.Call({"CF.RESERVE", "big", largest});
  EXPECT_FALSE(absl::StartsWith(at_largest, "-ERR capacity ")) << at_largest;
  EXPECT_EQ(c.Call({"CF.RESERVE", "big", absl::StrCat(std::stoull(largest) + 1)}).substr(0, 14),
            "-ERR capacity ");
  c.Call({"DEL", "big"});
  const std::string fixed_big = c.Call({"CF.RESERVE", "big", "99999999999999", "EXPANSION", "0"});
  EXPECT_NE(fixed_big.find("(EXPANSION 0); the largest accepted is 1099511627776"),
            std::string::npos)
      << fixed_big;
  EXPECT_EQ(c.Call({"CF.RESERVE", "r", "4"}), "OK");
  EXPECT_EQ(c.Call({"CF.RESERVE", "r", "4"}), "-ERR item exists");
  // CF.INSERT's options.
  EXPECT_EQ(c.Call({"CF.INSERT", "i", "CAPACITY", "abc", "ITEMS", "x"}), "-Bad capacity");
  EXPECT_EQ(c.Call({"CF.INSERT", "i", "CAPACITY", "3", "ITEMS", "x"}),
            "-Capacity must be at least (BucketSize * 2)");
  EXPECT_EQ(c.Call({"CF.INSERT", "i", "FOO", "ITEMS", "x"}), "-Unknown argument received");
  EXPECT_EQ(c.Call({"CF.INSERT", "i", "NOCREATE", "ITEMS", "x"}), "-ERR not found");
  EXPECT_EQ(c.Call({"CF.INSERT", "i", "NOCREATE", "CAPACITY"}),
            "-ERR wrong number of arguments for 'cf.insert' command");
  EXPECT_EQ(c.Call({"CF.INSERTNX", "i", "NOCREATE", "NOCREATE"}),
            "-ERR wrong number of arguments for 'cf.insertnx' command");
  EXPECT_EQ(c.Call({"CF.INSERT", "i", "CAPACITY", "1099511627777", "ITEMS", "x"}).substr(0, 14),
            "-ERR capacity ");
  EXPECT_EQ(c.Call({"EXISTS", "i"}), ":0");  // Nothing made by a refused command.
  // The others.
  EXPECT_EQ(c.Call({"CF.DEL", "i", "x"}), "-Not found");
  EXPECT_EQ(c.Call({"CF.INFO", "i"}), "-ERR not found");
  EXPECT_EQ(c.Call({"CF.EXISTS", "i", "x"}), ":0");
  EXPECT_EQ(c.Call({"CF.COUNT", "i", "x"}), ":0");
}

// EXPANSION 0 is a fixed filter: it takes keys until its slots are full
// (the capacity rounded up to whole buckets, CF.INFO's "Max capacity"),
// then answers RedisBloom's "Filter is full" (CF.ADD) or -1 (CF.INSERT).
TEST_F(RedisPortTest, ExpansionZeroAnswersFilterIsFullAtItsSlots) {
  RespClient c(port());
  ASSERT_EQ(c.Call({"CF.RESERVE", "tiny", "4", "EXPANSION", "0"}), "OK");
  const std::string info = c.Call({"CF.INFO", "tiny"});
  auto field = [&](const std::string& name) {
    const size_t at = info.find(name + ",:");
    EXPECT_NE(at, std::string::npos) << name << " in " << info;
    const size_t from = at + name.size() + 2;
    return std::stoull(info.substr(from, info.find(',', from) - from));
  };
  const uint64_t slots = field("Number of buckets") * field("Bucket size");
  EXPECT_EQ(field("Max capacity"), slots);
  EXPECT_EQ(field("Expansion rate"), 0u);
  uint64_t added = 0;
  std::string reply;
  for (int i = 0; i < 100; ++i) {
    reply = c.Call({"CF.ADD", "tiny", absl::StrCat("k", i)});
    if (reply != ":1") break;
    ++added;
  }
  EXPECT_EQ(reply, "-Filter is full");
  EXPECT_GE(added, 4u);
  EXPECT_LE(added, slots);
  // (Near full a key whose kick chain fails may be followed by one that
  // finds room: CF.INSERT answers -1 for some of 50 more, never more than
  // the slots in all.)
  std::vector<std::string> more = {"CF.INSERT", "tiny", "ITEMS"};
  for (int i = 0; i < 50; ++i) more.push_back(absl::StrCat("more", i));
  EXPECT_NE(c.Call(more).find(":-1"), std::string::npos);
  const std::string after = c.Call({"CF.INFO", "tiny"});
  const size_t at = after.find("Number of items inserted,:");
  ASSERT_NE(at, std::string::npos) << after;
  EXPECT_LE(std::stoull(after.substr(at + 26)), slots) << after;
  EXPECT_NE(after.find("Number of filters,:1,"), std::string::npos) << after;
}

// RedisBloom's filters grow when one item is added again and again;
// filters made over the Redis port do too, and CF.COUNT counts every copy.
TEST_F(RedisPortTest, RepeatedAddsOfOneItemGrowTheFilterAndAreAllCounted) {
  RespClient c(port());
  for (int i = 0; i < 40; ++i) ASSERT_EQ(c.Call({"CF.ADD", "seen", "x"}), ":1") << i;
  EXPECT_EQ(c.Call({"CF.COUNT", "seen", "x"}), ":40");
  const std::string info = c.Call({"CF.INFO", "seen"});
  // 8 copies per generation: 5 generations (6 if a generation's two
  // buckets for the item are one, which then holds 4).
  const size_t at = info.find("Number of filters,:");
  ASSERT_NE(at, std::string::npos) << info;
  const int filters = std::stoi(info.substr(at + 19));
  EXPECT_TRUE(filters == 5 || filters == 6) << info;
  EXPECT_NE(info.find("Number of items inserted,:40,"), std::string::npos) << info;
  // Made over the Redis port: the option, and a ceiling 1024 times the
  // capacity (--redis-default-capacity 1024 in RedisPortTest's config).
  grpc::ClientContext ctx;
  v1::GetFilterRequest get;
  get.set_name("seen");
  v1::GetFilterResponse got;
  ASSERT_TRUE(stub_->GetFilter(&ctx, get, &got).ok());
  EXPECT_TRUE(got.filter().grow_on_repeats());
  EXPECT_EQ(got.filter().max_capacity(), got.filter().capacity() * 1024);
  // CF.RESERVE's filters too, pipelined adds as well (one batch).
  ASSERT_EQ(c.Call({"CF.RESERVE", "r", "100", "EXPANSION", "4"}), "OK");
  std::string pipelined;
  for (int i = 0; i < 40; ++i) pipelined += RespClient::Encode({"CF.ADD", "r", "y"});
  c.SendRaw(pipelined);
  for (int i = 0; i < 40; ++i) ASSERT_EQ(c.Read(), ":1") << i;
  EXPECT_EQ(c.Call({"CF.COUNT", "r", "y"}), ":40");
  // Until the filter can grow no more: RedisBloom's answer.
  std::string reply;
  int added = 0;
  for (int i = 0; i < 1000 && (reply = c.Call({"CF.ADD", "r", "y"})) == ":1"; ++i) ++added;
  EXPECT_EQ(reply, "-Maximum expansions reached");
  EXPECT_GT(added, 0);
  EXPECT_EQ(c.Call({"CF.COUNT", "r", "y"}), absl::StrCat(":", 40 + added));
  EXPECT_EQ(c.Call({"CF.INSERT", "r", "ITEMS", "y"}), "[:-1]");
  EXPECT_EQ(c.Call({"CF.EXISTS", "r", "y"}), ":1");
}

// A filter made over gRPC without grow_on_repeats keeps cuckood's own
// policy over the Redis port too: the 9th copy is full, nothing grows.
TEST_F(RedisPortTest, AGrpcMadeFilterWithoutTheOptionKeepsFullForRepeats) {
  grpc::ClientContext ctx;
  v1::CreateFilterRequest req;
  req.set_name("grpc-made");
  req.set_capacity(1000);
  req.set_growth_factor(2);
  req.set_seed(42);  // The item's two buckets are two (with one, 4 copies fit).
  v1::CreateFilterResponse resp;
  ASSERT_TRUE(stub_->CreateFilter(&ctx, req, &resp).ok());
  EXPECT_FALSE(resp.filter().grow_on_repeats());
  RespClient c(port());
  for (int i = 0; i < 8; ++i) ASSERT_EQ(c.Call({"CF.ADD", "grpc-made", "x"}), ":1") << i;
  EXPECT_EQ(c.Call({"CF.ADD", "grpc-made", "x"}), "-Filter is full");
  EXPECT_EQ(c.Call({"CF.COUNT", "grpc-made", "x"}), ":8");
  EXPECT_NE(c.Call({"CF.INFO", "grpc-made"}).find("Number of filters,:1,"), std::string::npos);
}

TEST_F(RedisWalEnvTest, AWriteRefusedForAFullDiskGetsTheLogsErrorAndChangesNothing) {
  ASSERT_NO_FATAL_FAILURE(StartOnADiskThatFills());
  RespClient c(port());
  // Until the current segment and the one prepared are full.
  std::vector<std::string> insert;
  const std::string refused = InsertUntilRefused(c, 500, 1000, &insert);
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
  disk_full_ = false;
}

// An EXEC on a full disk: the log has no room for the EXEC's transaction
// or for its writes, so each write gets the log's error as its element and
// none is applied (in a transaction or out of one); once there is room, the
// next EXEC is whole.
TEST_F(RedisWalEnvTest, AnExecOnAFullDiskAnswersEachWriteWithTheLogsErrorAndAppliesNone) {
  ASSERT_NO_FATAL_FAILURE(StartOnADiskThatFills());
  RespClient c(port());
  // Until the current segment and the one prepared are full: batches of
  // 500 items, then single ones until even one has no room.
  const std::string kNoRoom = "-ERR no room for the write-ahead log (";
  std::vector<std::string> insert;
  for (int items : {500, 1}) {
    const std::string refused = InsertUntilRefused(c, items, 5000, &insert);
    ASSERT_TRUE(absl::StartsWith(refused, kNoRoom)) << refused;
  }
  ASSERT_EQ(c.Call({"MULTI"}), "OK");
  ASSERT_EQ(c.Call({"CF.ADD", "f", "tx-a"}), "QUEUED");
  ASSERT_EQ(c.Call({"CF.EXISTS", "f", "tx-a"}), "QUEUED");
  ASSERT_EQ(c.Call({"CF.ADD", "f", "tx-b"}), "QUEUED");
  const std::string exec = c.Call({"EXEC"});
  // [error, :0, error]: the read between them runs, and sees nothing.
  EXPECT_TRUE(absl::StartsWith(exec, "[" + kNoRoom)) << exec;
  size_t errors = 0;
  for (size_t at = exec.find(kNoRoom); at != std::string::npos; at = exec.find(kNoRoom, at + 1)) {
    ++errors;
  }
  EXPECT_EQ(errors, 2u) << exec;
  EXPECT_NE(exec.find(",:0,"), std::string::npos) << exec;
  EXPECT_EQ(c.Call({"CF.MEXISTS", "f", "tx-a", "tx-b"}), "[:0,:0]");
  // Room again: the log prepares a segment at its next try (it waits a
  // second between tries), and the same EXEC is applied whole.
  disk_full_ = false;
  std::string again;
  for (int i = 0; i < 100; ++i) {
    ASSERT_EQ(c.Call({"MULTI"}), "OK");
    ASSERT_EQ(c.Call({"CF.ADD", "f", "tx-a"}), "QUEUED");
    ASSERT_EQ(c.Call({"CF.ADD", "f", "tx-b"}), "QUEUED");
    again = c.Call({"EXEC"});
    if (again == "[:1,:1]") break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_EQ(again, "[:1,:1]");
  EXPECT_EQ(c.Call({"CF.MEXISTS", "f", "tx-a", "tx-b"}), "[:1,:1]");
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
    bool null = false;
    ASSERT_TRUE(c.ReadDumpChunk(&it, &data, &null));
    if (it == 0) {
      EXPECT_TRUE(null) << "RedisBloom ends a dump with [0, nil]";
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
  EXPECT_THAT(c.Call({"CF.LOADCHUNK", "other", "1", "RedisBloom-bytes"}),
              ::testing::StartsWith("-Invalid header: this is not the first chunk of a cuckood "
                                    "CF.SCANDUMP"));
  EXPECT_EQ(c.Call({"CF.SCANDUMP", "src", "99999999999"}).substr(0, 25),
            "-ERR no CF.SCANDUMP of 's");
  EXPECT_THAT(c.Call({"CF.LOADCHUNK", "copy", absl::StrCat(chunks[0].first), chunks[0].second}),
              ::testing::StartsWith("-ERR item exists: filter 'copy' exists; DEL it first"));
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
  EXPECT_EQ(reader.Call({"CF.EXISTS", "billing.x", "k"}), "#t");  // RESP3: a boolean
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
  ASSERT_EQ(c.Call({"CF.ADD", "src", "x"}), ":1");
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
  // Their files, removed from the directory once open, held open.
  EXPECT_TRUE(TransferFiles().empty()) << absl::StrJoin(TransferFiles(), ", ");
  EXPECT_EQ(OpenTransferFiles(), 2);
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
  // Refused loads hold no slot: two that fit start (one per connection).
  EXPECT_EQ(c.Call({"CF.LOADCHUNK", "a", "4294967297", Header(1 << 20)}), "OK");
  RespClient c2(port());
  EXPECT_EQ(c2.Call({"CF.LOADCHUNK", "b", "4294967297", Header(512 << 10)}), "OK");
  // A dump whose copy does not fit: the export it reads from claims the
  // filter's memory first, and is refused naming it.
  ASSERT_EQ(c.Call({"CF.RESERVE", "big", "2000000"}), "OK");  // About 3.6 MB.
  ASSERT_EQ(c.Call({"CF.ADD", "big", "x"}), ":1");  // (An empty filter's dump is [0, nil].)
  const std::string dump = c.Call({"CF.SCANDUMP", "big", "0"});
  EXPECT_THAT(dump, ::testing::HasSubstr("-ERR the export of filter \"big\" needs 3.6MiB"));
  EXPECT_THAT(dump, ::testing::HasSubstr("and 1.5MiB is promised to other transfers under way"));
  EXPECT_EQ(OpenTransferFiles(), 2);  // The two loads'.
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

// ---- CF.SCANDUMP and CF.LOADCHUNK belong to their connection ----

class RedisDumpOwnershipTest : public RedisTransferTest {
 protected:
  // No idle timer within a test: what ends a dump or load here is its
  // connection, its filter or its end.
  void SetUp() override {
    server::ServerConfig c = TransferConfig();
    c.transfer_idle_timeout = absl::Minutes(10);
    StartServer(c);
  }
  // Waits (up to 10 s) until the server holds `n` transfer files open.
  static bool WaitForOpenTransferFiles(int n) {
    for (int i = 0; i < 1000 && OpenTransferFiles() != n; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return OpenTransferFiles() == n;
  }
  // CF.SCANDUMP key 0 on `c`: the header chunk's iterator (0 if refused,
  // the error in *error).
  static int64_t StartDump(RespClient& c, const std::string& key, std::string* error = nullptr) {
    // "[:<iterator>,$<header>]", or the error.
    const std::string reply = c.Call({"CF.SCANDUMP", key, "0"});
    if (!reply.starts_with("[:")) {
      if (error != nullptr) *error = reply;
      return 0;
    }
    return std::stoll(reply.substr(2, reply.find(',') - 2));
  }
  // A filter of `n` keys ("k0" ...).
  static void Fill(RespClient& c, const std::string& key, int n) {
    std::vector<std::string> insert = {"CF.INSERT", key, "CAPACITY", absl::StrCat(n), "ITEMS"};
    for (int i = 0; i < n; ++i) insert.push_back(absl::StrCat("k", i));
    ASSERT_EQ(c.Call(insert).find(":-1"), std::string::npos);
  }
};

// A client that disconnects mid-dump or mid-load gives its slots back at
// once (not after --transfer-idle-timeout, 10 minutes here): the most
// dumps and loads can be started again by new connections, and no file is
// left open.
TEST_F(RedisDumpOwnershipTest, DumpsAndLoadsEndWithTheirConnectionSoNewOnesCanStartTheMost) {
  RespClient setup(port());
  for (int i = 0; i < 4; ++i) ASSERT_NO_FATAL_FAILURE(Fill(setup, absl::StrCat("d", i), 100));
  auto first = std::make_unique<RespClient>(port());
  auto second = std::make_unique<RespClient>(port());
  std::string error;
  ASSERT_NE(StartDump(*first, "d0"), 0);
  ASSERT_NE(StartDump(*first, "d1"), 0);
  EXPECT_EQ(StartDump(*first, "d2", &error), 0);
  EXPECT_EQ(error,
            "-ERR this connection has 2 CF.SCANDUMPs in progress already (the most per "
            "connection): read one to its end (iterator 0 back), or close the connection");
  ASSERT_NE(StartDump(*second, "d2"), 0);
  ASSERT_NE(StartDump(*second, "d3"), 0);
  EXPECT_EQ(first->Call({"CF.LOADCHUNK", "copy1", "4294967297", Header(1 << 20)}), "OK");
  EXPECT_THAT(first->Call({"CF.LOADCHUNK", "copy9", "4294967297", Header(1 << 20)}),
              ::testing::StartsWith("-ERR this connection has 1 CF.LOADCHUNK load in progress "
                                    "already (the most per connection)"));
  EXPECT_EQ(second->Call({"CF.LOADCHUNK", "copy2", "4294967297", Header(1 << 20)}), "OK");
  // Every slot is taken.
  RespClient third(port());
  EXPECT_EQ(StartDump(third, "d0", &error), 0);
  EXPECT_THAT(error, ::testing::StartsWith("-ERR 4 CF.SCANDUMPs are in progress already on all "
                                           "connections (the most at once)"));
  EXPECT_THAT(third.Call({"CF.LOADCHUNK", "copy3", "4294967297", Header(1 << 20)}),
              ::testing::StartsWith("-ERR 2 CF.LOADCHUNK loads are in progress already on all "
                                    "connections"));
  EXPECT_EQ(OpenTransferFiles(), 6);
  // Both clients go away mid-dump and mid-load.
  first.reset();
  second.reset();
  EXPECT_TRUE(WaitForOpenTransferFiles(0)) << OpenTransferFiles() << " files still open";
  EXPECT_TRUE(TransferFiles().empty()) << absl::StrJoin(TransferFiles(), ", ");
  // New connections start the most again, the names of the loads included.
  RespClient fourth(port());
  for (int i = 0; i < 2; ++i) EXPECT_NE(StartDump(third, absl::StrCat("d", i)), 0) << i;
  for (int i = 2; i < 4; ++i) EXPECT_NE(StartDump(fourth, absl::StrCat("d", i)), 0) << i;
  EXPECT_EQ(third.Call({"CF.LOADCHUNK", "copy1", "4294967297", Header(1 << 20)}), "OK");
  EXPECT_EQ(fourth.Call({"CF.LOADCHUNK", "copy2", "4294967297", Header(1 << 20)}), "OK");
  EXPECT_EQ(OpenTransferFiles(), 6);
}

// A dump's iterators and a load's chunks are refused on any other
// connection, with an error saying why; the owner's go on undisturbed.
TEST_F(RedisDumpOwnershipTest, AnotherConnectionsIteratorOrChunkIsRefused) {
  RespClient owner(port());
  ASSERT_NO_FATAL_FAILURE(Fill(owner, "src", 4000));
  const int64_t it = StartDump(owner, "src");
  ASSERT_NE(it, 0);
  RespClient other(port());
  EXPECT_EQ(other.Call({"CF.SCANDUMP", "src", absl::StrCat(it)}),
            absl::StrCat("-ERR iterator ", it,
                         " is of a CF.SCANDUMP of 'src' started on another connection: a dump "
                         "belongs to the connection that started it, so run the whole "
                         "CF.SCANDUMP loop on one connection (with a connection pool, hold one "
                         "connection for it)"));
  ASSERT_EQ(owner.Call({"CF.LOADCHUNK", "copy", "4294967297", Header(3 << 20)}), "OK");
  EXPECT_EQ(other.Call({"CF.LOADCHUNK", "copy", "4294967298", "data"}),
            "-ERR the CF.LOADCHUNK of 'copy' was started on another connection: a load belongs "
            "to the connection that sent its first chunk, so send all its chunks on that one");
  EXPECT_THAT(other.Call({"CF.LOADCHUNK", "copy", "4294967297", Header(1 << 20)}),
              ::testing::StartsWith("-ERR a CF.LOADCHUNK of 'copy' is in progress on another "
                                    "connection"));
  // The owner's dump goes on to its end.
  int64_t next = it;
  int chunks = 0;
  for (bool null = false; next != 0 && chunks < 100; ++chunks) {
    owner.Send({"CF.SCANDUMP", "src", absl::StrCat(next)});
    std::string data;
    ASSERT_TRUE(owner.ReadDumpChunk(&next, &data, &null));
    EXPECT_EQ(null, next == 0);
  }
  EXPECT_GE(chunks, 1);
  EXPECT_EQ(next, 0);
}

// RedisBloom's replies: a missing filter is "ERR not found", an empty
// one's dump [0, nil] at once (no dump is held), the end [0, nil]; in
// RESP3 the same shapes, nil as RESP3's null. A dump read to its end holds
// nothing more: its iterators are refused and its file is gone.
TEST_F(RedisDumpOwnershipTest, RepliesAreRedisBloomsAndTheEndFreesTheDump) {
  for (const int protocol : {2, 3}) {
    SCOPED_TRACE(protocol);
    RespClient c(port());
    if (protocol == 3) {
      ASSERT_THAT(c.Call({"HELLO", "3"}), ::testing::StartsWith("["));
    }
    const std::string empty = absl::StrCat("empty", protocol);
    const std::string full = absl::StrCat("full", protocol);
    EXPECT_EQ(c.Call({"CF.SCANDUMP", "missing", "0"}), "-ERR not found");
    EXPECT_EQ(c.Call({"CF.SCANDUMP", "src", "-1"}),
              "-Invalid position: the iterator is a non-negative integer, 0 to start");
    EXPECT_EQ(c.Call({"CF.LOADCHUNK", "copy", "0", "x"}),
              "-Invalid position: use the iterator CF.SCANDUMP returned with this chunk");
    ASSERT_EQ(c.Call({"CF.RESERVE", empty, "1000"}), "OK");
    c.Send({"CF.SCANDUMP", empty, "0"});
    int64_t it = -1;
    std::string data;
    bool null = false;
    ASSERT_TRUE(c.ReadDumpChunk(&it, &data, &null));
    EXPECT_EQ(it, 0);
    EXPECT_TRUE(null);
    EXPECT_EQ(OpenTransferFiles(), 0);
    ASSERT_NO_FATAL_FAILURE(Fill(c, full, 10));
    const int64_t header = StartDump(c, full);
    ASSERT_NE(header, 0);
    std::vector<int64_t> iterators = {header};
    for (int64_t next = header; next != 0 && iterators.size() < 10;) {
      c.Send({"CF.SCANDUMP", full, absl::StrCat(next)});
      ASSERT_TRUE(c.ReadDumpChunk(&next, &data, &null));
      if (next != 0) {
        EXPECT_FALSE(null);
        iterators.push_back(next);
      }
    }
    EXPECT_TRUE(null) << "the last reply is [0, nil]";
    EXPECT_EQ(data, "");
    EXPECT_TRUE(WaitForOpenTransferFiles(0));
    EXPECT_THAT(c.Call({"CF.SCANDUMP", full, absl::StrCat(iterators.back())}),
                ::testing::StartsWith(absl::StrCat("-ERR no CF.SCANDUMP of '", full,
                                                   "' is in progress on this connection")));
  }
}

// A rename takes the key's filter away as a drop does: its dumps end, and
// the next chunk asked for under the old name says so.
TEST_F(RedisDumpOwnershipTest, RenamingTheFilterEndsItsDumps) {
  RespClient c(port());
  ASSERT_NO_FATAL_FAILURE(Fill(c, "a", 100));
  const int64_t a = StartDump(c, "a");
  ASSERT_NE(a, 0);
  EXPECT_EQ(OpenTransferFiles(), 1);
  ASSERT_EQ(c.Call({"RENAME", "a", "a2"}), "OK");
  EXPECT_EQ(c.Call({"CF.SCANDUMP", "a", absl::StrCat(a)}),
            absl::StrCat("-ERR not found: filter 'a' was dropped or renamed during its "
                         "CF.SCANDUMP (iterator ",
                         a, "), so the dump's copy was removed"));
  EXPECT_TRUE(WaitForOpenTransferFiles(0)) << OpenTransferFiles() << " files still open";
  // A dump of the filter under its new name starts afresh.
  EXPECT_NE(StartDump(c, "a2"), 0);
}

// Dropping the filter (Redis's DEL, or DropFilter over gRPC) ends its
// dumps: the copy goes at once (DEL) or within the sweeper's second
// (gRPC, no command needed), and the client's next chunk is refused with
// RedisBloom's "not found" and the reason. A filter dropped and made again
// under the same name is another filter.
TEST_F(RedisDumpOwnershipTest, DroppingTheFilterEndsItsDumps) {
  RespClient c(port());
  ASSERT_NO_FATAL_FAILURE(Fill(c, "a", 100));
  ASSERT_NO_FATAL_FAILURE(Fill(c, "b", 100));
  const int64_t a = StartDump(c, "a");
  const int64_t b = StartDump(c, "b");
  ASSERT_NE(a, 0);
  ASSERT_NE(b, 0);
  EXPECT_EQ(OpenTransferFiles(), 2);
  // DEL, then the name made again.
  ASSERT_EQ(c.Call({"DEL", "a"}), ":1");
  ASSERT_EQ(c.Call({"CF.ADD", "a", "new"}), ":1");
  EXPECT_EQ(c.Call({"CF.SCANDUMP", "a", absl::StrCat(a)}),
            absl::StrCat("-ERR not found: filter 'a' was dropped or renamed during its "
                         "CF.SCANDUMP (iterator ",
                         a, "), so the dump's copy was removed"));
  EXPECT_TRUE(WaitForOpenTransferFiles(1));
  // Over gRPC: the sweeper notices without any command.
  grpc::ClientContext ctx;
  v1::DropFilterRequest req;
  req.set_name("b");
  v1::DropFilterResponse resp;
  ASSERT_TRUE(stub_->DropFilter(&ctx, req, &resp).ok());
  EXPECT_TRUE(WaitForOpenTransferFiles(0)) << OpenTransferFiles() << " files still open";
  EXPECT_THAT(c.Call({"CF.SCANDUMP", "b", absl::StrCat(b)}),
              ::testing::StartsWith("-ERR not found: filter 'b' was dropped or renamed during "
                                    "its CF.SCANDUMP"));
  // Their slots are free: this connection starts its most again.
  EXPECT_NE(StartDump(c, "a"), 0);
  ASSERT_NO_FATAL_FAILURE(Fill(c, "b", 100));
  EXPECT_NE(StartDump(c, "b"), 0);
}

// RESET makes the connection as new: its dumps and loads end.
TEST_F(RedisDumpOwnershipTest, ResetEndsTheConnectionsDumpsAndLoads) {
  RespClient c(port());
  ASSERT_NO_FATAL_FAILURE(Fill(c, "src", 100));
  const int64_t it = StartDump(c, "src");
  ASSERT_NE(it, 0);
  ASSERT_EQ(c.Call({"CF.LOADCHUNK", "copy", "4294967297", Header(1 << 20)}), "OK");
  EXPECT_EQ(OpenTransferFiles(), 2);
  ASSERT_EQ(c.Call({"RESET"}), "RESET");
  EXPECT_TRUE(WaitForOpenTransferFiles(0));
  EXPECT_THAT(c.Call({"CF.SCANDUMP", "src", absl::StrCat(it)}),
              ::testing::StartsWith("-ERR no CF.SCANDUMP of 'src' is in progress on this "
                                    "connection"));
  EXPECT_THAT(c.Call({"CF.LOADCHUNK", "copy", "4294967298", "data"}),
              ::testing::StartsWith("-ERR no CF.LOADCHUNK of 'copy' is in progress on this "
                                    "connection"));
  // Iterator 0 again on the same connection restarts its dump of a key
  // rather than taking a second slot.
  for (int i = 0; i < 3; ++i) EXPECT_NE(StartDump(c, "src"), 0) << i;
  EXPECT_TRUE(WaitForOpenTransferFiles(1));
}

// ---- RENAME / RENAMENX (issue 33) ----

using RedisRename = RedisPortTest;

TEST_F(RedisRename, RenameAnswersAsRedisAndMovesTheFilterWithItsItems) {
  RespClient c(port());
  ASSERT_EQ(c.Call({"CF.RESERVE", "seen:today", "1000"}), "OK");
  ASSERT_EQ(c.Call({"CF.ADD", "seen:today", "u1"}), ":1");
  EXPECT_EQ(c.Call({"RENAME", "seen:today", "seen:yesterday"}), "OK");
  EXPECT_EQ(c.Call({"EXISTS", "seen:today", "seen:yesterday"}), ":1");
  EXPECT_EQ(c.Call({"CF.EXISTS", "seen:yesterday", "u1"}), ":1");
  EXPECT_EQ(c.Call({"RENAME", "seen:today", "x"}), "-ERR no such key");
  EXPECT_EQ(c.Call({"RENAMENX", "seen:today", "x"}), "-ERR no such key");
  // A key that cannot be a filter's name cannot exist.
  EXPECT_EQ(c.Call({"RENAME", std::string(600, 'k'), "x"}), "-ERR no such key");
  EXPECT_EQ(c.Call({"RENAME", "seen:yesterday", std::string(600, 'n')}).substr(0, 26),
            "-ERR invalid filter name '");
  EXPECT_EQ(c.Call({"RENAME", "seen:yesterday", "seen:yesterday"}), "OK");
  EXPECT_EQ(c.Call({"RENAMENX", "seen:yesterday", "seen:yesterday"}), ":0");
  EXPECT_EQ(c.Call({"RENAME", "seen:yesterday"}),
            "-ERR wrong number of arguments for 'rename' command");
  EXPECT_EQ(c.Call({"RENAMENX", "a", "b", "c"}),
            "-ERR wrong number of arguments for 'renamenx' command");
  EXPECT_EQ(c.Call({"COMMAND", "INFO", "rename"}).substr(0, 27), "[[$rename,:3,[write],:1,:2,");
  EXPECT_EQ(c.Call({"CF.EXISTS", "seen:yesterday", "u1"}), ":1");
}

TEST_F(RedisRename, RenameReplacesTheDestinationAndRenamenxNeverDoes) {
  RespClient c(port());
  ASSERT_EQ(c.Call({"CF.RESERVE", "a", "1000"}), "OK");
  ASSERT_EQ(c.Call({"CF.RESERVE", "b", "1000"}), "OK");
  ASSERT_EQ(c.Call({"CF.ADD", "a", "from-a"}), ":1");
  ASSERT_EQ(c.Call({"CF.ADD", "b", "from-b"}), ":1");
  EXPECT_EQ(c.Call({"RENAMENX", "a", "b"}), ":0");
  EXPECT_EQ(c.Call({"CF.MEXISTS", "a", "from-a", "from-b"}), "[:1,:0]");
  EXPECT_EQ(c.Call({"CF.MEXISTS", "b", "from-a", "from-b"}), "[:0,:1]");
  EXPECT_EQ(c.Call({"RENAME", "a", "b"}), "OK");
  EXPECT_EQ(c.Call({"EXISTS", "a"}), ":0");
  EXPECT_EQ(c.Call({"CF.MEXISTS", "b", "from-a", "from-b"}), "[:1,:0]");
  EXPECT_EQ(c.Call({"RENAMENX", "b", "c"}), ":1");
  EXPECT_EQ(c.Call({"KEYS", "*"}), "[$c]");
}

TEST_F(RedisRename, RenameInMultiQueuesAndRunsAtExecInOrder) {
  RespClient c(port());
  ASSERT_EQ(c.Call({"CF.RESERVE", "f", "1000"}), "OK");
  EXPECT_EQ(c.Call({"MULTI"}), "OK");
  EXPECT_EQ(c.Call({"CF.ADD", "f", "a"}), "QUEUED");
  EXPECT_EQ(c.Call({"RENAME", "f", "g"}), "QUEUED");
  EXPECT_EQ(c.Call({"CF.EXISTS", "g", "a"}), "QUEUED");
  EXPECT_EQ(c.Call({"RENAMENX", "missing", "h"}), "QUEUED");
  EXPECT_EQ(c.Call({"RENAME"}), "-ERR wrong number of arguments for 'rename' command");
  EXPECT_EQ(c.Call({"EXEC"}), "-EXECABORT Transaction discarded because of previous errors.");
  EXPECT_EQ(c.Call({"EXISTS", "f", "g"}), ":1");
  EXPECT_EQ(c.Call({"EXISTS", "f"}), ":1");
  EXPECT_EQ(c.Call({"MULTI"}), "OK");
  EXPECT_EQ(c.Call({"CF.ADD", "f", "a"}), "QUEUED");
  EXPECT_EQ(c.Call({"RENAME", "f", "g"}), "QUEUED");
  EXPECT_EQ(c.Call({"CF.EXISTS", "g", "a"}), "QUEUED");
  EXPECT_EQ(c.Call({"RENAMENX", "missing", "h"}), "QUEUED");
  EXPECT_EQ(c.Call({"EXEC"}), "[:1,OK,:1,-ERR no such key]");
  EXPECT_EQ(c.Call({"EXISTS", "f", "g", "h"}), ":1");
}

// ---- MULTI / EXEC / DISCARD (issue 33) ----

using RedisTransactions = RedisPortTest;

// The value of `field` in INFO's text ("" if absent).
std::string InfoField(RespClient& c, const std::string& field) {
  const std::string info = c.Call({"INFO"});
  const size_t at = info.find(field + ":");
  if (at == std::string::npos) return "";
  const size_t from = at + field.size() + 1;
  return info.substr(from, info.find('\r', from) - from);
}

TEST_F(RedisTransactions, CommandsAfterMultiAnswerQueuedAndRunAtExec) {
  RespClient c(port());
  RespClient other(port());
  ASSERT_EQ(c.Call({"CF.RESERVE", "f", "1000"}), "OK");
  EXPECT_EQ(c.Call({"MULTI"}), "OK");
  EXPECT_EQ(c.Call({"CF.ADD", "f", "a"}), "QUEUED");
  EXPECT_EQ(c.Call({"CF.EXISTS", "f", "a"}), "QUEUED");
  EXPECT_EQ(c.Call({"CF.ADD", "g", "b"}), "QUEUED");
  EXPECT_EQ(c.Call({"PING"}), "QUEUED");
  // Nothing ran: another connection sees neither the item nor the filter
  // CF.ADD would create.
  EXPECT_EQ(other.Call({"CF.EXISTS", "f", "a"}), ":0");
  EXPECT_EQ(other.Call({"EXISTS", "g"}), ":0");
  EXPECT_EQ(c.Call({"EXEC"}), "[:1,:1,:1,PONG]");
  EXPECT_EQ(other.Call({"CF.EXISTS", "f", "a"}), ":1");
  EXPECT_EQ(other.Call({"CF.EXISTS", "g", "b"}), ":1");
  // An empty transaction answers an empty array.
  EXPECT_EQ(c.Call({"MULTI"}), "OK");
  EXPECT_EQ(c.Call({"EXEC"}), "[]");
}

TEST_F(RedisTransactions, PipelinedTransactionRunsNothingBeforeExecAndBatchesNothingAcrossIt) {
  RespClient c(port());
  ASSERT_EQ(c.Call({"CF.RESERVE", "f", "1000"}), "OK");
  // The whole transaction in one write, with runs of CF.ADD on one filter
  // before, inside and after it (each a batch of its own).
  Pipeline p;
  p.Add({"CF.ADD", "f", "before"}, ":1");
  p.Add({"CF.EXISTS", "f", "in-1"}, ":0");
  p.Add({"MULTI"}, "OK");
  p.Add({"CF.ADD", "f", "in-1"}, "QUEUED");
  p.Add({"CF.ADD", "f", "in-2"}, "QUEUED");
  p.Add({"CF.EXISTS", "f", "in-2"}, "QUEUED");
  p.Add({"CF.EXISTS", "f", "after"}, "QUEUED");
  p.Add({"EXEC"}, "[:1,:1,:1,:0]");
  p.Add({"CF.ADD", "f", "after"}, ":1");
  p.Add({"CF.MEXISTS", "f", "before", "in-1", "in-2", "after"}, "[:1,:1,:1,:1]");
  ASSERT_NO_FATAL_FAILURE(p.SendAndCheck(c));
}

TEST_F(RedisTransactions, AQueueTimeErrorAbortsExecAndNothingRuns) {
  RespClient c(port());
  ASSERT_EQ(c.Call({"CF.RESERVE", "f", "1000"}), "OK");
  EXPECT_EQ(c.Call({"MULTI"}), "OK");
  EXPECT_EQ(c.Call({"CF.ADD", "f", "a"}), "QUEUED");
  EXPECT_EQ(c.Call({"CF.ADD", "f"}), "-ERR wrong number of arguments for 'cf.add' command");
  EXPECT_EQ(c.Call({"CF.FROB", "f"}),
            "-ERR unknown command 'CF.FROB', with args beginning with: 'f' ");
  EXPECT_EQ(c.Call({"CF.ADD", "f", "b"}), "QUEUED");
  EXPECT_EQ(c.Call({"EXEC"}), "-EXECABORT Transaction discarded because of previous errors.");
  EXPECT_EQ(c.Call({"CF.MEXISTS", "f", "a", "b"}), "[:0,:0]");
  // The connection is out of the transaction, and the next one starts clean.
  EXPECT_EQ(c.Call({"EXEC"}), "-ERR EXEC without MULTI");
  EXPECT_EQ(c.Call({"MULTI"}), "OK");
  EXPECT_EQ(c.Call({"CF.ADD", "f", "c"}), "QUEUED");
  EXPECT_EQ(c.Call({"EXEC"}), "[:1]");
}

TEST_F(RedisTransactions, RuntimeErrorsAreElementsAndDoNotRollBack) {
  RespClient c(port());
  ASSERT_EQ(c.Call({"CF.RESERVE", "f", "1000"}), "OK");
  EXPECT_EQ(c.Call({"MULTI"}), "OK");
  EXPECT_EQ(c.Call({"CF.ADD", "f", "a"}), "QUEUED");
  EXPECT_EQ(c.Call({"CF.DEL", "nofilter", "x"}), "QUEUED");
  EXPECT_EQ(c.Call({"CF.ADD", "bad\xff", "x"}), "QUEUED");
  EXPECT_EQ(c.Call({"CF.ADD", "f", "b"}), "QUEUED");
  const std::string reply = c.Call({"EXEC"});
  EXPECT_EQ(reply, "[:1,-Not found,-ERR invalid filter name 'bad\\xff': " +
                       std::string(FilterRegistry::ValidateName("bad\xff").message()) + ",:1]");
  EXPECT_EQ(c.Call({"CF.MEXISTS", "f", "a", "b"}), "[:1,:1]");
}

TEST_F(RedisTransactions, ControlCommandsAnswerWithRedisTexts) {
  RespClient c(port());
  ASSERT_EQ(c.Call({"CF.RESERVE", "f", "1000"}), "OK");
  EXPECT_EQ(c.Call({"EXEC"}), "-ERR EXEC without MULTI");
  EXPECT_EQ(c.Call({"DISCARD"}), "-ERR DISCARD without MULTI");
  EXPECT_EQ(c.Call({"MULTI", "x"}), "-ERR wrong number of arguments for 'multi' command");
  EXPECT_EQ(c.Call({"UNWATCH"}), "OK");
  const std::string watch = c.Call({"WATCH", "f"});
  EXPECT_EQ(watch.substr(0, 37), "-ERR WATCH is not supported by cuckoo") << watch;
  EXPECT_NE(watch.find("without WATCH"), std::string::npos) << watch;
  // Nested MULTI and WATCH inside MULTI: errors that do not abort (Redis).
  EXPECT_EQ(c.Call({"MULTI"}), "OK");
  EXPECT_EQ(c.Call({"MULTI"}), "-ERR MULTI calls can not be nested");
  EXPECT_EQ(c.Call({"WATCH", "f"}), "-ERR WATCH inside MULTI is not allowed");
  EXPECT_EQ(c.Call({"UNWATCH"}), "QUEUED");
  EXPECT_EQ(c.Call({"CF.ADD", "f", "a"}), "QUEUED");
  EXPECT_EQ(c.Call({"EXEC"}), "[OK,:1]");
  // DISCARD drops the queue.
  EXPECT_EQ(c.Call({"MULTI"}), "OK");
  EXPECT_EQ(c.Call({"CF.ADD", "f", "discarded"}), "QUEUED");
  EXPECT_EQ(c.Call({"DISCARD"}), "OK");
  EXPECT_EQ(c.Call({"EXEC"}), "-ERR EXEC without MULTI");
  EXPECT_EQ(c.Call({"CF.EXISTS", "f", "discarded"}), ":0");
  // So does RESET.
  EXPECT_EQ(c.Call({"MULTI"}), "OK");
  EXPECT_EQ(c.Call({"CF.ADD", "f", "reset"}), "QUEUED");
  EXPECT_EQ(c.Call({"RESET"}), "RESET");
  EXPECT_EQ(c.Call({"EXEC"}), "-ERR EXEC without MULTI");
  EXPECT_EQ(c.Call({"CF.EXISTS", "f", "reset"}), ":0");
  // And QUIT, which closes the connection.
  EXPECT_EQ(c.Call({"MULTI"}), "OK");
  EXPECT_EQ(c.Call({"CF.ADD", "f", "quit"}), "QUEUED");
  EXPECT_EQ(c.Call({"QUIT"}), "OK");
  EXPECT_EQ(c.Read(), "<closed>");
  RespClient d(port());
  EXPECT_EQ(d.Call({"CF.EXISTS", "f", "quit"}), ":0");
}

TEST_F(RedisTransactions, ExecAnswersInResp3WithEachReplyInItsOwnType) {
  RespClient c(port());
  ASSERT_EQ(c.Call({"HELLO", "3"}).substr(0, 8), "[$server");
  EXPECT_EQ(c.Call({"MULTI"}), "OK");
  EXPECT_EQ(c.Call({"CF.ADD", "f", "a"}), "QUEUED");
  EXPECT_EQ(c.Call({"CF.DEL", "nofilter", "a"}), "QUEUED");
  EXPECT_EQ(c.Call({"CF.INFO", "f"}), "QUEUED");
  EXPECT_EQ(c.Call({"MEMORY", "USAGE", "nofilter"}), "QUEUED");
  // An array of a boolean, an error, a map (with doubles) and a null.
  c.Send({"EXEC"});
  EXPECT_EQ(c.RawLine(), "*4");
  EXPECT_EQ(c.RawLine(), "#t");
  EXPECT_EQ(c.RawLine(), "-Not found");
  EXPECT_EQ(c.RawLine(), "%17");
  std::string info;
  for (int i = 0; i < 34; ++i) absl::StrAppend(&info, c.Read(), ",");
  EXPECT_NE(info.find("Error rate,,0.002"), std::string::npos) << info;
  EXPECT_EQ(c.RawLine(), "_");
  EXPECT_EQ(c.Call({"PING"}), "PONG");
}

// Issue 33: the writes of an EXEC are applied one after another (sharing
// the log's fdatasyncs) and EXEC answers once every one is durable.
TEST_F(RedisPipelineTest, ExecOfWritesSharesTheLogsFdatasyncsAndAnswersOnceAllAreDurable) {
  RespClient c(port());
  ASSERT_EQ(c.Call({"CF.RESERVE", "a", "100000"}), "OK");
  ASSERT_EQ(c.Call({"CF.RESERVE", "b", "100000"}), "OK");
  ASSERT_EQ(c.Call({"MULTI"}), "OK");
  std::string expected = "[";
  for (int i = 0; i < 20; ++i) {
    // Alternating filters: 20 writes of their own, none merged.
    ASSERT_EQ(c.Call({"CF.ADD", i % 2 == 0 ? "a" : "b", absl::StrCat("k-", i)}), "QUEUED");
    absl::StrAppend(&expected, i == 0 ? "" : ",", ":1");
  }
  expected += "]";
  const uint64_t before = Syncs();
  const auto start = std::chrono::steady_clock::now();
  EXPECT_EQ(c.Call({"EXEC"}), expected);
  const auto took = std::chrono::steady_clock::now() - start;
  // Each fdatasync takes 50 ms: at least one ran before EXEC answered, and
  // 20 writes one after another would have taken 20 (1 s).
  EXPECT_GE(took, std::chrono::milliseconds(50));
  EXPECT_GE(Syncs() - before, 1u);
  EXPECT_LE(Syncs() - before, 6u);
}

// The transactions (begin, end) of the write-ahead log in `dir`, and how
// many shard writes lie inside one.
std::vector<std::pair<uint64_t, uint64_t>> LogTransactions(const std::string& dir,
                                                           size_t* writes_inside) {
  std::vector<std::pair<uint64_t, uint64_t>> transactions;
  absl::StatusOr<server::WalScan> scan =
      server::ScanWal(PosixEnv(), dir, [&](const server::WalRecord& r) {
        if (r.type == server::WalRecordType::kTxnBegin) transactions.emplace_back(r.lsn, 0);
        if (r.type == server::WalRecordType::kTxnEnd) {
          EXPECT_FALSE(transactions.empty());
          if (!transactions.empty()) {
            EXPECT_EQ(transactions.back().first, r.filter_id);
            transactions.back().second = r.lsn;
          }
        }
        if (r.type == server::WalRecordType::kInsert || r.type == server::WalRecordType::kDelete) {
          *writes_inside += !transactions.empty() && transactions.back().second == 0;
        }
        return absl::OkStatus();
      });
  EXPECT_TRUE(scan.ok()) << scan.status();
  return transactions;
}

// Issue 33: an EXEC's writes of items are one transaction of the
// write-ahead log (all or none across a crash: tests/e2e/redis_crash_test.cc),
// ended early by a command that changes keys. More writes than the
// connection's pipelining limit (32 replies pending) run on: their replies
// wait for the transaction's end, which comes after the last of them.
TEST_F(RedisPipelineTest, ExecWritesAreOneLogTransactionWhichACommandChangingKeysEnds) {
  RespClient c(port());
  ASSERT_EQ(c.Call({"CF.RESERVE", "a", "100000"}), "OK");
  ASSERT_EQ(c.Call({"CF.RESERVE", "b", "100000"}), "OK");
  Pipeline p;
  p.Add({"MULTI"}, "OK");
  std::string expected = "[";
  auto queue = [&](std::vector<std::string> command, const std::string& reply) {
    p.Add(std::move(command), "QUEUED");
    absl::StrAppend(&expected, expected.size() == 1 ? "" : ",", reply);
  };
  for (int i = 0; i < 100; ++i) {
    // Alternating filters: 100 writes of their own, none merged.
    queue({"CF.ADD", i % 2 == 0 ? "a" : "b", absl::StrCat("k-", i)}, ":1");
  }
  queue({"CF.EXISTS", "a", "k-0"}, ":1");    // A read: the transaction goes on.
  queue({"CF.RESERVE", "c", "1000"}, "OK");  // Ends it.
  queue({"CF.ADD", "c", "x"}, ":1");         // Begins the second,
  queue({"CF.INSERT", "a", "ITEMS", "y"}, "[:1]");
  queue({"DEL", "b"}, ":1");            // which this ends.
  queue({"CF.DEL", "a", "y"}, ":1");    // The third, ended by EXEC's end.
  queue({"CF.ADD", "new", "z"}, ":1");  // Creates its filter: not in one.
  expected += "]";
  p.Add({"EXEC"}, expected);
  ASSERT_NO_FATAL_FAILURE(p.SendAndCheck(c));
  EXPECT_EQ(c.Call({"CF.EXISTS", "c", "x"}), ":1");

  // The log: three transactions, each begun and ended, around the writes.
  size_t writes_inside = 0;
  const std::vector<std::pair<uint64_t, uint64_t>> transactions =
      LogTransactions(dir_.path() + "/wal", &writes_inside);
  ASSERT_EQ(transactions.size(), 3u);
  for (const auto& [begin, end] : transactions) EXPECT_GT(end, begin);
  // 100 + 2 + 1 writes inside (each write a record: one key, one shard).
  EXPECT_EQ(writes_inside, 103u);
}

// Reads between an EXEC's writes whose replies pass the 1 MiB a connection
// may have unsent do not split its transaction: the replies wait behind
// the first write's, and pausing for them would end it.
TEST_F(RedisPipelineTest, AnExecsLargeRepliesDoNotSplitItsLogTransaction) {
  RespClient c(port());
  ASSERT_EQ(c.Call({"CF.RESERVE", "a", "100000"}), "OK");
  std::vector<std::string> lookup = {"CF.MEXISTS", "a"};
  for (int i = 0; i < 1000; ++i) lookup.push_back(absl::StrCat("absent-", i));
  Pipeline p;
  p.Add({"MULTI"}, "OK");
  p.Add({"CF.ADD", "a", "first"}, "QUEUED");
  for (int i = 0; i < 280; ++i) p.Add(lookup, "QUEUED");  // 1.12 MB of replies
  p.Add({"CF.ADD", "a", "last"}, "QUEUED");
  c.SendRaw(p.bytes + RespClient::Encode({"EXEC"}));
  for (const std::string& e : p.expected) ASSERT_EQ(c.Read(), e);
  const std::string exec = c.Read();
  EXPECT_TRUE(absl::StartsWith(exec, "[:1,[:0,")) << exec.substr(0, 40);
  EXPECT_TRUE(absl::EndsWith(exec, ",:1]")) << exec.substr(exec.size() - 40);
  size_t writes_inside = 0;
  const std::vector<std::pair<uint64_t, uint64_t>> transactions =
      LogTransactions(dir_.path() + "/wal", &writes_inside);
  ASSERT_EQ(transactions.size(), 1u);
  EXPECT_EQ(writes_inside, 2u);
}

TEST_F(RedisTransactions, QueuedCommandsAreCountedInTheConnectionsMemoryAndCapped) {
  RespClient c(port());
  RespClient watcher(port());
  const int64_t before = std::stoll(InfoField(watcher, "mem_clients_normal"));
  ASSERT_EQ(c.Call({"MULTI"}), "OK");
  const std::string big(1 << 20, 'x');
  for (int i = 0; i < 8; ++i) ASSERT_EQ(c.Call({"ECHO", big}), "QUEUED");
  const int64_t holding = std::stoll(InfoField(watcher, "mem_clients_normal"));
  EXPECT_GE(holding - before, int64_t{8} << 20);
  ASSERT_EQ(c.Call({"DISCARD"}), "OK");
  const int64_t after = std::stoll(InfoField(watcher, "mem_clients_normal"));
  EXPECT_LT(after - before, int64_t{4} << 20);
  // The byte cap (16 MiB): the 16th MiB does not fit beside the copies'
  // overhead; the command is refused and EXEC aborts.
  ASSERT_EQ(c.Call({"MULTI"}), "OK");
  for (int i = 0; i < 15; ++i) ASSERT_EQ(c.Call({"ECHO", big}), "QUEUED");
  const std::string refused = c.Call({"ECHO", big});
  EXPECT_THAT(refused, ::testing::StartsWith("-ERR MULTI queue limit: a transaction may queue at "
                                             "most 10000 commands of 16777216 bytes together"));
  EXPECT_NE(refused.find("EXEC will abort"), std::string::npos) << refused;
  EXPECT_EQ(c.Call({"PING"}), "QUEUED");
  EXPECT_EQ(c.Call({"EXEC"}), "-EXECABORT Transaction discarded because of previous errors.");
  // The count cap: 10,000 commands, the 10,001st refused.
  std::string pipeline = RespClient::Encode({"MULTI"});
  for (int i = 0; i < 10'001; ++i) pipeline += RespClient::Encode({"PING"});
  pipeline += RespClient::Encode({"EXEC"});
  c.SendRaw(pipeline);
  ASSERT_EQ(c.Read(), "OK");
  for (int i = 0; i < 10'000; ++i) ASSERT_EQ(c.Read(), "QUEUED") << i;
  EXPECT_EQ(c.Read().substr(0, 62),
            "-ERR MULTI queue limit: a transaction may queue at most 10000 ");
  EXPECT_EQ(c.Read(), "-EXECABORT Transaction discarded because of previous errors.");
  EXPECT_EQ(c.Call({"PING"}), "PONG");
}

TEST_F(RedisTransactions, AuthenticationAndGrantsAreCheckedAtQueueTime) {
  const std::string path = dir_.path() + "/access";
  {
    std::ofstream out(path);
    out << "token root sha256:" << Hex(server::Sha256("tok-root")) << " admin:*\n";
    out << "token writer sha256:" << Hex(server::Sha256("tok-writer"))
        << " write:billing.* read:*\n";
  }
  server::ServerConfig config = Config();
  config.auth_tokens = path;
  StartServer(config);
  RespClient c(port());
  EXPECT_EQ(c.Call({"MULTI"}), "-NOAUTH Authentication required.");
  ASSERT_EQ(c.Call({"AUTH", "tok-root"}), "OK");
  ASSERT_EQ(c.Call({"CF.RESERVE", "billing.x", "1000"}), "OK");
  ASSERT_EQ(c.Call({"CF.RESERVE", "cart.y", "1000"}), "OK");
  RespClient w(port());
  ASSERT_EQ(w.Call({"AUTH", "tok-writer"}), "OK");
  EXPECT_EQ(w.Call({"MULTI"}), "OK");
  EXPECT_EQ(w.Call({"CF.ADD", "billing.x", "k"}), "QUEUED");
  EXPECT_EQ(w.Call({"CF.EXISTS", "cart.y", "k"}), "QUEUED");
  const std::string refused = w.Call({"CF.ADD", "cart.y", "k"});
  EXPECT_EQ(refused.substr(0, 48), "-NOPERM \"writer\" may not run CF.ADD on filter 'c") << refused;
  EXPECT_EQ(w.Call({"DEL", "billing.x"}).substr(0, 8), "-NOPERM ");
  EXPECT_EQ(w.Call({"EXEC"}), "-EXECABORT Transaction discarded because of previous errors.");
  EXPECT_EQ(c.Call({"CF.EXISTS", "billing.x", "k"}), ":0");
  EXPECT_EQ(w.Call({"MULTI"}), "OK");
  EXPECT_EQ(w.Call({"CF.ADD", "billing.x", "k"}), "QUEUED");
  EXPECT_EQ(w.Call({"EXEC"}), "[:1]");
}

// ---- UNLINK, FLUSHALL, FLUSHDB, MEMORY, MODULE ----

TEST_F(RedisPortTest, UnlinkAndFlushDropFiltersDurably) {
  RespClient c(port());
  for (const char* f : {"a", "b", "c", "d"}) ASSERT_EQ(c.Call({"CF.ADD", f, "k"}), ":1");
  EXPECT_EQ(c.Call({"UNLINK", "a", "nope", "bad/name", "b"}), ":2");
  EXPECT_EQ(c.Call({"KEYS", "*"}), "[$c,$d]");
  EXPECT_EQ(c.Call({"UNLINK"}), "-ERR wrong number of arguments for 'unlink' command");
  EXPECT_EQ(c.Call({"FLUSHALL", "NOW"}), "-ERR syntax error");
  EXPECT_EQ(c.Call({"FLUSHDB", "ASYNC", "SYNC"}), "-ERR syntax error");
  EXPECT_EQ(c.Call({"DBSIZE"}), ":2");
  EXPECT_EQ(c.Call({"FLUSHALL"}), "OK");
  EXPECT_EQ(c.Call({"DBSIZE"}), ":0");
  EXPECT_EQ(c.Call({"FLUSHDB"}), "OK");
  for (const char* f : {"e", "f"}) ASSERT_EQ(c.Call({"CF.ADD", f, "k"}), ":1");
  EXPECT_EQ(c.Call({"FLUSHDB", "sync"}), "OK");
  ASSERT_EQ(c.Call({"CF.ADD", "g", "k"}), ":1");
  EXPECT_EQ(c.Call({"FLUSHALL", "ASYNC"}), "OK");
  EXPECT_EQ(c.Call({"DBSIZE"}), ":0");
  // Durable: after a restart nothing comes back.
  ASSERT_EQ(c.Call({"CF.ADD", "kept", "k"}), ":1");
  StartServer(Config());
  RespClient d(port());
  EXPECT_EQ(d.Call({"KEYS", "*"}), "[$kept]");
}

TEST_F(RedisPortTest, FlushNeedsTheAdminGrantOnEveryFilter) {
  const std::string path = dir_.path() + "/access";
  {
    std::ofstream out(path);
    out << "token root sha256:" << Hex(server::Sha256("tok-root")) << " admin:*\n";
    out << "token ops sha256:" << Hex(server::Sha256("tok-ops")) << " admin:billing.*\n";
  }
  server::ServerConfig config = Config();
  config.auth_tokens = path;
  StartServer(config);
  RespClient root(port());
  ASSERT_EQ(root.Call({"AUTH", "tok-root"}), "OK");
  for (const char* f : {"billing.a", "billing.b", "cart.c"}) {
    ASSERT_EQ(root.Call({"CF.ADD", f, "k"}), ":1");
  }
  RespClient ops(port());
  ASSERT_EQ(ops.Call({"AUTH", "tok-ops"}), "OK");
  const std::string refused = ops.Call({"FLUSHALL"});
  EXPECT_THAT(refused, ::testing::StartsWith(
                           "-NOPERM \"ops\" may not run FLUSHALL: it drops every filter, which "
                           "needs the admin grant on each, and 1 of the 3 filters are not among "
                           "its admin grants (its grants: admin:billing.*); nothing was dropped"));
  EXPECT_EQ(refused.find("cart"), std::string::npos) << "names no filter: " << refused;
  EXPECT_EQ(ops.Call({"UNLINK", "cart.c"}).substr(0, 8), "-NOPERM ");
  EXPECT_EQ(root.Call({"DBSIZE"}), ":3") << "nothing dropped";
  EXPECT_EQ(ops.Call({"UNLINK", "billing.a"}), ":1");
  EXPECT_EQ(root.Call({"FLUSHDB"}), "OK");
  EXPECT_EQ(root.Call({"DBSIZE"}), ":0");
  const std::string metrics = server_->metrics().Render();
  EXPECT_NE(metrics.find(R"(method="FLUSHALL",reason="permission_denied"} 1)"), std::string::npos)
      << metrics;
}

TEST_F(RedisPortTest, MemoryUsageIsTheFiltersSizeAndModuleListShowsBloom) {
  RespClient c(port());
  ASSERT_EQ(c.Call({"CF.RESERVE", "f", "100000"}), "OK");
  const std::string info = c.Call({"CF.INFO", "f"});
  const std::string size = info.substr(7, info.find(',', 7) - 7);
  EXPECT_EQ(c.Call({"MEMORY", "USAGE", "f"}), ":" + size);
  EXPECT_GT(std::stoll(size), 100000 / 8);
  EXPECT_EQ(c.Call({"memory", "usage", "f", "SAMPLES", "5"}), ":" + size);
  EXPECT_EQ(c.Call({"MEMORY", "USAGE", "nope"}), "nil");
  EXPECT_EQ(c.Call({"MEMORY", "USAGE", "bad/name"}), "nil");
  EXPECT_EQ(c.Call({"MEMORY", "USAGE", "f", "SAMPLES", "x"}),
            "-ERR value is not an integer or out of range");
  EXPECT_EQ(c.Call({"MEMORY", "USAGE", "f", "SAMPLES"}), "-ERR syntax error");
  EXPECT_EQ(c.Call({"MEMORY", "USAGE"}),
            "-ERR wrong number of arguments for 'memory|usage' command");
  EXPECT_EQ(c.Call({"MEMORY", "STATS"}).substr(0, 68),
            "-ERR unknown subcommand 'STATS': cuckood serves MEMORY USAGE key [SA");
  EXPECT_EQ(c.Call({"MODULE", "LIST"}), "[[$name,$bf,$ver,:20612,$path,$,$args,[]]]");
  EXPECT_EQ(c.Call({"MODULE", "LOAD", "/x.so"}).substr(0, 46),
            "-ERR cuckood does not load or unload modules (");
  EXPECT_EQ(c.Call({"MODULE", "FROB"}).substr(0, 60),
            "-ERR unknown subcommand or wrong number of arguments for 'FR");
  // RESP2: each module a flat array of 8; RESP3: a map of 4.
  c.Send({"MODULE", "LIST"});
  EXPECT_EQ(c.RawLine(), "*1");
  EXPECT_EQ(c.RawLine(), "*8");
  EXPECT_EQ(c.Read(), "$name");
  for (int i = 0; i < 7; ++i) c.Read();
  ASSERT_EQ(c.Call({"HELLO", "3"}).substr(0, 8), "[$server");
  c.Send({"MODULE", "LIST"});
  EXPECT_EQ(c.RawLine(), "*1");
  EXPECT_EQ(c.RawLine(), "%4");
  EXPECT_EQ(c.Read(), "$name");
  for (int i = 0; i < 7; ++i) c.Read();
  EXPECT_EQ(c.Call({"PING"}), "PONG");
}

// ---- CLIENT LIST and CLIENT KILL ----

// The fields of CLIENT LIST's line for the client whose id is `id`.
std::map<std::string, std::string> ClientLine(const std::string& list, const std::string& id) {
  std::map<std::string, std::string> fields;
  for (absl::string_view line : absl::StrSplit(list.substr(1), '\n')) {
    if (!absl::StartsWith(line, "id=" + id + " ")) continue;
    for (absl::string_view kv : absl::StrSplit(line, ' ')) {
      const size_t eq = kv.find('=');
      fields[std::string(kv.substr(0, eq))] = std::string(kv.substr(eq + 1));
    }
  }
  return fields;
}

TEST_F(RedisPortTest, ClientListShowsEveryConnectionInRedisFormat) {
  RespClient a(port()), b(port());
  const std::string a_id = a.Call({"CLIENT", "ID"}).substr(1);
  const std::string b_id = b.Call({"CLIENT", "ID"}).substr(1);
  ASSERT_EQ(b.Call({"CLIENT", "SETNAME", "worker-2"}), "OK");
  ASSERT_EQ(b.Call({"CLIENT", "SETINFO", "LIB-NAME", "redis-py"}), "OK");
  ASSERT_EQ(b.Call({"MULTI"}), "OK");
  ASSERT_EQ(b.Call({"PING"}), "QUEUED");
  ASSERT_EQ(b.Call({"CF.EXISTS", "f", "x"}), "QUEUED");
  const std::string list = a.Call({"CLIENT", "LIST"});
  ASSERT_EQ(list.substr(0, 4), "$id=") << list;
  std::map<std::string, std::string> fb = ClientLine(list, b_id);
  EXPECT_EQ(fb["name"], "worker-2");
  EXPECT_EQ(fb["flags"], "x");
  EXPECT_EQ(fb["multi"], "2");
  EXPECT_EQ(fb["cmd"], "cf.exists");
  EXPECT_EQ(fb["db"], "0");
  EXPECT_EQ(fb["user"], "default");
  EXPECT_EQ(fb["resp"], "2");
  EXPECT_EQ(fb["lib-name"], "redis-py");
  EXPECT_EQ(fb["laddr"], absl::StrCat("127.0.0.1:", port()));
  EXPECT_EQ(fb["addr"].substr(0, 10), "127.0.0.1:");
  EXPECT_GT(std::stoll(fb["tot-mem"]), 0);
  std::map<std::string, std::string> fa = ClientLine(list, a_id);
  EXPECT_EQ(fa["flags"], "N");
  EXPECT_EQ(fa["multi"], "-1");
  EXPECT_EQ(fa["cmd"], "client");
  // Filters.
  const std::string only_b = a.Call({"CLIENT", "LIST", "ID", b_id});
  EXPECT_EQ(std::count(only_b.begin(), only_b.end(), '\n'), 1) << only_b;
  EXPECT_EQ(only_b.substr(0, 4 + b_id.size()), "$id=" + b_id);
  EXPECT_EQ(a.Call({"CLIENT", "LIST", "TYPE", "pubsub"}), "$");
  EXPECT_EQ(a.Call({"CLIENT", "LIST", "TYPE", "nope"}), "-ERR Unknown client type 'nope'");
  EXPECT_EQ(a.Call({"CLIENT", "LIST", "ID", "x"}), "-ERR Invalid client ID");
  EXPECT_EQ(a.Call({"CLIENT", "LIST", "FROB"}), "-ERR syntax error");
  EXPECT_EQ(b.Call({"EXEC"}), "[PONG,:0]");
}

TEST_F(RedisPortTest, ClientKillClosesTheConnectionsItNames) {
  RespClient a(port()), b(port()), c(port()), d(port());
  const std::string b_id = b.Call({"CLIENT", "ID"}).substr(1);
  ASSERT_EQ(c.Call({"PING"}), "PONG");
  ASSERT_EQ(d.Call({"PING"}), "PONG");
  const std::string list = a.Call({"CLIENT", "LIST"});
  const std::string c_addr = ClientLine(list, c.Call({"CLIENT", "ID"}).substr(1))["addr"];
  // The new form answers how many; the old one OK or an error.
  EXPECT_EQ(a.Call({"CLIENT", "KILL", "ID", b_id}), ":1");
  EXPECT_EQ(b.Read(), "<closed>");
  EXPECT_EQ(a.Call({"CLIENT", "KILL", "ID", b_id}), ":0");
  EXPECT_EQ(a.Call({"CLIENT", "KILL", c_addr}), "OK");
  EXPECT_EQ(c.Read(), "<closed>");
  EXPECT_EQ(a.Call({"CLIENT", "KILL", c_addr}), "-ERR No such client");
  EXPECT_EQ(a.Call({"CLIENT", "KILL", "ID", "0"}), "-ERR client-id should be greater than 0");
  EXPECT_EQ(a.Call({"CLIENT", "KILL", "TYPE", "nope"}), "-ERR Unknown client type 'nope'");
  EXPECT_EQ(a.Call({"CLIENT", "KILL", "TYPE", "master"}), ":0");
  EXPECT_EQ(a.Call({"CLIENT", "KILL", "SKIPME", "maybe"}), "-ERR syntax error");
  EXPECT_EQ(a.Call({"CLIENT", "KILL", "ID", "1", "BOGUS", "x"}), "-ERR syntax error");
  EXPECT_EQ(a.Call({"CLIENT", "KILL"}), "-ERR syntax error");
  // Every normal connection but the caller's (SKIPME yes by default).
  EXPECT_EQ(
      a.Call({"CLIENT", "KILL", "TYPE", "normal", "LADDR", absl::StrCat("127.0.0.1:", port())}),
      ":1");
  EXPECT_EQ(d.Read(), "<closed>");
  EXPECT_EQ(a.Call({"PING"}), "PONG");
  // SKIPME no: the caller too, after its reply.
  EXPECT_EQ(a.Call({"CLIENT", "KILL", "USER", "default", "SKIPME", "no"}), ":1");
  EXPECT_EQ(a.Read(), "<closed>");
  const std::string metrics = server_->metrics().Render();
  EXPECT_NE(metrics.find(R"(cuckood_redis_connections_closed_total{reason="killed"} 3)"),
            std::string::npos)
      << metrics;
}

TEST_F(RedisPortTest, AClientKillingItselfInAnExecGetsTheWholeArrayThenCloses) {
  RespClient c(port());
  const std::string id = c.Call({"CLIENT", "ID"}).substr(1);
  ASSERT_EQ(c.Call({"MULTI"}), "OK");
  ASSERT_EQ(c.Call({"CLIENT", "KILL", "ID", id, "SKIPME", "no"}), "QUEUED");
  ASSERT_EQ(c.Call({"CF.ADD", "f", "after-kill"}), "QUEUED");
  ASSERT_EQ(c.Call({"PING"}), "QUEUED");
  c.Send({"EXEC"});
  c.Send({"PING"});  // never runs
  EXPECT_EQ(c.Read(), "[:1,:1,PONG]");
  EXPECT_EQ(c.Read(), "<closed>");
  RespClient d(port());
  EXPECT_EQ(d.Call({"CF.EXISTS", "f", "after-kill"}), ":1");
}

TEST_F(RedisPortTest, ClientListAndKillNeedTheAdminGrantOnEveryFilter) {
  const std::string path = dir_.path() + "/access";
  {
    std::ofstream out(path);
    out << "token root sha256:" << Hex(server::Sha256("tok-root")) << " admin:*\n";
    out << "token ops sha256:" << Hex(server::Sha256("tok-ops")) << " admin:billing.*\n";
  }
  server::ServerConfig config = Config();
  config.auth_tokens = path;
  StartServer(config);
  RespClient root(port()), ops(port());
  ASSERT_EQ(root.Call({"AUTH", "tok-root"}), "OK");
  ASSERT_EQ(ops.Call({"AUTH", "tok-ops"}), "OK");
  const std::string ops_id = ops.Call({"CLIENT", "ID"}).substr(1);
  EXPECT_EQ(ops.Call({"CLIENT", "LIST"}).substr(0, 50),
            "-NOPERM \"ops\" may not run CLIENT LIST: it shows or");
  EXPECT_EQ(ops.Call({"CLIENT", "KILL", "ID", ops_id}).substr(0, 33),
            "-NOPERM \"ops\" may not run CLIENT ");
  EXPECT_EQ(ops.Call({"CLIENT", "ID"}), ":" + ops_id) << "the rest of CLIENT needs no grant";
  const std::string list = root.Call({"CLIENT", "LIST"});
  EXPECT_EQ(ClientLine(list, ops_id)["user"], "ops");
  EXPECT_EQ(root.Call({"CLIENT", "KILL", "USER", "ops"}), ":1");
  EXPECT_EQ(ops.Read(), "<closed>");
}

}  // namespace
}  // namespace cuckoo::testing
