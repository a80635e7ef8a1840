// Guarded (base/guarded.h): an exception becomes a status.
#include "base/guarded.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <new>
#include <stdexcept>

#include "absl/status/statusor.h"

namespace cuckoo {
namespace {

using ::testing::HasSubstr;

// A handler that threw (std::bad_alloc, say) never finished its call: the
// count of calls in flight stayed above zero, and every later shutdown
// waited out the whole drain time.
TEST(GuardedTest, AHandlerThatThrowsStillFinishesItsCallWithAStatus) {
  absl::Status oom = Guarded([]() -> absl::Status { throw std::bad_alloc(); });
  EXPECT_EQ(oom.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(oom.message(), HasSubstr("ran out of memory"));
  absl::Status other = Guarded([]() -> absl::Status { throw std::runtime_error("boom"); });
  EXPECT_EQ(other.code(), absl::StatusCode::kInternal);
  EXPECT_THAT(other.message(), HasSubstr("boom"));
  absl::Status odd = Guarded([]() -> absl::Status { throw 42; });
  EXPECT_EQ(odd.code(), absl::StatusCode::kInternal);
  EXPECT_TRUE(Guarded([] { return absl::OkStatus(); }).ok());
  // The same for bodies that return a value.
  absl::StatusOr<int> value = Guarded([]() -> absl::StatusOr<int> { throw std::bad_alloc(); });
  EXPECT_EQ(value.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(*Guarded([]() -> absl::StatusOr<int> { return 7; }), 7);
}

}  // namespace
}  // namespace cuckoo
