#include "core/filter_options.h"

#include <algorithm>
#include <bit>
#include <cmath>

#include "absl/random/random.h"
#include "absl/status/status.h"
#include "absl/strings/str_format.h"
#include "core/hash.h"

namespace cuckoo {
namespace {

// Default shard count: one shard per 64 Mi items (a table of ~100 MiB at
// f=12), but, up to 16 shards so that writers to a large filter spread over
// several locks, one per 1 Mi items (kItemsPerWriterShard). Fewer, larger
// shards make batches cheaper (a 1024-key batch on a 1 GiB filter: 128
// shards 33 M keys/s, 16 shards 40 M, 1 shard 47 M), since each shard in a
// batch costs a lock round trip and a pipeline restart. They are also
// smaller: keys spread over S shards binomially, and the sizing plans for
// the fullest shard (ComputeShape), so splitting n keys costs a margin of
// 3 * sqrt((S - 1) / n) of the table. 1 Mi keys per shard keep it at most
// 3 / 1024 = 0.3% (16 shards from 16 Mi keys on; 16 shards at 10^6 keys
// cost 1.2% and broke the f / 0.95 bits-per-key bound; with 256 Ki keys per
// shard, 0.6% still did for f = 9 to 10^6 keys: docs/CORE_DESIGN.md).
constexpr uint64_t kItemsPerWriterShard = uint64_t{1} << 20;

uint32_t DefaultShards(uint64_t capacity) {
  uint64_t by_size = std::bit_ceil(std::max<uint64_t>(1, (capacity + (1 << 26) - 1) >> 26));
  uint64_t by_writers = std::min<uint64_t>(
      16, std::bit_floor(std::max<uint64_t>(1, capacity / kItemsPerWriterShard)));
  return static_cast<uint32_t>(std::min<uint64_t>(kMaxShards, std::max(by_size, by_writers)));
}

// The load one (2,b) table is planned to, a little under the load at which a
// large one starts failing inserts, by fingerprint size: with few
// fingerprint bits a bucket's entries have few distinct alternate buckets
// and the table fills earlier (;login: 2013, Table 2).
double BaseLoad(uint32_t b, uint32_t f) {
  // Measured load at first failure with 2^22 buckets, 500 kicks (f=4..20):
  //   b=2: f=4 28%, 5 42%, 6 80%, 7 84%, 8 86%, 12 87%
  //   b=4: f=4 79%, 5 91%, 6 93%, 7 95%, 8 95.2%, 12 95.8%
  //   b=8: f=4 93%, 5 96%, 6 97%, 7 98%, 8 98.4%, 12 98.5%
  // b=4 with kDefaultMaxKicks = 2000, lowest first-failure load of one table
  // over 20 to 1000 seeds, 10^3 to 10^6 keys (docs/CORE_DESIGN.md, Sizing):
  //   f=7 95.5%, f=8 96.6%, f=9 to 13 96.7-97.1% from 10^4 keys on (96.0%
  //   at 10^3 and 3*10^3 keys, where PlannedLoadFactor's margin takes over);
  //   42 M keys: 97.1-97.2%.
  switch (b) {
    case 2:
      return f >= 8 ? 0.84 : f == 7 ? 0.83 : f == 6 ? 0.78 : f == 5 ? 0.40 : 0.26;
    case 8:
      return f >= 7 ? 0.97 : f == 6 ? 0.96 : f == 5 ? 0.94 : 0.90;
    default:
      return f >= 9 ? 0.96 : f == 8 ? 0.955 : f == 7 ? 0.935 : f == 6 ? 0.92 : f == 5 ? 0.88 : 0.76;
  }
}

}  // namespace

double PlannedLoadFactor(uint32_t bucket_size, uint32_t fingerprint_bits, double items_per_shard) {
  double base = BaseLoad(bucket_size, fingerprint_bits);
  // One table's first-failure load spreads more when the table is small
  // (lowest of 1000 seeds at b=4, f=12: 96.0% at 10^3 keys, 96.9% at 10^4,
  // 97.1% at 3*10^4); 1/sqrt(items) covers that with room: 96.9% of base at
  // 10^3 keys, 99.7% at 10^5. The spread of keys over shards is
  // ComputeShape's.
  double margin = 1.0 / std::sqrt(std::max(1.0, items_per_shard));
  return std::max(base * 0.5, base * (1.0 - margin));
}

double ExpectedFalsePositiveRate(uint32_t f, uint32_t b, double load) {
  const double p_match = 1.0 / (std::ldexp(1.0, f) - 1);
  return -std::expm1(2.0 * b * load * std::log1p(-p_match));
}

uint32_t FingerprintBitsForRate(double eps, uint32_t b) {
  double f = std::ceil(std::log2(2.0 * b / eps) - 1e-9);
  return static_cast<uint32_t>(
      std::clamp(f, double{kMinFingerprintBits}, double{kMaxFingerprintBits}));
}

const char* TableKindName(TableKind kind) {
  switch (kind) {
    case TableKind::kPacked:
      return "packed";
    case TableKind::kSemiSorted:
      return "semi_sorted";
  }
  return "unknown";
}

std::string FilterShape::DebugString() const {
  return absl::StrFormat(
      "hash_id=%u seed=%#x capacity=%u fingerprint_bits=%u bucket_size=%u shards=%u "
      "buckets_per_shard=%u max_kicks=%u table_kind=%s growth_factor=%u max_capacity=%u "
      "false_positive_rate=%g grow_on_repeats=%d",
      hash_id, seed, capacity, fingerprint_bits, bucket_size, shards, buckets_per_shard, max_kicks,
      TableKindName(table_kind), growth_factor, max_capacity, false_positive_rate,
      grow_on_repeats ? 1 : 0);
}

namespace {
absl::Status CheckSemiSort(uint32_t bucket_size, uint32_t fingerprint_bits) {
  if (bucket_size != 4) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "semi_sort needs bucket_size=4 (4 fingerprints share one 12-bit code); got %u",
        bucket_size));
  }
  if (fingerprint_bits < 5) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "semi_sort needs fingerprint_bits >= 5 (4 bits go into the shared code); got %u",
        fingerprint_bits));
  }
  return absl::OkStatus();
}
}  // namespace

