#include "core/internal/cuckoo_table.h"

#include <array>
#include <cstring>
#include <vector>

#include "absl/base/attributes.h"
#include "absl/base/config.h"
#include "absl/status/status.h"
#include "absl/strings/str_format.h"
#include "core/internal/prefetch.h"
#include "core/internal/semi_sort.h"

namespace cuckoo {
namespace {

// Keys whose buckets are prefetched ahead of the key being processed: enough
// to keep a core's miss buffers full (two lines per key). Measured on a 1 GiB
// table: 16 -> 48.7, 32 -> 54.4, 64 -> 51.9 M lookups/s.
constexpr size_t kPrefetchDistance = 32;

// Slots are accessed through the aligned 64-bit words holding them; the tail
// padding rounds the table up to whole words.
constexpr size_t kTailPadding = 8;

// Writers store whole table words atomically (relaxed: plain moves on x86),
// and readers load aligned words the same way, so lock-free readers racing a
// writer (see CuckooFilter's sequence lock) read stale or torn buckets; the
// sequence check makes them retry. The one exception is LoadUnaligned below.
inline uint64_t LoadWord(const uint64_t* w) { return __atomic_load_n(w, __ATOMIC_RELAXED); }
inline void StoreWord(uint64_t* w, uint64_t v) { __atomic_store_n(w, v, __ATOMIC_RELAXED); }

// Eight bytes at any address, in one unaligned load. Used to read whole-byte
// buckets (below). Racing a writer's word stores, it may see some bytes old
// and some new, as two word loads would; the reader's sequence check throws
// such a read away. It is a plain load because no C++ atomic may be
// unaligned; ThreadSanitizer builds read aligned words instead, so that the
// tool sees only atomic accesses on both sides (see kWindowLoads).
inline uint64_t LoadUnaligned(const uint8_t* p) {
  uint64_t v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

#if defined(ABSL_HAVE_THREAD_SANITIZER)
constexpr bool kWindowLoads = false;
#else
constexpr bool kWindowLoads = true;
#endif

// semi_sort::kDecode with nibble k moved to bits 16k + 12 (see Lanes).
constexpr std::array<uint64_t, 1u << semi_sort::kCodeBits> kLaneNibbles = [] {
  std::array<uint64_t, 1u << semi_sort::kCodeBits> t{};
  for (uint32_t c = 0; c < t.size(); ++c) {
    for (uint32_t k = 0; k < 4; ++k) {
      t[c] |= uint64_t{(semi_sort::kDecode[c] >> (4 * k)) & 0xFu} << (16 * k + 12);
    }
  }
  return t;
}();

}  // namespace

// The table's operations for fingerprint width kF and bucket size kB, or, when
// either is 0, for the widths stored in the table (the generic path); for
// semi-sorted buckets when kSemiSorted (then kB is 4).
template <uint32_t kF, uint32_t kB, bool kSemiSorted = false>
struct TableImpl {
  static_assert(!kSemiSorted || kB == 4, "semi-sorted buckets have 4 slots");
  const CuckooTable& t;
  // The slots: t's own, or (LookupAcross) another table's of t's shape.
  const uint8_t* const base = t.data_;

  uint32_t f() const {
    if constexpr (kF != 0) return kF;
    return t.f_;
  }
  uint32_t b() const {
    if constexpr (kB != 0) return kB;
    return t.b_;
  }
  uint32_t bucket_bits() const {
    if constexpr (kSemiSorted) return 4 * f() - semi_sort::kNibbleBits;
    return f() * b();
  }
  uint64_t fp_mask() const { return (uint64_t{1} << f()) - 1; }
  // Whole bucket in one 64-bit word: matched with SWAR instead of a loop. A
  // semi-sorted bucket is spread into 16-bit lanes, which hold up to f = 16.
  bool swar() const {
    if constexpr (kSemiSorted) return f() <= 16;
    return bucket_bits() <= 64;
  }
  // One bit at the bottom of every slot of a bucket.
  uint64_t lanes_lo() const {
    uint64_t lo = 0;
    for (uint32_t j = 0; j < b(); ++j) lo |= uint64_t{1} << (j * f());
    return lo;
  }

  const uint8_t* data() const { return base; }
  const uint64_t* words() const { return reinterpret_cast<const uint64_t*>(base); }
  uint64_t* mutable_words() const { return const_cast<uint64_t*>(words()); }

