// Writes the seed corpus of the snapshot fuzzer (tests/fuzz/snapshot_fuzz.cc)
// into a directory: small valid snapshots of assorted shapes (fingerprint
// bits, bucket sizes, shard counts, packed and semi-sorted tables; empty,
// partly and nearly full; with filter ids and shard log positions; growing
// filters whose shards have grown), a few of them also as the version-1 and
// version-2 files older builds wrote, and a few invalid files derived from
// them. About 100 KB in all; generated at build or test
// time, never committed.
//
//   make_snapshot_corpus <dir>
//
// Every valid file is read back and every invalid one must be refused, so a
// change in the format that breaks the corpus fails here, not silently in
// the fuzzer. Exits non-zero on any failure.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/types/span.h"
#include "core/cuckoo_filter.h"
#include "core/snapshot.h"
#include "tests/core/snapshot_layout.h"
#include "tests/util/keys.h"

namespace {

using cuckoo::CuckooFilter;
using cuckoo::FilterOptions;
using cuckoo::testing::kSnapshotV3;
using cuckoo::testing::kSnapshotV5;

struct Seed {
  const char* name;
  FilterOptions options;
  double fill;  // Fraction of the capacity inserted.
};

std::vector<uint8_t> ReadBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

bool WriteBytes(const std::string& path, absl::Span<const uint8_t> b) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
  return static_cast<bool>(out);
}

bool Fail(const std::string& what) {
  std::fprintf(stderr, "make_snapshot_corpus: %s\n", what.c_str());
  return false;
}

// Writes one valid snapshot; returns its bytes (empty on failure).
std::vector<uint8_t> WriteSeed(const Seed& s, const std::string& dir) {
  absl::StatusOr<std::unique_ptr<CuckooFilter>> f = CuckooFilter::Create(s.options);
  if (!f.ok()) {
    Fail(absl::StrCat(s.name, ": ", f.status().ToString()));
    return {};
  }
  const uint64_t n = static_cast<uint64_t>(static_cast<double>(s.options.capacity) * s.fill);
  // Through the logged write path, so that the shards have distinct log
  // positions and the file has a filter id, as cuckood's do.
  std::vector<std::string> keys;
  for (uint64_t i = 0; i < n; ++i) keys.push_back(cuckoo::testing::Key(0, i));
  std::vector<std::string_view> views(keys.begin(), keys.end());
  std::vector<cuckoo::InsertResult> results(views.size());
  uint64_t position = s.options.seed.value_or(0) * 1000;
  (*f)->set_id(position);
  for (size_t at = 0; at < views.size(); at += 7) {  // Small batches: many positions.
    const size_t len = std::min<size_t>(7, views.size() - at);
    (*f)->InsertBatch(
        absl::MakeConstSpan(views).subspan(at, len), false,
        absl::MakeSpan(results).subspan(at, len), [] { return false; },
        [&](const cuckoo::ShardWrite&) { return ++position; });
  }
  absl::StatusOr<cuckoo::SnapshotWriteResult> w = cuckoo::WriteSnapshotFile(**f, s.name, dir);
  if (!w.ok()) {
    Fail(absl::StrCat(s.name, ": ", w.status().ToString()));
    return {};
  }
  absl::StatusOr<cuckoo::LoadedSnapshot> r = cuckoo::ReadSnapshotFile(w->path, s.name);
  if (!r.ok() || r->items != (*f)->items() || r->filter_id != (*f)->id() ||
      r->filter->ShardPositions() != (*f)->ShardPositions()) {
    Fail(absl::StrCat(w->path, " does not read back: ", r.status().ToString()));
    return {};
  }
  return ReadBytes(w->path);
}

