// CuckooFilter: a named filter's engine. S independent CuckooTables (shards),
// each behind its own reader/writer lock, over keys hashed once with XXH3-64.
//
// Use it for approximate set membership with deletion: "has this key been
// added (and not removed)?" answered with no false negatives and a tunable
// false-positive rate.
//
//   auto filter = CuckooFilter::Create({.capacity = 1'000'000,
//                                       .false_positive_rate = 0.001});
//   (*filter)->Insert("user:42");
//   (*filter)->MayContain("user:42");   // true
//   (*filter)->MayContain("user:43");   // false, or true with p ~ 0.001
//
// Batches: InsertBatch / DeleteBatch hash the whole batch, group keys by shard,
// take each shard's lock once, and run the table's prefetching pipeline.
// LookupBatch (up to 64 shards, or as many as the batch has keys) runs
// lock-free prefetching pipelines over the batch in request order, across
// shards: one through every shard's first table (all a fixed filter, or a
// growing one that has not grown, needs), and one per later generation for
// the keys of grown shards not found yet. Only the keys of a shard that a
// writer entered meanwhile go shard by shard (all keys, when a writer was
// inside a shard at the start). Results come back per key in request order;
// a batch is not atomic (another thread may see part of it).
//
// Memory: all shards' tables live in one allocation (mapped when 64 KiB or
// more), so dropping a filter returns its memory to the system at once;
// MemoryBytes(shape) is everything a filter allocates. Long write batches
// run in parts of kBatchPartKeys keys; a StopCheck between the parts lets
// the caller end a batch early (a cancelled call, a deadline).
//
// Thread safety: every method may be called from any number of threads.
// Inserts and deletes take shard locks exclusively; lookups and counts take no
// lock unless they race a writer on the same shard (a sequence lock, below).
// Caveats (inherent to cuckoo filters): a key inserted more than 2b times
// fails with kFull; deleting a key that was never inserted can remove a
// colliding key's fingerprint.
#ifndef CUCKOO_CORE_CUCKOO_FILTER_H_
#define CUCKOO_CORE_CUCKOO_FILTER_H_

#include <array>
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string_view>
#include <type_traits>
#include <vector>

#include "absl/base/attributes.h"
#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "base/shared_mutex.h"
#include "core/filter_options.h"
#include "core/hash.h"
#include "core/internal/cuckoo_table.h"
#include "core/internal/page_buffer.h"

