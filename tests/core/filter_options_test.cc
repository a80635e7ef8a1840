#include "core/filter_options.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <vector>

#include "absl/status/status.h"
#include "core/hash.h"

namespace cuckoo {
namespace {

using ::testing::HasSubstr;

TEST(FilterOptionsTest, FingerprintBitsFollowPaperEquation6) {
  // f = ceil(log2(2b / eps)).
  EXPECT_EQ(FingerprintBitsForRate(0.01, 4), 10u);       // log2(800) = 9.64
  EXPECT_EQ(FingerprintBitsForRate(0.002, 4), 12u);      // log2(4000) = 11.97
  EXPECT_EQ(FingerprintBitsForRate(0.001, 4), 13u);      // log2(8000) = 12.97
  EXPECT_EQ(FingerprintBitsForRate(1.0 / 512, 4), 12u);  // exactly 12
  EXPECT_EQ(FingerprintBitsForRate(0.03, 2), 8u);        // log2(133) = 7.06
  EXPECT_EQ(FingerprintBitsForRate(0.5, 4), 4u);         // clamped to the minimum
}

TEST(FilterOptionsTest, DefaultsAreThePapersSemiSortedTwoFourFilter) {
  absl::StatusOr<FilterShape> s = ComputeShape({.capacity = 1000});
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->fingerprint_bits, 12u);
  EXPECT_EQ(s->bucket_size, 4u);
  EXPECT_EQ(s->max_kicks, 2000u);
  EXPECT_EQ(s->hash_id, kHashIdXxh3V1);
  // The paper's (2,4) filter with semi-sorted buckets: 11 bits per slot.
  EXPECT_EQ(s->table_kind, TableKind::kSemiSorted);
  EXPECT_TRUE(s->semi_sorted());
  EXPECT_EQ(s->bucket_bits(), 44u);
}

TEST(FilterOptionsTest, SemiSortIsChosenOnlyForRateDerivedFourSlotShapesUpTo16Bits) {
  struct Case {
    FilterOptions o;
    TableKind kind;
    uint32_t f;
  };
  const Case cases[] = {
      {{.capacity = 1000}, TableKind::kSemiSorted, 12},  // default rate
      {{.capacity = 1000, .false_positive_rate = 0.001}, TableKind::kSemiSorted, 13},  // 12.97
      {{.capacity = 1000, .false_positive_rate = 0.25}, TableKind::kSemiSorted, 5},    // smallest
      {{.capacity = 1000, .false_positive_rate = 8.0 / 65536}, TableKind::kSemiSorted, 16},
      // log2(8 / 1e-4) = 16.3: f = 17, above the automatic range.
      {{.capacity = 1000, .false_positive_rate = 1e-4}, TableKind::kPacked, 17},
      // log2(8 / 0.5) = 4: too few bits to share a 4-bit nibble.
      {{.capacity = 1000, .false_positive_rate = 0.5}, TableKind::kPacked, 4},
      // An explicit fingerprint size keeps the packed table.
      {{.capacity = 1000, .fingerprint_bits = 12}, TableKind::kPacked, 12},
      {{.capacity = 1000, .false_positive_rate = 0.002, .fingerprint_bits = 12},
       TableKind::kPacked,
       12},
      // Other bucket sizes cannot be semi-sorted.
      {{.capacity = 1000, .bucket_size = 2}, TableKind::kPacked, 11},
      {{.capacity = 1000, .bucket_size = 8}, TableKind::kPacked, 13},
      // Explicit choices win.
      {{.capacity = 1000, .semi_sort = false}, TableKind::kPacked, 12},
      {{.capacity = 1000, .fingerprint_bits = 12, .semi_sort = true}, TableKind::kSemiSorted, 12},
      {{.capacity = 1000, .false_positive_rate = 1e-4, .semi_sort = true},
       TableKind::kSemiSorted,
       17},
      {{.capacity = 1000, .fingerprint_bits = 32, .semi_sort = true}, TableKind::kSemiSorted, 32},
  };
  for (const Case& c : cases) {
    absl::StatusOr<FilterShape> s = ComputeShape(c.o);
    ASSERT_TRUE(s.ok()) << s.status();
    EXPECT_EQ(s->table_kind, c.kind) << s->DebugString();
    EXPECT_EQ(s->fingerprint_bits, c.f) << s->DebugString();
    EXPECT_EQ(s->bucket_bits(),
              c.kind == TableKind::kSemiSorted ? 4 * c.f - 4 : c.f * s->bucket_size)
        << s->DebugString();
  }
}

TEST(FilterOptionsTest, ExplicitSemiSortNeedsFourSlotBucketsAndFiveFingerprintBits) {
  struct Case {
    FilterOptions o;
    std::vector<const char*> mentions;
  };
  const Case cases[] = {
      {{.capacity = 10, .bucket_size = 2, .semi_sort = true}, {"semi_sort", "bucket_size", "2"}},
      {{.capacity = 10, .bucket_size = 8, .semi_sort = true}, {"semi_sort", "bucket_size", "8"}},
      {{.capacity = 10, .fingerprint_bits = 4, .semi_sort = true},
       {"semi_sort", "fingerprint_bits", "4"}},
      // f = 4 from the rate.
      {{.capacity = 10, .false_positive_rate = 0.5, .semi_sort = true},
       {"semi_sort", "fingerprint_bits"}},
  };
  for (const Case& c : cases) {
    absl::StatusOr<FilterShape> s = ComputeShape(c.o);
    EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument) << c.mentions[1];
    for (const char* m : c.mentions) EXPECT_THAT(std::string(s.status().message()), HasSubstr(m));
  }
}

