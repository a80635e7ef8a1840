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
#include "tests/core/table_bits.h"
#include "tests/core/test_keys.h"
#include "tests/util/temp_dir.h"

namespace cuckoo {

// For parameterised test names and messages (found by ADL).
void PrintTo(TableKind kind, std::ostream* os) { *os << TableKindName(kind); }

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
  bool semi = false;  // Semi-sorted buckets (b = 4).
};

void PrintTo(const RoundTripCase& c, std::ostream* os) {
  *os << "f=" << c.f << " b=" << c.b << " shards=" << c.shards
      << (c.semi ? " semi-sorted" : " packed");
}

class SnapshotRoundTripTest : public ::testing::TestWithParam<RoundTripCase> {};

TEST_P(SnapshotRoundTripTest, LoadedFilterIsBitIdenticalAndAnswersTheSame) {
  const RoundTripCase c = GetParam();
  TempDir dir;
  auto original = MakeFilter({.capacity = 20'000,
                              .fingerprint_bits = c.f,
                              .bucket_size = c.b,
                              .shards = c.shards,
                              .seed = 77,
                              .semi_sort = c.semi});
  ASSERT_EQ(original->shape().semi_sorted(), c.semi);
  std::vector<std::string> present = Keys(0, 18'000);
  InsertAll(*original, present);

  absl::StatusOr<SnapshotWriteResult> w = WriteSnapshotFile(*original, "rt", dir.path());
  ASSERT_TRUE(w.ok()) << w.status();
  // Through a buffer smaller than a shard: the same sections (only the time
  // taken, and so the checksums over the header, differ), written in pieces.
  const std::vector<uint8_t> copied = ReadBytes(w->path);
  ASSERT_TRUE(WriteSnapshotFile(*original, "rt", dir.path(), {.buffer_bytes = 100}).ok());
  const std::vector<uint8_t> pieces = ReadBytes(w->path);
  ASSERT_EQ(pieces.size(), copied.size());
  EXPECT_TRUE(std::equal(copied.begin() + kHeader, copied.end() - 8, pieces.begin() + kHeader))
      << "written through a 100-byte buffer";
  EXPECT_EQ(w->path, dir.path() + "/rt.cuckoo");
  EXPECT_EQ(w->bytes, std::filesystem::file_size(w->path));
  EXPECT_EQ(w->items, original->items());
  // The header's table_kind (offset 20): 0 packed, as before semi-sorting; 1 semi-sorted.
  EXPECT_EQ(testing::SnapshotGet32(ReadBytes(w->path).data() + 20), c.semi ? 1u : 0u);

  absl::StatusOr<LoadedSnapshot> r = ReadSnapshotFile(w->path, "rt");
  ASSERT_TRUE(r.ok()) << r.status();
  CuckooFilter& loaded = *r->filter;
  EXPECT_EQ(r->header.name, "rt");
  EXPECT_EQ(loaded.shape(), original->shape());
  EXPECT_EQ(loaded.shape().table_kind, original->shape().table_kind);
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

INSTANTIATE_TEST_SUITE_P(
    Shapes, SnapshotRoundTripTest,
    ::testing::Values(RoundTripCase{8, 2, 1}, RoundTripCase{12, 4, 4}, RoundTripCase{16, 8, 2},
                      RoundTripCase{7, 4, 8}, RoundTripCase{13, 2, 1}, RoundTripCase{5, 8, 16},
                      RoundTripCase{32, 4, 2}, RoundTripCase{12, 4, 4, true},
                      RoundTripCase{5, 4, 1, true}, RoundTripCase{6, 4, 2, true},
                      RoundTripCase{13, 4, 2, true}, RoundTripCase{16, 4, 8, true},
                      RoundTripCase{17, 4, 1, true}, RoundTripCase{20, 4, 2, true},
                      RoundTripCase{32, 4, 1, true}),
    [](const auto& p) {
      return absl::StrFormat("%s_f%u_b%u_s%u", p.param.semi ? "semi" : "packed", p.param.f,
                             p.param.b, p.param.shards);
    });

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

TEST(SnapshotTest, WriteReportsTheChangesItHolds) {
  TempDir dir;
  auto f = MakeFilter({.capacity = 10'000, .shards = 4, .seed = 5});
  InsertAll(*f, Keys(0, 100));
  auto w = WriteSnapshotFile(*f, "rec", dir.path());
  ASSERT_TRUE(w.ok()) << w.status();
  EXPECT_EQ(w->changes, 100u);
  EXPECT_EQ(w->items, 100u);
  InsertAll(*f, Keys(1, 10));
  f->Delete(Key(0, 3));
  f->Delete("never inserted");  // Not a change.
  EXPECT_EQ(f->changes() - w->changes, 11u);
  // Through a small buffer, the same count.
  auto small = WriteSnapshotFile(*f, "rec", dir.path(), {.buffer_bytes = 64});
  ASSERT_TRUE(small.ok()) << small.status();
  EXPECT_EQ(small->changes, 111u);
  EXPECT_EQ(small->items, 109u);
}

TEST(SnapshotTest, AShardLargerThanTheBufferTakesNoMoreMemoryThanTheBuffer) {
  // A 1-shard filter of ~100 MiB written through a 1 MiB buffer: the
  // process's peak memory grows by far less than a shard.
  TempDir dir;
  auto f = MakeFilter({.capacity = 70'000'000, .shards = 1, .seed = 5});
  ASSERT_GT(f->shape().table_bytes_per_shard(), uint64_t{90} << 20);
  InsertAll(*f, Keys(0, 100'000));
  // Touch every page, so the filter's own pages are in the peak already.
  for (const std::string& k : Keys(1, 2'000'000)) f->MayContain(k);
  auto peak_kib = [] {
    std::ifstream status("/proc/self/status");
    for (std::string line; std::getline(status, line);) {
      if (line.rfind("VmHWM:", 0) == 0) return std::stoull(line.substr(6));
    }
    return 0ull;
  };
  std::ofstream("/proc/self/clear_refs") << "5";  // Resets VmHWM to the current RSS.
  const uint64_t before = peak_kib();
  auto w = WriteSnapshotFile(*f, "big", dir.path(), {.buffer_bytes = 1 << 20});
  ASSERT_TRUE(w.ok()) << w.status();
  const uint64_t growth_mib = (peak_kib() - before) / 1024;
  EXPECT_LT(growth_mib, 16u) << "a " << f->shape().table_bytes_per_shard() / (1 << 20)
                             << " MiB shard through a 1 MiB buffer";
  auto r = ReadSnapshotFile(w->path, "big");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->items, 100'000u);
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

TEST(SnapshotTest, ReadingAMissingFileIsNotDataLoss) {
  TempDir dir;
  auto r = ReadSnapshotFile(dir.path() + "/none.cuckoo");
  EXPECT_EQ(r.status().code(), absl::StatusCode::kNotFound);
}

TEST(SnapshotTest, ADirectoryOrFifoNamedLikeASnapshotIsDataLossAndDoesNotHang) {
  TempDir dir;
  std::filesystem::create_directory(dir.path() + "/d.cuckoo");
  auto r = ReadSnapshotFile(dir.path() + "/d.cuckoo");
  EXPECT_EQ(r.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(r.status().message(), HasSubstr("not a regular file (a directory)"));
  // Opening a FIFO for reading waits for a writer unless told not to.
  ASSERT_EQ(::mkfifo((dir.path() + "/p.cuckoo").c_str(), 0644), 0);
  r = ReadSnapshotFile(dir.path() + "/p.cuckoo");
  EXPECT_EQ(r.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(r.status().message(), HasSubstr("not a regular file (a FIFO)"));
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

// Every corruption test runs on a packed file (table_kind 0: the format as it
// was before semi-sorted tables) and on a semi-sorted one (table_kind 1).
class SnapshotCorruptionTest : public ::testing::TestWithParam<TableKind> {
 protected:
  static bool Semi() { return GetParam() == TableKind::kSemiSorted; }
  // `o` with the table kind under test.
  static FilterOptions With(FilterOptions o) {
    o.semi_sort = Semi();
    return o;
  }

  void SetUp() override {
    auto f = MakeFilter(With({.capacity = 4'000, .shards = 2, .seed = 11}));
    ASSERT_EQ(f->shape().table_kind, GetParam());
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

TEST_P(SnapshotCorruptionTest, IntactFileLoads) {
  auto r = ParseSnapshot(good_, "snap.cuckoo", "c");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->items, 3'000u);
}

TEST_P(SnapshotCorruptionTest, FlippedByteInEverySectionIsRejected) {
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

TEST_P(SnapshotCorruptionTest, TruncationAtAnyOffsetIsRejected) {
  ExpectRejected({}, "empty file (0 bytes)");
  for (size_t len = 1; len < good_.size(); ++len) {
    std::vector<uint8_t> bad(good_.begin(), good_.begin() + len);
    ExpectRejected(bad, "truncated", absl::StrFormat("length %u", len));
  }
}

TEST_P(SnapshotCorruptionTest, TrailingBytesAreRejected) {
  std::vector<uint8_t> bad = good_;
  bad.push_back(0);
  ExpectRejected(bad, "1 unexpected bytes after the end");
}

TEST_P(SnapshotCorruptionTest, OtherVersionsThatNameNoWriterAreDataLoss) {
  for (uint32_t v : {0u, 2u, 0xFFFFFFFFu}) {
    std::vector<uint8_t> bad = good_;
    Put32(bad, 8, v);
    ResealSnapshot(bad);
    ExpectRejected(bad, absl::StrFormat("format version %u is not supported", v));
    ExpectRejected(bad, "names no writer");
  }
}

TEST_P(SnapshotCorruptionTest, ADamagedVersionFieldOfAVersionOneFileIsDataLoss) {
  std::vector<uint8_t> bad = good_;
  Put32(bad, 8, 3);  // Not resealed: the header checksum is version 1's.
  ExpectRejected(bad, "format version field is corrupt (3; the rest is a valid version-1 header)");
}

// A file a newer build wrote is intact: refusing it (FAILED_PRECONDITION)
// keeps it in place, where a rollback's quarantine would lose the filter.
TEST_P(SnapshotCorruptionTest, ANewerFormatIsRefusedNamingTheBuildThatWroteIt) {
  std::vector<uint8_t> newer = good_;
  Put32(newer, 8, 2);
  std::memset(newer.data() + kSnapshotWriterOffset, 0, kSnapshotWriterBytes);
  std::memcpy(newer.data() + kSnapshotWriterOffset, "cuckood 0.9.3", 13);
  auto r = ParseSnapshot(newer, "snap.cuckoo", "c");
  EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition) << r.status();
  EXPECT_THAT(r.status().message(),
              HasSubstr("snap.cuckoo: format version 2 (this build reads version 1); it was "
                        "written by cuckood 0.9.3, and this build (cuckood "));
  EXPECT_THAT(r.status().message(), HasSubstr("move the file out of the data directory"));
  // Not a writer: control characters.
  newer[kSnapshotWriterOffset + 2] = '\n';
  ExpectRejected(newer, "names no writer");
}

TEST_P(SnapshotCorruptionTest, UnknownKindsHashesAndSettingsWithValidChecksumsAreRefusedNotLost) {
  struct Case {
    size_t at;
    uint32_t value;
    std::string why;
  };
  const std::vector<Case> cases = {
      {16, 9, "hash id 9 is unknown"},
      {20, 2, "table kind 2 is unknown"},
      {20, 0xFFFFFFFF, "table kind 4294967295 is unknown"},
      {24, 0, "fingerprint_bits=0"},
      {24, 33, "fingerprint_bits=33"},
      {28, 3, "bucket_size=3"},
      {32, 3, "shards=3"},
      {36, 5, "shard_bits=5"},
      {40, 0, "max_kicks=0"},
      {40, kMaxStoredMaxKicks + 1, absl::StrFormat("max_kicks=%u", kMaxStoredMaxKicks + 1)},
  };
  for (const Case& c : cases) {
    std::vector<uint8_t> newer = good_;
    Put32(newer, c.at, c.value);
    ResealSnapshot(newer);
    auto r = ParseSnapshot(newer, "snap.cuckoo", "c");
    EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition) << c.why << r.status();
    EXPECT_THAT(r.status().message(), HasSubstr(c.why));
    EXPECT_THAT(r.status().message(), HasSubstr("written by a newer cuckood"));
  }
  std::vector<uint8_t> newer = good_;
  Put64(newer, 56, 0);  // capacity
  ResealSnapshot(newer);
  EXPECT_EQ(ParseSnapshot(newer, "snap.cuckoo", "c").status().code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST_P(SnapshotCorruptionTest, MaxKicksAboveTodaysCeilingLoadsAtTheCeiling) {
  // Files from builds that allowed up to 100000 kicks.
  std::vector<uint8_t> old = good_;
  Put32(old, 40, kMaxStoredMaxKicks);
  ResealSnapshot(old);
  auto r = ParseSnapshot(old, "snap.cuckoo", "c");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->filter->shape().max_kicks, kMaxMaxKicks);
  EXPECT_EQ(r->items, 3'000u);
}

TEST_P(SnapshotCorruptionTest, GarbageIsRejected) {
  std::vector<uint8_t> garbage(10'000);
  for (size_t i = 0; i < garbage.size(); ++i) garbage[i] = static_cast<uint8_t>(testing::Mix(i));
  ExpectRejected(garbage, "not a cuckood snapshot");
  ExpectRejected({'h', 'i'}, "not a cuckood snapshot");
}

TEST_P(SnapshotCorruptionTest, ImpossibleSettingsAreRejectedEvenWithValidChecksums) {
  struct Case {
    size_t at;
    uint32_t value;
    std::string why;
  };
  const std::vector<Case> cases = {
      {12, 128, "header size 128"},
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

TEST_P(SnapshotCorruptionTest, NameMustMatchTheFileName) {
  auto r = ParseSnapshot(good_, "other.cuckoo", "other");
  EXPECT_EQ(r.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(r.status().message(), HasSubstr("holds filter \"c\", but its file name says"));
}

TEST_P(SnapshotCorruptionTest, SectionsSwappedBetweenSnapshotsAreRejected) {
  // A second snapshot of the same filter after more inserts: each section is
  // valid on its own, but they do not belong together.
  auto f = MakeFilter(With({.capacity = 4'000, .shards = 2, .seed = 11}));
  InsertAll(*f, Keys(0, 3'100));
  auto w = WriteSnapshotFile(*f, "c", dir_.path());
  ASSERT_TRUE(w.ok());
  std::vector<uint8_t> other = ReadBytes(w->path);
  std::vector<uint8_t> mixed = good_;
  std::copy(other.begin() + kHeader, other.begin() + kHeader + section_, mixed.begin() + kHeader);
  ExpectRejected(mixed, "file checksum mismatch");
}

TEST_P(SnapshotCorruptionTest, NonZeroBitsAfterTheLastSlotAreRejected) {
  // f=12, b=4: 48 (semi-sorted 44) bits per bucket, whole bytes for an even
  // bucket count; use a shape with a partial last byte instead: packed f=5,
  // b=2 (10 bits per bucket) or semi-sorted f=6 (20 bits), odd bucket count.
  FilterOptions o = Semi()
                        ? FilterOptions{.capacity = 1000, .fingerprint_bits = 6}
                        : FilterOptions{.capacity = 1000, .fingerprint_bits = 5, .bucket_size = 2};
  o.shards = 1;
  o.seed = 3;
  o.semi_sort = Semi();
  auto f = MakeFilter(o);
  for (o.capacity = 1001; f->shape().buckets_per_shard * f->shape().bucket_bits() % 8 == 0;
       ++o.capacity) {
    f = MakeFilter(o);
  }
  InsertAll(*f, Keys(0, 500));
  auto w = WriteSnapshotFile(*f, "c", dir_.path());
  ASSERT_TRUE(w.ok());
  std::vector<uint8_t> bad = ReadBytes(w->path);
  const size_t table = f->shape().table_bytes_per_shard();
  bad[kHeader + kSectionHeader + table - 1] |= 0x80;
  ResealSnapshot(bad);
  ExpectRejected(bad, "bits set after the last slot");
}

TEST_P(SnapshotCorruptionTest, FileOfTheOtherTableKindIsRejected) {
  // Same f and b, but the other kind needs 4 bits per bucket more or less.
  std::vector<uint8_t> bad = good_;
  Put32(bad, 20, Semi() ? 0 : 1);
  ResealSnapshot(bad);
  ExpectRejected(bad, "table bytes per shard");
}

INSTANTIATE_TEST_SUITE_P(Kinds, SnapshotCorruptionTest,
                         ::testing::Values(TableKind::kPacked, TableKind::kSemiSorted),
                         [](const auto& p) { return std::string(TableKindName(p.param)); });

// --- Semi-sorted files: tables a writer never produces.

class SemiSortedSnapshotTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto f = MakeFilter({.capacity = 4'000, .shards = 2, .seed = 11, .semi_sort = true});
    shape_ = f->shape();
    ASSERT_EQ(shape_.fingerprint_bits, 12u);
    InsertAll(*f, Keys(0, 3'000));
    auto w = WriteSnapshotFile(*f, "c", dir_.path());
    ASSERT_TRUE(w.ok()) << w.status();
    good_ = ReadBytes(w->path);
    section_ = kSectionHeader + shape_.table_bytes_per_shard() + 8;
  }

  // Writes the n-bit value v at bit `bit` of shard `shard`'s table.
  void PutBits(std::vector<uint8_t>& b, uint32_t shard, uint64_t bit, uint32_t n, uint64_t v) {
    const size_t table = kHeader + shard * section_ + kSectionHeader;
    testing::PutBits(absl::MakeSpan(b).subspan(table), bit, n, v);
  }

  static void Put32(std::vector<uint8_t>& b, size_t at, uint32_t v) {
    std::memcpy(b.data() + at, &v, 4);
  }
  absl::Status Parse(const std::vector<uint8_t>& b) {
    return ParseSnapshot(b, "snap.cuckoo", "c").status();
  }

  TempDir dir_;
  FilterShape shape_;
  std::vector<uint8_t> good_;
  size_t section_ = 0;
};

TEST_F(SemiSortedSnapshotTest, IntactFileLoadsAsSemiSorted) {
  ASSERT_EQ(testing::SnapshotGet32(good_.data() + 20), 1u);
  auto r = ParseSnapshot(good_, "snap.cuckoo", "c");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->filter->shape().table_kind, TableKind::kSemiSorted);
  EXPECT_EQ(r->filter->shape(), shape_);
  for (const std::string& k : Keys(0, 3'000)) ASSERT_TRUE(r->filter->MayContain(k)) << k;
}

TEST_F(SemiSortedSnapshotTest, BucketCodeOf3876OrMoreIsDataLossNamingShardAndBucket) {
  const uint64_t bucket_bits = shape_.bucket_bits();  // 44
  const uint64_t last = shape_.buckets_per_shard - 1;
  for (uint32_t shard : {0u, 1u}) {
    for (uint64_t bucket : {uint64_t{0}, uint64_t{1}, last / 2, last}) {
      for (uint32_t code : {3876u, 3877u, 4095u}) {
        std::vector<uint8_t> bad = good_;
        PutBits(bad, shard, bucket * bucket_bits, 12, code);
        ResealSnapshot(bad);
        const absl::Status st = Parse(bad);
        const std::string context =
            absl::StrFormat("shard %u bucket %u code %u", shard, bucket, code);
        EXPECT_EQ(st.code(), absl::StatusCode::kDataLoss) << context << st;
        EXPECT_THAT(st.message(), HasSubstr("snap.cuckoo: ")) << context;
        EXPECT_THAT(st.message(), HasSubstr(absl::StrFormat("shard %u ", shard))) << context;
        EXPECT_THAT(st.message(), HasSubstr(absl::StrFormat("bucket %u ", bucket))) << context;
        EXPECT_THAT(st.message(), HasSubstr("code 3876 or more")) << context;
      }
    }
  }
  // Code 3875 (all nibbles 15) with ascending low parts is a valid bucket.
  std::vector<uint8_t> ok = good_;
  PutBits(ok, 1, 0, 12, 3875);
  for (uint32_t j = 0; j < 4; ++j) PutBits(ok, 1, 12 + 8 * j, 8, j);
  ResealSnapshot(ok);
  EXPECT_TRUE(Parse(ok).ok()) << Parse(ok);
}

TEST_F(SemiSortedSnapshotTest, BucketWithEntriesOutOfOrderIsDataLoss) {
  // Nibbles all 0 (code 0), low parts 9, 3, 0, 0: fingerprints 9, 3, 0, 0,
  // which no writer stores (slots are sorted, empty first).
  std::vector<uint8_t> bad = good_;
  const uint64_t bucket = 7;
  const uint64_t at = bucket * shape_.bucket_bits();
  PutBits(bad, 0, at, 12, 0);
  const uint64_t low[4] = {9, 3, 0, 0};
  for (uint32_t j = 0; j < 4; ++j) PutBits(bad, 0, at + 12 + 8 * j, 8, low[j]);
  ResealSnapshot(bad);
  const absl::Status st = Parse(bad);
  EXPECT_EQ(st.code(), absl::StatusCode::kDataLoss) << st;
  EXPECT_THAT(st.message(), HasSubstr("shard 0 "));
  EXPECT_THAT(st.message(), HasSubstr("bucket 7 "));
  EXPECT_THAT(st.message(), HasSubstr("out of order"));
}

TEST_F(SemiSortedSnapshotTest, SemiSortedHeaderWithAShapeThisBuildCannotEncodeIsRefused) {
  struct Case {
    size_t at;
    uint32_t value;
    std::string why;
  };
  const std::vector<Case> cases = {
      {28, 2, "bucket_size"},
      {28, 8, "bucket_size"},
      {24, 4, "fingerprint_bits"},
      {20, 2, "table kind 2 is unknown"},
  };
  for (const Case& c : cases) {
    std::vector<uint8_t> bad = good_;
    Put32(bad, c.at, c.value);
    ResealSnapshot(bad);
    const absl::Status st = Parse(bad);
    EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition) << c.why << st;
    EXPECT_THAT(st.message(), HasSubstr("written by a newer cuckood")) << c.why;
    EXPECT_THAT(st.message(), HasSubstr(c.why));
  }
}

}  // namespace
}  // namespace cuckoo
