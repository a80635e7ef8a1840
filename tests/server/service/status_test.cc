#include "server/service/status.h"

#include <gtest/gtest.h>

namespace cuckoo::server {
namespace {

TEST(StatusTest, CodesAndMessagesCrossUnchanged) {
  EXPECT_TRUE(ToGrpcStatus(absl::OkStatus()).ok());
  const grpc::Status s = ToGrpcStatus(absl::NotFoundError("filter \"x\" not found"));
  EXPECT_EQ(s.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(s.error_message(), "filter \"x\" not found");
}

}  // namespace
}  // namespace cuckoo::server
