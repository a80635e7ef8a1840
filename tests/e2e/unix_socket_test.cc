// cuckood on a Unix-domain socket (--listen=unix:..., alone or with TCP), as
// a sidecar uses it: cuckooctl, the Python package and cuckoo-bench over the
// socket; kill -9 and a restart on the same path (the stale socket is
// removed); a path a live server holds, a regular file at the path, and a
// path too long for a socket address are refused with the reason.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <chrono>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "tests/e2e/process.h"

namespace cuckoo::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

// cuckood with `listen`, its admin port on a free port, waited for.
std::unique_ptr<Process> StartCuckood(const std::string& listen, const std::string& data_dir,
                                      const std::vector<std::string>& flags = {}) {
  std::vector<std::string> argv = {CUCKOOD_PATH, "--listen=" + listen, "--data-dir=" + data_dir,
                                   "--admin-listen=127.0.0.1:0"};
  argv.insert(argv.end(), flags.begin(), flags.end());
  auto p = std::make_unique<Process>(argv);
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (std::chrono::steady_clock::now() < until &&
         p->out().find("serving on") == std::string::npos &&
         p->Wait(std::chrono::milliseconds(20)) == -1) {
  }
  return p;
}

bool Serving(const Process& p) { return p.out().find("serving on") != std::string::npos; }

Result Ctl(const std::string& target, const std::vector<std::string>& args,
           const std::string& stdin_data = "") {
  std::vector<std::string> argv = {CUCKOOCTL_PATH, "--target=" + target};
  argv.insert(argv.end(), args.begin(), args.end());
  return RunProcess(argv, stdin_data);
}

Result Python(const std::string& code) {
  return RunProcess({"/usr/bin/env", std::string("PYTHONPATH=") + PYTHON_PACKAGE_DIR,
                     "PYTHONDONTWRITEBYTECODE=1", "/usr/bin/python3", "-c", code});
}

mode_t FileType(const std::string& path) {
  struct stat st {};
  if (lstat(path.c_str(), &st) != 0) return 0;
  return st.st_mode & S_IFMT;
}

mode_t Permissions(const std::string& path) {
  struct stat st {};
  if (lstat(path.c_str(), &st) != 0) return 0;
  return st.st_mode & 07777;
}

TEST(UnixSocketTest, ServesCuckooctlPythonAndBenchOverASocketAlone) {
  TempDir dir;
  const std::string path = dir.path() + "/cuckood.sock";
  const std::string target = "unix://" + path;  // unix:///tmp/...: gRPC's URI form.
  auto server = StartCuckood(target, dir.path() + "/data");
  ASSERT_TRUE(Serving(*server)) << server->out() << server->err();
  EXPECT_THAT(server->out(), HasSubstr("serving on " + target + " "));
  EXPECT_EQ(FileType(path), S_IFSOCK);
  EXPECT_EQ(Permissions(path), 0660u);  // --listen-socket-mode's default.
  // Local only: no warning that anyone on the network may write.
  EXPECT_THAT(server->out(), Not(HasSubstr("no --auth-tokens")));

  Result created = Ctl(target, {"create", "users", "--capacity=100000"});
  ASSERT_EQ(created.code, 0) << created.out << created.err;
  Result inserted = Ctl(target, {"insert", "users", "alice", "bob"});
  ASSERT_EQ(inserted.code, 0) << inserted.out << inserted.err;
  // unix:PATH (no slashes) is the same socket.
  Result looked = Ctl("unix:" + path, {"lookup", "users", "alice", "mallory"});
  EXPECT_EQ(looked.code, 1) << looked.out << looked.err;  // One absent: exit 1.
  EXPECT_THAT(looked.out, HasSubstr("present\talice"));
  EXPECT_THAT(looked.out, HasSubstr("absent\tmallory"));

  Result py = Python(
      "from cuckoo_client import Client\n"
      "with Client('" +
      target +
      "') as c:\n"
      "    c.insert('users', ['carol'])\n"
      "    print(c.lookup('users', ['alice', 'carol', 'mallory']))\n");
  EXPECT_EQ(py.code, 0) << py.out << py.err;
  EXPECT_THAT(py.out, HasSubstr("[True, True, False]"));

  // Two connections over the socket, pinned to CPU 0 (always there).
  Result bench = RunProcess({CUCKOO_BENCH_PATH, "--target=" + target, "--filter=b", "--create=100k",
                             "--populate", "--keyspace=2k", "--batch=1", "--depth=1",
                             "--connections=2", "--duration=500ms", "--warmup=0", "--pin-cpu=0",
                             "--json=" + dir.path() + "/bench.json"});
  EXPECT_EQ(bench.code, 0) << bench.out << bench.err;
  EXPECT_THAT(bench.out, HasSubstr("result: OK"));
  EXPECT_THAT(bench.out, HasSubstr("pinned to CPU 0"));
  EXPECT_THAT(ReadFile(dir.path() + "/bench.json"), HasSubstr("\"pin_cpus\": \"0\""));

  // A clean shutdown removes the socket.
  server->Signal(SIGTERM);
  EXPECT_EQ(server->Wait(), 0) << server->out();
  EXPECT_FALSE(std::filesystem::exists(path));
}