namespace {

// Whether f-bit fingerprints, `shard_bits` shard bits and the bucket index of
// `buckets` buckets fit in a 64-bit hash without sharing bits (hash.h).
bool HashBitsFit(uint32_t f, uint32_t shard_bits, uint64_t buckets) {
  return f + shard_bits <= 64 &&
         64 - f - shard_bits >=
             static_cast<uint32_t>(std::bit_width(buckets)) + kMinSpareBucketHashBits;
}

// The smallest fingerprint size from `at_least` up whose bound at full load
// is at most `rate`; 0 when none up to kMaxFingerprintBits is.
uint32_t FingerprintBitsForBound(double rate, uint32_t b, uint32_t at_least) {
  for (uint32_t f = at_least; f <= kMaxFingerprintBits; ++f) {
    if (ExpectedFalsePositiveRate(f, b, 1.0) <= rate) return f;
  }
  return 0;
}

absl::Status ValidateGrowth(const FilterShape& s) {
  if (!s.growing()) {
    if (s.max_capacity != 0 || s.false_positive_rate != 0 || s.grow_on_repeats) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "max_capacity=%u, false_positive_rate=%g and grow_on_repeats=%s are for growing filters "
          "only (growth_factor=0)",
          s.max_capacity, s.false_positive_rate, s.grow_on_repeats ? "true" : "false"));
    }
    return absl::OkStatus();
  }
  if (s.growth_factor < 2 || s.growth_factor > kMaxGrowthFactor) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "growth_factor=%u must be 0 (fixed size) or 2 to %u", s.growth_factor, kMaxGrowthFactor));
  }
  if (!(s.false_positive_rate > 0 && s.false_positive_rate < 1)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "a growing filter's false_positive_rate=%g must be in (0, 1)", s.false_positive_rate));
  }
  if (s.max_capacity != 0 && (s.max_capacity <= s.capacity || s.max_capacity > kMaxCapacity)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("max_capacity=%u must be more than capacity=%u and at most %u",
                        s.max_capacity, s.capacity, kMaxCapacity));
  }
  if (ExpectedFalsePositiveRate(s.fingerprint_bits, s.bucket_size, 1.0) >= s.false_positive_rate) {
    return absl::InvalidArgumentError(
        absl::StrFormat("a growing filter's first fingerprints (%u bits) leave nothing of "
                        "false_positive_rate=%g for its later generations",
                        s.fingerprint_bits, s.false_positive_rate));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ValidateShape(const FilterShape& s) {
  if (s.hash_id != kHashIdXxh3V1) {
    return absl::InvalidArgumentError(absl::StrFormat("unknown hash_id %u", s.hash_id));
  }
  if (s.fingerprint_bits < kMinFingerprintBits || s.fingerprint_bits > kMaxFingerprintBits) {
    return absl::InvalidArgumentError(absl::StrFormat("fingerprint_bits=%u is outside [%u, %u]",
                                                      s.fingerprint_bits, kMinFingerprintBits,
                                                      kMaxFingerprintBits));
  }
  if (s.bucket_size != 2 && s.bucket_size != 4 && s.bucket_size != 8) {
    return absl::InvalidArgumentError(
        absl::StrFormat("bucket_size=%u must be 2, 4 or 8", s.bucket_size));
  }
  if (s.table_kind != TableKind::kPacked && s.table_kind != TableKind::kSemiSorted) {
    return absl::InvalidArgumentError(
        absl::StrFormat("unknown table kind %u", static_cast<uint32_t>(s.table_kind)));
  }
  if (s.semi_sorted()) {
    if (absl::Status st = CheckSemiSort(s.bucket_size, s.fingerprint_bits); !st.ok()) return st;
  }
  if (s.shards == 0 || s.shards > kMaxShards || !std::has_single_bit(s.shards) ||
      s.shard_bits != static_cast<uint32_t>(std::countr_zero(s.shards))) {
    return absl::InvalidArgumentError(
        absl::StrFormat("shards=%u must be a power of two in [1, %u] (shard_bits=%u)", s.shards,
                        kMaxShards, s.shard_bits));
  }
  if (s.max_kicks == 0 || s.max_kicks > kMaxMaxKicks) {
    return absl::InvalidArgumentError(
        absl::StrFormat("max_kicks=%u is outside [1, %u]", s.max_kicks, kMaxMaxKicks));
  }
  if (s.capacity == 0 || s.capacity > kMaxCapacity) {
    return absl::InvalidArgumentError(
        absl::StrFormat("capacity=%u is outside [1, %u]", s.capacity, kMaxCapacity));
  }
  if (s.buckets_per_shard == 0 || s.buckets_per_shard > kMaxCapacity) {
    return absl::InvalidArgumentError(absl::StrFormat("buckets_per_shard=%u is outside [1, %u]",
                                                      s.buckets_per_shard, kMaxCapacity));
  }
  uint32_t bucket_hash_bits = 64 - s.fingerprint_bits - s.shard_bits;
  uint32_t needed = std::bit_width(s.buckets_per_shard) + kMinSpareBucketHashBits;
  if (!HashBitsFit(s.fingerprint_bits, s.shard_bits, s.buckets_per_shard)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "fingerprint_bits=%u with %u shards leaves %u hash bits to pick one of %u buckets per "
        "shard; %u are needed for an even spread: use fewer fingerprint bits or a smaller capacity",
        s.fingerprint_bits, s.shards, bucket_hash_bits, s.buckets_per_shard, needed));
  }
  return ValidateGrowth(s);
}

