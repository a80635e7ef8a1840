// The C++ client library against an in-process server.
#include "client/cuckoo_client.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <future>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "tests/util/keys.h"
#include "tests/util/loopback.h"
#include "tests/util/test_server.h"

namespace cuckoo::testing {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::Not;

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
  // (A name over 512 bytes: "../x" is a Redis-style key, and never a path.)
  EXPECT_EQ(client_->DropFilter(std::string(513, 'x')).status().code(),
            absl::StatusCode::kInvalidArgument);
  auto list = client_->ListFilters();
  ASSERT_TRUE(list.ok());
  ASSERT_EQ(list->size(), 1u);
  EXPECT_EQ((*list)[0].name(), "f");
  auto freed = client_->DropFilter("f");
  ASSERT_TRUE(freed.ok());
  EXPECT_EQ(*freed, (*list)[0].memory_bytes());
}

// Export into a stream, import from one: the filter comes back whole under
// its new name, chunked both ways (the test server's messages are 1 MiB).
TEST_F(ClientTest, ExportIntoAStreamAndImportFromOneMakeTheSameFilter) {
  v1::CreateFilterRequest big;
  big.set_name("big");
  big.set_capacity(1'500'000);  // About 2 MB: several chunks.
  big.set_seed(3);
  ASSERT_TRUE(client_->CreateFilter(big).ok());
  const std::vector<std::string> keys = Keys(4, 3000);
  ASSERT_TRUE(client_->Insert("big", Views(keys)).ok());
  std::ostringstream out;
  absl::StatusOr<client::Client::ExportInfo> exported =
      client_->ExportFilter("big", out, absl::Seconds(30));
  ASSERT_TRUE(exported.ok()) << exported.status();
  EXPECT_EQ(exported->total_bytes, out.str().size());
  EXPECT_GT(exported->total_bytes, uint64_t{1} << 20);
  EXPECT_EQ(exported->items, 3000u);
  EXPECT_EQ(exported->filter.name(), "big");
  EXPECT_GE(client_->last_log_position(), exported->log_position);

  std::istringstream in(out.str());
  absl::StatusOr<v1::ImportFilterResponse> imported =
      client_->ImportFilter("copy", in, absl::Seconds(30));
  ASSERT_TRUE(imported.ok()) << imported.status();
  EXPECT_EQ(imported->bytes(), out.str().size());
  EXPECT_EQ(imported->filter().items(), 3000u);
  EXPECT_EQ(imported->filter().seed(), 3u);
  EXPECT_EQ(client_->last_log_position(), imported->log_position());
  auto found = client_->Lookup("copy", Views(keys));
  ASSERT_TRUE(found.ok()) << found.status();
  EXPECT_EQ(std::count(found->begin(), found->end(), true), 3000);

  // A sink's error cancels the export and comes back as it is.
  auto refused = client_->ExportFilter(
      "big", [](std::string_view) { return absl::DataLossError("disk full here"); },
      absl::Seconds(30));
  EXPECT_EQ(refused.status(), absl::DataLossError("disk full here"));
  // A server error comes back with its code, a repeat of the import too.
  EXPECT_EQ(client_->ExportFilter("nope", out, absl::Seconds(5)).status().code(),
            absl::StatusCode::kNotFound);
  std::istringstream again(out.str());
  EXPECT_EQ(client_->ImportFilter("copy", again, absl::Seconds(30)).status().code(),
            absl::StatusCode::kAlreadyExists);
}

