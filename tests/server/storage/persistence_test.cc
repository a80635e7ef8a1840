// Snapshots through the server: the Snapshot RPC, GetFilter's snapshot
// fields, DropFilter removing files, loading at start-up, quarantine of bad
// files, periodic and final snapshots. A real CuckooServer in-process, driven
// by the C++ client.
#include "server/storage/persistence.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <atomic>
#include <condition_variable>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <future>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/notification.h"
#include "client/cuckoo_client.h"
#include "core/hash.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "tests/core/snapshot_layout.h"
#include "tests/util/keys.h"
#include "tests/util/test_server.h"

namespace cuckoo {
namespace {

namespace fs = std::filesystem;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using testing::Key;
using testing::Keys;
using testing::ServerTest;
using testing::Views;

std::vector<std::string> FilesIn(const std::string& dir) {
  std::vector<std::string> files;
  for (const auto& e : fs::directory_iterator(dir)) files.push_back(e.path().filename().string());
  std::sort(files.begin(), files.end());
  return files;
}

std::vector<uint8_t> ReadBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void WriteBytes(const std::string& path, const std::vector<uint8_t>& b) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
}

class PersistenceTest : public ServerTest {
 protected:
  void SetUp() override {
    ServerTest::SetUp();
    Connect();
  }
  void Connect() { client_ = std::make_unique<client::Client>(channel_); }
  // Stops the server (final snapshot) and starts a new one on the same
  // directory.
  void Restart(server::ServerConfig config) {
    server_->Shutdown(absl::Seconds(5));
    ASSERT_TRUE(server_->final_snapshot_status().ok()) << server_->final_snapshot_status();
    StartServer(config);
    Connect();
  }
  void Restart() { Restart(testing::TestConfig(dir_.path())); }

  void CreateFilter(const std::string& name, uint64_t capacity, uint32_t shards = 0) {
    v1::CreateFilterRequest req;
    req.set_name(name);
    req.set_capacity(capacity);
    req.set_shards(shards);
    req.set_seed(99);
    ASSERT_TRUE(client_->CreateFilter(req).ok());
  }
  void Insert(const std::string& name, const std::vector<std::string>& keys) {
    auto r = client_->Insert(name, Views(keys));
    ASSERT_TRUE(r.ok()) << r.status();
  }
  std::vector<bool> Lookup(const std::string& name, const std::vector<std::string>& keys) {
    auto r = client_->Lookup(name, Views(keys));
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? *r : std::vector<bool>{};
  }
  std::string SnapshotFile(const std::string& name) { return SnapshotPath(dir_.path(), name); }

  std::unique_ptr<client::Client> client_;
};

TEST_F(PersistenceTest, SnapshotRpcWritesTheFileAndGetFilterReportsIt) {
  CreateFilter("f", 10'000, 4);
  v1::FilterInfo before = *client_->GetFilter("f");
  EXPECT_FALSE(before.has_last_snapshot_time());
  EXPECT_TRUE(before.has_unsnapshotted_changes()) << "a new filter has no snapshot yet";
  EXPECT_EQ(before.unsnapshotted_changes(), 0u);
  Insert("f", Keys(0, 1000));
  EXPECT_EQ(client_->GetFilter("f")->unsnapshotted_changes(), 1000u);

  const absl::Time t0 = absl::Now();
  absl::StatusOr<v1::SnapshotResponse> snap = client_->Snapshot("f", false, absl::Seconds(30));
  ASSERT_TRUE(snap.ok()) << snap.status();
  ASSERT_EQ(snap->files_size(), 1);
  const v1::SnapshotFile& file = snap->files(0);
  EXPECT_EQ(file.filter(), "f");
  EXPECT_EQ(file.path(), SnapshotFile("f"));
  EXPECT_EQ(file.bytes(), fs::file_size(SnapshotFile("f")));
  EXPECT_EQ(file.items(), 1000u);
  EXPECT_EQ(snap->bytes(), file.bytes());
  EXPECT_GE(file.time().seconds(), absl::ToUnixSeconds(t0) - 1);

  v1::FilterInfo after = *client_->GetFilter("f");
  EXPECT_TRUE(after.has_last_snapshot_time());
  EXPECT_EQ(after.last_snapshot_time().seconds(), file.time().seconds());
  EXPECT_EQ(after.last_snapshot_bytes(), file.bytes());
  EXPECT_EQ(after.unsnapshotted_changes(), 0u);
  EXPECT_FALSE(after.has_unsnapshotted_changes());

  Insert("f", Keys(1, 5));
  ASSERT_TRUE(client_->Delete("f", Views(Keys(0, 2))).ok());
  after = *client_->GetFilter("f");
  EXPECT_EQ(after.unsnapshotted_changes(), 7u);
  EXPECT_TRUE(after.has_unsnapshotted_changes());
}

TEST_F(PersistenceTest, SnapshotOfAllFiltersAndOfChangedOnly) {
  CreateFilter("b", 1000);
  CreateFilter("a", 1000);
  auto all = client_->Snapshot("", false, absl::Seconds(30));
  ASSERT_TRUE(all.ok()) << all.status();
  ASSERT_EQ(all->files_size(), 2);
  EXPECT_EQ(all->files(0).filter(), "a");
  EXPECT_EQ(all->files(1).filter(), "b");
  EXPECT_EQ(all->bytes(), all->files(0).bytes() + all->files(1).bytes());

  auto none = client_->Snapshot("", true, absl::Seconds(30));
  ASSERT_TRUE(none.ok());
  EXPECT_EQ(none->files_size(), 0);
  EXPECT_THAT(none->unchanged(), ElementsAre("a", "b"));

  Insert("b", {"k"});
  auto changed = client_->Snapshot("", true, absl::Seconds(30));
  ASSERT_TRUE(changed.ok());
  ASSERT_EQ(changed->files_size(), 1);
  EXPECT_EQ(changed->files(0).filter(), "b");
  EXPECT_THAT(changed->unchanged(), ElementsAre("a"));
}

TEST_F(PersistenceTest, SnapshotOfUnknownOrBadlyNamedFilterFails) {
  auto missing = client_->Snapshot("nope", false, absl::Seconds(30));
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(missing.status().message(), HasSubstr("\"nope\" not found"));
  // A name, like any key: not found, and never a path.
  auto path_like = client_->Snapshot("../etc", false, absl::Seconds(30));
  EXPECT_EQ(path_like.status().code(), absl::StatusCode::kNotFound);
  auto bad = client_->Snapshot(std::string(513, 'x'), false, absl::Seconds(30));
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(bad.status().message(), HasSubstr("513 bytes; at most 512"));
  EXPECT_TRUE(FilesIn(dir_.path()) == (std::vector<std::string>{"IDENTITY", "LOCK", "wal"}));
}

TEST_F(PersistenceTest, SnapshotThatCannotBeWrittenNamesTheFileAndKeepsTheOldOne) {
  CreateFilter("f", 1000);
  Insert("f", Keys(0, 10));
  ASSERT_TRUE(client_->Snapshot("f", false, absl::Seconds(30)).ok());
  Insert("f", Keys(1, 10));
  const std::string tmp = SnapshotTempPath(dir_.path(), "f");
  fs::create_directory(tmp);  // Blocks the temp file.
  auto r = client_->Snapshot("f", false, absl::Seconds(30));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInternal);
  EXPECT_THAT(r.status().message(), HasSubstr(tmp));
  EXPECT_EQ(client_->GetFilter("f")->unsnapshotted_changes(), 10u);
  fs::remove(tmp);
  // What is on disk is the first snapshot, intact.
  server_->Shutdown(absl::Seconds(5));
  StartServer(testing::TestConfig(dir_.path()));
  Connect();
  EXPECT_EQ(client_->GetFilter("f")->items(), 20u) << "the final snapshot had all 20";
}

// Names are Redis keys; files are named by the name's SHA-256 and hold the
// name, so no name reaches outside the data directory.
TEST_F(PersistenceTest, KeyShapedNamesAreFilesNamedByTheirHashAndSurviveRestarts) {
  const std::vector<std::string> names = {
      "users:seen", "a/b", "../../etc/passwd",    "my filter",
      ".",          "..",  std::string(512, 'n'), "caf\xC3\xA9 \xE2\x82\xAC"};
  server::ServerConfig config = testing::TestConfig(dir_.path());
  config.max_filters = 16;
  config.max_key_bytes = 1024;  // The names are the keys too.
  Restart(config);
  for (size_t i = 0; i < names.size(); ++i) {
    CreateFilter(names[i], 1000);
    Insert(names[i], {names[i], Key(0, i)});
  }
  ASSERT_TRUE(client_->Snapshot("", false, absl::Seconds(30)).ok());
  std::vector<std::string> expected = {"IDENTITY", "LOCK", "REQUESTS", "wal"};
  for (const std::string& n : names) {
    EXPECT_TRUE(fs::is_regular_file(SnapshotFile(n))) << n;
    expected.push_back(SnapshotFileName(n));
    EXPECT_EQ(SnapshotFileName(n).size(), 2 + 64 + 7u);
  }
  std::sort(expected.begin(), expected.end());
  EXPECT_EQ(FilesIn(dir_.path()), expected);
  EXPECT_FALSE(fs::exists(fs::path(dir_.path()).parent_path().parent_path() / "etc/passwd.cuckoo"));
  Restart(config);
  EXPECT_EQ(server_->loaded().loaded, names.size());
  EXPECT_EQ(server_->loaded().quarantined, 0u);
  for (size_t i = 0; i < names.size(); ++i) {
    EXPECT_THAT(Lookup(names[i], {names[i], Key(0, i), "absent"}), ElementsAre(true, true, false))
        << names[i];
  }
  EXPECT_EQ(FilesIn(dir_.path()), expected);
  // A drop removes the file.
  ASSERT_TRUE(client_->DropFilter("a/b").ok());
  EXPECT_FALSE(fs::exists(SnapshotFile("a/b")));
}

// A file named f-<hex> that holds another filter (copied or renamed by
// hand) is not served under either name: quarantined, saying why.
TEST_F(PersistenceTest, AFileWhoseNameIsNotItsFiltersHashIsQuarantined) {
  CreateFilter("users", 1000);
  Insert("users", {"u"});
  server_->Shutdown(absl::Seconds(5));
  server_.reset();
  fs::rename(SnapshotFile("users"), SnapshotPath(dir_.path(), "other"));
  StartServer(testing::TestConfig(dir_.path()));
  Connect();
  EXPECT_EQ(server_->loaded().quarantined, 1u);
  EXPECT_EQ(FilesIn(dir_.path() + "/quarantine").size(), 1u);
  EXPECT_EQ(client_->GetFilter("other").status().code(), absl::StatusCode::kNotFound);
  // "users" comes back from the write-ahead log, which holds its history.
  EXPECT_THAT(Lookup("users", {"u"}), ElementsAre(true));
}

// An older build's directory: files named <name>.cuckoo, in format version
// 4. They load; each filter's next snapshot writes its file under this
// build's name, then removes the old one.
TEST_F(PersistenceTest, AnOlderBuildsNameDotCuckooFilesLoadAndMoveAtTheNextSnapshot) {
  CreateFilter("users", 1000);
  CreateFilter("urls", 1000);
  Insert("users", {"u1", "u2"});
  Insert("urls", {"x"});
  server_->Shutdown(absl::Seconds(5));
  server_.reset();
  for (const std::string n : {"users", "urls"}) {
    WriteBytes(dir_.path() + "/" + n + ".cuckoo",
               testing::SnapshotToVersion4(ReadBytes(SnapshotFile(n))));
    fs::remove(SnapshotFile(n));
  }
  StartServer(testing::TestConfig(dir_.path()));
  Connect();
  EXPECT_EQ(server_->loaded().loaded, 2u);
  EXPECT_EQ(server_->loaded().quarantined, 0u);
  EXPECT_THAT(Lookup("users", {"u1", "u2", "nope"}), ElementsAre(true, true, false));
  EXPECT_THAT(FilesIn(dir_.path()),
              ElementsAre("IDENTITY", "LOCK", "REQUESTS", "urls.cuckoo", "users.cuckoo", "wal"));
  Insert("users", {"u3"});
  ASSERT_TRUE(client_->Snapshot("users", false, absl::Seconds(30)).ok());
  EXPECT_THAT(FilesIn(dir_.path()), ElementsAre("IDENTITY", "LOCK", "REQUESTS",
                                                SnapshotFileName("users"), "urls.cuckoo", "wal"));
  // A drop of a filter still in its older file removes that file.
  ASSERT_TRUE(client_->DropFilter("urls").ok());
  EXPECT_THAT(FilesIn(dir_.path()),
              ElementsAre("IDENTITY", "LOCK", "REQUESTS", SnapshotFileName("users"), "wal"));
  Restart();
  EXPECT_EQ(server_->loaded().loaded, 1u);
  EXPECT_THAT(Lookup("users", {"u1", "u2", "u3"}), ElementsAre(true, true, true));
  EXPECT_EQ(client_->GetFilter("urls").status().code(), absl::StatusCode::kNotFound);
}

// A crash between a migrated filter's first snapshot under this build's
// name and the removal of its older file leaves both: start-up keeps the
// one that reaches the later log position and removes the other.
TEST_F(PersistenceTest, BothFilesOfAMigratingFilterAfterACrashKeepTheLaterOne) {
  CreateFilter("users", 1000);
  Insert("users", {"u1"});
  ASSERT_TRUE(client_->Snapshot("users", false, absl::Seconds(30)).ok());
  const std::vector<uint8_t> earlier = ReadBytes(SnapshotFile("users"));
  Insert("users", {"u2"});
  server_->Shutdown(absl::Seconds(5));  // The final snapshot: u1 and u2.
  server_.reset();
  const std::vector<uint8_t> later = ReadBytes(SnapshotFile("users"));
  const std::string legacy = dir_.path() + "/users.cuckoo";
  // The usual case: the older file is the earlier one.
  WriteBytes(legacy, testing::SnapshotToVersion4(earlier));
  StartServer(testing::TestConfig(dir_.path()));
  Connect();
  EXPECT_EQ(server_->loaded().loaded, 1u);
  EXPECT_THAT(Lookup("users", {"u1", "u2"}), ElementsAre(true, true));
  EXPECT_FALSE(fs::exists(legacy));
  EXPECT_EQ(ReadBytes(SnapshotFile("users")), later);
  server_->Shutdown(absl::Seconds(5));
  server_.reset();
  // The other way round (the older file reaches further): it is kept, and
  // moves at the next snapshot.
  WriteBytes(legacy, testing::SnapshotToVersion4(ReadBytes(SnapshotFile("users"))));
  WriteBytes(SnapshotFile("users"), earlier);
  StartServer(testing::TestConfig(dir_.path()));
  Connect();
  EXPECT_EQ(server_->loaded().loaded, 1u);
  EXPECT_THAT(Lookup("users", {"u1", "u2"}), ElementsAre(true, true));
  EXPECT_TRUE(fs::exists(legacy));
  EXPECT_FALSE(fs::exists(SnapshotFile("users")));
  ASSERT_TRUE(client_->Snapshot("users", false, absl::Seconds(30)).ok());
  EXPECT_FALSE(fs::exists(legacy));
  EXPECT_TRUE(fs::exists(SnapshotFile("users")));
}

// RenameFilter over gRPC: Redis's RENAME (replace) and RENAMENX, and their
// errors, each naming the problem and changing nothing.
TEST_F(PersistenceTest, RenameFilterAnswersAsRenameAndRenamenxAndRefusesChangingNothing) {
  CreateFilter("a", 1000);
  CreateFilter("b", 1000);
  Insert("a", {"from-a"});
  Insert("b", {"from-b"});
  auto missing = client_->RenameFilter("nope", "c", true);
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound) << missing.status();
  auto taken = client_->RenameFilter("a", "b", false);
  EXPECT_EQ(taken.status().code(), absl::StatusCode::kAlreadyExists) << taken.status();
  EXPECT_THAT(std::string(taken.status().message()), HasSubstr("\"b\""));
  auto bad = client_->RenameFilter("a", std::string(513, 'n'), true);
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument) << bad.status();
  EXPECT_THAT(std::string(bad.status().message()), HasSubstr("new_name"));
  EXPECT_THAT(Lookup("a", {"from-a"}), ElementsAre(true));
  EXPECT_THAT(Lookup("b", {"from-b", "from-a"}), ElementsAre(true, false));
  // To its own name: nothing changes.
  auto same = client_->RenameFilter("a", "a", false);
  ASSERT_TRUE(same.ok()) << same.status();
  EXPECT_FALSE(same->replaced());
  EXPECT_THAT(Lookup("a", {"from-a"}), ElementsAre(true));
  // RENAME over b: b's filter goes with it, its memory given back.
  const uint64_t b_bytes = client_->GetFilter("b")->memory_bytes();
  auto r = client_->RenameFilter("a", "b", true);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->replaced());
  EXPECT_EQ(r->replaced_freed_bytes(), b_bytes);
  EXPECT_GT(r->log_position(), 0u);
  EXPECT_EQ(client_->GetFilter("a").status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(Lookup("b", {"from-a", "from-b"}), ElementsAre(true, false));
  // RENAMENX to a free name.
  auto nx = client_->RenameFilter("b", "c", false);
  ASSERT_TRUE(nx.ok()) << nx.status();
  EXPECT_FALSE(nx->replaced());
  EXPECT_THAT(Lookup("c", {"from-a"}), ElementsAre(true));
}

