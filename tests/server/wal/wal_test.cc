// The write-ahead log: framing, where a log ends (torn tails and damage),
// rotation and truncation, group commit, and what survives a power cut or
// an I/O error (through FaultWalEnv).
#include "server/wal/wal.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/time/clock.h"
#include "base/little_endian.h"
#include "core/hash.h"
#include "server/wal/wal_format.h"
#include "tests/util/fault_wal_env.h"
#include "tests/util/forwarding_wal_env.h"
#include "tests/util/temp_dir.h"

namespace cuckoo::server {
namespace {

namespace fs = std::filesystem;
using cuckoo::testing::TempDir;
using testing::FaultWalEnv;
using testing::ForwardingWalEnv;

constexpr uint64_t kSegment = kWalMinSegmentBytes;

FilterShape SomeShape() {
  absl::StatusOr<FilterShape> s = ComputeShape({.capacity = 1000, .shards = 2, .seed = 5});
  return *s;
}

FilterShape GrowingShape() {
  absl::StatusOr<FilterShape> s = ComputeShape({.capacity = 1000,
                                                .false_positive_rate = 0.01,
                                                .shards = 2,
                                                .seed = 5,
                                                .growth_factor = 4,
                                                .max_capacity = 1'000'000});
  EXPECT_TRUE(s.ok()) << s.status();
  return *s;
}

// Scans `dir`, collecting every record.
absl::StatusOr<WalScan> Scan(Env* env, const std::string& dir, std::vector<WalRecord>* out) {
  return ScanWal(env, dir, [&](const WalRecord& r) {
    if (out != nullptr) out->push_back(r);
    return absl::OkStatus();
  });
}

std::unique_ptr<Wal> OpenWal(const std::string& dir, Env* env, Durability d = Durability::kSync,
                             std::function<void(const absl::Status&)> on_failure = nullptr,
                             absl::Duration interval = absl::Seconds(1)) {
  absl::StatusOr<WalScan> scan = Scan(env, dir, nullptr);
  if (!scan.ok()) {
    ADD_FAILURE() << scan.status();
    return nullptr;
  }
  absl::StatusOr<std::unique_ptr<Wal>> wal = Wal::Open({.dir = dir,
                                                        .durability = d,
                                                        .sync_interval = interval,
                                                        .segment_bytes = kSegment,
                                                        .env = env,
                                                        .on_failure = std::move(on_failure)},
                                                       *scan, 0);
  if (!wal.ok()) {
    ADD_FAILURE() << wal.status();
    return nullptr;
  }
  return *std::move(wal);
}

uint64_t AppendInsert(Wal& wal, uint64_t filter_id, uint64_t first_hash, size_t n) {
  std::vector<uint64_t> hashes(n);
  for (size_t i = 0; i < n; ++i) hashes[i] = first_hash + i;
  return wal.AppendShardWrite(filter_id, {.kind = ShardWrite::kInsert,
                                          .shard = 1,
                                          .if_absent = true,
                                          .full_before = first_hash % 2 == 0,
                                          .ceiling = first_hash % 2 == 0,
                                          .hashes = hashes});
}

TEST(WalTest, RecordsRoundTripInOrder) {
  TempDir dir;
  const std::string wal_dir = dir.path() + "/wal";
  {
    auto wal = OpenWal(wal_dir, PosixEnv());
    ASSERT_NE(wal, nullptr);
    const uint64_t id = wal->AppendCreateFilter("users", SomeShape());
    EXPECT_EQ(id, 1u);
    AppendInsert(*wal, id, 100, 3);
    const uint64_t hashes[] = {7, 8};
    wal->AppendShardWrite(id, {.kind = ShardWrite::kDelete, .shard = 0, .hashes = hashes});
    wal->AppendDropFilter(id);
    const uint64_t last = wal->AppendCreateFilter("grows", GrowingShape());
    ASSERT_TRUE(wal->WaitDurable(last).ok());
  }
  std::vector<WalRecord> records;
  absl::StatusOr<WalScan> scan = Scan(PosixEnv(), wal_dir, &records);
  ASSERT_TRUE(scan.ok()) << scan.status();
  EXPECT_TRUE(scan->cut.empty()) << scan->cut;
  ASSERT_EQ(records.size(), 5u);
  EXPECT_EQ(records[0].type, WalRecordType::kCreateFilter);
  EXPECT_EQ(records[0].name, "users");
  EXPECT_EQ(records[0].shape, SomeShape());
  EXPECT_EQ(records[1].type, WalRecordType::kInsert);
  EXPECT_EQ(records[1].filter_id, 1u);
  EXPECT_EQ(records[1].hashes, (std::vector<uint64_t>{100, 101, 102}));
  EXPECT_TRUE(records[1].write.if_absent);
  EXPECT_TRUE(records[1].write.full_before);
  EXPECT_TRUE(records[1].write.ceiling);
  EXPECT_EQ(records[1].write.shard, 1u);
  EXPECT_EQ(records[2].type, WalRecordType::kDelete);
  EXPECT_EQ(records[2].hashes, (std::vector<uint64_t>{7, 8}));
  EXPECT_EQ(records[3].type, WalRecordType::kDropFilter);
  EXPECT_EQ(records[4].type, WalRecordType::kCreateFilter);
  EXPECT_EQ(records[4].shape, GrowingShape());
  for (size_t i = 0; i < 5; ++i) EXPECT_EQ(records[i].lsn, i + 1);
  EXPECT_EQ(scan->last_lsn, 5u);
}

// Filter names are Redis keys of up to 512 bytes; create records carry them
// (a u32 length: no format change).
TEST(WalTest, CreateRecordsCarryKeyShapedNamesOfUpTo512Bytes) {
  TempDir dir;
  const std::string wal_dir = dir.path() + "/wal";
  const std::vector<std::string> names = {std::string(512, 'k'), "users:seen", "a/b c",
                                          "caf\xC3\xA9"};
  {
    auto wal = OpenWal(wal_dir, PosixEnv());
    ASSERT_NE(wal, nullptr);
    uint64_t last = 0;
    for (const std::string& n : names) {
      EXPECT_GE(WalCreateFilterBytes(n), n.size());
      last = wal->AppendCreateFilter(n, n.size() % 2 == 0 ? SomeShape() : GrowingShape());
    }
    ASSERT_TRUE(wal->WaitDurable(last).ok());
  }
  std::vector<WalRecord> records;
  absl::StatusOr<WalScan> scan = Scan(PosixEnv(), wal_dir, &records);
  ASSERT_TRUE(scan.ok()) << scan.status();
  EXPECT_TRUE(scan->cut.empty()) << scan->cut;
  ASSERT_EQ(records.size(), names.size());
  for (size_t i = 0; i < names.size(); ++i) {
    EXPECT_EQ(records[i].type, WalRecordType::kCreateFilter);
    EXPECT_EQ(records[i].name, names[i]);
    EXPECT_EQ(records[i].shape, names[i].size() % 2 == 0 ? SomeShape() : GrowingShape());
  }
}

TEST(WalTest, ReopenedLogContinuesTheLsnsAndKeepsEveryRecord) {
  TempDir dir;
  const std::string wal_dir = dir.path() + "/wal";
  for (int round = 0; round < 3; ++round) {
    auto wal = OpenWal(wal_dir, PosixEnv());
    ASSERT_NE(wal, nullptr);
    uint64_t lsn = 0;
    for (int i = 0; i < 10; ++i) lsn = AppendInsert(*wal, 1, round * 100 + i, 4);
    EXPECT_EQ(lsn, uint64_t(round + 1) * 10);
    ASSERT_TRUE(wal->WaitDurable(lsn).ok());
  }
  std::vector<WalRecord> records;
  absl::StatusOr<WalScan> scan = Scan(PosixEnv(), wal_dir, &records);
  ASSERT_TRUE(scan.ok()) << scan.status();
  ASSERT_EQ(records.size(), 30u);
  for (size_t i = 0; i < records.size(); ++i) EXPECT_EQ(records[i].lsn, i + 1);
}

// Writes a log of `n` records synced one by one, so that each record after
// the first says the ones before it were durable; returns the segment path.
std::string WriteSyncedLog(const std::string& wal_dir, int n) {
  auto wal = OpenWal(wal_dir, PosixEnv());
  for (int i = 0; i < n; ++i) {
    EXPECT_TRUE(wal->WaitDurable(AppendInsert(*wal, 1, 10 * i, 5)).ok());
  }
  return WalSegmentPath(wal_dir, 1);
}

std::vector<uint8_t> ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(in), {});
}
void WriteFile(const std::string& path, const std::vector<uint8_t>& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()),
            static_cast<std::streamsize>(bytes.size()));
}

TEST(WalTest, TornTailAtEveryByteOffsetOfTheLastRecordIsCutOff) {
  TempDir dir;
  const std::string wal_dir = dir.path() + "/wal";
  const std::string segment = WriteSyncedLog(wal_dir, 5);
  const std::vector<uint8_t> good = ReadFile(segment);
  const size_t record = WalShardWriteBytes(5);
  const size_t last_begin = kWalSegmentHeaderBytes + 4 * record;
  for (size_t cut = last_begin; cut < last_begin + record; ++cut) {
    for (uint8_t fill : {uint8_t{0}, uint8_t{0xA5}}) {
      // The last record's bytes from `cut` on never reached the disk:
      // zeros (preallocated) or garbage.
      std::vector<uint8_t> torn = good;
      for (size_t i = cut; i < last_begin + record; ++i) torn[i] = fill;
      WriteFile(segment, torn);
      std::vector<WalRecord> records;
      absl::StatusOr<WalScan> scan = Scan(PosixEnv(), wal_dir, &records);
      ASSERT_TRUE(scan.ok()) << "cut at " << cut << ": " << scan.status();
      ASSERT_EQ(records.size(), 4u) << "cut at " << cut;
      EXPECT_EQ(scan->last_lsn, 4u);
      if (cut == last_begin && fill == 0) {
        EXPECT_TRUE(scan->cut.empty()) << "nothing of the record was written: a clean end";
      } else {
        EXPECT_TRUE(absl::StrContains(scan->cut, segment)) << scan->cut;
        EXPECT_TRUE(absl::StrContains(scan->cut, absl::StrCat("offset ", last_begin))) << scan->cut;
      }
    }
  }
  // Opening the torn log zeroes the tail; what is appended next reads back
  // after record 4, and nothing stale follows it.
  std::vector<uint8_t> torn = good;
  for (size_t i = last_begin + 9; i < last_begin + record; ++i) torn[i] = 0xA5;
  WriteFile(segment, torn);
  {
    auto wal = OpenWal(wal_dir, PosixEnv());
    ASSERT_NE(wal, nullptr);
    const uint64_t lsn = AppendInsert(*wal, 1, 999, 1);
    EXPECT_EQ(lsn, 5u);
    ASSERT_TRUE(wal->WaitDurable(lsn).ok());
  }
  std::vector<WalRecord> records;
  absl::StatusOr<WalScan> scan = Scan(PosixEnv(), wal_dir, &records);
  ASSERT_TRUE(scan.ok()) << scan.status();
  EXPECT_TRUE(scan->cut.empty()) << scan->cut;
  ASSERT_EQ(records.size(), 5u);
  EXPECT_EQ(records[4].hashes, std::vector<uint64_t>{999});
}

