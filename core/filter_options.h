// What a caller asks for (FilterOptions) and the exact table shape the engine
// builds from it (FilterShape).
//
// Sizing follows the paper (Fan et al., CoNEXT 2014):
//   - fingerprint bits f = ceil(log2(2b / epsilon))                  (Eq. 6)
//   - buckets per shard  = ceil(capacity / (S * b * target_load))    (Eq. 4)
// The bucket count is *not* rounded to a power of two (see hash.h), so memory
// is f * b * buckets bits for any capacity: about f / target_load bits per
// item, e.g. 12.5 bits/item at f=12, b=4 (target_load ~0.96).
#ifndef CUCKOO_CORE_FILTER_OPTIONS_H_
#define CUCKOO_CORE_FILTER_OPTIONS_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

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
  // b slots of f bits each, packed (core/internal/cuckoo_table.h).
  kPacked = 0,
  // The paper's semi-sorted buckets (Section 5.2, core/internal/semi_sort.h): b = 4
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
  // Growth (docs/GROWTH.md). 0: a fixed-size filter (inserts past its
  // capacity end in kFull). 2 to kMaxGrowthFactor: when a shard's newest
  // table cannot take a key (its kick chain fails), the shard adds a table
  // growth_factor times larger, with fingerprints long enough that the sum
  // of all tables' false-positive bounds stays <= false_positive_rate at
  // any size. A growing filter's fingerprint sizes come from the rate, so
  // fingerprint_bits must be 0.
  uint32_t growth_factor = 0;
  // Growing filters only: keys the filter may grow to hold; 0: as many as
  // the hash layout and kMaxCapacity allow. The last table is cut to size so
  // that the filter reaches this and not much more. Must exceed capacity.
  uint64_t max_capacity = 0;
  // Growing filters only: a key whose own copies fill its 2b slots in the
  // newest generation grows the shard too, as RedisBloom's filters do (one
  // key added many times keeps being counted), within the same schedule,
  // max_capacity and memory budget. false: such an insert is kFull without
  // growing (docs/GROWTH.md, "Repeated keys").
  bool grow_on_repeats = false;
};

inline constexpr uint32_t kMaxGrowthFactor = 8;
// A shard has at most this many tables (generations).
inline constexpr uint32_t kMaxGenerations = 32;
// A new generation's fingerprints are the shortest whose false-positive bound
// is at most this share of the rate budget the earlier generations left:
// generation 0 gets a fifth of the rate, generation 1 a fifth of the rest,
// and so on, so the sum never reaches the rate, while rounding leftovers go
// to later generations (docs/GROWTH.md explains the choice).
inline constexpr double kGenerationRateShare = 0.2;

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
  // Growth (FilterOptions): 0 for a fixed filter, else the factor.
  uint32_t growth_factor = 0;
  // Growing filters: FilterOptions::max_capacity (0: no limit of its own).
  uint64_t max_capacity = 0;
  // Growing filters: the rate all generations share (given or the default);
  // 0 for a fixed filter.
  double false_positive_rate = 0;
  // Growing filters: FilterOptions::grow_on_repeats.
  bool grow_on_repeats = false;

  bool growing() const { return growth_factor != 0; }
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

// One table (generation) of a growing filter's shard. Generation 0 is the
// shape's own (fingerprint_bits, buckets_per_shard).
struct GenerationShape {
  uint32_t fingerprint_bits = 0;
  uint64_t buckets_per_shard = 0;
  // Keys the generation is planned to hold, in all shards together.
  uint64_t planned_items = 0;
  // Its share of the false-positive rate: the rate of a lookup that checks
  // it when it is full (ExpectedFalsePositiveRate at load 1).
  double false_positive_bound = 0;
  bool operator==(const GenerationShape&) const = default;
};

// Every generation a shard of `shape` may come to have, in order; the
// generations' false_positive_bound sum to <= shape.false_positive_rate. One
// (the shape's table) for a fixed filter. Deterministic in the shape: every
// replica and every replay grows the same way. The schedule ends at the
// first generation that would pass max_capacity (that one is cut to size),
// kMaxCapacity, kMaxGenerations, 32-bit fingerprints, or the hash bits
// (ValidateShape's rule for each generation).
std::vector<GenerationShape> GenerationSchedule(const FilterShape& shape);

// The shape of one generation of `shape` as a fixed filter's shape (for
// building its table).
FilterShape GenerationTableShape(const FilterShape& shape, const GenerationShape& generation);

// The load factor one table with b slots per bucket and f-bit fingerprints
// is planned to for `items_per_shard` items: just under the load at which
// such a table first fails an insert with the default kicks (b=4, f >= 9:
// 96%), less a margin for small tables. ComputeShape divides it further by
// the spread of a fixed filter's keys over its shards (docs/CORE_DESIGN.md,
// Sizing).
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