  // Table bits [bit, bit + n), n <= 64, in the low bits of the result (higher
  // bits are garbage). Reads the next word only when the range reaches into
  // it: an unconditional read would touch a cache line that was not
  // prefetched for one bucket in eight.
  ABSL_ATTRIBUTE_ALWAYS_INLINE uint64_t Bits(uint64_t bit, uint32_t n) const {
    const uint64_t* w = words() + (bit >> 6);
    uint32_t s = bit & 63;
    uint64_t spill = s + n > 64;
    // (x << 1) << (63 - s) is x << (64 - s), and 0 when s == 0.
    uint64_t hi = (LoadWord(w + spill) << 1) << (63 - s);
    return (LoadWord(w) >> s) | (hi & (0 - spill));
  }

  // Writes the low n bits of `value` to table bits [bit, bit + n), n <= 64.
  ABSL_ATTRIBUTE_ALWAYS_INLINE void SetBits(uint64_t bit, uint32_t n, uint64_t value) const {
    const uint64_t mask = n >= 64 ? ~uint64_t{0} : (uint64_t{1} << n) - 1;
    value &= mask;
    uint64_t* w = mutable_words() + (bit >> 6);
    uint32_t s = bit & 63;
    StoreWord(w, (LoadWord(w) & ~(mask << s)) | (value << s));
    if (s + n > 64) {  // The range continues in the next word.
      uint32_t done = 64 - s;
      StoreWord(w + 1, (LoadWord(w + 1) & ~(mask >> done)) | (value >> done));
    }
  }

  // The fingerprint in `slot` of `bucket` (for a semi-sorted bucket, the
  // slot-th smallest).
  ABSL_ATTRIBUTE_ALWAYS_INLINE uint32_t Get(uint64_t bucket, uint32_t slot) const {
    if constexpr (kSemiSorted) {
      uint32_t v[4];
      Decode(bucket, v);
      return v[slot];
    }
    return static_cast<uint32_t>(Bits((bucket * b() + slot) * f(), f()) & fp_mask());
  }
  // All b() fingerprints of `bucket`, in slot order.
  ABSL_ATTRIBUTE_ALWAYS_INLINE void Slots(uint64_t bucket, uint32_t* out) const {
    if constexpr (kSemiSorted) {
      Decode(bucket, out);
    } else {
      for (uint32_t j = 0; j < b(); ++j) out[j] = Get(bucket, j);
    }
  }
  // Replaces `old_value`, which is in `slot` of `bucket`, with `value`. A
  // packed table writes the slot; a semi-sorted one replaces a copy of
  // `old_value` (slot positions move when a bucket is re-sorted, but the
  // multiset is what matters) and re-encodes the bucket.
  ABSL_ATTRIBUTE_ALWAYS_INLINE void Put(uint64_t bucket, uint32_t slot, uint32_t old_value,
                                        uint32_t value) const {
    if constexpr (kSemiSorted) {
      uint32_t v[4];
      Decode(bucket, v);
      if (v[slot] != old_value) {
        for (uint32_t j = 0; j < 4; ++j) {
          if (v[j] == old_value) {
            slot = j;
            break;
          }
        }
      }
      if (value == 0) {
        // A delete: the entries below `slot` move up one place and the 0
        // goes first, which keeps the bucket sorted without a sort.
        for (; slot > 0; --slot) v[slot] = v[slot - 1];
        v[0] = 0;
        EncodeSorted(bucket, v);
      } else {
        v[slot] = value;
        Encode(bucket, v);
      }
    } else {
      SetBits((bucket * b() + slot) * f(), f(), value);
    }
  }
  // Puts `value` in `slot` of `bucket` and returns what was there.
  ABSL_ATTRIBUTE_ALWAYS_INLINE uint32_t Exchange(uint64_t bucket, uint32_t slot,
                                                 uint32_t value) const {
    if constexpr (kSemiSorted) {
      uint32_t v[4];
      Decode(bucket, v);
      const uint32_t old = v[slot];
      v[slot] = value;
      Encode(bucket, v);
      return old;
    }
    const uint32_t old = Get(bucket, slot);
    SetBits((bucket * b() + slot) * f(), f(), value);
    return old;
  }

