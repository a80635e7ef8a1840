// cuckoo.v1.FilterService end to end in one process: a real CuckooServer on
// an ephemeral port, driven through the generated stub.
#include <gmock/gmock.h>
#include <grpcpp/generic/generic_stub.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/cuckoo_filter.h"
#include "core/snapshot.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "tests/util/fault_wal_env.h"
#include "tests/util/keys.h"
#include "tests/util/test_server.h"

namespace cuckoo {
namespace {

using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using testing::Key;
using testing::Keys;
using testing::ServerTest;

// An RPC's status and response.
template <typename Response>
struct Reply {
  grpc::Status status;
  Response response;
};

class FilterServiceTest : public ServerTest {
 protected:
  template <typename Request, typename Response>
  Reply<Response> Call(grpc::Status (v1::FilterService::Stub::*rpc)(grpc::ClientContext*,
                                                                    const Request&, Response*),
                       const Request& req) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    Reply<Response> r;
    r.status = (stub_.get()->*rpc)(&ctx, req, &r.response);
    return r;
  }

  Reply<v1::CreateFilterResponse> Create(const std::string& name, uint64_t capacity,
                                         uint64_t seed = 7) {
    v1::CreateFilterRequest req;
    req.set_name(name);
    req.set_capacity(capacity);
    req.set_seed(seed);
    return Call(&v1::FilterService::Stub::CreateFilter, req);
  }