TEST(WalTest, ChecksumMismatchBeforeTheTailIsAStartupErrorNamingSegmentAndOffset) {
  TempDir dir;
  const std::string wal_dir = dir.path() + "/wal";
  const std::string segment = WriteSyncedLog(wal_dir, 10);
  std::vector<uint8_t> bytes = ReadFile(segment);
  const size_t record = WalShardWriteBytes(5);
  const size_t third = kWalSegmentHeaderBytes + 2 * record;
  bytes[third + 40] ^= 0x10;  // A hash of record 3.
  WriteFile(segment, bytes);
  absl::StatusOr<WalScan> scan = Scan(PosixEnv(), wal_dir, nullptr);
  ASSERT_TRUE(absl::IsDataLoss(scan.status())) << scan.status();
  EXPECT_TRUE(absl::StrContains(scan.status().message(), segment)) << scan.status();
  EXPECT_TRUE(absl::StrContains(scan.status().message(), absl::StrCat("offset ", third)))
      << scan.status();
  EXPECT_TRUE(absl::StrContains(scan.status().message(), "checksum")) << scan.status();
  EXPECT_TRUE(absl::StrContains(scan.status().message(), "move")) << "says what to do";
}

// A log this build cannot read, although intact, was written by a newer
// cuckood: refused (FAILED_PRECONDITION), never cut off or skipped.
TEST(WalTest, RequestRecordsRoundTripWithResultsSplitAcrossRecords) {
  TempDir dir;
  const std::string wal_dir = dir.path() + "/wal";
  const absl::Time t = absl::FromUnixMicros(1'700'000'000'123'456);
  WalRequest req{.key = "d/retry-1/00112233aabbccdd",
                 .method = ShardWrite::kDelete,
                 .keys = 40'000,
                 .position = 9,
                 .time = t};
  for (uint32_t i = 0; i < req.keys; ++i) req.results.push_back(i % 3 == 0 ? 1 : 0);
  {
    auto wal = OpenWal(wal_dir, PosixEnv());
    ASSERT_NE(wal, nullptr);
    wal->AppendRequestStart(3, req);
    const uint64_t last = wal->AppendRequestResults(3, req);
    EXPECT_EQ(last, 3u) << "40,000 results take two records";
    ASSERT_TRUE(wal->WaitDurable(last).ok());
  }
  std::vector<WalRecord> records;
  absl::StatusOr<WalScan> scan = Scan(PosixEnv(), wal_dir, &records);
  ASSERT_TRUE(scan.ok()) << scan.status();
  ASSERT_EQ(records.size(), 3u);
  EXPECT_EQ(records[0].type, WalRecordType::kRequestStart);
  EXPECT_EQ(records[0].filter_id, 3u);
  EXPECT_EQ(records[0].request.key, req.key);
  EXPECT_EQ(records[0].request.method, ShardWrite::kDelete);
  EXPECT_EQ(records[0].request.keys, 40'000u);
  EXPECT_EQ(records[0].request.time, t);
  std::vector<uint8_t> results;
  for (size_t i = 1; i < 3; ++i) {
    EXPECT_EQ(records[i].type, WalRecordType::kRequestResults);
    EXPECT_EQ(records[i].request.key, req.key);
    EXPECT_EQ(records[i].request.position, 9u);
    EXPECT_EQ(records[i].request.offset, results.size());
    results.insert(results.end(), records[i].request.results.begin(),
                   records[i].request.results.end());
  }
  EXPECT_EQ(results, req.results);
}

std::vector<uint8_t> EncodedCreate(absl::string_view name, const FilterShape& shape,
                                   uint64_t lsn = 7) {
  std::vector<uint8_t> out(WalCreateFilterBytes(name, shape));
  EncodeCreateFilter(lsn, lsn - 1, name, shape, out.data());
  return out;
}

WalParse Parse(const std::vector<uint8_t>& bytes, WalRecord* r, std::string* why) {
  size_t length = 0;
  return ParseWalRecord(bytes, r, &length, why);
}

// A create record as builds before growing filters wrote it, from the
// layout in docs/WAL_FORMAT.md (not from the encoder): flags 0, the shape,
// the name.
std::vector<uint8_t> OldCreateRecord(uint64_t lsn, absl::string_view name, const FilterShape& s) {
  const size_t length = 32 + 64 + (name.size() + 7) / 8 * 8 + 8;
  std::vector<uint8_t> out(length, 0);
  Put32(out.data(), static_cast<uint32_t>(length));
  out[4] = 1;  // CreateFilter, flags 0.
  Put64(out.data() + 8, lsn);
  Put64(out.data() + 16, lsn - 1);
  Put64(out.data() + 24, lsn);
  uint8_t* p = out.data() + 32;
  Put32(p, static_cast<uint32_t>(name.size()));
  const uint32_t u32s[] = {s.hash_id,          static_cast<uint32_t>(s.table_kind),
                           s.fingerprint_bits, s.bucket_size,
                           s.shards,           s.shard_bits,
                           s.max_kicks};
  for (size_t i = 0; i < 7; ++i) Put32(p + 8 + 4 * i, u32s[i]);
  Put64(p + 40, s.seed);
  Put64(p + 48, s.capacity);
  Put64(p + 56, s.buckets_per_shard);
  std::memcpy(p + 64, name.data(), name.size());
  Put64(out.data() + length - 8, XXH3_64bits(out.data(), length - 8));
  return out;
}

TEST(WalTest, GrowingFilterCreateRecordCarriesItsGrowthSettings) {
  const FilterShape shape = GrowingShape();
  ASSERT_TRUE(shape.growing());
  const std::vector<uint8_t> bytes = EncodedCreate("grows", shape);
  EXPECT_EQ(bytes.size(), 128u + 8);  // 24 more than a fixed filter's.
  EXPECT_EQ(bytes[5], 1);             // The growth flag.
  WalRecord r;
  std::string why;
  ASSERT_EQ(Parse(bytes, &r, &why), WalParse::kRecord) << why;
  EXPECT_EQ(r.type, WalRecordType::kCreateFilter);
  EXPECT_EQ(r.name, "grows");
  EXPECT_EQ(r.shape, shape);
  EXPECT_EQ(r.shape.growth_factor, 4u);
  EXPECT_EQ(r.shape.max_capacity, 1'000'000u);
  EXPECT_EQ(r.shape.false_positive_rate, 0.01);
  // Reservations made before the shape is known cover either kind.
  EXPECT_GE(WalCreateFilterBytes("grows"), bytes.size());
}

TEST(WalTest, CreateRecordOfAFixedFilterFromBuildsBeforeGrowthStillLoads) {
  const FilterShape shape = SomeShape();
  ASSERT_FALSE(shape.growing());
  const std::vector<uint8_t> old = OldCreateRecord(7, "users", shape);
  // This build writes type 7, the shape as core/shape_format.h encodes it
  // (tests/core/shape_format_test.cc); records of type 1 from older builds
  // still load, as fixed filters.
  EXPECT_EQ(EncodedCreate("users", shape).size(), old.size());
  WalRecord r;
  std::string why;
  ASSERT_EQ(Parse(old, &r, &why), WalParse::kRecord) << why;
  EXPECT_EQ(r.shape, shape);
  EXPECT_FALSE(r.shape.growing());
  EXPECT_EQ(r.shape.max_capacity, 0u);
  EXPECT_EQ(r.shape.false_positive_rate, 0.0);
}

TEST(WalTest, UnknownCreateFlagsAreNewerAndABrokenGrowthBlockIsDamage) {
  auto reseal = [](std::vector<uint8_t> b) {
    Put64(b.data() + b.size() - 8, XXH3_64bits(b.data(), b.size() - 8));
    return b;
  };
  WalRecord r;
  std::string why;
  std::vector<uint8_t> flag = EncodedCreate("grows", GrowingShape());
  flag[5] |= 2;
  EXPECT_EQ(Parse(reseal(flag), &r, &why), WalParse::kUnknown);
  EXPECT_TRUE(absl::StrContains(why, "unknown record flags")) << why;

  std::vector<uint8_t> no_factor = EncodedCreate("grows", GrowingShape());
  Put32(no_factor.data() + 32 + 64, 0);
  EXPECT_EQ(Parse(reseal(no_factor), &r, &why), WalParse::kBad);

  std::vector<uint8_t> big_factor = EncodedCreate("grows", GrowingShape());
  Put32(big_factor.data() + 32 + 64, 9);
  EXPECT_EQ(Parse(reseal(big_factor), &r, &why), WalParse::kBad);
  EXPECT_TRUE(absl::StrContains(why, "growth_factor")) << why;

  // The flag on a record without the block: the lengths disagree.
  std::vector<uint8_t> short_block = EncodedCreate("users", SomeShape());
  short_block[5] = 1;
  EXPECT_EQ(Parse(reseal(short_block), &r, &why), WalParse::kBad);
}

// Filter expiry (type 9): the filter's id and its expire_at (Unix ms, 0
// clears), checked on the way in.
TEST(WalTest, ExpiryRecordsRoundTripAndDamagedOnesAreRefused) {
  TempDir dir;
  const std::string wal_dir = dir.path() + "/wal";
  {
    auto wal = OpenWal(wal_dir, PosixEnv());
    ASSERT_NE(wal, nullptr);
    const uint64_t id = wal->AppendCreateFilter("seen:2026-11-29", SomeShape());
    wal->AppendSetExpiry(id, 1796083200123);
    const uint64_t last = wal->AppendSetExpiry(id, 0);
    ASSERT_TRUE(wal->WaitDurable(last).ok());
  }
  std::vector<WalRecord> records;
  absl::StatusOr<WalScan> scan = Scan(PosixEnv(), wal_dir, &records);
  ASSERT_TRUE(scan.ok()) << scan.status();
  ASSERT_EQ(records.size(), 3u);
  EXPECT_EQ(records[1].type, WalRecordType::kSetExpiry);
  EXPECT_EQ(records[1].filter_id, 1u);
  EXPECT_EQ(records[1].expire_at, 1796083200123);
  EXPECT_EQ(records[2].type, WalRecordType::kSetExpiry);
  EXPECT_EQ(records[2].expire_at, 0);

  auto encoded = [](uint64_t filter_id, int64_t at) {
    std::vector<uint8_t> b(kWalSetExpiryBytes);
    EncodeSetExpiry(4, 3, filter_id, at, b.data());
    return b;
  };
  auto reseal = [](std::vector<uint8_t> b) {
    Put64(b.data() + b.size() - 8, XXH3_64bits(b.data(), b.size() - 8));
    return b;
  };
  WalRecord r;
  std::string why;
  ASSERT_EQ(Parse(encoded(7, kWalMaxExpireAt), &r, &why), WalParse::kRecord) << why;
  EXPECT_EQ(r.expire_at, kWalMaxExpireAt);
  // Past the year 9999, negative, of filter 0: damage, named.
  std::vector<uint8_t> late = encoded(7, 0);
  Put64(late.data() + kWalRecordHeaderBytes, uint64_t(kWalMaxExpireAt) + 1);
  EXPECT_EQ(Parse(reseal(late), &r, &why), WalParse::kBad);
  EXPECT_TRUE(absl::StrContains(why, "expiry record with expire_at")) << why;
  std::vector<uint8_t> negative = encoded(7, 0);
  Put64(negative.data() + kWalRecordHeaderBytes, ~uint64_t{0});
  EXPECT_EQ(Parse(reseal(negative), &r, &why), WalParse::kBad);
  EXPECT_EQ(Parse(encoded(0, 5), &r, &why), WalParse::kBad);
  EXPECT_TRUE(absl::StrContains(why, "filter id 0")) << why;
  // Flags this build does not know: a newer cuckood's.
  std::vector<uint8_t> flags = encoded(7, 5);
  flags[5] = 1;
  EXPECT_EQ(Parse(reseal(flags), &r, &why), WalParse::kUnknown);
  // Every flipped bit is caught by the checksum.
  const std::vector<uint8_t> good = encoded(7, 5);
  for (size_t bit = 0; bit < 8 * good.size(); ++bit) {
    std::vector<uint8_t> b = good;
    b[bit / 8] ^= uint8_t(1u << (bit % 8));
    EXPECT_NE(Parse(b, &r, &why), WalParse::kRecord) << bit;
  }
}

// A rename record as docs/WAL_FORMAT.md lays it out (not from the encoder):
// the header with the renamed filter's id, then replaced_id u64,
// name_length u32, reserved u32 and the name padded to 8 bytes.
std::vector<uint8_t> DocumentedRenameRecord(uint64_t lsn, uint64_t id, absl::string_view name,
                                            uint64_t replaced, bool replace) {
  const size_t length = 32 + 16 + (name.size() + 7) / 8 * 8 + 8;
  std::vector<uint8_t> out(length, 0);
  Put32(out.data(), static_cast<uint32_t>(length));
  out[4] = 8;
  out[5] = replace ? 1 : 0;
  Put64(out.data() + 8, lsn);
  Put64(out.data() + 16, lsn - 1);
  Put64(out.data() + 24, id);
  Put64(out.data() + 32, replaced);
  Put32(out.data() + 40, static_cast<uint32_t>(name.size()));
  std::memcpy(out.data() + 48, name.data(), name.size());
  Put64(out.data() + length - 8, XXH3_64bits(out.data(), length - 8));
  return out;
}

TEST(WalRename, RenameRecordsRoundTripAsTheFormatDocumentsThem) {
  for (const std::string& name : {std::string("seen:yesterday"), std::string(512, 'n')}) {
    for (bool replace : {false, true}) {
      std::vector<uint8_t> bytes(WalRenameFilterBytes(name));
      EncodeRenameFilter(20, 19, 3, name, replace ? 9 : 0, replace, bytes.data());
      EXPECT_EQ(bytes, DocumentedRenameRecord(20, 3, name, replace ? 9 : 0, replace));
      WalRecord r;
      std::string why;
      ASSERT_EQ(Parse(bytes, &r, &why), WalParse::kRecord) << why;
      EXPECT_EQ(r.type, WalRecordType::kRenameFilter);
      EXPECT_EQ(r.lsn, 20u);
      EXPECT_EQ(r.filter_id, 3u);
      EXPECT_EQ(r.name, name);
      EXPECT_EQ(r.replaced_id, replace ? 9u : 0u);
      EXPECT_EQ(r.replace, replace);
    }
  }
}

TEST(WalRename, ALoggedRenameIsReadBackInItsPlace) {
  TempDir dir;
  const std::string wal_dir = dir.path() + "/wal";
  {
    auto wal = OpenWal(wal_dir, PosixEnv());
    ASSERT_NE(wal, nullptr);
    const uint64_t a = wal->AppendCreateFilter("a", SomeShape());
    const uint64_t b = wal->AppendCreateFilter("b", SomeShape());
    const uint64_t last = wal->AppendRenameFilter(a, "b", b, true);
    ASSERT_TRUE(wal->WaitDurable(last).ok());
  }
  std::vector<WalRecord> records;
  absl::StatusOr<WalScan> scan = Scan(PosixEnv(), wal_dir, &records);
  ASSERT_TRUE(scan.ok()) << scan.status();
  ASSERT_EQ(records.size(), 3u);
  EXPECT_EQ(records[2].type, WalRecordType::kRenameFilter);
  EXPECT_EQ(records[2].filter_id, 1u);
  EXPECT_EQ(records[2].replaced_id, 2u);
  EXPECT_EQ(records[2].name, "b");
  EXPECT_TRUE(records[2].replace);
}

TEST(WalRename, DamagedRenameRecordsAreDataLossNamingTheProblemAndNewFlagsAreNewer) {
  auto reseal = [](std::vector<uint8_t> b) {
    Put64(b.data() + b.size() - 8, XXH3_64bits(b.data(), b.size() - 8));
    return b;
  };
  WalRecord r;
  std::string why;
  struct Case {
    std::vector<uint8_t> bytes;
    std::string says;
  };
  std::vector<Case> bad;
  {
    auto b = DocumentedRenameRecord(20, 3, "abc", 0, false);
    Put32(b.data() + 44, 1);  // Reserved.
    bad.push_back({b, "reserved"});
  }
  {
    auto b = DocumentedRenameRecord(20, 3, "abc", 0, false);
    Put32(b.data() + 40, 0);  // No name.
    bad.push_back({b, "0-byte name"});
  }
  {
    auto b = DocumentedRenameRecord(20, 3, "abc", 0, false);
    Put32(b.data() + 40, 9);  // Longer than the record holds.
    bad.push_back({b, "9-byte name"});
  }
  {
    auto b = DocumentedRenameRecord(20, 3, "abc", 0, false);
    b[48 + 4] = 'x';  // Padding.
    bad.push_back({b, "padding"});
  }
  {
    auto b = DocumentedRenameRecord(20, 3, "ab", 0, false);
    b[48 + 1] = 0;  // A NUL in the name.
    bad.push_back({b, "bad filter name"});
  }
  bad.push_back({DocumentedRenameRecord(20, 0, "abc", 0, false), "impossible filter ids"});
  bad.push_back({DocumentedRenameRecord(20, 20, "abc", 0, false), "impossible filter ids"});
  bad.push_back({DocumentedRenameRecord(20, 3, "abc", 3, true), "impossible filter ids"});
  bad.push_back({DocumentedRenameRecord(20, 3, "abc", 25, true), "impossible filter ids"});
  {
    auto b = DocumentedRenameRecord(20, 3, "abc", 0, false);
    b.resize(32 + 8 + 8);  // Too short for its fields.
    Put32(b.data(), static_cast<uint32_t>(b.size()));
    bad.push_back({b, "too short"});
  }
  for (const Case& c : bad) {
    EXPECT_EQ(Parse(reseal(c.bytes), &r, &why), WalParse::kBad) << c.says;
    EXPECT_TRUE(absl::StrContains(why, c.says)) << why;
  }
  auto flags = DocumentedRenameRecord(20, 3, "abc", 0, false);
  flags[5] = 2;
  EXPECT_EQ(Parse(reseal(flags), &r, &why), WalParse::kUnknown);
  EXPECT_TRUE(absl::StrContains(why, "unknown record flags")) << why;
}

TEST(WalTest, NewerSegmentVersionOrRecordTypeIsRefusedNotCut) {
  TempDir dir;
  const std::string wal_dir = dir.path() + "/wal";
  const std::string segment = WriteSyncedLog(wal_dir, 3);
  const std::vector<uint8_t> good = ReadFile(segment);

  std::vector<uint8_t> newer = good;
  newer[8] = 2;  // Segment format version 2, header checksum resealed.
  const uint64_t sum = XXH3_64bits(newer.data(), 56);
  std::memcpy(newer.data() + 56, &sum, 8);
  WriteFile(segment, newer);
  absl::StatusOr<WalScan> scan = Scan(PosixEnv(), wal_dir, nullptr);
  EXPECT_TRUE(absl::IsFailedPrecondition(scan.status())) << scan.status();
  EXPECT_TRUE(absl::StrContains(scan.status().message(), "newer cuckood")) << scan.status();

  std::vector<uint8_t> unknown = good;
  const size_t second = kWalSegmentHeaderBytes + WalShardWriteBytes(5);
  unknown[second + 4] = 99;  // Record type 99, record checksum resealed.
  const size_t len = WalShardWriteBytes(5);
  const uint64_t rsum = XXH3_64bits(unknown.data() + second, len - 8);
  std::memcpy(unknown.data() + second + len - 8, &rsum, 8);
  WriteFile(segment, unknown);
  scan = Scan(PosixEnv(), wal_dir, nullptr);
  EXPECT_TRUE(absl::IsFailedPrecondition(scan.status())) << scan.status();
  EXPECT_TRUE(absl::StrContains(scan.status().message(), "unknown record type 99"))
      << scan.status();
  EXPECT_TRUE(absl::StrContains(scan.status().message(), absl::StrCat("offset ", second)))
      << scan.status();
}

TEST(WalTest, SegmentsRotateAndTruncationRemovesOnlyWhatNoOneNeeds) {
  TempDir dir;
  const std::string wal_dir = dir.path() + "/wal";
  auto wal = OpenWal(wal_dir, PosixEnv());
  ASSERT_NE(wal, nullptr);
  // ~8 KiB records, 256 KiB segments: ~30 records per segment.
  uint64_t lsn = 0;
  for (int i = 0; i < 200; ++i) lsn = AppendInsert(*wal, 1, i * 1000, 1000);
  ASSERT_TRUE(wal->WaitDurable(lsn).ok());
  WalStats st = wal->Stats();
  EXPECT_GE(st.segments, 7u);
  std::vector<WalRecord> records;
  absl::StatusOr<WalScan> scan = Scan(PosixEnv(), wal_dir, &records);
  ASSERT_TRUE(scan.ok()) << scan.status();
  ASSERT_EQ(records.size(), 200u);
  ASSERT_GE(scan->segments.size(), 7u);

  // Everything from lsn 120 on is needed: the segments before the one
  // holding 120 go, that one stays.
  ASSERT_TRUE(wal->Truncate(120).ok());
  records.clear();
  scan = Scan(PosixEnv(), wal_dir, &records);
  ASSERT_TRUE(scan.ok()) << scan.status();
  ASSERT_FALSE(records.empty());
  EXPECT_LE(records.front().lsn, 120u);
  EXPECT_GT(records.front().lsn, 120u - 40);
  EXPECT_EQ(records.back().lsn, 200u);
  EXPECT_LT(wal->Stats().segments, st.segments);

  // Even with nothing needed, the segment being written stays.
  ASSERT_TRUE(wal->Truncate(1'000'000).ok());
  EXPECT_GE(wal->Stats().segments, 1u);
  lsn = AppendInsert(*wal, 1, 5, 1);
  ASSERT_TRUE(wal->WaitDurable(lsn).ok());
  wal.reset();
  records.clear();
  scan = Scan(PosixEnv(), wal_dir, &records);
  ASSERT_TRUE(scan.ok()) << scan.status();
  ASSERT_FALSE(records.empty());
  EXPECT_EQ(records.back().lsn, 201u);
}

TEST(WalTest, ConcurrentWritersAreGroupCommittedAndAllAcknowledged) {
  TempDir dir;
  const std::string wal_dir = dir.path() + "/wal";
  auto wal = OpenWal(wal_dir, PosixEnv());
  ASSERT_NE(wal, nullptr);
  std::atomic<int> acked{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 200; ++i) {
        if (wal->WaitDurable(AppendInsert(*wal, 1, t * 10000 + i, 3)).ok()) ++acked;
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(acked.load(), 1600);
  const WalStats st = wal->Stats();
  EXPECT_EQ(st.durable_lsn, 1600u);
  EXPECT_EQ(st.synced_lsn, 1600u);
}

// The power-cut tests: what was acknowledged survives, whatever else of the
// unsynced tail the disk kept.
TEST(WalTest, PowerCutInSyncModeKeepsEveryAcknowledgedRecord) {
  for (double keep : {0.0, 0.5}) {
    TempDir dir;
    const std::string wal_dir = dir.path() + "/wal";
    FaultWalEnv env;
    uint64_t acked_up_to = 0;
    {
      auto wal = OpenWal(wal_dir, &env);
      ASSERT_NE(wal, nullptr);
      for (int i = 0; i < 100; ++i) {
        const uint64_t lsn = AppendInsert(*wal, 1, i * 100, 50);
        if (i % 10 == 9) {
          ASSERT_TRUE(wal->WaitDurable(lsn).ok());
          acked_up_to = lsn;
        }
      }
      // The power goes while the rest may still be in flight.
      env.PowerCut(keep, 7);
    }
    env.Revive();
    std::vector<WalRecord> records;
    absl::StatusOr<WalScan> scan = Scan(&env, wal_dir, &records);
    ASSERT_TRUE(scan.ok()) << scan.status();
    EXPECT_GE(scan->last_lsn, acked_up_to);
    for (size_t i = 0; i < records.size(); ++i) ASSERT_EQ(records[i].lsn, i + 1);
  }
}

TEST(WalTest, PowerCutInIntervalModeLosesAtMostTheLastInterval) {
  TempDir dir;
  const std::string wal_dir = dir.path() + "/wal";
  FaultWalEnv env;
  const absl::Duration interval = absl::Milliseconds(200);
  std::vector<std::pair<uint64_t, absl::Time>> acked;
  absl::Time cut_at;
  {
    auto wal = OpenWal(wal_dir, &env, Durability::kInterval, nullptr, interval);
    ASSERT_NE(wal, nullptr);
    const absl::Time end = absl::Now() + absl::Seconds(1);
    for (int i = 0; absl::Now() < end; ++i) {
      const uint64_t lsn = AppendInsert(*wal, 1, i, 4);
      ASSERT_TRUE(wal->WaitDurable(lsn).ok());
      acked.emplace_back(lsn, absl::Now());
      absl::SleepFor(absl::Milliseconds(2));
    }
    cut_at = absl::Now();
    env.PowerCut();
  }
  env.Revive();
  absl::StatusOr<WalScan> scan = Scan(&env, wal_dir, nullptr);
  ASSERT_TRUE(scan.ok()) << scan.status();
  uint64_t lost = 0;
  absl::Time oldest_lost = absl::InfiniteFuture();
  for (const auto& [lsn, t] : acked) {
    if (lsn > scan->last_lsn) {
      ++lost;
      oldest_lost = std::min(oldest_lost, t);
    }
  }
  std::cout << "interval " << absl::FormatDuration(interval) << ": lost " << lost << " of "
            << acked.size() << " acknowledged records, the oldest acknowledged "
            << absl::FormatDuration(cut_at - oldest_lost) << " before the power cut\n";
  if (lost > 0) {
    // One interval, plus the fdatasync itself and scheduling slack.
    EXPECT_LE(cut_at - oldest_lost, interval + absl::Milliseconds(150));
  }
  EXPECT_GT(scan->last_lsn, 0u) << "interval syncs ran";
}

TEST(WalTest, EnospcOnAppendFailsTheWaitersAndTheLogNeverAcknowledgesAgain) {
  TempDir dir;
  const std::string wal_dir = dir.path() + "/wal";
  FaultWalEnv env;
  std::atomic<int> failures{0};
  auto wal = OpenWal(wal_dir, &env, Durability::kSync,
                     [&](const absl::Status&) { failures.fetch_add(1); });
  ASSERT_NE(wal, nullptr);
  ASSERT_TRUE(wal->WaitDurable(AppendInsert(*wal, 1, 1, 1)).ok());
  env.SetFail([](const std::string& op, const std::string&) { return op == "write" ? ENOSPC : 0; });
  absl::Status s = wal->WaitDurable(AppendInsert(*wal, 1, 2, 1));
  EXPECT_TRUE(absl::IsResourceExhausted(s)) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "No space left on device")) << s;
  env.SetFail(nullptr);  // The disk has room again: the log stays failed.
  s = wal->WaitDurable(AppendInsert(*wal, 1, 3, 1));
  EXPECT_FALSE(s.ok());
  EXPECT_FALSE(wal->Reserve(100).ok());
  EXPECT_FALSE(wal->health().ok());
  // on_failure runs after the waiters are answered.
  for (int i = 0; i < 100 && failures.load() == 0; ++i) absl::SleepFor(absl::Milliseconds(10));
  EXPECT_EQ(failures.load(), 1);
}

TEST(WalTest, EioOnFdatasyncIsUnavailableAndNeverRetried) {
  TempDir dir;
  const std::string wal_dir = dir.path() + "/wal";
  FaultWalEnv env;
  std::atomic<int> failures{0};
  auto wal = OpenWal(wal_dir, &env, Durability::kSync,
                     [&](const absl::Status&) { failures.fetch_add(1); });
  ASSERT_NE(wal, nullptr);
  std::atomic<int> syncs_after_failure{0};
  std::atomic<bool> failed{false};
  env.SetFail([&](const std::string& op, const std::string&) {
    if (op != "sync") return 0;
    if (failed.exchange(true)) ++syncs_after_failure;
    return EIO;
  });
  absl::Status s = wal->WaitDurable(AppendInsert(*wal, 1, 2, 1));
  EXPECT_TRUE(absl::IsUnavailable(s)) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "Input/output error")) << s;
  env.SetFail(nullptr);
  EXPECT_FALSE(wal->WaitDurable(AppendInsert(*wal, 1, 3, 1)).ok());
  EXPECT_FALSE(wal->SyncTo(wal->Stats().appended_lsn).ok());
  EXPECT_EQ(syncs_after_failure.load(), 0);
  for (int i = 0; i < 100 && failures.load() == 0; ++i) absl::SleepFor(absl::Milliseconds(10));
  EXPECT_EQ(failures.load(), 1);
}

