// PageBuffer: a zero-filled, 64-byte aligned byte buffer for filter tables.
//
// Buffers of 64 KiB or more are mapped with mmap, so that freeing one returns
// its memory to the system at once: from the heap, a filter's tables of a
// megabyte or so stayed in malloc's free lists after the filter was dropped
// (200 filters of 10^6 keys created and dropped three times took the process
// from 313 to 504 MiB). Buffers of 2 MiB or more are also aligned to 2 MiB and
// marked MADV_HUGEPAGE so the kernel backs every whole 2 MiB of them with a
// transparent huge page: a lookup touches two random buckets, and with 4 KiB
// pages on a multi-GiB table nearly every one of them is also a TLB miss.
// Smaller buffers come from the heap. Not thread-safe; owned by one table or
// filter.
#ifndef CUCKOO_CORE_INTERNAL_PAGE_BUFFER_H_
#define CUCKOO_CORE_INTERNAL_PAGE_BUFFER_H_

#include <cstddef>
#include <cstdint>

#include "absl/status/statusor.h"

namespace cuckoo {

class PageBuffer {
 public:
  static constexpr size_t kHugePageBytes = size_t{2} << 20;
  static constexpr size_t kPageBytes = 4096;
  // Buffers this large or larger are mapped, not taken from the heap.
  static constexpr size_t kMapBytes = size_t{64} << 10;

  // Bytes Allocate(bytes) reserves: whole 4 KiB pages for mapped buffers
  // (not whole huge pages: a table of 2.1 MiB must not cost 4 MiB; its tail
  // just uses small pages), 64-byte granules for heap buffers.
  static size_t AllocationSize(size_t bytes);

  PageBuffer() = default;
  // RESOURCE_EXHAUSTED when the memory cannot be had.
  static absl::StatusOr<PageBuffer> Allocate(size_t bytes);

  PageBuffer(PageBuffer&& other) noexcept;
  PageBuffer& operator=(PageBuffer&& other) noexcept;
  PageBuffer(const PageBuffer&) = delete;
  PageBuffer& operator=(const PageBuffer&) = delete;
  ~PageBuffer();

  uint8_t* data() { return data_; }
  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }  // As requested.
  // Bytes really reserved (rounded up to the page or allocation granule).
  size_t allocated_bytes() const { return allocated_; }
  bool mapped() const { return mapped_; }
  bool huge_pages() const { return mapped_ && allocated_ >= kHugePageBytes; }

  // Maps every page of [data() + offset, + length) writable now, in one
  // system call, instead of one page fault per 4 KiB page on first touch
  // (the pages past the last whole huge page are small ones). For a buffer
  // about to be filled completely, e.g. by a snapshot load. A no-op for heap
  // buffers and on kernels without MADV_POPULATE_WRITE (Linux < 5.14).
  void Prefault(size_t offset, size_t length);

 private:
  void Release();

  uint8_t* data_ = nullptr;
  size_t size_ = 0;
  size_t allocated_ = 0;
  bool mapped_ = false;
};

}  // namespace cuckoo

#endif  // CUCKOO_CORE_INTERNAL_PAGE_BUFFER_H_
