#include "core/snapshot.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "tests/core/snapshot_layout.h"
#include "tests/core/test_keys.h"
#include "tests/util/temp_dir.h"

namespace cuckoo {
namespace {

using ::testing::HasSubstr;
using testing::Key;
using testing::TempDir;

using testing::ResealSnapshot;
constexpr size_t kHeader = testing::kSnapshotHeader;
constexpr size_t kSectionHeader = testing::kSnapshotSectionHeader;
constexpr size_t kFooter = testing::kSnapshotFooter;

std::unique_ptr<CuckooFilter> MakeFilter(const FilterOptions& o) {
  auto f = CuckooFilter::Create(o);
  EXPECT_TRUE(f.ok()) << f.status();
  return *std::move(f);
}

std::vector<std::string> Keys(uint64_t stream, uint64_t n) {
  std::vector<std::string> keys;
  for (uint64_t i = 0; i < n; ++i) keys.push_back(Key(stream, i));
  return keys;
}

void InsertAll(CuckooFilter& f, const std::vector<std::string>& keys) {
  std::vector<std::string_view> v(keys.begin(), keys.end());
  std::vector<InsertResult> r(v.size());
  f.InsertBatch(v, false, absl::MakeSpan(r));
}

std::vector<uint8_t> ReadBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void WriteBytes(const std::string& path, const std::vector<uint8_t>& b) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
}

std::vector<uint8_t> ShardBytes(const CuckooFilter& f, uint32_t i) {
  std::vector<uint8_t> b(f.shape().table_bytes_per_shard());
  f.CopyShard(i, b.data());
  return b;
}

struct RoundTripCase {
  uint32_t f;
  uint32_t b;
  uint32_t shards;
};

void PrintTo(const RoundTripCase& c, std::ostream* os) {
  *os << "f=" << c.f << " b=" << c.b << " shards=" << c.shards;
}

class SnapshotRoundTripTest : public ::testing::TestWithParam<RoundTripCase> {};

TEST_P(SnapshotRoundTripTest, LoadedFilterIsBitIdenticalAndAnswersTheSame) {
  const RoundTripCase c = GetParam();
  TempDir dir;
  auto original = MakeFilter({.capacity = 20'000,
                              .fingerprint_bits = c.f,
                              .bucket_size = c.b,
                              .shards = c.shards,
                              .seed = 77});
  std::vector<std::string> present = Keys(0, 18'000);
  InsertAll(*original, present);

  absl::StatusOr<SnapshotWriteResult> w = WriteSnapshotFile(*original, "rt", dir.path());
  ASSERT_TRUE(w.ok()) << w.status();
  EXPECT_EQ(w->path, dir.path() + "/rt.cuckoo");
  EXPECT_EQ(w->bytes, std::filesystem::file_size(w->path));
  EXPECT_EQ(w->items, original->items());

  absl::StatusOr<LoadedSnapshot> r = ReadSnapshotFile(w->path, "rt");
  ASSERT_TRUE(r.ok()) << r.status();
  CuckooFilter& loaded = *r->filter;
  EXPECT_EQ(r->header.name, "rt");
  EXPECT_EQ(loaded.shape(), original->shape());
  EXPECT_EQ(r->items, original->items());
  EXPECT_EQ(loaded.items(), original->items());
  for (uint32_t i = 0; i < c.shards; ++i) {
    EXPECT_EQ(ShardBytes(loaded, i), ShardBytes(*original, i)) << "shard " << i;
  }
  // Same answers for present and absent keys, counts included.
  std::vector<std::string> absent = Keys(1, 20'000);
  for (const auto* keys : {&present, &absent}) {
    for (const std::string& k : *keys) {
      ASSERT_EQ(loaded.MayContain(k), original->MayContain(k)) << k;
      ASSERT_EQ(loaded.ApproximateCount(k), original->ApproximateCount(k)) << k;
    }
  }
  for (const std::string& k : present) ASSERT_TRUE(loaded.MayContain(k)) << k;
  // The kick-victim generator was restored too: later inserts land
  // identically, so the two filters stay bit-identical.
  std::vector<std::string> more = Keys(2, 1'500);
  InsertAll(loaded, more);
  InsertAll(*original, more);
  for (uint32_t i = 0; i < c.shards; ++i) {
    EXPECT_EQ(ShardBytes(loaded, i), ShardBytes(*original, i)) << "shard " << i;
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, SnapshotRoundTripTest,
                         ::testing::Values(RoundTripCase{8, 2, 1}, RoundTripCase{12, 4, 4},
                                           RoundTripCase{16, 8, 2}, RoundTripCase{7, 4, 8},
                                           RoundTripCase{13, 2, 1}, RoundTripCase{5, 8, 16},
                                           RoundTripCase{32, 4, 2}));

TEST(SnapshotTest, EmptyFilterRoundTrips) {
  TempDir dir;
  auto original = MakeFilter({.capacity = 1000, .seed = 5});
  auto w = WriteSnapshotFile(*original, "empty", dir.path());
  ASSERT_TRUE(w.ok()) << w.status();
  auto r = ReadSnapshotFile(w->path, "empty");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->items, 0u);
  EXPECT_EQ(r->filter->shape(), original->shape());
}

TEST(SnapshotTest, WriteRecordsTheSnapshotAndCountsLaterChanges) {
  TempDir dir;
  auto f = MakeFilter({.capacity = 10'000, .shards = 4, .seed = 5});
  EXPECT_FALSE(f->last_snapshot().exists);
  InsertAll(*f, Keys(0, 100));
  EXPECT_EQ(f->unsnapshotted_changes(), 100u);
  auto w = WriteSnapshotFile(*f, "rec", dir.path());
  ASSERT_TRUE(w.ok()) << w.status();
  CuckooFilter::SnapshotRecord rec = f->last_snapshot();
  EXPECT_TRUE(rec.exists);
  EXPECT_EQ(rec.bytes, w->bytes);
  EXPECT_EQ(rec.time, w->taken);
  EXPECT_EQ(f->unsnapshotted_changes(), 0u);
  InsertAll(*f, Keys(1, 10));
  f->Delete(Key(0, 3));
  f->Delete("never inserted");  // Not a change.
  EXPECT_EQ(f->unsnapshotted_changes(), 11u);

  auto r = ReadSnapshotFile(w->path);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->filter->last_snapshot().exists);
  EXPECT_EQ(r->filter->last_snapshot().time, absl::FromUnixMicros(absl::ToUnixMicros(w->taken)));
  EXPECT_EQ(r->filter->unsnapshotted_changes(), 0u);
}

TEST(SnapshotTest, RewriteReplacesOldSnapshotAndLeavesNoTemporaryFile) {
  TempDir dir;
  auto f = MakeFilter({.capacity = 10'000, .seed = 5});
  ASSERT_TRUE(WriteSnapshotFile(*f, "re", dir.path()).ok());
  InsertAll(*f, Keys(0, 500));
  ASSERT_TRUE(WriteSnapshotFile(*f, "re", dir.path()).ok());
  std::vector<std::string> files;
  for (const auto& e : std::filesystem::directory_iterator(dir.path())) {
    files.push_back(e.path().filename().string());
  }
  EXPECT_THAT(files, ::testing::ElementsAre("re.cuckoo"));
  auto r = ReadSnapshotFile(dir.path() + "/re.cuckoo", "re");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->items, 500u);
}

TEST(SnapshotTest, FailedWriteKeepsThePreviousSnapshot) {
  TempDir dir;
  auto f = MakeFilter({.capacity = 10'000, .seed = 5});
  InsertAll(*f, Keys(0, 100));
  ASSERT_TRUE(WriteSnapshotFile(*f, "keep", dir.path()).ok());
  InsertAll(*f, Keys(1, 100));
  // A directory where the temporary file goes makes creating it fail.
  std::filesystem::create_directory(dir.path() + "/.keep.cuckoo.tmp");
  auto w = WriteSnapshotFile(*f, "keep", dir.path());
  ASSERT_FALSE(w.ok());
  EXPECT_THAT(w.status().message(), HasSubstr(".keep.cuckoo.tmp"));
  EXPECT_EQ(f->unsnapshotted_changes(), 100u);
  auto r = ReadSnapshotFile(dir.path() + "/keep.cuckoo", "keep");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->items, 100u);
}

TEST(SnapshotTest, WriteToMissingDirectoryNamesThePath) {
  auto f = MakeFilter({.capacity = 1000, .seed = 5});
  auto w = WriteSnapshotFile(*f, "x", "/nonexistent-cuckoo-dir");
  ASSERT_FALSE(w.ok());
  EXPECT_EQ(w.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(w.status().message(), HasSubstr("/nonexistent-cuckoo-dir/.x.cuckoo.tmp"));
}

TEST(SnapshotTest, RemovedFilterIsNeverWrittenAgain) {
  TempDir dir;
  auto f = MakeFilter({.capacity = 1000, .seed = 5});
  ASSERT_TRUE(WriteSnapshotFile(*f, "gone", dir.path()).ok());
  ASSERT_TRUE(RemoveSnapshotFile(*f, "gone", dir.path()).ok());
  EXPECT_FALSE(std::filesystem::exists(dir.path() + "/gone.cuckoo"));
  auto w = WriteSnapshotFile(*f, "gone", dir.path());
  EXPECT_EQ(w.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_FALSE(std::filesystem::exists(dir.path() + "/gone.cuckoo"));
  // Removing a filter that was never written is fine.
  auto g = MakeFilter({.capacity = 1000, .seed = 5});
  EXPECT_TRUE(RemoveSnapshotFile(*g, "never", dir.path()).ok());
}

TEST(SnapshotTest, ReadingMissingFileOrDirectoryIsNotDataLoss) {
  TempDir dir;
  auto r = ReadSnapshotFile(dir.path() + "/none.cuckoo");
  EXPECT_EQ(r.status().code(), absl::StatusCode::kNotFound);
  std::filesystem::create_directory(dir.path() + "/d.cuckoo");
  r = ReadSnapshotFile(dir.path() + "/d.cuckoo");
  EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition);
}

TEST(SnapshotTest, AdmitSeesTheHeaderAndCanRefuseBeforeAllocation) {
  TempDir dir;
  auto f = MakeFilter({.capacity = 50'000, .shards = 2, .seed = 9});
  auto w = WriteSnapshotFile(*f, "adm", dir.path());
  ASSERT_TRUE(w.ok());
  SnapshotHeader seen;
  auto r = ReadSnapshotFile(w->path, "adm", [&](const SnapshotHeader& h) {
    seen = h;
    return absl::ResourceExhaustedError("no room");
  });
  EXPECT_EQ(r.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(seen.name, "adm");
  EXPECT_EQ(seen.shape, f->shape());
  EXPECT_EQ(seen.file_bytes, w->bytes);
}

// --- Corruption: every kind is DATA_LOSS with a message naming the file and why.

class SnapshotCorruptionTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto f = MakeFilter({.capacity = 4'000, .shards = 2, .seed = 11});
    InsertAll(*f, Keys(0, 3'000));
    auto w = WriteSnapshotFile(*f, "c", dir_.path());
    ASSERT_TRUE(w.ok()) << w.status();
    good_ = ReadBytes(w->path);
    table_ = f->shape().table_bytes_per_shard();
    section_ = kSectionHeader + table_ + 8;
    ASSERT_EQ(good_.size(), kHeader + 2 * section_ + kFooter);
  }

  // Parses `bytes`; expects DATA_LOSS whose message has `why` and the label.
  void ExpectRejected(const std::vector<uint8_t>& bytes, const std::string& why,
                      const std::string& context = "") {
    auto r = ParseSnapshot(bytes, "snap.cuckoo", "c");
    ASSERT_FALSE(r.ok()) << context;
    EXPECT_EQ(r.status().code(), absl::StatusCode::kDataLoss) << context << r.status();
    EXPECT_THAT(r.status().message(), HasSubstr("snap.cuckoo: ")) << context;
    EXPECT_THAT(r.status().message(), HasSubstr(why)) << context;
  }

  static uint64_t Get64(const std::vector<uint8_t>& b, size_t at) {
    uint64_t v;
    std::memcpy(&v, b.data() + at, 8);
    return v;
  }
  static void Put32(std::vector<uint8_t>& b, size_t at, uint32_t v) {
    std::memcpy(b.data() + at, &v, 4);
  }
  static void Put64(std::vector<uint8_t>& b, size_t at, uint64_t v) {
    std::memcpy(b.data() + at, &v, 8);
  }

  TempDir dir_;
  std::vector<uint8_t> good_;
  size_t table_ = 0;
  size_t section_ = 0;
};

TEST_F(SnapshotCorruptionTest, IntactFileLoads) {
  auto r = ParseSnapshot(good_, "snap.cuckoo", "c");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->items, 3'000u);
}

TEST_F(SnapshotCorruptionTest, FlippedByteInEverySectionIsRejected) {
  struct Region {
    size_t from, to;
    std::string why;
  };
  const size_t footer = kHeader + 2 * section_;
  const std::vector<Region> regions = {
      {0, 8, "bad magic number"},
      {8, 12, "format version"},
      {12, kHeader, "header checksum mismatch"},
      {kHeader, kHeader + section_, "shard 0 checksum mismatch"},
      {kHeader + section_, footer, "shard 1 checksum mismatch"},
      {footer, footer + 8, "bad footer magic"},
      {footer + 8, footer + kFooter, "file checksum mismatch"},
  };
  for (const Region& region : regions) {
    // Every byte of small regions; a spread of bytes in the tables.
    size_t step = std::max<size_t>(1, (region.to - region.from) / 97);
    for (size_t at = region.from; at < region.to; at += step) {
      for (uint8_t mask : {0x01, 0x80}) {
        std::vector<uint8_t> bad = good_;
        bad[at] ^= mask;
        ExpectRejected(bad, region.why, absl::StrFormat("byte %u ^ %#x", at, mask));
      }
    }
  }
}

TEST_F(SnapshotCorruptionTest, TruncationAtAnyOffsetIsRejected) {
  ExpectRejected({}, "empty file (0 bytes)");
  for (size_t len = 1; len < good_.size(); ++len) {
    std::vector<uint8_t> bad(good_.begin(), good_.begin() + len);
    ExpectRejected(bad, "truncated", absl::StrFormat("length %u", len));
  }
}

TEST_F(SnapshotCorruptionTest, TrailingBytesAreRejected) {
  std::vector<uint8_t> bad = good_;
  bad.push_back(0);
  ExpectRejected(bad, "1 unexpected bytes after the end");
}

TEST_F(SnapshotCorruptionTest, OtherVersionsAreRejectedEvenWithValidChecksums) {
  for (uint32_t v : {0u, 2u, 0xFFFFFFFFu}) {
    std::vector<uint8_t> bad = good_;
    Put32(bad, 8, v);
    ResealSnapshot(bad);
    ExpectRejected(bad, absl::StrFormat("format version %u is not supported", v));
  }
}

TEST_F(SnapshotCorruptionTest, GarbageIsRejected) {
  std::vector<uint8_t> garbage(10'000);
  for (size_t i = 0; i < garbage.size(); ++i) garbage[i] = static_cast<uint8_t>(testing::Mix(i));
  ExpectRejected(garbage, "not a cuckood snapshot");
  ExpectRejected({'h', 'i'}, "not a cuckood snapshot");
}

TEST_F(SnapshotCorruptionTest, ImpossibleSettingsAreRejectedEvenWithValidChecksums) {
  struct Case {
    size_t at;
    uint32_t value;
    std::string why;
  };
  const std::vector<Case> cases = {
      {12, 128, "header size 128"},
      {16, 9, "unknown hash_id 9"},
      {20, 1, "unknown table kind 1"},
      {24, 0, "fingerprint_bits=0"},
      {24, 33, "fingerprint_bits=33"},
      {28, 3, "bucket_size=3"},
      {32, 3, "shards=3"},
      {36, 5, "shard_bits=5"},
      {40, 0, "max_kicks=0"},
      {44, 0, "filter name length 0"},
      {44, 129, "filter name length 129"},
      {44, 2, "has character"},
      {216, 1, "reserved header byte 216"},
      {kHeader + 0, 1, "section is for shard 1"},
      {kHeader + 4, 1, "reserved field is not zero"},
      {kHeader + 24, 5, "table of 5 bytes"},
  };
  for (const Case& c : cases) {
    std::vector<uint8_t> bad = good_;
    Put32(bad, c.at, c.value);
    ResealSnapshot(bad);
    ExpectRejected(bad, c.why, absl::StrFormat("u32 %u at %u", c.value, c.at));
  }
  std::vector<uint8_t> bad = good_;
  Put64(bad, 56, 0);  // capacity
  ResealSnapshot(bad);
  ExpectRejected(bad, "capacity=0");
  bad = good_;
  Put64(bad, 64, Get64(good_, 64) + 1);  // buckets per shard, without the bytes
  ResealSnapshot(bad);
  ExpectRejected(bad, "table bytes per shard");
  bad = good_;
  Put64(bad, kHeader + 8, uint64_t{1} << 40);  // shard items
  ResealSnapshot(bad);
  ExpectRejected(bad, "items in a table of");
  bad = good_;
  bad[88] = '.';  // name ".": not a valid filter name
  ResealSnapshot(bad);
  ExpectRejected(bad, "must start with a letter or digit");
}

TEST_F(SnapshotCorruptionTest, NameMustMatchTheFileName) {
  auto r = ParseSnapshot(good_, "other.cuckoo", "other");
  EXPECT_EQ(r.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(r.status().message(), HasSubstr("holds filter \"c\", but its file name says"));
}

TEST_F(SnapshotCorruptionTest, SectionsSwappedBetweenSnapshotsAreRejected) {
  // A second snapshot of the same filter after more inserts: each section is
  // valid on its own, but they do not belong together.
  auto f = MakeFilter({.capacity = 4'000, .shards = 2, .seed = 11});
  InsertAll(*f, Keys(0, 3'100));
  auto w = WriteSnapshotFile(*f, "c", dir_.path());
  ASSERT_TRUE(w.ok());
  std::vector<uint8_t> other = ReadBytes(w->path);
  std::vector<uint8_t> mixed = good_;
  std::copy(other.begin() + kHeader, other.begin() + kHeader + section_, mixed.begin() + kHeader);
  ExpectRejected(mixed, "file checksum mismatch");
}

TEST_F(SnapshotCorruptionTest, NonZeroBitsAfterTheLastSlotAreRejected) {
  // f=12, b=4: 48 bits per bucket, whole bytes; use a shape with a partial
  // last byte instead.
  auto f = MakeFilter(
      {.capacity = 1000, .fingerprint_bits = 5, .bucket_size = 2, .shards = 1, .seed = 3});
  ASSERT_NE(f->shape().buckets_per_shard * 2 * 5 % 8, 0u) << "pick a shape with a partial byte";
  auto w = WriteSnapshotFile(*f, "c", dir_.path());
  ASSERT_TRUE(w.ok());
  std::vector<uint8_t> bad = ReadBytes(w->path);
  const size_t table = f->shape().table_bytes_per_shard();
  bad[kHeader + kSectionHeader + table - 1] |= 0x80;
  ResealSnapshot(bad);
  ExpectRejected(bad, "bits set after the last slot");
}

}  // namespace
}  // namespace cuckoo