TEST(WalTest, FullDiskWhenPreparingASegmentRefusesReservationsBeforeAnythingIsApplied) {
  TempDir dir;
  const std::string wal_dir = dir.path() + "/wal";
  FaultWalEnv env;
  std::atomic<bool> full{true};
  env.SetFail([&](const std::string& op, const std::string&) {
    return op == "create" && full.load() ? ENOSPC : 0;
  });
  auto wal = OpenWal(wal_dir, &env);
  ASSERT_NE(wal, nullptr);
  absl::Status s = wal->Reserve(WalBytesForBatch(1000, 16));
  for (int i = 0; i < 50 && s.ok(); ++i) {
    wal->Unreserve(WalBytesForBatch(1000, 16));
    absl::SleepFor(absl::Milliseconds(20));
    s = wal->Reserve(WalBytesForBatch(1000, 16));
  }
  EXPECT_TRUE(absl::IsResourceExhausted(s)) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "nothing of this request was applied")) << s;
  EXPECT_TRUE(wal->health().ok()) << "a refused reservation does not fail the log";
  // Room again: after at most a second the log prepares its segment.
  full = false;
  absl::SleepFor(absl::Milliseconds(1100));
  ASSERT_TRUE(wal->Reserve(WalBytesForBatch(1000, 16)).ok());
  const uint64_t lsn = AppendInsert(*wal, 1, 1, 1000);
  wal->Unreserve(WalBytesForBatch(1000, 16));
  EXPECT_TRUE(wal->WaitDurable(lsn).ok());
}

