#include "core/cuckoo_filter.h"

#include <algorithm>
#include <cstring>
#include <memory>
#include <vector>

#include "absl/base/optimization.h"
#include "absl/status/status.h"
#include "absl/strings/str_format.h"
#include "base/scratch.h"
#include "core/internal/prefetch.h"

namespace cuckoo {
absl::StatusOr<std::unique_ptr<CuckooFilter>> CuckooFilter::Create(const FilterOptions& options) {
  absl::StatusOr<FilterShape> shape = ComputeShape(options);
  if (!shape.ok()) return shape.status();
  return FromShape(*shape);
}

// Per shard, besides the Shard itself: its two vector entries and the
// heap's header and rounding for the Shard's allocation.
constexpr uint64_t kShardOverheadBytes = 2 * sizeof(void*) + 32;

uint64_t CuckooFilter::ShardStride(const FilterShape& shape) {
  // Whole cache lines, so no two shards' tables share one.
  return (CuckooTable::StorageBytes(shape) + 63) / 64 * 64;
}

uint64_t CuckooFilter::MemoryBytes(const FilterShape& shape) {
  return PageBuffer::AllocationSize(shape.shards * ShardStride(shape)) +
         uint64_t{shape.shards} * (sizeof(Shard) + kShardOverheadBytes) + sizeof(CuckooFilter);
}

uint64_t CuckooFilter::GrownTableMemoryBytes(const FilterShape& shape,
                                             const GenerationShape& generation) {
  // As Grow counts a table it adds.
  return CuckooTable::AllocationBytes(GenerationTableShape(shape, generation)) +
         sizeof(CuckooTable) + kShardOverheadBytes;
}

absl::StatusOr<std::unique_ptr<CuckooFilter>> CuckooFilter::FromShape(const FilterShape& shape) {
  if (absl::Status s = ValidateShape(shape); !s.ok()) return s;
  std::unique_ptr<CuckooFilter> f(new CuckooFilter(shape));
  const uint64_t stride = ShardStride(shape);
  absl::StatusOr<PageBuffer> memory = PageBuffer::Allocate(shape.shards * stride);
  if (!memory.ok()) return memory.status();
  f->tables_memory_ = *std::move(memory);
  f->shards_.reserve(shape.shards);
  f->tables_.reserve(shape.shards);
  for (uint32_t i = 0; i < shape.shards; ++i) {
    // Distinct, deterministic kick-victim streams per shard.
    absl::StatusOr<CuckooTable> t =
        CuckooTable::CreateIn(shape, shape.seed ^ (0x9E3779B97F4A7C15ull * (i + 1)),
                              f->tables_memory_.data() + i * stride);
    if (!t.ok()) return t.status();
    f->shards_.push_back(std::make_unique<Shard>(*std::move(t)));
    f->tables_.push_back(&f->shards_.back()->table);
  }
  f->memory_bytes_.store(MemoryBytes(shape), std::memory_order_relaxed);
  return f;
}

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

namespace {

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

}  // namespace

bool CuckooFilter::Grow(Shard& shard, size_t s) {
  const uint32_t n = shard.generations.load(std::memory_order_relaxed);
  if (n >= schedule_.size()) return false;
  // Distinct, deterministic kick-victim streams per shard and generation.
  const uint64_t rng_seed =
      shape_.seed ^ (0x9E3779B97F4A7C15ull * (s + 1)) ^ (0xC2B2AE3D27D4EB4Full * n);
  absl::StatusOr<CuckooTable> t =
      CuckooTable::Create(GenerationTableShape(shape_, schedule_[n]), rng_seed);
  if (!t.ok()) return false;
  auto table = std::make_unique<CuckooTable>(*std::move(t));
  // What snapshot loads budget before growing a shard (GrownTableMemoryBytes).
  const uint64_t bytes = GrownTableMemoryBytes(shape_, schedule_[n]);
  shard.grown[n - 1].store(table.get(), std::memory_order_release);
  shard.owned.push_back(std::move(table));
  shard.generations.store(n + 1, std::memory_order_release);
  memory_bytes_.fetch_add(bytes, std::memory_order_relaxed);
  if (growth_listener_) growth_listener_(bytes);
  return true;
}

uint64_t CuckooFilter::ShardCeiling(uint32_t i) const {
  if (!shape_.growing() || shape_.max_capacity == 0) return UINT64_MAX;
  const uint64_t n = shards_.size();
  return shape_.max_capacity / n + (i < shape_.max_capacity % n ? 1 : 0);
}

void CuckooFilter::InsertInShard(Shard& shard, size_t s, CuckooTable& t,
                                 absl::Span<const uint64_t> h, bool if_absent,
                                 absl::Span<InsertResult> r, const Lookahead& next, bool* full,
                                 bool ceiling) {
  const uint64_t limit = ceiling ? ShardCeiling(static_cast<uint32_t>(s)) : UINT64_MAX;
  uint64_t items = limit == UINT64_MAX ? 0 : shard.TotalItems();
  if (limit == UINT64_MAX || items + h.size() <= limit) {
    InsertInGenerations(shard, s, t, h, if_absent, r, next, full);
    return;
  }
  // The batch may reach the shard's share: apply its keys in rounds of at
  // most the room left, so no round can pass it, until the share is reached
  // (the rest answer kFull, nothing of them applied) or every key is done.
  size_t begin = 0;
  while (begin < h.size() && items < limit) {
    const size_t take = static_cast<size_t>(std::min<uint64_t>(h.size() - begin, limit - items));
    InsertInGenerations(shard, s, t, h.subspan(begin, take), if_absent, r.subspan(begin, take), {},
                        full);
    begin += take;
    items = shard.TotalItems();
  }
  const uint32_t gens = shard.generations.load(std::memory_order_relaxed);
  for (size_t i = begin; i < h.size(); ++i) {
    // With if_absent, a key the shard holds is present, ceiling or not.
    bool present = false;
    for (uint32_t g = gens; if_absent && g-- > 0 && !present;) {
      present = shard.Generation(g).MayContain(h[i]);
    }
    r[i] = present ? InsertResult::kAlreadyPresent : InsertResult::kFull;
  }
}

void CuckooFilter::InsertInGenerations(Shard& shard, size_t s, CuckooTable& t,
                                       absl::Span<const uint64_t> h, bool if_absent,
                                       absl::Span<InsertResult> r, const Lookahead& next,
                                       bool* full) {
  if (!shape_.growing()) {
    t.InsertBatch(h, if_absent, r, next, full);
    return;
  }
  const size_t n = h.size();
  ScratchArray<uint32_t> index(n);
  uint32_t gens = shard.generations.load(std::memory_order_relaxed);
  // With if_absent, the keys an older generation holds are present; the
  // newest generation's own call checks it.
  size_t m = n;
  for (size_t i = 0; i < n; ++i) index[i] = static_cast<uint32_t>(i);
  if (if_absent && gens > 1) {
    m = 0;
    for (size_t i = 0; i < n; ++i) {
      bool present = false;
      for (uint32_t g = gens - 1; g-- > 0 && !present;) {
        present = shard.Generation(g).MayContain(h[i]);
      }
      if (present) {
        r[i] = InsertResult::kAlreadyPresent;
      } else {
        index[m++] = static_cast<uint32_t>(i);
      }
    }
  }
  auto insert_newest = [&](absl::Span<const uint32_t> keys) {
    OnSubset(h, r, keys, [&](absl::Span<const uint64_t> sub, absl::Span<InsertResult> sub_r) {
      shard.Generation(gens - 1).InsertBatch(sub, if_absent, sub_r, {}, full);
    });
  };
  if (m == n && gens == 1) {
    t.InsertBatch(h, if_absent, r, {}, full);
  } else {
    insert_newest(absl::Span<const uint32_t>(index.data(), m));
  }
  // A failed kick chain: the newest table is full. The keys it could not
  // take go to a new generation (kFull without a failed chain means the
  // key's slots all hold its own copies: no growth for that).
  while (*full && Grow(shard, s)) {
    ++gens;
    *full = false;
    m = Select<InsertResult>(r, InsertResult::kFull, index.data());
    if (m == 0) break;
    if (if_absent) {
      // An earlier key of this batch may have put a copy in the table
      // that just filled.
      size_t kept = 0;
      for (size_t k = 0; k < m; ++k) {
        if (shard.Generation(gens - 2).MayContain(h[index[k]])) {
          r[index[k]] = InsertResult::kAlreadyPresent;
        } else {
          index[kept++] = index[k];
        }
      }
      m = kept;
    }
    insert_newest(absl::Span<const uint32_t>(index.data(), m));
  }
}

void CuckooFilter::DeleteInShard(Shard& shard, CuckooTable& t, absl::Span<const uint64_t> h,
                                 absl::Span<DeleteResult> r, const Lookahead& next) {
  DeleteInGenerations(shard, t, h, r, next);
  uint64_t deleted = 0;
  for (const DeleteResult x : r) deleted += x == DeleteResult::kDeleted ? 1 : 0;
  // Under the shard's write lock: one writer at a time.
  shard.deletes.store(shard.deletes.load(std::memory_order_relaxed) + deleted,
                      std::memory_order_relaxed);
}

void CuckooFilter::DeleteInGenerations(Shard& shard, CuckooTable& t, absl::Span<const uint64_t> h,
                                       absl::Span<DeleteResult> r, const Lookahead& next) {
  const uint32_t gens = shard.generations.load(std::memory_order_relaxed);
  if (gens == 1) {
    t.DeleteBatch(h, r, shape_.growing() ? Lookahead{} : next);
    return;
  }
  // Each key's fingerprint is looked for in every generation. Held by one
  // generation: that copy goes. Held by none: kNotFound. Held by several:
  // all but one may be other keys' fingerprints (each generation has its
  // own fingerprint function), and removing another key's would make it a
  // false negative, so nothing is removed; the key may go on answering
  // present, as a false positive does (docs/GROWTH.md).
  const size_t n = h.size();
  ScratchArray<uint32_t> holder(n);  // Generation to delete from, or kNone.
  constexpr uint32_t kNone = ~0u;
  for (size_t i = 0; i < n; ++i) {
    uint32_t found = 0;
    holder[i] = kNone;
    for (uint32_t g = gens; g-- > 0 && found < 2;) {
      if (shard.Generation(g).MayContain(h[i])) {
        holder[i] = g;
        ++found;
      }
    }
    if (found == 0) r[i] = DeleteResult::kNotFound;
    if (found >= 2) {
      r[i] = DeleteResult::kDeleted;
      holder[i] = kNone;
    }
  }
  ScratchArray<uint32_t> index(n);
  for (uint32_t g = gens; g-- > 0;) {
    size_t m = 0;
    for (size_t i = 0; i < n; ++i) {
      if (holder[i] == g) index[m++] = static_cast<uint32_t>(i);
    }
    if (m == 0) continue;
    OnSubset(h, r, absl::Span<const uint32_t>(index.data(), m),
             [&](absl::Span<const uint64_t> sub, absl::Span<DeleteResult> sub_r) {
               shard.Generation(g).DeleteBatch(sub, sub_r);
             });
  }
}

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

namespace {

bool NeverStop() { return false; }

// Runs part(begin, end) over [0, n) in parts of CuckooFilter::kBatchPartKeys,
// asking `stop` between parts; returns where it stopped (n if it did not).
template <typename Part>
size_t InParts(size_t n, StopCheck stop, Part part) {
  for (size_t begin = 0; begin < n; begin += CuckooFilter::kBatchPartKeys) {
    if (begin > 0 && stop()) return begin;
    part(begin, std::min(n, begin + CuckooFilter::kBatchPartKeys));
  }
  return n;
}

}  // namespace

size_t CuckooFilter::InsertHashedImpl(absl::Span<const uint64_t> hashes, bool if_absent,
                                      absl::Span<InsertResult> out, StopCheck stop,
                                      const WriteLog* log) {
  // Per shard, whether a kick chain of this batch failed there, kept across
  // the parts: the batch walks at most one failing chain per shard.
  thread_local std::vector<uint8_t> full;
  full.assign(shards_.size(), 0);
  return InParts(hashes.size(), stop, [&](size_t begin, size_t end) {
    ForEachShard(hashes.subspan(begin, end - begin), out.subspan(begin, end - begin),
                 [&](size_t s, absl::Span<const uint64_t> h, absl::Span<InsertResult> r,
                     const Lookahead& next) {
                   shards_[s]->Write([&](CuckooTable& t, uint64_t& position) {
                     const bool full_before = full[s] != 0;
                     bool shard_full = full_before;
                     InsertInShard(*shards_[s], s, t, h, if_absent, r, next, &shard_full,
                                   /*ceiling=*/true);
                     full[s] = shard_full;
                     if (log != nullptr) {
                       position =
                           (*log)({.kind = ShardWrite::kInsert,
                                   .shard = static_cast<uint32_t>(s),
                                   .if_absent = if_absent,
                                   .full_before = full_before,
                                   .ceiling = ShardCeiling(static_cast<uint32_t>(s)) != UINT64_MAX,
                                   .hashes = h});
                     }
                   });
                 });
  });
}

size_t CuckooFilter::InsertHashed(absl::Span<const uint64_t> hashes, bool if_absent,
                                  absl::Span<InsertResult> out, StopCheck stop) {
  return InsertHashedImpl(hashes, if_absent, out, stop, nullptr);
}

size_t CuckooFilter::InsertHashed(absl::Span<const uint64_t> hashes, bool if_absent,
                                  absl::Span<InsertResult> out, StopCheck stop, WriteLog log) {
  return InsertHashedImpl(hashes, if_absent, out, stop, &log);
}

void CuckooFilter::InsertHashed(absl::Span<const uint64_t> hashes, bool if_absent,
                                absl::Span<InsertResult> out) {
  InsertHashed(hashes, if_absent, out, NeverStop);
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

size_t CuckooFilter::DeleteHashedImpl(absl::Span<const uint64_t> hashes,
                                      absl::Span<DeleteResult> out, StopCheck stop,
                                      const WriteLog* log) {
  return InParts(hashes.size(), stop, [&](size_t begin, size_t end) {
    ForEachShard(
        hashes.subspan(begin, end - begin), out.subspan(begin, end - begin),
        [&](size_t s, absl::Span<const uint64_t> h, absl::Span<DeleteResult> r,
            const Lookahead& next) {
          shards_[s]->Write([&](CuckooTable& t, uint64_t& position) {
            DeleteInShard(*shards_[s], t, h, r, next);
            if (log != nullptr) {
              position = (*log)(
                  {.kind = ShardWrite::kDelete, .shard = static_cast<uint32_t>(s), .hashes = h});
            }
          });
        });
  });
}

size_t CuckooFilter::DeleteHashed(absl::Span<const uint64_t> hashes, absl::Span<DeleteResult> out,
                                  StopCheck stop) {
  return DeleteHashedImpl(hashes, out, stop, nullptr);
}

size_t CuckooFilter::DeleteHashed(absl::Span<const uint64_t> hashes, absl::Span<DeleteResult> out,
                                  StopCheck stop, WriteLog log) {
  return DeleteHashedImpl(hashes, out, stop, &log);
}

void CuckooFilter::InsertHashedAt(absl::Span<const uint64_t> hashes, bool if_absent,
                                  absl::Span<InsertResult> out, uint64_t position,
                                  size_t* skipped) {
  size_t skipped_keys = 0;
  ForEachShard(hashes, out,
               [&](size_t s, absl::Span<const uint64_t> h, absl::Span<InsertResult> r,
                   const Lookahead& next) {
                 shards_[s]->Write([&](CuckooTable& t, uint64_t& shard_position) {
                   if (shard_position >= position) {
                     skipped_keys += h.size();
                     std::fill(r.begin(), r.end(), InsertResult::kInserted);
                     return;
                   }
                   bool shard_full = false;
                   InsertInShard(*shards_[s], s, t, h, if_absent, r, next, &shard_full,
                                 /*ceiling=*/true);
                   shard_position = position;
                 });
               });
  if (skipped != nullptr) *skipped = skipped_keys;
}

void CuckooFilter::DeleteHashedAt(absl::Span<const uint64_t> hashes, absl::Span<DeleteResult> out,
                                  uint64_t position, size_t* skipped) {
  size_t skipped_keys = 0;
  ForEachShard(hashes, out,
               [&](size_t s, absl::Span<const uint64_t> h, absl::Span<DeleteResult> r,
                   const Lookahead& next) {
                 shards_[s]->Write([&](CuckooTable& t, uint64_t& shard_position) {
                   if (shard_position >= position) {
                     skipped_keys += h.size();
                     std::fill(r.begin(), r.end(), DeleteResult::kDeleted);
                     return;
                   }
                   DeleteInShard(*shards_[s], t, h, r, next);
                   shard_position = position;
                 });
               });
  if (skipped != nullptr) *skipped = skipped_keys;
}

absl::Status CuckooFilter::CheckShardWrite(const ShardWrite& write) const {
  if (write.shard >= shards_.size()) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "write to shard %u of a filter with %u shards", write.shard, shards_.size()));
  }
  for (uint64_t h : write.hashes) {
    if (layout_.Shard(h) != write.shard) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "a key hash of shard %u in a write to shard %u", layout_.Shard(h), write.shard));
    }
  }
  if (write.kind != ShardWrite::kInsert && write.kind != ShardWrite::kDelete) {
    return absl::InvalidArgumentError(
        absl::StrFormat("unknown write kind %d", static_cast<int>(write.kind)));
  }
  return absl::OkStatus();
}

