// Baselines for filter_bench: a standard Bloom filter and a cache-line blocked
// Bloom filter (Putze, Sanders, Singler 2007), the two Bloom variants of the
// cuckoo filter paper's Table 3.
//
// Both take a key's 64-bit XXH3 hash (the same one the cuckoo filter uses),
// are sized to an exact number of bytes, and pick the k that minimises their
// false-positive rate for the expected number of items. All k bit positions
// come from that one hash, so a key costs one hash, as in the cuckoo filter:
// the standard filter by double hashing (Kirsch and Mitzenmacher 2006, probe
// i at a + i * b), the blocked one by repeated multiplication, because inside
// 512 bits double hashing measurably raises the false-positive rate (see
// InBlock).
//
// Insert-only. Inserts need exclusive access; lookups may run concurrently
// with each other. Tables come from PageBuffer, so large ones get transparent
// huge pages exactly like the cuckoo filter's tables.
#ifndef CUCKOO_BENCH_BLOOM_H_
#define CUCKOO_BENCH_BLOOM_H_

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <utility>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "core/hash.h"
#include "core/internal/page_buffer.h"
#include "core/internal/prefetch.h"

namespace cuckoo::bench {

// k probes anywhere in an array of m bits: up to k cache misses per lookup,
// fewer for absent keys (a lookup stops at the first clear bit).
class BloomFilter {
 public:
  // A filter of `bytes` bytes (rounded down to whole 64-bit words) for
  // `expected_items` keys.
  static absl::StatusOr<BloomFilter> Create(uint64_t bytes, uint64_t expected_items) {
    uint64_t words = std::max<uint64_t>(1, bytes / 8);
    absl::StatusOr<PageBuffer> buf = PageBuffer::Allocate(words * 8);
    if (!buf.ok()) return buf.status();
    return BloomFilter(*std::move(buf), words * 64, expected_items);
  }

  void Insert(uint64_t h) {
    uint64_t* w = words();
    Probes p(h, bits_);
    for (int i = 0; i < k_; ++i, p.Next()) {
      uint64_t bit = p.bit();
      w[bit >> 6] |= uint64_t{1} << (bit & 63);
    }
  }

  bool MayContain(uint64_t h) const {
    const uint64_t* w = words();
    Probes p(h, bits_);
    for (int i = 0; i < k_; ++i, p.Next()) {
      uint64_t bit = p.bit();
      if ((w[bit >> 6] & (uint64_t{1} << (bit & 63))) == 0) return false;
    }
    return true;
  }

  // Same results as one call per key, with every probe of the key kAhead
  // positions further on prefetched, so the misses of several keys overlap.
  void InsertBatch(absl::Span<const uint64_t> hashes) {
    for (size_t j = 0; j < std::min(kAhead, hashes.size()); ++j) PrefetchAll(hashes[j]);
    for (size_t i = 0; i < hashes.size(); ++i) {
      if (i + kAhead < hashes.size()) PrefetchAll(hashes[i + kAhead]);
      Insert(hashes[i]);
    }
  }
  void LookupBatch(absl::Span<const uint64_t> hashes, absl::Span<bool> out) const {
    for (size_t j = 0; j < std::min(kAhead, hashes.size()); ++j) PrefetchAll(hashes[j]);
    for (size_t i = 0; i < hashes.size(); ++i) {
      if (i + kAhead < hashes.size()) PrefetchAll(hashes[i + kAhead]);
      out[i] = MayContain(hashes[i]);
    }
  }

  int k() const { return k_; }
  uint64_t bytes() const { return bits_ / 8; }
  // (1 - e^(-kn/m))^k: the textbook estimate, accurate for large m.
  double ExpectedFalsePositiveRate(uint64_t items) const { return Fpr(k_, bits_, items); }

 private:
  // All k probes of a key are prefetched (k ~ 9 lines per key), so only a few
  // keys ahead. Batched lookups on 1 GiB, M/s: 4 keys 18.9, 8 keys 22.7,
  // 16 keys 21.7.
  static constexpr size_t kAhead = 8;

