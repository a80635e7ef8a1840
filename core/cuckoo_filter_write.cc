// CuckooFilter's write paths: inserts and deletes, single keys and
// batches, growth of a shard, and the replay of logged writes (ShardWrite)
// and of whole batches at a log position.
#include <algorithm>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"
#include "base/scratch.h"
#include "core/cuckoo_filter.h"
#include "core/internal/filter_batch.h"
#include "core/internal/prefetch.h"

namespace cuckoo {

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
  // take go to a new generation. kFull without a failed chain means the
  // key's slots all hold its own copies: that grows the shard only with
  // grow_on_repeats (RedisBloom's behaviour; bounded by the schedule, so by
  // max_capacity, and by the memory budget's check before the write).
  // Deterministic either way: the results depend only on the shard's state
  // and the batch.
  auto repeats_full = [&] {
    if (!shape_.grow_on_repeats) return false;
    for (size_t k = 0; k < m; ++k) {
      if (r[index[k]] == InsertResult::kFull) return true;
    }
    return false;
  };
  while ((*full || repeats_full()) && Grow(shard, s)) {
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

}  // namespace cuckoo
