// The cuckood binary as an operator runs it: defaults, flags, environment,
// signals and exit codes.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "client/cuckoo_client.h"
#include "server/config/config.h"
#include "tests/e2e/process.h"

namespace cuckoo::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

TEST(ServerProcessTest, SigtermDrainsAndExitsZero) {
  TempDir dir;
  Cuckood server(dir.path());
  ASSERT_TRUE(server.ready()) << server.process().out() << server.process().err();
  auto client = client::Client::Connect(server.address());
  v1::CreateFilterRequest req;
  req.set_name("f");
  req.set_capacity(1000);
  ASSERT_TRUE(client->CreateFilter(req).ok());
  server.process().Signal(SIGTERM);
  EXPECT_EQ(server.process().Wait(), 0);
  std::string log = server.process().out();
  EXPECT_THAT(log, HasSubstr("received TERM"));
  EXPECT_THAT(log, HasSubstr("stopped"));
}

// SIGHUP's default action killed the process, without a final snapshot,
// when its terminal went away.
TEST(ServerProcessTest, SighupIsLoggedAndIgnored) {
  TempDir dir;
  Cuckood server(dir.path());
  ASSERT_TRUE(server.ready());
  server.process().Signal(SIGHUP);
  EXPECT_EQ(server.process().Wait(std::chrono::milliseconds(500)), -1) << "still running";
  auto client = client::Client::Connect(server.address());
  EXPECT_TRUE(client->ServerInfo().ok());
  // Logged by the signal thread: on a busy machine give it time.
  for (const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
       server.process().out().find("received SIGHUP") == std::string::npos &&
       std::chrono::steady_clock::now() < deadline;) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_THAT(server.process().out(), HasSubstr("received SIGHUP"));
  server.process().Signal(SIGTERM);
  EXPECT_EQ(server.process().Wait(), 0);
}

// Filters whose final snapshot takes a while: four of 32 MiB, written through
// a 4 KiB buffer.
void CreateSlowToSnapshotFilters(const std::string& address) {
  auto client = client::Client::Connect(address);
  for (int i = 0; i < 4; ++i) {
    v1::CreateFilterRequest req;
    req.set_name("f" + std::to_string(i));
    req.set_capacity(20'000'000);
    req.set_shards(1);
    ASSERT_TRUE(client->CreateFilter(req).ok());
    std::vector<std::string_view> keys = {"k"};
    ASSERT_TRUE(client->Insert(req.name(), keys).ok());
  }
}

// A second SIGTERM during the final snapshot used to be swallowed.
TEST(ServerProcessTest, ASecondSignalEndsTheDrainAndTheFinalSnapshotIsStillWritten) {
  TempDir dir;
  Cuckood server(dir.path(), {"--drain-timeout=60s", "--snapshot-buffer=4KiB"});
  ASSERT_TRUE(server.ready());
  CreateSlowToSnapshotFilters(server.address());
  server.process().Signal(SIGTERM);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  server.process().Signal(SIGTERM);
  EXPECT_EQ(server.process().Wait(), 0);
  const std::string log = server.process().out();
  EXPECT_THAT(log, HasSubstr("received TERM again: ending the drain now"));
  EXPECT_THAT(log, HasSubstr("final snapshot: 4 filters written"));
}