  // Probe i is at fastrange(a + i * b) over the m bits, with a = h and b = a
  // remix of h (odd), so the stride is independent of the first probe. With
  // b = h rotated by 32, tried first, 1 GiB at 12.6 bits/item measured an FPR
  // of 0.2424% against the model's 0.2310% (fewer bits set, and more
  // overlap with absent keys' probes, than at random); with the remix 0.2299%.
  class Probes {
   public:
    Probes(uint64_t h, uint64_t bits) : g_(h), step_(Remix(h) | 1), bits_(bits) {}
    uint64_t bit() const { return MulHi64(g_, bits_); }
    void Next() { g_ += step_; }

   private:
    // The splitmix64 finalizer: every output bit depends on every input bit.
    static uint64_t Remix(uint64_t x) {
      x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
      x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
      return x ^ (x >> 31);
    }

    uint64_t g_;
    uint64_t step_;
    uint64_t bits_;
  };

  static double Fpr(int k, uint64_t bits, uint64_t items) {
    return std::pow(-std::expm1(-static_cast<double>(k) * items / bits), k);
  }
  // The integer k with the lowest false-positive rate: floor or ceil of
  // ln 2 * m / n.
  static int OptimalK(uint64_t bits, uint64_t items) {
    double real_k = std::log(2.0) * bits / std::max<uint64_t>(1, items);
    int lo = std::clamp(static_cast<int>(std::min(real_k, 64.0)), 1, 64);
    return Fpr(lo, bits, items) <= Fpr(lo + 1, bits, items) ? lo : lo + 1;
  }

  BloomFilter(PageBuffer buf, uint64_t bits, uint64_t expected_items)
      : buf_(std::move(buf)), bits_(bits), k_(OptimalK(bits, expected_items)) {}

  void PrefetchAll(uint64_t h) const {
    const uint64_t* w = words();
    Probes p(h, bits_);
    for (int i = 0; i < k_; ++i, p.Next()) PrefetchLine(w + (p.bit() >> 6));
  }
  uint64_t* words() { return reinterpret_cast<uint64_t*>(buf_.data()); }
  const uint64_t* words() const { return reinterpret_cast<const uint64_t*>(buf_.data()); }

  PageBuffer buf_;
  uint64_t bits_;
  int k_;
};

// All k probes inside one 512-bit, cache-line aligned block chosen by the
// hash: one cache miss per lookup, paid for with a higher false-positive rate
// than a standard Bloom filter of the same size (block loads vary).
class BlockedBloomFilter {
 public:
  static constexpr uint64_t kBlockBits = 512;
  static constexpr uint64_t kBlockBytes = kBlockBits / 8;  // One cache line.

  // A filter of `bytes` bytes (rounded down to whole blocks) for
  // `expected_items` keys.
  static absl::StatusOr<BlockedBloomFilter> Create(uint64_t bytes, uint64_t expected_items) {
    uint64_t blocks = std::max<uint64_t>(1, bytes / kBlockBytes);
    // PageBuffer aligns to 64 bytes, so every block is exactly one line.
    absl::StatusOr<PageBuffer> buf = PageBuffer::Allocate(blocks * kBlockBytes);
    if (!buf.ok()) return buf.status();
    return BlockedBloomFilter(*std::move(buf), blocks, expected_items);
  }

  void Insert(uint64_t h) {
    uint64_t* block = Block(h);
    InBlock p(h);
    for (int i = 0; i < k_; ++i, p.Next()) block[p.bit() >> 6] |= uint64_t{1} << (p.bit() & 63);
  }

  // Branch-free over the k probes: they are all in one line already fetched,
  // and an early exit would only add mispredictions.
  bool MayContain(uint64_t h) const {
    const uint64_t* block = Block(h);
    InBlock p(h);
    uint64_t all = 1;
    for (int i = 0; i < k_; ++i, p.Next()) all &= block[p.bit() >> 6] >> (p.bit() & 63);
    return all & 1;
  }