TEST(UnixSocketTest, ServesTcpAndASocketAtOnce) {
  TempDir dir;
  const std::string tcp = "127.0.0.1:" + std::to_string(FreePort());
  const std::string socket = "unix:" + dir.path() + "/both.sock";
  auto server =
      StartCuckood(tcp + "," + socket, dir.path() + "/data", {"--listen-socket-mode=0600"});
  ASSERT_TRUE(Serving(*server)) << server->out() << server->err();
  // Every address in the log line.
  EXPECT_THAT(server->out(), HasSubstr("serving on " + tcp + "," + socket + " "));
  EXPECT_EQ(Permissions(dir.path() + "/both.sock"), 0600u);

  ASSERT_EQ(Ctl(tcp, {"create", "f", "--capacity=1000"}).code, 0);
  ASSERT_EQ(Ctl(tcp, {"insert", "f", "over-tcp"}).code, 0);
  Result r = Ctl(socket, {"lookup", "f", "over-tcp"});
  EXPECT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_THAT(r.out, HasSubstr("present\tover-tcp"));
  server->Signal(SIGTERM);
  EXPECT_EQ(server->Wait(), 0);
  EXPECT_FALSE(std::filesystem::exists(dir.path() + "/both.sock"));
}

TEST(UnixSocketTest, KillNineThenRestartOnTheSamePathRemovesTheStaleSocket) {
  TempDir dir;
  const std::string path = dir.path() + "/cuckood.sock";
  const std::string target = "unix://" + path;
  auto first = StartCuckood(target, dir.path() + "/data");
  ASSERT_TRUE(Serving(*first)) << first->out();
  ASSERT_EQ(Ctl(target, {"create", "f", "--capacity=1000"}).code, 0);
  ASSERT_EQ(Ctl(target, {"insert", "f", "kept"}).code, 0);
  first->Signal(SIGKILL);
  first->Wait();
  ASSERT_EQ(FileType(path), S_IFSOCK);  // Left behind.

  auto second = StartCuckood(target, dir.path() + "/data");
  ASSERT_TRUE(Serving(*second)) << second->out() << second->err();
  EXPECT_THAT(second->out(), HasSubstr("removed the stale Unix socket " + path));
  Result r = Ctl(target, {"lookup", "f", "kept"});
  EXPECT_EQ(r.code, 0) << r.out << r.err;  // Its write-ahead log replayed.
  EXPECT_THAT(r.out, HasSubstr("present\tkept"));
}