// A batch whose records need more than a segment (100000 keys on 256 KiB
// segments) is admitted, and its records span segments.
TEST(WalTest, ABatchLargerThanASegmentIsAdmittedAndSpansSegments) {
  TempDir dir;
  const std::string wal_dir = dir.path() + "/wal";
  auto wal = OpenWal(wal_dir, PosixEnv());
  ASSERT_NE(wal, nullptr);
  const uint64_t bound = WalBytesForBatch(100'000, 16);
  ASSERT_GT(bound, kSegment);
  ASSERT_TRUE(wal->Reserve(bound).ok());
  uint64_t lsn = 0;
  for (int i = 0; i < 25; ++i) lsn = AppendInsert(*wal, 1, i * 4096, 4096);
  wal->Unreserve(bound);
  ASSERT_TRUE(wal->WaitDurable(lsn).ok());
  EXPECT_GE(wal->Stats().segments, 3u);
  std::vector<WalRecord> records;
  absl::StatusOr<WalScan> scan = Scan(PosixEnv(), wal_dir, &records);
  ASSERT_TRUE(scan.ok()) << scan.status();
  EXPECT_EQ(records.size(), 25u);
}

TEST(WalTest, ReservationsWaitWhilePendingBytesAreAtTheirBound) {
  TempDir dir;
  const std::string wal_dir = dir.path() + "/wal";
  absl::StatusOr<WalScan> scan = Scan(PosixEnv(), wal_dir, nullptr);
  ASSERT_TRUE(scan.ok()) << scan.status();
  const uint64_t bound = 4 * kWalMaxRecordBytes;
  EXPECT_TRUE(absl::IsInvalidArgument(
      Wal::Open(
          {.dir = wal_dir, .segment_bytes = uint64_t{4} << 20, .max_pending_bytes = bound - 1},
          *scan, 0)
          .status()));
  absl::StatusOr<std::unique_ptr<Wal>> wal = Wal::Open(
      {.dir = wal_dir, .segment_bytes = uint64_t{4} << 20, .max_pending_bytes = bound}, *scan, 0);
  ASSERT_TRUE(wal.ok()) << wal.status();
  // The segment has room for both; the bound does not.
  const uint64_t part = bound * 3 / 4;
  ASSERT_TRUE((*wal)->Reserve(part).ok());
  std::atomic<bool> released{false};
  std::thread release([&] {
    absl::SleepFor(absl::Milliseconds(300));
    released = true;
    (*wal)->Unreserve(part);
  });
  EXPECT_TRUE((*wal)->Reserve(part).ok());
  EXPECT_TRUE(released.load()) << "the second reservation did not wait for the first";
  release.join();
  // A batch larger than the bound reserves the bound, and is admitted.
  (*wal)->Unreserve(part);
  ASSERT_TRUE((*wal)->Reserve(10 * bound).ok());
  (*wal)->Unreserve(10 * bound);
}

TEST(WalTest, ClosingWritesAndSyncsEverythingAppended) {
  TempDir dir;
  const std::string wal_dir = dir.path() + "/wal";
  FaultWalEnv env;
  {
    auto wal = OpenWal(wal_dir, &env, Durability::kNone);
    ASSERT_NE(wal, nullptr);
    for (int i = 0; i < 10; ++i) AppendInsert(*wal, 1, i, 2);
    wal->Close();
  }
  env.PowerCut();
  env.Revive();
  absl::StatusOr<WalScan> scan = Scan(&env, wal_dir, nullptr);
  ASSERT_TRUE(scan.ok()) << scan.status();
  EXPECT_EQ(scan->last_lsn, 10u);
}

// A Env over the real file system that counts segment preparations
// (Create of a segment) and, while `held`, makes each wait until released
// or cancelled.
class GatedWalEnv : public ForwardingWalEnv {
 public:
  absl::StatusOr<std::unique_ptr<EnvFile>> Create(const std::string& path, uint64_t bytes,
                                                  const std::atomic<bool>* cancel) override {
    if (!absl::EndsWith(path, kWalSegmentSuffix)) return base_->Create(path, bytes, cancel);
    std::unique_lock<std::mutex> lock(mu_);
    ++creates_;
    ++waiting_;
    cv_.notify_all();
    // Bounded: 3000 polls of 10 ms; a cancel is seen within one poll.
    for (int i = 0; i < 3000 && held_; ++i) {
      if (cancel != nullptr && cancel->load()) {
        saw_cancel_ = true;
        break;
      }
      cv_.wait_for(lock, std::chrono::milliseconds(10));
    }
    --waiting_;
    lock.unlock();
    return base_->Create(path, bytes, cancel);
  }
  void Hold(bool held) {
    std::lock_guard<std::mutex> lock(mu_);
    held_ = held;
    cv_.notify_all();
  }
  // Waits (bounded) until a preparation waits at the gate.
  bool AwaitWaiting() {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, std::chrono::seconds(30), [&] { return waiting_ > 0; });
  }
  int creates() {
    std::lock_guard<std::mutex> lock(mu_);
    return creates_;
  }
  bool saw_cancel() {
    std::lock_guard<std::mutex> lock(mu_);
    return saw_cancel_;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool held_ = false;
  int creates_ = 0;
  int waiting_ = 0;
  bool saw_cancel_ = false;
};

// Issue 29: every start deleted the unused prepared segment and wrote a new
// one (64 MiB of zeros by default).
TEST(WalTest, RestartReusesThePreparedSegmentInsteadOfWritingANewOne) {
  TempDir dir;
  const std::string wal_dir = dir.path() + "/wal";
  GatedWalEnv env;
  {
    auto wal = OpenWal(wal_dir, &env);
    ASSERT_NE(wal, nullptr);
    EXPECT_EQ(env.creates(), 1) << "the first segment is prepared at open";
    EXPECT_EQ(wal->Stats().segments, 1u);
  }
  for (int restart = 0; restart < 3; ++restart) {
    auto wal = OpenWal(wal_dir, &env);
    ASSERT_NE(wal, nullptr);
    EXPECT_EQ(wal->Stats().segments, 1u) << "the prepared segment is kept";
  }
  EXPECT_EQ(env.creates(), 1) << "restarts wrote no new segment";
  // It is used when the first record comes, and the log reads back.
  {
    auto wal = OpenWal(wal_dir, &env);
    ASSERT_NE(wal, nullptr);
    ASSERT_TRUE(wal->WaitDurable(wal->AppendCreateFilter("users", SomeShape())).ok());
  }
  std::vector<WalRecord> records;
  absl::StatusOr<WalScan> scan = Scan(PosixEnv(), wal_dir, &records);
  ASSERT_TRUE(scan.ok()) << scan.status();
  EXPECT_EQ(records.size(), 1u);
  EXPECT_EQ(scan->segments.size(), 1u);
  EXPECT_EQ(scan->segments[0].sequence, 1u);
}

// Issue 29: the first write after a start waited for the segment being
// prepared, and on a slow disk got "the write-ahead log had no room for
// this request within 5 s". Here every preparation after the first blocks:
// writes are still acknowledged, from the segment prepared before.
TEST(WalTest, FirstWriteAfterStartDoesNotWaitForPreparation) {
  TempDir dir;
  const std::string wal_dir = dir.path() + "/wal";
  GatedWalEnv env;
  { ASSERT_NE(OpenWal(wal_dir, &env), nullptr); }
  env.Hold(true);
  auto wal = OpenWal(wal_dir, &env);
  ASSERT_NE(wal, nullptr);
  const uint64_t bytes = WalBytesForBatch(100, 2);
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(wal->Reserve(bytes).ok());
    const uint64_t lsn = AppendInsert(*wal, 1, 10 * i, 100);
    wal->Unreserve(bytes);
    EXPECT_TRUE(wal->WaitDurable(lsn).ok());
  }
  EXPECT_TRUE(env.AwaitWaiting()) << "the next segment is being prepared meanwhile";
  env.Hold(false);
}