// Writes `v3` (a fixed filter's, in the version this build writes) as the
// version-1, -2 or -4 file an older build would have written.
bool WriteOldVersion(const std::string& dir, const std::string& name,
                     const std::vector<uint8_t>& v3, uint32_t version) {
  const std::vector<uint8_t> old = version == 1   ? cuckoo::testing::SnapshotToVersion1(v3)
                                   : version == 2 ? cuckoo::testing::SnapshotToVersion2(v3)
                                                  : cuckoo::testing::SnapshotToVersion4(v3);
  const std::string path = absl::StrCat(dir, "/v", version, "-", name, ".bin");
  absl::StatusOr<cuckoo::LoadedSnapshot> r = cuckoo::ParseSnapshot(old, path, name);
  absl::StatusOr<cuckoo::LoadedSnapshot> r3 = cuckoo::ParseSnapshot(v3, path, name);
  if (!r.ok() || !r3.ok() || r->format_version != version || r->items != r3->items) {
    return Fail(absl::StrCat(path, " does not read back: ", r.status().ToString()));
  }
  if (!WriteBytes(path, old)) return Fail(absl::StrCat("cannot write ", path));
  return true;
}

// Writes an invalid variant, which ParseSnapshot must refuse (with a message
// containing `why`, if given).
bool WriteInvalid(const std::string& dir, const std::string& name, std::vector<uint8_t> b,
                  absl::string_view why = {}) {
  const std::string path = absl::StrCat(dir, "/invalid-", name, ".bin");
  if (!WriteBytes(path, b)) return Fail(absl::StrCat("cannot write ", path));
  absl::StatusOr<cuckoo::LoadedSnapshot> r = cuckoo::ParseSnapshot(b, path);
  if (r.ok()) return Fail(absl::StrCat(path, " was accepted"));
  if (!absl::StrContains(r.status().message(), why)) {
    return Fail(absl::StrCat(path, " was refused for another reason: ", r.status().ToString()));
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s <corpus dir>\n", argv[0]);
    return 2;
  }
  const std::string dir = argv[1];
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) {
    Fail(absl::StrCat("cannot create ", dir, ": ", ec.message()));
    return 1;
  }

  // Small capacities keep every file a few KB: libFuzzer mutates small
  // inputs much faster, and -max_len in scripts/fuzz.sh covers the largest.
  const Seed seeds[] = {
      {"empty-f12-b4-s1", {.capacity = 100, .seed = 1, .semi_sort = false}, 0.0},
      {"half-f8-b2-s1", {.capacity = 600, .fingerprint_bits = 8, .bucket_size = 2, .seed = 2}, 0.5},
      {"full-f16-b8-s4",
       {.capacity = 1500, .fingerprint_bits = 16, .bucket_size = 8, .shards = 4, .seed = 3},
       0.9},
      {"part-f7-b4-s8",
       {.capacity = 500, .fingerprint_bits = 7, .bucket_size = 4, .shards = 8, .seed = 4},
       0.3},
      {"tiny-f5-b2-s16",
       {.capacity = 64, .fingerprint_bits = 5, .bucket_size = 2, .shards = 16, .seed = 5},
       0.6},
      {"wide-f32-b4-s2",
       {.capacity = 300, .fingerprint_bits = 32, .bucket_size = 4, .shards = 2, .seed = 6},
       0.7},
      {"odd-f13-b8-s1",
       {.capacity = 400, .fingerprint_bits = 13, .bucket_size = 8, .max_kicks = 20, .seed = 7},
       0.8},
      {"empty-f4-b2-s1", {.capacity = 1, .fingerprint_bits = 4, .bucket_size = 2, .seed = 8}, 0.0},
      // Semi-sorted tables (table_kind 1): the default filter (f=12, 44-bit
      // buckets), the smallest f, and buckets wider than 64 bits.
      {"semi-f12-b4-s2", {.capacity = 400, .shards = 2, .seed = 9}, 0.9},
      {"semi-f5-b4-s1",
       {.capacity = 200, .fingerprint_bits = 5, .seed = 10, .semi_sort = true},
       0.8},
      {"semi-f20-b4-s1",
       {.capacity = 150, .fingerprint_bits = 20, .seed = 11, .semi_sort = true},
       0.5},
      // Growing filters filled past their capacity: shards with several
      // generations (version 3's blocks), packed and semi-sorted.
      {"grow-packed-s2",
       {.capacity = 60,
        .false_positive_rate = 0.02,
        .shards = 2,
        .seed = 12,
        .semi_sort = false,
        .growth_factor = 2},
       12.0},
      {"grow-semi-s1",
       {.capacity = 50,
        .false_positive_rate = 0.01,
        .shards = 1,
        .seed = 13,
        .growth_factor = 4,
        .max_capacity = 2'000},
       25.0},
  };
  std::vector<std::vector<uint8_t>> valid;
  for (const Seed& s : seeds) {
    valid.push_back(WriteSeed(s, dir));
    if (valid.back().empty()) return 1;
    // The header's table_kind is the one asked for.
    const uint32_t kind = cuckoo::testing::SnapshotGet32(
        valid.back().data() + kSnapshotV5.at(cuckoo::testing::kSnapshotTableKind));
    const bool semi = std::string_view(s.name).starts_with("semi-") ||
                      std::string_view(s.name).starts_with("grow-semi-");
    if (kind != (semi ? 1u : 0u)) {
      Fail(absl::StrCat(s.name, ": table_kind ", kind));
      return 1;
    }
  }

  // Version-1 and version-2 files, as builds before versions 2 and 3
  // wrote them.
  bool ok = true;
  for (const size_t i : {size_t{1}, size_t{2}, size_t{6}, size_t{8}}) {
    ok = WriteOldVersion(dir, seeds[i].name, valid[i], 1) && ok;
    ok = WriteOldVersion(dir, seeds[i].name, valid[i], 2) && ok;
    ok = WriteOldVersion(dir, seeds[i].name, valid[i], 4) && ok;
  }

  // Invalid files, each failing a different check.
  const std::vector<uint8_t>& base = valid[2];  // Four shards, mostly full.
  std::vector<uint8_t> b;
  ok = WriteInvalid(dir, "empty", {}) && ok;
  ok = WriteInvalid(dir, "magic-only", std::vector<uint8_t>(base.begin(), base.begin() + 8)) && ok;
  ok = WriteInvalid(dir, "truncated",
                    std::vector<uint8_t>(base.begin(), base.begin() + base.size() / 2)) &&
       ok;
  b = base;
  b[base.size() / 2] ^= 0x10;  // Inside a table: that shard's checksum.
  ok = WriteInvalid(dir, "table-bit-flip", b) && ok;
  b = base;
  b[kSnapshotV5.name + 1] ^= 0x01;  // Inside the name: the header checksum.
  ok = WriteInvalid(dir, "header-bit-flip", b, "header checksum mismatch") && ok;
  b = base;
  b.insert(b.end(), {0, 1, 2, 3});
  ok = WriteInvalid(dir, "trailing-bytes", b) && ok;
  b = base;
  b[b.size() - 32] ^= 0xff;  // Footer magic.
  ok = WriteInvalid(dir, "footer-magic", b) && ok;
  b = base;
  b[8] = 3;  // Format version, the checksum still version 5's.
  ok = WriteInvalid(dir, "version-field-3", b,
                    "format version field is corrupt (3; the rest is a valid version-5 header)") &&
       ok;
  b = cuckoo::testing::SnapshotToVersion2(base);
  b[8] = 3;
  ok = WriteInvalid(dir, "v2-version-field-3", b,
                    "format version field is corrupt (3; the rest is a valid version-2 header)") &&
       ok;
  b = cuckoo::testing::SnapshotToVersion1(base);
  b[8] = 2;
  ok = WriteInvalid(dir, "v1-version-field-2", b,
                    "format version field is corrupt (2; the rest is a valid version-1 header)") &&
       ok;
  b = base;
  b[8] = 7;  // A newer version, naming the build that wrote it.
  cuckoo::testing::ResealSnapshot(b, kSnapshotV5);
  ok = WriteInvalid(dir, "version-7", b, "format version 7 (this build reads versions 1 to 6)") &&
       ok;
  b = base;
  b[kSnapshotV5.reserved + 10] = 1;
  cuckoo::testing::ResealSnapshot(b);
  ok = WriteInvalid(dir, "reserved-byte", b, "reserved header byte 866 is not zero") && ok;
  b = base;
  b = cuckoo::testing::SnapshotToVersion6(base);
  b[cuckoo::testing::kSnapshotV6.expire_at + 7] = 0x80;  // A negative expire_at.
  cuckoo::testing::ResealSnapshot(b);
  ok = WriteInvalid(dir, "negative-expire-at", b, "is negative") && ok;
  b = base;
  b[kSnapshotV5.reserved + 1] = 1;  // Version 5 has no expiry: reserved.
  cuckoo::testing::ResealSnapshot(b);
  ok = WriteInvalid(dir, "v5-expire-byte", b, "reserved header byte 857 is not zero") && ok;
  b = base;
  b[kSnapshotV5.log] = '\n';
  cuckoo::testing::ResealSnapshot(b);
  ok = WriteInvalid(dir, "log-identity", b, "the log identity (bytes 296..343) is not printable") &&
       ok;
  b = base;
  b[cuckoo::kSnapshotWriterOffset + 3] = '\t';
  cuckoo::testing::ResealSnapshot(b);
  ok = WriteInvalid(dir, "writer-control-character", b, "the writer (bytes 16..47)") && ok;
  // Semi-sorted: bucket 0 of shard 0 with code 4095 (>= 3876), checksums
  // recomputed so the reader gets as far as the bucket check.
  const std::vector<uint8_t>& semi = valid[8];  // semi-f12-b4-s2
  b = semi;
  b[kSnapshotV5.header + kSnapshotV5.table()] = 0xFF;
  b[kSnapshotV5.header + kSnapshotV5.table() + 1] |= 0x0F;
  cuckoo::testing::ResealSnapshot(b);
  ok = WriteInvalid(dir, "semi-bad-code", b, "bucket 0 is not a valid semi_sorted") && ok;
  b = semi;
  b[kSnapshotV5.at(cuckoo::testing::kSnapshotTableKind)] = 2;  // Unknown table kind.
  cuckoo::testing::ResealSnapshot(b);
  ok = WriteInvalid(dir, "table-kind-2", b, "table kind 2 is unknown") && ok;
  // Growing: a section with 0 generations; generation 1 with a code of
  // 4095; another build's growth schedule.
  const std::vector<uint8_t>& grown = valid[std::size(seeds) - 1];  // grow-semi-s1
  b = grown;
  b[kSnapshotV5.header + cuckoo::testing::kSnapshotV3Generations] = 0;
  cuckoo::testing::ResealSnapshot(b);
  ok = WriteInvalid(dir, "grow-0-generations", b, "gives 0 generations") && ok;
  b = grown;
  {
    const size_t block1 =
        kSnapshotV5.table() + kSnapshotV5.header +
        cuckoo::testing::SnapshotGet64(b.data() + kSnapshotV5.header + kSnapshotV5.section_header +
                                       cuckoo::testing::kSnapshotGenTableBytes);
    b[block1 + kSnapshotV3.generation_header] = 0xFF;
    b[block1 + kSnapshotV3.generation_header + 1] |= 0x0F;
  }
  cuckoo::testing::ResealSnapshot(b);
  ok = WriteInvalid(dir, "grow-semi-bad-code", b, "generation 1: bucket 0 is not a valid") && ok;
  b = grown;
  b[kSnapshotV5.growth_at(cuckoo::testing::kSnapshotScheduleChecksum)] ^= 1;
  cuckoo::testing::ResealSnapshot(b);
  ok = WriteInvalid(dir, "grow-other-schedule", b, "its growth schedule") && ok;
  if (!ok) return 1;

  uint64_t bytes = 0;
  size_t files = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    if (e.is_regular_file()) {
      bytes += e.file_size();
      ++files;
    }
  }
  std::printf("make_snapshot_corpus: %zu files, %llu bytes in %s\n", files,
              static_cast<unsigned long long>(bytes), dir.c_str());
  return 0;
}
