#include "core/internal/semi_sort.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <vector>

namespace cuckoo::semi_sort {
namespace {

// The codec is usable at compile time (the table code relies on it).
static_assert(Encode(0, 0, 0, 0) == 0);
static_assert(Encode(15, 15, 15, 15) == kCodes - 1);
static_assert(kDecode[Encode(1, 5, 5, 9)] == PackNibbles(1, 5, 5, 9));

// Every sorted 4-tuple n0 <= n1 <= n2 <= n3 of nibbles, in lexicographic order.
std::vector<std::array<uint32_t, 4>> AllSortedTuples() {
  std::vector<std::array<uint32_t, 4>> all;
  for (uint32_t a = 0; a < 16; ++a) {
    for (uint32_t b = a; b < 16; ++b) {
      for (uint32_t c = b; c < 16; ++c) {
        for (uint32_t d = c; d < 16; ++d) all.push_back({a, b, c, d});
      }
    }
  }
  return all;
}

TEST(SemiSortTest, ThereAreExactly3876SortedNibbleTuples) {
  EXPECT_EQ(AllSortedTuples().size(), kCodes);
  EXPECT_EQ(kCodes, 3876u);  // C(19, 4)
  EXPECT_LE(kCodes, 1u << kCodeBits);
  EXPECT_GT(kCodes, 1u << (kCodeBits - 1));  // 12 bits are needed, 11 are not enough.
}

TEST(SemiSortTest, EncodeGivesDistinctCodesCoveringExactlyZeroTo3875) {
  std::vector<int> seen(1u << kCodeBits, 0);
  for (const auto& t : AllSortedTuples()) {
    const uint32_t code = Encode(t[0], t[1], t[2], t[3]);
    ASSERT_LT(code, kCodes) << t[0] << t[1] << t[2] << t[3];
    ++seen[code];
  }
  for (uint32_t code = 0; code < kCodes; ++code) EXPECT_EQ(seen[code], 1) << "code " << code;
}

TEST(SemiSortTest, DecodeInvertsEncodeForEveryTuple) {
  for (const auto& t : AllSortedTuples()) {
    const uint32_t code = Encode(t[0], t[1], t[2], t[3]);
    const uint16_t packed = Decode(code);
    ASSERT_EQ(packed, kDecode[code]);
    ASSERT_EQ(packed, PackNibbles(t[0], t[1], t[2], t[3])) << "code " << code;
    for (uint32_t i = 0; i < 4; ++i) {
      ASSERT_EQ((packed >> (4 * i)) & 0xF, t[i]) << "code " << code << " nibble " << i;
    }
  }
}

TEST(SemiSortTest, PackNibblesPutsTheFirstNibbleLowest) {
  EXPECT_EQ(PackNibbles(0, 0, 0, 0), 0x0000);
  EXPECT_EQ(PackNibbles(1, 2, 3, 4), 0x4321);
  EXPECT_EQ(PackNibbles(15, 15, 15, 15), 0xFFFF);
  EXPECT_EQ(PackNibbles(0, 0, 0, 15), 0xF000);
  EXPECT_EQ(PackNibbles(3, 0, 0, 0), 0x0003);
}

TEST(SemiSortTest, ExtremeTuplesHaveTheFirstAndLastCodes) {
  EXPECT_EQ(Encode(0, 0, 0, 0), 0u);  // All empty slots: code 0, an all-zero bucket.
  EXPECT_EQ(Encode(15, 15, 15, 15), kCodes - 1);
  EXPECT_EQ(Decode(0), 0);
  EXPECT_EQ(Decode(kCodes - 1), 0xFFFF);
}

TEST(SemiSortTest, UnusedCodesDecodeToZero) {
  for (uint32_t code = kCodes; code < (1u << kCodeBits); ++code) {
    EXPECT_EQ(kDecode[code], 0) << "code " << code;
    EXPECT_EQ(Decode(code), 0) << "code " << code;
  }
}

TEST(SemiSortTest, DecodeUsesOnlyTheLow12BitsOfItsArgument) {
  // A reader racing a writer may hand Decode any value; it must stay in the table.
  for (uint32_t code : {0u, 1u, 100u, 3875u, 3876u, 4095u}) {
    EXPECT_EQ(Decode(code | 0x1000), kDecode[code]);
    EXPECT_EQ(Decode(code | 0xFFFFF000u), kDecode[code]);
  }
}

// Codes are ranks in colex order: comparing tuples from the last nibble down,
// a smaller tuple has a smaller code.
TEST(SemiSortTest, EncodeIsMonotoneInColexOrder) {
  std::vector<std::array<uint32_t, 4>> all = AllSortedTuples();
  auto colex_less = [](const std::array<uint32_t, 4>& x, const std::array<uint32_t, 4>& y) {
    for (int i = 3; i >= 0; --i) {
      if (x[i] != y[i]) return x[i] < y[i];
    }
    return false;
  };
  std::sort(all.begin(), all.end(), colex_less);
  for (size_t i = 0; i < all.size(); ++i) {
    const auto& t = all[i];
    ASSERT_EQ(Encode(t[0], t[1], t[2], t[3]), i)
        << t[0] << "," << t[1] << "," << t[2] << "," << t[3];
  }
}

}  // namespace
}  // namespace cuckoo::semi_sort
