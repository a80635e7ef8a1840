#include "server/storage/request_window.h"

#include <gtest/gtest.h>

#include <string>
#include <thread>
#include <vector>

namespace cuckoo::server {
namespace {

RequestWindow::Outcome Outcome(uint64_t position, std::vector<uint8_t> results) {
  return {.position = position, .results = std::move(results)};
}

TEST(RequestWindowTest, RepeatAfterTheFirstFinishedGetsItsOutcome) {
  RequestWindow w(absl::Minutes(1), 1 << 20);
  RequestWindow::Outcome out;
  auto never = [](const absl::Status&, const RequestWindow::Outcome&) { FAIL(); };
  ASSERT_EQ(w.Start("d/a", &out, never), RequestWindow::Begin::kNew);
  w.Finish("d/a", Outcome(7, {0, 1, 0}));
  ASSERT_EQ(w.Start("d/a", &out, never), RequestWindow::Begin::kAnswered);
  EXPECT_EQ(out.position, 7u);
  EXPECT_EQ(out.results, (std::vector<uint8_t>{0, 1, 0}));
  EXPECT_EQ(w.Start("d/b", &out, never), RequestWindow::Begin::kNew);
}

TEST(RequestWindowTest, RepeatsWhileTheFirstRunsWaitForItAndShareItsEnd) {
  RequestWindow w(absl::Minutes(1), 1 << 20);
  RequestWindow::Outcome out;
  ASSERT_EQ(w.Start("i/x", &out, nullptr), RequestWindow::Begin::kNew);
  std::vector<uint64_t> seen;
  for (int i = 0; i < 3; ++i) {
    ASSERT_EQ(w.Start("i/x", &out,
                      [&](const absl::Status& s, const RequestWindow::Outcome& o) {
                        EXPECT_TRUE(s.ok());
                        seen.push_back(o.position);
                      }),
              RequestWindow::Begin::kWaiting);
  }
  w.Finish("i/x", Outcome(11, {0}));
  EXPECT_EQ(seen, (std::vector<uint64_t>{11, 11, 11}));
}

TEST(RequestWindowTest, AFailedFirstTryIsForgottenAndItsWaitersToldToSendAgain) {
  RequestWindow w(absl::Minutes(1), 1 << 20);
  RequestWindow::Outcome out;
  ASSERT_EQ(w.Start("i/x", &out, nullptr), RequestWindow::Begin::kNew);
  absl::Status told;
  ASSERT_EQ(
      w.Start("i/x", &out, [&](const absl::Status& s, const RequestWindow::Outcome&) { told = s; }),
      RequestWindow::Begin::kWaiting);
  w.Abort("i/x", absl::UnavailableError("disk full"));
  EXPECT_EQ(told.code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(w.Start("i/x", &out, nullptr), RequestWindow::Begin::kNew);
}

TEST(RequestWindowTest, OldestOutcomesGoPastTheWindowOrTheByteBound) {
  RequestWindow by_time(absl::Milliseconds(50), 1 << 20);
  RequestWindow::Outcome out;
  ASSERT_EQ(by_time.Start("a", &out, nullptr), RequestWindow::Begin::kNew);
  by_time.Finish("a", Outcome(1, {0}));
  std::this_thread::sleep_for(std::chrono::milliseconds(80));
  EXPECT_EQ(by_time.Start("a", &out, nullptr), RequestWindow::Begin::kNew);

  // Each outcome is charged its results plus 256 bytes: three fit in 3000.
  RequestWindow by_bytes(absl::Minutes(1), 3000);
  for (int i = 0; i < 5; ++i) {
    const std::string key = "k" + std::to_string(i);
    ASSERT_EQ(by_bytes.Start(key, &out, nullptr), RequestWindow::Begin::kNew);
    by_bytes.Finish(key, Outcome(i, std::vector<uint8_t>(700)));
  }
  EXPECT_LE(by_bytes.size(), 4u);
  EXPECT_EQ(by_bytes.Start("k4", &out, nullptr), RequestWindow::Begin::kAnswered);
  EXPECT_EQ(by_bytes.Start("k0", &out, nullptr), RequestWindow::Begin::kNew);
}

TEST(RequestWindowTest, AFirstTryAbandonedPartWayIsInDoubtAndNeverNewAgain) {
  RequestWindow w(absl::Minutes(1), 1 << 20);
  RequestWindow::Outcome out;
  ASSERT_EQ(w.Start("d/x", &out, nullptr), RequestWindow::Begin::kNew);
  absl::Status told;
  ASSERT_EQ(
      w.Start("d/x", &out, [&](const absl::Status& s, const RequestWindow::Outcome&) { told = s; }),
      RequestWindow::Begin::kWaiting);
  w.Abandon("d/x", absl::DeadlineExceededError("cut short"));
  EXPECT_EQ(told.code(), absl::StatusCode::kAborted);
  EXPECT_EQ(w.Start("d/x", &out, nullptr), RequestWindow::Begin::kInDoubt);
}

// What a restart gets back: finished entries with their outcomes, entries
// whose results are synced (not yet answered), and entries that logged a
// write without results, in doubt; not entries that logged nothing.
TEST(RequestWindowTest, ASaveRestoresFinishedSyncedAndInDoubtEntries) {
  RequestWindow w(absl::Minutes(1), 1 << 20);
  RequestWindow::Outcome out;
  for (const char* k : {"done", "synced", "unsynced", "logged", "fresh"}) {
    ASSERT_EQ(w.Start(k, &out, nullptr), RequestWindow::Begin::kNew);
  }
  w.Finish("done", Outcome(5, {0, 1}));
  w.Logged("synced");
  w.Recorded("synced", 10, Outcome(9, {1}));
  w.Logged("unsynced");
  w.Recorded("unsynced", 12, Outcome(11, {0}));
  w.Logged("logged");
  const std::vector<RequestWindow::Saved> saved = w.Save(/*synced_lsn=*/10);
  absl::StatusOr<std::vector<RequestWindow::Saved>> decoded =
      RequestWindow::Decode(RequestWindow::Encode(saved), "REQUESTS");
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  ASSERT_EQ(decoded->size(), 4u);

  RequestWindow after(absl::Minutes(1), 1 << 20);
  for (const RequestWindow::Saved& e : *decoded) {
    if (e.in_doubt) {
      after.RestoreInDoubt(e.key, e.time);
    } else {
      after.RestoreDone(e.key, e.time, e.outcome);
    }
  }
  ASSERT_EQ(after.Start("done", &out, nullptr), RequestWindow::Begin::kAnswered);
  EXPECT_EQ(out.position, 5u);
  EXPECT_EQ(out.results, (std::vector<uint8_t>{0, 1}));
  ASSERT_EQ(after.Start("synced", &out, nullptr), RequestWindow::Begin::kAnswered);
  EXPECT_EQ(out.position, 9u);
  EXPECT_EQ(after.Start("unsynced", &out, nullptr), RequestWindow::Begin::kInDoubt);
  EXPECT_EQ(after.Start("logged", &out, nullptr), RequestWindow::Begin::kInDoubt);
  EXPECT_EQ(after.Start("fresh", &out, nullptr), RequestWindow::Begin::kNew);
  // The log's results, replayed after the save, settle one in doubt.
  after.RestoreDone("unsynced", absl::Now(), Outcome(11, {0}));
  EXPECT_EQ(after.Start("unsynced", &out, nullptr), RequestWindow::Begin::kAnswered);
}

TEST(RequestWindowTest, RestoredEntriesKeepTheTimeAndByteBounds) {
  RequestWindow w(absl::Minutes(2), 3000);
  RequestWindow::Outcome out;
  w.RestoreDone("old", absl::Now() - absl::Minutes(3), Outcome(1, {0}));
  w.RestoreInDoubt("old-doubt", absl::Now() - absl::Minutes(3));
  EXPECT_EQ(w.Start("old", &out, nullptr), RequestWindow::Begin::kNew);
  EXPECT_EQ(w.Start("old-doubt", &out, nullptr), RequestWindow::Begin::kNew);
  // A hostile stream of unique ids: never more than the byte bound.
  RequestWindow bounded(absl::Minutes(2), 3000);
  for (int i = 0; i < 1000; ++i) {
    bounded.RestoreDone("k" + std::to_string(i), absl::Now(),
                        Outcome(i, std::vector<uint8_t>(700)));
    bounded.RestoreInDoubt("d" + std::to_string(i), absl::Now());
  }
  EXPECT_LE(bounded.size(), 6u);
  EXPECT_LE(RequestWindow::Encode(bounded.Save(~uint64_t{0})).size(), 3000u + 100u);
}

TEST(RequestWindowTest, ADamagedSaveIsDataLossNamingTheFile) {
  std::string bytes = RequestWindow::Encode(
      {{.key = "d/x/1", .in_doubt = false, .time = absl::Now(), .outcome = Outcome(3, {0})}});
  bytes[20] ^= 1;
  absl::StatusOr<std::vector<RequestWindow::Saved>> d =
      RequestWindow::Decode(bytes, "/data/REQUESTS");
  EXPECT_EQ(d.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(d.status().message().find("/data/REQUESTS"), std::string::npos);
  EXPECT_EQ(RequestWindow::Decode("", "x").status().code(), absl::StatusCode::kDataLoss);
}

}  // namespace
}  // namespace cuckoo::server
