#include "base/scratch.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <thread>
#include <vector>

namespace cuckoo {
namespace {

TEST(ScratchArrayTest, SmallArraysReuseTheThreadsBufferWithoutAllocating) {
  uint64_t* first;
  {
    ScratchArray<uint64_t> a(1000);
    first = a.data();
    a[999] = 1;
  }
  ScratchArray<uint64_t> b(1000);
  EXPECT_EQ(b.data(), first);
  EXPECT_EQ(b.size(), 1000u);
}

// A thread that once handled a 100,000-key batch kept every array at that
// size for good; one thread per core on a large machine made that hundreds
// of megabytes.
TEST(ScratchArrayTest, AnArrayOverTheKeptSizeIsFreedWithTheCallNotKept) {
  constexpr size_t kSmall = 100;
  constexpr size_t kLarge = ScratchArray<uint64_t>::kKeepBytes / sizeof(uint64_t) * 4;
  uint64_t* kept;
  {
    ScratchArray<uint64_t> small(kSmall);
    kept = small.data();
  }
  uint64_t* large_data;
  {
    ScratchArray<uint64_t> large(kLarge);
    large_data = large.data();
    large[kLarge - 1] = 7;  // Really that large (ASan checks the bound).
    EXPECT_NE(large_data, kept);
  }
  // The kept buffer is still the small one: the large array left nothing.
  ScratchArray<uint64_t> again(kSmall);
  EXPECT_EQ(again.data(), kept);
}

TEST(ScratchArrayTest, LiveArraysOfOneTypeAreSeparateBuffers) {
  ScratchArray<uint32_t> a(10);
  ScratchArray<uint32_t> b(10);
  EXPECT_NE(a.data(), b.data());
}

// The earlier design gave each caller a numbered slot; two callers of the
// same slot, one inside the other, shared a buffer and the inner one
// overwrote the outer one's results. Now no two live arrays can share,
// however deep the nesting, even past the kept buffers.
TEST(ScratchArrayTest, NestedArraysNeverShareMemoryEvenPastThePool) {
  constexpr size_t kArrays = ScratchArray<uint32_t>::kPoolSize + 3;
  constexpr size_t kLength = 100;
  std::vector<std::unique_ptr<ScratchArray<uint32_t>>> live;
  for (size_t a = 0; a < kArrays; ++a) {
    live.push_back(std::make_unique<ScratchArray<uint32_t>>(kLength));
    for (size_t i = 0; i < kLength; ++i) (*live.back())[i] = static_cast<uint32_t>(a);
  }
  for (size_t a = 0; a < kArrays; ++a) {
    for (size_t i = 0; i < kLength; ++i) ASSERT_EQ((*live[a])[i], a) << "array " << a;
  }
}

TEST(ScratchArrayTest, ABufferFreedByOneArrayIsReusedByTheNext) {
  ScratchArray<uint64_t> outer(10);
  uint64_t* inner_data;
  {
    ScratchArray<uint64_t> inner(10);
    inner_data = inner.data();
  }
  ScratchArray<uint64_t> next(10);
  EXPECT_EQ(next.data(), inner_data);
  EXPECT_NE(next.data(), outer.data());
}

TEST(ScratchArrayTest, EachThreadHasItsOwnBuffers) {
  uint64_t* here;
  {
    ScratchArray<uint64_t> a(10);
    here = a.data();
  }
  uint64_t* there = nullptr;
  std::thread([&] {
    ScratchArray<uint64_t> a(10);
    there = a.data();
  }).join();
  EXPECT_NE(here, there);
}

}  // namespace
}  // namespace cuckoo