std::vector<GenerationShape> GenerationSchedule(const FilterShape& s) {
  std::vector<GenerationShape> out;
  const uint32_t b = s.bucket_size;
  out.push_back({.fingerprint_bits = s.fingerprint_bits,
                 .buckets_per_shard = s.buckets_per_shard,
                 .planned_items = s.capacity,
                 .false_positive_bound = ExpectedFalsePositiveRate(s.fingerprint_bits, b, 1.0)});
  if (!s.growing()) return out;
  const uint64_t ceiling = s.max_capacity != 0 ? s.max_capacity : kMaxCapacity;
  const uint32_t min_f = s.semi_sorted() ? 5 : kMinFingerprintBits;
  double left = s.false_positive_rate - out[0].false_positive_bound;
  uint64_t planned = s.capacity;
  while (out.size() < kMaxGenerations && planned < ceiling) {
    const GenerationShape& prev = out.back();
    const uint32_t f = FingerprintBitsForBound(kGenerationRateShare * left, b,
                                               std::max(prev.fingerprint_bits, min_f));
    if (f == 0) break;
    if (prev.buckets_per_shard > kMaxCapacity / s.growth_factor) break;
    uint64_t buckets = prev.buckets_per_shard * s.growth_factor;
    const double slots = static_cast<double>(buckets) * b;
    uint64_t items =
        static_cast<uint64_t>(std::floor(slots * PlannedLoadFactor(b, f, slots * BaseLoad(b, f)))) *
        s.shards;
    if (items >= ceiling - planned) {
      // The last generation: cut to what reaches the ceiling.
      items = ceiling - planned;
      const double per_shard = static_cast<double>(items) / s.shards;
      const double load = PlannedLoadFactor(b, f, per_shard);
      buckets = std::min(
          buckets, std::max<uint64_t>(1, static_cast<uint64_t>(std::ceil(per_shard / (b * load)))));
    }
    if (!HashBitsFit(f, s.shard_bits, buckets)) break;
    GenerationShape g{.fingerprint_bits = f,
                      .buckets_per_shard = buckets,
                      .planned_items = items,
                      .false_positive_bound = ExpectedFalsePositiveRate(f, b, 1.0)};
    left -= g.false_positive_bound;
    planned += items;
    out.push_back(g);
  }
  return out;
}

