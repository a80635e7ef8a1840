// The hand-written wire format against the generated code, which is the
// oracle: ParseKeysRequest must accept exactly the bytes that the generated
// parser (protobuf 3.21) accepts, read the same values from them however the
// message is cut into slices, and enforce the server's limits as it goes;
// every response must be byte-for-byte what the generated serializer writes.
#include "server/service/wire_format.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <iterator>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "cuckoo/v1/filter_service.pb.h"
#include "tests/fuzz/wire_differential.h"

namespace cuckoo::server::wire {
namespace {

using ::cuckoo::testing::Chunked;
using ::cuckoo::testing::DiffAgainstGenerated;
using ::cuckoo::testing::DiffWithLimits;
using ::cuckoo::testing::GeneratedParse;
using ::cuckoo::testing::Show;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::StartsWith;

constexpr KeysRequestLimits kServerLimits = {
    .max_keys = 1000, .min_key_bytes = 1, .max_key_bytes = 64, .max_filter_bytes = 128};

std::string Bytes(const grpc::ByteBuffer& b) {
  std::vector<grpc::Slice> slices;
  std::vector<std::string_view> views;
  EXPECT_TRUE(Slices(b, &slices, &views).ok());
  std::string out;
  for (std::string_view v : views) out.append(v);
  return out;
}

std::string S(const char* s, size_t n) { return std::string(s, n); }

// A varint of `len` bytes (at least the minimal length) for `v`.
std::string Varint(uint64_t v, int len = 0) {
  std::string out;
  do {
    const uint8_t low = v & 0x7f;
    v >>= 7;
    const bool more = v != 0 || static_cast<int>(out.size()) + 1 < len;
    out.push_back(static_cast<char>(low | (more ? 0x80 : 0)));
    if (!more) break;
  } while (true);
  return out;
}

std::string Field(uint32_t field, int type, std::string_view payload = {}) {
  std::string out = Varint((uint64_t{field} << 3) | static_cast<uint32_t>(type));
  if (type == 2) out += Varint(payload.size());
  out.append(payload);
  return out;
}

// Checks `bytes` against the generated parser, whole and cut at `cuts`.
void ExpectSameAsGenerated(const std::string& bytes, const std::vector<size_t>& cuts = {}) {
  KeysRequest ours;
  EXPECT_EQ(DiffAgainstGenerated(bytes, {}, &ours), "") << Show(bytes);
  if (!cuts.empty()) {
    EXPECT_EQ(DiffAgainstGenerated(bytes, cuts, &ours), "") << Show(bytes);
  }
}

bool GeneratedAccepts(const std::string& bytes) {
  v1::InsertRequest r;
  return GeneratedParse(bytes, &r);
}

// Expects both parsers to accept `bytes` (or both to refuse them), at every
// single cut too.
void ExpectBoth(bool accepted, const std::string& bytes) {
  EXPECT_EQ(GeneratedAccepts(bytes), accepted) << Show(bytes);
  KeysRequest r;
  EXPECT_EQ(ParseKeysRequest(bytes, "InsertRequest", kNoLimits, &r).ok(), accepted) << Show(bytes);
  for (size_t cut = 0; cut <= bytes.size(); ++cut) {
    EXPECT_EQ(DiffAgainstGenerated(bytes, {cut}, &r), "") << Show(bytes) << " cut at " << cut;
  }
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
  if (rng() % 2 == 0) req.set_request_id("req-" + std::to_string(rng()));
  if (rng() % 2 == 0) req.set_min_log_position(rng() >> (rng() % 64));
  return req;
}

std::vector<size_t> RandomCuts(std::mt19937_64& rng, size_t size) {
  std::vector<size_t> cuts(rng() % 6);
  for (size_t& c : cuts) c = rng() % (size + 1);
  return cuts;
}

// Random fields built to reach the parser's edges: every wire type, field
// numbers 0 to 2^29-1, non-minimal and over-long varints, wrong lengths,
// invalid UTF-8, nested and mismatched groups.
class FieldGenerator {
 public:
  explicit FieldGenerator(uint64_t seed) : rng_(seed) {}

  std::string Message() {
    std::string out;
    const int n = static_cast<int>(rng_() % 8);
    for (int i = 0; i < n; ++i) out += AnyField(0);
    if (Chance(20)) out += DeepGroups(98 + static_cast<int>(rng_() % 5));
    return out;
  }

 private:
  bool Chance(int percent) { return static_cast<int>(rng_() % 100) < percent; }

  std::string Tag(uint32_t field, uint32_t type) {
    const uint32_t tag = (field << 3) | type;
    if (Chance(80)) return Varint(tag);
    if (Chance(50)) return Varint(tag, 1 + static_cast<int>(rng_() % 6));  // Up to one too long.
    // Five bytes with junk past bit 32 (dropped by protobuf).
    std::string t = Varint(tag, 5);
    t[4] = static_cast<char>((t[4] & 0x0f) | ((rng_() % 8) << 4));
    return t;
  }

