// CuckooFilter: creation and memory, the counters and Stats, and the
// shard access snapshots use. The batch and single-key paths are in
// cuckoo_filter_write.cc (insert, delete, replay) and cuckoo_filter_read.cc
// (lookup, count).
#include "core/cuckoo_filter.h"

#include <algorithm>
#include <cstring>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"

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

uint64_t CuckooFilter::items() const {
  uint64_t n = 0;
  for (const auto& s : shards_) n += s->items.load(std::memory_order_relaxed);
  return n;
}

uint64_t CuckooFilter::changes() const {
  uint64_t n = expiry_changes();
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
  st.false_positive_target =
      shape_.growing() ? shape_.false_positive_rate : st.expected_false_positive_rate_at_capacity;
  return st;
}

}  // namespace cuckoo
