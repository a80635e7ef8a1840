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

namespace cuckoo::testing {
namespace {

using ::testing::HasSubstr;

const std::string kCheckDir = std::string(SOURCE_DIR) + "/tests/e2e/node_redis";

// What check.mjs runs, each once per client.
constexpr const char* kChecks[] = {
    "connection", "reserve_add_exists",  "insert_options", "binary_items",
    "info",       "pipelined_thousands", "keyspace",       "scandump_loadchunk_backup"};
constexpr const char* kClients[] = {"redis 6, RESP2", "redis 6, RESP3", "redis 4, RESP2"};

bool Installed() {
  struct stat st;
  return ::stat((kCheckDir + "/node_modules/.package-lock.json.installed").c_str(), &st) == 0;
}

Result RunCheck(int port, const std::vector<std::string>& checks) {
  std::string only;
  for (const std::string& c : checks) only += (only.empty() ? "" : ",") + c;
  return RunProcess({"/usr/bin/env", "node", kCheckDir + "/check.mjs", "--port",
                     std::to_string(port), "--only", only});
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

}  // namespace
}  // namespace cuckoo::testing