TEST(FilterOptionsTest, SemiSortedShapeHasThePackedBucketsAtOneBitLessPerSlot) {
  for (uint64_t cap : {1ull, 1000ull, 123'457ull, 100'000'000ull}) {
    for (uint32_t f : {5u, 12u, 13u, 16u, 17u, 32u}) {
      absl::StatusOr<FilterShape> packed =
          ComputeShape({.capacity = cap, .fingerprint_bits = f, .semi_sort = false});
      absl::StatusOr<FilterShape> semi =
          ComputeShape({.capacity = cap, .fingerprint_bits = f, .semi_sort = true});
      if (f == 32 && cap == 100'000'000ull) {
        // Too few hash bits left for the buckets either way.
        EXPECT_FALSE(packed.ok());
        EXPECT_FALSE(semi.ok());
        continue;
      }
      ASSERT_TRUE(packed.ok() && semi.ok()) << packed.status() << semi.status();
      EXPECT_EQ(semi->buckets_per_shard, packed->buckets_per_shard);
      EXPECT_EQ(semi->shards, packed->shards);
      EXPECT_GE(semi->total_slots(), cap);
      EXPECT_EQ(semi->bucket_bits(), 4 * f - 4);
      EXPECT_EQ(semi->table_bytes_per_shard(), (semi->buckets_per_shard * (4 * f - 4) + 7) / 8);
      // Like a packed table of f - 1 bits with the same buckets.
      FilterShape one_less = *packed;
      one_less.fingerprint_bits = f - 1;
      EXPECT_EQ(semi->table_bytes_per_shard(), one_less.table_bytes_per_shard());
    }
  }
}

TEST(FilterOptionsTest, ValidateShapeRejectsSemiSortedShapesItCannotEncodeAndUnknownKinds) {
  absl::StatusOr<FilterShape> s = ComputeShape({.capacity = 1000, .seed = 1});
  ASSERT_TRUE(s.ok());
  ASSERT_TRUE(s->semi_sorted());
  ASSERT_TRUE(ValidateShape(*s).ok());
  FilterShape bad = *s;
  bad.bucket_size = 2;
  EXPECT_THAT(std::string(ValidateShape(bad).message()), HasSubstr("bucket_size"));
  bad.bucket_size = 8;
  EXPECT_EQ(ValidateShape(bad).code(), absl::StatusCode::kInvalidArgument);
  bad = *s;
  bad.fingerprint_bits = 4;
  EXPECT_THAT(std::string(ValidateShape(bad).message()), HasSubstr("fingerprint_bits"));
  bad.table_kind = TableKind::kPacked;  // Fine packed.
  EXPECT_TRUE(ValidateShape(bad).ok());
  bad = *s;
  bad.table_kind = static_cast<TableKind>(2);
  EXPECT_THAT(std::string(ValidateShape(bad).message()), HasSubstr("unknown table kind 2"));
}

TEST(FilterOptionsTest, TableKindNamesAreStable) {
  EXPECT_STREQ(TableKindName(TableKind::kPacked), "packed");
  EXPECT_STREQ(TableKindName(TableKind::kSemiSorted), "semi_sorted");
  // Snapshot header values.
  EXPECT_EQ(static_cast<uint32_t>(TableKind::kPacked), 0u);
  EXPECT_EQ(static_cast<uint32_t>(TableKind::kSemiSorted), 1u);
}

TEST(FilterOptionsTest, ExplicitSettingsWin) {
  absl::StatusOr<FilterShape> s = ComputeShape({.capacity = 1 << 20,
                                                .false_positive_rate = 0.5,
                                                .fingerprint_bits = 16,
                                                .bucket_size = 8,
                                                .shards = 4,
                                                .max_kicks = 100,
                                                .seed = 77});
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->fingerprint_bits, 16u);
  EXPECT_EQ(s->bucket_size, 8u);
  EXPECT_EQ(s->shards, 4u);
  EXPECT_EQ(s->shard_bits, 2u);
  EXPECT_EQ(s->max_kicks, 100u);
  EXPECT_EQ(s->seed, 77u);
}

