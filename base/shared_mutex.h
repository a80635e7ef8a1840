// SharedMutex: a reader/writer lock that ThreadSanitizer understands, with
// Abseil's thread-safety annotations.
//
// Why not absl::Mutex: Debian's libabsl is built without TSan, so TSan cannot
// see absl::Mutex's synchronisation and would report races that are not
// there. std::shared_mutex is pthread_rwlock underneath, which TSan intercepts.
// This wrapper only adds the capability annotations (checked by clang's
// -Wthread-safety) and the RAII lockers.
#ifndef CUCKOO_BASE_SHARED_MUTEX_H_
#define CUCKOO_BASE_SHARED_MUTEX_H_

#include <shared_mutex>

#include "absl/base/thread_annotations.h"

namespace cuckoo {

class ABSL_LOCKABLE SharedMutex {
 public:
  void Lock() ABSL_EXCLUSIVE_LOCK_FUNCTION() { mu_.lock(); }
  void Unlock() ABSL_UNLOCK_FUNCTION() { mu_.unlock(); }
  void ReaderLock() ABSL_SHARED_LOCK_FUNCTION() { mu_.lock_shared(); }
  void ReaderUnlock() ABSL_UNLOCK_FUNCTION() { mu_.unlock_shared(); }

 private:
  std::shared_mutex mu_;
};

class ABSL_SCOPED_LOCKABLE WriterLock {
 public:
  explicit WriterLock(SharedMutex* mu) ABSL_EXCLUSIVE_LOCK_FUNCTION(mu) : mu_(mu) { mu_->Lock(); }
  ~WriterLock() ABSL_UNLOCK_FUNCTION() { mu_->Unlock(); }
  WriterLock(const WriterLock&) = delete;
  WriterLock& operator=(const WriterLock&) = delete;

 private:
  SharedMutex* const mu_;
};

class ABSL_SCOPED_LOCKABLE ReaderLock {
 public:
  explicit ReaderLock(SharedMutex* mu) ABSL_SHARED_LOCK_FUNCTION(mu) : mu_(mu) {
    mu_->ReaderLock();
  }
  ~ReaderLock() ABSL_UNLOCK_FUNCTION() { mu_->ReaderUnlock(); }
  ReaderLock(const ReaderLock&) = delete;
  ReaderLock& operator=(const ReaderLock&) = delete;

 private:
  SharedMutex* const mu_;
};

}  // namespace cuckoo

#endif  // CUCKOO_BASE_SHARED_MUTEX_H_
