#include "server/request_window.h"

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

}  // namespace
}  // namespace cuckoo::server