  // Buckets whose width is known at compile time and that fit in one 64-bit
  // window wherever they start in a byte (for f * b in {16, 24, 32, 40, 48,
  // 56, 64} and the semi-sorted widths up to 60, among others) are read with
  // a single unaligned load instead of two aligned words and a funnel shift:
  // fewer instructions that wait on the cache miss, so the CPU keeps more
  // lookups in flight (on a 256 MiB table, single-key lookups went from 9.5
  // to 14-15 M/s, batched ones 1.43x).
  static constexpr uint32_t kBucketBits = kSemiSorted ? 4 * kF - semi_sort::kNibbleBits : kF * kB;
  // Highest bit offset within a byte at which a bucket can start.
  static constexpr uint32_t kMaxBitInByte = 8 - (kBucketBits % 8 == 0   ? 8
                                                 : kBucketBits % 4 == 0 ? 4
                                                 : kBucketBits % 2 == 0 ? 2
                                                                        : 1);
  static constexpr bool kWindowBucket =
      kF != 0 && kB != 0 && kBucketBits + kMaxBitInByte <= 64 && kWindowLoads;

  // A bucket's bits somewhere in a 64-bit word: they start at bit `shift`;
  // the bits above and below them are other buckets' (don't care).
  struct Window {
    uint64_t bits;
    uint32_t shift;
  };
  ABSL_ATTRIBUTE_ALWAYS_INLINE Window Load(uint64_t bucket) const {
    if constexpr (kWindowBucket) {
      // The eight bytes from the bucket's first byte: Prefetch requests the
      // lines of the first and the eighth, and the tail padding keeps the
      // last bucket's window in the table. Bytes past the bucket are other
      // buckets' (don't care). Whole-byte buckets start at bit 0 of the
      // window, a compile-time constant; so the lookup of a single key is a
      // load and a SWAR compare per bucket, as few instructions as the
      // out-of-order core needs to keep several calls' misses in flight.
      if constexpr (kBucketBits % 8 == 0) {
        return {LoadUnaligned(data() + bucket * (kBucketBits / 8)), 0};
      }
      const uint64_t bit = bucket * kBucketBits;
      return {LoadUnaligned(data() + (bit >> 3)), static_cast<uint32_t>(bit & 7)};
    }
    return {Bits(bucket * bucket_bits(), bucket_bits()), 0};
  }

  // Semi-sorted buckets. Bits of a bucket, from its start: the 12-bit code of
  // the four fingerprints' top nibbles, then each fingerprint's low r = f - 4
  // bits, smallest fingerprint first. Decode, Encode and the SWAR lane form.
  uint32_t low_bits() const { return f() - semi_sort::kNibbleBits; }

  // The bucket's fingerprints, ascending (in a table we wrote), and in
  // `*code_out` its 12-bit code if asked.
  ABSL_ATTRIBUTE_ALWAYS_INLINE void Decode(uint64_t bucket, uint32_t v[4],
                                           uint32_t* code_out = nullptr) const {
    const uint32_t r = low_bits();
    const uint64_t rmask = (uint64_t{1} << r) - 1;
    uint32_t code;
    uint64_t low[4];
    if (bucket_bits() <= 64) {
      const Window w = Load(bucket);
      const uint64_t x = w.bits >> w.shift;
      code = static_cast<uint32_t>(x);
      for (uint32_t k = 0; k < 4; ++k) low[k] = (x >> (semi_sort::kCodeBits + k * r)) & rmask;
    } else {
      const uint64_t base = bucket * bucket_bits();
      code = static_cast<uint32_t>(Bits(base, semi_sort::kCodeBits));
      for (uint32_t k = 0; k < 4; ++k) {
        low[k] = Bits(base + semi_sort::kCodeBits + k * r, r) & rmask;
      }
    }
    if (code_out != nullptr) *code_out = code & semi_sort::kCodeMask;
    const uint32_t nibbles = semi_sort::Decode(code);
    for (uint32_t k = 0; k < 4; ++k) {
      v[k] = static_cast<uint32_t>((((nibbles >> (4 * k)) & 0xF) << r) | low[k]);
    }
  }
  // Sorts `v` and writes it as `bucket`.
  ABSL_ATTRIBUTE_ALWAYS_INLINE void Encode(uint64_t bucket, uint32_t v[4]) const {
    // A sorting network on four values.
    auto order = [v](int i, int j) {
      const uint32_t lo = std::min(v[i], v[j]);
      v[j] = std::max(v[i], v[j]);
      v[i] = lo;
    };
    order(0, 2);
    order(1, 3);
    order(0, 1);
    order(2, 3);
    order(1, 2);
    EncodeSorted(bucket, v);
  }
  // Writes `v`, already ascending, as `bucket`.
  ABSL_ATTRIBUTE_ALWAYS_INLINE void EncodeSorted(uint64_t bucket, const uint32_t v[4]) const {
    const uint32_t r = low_bits();
    const uint32_t code = semi_sort::Encode(v[0] >> r, v[1] >> r, v[2] >> r, v[3] >> r);
    const uint64_t base = bucket * bucket_bits();
    if (bucket_bits() <= 64) {
      uint64_t x = code;
      for (uint32_t k = 0; k < 4; ++k) {
        x |= (uint64_t{v[k]} & ((uint64_t{1} << r) - 1)) << (semi_sort::kCodeBits + k * r);
      }
      SetBits(base, bucket_bits(), x);
    } else {
      SetBits(base, semi_sort::kCodeBits, code);
      for (uint32_t k = 0; k < 4; ++k) SetBits(base + semi_sort::kCodeBits + k * r, r, v[k]);
    }
  }
  // A fingerprint in a 16-bit lane (f <= 16): nibble in bits 12-15, low bits
  // from bit 0. One-to-one, so lanes compare like fingerprints.
  ABSL_ATTRIBUTE_ALWAYS_INLINE uint64_t Lane(uint32_t fp) const {
    return (uint64_t{fp >> low_bits()} << 12) | (fp & ((uint64_t{1} << low_bits()) - 1));
  }
  // The bucket's four fingerprints in Lane form, slot k in bits [16k, 16k+16).
  ABSL_ATTRIBUTE_ALWAYS_INLINE uint64_t Lanes(uint64_t bucket) const {
    const Window w = Load(bucket);
    const uint64_t x = w.bits >> w.shift;
    // Nibbles n0..n3 at bits 16k + 12.
    const uint64_t n = kLaneNibbles[x & semi_sort::kCodeMask];
    // Low parts (packed r bits apart) to bits 16k.
    const uint32_t r = low_bits();
    const uint64_t one = (uint64_t{1} << r) - 1;
    const uint64_t two = (uint64_t{1} << (2 * r)) - 1;
    uint64_t low = x >> semi_sort::kCodeBits;
    low = (low & two) | (((low >> (2 * r)) & two) << 32);
    const uint64_t ones = one | (one << 32);
    low = (low & ones) | (((low >> r) & ones) << 16);
    return n | low;
  }