namespace cuckoo {

namespace internal {
class FilterLoading;
}  // namespace internal

// One generation of a growing filter (index g: every shard's g-th table).
struct GenerationStats {
  uint32_t fingerprint_bits = 0;
  uint32_t shards = 0;        // Shards that have grown this far.
  uint64_t slots = 0;         // In those shards' g-th tables.
  uint64_t items = 0;         // Fingerprints in them.
  uint64_t memory_bytes = 0;  // Their tables' bytes.
  // The generation's share of the rate: its rate when full (load 1).
  double false_positive_bound = 0;
};

// A point-in-time view of a filter's occupancy and cost.
struct FilterStats {
  uint64_t items = 0;  // Fingerprints stored (inserts - deletes).
  // Deletes answered kDeleted since the filter was created or loaded by
  // this process (not kept in snapshots).
  uint64_t deletes = 0;
  uint64_t capacity = 0;      // As requested at creation.
  uint64_t slots = 0;         // Fingerprint slots in all tables.
  uint64_t memory_bytes = 0;  // Bytes allocated for the tables.
  double load_factor = 0;     // items / slots.
  double bits_per_item = 0;   // memory_bytes * 8 / items (0 when empty).
  // Probability that a lookup of an absent key returns true at the current
  // load: 1 - (1 - 1/(2^f - 1))^(2b * load).
  double expected_false_positive_rate = 0;
  // The same with `capacity` items stored.
  double expected_false_positive_rate_at_capacity = 0;
  // The rate the filter is made for: a growing filter's shape rate (every
  // generation together stays under it), a fixed filter's
  // expected_false_positive_rate_at_capacity (past its capacity the rate
  // climbs above it).
  double false_positive_target = 0;
  // Growing filters (FilterShape::growing()); a fixed filter has one
  // generation. Sum of the existing generations' false_positive_bound: no
  // lookup's false-positive rate can exceed it, at any load; <= the shape's
  // false_positive_rate for a growing filter.
  double false_positive_bound = 0;
  // Keys the filter is planned to hold once every shard has every
  // generation its schedule allows (GenerationSchedule), at most
  // max_capacity (the ceiling, ShardCeiling): capacity for a fixed filter.
  uint64_t reachable_capacity = 0;
  // Generations of the schedule (the most a shard may have).
  uint32_t max_generations = 1;
  // One entry per generation that at least one shard has, oldest first.
  std::vector<GenerationStats> generations;
};

// Asked between the parts of a long write batch (from the batch's thread)
// whether to stop; true ends the batch there.
using StopCheck = absl::FunctionRef<bool()>;

// One shard's part of an Insert or Delete batch, as it was applied: what a
// log records so that CuckooFilter::ApplyShardWrite, given the same shard
// state, reproduces the shard exactly (table bytes, counters and kick-victim
// generator state).
struct ShardWrite {
  enum Kind : uint8_t { kInsert = 1, kDelete = 2 };
  Kind kind = kInsert;
  uint32_t shard = 0;
  bool if_absent = false;  // kInsert: InsertBatch's if_absent.
  // kInsert: a kick chain of an earlier part of the same batch had failed in
  // this shard (see InsertBatch), so this part walks no chain.
  bool full_before = false;
  // kInsert into a growing filter with a max_capacity: the write was applied
  // under the ceiling rule (CuckooFilter::ShardCeiling: keys past the shard's
  // share answer kFull). False in writes logged before the rule existed,
  // which replay then applies without it, as they were applied.
  bool ceiling = false;
  absl::Span<const uint64_t> hashes;  // In the order they were applied.
};

// Called with each shard's part of a write batch right after it was
// applied, still holding the shard's lock, so one shard's calls come in the
// order its writes happened. Returns the position the caller's log gave the
// write (cuckood: its log sequence number), which becomes the shard's
// position (ShardState::position). Must not fail or throw.
using WriteLog = absl::FunctionRef<uint64_t(const ShardWrite&)>;

class CuckooFilter {
 public:
  // Write batches are applied in parts of this many keys, with a StopCheck
  // between parts.
  static constexpr size_t kBatchPartKeys = 4096;

  // INVALID_ARGUMENT for impossible options, RESOURCE_EXHAUSTED when the
  // tables cannot be allocated.
  static absl::StatusOr<std::unique_ptr<CuckooFilter>> Create(const FilterOptions& options);
  static absl::StatusOr<std::unique_ptr<CuckooFilter>> FromShape(const FilterShape& shape);
  // Bytes FromShape(shape) allocates: the tables and the per-shard state.
  static uint64_t MemoryBytes(const FilterShape& shape);
  // Bytes one shard's grown table `generation` (an entry of
  // GenerationSchedule(shape) after the first) adds to memory_bytes() when
  // the shard gets it: what a snapshot's reader budgets before it allocates.
  static uint64_t GrownTableMemoryBytes(const FilterShape& shape,
                                        const GenerationShape& generation);

  const FilterShape& shape() const { return shape_; }
  uint64_t Hash(std::string_view key) const { return HashKey(key, shape_.seed); }

  // Single keys.
  InsertResult Insert(std::string_view key, bool if_absent = false);
  // True for every key inserted and not deleted; for other keys true with
  // probability ~ expected_false_positive_rate.
  bool MayContain(std::string_view key) const;
  DeleteResult Delete(std::string_view key);
  // Copies of the key's fingerprint in its two buckets; never an undercount.
  uint32_t ApproximateCount(std::string_view key) const;

