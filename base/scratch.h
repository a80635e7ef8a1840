// ScratchArray: working memory for one batch call, reused across the calls
// of a thread so that a batch costs no allocation once warm, but never more
// than a small amount kept per thread.
//
//   ScratchArray<uint64_t> hashes(keys.size());
//   for (size_t i = 0; i < keys.size(); ++i) hashes[i] = Hash(keys[i]);
//
// Arrays of up to kKeepBytes use a buffer of the calling thread, which stays
// allocated for the thread's next call. Each live ScratchArray has a buffer
// of its own: a thread keeps kPoolSize buffers per element type, and an
// array takes the first one no live array of that type holds, so two arrays
// can never share memory, however their callers nest (the Redis port's
// first version answered false negatives when two callers shared a
// numbered slot of the earlier design by mistake). Arrays over kKeepBytes,
// and arrays made while all kPoolSize buffers are taken, get an allocation
// of their own, freed when the ScratchArray goes away: a thread keeps at
// most kPoolSize * kKeepBytes per element type, whatever the largest batch
// it ever handled (a thread per core on a large machine, each keeping a
// 100,000-key batch's arrays, would otherwise hold hundreds of megabytes
// for good).
//
// Not thread-safe, by design: each thread has its own buffers, and a
// ScratchArray must be destroyed on the thread that made it.
#ifndef CUCKOO_BASE_SCRATCH_H_
#define CUCKOO_BASE_SCRATCH_H_

#include <algorithm>
#include <array>
#include <cstddef>
#include <memory>

#include "absl/types/span.h"

namespace cuckoo {

template <typename T>
class ScratchArray {
 public:
  static constexpr size_t kKeepBytes = size_t{64} << 10;
  // Buffers kept per thread and element type: more than the arrays of one
  // type any call path holds at once (the deepest, the filter's batched
  // lookups of growing filters, holds four).
  static constexpr size_t kPoolSize = 8;

  explicit ScratchArray(size_t n) : n_(n) {
    if (n * sizeof(T) <= kKeepBytes) {
      for (Kept& k : Pool()) {
        if (k.in_use) continue;
        if (k.n < n) {
          // Grow geometrically up to the cap, so a buffer is reallocated
          // only a few times.
          k.n = std::min(kKeepBytes / sizeof(T), std::max(n, 2 * k.n));
          k.data = std::make_unique_for_overwrite<T[]>(k.n);
        }
        k.in_use = true;
        kept_ = &k;
        data_ = k.data.get();
        return;
      }
    }
    owned_ = std::make_unique_for_overwrite<T[]>(n);
    data_ = owned_.get();
  }
  ~ScratchArray() {
    if (kept_ != nullptr) kept_->in_use = false;
  }
  ScratchArray(const ScratchArray&) = delete;
  ScratchArray& operator=(const ScratchArray&) = delete;

  T* data() { return data_; }
  size_t size() const { return n_; }
  T& operator[](size_t i) { return data_[i]; }
  absl::Span<T> span() { return {data_, n_}; }

 private:
  struct Kept {
    std::unique_ptr<T[]> data;
    size_t n = 0;
    bool in_use = false;
  };
  static std::array<Kept, kPoolSize>& Pool() {
    thread_local std::array<Kept, kPoolSize> pool;
    return pool;
  }

  const size_t n_;
  std::unique_ptr<T[]> owned_;
  Kept* kept_ = nullptr;
  T* data_ = nullptr;
};

}  // namespace cuckoo

#endif  // CUCKOO_BASE_SCRATCH_H_