  // First slot of `bucket` equal to `value`, or -1. `value` 0 finds a free slot.
  ABSL_ATTRIBUTE_ALWAYS_INLINE int Find(uint64_t bucket, uint32_t value) const {
    if (swar()) {
      // The lowest flagged lane is the first slot holding `value` (only
      // lanes above a match can be flagged spuriously).
      const uint64_t z = SwarMatch(bucket, value);
      const int lane_bits = kSemiSorted ? 16 : static_cast<int>(f());
      return z == 0 ? -1 : std::countr_zero(z) / lane_bits;
    }
    if constexpr (kSemiSorted) {
      uint32_t v[4];
      Decode(bucket, v);
      for (uint32_t j = 0; j < 4; ++j) {
        if (v[j] == value) return static_cast<int>(j);
      }
      return -1;
    }
    for (uint32_t j = 0; j < b(); ++j) {
      if (Get(bucket, j) == value) return static_cast<int>(j);
    }
    return -1;
  }
  // Whether some slot of `bucket` holds `value`: Find without the slot
  // number (no count of trailing zeros, no division), the lookups' match.
  ABSL_ATTRIBUTE_ALWAYS_INLINE bool Contains(uint64_t bucket, uint32_t value) const {
    return Match(bucket, value) != 0;
  }
  // Nonzero iff `bucket` holds `value` (SwarMatch's lanes for SWAR buckets).
  ABSL_ATTRIBUTE_ALWAYS_INLINE uint64_t Match(uint64_t bucket, uint32_t value) const {
    if (swar()) return SwarMatch(bucket, value);
    return Find(bucket, value) >= 0 ? 1 : 0;
  }
  // For SWAR buckets: one compare of all slots, the high bit of each lane
  // holding `value` set, lanes from bit 0 (16 bits each when semi-sorted,
  // f() when packed). Nonzero exactly when some slot holds `value`, and the
  // lowest flagged lane does.
  ABSL_ATTRIBUTE_ALWAYS_INLINE uint64_t SwarMatch(uint64_t bucket, uint32_t value) const {
    if constexpr (kSemiSorted) {
      constexpr uint64_t kLo = 0x0001000100010001ull;
      constexpr uint64_t kHi = kLo << 15;
      const uint64_t x = Lanes(bucket) ^ (Lane(value) * kLo);
      return (x - kLo) & ~x & kHi;
    } else {
      // The bucket's lanes moved down to bit 0; bits above them are other
      // buckets' and cannot flag a lane (borrows only run upwards, `hi`
      // keeps only the bucket's lanes).
      const Window w = Load(bucket);
      const uint64_t lo = lanes_lo();
      const uint64_t hi = lo << (f() - 1);
      const uint64_t x = (w.bits >> w.shift) ^ (value * lo);
      return (x - lo) & ~x & hi;
    }
  }

