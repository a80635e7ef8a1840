#include "core/internal/page_buffer.h"

#include <sys/mman.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"

namespace cuckoo {
namespace {

size_t RoundUp(size_t n, size_t to) { return (n + to - 1) / to * to; }

}  // namespace

size_t PageBuffer::AllocationSize(size_t bytes) {
  return bytes >= kMapBytes ? RoundUp(bytes, kPageBytes) : RoundUp(std::max<size_t>(bytes, 1), 64);
}

absl::StatusOr<PageBuffer> PageBuffer::Allocate(size_t bytes) {
  PageBuffer b;
  b.size_ = bytes;
  if (bytes >= kMapBytes) {
    size_t len = AllocationSize(bytes);
    // Huge pages: over-reserve by one huge page, then trim, to get a 2 MiB
    // aligned start.
    const bool huge = len >= kHugePageBytes;
    size_t reserve = huge ? len + kHugePageBytes : len;
    void* p = mmap(nullptr, reserve, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
      return absl::ResourceExhaustedError(
          absl::StrFormat("mmap of %u bytes failed: %s", reserve, std::strerror(errno)));
    }
    auto start = reinterpret_cast<uintptr_t>(p);
    uintptr_t aligned = huge ? RoundUp(start, kHugePageBytes) : start;
    if (aligned > start) munmap(p, aligned - start);
    if (size_t tail = start + reserve - (aligned + len); tail > 0) {
      munmap(reinterpret_cast<void*>(aligned + len), tail);
    }
    // Best effort: without THP the table still works with 4 KiB pages.
    if (huge) madvise(reinterpret_cast<void*>(aligned), len, MADV_HUGEPAGE);
    b.data_ = reinterpret_cast<uint8_t*>(aligned);
    b.allocated_ = len;
    b.mapped_ = true;
    return b;
  }
  size_t len = AllocationSize(bytes);
  void* p = std::aligned_alloc(64, len);
  if (p == nullptr) {
    return absl::ResourceExhaustedError(absl::StrFormat("allocation of %u bytes failed", len));
  }
  std::memset(p, 0, len);
  b.data_ = static_cast<uint8_t*>(p);
  b.allocated_ = len;
  return b;
}

PageBuffer::PageBuffer(PageBuffer&& o) noexcept
    : data_(std::exchange(o.data_, nullptr)),
      size_(std::exchange(o.size_, 0)),
      allocated_(std::exchange(o.allocated_, 0)),
      mapped_(std::exchange(o.mapped_, false)) {}

PageBuffer& PageBuffer::operator=(PageBuffer&& o) noexcept {
  if (this != &o) {
    Release();
    data_ = std::exchange(o.data_, nullptr);
    size_ = std::exchange(o.size_, 0);
    allocated_ = std::exchange(o.allocated_, 0);
    mapped_ = std::exchange(o.mapped_, false);
  }
  return *this;
}

PageBuffer::~PageBuffer() { Release(); }

void PageBuffer::Release() {
  if (data_ == nullptr) return;
  if (mapped_) {
    munmap(data_, allocated_);
  } else {
    std::free(data_);
  }
  data_ = nullptr;
}

void PageBuffer::Prefault(size_t offset, size_t length) {
#ifdef MADV_POPULATE_WRITE
  if (!mapped_ || offset >= size_) return;
  const uintptr_t begin = reinterpret_cast<uintptr_t>(data_ + offset) & ~uintptr_t{kPageBytes - 1};
  const uintptr_t end = reinterpret_cast<uintptr_t>(data_ + std::min(size_, offset + length));
  ::madvise(reinterpret_cast<void*>(begin), end - begin, MADV_POPULATE_WRITE);
#else
  (void)offset;
  (void)length;
#endif
}

}  // namespace cuckoo
