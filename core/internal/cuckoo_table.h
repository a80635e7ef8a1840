// CuckooTable: one (2,b) partial-key cuckoo hash table of f-bit fingerprints,
// the paper's cuckoo filter (Fan et al., CoNEXT 2014, Section 3) over
// pre-hashed keys. CuckooFilter shards keys over several of these.
//
// Storage (TableKind::kPacked) is m buckets x b slots x f bits, packed with
// no padding between buckets (a bucket may straddle a word or cache-line boundary), so memory is
// exactly ceil(m * b * f / 8) bytes plus up to 8 bytes of tail padding. A slot
// holding 0 is empty; fingerprints are never 0 (see hash.h). Buckets of up to
// 64 bits (b=4 with f <= 16, b=2 with f <= 32, b=8 with f <= 8) are matched
// with one SWAR compare on a 64-bit window; the common shapes (f in {8, 12,
// 16} x b in {2, 4, 8}) have code specialised at compile time. All table words
// are read and written with relaxed atomic accesses, so a lock-free reader
// racing a writer reads stale data, never undefined behaviour (CuckooFilter
// detects the race and reads again).
//
// A semi-sorted table (TableKind::kSemiSorted, b = 4, f >= 5; the paper's
// Section 5.2) keeps each bucket's fingerprints sorted and stores a bucket in
// 4f - 4 bits: the 12-bit code of the four top nibbles (core/internal/semi_sort.h),
// then the four low (f - 4)-bit parts in sorted order. Up to f = 16 its
// buckets are matched with one SWAR compare too, after spreading the decoded
// nibbles and the low parts into four 16-bit lanes. Writes decode a bucket,
// change it and encode it again; a slot number is a position in sorted
// order, so it can change when the bucket is written. Everything below holds
// for both kinds.
//
// Contract:
//   - MayContain(h) is true for every hash inserted and not since deleted: no
//     false negatives. It may be true for other hashes (false positive) with
//     probability about 2b * load / 2^f.
//   - Insert never loses a resident fingerprint. When the kick chain reaches
//     max_kicks the table is restored exactly as it was and kFull returned.
//     Inserting one key more than 2b times fails (kFull) for that key only,
//     at once (no kick chain: its 2b slots all hold its own copies).
//   - In a batch, once one key's kick chain has failed (the table is full),
//     the batch's later keys still take a free slot within two moves of
//     their buckets but no longer walk a kick chain: they are kFull. A
//     batch therefore costs at most one failed chain per table, however
//     many of its keys do not fit.
//   - Delete removes one copy of a matching fingerprint from either bucket.
//     Deleting a key that was never inserted may remove a colliding key's
//     fingerprint (a false negative for that key): only delete what you added.
//
// Memory: the slots, nothing else per table. The record of a kick chain
// (to undo it when it fails) is per thread, shared by every table the thread
// writes: at most kMaxMaxKicks steps (240 KiB) per thread.
//
// Thread safety: const methods may run concurrently with each other; other
// methods need exclusive access (CuckooFilter holds a lock per table). A const
// method racing a writer returns garbage but is safe to run; callers must
// detect the race (CuckooFilter uses a sequence counter) and retry.
#ifndef CUCKOO_CORE_INTERNAL_CUCKOO_TABLE_H_
#define CUCKOO_CORE_INTERNAL_CUCKOO_TABLE_H_

#include <atomic>
#include <bit>
#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "core/filter_options.h"
#include "core/hash.h"
#include "core/internal/page_buffer.h"
#include "core/results.h"

namespace cuckoo {

static_assert(std::endian::native == std::endian::little,
              "table bytes are little-endian on disk and in memory");

// Keys that follow a batch run in another table of the same shape (the next
// shards of a sharded batch), so the run's pipeline can prefetch their
// buckets before it ends: data[i] is the bytes() of hashes[i]'s table.
// Prefetching needs no lock on those tables: it reads nothing.
struct Lookahead {
  const uint64_t* hashes = nullptr;
  const uint8_t* const* data = nullptr;
  size_t size = 0;
};

class CuckooTable {
 public:
  // The table for one shard of `shape`, owning its memory. `rng_seed` seeds
  // the choice of kick victims (deterministic for a given seed and insert
  // order).
  static absl::StatusOr<CuckooTable> Create(const FilterShape& shape, uint64_t rng_seed);
  // Bytes Create will allocate for one shard of `shape`.
  static uint64_t AllocationBytes(const FilterShape& shape);
  // The same table in memory the caller owns: StorageBytes(shape) zeroed
  // bytes, 8-byte aligned, that outlive the table (CuckooFilter puts all its
  // shards in one mapping, so a dropped filter returns all of it at once).
  static absl::StatusOr<CuckooTable> CreateIn(const FilterShape& shape, uint64_t rng_seed,
                                              uint8_t* storage);
  // Bytes a table of one shard of `shape` needs: the slots and tail padding.
  static uint64_t StorageBytes(const FilterShape& shape);