TEST(ServerProcessTest, AThirdSignalExitsAtOnceWithCodeOne) {
  TempDir dir;
  Cuckood server(dir.path(), {"--drain-timeout=60s", "--snapshot-buffer=4KiB"});
  ASSERT_TRUE(server.ready());
  CreateSlowToSnapshotFilters(server.address());
  // Each signal once the one before was taken: signals sent together on a
  // loaded machine coalesce into one.
  for (const char* taken : {"received INT: shutting down", "received INT again"}) {
    server.process().Signal(SIGINT);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (server.process().out().find(taken) == std::string::npos &&
           std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }
  server.process().Signal(SIGINT);
  EXPECT_EQ(server.process().Wait(), 1);
  EXPECT_THAT(server.process().out(),
              HasSubstr("received INT a third time: exiting now without the final snapshot"));
}

// A budget that cannot fit with the overhead beside it is allowed (the
// operator may know better) but said at start-up.
TEST(ServerProcessTest, ABudgetPlusOverheadOverTheMemoryAvailableIsWarnedOf) {
  TempDir dir;
  Cuckood server(dir.path(), {"--memory-budget=100000GiB"});
  ASSERT_TRUE(server.ready()) << server.process().out() << server.process().err();
  EXPECT_THAT(
      server.process().out(),
      HasSubstr("is more than the " + cuckoo::FormatByteSize(server::AvailableMemoryBytes()) +
                " this process may use"));
  server.process().Signal(SIGTERM);
  EXPECT_EQ(server.process().Wait(), 0);

  TempDir quiet_dir;
  Cuckood quiet(quiet_dir.path(), {"--memory-budget=64MiB"});
  ASSERT_TRUE(quiet.ready());
  EXPECT_THAT(quiet.process().out(), Not(HasSubstr("this process may use")));
}

TEST(ServerProcessTest, SigintExitsZero) {
  TempDir dir;
  Cuckood server(dir.path());
  ASSERT_TRUE(server.ready());
  server.process().Signal(SIGINT);
  EXPECT_EQ(server.process().Wait(), 0);
  EXPECT_THAT(server.process().out(), HasSubstr("received INT"));
}

TEST(ServerProcessTest, StartsWithNoFlagsAtAllOnTheDefaultPortOrSaysWhyNot) {
  // With no flags it listens on 0.0.0.0:50051 (admin HTTP on 0.0.0.0:9090)
  // and keeps data in ./data; if something else holds one of those ports
  // here, it must say so and exit 1.
  TempDir dir;
  Process p({CUCKOOD_PATH}, {"CUCKOOD_DATA_DIR=" + dir.path() + "/data"});
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (std::chrono::steady_clock::now() < until && p.Wait(std::chrono::milliseconds(20)) == -1 &&
         p.out().find("serving on") == std::string::npos) {
  }
  if (p.out().find("serving on") != std::string::npos) {
    EXPECT_THAT(p.out(), HasSubstr("serving on 0.0.0.0:50051"));
    EXPECT_THAT(p.out(), HasSubstr("admin HTTP on 0.0.0.0:9090 "));
    p.Signal(SIGTERM);
    EXPECT_EQ(p.Wait(), 0);
  } else {
    EXPECT_EQ(p.Wait(), 1);
    EXPECT_THAT(p.out(),
                ::testing::AnyOf(HasSubstr("cannot listen on 0.0.0.0:50051"),
                                 HasSubstr("cannot listen on admin address 0.0.0.0:9090")));
  }
}

TEST(ServerProcessTest, PortInUseExitsOneWithTheAddress) {
  TempDir dir, other_dir;
  Cuckood first(dir.path());
  ASSERT_TRUE(first.ready());
  Result second = RunProcess({CUCKOOD_PATH, "--listen=" + first.address(),
                              "--data-dir=" + other_dir.path(), "--admin-listen="});
  EXPECT_EQ(second.code, 1);
  EXPECT_THAT(second.out, HasSubstr("cannot listen on " + first.address()));
}

TEST(ServerProcessTest, DataDirInUseByAnotherServerExitsOne) {
  TempDir dir;
  Cuckood first(dir.path());
  ASSERT_TRUE(first.ready());
  Result second = RunProcess({CUCKOOD_PATH, "--listen=127.0.0.1:" + std::to_string(FreePort()),
                              "--data-dir=" + dir.path(), "--admin-listen=127.0.0.1:0"});
  EXPECT_EQ(second.code, 1);
  EXPECT_THAT(second.out,
              HasSubstr("data directory " + dir.path() + " is in use by another cuckood"));
}

TEST(ServerProcessTest, BadConfigurationExitsTwoNamingTheProblem) {
  Result flag = RunProcess({CUCKOOD_PATH, "--max-batch-keys=lots"});
  EXPECT_EQ(flag.code, 2);
  EXPECT_THAT(flag.err, HasSubstr("--max-batch-keys=\"lots\""));
  Result unknown = RunProcess({CUCKOOD_PATH, "--max-batch-size=5"});
  EXPECT_EQ(unknown.code, 2);
  EXPECT_THAT(unknown.err, HasSubstr("unknown flag --max-batch-size"));
  Result env = RunProcess({CUCKOOD_PATH}, "", {"CUCKOOD_LOG_FORMAT=xml"});
  EXPECT_EQ(env.code, 2);
  EXPECT_THAT(env.err, HasSubstr("--log-format=\"xml\""));
}

// Issue 29: operator input that was silently misread, or reported by absl's
// parser with exit 1. Each must exit 2 with one stderr line naming it.
void ExpectOneLineExitTwo(const Result& r, const std::string& message) {
  EXPECT_EQ(r.code, 2) << message << "\n" << r.err;
  EXPECT_THAT(r.err, HasSubstr(message));
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
}

TEST(ServerProcessTest, UnknownCuckoodEnvironmentVariableExitsTwoNamingTheClosestFlag) {
  ExpectOneLineExitTwo(
      RunProcess({CUCKOOD_PATH}, "", {"CUCKOOD_MEMORY_BUDGT=1GiB"}),
      "unknown environment variable CUCKOOD_MEMORY_BUDGT (did you mean CUCKOOD_MEMORY_BUDGET, "
      "--memory-budget?)");
}

TEST(ServerProcessTest, ByteSizeWithoutUnitExitsTwoNamingTheUnits) {
  Result r = RunProcess({CUCKOOD_PATH, "--memory-budget=1024"});
  ExpectOneLineExitTwo(r, "--memory-budget=\"1024\": a size needs a unit");
  EXPECT_THAT(r.err, HasSubstr("MiB"));
}

TEST(ServerProcessTest, BadBoolExitsTwo) {
  ExpectOneLineExitTwo(RunProcess({CUCKOOD_PATH, "--admin-tls=ture"}), "--admin-tls=\"ture\"");
}

TEST(ServerProcessTest, BadFlagfileExitsTwo) {
  TempDir dir;
  ExpectOneLineExitTwo(RunProcess({CUCKOOD_PATH, "--flagfile=" + dir.path() + "/missing"}),
                       "--flagfile=\"" + dir.path() + "/missing\": cannot read it");
  const std::string file = dir.path() + "/flags";
  std::ofstream(file) << "# comment\n--max-filters=5\n--memory-budgt=1GiB\n";
  ExpectOneLineExitTwo(RunProcess({CUCKOOD_PATH, "--flagfile=" + file}),
                       "unknown flag --memory-budgt");
}

TEST(ServerProcessTest, HelpSpellsFlagsWithDashesAndPrintsNoBuildPaths) {
  Result r = RunProcess({CUCKOOD_PATH, "--help"});
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("--tls-key"));
  EXPECT_THAT(r.out, HasSubstr("CUCKOOD_TLS_KEY"));
  EXPECT_THAT(r.out, HasSubstr("--memory-budget"));
  EXPECT_THAT(r.out, Not(HasSubstr("--tls_key")));
  EXPECT_THAT(r.out, Not(HasSubstr("config.cc")));
  EXPECT_THAT(r.out, Not(HasSubstr("Flags from")));
}

TEST(ServerProcessTest, EnvironmentConfiguresTheServer) {
  TempDir dir;
  const std::string address = "127.0.0.1:" + std::to_string(FreePort());
  Process p({CUCKOOD_PATH}, {"CUCKOOD_LISTEN=" + address, "CUCKOOD_DATA_DIR=" + dir.path(),
                             "CUCKOOD_MAX_BATCH_KEYS=7", "CUCKOOD_LOG_FORMAT=json",
                             "CUCKOOD_ADMIN_LISTEN=127.0.0.1:0"});
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (std::chrono::steady_clock::now() < until &&
         p.out().find("serving on") == std::string::npos &&
         p.Wait(std::chrono::milliseconds(20)) == -1) {
  }
  ASSERT_THAT(p.out(), HasSubstr("serving on " + address));
  EXPECT_THAT(p.out(), HasSubstr("{\"time\":\""));
  EXPECT_THAT(p.out(), HasSubstr("admin HTTP on 127.0.0.1:"));
  auto client = client::Client::Connect(address);
  auto info = client->ServerInfo();
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->max_batch_keys(), 7u);
  p.Signal(SIGTERM);
  EXPECT_EQ(p.Wait(), 0);
}

}  // namespace
}  // namespace cuckoo::testing
