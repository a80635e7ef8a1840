// The Python package cuckoo_client as users install it, against a real
// cuckood: the wheel (target cuckoo_python_wheel) installed by pip into the
// virtual environment ${CMAKE_BINARY_DIR}/python-venv over Debian's
// python3-grpcio (tests/e2e/CMakeLists.txt, target cuckoo_python_venv). Runs
// tests/e2e/python_client_check.py and client/python/example.py with that
// venv's python and no PYTHONPATH. (The security, hostile-client and Unix
// socket tests use the build tree's package on PYTHONPATH, the developer's way.)
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tests/e2e/process.h"

namespace cuckoo::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

const std::string kVenvPython = std::string(PYTHON_VENV_DIR) + "/bin/python";

// Runs a Python script with the venv's python. Through env(1), without a
// PYTHONPATH this process may have, so cuckoo_client is the installed one.
Result RunPython(const std::string& script, const std::vector<std::string>& args) {
  std::vector<std::string> argv = {"/usr/bin/env", "-u", "PYTHONPATH", "PYTHONDONTWRITEBYTECODE=1"};
  argv.push_back(kVenvPython);
  argv.push_back(script);
  argv.insert(argv.end(), args.begin(), args.end());
  return RunProcess(argv);
}

const std::string kCheckScript = std::string(SOURCE_DIR) + "/tests/e2e/python_client_check.py";

TEST(PythonClientTest, PackageImportsFromTheInstalledWheel) {
  Result r = RunPython(
      "-c", {"import cuckoo_client, cuckoo_client.grpc.health.v1.health_pb2_grpc as h; "
             "print(cuckoo_client.__file__); print(cuckoo_client.Client.__doc__ != None)"});
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  // The venv's site-packages (lib/pythonX.Y/site-packages), not the build tree.
  EXPECT_THAT(r.out, HasSubstr(std::string(PYTHON_VENV_DIR) + "/lib/python"));
  EXPECT_THAT(r.out, HasSubstr("/site-packages/cuckoo_client/__init__.py\n"));
  EXPECT_THAT(r.out, Not(HasSubstr(std::string(PYTHON_PACKAGE_DIR) + "/cuckoo_client/")));
  EXPECT_THAT(r.out, HasSubstr("True"));
}

TEST(PythonClientTest, ChecksPassAgainstARealServer) {
  TempDir dir;
  Cuckood server(dir.path());
  ASSERT_TRUE(server.ready()) << server.process().out() << server.process().err();
  Result r = RunPython(kCheckScript, {"--target", server.address()});
  EXPECT_EQ(r.code, 0) << r.out << r.err;
  for (const char* check : {"ok package_layout",
                            "ok filter_lifecycle",
                            "ok filter_expiry",
                            "ok semi_sort",
                            "ok insert_lookup_str_and_bytes",
                            "ok if_absent",
                            "ok delete",
                            "ok count",
                            "ok errors",
                            "ok health",
                            "ok snapshot",
                            "ok threads",
                            "ok unreachable_server",
                            "ok request_id_dedup",
                            "ok generated_request_ids",
                            "ok log_positions",
                            "ok read_your_writes",
                            "ok multiple_targets",
                            "ok retry_unavailable",
                            "ok channel_retries"}) {
    EXPECT_THAT(r.out, HasSubstr(std::string(check) + "\n")) << r.out << r.err;
  }
  // Writes whose answers a proxy lost: retried with their request ids.
  EXPECT_THAT(r.out, HasSubstr("ok lost_answers\n")) << r.out << r.err;
  EXPECT_THAT(r.out, HasSubstr("25 checks passed")) << r.out << r.err;
  EXPECT_THAT(r.out, Not(HasSubstr("FAIL")));
}

TEST(PythonClientTest, LargeBatchesAreSplitToTheServerLimitInOrder) {
  TempDir dir;
  Cuckood server(dir.path(), {"--max-batch-keys=1000"});
  ASSERT_TRUE(server.ready()) << server.process().out() << server.process().err();
  Result r = RunPython(kCheckScript, {"--target", server.address(), "--batch"});
  EXPECT_EQ(r.code, 0) << r.out << r.err;
  for (const char* check : {"ok batch_limits", "ok batch_split", "ok batch_client_limits",
                            "ok batch_partial_failure"}) {
    EXPECT_THAT(r.out, HasSubstr(std::string(check) + "\n")) << r.out << r.err;
  }
  EXPECT_THAT(r.out, HasSubstr("4 checks passed")) << r.out << r.err;
}

TEST(PythonClientTest, ChecksFailAgainstTheWrongServer) {
  // The batch checks expect --max-batch-keys=1000: with the default limit
  // they must fail, and say which check did.
  TempDir dir;
  Cuckood server(dir.path());
  ASSERT_TRUE(server.ready()) << server.process().out() << server.process().err();
  Result r = RunPython(kCheckScript, {"--target", server.address(), "--batch"});
  EXPECT_EQ(r.code, 1) << r.out << r.err;
  EXPECT_THAT(r.out, HasSubstr("FAIL batch_limits"));
  EXPECT_THAT(r.out, HasSubstr("checks FAILED"));
}

TEST(PythonClientTest, ExampleRuns) {
  TempDir dir;
  Cuckood server(dir.path());
  ASSERT_TRUE(server.ready()) << server.process().out() << server.process().err();
  Result r = RunPython(std::string(SOURCE_DIR) + "/client/python/example.py",
                       {"--target", server.address()});
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_THAT(r.out, HasSubstr(": SERVING\n"));
  EXPECT_THAT(r.out, HasSubstr("created filter example-users"));
  EXPECT_THAT(r.out, HasSubstr("insert 'alice': INSERTED\n"));
  EXPECT_THAT(r.out, HasSubstr("insert b'\\x00carol': INSERTED\n"));
  EXPECT_THAT(r.out, HasSubstr("insert if absent 'alice': ALREADY_PRESENT\n"));
  EXPECT_THAT(r.out, HasSubstr("lookup 'alice': present\n"));
  EXPECT_THAT(r.out, HasSubstr("count 'alice': 1\n"));
  EXPECT_THAT(r.out, HasSubstr("delete 'bob': DELETED\n"));
  EXPECT_THAT(
      r.out,
      HasSubstr("lookup in a missing filter: NOT_FOUND: filter \"no-such-filter\" not found"));
  EXPECT_THAT(r.out, HasSubstr("dropped example-users: freed "));
  EXPECT_EQ(r.err, "");
}

TEST(PythonClientTest, ExampleReportsAnUnreachableServer) {
  Result r = RunPython(std::string(SOURCE_DIR) + "/client/python/example.py",
                       {"--target", "127.0.0.1:" + std::to_string(FreePort())});
  EXPECT_EQ(r.code, 1) << r.out << r.err;
  EXPECT_THAT(r.err, HasSubstr("error: UNAVAILABLE: "));
}

}  // namespace
}  // namespace cuckoo::testing
