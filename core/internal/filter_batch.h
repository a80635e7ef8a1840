// What the filter's read and write paths share (core/cuckoo_filter_read.cc,
// core/cuckoo_filter_write.cc), defined here so that each path's batch code
// inlines them as it did when both were one file: ForEachShard, which splits
// a batch into one run per shard; the sub-batches of a shard's run that go
// to one generation; the hashing of a batch of keys.
#ifndef CUCKOO_CORE_INTERNAL_FILTER_BATCH_H_
#define CUCKOO_CORE_INTERNAL_FILTER_BATCH_H_

#include <algorithm>
#include <cstdint>
#include <string_view>

#include "absl/types/span.h"
#include "base/scratch.h"
#include "core/cuckoo_filter.h"

namespace cuckoo {

// Calls fn(s, run_hashes, run_results, lookahead) once per shard s with
// keys in the batch, then scatters the results back to request order. The
// lookahead is the rest of the batch after the run, so each run's pipeline
// keeps prefetching across shard boundaries: with many shards a run is only a
// few keys long, too short to hide memory latency on its own.
template <typename Result, typename Fn>
void CuckooFilter::ForEachShard(absl::Span<const uint64_t> hashes, absl::Span<Result> out,
                                Fn fn) const {
  const size_t n = hashes.size();
  const size_t num_shards = shards_.size();
  if (num_shards == 1) {
    fn(0, hashes, out, Lookahead{});
    return;
  }
  if (n == 1) {
    fn(layout_.Shard(hashes[0]), hashes, out, Lookahead{});
    return;
  }
  // Counting sort of the batch by shard, keeping each key's position.
  ScratchArray<uint32_t> start(num_shards + 1);
  std::fill(start.data(), start.data() + num_shards + 1, 0);
  for (uint64_t h : hashes) ++start[layout_.Shard(h) + 1];
  for (size_t s = 0; s < num_shards; ++s) start[s + 1] += start[s];
  ScratchArray<uint64_t> sorted(n);
  ScratchArray<uint32_t> pos(n);
  ScratchArray<const uint8_t*> bytes(n);
  ScratchArray<Result> tmp(n);
  for (size_t i = 0; i < n; ++i) {
    uint32_t shard = layout_.Shard(hashes[i]);
    uint32_t k = start[shard]++;
    sorted[k] = hashes[i];
    pos[k] = static_cast<uint32_t>(i);
    bytes[k] = shards_[shard]->table_bytes;
  }
  // start[s] is now the end of shard s's run, i.e. the beginning of s + 1's.
  uint32_t begin = 0;
  for (size_t s = 0; s < num_shards; ++s) {
    uint32_t end = start[s];
    if (end > begin) {
      fn(s, absl::Span<const uint64_t>(sorted.data() + begin, end - begin),
         absl::Span<Result>(tmp.data() + begin, end - begin),
         Lookahead{sorted.data() + end, bytes.data() + end, n - end});
    }
    begin = end;
  }
  for (size_t k = 0; k < n; ++k) out[pos[k]] = tmp[k];
}

// A sub-batch of a shard's batch: the keys at `index`, gathered, run
// through one generation's batch call, and their results scattered back.
template <typename Result, typename Fn>
void OnSubset(absl::Span<const uint64_t> h, absl::Span<Result> r, absl::Span<const uint32_t> index,
              Fn fn) {
  const size_t m = index.size();
  ScratchArray<uint64_t> sub(m);
  ScratchArray<Result> sub_r(m);
  for (size_t k = 0; k < m; ++k) sub[k] = h[index[k]];
  fn(absl::Span<const uint64_t>(sub.data(), m), sub_r.span());
  for (size_t k = 0; k < m; ++k) r[index[k]] = sub_r[k];
}

// Positions of `r` equal to `value`, in order, into `index`; returns how many.
template <typename Result>
size_t Select(absl::Span<const Result> r, Result value, uint32_t* index) {
  size_t m = 0;
  for (size_t i = 0; i < r.size(); ++i) {
    if (r[i] == value) index[m++] = static_cast<uint32_t>(i);
  }
  return m;
}

// The keys' hashes, in scratch of the calling thread.
using Hashes = ScratchArray<uint64_t>;
inline void HashAll(const CuckooFilter& f, absl::Span<const std::string_view> keys, Hashes& out) {
  for (size_t i = 0; i < keys.size(); ++i) out[i] = f.Hash(keys[i]);
}

}  // namespace cuckoo

#endif  // CUCKOO_CORE_INTERNAL_FILTER_BATCH_H_