  // Batches of keys. `out` must be as long as `keys`; out[i] is keys[i]'s result.
  // In an insert batch, once a key finds its shard full (its kick chain
  // failed), the batch's later keys for that shard are placed only if a
  // slot is free within two moves, else kFull: a batch costs at most one
  // failed kick chain per shard (see CuckooTable).
  void InsertBatch(absl::Span<const std::string_view> keys, bool if_absent,
                   absl::Span<InsertResult> out);
  void LookupBatch(absl::Span<const std::string_view> keys, absl::Span<bool> out) const;
  void DeleteBatch(absl::Span<const std::string_view> keys, absl::Span<DeleteResult> out);
  void CountBatch(absl::Span<const std::string_view> keys, absl::Span<uint32_t> out) const;
  // The same, asking `stop` between parts of kBatchPartKeys keys. Returns
  // how many keys were applied: all, or, when `stop` ended the batch, the
  // keys of the parts before, a prefix in request order (the results of the
  // rest are unspecified).
  size_t InsertBatch(absl::Span<const std::string_view> keys, bool if_absent,
                     absl::Span<InsertResult> out, StopCheck stop);
  size_t DeleteBatch(absl::Span<const std::string_view> keys, absl::Span<DeleteResult> out,
                     StopCheck stop);

  // Batches of pre-hashed keys (`Hash(key)`), for callers that hash while
  // parsing their input.
  void InsertHashed(absl::Span<const uint64_t> hashes, bool if_absent,
                    absl::Span<InsertResult> out);
  void LookupHashed(absl::Span<const uint64_t> hashes, absl::Span<bool> out) const;
  void DeleteHashed(absl::Span<const uint64_t> hashes, absl::Span<DeleteResult> out);
  void CountHashed(absl::Span<const uint64_t> hashes, absl::Span<uint32_t> out) const;
  size_t InsertHashed(absl::Span<const uint64_t> hashes, bool if_absent,
                      absl::Span<InsertResult> out, StopCheck stop);
  size_t DeleteHashed(absl::Span<const uint64_t> hashes, absl::Span<DeleteResult> out,
                      StopCheck stop);

  // --- Logged writes and deterministic apply ---

  // The batch forms above, also handing each shard's part to `log` as it is
  // applied (see WriteLog). Applying the logged parts of any number of
  // concurrent batches with ApplyShardWrite, in the order of their
  // positions, to the filter as it was before them reproduces it exactly.
  size_t InsertBatch(absl::Span<const std::string_view> keys, bool if_absent,
                     absl::Span<InsertResult> out, StopCheck stop, WriteLog log);
  size_t DeleteBatch(absl::Span<const std::string_view> keys, absl::Span<DeleteResult> out,
                     StopCheck stop, WriteLog log);
  size_t InsertHashed(absl::Span<const uint64_t> hashes, bool if_absent,
                      absl::Span<InsertResult> out, StopCheck stop, WriteLog log);
  size_t DeleteHashed(absl::Span<const uint64_t> hashes, absl::Span<DeleteResult> out,
                      StopCheck stop, WriteLog log);
  // Applies a logged shard write at `position` (replay): false, changing
  // nothing, when the shard's position is already `position` or later (the
  // shard holds the write, e.g. it was loaded from a snapshot taken after
  // it). INVALID_ARGUMENT when the write cannot belong to this filter (shard
  // out of range, a hash of another shard).
  absl::StatusOr<bool> ApplyShardWrite(const ShardWrite& write, uint64_t position);
  // Applies writes[i] at positions[i] for every i, in order, each exactly as
  // ApplyShardWrite does, but with one prefetch pipeline across them: the
  // buckets of the next writes' keys are requested from memory while the
  // current write runs (a shard's part of a batch is often shorter than the
  // pipeline). Writes whose hashes follow each other in memory are looked
  // ahead into together. Returns how many changed a shard; when any write
  // is invalid, INVALID_ARGUMENT naming the first one's index, and none is
  // applied.
  absl::StatusOr<size_t> ApplyShardWrites(absl::Span<const ShardWrite> writes,
                                          absl::Span<const uint64_t> positions);