// Issue 29: shutdown waited for a preparation in progress (4-8 s on a slow
// disk with 64 MiB segments). Close cancels it.
TEST(WalTest, ShutdownDoesNotWaitForAnInProgressPreparation) {
  TempDir dir;
  const std::string wal_dir = dir.path() + "/wal";
  GatedWalEnv env;
  auto wal = OpenWal(wal_dir, &env);
  ASSERT_NE(wal, nullptr);
  env.Hold(true);
  // The first record starts the prepared segment, which asks for the next.
  ASSERT_TRUE(wal->WaitDurable(wal->AppendCreateFilter("users", SomeShape())).ok());
  ASSERT_TRUE(env.AwaitWaiting());
  wal->Close();
  EXPECT_TRUE(env.saw_cancel()) << "Close cancelled the preparation instead of waiting";
  wal.reset();
  // The next start redoes it, and the log is intact.
  env.Hold(false);
  std::vector<WalRecord> records;
  auto again = OpenWal(wal_dir, &env);
  ASSERT_NE(again, nullptr);
  EXPECT_EQ(again->Stats().segments, 2u);
  again.reset();
  ASSERT_TRUE(Scan(PosixEnv(), wal_dir, &records).ok());
  EXPECT_EQ(records.size(), 1u);
}

// A volume of a given size and free space, for CheckWalDiskSpace.
class SizedVolumeEnv : public GatedWalEnv {
 public:
  SizedVolumeEnv(uint64_t total, uint64_t free) : space_{total, free} {}
  absl::StatusOr<VolumeSpace> DiskSpace(const std::string&) override { return space_; }

 private:
  VolumeSpace space_;
};

