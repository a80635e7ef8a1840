#include "core/shape_format.h"

#include <bit>
#include <cstring>

#include "absl/strings/str_format.h"
#include "base/little_endian.h"

namespace cuckoo {
namespace {

constexpr size_t kSeed = 32;
constexpr size_t kCapacity = 40;
constexpr size_t kBucketsPerShard = 48;
static_assert(kBucketsPerShard + 8 == kShapeBytes);
// In the growth block.
constexpr size_t kGrowthFactor = 0;
constexpr size_t kGrowthFlags = 4;
constexpr size_t kMaxCapacityField = 8;
constexpr size_t kFalsePositiveRate = 16;
static_assert(kFalsePositiveRate + 8 == kShapeGrowthBytes);

// FAILED_PRECONDITION for a table kind this build does not know.
absl::Status KnownTableKind(const FilterShape& s) {
  const auto kind = static_cast<uint32_t>(s.table_kind);
  if (kind == static_cast<uint32_t>(TableKind::kPacked) ||
      kind == static_cast<uint32_t>(TableKind::kSemiSorted)) {
    return absl::OkStatus();
  }
  return absl::FailedPreconditionError(absl::StrFormat(
      "table kind %u is unknown (this build knows 0 packed and 1 semi_sorted)", kind));
}

}  // namespace

uint32_t GrowthFlags(const FilterShape& s) {
  return s.grow_on_repeats ? kGrowthFlagGrowOnRepeats : 0;
}

FilterShape ReadShapeFields(const ShapeLayout& layout, const uint8_t* block,
                            const uint8_t* growth) {
  FilterShape s;
  s.hash_id = Get32(block + layout.hash_id);
  s.fingerprint_bits = Get32(block + layout.fingerprint_bits);
  s.bucket_size = Get32(block + layout.bucket_size);
  s.shards = Get32(block + layout.shards);
  s.shard_bits = Get32(block + layout.shard_bits);
  s.max_kicks = Get32(block + layout.max_kicks);
  s.table_kind = static_cast<TableKind>(Get32(block + layout.table_kind));
  s.seed = Get64(block + kSeed);
  s.capacity = Get64(block + kCapacity);
  s.buckets_per_shard = Get64(block + kBucketsPerShard);
  if (growth != nullptr) {
    s.growth_factor = Get32(growth + kGrowthFactor);
    s.max_capacity = Get64(growth + kMaxCapacityField);
    s.false_positive_rate = std::bit_cast<double>(Get64(growth + kFalsePositiveRate));
  }
  return s;
}

void WriteShapeFields(const ShapeLayout& layout, const FilterShape& s, uint8_t* block,
                      uint8_t* growth) {
  Put32(block + layout.hash_id, s.hash_id);
  Put32(block + layout.fingerprint_bits, s.fingerprint_bits);
  Put32(block + layout.bucket_size, s.bucket_size);
  Put32(block + layout.shards, s.shards);
  Put32(block + layout.shard_bits, s.shard_bits);
  Put32(block + layout.max_kicks, s.max_kicks);
  Put32(block + layout.table_kind, static_cast<uint32_t>(s.table_kind));
  Put64(block + kSeed, s.seed);
  Put64(block + kCapacity, s.capacity);
  Put64(block + kBucketsPerShard, s.buckets_per_shard);
  if (growth != nullptr) {
    Put32(growth + kGrowthFactor, s.growth_factor);
    Put64(growth + kMaxCapacityField, s.max_capacity);
    Put64(growth + kFalsePositiveRate, std::bit_cast<uint64_t>(s.false_positive_rate));
  }
}

void EncodeShape(const FilterShape& s, uint8_t* out) {
  std::memset(out, 0, EncodedShapeBytes(s));
  WriteShapeFields(kShapeLayout, s, out, s.growing() ? out + kShapeBytes : nullptr);
  if (s.growing()) Put32(out + kShapeBytes + kGrowthFlags, GrowthFlags(s));
}

absl::Status CheckShape(const FilterShape& s) {
  if (absl::Status st = KnownTableKind(s); !st.ok()) return st;
  return ValidateShape(s);
}

absl::StatusOr<FilterShape> DecodeShape(absl::Span<const uint8_t> bytes, bool growth) {
  const size_t want = kShapeBytes + (growth ? kShapeGrowthBytes : 0);
  if (bytes.size() != want) {
    return absl::DataLossError(absl::StrFormat("a shape of %u bytes (expected %u%s)", bytes.size(),
                                               want, growth ? " with its growth block" : ""));
  }
  const uint8_t* const block = bytes.data();
  const uint8_t* const g = growth ? block + kShapeBytes : nullptr;
  if (Get32(block + kShapeLayout.spare) != 0) {
    return absl::DataLossError(absl::StrFormat("reserved shape bytes %u..%u are not zero",
                                               kShapeLayout.spare, kShapeLayout.spare + 3));
  }
  FilterShape decoded = ReadShapeFields(kShapeLayout, block, g);
  if (absl::Status st = KnownTableKind(decoded); !st.ok()) return st;
  if (g != nullptr) {
    if (decoded.growth_factor == 0)
      return absl::DataLossError("a growth block without a growth_factor");
    const uint32_t flags = Get32(g + kGrowthFlags);
    if (const uint32_t unknown = flags & ~kKnownGrowthFlags; unknown != 0) {
      return absl::FailedPreconditionError(absl::StrFormat(
          "growth flags %#x (shape bytes %u..%u) have bits this build does not know (%#x; it "
          "knows %#x grow_on_repeats): a newer build wrote them; read it with that build",
          flags, kShapeBytes + kGrowthFlags, kShapeBytes + kGrowthFlags + 3, unknown,
          kGrowthFlagGrowOnRepeats));
    }
    decoded.grow_on_repeats = (flags & kGrowthFlagGrowOnRepeats) != 0;
  }
  if (absl::Status st = ValidateShape(decoded); !st.ok()) return st;
  return decoded;
}

}  // namespace cuckoo