  std::string Number() {
    uint64_t v = rng_();
    switch (rng_() % 4) {
      case 0:
        v &= 1;
        break;
      case 1:
        v &= 0xff;
        break;
      default:
        break;
    }
    const int min = static_cast<int>(Varint(v).size());
    if (Chance(75)) return Varint(v);
    if (Chance(60)) return Varint(v, min + static_cast<int>(rng_() % (12 - min)));  // To 11 bytes.
    std::string t = Varint(v, 10);  // A tenth byte with more than one bit.
    t[9] = static_cast<char>(rng_() % 128);
    return t;
  }

  std::string Payload(uint32_t field) {
    std::string p;
    const size_t n = rng_() % 12;
    if (field == 1 && Chance(70)) {
      static const char* const kUtf8[] = {"a", "Z", "\xc3\xa9", "\xe2\x82\xac", "\xf0\x9f\x98\x80"};
      for (size_t i = 0; i < n; ++i) p += kUtf8[rng_() % 5];
      return p;
    }
    for (size_t i = 0; i < n; ++i) p.push_back(static_cast<char>(rng_()));
    return p;
  }

  std::string LengthDelimited(uint32_t field) {
    const std::string p = Payload(field);
    uint64_t len = p.size();
    if (Chance(8)) len += rng_() % 3;
    if (Chance(3)) len = uint64_t{1} << (28 + rng_() % 8);
    std::string prefix = Chance(90) ? Varint(len) : Varint(len, 1 + static_cast<int>(rng_() % 6));
    return prefix + p;
  }

  std::string AnyField(int depth) {
    static const uint32_t kFields[] = {1, 1, 2, 2, 2, 3, 3, 0, 4, 5, 15, 16, 2047, (1u << 29) - 1};
    const uint32_t field = kFields[rng_() % std::size(kFields)];
    uint32_t type;
    if (Chance(70) && field >= 1 && field <= 3) {
      type = field == 3 ? 0 : 2;
    } else {
      type = static_cast<uint32_t>(rng_() % 8);
    }
    std::string out = Tag(field, type);
    switch (type) {
      case 0:
        return out + Number();
      case 1:
        return out + RandomBytes(rng_, Chance(90) ? 0 : 7).append(Chance(90) ? 8 : 0, 'x');
      case 2:
        return out + LengthDelimited(field);
      case 3: {
        if (depth < 5) {
          const int n = static_cast<int>(rng_() % 4);
          for (int i = 0; i < n; ++i) out += AnyField(depth + 1);
        }
        if (Chance(85)) out += Tag(field, 4);
        if (Chance(5)) out += Tag(field + 1, 4);
        return out;
      }
      case 5:
        return out + std::string(Chance(90) ? 4 : rng_() % 4, 'y');
      default:
        return out;
    }
  }

  std::string DeepGroups(int depth) {
    std::string open, close;
    for (int i = 0; i < depth; ++i) {
      open += Tag(5 + i % 3, 3);
      close = Tag(5 + i % 3, 4) + close;
    }
    return open + (Chance(50) ? Field(2, 2, "in") : "") + close;
  }

