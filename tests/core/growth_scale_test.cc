// The scale test for growing filters, run in the release build only
// (CTest label "slow"): a filter created for 1,000 keys grown to 10^7 keys,
// with deletes interleaved, checked at 10x, 100x, 1,000x and 10,000x its
// capacity: every key inserted and not deleted is found, the false-positive
// rate measured on 10^7 absent keys stays below the requested rate, and a
// snapshot round trip at the end keeps every key and the rate.
#include <algorithm>
#include <cstdint>
#include <memory>
#include <vector>

#include "core/cuckoo_filter.h"
#include "core/snapshot.h"
#include "gtest/gtest.h"
#include "tests/util/keys.h"
#include "tests/util/temp_dir.h"

namespace cuckoo {
namespace {

using ::cuckoo::testing::HashedKey;
using ::cuckoo::testing::TempDir;

constexpr uint64_t kAbsent = 10'000'000;
// Every kDeleteEvery-th key is deleted right after its step's inserts.
constexpr uint64_t kDeleteEvery = 11;

bool Deleted(uint64_t i) { return i % kDeleteEvery == 5; }

// Every key of [0, n) not deleted is found.
void ExpectNoFalseNegative(const CuckooFilter& f, uint64_t n) {
  std::vector<uint64_t> h;
  h.reserve(n);
  for (uint64_t i = 0; i < n; ++i) {
    if (!Deleted(i)) h.push_back(HashedKey(0, i));
  }
  std::unique_ptr<bool[]> out(new bool[h.size()]);
  f.LookupHashed(h, absl::MakeSpan(out.get(), h.size()));
  const uint64_t found = std::count(out.get(), out.get() + h.size(), true);
  ASSERT_EQ(found, h.size()) << "false negatives among " << n << " keys";
}

double MeasuredRate(const CuckooFilter& f) {
  std::vector<uint64_t> h(kAbsent);
  for (uint64_t i = 0; i < kAbsent; ++i) h[i] = HashedKey(1, i);
  std::unique_ptr<bool[]> out(new bool[kAbsent]);
  f.LookupHashed(h, absl::MakeSpan(out.get(), kAbsent));
  return static_cast<double>(std::count(out.get(), out.get() + kAbsent, true)) / kAbsent;
}

class GrowthScaleTest : public ::testing::TestWithParam<double> {};

TEST_P(GrowthScaleTest, ATenThousandFoldGrowthKeepsEveryKeyAndTheRequestedRate) {
  const double rate = GetParam();
  absl::StatusOr<std::unique_ptr<CuckooFilter>> created = CuckooFilter::Create(
      {.capacity = 1000, .false_positive_rate = rate, .seed = 7, .growth_factor = 2});
  ASSERT_TRUE(created.ok()) << created.status();
  CuckooFilter& f = **created;
  uint64_t n = 0;
  for (uint64_t target : {10'000, 100'000, 1'000'000, 10'000'000}) {
    std::vector<uint64_t> h;
    for (uint64_t i = n; i < target; ++i) h.push_back(HashedKey(0, i));
    std::vector<InsertResult> r(h.size());
    f.InsertHashed(h, false, absl::MakeSpan(r));
    for (size_t k = 0; k < r.size(); ++k) ASSERT_EQ(r[k], InsertResult::kInserted) << n + k;
    h.clear();
    for (uint64_t i = n; i < target; ++i) {
      if (Deleted(i)) h.push_back(HashedKey(0, i));
    }
    std::vector<DeleteResult> d(h.size());
    f.DeleteHashed(h, absl::MakeSpan(d));
    for (DeleteResult x : d) ASSERT_EQ(x, DeleteResult::kDeleted);
    n = target;
    ExpectNoFalseNegative(f, n);
    const double measured = MeasuredRate(f);
    const FilterStats st = f.Stats();
    EXPECT_LE(measured, rate) << n << " keys, " << st.generations.size() << " generations";
    EXPECT_LE(st.false_positive_bound, rate);
    RecordProperty("rate_at_" + std::to_string(n), std::to_string(measured));
  }
  // A snapshot round trip keeps every generation.
  TempDir dir;
  absl::StatusOr<SnapshotWriteResult> written = WriteSnapshotFile(f, "grown", dir.path());
  ASSERT_TRUE(written.ok()) << written.status();
  absl::StatusOr<LoadedSnapshot> loaded = ReadSnapshotFile(written->path, "grown");
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(loaded->filter->Stats().generations.size(), f.Stats().generations.size());
  ExpectNoFalseNegative(*loaded->filter, n);
  EXPECT_LE(MeasuredRate(*loaded->filter), rate);
}

INSTANTIATE_TEST_SUITE_P(Rates, GrowthScaleTest, ::testing::Values(0.03, 0.002));

}  // namespace
}  // namespace cuckoo
