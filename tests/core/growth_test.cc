// Growing filters (FilterShape::growing(), docs/GROWTH.md): the generation
// schedule and its hash-bit budget, growth without false negatives, the
// false-positive bound, the ceiling, and deterministic replay of growth.
#include <algorithm>
#include <bit>
#include <cstdint>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/cuckoo_filter.h"
#include "core/filter_options.h"
#include "core/hash.h"
#include "gtest/gtest.h"
#include "tests/util/keys.h"

namespace cuckoo {
namespace {

using ::cuckoo::testing::HashedKey;

std::unique_ptr<CuckooFilter> MakeGrowing(uint64_t capacity, double rate, uint32_t factor,
                                          uint64_t max_capacity = 0, uint32_t shards = 0,
                                          std::optional<bool> semi_sort = std::nullopt) {
  FilterOptions o{.capacity = capacity,
                  .false_positive_rate = rate,
                  .shards = shards,
                  .seed = 42,
                  .semi_sort = semi_sort,
                  .growth_factor = factor,
                  .max_capacity = max_capacity};
  absl::StatusOr<std::unique_ptr<CuckooFilter>> f = CuckooFilter::Create(o);
  EXPECT_TRUE(f.ok()) << f.status();
  return f.ok() ? *std::move(f) : nullptr;
}

// Item 6 of the issue: for every reachable configuration, every generation's
// shard, bucket and fingerprint bits are disjoint parts of the 64-bit hash,
// and the generations' bounds add up to at most the rate.
TEST(GenerationScheduleTest, EveryConfigurationKeepsHashBitsDisjointAndBoundsBelowTheRate) {
  size_t configurations = 0;
  for (double rate : {0.5, 0.1, 0.03, 0.002, 0.001, 1e-5, 1e-7}) {
    for (uint32_t factor = 2; factor <= kMaxGrowthFactor; ++factor) {
      for (uint64_t capacity :
           {uint64_t{1}, uint64_t{1000}, uint64_t{1} << 20, uint64_t{1} << 32, kMaxCapacity / 2}) {
        for (uint32_t shards : {1u, 16u, 4096u}) {
          for (uint32_t b : {2u, 4u, 8u}) {
            for (bool semi : {false, true}) {
              if (semi && b != 4) continue;
              for (uint64_t max_capacity : {uint64_t{0}, capacity * 3, capacity * 1000}) {
                if (max_capacity > kMaxCapacity) continue;
                absl::StatusOr<FilterShape> shape = ComputeShape({.capacity = capacity,
                                                                  .false_positive_rate = rate,
                                                                  .bucket_size = b,
                                                                  .shards = shards,
                                                                  .seed = 1,
                                                                  .semi_sort = semi,
                                                                  .growth_factor = factor,
                                                                  .max_capacity = max_capacity});
                if (!shape.ok()) continue;  // Refused with a reason (checked elsewhere).
                ++configurations;
                const std::vector<GenerationShape> gens = GenerationSchedule(*shape);
                ASSERT_GE(gens.size(), 1u);
                ASSERT_LE(gens.size(), kMaxGenerations);
                double sum = 0;
                uint64_t reach = 0;
                for (size_t g = 0; g < gens.size(); ++g) {
                  const GenerationShape& gen = gens[g];
                  SCOPED_TRACE(shape->DebugString() + " generation " + std::to_string(g));
                  // [shard: s][bucket source: >= bit_width(m) + 8][fingerprint: f]
                  const uint32_t s = shape->shard_bits, f = gen.fingerprint_bits;
                  ASSERT_LE(s + f + std::bit_width(gen.buckets_per_shard) + kMinSpareBucketHashBits,
                            64u);
                  const uint64_t fp_mask = (uint64_t{1} << f) - 1;
                  const uint64_t shard_mask = s == 0 ? 0 : ~uint64_t{0} << (64 - s);
                  const uint64_t bucket_mask = ~fp_mask & ~shard_mask;
                  ASSERT_EQ(fp_mask & shard_mask, 0u);
                  ASSERT_GE(std::popcount(bucket_mask),
                            std::bit_width(gen.buckets_per_shard) + kMinSpareBucketHashBits);
                  ASSERT_TRUE(ValidateShape(GenerationTableShape(*shape, gen)).ok());
                  if (g > 0) {
                    ASSERT_GE(f, gens[g - 1].fingerprint_bits);
                    ASSERT_LE(gen.buckets_per_shard, gens[g - 1].buckets_per_shard * factor);
                    if (g + 1 < gens.size()) {
                      ASSERT_EQ(gen.buckets_per_shard, gens[g - 1].buckets_per_shard * factor);
                    }
                  }
                  sum += gen.false_positive_bound;
                  reach += gen.planned_items;
                }
                ASSERT_LE(sum, rate);
                if (max_capacity != 0) {
                  ASSERT_GE(reach, max_capacity);
                }
              }
            }
          }
        }
      }
    }
  }
  EXPECT_GT(configurations, 2000u);
}

TEST(GenerationScheduleTest, RefusesImpossibleGrowthSettingsNamingTheField) {
  auto error = [](FilterOptions o) {
    absl::StatusOr<FilterShape> s = ComputeShape(o);
    return s.ok() ? std::string("ok") : std::string(s.status().message());
  };
  EXPECT_NE(error({.capacity = 1000, .growth_factor = 1}).find("growth_factor=1"),
            std::string::npos);
  EXPECT_NE(error({.capacity = 1000, .growth_factor = 9}).find("growth_factor=9"),
            std::string::npos);
  EXPECT_NE(error({.capacity = 1000, .fingerprint_bits = 12, .growth_factor = 2})
                .find("fingerprint_bits=12 cannot be given"),
            std::string::npos);
  EXPECT_NE(error({.capacity = 1000, .growth_factor = 2, .max_capacity = 1000})
                .find("max_capacity=1000 must be more than capacity"),
            std::string::npos);
  EXPECT_NE(error({.capacity = 1000, .max_capacity = 5000}).find("needs growth_factor"),
            std::string::npos);
  EXPECT_NE(error({.capacity = 1000,
                   .false_positive_rate = 1e-6,
                   .growth_factor = 2,
                   .max_capacity = kMaxCapacity})
                .find("out of reach"),
            std::string::npos);
}

// Inserts hashes [from, to) of stream 0 in batches; every result must be
// kInserted.
void InsertRange(CuckooFilter& f, uint64_t from, uint64_t to) {
  std::vector<uint64_t> h;
  std::vector<InsertResult> r;
  for (uint64_t at = from; at < to;) {
    const uint64_t end = std::min(to, at + 4096);
    h.clear();
    for (uint64_t i = at; i < end; ++i) h.push_back(HashedKey(0, i));
    r.assign(h.size(), InsertResult::kFull);
    f.InsertHashed(h, false, absl::MakeSpan(r));
    for (size_t k = 0; k < r.size(); ++k) {
      ASSERT_EQ(r[k], InsertResult::kInserted) << "key " << at + k;
    }
    at = end;
  }
}

// Looks up hashes [from, to) of `stream`; returns how many were found.
uint64_t CountFound(const CuckooFilter& f, uint64_t stream, uint64_t from, uint64_t to,
                    uint64_t skip_every = 0) {
  std::vector<uint64_t> h;
  std::vector<char> r;
  uint64_t found = 0;
  for (uint64_t at = from; at < to;) {
    const uint64_t end = std::min(to, at + 4096);
    h.clear();
    for (uint64_t i = at; i < end; ++i) {
      if (skip_every != 0 && i % skip_every == 0) continue;
      h.push_back(HashedKey(stream, i));
    }
    std::unique_ptr<bool[]> out(new bool[h.size()]);
    f.LookupHashed(h, absl::MakeSpan(out.get(), h.size()));
    for (size_t k = 0; k < h.size(); ++k) found += out[k] ? 1 : 0;
    at = end;
  }
  return found;
}

class GrowthTest : public ::testing::TestWithParam<std::tuple<uint32_t, bool>> {};

// Grows a filter made for 1,000 keys 1000-fold, checking at every tenfold
// step that every key is found, the measured false-positive rate is below
// the requested one, and the bound it reports is too.
TEST_P(GrowthTest, GrowsAThousandFoldWithNoFalseNegativeAndTheRateKept) {
  const auto [factor, semi] = GetParam();
  const double rate = 0.01;
  std::unique_ptr<CuckooFilter> f = MakeGrowing(1000, rate, factor, 0, 0, semi);
  ASSERT_NE(f, nullptr);
  uint64_t n = 0;
  for (uint64_t target : {10'000, 100'000, 1'000'000}) {
    InsertRange(*f, n, target);
    n = target;
    ASSERT_EQ(CountFound(*f, 0, 0, n), n) << "false negatives at " << n;
    const uint64_t absent = 200'000;
    const double measured = static_cast<double>(CountFound(*f, 1, 0, absent)) / absent;
    const FilterStats st = f->Stats();
    EXPECT_LE(measured, rate) << n;
    EXPECT_LE(st.false_positive_bound, rate);
    EXPECT_LE(st.expected_false_positive_rate, st.false_positive_bound);
    EXPECT_GT(st.generations.size(), 1u);
    EXPECT_EQ(st.items, n);
    uint64_t items = 0;
    for (const GenerationStats& g : st.generations) items += g.items;
    EXPECT_EQ(items, n);
  }
}

INSTANTIATE_TEST_SUITE_P(FactorsAndKinds, GrowthTest,
                         ::testing::Combine(::testing::Values(2u, 4u), ::testing::Bool()));

TEST(GrowthTest, DeletesInterleavedWithGrowthLeaveEveryOtherKeyFound) {
  std::unique_ptr<CuckooFilter> f = MakeGrowing(1000, 0.002, 2);
  ASSERT_NE(f, nullptr);
  uint64_t n = 0;
  std::vector<uint64_t> del;
  std::vector<DeleteResult> dr;
  for (uint64_t target : {5'000, 20'000, 80'000, 200'000}) {
    InsertRange(*f, n, target);
    // Delete every 7th key inserted in this step.
    del.clear();
    for (uint64_t i = n; i < target; ++i) {
      if (i % 7 == 0) del.push_back(HashedKey(0, i));
    }
    dr.assign(del.size(), DeleteResult::kNotFound);
    f->DeleteHashed(del, absl::MakeSpan(dr));
    for (DeleteResult r : dr) ASSERT_EQ(r, DeleteResult::kDeleted);
    n = target;
    uint64_t kept = 0;
    for (uint64_t i = 0; i < n; ++i) kept += i % 7 != 0;
    ASSERT_EQ(CountFound(*f, 0, 0, n, 7), kept) << "false negatives at " << n;
    // A delete whose fingerprint several generations hold removes nothing.
    EXPECT_GE(f->items(), kept);
    EXPECT_LE(f->items(), kept + kept / 100);
  }
}

TEST(GrowthTest, FullOnlyAtMaxCapacityAndNothingEvicted) {
  const uint64_t max_capacity = 50'000;
  std::unique_ptr<CuckooFilter> f = MakeGrowing(1000, 0.01, 2, max_capacity, 4);
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f->Stats().reachable_capacity, max_capacity);
  uint64_t inserted = 0;
  std::vector<uint64_t> placed;
  for (uint64_t i = 0; i < 4 * max_capacity; ++i) {
    uint64_t h = HashedKey(0, i);
    InsertResult r;
    f->InsertHashed({&h, 1}, false, {&r, 1});
    if (r == InsertResult::kFull) continue;
    ASSERT_EQ(r, InsertResult::kInserted);
    placed.push_back(h);
    ++inserted;
  }
  // Every shard reached its share of the ceiling (none was FULL early), and
  // none passed it.
  EXPECT_EQ(inserted, max_capacity);
  const FilterStats st = f->Stats();
  EXPECT_EQ(st.items, max_capacity);
  EXPECT_EQ(st.generations.size(), st.max_generations);
  std::unique_ptr<bool[]> out(new bool[placed.size()]);
  f->LookupHashed(placed, absl::MakeSpan(out.get(), placed.size()));
  for (size_t k = 0; k < placed.size(); ++k) ASSERT_TRUE(out[k]) << k;
}

// Issue 29, item 10: a filter created with --capacity=1000 --growth-factor=2
// --max-capacity=5000 took 5,305 keys: the last generation's table had room
// past the ceiling, which only bounded the tables. The ceiling counts items.
TEST(GrowthTest, MaxCapacityAcceptedMoreKeysThanItsCeiling) {
  std::unique_ptr<CuckooFilter> f = MakeGrowing(1000, 0.002, 2, 5000);
  ASSERT_NE(f, nullptr);
  ASSERT_EQ(f->shape().shards, 1u);
  EXPECT_EQ(f->ShardCeiling(0), 5000u);
  uint64_t inserted = 0;
  for (uint64_t batch = 0; batch < 20; ++batch) {
    std::vector<uint64_t> h;
    for (uint64_t i = 0; i < 1000; ++i) h.push_back(HashedKey(0, batch * 1000 + i));
    std::vector<InsertResult> r(h.size());
    f->InsertHashed(h, false, absl::MakeSpan(r));
    inserted += std::count(r.begin(), r.end(), InsertResult::kInserted);
  }
  EXPECT_EQ(inserted, 5000u);
  EXPECT_EQ(f->items(), 5000u);
  EXPECT_EQ(f->Stats().reachable_capacity, 5000u);
}

TEST(GrowthTest, ABatchThatReachesTheCeilingAppliesItsKeysInRequestOrder) {
  std::unique_ptr<CuckooFilter> f = MakeGrowing(1000, 0.002, 2, 5000);
  ASSERT_NE(f, nullptr);
  std::vector<uint64_t> h;
  for (uint64_t i = 0; i < 8000; ++i) h.push_back(HashedKey(0, i));
  std::vector<InsertResult> r(h.size());
  f->InsertHashed(h, false, absl::MakeSpan(r));
  for (size_t i = 0; i < h.size(); ++i) {
    ASSERT_EQ(r[i], i < 5000 ? InsertResult::kInserted : InsertResult::kFull) << i;
  }
  // At the ceiling: a key the filter holds is present with if_absent, a new
  // one FULL, and nothing changes.
  const uint64_t changes = f->changes();
  InsertResult again[2];
  const uint64_t two[2] = {h[7], h[7000]};
  f->InsertHashed(two, true, again);
  EXPECT_EQ(again[0], InsertResult::kAlreadyPresent);
  EXPECT_EQ(again[1], InsertResult::kFull);
  EXPECT_EQ(f->changes(), changes);
  // A delete makes room for one key.
  DeleteResult d;
  f->DeleteHashed({&h[0], 1}, {&d, 1});
  ASSERT_EQ(d, DeleteResult::kDeleted);
  f->InsertHashed({&h[7000], 1}, false, {&again[1], 1});
  EXPECT_EQ(again[1], InsertResult::kInserted);
  f->InsertHashed({&h[7001], 1}, false, {&again[1], 1});
  EXPECT_EQ(again[1], InsertResult::kFull);
}

TEST(GrowthTest, FixedAndUnboundedFiltersHaveNoShardCeiling) {
  absl::StatusOr<std::unique_ptr<CuckooFilter>> fixed = CuckooFilter::Create({.capacity = 1000});
  ASSERT_TRUE(fixed.ok());
  EXPECT_EQ((*fixed)->ShardCeiling(0), UINT64_MAX);
  std::unique_ptr<CuckooFilter> unbounded = MakeGrowing(1000, 0.002, 2);
  ASSERT_NE(unbounded, nullptr);
  EXPECT_EQ(unbounded->ShardCeiling(0), UINT64_MAX);
  std::unique_ptr<CuckooFilter> sharded = MakeGrowing(1000, 0.01, 2, 50'001, 4);
  ASSERT_NE(sharded, nullptr);
  uint64_t sum = 0;
  for (uint32_t s = 0; s < 4; ++s) sum += sharded->ShardCeiling(s);
  EXPECT_EQ(sum, 50'001u);
  EXPECT_EQ(sharded->ShardCeiling(0), 12'501u);
  EXPECT_EQ(sharded->ShardCeiling(3), 12'500u);
}

TEST(GrowthTest, RepeatedCopiesOfOneKeyNeverGrowTheFilter) {
  std::unique_ptr<CuckooFilter> f = MakeGrowing(1000, 0.01, 2);
  ASSERT_NE(f, nullptr);
  const uint64_t bytes = f->memory_bytes();
  int full = 0;
  for (int i = 0; i < 1000; ++i) full += f->Insert("same key") == InsertResult::kFull;
  EXPECT_EQ(f->Stats().generations.size(), 1u);
  EXPECT_EQ(f->memory_bytes(), bytes);
  EXPECT_EQ(full, 1000 - 8);  // 2b copies fit.
}

TEST(GrowthTest, IfAbsentSeesCopiesInEveryGeneration) {
  std::unique_ptr<CuckooFilter> f = MakeGrowing(1000, 0.001, 2);
  ASSERT_NE(f, nullptr);
  InsertRange(*f, 0, 20'000);
  ASSERT_GT(f->Stats().generations.size(), 2u);
  std::vector<uint64_t> h;
  for (uint64_t i = 0; i < 20'000; ++i) h.push_back(HashedKey(0, i));
  std::vector<InsertResult> r(h.size(), InsertResult::kFull);
  f->InsertHashed(h, /*if_absent=*/true, absl::MakeSpan(r));
  for (size_t k = 0; k < r.size(); ++k) ASSERT_EQ(r[k], InsertResult::kAlreadyPresent) << k;
  EXPECT_EQ(f->items(), 20'000u);
}

TEST(GrowthTest, CountAddsUpCopiesAcrossGenerations) {
  std::unique_ptr<CuckooFilter> f = MakeGrowing(100, 0.001, 2, 0, 1);
  ASSERT_NE(f, nullptr);
  ASSERT_EQ(f->Insert("twice"), InsertResult::kInserted);
  // Fill until the shard grows twice, then add the key again: one copy in
  // generation 0, one in the newest.
  uint64_t i = 0;
  while (f->ShardGenerations(0) < 3) InsertRange(*f, i, i + 1), ++i;
  ASSERT_EQ(f->Insert("twice"), InsertResult::kInserted);
  EXPECT_EQ(f->ApproximateCount("twice"), 2u);
}

// A delete removes a copy only from a generation that alone holds the key's
// fingerprint: when several do, one of them may be another key's, and
// removing it would make that key a false negative.
TEST(GrowthTest, DeleteRemovesTheOnlyCopyButNoneWhenSeveralGenerationsMatch) {
  std::unique_ptr<CuckooFilter> f = MakeGrowing(100, 0.001, 2, 0, 1);
  ASSERT_NE(f, nullptr);
  ASSERT_EQ(f->Insert("twice"), InsertResult::kInserted);
  uint64_t i = 0;
  while (f->ShardGenerations(0) < 3) InsertRange(*f, i, i + 1), ++i;
  ASSERT_EQ(f->Insert("once"), InsertResult::kInserted);
  ASSERT_EQ(f->Insert("twice"), InsertResult::kInserted);
  const uint64_t items = f->items();
  EXPECT_EQ(f->Delete("once"), DeleteResult::kDeleted);
  EXPECT_EQ(f->items(), items - 1);
  EXPECT_FALSE(f->MayContain("once"));
  EXPECT_EQ(f->Delete("once"), DeleteResult::kNotFound);
  // In two generations: reported deleted, nothing removed, still present.
  EXPECT_EQ(f->Delete("twice"), DeleteResult::kDeleted);
  EXPECT_EQ(f->items(), items - 1);
  EXPECT_TRUE(f->MayContain("twice"));
}

// With a high rate, many deletes find their key's fingerprint in more than
// one generation; none of them may cost another key its presence.
TEST(GrowthTest, DeletesNeverMakeAnotherKeyAFalseNegative) {
  std::unique_ptr<CuckooFilter> f = MakeGrowing(1000, 0.2, 2, 0, 1);
  ASSERT_NE(f, nullptr);
  InsertRange(*f, 0, 100'000);
  std::vector<uint64_t> del;
  for (uint64_t i = 0; i < 100'000; i += 2) del.push_back(HashedKey(0, i));
  std::vector<DeleteResult> dr(del.size());
  f->DeleteHashed(del, absl::MakeSpan(dr));
  for (DeleteResult r : dr) ASSERT_EQ(r, DeleteResult::kDeleted);
  std::vector<uint64_t> kept;
  for (uint64_t i = 1; i < 100'000; i += 2) kept.push_back(HashedKey(0, i));
  std::unique_ptr<bool[]> out(new bool[kept.size()]);
  f->LookupHashed(kept, absl::MakeSpan(out.get(), kept.size()));
  for (size_t k = 0; k < kept.size(); ++k) ASSERT_TRUE(out[k]) << "false negative " << k;
  // Some deletes were ambiguous (the rate is 20%) and removed nothing.
  EXPECT_GT(f->items(), 50'000u);
  EXPECT_LT(f->items(), 50'000u + 50'000u / 4);
}

// Growth happens inside logged writes: replaying the log on the filter as
// it was reproduces every generation bit for bit (what WAL replay and the
// cluster's replicas rely on).
TEST(GrowthTest, ReplayingTheLoggedWritesReproducesEveryGeneration) {
  std::unique_ptr<CuckooFilter> live = MakeGrowing(500, 0.005, 2, 0, 4);
  ASSERT_NE(live, nullptr);
  struct Logged {
    ShardWrite write;
    std::vector<uint64_t> hashes;
  };
  std::vector<Logged> log;
  uint64_t position = 0;
  auto record = [&](const ShardWrite& w) {
    log.push_back({w, std::vector<uint64_t>(w.hashes.begin(), w.hashes.end())});
    return ++position;
  };
  std::vector<uint64_t> h;
  for (uint64_t round = 0; round < 40; ++round) {
    h.clear();
    for (uint64_t i = 0; i < 1500; ++i) h.push_back(HashedKey(0, round * 1500 + i));
    std::vector<InsertResult> r(h.size());
    live->InsertHashed(
        h, round % 3 == 0, absl::MakeSpan(r), [] { return false; }, record);
    if (round % 4 == 3) {
      std::vector<uint64_t> d(h.begin(), h.begin() + 300);
      std::vector<DeleteResult> dr(d.size());
      live->DeleteHashed(
          d, absl::MakeSpan(dr), [] { return false; }, record);
    }
  }
  absl::StatusOr<std::unique_ptr<CuckooFilter>> replica = CuckooFilter::FromShape(live->shape());
  ASSERT_TRUE(replica.ok());
  for (size_t k = 0; k < log.size(); ++k) {
    ShardWrite w = log[k].write;
    w.hashes = log[k].hashes;
    ASSERT_TRUE((*replica)->ApplyShardWrite(w, k + 1).ok());
  }
  ASSERT_GT(live->Stats().generations.size(), 3u);
  for (uint32_t s = 0; s < live->shape().shards; ++s) {
    ASSERT_EQ(live->ShardGenerations(s), (*replica)->ShardGenerations(s));
    std::vector<std::vector<uint8_t>> a, b;
    std::vector<std::pair<uint64_t, uint64_t>> ca, cb;
    live->ReadShardGenerations(
        s, [&](absl::Span<const CuckooFilter::GenerationView> g, const CuckooFilter::ShardState&) {
          for (const auto& v : g) {
            a.emplace_back(v.bytes.begin(), v.bytes.end());
            ca.emplace_back(v.items, v.rng_state);
          }
        });
    (*replica)->ReadShardGenerations(
        s, [&](absl::Span<const CuckooFilter::GenerationView> g, const CuckooFilter::ShardState&) {
          for (const auto& v : g) {
            b.emplace_back(v.bytes.begin(), v.bytes.end());
            cb.emplace_back(v.items, v.rng_state);
          }
        });
    EXPECT_EQ(a, b) << "shard " << s;
    EXPECT_EQ(ca, cb) << "shard " << s;
  }
}

// Replays `log` into a new filter of `shape`, as the write-ahead log does.
std::unique_ptr<CuckooFilter> Replay(
    const FilterShape& shape,
    const std::vector<std::pair<ShardWrite, std::vector<uint64_t>>>& log) {
  absl::StatusOr<std::unique_ptr<CuckooFilter>> replica = CuckooFilter::FromShape(shape);
  EXPECT_TRUE(replica.ok());
  if (!replica.ok()) return nullptr;
  for (size_t k = 0; k < log.size(); ++k) {
    ShardWrite w = log[k].first;
    w.hashes = log[k].second;
    EXPECT_TRUE((*replica)->ApplyShardWrite(w, k + 1).ok());
  }
  return *std::move(replica);
}

TEST(GrowthTest, ReplayAtTheCeilingGivesTheSameResultsAndTables) {
  std::unique_ptr<CuckooFilter> live = MakeGrowing(1000, 0.002, 2, 5000);
  ASSERT_NE(live, nullptr);
  std::vector<std::pair<ShardWrite, std::vector<uint64_t>>> log;
  uint64_t position = 0;
  auto record = [&](const ShardWrite& w) {
    EXPECT_TRUE(w.ceiling);
    log.emplace_back(w, std::vector<uint64_t>(w.hashes.begin(), w.hashes.end()));
    return ++position;
  };
  for (uint64_t round = 0; round < 8; ++round) {
    std::vector<uint64_t> h;
    for (uint64_t i = 0; i < 900; ++i) h.push_back(HashedKey(0, round * 900 + i));
    std::vector<InsertResult> r(h.size());
    live->InsertHashed(
        h, round % 2 == 0, absl::MakeSpan(r), [] { return false; }, record);
  }
  ASSERT_EQ(live->items(), 5000u);
  std::unique_ptr<CuckooFilter> replica = Replay(live->shape(), log);
  ASSERT_NE(replica, nullptr);
  EXPECT_EQ(replica->items(), 5000u);
  EXPECT_EQ(replica->ShardGenerations(0), live->ShardGenerations(0));
}

// A write-ahead log from a cuckood that did not enforce the ceiling holds
// acknowledged keys past it: its records (no `ceiling` flag) replay as they
// were applied, so none of them is lost.
TEST(GrowthTest, ReplayOfAWriteLoggedBeforeTheCeilingKeepsEveryKey) {
  std::unique_ptr<CuckooFilter> f = MakeGrowing(1000, 0.002, 2, 5000);
  ASSERT_NE(f, nullptr);
  std::vector<uint64_t> h;
  for (uint64_t i = 0; i < 5300; ++i) h.push_back(HashedKey(0, i));
  std::vector<std::pair<ShardWrite, std::vector<uint64_t>>> log;
  log.emplace_back(ShardWrite{.kind = ShardWrite::kInsert, .shard = 0}, h);
  std::unique_ptr<CuckooFilter> replica = Replay(f->shape(), log);
  ASSERT_NE(replica, nullptr);
  EXPECT_GT(replica->items(), 5000u);  // As many as the tables took.
  log[0].first.ceiling = true;
  replica = Replay(f->shape(), log);
  ASSERT_NE(replica, nullptr);
  EXPECT_EQ(replica->items(), 5000u);
}

std::unique_ptr<CuckooFilter> MakeGrowingOnRepeats(uint64_t capacity, uint64_t max_capacity,
                                                   uint32_t shards = 1) {
  absl::StatusOr<std::unique_ptr<CuckooFilter>> f =
      CuckooFilter::Create({.capacity = capacity,
                            .false_positive_rate = 0.002,
                            .shards = shards,
                            .seed = 7,
                            .growth_factor = 2,
                            .max_capacity = max_capacity,
                            .grow_on_repeats = true});
  EXPECT_TRUE(f.ok()) << f.status();
  return f.ok() ? *std::move(f) : nullptr;
}

// RedisBloom's behaviour, for filters made over the Redis port: the 9th
// copy of a key (b = 4) grows the filter, and the count counts every copy.
TEST(GrowthTest, RepeatedCopiesGrowWithGrowOnRepeatsAndCountEveryCopy) {
  std::unique_ptr<CuckooFilter> f = MakeGrowingOnRepeats(1024, 1024 * 1024);
  ASSERT_NE(f, nullptr);
  ASSERT_TRUE(f->shape().grow_on_repeats);
  for (int i = 0; i < 40; ++i) ASSERT_EQ(f->Insert("seen"), InsertResult::kInserted) << i;
  EXPECT_EQ(f->ApproximateCount("seen"), 40u);
  EXPECT_EQ(f->items(), 40u);
  EXPECT_EQ(f->ShardGenerations(0), 5u);  // 8 copies in each.
  EXPECT_TRUE(f->MayContain("seen"));
}

// The same through one batch (a pipelined run of CF.ADDs is one): each
// generation that fills with the key's copies grows the next.
TEST(GrowthTest, ABatchOfOneKeysCopiesGrowsAsManyGenerationsAsItNeeds) {
  std::unique_ptr<CuckooFilter> f = MakeGrowingOnRepeats(1024, 1024 * 1024);
  ASSERT_NE(f, nullptr);
  std::vector<uint64_t> h(40, f->Hash("seen"));
  std::vector<InsertResult> r(h.size(), InsertResult::kFull);
  f->InsertHashed(h, /*if_absent=*/false, absl::MakeSpan(r));
  for (size_t k = 0; k < r.size(); ++k) ASSERT_EQ(r[k], InsertResult::kInserted) << k;
  EXPECT_EQ(f->ApproximateCount("seen"), 40u);
  EXPECT_EQ(f->ShardGenerations(0), 5u);
}

// Growth for repeats is bounded by the schedule, which max_capacity cuts:
// past the last generation the key is kFull, the memory stops where the
// schedule does, and every other key is still found.
TEST(GrowthTest, RepeatsStopAtTheLastGenerationOfTheSchedule) {
  std::unique_ptr<CuckooFilter> f = MakeGrowingOnRepeats(1000, 16'000);
  ASSERT_NE(f, nullptr);
  InsertRange(*f, 0, 500);
  ASSERT_EQ(f->ShardGenerations(0), 1u);
  const uint64_t first_bytes = f->memory_bytes();
  const uint32_t generations = f->Stats().max_generations;
  ASSERT_GE(generations, 4u);
  ASSERT_LT(generations, 10u);
  int inserted = 0;
  int full = 0;
  for (int i = 0; i < 10'000; ++i) {
    const InsertResult r = f->Insert("hostile");
    inserted += r == InsertResult::kInserted;
    full += r == InsertResult::kFull;
  }
  EXPECT_EQ(f->ShardGenerations(0), generations);
  EXPECT_EQ(static_cast<uint32_t>(inserted), 8 * generations);
  EXPECT_EQ(inserted + full, 10'000);
  EXPECT_EQ(f->ApproximateCount("hostile"), static_cast<uint32_t>(inserted));
  EXPECT_EQ(CountFound(*f, 0, 0, 500), 500u);
  // The memory is the first table's and the schedule's grown tables', no more.
  const std::vector<GenerationShape> schedule = GenerationSchedule(f->shape());
  uint64_t grown = 0;
  for (size_t g = 1; g < schedule.size(); ++g) {
    grown += CuckooFilter::GrownTableMemoryBytes(f->shape(), schedule[g]);
  }
  EXPECT_EQ(f->memory_bytes(), first_bytes + grown);
  const uint64_t bytes = f->memory_bytes();
  EXPECT_EQ(f->Insert("hostile"), InsertResult::kFull);
  EXPECT_EQ(f->memory_bytes(), bytes);
}

// Growth for repeats happens inside logged writes like any growth: the log
// replayed reproduces the generations and the counts.
TEST(GrowthTest, ReplayOfRepeatedInsertsReproducesTheGenerations) {
  std::unique_ptr<CuckooFilter> live = MakeGrowingOnRepeats(500, 500 * 1024, 2);
  ASSERT_NE(live, nullptr);
  std::vector<std::pair<ShardWrite, std::vector<uint64_t>>> log;
  uint64_t position = 0;
  auto record = [&](const ShardWrite& w) {
    log.emplace_back(w, std::vector<uint64_t>(w.hashes.begin(), w.hashes.end()));
    return ++position;
  };
  // 60 copies: 8 generations of the key's shard (of the 11 that
  // max_capacity leaves), other keys between them.
  for (uint64_t round = 0; round < 12; ++round) {
    std::vector<uint64_t> h;
    for (uint64_t i = 0; i < 20; ++i) h.push_back(HashedKey(0, round * 20 + i));
    for (int i = 0; i < 5; ++i) h.push_back(live->Hash("repeated"));
    std::vector<InsertResult> r(h.size());
    live->InsertHashed(
        h, /*if_absent=*/false, absl::MakeSpan(r), [] { return false; }, record);
    for (size_t k = 0; k < r.size(); ++k) ASSERT_EQ(r[k], InsertResult::kInserted) << k;
  }
  ASSERT_EQ(live->ApproximateCount("repeated"), 60u);
  // (The other keys alone, 240, never fill a shard's first table.)
  ASSERT_EQ(std::max(live->ShardGenerations(0), live->ShardGenerations(1)), 8u);
  std::unique_ptr<CuckooFilter> replica = Replay(live->shape(), log);
  ASSERT_NE(replica, nullptr);
  EXPECT_EQ(replica->ApproximateCount("repeated"), 60u);
  EXPECT_EQ(replica->items(), live->items());
  for (uint32_t s = 0; s < live->shape().shards; ++s) {
    ASSERT_EQ(replica->ShardGenerations(s), live->ShardGenerations(s)) << s;
    std::vector<std::vector<uint8_t>> a, b;
    live->ReadShardGenerations(
        s, [&](absl::Span<const CuckooFilter::GenerationView> g, const CuckooFilter::ShardState&) {
          for (const auto& v : g) a.emplace_back(v.bytes.begin(), v.bytes.end());
        });
    replica->ReadShardGenerations(
        s, [&](absl::Span<const CuckooFilter::GenerationView> g, const CuckooFilter::ShardState&) {
          for (const auto& v : g) b.emplace_back(v.bytes.begin(), v.bytes.end());
        });
    EXPECT_EQ(a, b) << "shard " << s;
  }
}

TEST(GrowthTest, GrowOnRepeatsIsForGrowingFiltersOnly) {
  absl::StatusOr<FilterShape> s = ComputeShape({.capacity = 1000, .grow_on_repeats = true});
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("grow_on_repeats needs growth_factor"), std::string::npos)
      << s.status();
  FilterShape fixed = *ComputeShape({.capacity = 1000});
  fixed.grow_on_repeats = true;
  EXPECT_NE(ValidateShape(fixed).message().find("grow_on_repeats=true are for growing filters"),
            std::string::npos)
      << ValidateShape(fixed);
}

TEST(GrowthTest, GrowthListenerHearsEveryTableAndMemoryBytesCountsThem) {
  std::unique_ptr<CuckooFilter> f = MakeGrowing(1000, 0.01, 4, 0, 2);
  ASSERT_NE(f, nullptr);
  const uint64_t start = f->memory_bytes();
  uint64_t heard = 0;
  int tables = 0;
  f->set_growth_listener([&](uint64_t bytes) {
    heard += bytes;
    ++tables;
  });
  InsertRange(*f, 0, 50'000);
  EXPECT_GT(tables, 2);
  EXPECT_EQ(f->memory_bytes(), start + heard);
  uint32_t grown = 0;
  for (uint32_t s = 0; s < 2; ++s) grown += f->ShardGenerations(s) - 1;
  EXPECT_EQ(static_cast<int>(grown), tables);
}

// --- Batched lookups before and after some shards grow (issue 30) ---

uint32_t ShardOf(const CuckooFilter& f, uint64_t h) {
  const uint32_t bits = f.shape().shard_bits;
  return bits == 0 ? 0 : static_cast<uint32_t>(h >> (64 - bits));
}

// Inserts keys of `stream` whose shard `pick` accepts until each such shard
// has at least `generations` tables; returns their hashes.
template <typename Pick>
std::vector<uint64_t> GrowShards(CuckooFilter& f, uint64_t stream, uint32_t generations,
                                 Pick pick) {
  std::vector<uint64_t> inserted, h;
  std::vector<InsertResult> r;
  auto done = [&] {
    for (uint32_t s = 0; s < f.shape().shards; ++s) {
      if (pick(s) && f.ShardGenerations(s) < generations) return false;
    }
    return true;
  };
  for (uint64_t i = 0; !done();) {
    h.clear();
    for (; h.size() < 512; ++i) {
      const uint64_t x = HashedKey(stream, i);
      if (pick(ShardOf(f, x))) h.push_back(x);
    }
    r.assign(h.size(), InsertResult::kFull);
    f.InsertHashed(h, false, absl::MakeSpan(r));
    for (InsertResult x : r) EXPECT_EQ(x, InsertResult::kInserted);
    inserted.insert(inserted.end(), h.begin(), h.end());
  }
  return inserted;
}

// Each of `hashes` looked up alone: a batch of one takes the per-shard path,
// which reads every generation of the key's shard.
std::vector<char> LookupOneByOne(const CuckooFilter& f, absl::Span<const uint64_t> hashes) {
  std::vector<char> out;
  for (const uint64_t h : hashes) {
    bool found = false;
    f.LookupHashed({&h, 1}, {&found, 1});
    out.push_back(found);
  }
  return out;
}

// `hashes` looked up in batches of `batch`.
std::vector<char> LookupInBatches(const CuckooFilter& f, absl::Span<const uint64_t> hashes,
                                  size_t batch) {
  std::vector<char> out;
  std::unique_ptr<bool[]> r(new bool[batch]);
  for (size_t at = 0; at < hashes.size(); at += batch) {
    const size_t m = std::min(batch, hashes.size() - at);
    f.LookupHashed(hashes.subspan(at, m), absl::MakeSpan(r.get(), m));
    out.insert(out.end(), r.get(), r.get() + m);
  }
  return out;
}

// Up to 64 shards a batch runs one lock-free pass over every shard's first
// table; above, shard by shard with the next shards' buckets prefetched.
class GrowingFilterTest : public ::testing::TestWithParam<uint32_t> {};

// A growing filter that has not grown has one table per shard, exactly as a
// fixed filter with its shape: the same keys give the same tables, and a
// batch must answer every key, present or absent, as that filter does.
TEST_P(GrowingFilterTest, BatchLookupBeforeGrowthFindsEveryKeyAndAnswersAsAFixedFilter) {
  std::unique_ptr<CuckooFilter> growing = MakeGrowing(20'000, 0.002, 2, 0, GetParam());
  ASSERT_NE(growing, nullptr);
  FilterShape shape = growing->shape();
  shape.growth_factor = 0;
  shape.max_capacity = 0;
  shape.false_positive_rate = 0;
  absl::StatusOr<std::unique_ptr<CuckooFilter>> fixed = CuckooFilter::FromShape(shape);
  ASSERT_TRUE(fixed.ok()) << fixed.status();
  const uint64_t n = 14'000;  // 70%: no shard of the fixed filter is full.
  ASSERT_NO_FATAL_FAILURE(InsertRange(*growing, 0, n));
  ASSERT_NO_FATAL_FAILURE(InsertRange(**fixed, 0, n));
  for (uint32_t s = 0; s < shape.shards; ++s) ASSERT_EQ(growing->ShardGenerations(s), 1u) << s;
  // Present and absent keys interleaved, so every batch spans the shards.
  std::vector<uint64_t> h;
  for (uint64_t i = 0; i < n; ++i) {
    h.push_back(HashedKey(0, i));
    h.push_back(HashedKey(1, i));
  }
  for (const size_t batch : {size_t{1000}, size_t{2}, size_t{4096}}) {
    const std::vector<char> got = LookupInBatches(*growing, h, batch);
    const std::vector<char> want = LookupInBatches(**fixed, h, batch);
    for (size_t k = 0; k < h.size(); ++k) {
      if (k % 2 == 0) {
        ASSERT_TRUE(got[k]) << "key " << k / 2 << ", batches of " << batch;
      }
      ASSERT_EQ(got[k], want[k]) << "key " << k << ", batches of " << batch;
    }
  }
}

// Even shards grow one generation, every fourth a second one, the others
// not at all; then the shards 1 mod 4 grow too (three quarters of the shards
// grown: batches then go newest table first, first tables last). Keys are
// in first and later tables. At both stages a batch must find every key (a
// pass over first tables alone would miss those in later ones, one over
// grown tables alone those of the other shards) and answer absent keys as
// single-key lookups, which read every generation.
TEST_P(GrowingFilterTest, BatchLookupAfterSomeShardsGrewFindsEveryKey) {
  std::unique_ptr<CuckooFilter> f = MakeGrowing(20'000, 0.002, 2, 0, GetParam());
  ASSERT_NE(f, nullptr);
  const uint32_t shards = f->shape().shards;
  ASSERT_NO_FATAL_FAILURE(InsertRange(*f, 0, 15'000));
  std::vector<uint64_t> present;
  for (uint64_t i = 0; i < 15'000; ++i) present.push_back(HashedKey(0, i));
  auto check = [&] {
    std::vector<uint64_t> h;
    for (size_t i = 0; i < present.size(); ++i) {
      h.push_back(present[i]);
      h.push_back(HashedKey(1, i));
    }
    const std::vector<char> one_by_one = LookupOneByOne(*f, h);
    for (const size_t batch : {size_t{1000}, size_t{2}, size_t{4096}}) {
      const std::vector<char> got = LookupInBatches(*f, h, batch);
      for (size_t k = 0; k < h.size(); ++k) {
        if (k % 2 == 0) {
          ASSERT_TRUE(got[k]) << "key " << k / 2 << " of shard " << ShardOf(*f, h[k])
                              << ", batches of " << batch;
        }
        ASSERT_EQ(got[k], one_by_one[k]) << "key " << k << ", batches of " << batch;
      }
    }
  };
  for (const auto& [stream, generations, every] :
       {std::tuple{2u, 2u, 2u}, std::tuple{3u, 3u, 4u}}) {
    const std::vector<uint64_t> more =
        // (every by value: clang 14 cannot capture a structured binding.)
        GrowShards(*f, stream, generations, [every = every](uint32_t s) { return s % every == 0; });
    present.insert(present.end(), more.begin(), more.end());
  }
  for (uint32_t s = 0; s < shards; ++s) {
    const uint32_t want = s % 4 == 0 ? 3 : s % 2 == 0 ? 2 : 1;
    ASSERT_EQ(f->ShardGenerations(s), shards == 1 ? 3 : want) << "shard " << s;
  }
  ASSERT_NO_FATAL_FAILURE(check());
  const std::vector<uint64_t> more = GrowShards(*f, 4, 2, [](uint32_t s) { return s % 4 == 1; });
  present.insert(present.end(), more.begin(), more.end());
  for (uint32_t s = 0; s < shards; ++s) {
    ASSERT_EQ(f->ShardGenerations(s) > 1, shards == 1 || s % 4 != 3) << "shard " << s;
  }
  ASSERT_NO_FATAL_FAILURE(check());
}

INSTANTIATE_TEST_SUITE_P(Shards, GrowingFilterTest, ::testing::Values(1u, 16u, 64u, 128u),
                         [](const auto& p) { return absl::StrCat(p.param, "Shards"); });

}  // namespace
}  // namespace cuckoo
