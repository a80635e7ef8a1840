// CuckooFilter's read paths: lookups and counts, single keys and batches,
// and the lock-free batch lookup across shards.
#include <algorithm>
#include <atomic>

#include "absl/base/optimization.h"
#include "base/scratch.h"
#include "core/cuckoo_filter.h"
#include "core/internal/filter_batch.h"

namespace cuckoo {

void CuckooFilter::LookupInShard(const Shard& shard, const CuckooTable& t,
                                 absl::Span<const uint64_t> h, absl::Span<bool> r,
                                 const Lookahead& next) const {
  const uint32_t gens = shard.generations.load(std::memory_order_acquire);
  if (gens == 1) {
    // One table, as in a fixed filter: the lookahead (the batch's next keys,
    // in their shards' first tables, which all have this table's shape)
    // keeps the pipeline full across shards.
    t.LookupBatch(h, r, next);
    return;
  }
  // Newest first: it holds the most keys, so most present keys are found
  // there and skip the older generations; each generation's pass is one
  // prefetching pipeline over the keys still not found.
  shard.Generation(gens - 1).LookupBatch(h, r);
  ScratchArray<uint32_t> index(h.size());
  for (uint32_t g = gens - 1; g-- > 0;) {
    const size_t m = Select<bool>(r, false, index.data());
    if (m == 0) return;
    OnSubset(h, r, absl::Span<const uint32_t>(index.data(), m),
             [&](absl::Span<const uint64_t> sub, absl::Span<bool> sub_r) {
               shard.Generation(g).LookupBatch(sub, sub_r);
             });
  }
}

void CuckooFilter::CountInShard(const Shard& shard, const CuckooTable& t,
                                absl::Span<const uint64_t> h, absl::Span<uint32_t> r) const {
  const uint32_t gens = shard.generations.load(std::memory_order_acquire);
  for (size_t i = 0; i < h.size(); ++i) {
    uint32_t c = t.ApproximateCount(h[i]);
    for (uint32_t g = 1; g < gens; ++g) c += shard.Generation(g).ApproximateCount(h[i]);
    r[i] = c;
  }
}

void CuckooFilter::LookupHashed(absl::Span<const uint64_t> hashes, absl::Span<bool> out) const {
  const size_t num_shards = shards_.size();
  if (num_shards > 1 && hashes.size() > 1 &&
      (num_shards <= kMaxShardsForLookupAcross || num_shards <= hashes.size()) &&
      LookupAcrossShards(hashes, out)) {
    return;
  }
  ForEachShard(
      hashes, out,
      [&](size_t s, absl::Span<const uint64_t> h, absl::Span<bool> r, const Lookahead& next) {
        const Shard& shard = *shards_[s];
        shard.Read([&](const CuckooTable& t) { LookupInShard(shard, t, h, r, next); });
      });
}

// The sequence-lock protocol of Shard::Read over every shard at once. The
// batch runs through one pipeline per generation g, over the keys not found
// yet whose shard has a table g, across all such shards (tables g of all
// shards have one shape), in request order, with no sorting by shard; the
// counters are checked once at the end. A fixed filter, or a growing one
// that has not grown, is one pass over the first tables, as before growth
// existed. Only the keys of a shard whose counter moved go through the
// per-shard path.
//
// Why every answer is right, with the writer's side in Shard::Write: seq
// odd (relaxed), fence (release), table words and, when the shard grows,
// grown[g - 1] then generations (both release), seq even (release). For a
// shard s:
//
//  1. seq[s] is loaded with acquire, then the shard's generation count
//     gens[s] (acquire: its store came after grown[0 .. gens[s] - 2] were
//     set, so those pointers, then loaded with acquire, are set and their
//     tables built; tables are never freed while the filter lives, so they
//     are safe to read even while a writer is inside).
//  2. Every table word read for the shard's keys (all atomic loads) comes
//     after those loads and before a fence (acquire), after which seq is
//     loaded again (relaxed).
//  3. If seq[s] was even and is unchanged, no write section of the shard
//     overlapped these reads (Boehm's seqlock argument: had any read
//     returned a value stored after a writer's release fence, that fence
//     would synchronise with our acquire fence, and the writer's odd seq
//     store, sequenced before its fence, would be visible to the re-load),
//     and every section that ended before seq[s] happened-before them
//     (seq[s] read its release store). So the reads, the generation count
//     included, saw the shard exactly as it was at seq[s], and each key not
//     found was looked for in every table the shard then had: the answer a
//     locked reader would give. No false negative, and no key found that
//     the shard did not match.
//  4. A shard whose seq moved may have given torn answers (a kick in
//     flight, a table being added): its keys are looked up again through
//     Shard::Read, every generation.
//
// Returns false, answering nothing, when a writer was inside some shard at
// the start (the caller then takes the per-shard path for the batch).
bool CuckooFilter::LookupAcrossShards(absl::Span<const uint64_t> hashes,
                                      absl::Span<bool> out) const {
  const size_t num_shards = shards_.size();
  ScratchArray<uint64_t> seq(num_shards);
  ScratchArray<uint32_t> gens(num_shards);
  uint32_t max_gens = 1;
  size_t grown = 0;
  for (size_t s = 0; s < num_shards; ++s) {
    const Shard& shard = *shards_[s];
    seq[s] = shard.seq.load(std::memory_order_acquire);
    if ((seq[s] & 1) != 0) return false;
    gens[s] = shard.generations.load(std::memory_order_acquire);
    max_gens = std::max(max_gens, gens[s]);
    grown += gens[s] > 1 ? 1 : 0;
  }
  const size_t n = hashes.size();
  // While at most half the shards have grown, the first tables go first,
  // for the whole batch in one pipeline (all a fixed filter needs); the
  // keys of grown shards not found there then go newest table first. Once
  // most shards have grown, their first tables hold the fewest keys: then
  // every key goes newest table first, and the first tables come last.
  const bool first_tables_first = grown * 2 <= num_shards;
  if (first_tables_first) CuckooTable::LookupAcross(tables_, hashes, out);
  if (max_gens > 1) {
    // The keys not found yet that a later pass may find. (The loops below
    // have no branch on the keys: whether a key was found, or its shard has
    // a table, is a coin toss the CPU would mispredict.)
    ScratchArray<uint32_t> pending(n);
    size_t p = 0;
    if (first_tables_first) {
      for (size_t k = 0; k < n; ++k) {
        pending[p] = static_cast<uint32_t>(k);
        p += static_cast<size_t>(!out[k]) & static_cast<size_t>(gens[layout_.Shard(hashes[k])] > 1);
      }
    } else {
      for (size_t k = 0; k < n; ++k) {
        out[k] = false;
        pending[k] = static_cast<uint32_t>(k);
      }
      p = n;
    }
    ScratchArray<uint32_t> index(p);
    ScratchArray<uint64_t> sub(p);
    ScratchArray<bool> found(p);
    ScratchArray<const CuckooTable*> tables(num_shards);
    // One pass per generation g, over the pending keys whose shard has it.
    for (uint32_t g = max_gens; g-- > (first_tables_first ? 1 : 0) && p > 0;) {
      if (g == 0) {
        std::copy(tables_.begin(), tables_.end(), tables.data());
      } else {
        // Generation g of every shard that has it; the others' entries,
        // never used by this pass's keys, point at one of them
        // (LookupAcross takes the shape from the first entry).
        const CuckooTable* any = nullptr;
        for (size_t s = 0; s < num_shards; ++s) {
          tables[s] =
              gens[s] > g ? shards_[s]->grown[g - 1].load(std::memory_order_acquire) : nullptr;
          if (any == nullptr) any = tables[s];
        }
        for (size_t s = 0; s < num_shards; ++s) {
          if (tables[s] == nullptr) tables[s] = any;
        }
      }
      size_t m = 0;
      for (size_t i = 0; i < p; ++i) {
        const uint64_t h = hashes[pending[i]];
        index[m] = static_cast<uint32_t>(i);
        sub[m] = h;
        m += gens[layout_.Shard(h)] > g ? 1 : 0;
      }
      if (m == 0) continue;
      CuckooTable::LookupAcross(absl::Span<const CuckooTable* const>(tables.data(), num_shards),
                                absl::Span<const uint64_t>(sub.data(), m),
                                absl::Span<bool>(found.data(), m));
      for (size_t j = 0; j < m; ++j) out[pending[index[j]]] = found[j];
      size_t kept = 0;
      for (size_t i = 0; i < p; ++i) {
        pending[kept] = pending[i];
        kept += out[pending[i]] ? 0 : 1;
      }
      p = kept;
    }
  }
  std::atomic_thread_fence(std::memory_order_acquire);
  ScratchArray<uint8_t> changed(num_shards);
  bool any_changed = false;
  for (size_t s = 0; s < num_shards; ++s) {
    changed[s] = shards_[s]->seq.load(std::memory_order_relaxed) != seq[s];
    any_changed |= changed[s] != 0;
  }
  if (!any_changed) return true;
  ScratchArray<uint32_t> index(n);
  size_t m = 0;
  for (size_t k = 0; k < n; ++k) {
    if (changed[layout_.Shard(hashes[k])] != 0) index[m++] = static_cast<uint32_t>(k);
  }
  ScratchArray<uint64_t> sub(m);
  ScratchArray<bool> sub_r(m);
  for (size_t k = 0; k < m; ++k) sub[k] = hashes[index[k]];
  ForEachShard(
      absl::Span<const uint64_t>(sub.data(), m), sub_r.span(),
      [&](size_t s, absl::Span<const uint64_t> h, absl::Span<bool> r, const Lookahead& next) {
        const Shard& shard = *shards_[s];
        shard.Read([&](const CuckooTable& t) { LookupInShard(shard, t, h, r, next); });
      });
  for (size_t k = 0; k < m; ++k) out[index[k]] = sub_r[k];
  return true;
}

void CuckooFilter::CountHashed(absl::Span<const uint64_t> hashes, absl::Span<uint32_t> out) const {
  ForEachShard(
      hashes, out,
      [&](size_t s, absl::Span<const uint64_t> h, absl::Span<uint32_t> r, const Lookahead&) {
        const Shard& shard = *shards_[s];
        shard.Read([&](const CuckooTable& t) { CountInShard(shard, t, h, r); });
      });
}

void CuckooFilter::LookupBatch(absl::Span<const std::string_view> keys,
                               absl::Span<bool> out) const {
  Hashes h(keys.size());
  HashAll(*this, keys, h);
  LookupHashed(h.span(), out);
}

void CuckooFilter::CountBatch(absl::Span<const std::string_view> keys,
                              absl::Span<uint32_t> out) const {
  Hashes h(keys.size());
  HashAll(*this, keys, h);
  CountHashed(h.span(), out);
}

bool CuckooFilter::MayContain(std::string_view key) const {
  const uint64_t h = Hash(key);
  const Shard& shard = *shards_[layout_.Shard(h)];
  bool found;
  // The common case: one table (a fixed filter, or a shard that has not
  // grown) and no writer in the way.
  if (ABSL_PREDICT_TRUE(shard.TryMayContain(h, &found))) return found;
  return MayContainInGenerations(shard, h);
}

bool CuckooFilter::MayContainInGenerations(const Shard& shard, uint64_t h) const {
  bool found;
  shard.Read([&](const CuckooTable& t) {
    // Newest generation first: it holds the most keys.
    found = false;
    const uint32_t gens = shard.generations.load(std::memory_order_acquire);
    for (uint32_t g = gens; !found && g-- > 1;) found = shard.Generation(g).MayContain(h);
    if (!found) found = t.MayContain(h);
  });
  return found;
}

uint32_t CuckooFilter::ApproximateCount(std::string_view key) const {
  uint64_t h = Hash(key);
  const Shard& shard = *shards_[layout_.Shard(h)];
  uint32_t n;
  shard.Read([&](const CuckooTable& t) { CountInShard(shard, t, {&h, 1}, {&n, 1}); });
  return n;
}

}  // namespace cuckoo
