// ScratchArray: working memory for one batch call, reused across the calls
// of a thread so that a batch costs no allocation once warm, but never more
// than a small amount kept per thread.
//
//   ScratchArray<uint64_t, 0> hashes(keys.size());  // slot 0 of uint64_t
//   for (size_t i = 0; i < keys.size(); ++i) hashes[i] = Hash(keys[i]);
//
// Arrays of up to kKeepBytes use a buffer of the calling thread, one per
// (T, slot), which stays allocated for the thread's next call. Larger ones
// get an allocation of their own, freed when the ScratchArray goes away: a
// server's threads each keep at most kKeepBytes per slot, whatever the
// largest batch they ever handled (a thread per core on a large machine,
// each keeping a 100,000-key batch's arrays, would otherwise hold hundreds
// of megabytes for good). Two live ScratchArrays of the same T and slot on
// one thread would share the buffer: use distinct slots.
//
// Not thread-safe, by design: each thread has its own buffers.
#ifndef CUCKOO_CORE_SCRATCH_H_
#define CUCKOO_CORE_SCRATCH_H_

#include <algorithm>
#include <cstddef>
#include <memory>

#include "absl/types/span.h"

namespace cuckoo {

template <typename T, int kSlot>
class ScratchArray {
 public:
  static constexpr size_t kKeepBytes = size_t{64} << 10;

  explicit ScratchArray(size_t n) : n_(n) {
    if (n * sizeof(T) > kKeepBytes) {
      owned_ = std::make_unique_for_overwrite<T[]>(n);
      data_ = owned_.get();
      return;
    }
    thread_local std::unique_ptr<T[]> kept;
    thread_local size_t kept_n = 0;
    if (kept_n < n) {
      // Grow geometrically up to the cap, so a thread reallocates only a
      // few times.
      kept_n = std::min(kKeepBytes / sizeof(T), std::max(n, 2 * kept_n));
      kept = std::make_unique_for_overwrite<T[]>(kept_n);
    }
    data_ = kept.get();
  }
  ScratchArray(const ScratchArray&) = delete;
  ScratchArray& operator=(const ScratchArray&) = delete;

  T* data() { return data_; }
  size_t size() const { return n_; }
  T& operator[](size_t i) { return data_[i]; }
  absl::Span<T> span() { return {data_, n_}; }

 private:
  const size_t n_;
  std::unique_ptr<T[]> owned_;
  T* data_ = nullptr;
};

}  // namespace cuckoo

#endif  // CUCKOO_CORE_SCRATCH_H_
