#include <gtest/gtest.h>

#include <set>
#include <string>
#include <string_view>

#include "core/hash.h"
#include "tests/util/keys.h"

namespace cuckoo {
namespace {

// Golden values: if any of these change, keys move between buckets and every
// snapshot written before the change would load with false negatives. Change
// them only together with a new hash id.
TEST(HashLayoutTest, HashOfKnownKeysIsStableAcrossBuilds) {
  EXPECT_EQ(HashKey("", 0), 0x2D06800538D394C2ull);
  EXPECT_EQ(HashKey("hello", 0), 0x9555E8555C62DCFDull);
  EXPECT_EQ(HashKey("hello", 42), 0xBAFA072F07DB7937ull);
  EXPECT_EQ(HashKey("user:1234567890", 0x5EED), 0x3EFCD8BA4E2EE944ull);
}

// HashKey runs XXH3's short-input code itself for keys of up to 16 bytes;
// every length on both sides of that bound must hash as XXH3_64bits_withSeed.
TEST(HashLayoutTest, ShortKeysHashExactlyAsXxh3DoesAtEveryLength) {
  std::string bytes;
  for (int i = 0; i < 40; ++i) bytes.push_back(static_cast<char>(testing::Mix(i)));
  for (uint64_t seed : {uint64_t{0}, uint64_t{42}, uint64_t{0xC0FFEE5EED}, ~uint64_t{0}}) {
    for (size_t len = 0; len <= bytes.size(); ++len) {
      EXPECT_EQ(HashKey(std::string_view(bytes.data(), len), seed),
                XXH3_64bits_withSeed(bytes.data(), len, seed))
          << "length " << len << ", seed " << seed;
    }
  }
}

TEST(HashLayoutTest, LayoutOfKnownHashIsStableAcrossBuilds) {
  HashLayout l(12, 4, 1'000'003);
  const uint64_t h = 0x0123456789ABCDEFull;
  EXPECT_EQ(l.Shard(h), 0x0u);
  EXPECT_EQ(l.Fingerprint(h), 0xDEFu);
  // Bits [12, 60) of h as a 48-bit fraction of m, computed by hand.
  EXPECT_EQ(l.Bucket(h), 71111u);
  EXPECT_EQ(l.AltBucket(l.Bucket(h), 0xDEF), 456128u);
  HashLayout l2(16, 6, 77);
  const uint64_t h2 = 0xFEDCBA9876543210ull;
  EXPECT_EQ(l2.Shard(h2), 0x3Fu);
  EXPECT_EQ(l2.Fingerprint(h2), 0x3210u);
  EXPECT_EQ(l2.Bucket(h2), 55u);
}

TEST(HashLayoutTest, FingerprintIsNeverZero) {
  for (uint32_t f : {4u, 8u, 12u, 16u, 32u}) {
    HashLayout l(f, 0, 1000);
    EXPECT_EQ(l.Fingerprint(0), 1u) << "f=" << f;
    EXPECT_EQ(l.Fingerprint(uint64_t{1} << 40), 1u) << "f=" << f;
    for (uint64_t i = 0; i < 10000; ++i) {
      uint32_t fp = l.Fingerprint(testing::Mix(i));
      ASSERT_NE(fp, 0u);
      ASSERT_LT(uint64_t{fp}, uint64_t{1} << f);
    }
  }
}

TEST(HashLayoutTest, AltBucketIsAnInvolutionForAnyBucketCount) {
  for (uint64_t m : {1ull, 2ull, 3ull, 7ull, 1000ull, 1'000'003ull, 1ull << 20, (1ull << 33) + 5}) {
    HashLayout l(12, 0, m);
    for (uint64_t i = 0; i < 5000; ++i) {
      uint64_t h = testing::Mix(i);
      uint32_t fp = l.Fingerprint(h);
      uint64_t b1 = l.Bucket(h);
      ASSERT_LT(b1, m);
      uint64_t b2 = l.AltBucket(b1, fp);
      ASSERT_LT(b2, m);
      ASSERT_EQ(l.AltBucket(b2, fp), b1) << "m=" << m << " fp=" << fp;
    }
  }
}

TEST(HashLayoutTest, ShardBucketAndFingerprintUseDisjointBits) {
  HashLayout l(12, 4, 999'983);
  for (uint64_t i = 0; i < 2000; ++i) {
    uint64_t h = testing::Mix(i);
    // Flipping fingerprint bits moves neither shard nor bucket.
    uint64_t hf = h ^ 0xABC;
    EXPECT_EQ(l.Shard(hf), l.Shard(h));
    EXPECT_EQ(l.Bucket(hf), l.Bucket(h));
    // Flipping shard bits moves neither bucket nor fingerprint.
    uint64_t hs = h ^ (0xFull << 60);
    EXPECT_EQ(l.Bucket(hs), l.Bucket(h));
    EXPECT_EQ(l.Fingerprint(hs), l.Fingerprint(h));
    // Flipping bucket-source bits moves neither shard nor fingerprint.
    uint64_t hb = h ^ (0xFFFFFFull << 20);
    EXPECT_EQ(l.Shard(hb), l.Shard(h));
    EXPECT_EQ(l.Fingerprint(hb), l.Fingerprint(h));
  }
}

TEST(HashLayoutTest, BucketsAreEvenlySpreadForNonPowerOfTwoCounts) {
  const uint64_t m = 1000;
  HashLayout l(12, 3, m);
  std::vector<int> hits(m);
  const int n = 1'000'000;
  for (int i = 0; i < n; ++i) ++hits[l.Bucket(testing::Mix(i))];
  // Binomial(1e6, 1e-3): mean 1000, sd ~31.6; 6 sd either side.
  for (uint64_t b = 0; b < m; ++b) {
    ASSERT_GT(hits[b], 810) << b;
    ASSERT_LT(hits[b], 1190) << b;
  }
}

}  // namespace
}  // namespace cuckoo