  void InsertBatch(absl::Span<const uint64_t> hashes) {
    for (size_t j = 0; j < std::min(kAhead, hashes.size()); ++j) PrefetchLine(Block(hashes[j]));
    for (size_t i = 0; i < hashes.size(); ++i) {
      if (i + kAhead < hashes.size()) PrefetchLine(Block(hashes[i + kAhead]));
      Insert(hashes[i]);
    }
  }
  void LookupBatch(absl::Span<const uint64_t> hashes, absl::Span<bool> out) const {
    for (size_t j = 0; j < std::min(kAhead, hashes.size()); ++j) PrefetchLine(Block(hashes[j]));
    for (size_t i = 0; i < hashes.size(); ++i) {
      if (i + kAhead < hashes.size()) PrefetchLine(Block(hashes[i + kAhead]));
      out[i] = MayContain(hashes[i]);
    }
  }

  int k() const { return k_; }
  uint64_t bytes() const { return blocks_ * kBlockBytes; }
  double ExpectedFalsePositiveRate(uint64_t items) const { return Fpr(k_, blocks_, items); }

 private:
  // One line per key. Batched lookups on 1 GiB, M/s: 16 keys 53.5, 32 keys
  // 61.5 (the cuckoo filter's distance), 64 keys 63.8.
  static constexpr size_t kAhead = 32;

  // Probe i is the top 9 bits of x * C^(i+1) mod 2^32, x the hash's low 32
  // bits and C the golden-ratio constant (as in RocksDB's FastLocalBloom):
  // all of them from below the high bits that pick the block, so keys sharing
  // a block get independent patterns. Double hashing (a + i * b), which the
  // standard filter uses, does not work inside 512 bits: measured here at
  // 12.7 bits/item and k = 8, a + i * b mod 512 gives an FPR of 0.45% (only
  // 2^17 patterns, many overlapping), the top 9 bits of a 32-bit a + i * b
  // 0.37% (strides near a fraction of 512 repeat bits), this 0.307%, and the
  // model below (ideal hashing) 0.306%.
  class InBlock {
   public:
    explicit InBlock(uint64_t h) : g_(static_cast<uint32_t>(h) * kMul) {}
    uint32_t bit() const { return g_ >> 23; }
    void Next() { g_ *= kMul; }

   private:
    static constexpr uint32_t kMul = 0x9E3779B9;
    uint32_t g_;
  };

  // Block loads are Poisson with mean lambda = 512 n / m; a block holding j
  // keys has (1 - (1 - 1/512)^(kj)) of its bits set, so the rate is
  // sum_j Poisson(j; lambda) * (that)^k.
  static double Fpr(int k, uint64_t blocks, uint64_t items) {
    if (items == 0) return 0;
    double lambda = static_cast<double>(items) / blocks;
    double sum = 0;
    double log_keep = std::log1p(-1.0 / kBlockBits);
    int last = static_cast<int>(lambda + 20 * std::sqrt(lambda) + 50);
    for (int j = 0; j <= last; ++j) {
      double log_p = j * std::log(lambda) - lambda - std::lgamma(j + 1.0);
      sum += std::exp(log_p) * std::pow(-std::expm1(k * j * log_keep), k);
    }
    return sum;
  }
  static int OptimalK(uint64_t blocks, uint64_t items) {
    int best = 1;
    for (int k = 2; k <= 32; ++k) {
      if (Fpr(k, blocks, items) < Fpr(best, blocks, items)) best = k;
    }
    return best;
  }

  BlockedBloomFilter(PageBuffer buf, uint64_t blocks, uint64_t expected_items)
      : buf_(std::move(buf)), blocks_(blocks), k_(OptimalK(blocks, expected_items)) {}

  uint64_t* Block(uint64_t h) {
    return reinterpret_cast<uint64_t*>(buf_.data() + kBlockBytes * MulHi64(h, blocks_));
  }
  const uint64_t* Block(uint64_t h) const {
    return reinterpret_cast<const uint64_t*>(buf_.data() + kBlockBytes * MulHi64(h, blocks_));
  }

  PageBuffer buf_;
  uint64_t blocks_;
  int k_;
};

}  // namespace cuckoo::bench

#endif  // CUCKOO_BENCH_BLOOM_H_
