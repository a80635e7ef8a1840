// The C++ client library against an in-process server.
#include "client/cuckoo_client.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "tests/core/test_keys.h"
#include "tests/server/test_server.h"

namespace cuckoo::testing {
namespace {

using ::testing::HasSubstr;

class ClientTest : public ServerTest {
 protected:
  void SetUp() override {
    ServerTest::SetUp();
    client_ = client::Client::Connect(server_->address());
    v1::CreateFilterRequest req;
    req.set_name("f");
    req.set_capacity(20'000);
    req.set_fingerprint_bits(32);  // No false positives to speak of.
    req.set_seed(1);
    auto created = client_->CreateFilter(req);
    ASSERT_TRUE(created.ok()) << created.status();
    EXPECT_TRUE(created->created());
  }

  std::unique_ptr<client::Client> client_;
};

std::vector<std::string> Keys(uint64_t stream, uint64_t n) {
  std::vector<std::string> keys;
  for (uint64_t i = 0; i < n; ++i) keys.push_back(Key(stream, i));
  return keys;
}

std::vector<std::string_view> Views(const std::vector<std::string>& keys) {
  return {keys.begin(), keys.end()};
}

TEST_F(ClientTest, BatchesLargerThanTheServerLimitAreSplitAndAnsweredInOrder) {
  // The test server allows 1000 keys per request; 2500 need three.
  std::vector<std::string> present = Keys(0, 2500);
  auto ins = client_->Insert("f", Views(present));
  ASSERT_TRUE(ins.ok()) << ins.status();
  ASSERT_EQ(ins->size(), 2500u);
  for (v1::InsertResult r : *ins) ASSERT_EQ(r, v1::INSERT_RESULT_INSERTED);

  std::vector<std::string> mixed;
  for (int i = 0; i < 2500; ++i) mixed.push_back(i % 2 ? Key(1, i) : present[i]);
  auto found = client_->Lookup("f", Views(mixed));
  ASSERT_TRUE(found.ok()) << found.status();
  ASSERT_EQ(found->size(), 2500u);
  for (int i = 0; i < 2500; ++i) ASSERT_EQ((*found)[i], i % 2 == 0) << i;

  auto counts = client_->Count("f", Views(mixed));
  ASSERT_TRUE(counts.ok());
  for (int i = 0; i < 2500; ++i) ASSERT_EQ((*counts)[i], i % 2 == 0 ? 1u : 0u) << i;

  auto del = client_->Delete("f", Views(mixed));
  ASSERT_TRUE(del.ok());
  for (int i = 0; i < 2500; ++i) {
    ASSERT_EQ((*del)[i], i % 2 == 0 ? v1::DELETE_RESULT_DELETED : v1::DELETE_RESULT_NOT_FOUND);
  }
  auto info = client_->GetFilter("f");
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->items(), 1250u);
}

TEST_F(ClientTest, RequestsAlsoRespectTheByteLimit) {
  client::ClientOptions options;
  options.max_batch_keys = 1000;
  options.max_batch_bytes = 100;  // Ten 10-byte keys per request.
  client::Client small(channel_, options);
  std::vector<std::string> keys;
  for (int i = 0; i < 95; ++i) keys.push_back(absl::StrFormat("key-%05d", i));
  auto ins = small.Insert("f", Views(keys));
  ASSERT_TRUE(ins.ok()) << ins.status();
  EXPECT_EQ(ins->size(), 95u);
  auto found = small.Lookup("f", Views(keys));
  ASSERT_TRUE(found.ok());
  EXPECT_EQ(std::count(found->begin(), found->end(), true), 95);
}

TEST_F(ClientTest, ABadKeyInALaterRequestIsNamedByItsIndexInTheCallersKeys) {
  std::vector<std::string> keys = Keys(0, 2500);
  keys[2100] = "";
  auto ins = client_->Insert("f", Views(keys));
  ASSERT_FALSE(ins.ok());
  EXPECT_EQ(ins.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(ins.status().message()), HasSubstr("keys[2100] is empty"));
  EXPECT_THAT(std::string(ins.status().message()),
              HasSubstr("(the first 2000 of 2500 keys were applied)"));
  // Exactly the first two requests went in.
  EXPECT_EQ(client_->GetFilter("f")->items(), 2000u);
}

TEST_F(ClientTest, EmptyInputMakesNoCall) {
  auto found = client_->Lookup("no-such-filter", {});
  ASSERT_TRUE(found.ok());
  EXPECT_TRUE(found->empty());
}

TEST_F(ClientTest, ServerStatusesComeBackWithCodeAndMessage) {
  std::vector<std::string_view> keys = {"a"};
  auto missing = client_->Lookup("nope", keys);
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(missing.status().message()), HasSubstr("\"nope\" not found"));
  EXPECT_EQ(client_->DropFilter("../x").status().code(), absl::StatusCode::kInvalidArgument);
  auto list = client_->ListFilters();
  ASSERT_TRUE(list.ok());
  ASSERT_EQ(list->size(), 1u);
  EXPECT_EQ((*list)[0].name(), "f");
  auto freed = client_->DropFilter("f");
  ASSERT_TRUE(freed.ok());
  EXPECT_EQ(*freed, (*list)[0].memory_bytes());
}

TEST(ClientUnreachableTest, AnUnreachableServerIsUnavailableWithinTheTimeout) {
  client::ClientOptions options;
  options.timeout = absl::Seconds(2);
  // Port 1 on loopback: nothing listens there.
  auto c = client::Client::Connect("127.0.0.1:1", options);
  const absl::Time start = absl::Now();
  auto info = c->ServerInfo();
  EXPECT_EQ(info.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
}

}  // namespace
}  // namespace cuckoo::testing