  // --- Whole batches at a log position (a replicated log) ---

  // Applies a batch that a log holds as one entry at `position` (cuckood's
  // cluster mode: a JetStream message), with InsertHashed's / DeleteHashed's
  // batch semantics and results, except that each shard's keys are applied
  // in one write section: a snapshot (ReadShardGenerations) then sees all of an entry's
  // keys of a shard or none, and the shard's position says which. A shard
  // whose position is already `position` or later holds the entry (it was
  // loaded from a snapshot taken after it) and is skipped: its keys'
  // results, which this call cannot know, are set to kInserted (kDeleted),
  // and *skipped (if given) counts them.
  // Applying the same entries in the same order to the same state gives the
  // same tables, counters and results on every replica; for a fixed filter
  // the results equal those of InsertHashed / DeleteHashed on the same state
  // (a growing shard may grow at another key than InsertHashed's parts of
  // kBatchPartKeys would: each path is replayed by itself).
  void InsertHashedAt(absl::Span<const uint64_t> hashes, bool if_absent,
                      absl::Span<InsertResult> out, uint64_t position, size_t* skipped = nullptr);
  void DeleteHashedAt(absl::Span<const uint64_t> hashes, absl::Span<DeleteResult> out,
                      uint64_t position, size_t* skipped = nullptr);

  // An identifier the owner gives the filter, saved in its snapshots
  // (cuckood: the log position of the filter's creation). 0 until set.
  uint64_t id() const { return id_.load(std::memory_order_acquire); }
  void set_id(uint64_t id) { id_.store(id, std::memory_order_release); }

  // When the filter expires, as its owner counts time (cuckood: Unix
  // milliseconds); 0: never. Saved in its snapshots. The filter itself does
  // nothing at that time: its owner drops it (cuckood logs the drop, so
  // that every replay and every replica drops it at the same position).
  int64_t expire_at() const { return expire_at_.load(std::memory_order_acquire); }
  // Sets it (0 clears it). A change counts as one of changes(), so that
  // the next snapshot of changed filters writes the filter again.
  void set_expire_at(int64_t expire_at) {
    if (expire_at_.exchange(expire_at, std::memory_order_acq_rel) != expire_at) {
      expiry_changes_.fetch_add(1, std::memory_order_release);
    }
  }
  // set_expire_at's changes so far (part of changes()). A snapshot reads
  // this before expire_at(), so it never counts a change it does not hold.
  uint64_t expiry_changes() const { return expiry_changes_.load(std::memory_order_acquire); }

  FilterStats Stats() const;
  uint64_t items() const;
  uint64_t memory_bytes() const { return memory_bytes_.load(std::memory_order_relaxed); }

  // --- Growth (FilterShape::growing(), docs/GROWTH.md) ---
  //
  // A shard of a growing filter holds up to GenerationSchedule(shape()).size()
  // tables. Inserts go to the newest; when its kick chain fails (the table
  // is full, never because one key has 2b copies), the shard adds the next
  // generation (no lock but its own is taken) and the keys that did not fit
  // go there. kFull only once the shard has every generation of the
  // schedule. Lookups and counts check every generation; a delete removes
  // the key's copy when one generation alone holds its fingerprint, and
  // nothing (answering kDeleted) when several do: one of them may be another
  // key's, and removing that would make it a false negative. Growth is
  // deterministic: the same writes on the same state grow the same way
  // (replay, replicas).

