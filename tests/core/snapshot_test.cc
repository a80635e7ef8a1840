#include "core/snapshot.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/internal/filter_loading.h"
#include "core/shape_format.h"
#include "cuckoo_version.h"
#include "tests/core/snapshot_layout.h"
#include "tests/core/table_bits.h"
#include "tests/util/keys.h"
#include "tests/util/temp_dir.h"

namespace cuckoo {

// For parameterised test names and messages (found by ADL).
void PrintTo(TableKind kind, std::ostream* os) { *os << TableKindName(kind); }

namespace {

using ::testing::HasSubstr;
using testing::Key;
using testing::Keys;
using testing::TempDir;

using testing::kSnapshotV1;
using testing::kSnapshotV2;
using testing::kSnapshotV3;
using testing::kSnapshotV4;
using testing::kSnapshotV5;
using testing::kSnapshotV6;
using testing::kSnapshotWritten;
using testing::ResealSnapshot;
using testing::SnapshotLayout;
using testing::SnapshotToVersion1;
using testing::SnapshotToVersion2;
using testing::SnapshotToVersion3;
using testing::SnapshotToVersion4;
using testing::SnapshotToVersion6;
// Files this build writes: version 3. A fixed filter's section: its
// header, generation 0's block header, then the table.
constexpr size_t kHeader = kSnapshotWritten.header;
constexpr size_t kSectionHeader = kSnapshotWritten.table();
constexpr size_t kFooter = testing::kSnapshotFooter;

std::unique_ptr<CuckooFilter> MakeFilter(const FilterOptions& o) {
  auto f = CuckooFilter::Create(o);
  EXPECT_TRUE(f.ok()) << f.status();
  return *std::move(f);
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

std::vector<uint8_t> ShardBytes(const CuckooFilter& f, uint32_t i) {
  std::vector<uint8_t> b(f.shape().table_bytes_per_shard());
  f.CopyShard(i, b.data());
  return b;
}

// Inserts `keys` with the logged batch form, giving each shard write the
// next position after *position.
void InsertLogged(CuckooFilter& f, const std::vector<std::string>& keys, uint64_t* position) {
  std::vector<std::string_view> v(keys.begin(), keys.end());
  std::vector<InsertResult> r(v.size());
  f.InsertBatch(
      v, false, absl::MakeSpan(r), [] { return false; },
      [&](const ShardWrite&) { return ++*position; });
}

// "cuckood X.Y.Z", the writer this build records.
std::string ThisBuild() { return absl::StrCat("cuckood ", kVersion); }

// Where a version-3 file's sections and their generations' blocks start.
struct SectionLayout {
  size_t at = 0;              // The section.
  std::vector<size_t> block;  // Each generation's block header.
  size_t trailer = 0;
};
std::vector<SectionLayout> Sections(const std::vector<uint8_t>& b) {
  std::vector<SectionLayout> out;
  const SnapshotLayout& layout = *testing::SnapshotLayoutOf(b);
  const uint32_t shards = testing::SnapshotGet32(b.data() + layout.at(testing::kSnapshotShards));
  size_t at = layout.header;
  for (uint32_t i = 0; i < shards; ++i) {
    SectionLayout s{.at = at};
    const uint32_t gens = testing::SnapshotGet32(b.data() + at + testing::kSnapshotV3Generations);
    size_t p = at + kSnapshotV3.section_header;
    for (uint32_t g = 0; g < gens; ++g) {
      s.block.push_back(p);
      p += kSnapshotV3.generation_header +
           testing::SnapshotGet64(b.data() + p + testing::kSnapshotGenTableBytes);
    }
    s.trailer = p;
    at = p + 8;
    out.push_back(s);
  }
  return out;
}

// Reseals version-3 file `b` as ResealSnapshot does, but with the sections
// where `sections` says (a valid file's), whatever the block headers say
// now: the file of a writer that recorded a wrong table length or size.
void ResealLike(std::vector<uint8_t>& b, const std::vector<SectionLayout>& sections) {
  const SnapshotLayout& layout = *testing::SnapshotLayoutOf(b);
  const size_t header_checksum = layout.header_checksum;
  testing::SnapshotPut64(b.data() + header_checksum, XXH3_64bits(b.data(), header_checksum));
  std::vector<uint8_t> chain(b.begin() + header_checksum, b.begin() + layout.header);
  for (const SectionLayout& s : sections) {
    testing::SnapshotPut64(b.data() + s.trailer, XXH3_64bits(b.data() + s.at, s.trailer - s.at));
    chain.insert(chain.end(), b.begin() + s.trailer, b.begin() + s.trailer + 8);
  }
  const size_t footer = b.size() - kFooter;
  chain.insert(chain.end(), b.begin() + footer, b.begin() + footer + 24);
  testing::SnapshotPut64(b.data() + footer + 24, XXH3_64bits(chain.data(), chain.size()));
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
  EXPECT_EQ(w->path, SnapshotPath(dir.path(), "rt"));
  EXPECT_EQ(w->bytes, std::filesystem::file_size(w->path));
  EXPECT_EQ(w->items, original->items());
  // The header's table_kind: 0 packed, as before semi-sorting; 1 semi-sorted.
  EXPECT_EQ(
      testing::SnapshotGet32(copied.data() + kSnapshotWritten.at(testing::kSnapshotTableKind)),
      c.semi ? 1u : 0u);

  absl::StatusOr<LoadedSnapshot> r = ReadSnapshotFile(w->path, "rt");
  ASSERT_TRUE(r.ok()) << r.status();
  CuckooFilter& loaded = *r->filter;
  EXPECT_EQ(r->format_version, 5u);
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

// Files of builds before format version 5 still load, bit for bit (versions
// 1 and 2 as fixed filters): versions 2 to 4 with their filter id and log
// positions, version 1 with none (it holds none).
TEST_P(SnapshotRoundTripTest, VersionOneToFourFilesLoadBitIdentical) {
  const RoundTripCase c = GetParam();
  TempDir dir;
  auto original = MakeFilter({.capacity = 20'000,
                              .fingerprint_bits = c.f,
                              .bucket_size = c.b,
                              .shards = c.shards,
                              .seed = 77,
                              .semi_sort = c.semi});
  original->set_id(12);
  uint64_t position = 100;
  InsertLogged(*original, Keys(0, 18'000), &position);
  absl::StatusOr<SnapshotWriteResult> w = WriteSnapshotFile(*original, "old", dir.path());
  ASSERT_TRUE(w.ok()) << w.status();
  const std::vector<uint8_t> v3 = ReadBytes(w->path);
  const std::vector<uint64_t> positions = original->ShardPositions();
  std::vector<std::unique_ptr<CuckooFilter>> loaded_filters;
  for (uint32_t version : {1u, 2u, 3u, 4u}) {
    SCOPED_TRACE(absl::StrCat("version ", version));
    const std::vector<uint8_t> old = version == 1   ? SnapshotToVersion1(v3)
                                     : version == 2 ? SnapshotToVersion2(v3)
                                     : version == 3 ? SnapshotToVersion3(v3)
                                                    : SnapshotToVersion4(v3);
    const SnapshotLayout& layout = version == 1   ? kSnapshotV1
                                   : version == 2 ? kSnapshotV2
                                   : version == 3 ? kSnapshotV3
                                                  : kSnapshotV4;
    ASSERT_EQ(old.size(), layout.FileBytes(c.shards, original->shape().table_bytes_per_shard()));
    ASSERT_EQ(testing::SnapshotGet32(old.data() + 8), version);

    absl::StatusOr<LoadedSnapshot> r = ParseSnapshot(old, "old.cuckoo", "old");
    ASSERT_TRUE(r.ok()) << r.status();
    CuckooFilter& loaded = *r->filter;
    EXPECT_EQ(r->format_version, version);
    EXPECT_EQ(r->header.file_bytes, old.size());
    EXPECT_EQ(r->header.shards_with_generation, std::vector<uint32_t>{c.shards});
    EXPECT_EQ(r->header.memory_bytes, CuckooFilter::MemoryBytes(original->shape()));
    EXPECT_EQ(absl::ToUnixMicros(r->header.taken), absl::ToUnixMicros(w->taken));
    EXPECT_EQ(loaded.shape(), original->shape());
    EXPECT_EQ(r->items, original->items());
    EXPECT_EQ(r->filter_id, version == 1 ? 0u : 12u);
    EXPECT_EQ(loaded.id(), r->filter_id);
    if (version == 1) {
      EXPECT_EQ(r->min_position, 0u);
      EXPECT_EQ(r->max_position, 0u);
      EXPECT_EQ(loaded.ShardPositions(), std::vector<uint64_t>(c.shards, 0));
    } else {
      EXPECT_EQ(loaded.ShardPositions(), positions);
    }
    for (uint32_t i = 0; i < c.shards; ++i) {
      EXPECT_EQ(ShardBytes(loaded, i), ShardBytes(*original, i)) << "shard " << i;
      EXPECT_EQ(loaded.ShardGenerations(i), 1u);
    }
    loaded_filters.push_back(std::move(r->filter));
  }
  ASSERT_EQ(loaded_filters.size(), 4u);
  // The kick-victim generators too: later inserts land identically.
  std::vector<std::string> more = Keys(2, 1'500);
  InsertAll(*original, more);
  for (const auto& loaded : loaded_filters) {
    InsertAll(*loaded, more);
    for (uint32_t i = 0; i < c.shards; ++i) {
      EXPECT_EQ(ShardBytes(*loaded, i), ShardBytes(*original, i)) << "shard " << i;
    }
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

// The filter's expire_at is in the header (format version 6, bytes
// 856..863), read back, and a snapshot counts its changes as held; a
// filter without one is written as version 5, which builds from before
// filter expiry load.
TEST(SnapshotTest, ExpireAtSurvivesARoundTripInHeaderBytes856To863) {
  TempDir dir;
  auto original = MakeFilter({.capacity = 1000, .seed = 5});
  original->set_expire_at(1796083200123);
  auto w = WriteSnapshotFile(*original, "seen:2026-11-29", dir.path());
  ASSERT_TRUE(w.ok()) << w.status();
  EXPECT_EQ(w->expire_at, 1796083200123);
  EXPECT_EQ(w->changes, original->changes());
  auto r = ReadSnapshotFile(w->path, "seen:2026-11-29");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->expire_at, 1796083200123);
  EXPECT_EQ(r->filter->expire_at(), 1796083200123);

  std::string bytes;
  {
    std::ifstream in(w->path, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), {});
  }
  ASSERT_GT(bytes.size(), 1024u);
  int64_t stored = 0;
  std::memcpy(&stored, bytes.data() + 856, 8);
  EXPECT_EQ(stored, 1796083200123);
  uint32_t version = 0;
  std::memcpy(&version, bytes.data() + 8, 4);
  EXPECT_EQ(version, 6u);
  EXPECT_EQ(r->format_version, 6u);
  // Without an expiry the bytes are zeros, as builds before it wrote them.
  original->set_expire_at(0);
  auto none = WriteSnapshotFile(*original, "seen:2026-11-29", dir.path());
  ASSERT_TRUE(none.ok()) << none.status();
  auto back = ReadSnapshotFile(none->path, "seen:2026-11-29");
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->filter->expire_at(), 0);
  EXPECT_EQ(back->format_version, 5u);
}

// A filter made over the Redis port grows for repeated keys
// (grow_on_repeats): its snapshot keeps the flag, so after a restart it
// goes on growing for them, and keeps every copy it counted. (Snapshot
// format version 5 stores the shape with EncodeShape, which carries the
// flag; version 4's header has no place for it.)
TEST(SnapshotTest, GrowOnRepeatsAndTheCopiesSurviveARoundTrip) {
  TempDir dir;
  auto original = MakeFilter({.capacity = 1000,
                              .false_positive_rate = 0.002,
                              .seed = 5,
                              .growth_factor = 2,
                              .max_capacity = 1000 * 1024,
                              .grow_on_repeats = true});
  for (int i = 0; i < 40; ++i) ASSERT_EQ(original->Insert("seen"), InsertResult::kInserted);
  ASSERT_GT(original->ShardGenerations(0), 1u);
  auto w = WriteSnapshotFile(*original, "repeats", dir.path());
  ASSERT_TRUE(w.ok()) << w.status();
  auto r = ReadSnapshotFile(w->path, "repeats");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->filter->shape(), original->shape());
  EXPECT_TRUE(r->filter->shape().grow_on_repeats);
  EXPECT_EQ(r->filter->ApproximateCount("seen"), 40u);
  EXPECT_EQ(r->filter->Insert("seen"), InsertResult::kInserted);
  EXPECT_EQ(r->filter->ApproximateCount("seen"), 41u);
}

// The filter id and every shard's log position, which a write-ahead log
// resumes from, survive a round trip, through a buffer that holds a whole
// section and through one that does not.
TEST(SnapshotTest, FilterIdAndEveryShardPositionSurviveARoundTrip) {
  TempDir dir;
  auto made =
      CuckooFilter::FromShape(MakeFilter({.capacity = 10'000, .shards = 8, .seed = 5})->shape());
  ASSERT_TRUE(made.ok()) << made.status();
  CuckooFilter& f = **made;
  const std::vector<uint64_t> positions = {7, 0, 1'000'000'007, 42, uint64_t{1} << 63, 3, 9, 8};
  for (uint32_t i = 0; i < 8; ++i)
    internal::FilterLoading::RestoreShard(f, i, 0, 1 + i, positions[i]);
  f.set_id(0xC0FFEE'0000'0001);
  InsertAll(f, Keys(0, 500));  // Unlogged: the positions stay.
  ASSERT_EQ(f.ShardPositions(), positions);
  for (const size_t buffer : {size_t{64} << 20, size_t{100}}) {
    absl::StatusOr<SnapshotWriteResult> w =
        WriteSnapshotFile(f, "pos", dir.path(), {.buffer_bytes = buffer});
    ASSERT_TRUE(w.ok()) << w.status();
    EXPECT_EQ(w->filter_id, 0xC0FFEE'0000'0001u) << buffer;
    EXPECT_EQ(w->min_position, 0u) << buffer;
    EXPECT_EQ(w->max_position, uint64_t{1} << 63) << buffer;
    absl::StatusOr<LoadedSnapshot> r = ReadSnapshotFile(w->path, "pos");
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->format_version, 5u);
    EXPECT_EQ(r->filter_id, 0xC0FFEE'0000'0001u);
    EXPECT_EQ(r->filter->id(), 0xC0FFEE'0000'0001u);
    EXPECT_EQ(r->filter->ShardPositions(), positions) << buffer;
    EXPECT_EQ(r->min_position, 0u);
    EXPECT_EQ(r->max_position, uint64_t{1} << 63);
    EXPECT_EQ(r->items, 500u);
  }
}

// Positions given by the logged write path are the ones saved, each shard's
// as its table was copied.
TEST(SnapshotTest, PositionsOfLoggedWritesAreSavedPerShard) {
  TempDir dir;
  auto f = MakeFilter({.capacity = 50'000, .shards = 16, .seed = 6});
  f->set_id(3);
  uint64_t position = 3;
  InsertLogged(*f, Keys(0, 20'000), &position);
  InsertLogged(*f, Keys(1, 7), &position);  // Only some shards move on.
  const std::vector<uint64_t> positions = f->ShardPositions();
  const auto [min, max] = std::minmax_element(positions.begin(), positions.end());
  ASSERT_LT(*min, *max);
  ASSERT_EQ(*max, position);
  absl::StatusOr<SnapshotWriteResult> w = WriteSnapshotFile(*f, "logged", dir.path());
  ASSERT_TRUE(w.ok()) << w.status();
  EXPECT_EQ(w->min_position, *min);
  EXPECT_EQ(w->max_position, *max);
  EXPECT_EQ(w->filter_id, 3u);
  absl::StatusOr<LoadedSnapshot> r = ReadSnapshotFile(w->path, "logged");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->filter->ShardPositions(), positions);
  EXPECT_EQ(r->min_position, *min);
  EXPECT_EQ(r->max_position, *max);
  EXPECT_EQ(r->filter->id(), 3u);
}

// A position floor raises the recorded position of every shard behind it
// (shards no write reached for a while) and leaves those past it alone, so
// an idle shard does not hold the log back; the table bytes are unchanged.
TEST(SnapshotTest, APositionFloorRaisesIdleShardsOnly) {
  TempDir dir;
  auto made =
      CuckooFilter::FromShape(MakeFilter({.capacity = 10'000, .shards = 8, .seed = 5})->shape());
  ASSERT_TRUE(made.ok()) << made.status();
  CuckooFilter& f = **made;
  const std::vector<uint64_t> positions = {7, 0, 1'000, 42, 500, 3, 9, 8};
  for (uint32_t i = 0; i < 8; ++i)
    internal::FilterLoading::RestoreShard(f, i, 0, 1 + i, positions[i]);
  f.set_id(2);
  InsertAll(f, Keys(0, 300));
  for (const size_t buffer : {size_t{64} << 20, size_t{100}}) {
    int calls = 0;
    absl::StatusOr<SnapshotWriteResult> w = WriteSnapshotFile(
        f, "floor", dir.path(), {.buffer_bytes = buffer, .position_floor = [&calls] {
                                   ++calls;
                                   return uint64_t{100};
                                 }});
    ASSERT_TRUE(w.ok()) << w.status();
    EXPECT_EQ(calls, 8) << "once per shard, before its copy";
    EXPECT_EQ(w->min_position, 100u);
    EXPECT_EQ(w->max_position, 1'000u);
    absl::StatusOr<LoadedSnapshot> r = ReadSnapshotFile(w->path, "floor");
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->filter->ShardPositions(),
              (std::vector<uint64_t>{100, 100, 1'000, 100, 500, 100, 100, 100}))
        << buffer;
    EXPECT_EQ(r->items, 300u);
    for (uint32_t i = 0; i < 8; ++i) EXPECT_EQ(ShardBytes(*r->filter, i), ShardBytes(f, i));
  }
  EXPECT_EQ(f.ShardPositions(), positions) << "the filter itself keeps its positions";
}

// The bytes of docs/SNAPSHOT_FORMAT.md's version 5 for a fixed filter,
// which other code reads.
TEST(SnapshotTest, WrittenFileHasTheVersionFiveLayout) {
  TempDir dir;
  auto made =
      CuckooFilter::FromShape(MakeFilter({.capacity = 3'000, .shards = 4, .seed = 8})->shape());
  ASSERT_TRUE(made.ok()) << made.status();
  CuckooFilter& f = **made;
  for (uint32_t i = 0; i < 4; ++i) internal::FilterLoading::RestoreShard(f, i, 0, 11 + i, 1000 + i);
  f.set_id(77);
  InsertAll(f, Keys(0, 1'000));
  absl::StatusOr<SnapshotWriteResult> w = WriteSnapshotFile(f, "layout", dir.path());
  ASSERT_TRUE(w.ok()) << w.status();
  const std::vector<uint8_t> b = ReadBytes(w->path);
  const FilterShape& shape = f.shape();
  const uint64_t t = shape.table_bytes_per_shard();
  ASSERT_EQ(b.size(), 1024 + 4 * (24 + 40 + t + 8) + 32);
  EXPECT_EQ(w->bytes, b.size());
  auto u32 = [&](size_t at) { return testing::SnapshotGet32(b.data() + at); };
  auto u64 = [&](size_t at) { return testing::SnapshotGet64(b.data() + at); };
  EXPECT_EQ(std::string(b.begin(), b.begin() + 8),
            "\x89"
            "CUCKOO\n");
  EXPECT_EQ(u32(8), 5u);
  EXPECT_EQ(u32(12), 1024u);
  std::string writer(b.begin() + 16, b.begin() + 48);
  EXPECT_EQ(writer, ThisBuild() + std::string(32 - ThisBuild().size(), '\0'));
  // The shape as core/shape_format.h encodes it; a fixed filter's growth
  // block is zeros.
  uint8_t encoded[kMaxEncodedShapeBytes] = {};
  EncodeShape(shape, encoded);
  EXPECT_EQ(std::vector<uint8_t>(b.begin() + 48, b.begin() + 128),
            std::vector<uint8_t>(encoded, encoded + kMaxEncodedShapeBytes));
  EXPECT_EQ(u32(48), shape.hash_id);
  EXPECT_EQ(u32(52), shape.fingerprint_bits);
  EXPECT_EQ(u32(56), shape.bucket_size);
  EXPECT_EQ(u32(60), 4u);
  EXPECT_EQ(u32(64), 2u);
  EXPECT_EQ(u32(68), shape.max_kicks);
  EXPECT_EQ(u32(72), static_cast<uint32_t>(shape.table_kind));
  EXPECT_EQ(u32(76), 0u);
  EXPECT_EQ(u64(80), shape.seed);
  EXPECT_EQ(u64(88), shape.capacity);
  EXPECT_EQ(u64(96), shape.buckets_per_shard);
  EXPECT_EQ(std::vector<uint8_t>(b.begin() + 104, b.begin() + 128), std::vector<uint8_t>(24, 0));
  EXPECT_EQ(u32(128), 6u);  // "layout"
  EXPECT_EQ(u32(132), 1u);  // A schedule of one generation.
  EXPECT_EQ(u64(136), t);
  EXPECT_EQ(static_cast<int64_t>(u64(144)), absl::ToUnixMicros(w->taken));
  EXPECT_EQ(u64(152), 77u);
  uint8_t schedule[12];
  testing::SnapshotPut32(schedule, shape.fingerprint_bits);
  testing::SnapshotPut64(schedule + 4, shape.buckets_per_shard);
  EXPECT_EQ(u64(160), XXH3_64bits(schedule, sizeof(schedule)));
  EXPECT_EQ(u32(168), 4u);  // All 4 shards have generation 0.
  for (size_t g = 1; g < 32; ++g) EXPECT_EQ(u32(168 + 4 * g), 0u) << g;
  // No log identity given: 48 zeros. Then the name, padded to 512 bytes,
  // and 160 reserved.
  EXPECT_EQ(std::vector<uint8_t>(b.begin() + 296, b.begin() + 344), std::vector<uint8_t>(48, 0));
  EXPECT_EQ(std::string(b.begin() + 344, b.begin() + 856), "layout" + std::string(506, '\0'));
  EXPECT_EQ(std::vector<uint8_t>(b.begin() + 856, b.begin() + 1016), std::vector<uint8_t>(160, 0));
  EXPECT_EQ(u64(1016), XXH3_64bits(b.data(), 1016));
  uint64_t items = 0;
  std::vector<uint8_t> chain(b.begin() + 1016, b.begin() + 1024);
  for (uint32_t i = 0; i < 4; ++i) {
    const size_t at = 1024 + i * (24 + 40 + t + 8);
    CuckooFilter::ShardState state;
    std::vector<uint8_t> table(t);
    state = f.CopyShard(i, table.data());
    EXPECT_EQ(u32(at), i);
    EXPECT_EQ(u32(at + 4), 1u);  // Generations.
    EXPECT_EQ(u64(at + 8), state.items);
    EXPECT_EQ(u64(at + 16), 1000 + i);
    // Generation 0's block.
    EXPECT_EQ(u32(at + 24), 0u);
    EXPECT_EQ(u32(at + 28), shape.fingerprint_bits);
    EXPECT_EQ(u64(at + 32), shape.buckets_per_shard);
    EXPECT_EQ(u64(at + 40), state.items);
    EXPECT_EQ(u64(at + 48), state.rng_state);
    EXPECT_EQ(u64(at + 56), t);
    EXPECT_EQ(std::vector<uint8_t>(b.begin() + at + 64, b.begin() + at + 64 + t), table);
    EXPECT_EQ(u64(at + 64 + t), XXH3_64bits(b.data() + at, 64 + t));
    chain.insert(chain.end(), b.begin() + at + 64 + t, b.begin() + at + 72 + t);
    items += state.items;
  }
  const size_t footer = b.size() - 32;
  EXPECT_EQ(std::string(b.begin() + footer, b.begin() + footer + 8),
            "\x89"
            "CKFEND\n");
  EXPECT_EQ(u64(footer + 8), b.size());
  EXPECT_EQ(u64(footer + 16), items);
  chain.insert(chain.end(), b.begin() + footer, b.begin() + footer + 24);
  EXPECT_EQ(u64(footer + 24), XXH3_64bits(chain.data(), chain.size()));
  EXPECT_EQ(items, 1'000u);
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
  EXPECT_THAT(files, ::testing::ElementsAre(SnapshotFileName("re")));
  auto r = ReadSnapshotFile(SnapshotPath(dir.path(), "re"), "re");
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
  std::filesystem::create_directory(SnapshotTempPath(dir.path(), "keep"));
  auto w = WriteSnapshotFile(*f, "keep", dir.path());
  ASSERT_FALSE(w.ok());
  EXPECT_THAT(w.status().message(), HasSubstr(SnapshotTempPath(dir.path(), "keep")));
  auto r = ReadSnapshotFile(SnapshotPath(dir.path(), "keep"), "keep");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->items, 100u);
}

// cuckood makes its log durable up to max_position before the new snapshot
// replaces the old one; when it cannot, the old snapshot must stay.
TEST(SnapshotTest, BeforeCommitFailureKeepsThePreviousSnapshot) {
  TempDir dir;
  auto f = MakeFilter({.capacity = 10'000, .shards = 2, .seed = 5});
  InsertAll(*f, Keys(0, 100));
  ASSERT_TRUE(WriteSnapshotFile(*f, "keep", dir.path()).ok());
  const std::string path = SnapshotPath(dir.path(), "keep");
  const std::string tmp = SnapshotTempPath(dir.path(), "keep");
  const std::vector<uint8_t> before = ReadBytes(path);
  InsertAll(*f, Keys(1, 100));
  for (const size_t buffer : {size_t{64} << 20, size_t{64}}) {
    int calls = 0;
    auto w = WriteSnapshotFile(
        *f, "keep", dir.path(),
        {.buffer_bytes = buffer, .before_commit = [&](const SnapshotWriteResult&) {
           ++calls;
           EXPECT_TRUE(std::filesystem::exists(tmp));
           return absl::UnavailableError("the log is not durable");
         }});
    EXPECT_EQ(calls, 1);
    ASSERT_FALSE(w.ok());
    EXPECT_EQ(w.status(), absl::UnavailableError("the log is not durable"));
    EXPECT_FALSE(std::filesystem::exists(tmp)) << "the temporary file is removed";
    EXPECT_EQ(ReadBytes(path), before) << "the previous snapshot stays";
  }
  auto r = ReadSnapshotFile(path, "keep");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->items, 100u);
}

TEST(SnapshotTest, BeforeCommitSeesTheResultAndTheWholeNewFileBeforeItReplacesTheOld) {
  TempDir dir;
  auto f = MakeFilter({.capacity = 10'000, .shards = 4, .seed = 5});
  f->set_id(21);
  uint64_t position = 21;
  InsertLogged(*f, Keys(0, 300), &position);
  ASSERT_TRUE(WriteSnapshotFile(*f, "bc", dir.path()).ok());
  const std::string path = SnapshotPath(dir.path(), "bc");
  InsertLogged(*f, Keys(1, 50), &position);
  const std::vector<uint64_t> positions = f->ShardPositions();
  for (const size_t buffer : {size_t{64} << 20, size_t{64}}) {
    const std::vector<uint8_t> old = ReadBytes(path);
    SnapshotWriteResult seen;
    int calls = 0;
    auto w = WriteSnapshotFile(
        *f, "bc", dir.path(),
        {.buffer_bytes = buffer, .before_commit = [&](const SnapshotWriteResult& result) {
           ++calls;
           seen = result;
           EXPECT_EQ(ReadBytes(path), old) << "not replaced yet";
           // The temporary file is complete: it loads.
           const std::vector<uint8_t> tmp = ReadBytes(SnapshotTempPath(dir.path(), "bc"));
           EXPECT_EQ(tmp.size(), result.bytes);
           auto r = ParseSnapshot(tmp, "tmp", "bc");
           EXPECT_TRUE(r.ok()) << r.status();
           if (r.ok()) {
             EXPECT_EQ(r->filter->ShardPositions(), positions);
           }
           return absl::OkStatus();
         }});
    ASSERT_TRUE(w.ok()) << w.status();
    EXPECT_EQ(calls, 1);
    EXPECT_EQ(seen.path, path);
    EXPECT_EQ(seen.bytes, w->bytes);
    EXPECT_EQ(seen.items, 350u);
    EXPECT_EQ(seen.changes, 350u);
    EXPECT_EQ(seen.filter_id, 21u);
    EXPECT_EQ(seen.min_position, *std::min_element(positions.begin(), positions.end()));
    EXPECT_EQ(seen.max_position, position);
    EXPECT_EQ(seen.taken, w->taken);
    EXPECT_EQ(w->min_position, seen.min_position);
    EXPECT_EQ(w->max_position, seen.max_position);
    EXPECT_NE(ReadBytes(path), old) << "replaced after before_commit";
  }
}

TEST(SnapshotTest, WriteToMissingDirectoryNamesThePath) {
  auto f = MakeFilter({.capacity = 1000, .seed = 5});
  auto w = WriteSnapshotFile(*f, "x", "/nonexistent-cuckoo-dir");
  ASSERT_FALSE(w.ok());
  EXPECT_EQ(w.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(w.status().message(), HasSubstr(SnapshotTempPath("/nonexistent-cuckoo-dir", "x")));
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
  EXPECT_EQ(seen.shards_with_generation, std::vector<uint32_t>{2});
  EXPECT_EQ(seen.memory_bytes, f->memory_bytes());
}

// Version 4 on: the log identity the writer gives (version 5: at bytes
// 296..343), read back; files before version 4 record none.
TEST(SnapshotTest, TheLogIdentityIsRecordedAndReadBack) {
  TempDir dir;
  auto f = MakeFilter({.capacity = 1'000, .shards = 2, .seed = 3});
  InsertAll(*f, Keys(0, 100));
  absl::StatusOr<SnapshotWriteResult> w =
      WriteSnapshotFile(*f, "log", dir.path(), {.log_identity = "node-0123456789abcdef"});
  ASSERT_TRUE(w.ok()) << w.status();
  const std::vector<uint8_t> b = ReadBytes(w->path);
  EXPECT_EQ(std::string(b.begin() + 296, b.begin() + 344),
            "node-0123456789abcdef" + std::string(48 - 21, '\0'));
  absl::StatusOr<LoadedSnapshot> r = ReadSnapshotFile(w->path, "log");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->header.log_identity, "node-0123456789abcdef");
  // Version 3 has no room for it.
  r = ParseSnapshot(testing::SnapshotToVersion3(b), "v3.cuckoo", "log");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->format_version, 3u);
  EXPECT_EQ(r->header.log_identity, "");
  // 48 characters fit; more, or a control character, do not.
  const std::string longest(48, 'x');
  w = WriteSnapshotFile(*f, "log", dir.path(), {.log_identity = longest});
  ASSERT_TRUE(w.ok()) << w.status();
  EXPECT_EQ(ReadSnapshotFile(w->path, "log")->header.log_identity, longest);
  const std::string path = w->path;
  for (const std::string& bad : {longest + "x", std::string("a\nb")}) {
    w = WriteSnapshotFile(*f, "log", dir.path(), {.log_identity = bad});
    EXPECT_EQ(w.status().code(), absl::StatusCode::kInvalidArgument) << w.status();
  }
  // A damaged identity (not printable, or not zero-padded) is damage.
  for (const auto& [at, byte] :
       std::vector<std::pair<size_t, uint8_t>>{{296 + 3, 0x01}, {296 + 30, 'x'}}) {
    std::vector<uint8_t> bad = ReadBytes(path);
    std::memcpy(bad.data() + 296, "node-1", 6);
    std::memset(bad.data() + 296 + 6, 0, 42);
    bad[at] = byte;
    testing::ResealSnapshot(bad);
    r = ParseSnapshot(bad, "bad.cuckoo", "log");
    EXPECT_EQ(r.status().code(), absl::StatusCode::kDataLoss) << at;
    EXPECT_THAT(r.status().message(),
                HasSubstr("the log identity (bytes 296..343) is not printable ASCII padded with "
                          "zero bytes"));
  }
}

// --- Corruption: every kind is DATA_LOSS with a message naming the file and why.

struct CorruptionCase {
  TableKind kind;
  // Of the file: 5 as this build writes a filter without an expiry, 6 with
  // one (here with its expire_at zeros: none), 1 to 4 as older builds did.
  uint32_t version;
};

void PrintTo(const CorruptionCase& c, std::ostream* os) {
  *os << TableKindName(c.kind) << " v" << c.version;
}

// Every corruption test runs on a packed file (table_kind 0: the format as it
// was before semi-sorted tables) and on a semi-sorted one (table_kind 1), each
// in format versions 5 and 6 (this build's) and 1 to 4 (earlier builds').
class SnapshotCorruptionTest : public ::testing::TestWithParam<CorruptionCase> {
 protected:
  static bool Semi() { return GetParam().kind == TableKind::kSemiSorted; }
  static bool V1() { return GetParam().version == 1; }
  // Versions 3 and 4: sections of generations.
  static bool V3() { return GetParam().version >= 3; }
  static bool V4() { return GetParam().version == 4; }
  static bool V5() { return GetParam().version == 5; }
  static bool V6() { return GetParam().version == 6; }
  // The layout of the file under test.
  static const SnapshotLayout& L() {
    return V1()   ? kSnapshotV1
           : V6() ? kSnapshotV6
           : V5() ? kSnapshotV5
           : V4() ? kSnapshotV4
           : V3() ? kSnapshotV3
                  : kSnapshotV2;
  }
  // The offset of a header setting (testing::kSnapshotHashId, ...).
  static size_t At(size_t field) { return L().at(field); }
  // `o` with the table kind under test.
  static FilterOptions With(FilterOptions o) {
    o.semi_sort = Semi();
    return o;
  }
  // A file this build wrote, in the version under test.
  static std::vector<uint8_t> InVersion(std::vector<uint8_t> written) {
    return V1()   ? SnapshotToVersion1(written)
           : V6() ? SnapshotToVersion6(written)
           : V5() ? written
           : V4() ? SnapshotToVersion4(written)
           : V3() ? SnapshotToVersion3(written)
                  : SnapshotToVersion2(written);
  }
  // What a header this build cannot read says about the build that wrote it.
  static std::string WrittenBy() {
    return V1() ? "written by a newer cuckood (version-1 files do not record which)"
                : "it was written by " + ThisBuild();
  }

  void SetUp() override {
    auto f = MakeFilter(With({.capacity = 4'000, .shards = 2, .seed = 11}));
    ASSERT_EQ(f->shape().table_kind, GetParam().kind);
    InsertAll(*f, Keys(0, 3'000));
    auto w = WriteSnapshotFile(*f, "c", dir_.path());
    ASSERT_TRUE(w.ok()) << w.status();
    good_ = InVersion(ReadBytes(w->path));
    header_ = L().header;
    table_ = f->shape().table_bytes_per_shard();
    section_ = L().table() + table_ + 8;
    ASSERT_EQ(good_.size(), header_ + 2 * section_ + kFooter);
  }

  // Parses `bytes`; expects DATA_LOSS whose message has `why` and the label.
  void ExpectRejected(const std::vector<uint8_t>& bytes, const std::string& why,
                      const std::string& context = "") {
    auto r = ParseSnapshot(bytes, "snap.cuckoo", "c");
    ASSERT_FALSE(r.ok()) << context;
    EXPECT_EQ(r.status().code(), absl::StatusCode::kDataLoss) << context << r.status();
    EXPECT_THAT(r.status().message(), HasSubstr("snap.cuckoo: ")) << context;
    EXPECT_THAT(r.status().message(), HasSubstr(why)) << context << " " << r.status();
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
  static void PutWriter(std::vector<uint8_t>& b, const std::string& writer) {
    std::memset(b.data() + kSnapshotWriterOffset, 0, kSnapshotWriterBytes);
    std::memcpy(b.data() + kSnapshotWriterOffset, writer.data(), writer.size());
  }

  TempDir dir_;
  std::vector<uint8_t> good_;
  size_t header_ = 0;
  size_t table_ = 0;
  size_t section_ = 0;
};

TEST_P(SnapshotCorruptionTest, IntactFileLoads) {
  auto r = ParseSnapshot(good_, "snap.cuckoo", "c");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->items, 3'000u);
  EXPECT_EQ(r->format_version, GetParam().version);
}

TEST_P(SnapshotCorruptionTest, FlippedByteInEverySectionIsRejected) {
  struct Region {
    size_t from, to;
    std::string why;
  };
  const size_t footer = header_ + 2 * section_;
  const std::vector<Region> regions = {
      {0, 8, "bad magic number"},
      {8, 12, "format version"},
      {12, header_, "header checksum mismatch"},
      {header_, header_ + section_, "shard 0 checksum mismatch"},
      {header_ + section_, footer, "shard 1 checksum mismatch"},
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
  // Between the shortest header and this one's.
  std::vector<uint8_t> bad(good_.begin(), good_.begin() + 300);
  ExpectRejected(bad, V1()           ? "the file is 300 bytes, its settings need"
                      : V5() || V6() ? "the file is 300 bytes, shorter than the 1024-byte header"
                      : V3()         ? "the file is 300 bytes, shorter than the 480-byte header"
                                     : "the file is 300 bytes, shorter than the 320-byte header");
}

TEST_P(SnapshotCorruptionTest, TrailingBytesAreRejected) {
  std::vector<uint8_t> bad = good_;
  bad.push_back(0);
  ExpectRejected(bad, "1 unexpected bytes after the end");
}

TEST_P(SnapshotCorruptionTest, OtherVersionsThatNameNoWriterAreDataLoss) {
  for (uint32_t v : {0u, 7u, 0xFFFFFFFFu}) {
    std::vector<uint8_t> bad = good_;
    Put32(bad, 8, v);
    if (!V1()) PutWriter(bad, "");
    ResealSnapshot(bad, L());
    ExpectRejected(bad, absl::StrFormat("format version %u is not supported (this build reads "
                                        "versions 1 to 6)",
                                        v));
    ExpectRejected(bad, "names no writer");
  }
}

// The header checksum of a file whose version field alone is damaged
// matches with the field put back, whichever version the file is.
TEST_P(SnapshotCorruptionTest, ADamagedVersionFieldIsDataLossNamingTheVersionOfTheRest) {
  std::vector<uint32_t> versions = {0u, 7u, 0x100u | GetParam().version, 0xFFFFFFFFu};
  for (uint32_t other_known : {1u, 2u, 3u, 4u, 5u, 6u}) {
    if (other_known != GetParam().version) versions.push_back(other_known);
  }
  for (uint32_t v : versions) {
    std::vector<uint8_t> bad = good_;
    Put32(bad, 8, v);  // Not resealed: the header checksum is the real version's.
    ExpectRejected(bad,
                   absl::StrFormat("format version field is corrupt (%u; the rest is a valid "
                                   "version-%u header)",
                                   v, GetParam().version),
                   absl::StrCat("version field ", v));
  }
}

// A file a newer build wrote is intact: refusing it (FAILED_PRECONDITION)
// keeps it in place, where a rollback's quarantine would lose the filter.
TEST_P(SnapshotCorruptionTest, ANewerFormatIsRefusedNamingTheBuildThatWroteIt) {
  for (uint32_t version : {7u, 0xFFFFFFFFu}) {
    std::vector<uint8_t> newer = good_;
    Put32(newer, 8, version);
    PutWriter(newer, "cuckood 0.9.3");
    auto r = ParseSnapshot(newer, "snap.cuckoo", "c");
    EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition) << r.status();
    EXPECT_THAT(r.status().message(),
                HasSubstr(absl::StrFormat(
                    "snap.cuckoo: format version %u (this build reads versions 1 to 6); it was "
                    "written by cuckood 0.9.3, and this build (%s) cannot read it",
                    version, ThisBuild())));
    EXPECT_THAT(r.status().message(), HasSubstr("move the file out of the data directory"));
    // Not a writer: control characters.
    newer[kSnapshotWriterOffset + 2] = '\n';
    ExpectRejected(newer, "names no writer");
  }
}

TEST_P(SnapshotCorruptionTest, UnknownKindsHashesAndSettingsWithValidChecksumsAreRefusedNotLost) {
  struct Case {
    size_t field;
    uint32_t value;
    std::string why;
  };
  const std::vector<Case> cases = {
      {testing::kSnapshotHashId, 9, "hash id 9 is unknown"},
      {testing::kSnapshotTableKind, 2, "table kind 2 is unknown"},
      {testing::kSnapshotTableKind, 0xFFFFFFFF, "table kind 4294967295 is unknown"},
      {testing::kSnapshotFingerprintBits, 0, "fingerprint_bits=0"},
      {testing::kSnapshotFingerprintBits, 33, "fingerprint_bits=33"},
      {testing::kSnapshotBucketSize, 3, "bucket_size=3"},
      {testing::kSnapshotShards, 3, "shards=3"},
      {testing::kSnapshotShardBits, 5, "shard_bits=5"},
      {testing::kSnapshotMaxKicks, 0, "max_kicks=0"},
      {testing::kSnapshotMaxKicks, kMaxStoredMaxKicks + 1,
       absl::StrFormat("max_kicks=%u", kMaxStoredMaxKicks + 1)},
  };
  for (const Case& c : cases) {
    std::vector<uint8_t> newer = good_;
    Put32(newer, At(c.field), c.value);
    ResealSnapshot(newer, L());
    auto r = ParseSnapshot(newer, "snap.cuckoo", "c");
    EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition) << c.why << r.status();
    EXPECT_THAT(r.status().message(), HasSubstr(c.why));
    EXPECT_THAT(r.status().message(), HasSubstr(WrittenBy()));
    if (!V1()) {
      // A version-2 file names the build that wrote it.
      PutWriter(newer, "cuckood 0.9.3");
      ResealSnapshot(newer, L());
      r = ParseSnapshot(newer, "snap.cuckoo", "c");
      EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition) << c.why << r.status();
      EXPECT_THAT(r.status().message(), HasSubstr(c.why));
      EXPECT_THAT(r.status().message(), HasSubstr("; it was written by cuckood 0.9.3, and this"));
    }
  }
  std::vector<uint8_t> newer = good_;
  Put64(newer, At(testing::kSnapshotCapacity), 0);
  ResealSnapshot(newer, L());
  EXPECT_EQ(ParseSnapshot(newer, "snap.cuckoo", "c").status().code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST_P(SnapshotCorruptionTest, MaxKicksAboveTodaysCeilingLoadsAtTheCeiling) {
  if (V5() || V6()) GTEST_SKIP() << "no build that allowed 100000 kicks wrote version 5 or 6";
  // Files from builds that allowed up to 100000 kicks.
  std::vector<uint8_t> old = good_;
  Put32(old, At(testing::kSnapshotMaxKicks), kMaxStoredMaxKicks);
  ResealSnapshot(old, L());
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
  std::vector<Case> cases = {
      {12, 128, absl::StrFormat("header size 128 (expected %u", header_)},
      {12, V1() ? 320u : 256u, "header size"},
      {At(testing::kSnapshotNameLength), 0, "filter name length 0"},
      {At(testing::kSnapshotNameLength), static_cast<uint32_t>(L().name_bytes + 1),
       absl::StrFormat("filter name length %u (at most %u)", L().name_bytes + 1, L().name_bytes)},
      {At(testing::kSnapshotNameLength), 2, "has a NUL byte at offset 1"},
      {L().reserved, 1, absl::StrFormat("reserved header byte %u", L().reserved)},
      {header_ + 0, 1, "section is for shard 1"},
  };
  std::vector<Case> section_cases = {
      {header_ + 4, 1, "reserved field is not zero"},
      {header_ + 24, 5, "table of 5 bytes"},
  };
  if (V3()) {
    const size_t block = header_ + L().section_header;  // Generation 0's.
    section_cases = {
        {block + testing::kSnapshotGenTableBytes, 5, "generation 0: table of 5 bytes"},
        {block + testing::kSnapshotGenIndex, 1, "generation 0: block is for generation 1"},
        {header_ + testing::kSnapshotV3Items, 1, "1 items, but its generations hold"},
    };
  }
  cases.insert(cases.end(), section_cases.begin(), section_cases.end());
  for (const Case& c : cases) {
    std::vector<uint8_t> bad = good_;
    Put32(bad, c.at, c.value);
    // Version 3: the sections where they are, whatever a field says.
    if (V3() && c.at >= header_) {
      ResealLike(bad, Sections(good_));
    } else {
      ResealSnapshot(bad, L());
    }
    ExpectRejected(bad, c.why, absl::StrFormat("u32 %u at %u", c.value, c.at));
  }
  std::vector<uint8_t> bad = good_;
  // Buckets per shard, without the bytes.
  Put64(bad, At(testing::kSnapshotBucketsPerShard),
        Get64(good_, At(testing::kSnapshotBucketsPerShard)) + 1);
  ResealSnapshot(bad, L());
  ExpectRejected(bad, "table bytes per shard");
  bad = good_;
  // The shard's items (version 3: generation 0's).
  Put64(bad, V3() ? header_ + L().section_header + testing::kSnapshotGenItems : header_ + 8,
        uint64_t{1} << 40);
  ResealSnapshot(bad, L());
  ExpectRejected(bad, "items in a table of");
  bad = good_;
  bad[L().name] = '\xFF';  // Not UTF-8: not a valid filter name.
  ResealSnapshot(bad, L());
  ExpectRejected(bad, "is not valid UTF-8 (byte 0xff at offset 0)");
}

// Reserved bytes are for later versions to use; a version that does not
// know them reads non-zero ones as damage. The filter id (version 2) is not
// reserved: any value loads.
TEST_P(SnapshotCorruptionTest, NonZeroReservedHeaderBytesAreDataLoss) {
  // After the name "c": its padding, then (version 2) the filter id, then
  // the reserved bytes.
  for (size_t at = L().name + 1; at < L().header_checksum; ++at) {
    // Version 3's growth settings are not reserved (GrowingSnapshotTest).
    if (L().growth != 0 && at >= L().growth && at < L().reserved) continue;
    std::vector<uint8_t> bad = good_;
    bad[at] = 0x40;
    ResealSnapshot(bad, L());
    if (L().filter_id != 0 && at >= L().filter_id && at < L().filter_id + 8) {
      auto r = ParseSnapshot(bad, "snap.cuckoo", "c");
      ASSERT_TRUE(r.ok()) << at << r.status();
      EXPECT_EQ(r->filter_id, uint64_t{0x40} << (8 * (at - L().filter_id)));
      EXPECT_EQ(r->filter->id(), r->filter_id);
      continue;
    }
    if (L().expire_at != 0 && at >= L().expire_at && at < L().expire_at + 8) {
      // The filter's expiry (version 6's bytes 856..863).
      auto r = ParseSnapshot(bad, "snap.cuckoo", "c");
      ASSERT_TRUE(r.ok()) << at << r.status();
      EXPECT_EQ(r->expire_at, int64_t{0x40} << (8 * (at - L().expire_at)));
      EXPECT_EQ(r->filter->expire_at(), r->expire_at);
      continue;
    }
    ExpectRejected(bad, absl::StrFormat("reserved header byte %u is not zero", at),
                   absl::StrFormat("byte %u", at));
  }
}

// A negative expire_at (its top bit set) is no time cuckood writes.
TEST_P(SnapshotCorruptionTest, ANegativeExpireAtIsDataLoss) {
  if (L().expire_at == 0) GTEST_SKIP() << "no expiry in this version";
  std::vector<uint8_t> bad = good_;
  bad[L().expire_at + 7] = 0x80;
  ResealSnapshot(bad, L());
  ExpectRejected(bad, "expire_at -9223372036854775808 is negative");
}

// A version-2 writer must be printable ASCII, NUL-padded: a file that says
// otherwise was not written by any cuckood.
TEST_P(SnapshotCorruptionTest, AVersionTwoWriterThatIsNotPrintableAsciiIsDataLoss) {
  if (V1()) GTEST_SKIP() << "version 1 has no writer";
  const std::vector<std::string> writers = {
      std::string(),                       // Empty.
      std::string("cuckood\n0.1.0"),       // A control character.
      std::string("cuckood \xC3\xA9"),     // Not ASCII.
      std::string("cuckood\0 0.1.0", 14),  // Not padding: text after a NUL.
      std::string(32, 'x').replace(31, 1, "\x7F"),
  };
  for (const std::string& writer : writers) {
    std::vector<uint8_t> bad = good_;
    PutWriter(bad, writer);
    ResealSnapshot(bad, L());
    ExpectRejected(bad, "the writer (bytes 16..47) is not printable ASCII padded with zero bytes",
                   absl::CHexEscape(writer));
  }
  // A full 32 bytes of name, with no padding, is a writer.
  std::vector<uint8_t> ok = good_;
  PutWriter(ok, std::string(32, 'x'));
  ResealSnapshot(ok, L());
  EXPECT_TRUE(ParseSnapshot(ok, "snap.cuckoo", "c").ok());
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
  std::vector<uint8_t> other = InVersion(ReadBytes(w->path));
  std::vector<uint8_t> mixed = good_;
  std::copy(other.begin() + header_, other.begin() + header_ + section_, mixed.begin() + header_);
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
  std::vector<uint8_t> bad = InVersion(ReadBytes(w->path));
  const size_t table = f->shape().table_bytes_per_shard();
  bad[header_ + L().table() + table - 1] |= 0x80;
  ResealSnapshot(bad, L());
  ExpectRejected(bad, "bits set after the last slot");
}

TEST_P(SnapshotCorruptionTest, FileOfTheOtherTableKindIsRejected) {
  // Same f and b, but the other kind needs 4 bits per bucket more or less.
  std::vector<uint8_t> bad = good_;
  Put32(bad, At(testing::kSnapshotTableKind), Semi() ? 0 : 1);
  ResealSnapshot(bad, L());
  ExpectRejected(bad, "table bytes per shard");
}

INSTANTIATE_TEST_SUITE_P(
    KindsAndVersions, SnapshotCorruptionTest,
    ::testing::Values(
        CorruptionCase{TableKind::kPacked, 6}, CorruptionCase{TableKind::kSemiSorted, 6},
        CorruptionCase{TableKind::kPacked, 5}, CorruptionCase{TableKind::kSemiSorted, 5},
        CorruptionCase{TableKind::kPacked, 4}, CorruptionCase{TableKind::kSemiSorted, 4},
        CorruptionCase{TableKind::kPacked, 3}, CorruptionCase{TableKind::kSemiSorted, 3},
        CorruptionCase{TableKind::kPacked, 2}, CorruptionCase{TableKind::kSemiSorted, 2},
        CorruptionCase{TableKind::kPacked, 1}, CorruptionCase{TableKind::kSemiSorted, 1}),
    [](const auto& p) { return absl::StrCat(TableKindName(p.param.kind), "_v", p.param.version); });

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
  ASSERT_EQ(testing::SnapshotGet32(good_.data() + kSnapshotWritten.at(testing::kSnapshotTableKind)),
            1u);
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
    size_t field;
    uint32_t value;
    std::string why;
  };
  const std::vector<Case> cases = {
      {testing::kSnapshotBucketSize, 2, "bucket_size"},
      {testing::kSnapshotBucketSize, 8, "bucket_size"},
      {testing::kSnapshotFingerprintBits, 4, "fingerprint_bits"},
      {testing::kSnapshotTableKind, 2, "table kind 2 is unknown"},
  };
  for (const Case& c : cases) {
    std::vector<uint8_t> bad = good_;
    Put32(bad, kSnapshotWritten.at(c.field), c.value);
    ResealSnapshot(bad);
    const absl::Status st = Parse(bad);
    EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition) << c.why << st;
    EXPECT_THAT(st.message(), HasSubstr("it was written by " + ThisBuild())) << c.why;
    EXPECT_THAT(st.message(), HasSubstr(c.why));
  }
}

// --- Growing filters (format version 3): every generation of every shard.

// One shard's tables as ReadShardGenerations sees them.
struct GenerationCopy {
  uint32_t fingerprint_bits = 0;
  uint64_t buckets = 0;
  std::vector<uint8_t> bytes;
  uint64_t items = 0;
  uint64_t rng_state = 0;
  bool operator==(const GenerationCopy&) const = default;
};
std::vector<GenerationCopy> Generations(const CuckooFilter& f, uint32_t i) {
  std::vector<GenerationCopy> out;
  f.ReadShardGenerations(i, [&](absl::Span<const CuckooFilter::GenerationView> gens,
                                const CuckooFilter::ShardState&) {
    for (const CuckooFilter::GenerationView& g : gens) {
      out.push_back({g.fingerprint_bits, g.buckets,
                     std::vector<uint8_t>(g.bytes.begin(), g.bytes.end()), g.items, g.rng_state});
    }
  });
  return out;
}

class GrowingSnapshotTest : public ::testing::TestWithParam<TableKind> {
 protected:
  static bool Semi() { return GetParam() == TableKind::kSemiSorted; }
  static FilterOptions Options(uint64_t capacity, uint32_t shards) {
    return {.capacity = capacity,
            .false_positive_rate = 0.01,
            .shards = shards,
            .seed = 21,
            .semi_sort = Semi(),
            .growth_factor = 2};
  }
  // `n` keys of `stream` that fall in shard `shard` of `f`.
  static std::vector<std::string> KeysOfShard(const CuckooFilter& f, uint32_t shard,
                                              uint64_t stream, size_t n) {
    std::vector<std::string> keys;
    const uint32_t bits = f.shape().shard_bits;
    for (uint64_t i = 0; keys.size() < n; ++i) {
      std::string k = Key(stream, i);
      const uint64_t h = f.Hash(k);
      if ((bits == 0 ? 0 : h >> (64 - bits)) == shard) keys.push_back(std::move(k));
    }
    return keys;
  }

  // A 4-shard growing filter whose shards have grown unevenly: shard 0 the
  // most, shard 1 less, shards 2 and 3 not at all.
  void SetUp() override {
    auto made = CuckooFilter::Create(Options(2'000, 4));
    ASSERT_TRUE(made.ok()) << made.status();
    filter_ = *std::move(made);
    ASSERT_TRUE(filter_->shape().growing());
    ASSERT_EQ(filter_->shape().semi_sorted(), Semi());
    filter_->set_id(5);
    const size_t per_shard[4] = {12'000, 2'000, 300, 100};
    for (uint32_t i = 0; i < 4; ++i) {
      std::vector<std::string> keys = KeysOfShard(*filter_, i, 40 + i, per_shard[i]);
      InsertLogged(*filter_, keys, &position_);
      present_.insert(present_.end(), keys.begin(), keys.end());
    }
    ASSERT_GE(filter_->ShardGenerations(0), 4u);
    ASSERT_GT(filter_->ShardGenerations(0), filter_->ShardGenerations(1));
    ASSERT_GT(filter_->ShardGenerations(1), 1u);
    ASSERT_EQ(filter_->ShardGenerations(2), 1u);
    ASSERT_EQ(filter_->ShardGenerations(3), 1u);
    ASSERT_EQ(filter_->items(), present_.size());
    auto w = WriteSnapshotFile(*filter_, "g", dir_.path());
    ASSERT_TRUE(w.ok()) << w.status();
    written_ = *w;
    good_ = ReadBytes(w->path);
  }

  // Parses `bytes`; expects `code` and a message with the label and `why`.
  void ExpectRefused(const std::vector<uint8_t>& bytes, const std::string& why,
                     absl::StatusCode code = absl::StatusCode::kDataLoss,
                     const std::string& context = "") {
    auto r = ParseSnapshot(bytes, "g.cuckoo", "g");
    ASSERT_FALSE(r.ok()) << context;
    EXPECT_EQ(r.status().code(), code) << context << " " << r.status();
    EXPECT_THAT(r.status().message(), HasSubstr("g.cuckoo: ")) << context;
    EXPECT_THAT(r.status().message(), HasSubstr(why)) << context;
  }

  TempDir dir_;
  std::unique_ptr<CuckooFilter> filter_;
  std::vector<std::string> present_;
  uint64_t position_ = 100;
  SnapshotWriteResult written_;
  std::vector<uint8_t> good_;
};

TEST_P(GrowingSnapshotTest, EveryGenerationOfEveryShardRoundTripsBitForBit) {
  absl::StatusOr<LoadedSnapshot> r = ReadSnapshotFile(written_.path, "g");
  ASSERT_TRUE(r.ok()) << r.status();
  CuckooFilter& loaded = *r->filter;
  EXPECT_EQ(r->format_version, 5u);
  EXPECT_EQ(loaded.shape(), filter_->shape());
  EXPECT_EQ(loaded.id(), 5u);
  EXPECT_EQ(r->items, filter_->items());
  EXPECT_EQ(written_.items, filter_->items());
  EXPECT_EQ(loaded.items(), filter_->items());
  EXPECT_EQ(loaded.ShardPositions(), filter_->ShardPositions());
  EXPECT_EQ(r->max_position, position_);
  // The admit's budget is what the filter takes once loaded.
  EXPECT_EQ(r->header.memory_bytes, filter_->memory_bytes());
  EXPECT_EQ(loaded.memory_bytes(), filter_->memory_bytes());
  EXPECT_GT(r->header.memory_bytes, CuckooFilter::MemoryBytes(filter_->shape()));
  std::vector<uint32_t> with(filter_->ShardGenerations(0), 0);
  for (uint32_t i = 0; i < 4; ++i) {
    for (uint32_t g = 0; g < filter_->ShardGenerations(i); ++g) ++with[g];
  }
  EXPECT_EQ(r->header.shards_with_generation, with);
  for (uint32_t i = 0; i < 4; ++i) {
    EXPECT_EQ(loaded.ShardGenerations(i), filter_->ShardGenerations(i)) << "shard " << i;
    EXPECT_EQ(Generations(loaded, i), Generations(*filter_, i)) << "shard " << i;
  }
  for (const std::string& k : present_) ASSERT_TRUE(loaded.MayContain(k)) << k;
  for (const std::string& k : Keys(9, 5'000)) {
    ASSERT_EQ(loaded.MayContain(k), filter_->MayContain(k)) << k;
    ASSERT_EQ(loaded.ApproximateCount(k), filter_->ApproximateCount(k)) << k;
  }
  EXPECT_EQ(loaded.Stats().generations.size(), filter_->Stats().generations.size());
}

TEST_P(GrowingSnapshotTest, ALoadedFilterGoesOnGrowingExactlyAsTheOriginal) {
  absl::StatusOr<LoadedSnapshot> r = ParseSnapshot(good_, "g.cuckoo", "g");
  ASSERT_TRUE(r.ok()) << r.status();
  CuckooFilter& loaded = *r->filter;
  // Every shard grows further, shard 3 for the first time.
  std::vector<std::string> more;
  for (uint32_t i = 0; i < 4; ++i) {
    std::vector<std::string> k = KeysOfShard(*filter_, i, 60 + i, i == 0 ? 10'000 : 5'000);
    more.insert(more.end(), k.begin(), k.end());
  }
  uint64_t original_position = position_;
  uint64_t loaded_position = position_;
  InsertLogged(*filter_, more, &original_position);
  InsertLogged(loaded, more, &loaded_position);
  EXPECT_EQ(loaded_position, original_position);
  EXPECT_GT(loaded.ShardGenerations(3), 1u);
  for (uint32_t i = 0; i < 4; ++i) {
    EXPECT_EQ(loaded.ShardGenerations(i), filter_->ShardGenerations(i)) << "shard " << i;
    EXPECT_EQ(Generations(loaded, i), Generations(*filter_, i)) << "shard " << i;
  }
  EXPECT_EQ(loaded.memory_bytes(), filter_->memory_bytes());
  for (const auto* keys : {&present_, &more}) {
    for (const std::string& k : *keys) ASSERT_TRUE(loaded.MayContain(k)) << k;
  }
  // And a second round trip of the grown filter.
  auto w = WriteSnapshotFile(loaded, "g", dir_.path());
  ASSERT_TRUE(w.ok()) << w.status();
  absl::StatusOr<LoadedSnapshot> again = ReadSnapshotFile(w->path, "g");
  ASSERT_TRUE(again.ok()) << again.status();
  for (uint32_t i = 0; i < 4; ++i) {
    EXPECT_EQ(Generations(*again->filter, i), Generations(*filter_, i)) << "shard " << i;
  }
}

TEST_P(GrowingSnapshotTest, WrittenThroughASmallBufferTheSectionsAreTheSame) {
  for (size_t buffer : {size_t{64}, size_t{100}, size_t{4096}}) {
    auto w = WriteSnapshotFile(*filter_, "g", dir_.path(), {.buffer_bytes = buffer});
    ASSERT_TRUE(w.ok()) << w.status();
    const std::vector<uint8_t> pieces = ReadBytes(w->path);
    ASSERT_EQ(pieces.size(), good_.size()) << buffer;
    // Only the time taken (and so the checksums over the header) differ.
    EXPECT_TRUE(std::equal(good_.begin() + kHeader, good_.end() - 8, pieces.begin() + kHeader))
        << buffer;
    EXPECT_EQ(w->items, written_.items);
    EXPECT_EQ(w->changes, written_.changes);
    auto r = ParseSnapshot(pieces, "g.cuckoo", "g");
    ASSERT_TRUE(r.ok()) << r.status();
    for (uint32_t i = 0; i < 4; ++i) {
      EXPECT_EQ(Generations(*r->filter, i), Generations(*filter_, i)) << "shard " << i;
    }
  }
}

TEST_P(GrowingSnapshotTest, ALargeGrowingShardIsWrittenThroughTheBufferInPieces) {
  // One shard grown to MiBs of tables, through a 4 KiB buffer.
  auto made = CuckooFilter::Create(Options(50'000, 1));
  ASSERT_TRUE(made.ok()) << made.status();
  CuckooFilter& f = **made;
  std::vector<std::string> keys = Keys(70, 1'000'000);
  InsertAll(f, keys);
  ASSERT_GE(f.ShardGenerations(0), 4u);
  ASSERT_EQ(f.items(), keys.size());
  auto whole = WriteSnapshotFile(f, "big", dir_.path());
  ASSERT_TRUE(whole.ok()) << whole.status();
  const std::vector<uint8_t> copied = ReadBytes(whole->path);
  auto w = WriteSnapshotFile(f, "big", dir_.path(), {.buffer_bytes = 4096});
  ASSERT_TRUE(w.ok()) << w.status();
  const std::vector<uint8_t> pieces = ReadBytes(w->path);
  ASSERT_GT(pieces.size(), size_t{2} << 20);
  ASSERT_EQ(pieces.size(), copied.size());
  EXPECT_TRUE(std::equal(copied.begin() + kHeader, copied.end() - 8, pieces.begin() + kHeader));
  auto r = ReadSnapshotFile(w->path, "big");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(Generations(*r->filter, 0), Generations(f, 0));
  for (const std::string& k : keys) ASSERT_TRUE(r->filter->MayContain(k)) << k;
}

TEST_P(GrowingSnapshotTest, TheHeaderCarriesTheGrowthSettingsAndGenerationCounts) {
  const FilterShape& shape = filter_->shape();
  auto growth_at = [](size_t field) { return kSnapshotWritten.growth_at(field); };
  auto u32 = [&](size_t at) { return testing::SnapshotGet32(good_.data() + at); };
  auto u64 = [&](size_t at) { return testing::SnapshotGet64(good_.data() + at); };
  EXPECT_EQ(u32(growth_at(testing::kSnapshotGrowthFactor)), 2u);
  EXPECT_EQ(u32(growth_at(testing::kSnapshotScheduleGenerations)),
            GenerationSchedule(shape).size());
  EXPECT_EQ(u64(growth_at(testing::kSnapshotMaxCapacity)), shape.max_capacity);
  EXPECT_EQ(u64(growth_at(testing::kSnapshotFalsePositiveRate)),
            std::bit_cast<uint64_t>(shape.false_positive_rate));
  EXPECT_EQ(u32(growth_at(testing::kSnapshotShardsWithGeneration)), 4u);
  EXPECT_EQ(u32(growth_at(testing::kSnapshotShardsWithGeneration) + 4), 2u);
  const std::vector<GenerationShape> schedule = GenerationSchedule(shape);
  for (const SectionLayout& s : Sections(good_)) {
    for (size_t g = 0; g < s.block.size(); ++g) {
      EXPECT_EQ(u32(s.block[g] + testing::kSnapshotGenIndex), g);
      EXPECT_EQ(u32(s.block[g] + testing::kSnapshotGenFingerprintBits),
                schedule[g].fingerprint_bits);
      EXPECT_EQ(u64(s.block[g] + testing::kSnapshotGenBuckets), schedule[g].buckets_per_shard);
    }
  }
}

// --- Growing files that no writer produces.

TEST_P(GrowingSnapshotTest, AFlippedByteInAnyGenerationIsAChecksumMismatchOfItsShard) {
  const std::vector<SectionLayout> sections = Sections(good_);
  for (size_t i = 0; i < sections.size(); ++i) {
    for (size_t g = 0; g < sections[i].block.size(); ++g) {
      const size_t end =
          g + 1 < sections[i].block.size() ? sections[i].block[g + 1] : sections[i].trailer;
      for (size_t at : {sections[i].block[g], sections[i].block[g] + 41,
                        (sections[i].block[g] + end) / 2, end - 1}) {
        std::vector<uint8_t> bad = good_;
        bad[at] ^= 0x10;
        ExpectRefused(bad, absl::StrFormat("shard %u checksum mismatch", i),
                      absl::StatusCode::kDataLoss, absl::StrFormat("generation %u byte %u", g, at));
      }
    }
  }
}

TEST_P(GrowingSnapshotTest, ATruncatedGenerationIsDataLoss) {
  const std::vector<SectionLayout> sections = Sections(good_);
  for (size_t at : {sections[0].block[1], sections[0].block[2] + 100, sections[1].block[1] + 7,
                    sections[1].trailer}) {
    std::vector<uint8_t> bad(good_.begin(), good_.begin() + at);
    ExpectRefused(bad, "truncated", absl::StatusCode::kDataLoss, absl::StrCat("length ", at));
  }
}

TEST_P(GrowingSnapshotTest, AGenerationCountTheHeaderRulesOutIsDataLoss) {
  const std::vector<SectionLayout> sections = Sections(good_);
  const uint32_t schedule = static_cast<uint32_t>(GenerationSchedule(filter_->shape()).size());
  struct Case {
    size_t shard;
    uint32_t generations;
  };
  // 0; more than the schedule; one more than the shard has, which the
  // header's count of shards per generation rules out; one fewer.
  const uint32_t first = static_cast<uint32_t>(sections[0].block.size());
  for (const Case& c : {Case{0, 0}, Case{2, 0}, Case{0, schedule + 1}, Case{0, 0xFFFFFFFF},
                        Case{0, first + 1}, Case{2, 2}}) {
    std::vector<uint8_t> bad = good_;
    testing::SnapshotPut32(bad.data() + sections[c.shard].at + testing::kSnapshotV3Generations,
                           c.generations);
    ResealLike(bad, sections);
    ExpectRefused(bad,
                  absl::StrFormat("shard %u (section at byte %u) gives %u generations", c.shard,
                                  sections[c.shard].at, c.generations),
                  absl::StatusCode::kDataLoss, absl::StrCat("shard ", c.shard));
  }
  // One fewer: the header allows it (a later shard could have the rest),
  // but the section is then read short, and its checksum fails.
  std::vector<uint8_t> bad = good_;
  testing::SnapshotPut32(bad.data() + sections[0].at + testing::kSnapshotV3Generations, first - 1);
  ResealLike(bad, sections);
  ExpectRefused(bad, "shard 0 checksum mismatch");
}

TEST_P(GrowingSnapshotTest, GenerationBlocksThatDisagreeWithTheScheduleAreDataLoss) {
  const std::vector<SectionLayout> sections = Sections(good_);
  const size_t block = sections[0].block[2];
  struct Case {
    size_t at;
    uint64_t value;
    bool wide;
    std::string why;
  };
  const uint32_t f =
      testing::SnapshotGet32(good_.data() + block + testing::kSnapshotGenFingerprintBits);
  const uint64_t buckets =
      testing::SnapshotGet64(good_.data() + block + testing::kSnapshotGenBuckets);
  const std::vector<Case> cases = {
      {block + testing::kSnapshotGenIndex, 3, false, "generation 2: block is for generation 3"},
      {block + testing::kSnapshotGenFingerprintBits, f + 1, false,
       absl::StrFormat("generation 2: %u-bit fingerprints in %u buckets, but the schedule gives %u "
                       "bits in %u buckets",
                       f + 1, buckets, f, buckets)},
      {block + testing::kSnapshotGenBuckets, buckets * 2, true,
       "generation 2: " + std::to_string(f) + "-bit fingerprints in " +
           std::to_string(buckets * 2) + " buckets"},
      {block + testing::kSnapshotGenItems, buckets * 4 + 1, true,
       absl::StrFormat("generation 2: %u items in a table of %u slots", buckets * 4 + 1,
                       buckets * 4)},
      {sections[0].at + testing::kSnapshotV3Items, 7, true, "7 items, but its generations hold"},
      {block + testing::kSnapshotGenTableBytes, 5, true, "generation 2: table of 5 bytes"},
  };
  for (const Case& c : cases) {
    std::vector<uint8_t> bad = good_;
    if (c.wide) {
      testing::SnapshotPut64(bad.data() + c.at, c.value);
    } else {
      testing::SnapshotPut32(bad.data() + c.at, static_cast<uint32_t>(c.value));
    }
    ResealLike(bad, sections);
    ExpectRefused(bad, "impossible settings in shard 0 ", absl::StatusCode::kDataLoss, c.why);
    ExpectRefused(bad, c.why, absl::StatusCode::kDataLoss, c.why);
  }
}

TEST_P(GrowingSnapshotTest, AnInvalidSemiSortedBucketInAGrownGenerationIsDataLoss) {
  if (!Semi()) GTEST_SKIP() << "packed buckets have no invalid encodings";
  const std::vector<SectionLayout> sections = Sections(good_);
  for (uint32_t g : {1u, 3u}) {
    std::vector<uint8_t> bad = good_;
    const size_t table = sections[0].block[g] + kSnapshotV3.generation_header;
    const uint32_t f = testing::SnapshotGet32(good_.data() + sections[0].block[g] +
                                              testing::kSnapshotGenFingerprintBits);
    const uint64_t bucket = 5;
    testing::PutBits(absl::MakeSpan(bad).subspan(table), bucket * (4 * f - 4), 12, 3900);
    ResealLike(bad, sections);
    ExpectRefused(bad,
                  absl::StrFormat("impossible settings in shard 0 (byte %u): generation %u: bucket "
                                  "5 is not a valid semi_sorted bucket",
                                  sections[0].at, g));
  }
}

TEST_P(GrowingSnapshotTest, ImpossibleGenerationCountsInTheHeaderAreDataLoss) {
  const size_t with = kSnapshotWritten.growth_at(testing::kSnapshotShardsWithGeneration);
  const uint32_t schedule = static_cast<uint32_t>(GenerationSchedule(filter_->shape()).size());
  const uint32_t second = filter_->ShardGenerations(1);
  struct Case {
    size_t g;
    uint32_t value;
    std::string why;
  };
  const std::vector<Case> cases = {
      {0, 3, "3 shards with generation 0 (every shard has it: expected 4)"},
      {1, 5, "5 shards with generation 1 (at most 4"},
      {1, 3, "truncated"},  // Allowed by the header, but the file is then too short.
      // Only shard 0 has the generation after shard 1's last.
      {second + 1, 2, absl::StrFormat("2 shards with generation %u (at most 1", second + 1)},
      {schedule, 1, absl::StrFormat("1 shards with generation %u (at most 0", schedule)},
      {31, 1, "1 shards with generation 31 (at most 0"},
  };
  for (const Case& c : cases) {
    if (c.g >= 32) continue;
    std::vector<uint8_t> bad = good_;
    testing::SnapshotPut32(bad.data() + with + 4 * c.g, c.value);
    ResealSnapshot(bad);
    auto r = ParseSnapshot(bad, "g.cuckoo", "g");
    ASSERT_FALSE(r.ok()) << c.why;
    EXPECT_EQ(r.status().code(), absl::StatusCode::kDataLoss) << c.why << r.status();
    EXPECT_THAT(r.status().message(), HasSubstr(c.why)) << r.status();
  }
}

// A build whose growth rule differs grows shards into other tables: its
// file is intact, and refused as a newer build's (never quarantined).
TEST_P(GrowingSnapshotTest, AnotherGrowthScheduleOrGrowthSettingIsRefusedNotLost) {
  auto growth_at = [](size_t field) { return kSnapshotWritten.growth_at(field); };
  struct Case {
    size_t at;
    uint64_t value;
    bool wide;
    std::string why;
  };
  const std::vector<Case> cases = {
      {growth_at(testing::kSnapshotScheduleChecksum), 12345, true, "its growth schedule"},
      {growth_at(testing::kSnapshotScheduleGenerations), 3, false,
       "its growth schedule (3 generations"},
      {growth_at(testing::kSnapshotGrowthFactor), 9, false, "growth_factor=9"},
      {growth_at(testing::kSnapshotGrowthFactor), 1, false, "growth_factor=1"},
      {growth_at(testing::kSnapshotFalsePositiveRate), std::bit_cast<uint64_t>(1.5), true,
       "false_positive_rate=1.5"},
      {growth_at(testing::kSnapshotFalsePositiveRate), std::bit_cast<uint64_t>(std::nan("")), true,
       "false_positive_rate=nan"},
      {growth_at(testing::kSnapshotMaxCapacity), 1'000, true, "max_capacity=1000"},
  };
  for (const Case& c : cases) {
    std::vector<uint8_t> newer = good_;
    if (c.wide) {
      testing::SnapshotPut64(newer.data() + c.at, c.value);
    } else {
      testing::SnapshotPut32(newer.data() + c.at, static_cast<uint32_t>(c.value));
    }
    ResealSnapshot(newer);
    ExpectRefused(newer, c.why, absl::StatusCode::kFailedPrecondition, c.why);
    ExpectRefused(newer, "it was written by " + ThisBuild(), absl::StatusCode::kFailedPrecondition,
                  c.why);
  }
  // A fixed filter's file whose growth fields are set.
  std::vector<uint8_t> fixed;
  {
    auto f = MakeFilter({.capacity = 1'000, .shards = 1, .seed = 2});
    auto w = WriteSnapshotFile(*f, "g", dir_.path());
    ASSERT_TRUE(w.ok()) << w.status();
    fixed = ReadBytes(w->path);
  }
  // Version 5: a growth block without a factor is no shape any writer
  // encodes (core/shape_format.h).
  std::vector<uint8_t> v5 = fixed;
  testing::SnapshotPut64(v5.data() + growth_at(testing::kSnapshotMaxCapacity), 5'000);
  ResealSnapshot(v5);
  ExpectRefused(v5, "a growth block without a growth_factor");
  // Version 4: growth fields of a fixed filter are settings this build
  // cannot use.
  std::vector<uint8_t> v4 = SnapshotToVersion4(fixed);
  testing::SnapshotPut64(v4.data() + kSnapshotV4.growth_at(testing::kSnapshotMaxCapacity), 5'000);
  ResealSnapshot(v4);
  ExpectRefused(v4, "are for growing filters only", absl::StatusCode::kFailedPrecondition);
}

INSTANTIATE_TEST_SUITE_P(Kinds, GrowingSnapshotTest,
                         ::testing::Values(TableKind::kPacked, TableKind::kSemiSorted),
                         [](const auto& p) { return std::string(TableKindName(p.param)); });

}  // namespace
}  // namespace cuckoo