  CuckooTable(CuckooTable&&) noexcept = default;
  CuckooTable& operator=(CuckooTable&&) noexcept = default;

  // `full` as for InsertBatch below: a single-key insert that is part of a
  // batch applied key by key.
  InsertResult Insert(uint64_t hash, bool if_absent = false, bool* full = nullptr) {
    return ops_->insert(*this, hash, if_absent, full);
  }
  bool MayContain(uint64_t hash) const { return ops_->lookup(*this, hash); }
  // MayContain for a lock-free reader under a sequence counter (see
  // CuckooFilter): reads `seq` (acquire), looks the hash up, fences
  // (acquire) and reads `seq` again, all in one call with no frame to set
  // up. Returns the answer (0 or 1), or -1 when the counter was odd or
  // changed: a writer was inside, and the answer may be wrong.
  int MayContainUnderSequence(uint64_t hash, const std::atomic<uint64_t>& seq) const {
    return ops_->lookup_under_sequence(*this, hash, seq);
  }
  DeleteResult Delete(uint64_t hash) { return ops_->remove(*this, hash); }
  // Number of slots in the key's two buckets holding its fingerprint: the
  // copies inserted, plus any colliding keys. An estimate, never an undercount.
  uint32_t ApproximateCount(uint64_t hash) const;

  // Batched forms: same results as calling the single-key form for each hash in
  // order, but prefetch both buckets of keys further ahead (continuing into
  // `next`) so the memory misses of many keys overlap. `out.size()` must equal
  // `hashes.size()`.
  //
  // InsertBatch's `full` carries "a kick chain failed" from one call to the
  // next (a batch processed in parts): when *full is true no key walks a
  // chain, and it is set when a chain fails. Null: this call alone.
  void InsertBatch(absl::Span<const uint64_t> hashes, bool if_absent, absl::Span<InsertResult> out,
                   const Lookahead& next = {}, bool* full = nullptr) {
    bool local = false;
    ops_->insert_batch(*this, hashes, if_absent, out, next, full != nullptr ? full : &local);
  }
  void LookupBatch(absl::Span<const uint64_t> hashes, absl::Span<bool> out,
                   const Lookahead& next = {}) const {
    ops_->lookup_batch(*this, hashes, out, next);
  }
  void DeleteBatch(absl::Span<const uint64_t> hashes, absl::Span<DeleteResult> out,
                   const Lookahead& next = {}) {
    ops_->delete_batch(*this, hashes, out, next);
  }

  // Looks up hashes that each belong to one of several tables of the same
  // shape: hashes[i] is looked up in tables[layout().Shard(hashes[i])]. One
  // prefetch pipeline over the whole batch, in request order, so a sharded
  // batch needs no grouping by shard. The caller makes the access safe (see
  // CuckooFilter::LookupHashed).
  static void LookupAcross(absl::Span<const CuckooTable* const> tables,
                           absl::Span<const uint64_t> hashes, absl::Span<bool> out) {
    tables[0]->ops_->lookup_across(tables, hashes, out);
  }

  const HashLayout& layout() const { return layout_; }
  uint32_t fingerprint_bits() const { return f_; }
  uint32_t bucket_size() const { return b_; }
  uint64_t num_buckets() const { return layout_.num_buckets(); }
  uint64_t num_slots() const { return layout_.num_buckets() * b_; }
  uint64_t items() const { return items_; }
  double load_factor() const { return static_cast<double>(items_) / num_slots(); }
  // Bytes the table allocated for its slots (rounded up to pages for large
  // tables); 0 for a table in its caller's memory (CreateIn).
  uint64_t allocated_bytes() const { return buf_.allocated_bytes(); }
  bool huge_pages() const { return buf_.huge_pages(); }