bool CuckooFilter::ApplyCheckedShardWrite(const ShardWrite& write, uint64_t position,
                                          const Lookahead& next) {
  Shard& shard = *shards_[write.shard];
  return shard.Write([&](CuckooTable& t, uint64_t& shard_position) {
    if (shard_position >= position) return false;
    const size_t n = write.hashes.size();
    if (write.kind == ShardWrite::kInsert) {
      ScratchArray<InsertResult> results(n);
      bool full = write.full_before;
      InsertInShard(shard, write.shard, t, write.hashes, write.if_absent, results.span(), next,
                    &full, write.ceiling);
    } else {
      ScratchArray<DeleteResult> results(n);
      DeleteInShard(shard, t, write.hashes, results.span(), next);
    }
    shard_position = position;
    return true;
  });
}

absl::StatusOr<bool> CuckooFilter::ApplyShardWrite(const ShardWrite& write, uint64_t position) {
  if (absl::Status s = CheckShardWrite(write); !s.ok()) return s;
  return ApplyCheckedShardWrite(write, position, Lookahead{});
}

absl::StatusOr<size_t> CuckooFilter::ApplyShardWrites(absl::Span<const ShardWrite> writes,
                                                      absl::Span<const uint64_t> positions) {
  if (positions.size() != writes.size()) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%u writes but %u positions", writes.size(), positions.size()));
  }
  const size_t n = writes.size();
  // run_end[i]: the hashes from writes[i]'s first to the end of the run of
  // writes whose hashes follow each other in memory; a write's pipeline
  // looks ahead over the rest of its run (tables[] says whose table each is).
  ScratchArray<size_t> run_end(n);
  for (size_t i = n; i-- > 0;) {
    run_end[i] = writes[i].hashes.size();
    if (i + 1 < n &&
        writes[i + 1].hashes.data() == writes[i].hashes.data() + writes[i].hashes.size()) {
      run_end[i] += run_end[i + 1];
    }
  }
  size_t total = 0;
  for (const ShardWrite& w : writes) total += w.hashes.size();
  ScratchArray<const uint8_t*> tables(total);
  ScratchArray<size_t> first(n);  // writes[i]'s first entry in `tables`.
  size_t applied = 0;
  for (size_t i = 0, at = 0; i < n; ++i) {
    first[i] = at;
    if (absl::Status s = CheckShardWrite(writes[i]); !s.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("write ", i, ": ", s.message()));
    }
    const uint8_t* bytes = shards_[writes[i].shard]->table_bytes;
    for (size_t k = 0; k < writes[i].hashes.size(); ++k) tables[at + k] = bytes;
    at += writes[i].hashes.size();
  }
  for (size_t i = 0; i < n; ++i) {
    Lookahead next;
    if (i + 1 < n) {
      const ShardWrite& w = writes[i + 1];
      const bool contiguous = run_end[i] > writes[i].hashes.size();
      next = {w.hashes.data(), tables.data() + first[i + 1],
              contiguous ? run_end[i] - writes[i].hashes.size() : w.hashes.size()};
    }
    if (ApplyCheckedShardWrite(writes[i], positions[i], next)) ++applied;
  }
  return applied;
}

