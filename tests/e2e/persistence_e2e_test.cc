// Persistence as an operator meets it: the real cuckood and cuckooctl,
// stopped with SIGTERM or killed with SIGKILL, restarted on the same data
// directory.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <filesystem>
#include <string>
#include <vector>

#include "core/snapshot.h"
#include "tests/core/snapshot_layout.h"
#include "tests/e2e/process.h"

namespace cuckoo::testing {
namespace {

using ::testing::HasSubstr;

std::string Describe(const Result& r) {
  return "exit " + std::to_string(r.code) + "\n--- stdout:\n" + r.out.substr(0, 2000) +
         "\n--- stderr:\n" + r.err.substr(0, 2000);
}

// The value of "name:   value" in cuckooctl's text output ("" if absent).
std::string Field(const std::string& text, const std::string& name) {
  const size_t at = text.find("\n" + name + ":");
  const size_t start =
      at == std::string::npos ? at : text.find_first_not_of(' ', at + name.size() + 2);
  if (start == std::string::npos) return "";
  return text.substr(start, text.find('\n', start) - start);
}

// n distinct keys, one per line.
std::string KeyLines(const std::string& prefix, int n) {
  std::string s;
  for (int i = 0; i < n; ++i) s += prefix + std::to_string(i) + "\n";
  return s;
}

// How much the replay line ("replayed the write-ahead log: ... (read
// 1.2MiB...") says was read, in MiB; -1 if there is no such line.
double ReplayReadMiB(const std::string& log) {
  const size_t line = log.find("replayed the write-ahead log:");
  if (line == std::string::npos) return -1;
  const size_t at = log.find("(read ", line);
  if (at == std::string::npos) return -1;
  size_t used = 0;
  const double n = std::stod(log.substr(at + 6), &used);
  const std::string unit = log.substr(at + 6 + used, 3);
  if (unit == "KiB") return n / 1024;
  if (unit == "MiB") return n;
  if (unit == "GiB") return n * 1024;
  return n / (1 << 20);  // Bytes.
}

class PersistenceE2eTest : public ::testing::Test {
 protected:
  void Start(const std::vector<std::string>& flags = {}) {
    server_ = std::make_unique<Cuckood>(data_.path(), flags);
    ASSERT_TRUE(server_->ready()) << server_->process().out() << server_->process().err();
  }
  Result Ctl(const std::vector<std::string>& args, const std::string& stdin_data = "") {
    std::vector<std::string> argv = {CUCKOOCTL_PATH, "--target=" + server_->address()};
    argv.insert(argv.end(), args.begin(), args.end());
    return RunProcess(argv, stdin_data);
  }
  // Every key in `keys` is present (lookup exits 0 only then).
  void ExpectAllPresent(const std::string& filter, const std::string& keys) {
    Result r = Ctl({"lookup", filter, "--quiet"}, keys);
    EXPECT_EQ(r.code, 0) << Describe(r);
  }