  // Called with the bytes of each table a shard adds, from the inserting
  // thread while it holds that shard's lock (keep it short: the registry
  // charges the bytes to its memory budget). Set it before the filter is
  // shared with other threads.
  void set_growth_listener(std::function<void(uint64_t bytes)> listener) {
    growth_listener_ = std::move(listener);
  }
  // Tables shard `i` has now (1 for a fixed filter).
  uint32_t ShardGenerations(uint32_t i) const;
  // The most items shard `i` may hold: its share of max_capacity (the
  // shards' shares add up to max_capacity exactly, the first
  // max_capacity % shards of them one more than the rest); no limit
  // (UINT64_MAX) for a fixed filter or one without max_capacity. An insert
  // into a shard that holds its share answers kFull without touching the
  // tables; a batch that reaches it part-way applies its keys of the shard in
  // request order up to the share and answers kFull for the rest. Per
  // shard, so that it is deterministic: a shard's writes are applied in log
  // order under its own lock (replay and replicas give the same results).
  uint64_t ShardCeiling(uint32_t i) const;

  // Successful inserts plus successful deletes (plus changes of expire_at())
  // since the filter was created or loaded: a clock of changes, for "has this changed since its
  // snapshot?" (the server's persistence keeps the value each snapshot holds).
  uint64_t changes() const;

  // --- Snapshot support (core/snapshot.h; loading is core/internal/filter_loading.h) ---

  // A shard's counters, taken with a copy of its table.
  struct ShardState {
    uint64_t items = 0;
    uint64_t rng_state = 0;
    uint64_t changes = 0;
    // The position of the last logged write applied to the shard (WriteLog,
    // ApplyShardWrite); 0 when none was.
    uint64_t position = 0;
  };
  // Copies shard `i`'s packed table (shape().table_bytes_per_shard() bytes)
  // into `dst` holding only that shard's shared lock: writers to the other
  // shards go on; writers to shard `i` wait for the copy, not for any I/O.
  ShardState CopyShard(uint32_t i, uint8_t* dst) const;
  // Runs fn(table bytes, counters) holding shard `i`'s shared lock: writers
  // to shard `i` wait until fn returns (readers do not). For writing a shard
  // too large to copy.
  void ReadShard(uint32_t i,
                 absl::FunctionRef<void(absl::Span<const uint8_t>, const ShardState&)> fn) const;
  // For a filter no other thread can see yet: sets every shard's position
  // to `position` (a snapshot imported from another log, whose positions
  // mean nothing in this one).
  void SetShardPositionsForLoad(uint64_t position);
  // Every shard's position (ShardState::position), in shard order.
  std::vector<uint64_t> ShardPositions() const;

  // Generations, for snapshots of growing filters. The calls above see
  // generation 0 only; these see every generation.
  struct GenerationView {
    uint32_t fingerprint_bits = 0;
    uint64_t buckets = 0;
    absl::Span<const uint8_t> bytes;  // The packed slots.
    uint64_t items = 0;
    uint64_t rng_state = 0;
  };
  // Runs fn(generations, counters) holding shard `i`'s shared lock (as
  // ReadShard): generations[g] is the shard's g-th table; counters.items is
  // their sum.
  void ReadShardGenerations(
      uint32_t i,
      absl::FunctionRef<void(absl::Span<const GenerationView>, const ShardState&)> fn) const;

 private:
  friend class internal::FilterLoading;

  // --- Loading (core/internal/filter_loading.h: snapshots) ---

  // For a filter that no other thread can see yet (being loaded): shard
  // `i`'s table bytes to fill in, and its counters.
  absl::Span<uint8_t> MutableShardBytesForLoad(uint32_t i);
  void RestoreShardForLoad(uint32_t i, uint64_t items, uint64_t rng_state, uint64_t position = 0);
  // For a filter being loaded: the first bucket of shard `i` that its table
  // kind can never hold, or -1 (see CuckooTable::FirstInvalidBucket).
  int64_t FirstInvalidBucketForLoad(uint32_t i);
  // For a filter being loaded: gives shard `i` generations 1 .. count - 1 of
  // the schedule (empty). INVALID_ARGUMENT when count is 0 or more than the
  // schedule has, or the shard has more already; RESOURCE_EXHAUSTED when
  // the memory cannot be had. Calls the growth listener.
  absl::Status GrowShardForLoad(uint32_t i, uint32_t count);
  // For a filter being loaded: generation `g` of shard `i` (g <
  // ShardGenerations(i)): its bytes to fill in, its counters, and the first
  // bucket its table kind can never hold, or -1. RestoreShardForLoad sets
  // generation 0's counters and the shard's position.
  absl::Span<uint8_t> MutableGenerationBytesForLoad(uint32_t i, uint32_t g);
  void RestoreGenerationForLoad(uint32_t i, uint32_t g, uint64_t items, uint64_t rng_state);
  int64_t FirstInvalidGenerationBucketForLoad(uint32_t i, uint32_t g);