void CuckooFilter::DeleteHashed(absl::Span<const uint64_t> hashes, absl::Span<DeleteResult> out) {
  DeleteHashed(hashes, out, NeverStop);
}

void CuckooFilter::CountHashed(absl::Span<const uint64_t> hashes, absl::Span<uint32_t> out) const {
  ForEachShard(
      hashes, out,
      [&](size_t s, absl::Span<const uint64_t> h, absl::Span<uint32_t> r, const Lookahead&) {
        const Shard& shard = *shards_[s];
        shard.Read([&](const CuckooTable& t) { CountInShard(shard, t, h, r); });
      });
}

namespace {

// The keys' hashes, in scratch of the calling thread.
using Hashes = ScratchArray<uint64_t>;
void HashAll(const CuckooFilter& f, absl::Span<const std::string_view> keys, Hashes& out) {
  for (size_t i = 0; i < keys.size(); ++i) out[i] = f.Hash(keys[i]);
}

}  // namespace

void CuckooFilter::InsertBatch(absl::Span<const std::string_view> keys, bool if_absent,
                               absl::Span<InsertResult> out) {
  InsertBatch(keys, if_absent, out, NeverStop);
}

size_t CuckooFilter::InsertBatch(absl::Span<const std::string_view> keys, bool if_absent,
                                 absl::Span<InsertResult> out, StopCheck stop) {
  Hashes h(keys.size());
  HashAll(*this, keys, h);
  return InsertHashed(h.span(), if_absent, out, stop);
}