  // A server taking 10,000-key batches (more than one part of 4096), and a
  // filter "f" with room for them.
  void StartForBatchesOfTenThousand() {
    server::ServerConfig config = testing::TestConfig(dir_.path());
    config.max_batch_keys = 10'000;
    config.max_message_bytes = 4 << 20;
    StartServer(config);
    ASSERT_TRUE(Create("f", 100'000).status.ok());
  }

  template <typename Request>
  static Request WithKeys(const std::string& filter, const std::vector<std::string>& keys) {
    Request req;
    req.set_filter(filter);
    for (const auto& k : keys) req.add_keys(k);
    return req;
  }

  Reply<v1::InsertResponse> Insert(const std::string& filter, const std::vector<std::string>& keys,
                                   bool if_absent = false) {
    auto req = WithKeys<v1::InsertRequest>(filter, keys);
    req.set_if_absent(if_absent);
    return Call(&v1::FilterService::Stub::Insert, req);
  }
  Reply<v1::LookupResponse> Lookup(const std::string& filter,
                                   const std::vector<std::string>& keys) {
    return Call(&v1::FilterService::Stub::Lookup, WithKeys<v1::LookupRequest>(filter, keys));
  }
  Reply<v1::DeleteResponse> Delete(const std::string& filter,
                                   const std::vector<std::string>& keys) {
    return Call(&v1::FilterService::Stub::Delete, WithKeys<v1::DeleteRequest>(filter, keys));
  }
  Reply<v1::CountResponse> Count(const std::string& filter, const std::vector<std::string>& keys) {
    return Call(&v1::FilterService::Stub::Count, WithKeys<v1::CountRequest>(filter, keys));
  }
  Reply<v1::GetFilterResponse> Get(const std::string& name) {
    v1::GetFilterRequest req;
    req.set_name(name);
    return Call(&v1::FilterService::Stub::GetFilter, req);
  }
  Reply<v1::DropFilterResponse> Drop(const std::string& name) {
    v1::DropFilterRequest req;
    req.set_name(name);
    return Call(&v1::FilterService::Stub::DropFilter, req);
  }

  // The status of every RPC that names a filter, called with `name`.
  std::vector<std::pair<std::string, grpc::Status>> EveryNamedRpc(const std::string& name) {
    const std::vector<std::string> keys = {"k"};
    return {{"GetFilter", Get(name).status},       {"DropFilter", Drop(name).status},
            {"Insert", Insert(name, keys).status}, {"Lookup", Lookup(name, keys).status},
            {"Delete", Delete(name, keys).status}, {"Count", Count(name, keys).status}};
  }
};

TEST_F(FilterServiceTest, CreateFilterReturnsTheShapeChosenFromCapacityAndRate) {
  v1::CreateFilterRequest req;
  req.set_name("users");
  req.set_capacity(10'000);
  req.set_false_positive_rate(0.001);
  auto r = Call(&v1::FilterService::Stub::CreateFilter, req);
  ASSERT_TRUE(r.status.ok()) << r.status.error_message();
  const v1::FilterInfo& info = r.response.filter();
  EXPECT_TRUE(r.response.created());
  EXPECT_EQ(info.name(), "users");
  EXPECT_EQ(info.capacity(), 10'000u);
  EXPECT_EQ(info.fingerprint_bits(), 13u);  // ceil(log2(2 * 4 / 0.001)).
  EXPECT_EQ(info.bucket_size(), 4u);
  EXPECT_EQ(info.max_kicks(), 2000u);
  EXPECT_EQ(info.hash_id(), 1u);
  EXPECT_EQ(info.slots(), info.buckets_per_shard() * info.bucket_size() * info.shards());
  EXPECT_GE(info.slots(), 10'000u);
  EXPECT_EQ(info.items(), 0u);
  // The rate picked f, so the table is semi-sorted: f - 1 = 12 bits per slot.
  EXPECT_TRUE(info.semi_sort());
  EXPECT_GE(info.memory_bytes(), info.slots() * 12 / 8);
  EXPECT_LT(info.false_positive_rate_at_capacity(), 0.001);
  EXPECT_EQ(info.expected_false_positive_rate(), 0);
}

TEST_F(FilterServiceTest, InfoReflectsInsertedItems) {
  ASSERT_TRUE(Create("f", 1000).status.ok());
  ASSERT_TRUE(Insert("f", Keys(0, 500)).status.ok());
  auto r = Get("f");
  ASSERT_TRUE(r.status.ok());
  const v1::FilterInfo& info = r.response.filter();
  EXPECT_EQ(info.items(), 500u);
  EXPECT_DOUBLE_EQ(info.load_factor(), 500.0 / info.slots());
  EXPECT_DOUBLE_EQ(info.bits_per_item(), 8.0 * info.memory_bytes() / 500);
  EXPECT_GT(info.expected_false_positive_rate(), 0);
  EXPECT_LT(info.expected_false_positive_rate(), info.false_positive_rate_at_capacity());
}

TEST_F(FilterServiceTest, DuplicateCreateIsAlreadyExistsUnlessIfNotExistsWithSameSettings) {
  ASSERT_TRUE(Create("f", 1000).status.ok());
  auto again = Create("f", 1000);
  EXPECT_EQ(again.status.error_code(), grpc::StatusCode::ALREADY_EXISTS);
  EXPECT_THAT(again.status.error_message(), HasSubstr("\"f\" already exists"));

  v1::CreateFilterRequest same;
  same.set_name("f");
  same.set_capacity(1000);
  same.set_seed(7);
  same.set_if_not_exists(true);
  auto existing = Call(&v1::FilterService::Stub::CreateFilter, same);
  ASSERT_TRUE(existing.status.ok()) << existing.status.error_message();
  EXPECT_FALSE(existing.response.created());

  v1::CreateFilterRequest other = same;
  other.set_capacity(2000);
  auto conflict = Call(&v1::FilterService::Stub::CreateFilter, other);
  EXPECT_EQ(conflict.status.error_code(), grpc::StatusCode::ALREADY_EXISTS);
  EXPECT_THAT(conflict.status.error_message(), HasSubstr("capacity 1000 (requested 2000)"));
}

v1::CreateFilterRequest SemiSortRequest(const std::string& name, uint64_t capacity,
                                        std::optional<bool> semi_sort) {
  v1::CreateFilterRequest req;
  req.set_name(name);
  req.set_capacity(capacity);
  req.set_seed(7);
  if (semi_sort.has_value()) req.set_semi_sort(*semi_sort);
  return req;
}

TEST_F(FilterServiceTest, SemiSortWithoutFourSlotBucketsOrFiveFingerprintBitsIsInvalidArgument) {
  v1::CreateFilterRequest two_slots = SemiSortRequest("f", 1000, true);
  two_slots.set_bucket_size(2);
  auto r = Call(&v1::FilterService::Stub::CreateFilter, two_slots);
  EXPECT_EQ(r.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(r.status.error_message(), HasSubstr("semi_sort"));
  EXPECT_THAT(r.status.error_message(), HasSubstr("bucket_size"));
  EXPECT_THAT(r.status.error_message(), HasSubstr("got 2"));

  v1::CreateFilterRequest four_bits = SemiSortRequest("f", 1000, true);
  four_bits.set_fingerprint_bits(4);
  r = Call(&v1::FilterService::Stub::CreateFilter, four_bits);
  EXPECT_EQ(r.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(r.status.error_message(), HasSubstr("semi_sort"));
  EXPECT_THAT(r.status.error_message(), HasSubstr("fingerprint_bits"));
  EXPECT_EQ(server_->registry().size(), 0u);

  // The same settings with semi_sort false (or unset) are fine: packed.
  two_slots.set_semi_sort(false);
  r = Call(&v1::FilterService::Stub::CreateFilter, two_slots);
  ASSERT_TRUE(r.status.ok()) << r.status.error_message();
  EXPECT_FALSE(r.response.filter().semi_sort());
}

TEST_F(FilterServiceTest, ExplicitSemiSortIsReportedAndTakesATwelfthLessMemoryAtTwelveBits) {
  // One shard, so that page rounding is small next to the table.
  v1::CreateFilterRequest semi = SemiSortRequest("semi", 1'000'000, true);
  semi.set_fingerprint_bits(12);
  semi.set_shards(1);
  v1::CreateFilterRequest packed = semi;
  packed.set_name("packed");
  packed.set_semi_sort(false);
  auto s = Call(&v1::FilterService::Stub::CreateFilter, semi);
  auto p = Call(&v1::FilterService::Stub::CreateFilter, packed);
  ASSERT_TRUE(s.status.ok()) << s.status.error_message();
  ASSERT_TRUE(p.status.ok()) << p.status.error_message();
  const v1::FilterInfo& si = s.response.filter();
  const v1::FilterInfo& pi = p.response.filter();
  EXPECT_TRUE(si.semi_sort());
  EXPECT_FALSE(pi.semi_sort());
  // Same logical fingerprint size, same slots and the same promised FPR ...
  EXPECT_EQ(si.fingerprint_bits(), 12u);
  EXPECT_EQ(pi.fingerprint_bits(), 12u);
  EXPECT_EQ(si.slots(), pi.slots());
  EXPECT_DOUBLE_EQ(si.false_positive_rate_at_capacity(), pi.false_positive_rate_at_capacity());
  // ... in 11 bits per slot instead of 12.
  EXPECT_LT(si.memory_bytes(), pi.memory_bytes());
  EXPECT_GE(si.memory_bytes(), si.slots() * 11 / 8);
  EXPECT_GE(pi.memory_bytes(), pi.slots() * 12 / 8);
  const double ratio = static_cast<double>(si.memory_bytes()) / pi.memory_bytes();
  EXPECT_NEAR(ratio, 11.0 / 12.0, 0.005);
  EXPECT_EQ(Get("semi").response.filter().semi_sort(), true);
  EXPECT_EQ(server_->registry().memory_bytes(), si.memory_bytes() + pi.memory_bytes());
}

TEST_F(FilterServiceTest, SemiSortedFilterAnswersEveryBatchRpcAsTheEngineDoes) {
  v1::CreateFilterRequest req = SemiSortRequest("semi", 20'000, true);
  req.set_fingerprint_bits(12);
  req.set_seed(99);
  auto created = Call(&v1::FilterService::Stub::CreateFilter, req);
  ASSERT_TRUE(created.status.ok()) << created.status.error_message();
  ASSERT_TRUE(created.response.filter().semi_sort());
  auto shape =
      ComputeShape({.capacity = 20'000, .fingerprint_bits = 12, .seed = 99, .semi_sort = true});
  ASSERT_TRUE(shape.ok()) << shape.status();
  ASSERT_TRUE(shape->semi_sorted());
  auto model = CuckooFilter::FromShape(*shape);
  ASSERT_TRUE(model.ok()) << model.status();

  // 18 000 keys, 90% of the capacity, in batches of the server's limit.
  std::vector<std::string> present = Keys(0, 18'000);
  for (size_t begin = 0; begin < present.size(); begin += 1000) {
    std::vector<std::string> batch(present.begin() + begin, present.begin() + begin + 1000);
    auto ins = Insert("semi", batch);
    ASSERT_TRUE(ins.status.ok()) << ins.status.error_message();
    ASSERT_EQ(ins.response.inserted(), 1000u) << "at key " << begin;
  }
  for (const auto& k : present) ASSERT_EQ((*model)->Insert(k), InsertResult::kInserted);
  EXPECT_EQ(Get("semi").response.filter().items(), 18'000u);

  // Every inserted key is present (no false negatives); absent keys are
  // answered exactly as the local engine answers them, and rarely present.
  uint64_t false_positives = 0;
  for (uint64_t b = 0; b < 18; ++b) {
    std::vector<std::string> mixed;
    for (uint64_t i = 0; i < 1000; ++i) {
      mixed.push_back(i % 2 == 0 ? present[b * 1000 + i] : Key(1, b * 1000 + i));
    }
    auto look = Lookup("semi", mixed);
    ASSERT_TRUE(look.status.ok()) << look.status.error_message();
    ASSERT_EQ(look.response.present_size(), 1000);
    auto cnt = Count("semi", mixed);
    ASSERT_TRUE(cnt.status.ok()) << cnt.status.error_message();
    for (int i = 0; i < 1000; ++i) {
      ASSERT_EQ(look.response.present(i), (*model)->MayContain(mixed[i])) << mixed[i];
      ASSERT_EQ(cnt.response.counts(i), (*model)->ApproximateCount(mixed[i])) << mixed[i];
      if (i % 2 == 0) {
        ASSERT_TRUE(look.response.present(i)) << "false negative for " << mixed[i];
        ASSERT_GE(cnt.response.counts(i), 1u) << mixed[i];
      } else {
        false_positives += look.response.present(i);
      }
    }
  }
  // 9000 absent keys at about 2 * 4 * load / 2^12 < 0.2% each: about 15.
  EXPECT_LT(false_positives, 60u);

  // Delete the first half; the second half stays present.
  for (size_t begin = 0; begin < 9'000; begin += 1000) {
    std::vector<std::string> batch(present.begin() + begin, present.begin() + begin + 1000);
    auto del = Delete("semi", batch);
    ASSERT_TRUE(del.status.ok()) << del.status.error_message();
    EXPECT_EQ(del.response.deleted(), 1000u);
    for (const auto& k : batch) ASSERT_EQ((*model)->Delete(k), DeleteResult::kDeleted);
  }
  for (size_t begin = 9'000; begin < present.size(); begin += 1000) {
    std::vector<std::string> batch(present.begin() + begin, present.begin() + begin + 1000);
    auto look = Lookup("semi", batch);
    ASSERT_TRUE(look.status.ok());
    EXPECT_EQ(look.response.present_count(), 1000u) << "false negative after deletes";
  }
  const v1::FilterInfo info = Get("semi").response.filter();
  EXPECT_EQ(info.items(), 9'000u);
  EXPECT_EQ(info.items(), (*model)->items());
  EXPECT_TRUE(info.semi_sort());
}

TEST_F(FilterServiceTest, UnsetSemiSortIsChosenOnlyWhenTheRatePicksTheFingerprintSize) {
  struct Case {
    const char* name;
    void (*set)(v1::CreateFilterRequest&);
    uint32_t fingerprint_bits;
    bool semi_sort;
  };
  const Case cases[] = {
      {"default-rate", [](v1::CreateFilterRequest&) {}, 12, true},
      {"rate", [](v1::CreateFilterRequest& r) { r.set_false_positive_rate(0.001); }, 13, true},
      {"explicit-bits", [](v1::CreateFilterRequest& r) { r.set_fingerprint_bits(12); }, 12, false},
      {"two-slot-buckets",
       [](v1::CreateFilterRequest& r) {
         r.set_false_positive_rate(0.001);
         r.set_bucket_size(2);
       },
       12, false},
      // f = 23 > 16: packed unless asked for.
      {"tiny-rate", [](v1::CreateFilterRequest& r) { r.set_false_positive_rate(1e-6); }, 23, false},
      {"rate-but-false",
       [](v1::CreateFilterRequest& r) {
         r.set_false_positive_rate(0.001);
         r.set_semi_sort(false);
       },
       13, false},
  };
  for (const Case& c : cases) {
    v1::CreateFilterRequest req = SemiSortRequest(c.name, 1000, std::nullopt);
    c.set(req);
    auto r = Call(&v1::FilterService::Stub::CreateFilter, req);
    ASSERT_TRUE(r.status.ok()) << c.name << ": " << r.status.error_message();
    EXPECT_EQ(r.response.filter().fingerprint_bits(), c.fingerprint_bits) << c.name;
    EXPECT_EQ(r.response.filter().semi_sort(), c.semi_sort) << c.name;
    ASSERT_TRUE(Drop(c.name).status.ok()) << c.name;  // The test server holds at most 4.
  }
}

TEST_F(FilterServiceTest, IfNotExistsWithAnotherTableKindIsAlreadyExistsNamingTheKind) {
  // Unset semi_sort with the default rate: semi-sorted.
  ASSERT_TRUE(Call(&v1::FilterService::Stub::CreateFilter, SemiSortRequest("f", 1000, {}))
                  .response.filter()
                  .semi_sort());
  v1::CreateFilterRequest packed = SemiSortRequest("f", 1000, false);
  packed.set_if_not_exists(true);
  auto conflict = Call(&v1::FilterService::Stub::CreateFilter, packed);
  EXPECT_EQ(conflict.status.error_code(), grpc::StatusCode::ALREADY_EXISTS);
  EXPECT_THAT(conflict.status.error_message(),
              HasSubstr("table kind semi_sorted (requested packed)"));

  // Asking for what it is, explicitly or not, returns it.
  for (std::optional<bool> semi_sort : {std::optional<bool>(true), std::optional<bool>()}) {
    v1::CreateFilterRequest same = SemiSortRequest("f", 1000, semi_sort);
    same.set_if_not_exists(true);
    auto existing = Call(&v1::FilterService::Stub::CreateFilter, same);
    ASSERT_TRUE(existing.status.ok()) << existing.status.error_message();
    EXPECT_FALSE(existing.response.created());
    EXPECT_TRUE(existing.response.filter().semi_sort());
  }

  // And the other way round: a packed filter, asked for semi-sorted.
  v1::CreateFilterRequest g = SemiSortRequest("g", 1000, false);
  ASSERT_TRUE(Call(&v1::FilterService::Stub::CreateFilter, g).status.ok());
  g.set_semi_sort(true);
  g.set_if_not_exists(true);
  auto other = Call(&v1::FilterService::Stub::CreateFilter, g);
  EXPECT_EQ(other.status.error_code(), grpc::StatusCode::ALREADY_EXISTS);
  EXPECT_THAT(other.status.error_message(), HasSubstr("table kind packed (requested semi_sorted)"));
}

TEST_F(FilterServiceTest, BadFilterNamesAreInvalidArgumentForEveryRpc) {
  // Names are Redis keys ("../x", "a/b" are names): empty, longer than 512
  // bytes or with a NUL are not.
  for (const std::string& name : {std::string(""), std::string(513, 'n'), std::string("a\0b", 3)}) {
    auto create = Create(name, 100);
    EXPECT_EQ(create.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << name;
    EXPECT_THAT(create.status.error_message(), HasSubstr("filter name")) << name;
    for (const auto& [rpc, status] : EveryNamedRpc(name)) {
      EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << rpc << " " << name;
      EXPECT_THAT(status.error_message(), HasSubstr("filter name")) << rpc;
    }
  }
  EXPECT_EQ(server_->registry().size(), 0u);
}

TEST_F(FilterServiceTest, UnknownFilterIsNotFoundForEveryRpc) {
  for (const auto& [rpc, status] : EveryNamedRpc("nope")) {
    EXPECT_EQ(status.error_code(), grpc::StatusCode::NOT_FOUND) << rpc;
    EXPECT_THAT(status.error_message(), HasSubstr("\"nope\" not found")) << rpc;
  }
}

TEST_F(FilterServiceTest, ImpossibleSettingsAreInvalidArgumentNamingTheSetting) {
  struct Case {
    void (*set)(v1::CreateFilterRequest&);
    const char* message;
  };
  const Case cases[] = {
      {[](v1::CreateFilterRequest& r) { r.set_capacity(0); }, "capacity=0"},
      {[](v1::CreateFilterRequest& r) { r.set_false_positive_rate(1.5); },
       "false_positive_rate=1.5"},
      {[](v1::CreateFilterRequest& r) { r.set_false_positive_rate(-0.1); },
       "false_positive_rate=-0.1"},
      {[](v1::CreateFilterRequest& r) { r.set_false_positive_rate(1e-12); }, "fingerprint bits"},
      {[](v1::CreateFilterRequest& r) { r.set_fingerprint_bits(40); }, "fingerprint_bits=40"},
      {[](v1::CreateFilterRequest& r) { r.set_fingerprint_bits(2); }, "fingerprint_bits=2"},
      {[](v1::CreateFilterRequest& r) { r.set_bucket_size(3); }, "bucket_size=3"},
      {[](v1::CreateFilterRequest& r) { r.set_shards(3); }, "shards=3"},
      {[](v1::CreateFilterRequest& r) { r.set_shards(8192); }, "shards=8192"},
      {[](v1::CreateFilterRequest& r) { r.set_max_kicks(1'000'000); }, "max_kicks=1000000"},
      // Past the ceiling a failing insert holds its shard too long.
      {[](v1::CreateFilterRequest& r) { r.set_max_kicks(10'001); },
       "max_kicks=10001 is outside [1, 10000]"},
  };
  for (const Case& c : cases) {
    v1::CreateFilterRequest req;
    req.set_name("f");
    req.set_capacity(1000);
    c.set(req);
    auto r = Call(&v1::FilterService::Stub::CreateFilter, req);
    EXPECT_EQ(r.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << c.message;
    EXPECT_THAT(r.status.error_message(), HasSubstr(c.message));
  }
  EXPECT_EQ(server_->registry().size(), 0u);
}

TEST_F(FilterServiceTest, MemoryBudgetAndFilterCountAreResourceExhausted) {
  // 64 MiB budget: ~46 M keys at the default 11.6 bits (f = 12, semi-sorted)
  // would need ~64 MiB; 50 M cannot fit.
  auto big = Create("big", 50'000'000);
  EXPECT_EQ(big.status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_THAT(big.status.error_message(), HasSubstr("memory budget of 67108864 bytes"));
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(Create("f" + std::to_string(i), 100).status.ok());
  auto fifth = Create("f4", 100);
  EXPECT_EQ(fifth.status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_THAT(fifth.status.error_message(), HasSubstr("max filters 4"));
  EXPECT_EQ(server_->registry().size(), 4u);
}

// --- Growing filters (CreateFilterRequest.growth_factor) ---

v1::CreateFilterRequest GrowingRequest(const std::string& name, uint64_t capacity,
                                       uint32_t growth_factor = 2, double rate = 0.01) {
  v1::CreateFilterRequest req;
  req.set_name(name);
  req.set_capacity(capacity);
  req.set_seed(7);
  req.set_false_positive_rate(rate);
  req.set_growth_factor(growth_factor);
  return req;
}

TEST_F(FilterServiceTest, GrowthSettingsThatCannotWorkAreInvalidArgumentWithAClearMessage) {
  struct Case {
    void (*set)(v1::CreateFilterRequest&);
    const char* message;
  };
  const Case cases[] = {
      {[](v1::CreateFilterRequest& r) { r.set_growth_factor(1); },
       "growth_factor=1 must be 0 (fixed size) or 2 to 8"},
      {[](v1::CreateFilterRequest& r) { r.set_growth_factor(9); },
       "growth_factor=9 must be 0 (fixed size) or 2 to 8"},
      {[](v1::CreateFilterRequest& r) {
         r.set_growth_factor(2);
         r.set_max_capacity(1000);
       },
       "max_capacity=1000 must be more than capacity=1000"},
      {[](v1::CreateFilterRequest& r) {
         r.set_growth_factor(2);
         r.set_max_capacity(999);
       },
       "max_capacity=999 must be more than capacity=1000"},
      {[](v1::CreateFilterRequest& r) { r.set_max_capacity(5000); },
       "max_capacity=5000 needs growth_factor"},
      {[](v1::CreateFilterRequest& r) {
         r.set_growth_factor(2);
         r.set_fingerprint_bits(12);
       },
       "fingerprint_bits=12 cannot be given with growth_factor=2"},
  };
  for (const Case& c : cases) {
    v1::CreateFilterRequest req;
    req.set_name("g");
    req.set_capacity(1000);
    c.set(req);
    auto r = Call(&v1::FilterService::Stub::CreateFilter, req);
    EXPECT_EQ(r.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << c.message;
    EXPECT_THAT(r.status.error_message(), HasSubstr(c.message));
  }
  EXPECT_EQ(server_->registry().size(), 0u);
}

TEST_F(FilterServiceTest, GrowingFilterInfoReportsItsGrowthSettingsAndAFixedOneZeros) {
  v1::CreateFilterRequest req = GrowingRequest("g", 1000, 4, 0.01);
  req.set_max_capacity(1'000'000);
  auto r = Call(&v1::FilterService::Stub::CreateFilter, req);
  ASSERT_TRUE(r.status.ok()) << r.status.error_message();
  const v1::FilterInfo& info = r.response.filter();
  EXPECT_EQ(info.growth_factor(), 4u);
  EXPECT_EQ(info.max_capacity(), 1'000'000u);
  EXPECT_EQ(info.false_positive_rate(), 0.01);
  // The first generation gets a fifth of the rate: longer fingerprints than
  // a fixed filter of the same rate (ceil(log2(8 / 0.01)) = 10).
  EXPECT_GT(info.fingerprint_bits(), 10u);
  ASSERT_TRUE(Create("fixed", 1000).status.ok());
  const v1::FilterInfo fixed = Get("fixed").response.filter();
  EXPECT_EQ(fixed.growth_factor(), 0u);
  EXPECT_EQ(fixed.max_capacity(), 0u);
  EXPECT_EQ(fixed.false_positive_rate(), 0);
}

TEST_F(FilterServiceTest, IfNotExistsComparesGrowthSettingsAndNamesTheDifferences) {
  ASSERT_TRUE(Call(&v1::FilterService::Stub::CreateFilter, GrowingRequest("g", 1000)).status.ok());
  v1::CreateFilterRequest same = GrowingRequest("g", 1000);
  same.set_if_not_exists(true);
  auto existing = Call(&v1::FilterService::Stub::CreateFilter, same);
  ASSERT_TRUE(existing.status.ok()) << existing.status.error_message();
  EXPECT_FALSE(existing.response.created());
  EXPECT_EQ(existing.response.filter().growth_factor(), 2u);

  struct Case {
    v1::CreateFilterRequest req;
    const char* message;
  };
  std::vector<Case> cases;
  cases.push_back({GrowingRequest("g", 1000, 4), "growth_factor 2 (requested 4)"});
  cases.push_back(
      {GrowingRequest("g", 1000, 2, 0.02), "false_positive_rate 0.01 (requested 0.02)"});
  cases.push_back({GrowingRequest("g", 1000), "max_capacity 0 (requested 50000)"});
  cases.back().req.set_max_capacity(50'000);
  v1::CreateFilterRequest fixed = GrowingRequest("g", 1000, 0);
  cases.push_back({fixed, "growth_factor 2 (requested 0)"});
  for (Case& c : cases) {
    c.req.set_if_not_exists(true);
    auto r = Call(&v1::FilterService::Stub::CreateFilter, c.req);
    EXPECT_EQ(r.status.error_code(), grpc::StatusCode::ALREADY_EXISTS) << c.message;
    EXPECT_THAT(r.status.error_message(), HasSubstr(c.message));
  }
}

TEST_F(FilterServiceTest,
       GrowingFilterCreatedForAThousandKeysTakesAHundredThousandWithoutLosingOne) {
  ASSERT_TRUE(Call(&v1::FilterService::Stub::CreateFilter, GrowingRequest("g", 1000)).status.ok());
  const int kBatches = 100;  // Of 1000 keys: the server's max_batch_keys.
  for (int b = 0; b < kBatches; ++b) {
    auto r = Insert("g", Keys(b, 1000));
    ASSERT_TRUE(r.status.ok()) << "batch " << b << ": " << r.status.error_message();
    ASSERT_EQ(r.response.inserted(), 1000u)
        << "batch " << b << ": " << r.response.full() << " FULL while the filter can grow";
  }
  for (int b = 0; b < kBatches; ++b) {
    auto look = Lookup("g", Keys(b, 1000));
    ASSERT_TRUE(look.status.ok());
    ASSERT_EQ(look.response.present_count(), 1000u) << "false negatives in batch " << b;
  }
  const v1::FilterInfo info = Get("g").response.filter();
  EXPECT_EQ(info.items(), 100'000u);
  EXPECT_GT(info.generations_size(), 1);
  EXPECT_LE(info.generations_size(), static_cast<int>(info.max_generations()));
  EXPECT_GT(info.false_positive_bound(), 0);
  EXPECT_LE(info.false_positive_bound(), info.false_positive_rate());
  EXPECT_GT(info.reachable_capacity(), 100'000u);
  uint64_t items = 0, bytes = 0;
  for (int g = 0; g < info.generations_size(); ++g) {
    const v1::FilterInfo::Generation& gen = info.generations(g);
    items += gen.items();
    bytes += gen.memory_bytes();
    EXPECT_GT(gen.slots(), 0u) << g;
    if (g > 0) {
      EXPECT_GE(gen.fingerprint_bits(), info.generations(g - 1).fingerprint_bits()) << g;
    }
  }
  EXPECT_EQ(items, 100'000u);
  EXPECT_LE(bytes, info.memory_bytes());
  // Grown tables are charged to the budget, and given back with the filter.
  EXPECT_EQ(server_->registry().memory_bytes(), info.memory_bytes());
  ASSERT_TRUE(Drop("g").status.ok());
  EXPECT_EQ(server_->registry().memory_bytes(), 0u);
}

TEST_F(FilterServiceTest, InsertIntoAGrowingFilterIsRefusedWholeWhileTheBudgetIsUsedUp) {
  // A budget the growing filter fills exactly: memory in use == budget.
  const FilterShape shape =
      *ComputeShape({.capacity = 1000, .false_positive_rate = 0.01, .seed = 7, .growth_factor = 2});
  server::ServerConfig config = testing::TestConfig(dir_.path());
  config.memory_budget_bytes = CuckooFilter::MemoryBytes(shape);
  StartServer(config);
  ASSERT_TRUE(Call(&v1::FilterService::Stub::CreateFilter, GrowingRequest("g", 1000)).status.ok());
  ASSERT_EQ(server_->registry().memory_bytes(), config.memory_budget_bytes);
  auto refused = Insert("g", Keys(0, 10));
  EXPECT_EQ(refused.status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_THAT(
      refused.status.error_message(),
      AllOf(HasSubstr("cannot insert into growing filter \"g\""),
            HasSubstr(absl::StrFormat("use %u bytes of its memory budget of %u bytes",
                                      config.memory_budget_bytes, config.memory_budget_bytes)),
            HasSubstr("refused before it was logged")));
  // Nothing applied or logged; reads and deletes go on.
  EXPECT_EQ(Get("g").response.filter().items(), 0u);
  auto look = Lookup("g", Keys(0, 10));
  ASSERT_TRUE(look.status.ok());
  EXPECT_EQ(look.response.present_count(), 0u);
  auto del = Delete("g", Keys(0, 1));
  ASSERT_TRUE(del.status.ok());
  EXPECT_EQ(del.response.not_found(), 1u);
  // The same request with a request id is refused the same way, and its
  // id is not remembered as applied: a retry once there is room applies it.
  auto with_id = WithKeys<v1::InsertRequest>("g", Keys(0, 10));
  with_id.set_request_id("grow-1");
  EXPECT_EQ(Call(&v1::FilterService::Stub::Insert, with_id).status.error_code(),
            grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_EQ(Call(&v1::FilterService::Stub::Insert, with_id).status.error_code(),
            grpc::StatusCode::RESOURCE_EXHAUSTED);
}

TEST_F(FilterServiceTest, GrowingFilterAtTheMemoryBudgetRefusesInsertsAndKeepsEveryAckedKey) {
  server::ServerConfig config = testing::TestConfig(dir_.path());
  config.memory_budget_bytes = 256 << 10;
  StartServer(config);
  ASSERT_TRUE(Create("fixed", 1000).status.ok());
  const uint64_t fixed_bytes = server_->registry().memory_bytes();
  ASSERT_TRUE(Call(&v1::FilterService::Stub::CreateFilter, GrowingRequest("g", 1000)).status.ok());
  std::vector<std::vector<std::string>> acked;
  grpc::Status refused;
  for (int b = 0; b < 1000 && refused.ok(); ++b) {
    std::vector<std::string> keys = Keys(b, 1000);
    auto r = Insert("g", keys);
    if (!r.status.ok()) {
      refused = r.status;
      break;
    }
    ASSERT_EQ(r.response.inserted(), 1000u) << "batch " << b << " answered FULL before the budget";
    acked.push_back(std::move(keys));
  }
  ASSERT_EQ(refused.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED)
      << refused.error_message() << " after " << acked.size() << " batches";
  EXPECT_THAT(refused.error_message(), HasSubstr("growing filter \"g\""));
  EXPECT_THAT(refused.error_message(), HasSubstr("memory budget of 262144 bytes"));
  EXPECT_GE(server_->registry().memory_bytes(), config.memory_budget_bytes);
  ASSERT_GT(acked.size(), 10u);
  // Refused whole: nothing of it was applied, and it stays refused.
  const uint64_t items = Get("g").response.filter().items();
  EXPECT_EQ(items, 1000u * acked.size());
  EXPECT_EQ(Insert("g", Keys(5000, 10)).status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_EQ(Get("g").response.filter().items(), items);
  // Nothing acknowledged was evicted; reads, deletes and fixed filters go on.
  for (size_t b = 0; b < acked.size(); ++b) {
    auto look = Lookup("g", acked[b]);
    ASSERT_TRUE(look.status.ok());
    ASSERT_EQ(look.response.present_count(), 1000u) << "acknowledged keys lost in batch " << b;
  }
  auto del = Delete("g", std::vector<std::string>(acked[0].begin(), acked[0].begin() + 10));
  ASSERT_TRUE(del.status.ok());
  EXPECT_EQ(del.response.deleted(), 10u);
  EXPECT_TRUE(Insert("fixed", Keys(9000, 10)).status.ok());
  // Dropping the grown filter gives back every byte it was charged.
  ASSERT_TRUE(Drop("g").status.ok());
  EXPECT_EQ(server_->registry().memory_bytes(), fixed_bytes);
}

TEST_F(FilterServiceTest, EmptyKeyRejectsTheWholeBatchAndChangesNothing) {
  ASSERT_TRUE(Create("f", 1000).status.ok());
  auto r = Insert("f", {"a", "", "b"});
  EXPECT_EQ(r.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(r.status.error_message(), HasSubstr("keys[1] is empty"));
  EXPECT_EQ(Get("f").response.filter().items(), 0u);
  for (auto status : {Lookup("f", {"a", ""}).status, Delete("f", {"a", ""}).status,
                      Count("f", {"a", ""}).status}) {
    EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_THAT(status.error_message(), HasSubstr("keys[1] is empty"));
  }
}

TEST_F(FilterServiceTest, OversizeKeyAndOversizeBatchAreRejectedNamingTheLimit) {
  ASSERT_TRUE(Create("f", 10'000).status.ok());
  auto key = Insert("f", {"ok", std::string(65, 'x')});
  EXPECT_EQ(key.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(key.status.error_message(), HasSubstr("keys[1] is 65 bytes"));
  EXPECT_THAT(key.status.error_message(), HasSubstr("--max-key-bytes) is 64"));
  auto batch = Lookup("f", Keys(0, 1001));
  EXPECT_EQ(batch.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(batch.status.error_message(), HasSubstr("batch has more than 1000 keys"));
  EXPECT_THAT(batch.status.error_message(), HasSubstr("--max-batch-keys) is 1000"));
  EXPECT_TRUE(Lookup("f", Keys(0, 1000)).status.ok());
  EXPECT_EQ(Get("f").response.filter().items(), 0u);
}

TEST_F(FilterServiceTest, OversizeMessageIsResourceExhausted) {
  server::ServerConfig config = testing::TestConfig(dir_.path());
  config.max_message_bytes = 16 << 10;
  StartServer(config);
  ASSERT_TRUE(Create("f", 1000).status.ok());
  std::vector<std::string> keys(400, std::string(60, 'k'));  // ~25 KB.
  auto r = Insert("f", keys);
  EXPECT_EQ(r.status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_THAT(r.status.error_message(), HasSubstr("16384"));
  EXPECT_EQ(Get("f").response.filter().items(), 0u);
}

TEST_F(FilterServiceTest, ResultsComeBackPerKeyInRequestOrderAsTheEngineAnswers) {
  ASSERT_TRUE(Create("f", 2000, /*seed=*/99).status.ok());
  // A local engine with the same shape and seed must answer identically.
  auto model = CuckooFilter::FromShape(*ComputeShape({.capacity = 2000, .seed = 99}));
  ASSERT_TRUE(model.ok());
  std::vector<std::string> present = Keys(0, 800);
  auto ins = Insert("f", present);
  ASSERT_TRUE(ins.status.ok());
  EXPECT_EQ(ins.response.inserted(), 800u);
  for (const auto& k : present) ASSERT_EQ((*model)->Insert(k), InsertResult::kInserted);

  std::vector<std::string> mixed;
  for (int i = 0; i < 800; ++i) {
    mixed.push_back(i % 3 == 0 ? Key(1, i) : present[i]);
  }
  auto look = Lookup("f", mixed);
  ASSERT_TRUE(look.status.ok());
  ASSERT_EQ(look.response.present_size(), 800);
  uint64_t positives = 0;
  for (int i = 0; i < 800; ++i) {
    ASSERT_EQ(look.response.present(i), (*model)->MayContain(mixed[i])) << i;
    if (i % 3 != 0) {
      ASSERT_TRUE(look.response.present(i)) << "false negative at " << i;
    }
    positives += look.response.present(i);
  }
  EXPECT_EQ(look.response.present_count(), positives);

  auto cnt = Count("f", mixed);
  ASSERT_TRUE(cnt.status.ok());
  for (int i = 0; i < 800; ++i) {
    ASSERT_EQ(cnt.response.counts(i), (*model)->ApproximateCount(mixed[i])) << i;
  }

  auto del = Delete("f", mixed);
  ASSERT_TRUE(del.status.ok());
  uint64_t deleted = 0;
  for (int i = 0; i < 800; ++i) {
    DeleteResult expect = (*model)->Delete(mixed[i]);
    ASSERT_EQ(del.response.results(i), static_cast<int>(expect) + 1) << i;
    deleted += expect == DeleteResult::kDeleted;
  }
  EXPECT_EQ(del.response.deleted(), deleted);
  EXPECT_EQ(del.response.not_found(), 800 - deleted);
  EXPECT_EQ(Get("f").response.filter().items(), (*model)->items());
}

TEST_F(FilterServiceTest, IfAbsentReportsAlreadyPresentWithinAndAcrossBatches) {
  ASSERT_TRUE(Create("f", 1000).status.ok());
  auto r = Insert("f", {"a", "b", "a", "c", "b"}, /*if_absent=*/true);
  ASSERT_TRUE(r.status.ok());
  EXPECT_THAT(r.response.results(),
              ElementsAre(v1::INSERT_RESULT_INSERTED, v1::INSERT_RESULT_INSERTED,
                          v1::INSERT_RESULT_ALREADY_PRESENT, v1::INSERT_RESULT_INSERTED,
                          v1::INSERT_RESULT_ALREADY_PRESENT));
  EXPECT_EQ(r.response.inserted(), 3u);
  EXPECT_EQ(r.response.already_present(), 2u);
  EXPECT_EQ(r.response.full(), 0u);
  auto again = Insert("f", {"c"}, true);
  EXPECT_THAT(again.response.results(), ElementsAre(v1::INSERT_RESULT_ALREADY_PRESENT));
  // Without if_absent a key is added again: a second copy.
  auto copy = Insert("f", {"c"});
  EXPECT_THAT(copy.response.results(), ElementsAre(v1::INSERT_RESULT_INSERTED));
  EXPECT_THAT(Count("f", {"c", "a", "zzz"}).response.counts(), ElementsAre(2u, 1u, 0u));
}

TEST_F(FilterServiceTest, FullFilterAnswersFullPerKeyAndKeepsEveryResident) {
  ASSERT_TRUE(Create("small", 100).status.ok());
  std::vector<std::string> keys = Keys(0, 1000);
  auto r = Insert("small", keys);
  ASSERT_TRUE(r.status.ok());
  EXPECT_GT(r.response.full(), 0u);
  EXPECT_EQ(r.response.inserted() + r.response.full(), 1000u);
  const uint64_t items = Get("small").response.filter().items();
  EXPECT_EQ(items, r.response.inserted());
  EXPECT_GE(items, 100u);  // The promised capacity always fits.
  auto look = Lookup("small", keys);
  for (int i = 0; i < 1000; ++i) {
    if (r.response.results(i) == v1::INSERT_RESULT_INSERTED) {
      ASSERT_TRUE(look.response.present(i)) << "resident " << i << " lost";
    }
  }
}

TEST_F(FilterServiceTest, ListIsSortedAndDropFreesTheFilter) {
  ASSERT_TRUE(Create("b", 1000).status.ok());
  ASSERT_TRUE(Create("a", 2000).status.ok());
  auto list = Call(&v1::FilterService::Stub::ListFilters, v1::ListFiltersRequest());
  ASSERT_TRUE(list.status.ok());
  ASSERT_EQ(list.response.filters_size(), 2);
  EXPECT_EQ(list.response.filters(0).name(), "a");
  EXPECT_EQ(list.response.filters(1).name(), "b");
  const uint64_t bytes = list.response.filters(1).memory_bytes();

  auto drop = Drop("b");
  ASSERT_TRUE(drop.status.ok());
  EXPECT_EQ(drop.response.freed_bytes(), bytes);
  EXPECT_EQ(Get("b").status.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(Drop("b").status.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(server_->registry().memory_bytes(), list.response.filters(0).memory_bytes());
  // The name is free again.
  EXPECT_TRUE(Create("b", 10).status.ok());
}

TEST_F(FilterServiceTest, ServerInfoReportsTheLimits) {
  ASSERT_TRUE(Create("f", 1000).status.ok());
  auto r = Call(&v1::FilterService::Stub::GetServerInfo, v1::GetServerInfoRequest());
  ASSERT_TRUE(r.status.ok());
  EXPECT_FALSE(r.response.version().empty());
  EXPECT_EQ(r.response.max_batch_keys(), 1000u);
  EXPECT_EQ(r.response.max_key_bytes(), 64u);
  EXPECT_EQ(r.response.max_message_bytes(), 1u << 20);
  EXPECT_EQ(r.response.max_filters(), 4u);
  EXPECT_EQ(r.response.memory_budget_bytes(), 64u << 20);
  EXPECT_EQ(r.response.memory_used_bytes(), server_->registry().memory_bytes());
  EXPECT_EQ(r.response.filters(), 1u);
}

TEST_F(FilterServiceTest, MalformedRequestBytesAreInvalidArgumentAndChangeNothing) {
  ASSERT_TRUE(Create("f", 1000).status.ok());
  // A valid filter name, then a key that claims 100 bytes and has 2.
  const std::string bytes = std::string(
      "\x0a\x01"
      "f"
      "\x12\x64zz",
      7);
  grpc::GenericStub generic(channel_);
  grpc::CompletionQueue cq;
  grpc::ClientContext ctx;
  grpc::Slice slice(bytes);
  grpc::ByteBuffer request(&slice, 1);
  grpc::ByteBuffer response;
  grpc::Status status;
  auto call = generic.PrepareUnaryCall(&ctx, "/cuckoo.v1.FilterService/Insert", request, &cq);
  call->StartCall();
  call->Finish(&response, &status, reinterpret_cast<void*>(1));
  void* tag = nullptr;
  bool ok = false;
  ASSERT_TRUE(cq.Next(&tag, &ok));
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(status.error_message(), HasSubstr("not a valid cuckoo.v1.InsertRequest"));
  EXPECT_EQ(Get("f").response.filter().items(), 0u);
  cq.Shutdown();
  while (cq.Next(&tag, &ok)) {
  }
}

TEST_F(FilterServiceTest, EmptyBatchesSucceedWithNoResults) {
  ASSERT_TRUE(Create("f", 1000).status.ok());
  auto r = Lookup("f", {});
  ASSERT_TRUE(r.status.ok());
  EXPECT_EQ(r.response.present_size(), 0);
}

grpc::health::v1::HealthCheckResponse::ServingStatus Health(grpc::Channel* channel,
                                                            const std::string& service,
                                                            grpc::Status* status) {
  auto stub = grpc::health::v1::Health::NewStub(
      std::shared_ptr<grpc::Channel>(channel, [](grpc::Channel*) {}));
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  grpc::health::v1::HealthCheckRequest req;
  req.set_service(service);
  grpc::health::v1::HealthCheckResponse resp;
  *status = stub->Check(&ctx, req, &resp);
  return resp.status();
}

// --- Hostile and careless requests.

// A request with 30 million empty keys (60 MB, or 61 KB gzip-compressed)
// pinned 16 bytes per key before --max-batch-keys was checked, even for a
// filter that does not exist. The parser now stops at the first bad key.
TEST_F(FilterServiceTest, ARequestOfManyEmptyKeysIsRejectedAtTheFirstBeforeTheFilterIsLookedUp) {
  auto r = Lookup("no-such-filter", std::vector<std::string>(100'000, ""));
  EXPECT_EQ(r.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(r.status.error_message(), HasSubstr("keys[0] is empty"));
  auto many = Lookup("no-such-filter", std::vector<std::string>(50'000, "k"));
  EXPECT_EQ(many.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(many.status.error_message(), HasSubstr("batch has more than 1000 keys"));
}

// gRPC 1.51 inflates a compressed request whole, whatever it inflates to,
// before it checks the size limit.
TEST_F(FilterServiceTest, ACompressedRequestIsRefusedAsUnimplemented) {
  ASSERT_TRUE(Create("f", 1000).status.ok());
  for (grpc_compression_algorithm algorithm : {GRPC_COMPRESS_GZIP, GRPC_COMPRESS_DEFLATE}) {
    grpc::ClientContext ctx;
    ctx.set_compression_algorithm(algorithm);
    v1::LookupResponse resp;
    grpc::Status st =
        stub_->Lookup(&ctx, WithKeys<v1::LookupRequest>("f", {std::string(1000, 'z')}), &resp);
    EXPECT_EQ(st.error_code(), grpc::StatusCode::UNIMPLEMENTED) << algorithm;
    EXPECT_THAT(st.error_message(), HasSubstr("is disabled"));
  }
  EXPECT_TRUE(Lookup("f", {"k"}).status.ok()) << "uncompressed requests still work";
}

// A filter of capacity 1024 in 1024 shards at max_kicks=100000 was charged
// 64 KiB and reached 2.3 GiB RSS (kick scratch per shard), and a failing
// 12,288-key insert took 101 s of CPU (a whole failing chain per key).
TEST_F(FilterServiceTest, ManyTinyShardsAreChargedInFullAndAFullBatchWalksOneChainPerShard) {
  v1::CreateFilterRequest req;
  req.set_name("tiny");
  req.set_capacity(1024);
  req.set_shards(1024);
  // One failing chain per shard per batch is 1024 x 2,000 kicks; a chain
  // per failing key would be eight times that (seconds become a minute
  // under ASan). 10,000 kicks took 50 s of CI's ASan run for no more check.
  req.set_max_kicks(2'000);
  auto created = Call(&v1::FilterService::Stub::CreateFilter, req);
  ASSERT_TRUE(created.status.ok()) << created.status.error_message();
  const v1::FilterInfo& info = created.response.filter();
  EXPECT_GT(info.memory_bytes(), 1024u * 200) << "every shard's state is charged";
  EXPECT_EQ(server_->registry().memory_bytes(), info.memory_bytes());
  // 12 requests of 1000 keys: 12,000 keys into 4,096 slots.
  uint64_t full = 0, inserted = 0;
  for (uint64_t b = 0; b < 12; ++b) {
    auto r = Insert("tiny", Keys(b, 1000));
    ASSERT_TRUE(r.status.ok()) << r.status.error_message();
    full += r.response.full();
    inserted += r.response.inserted();
  }
  EXPECT_EQ(inserted + full, 12'000u);
  EXPECT_LE(inserted, info.slots());
  // Each shard is one bucket of 4 slots: when every shard got 4 keys or
  // more (about 1 seed in 20), all slots fill and `full` is exactly that.
  EXPECT_GE(full, 12'000u - info.slots());
  EXPECT_EQ(Get("tiny").response.filter().items(), inserted);
  // Every inserted key is still there (no resident lost).
  uint64_t present = 0;
  for (uint64_t b = 0; b < 12; ++b) {
    auto r = Lookup("tiny", Keys(b, 1000));
    present += r.response.present_count();
  }
  EXPECT_GE(present, inserted);
}

// A batch running at SIGTERM past the drain time was cancelled by gRPC:
// CANCELLED, which most clients do not retry. It now stops at its next
// part and answers UNAVAILABLE, saying how much of it was applied.
TEST_F(FilterServiceTest, ABatchCutShortByShutdownAnswersUnavailableNamingWhatWasApplied) {
  ASSERT_NO_FATAL_FAILURE(StartForBatchesOfTenThousand());
  server_->service().AbortRunning();
  auto r = Insert("f", Keys(1, 10'000));
  EXPECT_EQ(r.status.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_THAT(r.status.error_message(),
              HasSubstr("the batch was cut short after its first 4096 of 10000 keys were applied"));
  EXPECT_EQ(Get("f").response.filter().items(), 4096u);
  auto applied = Lookup("f", std::vector<std::string>(Keys(1, 4096)));
  EXPECT_EQ(applied.response.present_count(), 4096u);
  // A batch of one part, and lookups, are not cut.
  EXPECT_TRUE(Insert("f", Keys(2, 4096)).status.ok());
  EXPECT_TRUE(Lookup("f", Keys(2, 10'000)).status.ok());
}

// A Delete answered UNAVAILABLE gets retried (by clients, and by gRPC's
// retry policies); had a prefix of it been applied, the retry would delete
// those keys twice, and a second delete of a fingerprint can take another
// key's copy: a false negative. Shutdown therefore never cuts a Delete.
TEST_F(FilterServiceTest, ShutdownNeverCutsADeleteShortSoItsRetryCannotDeleteTwice) {
  ASSERT_NO_FATAL_FAILURE(StartForBatchesOfTenThousand());
  ASSERT_TRUE(Insert("f", Keys(1, 10'000)).status.ok());
  server_->service().AbortRunning();
  auto d = Delete("f", Keys(1, 10'000));
  ASSERT_TRUE(d.status.ok()) << d.status.error_message();
  EXPECT_EQ(d.response.deleted(), 10'000u);
  EXPECT_EQ(Get("f").response.filter().items(), 0u);
}

TEST_F(FilterServiceTest, ABatchPastItsDeadlineStopsAtTheNextPart) {
  server::ServerConfig config = testing::TestConfig(dir_.path());
  config.max_batch_keys = 200'000;
  config.max_message_bytes = 16 << 20;
  StartServer(config);
  ASSERT_TRUE(Create("f", 400'000).status.ok());
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(20));
  v1::InsertResponse resp;
  grpc::Status st = stub_->Insert(&ctx, WithKeys<v1::InsertRequest>("f", Keys(3, 200'000)), &resp);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED);
  // Whatever ran is a prefix of whole parts, and not the whole batch.
  absl::SleepFor(absl::Milliseconds(200));
  const uint64_t items = Get("f").response.filter().items();
  EXPECT_LT(items, 200'000u);
  EXPECT_EQ(items % CuckooFilter::kBatchPartKeys, 0u) << items;
}

TEST_F(FilterServiceTest, HealthIsServingAndCallsFailUnavailableAfterShutdown) {
  grpc::Status status;
  EXPECT_EQ(Health(channel_.get(), "", &status), grpc::health::v1::HealthCheckResponse::SERVING);
  EXPECT_TRUE(status.ok());
  EXPECT_EQ(Health(channel_.get(), "cuckoo.v1.FilterService", &status),
            grpc::health::v1::HealthCheckResponse::SERVING);
  ASSERT_TRUE(Create("f", 100).status.ok());
  server_->Shutdown(absl::Seconds(1));
  auto r = Lookup("f", {"a"});
  EXPECT_EQ(r.status.error_code(), grpc::StatusCode::UNAVAILABLE);
}

TEST_F(FilterServiceTest, HealthCheckOfAnUnknownServiceIsNotFound) {
  grpc::Status status;
  Health(channel_.get(), "no.such.Service", &status);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_THAT(status.error_message(), HasSubstr("no.such.Service"));
}

TEST_F(FilterServiceTest, HealthWatchSendsTheStatusAtOnce) {
  using grpc::health::v1::HealthCheckResponse;
  auto stub = grpc::health::v1::Health::NewStub(channel_);
  const std::pair<std::string, HealthCheckResponse::ServingStatus> cases[] = {
      {"no.such.Service", HealthCheckResponse::SERVICE_UNKNOWN},
      {"", HealthCheckResponse::SERVING}};
  for (const auto& [service, status] : cases) {
    grpc::health::v1::HealthCheckRequest req;
    req.set_service(service);
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    auto reader = stub->Watch(&ctx, req);
    HealthCheckResponse resp;
    ASSERT_TRUE(reader->Read(&resp)) << "\"" << service << "\"";
    EXPECT_EQ(resp.status(), status) << "\"" << service << "\"";
    ctx.TryCancel();
  }
}

// The threads of /proc/self/task whose name starts with `prefix`.
int ThreadsNamed(const std::string& prefix) {
  int n = 0;
  for (const auto& task : std::filesystem::directory_iterator("/proc/self/task")) {
    std::ifstream in(task.path() / "comm");
    std::string name;
    std::getline(in, name);
    if (name.rfind(prefix, 0) == 0) ++n;
  }
  return n;
}

// Every call is served by the --grpc-threads threads of the call queues,
// each polling its own queue (server/service/call_queues.h). No method may be on
// gRPC's callback API: its queue's "nexting" threads would poll too, and
// take the poller's role back, about three thread hand-offs per call.
TEST_F(FilterServiceTest, EveryCallIsServedByTheCallQueueThreadsAlone) {
  server::ServerConfig config = testing::TestConfig(dir_.path());
  config.grpc_threads = 3;
  StartServer(config);
  EXPECT_EQ(ThreadsNamed("grpc-calls-"), 3);
  ASSERT_TRUE(Create("f", 1000).status.ok());
  ASSERT_TRUE(Insert("f", {"a", "b"}).status.ok());
  EXPECT_TRUE(Lookup("f", {"a"}).status.ok());
  EXPECT_TRUE(Get("f").status.ok());
  grpc::Status status;
  EXPECT_EQ(Health(channel_.get(), "", &status), grpc::health::v1::HealthCheckResponse::SERVING);
  {
    grpc::ClientContext ctx;
    v1::ExportFilterRequest req;
    req.set_name("f");
    auto reader = stub_->ExportFilter(&ctx, req);
    v1::ExportFilterChunk chunk;
    while (reader->Read(&chunk)) {
    }
    EXPECT_TRUE(reader->Finish().ok());
  }
  EXPECT_EQ(ThreadsNamed("nexting_thread"), 0);
}

// Writers and readers on several filters at once, through the server: no
// inserted (and not deleted) key is ever reported absent.
TEST_F(FilterServiceTest, ConcurrentClientsNeverSeeFalseNegatives) {
  ASSERT_TRUE(Create("shared", 40'000).status.ok());
  constexpr int kThreads = 4;
  constexpr int kBatches = 40;
  constexpr int kBatch = 250;
  std::atomic<uint64_t> false_negatives{0};
  std::atomic<uint64_t> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      // Each thread owns key stream t: insert a batch, look it and all its
      // earlier batches up, delete every other batch's first half.
      for (int b = 0; b < kBatches; ++b) {
        std::vector<std::string> keys;
        for (int i = 0; i < kBatch; ++i) keys.push_back(Key(t, b * kBatch + i));
        auto ins = Insert("shared", keys);
        if (!ins.status.ok() || ins.response.inserted() != kBatch) ++failures;
        if (b % 2 == 1) {
          std::vector<std::string> half(keys.begin(), keys.begin() + kBatch / 2);
          auto del = Delete("shared", half);
          if (!del.status.ok() || del.response.deleted() != half.size()) ++failures;
          keys.erase(keys.begin(), keys.begin() + kBatch / 2);
        }
        auto look = Lookup("shared", keys);
        if (!look.status.ok()) {
          ++failures;
          continue;
        }
        for (bool p : look.response.present()) false_negatives += !p;
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(failures.load(), 0u);
  EXPECT_EQ(false_negatives.load(), 0u);
  EXPECT_EQ(Get("shared").response.filter().items(),
            uint64_t{kThreads} * (kBatches * kBatch - kBatches / 2 * kBatch / 2));
}

}  // namespace
}  // namespace cuckoo

namespace cuckoo {
namespace {

class RequestIdTest : public FilterServiceTest {};

// A Delete retried after a lost response must never remove a second copy:
// the same request_id (and content) is answered with the first one's
// results and position, and applied once.
TEST_F(RequestIdTest, ADeleteRepeatedWithItsRequestIdIsAppliedOnceOnASingleNode) {
  ASSERT_TRUE(Create("f", 1000).status.ok());
  const std::vector<std::string> keys = {"a", "b", "c"};
  ASSERT_TRUE(Insert("f", keys).status.ok());
  ASSERT_TRUE(Insert("f", keys).status.ok());
  auto del = WithKeys<v1::DeleteRequest>("f", keys);
  del.set_request_id("retry-1");
  const auto first = Call(&v1::FilterService::Stub::Delete, del);
  const auto second = Call(&v1::FilterService::Stub::Delete, del);
  ASSERT_TRUE(first.status.ok()) << first.status.error_message();
  ASSERT_TRUE(second.status.ok()) << second.status.error_message();
  EXPECT_EQ(first.response.deleted(), 3u);
  EXPECT_EQ(second.response.deleted(), 3u);
  EXPECT_EQ(second.response.log_position(), first.response.log_position());
  EXPECT_THAT(Count("f", keys).response.counts(), ElementsAre(1, 1, 1));
  // Another id is another request; so is the same id with other keys.
  del.set_request_id("retry-2");
  EXPECT_EQ(Call(&v1::FilterService::Stub::Delete, del).response.deleted(), 3u);
  EXPECT_THAT(Count("f", keys).response.counts(), ElementsAre(0, 0, 0));
  auto other = WithKeys<v1::DeleteRequest>("f", {"zzz"});
  other.set_request_id("retry-1");
  EXPECT_EQ(Call(&v1::FilterService::Stub::Delete, other).response.not_found(), 1u);
  // Inserts too.
  auto ins = WithKeys<v1::InsertRequest>("f", {"x"});
  ins.set_request_id("ins-1");
  EXPECT_EQ(Call(&v1::FilterService::Stub::Insert, ins).response.inserted(), 1u);
  EXPECT_EQ(Call(&v1::FilterService::Stub::Insert, ins).response.inserted(), 1u);
  EXPECT_THAT(Count("f", {"x"}).response.counts(), ElementsAre(1));
}

TEST_F(RequestIdTest, ConcurrentRepeatsOfOneRequestIdShareOneApply) {
  ASSERT_TRUE(Create("f", 100'000).status.ok());
  const std::vector<std::string> keys = Keys(3, 500);
  auto ins = WithKeys<v1::InsertRequest>("f", keys);
  ins.set_request_id("burst");
  std::vector<std::thread> threads;
  std::vector<Reply<v1::InsertResponse>> replies(8);
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] { replies[t] = Call(&v1::FilterService::Stub::Insert, ins); });
  }
  for (std::thread& t : threads) t.join();
  for (const auto& r : replies) {
    ASSERT_TRUE(r.status.ok()) << r.status.error_message();
    EXPECT_EQ(r.response.inserted(), 500u);
    EXPECT_EQ(r.response.log_position(), replies[0].response.log_position());
  }
  const auto counts = Count("f", keys);
  for (uint32_t n : counts.response.counts()) EXPECT_EQ(n, 1u);
}

TEST_F(RequestIdTest, BadRequestIdsAreInvalidArgumentNamingTheProblem) {
  ASSERT_TRUE(Create("f", 1000).status.ok());
  auto ins = WithKeys<v1::InsertRequest>("f", {"a"});
  ins.set_request_id("has space");
  auto r = Call(&v1::FilterService::Stub::Insert, ins);
  EXPECT_EQ(r.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(r.status.error_message(), HasSubstr("printable ASCII"));
  ins.set_request_id(std::string(129, 'x'));
  r = Call(&v1::FilterService::Stub::Insert, ins);
  EXPECT_EQ(r.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(r.status.error_message(), HasSubstr("request_id is 129 bytes; at most 128"));
  EXPECT_THAT(Count("f", {"a"}).response.counts(), ElementsAre(0));
}

TEST_F(RequestIdTest, LogPositionsGrowWithWritesAndReadsAnswerAtTheLatest) {
  const auto created = Create("f", 1000);
  ASSERT_TRUE(created.status.ok());
  const uint64_t p0 = created.response.log_position();
  EXPECT_GT(p0, 0u);
  const uint64_t p1 = Insert("f", {"a"}).response.log_position();
  const uint64_t p2 = Delete("f", {"a"}).response.log_position();
  EXPECT_GT(p1, p0);
  EXPECT_GT(p2, p1);
  EXPECT_EQ(Lookup("f", {"a"}).response.log_position(), p2);
  EXPECT_EQ(Get("f").response.log_position(), p2);
  v1::GetServerInfoResponse info =
      Call(&v1::FilterService::Stub::GetServerInfo, v1::GetServerInfoRequest()).response;
  EXPECT_EQ(info.mode(), "single");
  EXPECT_EQ(info.applied_log_position(), p2);
  EXPECT_EQ(info.dedup_window().seconds(), 120);
  // A position this server never reached did not come from it.
  auto lookup = WithKeys<v1::LookupRequest>("f", {"a"});
  lookup.set_min_log_position(p2);
  EXPECT_TRUE(Call(&v1::FilterService::Stub::Lookup, lookup).status.ok());
  lookup.set_min_log_position(p2 + 1);
  const auto ahead = Call(&v1::FilterService::Stub::Lookup, lookup);
  EXPECT_EQ(ahead.status.error_code(), grpc::StatusCode::OUT_OF_RANGE);
  EXPECT_THAT(ahead.status.error_message(), HasSubstr("past this server's log"));
  // Positions survive a restart (they are the log's).
  server_.reset();
  StartServer(testing::TestConfig(dir_.path()));
  EXPECT_EQ(Lookup("f", {"a"}).response.log_position(), p2);
  EXPECT_GT(Insert("f", {"b"}).response.log_position(), p2);
}

}  // namespace
}  // namespace cuckoo

// ExportFilter and ImportFilter.
namespace cuckoo {
namespace {

namespace fs = std::filesystem;

class FilterServiceTransferTest : public FilterServiceTest {
 protected:
  struct Exported {
    grpc::Status status;
    std::string bytes;
    v1::ExportFilterChunk first;  // Its metadata (data cleared).
    size_t chunks = 0;
    size_t largest_chunk = 0;
  };

  Exported Export(const std::string& name) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
    v1::ExportFilterRequest req;
    req.set_name(name);
    std::unique_ptr<grpc::ClientReader<v1::ExportFilterChunk>> reader =
        stub_->ExportFilter(&ctx, req);
    Exported e;
    v1::ExportFilterChunk chunk;
    while (reader->Read(&chunk)) {
      if (e.chunks++ == 0) {
        e.first = chunk;
        e.first.clear_data();
      } else {
        EXPECT_EQ(chunk.total_bytes(), 0u) << "metadata in chunk " << e.chunks;
        EXPECT_FALSE(chunk.has_filter()) << "metadata in chunk " << e.chunks;
      }
      e.largest_chunk = std::max(e.largest_chunk, chunk.data().size());
      e.bytes += chunk.data();
    }
    e.status = reader->Finish();
    return e;
  }

  // Sends `bytes` as an import of `name` in chunks of `chunk` bytes; the
  // first chunk names the filter (unless `name` is empty) and announces
  // `total` (0: nothing).
  Reply<v1::ImportFilterResponse> Import(const std::string& name, const std::string& bytes,
                                         size_t chunk = 256 << 10, uint64_t total = 0) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
    Reply<v1::ImportFilterResponse> r;
    std::unique_ptr<grpc::ClientWriter<v1::ImportFilterChunk>> writer =
        stub_->ImportFilter(&ctx, &r.response);
    size_t offset = 0;
    for (bool first = true; first || offset < bytes.size(); first = false) {
      v1::ImportFilterChunk c;
      if (first) {
        c.set_name(name);
        c.set_total_bytes(total);
      }
      const size_t n = std::min(chunk, bytes.size() - offset);
      c.set_data(bytes.substr(offset, n));
      offset += n;
      if (!writer->Write(c)) break;
    }
    writer->WritesDone();
    r.status = writer->Finish();
    return r;
  }

  // Every key of `keys` the filter says is present (of those looked up in
  // batches the server takes).
  size_t CountPresent(const std::string& filter, const std::vector<std::string>& keys) {
    size_t present = 0;
    for (size_t i = 0; i < keys.size(); i += 1000) {
      std::vector<std::string> batch(keys.begin() + i,
                                     keys.begin() + std::min(keys.size(), i + 1000));
      auto r = Lookup(filter, batch);
      EXPECT_TRUE(r.status.ok()) << r.status.error_message();
      present += r.response.present_count();
    }
    return present;
  }

  void InsertAll(const std::string& filter, const std::vector<std::string>& keys) {
    for (size_t i = 0; i < keys.size(); i += 1000) {
      std::vector<std::string> batch(keys.begin() + i,
                                     keys.begin() + std::min(keys.size(), i + 1000));
      auto r = Insert(filter, batch);
      ASSERT_TRUE(r.status.ok()) << r.status.error_message();
      ASSERT_EQ(r.response.inserted(), batch.size());
    }
  }

  // What a kill -9 leaves: data directory `dir` as it is now, copied (while
  // nothing writes to it).
  std::string CopyOf(const std::string& dir, const std::string& label) {
    const std::string copy = copies_.path() + "/" + label;
    fs::copy(dir, copy, fs::copy_options::recursive);
    return copy;
  }

  static void ExpectSameShape(const v1::FilterInfo& a, const v1::FilterInfo& b) {
    EXPECT_EQ(a.capacity(), b.capacity());
    EXPECT_EQ(a.fingerprint_bits(), b.fingerprint_bits());
    EXPECT_EQ(a.bucket_size(), b.bucket_size());
    EXPECT_EQ(a.shards(), b.shards());
    EXPECT_EQ(a.max_kicks(), b.max_kicks());
    EXPECT_EQ(a.seed(), b.seed());
    EXPECT_EQ(a.hash_id(), b.hash_id());
    EXPECT_EQ(a.buckets_per_shard(), b.buckets_per_shard());
    EXPECT_EQ(a.slots(), b.slots());
    EXPECT_EQ(a.semi_sort(), b.semi_sort());
    EXPECT_EQ(a.memory_bytes(), b.memory_bytes());
  }

  std::vector<std::string> FilesIn(const std::string& dir) {
    std::vector<std::string> files;
    for (const auto& e : fs::recursive_directory_iterator(dir)) {
      const std::string file = fs::relative(e.path(), dir).string();
      // (The log's segments come and go on their own.)
      if (e.is_regular_file() && !file.starts_with("wal/")) files.push_back(file);
    }
    std::sort(files.begin(), files.end());
    return files;
  }

  testing::TempDir copies_;
};

// The brief's main promise: an export taken while a client keeps inserting
// holds every key acknowledged before it started, and imports (under another
// name, on the same server) as a filter of the same shape and items.
TEST_F(FilterServiceTransferTest,
       AnExportTakenWhileInsertsGoOnImportsWithEveryKeyAcknowledgedBefore) {
  v1::CreateFilterRequest create;
  create.set_name("f");
  create.set_capacity(4'000'000);  // A snapshot of about 5.6 MB: six chunks.
  create.set_seed(11);
  create.set_shards(4);
  ASSERT_TRUE(Call(&v1::FilterService::Stub::CreateFilter, create).status.ok());
  const std::vector<std::string> keys = Keys(5, 200'000);
  // Acknowledged keys are a prefix of `keys`: the writer inserts in order.
  std::atomic<size_t> acknowledged{0};
  std::atomic<bool> stop{false};
  std::atomic<int> failures{0};
  std::thread writer([&] {
    auto stub = v1::FilterService::NewStub(
        grpc::CreateChannel(server_->address(), grpc::InsecureChannelCredentials()));
    for (size_t i = 0; i < keys.size() && !stop.load(); i += 500) {
      v1::InsertRequest req;
      req.set_filter("f");
      for (size_t k = i; k < i + 500; ++k) req.add_keys(keys[k]);
      grpc::ClientContext ctx;
      v1::InsertResponse resp;
      if (!stub->Insert(&ctx, req, &resp).ok() || resp.inserted() != 500) {
        ++failures;
        return;
      }
      acknowledged.store(i + 500);
    }
  });
  while (acknowledged.load() < 20'000) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  const size_t before = acknowledged.load();
  const Exported e = Export("f");
  const size_t after = acknowledged.load();
  stop.store(true);
  writer.join();
  ASSERT_TRUE(e.status.ok()) << e.status.error_message();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_GT(after, before) << "the inserts did not go on during the export";

  // The stream: chunks of at most 1 MiB (the test server's messages are
  // 1 MiB), the metadata in the first.
  EXPECT_GE(e.chunks, 5u);
  EXPECT_LE(e.largest_chunk, size_t{1} << 20);
  EXPECT_EQ(e.first.total_bytes(), e.bytes.size());
  EXPECT_EQ(e.first.filter().name(), "f");
  EXPECT_GE(e.first.items(), before);
  EXPECT_GE(e.first.log_position(), 1u);
  // Exactly a snapshot file in the current format (version 5: the filter
  // has no expiry), with the filter's id.
  absl::StatusOr<LoadedSnapshot> parsed = ParseSnapshot(
      absl::Span<const uint8_t>(reinterpret_cast<const uint8_t*>(e.bytes.data()), e.bytes.size()),
      "export", "f");
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->format_version, 5u);
  EXPECT_EQ(parsed->items, e.first.items());
  EXPECT_EQ(parsed->filter_id, e.first.filter_id());
  EXPECT_EQ(parsed->filter_id, (*server_->registry().Get("f"))->id());
  EXPECT_GE(parsed->max_position, parsed->filter_id);

  const auto imported = Import("copy", e.bytes);
  ASSERT_TRUE(imported.status.ok()) << imported.status.error_message();
  EXPECT_EQ(imported.response.bytes(), e.bytes.size());
  EXPECT_EQ(imported.response.source_name(), "f");
  EXPECT_GT(imported.response.log_position(), e.first.log_position());
  const v1::FilterInfo copy = Get("copy").response.filter();
  EXPECT_EQ(copy.name(), "copy");
  EXPECT_EQ(copy.items(), e.first.items());
  EXPECT_EQ(imported.response.filter().items(), e.first.items());
  ExpectSameShape(copy, Get("f").response.filter());
  const std::vector<std::string> acked_before(keys.begin(), keys.begin() + before);
  EXPECT_EQ(CountPresent("copy", acked_before), before);
  // The copy is a filter like any other: it takes writes.
  auto more = Insert("copy", {"new-key"});
  ASSERT_TRUE(more.status.ok());
  EXPECT_GT(more.response.log_position(), imported.response.log_position());
  EXPECT_EQ(Get("copy").response.filter().items(), e.first.items() + 1);
  // Nothing private is left in the data directory.
  for (const std::string& f : FilesIn(dir_.path())) {
    EXPECT_FALSE(f.starts_with(".export") || f.starts_with(".import")) << f;
  }
}

TEST_F(FilterServiceTransferTest, DamagedOrCutShortImportsFailNamingTheProblemAndCreateNothing) {
  ASSERT_TRUE(Create("f", 10'000).status.ok());
  ASSERT_NO_FATAL_FAILURE(InsertAll("f", Keys(1, 3000)));
  const Exported e = Export("f");
  ASSERT_TRUE(e.status.ok()) << e.status.error_message();
  const std::vector<std::string> files_before = FilesIn(dir_.path());

  struct Case {
    std::string label;
    std::string bytes;
    uint64_t total;
    grpc::StatusCode code;
    std::string message;
  };
  std::string flipped = e.bytes;
  flipped[flipped.size() / 2] ^= 0x10;
  std::string bad_magic = e.bytes;
  bad_magic[1] = 'X';
  const std::vector<Case> cases = {
      {"truncated", e.bytes.substr(0, e.bytes.size() - 100), 0, grpc::StatusCode::DATA_LOSS,
       "truncated"},
      {"cut to its header", e.bytes.substr(0, 320), 0, grpc::StatusCode::DATA_LOSS, "truncated"},
      {"a flipped bit", flipped, 0, grpc::StatusCode::DATA_LOSS, "checksum"},
      {"bad magic", bad_magic, 0, grpc::StatusCode::DATA_LOSS, "not a cuckood snapshot"},
      {"empty", "", 0, grpc::StatusCode::DATA_LOSS, "empty file"},
      {"extra bytes", e.bytes + "x", 0, grpc::StatusCode::DATA_LOSS,
       "1 unexpected bytes after the end"},
      {"short of total_bytes", e.bytes.substr(0, 1000), e.bytes.size(),
       grpc::StatusCode::INVALID_ARGUMENT, "ended after 1000 of the"},
      {"past total_bytes", e.bytes, 1000, grpc::StatusCode::INVALID_ARGUMENT,
       "more bytes arrived than the 1000 total_bytes"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.label);
    const auto r = Import("g", c.bytes, 4096, c.total);
    EXPECT_EQ(r.status.error_code(), c.code) << r.status.error_message();
    EXPECT_THAT(r.status.error_message(), HasSubstr(c.message));
    if (c.code == grpc::StatusCode::DATA_LOSS) {
      EXPECT_THAT(r.status.error_message(), HasSubstr("the snapshot sent for filter \"g\""));
    }
    EXPECT_EQ(Get("g").status.error_code(), grpc::StatusCode::NOT_FOUND);
    EXPECT_EQ(server_->registry().size(), 1u);
  }
  // No name, a bad one, another one in a later chunk.
  auto unnamed = Import("", e.bytes);
  EXPECT_EQ(unnamed.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(unnamed.status.error_message(), HasSubstr("must carry the new filter's name"));
  auto bad = Import(std::string(513, 'x'), e.bytes);
  EXPECT_EQ(bad.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(bad.status.error_message(), HasSubstr("513 bytes; at most 512 are allowed"));
  {
    grpc::ClientContext ctx;
    v1::ImportFilterResponse resp;
    auto writer = stub_->ImportFilter(&ctx, &resp);
    v1::ImportFilterChunk c;
    c.set_name("g");
    c.set_data(e.bytes.substr(0, 100));
    writer->Write(c);
    c.set_name("h");
    c.set_data(e.bytes.substr(100));
    writer->Write(c);
    writer->WritesDone();
    const grpc::Status s = writer->Finish();
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_THAT(s.error_message(), HasSubstr("names filter \"h\""));
  }
  // Nothing changed: no filter, no file, the memory all given back.
  EXPECT_EQ(server_->registry().size(), 1u);
  EXPECT_EQ(FilesIn(dir_.path()), files_before);
  EXPECT_EQ(server_->registry().memory_bytes(), Get("f").response.filter().memory_bytes());
  // And the intact file still imports.
  EXPECT_TRUE(Import("g", e.bytes).status.ok());
}

TEST_F(FilterServiceTransferTest,
       ImportOverATakenNameIsAlreadyExistsAndExportOfAnUnknownFilterNotFound) {
  ASSERT_TRUE(Create("f", 1000).status.ok());
  ASSERT_TRUE(Create("g", 2000).status.ok());
  ASSERT_TRUE(Insert("g", {"kept"}).status.ok());
  const Exported e = Export("f");
  ASSERT_TRUE(e.status.ok());
  const auto taken = Import("g", e.bytes);
  EXPECT_EQ(taken.status.error_code(), grpc::StatusCode::ALREADY_EXISTS);
  EXPECT_THAT(taken.status.error_message(), HasSubstr("filter \"g\" already exists"));
  EXPECT_EQ(Get("g").response.filter().capacity(), 2000u);
  EXPECT_EQ(Get("g").response.filter().items(), 1u);
  // Importing a filter under its own (taken) name, too.
  EXPECT_EQ(Import("f", e.bytes).status.error_code(), grpc::StatusCode::ALREADY_EXISTS);

  const Exported unknown = Export("nope");
  EXPECT_EQ(unknown.status.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_THAT(unknown.status.error_message(), HasSubstr("\"nope\""));
  EXPECT_EQ(unknown.chunks, 0u);
  // "bad/name" is a name like any other (not found); 513 bytes is not one.
  EXPECT_EQ(Export("bad/name").status.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(Export(std::string(513, 'x')).status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
}

TEST_F(FilterServiceTransferTest, ImportsLargerThanTheMemoryBudgetAreRefusedEarly) {
  server::ServerConfig config = testing::TestConfig(dir_.path());
  config.memory_budget_bytes = 1 << 20;
  StartServer(config);
  // Announced: refused at the first chunk.
  auto announced = Import("g", "x", 1, uint64_t{1} << 30);
  EXPECT_EQ(announced.status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_THAT(announced.status.error_message(), HasSubstr("memory budget of 1048576 bytes"));
  // Streamed: refused once past the budget plus 1 MiB.
  auto streamed = Import("g", std::string(3 << 20, 'x'), 512 << 10);
  EXPECT_EQ(streamed.status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_THAT(streamed.status.error_message(), HasSubstr("no filter it can hold"));
  // A snapshot whose filter does not fit the budget: the registry's check.
  StartServer(testing::TestConfig(copies_.path()));
  ASSERT_TRUE(Create("f", 1'000'000).status.ok());  // About 1.4 MB: under the limit of 2 MiB.
  const Exported e = Export("f");
  ASSERT_TRUE(e.status.ok());
  config.data_dir = dir_.path();
  StartServer(config);
  auto too_big = Import("g", e.bytes, 512 << 10, e.bytes.size());
  EXPECT_EQ(too_big.status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_THAT(too_big.status.error_message(), HasSubstr("of the memory budget of 1048576 bytes"));
  EXPECT_EQ(server_->registry().size(), 0u);
  EXPECT_EQ(server_->registry().memory_bytes(), 0u);
}

// One chunk in flight per export, and at most two exports: a client that
// stops reading holds its export (and its slot), and a third is refused.
TEST_F(FilterServiceTransferTest, MoreThanTwoExportsAtOnceAreResourceExhaustedNamingTheLimit) {
  v1::CreateFilterRequest create;
  create.set_name("big");
  create.set_capacity(16'000'000);  // A snapshot of about 23 MB.
  create.set_seed(1);
  ASSERT_TRUE(Call(&v1::FilterService::Stub::CreateFilter, create).status.ok());
  struct Slow {
    grpc::ClientContext ctx;
    std::unique_ptr<grpc::ClientReader<v1::ExportFilterChunk>> reader;
  };
  std::vector<std::unique_ptr<Slow>> slow;
  for (int i = 0; i < 2; ++i) {
    auto s = std::make_unique<Slow>();
    v1::ExportFilterRequest req;
    req.set_name("big");
    s->reader = stub_->ExportFilter(&s->ctx, req);
    v1::ExportFilterChunk first;
    ASSERT_TRUE(s->reader->Read(&first));  // Running; then it reads no more.
    EXPECT_GT(first.total_bytes(), 16u << 20);
    slow.push_back(std::move(s));
  }
  const Exported third = Export("big");
  EXPECT_EQ(third.status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_THAT(third.status.error_message(), HasSubstr("2 exports are running already"));
  EXPECT_THAT(third.status.error_message(), HasSubstr("the limit is 2 at a time"));
  // Meanwhile the filter serves.
  EXPECT_TRUE(Insert("big", {"during"}).status.ok());
  EXPECT_TRUE(Lookup("big", {"during"}).response.present(0));
  const std::string metrics = server_->metrics().Render();
  EXPECT_THAT(
      metrics,
      HasSubstr(
          R"(cuckood_rpc_requests_total{code="RESOURCE_EXHAUSTED",method="ExportFilter"} 1)"));
  // Cancelled, they give their slots back.
  for (auto& s : slow) {
    s->ctx.TryCancel();
    (void)s->reader->Finish();
  }
  slow.clear();
  // A slow export may have had its whole snapshot taken into gRPC's buffers
  // (and its OK status sent) before the cancellation reached it: counted OK
  // then, and rightly. So the next export is checked by the count it adds.
  const auto oks = [&] {
    const std::string m = server_->metrics().Render();
    const std::string key = R"(cuckood_rpc_requests_total{code="OK",method="ExportFilter"} )";
    const size_t at = m.find(key);
    return at == std::string::npos ? 0 : std::stoi(m.substr(at + key.size()));
  };
  const int oks_before = oks();
  EXPECT_LE(oks_before, 2);
  Exported again;
  for (int i = 0; i < 200; ++i) {
    again = Export("big");
    if (again.status.error_code() != grpc::StatusCode::RESOURCE_EXHAUSTED) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ASSERT_TRUE(again.status.ok()) << again.status.error_message();
  EXPECT_EQ(again.bytes.size(), again.first.total_bytes());
  EXPECT_EQ(oks(), oks_before + 1);
}

// The imported filter is durable when answered: a restart (clean, or from
// the data directory as a kill -9 leaves it) has it with its content and the
// writes made to it after the import.
TEST_F(FilterServiceTransferTest, AnImportedFilterSurvivesRestartsWithItsContentAndLaterWrites) {
  ASSERT_TRUE(Create("f", 50'000).status.ok());
  const std::vector<std::string> a = Keys(1, 20'000);
  ASSERT_NO_FATAL_FAILURE(InsertAll("f", a));
  const Exported e = Export("f");
  ASSERT_TRUE(e.status.ok());
  // "g" existed before, and was dropped: the log still holds its creation,
  // which must not claim the imported filter on replay.
  ASSERT_TRUE(Create("g", 50'000, /*seed=*/99).status.ok());
  const std::vector<std::string> old_keys = Keys(9, 1000);
  ASSERT_NO_FATAL_FAILURE(InsertAll("g", old_keys));
  ASSERT_TRUE(Drop("g").status.ok());
  const auto imported = Import("g", e.bytes);
  ASSERT_TRUE(imported.status.ok()) << imported.status.error_message();
  // On disk at once, before any snapshot: the imported file.
  EXPECT_TRUE(fs::exists(SnapshotPath(dir_.path(), "g")));
  const std::string at_answer = CopyOf(dir_.path(), "at-answer");
  const std::vector<std::string> b = Keys(2, 5000);
  ASSERT_NO_FATAL_FAILURE(InsertAll("g", b));
  ASSERT_TRUE(Delete("g", {a[0]}).status.ok());
  const std::string after_writes = CopyOf(dir_.path(), "after-writes");
  const uint64_t items = a.size() + b.size() - 1;
  EXPECT_EQ(Get("g").response.filter().items(), items);

  auto check = [&](const std::string& label, uint64_t want_items, bool with_b) {
    SCOPED_TRACE(label);
    const auto info = Get("g");
    ASSERT_TRUE(info.status.ok()) << info.status.error_message();
    EXPECT_EQ(info.response.filter().items(), want_items);
    EXPECT_EQ(info.response.filter().seed(), 7u);  // The imported filter's, not the dropped one's.
    EXPECT_EQ(CountPresent("g", std::vector<std::string>(a.begin() + 1, a.end())), a.size() - 1);
    if (with_b) {
      EXPECT_EQ(CountPresent("g", b), b.size());
    }
    // Later writes are logged and replayed as for any filter.
    ASSERT_TRUE(Insert("g", {"after-restart"}).status.ok());
    EXPECT_EQ(Get("g").response.filter().items(), want_items + 1);
  };
  // A kill -9 right after the answer: the file and the log's creation.
  StartServer(testing::TestConfig(at_answer));
  check("kill -9 at the answer", a.size(), false);
  // A kill -9 after later writes: they replay onto the imported content.
  StartServer(testing::TestConfig(after_writes));
  check("kill -9 after writes", items, true);
  StartServer(testing::TestConfig(after_writes));  // Again, from its own state.
  EXPECT_EQ(Get("g").response.filter().items(), items + 1);
  // A clean restart of the original (final snapshot).
  StartServer(testing::TestConfig(dir_.path()));
  check("clean restart", items, true);
  StartServer(testing::TestConfig(dir_.path()));
  EXPECT_EQ(Get("g").response.filter().items(), items + 1);
  // The final snapshot wrote the imported filter again, with its id.
  absl::StatusOr<LoadedSnapshot> file = ReadSnapshotFile(SnapshotPath(dir_.path(), "g"));
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ(file->filter_id, imported.response.log_position());
}

// Into another server, whose log is at other positions than the source's:
// the snapshot's positions (and id) must not make that server's replay skip
// the writes made to the imported filter there.
TEST_F(FilterServiceTransferTest, AnImportIntoAnotherServerReplaysTheWritesMadeThereAfterACrash) {
  ASSERT_TRUE(Create("f", 50'000).status.ok());
  const std::vector<std::string> a = Keys(1, 20'000);
  ASSERT_NO_FATAL_FAILURE(InsertAll("f", a));  // 20 batches: the shards' positions reach ~21.
  const Exported e = Export("f");
  ASSERT_TRUE(e.status.ok());
  ASSERT_GT(e.first.log_position(), 20u);
  StartServer(testing::TestConfig(copies_.path() + "/other"));  // An empty data directory.
  const auto imported = Import("g", e.bytes);
  ASSERT_TRUE(imported.status.ok()) << imported.status.error_message();
  EXPECT_LT(imported.response.log_position(), e.first.log_position());
  const std::vector<std::string> b = Keys(2, 5000);
  ASSERT_NO_FATAL_FAILURE(InsertAll("g", b));
  const std::string crashed = CopyOf(copies_.path() + "/other", "crashed");
  StartServer(testing::TestConfig(crashed));
  EXPECT_EQ(Get("g").response.filter().items(), a.size() + b.size());
  EXPECT_EQ(CountPresent("g", a), a.size());
  EXPECT_EQ(CountPresent("g", b), b.size());
}

// The import's crash windows, each taken as a kill -9 would leave the data
// directory: before its file is in place the filter does not exist; from
// then on it exists whole, whether or not its creation reached the log.
TEST_F(FilterServiceTransferTest, ACrashAtAnyStepOfAnImportLeavesNoFilterOrTheWholeFilter) {
  std::map<std::string, std::string> copies;
  server::PersistenceOptions hooks;
  hooks.before_file_operation = [&](absl::string_view op, absl::string_view name) {
    if (!absl::StartsWith(op, "import") || name != "g") return;
    copies[std::string(op)] = CopyOf(dir_.path(), std::string(op));
  };
  StartServer(testing::TestConfig(dir_.path()), hooks);
  ASSERT_TRUE(Create("f", 50'000).status.ok());
  const std::vector<std::string> a = Keys(1, 10'000);
  ASSERT_NO_FATAL_FAILURE(InsertAll("f", a));
  const Exported e = Export("f");
  ASSERT_TRUE(e.status.ok());
  const auto imported = Import("g", e.bytes);
  ASSERT_TRUE(imported.status.ok()) << imported.status.error_message();
  ASSERT_EQ(copies.size(), 3u);

  StartServer(testing::TestConfig(copies["import"]));
  EXPECT_EQ(Get("g").status.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_FALSE(fs::exists(SnapshotPath(copies["import"], "g")));
  EXPECT_EQ(Get("f").response.filter().items(), a.size());

  for (const char* step : {"import-file-written", "import-logged"}) {
    SCOPED_TRACE(step);
    StartServer(testing::TestConfig(copies[step]));
    const auto info = Get("g");
    ASSERT_TRUE(info.status.ok()) << info.status.error_message();
    EXPECT_EQ(info.response.filter().items(), a.size());
    EXPECT_EQ(CountPresent("g", a), a.size());
    const std::vector<std::string> later = Keys(3, 2000);
    ASSERT_NO_FATAL_FAILURE(InsertAll("g", later));
    // And once more from there, its writes replayed from the log (no final
    // snapshot: the copy is copied again as the server runs).
    const std::string again = CopyOf(copies[step], std::string(step) + "-again");
    StartServer(testing::TestConfig(again));
    EXPECT_EQ(Get("g").response.filter().items(), a.size() + later.size());
    EXPECT_EQ(CountPresent("g", later), later.size());
  }
}

// A client that stops sending is ended after --transfer-idle-timeout: it
// gets ABORTED naming the timeout, its upload is removed and its slot free
// again. (Before, it held the slot for ever.)
TEST_F(FilterServiceTransferTest, AnImportWhoseClientStopsSendingIsAbortedAfterTheIdleTimeout) {
  server::ServerConfig config = testing::TestConfig(dir_.path());
  config.transfer_idle_timeout = absl::Seconds(1);
  StartServer(config);
  ASSERT_TRUE(Create("f", 1000).status.ok());
  const Exported e = Export("f");
  ASSERT_TRUE(e.status.ok());
  struct Stalled {
    grpc::ClientContext ctx;
    v1::ImportFilterResponse response;
    std::unique_ptr<grpc::ClientWriter<v1::ImportFilterChunk>> writer;
  };
  // Both slots, each with its first chunk sent, then nothing more.
  std::vector<std::unique_ptr<Stalled>> stalled;
  for (int i = 0; i < 2; ++i) {
    auto s = std::make_unique<Stalled>();
    s->ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
    s->writer = stub_->ImportFilter(&s->ctx, &s->response);
    v1::ImportFilterChunk chunk;
    chunk.set_name(absl::StrCat("g", i));
    chunk.set_total_bytes(e.bytes.size());
    chunk.set_data(e.bytes.substr(0, 100));
    ASSERT_TRUE(s->writer->Write(chunk));
    stalled.push_back(std::move(s));
  }
  for (auto& s : stalled) {
    // Finish waits for the server's status: it comes with the timeout.
    const grpc::Status status = s->writer->Finish();
    EXPECT_EQ(status.error_code(), grpc::StatusCode::ABORTED) << status.error_message();
    EXPECT_THAT(status.error_message(), HasSubstr("no chunk of the import arrived for 1s"));
    EXPECT_THAT(status.error_message(), HasSubstr("--transfer-idle-timeout"));
  }
  // The slots are free again (once the server has ended the calls, which
  // may be just after their clients heard).
  Reply<v1::ImportFilterResponse> imported;
  for (int i = 0; i < 600; ++i) {
    imported = Import("g", e.bytes, 256 << 10, e.bytes.size());
    if (imported.status.error_code() != grpc::StatusCode::RESOURCE_EXHAUSTED) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ASSERT_TRUE(imported.status.ok()) << imported.status.error_message();
  EXPECT_EQ(Get("g").response.filter().items(), Get("f").response.filter().items());
  EXPECT_EQ(Get("g0").status.error_code(), grpc::StatusCode::NOT_FOUND);
  const fs::path uploads = fs::path(dir_.path()) / server::kImportDir;
  EXPECT_TRUE(!fs::exists(uploads) || fs::is_empty(uploads));
  EXPECT_THAT(server_->metrics().Render(),
              HasSubstr(R"(cuckood_rpc_requests_total{code="ABORTED",method="ImportFilter"} 2)"));
}

// A client that stops reading an export is ended after the timeout too:
// ABORTED naming it (read once it reads again), its slot free, its copy
// gone.
TEST_F(FilterServiceTransferTest, AnExportWhoseClientStopsReadingIsAbortedAfterTheIdleTimeout) {
  server::ServerConfig config = testing::TestConfig(dir_.path());
  config.transfer_idle_timeout = absl::Seconds(1);
  StartServer(config);
  v1::CreateFilterRequest create;
  create.set_name("big");
  create.set_capacity(4'000'000);  // A snapshot of about 6 MB.
  create.set_seed(1);
  ASSERT_TRUE(Call(&v1::FilterService::Stub::CreateFilter, create).status.ok());
  // A client whose stream window stays small (no BDP probing), so that the
  // server's next chunk waits for it to read: its snapshot cannot vanish
  // into gRPC's buffers.
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_HTTP2_BDP_PROBE, 0);
  args.SetInt(GRPC_ARG_HTTP2_STREAM_LOOKAHEAD_BYTES, 64 << 10);
  auto slow_stub = v1::FilterService::NewStub(
      grpc::CreateCustomChannel(server_->address(), grpc::InsecureChannelCredentials(), args));
  struct Slow {
    grpc::ClientContext ctx;
    std::unique_ptr<grpc::ClientReader<v1::ExportFilterChunk>> reader;
  };
  std::vector<std::unique_ptr<Slow>> slow;
  for (int i = 0; i < 2; ++i) {
    auto s = std::make_unique<Slow>();
    s->ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
    v1::ExportFilterRequest req;
    req.set_name("big");
    s->reader = slow_stub->ExportFilter(&s->ctx, req);
    v1::ExportFilterChunk first;
    ASSERT_TRUE(s->reader->Read(&first));  // Running; then it reads no more.
    slow.push_back(std::move(s));
  }
  // The server ends both (counted when it has).
  const std::string aborted =
      R"(cuckood_rpc_requests_total{code="ABORTED",method="ExportFilter"} 2)";
  for (int i = 0; i < 600 && !absl::StrContains(server_->metrics().Render(), aborted); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_THAT(server_->metrics().Render(), HasSubstr(aborted));
  for (auto& s : slow) {
    v1::ExportFilterChunk chunk;
    while (s->reader->Read(&chunk)) {
    }
    const grpc::Status status = s->reader->Finish();
    EXPECT_EQ(status.error_code(), grpc::StatusCode::ABORTED) << status.error_message();
    EXPECT_THAT(status.error_message(),
                HasSubstr("the client took no chunk of the export of filter \"big\" for 1s "
                          "(--transfer-idle-timeout)"));
  }
  // Both slots are free: two exports at once run.
  std::vector<std::thread> both;
  std::vector<Exported> results(2);
  for (int i = 0; i < 2; ++i) both.emplace_back([&, i] { results[i] = Export("big"); });
  for (auto& t : both) t.join();
  for (const Exported& r : results) {
    ASSERT_TRUE(r.status.ok()) << r.status.error_message();
    EXPECT_EQ(r.bytes.size(), r.first.total_bytes());
  }
  const fs::path copies = fs::path(dir_.path()) / server::kExportDir;
  EXPECT_TRUE(!fs::exists(copies) || fs::is_empty(copies));
}

// An import's size is claimed from the disk before it is written: more
// than the free space less the write-ahead log's reserve (two
// --wal-segment-size segments) is refused naming the sizes.
TEST_F(FilterServiceTransferTest, AnImportLargerThanTheFreeDiskLessTheLogsReserveIsRefused) {
  // 100 KiB free beyond the reserve of 2 x 64 MiB.
  testing::SmallDiskEnv env((uint64_t{128} << 20) + (100 << 10));
  testing::StopServerFirst stop_first(&server_);  // before `env` goes
  server::PersistenceOptions hooks;
  hooks.wal.env = &env;
  StartServer(testing::TestConfig(dir_.path()), hooks);
  ASSERT_TRUE(Create("f", 1000).status.ok());
  const Exported e = Export("f");
  ASSERT_TRUE(e.status.ok());
  ASSERT_LT(e.bytes.size(), 100u << 10);
  // Announced: refused at the first chunk.
  const auto announced = Import("g", std::string(100, 'x'), 100, uint64_t{4} << 20);
  EXPECT_EQ(announced.status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_THAT(announced.status.error_message(),
              HasSubstr("the import of filter \"g\" needs 4MiB (4194304 bytes) of disk"));
  EXPECT_THAT(announced.status.error_message(), HasSubstr("has 128.1MiB free"));
  EXPECT_THAT(announced.status.error_message(),
              HasSubstr("128MiB is kept for the write-ahead log (2 x --wal-segment-size)"));
  EXPECT_THAT(announced.status.error_message(), HasSubstr("only 100KiB is left for it"));
  // Not announced: each chunk is claimed as it comes.
  const auto streamed = Import("g", std::string(1 << 20, 'x'), 512 << 10);
  EXPECT_EQ(streamed.status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_THAT(streamed.status.error_message(), HasSubstr("needs 512KiB (524288 bytes) of disk"));
  // What fits is taken.
  const auto fits = Import("g", e.bytes, 256 << 10, e.bytes.size());
  ASSERT_TRUE(fits.status.ok()) << fits.status.error_message();
  EXPECT_TRUE(Get("g").status.ok());
}

TEST_F(FilterServiceTransferTest, AnExportLargerThanTheFreeDiskLessTheLogsReserveIsRefused) {
  // An export's copy is written before it is sent: it claims the filter's
  // memory (and 64 KiB) as an import claims its size. 1 MiB free beyond
  // the reserve of 2 x 64 MiB.
  testing::SmallDiskEnv env((uint64_t{128} << 20) + (1 << 20));
  testing::StopServerFirst stop_first(&server_);  // before `env` goes
  server::PersistenceOptions hooks;
  hooks.wal.env = &env;
  StartServer(testing::TestConfig(dir_.path()), hooks);
  ASSERT_TRUE(Create("small", 1000).status.ok());
  ASSERT_TRUE(Create("large", 4'000'000).status.ok());
  const Exported small = Export("small");
  EXPECT_TRUE(small.status.ok()) << small.status.error_message();
  const Exported large = Export("large");
  EXPECT_EQ(large.status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_THAT(large.status.error_message(), HasSubstr("the export of filter \"large\" needs"));
  EXPECT_THAT(large.status.error_message(),
              HasSubstr("128MiB is kept for the write-ahead log (2 x --wal-segment-size)"));
  // Nothing of it was written or is still claimed: the small one goes again.
  EXPECT_TRUE(Export("small").status.ok());
}

// A chunk is at most 1 MiB of data, however large a message the server
// takes: a larger one is refused before it is parsed (the stated memory
// overhead counts 1 MiB per import).
TEST_F(FilterServiceTransferTest, ImportChunksOfMoreThanOneMiBOfDataAreRefused) {
  server::ServerConfig config = testing::TestConfig(dir_.path());
  config.max_message_bytes = 4 << 20;
  StartServer(config);
  const auto big = Import("g", std::string(2 << 20, 'x'), 2 << 20);
  EXPECT_EQ(big.status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_THAT(big.status.error_message(),
              HasSubstr("import chunk 1 is a message of 2097"));  // Its data and framing.
  EXPECT_THAT(big.status.error_message(), HasSubstr("chunks are at most 1048576 bytes of data"));
  // 1 MiB chunks, what the clients here send, are taken (and these bytes
  // are no snapshot).
  const auto mib = Import("g", std::string(2 << 20, 'x'), 1 << 20);
  EXPECT_NE(mib.status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_THAT(mib.status.error_message(), HasSubstr("the snapshot sent for filter \"g\""));
}

}  // namespace
}  // namespace cuckoo

namespace cuckoo {
namespace {

// The request window survives restarts and crashes: its ids are kept with
// the write-ahead log (and in REQUESTS across the log's truncation).
class RequestIdRestartTest : public FilterServiceTest {
 protected:
  // What a kill -9 leaves: the data directory as it is now, copied while
  // nothing writes to it.
  std::string CopyOf(const std::string& dir, const std::string& label) {
    const std::string copy = copies_.path() + "/" + label;
    fs::copy(dir, copy, fs::copy_options::recursive);
    return copy;
  }
  // Two copies of every key, then a Delete of them all with `id`.
  Reply<v1::DeleteResponse> InsertTwiceThenDelete(const std::vector<std::string>& keys,
                                                  const std::string& id) {
    EXPECT_TRUE(Insert("f", keys).status.ok());
    EXPECT_TRUE(Insert("f", keys).status.ok());
    auto del = WithKeys<v1::DeleteRequest>("f", keys);
    del.set_request_id(id);
    return Call(&v1::FilterService::Stub::Delete, del);
  }
  Reply<v1::DeleteResponse> Retry(const std::vector<std::string>& keys, const std::string& id) {
    auto del = WithKeys<v1::DeleteRequest>("f", keys);
    del.set_request_id(id);
    return Call(&v1::FilterService::Stub::Delete, del);
  }
  void ExpectSameAnswer(const Reply<v1::DeleteResponse>& retry,
                        const Reply<v1::DeleteResponse>& first) {
    ASSERT_TRUE(retry.status.ok()) << retry.status.error_message();
    EXPECT_EQ(retry.response.log_position(), first.response.log_position());
    EXPECT_EQ(retry.response.deleted(), first.response.deleted());
    EXPECT_EQ(retry.response.not_found(), first.response.not_found());
    EXPECT_TRUE(std::equal(retry.response.results().begin(), retry.response.results().end(),
                           first.response.results().begin(), first.response.results().end()));
  }
  // Every key still has one copy.
  void ExpectOneCopyOfEach(const std::vector<std::string>& keys) {
    const auto found = Lookup("f", keys);
    ASSERT_TRUE(found.status.ok()) << found.status.error_message();
    size_t missing = 0;
    for (bool p : found.response.present()) missing += !p;
    EXPECT_EQ(missing, 0u) << "a retried Delete removed a second copy";
    const auto counts = Count("f", keys);
    size_t none = 0;
    for (uint32_t n : counts.response.counts()) none += n == 0;
    EXPECT_EQ(none, 0u);
  }

  testing::TempDir copies_;
};

TEST_F(RequestIdRestartTest, ARetriedDeleteAfterACrashIsAnsweredWithTheFirstResultsNotApplied) {
  ASSERT_TRUE(Create("f", 10'000).status.ok());
  const std::vector<std::string> keys = Keys(21, 300);
  const auto first = InsertTwiceThenDelete(keys, "del-x");
  ASSERT_TRUE(first.status.ok()) << first.status.error_message();
  ASSERT_EQ(first.response.deleted(), keys.size());
  // A crash right after the answer: no final snapshot, the log as written.
  StartServer(testing::TestConfig(CopyOf(dir_.path(), "crashed")));
  ExpectSameAnswer(Retry(keys, "del-x"), first);
  ExpectOneCopyOfEach(keys);
  EXPECT_EQ(Get("f").response.filter().items(), keys.size());
  // And a plain restart after that (final snapshot, the log truncated).
  StartServer(testing::TestConfig(copies_.path() + "/crashed"));
  ExpectSameAnswer(Retry(keys, "del-x"), first);
  ExpectOneCopyOfEach(keys);
  // Another id is another request.
  EXPECT_EQ(Retry(keys, "del-y").response.deleted(), keys.size());
}

TEST_F(RequestIdRestartTest, ARetriedDeleteAfterASnapshotTruncatedTheLogIsNotAppliedAgain) {
  server::ServerConfig config = testing::TestConfig(dir_.path());
  config.wal_segment_bytes = server::kWalMinSegmentBytes;
  StartServer(config);
  ASSERT_TRUE(Create("f", 100'000).status.ok());
  const std::vector<std::string> keys = Keys(22, 300);
  const auto first = InsertTwiceThenDelete(keys, "del-x");
  ASSERT_TRUE(first.status.ok()) << first.status.error_message();
  // Enough writes to leave the segment of the Delete's records behind, then
  // a snapshot: the log is truncated past them.
  for (int i = 0; i < 60; ++i) ASSERT_TRUE(Insert("f", Keys(1000 + i, 1000)).status.ok());
  v1::SnapshotRequest snap;
  ASSERT_TRUE(Call(&v1::FilterService::Stub::Snapshot, snap).status.ok());
  EXPECT_FALSE(fs::exists(dir_.path() + "/wal/0000000000000001.wal"))
      << "the log was not truncated past the Delete's records";
  EXPECT_TRUE(fs::exists(dir_.path() + "/REQUESTS"));
  StartServer(testing::TestConfig(CopyOf(dir_.path(), "crashed")));
  ExpectSameAnswer(Retry(keys, "del-x"), first);
  ExpectOneCopyOfEach(keys);
}

// Inserts too: a retried Insert adds no second copy.
TEST_F(RequestIdRestartTest, ARetriedInsertAfterACrashAddsNoSecondCopy) {
  ASSERT_TRUE(Create("f", 10'000).status.ok());
  auto ins = WithKeys<v1::InsertRequest>("f", Keys(23, 100));
  ins.set_request_id("ins-x");
  const auto first = Call(&v1::FilterService::Stub::Insert, ins);
  ASSERT_TRUE(first.status.ok()) << first.status.error_message();
  StartServer(testing::TestConfig(CopyOf(dir_.path(), "crashed")));
  const auto retry = Call(&v1::FilterService::Stub::Insert, ins);
  ASSERT_TRUE(retry.status.ok()) << retry.status.error_message();
  EXPECT_EQ(retry.response.log_position(), first.response.log_position());
  EXPECT_EQ(retry.response.inserted(), 100u);
  EXPECT_EQ(Get("f").response.filter().items(), 100u);
}

// A crash that drops what was not fdatasync'ed (FaultWalEnv's power cut,
// keeping unsynced pages at random, and failing fdatasyncs from some point
// on so that a batch is cut between group commits) never leaves a durable
// write of a request without its id: a retry is answered with the first
// try's results, or refused as in doubt (ABORTED), or, when nothing of it
// was durable, applied; never applied twice.
TEST_F(RequestIdRestartTest, APowerCutNeverLeavesADurableWriteWithoutItsRequestId) {
  int in_doubt = 0, answered = 0, applied_anew = 0;
  for (int round = 0; round < 8; ++round) {
    SCOPED_TRACE(round);
    const std::string dir = copies_.path() + "/round" + std::to_string(round);
    fs::create_directories(dir);
    server::testing::FaultWalEnv env;
    server::PersistenceOptions hooks;
    hooks.wal.env = &env;
    hooks.wal.on_failure = [](const absl::Status&) {};  // Not the process's exit.
    server::ServerConfig config = testing::TestConfig(dir);
    config.max_batch_keys = 10'000;
    config.max_message_bytes = 4 << 20;
    // 1 MiB segments hold the round's ~160 KiB of records as one 64 MiB
    // segment does, and the fault env copies, reads back and compares far
    // less at each start and cut (most of a round's time with 64 MiB).
    config.wal_segment_bytes = uint64_t{1} << 20;
    StartServer(config, hooks);
    ASSERT_TRUE(Create("f", 100'000).status.ok());
    const std::vector<std::string> keys = Keys(30 + round, 10'000);
    ASSERT_TRUE(Insert("f", keys).status.ok());
    ASSERT_TRUE(Insert("f", keys).status.ok());
    // From the (round % 3)-th fdatasync on, every one fails.
    std::atomic<int> syncs{0};
    const int allowed = round % 3;
    env.SetFail([&](const std::string& op, const std::string&) {
      return op == "sync" && syncs.fetch_add(1) >= allowed ? EIO : 0;
    });
    auto del = WithKeys<v1::DeleteRequest>("f", keys);
    del.set_request_id("cut-" + std::to_string(round));
    const auto first = Call(&v1::FilterService::Stub::Delete, del);
    env.PowerCut(round < 4 ? 0.0 : 0.5, round + 1);
    server_.reset();
    env.Revive();
    env.SetFail(nullptr);
    StartServer(config, hooks);
    const auto retry = Call(&v1::FilterService::Stub::Delete, del);
    if (first.status.ok()) {
      ExpectSameAnswer(retry, first);
      ++answered;
    } else if (retry.status.error_code() == grpc::StatusCode::ABORTED) {
      EXPECT_THAT(retry.status.error_message(), HasSubstr("may have been applied in part"));
      ++in_doubt;
    } else {
      ASSERT_TRUE(retry.status.ok()) << retry.status.error_message();
      ++applied_anew;
    }
    ExpectOneCopyOfEach(keys);
    server_.reset();
  }
  std::cout << in_doubt << " rounds in doubt, " << answered << " answered from the window, "
            << applied_anew << " applied anew\n";
  EXPECT_GT(in_doubt, 0) << "no round cut a Delete part-way";
}

// Snapshots are written through the log's Env (base/env.h), so the power
// cut that drops what was not fdatasync'ed covers them too: cut while the
// second snapshot's temporary file is synced, as it is renamed over the
// first, as the directory is synced, or just after it completed (keeping
// unsynced pages at random in every other round). Every write acknowledged
// before the cut is there after the restart, whichever file survived.
TEST_F(RequestIdRestartTest, APowerCutDuringOrAfterASnapshotLosesNoAcknowledgedWrite) {
  const char* const kCutAt[] = {"sync", "rename", "syncdir", "after"};
  for (int round = 0; round < 4; ++round) {
    const std::string cut_at = kCutAt[round];
    SCOPED_TRACE(absl::StrCat("round ", round, ", cut at ", cut_at));
    const std::string dir = copies_.path() + "/snapshot-cut" + std::to_string(round);
    fs::create_directories(dir);
    server::testing::FaultWalEnv env;
    server::PersistenceOptions hooks;
    hooks.wal.env = &env;
    hooks.wal.on_failure = [](const absl::Status&) {};  // Not the process's exit.
    // The server goes before the env it writes through, however the round ends.
    struct StopFirst {
      std::unique_ptr<server::CuckooServer>* server;
      ~StopFirst() { server->reset(); }
    } stop_first{&server_};
    server::ServerConfig config = testing::TestConfig(dir);
    config.max_batch_keys = 10'000;
    config.wal_segment_bytes = uint64_t{1} << 20;  // As above: the records fit.
    StartServer(config, hooks);
    ASSERT_TRUE(Create("f", 100'000).status.ok());
    const std::vector<std::string> first = Keys(60 + round, 5'000);
    ASSERT_TRUE(Insert("f", first).status.ok());
    v1::SnapshotRequest snap;
    ASSERT_TRUE(Call(&v1::FilterService::Stub::Snapshot, snap).status.ok());
    const std::vector<std::string> second = Keys(80 + round, 5'000);
    ASSERT_TRUE(Insert("f", second).status.ok());
    const double keep = round % 2 == 0 ? 0.0 : 0.5;
    std::atomic<bool> cut{false};
    std::atomic<bool> renamed{false};
    env.SetFail([&](const std::string& op, const std::string& path) {
      if (cut) return 0;
      const bool temporary = absl::StrContains(path, kSnapshotTempSuffix);
      if (op == "rename" && temporary) renamed = true;
      const bool here = (cut_at == "sync" && op == "sync" && temporary) ||
                        (cut_at == "rename" && op == "rename" && temporary) ||
                        (cut_at == "syncdir" && op == "syncdir" && renamed);
      if (!here) return 0;
      cut = true;
      env.PowerCut(keep, round + 1);
      return EIO;
    });
    const auto second_snapshot = Call(&v1::FilterService::Stub::Snapshot, snap);
    if (cut_at == "after") {
      ASSERT_TRUE(second_snapshot.status.ok()) << second_snapshot.status.error_message();
      env.PowerCut(keep, round + 1);
    } else {
      EXPECT_TRUE(cut) << "the snapshot never reached the cut";
      EXPECT_FALSE(second_snapshot.status.ok());
    }
    server_.reset();
    env.Revive();
    env.SetFail(nullptr);
    StartServer(config, hooks);
    for (const std::vector<std::string>* keys : {&first, &second}) {
      const auto found = Lookup("f", *keys);
      ASSERT_TRUE(found.status.ok()) << found.status.error_message();
      size_t missing = 0;
      for (bool p : found.response.present()) missing += !p;
      EXPECT_EQ(missing, 0u) << "acknowledged keys lost";
    }
    server_.reset();
  }
}

}  // namespace
}  // namespace cuckoo
