// The hand-written wire format against the generated code, which is the
// oracle: whatever bytes the generated parser accepts, ParseKeysRequest must
// read identically, and every response must be byte-for-byte what the
// generated serializer writes.
#include "server/wire_format.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "cuckoo/v1/filter_service.pb.h"

namespace cuckoo::server::wire {
namespace {

using ::testing::HasSubstr;

std::string Bytes(const grpc::ByteBuffer& b) {
  grpc::Slice slice;
  std::string storage;
  return std::string(Flatten(b, &slice, &storage));
}

std::string RandomBytes(std::mt19937_64& rng, size_t max_len) {
  std::string s(rng() % (max_len + 1), '\0');
  for (char& c : s) c = static_cast<char>(rng());
  return s;
}

v1::InsertRequest RandomRequest(std::mt19937_64& rng) {
  v1::InsertRequest req;
  if (rng() % 4 != 0) req.set_filter("filter-" + std::to_string(rng() % 1000));
  const size_t n = rng() % 300;
  for (size_t i = 0; i < n; ++i) req.add_keys(RandomBytes(rng, rng() % 16 == 0 ? 5000 : 24));
  req.set_if_absent(rng() % 2 == 0);
  return req;
}

// Checks `bytes` against the generated parser: when it accepts them, ours
// must too, with the same contents.
void ExpectSameAsGenerated(const std::string& bytes) {
  v1::InsertRequest oracle;
  const bool generated_ok = oracle.ParseFromString(bytes);
  KeysRequest ours;
  absl::Status s = ParseKeysRequest(bytes, "InsertRequest", &ours);
  if (!generated_ok)
    return;  // Ours may accept more (e.g. non-UTF-8 names): names are checked later.
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ(ours.filter, oracle.filter());
  ASSERT_EQ(ours.keys.size(), static_cast<size_t>(oracle.keys_size()));
  for (int i = 0; i < oracle.keys_size(); ++i) ASSERT_EQ(ours.keys[i], oracle.keys(i)) << i;
  EXPECT_EQ(ours.if_absent, oracle.if_absent());
}

TEST(WireFormatTest, RequestsParseAsTheGeneratedCodeParsesThem) {
  std::mt19937_64 rng(1);
  for (int i = 0; i < 300; ++i) ExpectSameAsGenerated(RandomRequest(rng).SerializeAsString());
}

TEST(WireFormatTest, ConcatenatedMessagesMergeLikeProtobuf) {
  // Two messages back to back are one merged message: keys accumulate, the
  // last filter and if_absent win.
  v1::InsertRequest a, b;
  a.set_filter("first");
  a.add_keys("k1");
  a.set_if_absent(true);
  b.set_filter("second");
  b.add_keys("k2");
  const std::string bytes = a.SerializeAsString() + b.SerializeAsString();
  KeysRequest r;
  ASSERT_TRUE(ParseKeysRequest(bytes, "InsertRequest", &r).ok());
  EXPECT_EQ(r.filter, "second");
  EXPECT_THAT(r.keys, ::testing::ElementsAre("k1", "k2"));
  EXPECT_TRUE(r.if_absent);  // b left it at false, which is not on the wire.
  ExpectSameAsGenerated(bytes);
}

TEST(WireFormatTest, UnknownFieldsOfEveryWireTypeAreSkipped) {
  v1::InsertRequest req;
  req.set_filter("f");
  req.add_keys("a");
  req.add_keys("b");
  // Field 9 as varint, 64-bit, length-delimited and 32-bit; field 2 (keys)
  // with the wrong wire type (varint), which protobuf treats as unknown.
  const std::string unknown = std::string("\x48\x96\x01", 3) + std::string("\x49", 1) +
                              std::string(8, '\x07') + std::string("\x4a\x03xyz", 5) +
                              std::string("\x4d\x01\x02\x03\x04", 5) + std::string("\x10\x05", 2);
  const std::string bytes = unknown + req.SerializeAsString() + unknown;
  KeysRequest r;
  ASSERT_TRUE(ParseKeysRequest(bytes, "InsertRequest", &r).ok());
  EXPECT_EQ(r.filter, "f");
  EXPECT_THAT(r.keys, ::testing::ElementsAre("a", "b"));
  ExpectSameAsGenerated(bytes);
}

TEST(WireFormatTest, MutatedRequestsAreReadLikeTheGeneratedCodeOrRejected) {
  std::mt19937_64 rng(2);
  int rejected = 0;
  for (int i = 0; i < 3000; ++i) {
    std::string bytes = RandomRequest(rng).SerializeAsString();
    if (bytes.empty()) continue;
    switch (rng() % 3) {
      case 0:
        bytes.resize(rng() % bytes.size());  // Truncate.
        break;
      case 1:
        bytes[rng() % bytes.size()] ^= static_cast<char>(1 << (rng() % 8));  // Flip a bit.
        break;
      default:
        bytes.insert(rng() % bytes.size(), RandomBytes(rng, 8));  // Insert garbage.
    }
    ExpectSameAsGenerated(bytes);
    KeysRequest r;
    rejected += !ParseKeysRequest(bytes, "InsertRequest", &r).ok();
  }
  EXPECT_GT(rejected, 100);  // The mutations do produce malformed input.
}

TEST(WireFormatTest, MalformedRequestsAreInvalidArgumentNamingTheMessage) {
  KeysRequest r;
  // A key that claims 100 bytes but has 2.
  absl::Status s = ParseKeysRequest(std::string("\x12\x64zz", 4), "LookupRequest", &r);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("not a valid cuckoo.v1.LookupRequest"));
  EXPECT_THAT(std::string(s.message()), HasSubstr("truncated key"));
  // Field number 0 is not a valid tag.
  s = ParseKeysRequest(std::string("\x00\x01", 2), "CountRequest", &r);
  EXPECT_THAT(std::string(s.message()), HasSubstr("malformed field tag"));
  // A truncated varint.
  s = ParseKeysRequest(std::string("\x18\xff", 2), "InsertRequest", &r);
  EXPECT_THAT(std::string(s.message()), HasSubstr("truncated if_absent"));
}

TEST(WireFormatTest, EmptyRequestParsesToNothing) {
  KeysRequest r;
  r.keys.push_back("stale");
  ASSERT_TRUE(ParseKeysRequest("", "LookupRequest", &r).ok());
  EXPECT_TRUE(r.filter.empty());
  EXPECT_TRUE(r.keys.empty());
  EXPECT_FALSE(r.if_absent);
}

TEST(WireFormatTest, ResponsesAreByteForByteWhatGeneratedCodeWrites) {
  std::mt19937_64 rng(3);
  for (size_t n : {size_t{0}, size_t{1}, size_t{127}, size_t{128}, size_t{1000}, size_t{20000}}) {
    std::vector<InsertResult> ins(n);
    std::vector<DeleteResult> del(n);
    std::unique_ptr<bool[]> present(new bool[n + 1]);
    std::vector<uint32_t> counts(n);
    v1::InsertResponse ei;
    v1::DeleteResponse ed;
    v1::LookupResponse el;
    v1::CountResponse ec;
    for (size_t i = 0; i < n; ++i) {
      ins[i] = static_cast<InsertResult>(rng() % 3);
      del[i] = static_cast<DeleteResult>(rng() % 2);
      present[i] = rng() % 2;
      counts[i] = rng() % 4 == 0 ? static_cast<uint32_t>(rng()) : static_cast<uint32_t>(rng() % 9);
      ei.add_results(static_cast<v1::InsertResult>(static_cast<int>(ins[i]) + 1));
      ed.add_results(static_cast<v1::DeleteResult>(static_cast<int>(del[i]) + 1));
      el.add_present(present[i]);
      ec.add_counts(counts[i]);
      (ins[i] == InsertResult::kInserted         ? ei.set_inserted(ei.inserted() + 1)
       : ins[i] == InsertResult::kAlreadyPresent ? ei.set_already_present(ei.already_present() + 1)
                                                 : ei.set_full(ei.full() + 1));
      del[i] == DeleteResult::kDeleted ? ed.set_deleted(ed.deleted() + 1)
                                       : ed.set_not_found(ed.not_found() + 1);
      el.set_present_count(el.present_count() + present[i]);
    }
    EXPECT_EQ(Bytes(InsertResponse(ins)), ei.SerializeAsString()) << n;
    EXPECT_EQ(Bytes(DeleteResponse(del)), ed.SerializeAsString()) << n;
    EXPECT_EQ(Bytes(LookupResponse(absl::MakeConstSpan(present.get(), n))), el.SerializeAsString())
        << n;
    EXPECT_EQ(Bytes(CountResponse(counts)), ec.SerializeAsString()) << n;
  }
}

TEST(WireFormatTest, FlattenUsesASingleSliceInPlaceAndJoinsSeveral) {
  grpc::Slice one("hello world");
  grpc::ByteBuffer single(&one, 1);
  grpc::Slice held;
  std::string storage;
  std::string_view v = Flatten(single, &held, &storage);
  EXPECT_EQ(v, "hello world");
  EXPECT_TRUE(storage.empty());  // No copy.

  grpc::Slice parts[] = {grpc::Slice("ab"), grpc::Slice("cde"), grpc::Slice("f")};
  grpc::ByteBuffer several(parts, 3);
  EXPECT_EQ(Flatten(several, &held, &storage), "abcdef");
}

}  // namespace
}  // namespace cuckoo::server::wire
