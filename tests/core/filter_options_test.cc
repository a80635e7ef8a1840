#include "core/filter_options.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

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

TEST(FilterOptionsTest, DefaultsAreThePapersTwoFourFilter) {
  absl::StatusOr<FilterShape> s = ComputeShape({.capacity = 1000});
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->fingerprint_bits, 12u);
  EXPECT_EQ(s->bucket_size, 4u);
  EXPECT_EQ(s->max_kicks, 500u);
  EXPECT_EQ(s->hash_id, kHashIdXxh3V1);
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
  // Planned load between 94.5% and 95%.
  double load = 1e8 / s->total_slots();
  EXPECT_GT(load, 0.945);
  EXPECT_LE(load, 0.95);
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