  TempDir data_;
  std::unique_ptr<Cuckood> server_;
};

TEST_F(PersistenceE2eTest, KeysInsertedWithCuckooctlSurviveSigtermAndRestart) {
  Start();
  ASSERT_EQ(Ctl({"create", "users", "--capacity=100k"}).code, 0);
  ASSERT_EQ(Ctl({"create", "urls", "--capacity=1000", "--shards=1"}).code, 0);
  const std::string users = KeyLines("user:", 50'000);
  const std::string urls = KeyLines("https://example.com/", 500);
  ASSERT_EQ(Ctl({"insert", "users", "--quiet"}, users).code, 0);
  ASSERT_EQ(Ctl({"insert", "urls", "--quiet"}, urls).code, 0);

  server_->process().Signal(SIGTERM);
  ASSERT_EQ(server_->process().Wait(), 0) << server_->process().out();
  EXPECT_THAT(server_->process().out(), HasSubstr("final snapshot: 2 filters written"));
  EXPECT_TRUE(std::filesystem::exists(SnapshotPath(data_.path(), "users")));

  Start();
  const std::string log = server_->process().out();
  EXPECT_THAT(log, HasSubstr("loaded filter \"urls\" from " + SnapshotPath(data_.path(), "urls") +
                             ": 500 items"));
  EXPECT_THAT(log, HasSubstr("loaded filter \"users\" from " + SnapshotPath(data_.path(), "users") +
                             ": 50000 items"));
  EXPECT_THAT(log, HasSubstr("serving 2 filters (50500 items)"));
  // Issue 29: after a clean shutdown the replay reads what the log holds
  // (here a few hundred KiB), not its two 64 MiB segments whole.
  EXPECT_THAT(log, HasSubstr(", closed cleanly)"));
  EXPECT_LT(ReplayReadMiB(log), 2.0) << log;
  ExpectAllPresent("users", users);
  ExpectAllPresent("urls", urls);
  Result info = Ctl({"info", "users"});
  EXPECT_EQ(Field(info.out, "items"), "50000");
  EXPECT_EQ(Field(info.out, "unsnapshotted_changes"), "0");
}

TEST_F(PersistenceE2eTest, KeysBeforeAndAfterASnapshotCallSurviveKillDashNine) {
  Start();
  ASSERT_EQ(Ctl({"create", "ids", "--capacity=100k"}).code, 0);
  const std::string before = KeyLines("id:", 30'000);
  ASSERT_EQ(Ctl({"insert", "ids", "--quiet"}, before).code, 0);
  Result snap = Ctl({"snapshot", "ids"});
  ASSERT_EQ(snap.code, 0) << Describe(snap);
  EXPECT_THAT(snap.out, HasSubstr("ids: 30000 items"));
  EXPECT_THAT(snap.out, HasSubstr(SnapshotPath(data_.path(), "ids")));
  // Changes after the snapshot are in the write-ahead log only.
  const std::string late = KeyLines("late:", 100);
  ASSERT_EQ(Ctl({"insert", "ids", "--quiet"}, late).code, 0);

  server_->process().Signal(SIGKILL);
  ASSERT_EQ(server_->process().Wait(), 128 + SIGKILL);

  Start();
  // After a crash the end of the log is checked the long way: the last
  // segment and the prepared one, whole.
  const std::string log = server_->process().out();
  EXPECT_THAT(log, ::testing::Not(HasSubstr("closed cleanly")));
  EXPECT_GE(ReplayReadMiB(log), 128.0) << log;
  ExpectAllPresent("ids", before);
  ExpectAllPresent("ids", late);
  Result info = Ctl({"--format=json", "info", "ids"});
  EXPECT_THAT(info.out, HasSubstr("\"items\":30100"));
}

TEST_F(PersistenceE2eTest, PeriodicSnapshotsCoverChangesAndKillDashNineKeepsThem) {
  Start({"--snapshot-interval=1s"});
  ASSERT_EQ(Ctl({"create", "p", "--capacity=10k"}).code, 0);
  const std::string keys = KeyLines("p:", 5'000);
  ASSERT_EQ(Ctl({"insert", "p", "--quiet"}, keys).code, 0);
  // Wait for a periodic snapshot to cover the inserts.
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (std::chrono::steady_clock::now() < until &&
         Field(Ctl({"info", "p"}).out, "unsnapshotted_changes") != "0") {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  ASSERT_EQ(Field(Ctl({"info", "p"}).out, "unsnapshotted_changes"), "0");
  server_->process().Signal(SIGKILL);
  server_->process().Wait();
  Start();
  ExpectAllPresent("p", keys);
}

TEST_F(PersistenceE2eTest, DroppedFilterDoesNotComeBack) {
  Start();
  ASSERT_EQ(Ctl({"create", "tmp", "--capacity=1000"}).code, 0);
  ASSERT_EQ(Ctl({"snapshot"}).code, 0);
  ASSERT_EQ(Ctl({"drop", "tmp"}).code, 0);
  server_->process().Signal(SIGTERM);
  ASSERT_EQ(server_->process().Wait(), 0);
  Start();
  Result info = Ctl({"info", "tmp"});
  EXPECT_EQ(info.code, 3);
  EXPECT_THAT(info.err, HasSubstr("NOT_FOUND"));
}

// The restore deploy/README.md used to document: a backup copy of the
// snapshot file put back into the data directory after the filter was
// dropped, then a restart. The log's replay dropped the filter again and
// deleted the file without a word, while the start-up line said "loaded 1
// filters". Now the file is moved to quarantine/ with a warning naming the
// file, the filter and the drop's log position, and the summary counts what
// is served.
TEST_F(PersistenceE2eTest, SnapshotCopiedBackAfterADropWasDeletedByTheReplayWithoutAWord) {
  Start();
  ASSERT_EQ(Ctl({"create", "users", "--capacity=10000"}).code, 0);
  ASSERT_EQ(Ctl({"insert", "users", "--quiet"}, KeyLines("user:", 1000)).code, 0);
  ASSERT_EQ(Ctl({"snapshot"}).code, 0);
  const std::string file = SnapshotPath(data_.path(), "users");
  const std::string backup = data_.path() + "/../users.cuckoo.backup-" + std::to_string(getpid());
  std::filesystem::copy_file(file, backup, std::filesystem::copy_options::overwrite_existing);
  ASSERT_EQ(Ctl({"drop", "users"}).code, 0);
  server_->process().Signal(SIGTERM);
  ASSERT_EQ(server_->process().Wait(), 0);
  std::filesystem::copy_file(backup, file);
  std::filesystem::remove(backup);

  Start();
  const std::string log = server_->process().out();
  EXPECT_THAT(log, HasSubstr("snapshot " + file + " of filter \"users\" (log position "));
  EXPECT_THAT(log, HasSubstr("is dropped by the write-ahead log at log position "));
  EXPECT_THAT(log, HasSubstr("moved to " + data_.path() + "/quarantine/" +
                             SnapshotFileName("users") + "."));
  EXPECT_THAT(log, HasSubstr("serving 0 filters (0 items)"));
  EXPECT_THAT(log, HasSubstr("1 files of filters the log drops moved to"));
  EXPECT_FALSE(std::filesystem::exists(file));
  int quarantined = 0;
  for (const auto& e : std::filesystem::directory_iterator(data_.path() + "/quarantine")) {
    if (e.path().filename().string().rfind(SnapshotFileName("users") + ".", 0) == 0) ++quarantined;
  }
  EXPECT_EQ(quarantined, 1);
  EXPECT_EQ(Ctl({"info", "users"}).code, 3);
  // The name is free again: a new filter of it is created and survives.
  ASSERT_EQ(Ctl({"create", "users", "--capacity=1000"}).code, 0);
  server_->process().Signal(SIGTERM);
  ASSERT_EQ(server_->process().Wait(), 0);
  Start();
  EXPECT_EQ(Ctl({"info", "users"}).code, 0);
}

// deploy/README.md's restore, step by step: a backup made with
// `cuckooctl export`, the filter dropped, then `cuckooctl import` into the
// running server; every key is there, and still after a kill -9 and restart.
TEST_F(PersistenceE2eTest, DocumentedRestoreWithImportFindsEveryKey) {
  Start();
  ASSERT_EQ(Ctl({"create", "users", "--capacity=100k"}).code, 0);
  const std::string keys = KeyLines("user:", 20'000);
  ASSERT_EQ(Ctl({"insert", "users", "--quiet"}, keys).code, 0);
  const std::string backup = data_.path() + "/../users.cuckoo.export-" + std::to_string(getpid());
  Result exported = Ctl({"export", "users", "--file=" + backup});
  ASSERT_EQ(exported.code, 0) << Describe(exported);
  ASSERT_EQ(Ctl({"drop", "users"}).code, 0);
  Result imported = Ctl({"import", "users", "--file=" + backup});
  std::filesystem::remove(backup);
  ASSERT_EQ(imported.code, 0) << Describe(imported);
  ExpectAllPresent("users", keys);

  server_->process().Signal(SIGKILL);
  server_->process().Wait();
  Start();
  ExpectAllPresent("users", keys);
  EXPECT_THAT(server_->process().out(), HasSubstr("serving 1 filters (20000 items)"));
}

TEST_F(PersistenceE2eTest, SnapshotCommandErrorsAndJson) {
  Start();
  Result missing = Ctl({"snapshot", "nope"});
  EXPECT_EQ(missing.code, 3);
  EXPECT_THAT(missing.err, HasSubstr("cuckooctl: NOT_FOUND: filter \"nope\" not found"));
  Result extra = Ctl({"snapshot", "a", "b"});
  EXPECT_EQ(extra.code, 2);
  ASSERT_EQ(Ctl({"create", "j", "--capacity=1000"}).code, 0);
  Result json = Ctl({"--format=json", "snapshot", "--changed-only"});
  ASSERT_EQ(json.code, 0) << Describe(json);
  EXPECT_THAT(json.out, HasSubstr("\"filter\":\"j\""));
  EXPECT_THAT(json.out, HasSubstr("\"unchanged\":[]"));
  Result again = Ctl({"snapshot", "--changed-only"});
  EXPECT_THAT(again.out, HasSubstr("j: unchanged since its last snapshot"));
}

// --- Identity: a single node's data directory follows its own write-ahead
// log; another node's snapshot is refused, an older cuckood's directory
// adopted.

// The identity a data directory's IDENTITY records.
std::string NodeIdentity(const std::string& dir) {
  const std::string text = ReadFile(dir + "/IDENTITY");
  const size_t at = text.find("\nidentity ");
  return at == std::string::npos ? "" : text.substr(at + 10, text.find('\n', at + 1) - at - 10);
}

TEST_F(PersistenceE2eTest, ASnapshotCopiedFromAnotherSingleNodeRefusesStartUpNamingBothLogs) {
  Start();
  ASSERT_EQ(Ctl({"create", "users", "--capacity=10000"}).code, 0);
  ASSERT_EQ(Ctl({"insert", "users", "--quiet"}, KeyLines("user:", 100)).code, 0);
  server_->process().Signal(SIGTERM);
  ASSERT_EQ(server_->process().Wait(), 0);
  const std::string a = NodeIdentity(data_.path());
  // Another node, with a filter of its own.
  TempDir other;
  {
    Cuckood b(other.path());
    ASSERT_TRUE(b.ready()) << b.process().out();
    b.process().Signal(SIGTERM);
    ASSERT_EQ(b.process().Wait(), 0);
  }
  const std::string b_log = NodeIdentity(other.path());
  ASSERT_EQ(a.rfind("node-", 0), 0u) << a;
  ASSERT_EQ(b_log.rfind("node-", 0), 0u) << b_log;
  ASSERT_NE(a, b_log);
  const std::string copied = other.path() + "/users.cuckoo";
  std::filesystem::copy_file(SnapshotPath(data_.path(), "users"), copied);
  Cuckood refused(other.path());
  EXPECT_FALSE(refused.ready());
  EXPECT_NE(refused.process().Wait(), 0);
  const std::string log = refused.process().out() + refused.process().err();
  EXPECT_THAT(
      log, HasSubstr("snapshot " + copied + " belongs to the log " + a + ", but data directory " +
                     other.path() + " follows the log " + b_log + " (IDENTITY)"));
  EXPECT_THAT(log, HasSubstr("use cuckooctl export there and cuckooctl import here"));
  EXPECT_TRUE(std::filesystem::exists(copied)) << "left in place";
  EXPECT_EQ(NodeIdentity(other.path()), b_log);
  // Moved out, as the message says: the node starts, without the filter.
  std::filesystem::remove(copied);
  Cuckood b(other.path());
  ASSERT_TRUE(b.ready()) << b.process().out();
  EXPECT_THAT(b.process().out(), HasSubstr("serving 0 filters"));
}

// A directory of a cuckood before identities (no IDENTITY, snapshots of
// format version 3 named <name>.cuckoo) starts, keeps its keys, and from
// then on records its log; the next snapshot moves the file to its name.
TEST_F(PersistenceE2eTest, ADataDirectoryOfAnOlderCuckoodStartsAndKeepsItsKeys) {
  Start();
  ASSERT_EQ(Ctl({"create", "users", "--capacity=10000"}).code, 0);
  ASSERT_EQ(Ctl({"insert", "users", "--quiet"}, KeyLines("user:", 1000)).code, 0);
  server_->process().Signal(SIGTERM);
  ASSERT_EQ(server_->process().Wait(), 0);
  const std::string file = SnapshotPath(data_.path(), "users");
  const std::string written = ReadFile(file);
  const std::vector<uint8_t> v4(written.begin(), written.end());
  const std::vector<uint8_t> v3 = SnapshotToVersion3(v4);
  ASSERT_FALSE(v3.empty());
  const std::string old_file = data_.path() + "/users.cuckoo";
  WriteFile(old_file, std::string(v3.begin(), v3.end()));
  std::filesystem::remove(file);
  std::filesystem::remove(data_.path() + "/IDENTITY");

  Start();
  EXPECT_THAT(server_->process().out(),
              HasSubstr("data directory " + data_.path() +
                        " records no log identity (an older cuckood's directory, or its "
                        "IDENTITY lost): its snapshots and write-ahead log are adopted as the "
                        "log node-"));
  ExpectAllPresent("users", KeyLines("user:", 1000));
  const std::string adopted = NodeIdentity(data_.path());
  ASSERT_EQ(adopted.rfind("node-", 0), 0u) << adopted;
  ASSERT_EQ(Ctl({"insert", "users", "--quiet"}, KeyLines("more:", 10)).code, 0);
  ASSERT_EQ(Ctl({"snapshot"}).code, 0);
  // The next snapshot is this build's, under its new name, recording the log;
  // the older file is gone.
  const std::string now = ReadFile(file);
  ASSERT_GE(now.size(), 1024u);
  EXPECT_EQ(now[8], 5);
  EXPECT_EQ(now.substr(296, adopted.size()), adopted);
  EXPECT_FALSE(std::filesystem::exists(old_file));
  server_->process().Signal(SIGKILL);
  server_->process().Wait();
  Start();
  EXPECT_EQ(NodeIdentity(data_.path()), adopted);
  ExpectAllPresent("users", KeyLines("user:", 1000));
  ExpectAllPresent("users", KeyLines("more:", 10));
}

// Names are Redis keys, created over gRPC (cuckooctl) and killed with -9:
// each survives, in a file named by its hash inside the data directory.
TEST_F(PersistenceE2eTest, KeyShapedNamesSurviveKillDashNineInsideTheDataDirectory) {
  const std::vector<std::string> names = {"users:seen", "a/b", "../../etc/passwd", "my filter",
                                          std::string(512, 'n')};
  // The data directory is two levels down, so "../../etc/passwd" would land
  // in `outer` if a name were ever a path.
  TempDir outer;
  const std::string data = outer.path() + "/x/data";
  std::filesystem::create_directories(data);
  server_ = std::make_unique<Cuckood>(data, std::vector<std::string>{});
  ASSERT_TRUE(server_->ready()) << server_->process().out();
  for (const std::string& n : names) {
    Result r = Ctl({"create", n, "--capacity=1000"});
    ASSERT_EQ(r.code, 0) << Describe(r);
    ASSERT_EQ(Ctl({"insert", n, "--quiet"}, KeyLines(n.substr(0, 20) + ":", 100)).code, 0);
  }
  ASSERT_EQ(Ctl({"snapshot", names[0]}).code, 0);  // One from its file, the rest from the log.
  server_->process().Signal(SIGKILL);
  server_->process().Wait();
  server_ = std::make_unique<Cuckood>(data, std::vector<std::string>{});
  ASSERT_TRUE(server_->ready()) << server_->process().out();
  for (const std::string& n : names) {
    ExpectAllPresent(n, KeyLines(n.substr(0, 20) + ":", 100));
  }
  Result list = Ctl({"list"});
  EXPECT_THAT(list.out, HasSubstr("users:seen"));
  EXPECT_THAT(list.out, HasSubstr("../../etc/passwd"));
  server_->process().Signal(SIGTERM);
  ASSERT_EQ(server_->process().Wait(), 0);
  // Only the data directory changed: one file per filter, named by its hash.
  std::vector<std::string> outside;
  for (const auto& e : std::filesystem::recursive_directory_iterator(outer.path())) {
    const std::string p = e.path().string();
    if (p.rfind(data, 0) != 0) outside.push_back(p);
  }
  EXPECT_THAT(outside, ::testing::ElementsAre(outer.path() + "/x"));
  for (const std::string& n : names) {
    EXPECT_TRUE(std::filesystem::is_regular_file(SnapshotPath(data, n))) << n;
  }
}

}  // namespace
}  // namespace cuckoo::testing