  // One table, its lock, and a sequence counter that lets lookups skip the
  // lock: a reader notes the counter, reads, and accepts what it read only if
  // the counter was even (no writer inside) and unchanged; otherwise it reads
  // again under the shared lock. Readers then write no shared memory at all,
  // so lookups of different threads (and successive lookups of one thread)
  // overlap their cache misses instead of serialising on the lock's atomic
  // read-modify-writes. Table words are accessed atomically (cuckoo_table.cc),
  // so the racing reads are well defined.
  struct Shard {
    explicit Shard(CuckooTable t) : table_bytes(t.bytes().data()), table(std::move(t)) {}

    // Runs fn(table), or fn(table, position), with the table (and its
    // position) to itself; returns fn's result.
    template <typename Fn>
    auto Write(Fn fn) {
      WriterLock lock(&mu);
      const uint64_t s = seq.load(std::memory_order_relaxed);
      seq.store(s + 1, std::memory_order_relaxed);
      std::atomic_thread_fence(std::memory_order_release);
      struct Publish {  // Also on the way out of fn.
        Shard* shard;
        uint64_t next;
        uint64_t items_before;
        ~Publish() {
          // A write section only inserts or only deletes, so the change in
          // items is the number of keys it inserted or deleted. Only
          // writers, holding mu, change the counters: plain loads and
          // stores, no atomic read-modify-write.
          const uint64_t now = shard->TotalItems();
          shard->changes.store(shard->changes.load(std::memory_order_relaxed) +
                                   (now > items_before ? now - items_before : items_before - now),
                               std::memory_order_relaxed);
          shard->items.store(now, std::memory_order_relaxed);
          shard->seq.store(next, std::memory_order_release);
        }
      } publish{this, s + 2, TotalItems()};
      if constexpr (std::is_invocable_v<Fn, CuckooTable&, uint64_t&>) {
        return fn(table, position);
      } else {
        return fn(table);
      }
    }

    // Runs fn(table) for reading, lock-free unless a writer interferes, in
    // which case fn runs again under the shared lock. fn must only write
    // its own outputs (it may run twice).
    template <typename Fn>
    void Read(Fn fn) const ABSL_NO_THREAD_SAFETY_ANALYSIS {
      const uint64_t s = seq.load(std::memory_order_acquire);
      if ((s & 1) == 0) {
        fn(table);
        std::atomic_thread_fence(std::memory_order_acquire);
        if (seq.load(std::memory_order_relaxed) == s) return;
      }
      ReaderLock lock(&mu);
      fn(table);
    }

    // One lock-free attempt at a single-key lookup in generation 0: true,
    // with *found set, when the shard has that one table and no writer was
    // inside or came in between (Read's protocol, without a lambda or a
    // retry); false otherwise, and the caller reads again the long way.
    // No branch depends on the table's bytes, so consecutive calls overlap
    // their cache misses.
    bool TryMayContain(uint64_t h, bool* found) const ABSL_NO_THREAD_SAFETY_ANALYSIS {
      // Tables are only ever added: one added after this load belongs to
      // writes concurrent with this call, which it may or may not see. A
      // shard that has grown reads every generation (the caller's other
      // path).
      if (generations.load(std::memory_order_acquire) != 1) return false;
      const int r = table.MayContainUnderSequence(h, seq);
      *found = r > 0;
      return r >= 0;
    }