  ABSL_ATTRIBUTE_ALWAYS_INLINE bool TryPlace(uint64_t bucket, uint32_t fp) const {
    if constexpr (kSemiSorted) {
      // Sorted: the bucket has a free slot iff its smallest entry is 0.
      uint32_t v[4];
      Decode(bucket, v);
      if (v[0] != 0) return false;
      v[0] = fp;
      Encode(bucket, v);
      return true;
    }
    int j = Find(bucket, 0);
    if (j < 0) return false;
    SetBits((bucket * b() + static_cast<uint32_t>(j)) * f(), f(), fp);
    return true;
  }

  // A bucket that a semi-sorted table we wrote can hold: a code < 3876 and
  // fingerprints in ascending order (so that it encodes to the same bits).
  bool ValidBucket(uint64_t bucket) const {
    if constexpr (kSemiSorted) {
      uint32_t v[4];
      uint32_t code;
      Decode(bucket, v, &code);
      return code < semi_sort::kCodes && v[0] <= v[1] && v[1] <= v[2] && v[2] <= v[3];
    }
    return true;
  }

  // Requests the cache line(s) that reading `bucket` touches: a bucket can
  // straddle two lines, and a window bucket is read as the eight bytes from
  // its first (see Load).
  ABSL_ATTRIBUTE_ALWAYS_INLINE void Prefetch(const uint8_t* base, uint64_t bucket) const {
    const uint64_t first = (bucket * bucket_bits()) >> 3;
    const uint64_t last =
        kWindowBucket ? first + 7 : (bucket * bucket_bits() + bucket_bits() - 1) >> 3;
    // Both ends, always: a branch on whether the bucket straddles two lines
    // is a coin flip the CPU mispredicts, and prefetching a line twice is
    // nearly free.
    PrefetchLine(base + first);
    PrefetchLine(base + last);
  }

  struct Place {
    uint64_t i1, i2;
    uint32_t fp;
  };
  ABSL_ATTRIBUTE_ALWAYS_INLINE Place Locate(uint64_t hash) const {
    const HashLayout& l = t.layout_;
    uint32_t fp = l.Fingerprint(hash);
    uint64_t i1 = l.Bucket(hash);
    return {i1, l.AltBucket(i1, fp), fp};
  }

  ABSL_ATTRIBUTE_ALWAYS_INLINE bool Lookup(const Place& p) const {
    // Both buckets, no short circuit: the two loads overlap and the branch on
    // a 50/50 outcome goes away (the two match words are or-ed, one test).
    return (Match(p.i1, p.fp) | Match(p.i2, p.fp)) != 0;
  }