void CuckooFilter::LookupBatch(absl::Span<const std::string_view> keys,
                               absl::Span<bool> out) const {
  Hashes h(keys.size());
  HashAll(*this, keys, h);
  LookupHashed(h.span(), out);
}

void CuckooFilter::DeleteBatch(absl::Span<const std::string_view> keys,
                               absl::Span<DeleteResult> out) {
  DeleteBatch(keys, out, NeverStop);
}

size_t CuckooFilter::DeleteBatch(absl::Span<const std::string_view> keys,
                                 absl::Span<DeleteResult> out, StopCheck stop) {
  Hashes h(keys.size());
  HashAll(*this, keys, h);
  return DeleteHashed(h.span(), out, stop);
}

size_t CuckooFilter::InsertBatch(absl::Span<const std::string_view> keys, bool if_absent,
                                 absl::Span<InsertResult> out, StopCheck stop, WriteLog log) {
  Hashes h(keys.size());
  HashAll(*this, keys, h);
  return InsertHashedImpl(h.span(), if_absent, out, stop, &log);
}

size_t CuckooFilter::DeleteBatch(absl::Span<const std::string_view> keys,
                                 absl::Span<DeleteResult> out, StopCheck stop, WriteLog log) {
  Hashes h(keys.size());
  HashAll(*this, keys, h);
  return DeleteHashedImpl(h.span(), out, stop, &log);
}