    // A single-key delete in a shard of a fixed filter: Write's protocol
    // with its counters updated directly (what Publish would compute).
    DeleteResult DeleteOne(uint64_t h) {
      WriterLock lock(&mu);
      const uint64_t s = seq.load(std::memory_order_relaxed);
      seq.store(s + 1, std::memory_order_relaxed);
      std::atomic_thread_fence(std::memory_order_release);
      const DeleteResult r = table.Delete(h);
      if (r == DeleteResult::kDeleted) {
        items.store(table.items(), std::memory_order_relaxed);
        changes.store(changes.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
        deletes.store(deletes.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
      }
      seq.store(s + 2, std::memory_order_release);
      return r;
    }

    // Generation g's table: 0 is `table`, later ones (growing filters) are
    // in `grown`. For writers (holding mu) and lock-free readers (who get
    // the tables published before their acquire of `generations`).
    const CuckooTable& Generation(uint32_t g) const ABSL_NO_THREAD_SAFETY_ANALYSIS {
      return g == 0 ? table : *grown[g - 1].load(std::memory_order_acquire);
    }
    CuckooTable& Generation(uint32_t g) ABSL_NO_THREAD_SAFETY_ANALYSIS {
      return g == 0 ? table : *grown[g - 1].load(std::memory_order_relaxed);
    }
    // Items in all generations; with mu held.
    uint64_t TotalItems() const ABSL_NO_THREAD_SAFETY_ANALYSIS {
      uint64_t n = table.items();
      const uint32_t k = generations.load(std::memory_order_relaxed);
      for (uint32_t g = 1; g < k; ++g) n += grown[g - 1].load(std::memory_order_relaxed)->items();
      return n;
    }

    // Where the table's slots live; fixed for the table's life, so batches
    // may prefetch from it without the lock.
    const uint8_t* const table_bytes;
    mutable SharedMutex mu;
    CuckooTable table ABSL_GUARDED_BY(mu);
    // Even when no writer is inside; bumped twice per write section.
    std::atomic<uint64_t> seq{0};
    // Mirrors table.items() so Stats() needs no lock.
    std::atomic<uint64_t> items{0};
    // Keys inserted or deleted so far (see changes()).
    std::atomic<uint64_t> changes{0};
    // Deletes answered kDeleted (FilterStats::deletes).
    std::atomic<uint64_t> deletes{0};
    // See ShardState::position.
    uint64_t position ABSL_GUARDED_BY(mu) = 0;
    // Tables, counting `table`: 1 for a fixed filter. Raised (release)
    // under mu only after the new table is in `grown`.
    std::atomic<uint32_t> generations{1};
    // Generations 1.. of a growing filter (grown[g - 1] is generation g),
    // written once each under mu; owned by `owned`, which only writers
    // holding mu touch.
    std::array<std::atomic<CuckooTable*>, kMaxGenerations - 1> grown{};
    std::vector<std::unique_ptr<CuckooTable>> owned;
  };

  // The shard-level operations over every generation; `t` is the shard's
  // generation 0 (its `table`), the caller holds the shard's lock for
  // writes (Shard::Write) or reads through Shard::Read. For a fixed filter
  // each is the table's own batch call.
  // `ceiling`: apply ShardCeiling(s) (a logged write says whether it was).
  void InsertInShard(Shard& shard, size_t s, CuckooTable& t, absl::Span<const uint64_t> h,
                     bool if_absent, absl::Span<InsertResult> r, const Lookahead& next, bool* full,
                     bool ceiling);
  // InsertInShard without the ceiling.
  void InsertInGenerations(Shard& shard, size_t s, CuckooTable& t, absl::Span<const uint64_t> h,
                           bool if_absent, absl::Span<InsertResult> r, const Lookahead& next,
                           bool* full);
  void DeleteInShard(Shard& shard, CuckooTable& t, absl::Span<const uint64_t> h,
                     absl::Span<DeleteResult> r, const Lookahead& next);
  // DeleteInShard without counting the deletes.
  void DeleteInGenerations(Shard& shard, CuckooTable& t, absl::Span<const uint64_t> h,
                           absl::Span<DeleteResult> r, const Lookahead& next);
  void LookupInShard(const Shard& shard, const CuckooTable& t, absl::Span<const uint64_t> h,
                     absl::Span<bool> r, const Lookahead& next) const;
  void CountInShard(const Shard& shard, const CuckooTable& t, absl::Span<const uint64_t> h,
                    absl::Span<uint32_t> r) const;
  // MayContain's other path: every generation of the shard, newest first,
  // under Read's protocol. Out of line, so that the common path saves no
  // registers for it.
  ABSL_ATTRIBUTE_NOINLINE bool MayContainInGenerations(const Shard& shard, uint64_t h) const;

  // Requests from memory the lines of h's two buckets in the shard's first
  // table. Needs no lock (it reads nothing): single-key writes call it
  // before taking the shard's lock, whose atomic read-modify-write would
  // otherwise keep the CPU from starting this key's misses while the
  // previous call's are outstanding.
  void PrefetchBuckets(const Shard& shard, uint64_t h) const;

  // Adds shard `s`'s next generation (with its lock held); false when the
  // schedule has no more or the memory cannot be had.
  bool Grow(Shard& shard, size_t s);

  // The batch forms' bodies; `log` may be null.
  size_t InsertHashedImpl(absl::Span<const uint64_t> hashes, bool if_absent,
                          absl::Span<InsertResult> out, StopCheck stop, const WriteLog* log);
  size_t DeleteHashedImpl(absl::Span<const uint64_t> hashes, absl::Span<DeleteResult> out,
                          StopCheck stop, const WriteLog* log);

  explicit CuckooFilter(const FilterShape& shape)
      : shape_(shape),
        layout_(shape.fingerprint_bits, shape.shard_bits, shape.buckets_per_shard),
        bucket_bits_(shape.bucket_bits()),
        schedule_(GenerationSchedule(shape)) {}

  // Bytes between consecutive shards' tables in tables_memory_.
  static uint64_t ShardStride(const FilterShape& shape);

  // Splits a batch into one run per shard; see the .cc.
  template <typename Result, typename Fn>
  void ForEachShard(absl::Span<const uint64_t> hashes, absl::Span<Result> out, Fn fn) const;
  // ApplyShardWrite's checks, and the write itself once checked.
  absl::Status CheckShardWrite(const ShardWrite& write) const;
  bool ApplyCheckedShardWrite(const ShardWrite& write, uint64_t position, const Lookahead& next);

  // LookupHashed's lock-free passes across shards; see the .cc. False when
  // it answered nothing.
  bool LookupAcrossShards(absl::Span<const uint64_t> hashes, absl::Span<bool> out) const;
  // Shard counts up to this, or up to the batch's key count, use the
  // lock-free, unsorted batch lookup (it reads every shard's counter twice).
  static constexpr size_t kMaxShardsForLookupAcross = 64;

  const FilterShape shape_;
  const HashLayout layout_;
  // Bits of one bucket of the first generation's tables.
  const uint32_t bucket_bits_;
  // Every generation a shard may get (one for a fixed filter).
  const std::vector<GenerationShape> schedule_;
  // Every shard's table, ShardStride() bytes apart.
  PageBuffer tables_memory_;
  // &shards_[i]->table, fixed after creation, for CuckooTable::LookupAcross.
  std::vector<const CuckooTable*> tables_;
  // MemoryBytes(shape_) plus every grown table.
  std::atomic<uint64_t> memory_bytes_{0};
  std::function<void(uint64_t)> growth_listener_;
  std::vector<std::unique_ptr<Shard>> shards_;
  std::atomic<uint64_t> id_{0};
  std::atomic<int64_t> expire_at_{0};
  std::atomic<uint64_t> expiry_changes_{0};  // set_expire_at's changes, in changes().
};

}  // namespace cuckoo

#endif  // CUCKOO_CORE_CUCKOO_FILTER_H_