  // Inserts p's fingerprint. With `walk` false, only a slot free within two
  // moves is taken (no random walk). Sets *walk_failed when a random walk
  // reached max_kicks.
  InsertResult Insert(const Place& p, bool if_absent, bool walk = true,
                      bool* walk_failed = nullptr) const {
    CuckooTable& mt = const_cast<CuckooTable&>(t);
    if (if_absent && Lookup(p)) return InsertResult::kAlreadyPresent;
    if (TryPlace(p.i1, p.fp) || TryPlace(p.i2, p.fp)) {
      ++mt.items_;
      return InsertResult::kInserted;
    }
    // Both buckets hold only this fingerprint (the key inserted 2b times):
    // every move would shuffle copies between them, so no chain can end.
    if (Count(p.i1, p.fp) + (p.i2 != p.i1 ? Count(p.i2, p.fp) : 0) ==
        (p.i2 != p.i1 ? 2 : 1) * b()) {
      return InsertResult::kFull;
    }
    const HashLayout& l = t.layout_;
    // One breadth-first level first: often one of the 2b residents can move
    // to its other bucket. Fetching all 2b of those buckets at once overlaps
    // their cache misses, where the random walk below waits for one miss per
    // kick: batched construction to 95% on 1 GiB went from 5.3 to 8.2 M/s.
    constexpr uint32_t kMaxSlots = 8;
    uint64_t alt[2][kMaxSlots];
    uint32_t resident[2][kMaxSlots];
    const uint64_t home[2] = {p.i1, p.i2};
    for (int side = 0; side < 2; ++side) {
      Slots(home[side], resident[side]);
      for (uint32_t j = 0; j < b(); ++j) {
        alt[side][j] = l.AltBucket(home[side], resident[side][j]);
        Prefetch(data(), alt[side][j]);
      }
    }
    for (int side = 0; side < 2; ++side) {
      for (uint32_t j = 0; j < b(); ++j) {
        if (TryPlace(alt[side][j], resident[side][j])) {
          Put(home[side], j, resident[side][j], p.fp);
          ++mt.items_;
          return InsertResult::kInserted;
        }
      }
    }
    // A second level the same way: the residents of those 2b (full) buckets
    // and their 2b * b alternates, all requested at once. A free slot there
    // ends a two-move chain after one more round trip to memory, where the
    // random walk waits for one round trip per kick (near 95% load, dozens).
    // Every bucket that the chain writes besides the free slot is full, so
    // no bucket can alias the free one.
    {
      uint64_t alt2[2][kMaxSlots][kMaxSlots];
      uint32_t resident2[2][kMaxSlots][kMaxSlots];
      for (int side = 0; side < 2; ++side) {
        for (uint32_t j = 0; j < b(); ++j) {
          Slots(alt[side][j], resident2[side][j]);
          for (uint32_t k = 0; k < b(); ++k) {
            alt2[side][j][k] = l.AltBucket(alt[side][j], resident2[side][j][k]);
            Prefetch(data(), alt2[side][j][k]);
          }
        }
      }
      for (int side = 0; side < 2; ++side) {
        for (uint32_t j = 0; j < b(); ++j) {
          for (uint32_t k = 0; k < b(); ++k) {
            if (TryPlace(alt2[side][j][k], resident2[side][j][k])) {
              // By value, not slot, for semi-sorted buckets: alt[side][j]
              // may be home[side] itself, re-sorted by the first Put.
              Put(alt[side][j], k, resident2[side][j][k], resident[side][j]);
              Put(home[side], j, resident[side][j], p.fp);
              ++mt.items_;
              return InsertResult::kInserted;
            }
          }
        }
      }
    }
    if (!walk) return InsertResult::kFull;
    // Random-walk eviction (paper Alg. 1), logging each swap so that a chain
    // that reaches max_kicks can be undone and no resident is lost. The log
    // is per thread: a table holds no scratch of its own.
    thread_local std::vector<CuckooTable::KickStep> path;
    path.clear();
    path.reserve(t.max_kicks_);
    uint64_t cur = (mt.NextRandom() & 1) ? p.i2 : p.i1;
    uint32_t carry = p.fp;
    for (uint32_t kick = 0; kick < t.max_kicks_; ++kick) {
      uint32_t slot = static_cast<uint32_t>(mt.NextRandom() % b());
      uint32_t victim = Exchange(cur, slot, carry);
      path.push_back({cur, slot, victim, carry});
      carry = victim;
      cur = l.AltBucket(cur, carry);
      if (TryPlace(cur, carry)) {
        ++mt.items_;
        return InsertResult::kInserted;
      }
    }
    for (auto it = path.rbegin(); it != path.rend(); ++it) {
      Put(it->bucket, it->slot, it->placed, it->victim);
    }
    if (walk_failed != nullptr) *walk_failed = true;
    return InsertResult::kFull;
  }

  DeleteResult Delete(const Place& p) const {
    for (uint64_t bucket : {p.i1, p.i2}) {
      int j = Find(bucket, p.fp);
      if (j >= 0) {
        Put(bucket, static_cast<uint32_t>(j), p.fp, 0);
        --const_cast<CuckooTable&>(t).items_;
        return DeleteResult::kDeleted;
      }
    }
    return DeleteResult::kNotFound;
  }

  // Runs `op(place, index)` for every hash, in order, with the buckets of the
  // key kPrefetchDistance ahead already requested from memory.
  template <typename Op>
  void Pipeline(absl::Span<const uint64_t> hashes, const Lookahead& next, Op op) const {
    const size_t n = hashes.size();
    Place ring[kPrefetchDistance];
    auto start = [&](size_t k) {
      Place p = Locate(hashes[k]);
      Prefetch(data(), p.i1);
      Prefetch(data(), p.i2);
      ring[k % kPrefetchDistance] = p;
    };
    // Keys after this run belong to other tables of the same shape: only
    // their buckets are requested, from those tables' memory.
    auto start_next = [&](size_t j) {
      Place p = Locate(next.hashes[j]);
      Prefetch(next.data[j], p.i1);
      Prefetch(next.data[j], p.i2);
    };
    for (size_t k = 0; k < n && k < kPrefetchDistance; ++k) start(k);
    for (size_t k = 0; k < n; ++k) {
      Place p = ring[k % kPrefetchDistance];
      if (size_t ahead = k + kPrefetchDistance; ahead < n) {
        start(ahead);
      } else if (ahead - n < next.size) {
        start_next(ahead - n);
      }
      op(p, k);
    }
  }