// Issue 29: on a 64 MiB volume the first 64 MiB segment filled the disk and
// every snapshot failed with ENOSPC. Such a segment size is refused at start.
TEST(WalTest, SegmentSizeThatCannotFitOnTheVolumeIsRefusedAtStart) {
  TempDir dir;
  const std::string wal_dir = dir.path() + "/wal";
  const uint64_t mib = uint64_t{1} << 20;
  SizedVolumeEnv small(64 * mib, 63 * mib);
  absl::Status s = CheckWalDiskSpace(&small, dir.path(), wal_dir, 64 * mib);
  EXPECT_TRUE(absl::IsFailedPrecondition(s)) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "--wal-segment-size of 64.0 MiB does not fit")) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "holds 64.0 MiB with 63.0 MiB free")) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "at most 31.5 MiB would fit")) << s;
  // A snapshot on the volume needs room for its rewrite too.
  { std::ofstream(dir.path() + "/users.cuckoo") << std::string(20 * mib, 'x'); }
  EXPECT_TRUE(CheckWalDiskSpace(&small, dir.path(), wal_dir, 16 * mib).ok());
  s = CheckWalDiskSpace(&small, dir.path(), wal_dir, 24 * mib);
  EXPECT_TRUE(absl::IsFailedPrecondition(s)) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "the largest snapshot (20.0 MiB)")) << s;
  fs::remove(dir.path() + "/users.cuckoo");
  // What fits is accepted, counting the log's own segments as room.
  SizedVolumeEnv half_full(64 * mib, 2 * mib);
  fs::create_directories(wal_dir);
  { std::ofstream(wal_dir + "/0000000000000001.wal") << std::string(8 * mib, '\0'); }
  EXPECT_TRUE(CheckWalDiskSpace(&half_full, dir.path(), wal_dir, 4 * mib).ok());
  EXPECT_FALSE(CheckWalDiskSpace(&half_full, dir.path(), wal_dir, 8 * mib).ok());
  // A normal setup, and the real file system, pass.
  SizedVolumeEnv big(uint64_t{100} << 30, uint64_t{50} << 30);
  EXPECT_TRUE(CheckWalDiskSpace(&big, dir.path() + "/not-yet", wal_dir, 64 * mib).ok());
  EXPECT_TRUE(CheckWalDiskSpace(PosixEnv(), dir.path() + "/not/yet", wal_dir, kSegment).ok());
}

// The real file system, counting the bytes read from files.
class CountingWalEnv : public ForwardingWalEnv {
 public:
  uint64_t read_bytes() const { return read_.load(); }

  absl::StatusOr<std::unique_ptr<EnvFile>> Open(const std::string& path) override {
    absl::StatusOr<std::unique_ptr<EnvFile>> f = base_->Open(path);
    if (!f.ok()) return f;
    return std::unique_ptr<EnvFile>(new File(*std::move(f), &read_));
  }

 private:
  class File : public EnvFile {
   public:
    File(std::unique_ptr<EnvFile> base, std::atomic<uint64_t>* read)
        : base_(std::move(base)), read_(read) {}
    absl::Status Write(uint64_t offset, absl::Span<const uint8_t> data) override {
      return base_->Write(offset, data);
    }
    absl::Status Sync() override { return base_->Sync(); }
    absl::StatusOr<size_t> Read(uint64_t offset, absl::Span<uint8_t> out) override {
      absl::StatusOr<size_t> n = base_->Read(offset, out);
      if (n.ok()) *read_ += *n;
      return n;
    }
    absl::Status Truncate(uint64_t size) override { return base_->Truncate(size); }
    absl::StatusOr<uint64_t> Size() override { return base_->Size(); }
    const std::string& path() const override { return base_->path(); }

   private:
    std::unique_ptr<EnvFile> base_;
    std::atomic<uint64_t>* read_;
  };
  std::atomic<uint64_t> read_{0};
};