void CuckooFilter::CountBatch(absl::Span<const std::string_view> keys,
                              absl::Span<uint32_t> out) const {
  Hashes h(keys.size());
  HashAll(*this, keys, h);
  CountHashed(h.span(), out);
}

void CuckooFilter::PrefetchBuckets(const Shard& shard, uint64_t h) const {
  const uint32_t fp = layout_.Fingerprint(h);
  const uint64_t i1 = layout_.Bucket(h);
  const uint64_t i2 = layout_.AltBucket(i1, fp);
  for (const uint64_t i : {i1, i2}) {
    // The bucket's first and last bytes, and the end of the eight-byte
    // window a table may read from its first byte (cuckoo_table.cc, Load).
    const uint64_t bit = i * bucket_bits_;
    const uint64_t first = bit >> 3;
    const uint64_t last = std::max((bit + bucket_bits_ - 1) >> 3, first + 7);
    PrefetchLine(shard.table_bytes + first);
    PrefetchLine(shard.table_bytes + last);
  }
}

InsertResult CuckooFilter::Insert(std::string_view key, bool if_absent) {
  uint64_t h = Hash(key);
  const uint32_t s = layout_.Shard(h);
  if (shape_.growing()) {
    InsertResult r;
    shards_[s]->Write([&](CuckooTable& t) {
      bool full = false;
      InsertInShard(*shards_[s], s, t, {&h, 1}, if_absent, {&r, 1}, {}, &full, /*ceiling=*/true);
    });
    return r;
  }
  PrefetchBuckets(*shards_[s], h);
  return shards_[s]->Write([&](CuckooTable& t) { return t.Insert(h, if_absent); });
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

DeleteResult CuckooFilter::Delete(std::string_view key) {
  uint64_t h = Hash(key);
  Shard& shard = *shards_[layout_.Shard(h)];
  if (!shape_.growing()) {
    PrefetchBuckets(shard, h);
    return shard.DeleteOne(h);
  }
  return shard.Write([&](CuckooTable& t) {
    DeleteResult r;
    DeleteInShard(shard, t, {&h, 1}, {&r, 1}, {});
    return r;
  });
}

uint32_t CuckooFilter::ApproximateCount(std::string_view key) const {
  uint64_t h = Hash(key);
  const Shard& shard = *shards_[layout_.Shard(h)];
  uint32_t n;
  shard.Read([&](const CuckooTable& t) { CountInShard(shard, t, {&h, 1}, {&n, 1}); });
  return n;
}

uint64_t CuckooFilter::items() const {
  uint64_t n = 0;
  for (const auto& s : shards_) n += s->items.load(std::memory_order_relaxed);
  return n;
}

uint64_t CuckooFilter::changes() const {
  uint64_t n = 0;
  for (const auto& s : shards_) n += s->changes.load(std::memory_order_relaxed);
  return n;
}

CuckooFilter::ShardState CuckooFilter::CopyShard(uint32_t i, uint8_t* dst) const {
  const Shard& shard = *shards_[i];
  ReaderLock lock(&shard.mu);
  absl::Span<const uint8_t> bytes = shard.table.bytes();
  std::memcpy(dst, bytes.data(), bytes.size());
  return {.items = shard.table.items(),
          .rng_state = shard.table.rng_state(),
          .changes = shard.changes.load(std::memory_order_relaxed),
          .position = shard.position};
}

void CuckooFilter::ReadShard(
    uint32_t i, absl::FunctionRef<void(absl::Span<const uint8_t>, const ShardState&)> fn) const {
  const Shard& shard = *shards_[i];
  ReaderLock lock(&shard.mu);
  fn(shard.table.bytes(), {.items = shard.table.items(),
                           .rng_state = shard.table.rng_state(),
                           .changes = shard.changes.load(std::memory_order_relaxed),
                           .position = shard.position});
}

absl::Span<uint8_t> CuckooFilter::MutableShardBytesForLoad(uint32_t i) {
  Shard& shard = *shards_[i];
  WriterLock lock(&shard.mu);  // Uncontended; keeps the lock annotations honest.
  // The caller overwrites every byte: map the pages in one go.
  tables_memory_.Prefault(i * ShardStride(shape_), shape_.table_bytes_per_shard());
  return shard.table.mutable_bytes();
}

void CuckooFilter::RestoreShardForLoad(uint32_t i, uint64_t items, uint64_t rng_state,
                                       uint64_t position) {
  Shard& shard = *shards_[i];
  WriterLock lock(&shard.mu);
  shard.table.RestoreCounters(items, rng_state);
  shard.position = position;
  shard.items.store(shard.TotalItems(), std::memory_order_relaxed);
}

uint32_t CuckooFilter::ShardGenerations(uint32_t i) const {
  return shards_[i]->generations.load(std::memory_order_acquire);
}

void CuckooFilter::ReadShardGenerations(
    uint32_t i,
    absl::FunctionRef<void(absl::Span<const GenerationView>, const ShardState&)> fn) const {
  const Shard& shard = *shards_[i];
  ReaderLock lock(&shard.mu);
  const uint32_t gens = shard.generations.load(std::memory_order_relaxed);
  std::array<GenerationView, kMaxGenerations> views;
  for (uint32_t g = 0; g < gens; ++g) {
    const CuckooTable& t = shard.Generation(g);
    views[g] = {.fingerprint_bits = t.fingerprint_bits(),
                .buckets = t.num_buckets(),
                .bytes = t.bytes(),
                .items = t.items(),
                .rng_state = t.rng_state()};
  }
  fn(absl::Span<const GenerationView>(views.data(), gens),
     {.items = shard.TotalItems(),
      .rng_state = shard.table.rng_state(),
      .changes = shard.changes.load(std::memory_order_relaxed),
      .position = shard.position});
}

absl::Status CuckooFilter::GrowShardForLoad(uint32_t i, uint32_t count) {
  if (i >= shards_.size()) {
    return absl::InvalidArgumentError(
        absl::StrFormat("shard %u of a filter with %u shards", i, shards_.size()));
  }
  Shard& shard = *shards_[i];
  WriterLock lock(&shard.mu);
  const uint32_t gens = shard.generations.load(std::memory_order_relaxed);
  if (count == 0 || count > schedule_.size() || count < gens) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%u generations for shard %u, which has %u, of a filter whose schedule has %u", count, i,
        gens, schedule_.size()));
  }
  for (uint32_t g = gens; g < count; ++g) {
    if (!Grow(shard, i)) {
      return absl::ResourceExhaustedError(
          absl::StrFormat("cannot allocate generation %u of shard %u (%u buckets)", g, i,
                          schedule_[g].buckets_per_shard));
    }
  }
  return absl::OkStatus();
}

