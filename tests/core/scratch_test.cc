#include "core/scratch.h"

#include <gtest/gtest.h>

#include <cstdint>

namespace cuckoo {
namespace {

TEST(ScratchArrayTest, SmallArraysReuseTheThreadsBufferWithoutAllocating) {
  uint64_t* first;
  {
    ScratchArray<uint64_t, 7> a(1000);
    first = a.data();
    a[999] = 1;
  }
  ScratchArray<uint64_t, 7> b(1000);
  EXPECT_EQ(b.data(), first);
  EXPECT_EQ(b.size(), 1000u);
}

// A thread that once handled a 100,000-key batch kept every array at that
// size for good; one thread per core on a large machine made that hundreds
// of megabytes.
TEST(ScratchArrayTest, AnArrayOverTheKeptSizeIsFreedWithTheCallNotKept) {
  constexpr size_t kSmall = 100;
  constexpr size_t kLarge = ScratchArray<uint64_t, 8>::kKeepBytes / sizeof(uint64_t) * 4;
  uint64_t* kept;
  {
    ScratchArray<uint64_t, 8> small(kSmall);
    kept = small.data();
  }
  uint64_t* large_data;
  {
    ScratchArray<uint64_t, 8> large(kLarge);
    large_data = large.data();
    large[kLarge - 1] = 7;  // Really that large (ASan checks the bound).
    EXPECT_NE(large_data, kept);
  }
  // The kept buffer is still the small one: the large array left nothing.
  ScratchArray<uint64_t, 8> again(kSmall);
  EXPECT_EQ(again.data(), kept);
}

TEST(ScratchArrayTest, SlotsAreSeparateBuffers) {
  ScratchArray<uint32_t, 0> a(10);
  ScratchArray<uint32_t, 1> b(10);
  EXPECT_NE(a.data(), b.data());
}

}  // namespace
}  // namespace cuckoo
