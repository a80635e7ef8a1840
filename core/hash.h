// Key hashing and the bit layout that turns one 64-bit hash into a shard,
// a bucket and a fingerprint.
//
// Every key is hashed once with XXH3-64 and a per-filter seed (stored in the
// filter's snapshot). The three derived values come from disjoint bits of that
// hash, so they are independent:
//
//   bit 63 ........................................................ bit 0
//   [ shard: s bits ][ bucket source: 64 - s - f bits ][ fingerprint: f bits ]
//
//   shard       = h >> (64 - s)                       (0 when s == 0)
//   fingerprint = h & (2^f - 1), with 0 mapped to 1   (0 means "empty slot")
//   bucket i1   = floor(y * m / 2^64), where y is the bucket source bits
//                 left-aligned in a 64-bit word (Lemire's "fastrange"), so any
//                 bucket count m works, not only powers of two.
//   bucket i2   = Alt(i1, fingerprint)
//   Alt(i, fp)  = (H(fp) - i) mod m, H(fp) = floor((fp * 0x9E3779B97F4A7C15
//                 mod 2^64) * m / 2^64). Alt(Alt(i, fp), fp) == i for every m,
//                 so an entry can move between its two buckets knowing only its
//                 fingerprint (partial-key cuckoo hashing with an involution
//                 instead of the paper's XOR, which needs m = 2^k).
//
// This layout is part of the snapshot format: changing anything here changes
// where keys live, so it must come with a new hash id (see kHashIdXxh3V1).
// tests/core/hash_layout_test.cc pins it with golden vectors.
#ifndef CUCKOO_CORE_HASH_H_
#define CUCKOO_CORE_HASH_H_

#include <cstdint>
#include <string_view>

#define XXH_INLINE_ALL
#include <xxhash.h>

namespace cuckoo {

// Identifies the (hash function, bit layout) pair above in snapshots.
inline constexpr uint32_t kHashIdXxh3V1 = 1;

// The hash of `key` under `seed`. Deterministic across processes, machines and
// builds (XXH3 output is specified to be portable).
inline uint64_t HashKey(std::string_view key, uint64_t seed) {
  // Keys of up to 16 bytes (ids, tokens, most keys) take XXH3's short-input
  // code inline: what XXH3_64bits_withSeed runs for them (the same secret,
  // the same result; hash_layout_test pins both paths), without the call
  // and the length dispatch of the general entry point. A single-key
  // lookup's instructions are what limits how many calls the CPU overlaps.
  if (key.size() <= 16) {
    return XXH3_len_0to16_64b(reinterpret_cast<const xxh_u8*>(key.data()), key.size(), XXH3_kSecret,
                              seed);
  }
  return XXH3_64bits_withSeed(key.data(), key.size(), seed);
}

// High 64 bits of the 128-bit product: maps a uniform 64-bit `x` onto [0, n).
inline uint64_t MulHi64(uint64_t x, uint64_t n) {
  return static_cast<uint64_t>((static_cast<unsigned __int128>(x) * n) >> 64);
}

// Derives shard, bucket and fingerprint from a key hash for one filter shape.
// Cheap to copy; all members are fixed when the filter is created.
class HashLayout {
 public:
  HashLayout() = default;
  // `fingerprint_bits` in [1, 32], `shard_bits` in [0, 16], `num_buckets` >= 1
  // (buckets per shard). Callers validate (see FilterOptions).
  HashLayout(uint32_t fingerprint_bits, uint32_t shard_bits, uint64_t num_buckets)
      : fp_bits_(fingerprint_bits),
        shard_bits_(shard_bits),
        num_buckets_(num_buckets),
        fp_mask_(fingerprint_bits >= 32 ? 0xFFFFFFFFu : (1u << fingerprint_bits) - 1),
        low_mask_((uint64_t{1} << (fingerprint_bits + shard_bits)) - 1) {}

  uint32_t fingerprint_bits() const { return fp_bits_; }
  uint32_t shard_bits() const { return shard_bits_; }
  uint64_t num_buckets() const { return num_buckets_; }

  uint32_t Shard(uint64_t h) const {
    return shard_bits_ == 0 ? 0 : static_cast<uint32_t>(h >> (64 - shard_bits_));
  }
  uint32_t Fingerprint(uint64_t h) const {
    uint32_t fp = static_cast<uint32_t>(h) & fp_mask_;
    return fp == 0 ? 1 : fp;
  }
  uint64_t Bucket(uint64_t h) const {
    return MulHi64((h << shard_bits_) & ~low_mask_, num_buckets_);
  }
  uint64_t AltBucket(uint64_t i, uint32_t fp) const {
    uint64_t base = MulHi64(uint64_t{fp} * 0x9E3779B97F4A7C15ull, num_buckets_);
    return base >= i ? base - i : base + num_buckets_ - i;
  }

 private:
  uint32_t fp_bits_ = 0;
  uint32_t shard_bits_ = 0;
  uint64_t num_buckets_ = 1;
  uint32_t fp_mask_ = 0;
  uint64_t low_mask_ = 0;
};

}  // namespace cuckoo

#endif  // CUCKOO_CORE_HASH_H_