absl::Span<uint8_t> CuckooFilter::MutableGenerationBytesForLoad(uint32_t i, uint32_t g) {
  if (g == 0) return MutableShardBytesForLoad(i);
  Shard& shard = *shards_[i];
  WriterLock lock(&shard.mu);
  return shard.Generation(g).mutable_bytes();
}

void CuckooFilter::RestoreGenerationForLoad(uint32_t i, uint32_t g, uint64_t items,
                                            uint64_t rng_state) {
  Shard& shard = *shards_[i];
  WriterLock lock(&shard.mu);
  shard.Generation(g).RestoreCounters(items, rng_state);
  shard.items.store(shard.TotalItems(), std::memory_order_relaxed);
}

int64_t CuckooFilter::FirstInvalidGenerationBucketForLoad(uint32_t i, uint32_t g) {
  Shard& shard = *shards_[i];
  WriterLock lock(&shard.mu);
  return shard.Generation(g).FirstInvalidBucket();
}

void CuckooFilter::SetShardPositionsForLoad(uint64_t position) {
  for (const auto& shard : shards_) {
    WriterLock lock(&shard->mu);
    shard->position = position;
  }
}

std::vector<uint64_t> CuckooFilter::ShardPositions() const {
  std::vector<uint64_t> positions;
  positions.reserve(shards_.size());
  for (const auto& shard : shards_) {
    ReaderLock lock(&shard->mu);
    positions.push_back(shard->position);
  }
  return positions;
}

