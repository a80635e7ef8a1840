// The C++ client's request ids, seen where they arrive: an in-process
// cuckood behind a LossyProxy (tests/util/lossy_proxy.h) that records every
// Insert and Delete attempt and can lose the answer of one the server
// applied. Every write carries an id (the caller's as it is, else a random
// one per call), every retry of the call, gRPC's and the client's, the same
// one, so the server answers a retry after a lost answer from its window
// instead of applying the write twice (proto: "Retries").
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "client/cuckoo_client.h"
#include "tests/util/lossy_proxy.h"
#include "tests/util/test_server.h"

namespace cuckoo::testing {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;

const grpc::Status kConnectionLost(grpc::StatusCode::UNAVAILABLE, "the answer was lost");
// What gRPC reports for a stream the server's transport reset (its memory
// full): the write may have been applied.
const grpc::Status kStreamReset(grpc::StatusCode::RESOURCE_EXHAUSTED,
                                "Received RST_STREAM with error code 11");

// What Client::NewRequestId makes: 32 lowercase hex digits (128 bits).
bool IsGeneratedId(const std::string& id) {
  return id.size() == 32 && std::all_of(id.begin(), id.end(), [](char c) {
           return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
         });
}

// The request ids of `attempts`, in order.
std::vector<std::string> Ids(const std::vector<LossyProxy::Attempt>& attempts) {
  std::vector<std::string> ids;
  for (const LossyProxy::Attempt& a : attempts) ids.push_back(a.request_id);
  return ids;
}

class ClientRequestIdTest : public ServerTest {
 protected:
  void SetUp() override {
    ServerTest::SetUp();
    direct_ = client::Client::Connect(server_->address());
    v1::CreateFilterRequest req;
    req.set_name("f");
    req.set_capacity(10'000);
    req.set_fingerprint_bits(32);  // Counts are exact in practice.
    req.set_seed(1);
    auto created = direct_->CreateFilter(req);
    ASSERT_TRUE(created.ok()) << created.status();
    proxy_ = std::make_unique<LossyProxy>(server_->address());
    client::ClientOptions options;
    options.timeout = absl::Seconds(10);
    // No GetServerInfo before the first write, so the attempts are writes only.
    options.max_batch_keys = 100;
    options.max_batch_bytes = 1 << 16;
    client_ = client::Client::Connect(proxy_->address(), options);
  }

  // How many copies of `key` filter f holds, asked of the server itself.
  uint32_t Copies(std::string_view key) {
    auto counts = direct_->Count("f", std::vector<std::string_view>{key});
    EXPECT_TRUE(counts.ok()) << counts.status();
    return counts.ok() ? (*counts)[0] : 0;
  }

  std::unique_ptr<client::Client> direct_;
  std::unique_ptr<LossyProxy> proxy_;
  std::unique_ptr<client::Client> client_;
};

TEST_F(ClientRequestIdTest, AnInsertWhoseAnswerWasLostIsRetriedWithItsIdAndAppliedOnce) {
  proxy_->LoseAnswers(1, kConnectionLost);
  auto inserted = client_->Insert("f", std::vector<std::string_view>{"k"});
  ASSERT_TRUE(inserted.ok()) << inserted.status();
  EXPECT_THAT(*inserted, ElementsAre(v1::INSERT_RESULT_INSERTED));
  const std::vector<LossyProxy::Attempt> attempts = proxy_->attempts();
  ASSERT_EQ(attempts.size(), 2u);
  // The server applied the first attempt; the second carried the same id and
  // was answered from the window: one copy, not two.
  EXPECT_TRUE(attempts[0].server.ok());
  EXPECT_EQ(attempts[0].answered.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_TRUE(IsGeneratedId(attempts[0].request_id)) << attempts[0].request_id;
  EXPECT_EQ(attempts[1].request_id, attempts[0].request_id);
  EXPECT_EQ(Copies("k"), 1u) << "the retry was applied again";
}

TEST_F(ClientRequestIdTest, ADeleteWhoseStreamWasResetIsRetriedWithItsIdAndRemovesOneCopy) {
  ASSERT_TRUE(direct_->Insert("f", std::vector<std::string_view>{"k", "k", "k"}).ok());
  proxy_->LoseAnswers(1, kStreamReset);
  auto deleted = client_->Delete("f", std::vector<std::string_view>{"k"});
  ASSERT_TRUE(deleted.ok()) << deleted.status();
  EXPECT_THAT(*deleted, ElementsAre(v1::DELETE_RESULT_DELETED));
  const std::vector<LossyProxy::Attempt> attempts = proxy_->attempts();
  ASSERT_EQ(attempts.size(), 2u);
  EXPECT_TRUE(IsGeneratedId(attempts[0].request_id)) << attempts[0].request_id;
  EXPECT_EQ(attempts[1].request_id, attempts[0].request_id);
  EXPECT_EQ(Copies("k"), 2u) << "the retry removed a second copy";
}

TEST_F(ClientRequestIdTest, EveryAttemptOfGrpcsRetriesAndTheClientsSendsTheSameId) {
  // gRPC's retry policy makes at most 5 attempts of one call; the 6th and
  // 7th are the client's own (a new call, retried by gRPC again).
  proxy_->LoseAnswers(7, kConnectionLost);
  auto inserted = client_->Insert("f", std::vector<std::string_view>{"k"});
  ASSERT_TRUE(inserted.ok()) << inserted.status();
  const std::vector<std::string> ids = Ids(proxy_->attempts());
  ASSERT_EQ(ids.size(), 8u);
  EXPECT_EQ(std::set<std::string>(ids.begin(), ids.end()).size(), 1u)
      << ::testing::PrintToString(ids);
  EXPECT_EQ(Copies("k"), 1u);
}

TEST_F(ClientRequestIdTest, ACallersIdIsSentAsItIsOnEveryAttempt) {
  proxy_->LoseAnswers(2, kConnectionLost);
  ASSERT_TRUE(client_->Insert("f", std::vector<std::string_view>{"k"}, false, "caller-id-1").ok());
  proxy_->LoseAnswers(1, kStreamReset);
  ASSERT_TRUE(client_->Delete("f", std::vector<std::string_view>{"k"}, "caller-id-2").ok());
  const std::vector<LossyProxy::Attempt> attempts = proxy_->attempts();
  ASSERT_EQ(attempts.size(), 5u);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(attempts[i].method, "Insert");
    EXPECT_EQ(attempts[i].request_id, "caller-id-1");
  }
  for (size_t i = 3; i < 5; ++i) {
    EXPECT_EQ(attempts[i].method, "Delete");
    EXPECT_EQ(attempts[i].request_id, "caller-id-2");
  }
  EXPECT_EQ(Copies("k"), 0u);
}

TEST_F(ClientRequestIdTest, TwoCallsGetTwoIdsAndASplitCallOneIdPerRequest) {
  ASSERT_TRUE(client_->Insert("f", std::vector<std::string_view>{"a"}).ok());
  ASSERT_TRUE(client_->Insert("f", std::vector<std::string_view>{"a"}).ok());
  ASSERT_TRUE(client_->Delete("f", std::vector<std::string_view>{"a"}).ok());
  std::vector<std::string> ids = Ids(proxy_->attempts());
  ASSERT_EQ(ids.size(), 3u);
  for (const std::string& id : ids) EXPECT_TRUE(IsGeneratedId(id)) << id;
  EXPECT_EQ(std::set<std::string>(ids.begin(), ids.end()).size(), 3u)
      << ::testing::PrintToString(ids);
  EXPECT_EQ(Copies("a"), 1u) << "two calls are two requests, each applied";

  // 250 keys in requests of at most 100: ID.0, ID.1, ID.2 of one random ID;
  // the caller's id gets the same suffixes.
  std::vector<std::string> keys;
  for (int i = 0; i < 250; ++i) keys.push_back("split-" + std::to_string(i));
  const std::vector<std::string_view> views(keys.begin(), keys.end());
  proxy_->ClearAttempts();
  ASSERT_TRUE(client_->Insert("f", views).ok());
  ASSERT_TRUE(client_->Delete("f", views, "mine").ok());
  ids = Ids(proxy_->attempts());
  ASSERT_EQ(ids.size(), 6u);
  const std::string base = ids[0].substr(0, ids[0].size() - 2);
  EXPECT_TRUE(IsGeneratedId(base)) << ids[0];
  EXPECT_THAT(ids,
              ElementsAre(base + ".0", base + ".1", base + ".2", "mine.0", "mine.1", "mine.2"));
}

TEST_F(ClientRequestIdTest, CuckoodsOwnResourceExhaustedAndDeadlineExceededAreNotRetried) {
  // A limit of the server's (here a lost answer that reads like one) comes
  // back at once: a repeat would be refused the same way.
  proxy_->LoseAnswers(1, grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED,
                                      "the server's filters use all of its memory budget"));
  auto refused = client_->Insert("f", std::vector<std::string_view>{"k"});
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(refused.status().message()), Not(HasSubstr("attempts")));
  EXPECT_EQ(proxy_->attempts().size(), 1u);

  // DEADLINE_EXCEEDED is the caller's to repeat: with the same id, the
  // server answers from its window and applies nothing twice.
  proxy_->ClearAttempts();
  proxy_->LoseAnswers(1, grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED, "Deadline Exceeded"));
  const std::string id = client::Client::NewRequestId();
  auto late = client_->Insert("f", std::vector<std::string_view>{"j"}, false, id);
  EXPECT_EQ(late.status().code(), absl::StatusCode::kDeadlineExceeded);
  ASSERT_EQ(proxy_->attempts().size(), 1u);
  auto again = client_->Insert("f", std::vector<std::string_view>{"j"}, false, id);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_THAT(*again, ElementsAre(v1::INSERT_RESULT_INSERTED));
  EXPECT_THAT(Ids(proxy_->attempts()), ElementsAre(id, id));
  EXPECT_EQ(Copies("j"), 1u);
}

}  // namespace
}  // namespace cuckoo::testing