  // Entry points stored in CuckooTable::Ops.
  static InsertResult InsertOne(CuckooTable& t, uint64_t h, bool if_absent, bool* full) {
    TableImpl impl{t};
    return impl.Insert(impl.Locate(h), if_absent, full == nullptr || !*full, full);
  }
  static bool LookupOne(const CuckooTable& t, uint64_t h) {
    TableImpl impl{t};
    return impl.Lookup(impl.Locate(h));
  }
  static int LookupUnderSequence(const CuckooTable& t, uint64_t h,
                                 const std::atomic<uint64_t>& seq) {
    const uint64_t s = seq.load(std::memory_order_acquire);
    TableImpl impl{t};
    const bool found = impl.Lookup(impl.Locate(h));
    std::atomic_thread_fence(std::memory_order_acquire);
    // No branch on the table's bytes: the caller's next call can start its
    // misses before this one's arrive.
    return ((s & 1) | (seq.load(std::memory_order_relaxed) ^ s)) == 0 ? int{found} : -1;
  }
  static DeleteResult DeleteOne(CuckooTable& t, uint64_t h) {
    TableImpl impl{t};
    return impl.Delete(impl.Locate(h));
  }
  static void InsertMany(CuckooTable& t, absl::Span<const uint64_t> hashes, bool if_absent,
                         absl::Span<InsertResult> out, const Lookahead& next, bool* full) {
    TableImpl impl{t};
    impl.Pipeline(hashes, next, [&](const Place& p, size_t k) {
      out[k] = impl.Insert(p, if_absent, /*walk=*/!*full, full);
    });
  }
  static void LookupMany(const CuckooTable& t, absl::Span<const uint64_t> hashes,
                         absl::Span<bool> out, const Lookahead& next) {
    TableImpl impl{t};
    impl.Pipeline(hashes, next, [&](const Place& p, size_t k) { out[k] = impl.Lookup(p); });
  }
  static void DeleteMany(CuckooTable& t, absl::Span<const uint64_t> hashes,
                         absl::Span<DeleteResult> out, const Lookahead& next) {
    TableImpl impl{t};
    impl.Pipeline(hashes, next, [&](const Place& p, size_t k) { out[k] = impl.Delete(p); });
  }

  static void LookupAcross(absl::Span<const CuckooTable* const> tables,
                           absl::Span<const uint64_t> hashes, absl::Span<bool> out) {
    // Locating needs only the shape, which all the tables share.
    const TableImpl shape{*tables[0]};
    const HashLayout& l = tables[0]->layout_;
    struct Pending {
      Place place;
      const uint8_t* data;
    };
    Pending ring[kPrefetchDistance];
    auto start = [&](size_t k) {
      const uint8_t* data = tables[l.Shard(hashes[k])]->data_;
      Place p = shape.Locate(hashes[k]);
      shape.Prefetch(data, p.i1);
      shape.Prefetch(data, p.i2);
      ring[k % kPrefetchDistance] = {p, data};
    };
    const size_t n = hashes.size();
    for (size_t k = 0; k < n && k < kPrefetchDistance; ++k) start(k);
    for (size_t k = 0; k < n; ++k) {
      Pending p = ring[k % kPrefetchDistance];
      if (k + kPrefetchDistance < n) start(k + kPrefetchDistance);
      // The table's slots with the shape's code: no load from the table
      // object (one cache line per shard) on the way to the bucket.
      out[k] = TableImpl{*tables[0], p.data}.Lookup(p.place);
    }
  }

  static int64_t FirstInvalid(const CuckooTable& t) {
    if constexpr (!kSemiSorted) return -1;  // Any bits are a valid packed table.
    TableImpl impl{t};
    for (uint64_t i = 0; i < t.num_buckets(); ++i) {
      if (!impl.ValidBucket(i)) return static_cast<int64_t>(i);
    }
    return -1;
  }

