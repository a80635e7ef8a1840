#include "core/cuckoo_filter.h"

#include <algorithm>
#include <cstring>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"
#include "core/scratch.h"

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
  f->memory_bytes_ = MemoryBytes(shape);
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
  ScratchArray<uint32_t, 0> start(num_shards + 1);
  std::fill(start.data(), start.data() + num_shards + 1, 0);
  for (uint64_t h : hashes) ++start[layout_.Shard(h) + 1];
  for (size_t s = 0; s < num_shards; ++s) start[s + 1] += start[s];
  ScratchArray<uint64_t, 0> sorted(n);
  ScratchArray<uint32_t, 1> pos(n);
  ScratchArray<const uint8_t*, 0> bytes(n);
  ScratchArray<Result, 2> tmp(n);
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
                     t.InsertBatch(h, if_absent, r, next, &shard_full);
                     full[s] = shard_full;
                     if (log != nullptr) {
                       position = (*log)({.kind = ShardWrite::kInsert,
                                          .shard = static_cast<uint32_t>(s),
                                          .if_absent = if_absent,
                                          .full_before = full_before,
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
  // Fast path: the sequence-lock protocol of Shard::Read over every shard at
  // once, so the batch runs as one pipeline in request order, with no sorting
  // by shard and no scatter. Any writer inside or in between sends the batch
  // down the per-shard path below.
  const size_t num_shards = shards_.size();
  if (num_shards > 1 && num_shards <= kMaxShardsForLookupAcross && hashes.size() > 1) {
    uint64_t seq[kMaxShardsForLookupAcross];
    bool quiet = true;
    for (size_t s = 0; s < num_shards; ++s) {
      seq[s] = shards_[s]->seq.load(std::memory_order_acquire);
      quiet &= (seq[s] & 1) == 0;
    }
    if (quiet) {
      CuckooTable::LookupAcross(tables_, hashes, out);
      std::atomic_thread_fence(std::memory_order_acquire);
      bool unchanged = true;
      for (size_t s = 0; s < num_shards; ++s) {
        unchanged &= shards_[s]->seq.load(std::memory_order_relaxed) == seq[s];
      }
      if (unchanged) return;
    }
  }
  ForEachShard(
      hashes, out,
      [&](size_t s, absl::Span<const uint64_t> h, absl::Span<bool> r, const Lookahead& next) {
        shards_[s]->Read([&](const CuckooTable& t) { t.LookupBatch(h, r, next); });
      });
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
            t.DeleteBatch(h, r, next);
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
                   t.InsertBatch(h, if_absent, r, next, &shard_full);
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
                   t.DeleteBatch(h, r, next);
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
  return shards_[write.shard]->Write([&](CuckooTable& t, uint64_t& shard_position) {
    if (shard_position >= position) return false;
    const size_t n = write.hashes.size();
    if (write.kind == ShardWrite::kInsert) {
      ScratchArray<InsertResult, 2> results(n);
      bool full = write.full_before;
      t.InsertBatch(write.hashes, write.if_absent, results.span(), next, &full);
    } else {
      ScratchArray<DeleteResult, 2> results(n);
      t.DeleteBatch(write.hashes, results.span(), next);
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
  ScratchArray<size_t, 0> run_end(n);
  for (size_t i = n; i-- > 0;) {
    run_end[i] = writes[i].hashes.size();
    if (i + 1 < n &&
        writes[i + 1].hashes.data() == writes[i].hashes.data() + writes[i].hashes.size()) {
      run_end[i] += run_end[i + 1];
    }
  }
  size_t total = 0;
  for (const ShardWrite& w : writes) total += w.hashes.size();
  ScratchArray<const uint8_t*, 0> tables(total);
  ScratchArray<size_t, 1> first(n);  // writes[i]'s first entry in `tables`.
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
        shards_[s]->Read([&](const CuckooTable& t) {
          for (size_t i = 0; i < h.size(); ++i) r[i] = t.ApproximateCount(h[i]);
        });
      });
}

namespace {

// The keys' hashes, in scratch of the calling thread.
using Hashes = ScratchArray<uint64_t, 2>;
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

InsertResult CuckooFilter::Insert(std::string_view key, bool if_absent) {
  uint64_t h = Hash(key);
  return shards_[layout_.Shard(h)]->Write([&](CuckooTable& t) { return t.Insert(h, if_absent); });
}

bool CuckooFilter::MayContain(std::string_view key) const {
  uint64_t h = Hash(key);
  bool found;
  shards_[layout_.Shard(h)]->Read([&](const CuckooTable& t) { found = t.MayContain(h); });
  return found;
}

DeleteResult CuckooFilter::Delete(std::string_view key) {
  uint64_t h = Hash(key);
  return shards_[layout_.Shard(h)]->Write([&](CuckooTable& t) { return t.Delete(h); });
}

uint32_t CuckooFilter::ApproximateCount(std::string_view key) const {
  uint64_t h = Hash(key);
  uint32_t n;
  shards_[layout_.Shard(h)]->Read([&](const CuckooTable& t) { n = t.ApproximateCount(h); });
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
  shard.items.store(items, std::memory_order_relaxed);
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
  st.capacity = shape_.capacity;
  st.slots = shape_.total_slots();
  st.memory_bytes = memory_bytes_;
  st.load_factor = static_cast<double>(st.items) / st.slots;
  st.bits_per_item = st.items == 0 ? 0 : 8.0 * st.memory_bytes / st.items;
  st.expected_false_positive_rate =
      ExpectedFalsePositiveRate(shape_.fingerprint_bits, shape_.bucket_size, st.load_factor);
  st.expected_false_positive_rate_at_capacity =
      ExpectedFalsePositiveRate(shape_.fingerprint_bits, shape_.bucket_size,
                                std::min(1.0, static_cast<double>(st.capacity) / st.slots));
  return st;
}

}  // namespace cuckoo
