// PrefetchLine: ask for one cache line to be brought towards L1.
//
// A volatile asm rather than __builtin_prefetch: GCC 12 was seen dropping
// __builtin_prefetch from the batch pipelines (nothing uses its result),
// which silently cost 3x of batched throughput. The asm cannot be dropped.
#ifndef CUCKOO_CORE_INTERNAL_PREFETCH_H_
#define CUCKOO_CORE_INTERNAL_PREFETCH_H_

namespace cuckoo {

inline void PrefetchLine(const void* p) {
#if defined(__x86_64__)
  asm volatile("prefetcht0 %0" : : "m"(*static_cast<const char*>(p)));
#else
  __builtin_prefetch(p);
#endif
}

}  // namespace cuckoo

#endif  // CUCKOO_CORE_INTERNAL_PREFETCH_H_