int64_t CuckooFilter::FirstInvalidBucketForLoad(uint32_t i) {
  Shard& shard = *shards_[i];
  WriterLock lock(&shard.mu);
  return shard.table.FirstInvalidBucket();
}

FilterStats CuckooFilter::Stats() const {
  FilterStats st;
  st.items = items();
  for (const auto& s : shards_) st.deletes += s->deletes.load(std::memory_order_relaxed);
  st.capacity = shape_.capacity;
  st.memory_bytes = memory_bytes();
  st.max_generations = static_cast<uint32_t>(schedule_.size());
  for (const GenerationShape& g : schedule_) st.reachable_capacity += g.planned_items;
  // The ceiling holds whatever room the last generation's table has left.
  if (shape_.growing() && shape_.max_capacity != 0) {
    st.reachable_capacity = std::min(st.reachable_capacity, shape_.max_capacity);
  }
  if (!shape_.growing()) {
    st.slots = shape_.total_slots();
  } else {
    // Per generation, under each shard's shared lock in turn (a snapshot
    // of each shard, not of the filter at one instant).
    for (uint32_t i = 0; i < shards_.size(); ++i) {
      ReadShardGenerations(i, [&](absl::Span<const GenerationView> gens, const ShardState&) {
        if (st.generations.size() < gens.size()) st.generations.resize(gens.size());
        for (size_t g = 0; g < gens.size(); ++g) {
          GenerationStats& out = st.generations[g];
          out.fingerprint_bits = gens[g].fingerprint_bits;
          out.false_positive_bound = schedule_[g].false_positive_bound;
          ++out.shards;
          out.slots += gens[g].buckets * shape_.bucket_size;
          out.items += gens[g].items;
          out.memory_bytes += gens[g].bytes.size();
        }
      });
    }
    for (const GenerationStats& g : st.generations) st.slots += g.slots;
  }
  st.load_factor = static_cast<double>(st.items) / st.slots;
  st.bits_per_item = st.items == 0 ? 0 : 8.0 * st.memory_bytes / st.items;
  if (!shape_.growing()) {
    st.generations.push_back({.fingerprint_bits = shape_.fingerprint_bits,
                              .shards = shape_.shards,
                              .slots = st.slots,
                              .items = st.items,
                              .memory_bytes = shape_.table_bytes_per_shard() * shape_.shards,
                              .false_positive_bound = schedule_[0].false_positive_bound});
    st.expected_false_positive_rate =
        ExpectedFalsePositiveRate(shape_.fingerprint_bits, shape_.bucket_size, st.load_factor);
    st.false_positive_bound = schedule_[0].false_positive_bound;
  } else {
    // A lookup checks every generation of its shard: the rates add up
    // (a union bound; the exact rate is a little lower).
    for (const GenerationStats& g : st.generations) {
      const double load = g.slots == 0 ? 0 : static_cast<double>(g.items) / g.slots;
      st.expected_false_positive_rate +=
          ExpectedFalsePositiveRate(g.fingerprint_bits, shape_.bucket_size, load);
      st.false_positive_bound += g.false_positive_bound;
    }
  }
  st.expected_false_positive_rate_at_capacity = ExpectedFalsePositiveRate(
      shape_.fingerprint_bits, shape_.bucket_size,
      std::min(1.0, static_cast<double>(st.capacity) / static_cast<double>(shape_.total_slots())));
  return st;
}

}  // namespace cuckoo