TEST_F(PersistenceTest, ARenamedFiltersFileFollowsItsNameAndTheReplacedOneGoes) {
  CreateFilter("seen:today", 1000);
  CreateFilter("seen:yesterday", 1000);
  Insert("seen:today", Keys(0, 50));
  Insert("seen:yesterday", {"old-day"});
  ASSERT_TRUE(client_->Snapshot("", false, absl::Seconds(30)).ok());
  ASSERT_TRUE(client_->RenameFilter("seen:today", "seen:yesterday", true).ok());
  // Written under the new name at once; the old name's file removed.
  EXPECT_FALSE(fs::exists(SnapshotFile("seen:today")));
  EXPECT_TRUE(fs::exists(SnapshotFile("seen:yesterday")));
  auto info = client_->GetFilter("seen:yesterday");
  ASSERT_TRUE(info.ok());
  EXPECT_TRUE(info->has_last_snapshot_time());
  // Rotation: a new filter of the old name, its own file.
  CreateFilter("seen:today", 1000);
  Insert("seen:today", {"new-day"});
  Restart();
  EXPECT_THAT(Lookup("seen:yesterday", Keys(0, 50)), ::testing::Each(true));
  EXPECT_THAT(Lookup("seen:yesterday", {"old-day", "new-day"}), ElementsAre(false, false));
  EXPECT_THAT(Lookup("seen:today", {"new-day", Key(0, 1)}), ElementsAre(true, false));
  EXPECT_EQ(server_->loaded().quarantined, 0u);
}

