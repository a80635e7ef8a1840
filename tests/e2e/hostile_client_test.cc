// A hostile and careless client against a real cuckood: raw bytes through
// gRPC's generic calls from Python (tests/e2e/hostile_client.py), while the
// server's RSS is watched and its health checked. The issue this answers:
// anyone who could reach the port could get the pod OOM-killed with two
// small requests. Whatever the client sends within the documented limits,
// the process stays under --memory-budget plus the stated overhead
// (server/config/config.h StatedMemoryOverhead) and keeps answering its health
// check.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <iostream>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "server/config/config.h"
#include "tests/e2e/process.h"
#include "tests/util/sanitizers.h"

namespace cuckoo::testing {
namespace {

using ::testing::HasSubstr;

TEST(HostileClientTest, NoAttackTakesTheServerOverItsBudgetPlusTheStatedOverheadOrDown) {
  server::ServerConfig config;
  config.memory_budget_bytes = uint64_t{64} << 20;
  config.transport_memory_bytes = uint64_t{64} << 20;
  config.snapshot_buffer_bytes = uint64_t{16} << 20;
  double bound_mib =
      static_cast<double>(config.memory_budget_bytes + server::StatedMemoryOverhead(config)) /
      (1 << 20);
  std::vector<std::string> argv = {"/usr/bin/env", std::string("PYTHONPATH=") + PYTHON_PACKAGE_DIR,
                                   "PYTHONDONTWRITEBYTECODE=1", "/usr/bin/python3",
                                   std::string(SOURCE_DIR) + "/tests/e2e/hostile_client.py"};
#if defined(CUCKOO_ASAN) || defined(CUCKOO_TSAN)
  // A sanitizer's shadow memory and quarantine are not cuckood's: check the
  // answers and the health check, not the bound, and allow for the speed.
  bound_mib = 1e9;
  argv.push_back("--slow");
#endif
  TempDir dir;
  Cuckood server(dir.path(),
                 {"--memory-budget=64MiB", "--transport-memory=64MiB", "--snapshot-buffer=16MiB"});
  ASSERT_TRUE(server.ready()) << server.process().out() << server.process().err();
  EXPECT_THAT(server.process().out(),
              HasSubstr("memory at most the budget plus " +
                        cuckoo::FormatByteSize(server::StatedMemoryOverhead(config))));
  argv.insert(argv.end(),
              {"--target", server.address(), "--pid", std::to_string(server.process().pid()),
               "--bound-mib", absl::StrFormat("%.1f", bound_mib)});
  Result r = RunProcess(argv);
  EXPECT_EQ(r.code, 0) << r.out << r.err;
  std::cout << r.out;  // The measurements, for the log.
  for (const char* attack :
       {"ok fill_the_budget", "ok empty_keys INVALID_ARGUMENT", "ok over_the_batch_limit",
        "ok compressed UNIMPLEMENTED", "ok malformed", "ok concurrent_large_requests",
        "ok idle_connections", "ok kick_chains", "ok snapshot_and_drop_floods",
        "ok create_and_drop_churn", "health_failures 0\n", "12 attacks passed"}) {
    EXPECT_THAT(r.out, HasSubstr(attack)) << r.out << r.err;
  }
  // The server is still up and well after all of it.
  server.process().Signal(SIGTERM);
  EXPECT_EQ(server.process().Wait(), 0) << server.process().out();
}

}  // namespace
}  // namespace cuckoo::testing
