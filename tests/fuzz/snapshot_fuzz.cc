// libFuzzer target for the snapshot reader (core/snapshot.h, ParseSnapshot).
//
// Each input is parsed twice:
//   1. as is, which exercises every check up to the first checksum (a random
//      mutation almost never keeps an XXH3 checksum valid);
//   2. with every checksum recomputed over the layout its header states
//      (ResealSnapshot, tests/core/snapshot_layout.h), which lets mutations reach the checks behind
//      the checksums: header fields, section headers, the tail bits of a table, the footer.
// When a parse succeeds the loaded filter must be usable and consistent: its
// item count is the snapshot's, its tables are the file's bytes bit for bit,
// its id and shard positions are the file's (0 in a version-1 file), and
// batch and single-key lookups agree. Any violation is __builtin_trap().
//
// Built with -fsanitize=fuzzer,address,undefined by clang (scripts/fuzz.sh),
// or with tests/fuzz/standalone_main.cc as a corpus replay under g++.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "core/cuckoo_filter.h"
#include "core/snapshot.h"
#include "tests/core/snapshot_layout.h"

namespace {

using cuckoo::testing::ResealSnapshot;
using cuckoo::testing::SnapshotGet32;
using cuckoo::testing::SnapshotGet64;
using cuckoo::testing::SnapshotLayout;
constexpr size_t kSectionTrailer = cuckoo::testing::kSnapshotSectionTrailer;
// The shortest header of any version: below it nothing is worth resealing.
constexpr size_t kMinHeader = cuckoo::testing::kSnapshotV1.header;

// Larger snapshots are refused before their tables are allocated.
constexpr uint64_t kMaxAdmittedFileBytes = uint64_t{64} << 20;

void Check(bool ok) {
  if (!ok) __builtin_trap();
}

// Uses a successfully loaded snapshot the way a server would.
void Exercise(const cuckoo::LoadedSnapshot& loaded, absl::Span<const uint8_t> data) {
  Check(loaded.filter != nullptr);
  cuckoo::CuckooFilter& filter = *loaded.filter;
  const cuckoo::FilterShape& shape = filter.shape();
  Check(shape == loaded.header.shape);
  Check(loaded.header.file_bytes == data.size());
  Check(filter.items() == loaded.items);
  Check(filter.Stats().items == loaded.items);
  Check(loaded.format_version >= 1 && loaded.format_version <= 6);
  const SnapshotLayout& layout = loaded.format_version == 1   ? cuckoo::testing::kSnapshotV1
                                 : loaded.format_version == 2 ? cuckoo::testing::kSnapshotV2
                                 : loaded.format_version == 3 ? cuckoo::testing::kSnapshotV3
                                 : loaded.format_version == 4 ? cuckoo::testing::kSnapshotV4
                                 : loaded.format_version == 5 ? cuckoo::testing::kSnapshotV5
                                                              : cuckoo::testing::kSnapshotV6;
  // The admit saw what the filter takes.
  Check(filter.memory_bytes() == loaded.header.memory_bytes);
  Check(SnapshotGet32(data.data() + 8) == layout.version);
  Check(filter.id() == loaded.filter_id);
  // Only version 6 has an expiry, never negative, and the filter has it.
  Check(loaded.expire_at ==
        (layout.expire_at != 0 ? static_cast<int64_t>(SnapshotGet64(data.data() + layout.expire_at))
                               : 0));
  Check(loaded.expire_at >= 0 && filter.expire_at() == loaded.expire_at);
  Check(loaded.filter_id ==
        (layout.filter_id != 0 ? SnapshotGet64(data.data() + layout.filter_id) : 0));

  // The tables (every generation's) are the file's bytes, the shard
  // counters sum to items, and the shard positions are the file's.
  const uint64_t table_bytes = shape.table_bytes_per_shard();
  std::vector<uint8_t> copy(table_bytes);
  const std::vector<uint64_t> positions = filter.ShardPositions();
  Check(positions.size() == shape.shards);
  uint64_t offset = layout.header;
  uint64_t items = 0;
  uint64_t min_position = positions[0];
  uint64_t max_position = positions[0];
  for (uint32_t i = 0; i < shape.shards; ++i) {
    if (layout.generation_header != 0) {
      const uint8_t* const section = data.data() + offset;
      const uint32_t generations = SnapshotGet32(section + cuckoo::testing::kSnapshotV3Generations);
      const uint64_t position = SnapshotGet64(section + layout.section_position);
      Check(filter.ShardGenerations(i) == generations);
      Check(generations <= loaded.header.shards_with_generation.size());
      uint64_t at = offset + layout.section_header;
      filter.ReadShardGenerations(
          i, [&](absl::Span<const cuckoo::CuckooFilter::GenerationView> gens,
                 const cuckoo::CuckooFilter::ShardState& st) {
            Check(gens.size() == generations);
            uint64_t sum = 0;
            for (const cuckoo::CuckooFilter::GenerationView& g : gens) {
              const uint8_t* const block = data.data() + at;
              Check(g.items == SnapshotGet64(block + cuckoo::testing::kSnapshotGenItems));
              Check(g.bytes.size() ==
                    SnapshotGet64(block + cuckoo::testing::kSnapshotGenTableBytes));
              Check(std::memcmp(g.bytes.data(), block + layout.generation_header, g.bytes.size()) ==
                    0);
              sum += g.items;
              at += layout.generation_header + g.bytes.size();
            }
            Check(st.items == sum);
            Check(st.position == position);
            items += st.items;
          });
      Check(positions[i] == position);
      min_position = std::min(min_position, position);
      max_position = std::max(max_position, position);
      offset = at + kSectionTrailer;
      continue;
    }
    cuckoo::CuckooFilter::ShardState st = filter.CopyShard(i, copy.data());
    Check(std::memcmp(copy.data(), data.data() + offset + layout.section_header, table_bytes) == 0);
    const uint64_t position = layout.section_position != 0
                                  ? SnapshotGet64(data.data() + offset + layout.section_position)
                                  : 0;
    Check(st.position == position);
    Check(positions[i] == position);
    min_position = std::min(min_position, position);
    max_position = std::max(max_position, position);
    items += st.items;
    offset += layout.section_header + table_bytes + kSectionTrailer;
  }
  Check(items == loaded.items);
  Check(loaded.min_position == min_position);
  Check(loaded.max_position == max_position);

  // Lookups: string keys and pre-hashed ones (hashes taken from the input so
  // that some land on whatever fingerprints the tables hold), single and batched.
  std::vector<std::string> keys = {"", "a", "user:42", loaded.header.name};
  std::vector<uint64_t> hashes;
  for (size_t i = 0; i + 8 <= data.size() && hashes.size() < 16; i += data.size() / 16 + 1) {
    hashes.push_back(SnapshotGet64(data.data() + i));
  }
  for (const std::string& k : keys) hashes.push_back(filter.Hash(k));
  std::vector<std::string_view> views(keys.begin(), keys.end());
  std::unique_ptr<bool[]> batch(new bool[std::max(keys.size(), hashes.size())]);
  std::vector<uint32_t> counts(std::max(keys.size(), hashes.size()));
  filter.LookupBatch(views, absl::MakeSpan(batch.get(), keys.size()));
  filter.CountBatch(views, absl::MakeSpan(counts.data(), keys.size()));
  for (size_t i = 0; i < keys.size(); ++i) {
    const bool may = filter.MayContain(keys[i]);
    const uint32_t count = filter.ApproximateCount(keys[i]);
    Check(batch[i] == may);
    Check(counts[i] == count);
    Check(count <= 2 * shape.bucket_size);
    Check((count > 0) == may);
  }
  filter.LookupHashed(hashes, absl::MakeSpan(batch.get(), hashes.size()));
  filter.CountHashed(hashes, absl::MakeSpan(counts.data(), hashes.size()));
  for (size_t i = 0; i < hashes.size(); ++i) {
    Check(counts[i] <= 2 * shape.bucket_size);
    Check((counts[i] > 0) == batch[i]);
  }

  // A write after the load, as a server would make: an inserted key is found
  // until it is deleted again. Bounded kick chains keep every run fast.
  if (shape.max_kicks <= 1000) {
    const std::string key = "fuzz:insert";
    if (filter.Insert(key) == cuckoo::InsertResult::kInserted) {
      Check(filter.MayContain(key));
      Check(filter.Delete(key) == cuckoo::DeleteResult::kDeleted);
    }
  }
}

void ParseOne(absl::Span<const uint8_t> data) {
  const cuckoo::SnapshotAdmit admit = [](const cuckoo::SnapshotHeader& h) -> absl::Status {
    if (h.file_bytes > kMaxAdmittedFileBytes || h.memory_bytes > 2 * kMaxAdmittedFileBytes) {
      return absl::ResourceExhaustedError("snapshot larger than the fuzzer's budget");
    }
    return absl::OkStatus();
  };
  absl::StatusOr<cuckoo::LoadedSnapshot> r = cuckoo::ParseSnapshot(data, "fuzz", {}, admit);
  if (r.ok()) {
    Exercise(*r, data);
  } else {
    // A bad file is DATA_LOSS, an intact one this build cannot read (a newer
    // version, kind or settings) FAILED_PRECONDITION; only the admit budget
    // or the allocator may say anything else (INTERNAL would mean a read
    // past the end of the input).
    const absl::StatusCode code = r.status().code();
    Check(code == absl::StatusCode::kDataLoss || code == absl::StatusCode::kFailedPrecondition ||
          code == absl::StatusCode::kResourceExhausted);
    Check(!r.status().message().empty());
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  ParseOne(absl::MakeConstSpan(data, size));
  if (size >= kMinHeader) {
    // Exactly `size` bytes on the heap, so ASan sees reads past the end.
    std::vector<uint8_t> fixed(data, data + size);
    ResealSnapshot(fixed);
    if (std::memcmp(fixed.data(), data, size) != 0) ParseOne(fixed);
  }
  return 0;
}
