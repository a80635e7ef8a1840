// The shape's one encoding (core/shape_format.h) and the formats that
// record a shape: golden bytes that builds before the shared encoding wrote
// (the write-ahead log's create records of type 1, the cluster log's create
// entries, snapshots of format versions 1 to 3), which must load as the
// same shapes, and what this build writes.
#include "core/shape_format.h"

#include <gtest/gtest.h>

#include <bit>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "base/little_endian.h"
#include "core/cuckoo_filter.h"
#include "core/hash.h"  // xxhash.h
#include "core/snapshot.h"
#include "server/cluster/log_entry.h"
#include "server/wal/wal_format.h"
#include "tests/util/temp_dir.h"

namespace cuckoo {
namespace {

// The shapes the golden bytes hold (ComputeShape's for the options in
// each comment, written out so that a change in sizing cannot move them).
// {.capacity = 200, .fingerprint_bits = 8, .shards = 2, .seed = 0x1122334455667788}
constexpr FilterShape kPacked = {.hash_id = 1,
                                 .seed = 0x1122334455667788,
                                 .capacity = 200,
                                 .fingerprint_bits = 8,
                                 .bucket_size = 4,
                                 .shards = 2,
                                 .shard_bits = 1,
                                 .buckets_per_shard = 36,
                                 .max_kicks = 2000,
                                 .table_kind = TableKind::kPacked};
// {.capacity = 100, .seed = 42}
constexpr FilterShape kSemi = {.hash_id = 1,
                               .seed = 42,
                               .capacity = 100,
                               .fingerprint_bits = 12,
                               .bucket_size = 4,
                               .shards = 1,
                               .shard_bits = 0,
                               .buckets_per_shard = 29,
                               .max_kicks = 2000,
                               .table_kind = TableKind::kSemiSorted};
// {.capacity = 64, .false_positive_rate = 0.01, .shards = 1, .seed = 7,
//  .growth_factor = 2, .max_capacity = 10000}
constexpr FilterShape kGrows = {.hash_id = 1,
                                .seed = 7,
                                .capacity = 64,
                                .fingerprint_bits = 12,
                                .bucket_size = 4,
                                .shards = 1,
                                .shard_bits = 0,
                                .buckets_per_shard = 17,
                                .max_kicks = 2000,
                                .table_kind = TableKind::kSemiSorted,
                                .growth_factor = 2,
                                .max_capacity = 10000,
                                .false_positive_rate = 0.01};

// kGrows made over the Redis port: grow_on_repeats (growth flags bit 0).
constexpr FilterShape kGrowsOnRepeats = [] {
  FilterShape s = kGrows;
  s.grow_on_repeats = true;
  return s;
}();

// Written by the build before the shared encoding (the encoders as they
// were): write-ahead log create records of filter "users" at lsn 7 (synced
// 6); cluster log create entries of "users"; snapshot files: "semi" (keys
// k0..k49, filter id 9) as version 3 and, as tests/core/snapshot_layout.h
// turns it into the files older builds wrote, versions 2 and 1; "packed"
// (keys p0..p19) as versions 3 and 2; "grows" (keys g0..g149, two
// generations, filter id 3) as version 3.
constexpr absl::string_view kWalCreatePacked =
    "7000000001000000070000000000000006000000000000000700000000000000"
    "0500000000000000010000000000000008000000040000000200000001000000"
    "d0070000000000008877665544332211c8000000000000002400000000000000"
    "7573657273000000b53bbda9c25f0b06"
    "";
constexpr absl::string_view kWalCreateGrows =
    "8800000001010000070000000000000006000000000000000700000000000000"
    "050000000000000001000000010000000c000000040000000100000000000000"
    "d007000000000000070000000000000040000000000000001100000000000000"
    "020000000000000010270000000000007b14ae47e17a843f7573657273000000"
    "d755f97e0ed485e8"
    "";
constexpr absl::string_view kLogCreateSemi =
    "434b4c4501010000000000000000000000000000050000007573657273000000"
    "010000000c000000040000000100000000000000d00700000100000000000000"
    "2a0000000000000064000000000000001d000000000000005b31920f83eb2e4f"
    "";
constexpr absl::string_view kLogCreateGrows =
    "434b4c4501010200000000000000000000000000050000007573657273000000"
    "010000000c000000040000000100000000000000d00700000100000000000000"
    "0700000000000000400000000000000011000000000000000200000000000000"
    "10270000000000007b14ae47e17a843f68abddfbaa00d256"
    "";
constexpr absl::string_view kSnapshotV3Semi =
    "894355434b4f4f0a03000000e00100006375636b6f6f6420302e312e30000000"
    "0000000000000000000000000000000001000000010000000c00000004000000"
    "0100000000000000d0070000040000002a000000000000006400000000000000"
    "1d00000000000000a0000000000000003a4be18c6261060073656d6900000000"
    "0000000000000000000000000000000000000000000000000000000000000000"
    "0000000000000000000000000000000000000000000000000000000000000000"
    "0000000000000000000000000000000000000000000000000000000000000000"
    "0000000000000000000000000000000000000000000000000900000000000000"
    "0000000001000000000000000000000000000000000000003d7b5c4ecd07ce7a"
    "0100000000000000000000000000000000000000000000000000000000000000"
    "0000000000000000000000000000000000000000000000000000000000000000"
    "0000000000000000000000000000000000000000000000000000000000000000"
    "0000000000000000000000000000000000000000000000000000000000000000"
    "0000000000000000000000000000000000000000000000000000000000000000"
    "0000000000000000000000000000000000000000000000001f561db6cc3652d2"
    "000000000100000032000000000000000000000000000000000000000c000000"
    "1d0000000000000032000000000000003f7c4a7fb979379ea000000000000000"
    "b3b56a1395b5140000dc0a2300000020943e000000c9200700507f5600000000"
    "685a00007030a9100000d89e480c005035a5140000006c000000000050000000"
    "001123000000d00f000000000000000000a0e6ae6fcb644e0000000000207e18"
    "d7dfdd0f0000d051901554f18b0d1c070000c0610000634008170c00a03eca94"
    "0000007ced0300e09e0b0000000000e7430e1021a2140000000f7e000000d001"
    "a1e426ab4d01f8b989434b46454e440ae8020000000000003200000000000000"
    "be5c48a2dd2e5f6d"
    "";
constexpr absl::string_view kSnapshotV2Semi =
    "894355434b4f4f0a02000000400100006375636b6f6f6420302e312e30000000"
    "0000000000000000000000000000000001000000010000000c00000004000000"
    "0100000000000000d0070000040000002a000000000000006400000000000000"
    "1d00000000000000a0000000000000003a4be18c6261060073656d6900000000"
    "0000000000000000000000000000000000000000000000000000000000000000"
    "0000000000000000000000000000000000000000000000000000000000000000"
    "0000000000000000000000000000000000000000000000000000000000000000"
    "0000000000000000000000000000000000000000000000000900000000000000"
    "0000000000000000000000000000000000000000000000000000000000000000"
    "00000000000000000000000000000000000000000000000080a7aab95d71a77f"
    "000000000000000032000000000000003f7c4a7fb979379ea000000000000000"
    "0000000000000000b3b56a1395b5140000dc0a2300000020943e000000c92007"
    "00507f5600000000685a00007030a9100000d89e480c005035a5140000006c00"
    "0000000050000000001123000000d00f000000000000000000a0e6ae6fcb644e"
    "0000000000207e18d7dfdd0f0000d051901554f18b0d1c070000c06100006340"
    "08170c00a03eca940000007ced0300e09e0b0000000000e7430e1021a2140000"
    "000f7e000000d001dcb6c87ff87188c789434b46454e440a3002000000000000"
    "32000000000000004a0c41327d616db2"
    "";
constexpr absl::string_view kSnapshotV1Semi =
    "894355434b4f4f0a010000000001000001000000010000000c00000004000000"
    "0100000000000000d0070000040000002a000000000000006400000000000000"
    "1d00000000000000a0000000000000003a4be18c6261060073656d6900000000"
    "0000000000000000000000000000000000000000000000000000000000000000"
    "0000000000000000000000000000000000000000000000000000000000000000"
    "0000000000000000000000000000000000000000000000000000000000000000"
    "0000000000000000000000000000000000000000000000000000000000000000"
    "00000000000000000000000000000000000000000000000083dffe6a9187fe99"
    "000000000000000032000000000000003f7c4a7fb979379ea000000000000000"
    "b3b56a1395b5140000dc0a2300000020943e000000c9200700507f5600000000"
    "685a00007030a9100000d89e480c005035a5140000006c000000000050000000"
    "001123000000d00f000000000000000000a0e6ae6fcb644e0000000000207e18"
    "d7dfdd0f0000d051901554f18b0d1c070000c0610000634008170c00a03eca94"
    "0000007ced0300e09e0b0000000000e7430e1021a2140000000f7e000000d001"
    "fd7d10ec9e87d86389434b46454e440ae8010000000000003200000000000000"
    "b8c33646fedc3b70"
    "";
constexpr absl::string_view kSnapshotV3Packed =
    "894355434b4f4f0a03000000e00100006375636b6f6f6420302e312e30000000"
    "0000000000000000000000000000000001000000000000000800000004000000"
    "0200000001000000d0070000060000008877665544332211c800000000000000"
    "24000000000000009000000000000000dd37e28c626106007061636b65640000"
    "0000000000000000000000000000000000000000000000000000000000000000"
    "0000000000000000000000000000000000000000000000000000000000000000"
    "0000000000000000000000000000000000000000000000000000000000000000"
    "0000000000000000000000000000000000000000000000000000000000000000"
    "00000000010000000000000000000000000000000000000027d177f99e58c689"
    "0200000000000000000000000000000000000000000000000000000000000000"
    "0000000000000000000000000000000000000000000000000000000000000000"
    "0000000000000000000000000000000000000000000000000000000000000000"
    "0000000000000000000000000000000000000000000000000000000000000000"
    "0000000000000000000000000000000000000000000000000000000000000000"
    "0000000000000000000000000000000000000000000000007b919ea86a241804"
    "00000000010000000a0000000000000000000000000000000000000008000000"
    "24000000000000000a000000000000009d0b2c2afd4a158f9000000000000000"
    "000000000000000000000000eb6d0000ac000000840000000000000000000000"
    "000000000000000000000000e40000000000000000000000c300000000000000"
    "ea000000000000000000000000000000000000000000000000000000de000000"
    "0000000000000000000000002600000000000000000000000000000000000000"
    "000000000000000000000000da0000005e22708eadcb904b0100000001000000"
    "0a00000000000000000000000000000000000000080000002400000000000000"
    "0a00000000000000a38ff2ab36c04c2d9000000000000000fe000000b2000000"
    "ab000000000000000000000000000000000000000000000000000000ed000000"
    "0000000000000000000000000000000000000000f50000000000000000000000"
    "0000000000000000000000000000000000000000000000000000000000000000"
    "0000000025000000000000000000000000000000000000004100000000000000"
    "5e600000e900000006c0a21e2cc9bbf489434b46454e440ab003000000000000"
    "1400000000000000fd5370002174241d"
    "";
constexpr absl::string_view kSnapshotV2Packed =
    "894355434b4f4f0a02000000400100006375636b6f6f6420302e312e30000000"
    "0000000000000000000000000000000001000000000000000800000004000000"
    "0200000001000000d0070000060000008877665544332211c800000000000000"
    "24000000000000009000000000000000dd37e28c626106007061636b65640000"
    "0000000000000000000000000000000000000000000000000000000000000000"
    "0000000000000000000000000000000000000000000000000000000000000000"
    "0000000000000000000000000000000000000000000000000000000000000000"
    "0000000000000000000000000000000000000000000000000000000000000000"
    "0000000000000000000000000000000000000000000000000000000000000000"
    "0000000000000000000000000000000000000000000000004adb2ed303c28231"
    "00000000000000000a000000000000009d0b2c2afd4a158f9000000000000000"
    "0000000000000000000000000000000000000000eb6d0000ac00000084000000"
    "0000000000000000000000000000000000000000e40000000000000000000000"
    "c300000000000000ea0000000000000000000000000000000000000000000000"
    "00000000de000000000000000000000000000000260000000000000000000000"
    "0000000000000000000000000000000000000000da000000e3b7154b16434819"
    "01000000000000000a00000000000000a38ff2ab36c04c2d9000000000000000"
    "0000000000000000fe000000b2000000ab000000000000000000000000000000"
    "000000000000000000000000ed00000000000000000000000000000000000000"
    "00000000f5000000000000000000000000000000000000000000000000000000"
    "0000000000000000000000000000000000000000250000000000000000000000"
    "000000000000000041000000000000005e600000e90000008dcbc20538df29b2"
    "89434b46454e440ae0020000000000001400000000000000bf38cbb61c941b80"
    "";
constexpr absl::string_view kSnapshotV3Grows =
    "894355434b4f4f0a03000000e00100006375636b6f6f6420302e312e30000000"
    "0000000000000000000000000000000001000000010000000c00000004000000"
    "0100000000000000d00700000500000007000000000000004000000000000000"
    "11000000000000005e00000000000000e857e28c6261060067726f7773000000"
    "0000000000000000000000000000000000000000000000000000000000000000"
    "0000000000000000000000000000000000000000000000000000000000000000"
    "0000000000000000000000000000000000000000000000000000000000000000"
    "0000000000000000000000000000000000000000000000000300000000000000"
    "020000000800000010270000000000007b14ae47e17a843f6537343579f17bfe"
    "0100000001000000000000000000000000000000000000000000000000000000"
    "0000000000000000000000000000000000000000000000000000000000000000"
    "0000000000000000000000000000000000000000000000000000000000000000"
    "0000000000000000000000000000000000000000000000000000000000000000"
    "0000000000000000000000000000000000000000000000000000000000000000"
    "00000000000000000000000000000000000000000000000068d5a83ba886b326"
    "000000000200000096000000000000000000000000000000000000000c000000"
    "110000000000000043000000000000005b13d7a81bb68fa65e00000000000000"
    "6e797012c84fe153383f5d63d5be87d8a349bb283930ee661d2d597f886270f0"
    "d7c347d60c39c048c93055b3811ab08fe2ae670a4e48d2ea49cce85842e0d174"
    "b075060b40d8fe9ecec94a50212cc70c154781e888603f3a7fe9a9306e0c0100"
    "00000d000000220000000000000053000000000000005d979e5884d7855ccc00"
    "000000000000f40b000080afd404405cf1f7000000000000270040c12d3c6af4"
    "e9a55ca80000000000009e01008024689e9970e0f55260090000de6e4c090000"
    "80085410cd740379cb02000080fcea0ee0a1cfe4460280ad79c4f807000025d2"
    "070500c00e278f48c7384290886133d78194c801200d38f80709a0acbcb05505"
    "0080ffbc8e00c0d4ca9d8af56e5074dc000000000000e900603c1ac2a8868885"
    "ecb9ef010000005f00000000009f9309c02794b84eeaf9d19b8f1c070000002e"
    "a60b1ed1eef0fe0b00c0f8674e0100c0a56cb96bb2eae246a93189434b46454e"
    "440a9a0300000000000096000000000000001884b288dea335f6"
    "";

std::vector<uint8_t> Bytes(absl::string_view hex) {
  const std::string b = absl::HexStringToBytes(hex);
  return std::vector<uint8_t>(b.begin(), b.end());
}

std::vector<uint8_t> Encoded(const FilterShape& s) {
  std::vector<uint8_t> out(EncodedShapeBytes(s));
  EncodeShape(s, out.data());
  return out;
}

TEST(ShapeFormatTest, EveryShapeRoundTrips) {
  for (const FilterShape& s : {kPacked, kSemi, kGrows, kGrowsOnRepeats}) {
    ASSERT_TRUE(ValidateShape(s).ok()) << s.DebugString();
    const std::vector<uint8_t> b = Encoded(s);
    EXPECT_EQ(b.size(), s.growing() ? kShapeBytes + kShapeGrowthBytes : kShapeBytes);
    absl::StatusOr<FilterShape> d = DecodeShape(b, s.growing());
    ASSERT_TRUE(d.ok()) << d.status();
    EXPECT_EQ(*d, s);
  }
}

TEST(ShapeFormatTest, TheEncodingIsTheClusterLogsFieldOrder) {
  const std::vector<uint8_t> b = Encoded(kGrows);
  EXPECT_EQ(Get32(b.data() + 0), kGrows.hash_id);
  EXPECT_EQ(Get32(b.data() + 4), kGrows.fingerprint_bits);
  EXPECT_EQ(Get32(b.data() + 8), kGrows.bucket_size);
  EXPECT_EQ(Get32(b.data() + 12), kGrows.shards);
  EXPECT_EQ(Get32(b.data() + 16), kGrows.shard_bits);
  EXPECT_EQ(Get32(b.data() + 20), kGrows.max_kicks);
  EXPECT_EQ(Get32(b.data() + 24), 1u);  // Semi-sorted.
  EXPECT_EQ(Get32(b.data() + 28), 0u);
  EXPECT_EQ(Get64(b.data() + 32), kGrows.seed);
  EXPECT_EQ(Get64(b.data() + 40), kGrows.capacity);
  EXPECT_EQ(Get64(b.data() + 48), kGrows.buckets_per_shard);
  EXPECT_EQ(Get32(b.data() + 56), kGrows.growth_factor);
  EXPECT_EQ(Get32(b.data() + 60), 0u);
  EXPECT_EQ(Get64(b.data() + 64), kGrows.max_capacity);
  EXPECT_EQ(Get64(b.data() + 72), std::bit_cast<uint64_t>(kGrows.false_positive_rate));
}

// grow_on_repeats is bit 0 of the growth block's u32 at byte 60, reserved
// (zero) before: shapes without it keep their bytes, so older builds read
// them; a shape with it is refused by an older build as "reserved growth
// bytes 60..63 are not zero" (the test below of what this build refuses
// shows that message for bits it does not know).
TEST(ShapeFormatTest, GrowOnRepeatsIsBitZeroOfTheGrowthFlagsAtByte60) {
  const std::vector<uint8_t> plain = Encoded(kGrows);
  const std::vector<uint8_t> repeats = Encoded(kGrowsOnRepeats);
  ASSERT_EQ(plain.size(), repeats.size());
  EXPECT_EQ(Get32(plain.data() + 60), 0u);
  EXPECT_EQ(Get32(repeats.data() + 60), kGrowthFlagGrowOnRepeats);
  EXPECT_EQ(kGrowthFlagGrowOnRepeats, 1u);
  for (size_t i = 0; i < plain.size(); ++i) {
    if (i < 60 || i >= 64) {
      EXPECT_EQ(plain[i], repeats[i]) << "byte " << i;
    }
  }
  absl::StatusOr<FilterShape> d = DecodeShape(repeats, true);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_TRUE(d->grow_on_repeats);
  EXPECT_EQ(GrowthFlags(kGrows), 0u);
  EXPECT_EQ(GrowthFlags(kGrowsOnRepeats), 1u);
}

TEST(ShapeFormatTest, DecodingNamesWhatIsWrong) {
  const std::vector<uint8_t> good = Encoded(kGrows);
  auto decode = [](std::vector<uint8_t> b, bool growth = true) { return DecodeShape(b, growth); };

  absl::StatusOr<FilterShape> d = decode(Encoded(kSemi));  // No growth block.
  EXPECT_TRUE(absl::IsDataLoss(d.status())) << d.status();
  d = DecodeShape(good, false);  // One too many.
  EXPECT_TRUE(absl::IsDataLoss(d.status())) << d.status();

  std::vector<uint8_t> b = good;
  Put32(b.data() + 28, 1);
  d = decode(b);
  EXPECT_TRUE(absl::IsDataLoss(d.status())) << d.status();
  EXPECT_TRUE(absl::StrContains(d.status().message(), "reserved shape bytes 28..31")) << d.status();

  // Growth flags a newer build may know: named, with what this build knows.
  b = good;
  Put32(b.data() + 60, 3);
  d = decode(b);
  EXPECT_TRUE(absl::IsFailedPrecondition(d.status())) << d.status();
  EXPECT_TRUE(absl::StrContains(d.status().message(),
                                "growth flags 0x3 (shape bytes 60..63) have bits this build does "
                                "not know (0x2; it knows 0x1 grow_on_repeats): a newer build "
                                "wrote them"))
      << d.status();

  b = good;
  Put32(b.data() + 56, 0);
  d = decode(b);
  EXPECT_TRUE(absl::IsDataLoss(d.status())) << d.status();
  EXPECT_TRUE(absl::StrContains(d.status().message(), "growth_factor")) << d.status();

  // A kind a newer build may know.
  b = good;
  Put32(b.data() + 24, 2);
  d = decode(b);
  EXPECT_TRUE(absl::IsFailedPrecondition(d.status())) << d.status();
  EXPECT_TRUE(absl::StrContains(d.status().message(), "table kind 2 is unknown")) << d.status();

  // Settings this build cannot use: ValidateShape's message, naming the field.
  b = good;
  Put32(b.data() + 4, 3);
  d = decode(b);
  EXPECT_TRUE(absl::IsInvalidArgument(d.status())) << d.status();
  EXPECT_TRUE(absl::StrContains(d.status().message(), "fingerprint_bits=3")) << d.status();
  b = good;
  Put32(b.data() + 56, 9);
  d = decode(b);
  EXPECT_TRUE(absl::IsInvalidArgument(d.status())) << d.status();
  EXPECT_TRUE(absl::StrContains(d.status().message(), "growth_factor=9")) << d.status();
}

TEST(ShapeFormatTest, TheOlderOrderReadsAndWritesThroughTheSameFields) {
  uint8_t block[kShapeBytes] = {};
  uint8_t growth[kShapeGrowthBytes] = {};
  WriteShapeFields(kLegacyShapeLayout, kGrows, block, growth);
  EXPECT_EQ(Get32(block + 4), 1u);  // table_kind second.
  EXPECT_EQ(Get32(block + 8), kGrows.fingerprint_bits);
  EXPECT_EQ(Get32(block + 28), 0u);  // The spare: not written.
  EXPECT_EQ(ReadShapeFields(kLegacyShapeLayout, block, growth), kGrows);
  FilterShape fixed = kGrows;
  fixed.growth_factor = 0;
  fixed.max_capacity = 0;
  fixed.false_positive_rate = 0;
  EXPECT_EQ(ReadShapeFields(kLegacyShapeLayout, block, nullptr), fixed);
  EXPECT_TRUE(CheckShape(kGrows).ok());
  fixed.table_kind = static_cast<TableKind>(5);
  EXPECT_TRUE(absl::IsFailedPrecondition(CheckShape(fixed)));
}

// The cluster log's create entries keep their bytes: old and new replicas
// share one stream.
TEST(ShapeFormatTest, ClusterCreateEntriesAreUnchanged) {
  for (const auto& [hex, shape] : {std::pair{kLogCreateSemi, kSemi}, {kLogCreateGrows, kGrows}}) {
    const std::string old = absl::HexStringToBytes(hex);
    absl::StatusOr<server::LogEntry> e = server::DecodeLogEntry(old);
    ASSERT_TRUE(e.ok()) << e.status();
    EXPECT_EQ(e->type, server::LogEntryType::kCreateFilter);
    EXPECT_EQ(e->name, "users");
    EXPECT_EQ(e->shape, shape);
    EXPECT_EQ(absl::BytesToHexString(server::EncodeCreateEntry("users", shape)), hex);
  }
}

// A cluster log's create entry carries grow_on_repeats: every replica makes
// the same filter, which grows the same way.
TEST(ShapeFormatTest, ClusterCreateEntriesCarryGrowOnRepeats) {
  const std::string entry = server::EncodeCreateEntry("users", kGrowsOnRepeats);
  absl::StatusOr<server::LogEntry> e = server::DecodeLogEntry(entry);
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_EQ(e->shape, kGrowsOnRepeats);
  EXPECT_TRUE(e->shape.grow_on_repeats);
  // Only the flag differs from the entry without it (and the checksum, the
  // last 8 bytes).
  const std::string plain = server::EncodeCreateEntry("users", kGrows);
  ASSERT_EQ(plain.size(), entry.size());
  size_t differ = 0;
  for (size_t i = 0; i + 8 < plain.size(); ++i) differ += plain[i] != entry[i];
  EXPECT_EQ(differ, 1u);
}

server::WalParse ParseWal(const std::vector<uint8_t>& b, server::WalRecord* r, std::string* why) {
  size_t length = 0;
  return server::ParseWalRecord(b, r, &length, why);
}

TEST(ShapeFormatTest, OldWalCreateRecordsLoadAndNewOnesCarryTheSharedEncoding) {
  for (const auto& [hex, shape] :
       {std::pair{kWalCreatePacked, kPacked}, {kWalCreateGrows, kGrows}}) {
    const std::vector<uint8_t> old = Bytes(hex);
    server::WalRecord r;
    std::string why;
    ASSERT_EQ(ParseWal(old, &r, &why), server::WalParse::kRecord) << why;
    EXPECT_EQ(r.type, server::WalRecordType::kCreateFilter);
    EXPECT_EQ(r.lsn, 7u);
    EXPECT_EQ(r.name, "users");
    EXPECT_EQ(r.shape, shape);

    std::vector<uint8_t> now(server::WalCreateFilterBytes("users", shape));
    ASSERT_EQ(now.size(), old.size());
    server::EncodeCreateFilter(7, 6, "users", shape, now.data());
    EXPECT_EQ(now[4], 7);       // The record type of the shared encoding.
    EXPECT_EQ(now[5], old[5]);  // The same flags.
    // The shape, after the header and the name's length, is the shared
    // encoding: the cluster log entry's bytes.
    const std::vector<uint8_t> encoded = Encoded(shape);
    EXPECT_EQ(std::vector<uint8_t>(now.begin() + 40, now.begin() + 40 + encoded.size()), encoded);
    server::WalRecord n;
    ASSERT_EQ(ParseWal(now, &n, &why), server::WalParse::kRecord) << why;
    EXPECT_EQ(n.type, server::WalRecordType::kCreateFilter);
    EXPECT_EQ(n.name, "users");
    EXPECT_EQ(n.shape, shape);
  }
}

TEST(ShapeFormatTest, NewWalCreateRecordsRefuseWhatNoWriterWrites) {
  std::vector<uint8_t> b(server::WalCreateFilterBytes("users", kGrows));
  auto parse = [&](void (*edit)(uint8_t * shape)) {
    server::EncodeCreateFilter(7, 6, "users", kGrows, b.data());
    edit(b.data() + 40);
    Put64(b.data() + b.size() - 8, XXH3_64bits(b.data(), b.size() - 8));
    server::WalRecord r;
    std::string why;
    return std::pair{ParseWal(b, &r, &why), why};
  };
  auto [reserved, why1] = parse([](uint8_t* s) { Put32(s + 28, 1); });
  EXPECT_EQ(reserved, server::WalParse::kBad) << why1;
  auto [kind, why2] = parse([](uint8_t* s) { Put32(s + 24, 2); });
  EXPECT_EQ(kind, server::WalParse::kUnknown) << why2;  // A newer build's table kind.
  EXPECT_TRUE(absl::StrContains(why2, "table kind 2")) << why2;
  auto [bits, why3] = parse([](uint8_t* s) { Put32(s + 4, 40); });
  EXPECT_EQ(bits, server::WalParse::kBad) << why3;
  EXPECT_TRUE(absl::StrContains(why3, "fingerprint_bits=40")) << why3;
  // Growth flags a newer build wrote: unknown to this one, named.
  auto [flags, why4] = parse([](uint8_t* s) { Put32(s + 60, 4); });
  EXPECT_EQ(flags, server::WalParse::kUnknown) << why4;
  EXPECT_TRUE(absl::StrContains(why4, "growth flags 0x4")) << why4;
}

// The write-ahead log's create record carries grow_on_repeats, so a replay
// makes the filter that was created, which grows for repeats as it did.
TEST(ShapeFormatTest, WalCreateRecordsCarryGrowOnRepeats) {
  std::vector<uint8_t> b(server::WalCreateFilterBytes("users", kGrowsOnRepeats));
  server::EncodeCreateFilter(7, 6, "users", kGrowsOnRepeats, b.data());
  server::WalRecord r;
  std::string why;
  ASSERT_EQ(ParseWal(b, &r, &why), server::WalParse::kRecord) << why;
  EXPECT_EQ(r.type, server::WalRecordType::kCreateFilter);
  EXPECT_EQ(r.shape, kGrowsOnRepeats);
  EXPECT_EQ(Get32(b.data() + 40 + 60), kGrowthFlagGrowOnRepeats);
}

// A snapshot written now is in format version 5 (docs/SNAPSHOT_FORMAT.md):
// its 1024-byte header holds the shape as EncodeShape writes it (the one
// encoding of core/shape_format.h) and the name; its sections are the
// golden version-3 file's byte for byte, so the tables were written as
// before, and its footer counts the same items.
TEST(ShapeFormatTest, SnapshotsAreWrittenInVersion5WithTheGoldenSections) {
  const std::vector<uint8_t> golden = Bytes(kSnapshotV3Grows);
  absl::StatusOr<LoadedSnapshot> loaded = ParseSnapshot(golden, "golden");
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  testing::TempDir dir;
  absl::StatusOr<SnapshotWriteResult> w = WriteSnapshotFile(*loaded->filter, "grows", dir.path());
  ASSERT_TRUE(w.ok()) << w.status();
  std::ifstream f(w->path, std::ios::binary);
  const std::vector<uint8_t> now((std::istreambuf_iterator<char>(f)), {});
  constexpr size_t kV3Header = 480, kV5Header = 1024, kFooter = 32;
  ASSERT_EQ(now.size(), golden.size() - kV3Header + kV5Header);
  auto range = [](const std::vector<uint8_t>& b, size_t from, size_t to) {
    return std::vector<uint8_t>(b.begin() + from, b.begin() + to);
  };
  EXPECT_EQ(range(now, 0, 8), range(golden, 0, 8));  // Magic.
  EXPECT_EQ(now[8], 5);                              // Version.
  // The shape at 48, as EncodeShape encodes it.
  std::vector<uint8_t> shape(EncodedShapeBytes(kGrows));
  EncodeShape(kGrows, shape.data());
  EXPECT_EQ(range(now, 48, 48 + shape.size()), shape);
  // The name's length at 128, the name at 344.
  EXPECT_EQ(Get32(now.data() + 128), 5u);
  EXPECT_EQ(range(now, 344, 349), (std::vector<uint8_t>{'g', 'r', 'o', 'w', 's'}));
  // The sections, byte for byte; the footer's item count.
  EXPECT_EQ(range(now, kV5Header, now.size() - kFooter),
            range(golden, kV3Header, golden.size() - kFooter));
  EXPECT_EQ(Get64(now.data() + now.size() - kFooter + 16),
            Get64(golden.data() + golden.size() - kFooter + 16));
}

struct GoldenSnapshot {
  absl::string_view hex;
  uint32_t version;
  const char* name;
  FilterShape shape;
  uint64_t filter_id;
  const char* key_prefix;
  int keys;
};

TEST(ShapeFormatTest, SnapshotsOfEveryOlderVersionLoad) {
  const GoldenSnapshot files[] = {
      {kSnapshotV3Semi, 3, "semi", kSemi, 9, "k", 50},
      {kSnapshotV2Semi, 2, "semi", kSemi, 9, "k", 50},
      {kSnapshotV1Semi, 1, "semi", kSemi, 0, "k", 50},  // Version 1 holds no id.
      {kSnapshotV3Packed, 3, "packed", kPacked, 0, "p", 20},
      {kSnapshotV2Packed, 2, "packed", kPacked, 0, "p", 20},
      {kSnapshotV3Grows, 3, "grows", kGrows, 3, "g", 150},
  };
  for (const GoldenSnapshot& g : files) {
    SCOPED_TRACE(absl::StrCat(g.name, " version ", g.version));
    const std::vector<uint8_t> bytes = Bytes(g.hex);
    absl::StatusOr<LoadedSnapshot> s = ParseSnapshot(bytes, "golden", g.name);
    ASSERT_TRUE(s.ok()) << s.status();
    EXPECT_EQ(s->format_version, g.version);
    EXPECT_EQ(s->header.name, g.name);
    EXPECT_EQ(s->header.shape, g.shape);
    EXPECT_EQ(s->filter_id, g.filter_id);
    EXPECT_EQ(s->filter->shape(), g.shape);
    for (int i = 0; i < g.keys; ++i) {
      EXPECT_TRUE(s->filter->MayContain(absl::StrCat(g.key_prefix, i))) << i;
    }
    EXPECT_EQ(s->items, static_cast<uint64_t>(g.keys));
  }
  absl::StatusOr<LoadedSnapshot> grows = ParseSnapshot(Bytes(kSnapshotV3Grows), "golden");
  ASSERT_TRUE(grows.ok()) << grows.status();
  EXPECT_EQ(grows->filter->ShardGenerations(0), 2u);
}

}  // namespace
}  // namespace cuckoo