TEST(ClientUnreachableTest, AnUnreachableServerIsUnavailableWithinTheTimeout) {
  client::ClientOptions options;
  options.timeout = absl::Seconds(2);
  options.retry_timeout = absl::ZeroDuration();  // gRPC's own retries only.
  // Port 1 on loopback: nothing listens there.
  auto c = client::Client::Connect("127.0.0.1:1", options);
  const absl::Time start = absl::Now();
  auto info = c->ServerInfo();
  EXPECT_EQ(info.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
}

// The data-path requests through the stub, with a request id.
v1::DeleteResponse StubDelete(v1::FilterService::Stub& stub, const std::string& key,
                              const std::string& request_id) {
  v1::DeleteRequest req;
  req.set_filter("f");
  req.add_keys(key);
  req.set_request_id(request_id);
  grpc::ClientContext ctx;
  v1::DeleteResponse resp;
  const grpc::Status s = stub.Delete(&ctx, req, &resp);
  EXPECT_TRUE(s.ok()) << s.error_message();
  return resp;
}

TEST_F(ClientTest, ADeleteRepeatedWithTheSameRequestIdDeletesOnce) {
  std::vector<std::string_view> k = {"k", "k"};
  ASSERT_TRUE(client_->Insert("f", k).ok());
  const v1::DeleteResponse first = StubDelete(*stub_, "k", "retry-me");
  const v1::DeleteResponse repeat = StubDelete(*stub_, "k", "retry-me");
  // The repeat is answered with the first one's results and position.
  EXPECT_EQ(first.deleted(), 1u);
  EXPECT_EQ(repeat.deleted(), 1u);
  EXPECT_GT(first.log_position(), 0u);
  EXPECT_EQ(repeat.log_position(), first.log_position());
  auto counts = client_->Count("f", std::vector<std::string_view>{"k"});
  ASSERT_TRUE(counts.ok()) << counts.status();
  EXPECT_EQ((*counts)[0], 1u) << "the repeat deleted a second copy";
  // Another id is another request.
  EXPECT_EQ(StubDelete(*stub_, "k", "another").deleted(), 1u);
  EXPECT_EQ((*client_->Count("f", std::vector<std::string_view>{"k"}))[0], 0u);
}

TEST_F(ClientTest, TheClientGivesEveryCallARequestIdOfItsOwn) {
  std::vector<std::string_view> k = {"k"};
  ASSERT_TRUE(client_->Insert("f", std::vector<std::string_view>{"k", "k"}).ok());
  // Two calls without an id are two requests: both apply.
  auto first = client_->Delete("f", k);
  auto second = client_->Delete("f", k);
  ASSERT_TRUE(first.ok() && second.ok());
  EXPECT_EQ((*first)[0], v1::DELETE_RESULT_DELETED);
  EXPECT_EQ((*second)[0], v1::DELETE_RESULT_DELETED);
  EXPECT_EQ((*client_->Count("f", k))[0], 0u);
  EXPECT_NE(client::Client::NewRequestId(), client::Client::NewRequestId());
  EXPECT_EQ(client::Client::NewRequestId().size(), 32u);
}

TEST_F(ClientTest, ACallersRequestIdAppliesARepeatedCallOnceEvenWhenSplit) {
  std::vector<std::string_view> k = {"k"};
  ASSERT_TRUE(client_->Insert("f", std::vector<std::string_view>{"k", "k"}).ok());
  ASSERT_TRUE(client_->Delete("f", k, "mine").ok());
  auto repeat = client_->Delete("f", k, "mine");
  ASSERT_TRUE(repeat.ok()) << repeat.status();
  EXPECT_EQ((*repeat)[0], v1::DELETE_RESULT_DELETED);  // The first one's answer.
  EXPECT_EQ((*client_->Count("f", k))[0], 1u);

  // 2500 keys: three requests (the server takes 1000), batch-1.0 to .2.
  std::vector<std::string> keys = Keys(5, 2500);
  for (int run = 0; run < 2; ++run) {
    auto ins = client_->Insert("f", Views(keys), false, "batch-1");
    ASSERT_TRUE(ins.ok()) << ins.status();
    EXPECT_EQ(std::count(ins->begin(), ins->end(), v1::INSERT_RESULT_INSERTED), 2500);
  }
  EXPECT_EQ(client_->GetFilter("f")->items(), 2501u);

  // A 128-character id fits one request, but leaves no room for ".2".
  const std::string longest(128, 'x');
  ASSERT_TRUE(client_->Insert("f", k, false, longest).ok());
  auto split = client_->Insert("f", Views(Keys(6, 2500)), false, longest);
  EXPECT_EQ(split.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(split.status().message()), HasSubstr("suffix \".2\""));
  EXPECT_EQ(client_->GetFilter("f")->items(), 2502u) << "nothing of it was sent";
}

TEST_F(ClientTest, LogPositionsComeBackAndGrow) {
  const uint64_t created = client_->last_log_position();
  EXPECT_GT(created, 0u);  // CreateFilter in SetUp.
  std::vector<std::string_view> k = {"a"};
  ASSERT_TRUE(client_->Insert("f", k).ok());
  const uint64_t inserted = client_->last_log_position();
  EXPECT_GT(inserted, created);
  ASSERT_TRUE(client_->Delete("f", k).ok());
  const uint64_t deleted = client_->last_log_position();
  EXPECT_GT(deleted, inserted);
  // Reads answer at the position they read at: nothing new.
  ASSERT_TRUE(client_->Lookup("f", k).ok());
  ASSERT_TRUE(client_->Count("f", k).ok());
  ASSERT_TRUE(client_->GetFilter("f").ok());
  ASSERT_TRUE(client_->ListFilters().ok());
  EXPECT_EQ(client_->last_log_position(), deleted);
  // Another client's reads see how far the server is.
  auto other = client::Client::Connect(server_->address());
  EXPECT_EQ(other->last_log_position(), 0u);
  ASSERT_TRUE(other->GetFilter("f").ok());
  EXPECT_EQ(other->last_log_position(), deleted);
  // AdvanceLogPosition only raises it.
  other->AdvanceLogPosition(1);
  EXPECT_EQ(other->last_log_position(), deleted);
  ASSERT_TRUE(client_->DropFilter("f").ok());
  EXPECT_GT(client_->last_log_position(), deleted);
}

TEST_F(ClientTest, ReadYourWritesSendsTheLastPositionAndOutOfRangeIsNotRetried) {
  // A single node answers a position past its log OUT_OF_RANGE: proof that
  // the client sent it, on every call that carries one.
  const uint64_t far = client_->last_log_position() + (uint64_t{1} << 40);
  client_->AdvanceLogPosition(far);
  EXPECT_EQ(client_->last_log_position(), far);
  std::vector<std::string_view> k = {"a"};
  const absl::Time start = absl::Now();
  auto lookup = client_->Lookup("f", k);
  EXPECT_EQ(lookup.status().code(), absl::StatusCode::kOutOfRange);
  EXPECT_THAT(
      std::string(lookup.status().message()),
      AllOf(HasSubstr(absl::StrFormat("min_log_position %u", far)), Not(HasSubstr("attempts"))));
  EXPECT_EQ(client_->Count("f", k).status().code(), absl::StatusCode::kOutOfRange);
  EXPECT_EQ(client_->GetFilter("f").status().code(), absl::StatusCode::kOutOfRange);
  EXPECT_EQ(client_->ListFilters().status().code(), absl::StatusCode::kOutOfRange);
  EXPECT_EQ(client_->Insert("f", k).status().code(), absl::StatusCode::kOutOfRange);
  EXPECT_EQ(client_->Delete("f", k).status().code(), absl::StatusCode::kOutOfRange);
  // Not retried: at once, not after retry_timeout (30 s).
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
  EXPECT_EQ(client_->GetFilter("f").status().code(), absl::StatusCode::kOutOfRange);

  client::ClientOptions off;
  off.read_your_writes = false;
  auto plain = client::Client::Connect(server_->address(), off);
  plain->AdvanceLogPosition(far);
  auto found = plain->Lookup("f", k);
  ASSERT_TRUE(found.ok()) << found.status();
  EXPECT_EQ(plain->GetFilter("f")->items(), 0u);
}

TEST(ClientUnreachableTest, UnavailableIsRetriedUntilTheRetryTimeout) {
  // gRPC's own retries of one call take about 0.75 s (5 attempts, backoff
  // 0.05 s doubling); the client's go on until retry_timeout, and start no
  // attempt after it.
  client::ClientOptions options;
  options.timeout = absl::Seconds(2);
  options.retry_timeout = absl::Seconds(2);
  auto c = client::Client::Connect("127.0.0.1:1", options);  // Nothing listens there.
  const absl::Time start = absl::Now();
  auto info = c->ServerInfo();
  const absl::Duration took = absl::Now() - start;
  EXPECT_EQ(info.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(info.status().message()), HasSubstr(" attempts in "));
  EXPECT_GE(took, absl::Milliseconds(1800));
  EXPECT_LT(took, absl::Seconds(10));

  // A write is retried the same way (it always has a request id).
  client::ClientOptions limits = options;  // No GetServerInfo first.
  limits.max_batch_keys = 10;
  limits.max_batch_bytes = 100;
  auto w = client::Client::Connect("127.0.0.1:1", limits);
  const absl::Time write_start = absl::Now();
  auto del = w->Delete("f", std::vector<std::string_view>{"a"});
  EXPECT_EQ(del.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(del.status().message()), HasSubstr(" attempts in "));
  EXPECT_GE(absl::Now() - write_start, absl::Milliseconds(1800));

  // DropFilter never is (a repeat of an applied drop is wrong).
  options.retry_timeout = absl::Seconds(20);
  auto d = client::Client::Connect("127.0.0.1:1", options);
  const absl::Time drop_start = absl::Now();
  auto dropped = d->DropFilter("f");
  EXPECT_EQ(dropped.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(dropped.status().message()), Not(HasSubstr(" attempts in ")));
  EXPECT_LT(absl::Now() - drop_start, absl::Seconds(10));
}

// A fixture whose server the test starts itself.
class LateServerTest : public ServerTest {
 protected:
  void SetUp() override {}
};

TEST_F(LateServerTest, ACallRidesThroughUntilTheServerComesUp) {
  const std::string address = absl::StrFormat("127.0.0.1:%d", FreePort());
  client::ClientOptions options;
  options.timeout = absl::Seconds(5);
  options.retry_timeout = absl::Seconds(20);
  auto c = client::Client::Connect(address, options);
  const absl::Time start = absl::Now();
  std::future<absl::StatusOr<std::vector<v1::FilterInfo>>> listed =
      std::async(std::launch::async, [&] { return c->ListFilters(); });
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  server::ServerConfig config = TestConfig(dir_.path());
  config.listen = address;
  StartServer(config);
  absl::StatusOr<std::vector<v1::FilterInfo>> filters = listed.get();
  ASSERT_TRUE(filters.ok()) << filters.status();
  EXPECT_TRUE(filters->empty());
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(1500));
}