// Writes `n` inserts of 100 hashes each through a log in `dir`, then closes
// it; returns the lsns.
std::vector<uint64_t> WriteAndClose(const std::string& dir, int n, uint64_t first_hash) {
  std::vector<uint64_t> lsns;
  auto wal = OpenWal(dir, PosixEnv());
  if (wal == nullptr) return lsns;
  for (int i = 0; i < n; ++i) {
    lsns.push_back(AppendInsert(*wal, 1, first_hash + 1000 * i, 100));
  }
  EXPECT_TRUE(wal->WaitDurable(lsns.back()).ok());
  // The preparer makes the next segment in the background and a close does
  // not wait for it (ShutdownDoesNotWaitForAnInProgressPreparation): wait
  // here, so that the closed log always has its prepared segment (under
  // TSan the close came first once).
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (wal->Stats().segments < 2 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_GE(wal->Stats().segments, 2u) << "the next segment was not prepared in 60 s";
  return lsns;
}

// Issue 29: replay read every segment whole, the zero-filled prepared one
// and the unwritten rest of the last one too (128 MiB with the default
// segment size, whatever the log held). After a clean close it reads what
// was written and a few KiB of zeros; after a crash, everything as before.
TEST(WalTest, RestartAfterACleanCloseReadsOnlyTheWrittenPartOfTheLog) {
  TempDir dir;
  const std::string wal_dir = dir.path() + "/wal";
  const std::vector<uint64_t> lsns = WriteAndClose(wal_dir, 20, 7);
  ASSERT_EQ(lsns.size(), 20u);
  ASSERT_TRUE(fs::exists(wal_dir + "/CLOSED"));
  // Two files of kSegment bytes: the last segment and the prepared one.
  ASSERT_EQ(std::distance(fs::directory_iterator(wal_dir), fs::directory_iterator()), 3);

  CountingWalEnv counting;
  std::vector<WalRecord> records;
  absl::StatusOr<WalScan> scan = Scan(&counting, wal_dir, &records);
  ASSERT_TRUE(scan.ok()) << scan.status();
  ASSERT_EQ(records.size(), lsns.size());
  EXPECT_EQ(records.back().lsn, lsns.back());
  EXPECT_TRUE(scan->closed_cleanly) << scan->closed_ignored;
  EXPECT_EQ(scan->closed_ignored, "");
  EXPECT_EQ(scan->prepared.file_bytes, kSegment) << "the prepared segment is kept";
  const uint64_t written = kWalSegmentHeaderBytes + scan->bytes;
  EXPECT_EQ(scan->segments.back().end, written);
  EXPECT_EQ(scan->segments.back().file_bytes, kSegment) << "the file's size, not what was read";
  EXPECT_EQ(counting.read_bytes(), scan->read_bytes);
  EXPECT_LE(counting.read_bytes(), written + kWalClosedBytes + 2 * kWalClosedCheckBytes);
  EXPECT_LT(counting.read_bytes(), kSegment / 8);

  // The same log without the file (as a crash leaves it): read whole, the
  // same records.
  const std::string crashed = dir.path() + "/crashed";
  fs::copy(wal_dir, crashed);
  fs::remove(crashed + "/CLOSED");
  CountingWalEnv counting2;
  std::vector<WalRecord> records2;
  absl::StatusOr<WalScan> scan2 = Scan(&counting2, crashed, &records2);
  ASSERT_TRUE(scan2.ok()) << scan2.status();
  EXPECT_FALSE(scan2->closed_cleanly);
  EXPECT_EQ(records2.size(), records.size());
  EXPECT_EQ(scan2->prepared.file_bytes, kSegment);
  EXPECT_EQ(counting2.read_bytes(), 2 * kSegment);

  // Open removes the file before anything is appended; what is appended
  // then is found by a scan of the state a crash would leave.
  auto wal = OpenWal(wal_dir, &counting);
  ASSERT_NE(wal, nullptr);
  EXPECT_FALSE(fs::exists(wal_dir + "/CLOSED")) << "removed at open";
  const uint64_t more = AppendInsert(*wal, 1, 99, 100);
  ASSERT_TRUE(wal->WaitDurable(more).ok());
  const std::string open_copy = dir.path() + "/open-copy";
  fs::copy(wal_dir, open_copy);
  std::vector<WalRecord> records3;
  absl::StatusOr<WalScan> scan3 = Scan(PosixEnv(), open_copy, &records3);
  ASSERT_TRUE(scan3.ok()) << scan3.status();
  EXPECT_EQ(scan3->closed_file, "");
  ASSERT_EQ(records3.size(), lsns.size() + 1);
  EXPECT_EQ(records3.back().lsn, more);
}

// The clean-close file is a promise about the files; one that no longer
// holds (tampering, a file copied from another time) is ignored with the
// reason, and the log is read whole: no record is lost to it.
TEST(WalTest, ACleanCloseFileThatDoesNotMatchTheLogIsIgnoredAndNothingIsLost) {
  TempDir dir;
  const std::string wal_dir = dir.path() + "/wal";
  ASSERT_EQ(WriteAndClose(wal_dir, 3, 1).size(), 3u);
  std::string stale;
  {
    std::ifstream in(wal_dir + "/CLOSED", std::ios::binary);
    stale.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  ASSERT_EQ(stale.size(), kWalClosedBytes);
  // More records after it, in the same segment and (enough of them) the
  // next: a stale file claims the log ends earlier.
  const std::vector<uint64_t> later = WriteAndClose(wal_dir, 400, 50'000);
  ASSERT_EQ(later.size(), 400u);
  // A close may cancel the preparation the last segment started; an open
  // prepares before it returns: now a prepared segment is there.
  { ASSERT_NE(OpenWal(wal_dir, PosixEnv()), nullptr); }
  auto put = [&](const std::string& bytes) {
    std::ofstream(wal_dir + "/CLOSED", std::ios::binary | std::ios::trunc) << bytes;
  };
  auto scan_all = [&](WalScan* out) {
    std::vector<WalRecord> records;
    absl::StatusOr<WalScan> scan = Scan(PosixEnv(), wal_dir, &records);
    EXPECT_TRUE(scan.ok()) << scan.status();
    if (scan.ok()) *out = *scan;
    return records.empty() ? 0 : records.back().lsn;
  };
  WalScan scan;
  put(stale);
  EXPECT_EQ(scan_all(&scan), later.back());
  EXPECT_FALSE(scan.closed_cleanly);
  EXPECT_TRUE(absl::StrContains(scan.closed_ignored, "are not the log's last files") ||
              absl::StrContains(scan.closed_ignored, "does not end at offset"))
      << scan.closed_ignored;

  // A damaged file.
  std::string damaged = stale;
  damaged[30] ^= 1;
  put(damaged);
  EXPECT_EQ(scan_all(&scan), later.back());
  EXPECT_EQ(scan.closed_ignored, "it is not a valid clean-close record");

  // The right segment and end, but a prepared segment of another size.
  WalScan good;
  std::vector<WalRecord> records;
  fs::remove(wal_dir + "/CLOSED");
  ASSERT_TRUE(Scan(PosixEnv(), wal_dir, &records).ok());
  {
    absl::StatusOr<WalScan> s = Scan(PosixEnv(), wal_dir, nullptr);
    ASSERT_TRUE(s.ok());
    good = *s;
  }
  ASSERT_FALSE(good.prepared.path.empty());
  uint8_t bytes[kWalClosedBytes];
  EncodeWalClosed({.segment_sequence = good.segments.back().sequence,
                   .end = good.segments.back().end,
                   .last_lsn = good.segments.back().last_lsn,
                   .prepared_sequence = good.prepared.sequence,
                   .prepared_bytes = kSegment / 2},
                  bytes);
  put(std::string(reinterpret_cast<const char*>(bytes), sizeof(bytes)));
  EXPECT_EQ(scan_all(&scan), later.back());
  EXPECT_TRUE(absl::StrContains(scan.closed_ignored, "is not 131072 bytes of zeros"))
      << scan.closed_ignored;
  EXPECT_EQ(scan.prepared.file_bytes, kSegment) << "still kept: it was read whole";
  // A last lsn the segment does not end with.
  EncodeWalClosed({.segment_sequence = good.segments.back().sequence,
                   .end = good.segments.back().end,
                   .last_lsn = good.segments.back().last_lsn - 1,
                   .prepared_sequence = good.prepared.sequence,
                   .prepared_bytes = kSegment},
                  bytes);
  put(std::string(reinterpret_cast<const char*>(bytes), sizeof(bytes)));
  EXPECT_EQ(scan_all(&scan), later.back());
  EXPECT_TRUE(absl::StrContains(scan.closed_ignored, "does not end at offset"))
      << scan.closed_ignored;
  // And the true one is used.
  EncodeWalClosed({.segment_sequence = good.segments.back().sequence,
                   .end = good.segments.back().end,
                   .last_lsn = good.segments.back().last_lsn,
                   .prepared_sequence = good.prepared.sequence,
                   .prepared_bytes = kSegment},
                  bytes);
  put(std::string(reinterpret_cast<const char*>(bytes), sizeof(bytes)));
  EXPECT_EQ(scan_all(&scan), later.back());
  EXPECT_TRUE(scan.closed_cleanly) << scan.closed_ignored;
}

// A log that failed (here: a full disk) records no clean close: its end is
// not known to be what was acknowledged.
TEST(WalTest, ALogThatFailedRecordsNoCleanClose) {
  TempDir dir;
  const std::string wal_dir = dir.path() + "/wal";
  FaultWalEnv env;
  {
    auto wal = OpenWal(wal_dir, &env);
    ASSERT_NE(wal, nullptr);
    env.SetFail(
        [](const std::string& op, const std::string&) { return op == "write" ? ENOSPC : 0; });
    EXPECT_FALSE(wal->WaitDurable(AppendInsert(*wal, 1, 1, 10)).ok());
    env.SetFail(nullptr);
  }
  EXPECT_FALSE(fs::exists(wal_dir + "/CLOSED"));
  // A log that did not fail does.
  { ASSERT_NE(OpenWal(wal_dir, &env), nullptr); }
  EXPECT_TRUE(fs::exists(wal_dir + "/CLOSED"));
}

// --- Transactions (docs/WAL_FORMAT.md, "Transactions") ---

// Waits up to 10 s for `flag` (set by a waiter the committer thread
// answers: WaitDurable may return on this thread before the committer has
// run the other waiters it answered at the same moment).
bool Eventually(const std::atomic<bool>& flag) {
  for (int i = 0; i < 1000 && !flag.load(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return flag.load();
}

// The lsns of `records`.
std::vector<uint64_t> Lsns(const std::vector<WalRecord>& records) {
  std::vector<uint64_t> out;
  for (const WalRecord& r : records) out.push_back(r.lsn);
  return out;
}

TEST(WalTransaction, NothingFromAnOpenTransactionsBeginOnIsDurableUntilItsEndIs) {
  for (Durability mode : {Durability::kSync, Durability::kInterval, Durability::kNone}) {
    SCOPED_TRACE(DurabilityName(mode));
    TempDir dir;
    auto wal = OpenWal(dir.path() + "/wal", PosixEnv(), mode, nullptr, absl::Seconds(30));
    ASSERT_NE(wal, nullptr);
    const uint64_t before = AppendInsert(*wal, 1, 0, 4);
    ASSERT_TRUE(wal->WaitDurable(before).ok());
    const uint64_t begin = wal->BeginTransaction();
    EXPECT_EQ(begin, before + 1);
    const uint64_t inside = AppendInsert(*wal, 1, 100, 4);
    const uint64_t other = AppendInsert(*wal, 2, 200, 4);  // Another writer's.
    std::atomic<bool> answered{false}, synced{false};
    wal->WhenDurable(other, [&](absl::Status s) {
      EXPECT_TRUE(s.ok()) << s;
      answered = true;
    });
    std::thread syncer([&] {
      EXPECT_TRUE(wal->SyncTo(inside).ok());
      synced = true;
    });
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    // Written (and, in sync mode, fdatasync'ed), but held short of the begin.
    EXPECT_FALSE(answered.load());
    EXPECT_FALSE(synced.load());
    WalStats st = wal->Stats();
    EXPECT_EQ(st.durable_lsn, before);
    EXPECT_EQ(st.synced_lsn, before);
    EXPECT_EQ(st.open_transactions, 1u);
    wal->EndTransaction(begin);
    syncer.join();
    EXPECT_TRUE(synced.load());
    ASSERT_TRUE(wal->WaitDurable(other).ok());
    ASSERT_TRUE(Eventually(answered));
    st = wal->Stats();
    EXPECT_GE(st.synced_lsn, other + 1);  // The end record, synced for the SyncTo.
    EXPECT_EQ(st.open_transactions, 0u);
  }
}

TEST(WalTransaction, ALogEndingInsideATransactionIsCutAtItsBeginAndContinuesThere) {
  TempDir dir;
  const std::string wal_dir = dir.path() + "/wal";
  uint64_t begin = 0, last = 0;
  {
    auto wal = OpenWal(wal_dir, PosixEnv());
    ASSERT_NE(wal, nullptr);
    for (int i = 0; i < 3; ++i) ASSERT_TRUE(wal->WaitDurable(AppendInsert(*wal, 1, i, 4)).ok());
    begin = wal->BeginTransaction();
    for (int i = 0; i < 5; ++i) last = AppendInsert(*wal, 1 + i % 2, 100 + i, 4);
    // Closed with the transaction open (as a crash would leave it, except
    // that everything is on disk): no clean-close record.
    wal->Close();
  }
  EXPECT_FALSE(fs::exists(wal_dir + "/" + std::string(kWalClosedName)));
  std::vector<WalRecord> records;
  absl::StatusOr<WalScan> scan = Scan(PosixEnv(), wal_dir, &records);
  ASSERT_TRUE(scan.ok()) << scan.status();
  EXPECT_EQ(Lsns(records), (std::vector<uint64_t>{1, 2, 3}));
  EXPECT_EQ(scan->last_lsn, begin - 1);
  EXPECT_EQ(scan->cut_transaction, begin);
  EXPECT_EQ(scan->cut_records, last - begin + 1);
  EXPECT_EQ(scan->records, 3u);
  EXPECT_TRUE(absl::StrContains(scan->cut,
                                "transaction begun at lsn 4 (or one overlapping it) "
                                "has no end record"))
      << scan->cut;
  {
    // The log goes on at the begin's lsn, over the cut records.
    auto wal = OpenWal(wal_dir, PosixEnv());
    ASSERT_NE(wal, nullptr);
    const uint64_t next = AppendInsert(*wal, 1, 1000, 4);
    EXPECT_EQ(next, begin);
    ASSERT_TRUE(wal->WaitDurable(next).ok());
  }
  records.clear();
  scan = Scan(PosixEnv(), wal_dir, &records);
  ASSERT_TRUE(scan.ok()) << scan.status();
  EXPECT_EQ(Lsns(records), (std::vector<uint64_t>{1, 2, 3, 4}));
  EXPECT_EQ(records.back().hashes.front(), 1000u);
  EXPECT_TRUE(scan->cut.empty()) << scan->cut;
}

// Writes, in a new log in `wal_dir`, two overlapping transactions around
// writes; the second ends (and one more write follows) only if
// `end_second`.
void WriteOverlappingTransactions(const std::string& wal_dir, bool end_second) {
  auto wal = OpenWal(wal_dir, PosixEnv());
  ASSERT_NE(wal, nullptr);
  AppendInsert(*wal, 1, 10, 2);                // 1
  const uint64_t a = wal->BeginTransaction();  // 2
  AppendInsert(*wal, 1, 30, 2);                // 3
  const uint64_t b = wal->BeginTransaction();  // 4
  AppendInsert(*wal, 2, 50, 2);                // 5
  wal->EndTransaction(a);                      // 6
  AppendInsert(*wal, 1, 70, 2);                // 7
  if (!end_second) return;
  wal->EndTransaction(b);        // 8
  AppendInsert(*wal, 1, 90, 2);  // 9
  ASSERT_TRUE(wal->WaitDurable(9).ok());
}

TEST(WalTransaction, EndedTransactionsReplayInLogOrderAndAnUnendedOneCutsTheLogWhereItsRunBegan) {
  TempDir dir;
  const std::string wal_dir = dir.path() + "/wal";
  ASSERT_NO_FATAL_FAILURE(WriteOverlappingTransactions(wal_dir, /*end_second=*/true));
  std::vector<WalRecord> records;
  absl::StatusOr<WalScan> scan = Scan(PosixEnv(), wal_dir, &records);
  ASSERT_TRUE(scan.ok()) << scan.status();
  EXPECT_EQ(Lsns(records), (std::vector<uint64_t>{1, 2, 3, 4, 5, 6, 7, 8, 9}));
  EXPECT_EQ(records[1].type, WalRecordType::kTxnBegin);
  EXPECT_EQ(records[5].type, WalRecordType::kTxnEnd);
  EXPECT_EQ(records[5].filter_id, 2u);
  // Held records are the scan's own copies: their hashes are intact.
  EXPECT_EQ(records[4].write.hashes.size(), 2u);
  EXPECT_EQ(records[4].hashes.front(), 50u);
  EXPECT_TRUE(scan->cut.empty());

  // The same interleaving, but the second transaction never ends: the log
  // is cut where the run of the two began, at the first one's begin (cut
  // at the second's, the first would keep its write at lsn 3 and lose its
  // end).
  TempDir dir2;
  const std::string wal_dir2 = dir2.path() + "/wal";
  ASSERT_NO_FATAL_FAILURE(WriteOverlappingTransactions(wal_dir2, /*end_second=*/false));
  records.clear();
  scan = Scan(PosixEnv(), wal_dir2, &records);
  ASSERT_TRUE(scan.ok()) << scan.status();
  EXPECT_EQ(Lsns(records), (std::vector<uint64_t>{1}));
  EXPECT_EQ(scan->cut_transaction, 2u);
  EXPECT_EQ(scan->cut_records, 6u);
  EXPECT_EQ(scan->last_lsn, 1u);
}

TEST(WalTransaction, AnOverlappingRunIsDurableOnlyOnceItsEveryTransactionEnded) {
  TempDir dir;
  auto wal = OpenWal(dir.path() + "/wal", PosixEnv());
  ASSERT_NE(wal, nullptr);
  // (Begun within kWalMaxRunGrowth of each other: one run.)
  const uint64_t a = wal->BeginTransaction();      // 1
  const uint64_t w = AppendInsert(*wal, 1, 0, 2);  // 2: a's
  const uint64_t b = wal->BeginTransaction();      // 3
  wal->EndTransaction(a);                          // 4
  const uint64_t c = wal->BeginTransaction();      // 5: joins the run
  std::atomic<bool> answered{false};
  wal->WhenDurable(w, [&](absl::Status) { answered = true; });
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  // a ended, but b, which overlaps it, has not: a replay now would cut at
  // 1, so a's write is not durable yet.
  EXPECT_FALSE(answered.load());
  EXPECT_EQ(wal->Stats().durable_lsn, 0u);
  wal->EndTransaction(b);  // 6
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_FALSE(answered.load());  // c, begun before b ended, is still open.
  wal->EndTransaction(c);         // 7
  ASSERT_TRUE(wal->WaitDurable(7).ok());
  ASSERT_TRUE(Eventually(answered));
  EXPECT_EQ(wal->Stats().open_transactions, 0u);
  // A run after it is held from its own begin: the first run stays durable.
  const uint64_t d = wal->BeginTransaction();  // 8
  AppendInsert(*wal, 1, 10, 2);                // 9
  ASSERT_TRUE(wal->SyncTo(7).ok());
  EXPECT_EQ(wal->Stats().durable_lsn, 7u);
  wal->EndTransaction(d);
  ASSERT_TRUE(wal->WaitDurable(10).ok());
}

TEST(WalTransaction, RecordsHeldPastTheirBoundAreAppliedByASecondRead) {
  // More than kWalScanHeldBytes inside one transaction: the scan stops
  // holding, then reads the log again. Then a few records outside, and a
  // last transaction, ended or not.
  TempDir dir;
  const std::string wal_dir = dir.path() + "/wal";
  constexpr size_t kHashes = 4000;  // ~32 KiB a record
  const size_t n = kWalScanHeldBytes / (8 * kHashes) + 20;
  for (bool end_last : {true, false}) {
    SCOPED_TRACE(end_last);
    fs::remove_all(wal_dir);
    uint64_t last = 0, last_begin = 0;
    {
      auto wal = OpenWal(wal_dir, PosixEnv(), Durability::kNone);
      ASSERT_NE(wal, nullptr);
      const uint64_t open = wal->BeginTransaction();
      for (size_t i = 0; i < n; ++i) AppendInsert(*wal, 1, i * kHashes, kHashes);
      wal->EndTransaction(open);
      for (size_t i = n; i < n + 3; ++i) AppendInsert(*wal, 1, i * kHashes, kHashes);
      last_begin = wal->BeginTransaction();
      for (size_t i = n + 3; i < n + 6; ++i) AppendInsert(*wal, 1, i * kHashes, kHashes);
      if (end_last) wal->EndTransaction(last_begin);
      last = wal->Stats().appended_lsn;
    }
    std::vector<WalRecord> records;
    absl::StatusOr<WalScan> scan = Scan(PosixEnv(), wal_dir, &records);
    ASSERT_TRUE(scan.ok()) << scan.status();
    ASSERT_FALSE(records.empty());
    EXPECT_EQ(records.size(), scan->records);
    EXPECT_EQ(records.back().lsn, scan->last_lsn);
    for (size_t i = 0; i < records.size(); ++i) ASSERT_EQ(records[i].lsn, i + 1);
    size_t inserts = 0;
    for (const WalRecord& r : records) {
      if (r.type != WalRecordType::kInsert) continue;
      ASSERT_EQ(r.hashes.size(), kHashes);
      EXPECT_EQ(r.hashes.front(), inserts * kHashes);
      ++inserts;
    }
    if (end_last) {
      EXPECT_EQ(scan->last_lsn, last);
      EXPECT_EQ(inserts, n + 6);
      EXPECT_EQ(scan->cut_transaction, 0u);
    } else {
      EXPECT_EQ(scan->cut_transaction, last_begin);
      EXPECT_EQ(scan->last_lsn, last_begin - 1);
      EXPECT_EQ(inserts, n + 3);
    }
  }
}

TEST(WalTransaction, ABeginWaitsOnceTheOpenRunIsOldSoThatRunsClose) {
  TempDir dir;
  auto wal = OpenWal(dir.path() + "/wal", PosixEnv());
  ASSERT_NE(wal, nullptr);
  uint64_t first = wal->BeginTransaction();
  // Young: another joins the run at once.
  const uint64_t second = wal->BeginTransaction();
  wal->EndTransaction(second);
  absl::SleepFor(kWalMaxRunGrowth + absl::Milliseconds(5));
  // Old: the next begin waits until the run closed.
  std::atomic<bool> begun{false};
  std::thread t([&] {
    const uint64_t third = wal->BeginTransaction();
    begun = true;
    wal->EndTransaction(third);
  });
  absl::SleepFor(absl::Milliseconds(100));
  EXPECT_FALSE(begun.load());
  wal->EndTransaction(first);
  t.join();
  EXPECT_TRUE(begun.load());
  // The third transaction is a run of its own: the first run is durable.
  ASSERT_TRUE(wal->WaitDurable(wal->Stats().appended_lsn).ok());
  std::vector<WalRecord> records;
  wal.reset();
  absl::StatusOr<WalScan> scan = Scan(PosixEnv(), dir.path() + "/wal", &records);
  ASSERT_TRUE(scan.ok()) << scan.status();
  ASSERT_EQ(records.size(), 6u);
  EXPECT_EQ(records[3].type, WalRecordType::kTxnEnd);  // The first's end,
  EXPECT_EQ(records[3].filter_id, first);
  EXPECT_EQ(records[4].type, WalRecordType::kTxnBegin);  // then the third's begin.
}

TEST(WalTransaction, EndedRunsAreForgottenOnceWrittenEvenWithoutFdatasyncs) {
  for (Durability mode : {Durability::kNone, Durability::kInterval, Durability::kSync}) {
    SCOPED_TRACE(DurabilityName(mode));
    TempDir dir;
    auto wal = OpenWal(dir.path() + "/wal", PosixEnv(), mode, nullptr, absl::Seconds(30));
    ASSERT_NE(wal, nullptr);
    uint64_t last = 0;
    for (int i = 0; i < 5000; ++i) {
      const uint64_t begin = wal->BeginTransaction();
      last = AppendInsert(*wal, 1, i, 1);
      wal->EndTransaction(begin);
    }
    ASSERT_TRUE(wal->WaitDurable(last + 1).ok());
    // At most the run the synced position lies inside, and one written since.
    EXPECT_LE(wal->Stats().tracked_transactions, 2u);
    EXPECT_EQ(wal->Stats().open_transactions, 0u);
    ASSERT_TRUE(wal->SyncTo(last + 1).ok());
    EXPECT_EQ(wal->Stats().synced_lsn, last + 1);
  }
}

TEST(WalTransaction, TruncationKeepsTheSegmentOfAnOpenTransactionsBegin) {
  TempDir dir;
  const std::string wal_dir = dir.path() + "/wal";
  auto wal = OpenWal(wal_dir, PosixEnv());
  ASSERT_NE(wal, nullptr);
  const uint64_t begin = wal->BeginTransaction();
  // ~8 KiB records, 256 KiB segments: several segments after the begin's.
  uint64_t lsn = 0;
  for (int i = 0; i < 100; ++i) lsn = AppendInsert(*wal, 1, i * 1000, 1000);
  ASSERT_TRUE(wal->Truncate(lsn + 1).ok());
  wal->EndTransaction(begin);
  ASSERT_TRUE(wal->WaitDurable(lsn).ok());
  std::vector<WalRecord> records;
  absl::StatusOr<WalScan> scan = Scan(PosixEnv(), wal_dir, &records);
  ASSERT_TRUE(scan.ok()) << scan.status();
  ASSERT_FALSE(records.empty());
  EXPECT_EQ(records.front().lsn, begin);
  // Once it ended (and is synced), its begin may go.
  ASSERT_TRUE(wal->Truncate(lsn + 1).ok());
  records.clear();
  scan = Scan(PosixEnv(), wal_dir, &records);
  ASSERT_TRUE(scan.ok()) << scan.status();
  ASSERT_FALSE(records.empty());
  EXPECT_GT(records.front().lsn, begin);
  EXPECT_EQ(records.back().type, WalRecordType::kTxnEnd);
}

TEST(WalTransaction, DamagedTransactionRecordsAreRefusedAsDamage) {
  uint8_t buf[kWalTxnRecordBytes];
  WalRecord r;
  size_t len = 0;
  std::string why;
  EncodeTxnBegin(5, 4, buf);
  ASSERT_EQ(ParseWalRecord(buf, &r, &len, &why), WalParse::kRecord) << why;
  EXPECT_EQ(r.type, WalRecordType::kTxnBegin);
  EXPECT_EQ(len, kWalTxnRecordBytes);
  EncodeTxnEnd(9, 4, 5, buf);
  ASSERT_EQ(ParseWalRecord(buf, &r, &len, &why), WalParse::kRecord) << why;
  EXPECT_EQ(r.type, WalRecordType::kTxnEnd);
  EXPECT_EQ(r.filter_id, 5u);
  // An end naming a begin at or after itself.
  EncodeTxnEnd(9, 4, 9, buf);
  EXPECT_EQ(ParseWalRecord(buf, &r, &len, &why), WalParse::kBad);
  EXPECT_TRUE(absl::StrContains(why, "naming begin lsn 9")) << why;
}

TEST(WalTest, DurabilityParsesItsThreeModesAndNamesTheChoicesOtherwise) {
  EXPECT_EQ(*ParseDurability("sync"), Durability::kSync);
  EXPECT_EQ(*ParseDurability("interval"), Durability::kInterval);
  EXPECT_EQ(*ParseDurability("none"), Durability::kNone);
  absl::StatusOr<Durability> bad = ParseDurability("always");
  ASSERT_TRUE(absl::IsInvalidArgument(bad.status()));
  EXPECT_TRUE(absl::StrContains(bad.status().message(), "always"));
  EXPECT_TRUE(absl::StrContains(bad.status().message(), "interval"));
}

}  // namespace
}  // namespace cuckoo::server
