// Writers and readers on one filter at once. Run under ThreadSanitizer in CI
// (CTest label "concurrency"); the assertions also hold without it.
#include <gtest/gtest.h>

#include <atomic>
#include <deque>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "core/cuckoo_filter.h"
#include "core/registry.h"
#include "core/snapshot.h"
#include "tests/util/keys.h"
#include "tests/util/temp_dir.h"

namespace cuckoo {

// For parameterised test names and messages (found by ADL).
void PrintTo(TableKind kind, std::ostream* os) { *os << TableKindName(kind); }

namespace {

using testing::Key;

constexpr int kWriters = 2;
constexpr int kReaders = 2;
constexpr uint64_t kKeysPerWriter = 100'000;

// Runs for both table kinds (the default, rate-derived f = 12, with and
// without semi-sorted buckets).
class ConcurrencyKindTest : public ::testing::TestWithParam<TableKind> {};

TEST_P(ConcurrencyKindTest, ReadersNeverMissKeysThatWritersFinishedInserting) {
  auto created = CuckooFilter::Create({.capacity = kWriters * kKeysPerWriter,
                                       .shards = 8,
                                       .seed = 3,
                                       .semi_sort = GetParam() == TableKind::kSemiSorted});
  ASSERT_TRUE(created.ok());
  ASSERT_EQ((*created)->shape().table_kind, GetParam());
  CuckooFilter& filter = **created;
  // published[w] = number of writer w's keys whose insert has returned.
  std::atomic<uint64_t> published[kWriters] = {};
  std::atomic<bool> done{false};
  std::atomic<uint64_t> misses{0};

  std::vector<std::thread> threads;
  for (int w = 0; w < kWriters; ++w) {
    threads.emplace_back([&, w] {
      // Batches of 64, every 4th batch followed by deleting and re-adding its
      // first key, so deletes run concurrently too.
      std::vector<std::string> keys;
      for (uint64_t i = 0; i < kKeysPerWriter; i += 64) {
        keys.clear();
        for (uint64_t j = i; j < std::min(i + 64, kKeysPerWriter); ++j) keys.push_back(Key(w, j));
        std::vector<std::string_view> views(keys.begin(), keys.end());
        std::vector<InsertResult> out(views.size());
        filter.InsertBatch(views, false, absl::MakeSpan(out));
        for (InsertResult r : out) ASSERT_EQ(r, InsertResult::kInserted);
        if ((i / 64) % 4 == 0) {
          // Not yet published, so readers do not look for it in between.
          ASSERT_EQ(filter.Delete(keys.back()), DeleteResult::kDeleted);
          ASSERT_EQ(filter.Insert(keys.back()), InsertResult::kInserted);
        }
        published[w].store(i + views.size(), std::memory_order_release);
      }
    });
  }
  for (int r = 0; r < kReaders; ++r) {
    threads.emplace_back([&, r] {
      uint64_t round = 0;
      while (!done.load(std::memory_order_acquire)) {
        for (int w = 0; w < kWriters; ++w) {
          uint64_t n = published[w].load(std::memory_order_acquire);
          if (n == 0) continue;
          // A batch of published keys plus a single-key lookup.
          std::vector<std::string> keys;
          for (uint64_t j = 0; j < 32; ++j)
            keys.push_back(Key(w, testing::Mix(round * 32 + j + r) % n));
          std::vector<std::string_view> views(keys.begin(), keys.end());
          std::unique_ptr<bool[]> found(new bool[views.size()]);
          filter.LookupBatch(views, absl::Span<bool>(found.get(), views.size()));
          for (size_t j = 0; j < views.size(); ++j) misses += !found[j];
          misses += !filter.MayContain(keys[0]);
          (void)filter.Stats();
        }
        ++round;
      }
    });
  }
  for (int w = 0; w < kWriters; ++w) threads[w].join();
  done.store(true, std::memory_order_release);
  for (size_t t = kWriters; t < threads.size(); ++t) threads[t].join();
  EXPECT_EQ(misses.load(), 0u);
  EXPECT_EQ(filter.items(), kWriters * kKeysPerWriter);
  for (int w = 0; w < kWriters; ++w) {
    for (uint64_t i = 0; i < kKeysPerWriter; ++i) ASSERT_TRUE(filter.MayContain(Key(w, i)));
  }
}

INSTANTIATE_TEST_SUITE_P(Kinds, ConcurrencyKindTest,
                         ::testing::Values(TableKind::kPacked, TableKind::kSemiSorted),
                         [](const auto& p) { return std::string(TableKindName(p.param)); });

// Inserts keys 0..n-1 of stream 0 (each must go in): *keys holds them and
// *views views them, for readers that look them up.
void InsertResidents(CuckooFilter& filter, uint64_t n, std::vector<std::string>* keys,
                     std::vector<std::string_view>* views) {
  for (uint64_t i = 0; i < n; ++i) keys->push_back(Key(0, i));
  views->assign(keys->begin(), keys->end());
  std::vector<InsertResult> ins(views->size());
  filter.InsertBatch(*views, false, absl::MakeSpan(ins));
  for (InsertResult r : ins) ASSERT_EQ(r, InsertResult::kInserted);
}

// Near full load every insert kicks residents between their two buckets, so a
// lock-free reader can catch a key in flight; the sequence check must send it
// back to read again under the lock. Readers look up a fixed resident set
// while a writer churns other keys through a 94%-full filter. In a
// semi-sorted table every write re-encodes the whole bucket, so racing
// readers also see torn codes (possibly >= 3876) and must stay in bounds.
void ChurnUnderReaders(uint32_t shards, uint32_t f = 16, bool semi_sort = false) {
  auto created = CuckooFilter::Create({.capacity = 20'000,
                                       .fingerprint_bits = f,
                                       .shards = shards,
                                       .seed = 11,
                                       .semi_sort = semi_sort});
  ASSERT_TRUE(created.ok()) << created.status();
  ASSERT_EQ((*created)->shape().semi_sorted(), semi_sort);
  CuckooFilter& filter = **created;
  const uint64_t slots = filter.shape().total_slots();
  std::vector<std::string> keys;
  std::vector<std::string_view> views;
  ASSERT_NO_FATAL_FAILURE(InsertResidents(filter, slots * 90 / 100, &keys, &views));

  std::atomic<bool> done{false};
  std::atomic<uint64_t> misses{0};
  std::atomic<uint64_t> churned{0};
  std::thread writer([&] {
    // Fill to ~94% with churn keys, then keep replacing the oldest.
    const uint64_t window = slots * 4 / 100;
    for (uint64_t i = 0; i < 200'000; ++i) {
      if (filter.Insert(Key(1, i)) != InsertResult::kInserted) continue;
      if (i >= window) (void)filter.Delete(Key(1, i - window));
      churned.fetch_add(1, std::memory_order_relaxed);
    }
    done.store(true, std::memory_order_release);
  });
  std::vector<std::thread> readers;
  for (int r = 0; r < 2; ++r) {
    readers.emplace_back([&, r] {
      // Reader 0: batches of 256 (with several shards, the all-shards
      // lock-free path); reader 1: single keys with 1 shard, else batches of 32.
      const size_t chunk = r == 0 ? 256 : 32;
      std::unique_ptr<bool[]> found(new bool[chunk]);
      while (!done.load(std::memory_order_acquire)) {
        if (r == 1 && shards == 1) {
          for (const auto& k : views) misses += !filter.MayContain(k);
          continue;
        }
        for (size_t i = 0; i < views.size(); i += chunk) {
          size_t m = std::min(chunk, views.size() - i);
          filter.LookupBatch(absl::MakeConstSpan(&views[i], m), absl::Span<bool>(found.get(), m));
          for (size_t j = 0; j < m; ++j) misses += !found[j];
        }
      }
    });
  }
  writer.join();
  for (auto& t : readers) t.join();
  EXPECT_GT(churned.load(), 1000u);
  EXPECT_EQ(misses.load(), 0u);
}

TEST(ConcurrencyTest, LockFreeLookupsNeverMissResidentsMovedByKicks) { ChurnUnderReaders(1); }

// Same with several shards: batches then take the all-shards lock-free path
// (CuckooTable::LookupAcross), validated against every shard's counter.
TEST(ConcurrencyTest, LockFreeCrossShardBatchesNeverMissResidentsMovedByKicks) {
  ChurnUnderReaders(4);
}

// Semi-sorted buckets: f=13 is a whole-byte 48-bit bucket, f=12 a 44-bit one
// (both matched with SWAR), f=20 a 76-bit bucket read word by word.
TEST(ConcurrencyTest, LockFreeLookupsOfSemiSortedBucketsNeverMissResidentsMovedByKicks) {
  ChurnUnderReaders(1, 13, true);
}

TEST(ConcurrencyTest, LockFreeLookupsOfWideSemiSortedBucketsNeverMissResidentsMovedByKicks) {
  ChurnUnderReaders(1, 20, true);
}

TEST(ConcurrencyTest, LockFreeCrossShardBatchesOfSemiSortedBucketsNeverMissResidents) {
  ChurnUnderReaders(4, 12, true);
}

// The single-key lookup's own lock-free path (CuckooFilter::MayContain, no
// lambda, no retry loop) under writers that churn keys through the same
// shards near full load, kicking residents between buckets: single-key
// inserts and deletes (the delete that prefetches before its lock) and
// batches. No resident may ever be reported absent.
void SingleKeyLookupsUnderChurn(TableKind kind) {
  auto created =
      CuckooFilter::Create({.capacity = 20'000,
                            .fingerprint_bits = kind == TableKind::kSemiSorted ? 13u : 12u,
                            .shards = 2,
                            .seed = 17,
                            .semi_sort = kind == TableKind::kSemiSorted});
  ASSERT_TRUE(created.ok()) << created.status();
  CuckooFilter& filter = **created;
  const uint64_t slots = filter.shape().total_slots();
  std::vector<std::string> keys;
  std::vector<std::string_view> views;
  ASSERT_NO_FATAL_FAILURE(InsertResidents(filter, slots * 88 / 100, &keys, &views));

  std::atomic<bool> done{false};
  std::atomic<uint64_t> misses{0};
  std::atomic<uint64_t> churned{0};
  std::vector<std::thread> writers;
  for (int w = 0; w < 2; ++w) {
    writers.emplace_back([&, w] {
      const uint64_t window = slots * 3 / 100;
      const uint64_t stream = 1 + w;
      for (uint64_t i = 0; i < 60'000; ++i) {
        if (w == 0 || i % 64 != 0) {
          if (filter.Insert(Key(stream, i)) != InsertResult::kInserted) continue;
        } else {
          // Now and then a batch of one, through the batch path.
          std::string k = Key(stream, i);
          std::string_view v = k;
          InsertResult r;
          filter.InsertBatch({&v, 1}, false, {&r, 1});
          if (r != InsertResult::kInserted) continue;
        }
        if (i >= window) (void)filter.Delete(Key(stream, i - window));
        churned.fetch_add(1, std::memory_order_relaxed);
      }
    });
  }
  std::thread reader([&] {
    while (!done.load(std::memory_order_acquire)) {
      for (const auto& k : views) misses += !filter.MayContain(k);
    }
  });
  for (auto& t : writers) t.join();
  done.store(true, std::memory_order_release);
  reader.join();
  EXPECT_GT(churned.load(), 10'000u);
  EXPECT_EQ(misses.load(), 0u);
  for (const auto& k : views) ASSERT_TRUE(filter.MayContain(k));
}

TEST(ConcurrencyTest, SingleKeyLookupsNeverMissResidentsWhileSingleKeyWritersChurn) {
  SingleKeyLookupsUnderChurn(TableKind::kPacked);
}

TEST(ConcurrencyTest, SingleKeyLookupsOfSemiSortedBucketsNeverMissResidentsUnderChurn) {
  SingleKeyLookupsUnderChurn(TableKind::kSemiSorted);
}

// Growth under readers: two writers grow a filter made for 1,000 keys 200-fold
// (every shard adds generations while readers run, batched and single-key,
// lock-free); no reader ever misses a key whose insert had returned, and
// counts never undercount.
TEST_P(ConcurrencyKindTest, ReadersNeverMissKeysWhileShardsGrow) {
  auto created = CuckooFilter::Create({.capacity = 1000,
                                       .false_positive_rate = 0.002,
                                       .shards = 4,
                                       .seed = 5,
                                       .semi_sort = GetParam() == TableKind::kSemiSorted,
                                       .growth_factor = 2});
  ASSERT_TRUE(created.ok()) << created.status();
  CuckooFilter& filter = **created;
  constexpr uint64_t kKeys = 100'000;
  std::atomic<uint64_t> published[kWriters] = {};
  std::atomic<bool> done{false};
  std::atomic<uint64_t> misses{0};
  std::vector<std::thread> threads;
  for (int w = 0; w < kWriters; ++w) {
    threads.emplace_back([&, w] {
      std::vector<std::string> keys;
      for (uint64_t i = 0; i < kKeys; i += 128) {
        keys.clear();
        for (uint64_t j = i; j < std::min(i + 128, kKeys); ++j) keys.push_back(Key(20 + w, j));
        std::vector<std::string_view> views(keys.begin(), keys.end());
        std::vector<InsertResult> out(views.size());
        // Writer 1 inserts if absent: a false positive (rate 0.002) answers
        // kAlreadyPresent, and the key is then found all the same.
        filter.InsertBatch(views, w == 1, absl::MakeSpan(out));
        for (InsertResult r : out) {
          ASSERT_TRUE(r == InsertResult::kInserted ||
                      (w == 1 && r == InsertResult::kAlreadyPresent));
        }
        published[w].store(std::min(i + 128, kKeys), std::memory_order_release);
      }
    });
  }
  for (int r = 0; r < kReaders; ++r) {
    threads.emplace_back([&, r] {
      std::vector<std::string> keys;
      std::unique_ptr<bool[]> found(new bool[256]);
      uint64_t round = 0;
      while (!done.load(std::memory_order_acquire)) {
        for (int w = 0; w < kWriters; ++w) {
          const uint64_t n = published[w].load(std::memory_order_acquire);
          if (n == 0) continue;
          keys.clear();
          for (uint64_t j = 0; j < 256; ++j) keys.push_back(Key(20 + w, testing::Mix(++round) % n));
          if (r == 0) {
            std::vector<std::string_view> views(keys.begin(), keys.end());
            filter.LookupBatch(views, absl::Span<bool>(found.get(), views.size()));
            for (size_t j = 0; j < views.size(); ++j) misses += !found[j];
          } else {
            for (const auto& k : keys) {
              misses += !filter.MayContain(k);
              misses += filter.ApproximateCount(k) == 0;
            }
          }
        }
      }
    });
  }
  for (int w = 0; w < kWriters; ++w) threads[w].join();
  done.store(true, std::memory_order_release);
  for (size_t t = kWriters; t < threads.size(); ++t) threads[t].join();
  EXPECT_EQ(misses.load(), 0u);
  EXPECT_GT(filter.Stats().generations.size(), 4u);
  EXPECT_LE(filter.items(), kWriters * kKeys);
  EXPECT_GT(filter.items(), kWriters * kKeys - kKeys / 100);
}

// Batched lookups while some shards grow (issue 30): a batch reads every
// shard's tables lock-free, cross-shard, one generation at a time, and
// checks the shards' counters once at the end. Residents are inserted
// first and the even shards grown once with more of them, so residents
// live in first and second tables. Then readers look them up in batches
// while a writer grows the even shards, then the shards 1 mod 4, further
// with keys of its own (from half the shards grown to three quarters: the
// batches switch from first tables first to newest first), and replaces
// other keys in every shard (deletes from grown shards' first tables, and
// kicks in the shards 3 mod 4, which never grow, held at 93%). No resident
// may ever be missed.
TEST_P(ConcurrencyKindTest, BatchLookupsNeverMissResidentsWhileSomeShardsGrow) {
  auto created = CuckooFilter::Create({.capacity = 8000,
                                       .false_positive_rate = 0.002,
                                       .shards = 8,
                                       .seed = 13,
                                       .semi_sort = GetParam() == TableKind::kSemiSorted,
                                       .growth_factor = 2});
  ASSERT_TRUE(created.ok()) << created.status();
  CuckooFilter& filter = **created;
  const uint32_t shards = filter.shape().shards;
  const uint32_t bits = filter.shape().shard_bits;
  auto shard_of = [&](const std::string& k) {
    return static_cast<uint32_t>(filter.Hash(k) >> (64 - bits));
  };
  auto insert = [&](absl::Span<const std::string> keys) {
    std::vector<std::string_view> views(keys.begin(), keys.end());
    std::vector<InsertResult> out(views.size());
    filter.InsertBatch(views, false, absl::MakeSpan(out));
    for (InsertResult r : out) ASSERT_EQ(r, InsertResult::kInserted);
  };
  // Until each shard s with pick(s) has `generations` tables, inserts keys
  // of `stream` that fall in those shards, 64 at a time, calling
  // between(keys) after each batch.
  auto grow = [&](uint64_t stream, uint32_t generations, auto pick, auto between) {
    auto grown = [&] {
      for (uint32_t s = 0; s < shards; ++s) {
        if (pick(s) && filter.ShardGenerations(s) < generations) return false;
      }
      return true;
    };
    std::vector<std::string> batch;
    for (uint64_t i = 0; !grown() && !HasFatalFailure();) {
      batch.clear();
      for (; batch.size() < 64; ++i) {
        if (std::string k = Key(stream, i); pick(shard_of(k))) batch.push_back(std::move(k));
      }
      ASSERT_NO_FATAL_FAILURE(insert(batch));
      between(batch);
    }
  };
  auto even = [](uint32_t s) { return s % 2 == 0; };
  auto never = [](uint32_t s) { return s % 4 == 3; };  // Shards that never grow.
  std::vector<std::string> residents, churn;
  for (uint64_t i = 0; i < 5000; ++i) residents.push_back(Key(30, i));
  for (uint64_t i = 0; i < 1000; ++i) churn.push_back(Key(31, i));
  ASSERT_NO_FATAL_FAILURE(insert(residents));
  ASSERT_NO_FATAL_FAILURE(insert(churn));
  ASSERT_NO_FATAL_FAILURE(grow(32, 2, even, [&](const std::vector<std::string>& batch) {
    residents.insert(residents.end(), batch.begin(), batch.end());
  }));
  // The shards that never grow to 93% of their one table, so that the
  // churn below kicks residents between buckets there while readers run.
  const uint64_t slots = filter.Stats().generations[0].slots / shards;
  std::vector<uint64_t> held(shards, 0);
  for (const auto& k : residents) ++held[shard_of(k)];
  for (const auto& k : churn) ++held[shard_of(k)];
  std::vector<std::string> fill;
  for (uint64_t i = 0;; ++i) {
    bool all = true;
    for (uint32_t s = 0; s < shards; ++s) all &= !never(s) || held[s] >= slots * 93 / 100;
    if (all) break;
    std::string k = Key(34, i);
    const uint32_t s = shard_of(k);
    if (!never(s) || held[s] >= slots * 93 / 100) continue;
    ++held[s];
    fill.push_back(std::move(k));
  }
  ASSERT_NO_FATAL_FAILURE(insert(fill));
  residents.insert(residents.end(), fill.begin(), fill.end());
  for (uint32_t s = 0; s < shards; ++s) {
    ASSERT_EQ(filter.ShardGenerations(s), even(s) ? 2u : 1u) << "shard " << s;
  }
  const std::vector<std::string_view> views(residents.begin(), residents.end());

  std::atomic<uint64_t> batches{0};
  std::atomic<bool> done{false};
  std::atomic<uint64_t> misses{0};
  std::vector<std::thread> readers;
  for (int r = 0; r < kReaders; ++r) {
    readers.emplace_back([&, r] {
      const size_t chunk = r == 0 ? 256 : 1000;
      std::unique_ptr<bool[]> found(new bool[chunk]);
      while (!done.load(std::memory_order_acquire)) {
        for (size_t i = 0; i < views.size(); i += chunk) {
          const size_t m = std::min(chunk, views.size() - i);
          filter.LookupBatch(absl::MakeConstSpan(&views[i], m), absl::Span<bool>(found.get(), m));
          for (size_t j = 0; j < m; ++j) misses += !found[j];
          batches.fetch_add(1, std::memory_order_relaxed);
        }
      }
    });
  }
  // Write only once the readers run.
  while (batches.load(std::memory_order_relaxed) < 2) std::this_thread::yield();
  const uint64_t batches_before = batches.load(std::memory_order_relaxed);
  // Churn: each new key of stream 31 replaces its shard's oldest, so every
  // shard keeps its count.
  std::vector<std::deque<std::string>> oldest(shards);
  for (auto& k : churn) oldest[shard_of(k)].push_back(std::move(k));
  uint64_t next = churn.size();
  auto replace = [&](const std::vector<std::string>&) {
    for (int j = 0; j < 128; ++j) {
      std::string k = Key(31, next++);
      std::deque<std::string>& q = oldest[shard_of(k)];
      ASSERT_EQ(filter.Insert(k), InsertResult::kInserted);
      ASSERT_EQ(filter.Delete(q.front()), DeleteResult::kDeleted);
      q.pop_front();
      q.push_back(std::move(k));
    }
  };
  grow(33, 3, even, replace);
  grow(
      35, 2, [](uint32_t s) { return s % 4 == 1; }, replace);
  grow(
      36, 4, [&](uint32_t s) { return !never(s); }, replace);
  const uint64_t batches_during = batches.load(std::memory_order_relaxed) - batches_before;
  done.store(true, std::memory_order_release);
  for (auto& t : readers) t.join();
  EXPECT_EQ(misses.load(), 0u);
  EXPECT_GT(batches_during, 0u);
  for (uint32_t s = 0; s < shards; ++s) {
    if (never(s)) {
      EXPECT_EQ(filter.ShardGenerations(s), 1u) << "shard " << s;
    } else {
      EXPECT_GE(filter.ShardGenerations(s), 4u) << "shard " << s;
    }
  }
  for (const auto& k : views) ASSERT_TRUE(filter.MayContain(k));
}

TEST(ConcurrencyTest, RegistryCreateGetDropFromManyThreadsStaysConsistent) {
  FilterRegistry reg({.memory_budget_bytes = 1 << 30, .max_filters = 64});
  std::vector<std::thread> threads;
  std::atomic<int> created{0};
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 50; ++i) {
        std::string name = "f" + std::to_string(i % 8);
        auto f =
            reg.Create(name, {.capacity = 1000, .fingerprint_bits = 12, .shards = 2, .seed = 1},
                       /*if_not_exists=*/true);
        if (f.ok()) {
          ++created;
          (*f)->Insert("k" + std::to_string(t));
        }
        if (auto g = reg.Get(name); g.ok()) (void)(*g)->MayContain("k");
        if ((i + t) % 5 == 0) (void)reg.Drop(name);
        (void)reg.List();
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_GT(created.load(), 0);
  uint64_t bytes = 0;
  for (const auto& [name, f] : reg.List()) bytes += f->memory_bytes();
  EXPECT_EQ(reg.memory_bytes(), bytes);
}

// Snapshots copy one shard at a time under its shared lock (or write it in
// pieces under that lock, when it is larger than the buffer) while writers
// insert: every snapshot completes, loads, and holds every key whose insert
// returned before the snapshot began. (TSan checks the copy against the
// writers.)
TEST_P(ConcurrencyKindTest, SnapshotsWhileWritersInsertHoldEveryEarlierKey) {
  testing::TempDir dir;
  auto created = CuckooFilter::Create({.capacity = 200'000,
                                       .shards = 8,
                                       .seed = 4,
                                       .semi_sort = GetParam() == TableKind::kSemiSorted});
  ASSERT_TRUE(created.ok());
  CuckooFilter& filter = **created;
  constexpr uint64_t kPerWriter = 60'000;
  std::atomic<uint64_t> published[kWriters] = {};
  std::vector<std::thread> writers;
  for (int w = 0; w < kWriters; ++w) {
    writers.emplace_back([&, w] {
      std::vector<std::string> keys;
      std::vector<std::string_view> views;
      std::vector<InsertResult> results(256);
      for (uint64_t i = 0; i < kPerWriter; i += 256) {
        keys.clear();
        for (uint64_t j = i; j < i + 256; ++j) keys.push_back(Key(10 + w, j));
        views.assign(keys.begin(), keys.end());
        filter.InsertBatch(views, false, absl::MakeSpan(results));
        published[w].store(i + 256, std::memory_order_release);
      }
    });
  }
  int snapshots = 0;
  for (bool more = true; more; ++snapshots) {
    more = false;
    uint64_t before[kWriters];
    for (int w = 0; w < kWriters; ++w) {
      before[w] = published[w].load(std::memory_order_acquire);
      more |= before[w] < kPerWriter;
    }
    // Every other snapshot through a buffer smaller than a shard: written in
    // pieces while the shard's shared lock is held.
    absl::StatusOr<SnapshotWriteResult> written = WriteSnapshotFile(
        filter, "live", dir.path(),
        snapshots % 2 == 0 ? SnapshotWriteOptions{} : SnapshotWriteOptions{.buffer_bytes = 4096});
    ASSERT_TRUE(written.ok()) << written.status();
    absl::StatusOr<LoadedSnapshot> loaded = ReadSnapshotFile(written->path, "live");
    ASSERT_TRUE(loaded.ok()) << loaded.status();
    EXPECT_EQ(loaded->items, written->items);
    for (int w = 0; w < kWriters; ++w) {
      for (uint64_t j = 0; j < before[w]; ++j) {
        ASSERT_TRUE(loaded->filter->MayContain(Key(10 + w, j))) << "writer " << w << " key " << j;
      }
    }
  }
  for (auto& t : writers) t.join();
  EXPECT_GE(snapshots, 2);
}

// What a log of shard writes holds: a record per applied shard part, with
// its position.
struct LoggedWrite {
  uint64_t position;
  ShardWrite::Kind kind;
  uint32_t shard;
  bool if_absent;
  bool full_before;
  std::vector<uint64_t> hashes;
};

std::vector<uint8_t> AllTableBytes(const CuckooFilter& f,
                                   std::vector<CuckooFilter::ShardState>* states) {
  const uint64_t t = f.shape().table_bytes_per_shard();
  std::vector<uint8_t> bytes(f.shape().shards * t);
  for (uint32_t i = 0; i < f.shape().shards; ++i) {
    states->push_back(f.CopyShard(i, bytes.data() + i * t));
  }
  return bytes;
}

// The property a write-ahead log relies on: whatever the interleaving of
// concurrent batches on shared shards, replaying the logged shard writes in
// position order onto an empty filter of the same shape gives the same
// table bytes, counters and kick-generator states, also past the point
// where inserts fail with kFull (where insert order decides who fails).
TEST_P(ConcurrencyKindTest, ReplayingLoggedShardWritesReproducesConcurrentBatchesExactly) {
  FilterOptions options{.capacity = 20'000,
                        .shards = 4,
                        .max_kicks = 50,
                        .seed = 11,
                        .semi_sort = GetParam() == TableKind::kSemiSorted};
  auto live = CuckooFilter::Create(options);
  ASSERT_TRUE(live.ok()) << live.status();
  std::mutex log_mu;
  std::vector<LoggedWrite> log;
  uint64_t next_position = 0;
  auto append = [&](const ShardWrite& w) {
    std::lock_guard<std::mutex> lock(log_mu);
    log.push_back({++next_position, w.kind, w.shard, w.if_absent, w.full_before,
                   std::vector<uint64_t>(w.hashes.begin(), w.hashes.end())});
    return next_position;
  };
  // 4 threads x 8000 keys into a 20000-key filter: well past full.
  std::atomic<uint64_t> full{0};
  std::vector<std::thread> threads;
  for (int w = 0; w < 4; ++w) {
    threads.emplace_back([&, w] {
      std::vector<std::string> keys;
      for (uint64_t i = 0; i < 8000; i += 100) {
        keys.clear();
        for (uint64_t j = i; j < i + 100; ++j) keys.push_back(Key(w, j));
        std::vector<std::string_view> views(keys.begin(), keys.end());
        std::vector<InsertResult> out(views.size());
        (*live)->InsertBatch(
            views, /*if_absent=*/w == 3, absl::MakeSpan(out), [] { return false; }, append);
        for (InsertResult r : out) full += r == InsertResult::kFull;
        if (i % 500 == 0) {
          std::vector<DeleteResult> del(10);
          (*live)->DeleteBatch(
              absl::MakeConstSpan(views).subspan(0, 10), absl::MakeSpan(del), [] { return false; },
              append);
        }
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_GT(full.load(), 0u) << "the filter never filled; the test does not cover kFull";

  std::vector<CuckooFilter::ShardState> live_states;
  const std::vector<uint8_t> live_bytes = AllTableBytes(**live, &live_states);
  auto expect_same = [&](const CuckooFilter& replayed, const char* how) {
    std::vector<CuckooFilter::ShardState> states;
    EXPECT_TRUE(AllTableBytes(replayed, &states) == live_bytes) << how;
    for (uint32_t i = 0; i < 4; ++i) {
      EXPECT_EQ(live_states[i].items, states[i].items) << how << ", shard " << i;
      EXPECT_EQ(live_states[i].rng_state, states[i].rng_state) << how << ", shard " << i;
      EXPECT_EQ(live_states[i].position, states[i].position) << how << ", shard " << i;
    }
  };
  auto write_of = [](const LoggedWrite& w, absl::Span<const uint64_t> hashes) {
    return ShardWrite{.kind = w.kind,
                      .shard = w.shard,
                      .if_absent = w.if_absent,
                      .full_before = w.full_before,
                      .hashes = hashes};
  };

  // One write at a time. The log vector is in position order (positions
  // were taken under its lock).
  auto replayed = CuckooFilter::FromShape((*live)->shape());
  ASSERT_TRUE(replayed.ok());
  for (const LoggedWrite& w : log) {
    absl::StatusOr<bool> applied = (*replayed)->ApplyShardWrite(write_of(w, w.hashes), w.position);
    ASSERT_TRUE(applied.ok()) << applied.status();
    ASSERT_TRUE(*applied);
  }
  expect_same(**replayed, "ApplyShardWrite");

  // Many at a time, as the server's replay does: runs of writes whose
  // hashes lie back to back in one buffer (the prefetch pipeline looks
  // ahead across them), and runs of separate vectors.
  auto batched = CuckooFilter::FromShape((*live)->shape());
  ASSERT_TRUE(batched.ok());
  std::vector<uint64_t> joined;
  std::vector<size_t> offsets;
  for (const LoggedWrite& w : log) {
    offsets.push_back(joined.size());
    joined.insert(joined.end(), w.hashes.begin(), w.hashes.end());
  }
  size_t total_applied = 0;
  for (size_t begin = 0, run = 1; begin < log.size(); begin += run, run = run * 3 % 17 + 1) {
    const size_t end = std::min(log.size(), begin + run);
    std::vector<ShardWrite> writes;
    std::vector<uint64_t> positions;
    for (size_t i = begin; i < end; ++i) {
      const bool contiguous = (begin / 7) % 2 == 0;
      writes.push_back(write_of(
          log[i], contiguous ? absl::MakeConstSpan(joined).subspan(offsets[i], log[i].hashes.size())
                             : absl::MakeConstSpan(log[i].hashes)));
      positions.push_back(log[i].position);
    }
    absl::StatusOr<size_t> applied = (*batched)->ApplyShardWrites(writes, positions);
    ASSERT_TRUE(applied.ok()) << applied.status();
    total_applied += *applied;
  }
  EXPECT_EQ(total_applied, log.size());
  expect_same(**batched, "ApplyShardWrites");

  // Applying a write the shard holds already changes nothing.
  const LoggedWrite& last = log.back();
  absl::StatusOr<bool> again = (*replayed)->ApplyShardWrite(
      {.kind = last.kind, .shard = last.shard, .hashes = last.hashes}, last.position);
  ASSERT_TRUE(again.ok());
  EXPECT_FALSE(*again);
}

TEST(ApplyShardWriteTest, ABadWriteAmongManyIsNamedAndNoneIsApplied) {
  auto f = CuckooFilter::Create({.capacity = 10'000, .shards = 4, .seed = 1});
  ASSERT_TRUE(f.ok());
  const uint64_t h = (*f)->Hash("k");
  const uint64_t hashes[] = {h};
  // The key's shard: the one a filter of the same shape accepts it in.
  uint32_t shard = 0;
  auto probe = CuckooFilter::FromShape((*f)->shape());
  ASSERT_TRUE(probe.ok());
  while (!(*probe)->ApplyShardWrite({.shard = shard, .hashes = hashes}, 1).ok()) ++shard;
  const ShardWrite good{.shard = shard, .hashes = absl::MakeConstSpan(hashes)};
  const ShardWrite wrong_shard{.shard = (shard + 1) % 4, .hashes = absl::MakeConstSpan(hashes)};
  const ShardWrite writes[] = {good, wrong_shard};
  const uint64_t positions[] = {1, 2};
  absl::StatusOr<size_t> r = (*f)->ApplyShardWrites(writes, positions);
  ASSERT_TRUE(absl::IsInvalidArgument(r.status())) << r.status();
  EXPECT_TRUE(absl::StartsWith(r.status().message(), "write 1: ")) << r.status();
  EXPECT_FALSE((*f)->MayContain("k"));
  EXPECT_EQ((*f)->ShardPositions()[shard], 0u);
  // Positions must pair with writes.
  EXPECT_TRUE(absl::IsInvalidArgument(
      (*f)->ApplyShardWrites(writes, absl::MakeConstSpan(positions, 1)).status()));
  // The good one alone goes in; again, it changes nothing.
  r = (*f)->ApplyShardWrites(absl::MakeConstSpan(writes, 1), absl::MakeConstSpan(positions, 1));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(*r, 1u);
  EXPECT_TRUE((*f)->MayContain("k"));
  r = (*f)->ApplyShardWrites(absl::MakeConstSpan(writes, 1), absl::MakeConstSpan(positions, 1));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(*r, 0u);
}

TEST(ApplyShardWriteTest, RejectsWritesThatCannotBelongToTheFilter) {
  auto f = CuckooFilter::Create({.capacity = 10'000, .shards = 4, .seed = 1});
  ASSERT_TRUE(f.ok());
  EXPECT_TRUE(absl::IsInvalidArgument((*f)->ApplyShardWrite({.shard = 4}, 1).status()));
  // A key's hash belongs to exactly one shard: the write is accepted there
  // only.
  const uint64_t hashes[] = {(*f)->Hash("k")};
  int accepted = 0;
  for (uint32_t s = 0; s < 4; ++s) {
    absl::StatusOr<bool> r =
        (*f)->ApplyShardWrite({.shard = s, .hashes = absl::MakeConstSpan(hashes)}, 1 + s);
    if (r.ok()) {
      ++accepted;
      EXPECT_TRUE(*r);
    } else {
      EXPECT_TRUE(absl::IsInvalidArgument(r.status())) << r.status();
    }
  }
  EXPECT_EQ(accepted, 1);
  EXPECT_TRUE((*f)->MayContain("k"));
}

}  // namespace
}  // namespace cuckoo