  // The packed slots, ceil(m * b * f / 8) bytes, for snapshots.
  absl::Span<const uint8_t> bytes() const { return {data_, byte_size_}; }
  // For snapshots (core/snapshot.h): the kick-victim generator's state, and
  // the writable slots and counters of a table being restored, which no other
  // thread may be using.
  uint64_t rng_state() const { return rng_; }
  // mutable_bytes() maps all of the pages of a table that owns its memory
  // first (see PageBuffer::Prefault): the caller is about to overwrite every
  // byte.
  absl::Span<uint8_t> mutable_bytes() {
    buf_.Prefault(0, byte_size_);
    return {data_, byte_size_};
  }
  void RestoreCounters(uint64_t items, uint64_t rng_state) {
    items_ = items;
    // Exactly the state saved (an even state is as valid as an odd one: a
    // replay after a load must draw the victims the live run drew); only 0,
    // which xorshift never reaches, is replaced.
    rng_ = rng_state != 0 ? rng_state : 1;
  }
  // Fingerprint in `slot` of `bucket` (0 = empty). For tests and tools. In a
  // semi-sorted table a bucket's slots are in ascending order.
  uint32_t SlotValue(uint64_t bucket, uint32_t slot) const;

  TableKind table_kind() const { return kind_; }
  // For loading snapshots: the first bucket that a semi-sorted table would
  // never hold (a code >= 3876, or fingerprints out of sorted order), or -1
  // if there is none. Always -1 for a packed table, where any bits are valid.
  int64_t FirstInvalidBucket() const { return ops_->first_invalid_bucket(*this); }

 private:
  struct Ops {
    InsertResult (*insert)(CuckooTable&, uint64_t, bool, bool*);
    bool (*lookup)(const CuckooTable&, uint64_t);
    int (*lookup_under_sequence)(const CuckooTable&, uint64_t, const std::atomic<uint64_t>&);
    DeleteResult (*remove)(CuckooTable&, uint64_t);
    void (*insert_batch)(CuckooTable&, absl::Span<const uint64_t>, bool, absl::Span<InsertResult>,
                         const Lookahead&, bool*);
    void (*lookup_batch)(const CuckooTable&, absl::Span<const uint64_t>, absl::Span<bool>,
                         const Lookahead&);
    void (*delete_batch)(CuckooTable&, absl::Span<const uint64_t>, absl::Span<DeleteResult>,
                         const Lookahead&);
    void (*lookup_across)(absl::Span<const CuckooTable* const>, absl::Span<const uint64_t>,
                          absl::Span<bool>);
    int64_t (*first_invalid_bucket)(const CuckooTable&);
  };
  template <uint32_t kF, uint32_t kB, bool kSemiSorted>
  friend struct TableImpl;
  // One swap of a kick chain: `placed` went into `slot` of `bucket`, evicting
  // `victim`. Undone by putting `victim` back in place of `placed`.
  struct KickStep {
    uint64_t bucket;
    uint32_t slot;
    uint32_t victim;
    uint32_t placed;
  };

  CuckooTable() = default;
  // Everything of Create and CreateIn but the memory.
  static absl::StatusOr<CuckooTable> Init(const FilterShape& shape, uint64_t rng_seed);
  static const Ops* SelectOps(uint32_t fingerprint_bits, uint32_t bucket_size, TableKind kind);
  uint64_t NextRandom() {
    // xorshift64*: fast, and good enough to pick kick victims.
    rng_ ^= rng_ >> 12;
    rng_ ^= rng_ << 25;
    rng_ ^= rng_ >> 27;
    return rng_ * 0x2545F4914F6CDD1Dull;
  }

  const Ops* ops_ = nullptr;
  HashLayout layout_;
  uint32_t f_ = 0;
  uint32_t b_ = 0;
  TableKind kind_ = TableKind::kPacked;
  uint32_t max_kicks_ = 0;
  uint64_t items_ = 0;
  uint64_t rng_ = 0;
  uint64_t byte_size_ = 0;
  uint8_t* data_ = nullptr;  // The slots: in buf_, or in the caller's memory.
  PageBuffer buf_;           // Empty for CreateIn.
};

}  // namespace cuckoo

#endif  // CUCKOO_CORE_INTERNAL_CUCKOO_TABLE_H_