TEST(FilterOptionsTest, BucketCountIsNotRoundedToAPowerOfTwo) {
  absl::StatusOr<FilterShape> s =
      ComputeShape({.capacity = 100'000'000, .fingerprint_bits = 12, .shards = 16});
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_NE(s->buckets_per_shard & (s->buckets_per_shard - 1), 0u);
  // Planned load between 95.5% and 96% (BaseLoad 96%, less 0.04% for the
  // table and 0.12% for the spread over 16 shards).
  double load = 1e8 / s->total_slots();
  EXPECT_GT(load, 0.955);
  EXPECT_LE(load, 0.96);
}

TEST(FilterOptionsTest, SlotsCoverCapacityForEveryShape) {
  for (uint64_t cap : {1ull, 2ull, 10ull, 999ull, 123'457ull, 10'000'000ull}) {
    for (uint32_t b : {2u, 4u, 8u}) {
      for (uint32_t f : {4u, 8u, 12u, 16u}) {
        absl::StatusOr<FilterShape> s =
            ComputeShape({.capacity = cap, .fingerprint_bits = f, .bucket_size = b});
        ASSERT_TRUE(s.ok()) << s.status();
        EXPECT_GE(s->total_slots(), cap);
      }
    }
  }
}

TEST(FilterOptionsTest, EachBadOptionIsRejectedWithItsName) {
  struct Case {
    FilterOptions o;
    const char* mentions;
  };
  const Case cases[] = {
      {{.capacity = 0}, "capacity=0"},
      {{.capacity = kMaxCapacity + 1}, "capacity="},
      {{.capacity = 10, .false_positive_rate = 1.5}, "false_positive_rate=1.5"},
      {{.capacity = 10, .false_positive_rate = -0.1}, "false_positive_rate=-0.1"},
      {{.capacity = 10, .false_positive_rate = 1e-12}, "false_positive_rate=1e-12"},
      {{.capacity = 10, .fingerprint_bits = 3}, "fingerprint_bits=3"},
      {{.capacity = 10, .fingerprint_bits = 33}, "fingerprint_bits=33"},
      {{.capacity = 10, .bucket_size = 3}, "bucket_size=3"},
      {{.capacity = 10, .bucket_size = 16}, "bucket_size=16"},
      {{.capacity = 10, .shards = 3}, "shards=3"},
      {{.capacity = 10, .shards = 8192}, "shards=8192"},
      {{.capacity = 10, .max_kicks = kMaxMaxKicks + 1}, "max_kicks="},
      {{.capacity = uint64_t{1} << 36, .fingerprint_bits = 32, .shards = 1}, "hash bits"},
  };
  for (const Case& c : cases) {
    absl::StatusOr<FilterShape> s = ComputeShape(c.o);
    EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument) << c.mentions;
    EXPECT_THAT(std::string(s.status().message()), HasSubstr(c.mentions));
  }
}

TEST(FilterOptionsTest, ValidateShapeRejectsUnknownHashId) {
  absl::StatusOr<FilterShape> s = ComputeShape({.capacity = 10});
  ASSERT_TRUE(s.ok());
  FilterShape bad = *s;
  bad.hash_id = 9;
  EXPECT_THAT(std::string(ValidateShape(bad).message()), HasSubstr("hash_id 9"));
}

TEST(FilterOptionsTest, UnsetSeedIsRandomAndGivenSeedIsKept) {
  absl::StatusOr<FilterShape> a = ComputeShape({.capacity = 10});
  absl::StatusOr<FilterShape> b = ComputeShape({.capacity = 10});
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_NE(a->seed, b->seed);
  EXPECT_EQ(ComputeShape({.capacity = 10, .seed = 0})->seed, 0u);
}

}  // namespace
}  // namespace cuckoo
