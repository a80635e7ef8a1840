// node-redis (npm's `redis` 6 in RESP2 and RESP3, and `redis` 4), clients
// nobody here wrote, against the Redis port of a real cuckood: runs
// tests/e2e/node_redis/check.mjs with node. The packages are the ones
// tests/e2e/node_redis/package-lock.json pins, installed by
// tests/e2e/node_redis/install.sh (scripts/test.sh runs it).
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <string>
#include <vector>

#include "tests/e2e/redis_test_util.h"
#include "tests/util/test_pki.h"

namespace cuckoo::testing {
namespace {

using ::testing::HasSubstr;

const std::string kCheckDir = std::string(SOURCE_DIR) + "/tests/e2e/node_redis";

// What check.mjs runs, each once per client.
constexpr const char* kChecks[] = {
    // What RedisBloom client code does every day.
    "connection", "reserve_add_exists", "insert_options", "binary_items", "info",
    "pipelined_thousands", "keyspace", "scandump_loadchunk_backup",
    // Issue 33: transactions, repeated items, RedisBloom's errors and
    // replies, the commands clients detect RedisBloom with.
    "multi_exec", "multi_aborts_whole", "repeated_item_grows", "redisbloom_errors",
    "scandump_redisbloom_replies", "module_list", "unlink_memory_usage", "names_are_redis_keys"};
constexpr const char* kClients[] = {"redis 6, RESP2", "redis 6, RESP3", "redis 4, RESP2"};

bool Installed() {
  struct stat st;
  return ::stat((kCheckDir + "/node_modules/.package-lock.json.installed").c_str(), &st) == 0;
}

// node check.mjs against 127.0.0.1:port, only `checks`; over TLS checking
// the server against `tls_ca` when it is given.
Result RunCheck(int port, const std::vector<std::string>& checks, const std::string& tls_ca = "") {
  std::string only;
  for (const std::string& c : checks) only += (only.empty() ? "" : ",") + c;
  std::vector<std::string> argv = {
      "/usr/bin/env", "node", kCheckDir + "/check.mjs", "--port", std::to_string(port),
      "--only",       only};
  if (!tls_ca.empty()) argv.insert(argv.end(), {"--tls-ca", tls_ca});
  return RunProcess(argv);
}

TEST(NodeRedisTest, RedisBloomCommandsOfNodeRedis6And4InRESP2AndRESP3) {
  ASSERT_TRUE(Installed())
      << "node-redis is not installed: run bash tests/e2e/node_redis/install.sh "
         "(scripts/test.sh does)";
  TempDir dir;
  RedisCuckood server(dir.path(), {"--redis-error-rate=1e-7"});
  ASSERT_TRUE(server.ready()) << server.Log();
  const std::vector<std::string> checks(std::begin(kChecks), std::end(kChecks));
  Result r = RunCheck(server.redis_port(), checks);
  for (const char* client : kClients) {
    for (const std::string& check : checks) {
      EXPECT_THAT(r.out, HasSubstr("ok " + check + " (" + client + ")\n")) << r.out << r.err;
    }
  }
  EXPECT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_THAT(r.out,
              HasSubstr(std::to_string(checks.size() * std::size(kClients)) + " checks passed"));
}

// The same clients over TLS (their `socket: {tls: true, ca}` options), the
// server's certificate checked against the CA as an application would.
TEST(NodeRedisTest, NodeRedisOverTls) {
  ASSERT_TRUE(Installed())
      << "node-redis is not installed: run bash tests/e2e/node_redis/install.sh";
  TempDir dir;
  const Pem ca = MakeCa("node-redis TLS CA");
  const Pem cert = IssueCert(
      ca, {.common_name = "localhost", .dns_sans = {"localhost"}, .ip_sans = {"127.0.0.1"}});
  WritePem(dir.path() + "/ca.pem", ca.cert);
  WritePem(dir.path() + "/tls.crt", cert.cert);
  WritePem(dir.path() + "/tls.key", cert.key);
  TempDir data;
  RedisCuckood server(data.path(), {"--tls-cert=" + dir.path() + "/tls.crt",
                                    "--tls-key=" + dir.path() + "/tls.key"});
  ASSERT_TRUE(server.ready()) << server.Log();
  const std::vector<std::string> checks = {"connection", "reserve_add_exists", "binary_items",
                                           "pipelined_thousands", "scandump_loadchunk_backup"};
  Result r = RunCheck(server.redis_port(), checks, dir.path() + "/ca.pem");
  for (const char* client : kClients) {
    for (const std::string& check : checks) {
      EXPECT_THAT(r.out, HasSubstr("ok " + check + " (" + client + ")\n")) << r.out << r.err;
    }
  }
  EXPECT_EQ(r.code, 0) << r.out << r.err;
}

}  // namespace
}  // namespace cuckoo::testing