TEST_F(ClientTest, ACommaListTargetOfTwoAddressesWorks) {
  const std::string address = server_->address();  // 127.0.0.1:PORT
  const std::string port = address.substr(address.rfind(':') + 1);
  for (const std::string& target : {address + "," + address, address + ", localhost:" + port}) {
    EXPECT_EQ(*client::ChannelTarget(target), "ipv4:" + address) << target;
    auto c = client::Client::Connect(target);
    ASSERT_TRUE(c->connect_status().ok()) << c->connect_status();
    std::vector<std::string> keys = Keys(9, 10);
    auto ins = c->Insert("f", Views(keys));
    ASSERT_TRUE(ins.ok()) << ins.status();
    for (int i = 0; i < 4; ++i) {  // Round-robin: both subchannels answer.
      auto found = c->Lookup("f", Views(keys));
      ASSERT_TRUE(found.ok()) << found.status();
      EXPECT_EQ(std::count(found->begin(), found->end(), true), 10);
    }
    ASSERT_TRUE(c->Delete("f", Views(keys)).ok());
  }
}

TEST(ChannelTargetTest, ListsBecomeAddressListsAndOtherTargetsStayAsTheyAre) {
  EXPECT_EQ(*client::ChannelTarget("localhost:50051"), "localhost:50051");
  EXPECT_EQ(*client::ChannelTarget("dns:///cuckood:50051"), "dns:///cuckood:50051");
  EXPECT_EQ(*client::ChannelTarget("ipv4:10.0.0.1:1,10.0.0.2:2"), "ipv4:10.0.0.1:1,10.0.0.2:2");
  EXPECT_EQ(*client::ChannelTarget("10.0.0.1:1,10.0.0.2:2"), "ipv4:10.0.0.1:1,10.0.0.2:2");
  EXPECT_EQ(*client::ChannelTarget("[::1]:1,[2001:db8::2]:2"), "ipv6:[::1]:1,[2001:db8::2]:2");
  EXPECT_EQ(*client::ChannelTarget("10.0.0.1:1,10.0.0.1:1"), "ipv4:10.0.0.1:1");
  for (const char* bad : {"10.0.0.1:1,", "a:1,b", "a:1,b:port", "a:1,::1:2", "a:1,b:70000"}) {
    EXPECT_EQ(client::ChannelTarget(bad).status().code(), absl::StatusCode::kInvalidArgument)
        << bad;
  }
  EXPECT_EQ(client::ChannelTarget("10.0.0.1:1,[::1]:2").status().code(),
            absl::StatusCode::kInvalidArgument);
  // A name that does not resolve is left out, unless none does.
  EXPECT_EQ(*client::ChannelTarget("10.0.0.1:1,no-such-host.invalid:2"), "ipv4:10.0.0.1:1");
  EXPECT_EQ(client::ChannelTarget("no-such-host.invalid:1,nor-this.invalid:2").status().code(),
            absl::StatusCode::kUnavailable);
  // Connect with a bad list: every call fails with why.
  auto c = client::Client::Connect("a:1,b");
  EXPECT_EQ(c->connect_status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(c->ListFilters().status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace cuckoo::testing
