// TransferDisk's claims and IdleSweeper's checks (server/service/transfers.h).
#include "server/service/transfers.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "tests/util/temp_dir.h"
#include "tests/util/test_server.h"

namespace cuckoo::server {
namespace {

using ::testing::HasSubstr;

// 10 MiB free beyond a 4 MiB reserve.
class TransferDiskTest : public ::testing::Test {
 protected:
  cuckoo::testing::TempDir dir_;
  cuckoo::testing::SmallDiskEnv env_{uint64_t{14} << 20};
  TransferDisk disk_{dir_.path(), uint64_t{4} << 20, "the write-ahead log", &env_};
};

TEST_F(TransferDiskTest, ClaimsCountUntilWrittenOrReleased) {
  absl::StatusOr<TransferDisk::Claim> a = disk_.Take(6 << 20, "a");
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(disk_.claimed_bytes(), 6u << 20);
  // 4 MiB left: a second of 5 MiB does not fit, naming every part.
  absl::StatusOr<TransferDisk::Claim> b = disk_.Take(5 << 20, "the import of filter \"b\"");
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(b.status().message(),
              HasSubstr("the import of filter \"b\" needs 5MiB (5242880 bytes) of disk"));
  EXPECT_THAT(b.status().message(),
              HasSubstr("has 14MiB free, of which 4MiB is kept for the write-ahead log and 6MiB "
                        "is promised to other transfers under way: only 4MiB is left for it"));
  // What `a` wrote is in the volume's used space now (this env's free
  // space does not move: the claim just stops counting it).
  a->Wrote(2 << 20);
  EXPECT_EQ(disk_.claimed_bytes(), 4u << 20);
  EXPECT_EQ(a->left(), 4u << 20);
  // Moved, it is still one claim; reset, it is gone.
  TransferDisk::Claim moved = *std::move(a);
  EXPECT_EQ(disk_.claimed_bytes(), 4u << 20);
  moved.Reset();
  EXPECT_EQ(disk_.claimed_bytes(), 0u);
  // Extend grows a claim chunk by chunk, checked each time.
  TransferDisk::Claim c;
  ASSERT_TRUE(disk_.Extend(&c, 6 << 20, "c").ok());
  ASSERT_TRUE(disk_.Extend(&c, 4 << 20, "c").ok());
  EXPECT_FALSE(disk_.Extend(&c, 1, "c").ok());
  EXPECT_EQ(c.left(), 10u << 20);
  { TransferDisk::Claim gone = std::move(c); }
  EXPECT_EQ(disk_.claimed_bytes(), 0u);
}

TEST(IdleSweeperTest, ChecksRunUntilRemovedAndNotAfter) {
  EXPECT_EQ(IdleSweeper::IntervalFor(absl::Seconds(60)), absl::Seconds(1));
  EXPECT_EQ(IdleSweeper::IntervalFor(absl::Seconds(2)), absl::Milliseconds(500));
  EXPECT_EQ(IdleSweeper::IntervalFor(absl::Milliseconds(20)), absl::Milliseconds(10));
  IdleSweeper sweeper(absl::Milliseconds(10));
  std::atomic<int> runs{0};
  const uint64_t id = sweeper.Add([&](IdleSweeper::Clock::time_point) { ++runs; });
  EXPECT_NE(id, 0u);
  for (int i = 0; i < 3000 && runs.load() < 3; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_GE(runs.load(), 3);
  sweeper.Remove(id);
  const int after = runs.load();
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_EQ(runs.load(), after);
  sweeper.Remove(0);  // Nothing.
}

}  // namespace
}  // namespace cuckoo::server
