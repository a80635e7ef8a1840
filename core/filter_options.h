// What a caller asks for (FilterOptions) and the exact table shape the engine
// builds from it (FilterShape).
//
// Sizing follows the paper (Fan et al., CoNEXT 2014):
//   - fingerprint bits f = ceil(log2(2b / epsilon))                  (Eq. 6)
//   - buckets per shard  = ceil(capacity / (S * b * target_load))    (Eq. 4)
// The bucket count is *not* rounded to a power of two (see hash.h), so memory
// is f * b * buckets bits for any capacity: about f / target_load bits per
// item, e.g. 12.63 bits/item at f=12, b=4.
#ifndef CUCKOO_CORE_FILTER_OPTIONS_H_
#define CUCKOO_CORE_FILTER_OPTIONS_H_

#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/statusor.h"

namespace cuckoo {

inline constexpr uint32_t kMinFingerprintBits = 4;
inline constexpr uint32_t kMaxFingerprintBits = 32;
inline constexpr uint32_t kDefaultBucketSize = 4;
// Kick-chain limit. With 500, a 16-shard filter of 42 M items per shard
// failed its first insert at 94.9-95.5% load, at or below the planned 95%;
// one table of that size failed at 95.5-95.9% with 500 kicks and 97.1-97.2%
// with 2000. Only inserts that need long chains pay for the longer limit.
inline constexpr uint32_t kDefaultMaxKicks = 2000;
// The longest kick chain a filter may ask for. A failing insert walks the
// whole chain (and undoes it) holding its shard's lock: ~1-2 ms at this
// length on a large table. Snapshots written when the ceiling was 100000
// load with their max_kicks lowered to it.
inline constexpr uint32_t kMaxMaxKicks = 10000;
// The ceiling of earlier builds, which their snapshots may hold.
inline constexpr uint32_t kMaxStoredMaxKicks = 100000;
inline constexpr uint32_t kMaxShards = 4096;
// Used when neither a false-positive rate nor fingerprint bits are given:
// f = 12 at b = 4, the paper's (2,4) filter with 12.6 bits per item.
inline constexpr double kDefaultFalsePositiveRate = 0.002;
// Largest capacity accepted (2^40 items: ~1.6 TiB at 12 bits per item).
inline constexpr uint64_t kMaxCapacity = uint64_t{1} << 40;
// The bucket index needs this many more hash bits than log2(buckets per shard)
// so that fastrange maps hashes onto buckets uniformly to within 2^-8.
inline constexpr uint32_t kMinSpareBucketHashBits = 8;

// How a table stores its buckets. The value is stored in snapshots (header
// field table_kind), so existing values never change meaning.
enum class TableKind : uint32_t {
  // b slots of f bits each, packed (core/cuckoo_table.h).
  kPacked = 0,
  // The paper's semi-sorted buckets (Section 5.2, core/semi_sort.h): b = 4
  // fingerprints sorted, their high 4 bits encoded jointly in 12 bits, the
  // other f - 4 bits stored plainly. f - 1 bits per slot for the
  // false-positive rate of f-bit fingerprints. Needs b = 4 and f >= 5.
  kSemiSorted = 1,
};
// "packed" or "semi_sorted", for messages.
const char* TableKindName(TableKind kind);

// Semi-sorting is chosen automatically (see FilterOptions::semi_sort) only up
// to this fingerprint size: up to 16 bits, a semi-sorted bucket is matched
// with one SWAR compare like a plain one; above, bucket by bucket.
inline constexpr uint32_t kMaxAutoSemiSortFingerprintBits = 16;

// A request for a filter. Zero / unset fields mean "choose for me".
struct FilterOptions {
  uint64_t capacity = 0;           // Items the filter must hold. Required.
  double false_positive_rate = 0;  // Target epsilon in (0, 1); picks f.
  uint32_t fingerprint_bits = 0;   // Explicit f in [4, 32]; overrides the rate.
  uint32_t bucket_size = 0;        // b in {2, 4, 8}; default 4.
  uint32_t shards = 0;             // Power of two in [1, 4096]; default from capacity.
  uint32_t max_kicks = 0;          // Kick-chain limit per insert; default 2000.
  std::optional<uint64_t> seed;    // Hash seed; random when unset.
  // Semi-sorted buckets (TableKind::kSemiSorted): true needs b = 4, f >= 5.
  // Unset: chosen when the fingerprint size comes from a false-positive rate
  // (given or default), b = 4 and 5 <= f <= kMaxAutoSemiSortFingerprintBits;
  // the filter then has the rate's f at one bit less per slot. An explicit
  // fingerprint_bits keeps the packed table unless semi_sort is true.
  std::optional<bool> semi_sort;
};

// Everything needed to rebuild a filter's tables bit for bit (with the items).
struct FilterShape {
  uint32_t hash_id = 0;
  uint64_t seed = 0;
  uint64_t capacity = 0;  // As requested; the tables hold a little more.
  uint32_t fingerprint_bits = 0;
  uint32_t bucket_size = 0;
  uint32_t shards = 0;
  uint32_t shard_bits = 0;
  uint64_t buckets_per_shard = 0;
  uint32_t max_kicks = 0;
  TableKind table_kind = TableKind::kPacked;

  bool semi_sorted() const { return table_kind == TableKind::kSemiSorted; }
  uint64_t total_slots() const { return buckets_per_shard * bucket_size * shards; }
  // Bits one bucket takes: b * f packed, 4 * f - 4 semi-sorted.
  uint32_t bucket_bits() const {
    return semi_sorted() ? 4 * fingerprint_bits - 4 : bucket_size * fingerprint_bits;
  }
  // Bytes of fingerprint storage per shard table (excluding padding/rounding).
  uint64_t table_bytes_per_shard() const { return (buckets_per_shard * bucket_bits() + 7) / 8; }
  bool operator==(const FilterShape&) const = default;
  std::string DebugString() const;
};

// The load factor the sizing plans for with b slots per bucket and f-bit
// fingerprints, for a shard expecting `items_per_shard` items. Just under the
// load the paper measures at first failure (b=4: 95%), minus a margin for the
// binomial spread of items over shards.
double PlannedLoadFactor(uint32_t bucket_size, uint32_t fingerprint_bits, double items_per_shard);

// Probability that a lookup of an absent key matches, with f-bit
// fingerprints, b-slot buckets and a fraction `load` of slots in use:
// 1 - (1 - 1/(2^f - 1))^(2b * load), about 2b * load / 2^f.
double ExpectedFalsePositiveRate(uint32_t fingerprint_bits, uint32_t bucket_size, double load);

// Smallest f with 2b / 2^f <= epsilon (paper Eq. 6), clamped to [4, 32].
uint32_t FingerprintBitsForRate(double false_positive_rate, uint32_t bucket_size);

// Validates `options` and computes the shape. INVALID_ARGUMENT names the field
// and the bad value.
absl::StatusOr<FilterShape> ComputeShape(const FilterOptions& options);

// Checks a shape read from elsewhere (e.g. a snapshot) for impossible values.
absl::Status ValidateShape(const FilterShape& shape);

}  // namespace cuckoo

#endif  // CUCKOO_CORE_FILTER_OPTIONS_H_