FilterShape GenerationTableShape(const FilterShape& shape, const GenerationShape& generation) {
  FilterShape t = shape;
  t.fingerprint_bits = generation.fingerprint_bits;
  t.buckets_per_shard = generation.buckets_per_shard;
  t.growth_factor = 0;
  t.max_capacity = 0;
  t.false_positive_rate = 0;
  t.grow_on_repeats = false;
  return t;
}

absl::StatusOr<FilterShape> ComputeShape(const FilterOptions& o) {
  if (o.capacity == 0 || o.capacity > kMaxCapacity) {
    return absl::InvalidArgumentError(
        absl::StrFormat("capacity=%u is outside [1, %u]", o.capacity, kMaxCapacity));
  }
  if (o.false_positive_rate != 0 &&
      !(o.false_positive_rate > 0 && o.false_positive_rate < 1)) {  // Also rejects NaN.
    return absl::InvalidArgumentError(
        absl::StrFormat("false_positive_rate=%g must be in (0, 1)", o.false_positive_rate));
  }
  FilterShape s;
  s.hash_id = kHashIdXxh3V1;
  s.capacity = o.capacity;
  s.bucket_size = o.bucket_size == 0 ? kDefaultBucketSize : o.bucket_size;
  if (s.bucket_size != 2 && s.bucket_size != 4 && s.bucket_size != 8) {
    return absl::InvalidArgumentError(
        absl::StrFormat("bucket_size=%u must be 2, 4 or 8", s.bucket_size));
  }
  if (o.growth_factor != 0) {
    if (o.fingerprint_bits != 0) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "fingerprint_bits=%u cannot be given with growth_factor=%u: a growing filter's "
          "fingerprint sizes come from its false_positive_rate",
          o.fingerprint_bits, o.growth_factor));
    }
    s.growth_factor = o.growth_factor;
    s.max_capacity = o.max_capacity;
    s.grow_on_repeats = o.grow_on_repeats;
    s.false_positive_rate =
        o.false_positive_rate != 0 ? o.false_positive_rate : kDefaultFalsePositiveRate;
    s.fingerprint_bits = FingerprintBitsForBound(kGenerationRateShare * s.false_positive_rate,
                                                 s.bucket_size, kMinFingerprintBits);
    if (s.fingerprint_bits == 0) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "false_positive_rate=%g is too low for a growing filter: its first generation would "
          "need more than %u fingerprint bits",
          s.false_positive_rate, kMaxFingerprintBits));
    }
  } else if (o.max_capacity != 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "max_capacity=%u needs growth_factor (2 to %u): a fixed filter's capacity is its maximum",
        o.max_capacity, kMaxGrowthFactor));
  } else if (o.grow_on_repeats) {
    return absl::InvalidArgumentError(
        absl::StrFormat("grow_on_repeats needs growth_factor (2 to %u): a fixed filter never grows",
                        kMaxGrowthFactor));
  } else if (o.fingerprint_bits != 0) {
    s.fingerprint_bits = o.fingerprint_bits;
  } else {
    double eps = o.false_positive_rate != 0 ? o.false_positive_rate : kDefaultFalsePositiveRate;
    double needed = std::log2(2.0 * s.bucket_size / eps);
    if (needed > kMaxFingerprintBits + 1e-9) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "false_positive_rate=%g needs %.1f fingerprint bits with bucket_size=%u; at most %u "
          "are supported",
          eps, needed, s.bucket_size, kMaxFingerprintBits));
    }
    s.fingerprint_bits = FingerprintBitsForRate(eps, s.bucket_size);
  }
  // An explicit semi_sort that cannot be encoded fails in ValidateShape below.
  if (s.growing() && s.bucket_size == 4 && s.fingerprint_bits < 5 && o.semi_sort.value_or(false)) {
    s.fingerprint_bits = 5;  // Semi-sorting needs 5; a longer one only lowers the rate.
  }
  const bool automatic = o.fingerprint_bits == 0 && s.bucket_size == 4 && s.fingerprint_bits >= 5 &&
                         s.fingerprint_bits <= kMaxAutoSemiSortFingerprintBits;
  if (o.semi_sort.value_or(automatic)) s.table_kind = TableKind::kSemiSorted;
  // A growing filter's shards are chosen for the size it may reach: its
  // max_capacity, else 1024 times its capacity (its shard count is fixed,
  // and shards are what lets writers run in parallel).
  const uint64_t sized_for = !s.growing() ? o.capacity
                             : o.max_capacity != 0
                                 ? o.max_capacity
                                 : std::min(kMaxCapacity, std::max(o.capacity, o.capacity << 10));
  s.shards = o.shards == 0 ? DefaultShards(sized_for) : o.shards;
  s.shard_bits = std::has_single_bit(s.shards) ? std::countr_zero(s.shards) : 0;
  s.max_kicks = o.max_kicks == 0 ? kDefaultMaxKicks : o.max_kicks;
  s.seed = o.seed.has_value() ? *o.seed : absl::Uniform<uint64_t>(absl::BitGen());
  if (s.fingerprint_bits >= kMinFingerprintBits && s.fingerprint_bits <= kMaxFingerprintBits &&
      s.shards > 0) {
    double per_shard = static_cast<double>(o.capacity) / s.shards;
    // A growing filter needs no margin for the spread of keys over shards
    // and buckets: a shard that fills early grows.
    double load;
    if (s.growing()) {
      load = BaseLoad(s.bucket_size, s.fingerprint_bits);
    } else {
      // A shard's keys are Binomial(capacity, 1/S): relative to the mean
      // capacity / S, their standard deviation is sqrt((S - 1) / capacity).
      // Size every shard for three of them above the mean, so that the fullest
      // shard, not the average one, stays under the table's planned load.
      // (Not below half the base load: a few keys per shard, e.g. 4096
      // shards asked for 10^4 keys, would otherwise get tables several times
      // their size.)
      const double spread = 3.0 * std::sqrt((s.shards - 1.0) / static_cast<double>(o.capacity));
      load = std::max(
          0.5 * BaseLoad(s.bucket_size, s.fingerprint_bits),
          PlannedLoadFactor(s.bucket_size, s.fingerprint_bits, per_shard) / (1.0 + spread));
    }
    s.buckets_per_shard =
        std::max<uint64_t>(1, static_cast<uint64_t>(std::ceil(per_shard / (s.bucket_size * load))));
  }
  if (absl::Status st = ValidateShape(s); !st.ok()) return st;
  if (s.growing()) {
    const std::vector<GenerationShape> generations = GenerationSchedule(s);
    if (generations.size() < 2) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "a filter of capacity=%u with false_positive_rate=%g and %u shards cannot grow: a "
          "second generation's longer fingerprints and larger table would not fit the 64-bit "
          "hash; raise the rate, or ask for fewer shards",
          s.capacity, s.false_positive_rate, s.shards));
    }
    uint64_t reach = 0;
    for (const GenerationShape& g : generations) reach += g.planned_items;
    if (s.max_capacity != 0 && reach < s.max_capacity) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "max_capacity=%u is out of reach: with growth_factor=%u, false_positive_rate=%g and "
          "%u shards the filter can grow to %u keys in %u generations (fingerprint sizes, hash "
          "bits); raise the rate, the capacity or the growth factor, or lower max_capacity",
          s.max_capacity, s.growth_factor, s.false_positive_rate, s.shards, reach,
          generations.size()));
    }
  }
  return s;
}

}  // namespace cuckoo