  std::mt19937_64 rng_;
};

TEST(WireFormatTest, RequestsParseAsTheGeneratedCodeParsesThem) {
  std::mt19937_64 rng(1);
  for (int i = 0; i < 300; ++i) {
    const std::string bytes = RandomRequest(rng).SerializeAsString();
    ExpectSameAsGenerated(bytes, RandomCuts(rng, bytes.size()));
  }
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
  ASSERT_TRUE(ParseKeysRequest(bytes, "InsertRequest", kNoLimits, &r).ok());
  EXPECT_EQ(r.filter, "second");
  EXPECT_THAT(r.keys, ElementsAre("k1", "k2"));
  EXPECT_TRUE(r.if_absent);  // b left it at false, which is not on the wire.
  ExpectSameAsGenerated(bytes);
}

TEST(WireFormatTest, UnknownFieldsOfEveryWireTypeAreSkipped) {
  v1::InsertRequest req;
  req.set_filter("f");
  req.add_keys("a");
  req.add_keys("b");
  // Field 9 as varint, 64-bit, length-delimited, 32-bit and a group holding
  // one of each; field 2 (keys) with the wrong wire type (varint), which
  // protobuf treats as unknown.
  const std::string unknown = S("\x48\x96\x01", 3) + S("\x49", 1) + std::string(8, '\x07') +
                              S("\x4a\x03xyz", 5) + S("\x4d\x01\x02\x03\x04", 5) +
                              S("\x4b\x48\x01\x4a\x00\x4c", 6) + S("\x10\x05", 2);
  const std::string bytes = unknown + req.SerializeAsString() + unknown;
  KeysRequest r;
  ASSERT_TRUE(ParseKeysRequest(bytes, "InsertRequest", kNoLimits, &r).ok());
  EXPECT_EQ(r.filter, "f");
  EXPECT_THAT(r.keys, ElementsAre("a", "b"));
  ExpectBoth(true, bytes);
}

TEST(WireFormatTest, LengthVarintOverThirtyTwoBitsIsRejectedAsTheGeneratedParserDoes) {
  // The old parser read 81 80 80 80 10 as 1 (ReadVarint32 truncates) and
  // accepted key "k". Protobuf's ReadSize allows 5 bytes whose value is at
  // most INT_MAX - 16, so a fifth byte of 8 or more is an error.
  ExpectBoth(false, S("\x12\x81\x80\x80\x80\x10\x6b", 7));
  ExpectBoth(false, S("\x12\x81\x80\x80\x80\x07\x6b", 7));      // 2^30 * 7 + 1: > INT_MAX - 16.
  ExpectBoth(false, S("\x12\x81\x80\x80\x80\x80\x00\x6b", 8));  // Six bytes.
  ExpectBoth(true, S("\x12\x81\x80\x80\x80\x00\x6b", 7));       // Five bytes, value 1.
  ExpectBoth(false, S("\x0a\xff\xff\xff\xff\x07", 6));          // Filter length INT_MAX.
  ExpectBoth(false, S("\x2a\xef\xff\xff\xff\x07", 6));          // Unknown: INT_MAX - 16, truncated.
}

TEST(WireFormatTest, TrailingZeroTagIsRejected) {
  ExpectBoth(false, S("\x12\x01k\x00", 4));
  ExpectBoth(false, S("\x00", 1));
  ExpectBoth(false, S("\x00\x12\x01k", 4));
  ExpectBoth(false, S("\x2b\x00\x2c", 3));  // Inside a group too.
  ExpectBoth(false, S("\x80\x00", 2));      // Zero, non-minimally encoded.
}

TEST(WireFormatTest, TagsAreAtMostFiveBytesAndDropBitsPastThirtyTwo) {
  ExpectBoth(true, S("\x92\x00\x01k", 4));                     // Tag 18 in two bytes.
  ExpectBoth(true, S("\x92\x80\x80\x80\x00\x01k", 7));         // In five.
  ExpectBoth(true, S("\x92\x80\x80\x80\x70\x01k", 7));         // Bits 32-34 set: still 18.
  ExpectBoth(false, S("\x92\x80\x80\x80\x80\x00\x01k", 8));    // Six bytes.
  ExpectBoth(false, S("\x92", 1));                             // Truncated.
  ExpectBoth(true, S("\xf8\xff\xff\xff\x0f\x00", 6));          // Largest field number, varint.
  const std::string five = S("\x92\x80\x80\x80\x70\x01k", 7);  // The views point into it.
  KeysRequest r;
  ASSERT_TRUE(ParseKeysRequest(five, "X", kNoLimits, &r).ok());
  EXPECT_THAT(r.keys, ElementsAre("k"));
}

TEST(WireFormatTest, TenthVarintByteKeepsOnlyItsLowBit) {
  // Protobuf 3.21 reads up to ten bytes and drops bits past the 64th: a
  // tenth byte of 02 adds nothing, so if_absent is false.
  const std::string prefix = S("\x18\x80\x80\x80\x80\x80\x80\x80\x80\x80", 10);
  for (int last : {0x00, 0x01, 0x02, 0x7e, 0x7f}) {
    const std::string bytes = prefix + static_cast<char>(last);
    ExpectBoth(true, bytes);
    KeysRequest r;
    ASSERT_TRUE(ParseKeysRequest(bytes, "InsertRequest", kNoLimits, &r).ok());
    EXPECT_EQ(r.if_absent, (last & 1) != 0) << last;
  }
  ExpectBoth(false, prefix + S("\x80\x01", 2));                           // Eleven bytes.
  ExpectBoth(false, S("\x28", 1) + prefix.substr(1) + S("\x80\x00", 2));  // Unknown field too.
  ExpectBoth(true, S("\x18\x02", 2));  // Any nonzero value is true.
}

TEST(WireFormatTest, FieldNumberZeroAndWireTypesSixAndSevenAreRejected) {
  for (const std::string& bytes :
       {S("\x02\x00", 2), S("\x01", 1) + std::string(8, 'x'), S("\x03\x04", 2), S("\x05xxxx", 5),
        S("\x0e", 1), S("\x0f", 1), S("\x16", 1), S("\xff\xff\xff\xff\x0f", 5)}) {
    ExpectBoth(false, bytes);
  }
}

TEST(WireFormatTest, EndGroupOutsideAGroupIsRejected) {
  ExpectBoth(false, S("\x0c", 1));  // Field 1.
  ExpectBoth(false, S("\x04", 1));  // Field 0.
  ExpectBoth(false, S("\x12\x01k\x2c", 4));
}

TEST(WireFormatTest, GroupsAreSkippedToTheirMatchingEndUpToDepthOneHundred) {
  auto nested = [](int depth) {
    std::string open, close;
    for (int i = 0; i < depth; ++i) {
      open += static_cast<char>(((5 + i % 2) << 3) | 3);
      close = static_cast<char>(((5 + i % 2) << 3) | 4) + close;
    }
    return open + Field(2, 2, "inside") + close;
  };
  ExpectBoth(true, nested(1));
  ExpectBoth(true, nested(100));  // ParseFromArray's recursion limit is 100 groups deep.
  ExpectBoth(false, nested(101));
  KeysRequest r;
  ASSERT_TRUE(ParseKeysRequest(nested(100), "InsertRequest", kNoLimits, &r).ok());
  EXPECT_TRUE(r.keys.empty());                  // Fields inside a group are the group's, not keys.
  ExpectBoth(false, S("\x2b\x34", 2));          // Ended by field 6's end tag.
  ExpectBoth(false, S("\x2b", 1));              // Never ended.
  ExpectBoth(false, S("\x2b\x12\x01k", 4));     // Never ended.
  ExpectBoth(true, S("\x0b\x0c\x12\x01k", 5));  // Field 1 as a group: unknown.
  ExpectBoth(true, S("\x2b\x33\x34\x2c\x12\x01k", 7));  // Nested, then a key.
  ExpectBoth(false, S("\x2b\x04", 2));                  // End tag of field 0.
}

TEST(WireFormatTest, FilterMustBeValidUtf8InEveryOccurrence) {
  ExpectBoth(false, S("\x0a\x01\xff\x0a\x01"
                      "a",
                      5));  // Overwritten later: still an error.
  ExpectBoth(false, S("\x0a\x01"
                      "a\x0a\x01\xff",
                      6));
  ExpectBoth(false, S("\x0a\x03\xed\xa0\x80", 5));      // A surrogate.
  ExpectBoth(false, S("\x0a\x02\xc0\x80", 4));          // Overlong.
  ExpectBoth(false, S("\x0a\x04\xf4\x90\x80\x80", 6));  // Past U+10FFFF.
  ExpectBoth(true, S("\x0a\x04\xf4\x8f\xbf\xbf", 6));   // U+10FFFF.
  ExpectBoth(true, S("\x12\x01\xff", 3));               // Keys are bytes.
  ExpectBoth(true, S("\x0a\x00", 2));
}

TEST(WireFormatTest, RepeatedFilterAndIfAbsentKeepTheLastValue) {
  const std::string bytes = Field(1, 2, "one") + Field(3, 0, "\x01") + Field(2, 2, "k") +
                            Field(1, 2, "two") + S("\x18\x00", 2);
  KeysRequest r;
  ASSERT_TRUE(ParseKeysRequest(bytes, "InsertRequest", kNoLimits, &r).ok());
  EXPECT_EQ(r.filter, "two");
  EXPECT_FALSE(r.if_absent);
  ExpectBoth(true, bytes);
}

TEST(WireFormatTest, KnownFieldsWithAnotherWireTypeAreSkippedAsUnknown) {
  const std::string bytes = S("\x1a\x01x", 3) + S("\x10\x05", 2) + S("\x08\x01", 2) + S("\x11", 1) +
                            std::string(8, 'z') + S("\x15zzzz", 5) + S("\x13\x14", 2);
  KeysRequest r;
  ASSERT_TRUE(ParseKeysRequest(bytes, "InsertRequest", kNoLimits, &r).ok());
  EXPECT_TRUE(r.keys.empty());
  EXPECT_FALSE(r.if_absent);
  ExpectBoth(true, bytes);
}

TEST(WireFormatTest, FixedWidthUnknownFieldsNeedAllTheirBytes) {
  ExpectBoth(false, S("\x2d\x01\x02\x03", 4));
  ExpectBoth(true, S("\x2d\x01\x02\x03\x04", 5));
  ExpectBoth(false, S("\x29", 1) + std::string(7, 'x'));
  ExpectBoth(true, S("\x29", 1) + std::string(8, 'x'));
  ExpectBoth(false, S("\x2a\x05"
                      "abc",
                      5));  // Length-delimited, short.
}

TEST(WireFormatTest, MutatedRequestsMatchTheGeneratedParser) {
  std::mt19937_64 rng(2);
  int rejected = 0;
  for (int i = 0; i < 4000; ++i) {
    std::string bytes = RandomRequest(rng).SerializeAsString();
    if (bytes.empty()) continue;
    switch (rng() % 4) {
      case 0:
        bytes.resize(rng() % bytes.size());  // Truncate.
        break;
      case 1:
        bytes[rng() % bytes.size()] ^= static_cast<char>(1 << (rng() % 8));  // Flip a bit.
        break;
      case 2:
        bytes[rng() % bytes.size()] = static_cast<char>(rng());  // Replace a byte.
        break;
      default:
        bytes.insert(rng() % bytes.size(), RandomBytes(rng, 8));  // Insert garbage.
    }
    ExpectSameAsGenerated(bytes, RandomCuts(rng, bytes.size()));
    rejected += !GeneratedAccepts(bytes);
  }
  EXPECT_GT(rejected, 300);  // The mutations do produce malformed input.
}

TEST(WireFormatTest, GeneratedEdgeCaseMessagesMatchTheGeneratedParser) {
  FieldGenerator gen(3);
  std::mt19937_64 rng(4);
  int accepted = 0, rejected = 0;
  for (int i = 0; i < 20000; ++i) {
    const std::string bytes = gen.Message();
    KeysRequest ours;
    ASSERT_EQ(DiffAgainstGenerated(bytes, RandomCuts(rng, bytes.size()), &ours), "") << Show(bytes);
    (GeneratedAccepts(bytes) ? accepted : rejected)++;
  }
  // Both outcomes are well represented.
  EXPECT_GT(accepted, 2000);
  EXPECT_GT(rejected, 2000);
}

TEST(WireFormatTest, EverySplitOfAMessageParsesTheSame) {
  v1::InsertRequest req;
  req.set_filter("f\xc3\xa9");
  req.add_keys("alpha");
  req.add_keys("");
  req.add_keys(std::string(130, 'k'));  // Two-byte length.
  req.set_if_absent(true);
  const std::string valid = req.SerializeAsString() + S("\x2b\x48\x01\x2c", 4);
  for (const std::string& bytes : {valid, valid.substr(0, valid.size() - 3),
                                   S("\x0a\x02\xc3\x28", 4), S("\x12\x81\x80\x80\x80\x10k", 7)}) {
    KeysRequest whole;
    const absl::Status want = ParseKeysRequest(bytes, "InsertRequest", kNoLimits, &whole);
    const std::vector<std::string> want_keys(whole.keys.begin(), whole.keys.end());
    const std::string want_filter(whole.filter);
    auto check = [&](const std::vector<size_t>& cuts) {
      const Chunked chunks(bytes, cuts);
      KeysRequest r;
      const absl::Status s = ParseKeysRequest(chunks.views(), "InsertRequest", kNoLimits, &r);
      ASSERT_EQ(s, want) << ::testing::PrintToString(cuts);  // Same offsets in errors too.
      ASSERT_EQ(r.filter, want_filter);
      ASSERT_THAT(r.keys, ::testing::ElementsAreArray(want_keys));
      ASSERT_EQ(r.if_absent, whole.if_absent);
    };
    for (size_t i = 0; i <= bytes.size(); ++i) {
      for (size_t j = i; j <= bytes.size(); ++j) check({i, j});
    }
    std::vector<size_t> every_byte, with_empties;
    for (size_t i = 1; i < bytes.size(); ++i) {
      every_byte.push_back(i);
      with_empties.insert(with_empties.end(), {i, i});
    }
    check(every_byte);
    check(with_empties);
    EXPECT_EQ(DiffAgainstGenerated(bytes, every_byte, &whole), "");
  }
}

TEST(WireFormatTest, FieldsStraddlingSliceBoundariesAreCopiedOnce) {
  // filter "name" at bytes 2-5, keys at 10-14 ("alpha"), 17-20 ("beta"),
  // 23-25 ("pen"), 28-30 ("sun").
  const std::string bytes = Field(1, 2, "name") + Field(3, 0, "\x01") + Field(2, 2, "alpha") +
                            Field(2, 2, "beta") + Field(2, 2, "pen") + Field(2, 2, "sun");
  // Cuts inside "name", "alpha" (twice: three chunks) and "pen"; "beta" and
  // "sun" stay whole, their length prefixes opening a chunk.
  const std::vector<size_t> cuts = {3, 11, 13, 16, 24, 28};
  const Chunked chunks(bytes, cuts);
  KeysRequest r;
  ASSERT_TRUE(ParseKeysRequest(chunks.views(), "InsertRequest", kNoLimits, &r).ok());
  EXPECT_EQ(r.filter, "name");
  ASSERT_THAT(r.keys, ElementsAre("alpha", "beta", "pen", "sun"));
  EXPECT_TRUE(r.arena.Owns(r.filter));
  EXPECT_TRUE(r.arena.Owns(r.keys[0]));
  EXPECT_TRUE(chunks.InOneChunk(r.keys[1]));
  EXPECT_TRUE(r.arena.Owns(r.keys[2]));
  EXPECT_TRUE(chunks.InOneChunk(r.keys[3]));
  EXPECT_EQ(r.arena.bytes_used(), 4u + 5u + 3u);  // Each straddling field once.

  // A field that straddles many chunks is one contiguous copy, and the
  // views handed out before it stay valid while the arena grows for it.
  const std::string big(3 * StraddleArena::kBlockBytes, 'b');
  const std::string more = bytes + Field(2, 2, big);
  std::vector<size_t> more_cuts = cuts;
  for (size_t c = bytes.size() + 5; c < more.size(); c += 1000) more_cuts.push_back(c);
  const Chunked many(more, more_cuts);
  ASSERT_TRUE(ParseKeysRequest(many.views(), "InsertRequest", kNoLimits, &r).ok());
  ASSERT_EQ(r.keys.size(), 5u);
  EXPECT_EQ(r.keys[4], big);
  EXPECT_EQ(r.filter, "name");
  EXPECT_EQ(r.keys[0], "alpha");
  EXPECT_EQ(r.arena.bytes_used(), 4u + 5u + 3u + big.size());
}

TEST(WireFormatTest, StopsAtTheFirstKeyPastTheBatchLimit) {
  std::string bytes = Field(1, 2, "f");
  for (int i = 0; i < 1001; ++i) bytes += Field(2, 2, "key");
  bytes += S("\xff\xff", 2);  // Malformed, but after the limit: never read.
  KeysRequest r;
  absl::Status s = ParseKeysRequest(bytes, "LookupRequest", kServerLimits, &r);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(),
            "batch has more than 1000 keys; the server's limit (--max-batch-keys) is 1000: split "
            "the batch");
  EXPECT_TRUE(r.keys.empty());  // Nothing left pointing into a refused request.
  EXPECT_LE(r.keys.capacity(), 2048u);
  // Exactly at the limit is fine.
  bytes.resize(bytes.size() - 2 - Field(2, 2, "key").size());
  ASSERT_TRUE(ParseKeysRequest(bytes, "LookupRequest", kServerLimits, &r).ok());
  EXPECT_EQ(r.keys.size(), 1000u);
}

TEST(WireFormatTest, KeyAndFilterLimitsNameTheFirstOffenderInWireOrder) {
  KeysRequest r;
  auto error = [&](const std::string& bytes, const KeysRequestLimits& limits = kServerLimits) {
    const absl::Status s = ParseKeysRequest(bytes, "InsertRequest", limits, &r);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
    return std::string(s.message());
  };
  const std::string k65(65, 'x');
  EXPECT_EQ(error(Field(2, 2, "a") + Field(2, 2, "") + Field(2, 2, k65)),
            "keys[1] is empty; keys must be 1 to 64 bytes");
  EXPECT_EQ(error(Field(2, 2, "a") + Field(2, 2, k65) + Field(2, 2, "")),
            "keys[1] is 65 bytes; the server's limit (--max-key-bytes) is 64");
  EXPECT_EQ(error(Field(1, 2, std::string(129, 'f')) + Field(2, 2, "")),
            "filter name is 129 bytes; at most 128 are allowed");
  EXPECT_EQ(error(Field(2, 2, "") + Field(1, 2, std::string(129, 'f'))),
            "keys[0] is empty; keys must be 1 to 64 bytes");
  // An oversize filter is refused even if a later one would replace it.
  EXPECT_EQ(error(Field(1, 2, std::string(200, 'f')) + Field(1, 2, "ok")),
            "filter name is 200 bytes; at most 128 are allowed");
  KeysRequestLimits three = kServerLimits;
  three.min_key_bytes = 3;
  EXPECT_EQ(error(Field(2, 2, "abc") + Field(2, 2, "ab"), three),
            "keys[1] is 2 bytes; keys must be 3 to 64 bytes");
  // Found by wire_fuzz: an empty key is "empty" whatever the minimum.
  EXPECT_EQ(error(Field(2, 2, ""), three), "keys[0] is empty; keys must be 3 to 64 bytes");
  // Malformed before the offender: the malformation is reported.
  EXPECT_THAT(error(S("\x0f", 1) + Field(2, 2, "")), StartsWith("request is not a valid"));
  // Keys in an unknown group are not keys, so not checked.
  EXPECT_TRUE(ParseKeysRequest(S("\x2b", 1) + Field(2, 2, "") + S("\x2c", 1) + Field(2, 2, "k"),
                               "InsertRequest", kServerLimits, &r)
                  .ok());
}

TEST(WireFormatTest, OversizeFieldsAreRefusedFromTheirLengthPrefixBeforeAnyCopy) {
  // Straddling, so a parse that copied first would use the arena.
  const std::string key = Field(2, 2, std::string(5000, 'k'));
  const Chunked chunks(key, {100, 200});
  KeysRequest r;
  const absl::Status s = ParseKeysRequest(chunks.views(), "InsertRequest", kServerLimits, &r);
  EXPECT_THAT(std::string(s.message()), HasSubstr("keys[0] is 5000 bytes"));
  EXPECT_EQ(r.arena.bytes_used(), 0u);
  const std::string filter = Field(1, 2, std::string(5000, 'f'));
  const Chunked fchunks(filter, {100});
  EXPECT_THAT(std::string(ParseKeysRequest(fchunks.views(), "X", kServerLimits, &r).message()),
              HasSubstr("filter name is 5000 bytes"));
  EXPECT_EQ(r.arena.bytes_used(), 0u);
}

TEST(WireFormatTest, WithServerLimitsTheOutcomeAgreesWithTheGeneratedParser) {
  // Random requests with some empty, oversize and surplus keys: the first
  // offender in wire order is reported, else the values are the generated
  // parser's; mutated ones are never accepted when the generated parser
  // refuses them.
  std::mt19937_64 rng(5);
  const KeysRequestLimits limits = {
      .max_keys = 20, .min_key_bytes = 1, .max_key_bytes = 16, .max_filter_bytes = 12};
  FieldGenerator gen(6);
  for (int i = 0; i < 6000; ++i) {
    std::string bytes;
    if (i % 2 == 0) {
      v1::InsertRequest req;
      if (rng() % 3 != 0) req.set_filter(std::string(rng() % 15, 'f'));
      const size_t n = rng() % 24;
      for (size_t k = 0; k < n; ++k) {
        req.add_keys(rng() % 20 == 0 ? std::string() : RandomBytes(rng, rng() % 8 == 0 ? 20 : 12));
      }
      bytes = req.SerializeAsString();
      if (rng() % 3 == 0 && !bytes.empty()) bytes[rng() % bytes.size()] ^= 1 << (rng() % 8);
    } else {
      bytes = gen.Message();
    }
    KeysRequest ours;
    ASSERT_EQ(DiffWithLimits(bytes, RandomCuts(rng, bytes.size()), limits, &ours), "")
        << Show(bytes);
  }
}

TEST(WireFormatTest, AHugeRequestOfEmptyKeysPinsNoMemory) {
  // 30 M empty keys: 60 MB on the wire, in gRPC's 64 KiB slices. Collecting
  // them all would take 480 MB of views; the limits stop the parse early.
  std::string bytes;
  bytes.reserve(60'000'000);
  for (int i = 0; i < 30'000'000; ++i) bytes.append("\x12\x00", 2);
  std::vector<std::string_view> slices;
  for (size_t at = 0; at < bytes.size(); at += 64 << 10) {
    slices.push_back(std::string_view(bytes).substr(at, 64 << 10));
  }
  KeysRequest r;
  // The server refuses the first empty key.
  absl::Status s = ParseKeysRequest(slices, "InsertRequest", kServerLimits, &r);
  EXPECT_EQ(s.message(), "keys[0] is empty; keys must be 1 to 64 bytes");
  EXPECT_LE(r.keys.capacity(), 1u);
  // Even with empty keys allowed, memory is bounded by --max-batch-keys.
  KeysRequestLimits allow_empty = kServerLimits;
  allow_empty.min_key_bytes = 0;
  allow_empty.max_keys = 100'000;
  s = ParseKeysRequest(slices, "InsertRequest", allow_empty, &r);
  EXPECT_THAT(std::string(s.message()), StartsWith("batch has more than 100000 keys"));
  EXPECT_LE(r.keys.capacity(), 2 * 100'000u);
  EXPECT_EQ(r.arena.bytes_held(), 0u);  // Two-byte fields never straddle 64 KiB slices.
  // The next small request gives the memory back.
  ASSERT_TRUE(ParseKeysRequest(Field(2, 2, "k"), "InsertRequest", kServerLimits, &r).ok());
  EXPECT_LE(r.keys.capacity(), KeysRequest::kKeepKeys);

  // Keys as long as allowed, straddling every slice boundary of a 1.8 MB
  // request: the arena holds one key per boundary, then shrinks.
  const KeysRequestLimits big_keys = {
      .max_keys = 100'000, .min_key_bytes = 1, .max_key_bytes = 4096, .max_filter_bytes = 128};
  std::string large;
  while (large.size() < 1'800'000) large += Field(2, 2, std::string(4096, 'k'));
  std::vector<std::string_view> large_slices;
  for (size_t at = 0; at < large.size(); at += 64 << 10) {
    large_slices.push_back(std::string_view(large).substr(at, 64 << 10));
  }
  ASSERT_TRUE(ParseKeysRequest(large_slices, "InsertRequest", big_keys, &r).ok());
  EXPECT_LE(r.arena.bytes_used(), (large_slices.size() - 1) * 4096);
  EXPECT_LE(r.arena.bytes_held(), r.arena.bytes_used() + StraddleArena::kBlockBytes);
  EXPECT_GT(r.arena.bytes_held(), StraddleArena::kKeepBytes);
  r.Release();
  EXPECT_LE(r.arena.bytes_held(), StraddleArena::kKeepBytes);
  EXPECT_TRUE(r.keys.empty());
}

TEST(WireFormatTest, MalformedRequestsAreInvalidArgumentNamingTheMessageAndOffset) {
  KeysRequest r;
  // A key that claims 100 bytes but has 2, after a 3-byte filter field.
  const std::string truncated =
      S("\x0a\x01"
        "a\x12\x64zz",
        7);
  absl::Status s = ParseKeysRequest(truncated, "LookupRequest", kServerLimits, &r);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "request is not a valid cuckoo.v1.LookupRequest: truncated key at byte 3");
  // Offsets count from the start of the message, across slices.
  const Chunked chunks(truncated, {1, 4, 4, 5});
  EXPECT_EQ(ParseKeysRequest(chunks.views(), "LookupRequest", kServerLimits, &r), s);
  s = ParseKeysRequest(S("\x12\x01k\x00\x01", 5), "CountRequest", kServerLimits, &r);
  EXPECT_EQ(s.message(), "request is not a valid cuckoo.v1.CountRequest: field number 0 at byte 3");
  s = ParseKeysRequest(S("\x18\xff", 2), "InsertRequest", kServerLimits, &r);
  EXPECT_THAT(std::string(s.message()), HasSubstr("truncated if_absent at byte 0"));
  s = ParseKeysRequest(S("\x0a\x01\xff", 3), "InsertRequest", kServerLimits, &r);
  EXPECT_THAT(std::string(s.message()), HasSubstr("filter is not valid UTF-8 at byte 0"));
  s = ParseKeysRequest(S("\x2b\x34", 2), "InsertRequest", kServerLimits, &r);
  EXPECT_THAT(std::string(s.message()),
              HasSubstr("end-group tag of field 6 in a group of field 5 at byte 1"));
}

TEST(WireFormatTest, EmptyRequestParsesToNothing) {
  KeysRequest r;
  r.keys.push_back("stale");
  r.filter = "stale";
  ASSERT_TRUE(ParseKeysRequest("", "LookupRequest", kServerLimits, &r).ok());
  EXPECT_TRUE(r.filter.empty());
  EXPECT_TRUE(r.keys.empty());
  EXPECT_FALSE(r.if_absent);
  ASSERT_TRUE(
      ParseKeysRequest(absl::Span<const std::string_view>(), "LookupRequest", kServerLimits, &r)
          .ok());
  const std::vector<std::string_view> empties(3);
  ASSERT_TRUE(ParseKeysRequest(empties, "LookupRequest", kServerLimits, &r).ok());
}

TEST(WireFormatTest, SlicesHandsOutGrpcsBytesWithoutCopying) {
  const std::string a(100, 'a'), c(3000, 'c');
  grpc::Slice parts[] = {grpc::Slice(a), grpc::Slice("bb"), grpc::Slice(c)};
  grpc::ByteBuffer buffer(parts, 3);
  std::vector<grpc::Slice> slices;
  std::vector<std::string_view> views;
  ASSERT_TRUE(Slices(buffer, &slices, &views).ok());
  ASSERT_EQ(views.size(), 3u);
  EXPECT_EQ(views[0], a);
  EXPECT_EQ(views[1], "bb");
  EXPECT_EQ(views[2], c);
  // The first and last are gRPC's own (refcounted) bytes, not copies.
  std::vector<grpc::Slice> again;
  ASSERT_TRUE(buffer.Dump(&again).ok());
  EXPECT_EQ(views[0].data(), reinterpret_cast<const char*>(again[0].begin()));
  EXPECT_EQ(views[2].data(), reinterpret_cast<const char*>(again[2].begin()));

  ASSERT_TRUE(Slices(grpc::ByteBuffer(), &slices, &views).ok());
  EXPECT_TRUE(views.empty());
  ASSERT_TRUE(Slices(grpc::ByteBuffer(nullptr, 0), &slices, &views).ok());
  EXPECT_TRUE(views.empty());
}

// A message sent as many tiny HTTP/2 frames arrives as as many slices: the
// per-thread vectors that held them must not keep that size for good.
TEST(WireFormatTest, AMessageOfManySlicesLeavesNoLargeVectorsBehind) {
  // (Of 64 bytes: gRPC merges small inlined slices as they are added.)
  std::vector<grpc::Slice> parts(20000, grpc::Slice(std::string(64, 'k')));
  grpc::ByteBuffer buffer(parts.data(), parts.size());
  std::vector<grpc::Slice> slices;
  std::vector<std::string_view> views;
  ASSERT_TRUE(Slices(buffer, &slices, &views).ok());
  ASSERT_EQ(views.size(), parts.size());
  ReleaseSlices(&slices, &views);
  EXPECT_TRUE(slices.empty());
  EXPECT_LE(slices.capacity(), kKeepSlices);
  EXPECT_LE(views.capacity(), kKeepSlices);
  // A usual message keeps its vectors for the next call on the thread.
  grpc::Slice few[] = {grpc::Slice(std::string(64, 'a')), grpc::Slice(std::string(64, 'b'))};
  ASSERT_TRUE(Slices(grpc::ByteBuffer(few, 2), &slices, &views).ok());
  ReleaseSlices(&slices, &views);
  EXPECT_GE(views.capacity(), 2u);
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
    // With a log position (the last field of each).
    const uint64_t position = n == 0 ? 1 : rng() >> (rng() % 64);
    ei.set_log_position(position);
    ed.set_log_position(position);
    el.set_log_position(position);
    ec.set_log_position(position);
    EXPECT_EQ(Bytes(InsertResponse(ins, position)), ei.SerializeAsString()) << n;
    EXPECT_EQ(Bytes(DeleteResponse(del, position)), ed.SerializeAsString()) << n;
    EXPECT_EQ(Bytes(LookupResponse(absl::MakeConstSpan(present.get(), n), position)),
              el.SerializeAsString())
        << n;
    EXPECT_EQ(Bytes(CountResponse(counts, position)), ec.SerializeAsString()) << n;
  }
}

TEST(WireFormatTest, RequestIdAndMinLogPositionAreReadAndLimited) {
  v1::InsertRequest req;
  req.set_filter("f");
  req.add_keys("k");
  req.set_request_id("retry-me-7");
  req.set_min_log_position(uint64_t{1} << 40);
  const std::string bytes = req.SerializeAsString();
  KeysRequest r;
  ASSERT_TRUE(ParseKeysRequest(bytes, "InsertRequest", kNoLimits, &r).ok());
  EXPECT_EQ(r.request_id, "retry-me-7");
  EXPECT_EQ(r.min_log_position, uint64_t{1} << 40);
  KeysRequestLimits limits{.max_keys = 10,
                           .min_key_bytes = 1,
                           .max_key_bytes = 10,
                           .max_filter_bytes = 10,
                           .max_request_id_bytes = 4};
  const absl::Status s = ParseKeysRequest(bytes, "InsertRequest", limits, &r);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("request_id is 10 bytes; at most 4"));
  EXPECT_TRUE(r.request_id.empty());
  EXPECT_EQ(r.min_log_position, 0u);
}

}  // namespace
}  // namespace cuckoo::server::wire
