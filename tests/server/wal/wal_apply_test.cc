// WalApplier: a log replayed on worker threads gives every filter exactly
// the bytes of the live run that wrote the log; a record that cannot apply
// is named, and the ones before it are applied.
#include "server/wal/wal_apply.h"

#include <gtest/gtest.h>

#include <atomic>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "core/cuckoo_filter.h"

namespace cuckoo::server {
namespace {

struct Logged {
  WalRecord record;
  const WalApplier::Target* target;
};

std::vector<uint8_t> Bytes(const CuckooFilter& f, std::vector<CuckooFilter::ShardState>* states) {
  const uint64_t t = f.shape().table_bytes_per_shard();
  std::vector<uint8_t> bytes(f.shape().shards * t);
  for (uint32_t i = 0; i < f.shape().shards; ++i) {
    states->push_back(f.CopyShard(i, bytes.data() + i * t));
  }
  return bytes;
}

void ExpectSame(const CuckooFilter& live, const CuckooFilter& replayed, const std::string& what) {
  std::vector<CuckooFilter::ShardState> a, b;
  EXPECT_TRUE(Bytes(live, &a) == Bytes(replayed, &b)) << what;
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].items, b[i].items) << what << ", shard " << i;
    EXPECT_EQ(a[i].rng_state, b[i].rng_state) << what << ", shard " << i;
    EXPECT_EQ(a[i].position, b[i].position) << what << ", shard " << i;
  }
}

// Two filters written by four threads at once, one of them past full, then
// the log replayed onto empty filters of the same shapes with tiny batches
// and a tiny queue bound, so batches hand over, fill the queue and wait.
TEST(WalApplierTest, ReplayOnWorkersReproducesConcurrentWritersExactly) {
  std::vector<std::shared_ptr<CuckooFilter>> live;
  live.push_back(
      *CuckooFilter::Create({.capacity = 6'000, .shards = 8, .max_kicks = 40, .seed = 5}));
  live.push_back(*CuckooFilter::Create({.capacity = 50'000, .shards = 2, .seed = 6}));
  std::mutex mu;
  std::vector<Logged> log;
  uint64_t lsn = 0;
  std::vector<WalApplier::Target> replay_targets;
  for (size_t i = 0; i < live.size(); ++i) {
    replay_targets.push_back({*CuckooFilter::FromShape(live[i]->shape()), absl::StrCat("f", i)});
  }
  std::atomic<uint64_t> full{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int round = 0; round < 40; ++round) {
        const size_t which = (t + round) % 2;
        auto log_write = [&](const ShardWrite& w) {
          std::lock_guard<std::mutex> lock(mu);
          WalRecord r;
          r.type = w.kind == ShardWrite::kInsert ? WalRecordType::kInsert : WalRecordType::kDelete;
          r.lsn = ++lsn;
          r.write = w;
          r.hashes.assign(w.hashes.begin(), w.hashes.end());
          r.write.hashes = {};
          log.push_back({std::move(r), &replay_targets[which]});
          return lsn;
        };
        std::vector<uint64_t> h(100);
        for (size_t k = 0; k < h.size(); ++k)
          h[k] = live[which]->Hash(absl::StrCat(t, ":", round, ":", k));
        std::vector<InsertResult> out(h.size());
        live[which]->InsertHashed(
            h, round % 3 == 0, absl::MakeSpan(out), [] { return false; }, log_write);
        for (InsertResult r : out) full += r == InsertResult::kFull;
        if (round % 4 == 3) {
          std::vector<DeleteResult> del(30);
          live[which]->DeleteHashed(
              absl::MakeConstSpan(h).subspan(0, 30), absl::MakeSpan(del), [] { return false; },
              log_write);
        }
      }
    });
  }
  for (std::thread& t : threads) t.join();
  ASSERT_GT(full.load(), 0u) << "no insert failed: the test does not cover a full filter";

  WalApplier applier(3, {.batch_hashes = 150, .max_queued_bytes = 4096});
  for (Logged& l : log) {
    l.record.write.hashes = l.record.hashes;
    applier.Apply(l.target, l.record);
  }
  uint64_t applied = 0;
  ASSERT_TRUE(applier.Drain(&applied).ok());
  EXPECT_EQ(applied, log.size());
  for (size_t i = 0; i < live.size(); ++i) {
    ExpectSame(*live[i], *replay_targets[i].filter, replay_targets[i].name);
  }
  // Again: every record is already held, nothing changes.
  for (Logged& l : log) applier.Apply(l.target, l.record);
  ASSERT_TRUE(applier.Drain(&applied).ok());
  EXPECT_EQ(applied, log.size());
}

// A growing filter's max_capacity is applied at replay as it was live: the
// applier's batches keep each record's `ceiling` flag.
TEST(WalApplierTest, ReplayKeepsAGrowingFilterAtItsCeiling) {
  std::shared_ptr<CuckooFilter> live = *CuckooFilter::Create(
      {.capacity = 1000, .seed = 9, .growth_factor = 2, .max_capacity = 5000});
  std::vector<WalRecord> log;
  auto log_write = [&](const ShardWrite& w) {
    WalRecord r;
    r.type = WalRecordType::kInsert;
    r.lsn = log.size() + 1;
    r.write = w;
    r.hashes.assign(w.hashes.begin(), w.hashes.end());
    r.write.hashes = {};
    log.push_back(std::move(r));
    return log.back().lsn;
  };
  for (int round = 0; round < 8; ++round) {
    std::vector<uint64_t> h(900);
    for (size_t k = 0; k < h.size(); ++k) h[k] = live->Hash(absl::StrCat(round, ":", k));
    std::vector<InsertResult> out(h.size());
    live->InsertHashed(
        h, false, absl::MakeSpan(out), [] { return false; }, log_write);
  }
  ASSERT_EQ(live->items(), 5000u);
  WalApplier::Target target{*CuckooFilter::FromShape(live->shape()), "events"};
  WalApplier applier(2, {.batch_hashes = 1000, .max_queued_bytes = 1 << 20});
  for (WalRecord& r : log) {
    r.write.hashes = r.hashes;
    applier.Apply(&target, r);
  }
  uint64_t applied = 0;
  ASSERT_TRUE(applier.Drain(&applied).ok());
  EXPECT_EQ(target.filter->items(), 5000u);
  ExpectSame(*live, *target.filter, "events");
}

TEST(WalApplierTest, ARecordThatCannotApplyIsNamedAndTheOnesBeforeItAreApplied) {
  WalApplier::Target target{*CuckooFilter::Create({.capacity = 1'000, .shards = 1, .seed = 1}),
                            "users"};
  // One worker: with more, the good record's worker may see the error first
  // and skip it (harmless: start-up fails on the error anyway).
  WalApplier applier(1);
  WalRecord good;
  good.lsn = 7;
  good.hashes = {target.filter->Hash("a")};
  good.write = {.kind = ShardWrite::kInsert, .shard = 0, .hashes = good.hashes};
  applier.Apply(&target, good);
  WalRecord bad = good;
  bad.lsn = 8;
  bad.write.shard = 3;  // The filter has one shard.
  bad.write.hashes = bad.hashes;
  applier.Apply(&target, bad);
  uint64_t applied = 0;
  const absl::Status s = applier.Drain(&applied);
  EXPECT_TRUE(absl::IsDataLoss(s)) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "lsn 8")) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "\"users\"")) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "shard 3")) << s;
  EXPECT_EQ(applied, 1u);
  EXPECT_TRUE(target.filter->MayContain("a"));
}

}  // namespace
}  // namespace cuckoo::server
