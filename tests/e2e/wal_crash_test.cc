// The write-ahead log's promise, tested on the real process: kill -9 at a
// random moment while several clients insert and delete, restart, and check
// (1) every key acknowledged INSERTED and not deleted since is present, and
// (2) the recovered filters are exact: their table bytes, item counts and
// kick-generator states equal those of a reference built in this test from
// the data directory as the kill left it (its snapshots, then its log applied
// record by record). One filter is driven far past FULL, where the order of
// inserts decides which keys fail; snapshots are taken during the load, and
// small log segments make the log rotate and truncate all the time.
// WalCrashGrowthTest: the same kill while a growing filter grows (its
// generations rebuilt by replay). WalCrashRetryTest: the same kill, with Deletes and Inserts sent
// with request ids and retried with them after the restart (docs/CLUSTER.md, "Request ids").
#include <gtest/gtest.h>
#include <signal.h>

#include <atomic>
#include <filesystem>
#include <map>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <unordered_set>
#include <vector>

#include "client/cuckoo_client.h"
#include "core/snapshot.h"
#include "server/wal/wal_format.h"
#include "tests/e2e/process.h"

namespace cuckoo::testing {
namespace {

namespace fs = std::filesystem;
using server::WalRecord;
using server::WalRecordType;

// The clients here are killed with the server: a call cut off by the kill
// fails at once (unacknowledged), instead of retrying until the restart.
const client::ClientOptions kNoRetries = {.retry_timeout = absl::ZeroDuration()};

// What the clients were told, across rounds.
struct Ledger {
  std::mutex mu;
  // Acknowledged INSERTED and not acknowledged DELETED since, per filter.
  std::map<std::string, std::unordered_set<std::string>> present;
  uint64_t acked_batches = 0;
  uint64_t full = 0;
};

// The filters as the data directory `dir` holds them: every snapshot, then
// the log applied record by record.
std::map<std::string, std::unique_ptr<CuckooFilter>> Reference(const std::string& dir) {
  std::map<uint64_t, std::pair<std::string, std::unique_ptr<CuckooFilter>>> by_id;
  for (const auto& e : fs::directory_iterator(dir)) {
    const std::string file = e.path().filename().string();
    if (!file.ends_with(".cuckoo") || file.starts_with(".")) continue;
    absl::StatusOr<LoadedSnapshot> s = ReadSnapshotFile(e.path().string());
    EXPECT_TRUE(s.ok()) << s.status();
    if (!s.ok()) continue;
    EXPECT_NE(s->filter_id, 0u) << file;
    by_id[s->filter_id] = {s->header.name, std::move(s->filter)};
  }
  absl::StatusOr<server::WalScan> scan =
      server::ScanWal(PosixEnv(), dir + "/wal", [&](const WalRecord& r) {
        switch (r.type) {
          case WalRecordType::kCreateFilter: {
            if (by_id.contains(r.lsn)) break;
            bool newer = false;
            for (auto& [id, f] : by_id) newer |= f.first == r.name && id > r.lsn;
            if (newer) break;
            by_id[r.lsn] = {r.name, *CuckooFilter::FromShape(r.shape)};
            break;
          }
          case WalRecordType::kDropFilter:
            by_id.erase(r.filter_id);
            break;
          case WalRecordType::kRenameFilter:  // Not written by this test.
            ADD_FAILURE() << "unexpected rename record at lsn " << r.lsn;
            break;
          case WalRecordType::kRequestStart:  // Request ids: no filter bits.
          case WalRecordType::kRequestResults:
          case WalRecordType::kTxnBegin:  // Bounds: not written by this test.
          case WalRecordType::kTxnEnd:
            break;
          default:
            if (auto it = by_id.find(r.filter_id); it != by_id.end()) {
              absl::StatusOr<bool> applied = it->second.second->ApplyShardWrite(r.write, r.lsn);
              EXPECT_TRUE(applied.ok()) << applied.status();
            }
        }
        return absl::OkStatus();
      });
  EXPECT_TRUE(scan.ok()) << scan.status();
  std::map<std::string, std::unique_ptr<CuckooFilter>> out;
  for (auto& [id, f] : by_id) out[f.first] = std::move(f.second);
  return out;
}

// Whether `a` and `b` hold the same tables and counters; says where not.
std::string Difference(const CuckooFilter& a, const CuckooFilter& b) {
  if (!(a.shape() == b.shape())) return "shapes differ";
  const uint64_t t = a.shape().table_bytes_per_shard();
  std::vector<uint8_t> x(t), y(t);
  for (uint32_t i = 0; i < a.shape().shards; ++i) {
    const CuckooFilter::ShardState sa = a.CopyShard(i, x.data());
    const CuckooFilter::ShardState sb = b.CopyShard(i, y.data());
    if (x != y) return absl::StrCat("shard ", i, " table bytes differ");
    if (sa.items != sb.items)
      return absl::StrCat("shard ", i, " items ", sa.items, " vs ", sb.items);
    if (sa.rng_state != sb.rng_state) return absl::StrCat("shard ", i, " kick generator differs");
  }
  return "";
}

class WalCrashTest : public ::testing::Test {
 protected:
  // Runs `rounds` rounds with cuckood `flags`; returns acknowledged keys
  // found missing (must be 0).
  void RunRounds(int rounds, const std::vector<std::string>& flags) {
    std::mt19937 rng(12345);
    Ledger ledger;
    uint64_t key_seq = 0;
    for (int round = 0; round < rounds; ++round) {
      auto server = std::make_unique<Cuckood>(data_.path(), flags);
      ASSERT_TRUE(server->ready()) << server->process().out() << server->process().err();
      auto client = client::Client::Connect(server->address(), kNoRetries);
      if (round == 0) {
        for (auto [name, capacity] : {std::pair{"big", 4'000'000}, std::pair{"tiny", 3'000}}) {
          v1::CreateFilterRequest create;
          create.set_name(name);
          create.set_capacity(capacity);
          create.set_shards(4);
          create.set_max_kicks(100);
          ASSERT_TRUE(client->CreateFilter(create).ok());
        }
      }
      // The load: 4 writers (inserts, and deletes of their own acknowledged
      // keys), one thread asking for snapshots.
      std::atomic<bool> stop{false};
      std::vector<std::thread> threads;
      for (int w = 0; w < 4; ++w) {
        const uint64_t base = key_seq + uint64_t(w) * 10'000'000;
        threads.emplace_back([&, w, base] {
          auto c = client::Client::Connect(server->address(), kNoRetries);
          std::vector<std::string> mine;
          uint64_t n = 0;
          for (int batch = 0; !stop.load(); ++batch) {
            const std::string filter = (w == 3 && batch % 2 == 0) ? "tiny" : "big";
            if (batch % 5 == 4 && mine.size() >= 50) {
              std::vector<std::string> del(mine.end() - 50, mine.end());
              mine.resize(mine.size() - 50);
              std::vector<std::string_view> views(del.begin(), del.end());
              {
                // Until acknowledged, these may or may not be deleted.
                std::lock_guard<std::mutex> lock(ledger.mu);
                for (const std::string& k : del) ledger.present["big"].erase(k);
              }
              (void)c->Delete("big", views);
              continue;
            }
            std::vector<std::string> keys;
            for (int i = 0; i < 200; ++i) {
              keys.push_back(absl::StrCat("r", round, "-w", w, "-", base + n++));
            }
            std::vector<std::string_view> views(keys.begin(), keys.end());
            absl::StatusOr<std::vector<v1::InsertResult>> r = c->Insert(filter, views);
            if (!r.ok()) continue;  // Killed mid-call: unknown, not checked.
            std::lock_guard<std::mutex> lock(ledger.mu);
            ++ledger.acked_batches;
            for (size_t i = 0; i < keys.size(); ++i) {
              if ((*r)[i] == v1::INSERT_RESULT_INSERTED) {
                ledger.present[filter].insert(keys[i]);
                if (filter == "big") mine.push_back(keys[i]);
              } else {
                ++ledger.full;
              }
            }
          }
        });
      }
      threads.emplace_back([&] {
        auto c = client::Client::Connect(server->address(), kNoRetries);
        while (!stop.load()) {
          (void)c->Snapshot(round % 2 == 0 ? "big" : "", false, absl::Seconds(30));
          std::this_thread::sleep_for(std::chrono::milliseconds(150));
        }
      });
      std::this_thread::sleep_for(
          std::chrono::milliseconds(std::uniform_int_distribution<int>(200, 1500)(rng)));
      server->process().Signal(SIGKILL);
      ASSERT_EQ(server->process().Wait(), 128 + SIGKILL);
      stop = true;
      for (auto& t : threads) t.join();
      key_seq += 100'000'000;

      // The reference, from a copy of what the kill left on disk.
      TempDir copy;
      fs::copy(data_.path(), copy.path(), fs::copy_options::recursive);
      std::map<std::string, std::unique_ptr<CuckooFilter>> reference = Reference(copy.path());

      server = std::make_unique<Cuckood>(data_.path(), flags);
      ASSERT_TRUE(server->ready()) << server->process().err();
      client = client::Client::Connect(server->address(), kNoRetries);
      uint64_t checked = 0, missing = 0;
      for (const auto& [name, keys] : ledger.present) {
        std::vector<std::string> all(keys.begin(), keys.end());
        for (size_t i = 0; i < all.size(); i += 5000) {
          std::vector<std::string_view> views(all.begin() + i,
                                              all.begin() + std::min(all.size(), i + 5000));
          absl::StatusOr<std::vector<bool>> found = client->Lookup(name, views);
          ASSERT_TRUE(found.ok()) << found.status();
          for (size_t j = 0; j < views.size(); ++j) {
            ++checked;
            if (!(*found)[j]) {
              ++missing;
              ADD_FAILURE() << "round " << round << ": acknowledged key " << views[j]
                            << " missing from " << name;
            }
          }
        }
      }
      // Exactness: the recovered filters, snapshotted now, against the
      // reference.
      absl::StatusOr<v1::SnapshotResponse> snap = client->Snapshot("", false, absl::Seconds(60));
      ASSERT_TRUE(snap.ok()) << snap.status();
      ASSERT_EQ(reference.size(), 2u);
      for (const auto& [name, ref] : reference) {
        absl::StatusOr<LoadedSnapshot> now =
            ReadSnapshotFile(SnapshotPath(data_.path(), name), name);
        ASSERT_TRUE(now.ok()) << now.status();
        EXPECT_EQ(Difference(*now->filter, *ref), "") << "round " << round << ", filter " << name;
      }
      std::cout << "round " << round << ": " << checked << " acknowledged keys present, " << missing
                << " missing; " << ledger.acked_batches << " batches acknowledged, " << ledger.full
                << " keys answered FULL so far\n";
      server->process().Signal(SIGKILL);
      server->process().Wait();
    }
    EXPECT_GT(ledger.full, 0u) << "the tiny filter never filled";
  }

  TempDir data_;
};

TEST_F(WalCrashTest, KillDashNineDuringWritesLosesNoAcknowledgedWriteAndReplaysExactly) {
  RunRounds(20, {"--wal-segment-size=256KiB", "--wal-max-size=1MiB", "--snapshot-interval=1s"});
}

TEST_F(WalCrashTest, KillDashNineInIntervalModeLosesNothingAcknowledged) {
  // kill -9 is not a power cut: what was written to the log is in the page
  // cache, so even interval mode loses nothing; a power cut loses at most
  // an interval (tests/server/wal/wal_test.cc measures that).
  RunRounds(6, {"--durability=interval", "--wal-sync-interval=200ms", "--wal-segment-size=256KiB",
                "--wal-max-size=1MiB"});
}

uint64_t DirBytes(const std::string& dir) {
  uint64_t n = 0;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) n += e.file_size(ec);
  return n;
}

// Under constant load, with no periodic snapshots, the log still stays
// bounded: past --wal-max-size changed filters are snapshotted early and the
// segments they no longer need are deleted.
TEST(WalSizeTest, LogSizeStaysBoundedUnderConstantLoad) {
  TempDir data;
  Cuckood server(data.path(),
                 {"--wal-segment-size=1MiB", "--wal-max-size=4MiB", "--snapshot-interval=0"});
  ASSERT_TRUE(server.ready()) << server.process().err();
  auto client = client::Client::Connect(server.address(), kNoRetries);
  v1::CreateFilterRequest create;
  create.set_name("load");
  create.set_capacity(20'000'000);
  ASSERT_TRUE(client->CreateFilter(create).ok());
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> keys{0};
  std::vector<std::thread> writers;
  for (int w = 0; w < 4; ++w) {
    writers.emplace_back([&, w] {
      auto c = client::Client::Connect(server.address(), kNoRetries);
      for (uint64_t n = 0; !stop.load();) {
        std::vector<std::string> batch;
        for (int i = 0; i < 1000; ++i) batch.push_back(absl::StrCat("w", w, "-", n++));
        std::vector<std::string_view> views(batch.begin(), batch.end());
        if (c->Insert("load", views).ok()) keys += views.size();
      }
    });
  }
  uint64_t max_bytes = 0;
  // At least 12 s, and on until the load has logged more than twice the
  // log's peak (a busy machine, e.g. under ASan, writes slower), at most 60 s.
  const auto start = std::chrono::steady_clock::now();
  while (std::chrono::steady_clock::now() < start + std::chrono::seconds(12) ||
         (keys.load() * 8 <= 2 * max_bytes &&
          std::chrono::steady_clock::now() < start + std::chrono::seconds(60))) {
    max_bytes = std::max(max_bytes, DirBytes(data.path() + "/wal"));
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  stop = true;
  for (auto& t : writers) t.join();
  const uint64_t logged = keys.load() * 8;  // At least 8 bytes of log per key.
  std::cout << "logged at least " << logged / (1 << 20) << " MiB; the log's files peaked at "
            << max_bytes / (1 << 20) << " MiB (--wal-max-size=4MiB, 1 MiB segments)\n";
  EXPECT_GT(logged, 2 * max_bytes) << "the load was too light to show a bound";
  // The bound: --wal-max-size, plus what the load logs between a check
  // (every second; early snapshots at most every 2 s) and the truncation
  // after the snapshot, generously 6 s of it, plus the prepared segment.
  EXPECT_LE(max_bytes, (uint64_t{5} << 20) + logged / 12 * 6);
}

// A growing filter created for 1,000 keys, driven hundreds of times past
// that while cuckood is killed at random moments: every key acknowledged
// INSERTED is there after the restart. Generations are never logged (only
// the filter's growth settings, in its create record): the restart rebuilds
// them by replaying the inserts from the last snapshot, and writes go on
// into the recovered generations. Snapshots (requested, and forced early by
// the small --wal-max-size) carry the generations across rounds.
TEST(WalCrashGrowthTest, KillDuringGrowthLosesNoAckedWrite) {
  TempDir data;
  const std::vector<std::string> flags = {"--wal-segment-size=256KiB", "--wal-max-size=1MiB"};
  std::mt19937 rng(4242);
  std::mutex mu;
  std::vector<std::string> acked;  // Acknowledged INSERTED.
  uint64_t full = 0;
  const auto started = std::chrono::steady_clock::now();
  for (int round = 0; round < 5; ++round) {
    SCOPED_TRACE(round);
    auto server = std::make_unique<Cuckood>(data.path(), flags);
    ASSERT_TRUE(server->ready()) << server->process().out() << server->process().err();
    if (round == 0) {
      auto client = client::Client::Connect(server->address(), kNoRetries);
      v1::CreateFilterRequest create;
      create.set_name("grows");
      create.set_capacity(1000);
      create.set_false_positive_rate(0.01);
      create.set_growth_factor(2);
      create.set_shards(4);
      absl::StatusOr<v1::CreateFilterResponse> created = client->CreateFilter(create);
      ASSERT_TRUE(created.ok()) << created.status();
      ASSERT_EQ(created->filter().growth_factor(), 2u);
    }
    std::atomic<bool> stop{false};
    std::vector<std::thread> threads;
    for (int w = 0; w < 3; ++w) {
      threads.emplace_back([&, w] {
        auto c = client::Client::Connect(server->address(), kNoRetries);
        for (uint64_t n = 0; !stop.load();) {
          std::vector<std::string> keys;
          for (int i = 0; i < 500; ++i) keys.push_back(absl::StrCat("g", round, "-w", w, "-", n++));
          std::vector<std::string_view> views(keys.begin(), keys.end());
          absl::StatusOr<std::vector<v1::InsertResult>> r = c->Insert("grows", views);
          if (!r.ok()) continue;  // Killed mid-call: unknown, not checked.
          std::lock_guard<std::mutex> lock(mu);
          for (size_t i = 0; i < keys.size(); ++i) {
            if ((*r)[i] == v1::INSERT_RESULT_INSERTED) {
              acked.push_back(std::move(keys[i]));
            } else {
              ++full;
            }
          }
        }
      });
    }
    if (round % 2 == 1) {
      threads.emplace_back([&] {
        auto c = client::Client::Connect(server->address(), kNoRetries);
        while (!stop.load()) {
          (void)c->Snapshot("grows", false, absl::Seconds(30));
          std::this_thread::sleep_for(std::chrono::milliseconds(100));
        }
      });
    }
    std::this_thread::sleep_for(
        std::chrono::milliseconds(std::uniform_int_distribution<int>(300, 1500)(rng)));
    server->process().Signal(SIGKILL);
    ASSERT_EQ(server->process().Wait(), 128 + SIGKILL);
    stop = true;
    for (auto& t : threads) t.join();

    server = std::make_unique<Cuckood>(data.path(), flags);
    ASSERT_TRUE(server->ready()) << server->process().err();
    auto client = client::Client::Connect(server->address(), kNoRetries);
    uint64_t missing = 0;
    for (size_t i = 0; i < acked.size(); i += 5000) {
      std::vector<std::string_view> views(acked.begin() + i,
                                          acked.begin() + std::min(acked.size(), i + 5000));
      absl::StatusOr<std::vector<bool>> found = client->Lookup("grows", views);
      ASSERT_TRUE(found.ok()) << found.status();
      for (size_t j = 0; j < views.size(); ++j) {
        if (!(*found)[j] && ++missing <= 10) {
          ADD_FAILURE() << "acknowledged key " << views[j] << " missing after the restart";
        }
      }
    }
    EXPECT_EQ(missing, 0u);
    absl::StatusOr<v1::FilterInfo> info = client->GetFilter("grows");
    ASSERT_TRUE(info.ok()) << info.status();
    EXPECT_GE(info->items(), acked.size());
    EXPECT_LE(info->false_positive_bound(), 0.01);
    if (acked.size() > 10'000) {
      EXPECT_GT(info->generations_size(), 1);
    }
    std::cout << "round " << round << ": " << acked.size() << " acknowledged keys present, "
              << missing << " missing, " << full << " answered FULL; " << info->generations_size()
              << " generations, " << info->memory_bytes() << " bytes\n";
    server->process().Signal(SIGKILL);
    server->process().Wait();
  }
  EXPECT_EQ(full, 0u) << "a growing filter answered FULL below its reachable capacity";
  EXPECT_GT(acked.size(), 100'000u) << "the load was too light to grow the filter far";
  EXPECT_LT(std::chrono::steady_clock::now() - started, std::chrono::seconds(60));
}

}  // namespace
}  // namespace cuckoo::testing

namespace cuckoo::testing {
namespace {

// A Delete or Insert sent with a request id, and what its first try got.
struct Sent {
  std::string id;
  std::vector<std::string> keys;
  bool answered = false;
  std::vector<int> results;  // The first try's, when answered.
  uint64_t position = 0;
};

template <typename Request>
Request KeysRequest(const std::string& filter, const std::vector<std::string>& keys,
                    const std::string& id) {
  Request req;
  req.set_filter(filter);
  for (const std::string& k : keys) req.add_keys(k);
  req.set_request_id(id);
  return req;
}

// One try of a Delete (or Insert) with its request id, through the stub (no
// client retries): status, results, position.
struct Try {
  grpc::Status status;
  std::vector<int> results;
  uint64_t position = 0;
};
Try SendDelete(v1::FilterService::Stub& stub, const Sent& s) {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  v1::DeleteResponse resp;
  Try t;
  t.status = stub.Delete(&ctx, KeysRequest<v1::DeleteRequest>("dup", s.keys, s.id), &resp);
  t.results.assign(resp.results().begin(), resp.results().end());
  t.position = resp.log_position();
  return t;
}
Try SendInsert(v1::FilterService::Stub& stub, const Sent& s) {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  v1::InsertResponse resp;
  Try t;
  t.status = stub.Insert(&ctx, KeysRequest<v1::InsertRequest>("dup", s.keys, s.id), &resp);
  t.results.assign(resp.results().begin(), resp.results().end());
  t.position = resp.log_position();
  return t;
}

// A retry of a request whose first try's answer was lost in a kill -9 (or
// was received: then it must match): the first try's results and position
// when they were durable, ABORTED when the first try was cut off part-way
// (in doubt), or applied now when nothing of it was durable. Never applied
// twice: every key was inserted twice and deleted once (with retries of the
// same id), so every key must still be found.
TEST(WalCrashRetryTest, RetriedDeleteAfterKillDashNineNeverRemovesASecondCopy) {
  TempDir data;
  const std::vector<std::string> flags = {"--wal-segment-size=256KiB", "--wal-max-size=1MiB",
                                          "--snapshot-interval=1s"};
  std::mt19937 rng(777);
  std::vector<std::vector<std::string>> all_keys;  // Every batch inserted twice.
  uint64_t retried = 0, in_doubt = 0, unanswered_ok = 0, checked_answers = 0;
  for (int round = 0; round < 5; ++round) {
    SCOPED_TRACE(round);
    auto server = std::make_unique<Cuckood>(data.path(), flags);
    ASSERT_TRUE(server->ready()) << server->process().out() << server->process().err();
    if (round == 0) {
      auto client = client::Client::Connect(server->address(), kNoRetries);
      v1::CreateFilterRequest create;
      create.set_name("dup");
      create.set_capacity(2'000'000);
      create.set_shards(4);
      ASSERT_TRUE(client->CreateFilter(create).ok());
    }
    std::mutex mu;
    std::vector<Sent> deletes, inserts;  // Second inserts and deletes, with ids.
    std::atomic<bool> stop{false};
    std::vector<std::thread> threads;
    for (int w = 0; w < 3; ++w) {
      threads.emplace_back([&, w] {
        auto c = client::Client::Connect(server->address(), kNoRetries);
        for (int n = 0; !stop.load(); ++n) {
          const std::string tag = absl::StrCat("r", round, "-w", w, "-", n);
          Sent batch;
          for (int i = 0; i < 300; ++i) batch.keys.push_back(absl::StrCat(tag, "-", i));
          std::vector<std::string_view> views(batch.keys.begin(), batch.keys.end());
          if (!c->Insert("dup", views).ok()) continue;  // Not acknowledged: not used.
          // The second copy, with an id: retried after the restart if its
          // answer is lost.
          Sent second = batch;
          second.id = "ins-" + tag;
          const Try ins = SendInsert(c->stub(), second);
          second.answered = ins.status.ok();
          second.results = ins.results;
          second.position = ins.position;
          if (!second.answered) {
            std::lock_guard<std::mutex> lock(mu);
            inserts.push_back(second);
            all_keys.push_back(batch.keys);
            continue;
          }
          Sent del = batch;
          del.id = "del-" + tag;
          const Try d = SendDelete(c->stub(), del);
          del.answered = d.status.ok();
          del.results = d.results;
          del.position = d.position;
          std::lock_guard<std::mutex> lock(mu);
          deletes.push_back(del);
          all_keys.push_back(batch.keys);
        }
      });
    }
    std::this_thread::sleep_for(
        std::chrono::milliseconds(std::uniform_int_distribution<int>(500, 2500)(rng)));
    server->process().Signal(SIGKILL);
    ASSERT_EQ(server->process().Wait(), 128 + SIGKILL);
    stop = true;
    for (auto& t : threads) t.join();

    server = std::make_unique<Cuckood>(data.path(), flags);
    ASSERT_TRUE(server->ready()) << server->process().err();
    auto client = client::Client::Connect(server->address(), kNoRetries);
    // Retry every request with its id: the unanswered ones as a client
    // would, the answered ones to check that the answer is the first's.
    auto check = [&](const Sent& s, const Try& t) {
      ++retried;
      if (s.answered) {
        ++checked_answers;
        ASSERT_TRUE(t.status.ok()) << s.id << ": " << t.status.error_message();
        EXPECT_EQ(t.results, s.results) << s.id;
        EXPECT_EQ(t.position, s.position) << s.id;
        return;
      }
      if (t.status.error_code() == grpc::StatusCode::ABORTED) {
        ++in_doubt;
        return;
      }
      ASSERT_TRUE(t.status.ok()) << s.id << ": " << t.status.error_message();
      ++unanswered_ok;
    };
    for (const Sent& s : inserts) {
      const Try first = SendInsert(client->stub(), s);
      check(s, first);
      // And again: the same answer as the retry before.
      const Try again = SendInsert(client->stub(), s);
      EXPECT_EQ(again.status.error_code(), first.status.error_code()) << s.id;
      EXPECT_EQ(again.results, first.results) << s.id;
      EXPECT_EQ(again.position, first.position) << s.id;
    }
    for (const Sent& s : deletes) {
      const Try first = SendDelete(client->stub(), s);
      check(s, first);
      const Try again = SendDelete(client->stub(), s);
      EXPECT_EQ(again.status.error_code(), first.status.error_code()) << s.id;
      EXPECT_EQ(again.results, first.results) << s.id;
      EXPECT_EQ(again.position, first.position) << s.id;
    }
    // Every key ever inserted twice is still found.
    uint64_t missing = 0, keys = 0;
    for (const std::vector<std::string>& batch : all_keys) {
      std::vector<std::string_view> views(batch.begin(), batch.end());
      absl::StatusOr<std::vector<bool>> found = client->Lookup("dup", views);
      ASSERT_TRUE(found.ok()) << found.status();
      for (size_t i = 0; i < views.size(); ++i) {
        ++keys;
        if (!(*found)[i]) {
          ++missing;
          if (missing < 10) ADD_FAILURE() << "round " << round << ": " << views[i] << " missing";
        }
      }
    }
    EXPECT_EQ(missing, 0u) << "a retried Delete removed a second copy";
    std::cout << "round " << round << ": " << keys << " keys inserted twice all found; "
              << deletes.size() << " deletes, " << inserts.size() << " second inserts unanswered\n";
    server->process().Signal(SIGKILL);
    server->process().Wait();
  }
  std::cout << retried << " retries: " << checked_answers << " of answered requests (same answer), "
            << in_doubt << " in doubt (ABORTED), " << unanswered_ok
            << " unanswered ones answered (from the log, or applied now)\n";
  EXPECT_GT(checked_answers, 0u);
}

}  // namespace
}  // namespace cuckoo::testing
