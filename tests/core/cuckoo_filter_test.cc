#include "core/cuckoo_filter.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "core/internal/filter_loading.h"
#include "tests/util/keys.h"

namespace cuckoo {

// For parameterised test names and messages (found by ADL).
void PrintTo(TableKind kind, std::ostream* os) { *os << TableKindName(kind); }

namespace {

using testing::Key;
using testing::Keys;
using testing::Views;

std::unique_ptr<CuckooFilter> MakeFilter(const FilterOptions& o) {
  absl::StatusOr<std::unique_ptr<CuckooFilter>> f = CuckooFilter::Create(o);
  EXPECT_TRUE(f.ok()) << f.status();
  return *std::move(f);
}

struct SizingCase {
  uint64_t capacity;
  uint32_t f;
  uint32_t b;
  bool semi = false;  // Semi-sorted buckets (b = 4).
};

void PrintTo(const SizingCase& c, std::ostream* os) {
  *os << "capacity=" << c.capacity << " f=" << c.f << " b=" << c.b
      << (c.semi ? " semi-sorted" : " packed");
}

class FilterSizingTest : public ::testing::TestWithParam<SizingCase> {};

// The promise behind `capacity`: that many distinct keys always fit.
TEST_P(FilterSizingTest, FilterSizedForCapacityAcceptsThatManyKeys) {
  const SizingCase c = GetParam();
  auto filter = MakeFilter({.capacity = c.capacity,
                            .fingerprint_bits = c.f,
                            .bucket_size = c.b,
                            .seed = 1234,
                            .semi_sort = c.semi});
  ASSERT_EQ(filter->shape().semi_sorted(), c.semi);
  std::vector<std::string> keys = Keys(0, c.capacity);
  std::vector<std::string_view> views = Views(keys);
  std::vector<InsertResult> out(keys.size());
  filter->InsertBatch(views, false, absl::MakeSpan(out));
  EXPECT_EQ(std::count(out.begin(), out.end(), InsertResult::kInserted),
            static_cast<ptrdiff_t>(c.capacity));
  EXPECT_EQ(filter->items(), c.capacity);
  std::unique_ptr<bool[]> found(new bool[keys.size()]);
  filter->LookupBatch(views, absl::Span<bool>(found.get(), keys.size()));
  EXPECT_EQ(std::count(found.get(), found.get() + keys.size(), false), 0);
}

INSTANTIATE_TEST_SUITE_P(
    Capacities, FilterSizingTest,
    ::testing::Values(SizingCase{1, 12, 4}, SizingCase{7, 12, 4}, SizingCase{100, 8, 2},
                      SizingCase{1000, 12, 4}, SizingCase{54'321, 12, 4}, SizingCase{54'321, 8, 2},
                      SizingCase{54'321, 16, 8}, SizingCase{54'321, 6, 4}, SizingCase{54'321, 4, 8},
                      SizingCase{54'321, 5, 2}, SizingCase{300'007, 12, 4},
                      SizingCase{300'007, 7, 4}, SizingCase{1, 12, 4, true},
                      SizingCase{7, 5, 4, true}, SizingCase{1000, 12, 4, true},
                      SizingCase{54'321, 5, 4, true}, SizingCase{54'321, 13, 4, true},
                      SizingCase{54'321, 16, 4, true}, SizingCase{54'321, 17, 4, true},
                      SizingCase{54'321, 32, 4, true}, SizingCase{300'007, 12, 4, true}),
    [](const auto& p) {
      return absl::StrFormat("n%u_f%u_b%u_%s", p.param.capacity, p.param.f, p.param.b,
                             p.param.semi ? "semi" : "packed");
    });

TEST(CuckooFilterTest, BitsPerItemAtTwelveBitFingerprintsStayUnder12_7ForAnyLargeCapacity) {
  for (uint64_t cap : {100'000'000ull, 130'000'000ull, 200'000'000ull, 123'456'789ull,
                       1'000'000'000ull, 16'777'217ull}) {
    absl::StatusOr<FilterShape> s = ComputeShape({.capacity = cap, .fingerprint_bits = 12});
    ASSERT_TRUE(s.ok()) << s.status();
    // The real allocation (pages are reserved, not touched, so this is cheap).
    auto filter = MakeFilter({.capacity = cap, .fingerprint_bits = 12});
    double bits = 8.0 * filter->memory_bytes() / cap;
    EXPECT_LE(bits, 12.7) << "capacity " << cap << ": " << s->DebugString();
  }
}

TEST(CuckooFilterTest, DefaultFilterIsSemiSortedAtUnder11_7BitsPerItemForAnyLargeCapacity) {
  // The default rate (0.002) needs f = 12; semi-sorted, that is 11 bits per slot.
  for (uint64_t cap :
       {100'000'000ull, 130'000'000ull, 123'456'789ull, 1'000'000'000ull, 16'777'217ull}) {
    auto filter = MakeFilter({.capacity = cap});
    ASSERT_EQ(filter->shape().table_kind, TableKind::kSemiSorted);
    ASSERT_EQ(filter->shape().fingerprint_bits, 12u);
    double bits = 8.0 * filter->memory_bytes() / cap;
    EXPECT_LE(bits, 11.7) << "capacity " << cap << ": " << filter->shape().DebugString();
  }
}

TEST(CuckooFilterTest, SemiSortedFilterTakesElevenTwelfthsOfThePackedMemory) {
  FilterOptions o{.capacity = 1'000'000, .fingerprint_bits = 12, .shards = 1, .seed = 1};
  auto packed = MakeFilter(o);
  o.semi_sort = true;
  auto semi = MakeFilter(o);
  ASSERT_EQ(packed->shape().buckets_per_shard, semi->shape().buckets_per_shard);
  // 44 bits per bucket instead of 48; the allocations are rounded to pages.
  EXPECT_EQ(semi->shape().table_bytes_per_shard(), (semi->shape().buckets_per_shard * 44 + 7) / 8);
  EXPECT_NEAR(static_cast<double>(semi->memory_bytes()) / packed->memory_bytes(), 11.0 / 12, 0.005);
  // The same false-positive rate is expected from both.
  EXPECT_EQ(semi->Stats().expected_false_positive_rate_at_capacity,
            packed->Stats().expected_false_positive_rate_at_capacity);
}

// The tests below run for both table kinds.
class CuckooFilterKindTest : public ::testing::TestWithParam<TableKind> {
 protected:
  // `o` with the table kind under test.
  static FilterOptions With(FilterOptions o) {
    o.semi_sort = GetParam() == TableKind::kSemiSorted;
    return o;
  }
  static std::unique_ptr<CuckooFilter> Make(const FilterOptions& o) {
    auto filter = MakeFilter(With(o));
    EXPECT_EQ(filter->shape().table_kind, GetParam());
    return filter;
  }
};

// A filter restored from its shards' bytes and counters continues exactly
// as the original does, whatever its kick generator's state (an even state
// once came back as state | 1, and a replay after a load then kicked other
// victims than the live run).
TEST(CuckooFilterTest, RestoredFilterContinuesExactlyLikeTheOriginal) {
  int even_states_seen = 0;
  for (int round = 0; round < 40; ++round) {
    auto a = CuckooFilter::Create(
        {.capacity = 2000, .shards = 1, .max_kicks = 50, .seed = static_cast<uint64_t>(round)});
    ASSERT_TRUE(a.ok());
    std::vector<std::string> keys;
    for (int i = 0; i < 2100; ++i) keys.push_back(Key(round, i));
    for (const std::string& k : keys) (*a)->Insert(k);
    auto b = CuckooFilter::FromShape((*a)->shape());
    ASSERT_TRUE(b.ok());
    const uint64_t t = (*a)->shape().table_bytes_per_shard();
    std::vector<uint8_t> bytes(t);
    const CuckooFilter::ShardState st = (*a)->CopyShard(0, bytes.data());
    even_states_seen += st.rng_state % 2 == 0;
    std::copy(bytes.begin(), bytes.end(),
              internal::FilterLoading::MutableShardBytes(**b, 0).begin());
    internal::FilterLoading::RestoreShard(**b, 0, st.items, st.rng_state, st.position);
    // Past full: every insert kicks.
    for (int i = 0; i < 400; ++i) {
      const std::string k = Key(1000 + round, i);
      ASSERT_EQ((*a)->Insert(k), (*b)->Insert(k)) << "round " << round << " key " << i;
    }
    std::vector<uint8_t> x(t), y(t);
    const CuckooFilter::ShardState sa = (*a)->CopyShard(0, x.data());
    const CuckooFilter::ShardState sb = (*b)->CopyShard(0, y.data());
    ASSERT_TRUE(x == y) << "round " << round;
    ASSERT_EQ(sa.rng_state, sb.rng_state) << "round " << round;
  }
  EXPECT_GT(even_states_seen, 0) << "no even generator state was restored";
}

TEST_P(CuckooFilterKindTest, MixedBatchResultsComeBackInRequestOrder) {
  auto filter = Make({.capacity = 10'000, .shards = 8, .seed = 5});
  std::vector<std::string> present = Keys(0, 500);
  for (const auto& k : present) ASSERT_EQ(filter->Insert(k), InsertResult::kInserted);
  // Interleave present and absent keys, in several shards.
  std::vector<std::string> mixed;
  std::vector<bool> expect;
  for (int i = 0; i < 500; ++i) {
    mixed.push_back(present[i]);
    expect.push_back(true);
    mixed.push_back(Key(1, i));
    expect.push_back(false);
  }
  std::vector<std::string_view> views = Views(mixed);
  std::unique_ptr<bool[]> found(new bool[mixed.size()]);
  filter->LookupBatch(views, absl::Span<bool>(found.get(), mixed.size()));
  int false_positives = 0;
  for (size_t i = 0; i < mixed.size(); ++i) {
    if (expect[i]) {
      ASSERT_TRUE(found[i]) << "false negative at " << i;
    } else {
      false_positives += found[i];
    }
    ASSERT_EQ(found[i], filter->MayContain(mixed[i])) << i;
  }
  EXPECT_LT(false_positives, 10);  // ~0.2% of 500 expected.

  std::vector<DeleteResult> del(mixed.size());
  filter->DeleteBatch(views, absl::MakeSpan(del));
  const auto deleted = std::count(del.begin(), del.end(), DeleteResult::kDeleted);
  EXPECT_EQ(filter->items(), 500u - deleted);
  if (false_positives == 0) {
    for (size_t i = 0; i < mixed.size(); ++i) {
      EXPECT_EQ(del[i], expect[i] ? DeleteResult::kDeleted : DeleteResult::kNotFound) << i;
    }
  }
}

TEST_P(CuckooFilterKindTest, IfAbsentBatchReportsDuplicatesWithinAndAcrossBatches) {
  auto filter = Make({.capacity = 1000, .shards = 4, .seed = 5});
  std::vector<std::string_view> keys = {"a", "b", "a", "c", "b"};
  std::vector<InsertResult> out(keys.size());
  filter->InsertBatch(keys, /*if_absent=*/true, absl::MakeSpan(out));
  EXPECT_THAT(out, ::testing::ElementsAre(InsertResult::kInserted, InsertResult::kInserted,
                                          InsertResult::kAlreadyPresent, InsertResult::kInserted,
                                          InsertResult::kAlreadyPresent));
  EXPECT_EQ(filter->Insert("c", true), InsertResult::kAlreadyPresent);
  EXPECT_EQ(filter->items(), 3u);
}

TEST_P(CuckooFilterKindTest, ApproximateCountCountsCopies) {
  auto filter = Make({.capacity = 1000, .seed = 5});
  for (int i = 0; i < 3; ++i) filter->Insert("dup");
  EXPECT_EQ(filter->ApproximateCount("dup"), 3u);
  std::vector<uint64_t> h = {filter->Hash("dup"), filter->Hash("never")};
  std::vector<uint32_t> counts(2);
  filter->CountHashed(h, absl::MakeSpan(counts));
  EXPECT_EQ(counts[0], 3u);
  EXPECT_EQ(counts[1], 0u);
  EXPECT_EQ(filter->Delete("dup"), DeleteResult::kDeleted);
  EXPECT_EQ(filter->ApproximateCount("dup"), 2u);
  EXPECT_EQ(filter->Delete("never"), DeleteResult::kNotFound);
}

TEST_P(CuckooFilterKindTest, StatsReportRealMemoryLoadAndExpectedRate) {
  auto filter = Make({.capacity = 100'000, .fingerprint_bits = 12, .seed = 9});
  FilterStats empty = filter->Stats();
  EXPECT_EQ(empty.items, 0u);
  EXPECT_EQ(empty.bits_per_item, 0);
  EXPECT_EQ(empty.expected_false_positive_rate, 0);
  EXPECT_GE(empty.memory_bytes, filter->shape().table_bytes_per_shard() * filter->shape().shards);
  std::vector<std::string> keys = Keys(0, 100'000);
  for (const auto& k : keys) filter->Insert(k);
  FilterStats st = filter->Stats();
  EXPECT_EQ(st.items, 100'000u);
  EXPECT_EQ(st.capacity, 100'000u);
  EXPECT_NEAR(st.load_factor, 100'000.0 / st.slots, 1e-12);
  EXPECT_GT(st.load_factor, 0.9);
  EXPECT_NEAR(st.bits_per_item, 8.0 * st.memory_bytes / 1e5, 1e-9);
  // f - 1 bits per slot semi-sorted, f packed; a little more for the load
  // (< 1) and page rounding (up to 4 KiB: 0.33 bits per item at 10^5 items).
  const double bits_per_slot = GetParam() == TableKind::kSemiSorted ? 11 : 12;
  EXPECT_GT(st.bits_per_item, bits_per_slot);
  EXPECT_LT(st.bits_per_item, bits_per_slot / st.load_factor + 0.4);
  // ~2b * load / 2^f = 8 * 0.93 / 4096: semi-sorted buckets store f = 12
  // bits of fingerprint in 11 bits per slot.
  EXPECT_NEAR(st.expected_false_positive_rate, 8 * st.load_factor / 4095.0, 2e-5);
  // And measured: 200k absent keys, ~370 false positives expected.
  uint64_t positives = 0;
  for (const auto& k : Keys(1, 200'000)) positives += filter->MayContain(k);
  const double expected = st.expected_false_positive_rate * 200'000;
  EXPECT_NEAR(static_cast<double>(positives), expected, 5 * std::sqrt(expected) + 0.05 * expected);
}

TEST_P(CuckooFilterKindTest, SameSeedGivesSameAnswersAcrossInstances) {
  FilterOptions o = With({.capacity = 5000, .fingerprint_bits = 8, .seed = 42});
  auto a = MakeFilter(o);
  auto b = MakeFilter(o);
  for (const auto& k : Keys(0, 4000)) {
    a->Insert(k);
    b->Insert(k);
  }
  for (const auto& k : Keys(1, 20'000)) ASSERT_EQ(a->MayContain(k), b->MayContain(k));
}

// Every shard's table bytes and counters, for comparing two filters.
std::vector<uint8_t> AllShards(const CuckooFilter& f, std::vector<uint64_t>* counters) {
  const uint64_t t = f.shape().table_bytes_per_shard();
  std::vector<uint8_t> bytes(t * f.shape().shards);
  counters->clear();
  for (uint32_t i = 0; i < f.shape().shards; ++i) {
    const CuckooFilter::ShardState st = f.CopyShard(i, bytes.data() + i * t);
    counters->insert(counters->end(), {st.items, st.rng_state, st.position});
  }
  return bytes;
}

// The cluster's apply: whole batches at stream positions, past full, with
// deletes, must give InsertHashed's results and the same table on a twin,
// and a copy restored from a mid-run snapshot must skip exactly what it
// holds and end identical.
TEST_P(CuckooFilterKindTest, BatchesAppliedAtPositionsMatchTheLiveBatchPathAndSkipWhatIsHeld) {
  const FilterOptions o = With({.capacity = 3000, .shards = 8, .max_kicks = 64, .seed = 9});
  auto at = MakeFilter(o);
  auto live = MakeFilter(o);
  std::unique_ptr<CuckooFilter> restored;
  std::vector<std::vector<uint64_t>> batches;
  for (int b = 0; b < 12; ++b) {
    std::vector<uint64_t> h;
    for (const std::string& k : Keys(b, 600)) h.push_back(at->Hash(k));
    batches.push_back(std::move(h));
  }
  for (size_t b = 0; b < batches.size(); ++b) {
    const uint64_t position = 100 + 10 * b;
    const auto& h = batches[b];
    if (b % 3 == 2) {
      std::vector<DeleteResult> x(h.size() / 2), y(h.size() / 2);
      const auto half = absl::MakeConstSpan(batches[b - 1]).subspan(0, h.size() / 2);
      at->DeleteHashedAt(half, absl::MakeSpan(x), position);
      live->DeleteHashed(half, absl::MakeSpan(y), [] { return false; });
      ASSERT_TRUE(x == y) << "batch " << b;
    } else {
      std::vector<InsertResult> x(h.size()), y(h.size());
      size_t skipped = 1;
      at->InsertHashedAt(h, b % 2 == 0, absl::MakeSpan(x), position, &skipped);
      live->InsertHashed(h, b % 2 == 0, absl::MakeSpan(y), [] { return false; });
      EXPECT_EQ(skipped, 0u);
      ASSERT_TRUE(x == y) << "batch " << b;
    }
    if (b == 6) {
      // A snapshot after batch 6 (positions up to 160), restored into a
      // new filter as start-up does.
      auto copy = CuckooFilter::FromShape(at->shape());
      ASSERT_TRUE(copy.ok());
      restored = *std::move(copy);
      const uint64_t t = at->shape().table_bytes_per_shard();
      std::vector<uint8_t> bytes(t);
      for (uint32_t i = 0; i < at->shape().shards; ++i) {
        const CuckooFilter::ShardState st = at->CopyShard(i, bytes.data());
        std::copy(bytes.begin(), bytes.end(),
                  internal::FilterLoading::MutableShardBytes(*restored, i).begin());
        internal::FilterLoading::RestoreShard(*restored, i, st.items, st.rng_state, st.position);
      }
    }
  }
  std::vector<uint64_t> ca, cl;
  const std::vector<uint8_t> a_bytes = AllShards(*at, &ca);
  const std::vector<uint8_t> l_bytes = AllShards(*live, &cl);
  EXPECT_TRUE(a_bytes == l_bytes);
  // Replaying every batch (positions <= 160 are held) onto the copy.
  size_t total_skipped = 0;
  for (size_t b = 0; b < batches.size(); ++b) {
    const uint64_t position = 100 + 10 * b;
    size_t skipped = 0;
    if (b % 3 == 2) {
      std::vector<DeleteResult> x(batches[b].size() / 2);
      restored->DeleteHashedAt(absl::MakeConstSpan(batches[b - 1]).subspan(0, x.size()),
                               absl::MakeSpan(x), position, &skipped);
    } else {
      std::vector<InsertResult> x(batches[b].size());
      restored->InsertHashedAt(batches[b], b % 2 == 0, absl::MakeSpan(x), position, &skipped);
    }
    if (b <= 6) {
      EXPECT_EQ(skipped, b % 3 == 2 ? batches[b].size() / 2 : batches[b].size()) << b;
    } else {
      EXPECT_EQ(skipped, 0u) << b;
    }
    total_skipped += skipped;
  }
  EXPECT_GT(total_skipped, 0u);
  std::vector<uint64_t> cr;
  EXPECT_TRUE(AllShards(*restored, &cr) == a_bytes);
  EXPECT_EQ(cr, ca);
  EXPECT_GT(at->Stats().load_factor, 0.9);  // The run went past full.
}

INSTANTIATE_TEST_SUITE_P(Kinds, CuckooFilterKindTest,
                         ::testing::Values(TableKind::kPacked, TableKind::kSemiSorted),
                         [](const auto& p) { return std::string(TableKindName(p.param)); });

// The single-key calls have their own code (a lock-free lookup with no
// lambda and no retry loop, a delete that prefetches before the lock and
// updates the counters itself); on every table shape they must answer as
// the batch calls do and leave the same table.
struct ShapeCase {
  uint32_t f;
  uint32_t b;
  bool semi;
  uint32_t shards;
};

void PrintTo(const ShapeCase& c, std::ostream* os) {
  *os << (c.semi ? "ss" : "p") << c.f << "b" << c.b << "x" << c.shards;
}

class SingleKeyShapeTest : public ::testing::TestWithParam<ShapeCase> {};

TEST_P(SingleKeyShapeTest, SingleKeyCallsAnswerAsBatchesDoAndLeaveTheSameTable) {
  const ShapeCase c = GetParam();
  const FilterOptions o{.capacity = 20'000,
                        .fingerprint_bits = c.f,
                        .bucket_size = c.b,
                        .shards = c.shards,
                        .seed = 7,
                        .semi_sort = c.semi};
  std::unique_ptr<CuckooFilter> single = MakeFilter(o);
  std::unique_ptr<CuckooFilter> batch = MakeFilter(o);
  ASSERT_EQ(single->shape().semi_sorted(), c.semi);
  const std::vector<std::string> present = Keys(0, 18'000);
  const std::vector<std::string> absent = Keys(1, 20'000);
  for (CuckooFilter* f : {single.get(), batch.get()}) {
    std::vector<InsertResult> ins(present.size());
    f->InsertBatch(Views(present), false, absl::MakeSpan(ins));
    for (InsertResult r : ins) ASSERT_EQ(r, InsertResult::kInserted);
  }
  // Lookups: every present key, and absent ones (some false positives).
  std::vector<std::string> queries = present;
  queries.insert(queries.end(), absent.begin(), absent.end());
  std::unique_ptr<bool[]> found(new bool[queries.size()]);
  batch->LookupBatch(Views(queries), absl::MakeSpan(found.get(), queries.size()));
  size_t positives = 0;
  for (size_t i = 0; i < queries.size(); ++i) {
    ASSERT_EQ(single->MayContain(queries[i]), found[i]) << queries[i];
    if (i < present.size()) {
      ASSERT_TRUE(found[i]) << "false negative " << queries[i];
    }
    positives += found[i];
  }
  EXPECT_LT(positives, present.size() + absent.size() / 10);  // f = 8, b = 8: ~6%.
  // Deletes: half the present keys, then absent ones (which may remove a
  // colliding fingerprint: the same one on both sides).
  std::vector<std::string> doomed = Keys(0, 9'000);
  doomed.insert(doomed.end(), absent.begin(), absent.begin() + 2'000);
  std::vector<DeleteResult> batch_results(doomed.size());
  batch->DeleteBatch(Views(doomed), absl::MakeSpan(batch_results));
  for (size_t i = 0; i < doomed.size(); ++i) {
    ASSERT_EQ(single->Delete(doomed[i]), batch_results[i]) << doomed[i];
    if (i < 9'000) {
      ASSERT_EQ(batch_results[i], DeleteResult::kDeleted);
    }
  }
  std::vector<uint64_t> counters_single, counters_batch;
  EXPECT_EQ(AllShards(*single, &counters_single), AllShards(*batch, &counters_batch));
  EXPECT_EQ(counters_single, counters_batch);
  EXPECT_EQ(single->items(), batch->items());
  EXPECT_EQ(single->changes(), batch->changes());
  EXPECT_EQ(single->Stats().deletes, batch->Stats().deletes);
  // (The remaining present keys may have lost their fingerprint to an
  // absent key's delete: the same ones on both sides, as the bytes say.)
  for (const std::string& k : Keys(0, 9'000, 9'000)) {
    ASSERT_EQ(single->MayContain(k), batch->MayContain(k)) << k;
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, SingleKeyShapeTest,
                         ::testing::Values(ShapeCase{12, 4, false, 1}, ShapeCase{12, 4, false, 4},
                                           ShapeCase{8, 8, false, 2}, ShapeCase{16, 2, false, 1},
                                           ShapeCase{10, 4, false, 2}, ShapeCase{13, 4, true, 1},
                                           ShapeCase{12, 4, true, 4}, ShapeCase{20, 4, true, 2}),
                         [](const auto& p) {
                           const ShapeCase& c = p.param;
                           return absl::StrFormat("%s%db%dx%d", c.semi ? "ss" : "p", c.f, c.b,
                                                  c.shards);
                         });

// A growing filter's shards take the single-key lookup's other path once
// they have grown; its answers still match the batch's, generation by
// generation, and no inserted key is missed.
TEST(SingleKeyTest, LookupsOfAGrowingFilterAnswerAsBatchesDo) {
  for (const bool semi : {false, true}) {
    std::unique_ptr<CuckooFilter> f = MakeFilter({.capacity = 1'000,
                                                  .false_positive_rate = 0.01,
                                                  .shards = 2,
                                                  .seed = 9,
                                                  .semi_sort = semi,
                                                  .growth_factor = 2});
    const std::vector<std::string> present = Keys(0, 30'000);
    std::vector<InsertResult> ins(present.size());
    f->InsertBatch(Views(present), false, absl::MakeSpan(ins));
    for (InsertResult r : ins) ASSERT_EQ(r, InsertResult::kInserted);
    ASSERT_GT(f->ShardGenerations(0), 2u);
    std::vector<std::string> queries = present;
    for (const std::string& k : Keys(1, 30'000)) queries.push_back(k);
    std::unique_ptr<bool[]> found(new bool[queries.size()]);
    f->LookupBatch(Views(queries), absl::MakeSpan(found.get(), queries.size()));
    for (size_t i = 0; i < queries.size(); ++i) {
      ASSERT_EQ(f->MayContain(queries[i]), found[i]) << queries[i];
      if (i < present.size()) {
        ASSERT_TRUE(found[i]) << "false negative " << queries[i];
      }
    }
  }
}

}  // namespace
}  // namespace cuckoo
