// LatencyHistogram: a log-linear histogram of latencies in nanoseconds, for
// cuckoo-bench. Written by hand (HdrHistogram's bucket layout, simplified):
// values below 2 * 64 are counted exactly; above, every power of two is split
// into 64 equal sub-buckets, so a reported quantile is at most 1/64 (1.6%)
// above the true value. Fixed size (about 30 KiB), no allocation on Record,
// mergeable. Not thread-safe: keep one per thread and Merge them.
//
//   LatencyHistogram h;
//   h.Record(12'345);                 // ns
//   uint64_t p99 = h.Quantile(0.99);  // ns, never above h.max()
#ifndef CUCKOO_CLIENT_TOOLS_CUCKOO_BENCH_LATENCY_HISTOGRAM_H_
#define CUCKOO_CLIENT_TOOLS_CUCKOO_BENCH_LATENCY_HISTOGRAM_H_

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstdint>

namespace cuckoo::bench {

class LatencyHistogram {
 public:
  static constexpr int kSubBits = 6;
  static constexpr uint64_t kSub = uint64_t{1} << kSubBits;
  static constexpr int kBuckets = (65 - kSubBits) * static_cast<int>(kSub);

  void Record(uint64_t v) {
    ++counts_[Index(v)];
    ++count_;
    sum_ += v;
    max_ = std::max(max_, v);
  }

  void Merge(const LatencyHistogram& other) {
    for (int i = 0; i < kBuckets; ++i) counts_[i] += other.counts_[i];
    count_ += other.count_;
    sum_ += other.sum_;
    max_ = std::max(max_, other.max_);
  }

  uint64_t count() const { return count_; }
  uint64_t max() const { return max_; }
  double mean() const { return count_ == 0 ? 0 : static_cast<double>(sum_) / count_; }

  // The upper bound of the bucket holding the value of rank ceil(q * count),
  // q in [0, 1]; capped at max(). 0 when empty.
  uint64_t Quantile(double q) const {
    if (count_ == 0) return 0;
    uint64_t rank = static_cast<uint64_t>(std::ceil(q * static_cast<double>(count_)));
    rank = std::clamp<uint64_t>(rank, 1, count_);
    uint64_t seen = 0;
    for (int i = 0; i < kBuckets; ++i) {
      seen += counts_[i];
      if (seen >= rank) return std::min(UpperBound(i), max_);
    }
    return max_;
  }

  // Bucket of value v: v itself below 2 * kSub; above, (shift, top) where
  // top = v >> shift is the value's leading kSubBits + 1 bits.
  static int Index(uint64_t v) {
    if (v < kSub) return static_cast<int>(v);
    const int shift = (63 - std::countl_zero(v)) - kSubBits;
    return static_cast<int>(static_cast<uint64_t>(shift) * kSub + (v >> shift));
  }

  // The largest value that falls into bucket i.
  static uint64_t UpperBound(int i) {
    const uint64_t u = static_cast<uint64_t>(i);
    if (u < 2 * kSub) return u;
    const uint64_t shift = u / kSub - 1;
    const uint64_t top = u - shift * kSub;
    return ((top + 1) << shift) - 1;
  }

 private:
  std::array<uint64_t, kBuckets> counts_{};
  uint64_t count_ = 0;
  uint64_t sum_ = 0;
  uint64_t max_ = 0;
};

}  // namespace cuckoo::bench

#endif  // CUCKOO_CLIENT_TOOLS_CUCKOO_BENCH_LATENCY_HISTOGRAM_H_
