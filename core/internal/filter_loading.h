// FilterLoading: the calls that fill in a filter no other thread can see
// yet, from a snapshot's bytes (core/snapshot_read.cc) or, in tests and
// benchmarks, from another filter's. They write tables and counters without
// checks a live filter relies on, so CuckooFilter keeps them private and
// this one accessor, in core/internal/, is the only way to them.
//
//   auto filter = CuckooFilter::FromShape(shape);
//   absl::Span<uint8_t> bytes = FilterLoading::MutableShardBytes(**filter, i);
//   ... fill bytes, check FirstInvalidBucket ...
//   FilterLoading::RestoreShard(**filter, i, items, rng_state, position);
#ifndef CUCKOO_CORE_INTERNAL_FILTER_LOADING_H_
#define CUCKOO_CORE_INTERNAL_FILTER_LOADING_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "core/cuckoo_filter.h"

namespace cuckoo::internal {

class FilterLoading {
 public:
  // Shard `i`'s generation-0 table bytes to fill in.
  static absl::Span<uint8_t> MutableShardBytes(CuckooFilter& f, uint32_t i) {
    return f.MutableShardBytesForLoad(i);
  }
  // Shard `i`'s generation-0 counters and the shard's position.
  static void RestoreShard(CuckooFilter& f, uint32_t i, uint64_t items, uint64_t rng_state,
                           uint64_t position = 0) {
    f.RestoreShardForLoad(i, items, rng_state, position);
  }
  // The first bucket of shard `i`'s generation-0 table that its table kind
  // can never hold, or -1 (see CuckooTable::FirstInvalidBucket).
  static int64_t FirstInvalidBucket(CuckooFilter& f, uint32_t i) {
    return f.FirstInvalidBucketForLoad(i);
  }
  // Gives shard `i` generations 1 .. count - 1 of the schedule (empty).
  // INVALID_ARGUMENT when count is 0 or more than the schedule has, or the
  // shard has more already; RESOURCE_EXHAUSTED when the memory cannot be
  // had. Calls the growth listener.
  static absl::Status GrowShard(CuckooFilter& f, uint32_t i, uint32_t count) {
    return f.GrowShardForLoad(i, count);
  }
  // Generation `g` of shard `i` (g < ShardGenerations(i)): its bytes to fill
  // in, its counters, and the first bucket its table kind can never hold,
  // or -1. RestoreShard sets generation 0's counters.
  static absl::Span<uint8_t> MutableGenerationBytes(CuckooFilter& f, uint32_t i, uint32_t g) {
    return f.MutableGenerationBytesForLoad(i, g);
  }
  static void RestoreGeneration(CuckooFilter& f, uint32_t i, uint32_t g, uint64_t items,
                                uint64_t rng_state) {
    f.RestoreGenerationForLoad(i, g, items, rng_state);
  }
  static int64_t FirstInvalidGenerationBucket(CuckooFilter& f, uint32_t i, uint32_t g) {
    return f.FirstInvalidGenerationBucketForLoad(i, g);
  }
};

}  // namespace cuckoo::internal

#endif  // CUCKOO_CORE_INTERNAL_FILTER_LOADING_H_