// A crash after the rename's record was durable and before the file
// followed: the old name's file, the replaced filter's file and the log.
TEST_F(PersistenceTest, ACrashBeforeTheFileFollowedReplaysTheRenameAndMovesTheFile) {
  CreateFilter("a", 1000);
  CreateFilter("b", 1000);
  Insert("a", Keys(0, 50));
  Insert("b", {"b-only"});
  ASSERT_TRUE(client_->Snapshot("", false, absl::Seconds(30)).ok());
  const std::vector<uint8_t> a_file = ReadBytes(SnapshotFile("a"));
  const std::vector<uint8_t> b_file = ReadBytes(SnapshotFile("b"));
  ASSERT_TRUE(client_->RenameFilter("a", "b", true).ok());
  Insert("b", Keys(1, 10));  // Logged by the filter's id.
  server_->Shutdown(absl::Seconds(5));
  server_.reset();
  // The disk as the crash left it (the log holds everything: one segment).
  WriteBytes(SnapshotFile("a"), a_file);
  WriteBytes(SnapshotFile("b"), b_file);
  StartServer(testing::TestConfig(dir_.path()));
  Connect();
  EXPECT_EQ(server_->loaded().quarantined, 0u);
  EXPECT_EQ(server_->loaded().served, 1u);
  EXPECT_EQ(client_->GetFilter("a").status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(Lookup("b", Keys(0, 50)), ::testing::Each(true));
  EXPECT_THAT(Lookup("b", Keys(1, 10)), ::testing::Each(true));
  EXPECT_THAT(Lookup("b", {"b-only"}), ElementsAre(false));
  // The file followed the name before serving: a filter of the old name
  // can be created and snapshotted without touching it.
  EXPECT_FALSE(fs::exists(SnapshotFile("a")));
  EXPECT_TRUE(fs::exists(SnapshotFile("b")));
  CreateFilter("a", 1000);
  ASSERT_TRUE(client_->Snapshot("", false, absl::Seconds(30)).ok());
  Restart();
  EXPECT_THAT(Lookup("b", Keys(0, 50)), ::testing::Each(true));
  EXPECT_THAT(Lookup("a", {Key(0, 1)}), ElementsAre(false));
}

// A crash between writing the new name's file and removing the old one:
// two files of one filter id; the later one is kept.
TEST_F(PersistenceTest, BothFilesOfARenamedFilterAfterACrashKeepTheNewOne) {
  CreateFilter("a", 1000);
  Insert("a", Keys(0, 50));
  ASSERT_TRUE(client_->Snapshot("", false, absl::Seconds(30)).ok());
  const std::vector<uint8_t> a_file = ReadBytes(SnapshotFile("a"));
  ASSERT_TRUE(client_->RenameFilter("a", "b", false).ok());
  Insert("b", Keys(1, 10));
  server_->Shutdown(absl::Seconds(5));
  server_.reset();
  WriteBytes(SnapshotFile("a"), a_file);
  StartServer(testing::TestConfig(dir_.path()));
  Connect();
  EXPECT_EQ(server_->loaded().loaded, 1u);
  EXPECT_EQ(server_->loaded().served, 1u);
  EXPECT_EQ(client_->GetFilter("a").status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(Lookup("b", Keys(0, 50)), ::testing::Each(true));
  EXPECT_THAT(Lookup("b", Keys(1, 10)), ::testing::Each(true));
  EXPECT_FALSE(fs::exists(SnapshotFile("a")));
}

// Renamed back and forth, with writes and snapshots in between: the log's
// order is the registry's, and a restart serves exactly the last state.
TEST_F(PersistenceTest, RenamesBackAndForthReplayToTheLastState) {
  CreateFilter("x", 1000);
  for (int i = 0; i < 6; ++i) {
    const std::string from = i % 2 == 0 ? "x" : "y";
    const std::string to = i % 2 == 0 ? "y" : "x";
    Insert(from, {Key(i, 0)});
    CreateFilter(to, 100);  // Replaced by the rename.
    Insert(to, {"doomed"});
    if (i == 3) {
      ASSERT_TRUE(client_->Snapshot("", false, absl::Seconds(30)).ok());
    }
    ASSERT_TRUE(client_->RenameFilter(from, to, true).ok());
  }
  // Six renames: back at "x".
  server_->Shutdown(absl::Seconds(5));
  server_.reset();
  StartServer(testing::TestConfig(dir_.path()));
  Connect();
  EXPECT_EQ(server_->loaded().served, 1u);
  EXPECT_EQ(client_->GetFilter("y").status().code(), absl::StatusCode::kNotFound);
  for (int i = 0; i < 6; ++i) EXPECT_THAT(Lookup("x", {Key(i, 0)}), ElementsAre(true)) << i;
  EXPECT_THAT(Lookup("x", {"doomed"}), ElementsAre(false));
}

// A filter still in an older build's <name>.cuckoo, renamed: live, its
// file follows the new name at once; after a crash before that, start-up
// replays the rename and moves it before serving (so a filter created
// again under the old name never shares a name with that file).
TEST_F(PersistenceTest, ARenamedFilterInAnOlderBuildsFileMovesLiveAndAfterACrash) {
  CreateFilter("users", 1000);
  Insert("users", {"u1", "u2"});
  server_->Shutdown(absl::Seconds(5));
  server_.reset();
  const std::vector<uint8_t> old_file =
      testing::SnapshotToVersion4(ReadBytes(SnapshotFile("users")));
  const std::string legacy = dir_.path() + "/users.cuckoo";
  WriteBytes(legacy, old_file);
  fs::remove(SnapshotFile("users"));
  StartServer(testing::TestConfig(dir_.path()));
  Connect();
  ASSERT_TRUE(client_->RenameFilter("users", "people", false).ok());
  EXPECT_FALSE(fs::exists(legacy));
  EXPECT_TRUE(fs::exists(SnapshotFile("people")));
  server_->Shutdown(absl::Seconds(5));
  server_.reset();
  // The crash: the older file back, the new one not written yet.
  WriteBytes(legacy, old_file);
  fs::remove(SnapshotFile("people"));
  StartServer(testing::TestConfig(dir_.path()));
  Connect();
  EXPECT_EQ(client_->GetFilter("users").status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(Lookup("people", {"u1", "u2"}), ElementsAre(true, true));
  EXPECT_FALSE(fs::exists(legacy));
  EXPECT_TRUE(fs::exists(SnapshotFile("people")));
  CreateFilter("users", 1000);
  Restart();
  EXPECT_THAT(Lookup("people", {"u1", "u2"}), ElementsAre(true, true));
  EXPECT_THAT(Lookup("users", {"u1"}), ElementsAre(false));
}

TEST_F(PersistenceTest, RestartLoadsEveryFilterWithIdenticalAnswers) {
  CreateFilter("one", 20'000, 4);
  CreateFilter("two", 5'000, 1);
  CreateFilter("empty", 100);
  std::vector<std::string> k1 = Keys(0, 15'000), k2 = Keys(1, 4'000), absent = Keys(2, 20'000);
  Insert("one", k1);
  Insert("two", k2);
  const std::vector<bool> absent_one = Lookup("one", absent);
  const std::vector<bool> absent_two = Lookup("two", absent);
  const v1::FilterInfo info_one = *client_->GetFilter("one");

  Restart();  // The final snapshot writes all three.
  EXPECT_EQ(server_->loaded().loaded, 3u);
  EXPECT_EQ(server_->loaded().items, 19'000u);
  auto list = client_->ListFilters();
  ASSERT_TRUE(list.ok());
  ASSERT_EQ(list->size(), 3u);
  const std::vector<bool> all(k1.size(), true);
  EXPECT_EQ(Lookup("one", k1), all);
  EXPECT_EQ(Lookup("two", k2), std::vector<bool>(k2.size(), true));
  EXPECT_EQ(Lookup("one", absent), absent_one);
  EXPECT_EQ(Lookup("two", absent), absent_two);
  v1::FilterInfo loaded = *client_->GetFilter("one");
  EXPECT_EQ(loaded.items(), info_one.items());
  EXPECT_EQ(loaded.seed(), info_one.seed());
  EXPECT_EQ(loaded.shards(), 4u);
  EXPECT_EQ(loaded.memory_bytes(), info_one.memory_bytes());
  EXPECT_TRUE(loaded.has_last_snapshot_time());
  EXPECT_FALSE(loaded.has_unsnapshotted_changes());
  EXPECT_EQ(client_->GetFilter("empty")->items(), 0u);
}

TEST_F(PersistenceTest, RestartKeepsASemiSortedFilterWithIdenticalAnswers) {
  v1::CreateFilterRequest req;
  req.set_name("semi");
  req.set_capacity(20'000);
  req.set_fingerprint_bits(12);
  req.set_shards(2);
  req.set_seed(99);
  req.set_semi_sort(true);
  auto created = client_->CreateFilter(req);
  ASSERT_TRUE(created.ok()) << created.status();
  ASSERT_TRUE(created->filter().semi_sort());
  std::vector<std::string> present = Keys(0, 15'000), absent = Keys(1, 20'000);
  Insert("semi", present);
  Insert("semi", Keys(0, 100));  // Second copies, for Count.
  ASSERT_TRUE(client_->Delete("semi", Views(Keys(0, 50))).ok());
  const std::vector<bool> absent_before = Lookup("semi", absent);
  auto counts_before = client_->Count("semi", Views(Keys(0, 200)));
  ASSERT_TRUE(counts_before.ok()) << counts_before.status();
  const v1::FilterInfo before = *client_->GetFilter("semi");

  Restart();
  EXPECT_EQ(server_->loaded().loaded, 1u);
  EXPECT_EQ(server_->loaded().quarantined, 0u);
  const v1::FilterInfo after = *client_->GetFilter("semi");
  EXPECT_TRUE(after.semi_sort());
  EXPECT_EQ(after.fingerprint_bits(), 12u);
  EXPECT_EQ(after.items(), before.items());
  EXPECT_EQ(after.slots(), before.slots());
  EXPECT_EQ(after.memory_bytes(), before.memory_bytes());
  EXPECT_EQ(after.seed(), 99u);
  EXPECT_EQ(Lookup("semi", present), std::vector<bool>(present.size(), true));
  EXPECT_EQ(Lookup("semi", absent), absent_before);
  auto counts_after = client_->Count("semi", Views(Keys(0, 200)));
  ASSERT_TRUE(counts_after.ok()) << counts_after.status();
  EXPECT_EQ(*counts_after, *counts_before);

  // The reloaded filter takes writes, and create if_not_exists matches it.
  Insert("semi", Keys(2, 1000));
  EXPECT_EQ(Lookup("semi", Keys(2, 1000)), std::vector<bool>(1000, true));
  req.set_if_not_exists(true);
  auto again = client_->CreateFilter(req);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_FALSE(again->created());
  req.set_semi_sort(false);
  EXPECT_EQ(client_->CreateFilter(req).status().code(), absl::StatusCode::kAlreadyExists);
}

TEST_F(PersistenceTest, DropRemovesTheSnapshotSoTheFilterStaysGone) {
  CreateFilter("gone", 1000);
  CreateFilter("kept", 1000);
  ASSERT_TRUE(client_->Snapshot("", false, absl::Seconds(30)).ok());
  ASSERT_TRUE(fs::exists(SnapshotFile("gone")));
  ASSERT_TRUE(client_->DropFilter("gone").ok());
  EXPECT_FALSE(fs::exists(SnapshotFile("gone")));
  Restart();
  EXPECT_EQ(client_->GetFilter("gone").status().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(client_->GetFilter("kept").ok());
}

// --- Filter expiry (SetFilterExpiry) ---

google::protobuf::Timestamp InMs(int64_t ms_from_now) {
  const int64_t at = absl::ToUnixMillis(absl::Now()) + ms_from_now;
  google::protobuf::Timestamp t;
  t.set_seconds(at / 1000);
  t.set_nanos(static_cast<int32_t>(at % 1000) * 1'000'000);
  return t;
}

int64_t Ms(const google::protobuf::Timestamp& t) {
  return t.seconds() * 1000 + t.nanos() / 1'000'000;
}

// Waits (at most `limit`) until `done` holds.
bool WaitFor(const std::function<bool()>& done, absl::Duration limit = absl::Seconds(10)) {
  const absl::Time end = absl::Now() + limit;
  while (!done()) {
    if (absl::Now() > end) return false;
    absl::SleepFor(absl::Milliseconds(10));
  }
  return true;
}

// An expiry is kept by the snapshot (header bytes 856..863) and by the
// write-ahead log (a kSetExpiry record): a restart from either has it, and
// its clearing too.
TEST_F(PersistenceTest, AnExpirySurvivesRestartsFromTheSnapshotAndFromTheLogAndSoDoesItsClearing) {
  CreateFilter("seen:2026-11-29", 1000);
  Insert("seen:2026-11-29", {"a", "b"});
  v1::SetFilterExpiryRequest req;
  req.set_name("seen:2026-11-29");
  *req.mutable_expire_at() = InMs(3'600'000);
  auto set = client_->SetFilterExpiry(req);
  ASSERT_TRUE(set.ok()) << set.status();
  EXPECT_TRUE(set->changed());
  const int64_t at = Ms(req.expire_at());
  EXPECT_EQ(Ms(set->expire_at()), at);
  EXPECT_GT(set->log_position(), 0u);
  EXPECT_EQ(Ms(client_->GetFilter("seen:2026-11-29")->expire_at()), at);
  // The change counts as unsnapshotted.
  ASSERT_TRUE(client_->Snapshot("", false, absl::Seconds(30)).ok());
  ASSERT_TRUE(client_->SetFilterExpiry(req).ok());  // Same value: no change.
  req.mutable_expire_at()->set_seconds(req.expire_at().seconds() + 1);
  ASSERT_TRUE(client_->SetFilterExpiry(req).ok());
  EXPECT_TRUE(client_->GetFilter("seen:2026-11-29")->has_unsnapshotted_changes());
  const int64_t later = at + 1000;

  Restart();  // From the final snapshot.
  EXPECT_EQ(Ms(client_->GetFilter("seen:2026-11-29")->expire_at()), later);
  EXPECT_THAT(Lookup("seen:2026-11-29", {"a", "b"}), ElementsAre(true, true));

  // From the log alone: its snapshot gone, the replay sets it again.
  server_->Shutdown(absl::Seconds(5));
  ASSERT_TRUE(fs::remove(SnapshotFile("seen:2026-11-29")));
  StartServer(testing::TestConfig(dir_.path()));
  Connect();
  EXPECT_EQ(Ms(client_->GetFilter("seen:2026-11-29")->expire_at()), later);

  v1::SetFilterExpiryRequest clear;
  clear.set_name("seen:2026-11-29");
  auto cleared = client_->SetFilterExpiry(clear);
  ASSERT_TRUE(cleared.ok()) << cleared.status();
  EXPECT_TRUE(cleared->changed());
  EXPECT_FALSE(cleared->has_expire_at());
  EXPECT_FALSE(client_->SetFilterExpiry(clear)->changed());  // None to clear.
  Restart();
  EXPECT_FALSE(client_->GetFilter("seen:2026-11-29")->has_expire_at());
  server_->Shutdown(absl::Seconds(5));
  ASSERT_TRUE(fs::remove(SnapshotFile("seen:2026-11-29")));
  StartServer(testing::TestConfig(dir_.path()));
  Connect();
  EXPECT_FALSE(client_->GetFilter("seen:2026-11-29")->has_expire_at());
  EXPECT_THAT(Lookup("seen:2026-11-29", {"a", "b"}), ElementsAre(true, true));
}

// From expire_at on the filter is gone for clients; the server's timer
// then drops it with a logged drop (its file removed), so a restart does
// not bring it back. Keys written before stay with it.
TEST_F(PersistenceTest, AnExpiredFilterIsMissingAtOnceAndDroppedForGoodByTheTimer) {
  CreateFilter("daily", 1000);
  CreateFilter("kept", 1000);
  Insert("daily", {"a"});
  ASSERT_TRUE(client_->Snapshot("", false, absl::Seconds(30)).ok());
  ASSERT_TRUE(fs::exists(SnapshotFile("daily")));
  v1::SetFilterExpiryRequest req;
  req.set_name("daily");
  // Far enough ahead that the lookup below comes before it on a loaded
  // machine (the sanitizers' CI run).
  *req.mutable_expire_at() = InMs(3'000);
  ASSERT_TRUE(client_->SetFilterExpiry(req).ok());
  EXPECT_THAT(Lookup("daily", {"a"}), ElementsAre(true));
  ASSERT_TRUE(WaitFor([&] { return !client_->GetFilter("daily").ok(); }));
  absl::StatusOr<v1::FilterInfo> gone = client_->GetFilter("daily");
  EXPECT_EQ(gone.status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(client_->Insert("daily", {"b"}).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(client_->ListFilters()->size(), 1u);
  // Dropped (logged) within a few timer periods, the file with it.
  ASSERT_TRUE(WaitFor([&] { return !server_->registry().Get("daily").ok(); }, absl::Seconds(2)));
  ASSERT_TRUE(WaitFor([&] { return !fs::exists(SnapshotFile("daily")); }, absl::Seconds(2)));
  Restart();
  EXPECT_EQ(client_->GetFilter("daily").status().code(), absl::StatusCode::kNotFound);
  EXPECT_FALSE(server_->registry().Get("daily").ok());
  EXPECT_TRUE(client_->GetFilter("kept").ok());
}

// A filter whose time passed while the server was down is loaded (the
// replay never drops by the clock), invisible, and dropped with a logged
// drop right after start; the restart after that does not load it.
TEST_F(PersistenceTest, AFilterThatExpiredWhileTheServerWasDownIsDroppedPromptlyAfterStart) {
  v1::CreateFilterRequest create;
  create.set_name("short");
  create.set_capacity(1000);
  *create.mutable_expire_at() = InMs(2'000);
  auto made = client_->CreateFilter(create);
  ASSERT_TRUE(made.ok()) << made.status();
  EXPECT_EQ(Ms(made->filter().expire_at()), Ms(create.expire_at()));
  Insert("short", {"x"});
  server_->Shutdown(absl::Seconds(5));
  // Down until past its time.
  absl::SleepFor(absl::FromUnixMillis(Ms(create.expire_at())) - absl::Now() +
                 absl::Milliseconds(100));
  const absl::Time start = absl::Now();
  StartServer(testing::TestConfig(dir_.path()));
  Connect();
  EXPECT_EQ(client_->GetFilter("short").status().code(), absl::StatusCode::kNotFound);
  ASSERT_TRUE(WaitFor([&] { return !server_->registry().Get("short").ok(); }, absl::Seconds(5)));
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
  Restart();
  EXPECT_FALSE(server_->registry().Get("short").ok());
}

// CreateFilter's expire_at must be in the future; SetFilterExpiry's must
// be a time from 1970 to 9999. A time not in the future drops the filter
// now (as Redis's EXPIRE with one in the past deletes the key).
TEST_F(PersistenceTest, ExpiryTimesAreCheckedAndOneInThePastDropsTheFilterNow) {
  v1::CreateFilterRequest create;
  create.set_name("f");
  create.set_capacity(1000);
  *create.mutable_expire_at() = InMs(-1000);
  auto refused = client_->CreateFilter(create);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(refused.status().message()), HasSubstr("expire_at"));
  EXPECT_THAT(std::string(refused.status().message()), HasSubstr("is not in the future"));
  CreateFilter("f", 1000);
  v1::SetFilterExpiryRequest req;
  req.set_name("f");
  req.mutable_expire_at()->set_seconds(int64_t{253402300800});  // The year 10000.
  auto late = client_->SetFilterExpiry(req);
  EXPECT_EQ(late.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(late.status().message()), HasSubstr("9999-12-31T23:59:59.999Z"));
  req.mutable_expire_at()->set_seconds(-5);
  EXPECT_EQ(client_->SetFilterExpiry(req).status().code(), absl::StatusCode::kInvalidArgument);
  v1::SetFilterExpiryRequest clear_nx;
  clear_nx.set_name("f");
  clear_nx.set_condition(v1::SetFilterExpiryRequest::IF_NONE);
  EXPECT_EQ(client_->SetFilterExpiry(clear_nx).status().code(), absl::StatusCode::kInvalidArgument);
  v1::SetFilterExpiryRequest missing;
  missing.set_name("nope");
  *missing.mutable_expire_at() = InMs(1000);
  EXPECT_EQ(client_->SetFilterExpiry(missing).status().code(), absl::StatusCode::kNotFound);

  *req.mutable_expire_at() = InMs(-1);
  auto dropped = client_->SetFilterExpiry(req);
  ASSERT_TRUE(dropped.ok()) << dropped.status();
  EXPECT_TRUE(dropped->changed());
  EXPECT_TRUE(dropped->dropped());
  EXPECT_FALSE(server_->registry().Get("f").ok());
  Restart();
  EXPECT_FALSE(server_->registry().Get("f").ok());
}

// Redis 7's NX, XX, GT and LT (no expiry counts as infinitely late).
TEST_F(PersistenceTest, ExpiryConditionsFollowRedisSevenNxXxGtLt) {
  CreateFilter("f", 1000);
  using R = v1::SetFilterExpiryRequest;
  auto set = [&](int64_t ms, R::Condition c) {
    R req;
    req.set_name("f");
    *req.mutable_expire_at() = InMs(ms);
    req.set_condition(c);
    auto r = client_->SetFilterExpiry(req);
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() && r->changed();
  };
  EXPECT_FALSE(set(100'000, R::IF_SET));      // XX: none yet.
  EXPECT_FALSE(set(100'000, R::IF_LATER));    // GT: none is infinitely late.
  EXPECT_TRUE(set(100'000, R::IF_NONE));      // NX.
  EXPECT_FALSE(set(200'000, R::IF_NONE));     // NX: has one.
  EXPECT_FALSE(set(50'000, R::IF_LATER));     // GT: earlier.
  EXPECT_TRUE(set(200'000, R::IF_LATER));     // GT: later.
  EXPECT_FALSE(set(300'000, R::IF_EARLIER));  // LT: later.
  EXPECT_TRUE(set(150'000, R::IF_EARLIER));   // LT: earlier.
  EXPECT_TRUE(set(400'000, R::IF_SET));       // XX.
  EXPECT_TRUE(set(400'000, R::ALWAYS));
}

// The expiry timer's check with a fake clock (the registry's): nothing is
// dropped before expire_at, the filter is missing from expire_at on, and
// one check starts exactly one logged drop of it.
TEST_F(PersistenceTest, TheExpiryCheckDropsAFilterExactlyAtItsTimeOnAFakeClock) {
  server_->service().StopExpiry();  // Only the test's checks run.
  auto fake = std::make_shared<std::atomic<int64_t>>(absl::ToUnixMillis(absl::Now()));
  server_->registry().SetClock([fake] { return fake->load(); });
  v1::CreateFilterRequest create;
  create.set_name("timed");
  create.set_capacity(1000);
  const int64_t at = fake->load() + 1000;
  create.mutable_expire_at()->set_seconds(at / 1000);
  create.mutable_expire_at()->set_nanos(static_cast<int32_t>(at % 1000) * 1'000'000);
  ASSERT_TRUE(client_->CreateFilter(create).ok());
  CreateFilter("other", 1000);
  EXPECT_EQ(server_->service().DropExpiredNow(), 0u);
  fake->fetch_add(999);
  EXPECT_EQ(server_->service().DropExpiredNow(), 0u);
  EXPECT_TRUE(client_->GetFilter("timed").ok());
  fake->fetch_add(1);  // At expire_at.
  EXPECT_EQ(client_->GetFilter("timed").status().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(server_->registry().Get("timed").ok());  // Not dropped until a check.
  EXPECT_EQ(server_->service().DropExpiredNow(), 1u);
  ASSERT_TRUE(WaitFor([&] { return !server_->registry().Get("timed").ok(); }));
  EXPECT_EQ(server_->service().DropExpiredNow(), 0u);
  EXPECT_TRUE(server_->registry().Get("other").ok());
  server_->registry().SetClock(nullptr);
  Restart();
  EXPECT_FALSE(server_->registry().Get("timed").ok());
  EXPECT_TRUE(server_->registry().Get("other").ok());
}

// CreateFilter of an expired filter's name: the old one's logged drop,
// then a new filter (as Redis's lazy expiry): no key of the old one.
TEST_F(PersistenceTest, CreatingAnExpiredFiltersNameDropsItFirstAndMakesANewOne) {
  v1::CreateFilterRequest create;
  create.set_name("daily");
  create.set_capacity(1000);
  create.set_seed(99);
  server_->service().StopExpiry();  // So that the CreateFilter drops it.
  *create.mutable_expire_at() = InMs(2'000);
  ASSERT_TRUE(client_->CreateFilter(create).ok());
  Insert("daily", {"old"});
  const uint64_t old_id = server_->registry().Get("daily").value()->id();
  absl::SleepFor(absl::FromUnixMillis(Ms(create.expire_at())) - absl::Now() +
                 absl::Milliseconds(50));
  ASSERT_TRUE(server_->registry().Get("daily").ok());  // Expired, not dropped.
  create.clear_expire_at();
  create.set_if_not_exists(true);
  auto made = client_->CreateFilter(create);
  ASSERT_TRUE(made.ok()) << made.status();
  EXPECT_TRUE(made->created());
  EXPECT_FALSE(made->filter().has_expire_at());
  EXPECT_EQ(made->filter().items(), 0u);
  EXPECT_NE(server_->registry().Get("daily").value()->id(), old_id);
  Insert("daily", {"new"});
  Restart();
  EXPECT_EQ(client_->GetFilter("daily")->items(), 1u);
  EXPECT_FALSE(client_->GetFilter("daily")->has_expire_at());
}

// A snapshot file present at start-up whose filter the log drops later (a
// backup copied back after the drop) used to be deleted by the replay
// without a word: it goes to quarantine/, and a filter of the name created
// after the drop is served.
TEST_F(PersistenceTest, ASnapshotOfAFilterTheLogDropsLaterIsQuarantinedNotDeleted) {
  CreateFilter("users", 1000);
  CreateFilter("kept", 1000);
  Insert("users", Keys(0, 50));
  Insert("kept", Keys(0, 50));
  ASSERT_TRUE(client_->Snapshot("", false, absl::Seconds(30)).ok());
  const std::string copy = dir_.path() + "/../users.cuckoo.copy";
  fs::copy_file(SnapshotFile("users"), copy, fs::copy_options::overwrite_existing);
  ASSERT_TRUE(client_->DropFilter("users").ok());
  CreateFilter("users", 2000);  // A new filter of the name, after the drop.
  Insert("users", Keys(1, 10));
  server_->Shutdown(absl::Seconds(5));
  server_.reset();
  // The old file back in place of the new one's; and the new filter's
  // history is all in the log (its file removed).
  fs::remove(SnapshotFile("users"));
  fs::rename(copy, SnapshotFile("users"));
  StartServer(testing::TestConfig(dir_.path()));
  Connect();
  EXPECT_EQ(server_->loaded().loaded, 2u);
  EXPECT_EQ(server_->loaded().quarantined, 0u) << "no bad file";
  EXPECT_EQ(server_->loaded().dropped_by_log, 1u);
  EXPECT_EQ(server_->loaded().served, 2u);
  std::vector<std::string> q = FilesIn(dir_.path() + "/quarantine");
  ASSERT_EQ(q.size(), 1u);
  EXPECT_THAT(q[0], ::testing::StartsWith(SnapshotFileName("users") + "."));
  EXPECT_THAT(Lookup("users", Keys(1, 10)), ::testing::Each(true));
  auto info = client_->GetFilter("users");
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->items(), 10u);
  EXPECT_THAT(Lookup("kept", Keys(0, 50)), ::testing::Each(true));
}

TEST_F(PersistenceTest, DropOfFilterNeverSnapshottedWorks) {
  CreateFilter("x", 1000);
  EXPECT_TRUE(client_->DropFilter("x").ok());
  EXPECT_EQ(client_->DropFilter("x").status().code(), absl::StatusCode::kNotFound);
}

// The log still holds "bad"'s whole history (its creation on), so the
// filter comes back from it, exactly; the damaged file is kept aside.
TEST_F(PersistenceTest, CorruptSnapshotIsQuarantinedAndItsFilterRecoveredFromTheLog) {
  CreateFilter("good", 1000);
  CreateFilter("bad", 1000);
  Insert("good", {"g"});
  Insert("bad", {"b"});
  server_->Shutdown(absl::Seconds(5));
  {
    std::fstream f(SnapshotFile("bad"), std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(testing::kSnapshotWritten.header + 44);  // In shard 0's section.
    f.put('\x55');
  }
  StartServer(testing::TestConfig(dir_.path()));
  Connect();
  EXPECT_EQ(server_->loaded().loaded, 1u);
  EXPECT_EQ(server_->loaded().quarantined, 1u);
  EXPECT_THAT(Lookup("good", {"g"}), ElementsAre(true));
  EXPECT_THAT(Lookup("bad", {"b"}), ElementsAre(true));
  EXPECT_FALSE(fs::exists(SnapshotFile("bad")));
  std::vector<std::string> q = FilesIn(dir_.path() + "/quarantine");
  ASSERT_EQ(q.size(), 1u);
  EXPECT_THAT(q[0], ::testing::StartsWith(SnapshotFileName("bad") + "."));
}

// The write-ahead log's create record carries grow_on_repeats: a filter
// replayed from the log alone (its snapshot gone) is made with the option
// and its repeated inserts grow it again, as they did live.
TEST_F(PersistenceTest, AFilterGrowingForRepeatsIsReplayedFromTheLogWithTheOption) {
  v1::CreateFilterRequest req;
  req.set_name("repeats");
  req.set_capacity(1000);
  req.set_growth_factor(2);
  req.set_max_capacity(1000 * 1024);
  req.set_grow_on_repeats(true);
  req.set_seed(99);
  ASSERT_TRUE(client_->CreateFilter(req).ok());
  const std::vector<std::string> same(40, "seen");
  auto inserted = client_->Insert("repeats", Views(same));
  ASSERT_TRUE(inserted.ok()) << inserted.status();
  for (v1::InsertResult r : *inserted) ASSERT_EQ(r, v1::INSERT_RESULT_INSERTED);
  const v1::FilterInfo live = *client_->GetFilter("repeats");
  ASSERT_EQ(live.generations_size(), 5);
  server_->Shutdown(absl::Seconds(5));
  ASSERT_TRUE(fs::remove(SnapshotFile("repeats")));
  StartServer(testing::TestConfig(dir_.path()));
  Connect();
  absl::StatusOr<v1::FilterInfo> replayed = client_->GetFilter("repeats");
  ASSERT_TRUE(replayed.ok()) << replayed.status();
  EXPECT_TRUE(replayed->grow_on_repeats());
  EXPECT_EQ(replayed->items(), 40u);
  EXPECT_EQ(replayed->generations_size(), 5);
  EXPECT_EQ(replayed->memory_bytes(), live.memory_bytes());
  const std::vector<std::string_view> one = {"seen"};
  EXPECT_THAT(*client_->Count("repeats", one), ElementsAre(40u));
  EXPECT_THAT(*client_->Insert("repeats", one), ElementsAre(v1::INSERT_RESULT_INSERTED));
  EXPECT_THAT(*client_->Count("repeats", one), ElementsAre(41u));
}

// Without a log that covers it (here: the log moved aside, as an operator
// starting from snapshots alone would), a quarantined filter is gone and its
// name free.
TEST_F(PersistenceTest, CorruptSnapshotWithoutALogIsQuarantinedAndTheOthersServe) {
  CreateFilter("good", 1000);
  CreateFilter("bad", 1000);
  Insert("good", {"g"});
  Insert("bad", {"b"});
  server_->Shutdown(absl::Seconds(5));
  {
    std::fstream f(SnapshotFile("bad"), std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(testing::kSnapshotWritten.header + 44);  // In shard 0's section.
    f.put('\x55');
  }
  server_.reset();
  fs::rename(dir_.path() + "/wal", dir_.path() + "/wal.aside");
  StartServer(testing::TestConfig(dir_.path()));
  Connect();
  EXPECT_EQ(server_->loaded().quarantined, 1u);
  EXPECT_THAT(Lookup("good", {"g"}), ElementsAre(true));
  EXPECT_EQ(client_->GetFilter("bad").status().code(), absl::StatusCode::kNotFound);
  CreateFilter("bad", 1000);  // The name is free again.
}

TEST_F(PersistenceTest, FilesThatAreNotSnapshotsAreHandledAtStartUp) {
  server_->Shutdown(absl::Seconds(5));
  std::ofstream(dir_.path() + "/.x.cuckoo.tmp") << "unfinished";  // A crash mid-write.
  std::ofstream(dir_.path() + "/notes.txt") << "not ours";
  std::ofstream(dir_.path() + "/-bad-name.cuckoo") << "x";
  std::ofstream(dir_.path() + "/empty.cuckoo");
  StartServer(testing::TestConfig(dir_.path()));
  EXPECT_EQ(server_->loaded().loaded, 0u);
  EXPECT_EQ(server_->loaded().quarantined, 2u);
  EXPECT_THAT(FilesIn(dir_.path()),
              ElementsAre("IDENTITY", "LOCK", "notes.txt", "quarantine", "wal"));
}

TEST_F(PersistenceTest, SnapshotOverTheMemoryBudgetStopsStartUpAndStaysInPlace) {
  CreateFilter("big", 100'000);
  server_->Shutdown(absl::Seconds(5));
  server_.reset();
  server::ServerConfig small = testing::TestConfig(dir_.path());
  small.memory_budget_bytes = 4096;
  auto s = server::CuckooServer::Start(small);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(s.status().message(), HasSubstr(SnapshotFile("big")));
  EXPECT_THAT(s.status().message(), HasSubstr("--memory-budget"));
  EXPECT_TRUE(fs::exists(SnapshotFile("big")));
}

// A growing filter may pass the budget (growth is never refused while a
// logged write applies); the next start must still load it, as a replay of
// its log would: its first generation is admitted, its grown tables charged.
TEST_F(PersistenceTest, AFilterGrownPastTheBudgetLoadsAtTheNextStart) {
  server::ServerConfig config = testing::TestConfig(dir_.path());
  config.memory_budget_bytes = 256 << 10;
  Restart(config);
  v1::CreateFilterRequest create;
  create.set_name("grown");
  create.set_capacity(1000);
  create.set_growth_factor(2);
  ASSERT_TRUE(client_->CreateFilter(create).ok());
  std::vector<std::string> acked;
  for (uint64_t round = 0; round < 200; ++round) {
    std::vector<std::string> keys = Keys(round + 10, 1000);
    std::vector<std::string_view> views(keys.begin(), keys.end());
    auto r = client_->Insert("grown", views);
    if (!r.ok()) {
      ASSERT_EQ(r.status().code(), absl::StatusCode::kResourceExhausted) << r.status();
      break;
    }
    acked.insert(acked.end(), keys.begin(), keys.end());
  }
  const uint64_t used = client_->GetFilter("grown")->memory_bytes();
  ASSERT_GE(used, config.memory_budget_bytes);  // Grown past the budget.
  Restart(config);                              // The final snapshot holds every generation.
  EXPECT_EQ(server_->loaded().loaded, 1u);
  EXPECT_EQ(client_->GetFilter("grown")->memory_bytes(), used);
  EXPECT_EQ(Lookup("grown", acked), std::vector<bool>(acked.size(), true));
}

TEST_F(PersistenceTest, PeriodicSnapshotWritesChangedFilters) {
  server::ServerConfig config = testing::TestConfig(dir_.path());
  config.snapshot_interval = absl::Seconds(1);
  StartServer(config);
  Connect();
  CreateFilter("p", 1000);
  Insert("p", Keys(0, 50));
  const absl::Time deadline = absl::Now() + absl::Seconds(20);
  while (client_->GetFilter("p")->has_unsnapshotted_changes() && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(50));
  }
  EXPECT_FALSE(client_->GetFilter("p")->has_unsnapshotted_changes());
  auto loaded = ReadSnapshotFile(SnapshotFile("p"), "p");
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(loaded->items, 50u);
}

TEST_F(PersistenceTest, ServerInfoShowsDataDirAndInterval) {
  auto info = client_->ServerInfo();
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->data_dir(), dir_.path());
  EXPECT_EQ(info->snapshot_interval().seconds(),
            absl::ToInt64Seconds(testing::TestConfig(dir_.path()).snapshot_interval));
}

TEST_F(PersistenceTest, FinalSnapshotFailureIsReported) {
  CreateFilter("f", 1000);
  fs::create_directory(SnapshotTempPath(dir_.path(), "f"));
  server_->Shutdown(absl::Seconds(5));
  EXPECT_FALSE(server_->final_snapshot_status().ok());
  EXPECT_THAT(server_->final_snapshot_status().message(),
              HasSubstr(SnapshotTempPath(dir_.path(), "f")));
}

TEST_F(PersistenceTest, SnapshotsRunWhileClientsKeepInserting) {
  CreateFilter("busy", 400'000, 8);
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> inserted{0};
  std::thread writer([&] {
    auto c = std::make_unique<client::Client>(channel_);
    for (uint64_t batch = 0; !stop.load() && batch < 300; ++batch) {
      std::vector<std::string> keys;
      for (uint64_t i = 0; i < 1000; ++i) keys.push_back(Key(5, batch * 1000 + i));
      ASSERT_TRUE(c->Insert("busy", Views(keys)).ok());
      inserted.store((batch + 1) * 1000);
    }
  });
  // Each snapshot holds at least what was inserted before it started.
  for (int i = 0; i < 5; ++i) {
    const uint64_t before = inserted.load();
    auto snap = client_->Snapshot("busy", false, absl::Seconds(30));
    ASSERT_TRUE(snap.ok()) << snap.status();
    auto loaded = ReadSnapshotFile(SnapshotFile("busy"), "busy");
    ASSERT_TRUE(loaded.ok()) << loaded.status();
    EXPECT_GE(loaded->items, before);
    std::vector<std::string> keys;
    for (uint64_t k = 0; k < before; ++k) keys.push_back(Key(5, k));
    for (const std::string& k : keys) ASSERT_TRUE(loaded->filter->MayContain(k)) << k;
  }
  stop = true;
  writer.join();
}

// --- Start-up: what a file that cannot be loaded does.

// A rollback used to quarantine every snapshot a newer build had written
// (unknown version, table kind or hash: DATA_LOSS), start without them, and
// let clients recreate them empty.
TEST_F(PersistenceTest, ASnapshotFromANewerBuildStopsStartUpNamingItAndStaysInPlace) {
  CreateFilter("newer", 1000);
  CreateFilter("kind", 1000);
  Insert("newer", {"n"});
  server_->Shutdown(absl::Seconds(5));
  server_.reset();
  const std::vector<uint8_t> good = ReadBytes(SnapshotFile("newer"));

  // The next format version, whose bytes 16..47 name the build that wrote it.
  std::vector<uint8_t> v3 = good;
  v3[8] = static_cast<uint8_t>(kSnapshotFormatVersion + 1);
  std::memset(v3.data() + kSnapshotWriterOffset, 0, kSnapshotWriterBytes);
  std::memcpy(v3.data() + kSnapshotWriterOffset, "cuckood 0.4.1", 13);
  WriteBytes(SnapshotFile("newer"), v3);
  auto s = server::CuckooServer::Start(testing::TestConfig(dir_.path()));
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), absl::StatusCode::kFailedPrecondition) << s.status();
  EXPECT_THAT(s.status().message(), HasSubstr(SnapshotFile("newer")));
  EXPECT_THAT(s.status().message(), HasSubstr("written by cuckood 0.4.1"));
  EXPECT_EQ(ReadBytes(SnapshotFile("newer")), v3) << "left in place, unchanged";
  EXPECT_FALSE(fs::exists(dir_.path() + "/quarantine"));

  // A file of a table kind this build does not know.
  WriteBytes(SnapshotFile("newer"), good);
  std::vector<uint8_t> kind = ReadBytes(SnapshotFile("kind"));
  kind[testing::kSnapshotWritten.at(testing::kSnapshotTableKind)] = 7;
  testing::ResealSnapshot(kind);
  WriteBytes(SnapshotFile("kind"), kind);
  s = server::CuckooServer::Start(testing::TestConfig(dir_.path()));
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), absl::StatusCode::kFailedPrecondition) << s.status();
  EXPECT_THAT(s.status().message(), HasSubstr("table kind 7 is unknown"));
  EXPECT_TRUE(fs::exists(SnapshotFile("kind")));

  // With the file moved out, as the message says, the server starts.
  fs::rename(SnapshotFile("kind"), dir_.path() + "/../kind.cuckoo.saved");
  StartServer(testing::TestConfig(dir_.path()));
  Connect();
  EXPECT_THAT(Lookup("newer", {"n"}), ElementsAre(true));
  fs::remove(dir_.path() + "/../kind.cuckoo.saved");
}

// A failed move to quarantine/ used to leave the bad file where it was, to
// be overwritten by the next snapshot of a new filter of the same name.
TEST_F(PersistenceTest, ABadSnapshotThatCannotBeQuarantinedStopsStartUp) {
  CreateFilter("bad", 1000);
  server_->Shutdown(absl::Seconds(5));
  server_.reset();
  std::vector<uint8_t> bad = ReadBytes(SnapshotFile("bad"));
  bad[testing::kSnapshotWritten.header + 44] ^= 0x55;  // In shard 0's section.
  WriteBytes(SnapshotFile("bad"), bad);
  std::ofstream(dir_.path() + "/quarantine") << "a file where the directory should be";
  auto s = server::CuckooServer::Start(testing::TestConfig(dir_.path()));
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), absl::StatusCode::kInternal) << s.status();
  EXPECT_THAT(s.status().message(), HasSubstr("could not be moved to"));
  EXPECT_THAT(s.status().message(), HasSubstr("shard 0 checksum mismatch"));
  EXPECT_EQ(ReadBytes(SnapshotFile("bad")), bad);
}

// open() of a FIFO waits for a writer: start-up hung for ever.
TEST_F(PersistenceTest, AFifoNamedLikeASnapshotIsQuarantinedInsteadOfHangingStartUp) {
  CreateFilter("real", 1000);
  Insert("real", {"r"});
  server_->Shutdown(absl::Seconds(5));
  server_.reset();
  ASSERT_EQ(::mkfifo((dir_.path() + "/pipe.cuckoo").c_str(), 0644), 0);
  fs::create_directory(dir_.path() + "/dir.cuckoo");
  auto started = std::async(std::launch::async, [&] {
    return server::CuckooServer::Start(testing::TestConfig(dir_.path()));
  });
  ASSERT_EQ(started.wait_for(std::chrono::seconds(20)), std::future_status::ready)
      << "start-up hangs";
  auto s = started.get();
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ((*s)->loaded().loaded, 1u);
  EXPECT_EQ((*s)->loaded().quarantined, 2u);
  EXPECT_FALSE(fs::exists(dir_.path() + "/pipe.cuckoo"));
  EXPECT_FALSE(fs::exists(dir_.path() + "/dir.cuckoo"));
}

// --- Drop, create and snapshot of one name.

// Blocks file operations (snapshot writes, drops) until released: a slow
// disk, or a long snapshot.
class Gate {
 public:
  void Close() {
    std::lock_guard<std::mutex> lock(mu_);
    open_ = false;
  }
  void Open() {
    std::lock_guard<std::mutex> lock(mu_);
    open_ = true;
    cv_.notify_all();
  }
  void Pass(absl::string_view op, absl::string_view name) {
    std::unique_lock<std::mutex> lock(mu_);
    ops_.push_back(absl::StrCat(op, " ", name));
    ++waiting_;
    cv_.notify_all();
    cv_.wait(lock, [&] { return open_; });
    --waiting_;
  }
  // Waits until someone is held at the gate.
  void WaitForSomeoneWaiting() {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return waiting_ > 0; });
  }
  std::vector<std::string> ops() {
    std::lock_guard<std::mutex> lock(mu_);
    return ops_;
  }
  server::PersistenceOptions Hooks() {
    server::PersistenceOptions o;
    o.before_file_operation = [this](absl::string_view op, absl::string_view name) {
      Pass(op, name);
    };
    return o;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool open_ = true;
  int waiting_ = 0;
  std::vector<std::string> ops_;
};

// DropFilter used to wait for a snapshot of its filter on a gRPC thread: a
// few such calls took every thread, and nothing was answered, the health
// check included, until the snapshot was done.
TEST_F(PersistenceTest, DropsWaitingBehindALongSnapshotStarveNoOtherCall) {
  Gate gate;
  StartServer(testing::TestConfig(dir_.path()), gate.Hooks());
  Connect();
  CreateFilter("a", 1000);
  gate.Close();
  auto snapshot = std::async(std::launch::async,
                             [&] { return client_->Snapshot("a", false, absl::Seconds(60)); });
  gate.WaitForSomeoneWaiting();
  std::vector<std::future<absl::StatusOr<uint64_t>>> drops;
  for (int i = 0; i < 32; ++i) {
    drops.push_back(std::async(std::launch::async, [&] {
      return std::make_unique<client::Client>(channel_)->DropFilter("a");
    }));
  }
  // While the snapshot and 32 drops wait, everything else is answered.
  client::Client other(channel_);
  auto health = grpc::health::v1::Health::NewStub(channel_);
  for (int i = 0; i < 20; ++i) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(2));
    grpc::health::v1::HealthCheckResponse resp;
    ASSERT_TRUE(health->Check(&ctx, {}, &resp).ok()) << "health check starved";
    ASSERT_TRUE(other.ServerInfo().ok());
    ASSERT_TRUE(other.GetFilter("a").ok());
  }
  gate.Open();
  ASSERT_TRUE(snapshot.get().ok());
  int dropped = 0, not_found = 0;
  for (auto& d : drops) {
    absl::StatusOr<uint64_t> r = d.get();
    if (r.ok()) {
      ++dropped;
    } else {
      EXPECT_EQ(r.status().code(), absl::StatusCode::kNotFound) << r.status();
      ++not_found;
    }
  }
  EXPECT_EQ(dropped, 1);
  EXPECT_EQ(not_found, 31);
  EXPECT_FALSE(fs::exists(SnapshotFile("a")));
}

TEST_F(PersistenceTest, SnapshotRequestsOfOneFilterWaitingTogetherAreWrittenOnce) {
  Gate gate;
  StartServer(testing::TestConfig(dir_.path()), gate.Hooks());
  Connect();
  CreateFilter("a", 1000);
  CreateFilter("b", 1000);
  gate.Close();
  auto first = std::async(std::launch::async,
                          [&] { return client_->Snapshot("b", false, absl::Seconds(60)); });
  gate.WaitForSomeoneWaiting();
  std::vector<std::future<absl::StatusOr<v1::SnapshotResponse>>> waiting;
  for (int i = 0; i < 20; ++i) {
    waiting.push_back(std::async(std::launch::async, [&] {
      return std::make_unique<client::Client>(channel_)->Snapshot("a", false, absl::Seconds(60));
    }));
  }
  absl::SleepFor(absl::Milliseconds(500));  // All 20 reach the queue.
  gate.Open();
  ASSERT_TRUE(first.get().ok());
  for (auto& w : waiting) {
    auto r = w.get();
    ASSERT_TRUE(r.ok()) << r.status();
    ASSERT_EQ(r->files_size(), 1);
    EXPECT_EQ(r->files(0).filter(), "a");
  }
  const std::vector<std::string> ops = gate.ops();
  EXPECT_EQ(std::count(ops.begin(), ops.end(), "write a"), 1) << ::testing::PrintToString(ops);
}

TEST_F(PersistenceTest, TheSnapshotAndDropQueueIsBoundedAndShutdownAnswersWhatWaits) {
  Gate gate;
  server::ServerConfig config = testing::TestConfig(dir_.path());
  config.max_filters = 70;
  StartServer(config, gate.Hooks());
  Connect();
  CreateFilter("a", 1000);
  for (int i = 0; i <= 64; ++i) CreateFilter("q" + std::to_string(i), 100);
  gate.Close();
  auto running = std::async(std::launch::async,
                            [&] { return client_->Snapshot("a", false, absl::Seconds(60)); });
  gate.WaitForSomeoneWaiting();
  // 64 waiting drops fill the queue.
  std::vector<std::future<absl::StatusOr<uint64_t>>> queued;
  for (int i = 0; i < 64; ++i) {
    queued.push_back(std::async(std::launch::async, [&, i] {
      return std::make_unique<client::Client>(channel_)->DropFilter("q" + std::to_string(i));
    }));
  }
  absl::SleepFor(absl::Milliseconds(500));
  auto over = client_->DropFilter("q64");
  EXPECT_EQ(over.status().code(), absl::StatusCode::kResourceExhausted) << over.status();
  EXPECT_THAT(over.status().message(), HasSubstr("64 snapshot and drop requests are waiting"));
  // Unknown names are answered without the queue: retries of drops that
  // finished already cannot fill it.
  EXPECT_EQ(client_->DropFilter("none").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(client_->Snapshot("none", false, absl::Seconds(5)).status().code(),
            absl::StatusCode::kNotFound);
  // Shutdown answers the waiting ones at once: UNAVAILABLE, while the
  // running snapshot still holds the gate.
  auto shutdown = std::async(std::launch::async, [&] { server_->Shutdown(absl::Seconds(30)); });
  for (auto& q : queued) {
    ASSERT_EQ(q.wait_for(std::chrono::seconds(10)), std::future_status::ready);
    absl::StatusOr<uint64_t> r = q.get();
    EXPECT_EQ(r.status().code(), absl::StatusCode::kUnavailable) << r.status();
  }
  gate.Open();
  EXPECT_TRUE(running.get().ok());
  shutdown.get();
}

// A retried DropFilter waiting in the queue used to drop whatever filter
// held the name when its turn came: a filter a client had created again
// after the first drop went too.
TEST_F(PersistenceTest, AStaleDropWaitingInTheQueueLeavesAFilterCreatedAgainUnderItsName) {
  std::mutex mu;
  std::condition_variable cv;
  int reached = 0, allowed = 0;  // Removals at the hook, and let through.
  server::PersistenceOptions hooks;
  hooks.before_file_operation = [&](absl::string_view op, absl::string_view) {
    if (op != "remove") return;
    std::unique_lock<std::mutex> lock(mu);
    const int me = ++reached;
    cv.notify_all();
    cv.wait(lock, [&] { return allowed >= me; });
  };
  auto wait_for = [&](int n) {
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return reached >= n; });
  };
  auto allow = [&](int n) {
    std::lock_guard<std::mutex> lock(mu);
    allowed = n;
    cv.notify_all();
  };
  StartServer(testing::TestConfig(dir_.path()), hooks);
  Connect();
  CreateFilter("a", 1000);
  auto first = std::async(std::launch::async, [&] {
    return std::make_unique<client::Client>(channel_)->DropFilter("a");
  });
  wait_for(1);
  auto retry = std::async(std::launch::async, [&] {
    return std::make_unique<client::Client>(channel_)->DropFilter("a");
  });
  absl::SleepFor(absl::Milliseconds(500));  // The retry is queued.
  allow(1);
  ASSERT_TRUE(first.get().ok());
  wait_for(2);  // The retry's turn; before it looks, the name is taken again.
  CreateFilter("a", 2000);
  allow(2);
  absl::StatusOr<uint64_t> stale = retry.get();
  EXPECT_EQ(stale.status().code(), absl::StatusCode::kNotFound) << stale.status();
  EXPECT_THAT(stale.status().message(), HasSubstr("dropped while this call waited"));
  auto info = client_->GetFilter("a");
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_GE(info->capacity(), 2000u);
}

// An exception on the persistence thread (std::bad_alloc, say) escaped its
// event loop and ended the process; the call was never answered.
TEST_F(PersistenceTest, ASnapshotOrDropThatThrowsIsAnsweredAndTheNextOneRuns) {
  std::atomic<int> throws{2};
  server::PersistenceOptions hooks;
  hooks.before_file_operation = [&](absl::string_view, absl::string_view) {
    if (throws.fetch_sub(1) > 0) throw std::bad_alloc();
  };
  StartServer(testing::TestConfig(dir_.path()), hooks);
  Connect();
  CreateFilter("a", 1000);
  auto snapshot = client_->Snapshot("a", false, absl::Seconds(10));
  EXPECT_EQ(snapshot.status().code(), absl::StatusCode::kResourceExhausted) << snapshot.status();
  auto drop = client_->DropFilter("a");
  EXPECT_EQ(drop.status().code(), absl::StatusCode::kResourceExhausted) << drop.status();
  EXPECT_TRUE(client_->Snapshot("a", false, absl::Seconds(10)).ok());
  EXPECT_TRUE(client_->DropFilter("a").ok());
}

// A failed directory fsync after the unlink left a live filter whose file
// was gone but whose record said it was on disk: never written again, it
// vanished at the next restart.
// The log's drop record decides: once it is on disk the filter is dropped,
// even if its snapshot file cannot be removed yet. The removal is retried
// (and the log not truncated past the drop until it succeeds); a restart
// replays the drop and removes the file.
TEST_F(PersistenceTest, ADropWhoseFileRemovalFailsIsStillDoneAndTheFileGoesLater) {
  std::atomic<bool> fail_sync{false};
  server::PersistenceOptions hooks;
  hooks.sync_directory = [&](absl::string_view dir) {
    if (fail_sync) return absl::InternalError(absl::StrCat("fsync directory ", dir, ": EIO"));
    return SyncSnapshotDirectory(dir);
  };
  StartServer(testing::TestConfig(dir_.path()), hooks);
  Connect();
  CreateFilter("gone", 1000);
  CreateFilter("kept", 1000);
  Insert("gone", Keys(0, 100));
  Insert("kept", Keys(0, 100));
  ASSERT_TRUE(client_->Snapshot("", false, absl::Seconds(30)).ok());
  fail_sync = true;
  ASSERT_TRUE(client_->DropFilter("gone").ok());
  EXPECT_EQ(client_->GetFilter("gone").status().code(), absl::StatusCode::kNotFound);
  // A snapshot (which truncates the log) while the removal still fails.
  ASSERT_TRUE(client_->Snapshot("kept", false, absl::Seconds(30)).ok());
  server_->Shutdown(absl::Seconds(5));
  server_.reset();
  // The file may be on disk still; the restart must not bring it back.
  StartServer(testing::TestConfig(dir_.path()));
  Connect();
  EXPECT_EQ(client_->GetFilter("gone").status().code(), absl::StatusCode::kNotFound);
  EXPECT_FALSE(fs::exists(SnapshotFile("gone")));
  EXPECT_THAT(Lookup("kept", Keys(0, 100)), ::testing::Each(true));
}

// Drops, creates and snapshots of one name from several threads, in every
// order: what is on disk always agrees with the registry, so a restart
// brings back exactly the filter that existed, with its keys, or nothing.
// (A stale drop could unlink the snapshot of a filter re-created under the
// same name, whose record still said "snapshotted".)
TEST_F(PersistenceTest, DropCreateAndSnapshotOfOneNameInAnyOrderKeepDiskAndRegistryAgreeing) {
  for (int round = 0; round < 20; ++round) {
    std::atomic<bool> stop{false};
    std::vector<std::thread> threads;
    threads.emplace_back([&] {  // Creates and fills "x".
      client::Client c(channel_);
      for (int i = 0; !stop; ++i) {
        v1::CreateFilterRequest req;
        req.set_name("x");
        req.set_capacity(1000);
        req.set_if_not_exists(true);
        req.set_seed(7);
        if (c.CreateFilter(req).ok()) (void)c.Insert("x", {Key(9, i)});
      }
    });
    for (int t = 0; t < 2; ++t) {
      threads.emplace_back([&] {  // Drops it, as clients retrying might.
        client::Client c(channel_);
        while (!stop) (void)c.DropFilter("x");
      });
    }
    threads.emplace_back([&] {  // Snapshots it.
      client::Client c(channel_);
      while (!stop) (void)c.Snapshot("x", false, absl::Seconds(30));
    });
    absl::SleepFor(absl::Milliseconds(100));
    stop = true;
    for (std::thread& t : threads) t.join();
    // Whatever the registry holds now is what a restart must bring back.
    auto before = client_->GetFilter("x");
    std::vector<bool> present;
    if (before.ok()) present = Lookup("x", Keys(9, 200));
    Restart();
    auto after = client_->GetFilter("x");
    ASSERT_EQ(after.ok(), before.ok()) << "round " << round << ": " << after.status();
    if (before.ok()) {
      EXPECT_EQ(after->items(), before->items()) << "round " << round;
      EXPECT_EQ(Lookup("x", Keys(9, 200)), present) << "round " << round;
    }
  }
}

// --- Identity: a data directory follows one log, and start-up refuses
// what belongs to another (a copied directory or file would otherwise be
// served as this log's filters).

std::string ReadText(const std::string& path) {
  std::ifstream in(path);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// The identity IDENTITY records ("" if none).
std::string NodeIdentity(const std::string& dir) {
  const std::string text = ReadText(dir + "/IDENTITY");
  const size_t at = text.find("identity node-");
  return at == std::string::npos ? "" : text.substr(at + 9, text.find('\n', at) - at - 9);
}

// A cluster replica's stream, known by name only (as at start-up, before
// NATS is reached).
class FakeStream : public server::ExternalLog {
 public:
  uint64_t AppliedPosition() const override { return 0; }
  std::string Identity() const override { return ""; }
  std::string Name() const override { return "stream TEST"; }
  bool AppliedDigest(uint64_t*, uint64_t*) const override { return false; }
  void Checkpointed(uint64_t) override {}
};

// LoadAll of `dir` as a cluster replica's.
absl::StatusOr<server::LoadSummary> LoadAsReplica(const std::string& dir) {
  FilterRegistry registry;
  FakeStream stream;
  server::Persistence p(&registry, dir);
  p.SetExternalLog(&stream);
  return p.LoadAll();
}

TEST_F(PersistenceTest, ANewDataDirectoryRecordsItsLogIdentityAndKeepsIt) {
  const std::string identity = NodeIdentity(dir_.path());
  ASSERT_EQ(identity.size(), 5u + 32u) << ReadText(dir_.path() + "/IDENTITY");
  EXPECT_EQ(identity.substr(0, 5), "node-");
  EXPECT_EQ(identity.find_first_not_of("0123456789abcdef", 5), std::string::npos) << identity;
  EXPECT_EQ(server_->loaded().log_identity, identity);
  CreateFilter("f", 1000);
  Insert("f", {"a"});
  Restart();
  EXPECT_EQ(NodeIdentity(dir_.path()), identity);
  EXPECT_THAT(Lookup("f", {"a"}), ElementsAre(true));
  // Another directory, another log.
  testing::TempDir other;
  FilterRegistry registry;
  server::Persistence p(&registry, other.path());
  ASSERT_TRUE(p.LoadAll().ok());
  EXPECT_NE(NodeIdentity(other.path()), identity);
  EXPECT_NE(NodeIdentity(other.path()), "");
}

// A directory of a cuckood before identities: its snapshots and log are
// the log's it now records.
TEST_F(PersistenceTest, ADataDirectoryWithoutIdentityIsAdoptedWithItsSnapshotsAndLog) {
  CreateFilter("snap", 1000);
  Insert("snap", {"in-snapshot"});
  ASSERT_TRUE(server_->persistence().SnapshotNow("", false).ok());
  Insert("snap", {"in-log"});
  const std::string before = NodeIdentity(dir_.path());
  server_->Shutdown(absl::Seconds(5));
  server_.reset();
  fs::remove(dir_.path() + "/IDENTITY");
  // As an older cuckood wrote it: format version 3, which records no log.
  const std::vector<uint8_t> v3 = testing::SnapshotToVersion3(ReadBytes(SnapshotFile("snap")));
  ASSERT_FALSE(v3.empty());
  WriteBytes(SnapshotFile("snap"), v3);
  StartServer(testing::TestConfig(dir_.path()));
  Connect();
  EXPECT_THAT(Lookup("snap", {"in-snapshot", "in-log"}), ElementsAre(true, true));
  const std::string adopted = NodeIdentity(dir_.path());
  EXPECT_NE(adopted, "");
  EXPECT_NE(adopted, before) << "made up anew";
  Restart();
  EXPECT_EQ(NodeIdentity(dir_.path()), adopted);
  EXPECT_THAT(Lookup("snap", {"in-snapshot", "in-log"}), ElementsAre(true, true));
}

TEST_F(PersistenceTest, ASingleNodeStartedOnAClusterReplicasDirectoryRefusesNamingItsStream) {
  server_->Shutdown(absl::Seconds(5));
  server_.reset();
  testing::TempDir replica;
  const std::string checkpoint =
      "cuckood cluster checkpoint v2\nidentity TEST@1795621557367345634\nresume_from 7\n";
  std::ofstream(replica.path() + "/CHECKPOINT") << checkpoint;
  auto s = server::CuckooServer::Start(testing::TestConfig(replica.path()));
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), absl::StatusCode::kFailedPrecondition) << s.status();
  EXPECT_THAT(s.status().message(), HasSubstr("follows the log TEST@1795621557367345634"));
  EXPECT_THAT(s.status().message(), HasSubstr(replica.path() + "/CHECKPOINT"));
  EXPECT_THAT(s.status().message(), HasSubstr("runs as a single node (no --nats)"));
  EXPECT_THAT(s.status().message(), HasSubstr("start it with --nats and that stream"));
  EXPECT_EQ(ReadText(replica.path() + "/CHECKPOINT"), checkpoint);
  EXPECT_THAT(FilesIn(replica.path()), ElementsAre("CHECKPOINT", "LOCK")) << "nothing written";
}

TEST_F(PersistenceTest, AReplicaStartedOnASingleNodesSnapshotsRefusesToStart) {
  CreateFilter("users", 1000);
  Insert("users", {"u"});
  const std::string node = NodeIdentity(dir_.path());
  server_->Shutdown(absl::Seconds(5));
  server_.reset();
  // The single node's *.cuckoo copied into an empty directory.
  testing::TempDir replica;
  fs::copy_file(SnapshotFile("users"), replica.path() + "/users.cuckoo");
  absl::StatusOr<server::LoadSummary> loaded = LoadAsReplica(replica.path());
  ASSERT_FALSE(loaded.ok());
  EXPECT_EQ(loaded.status().code(), absl::StatusCode::kFailedPrecondition) << loaded.status();
  EXPECT_THAT(loaded.status().message(),
              HasSubstr("data directory " + replica.path() + " holds snapshots (users.cuckoo)"));
  EXPECT_THAT(loaded.status().message(), HasSubstr("but no CHECKPOINT, and " + replica.path() +
                                                   "/users.cuckoo belongs to the log " + node));
  EXPECT_THAT(loaded.status().message(), HasSubstr("do not follow stream TEST"));
  EXPECT_THAT(loaded.status().message(),
              HasSubstr("start it with an empty --data-dir: it bootstraps from a peer replica"));
  EXPECT_THAT(FilesIn(replica.path()), ElementsAre("LOCK", "users.cuckoo")) << "nothing written";
  // With its IDENTITY too: named.
  fs::copy_file(dir_.path() + "/IDENTITY", replica.path() + "/IDENTITY");
  loaded = LoadAsReplica(replica.path());
  ASSERT_FALSE(loaded.ok());
  EXPECT_EQ(loaded.status().code(), absl::StatusCode::kFailedPrecondition) << loaded.status();
  EXPECT_THAT(loaded.status().message(),
              HasSubstr("belongs to a single node (" + replica.path() +
                        "/IDENTITY names its write-ahead log " + node + "), not to stream TEST"));
  EXPECT_THAT(loaded.status().message(),
              HasSubstr("start it with an empty --data-dir: it bootstraps from a peer replica"));
  // An empty directory is a new replica's: it bootstraps.
  testing::TempDir empty;
  loaded = LoadAsReplica(empty.path());
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(loaded->log_identity, "");
}

TEST_F(PersistenceTest, ASnapshotOfAnotherLogStopsStartUpAndOneRecordingNoneLoads) {
  CreateFilter("users", 1000);
  Insert("users", {"u"});
  const std::string node = NodeIdentity(dir_.path());
  const std::shared_ptr<CuckooFilter> f = *server_->registry().Get("users");
  server_->Shutdown(absl::Seconds(5));
  server_.reset();
  const std::string other = "node-" + std::string(32, 'f');
  for (const std::string& log : {other, std::string("TEST@1795621557367345634")}) {
    SCOPED_TRACE(log);
    ASSERT_TRUE(WriteSnapshotFile(*f, "users", dir_.path(), {.log_identity = log}).ok());
    const std::vector<uint8_t> copied = ReadBytes(SnapshotFile("users"));
    auto s = server::CuckooServer::Start(testing::TestConfig(dir_.path()));
    ASSERT_FALSE(s.ok());
    EXPECT_EQ(s.status().code(), absl::StatusCode::kFailedPrecondition) << s.status();
    EXPECT_THAT(s.status().message(),
                HasSubstr("snapshot " + SnapshotFile("users") + " belongs to the log " + log +
                          ", but data directory " + dir_.path() + " follows the log " + node +
                          " (IDENTITY)"));
    EXPECT_THAT(s.status().message(), HasSubstr("move it out of the data directory"));
    EXPECT_EQ(ReadBytes(SnapshotFile("users")), copied) << "left in place";
  }
  // A directory that records no log yet does not take a cluster's file.
  fs::rename(dir_.path() + "/IDENTITY", dir_.path() + "/../IDENTITY.saved");
  auto s = server::CuckooServer::Start(testing::TestConfig(dir_.path()));
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(s.status().message(),
              HasSubstr("snapshot " + SnapshotFile("users") +
                        " belongs to the log TEST@1795621557367345634 of a cluster, but this "
                        "cuckood runs as a single node"));
  EXPECT_FALSE(fs::exists(dir_.path() + "/IDENTITY"));
  fs::rename(dir_.path() + "/../IDENTITY.saved", dir_.path() + "/IDENTITY");
  // A file that records none (an older cuckood's) is the directory's.
  ASSERT_TRUE(WriteSnapshotFile(*f, "users", dir_.path()).ok());
  StartServer(testing::TestConfig(dir_.path()));
  Connect();
  EXPECT_THAT(Lookup("users", {"u"}), ElementsAre(true));
  EXPECT_EQ(NodeIdentity(dir_.path()), node);
}

// What WriteCheckpointLocked writes while the replica knows no digest of
// the log (upgraded from checkpoints of version 1): read back, not refused.
TEST_F(PersistenceTest, AReplicasCheckpointWithoutADigestLoads) {
  testing::TempDir replica;
  std::ofstream(replica.path() + "/CHECKPOINT")
      << "cuckood cluster checkpoint v2\nidentity TEST@1\nresume_from 3\n";
  absl::StatusOr<server::LoadSummary> loaded = LoadAsReplica(replica.path());
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(loaded->log_identity, "TEST@1");
  EXPECT_FALSE(loaded->has_log_digest);
  // A digest line cut short is damage, still refused.
  std::ofstream(replica.path() + "/CHECKPOINT")
      << "cuckood cluster checkpoint v2\nidentity TEST@1\nresume_from 3\ndigest 2\n";
  loaded = LoadAsReplica(replica.path());
  ASSERT_FALSE(loaded.ok());
  EXPECT_THAT(loaded.status().message(), HasSubstr("is not a cuckood checkpoint"));
}

TEST_F(PersistenceTest, AReplicaLoadsItsStreamsSnapshotsAndRefusesAnotherLogs) {
  CreateFilter("users", 1000);
  Insert("users", {"u"});
  const std::string node = NodeIdentity(dir_.path());
  const std::shared_ptr<CuckooFilter> f = *server_->registry().Get("users");
  testing::TempDir replica;
  const std::string file = SnapshotPath(replica.path(), "users");
  std::ofstream(replica.path() + "/CHECKPOINT")
      << "cuckood cluster checkpoint v2\nidentity TEST@1\nresume_from 3\ndigest 2 "
         "0123456789abcdef\n";
  // The stream's own.
  ASSERT_TRUE(WriteSnapshotFile(*f, "users", replica.path(), {.log_identity = "TEST@1"}).ok());
  absl::StatusOr<server::LoadSummary> loaded = LoadAsReplica(replica.path());
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(loaded->loaded, 1u);
  EXPECT_EQ(loaded->log_identity, "TEST@1");
  // Another incarnation of the stream's, a single node's.
  for (const std::string& log : {std::string("TEST@2"), node}) {
    SCOPED_TRACE(log);
    ASSERT_TRUE(WriteSnapshotFile(*f, "users", replica.path(), {.log_identity = log}).ok());
    loaded = LoadAsReplica(replica.path());
    ASSERT_FALSE(loaded.ok());
    EXPECT_EQ(loaded.status().code(), absl::StatusCode::kFailedPrecondition) << loaded.status();
    EXPECT_THAT(
        loaded.status().message(),
        HasSubstr("snapshot " + file + " belongs to the log " + log + ", but data directory " +
                  replica.path() + " follows the log TEST@1 (CHECKPOINT)"));
    EXPECT_THAT(loaded.status().message(),
                HasSubstr("start this replica with an empty --data-dir: it bootstraps from a "
                          "peer replica"));
  }
  // No checkpoint yet (a crash before the first): the stream's snapshots
  // are adopted, and the stream then checked against them.
  fs::remove(replica.path() + "/CHECKPOINT");
  ASSERT_TRUE(WriteSnapshotFile(*f, "users", replica.path(), {.log_identity = "TEST@1"}).ok());
  loaded = LoadAsReplica(replica.path());
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(loaded->log_identity, "TEST@1");
  EXPECT_EQ(loaded->resume_from, 1u);
}

// --- The write-ahead log's truncation: a filter, or a shard of one, that no
// write reaches any more must not hold the log back; else the log grows
// without bound while other filters (or shards) are written to.

class PersistenceLogTruncationTest : public PersistenceTest {
 protected:
  void SetUp() override {
    PersistenceTest::SetUp();
    StartServer(Config());
    Connect();
  }
  server::ServerConfig Config() {
    server::ServerConfig config = testing::TestConfig(dir_.path());
    config.wal_segment_bytes = server::kWalMinSegmentBytes;
    config.durability = server::Durability::kNone;
    return config;
  }
  // Keys of filter `name` that all fall in its shard `shard`.
  std::vector<std::string> KeysOfShard(const std::string& name, uint32_t shard, uint64_t stream,
                                       size_t n) {
    std::shared_ptr<CuckooFilter> f = *server_->registry().Get(name);
    const FilterShape& shape = f->shape();
    const HashLayout layout(shape.fingerprint_bits, shape.shard_bits, shape.buckets_per_shard);
    std::vector<std::string> keys;
    for (uint64_t i = 0; keys.size() < n; ++i) {
      std::string k = Key(stream, i);
      if (layout.Shard(f->Hash(k)) == shard) keys.push_back(std::move(k));
    }
    return keys;
  }
  // Inserts and deletes `keys` in filter `name`, over and over, until the
  // log holds about two more segments; then snapshots the changed filters
  // (as the periodic snapshot does), which truncates the log.
  void ChurnAndSnapshot(const std::string& name, const std::vector<std::string>& keys) {
    const uint64_t until = Log().bytes_written + 2 * server::kWalMinSegmentBytes;
    while (Log().bytes_written < until) {
      Insert(name, keys);
      ASSERT_TRUE(client_->Delete(name, Views(keys)).ok());
    }
    absl::StatusOr<server::SnapshotRun> run = server_->persistence().SnapshotNow("", true);
    ASSERT_TRUE(run.ok()) << run.status();
  }
  server::WalStats Log() { return server_->persistence().wal()->Stats(); }

  // Rounds of ChurnAndSnapshot: after each, the log's oldest segment kept
  // must be newer, and the log stays a few segments long.
  void ExpectTheLogKeepsBeingTruncated(const std::string& name,
                                       const std::vector<std::string>& keys) {
    uint64_t first_needed = 0;
    for (int round = 0; round < 6; ++round) {
      ChurnAndSnapshot(name, keys);
      const server::WalStats log = Log();
      if (round > 0) {
        EXPECT_GT(log.first_needed_segment_lsn, first_needed)
            << "round " << round << ": the log was not truncated further";
      }
      EXPECT_LE(log.segments, 5u) << "round " << round;
      first_needed = log.first_needed_segment_lsn;
    }
  }
};

TEST_F(PersistenceLogTruncationTest, AFilterNoWriteReachesAnyMoreHoldsNoLogBack) {
  CreateFilter("idle", 1000);
  Insert("idle", Keys(1, 10));
  CreateFilter("busy", 100'000, 1);
  Insert("busy", Keys(2, 100));
  ExpectTheLogKeepsBeingTruncated("busy", Keys(3, 1000));
  // The idle filter's old snapshot, and the log after it, still give every
  // filter back.
  Restart(Config());
  EXPECT_THAT(Lookup("idle", Keys(1, 10)), ::testing::Each(true));
  EXPECT_THAT(Lookup("busy", Keys(2, 100)), ::testing::Each(true));
  ExpectTheLogKeepsBeingTruncated("busy", Keys(3, 1000));
}

TEST_F(PersistenceLogTruncationTest, AShardNoWriteReachesAnyMoreHoldsNoLogBack) {
  CreateFilter("busy", 100'000, 8);
  Insert("busy", Keys(4, 1000));  // Every shard.
  ExpectTheLogKeepsBeingTruncated("busy", KeysOfShard("busy", 0, 5, 1000));
  Restart(Config());
  EXPECT_THAT(Lookup("busy", Keys(4, 1000)), ::testing::Each(true));
}

}  // namespace
}  // namespace cuckoo