  // Copies of `fp` in `bucket`.
  uint32_t Count(uint64_t bucket, uint32_t fp) const {
    uint32_t v[8];
    Slots(bucket, v);
    uint32_t n = 0;
    for (uint32_t j = 0; j < b(); ++j) n += v[j] == fp;
    return n;
  }

  static constexpr CuckooTable::Ops kOps = {&InsertOne,  &LookupOne,    &LookupUnderSequence,
                                            &DeleteOne,  &InsertMany,   &LookupMany,
                                            &DeleteMany, &LookupAcross, &FirstInvalid};
};

const CuckooTable::Ops* CuckooTable::SelectOps(uint32_t f, uint32_t b, TableKind kind) {
  if (kind == TableKind::kSemiSorted) {
    switch (f) {
      case 12:
        return &TableImpl<12, 4, true>::kOps;
      case 13:
        return &TableImpl<13, 4, true>::kOps;
      case 14:
        return &TableImpl<14, 4, true>::kOps;
      case 15:
        return &TableImpl<15, 4, true>::kOps;
      case 16:
        return &TableImpl<16, 4, true>::kOps;
    }
    return &TableImpl<0, 4, true>::kOps;
  }
  auto by_b = [b]<uint32_t kF>() -> const Ops* {
    switch (b) {
      case 2:
        return &TableImpl<kF, 2>::kOps;
      case 4:
        return &TableImpl<kF, 4>::kOps;
      case 8:
        return &TableImpl<kF, 8>::kOps;
    }
    return &TableImpl<0, 0>::kOps;
  };
  switch (f) {
    case 8:
      return by_b.template operator()<8>();
    case 12:
      return by_b.template operator()<12>();
    case 16:
      return by_b.template operator()<16>();
  }
  return &TableImpl<0, 0>::kOps;
}

uint64_t CuckooTable::StorageBytes(const FilterShape& shape) {
  return shape.table_bytes_per_shard() + kTailPadding;
}

uint64_t CuckooTable::AllocationBytes(const FilterShape& shape) {
  return PageBuffer::AllocationSize(StorageBytes(shape));
}

absl::StatusOr<CuckooTable> CuckooTable::Init(const FilterShape& shape, uint64_t rng_seed) {
  if (absl::Status s = ValidateShape(shape); !s.ok()) return s;
  CuckooTable t;
  t.layout_ = HashLayout(shape.fingerprint_bits, shape.shard_bits, shape.buckets_per_shard);
  t.f_ = shape.fingerprint_bits;
  t.b_ = shape.bucket_size;
  t.kind_ = shape.table_kind;
  t.max_kicks_ = shape.max_kicks;
  t.rng_ = rng_seed | 1;  // xorshift state must be non-zero.
  t.byte_size_ = shape.table_bytes_per_shard();
  t.ops_ = SelectOps(t.f_, t.b_, t.kind_);
  return t;
}

absl::StatusOr<CuckooTable> CuckooTable::Create(const FilterShape& shape, uint64_t rng_seed) {
  absl::StatusOr<CuckooTable> t = Init(shape, rng_seed);
  if (!t.ok()) return t;
  absl::StatusOr<PageBuffer> buf = PageBuffer::Allocate(StorageBytes(shape));
  if (!buf.ok()) return buf.status();
  t->buf_ = *std::move(buf);
  t->data_ = t->buf_.data();
  return t;
}

absl::StatusOr<CuckooTable> CuckooTable::CreateIn(const FilterShape& shape, uint64_t rng_seed,
                                                  uint8_t* storage) {
  absl::StatusOr<CuckooTable> t = Init(shape, rng_seed);
  if (!t.ok()) return t;
  t->data_ = storage;
  return t;
}

namespace {
template <typename Impl>
uint32_t CountIn(const Impl& impl, uint64_t hash) {
  auto p = impl.Locate(hash);
  return impl.Count(p.i1, p.fp) + (p.i2 != p.i1 ? impl.Count(p.i2, p.fp) : 0);
}
}  // namespace

uint32_t CuckooTable::ApproximateCount(uint64_t hash) const {
  if (kind_ == TableKind::kSemiSorted) return CountIn(TableImpl<0, 4, true>{*this}, hash);
  return CountIn(TableImpl<0, 0>{*this}, hash);
}

uint32_t CuckooTable::SlotValue(uint64_t bucket, uint32_t slot) const {
  if (kind_ == TableKind::kSemiSorted) return TableImpl<0, 4, true>{*this}.Get(bucket, slot);
  return TableImpl<0, 0>{*this}.Get(bucket, slot);
}

}  // namespace cuckoo