TEST(UnixSocketTest, APathALiveServerHoldsIsRefusedAndLeftToIt) {
  TempDir dir;
  const std::string path = dir.path() + "/cuckood.sock";
  auto first = StartCuckood("unix:" + path, dir.path() + "/one");
  ASSERT_TRUE(Serving(*first)) << first->out();

  Result second = RunProcess({CUCKOOD_PATH, "--listen=unix:" + path,
                              "--data-dir=" + dir.path() + "/two", "--admin-listen="});
  EXPECT_EQ(second.code, 1);
  EXPECT_THAT(second.out, HasSubstr("another process is serving on the Unix socket " + path));
  // The first still has its socket, and serves on it.
  EXPECT_EQ(FileType(path), S_IFSOCK);
  Result health = Ctl("unix:" + path, {"health"});
  EXPECT_EQ(health.code, 0) << health.out << health.err;
  EXPECT_THAT(health.out, HasSubstr("SERVING"));
}

TEST(UnixSocketTest, ARegularFileAtThePathIsRefusedAndNeverRemoved) {
  TempDir dir;
  const std::string path = dir.path() + "/not-a-socket";
  WriteFile(path, "precious");
  Result r = RunProcess({CUCKOOD_PATH, "--listen=unix:" + path, "--data-dir=" + dir.path() + "/d",
                         "--admin-listen="});
  EXPECT_EQ(r.code, 1);
  EXPECT_THAT(r.out, HasSubstr(path + " exists and is not a socket"));
  EXPECT_EQ(ReadFile(path), "precious");
}

// sun_path holds 107 bytes: a path of 107 serves as unix:PATH; as
// unix:///PATH gRPC would bind "///PATH", 109, and it is refused up front.
TEST(UnixSocketTest, TheLongestPathASocketAddressHoldsServes) {
  TempDir dir;
  const std::string path = dir.path() + "/" + std::string(106 - dir.path().size(), 'p');
  ASSERT_EQ(path.size(), 107u);
  auto server = StartCuckood("unix:" + path, dir.path() + "/data");
  ASSERT_TRUE(Serving(*server)) << server->out() << server->err();
  Result health = Ctl("unix://" + path, {"health"});  // Clients parse the URI: "/PATH".
  EXPECT_EQ(health.code, 0) << health.out << health.err;
  Result slashes = RunProcess({CUCKOOD_PATH, "--listen=unix://" + path, "--admin-listen="});
  EXPECT_EQ(slashes.code, 2);
  EXPECT_THAT(slashes.err, HasSubstr("is 109 bytes long as gRPC binds it"));
}

TEST(UnixSocketTest, BadSocketPathsExitTwoNamingTheProblem) {
  TempDir dir;
  const std::string too_long = dir.path() + "/" + std::string(120, 's') + ".sock";
  Result r = RunProcess({CUCKOOD_PATH, "--listen=unix://" + too_long, "--admin-listen="});
  EXPECT_EQ(r.code, 2);
  // unix:///PATH: gRPC binds "///PATH", two bytes more than PATH.
  EXPECT_THAT(r.err, HasSubstr("the Unix socket's path is " + std::to_string(too_long.size() + 2) +
                               " bytes long as gRPC binds it"));
  EXPECT_THAT(r.err, HasSubstr("the most a socket address holds is 107"));

  Result missing =
      RunProcess({CUCKOOD_PATH, "--listen=unix:" + dir.path() + "/no/such/dir/c.sock"});
  EXPECT_EQ(missing.code, 2);
  EXPECT_THAT(missing.err, HasSubstr("the Unix socket's directory " + dir.path() +
                                     "/no/such/dir does not exist"));

  Result twice = RunProcess(
      {CUCKOOD_PATH, "--listen=unix:" + dir.path() + "/a.sock,unix://" + dir.path() + "/a.sock"});
  EXPECT_EQ(twice.code, 2);
  EXPECT_THAT(twice.err, HasSubstr("twice"));

  // A cluster replica must be told where peers reach it.
  Result cluster = RunProcess(
      {CUCKOOD_PATH, "--listen=unix:" + dir.path() + "/c.sock", "--nats=nats://127.0.0.1:4222"});
  EXPECT_EQ(cluster.code, 2);
  EXPECT_THAT(cluster.err, HasSubstr("set --advertise=HOST:PORT"));
}

}  // namespace
}  // namespace cuckoo::testing
