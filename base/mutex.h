// Mutex: an exclusive lock that ThreadSanitizer understands, with Abseil's
// thread-safety annotations; the exclusive counterpart of SharedMutex
// (base/shared_mutex.h, which says why not absl::Mutex).
//
// std::mutex underneath (pthread_mutex, which TSan intercepts). libstdc++'s
// std::mutex is no annotated capability, so ABSL_GUARDED_BY cannot name one;
// this wrapper only adds the annotations (checked by clang's
// -Wthread-safety), a scoped locker, and waiting on a std::condition_variable
// while holding the lock:
//
//   MutexLock lock(&mu_);
//   while (!ready_) mu_.Wait(&cv_);  // What cv_.wait(lock, [&] { return ready_; }) does.
//
// (A loop rather than a predicate lambda: the analysis checks a lambda's body
// on its own, without the lock its caller holds.)
#ifndef CUCKOO_BASE_MUTEX_H_
#define CUCKOO_BASE_MUTEX_H_

#include <chrono>
#include <condition_variable>
#include <mutex>

#include "absl/base/thread_annotations.h"

namespace cuckoo {

class ABSL_LOCKABLE Mutex {
 public:
  Mutex() = default;
  Mutex(const Mutex&) = delete;
  Mutex& operator=(const Mutex&) = delete;

  void Lock() ABSL_EXCLUSIVE_LOCK_FUNCTION() { mu_.lock(); }
  void Unlock() ABSL_UNLOCK_FUNCTION() { mu_.unlock(); }

  // cv->wait on this mutex: releases it while blocked and holds it again on
  // return. May return spuriously; call it in a loop on the condition.
  void Wait(std::condition_variable* cv) ABSL_EXCLUSIVE_LOCKS_REQUIRED(this) {
    std::unique_lock<std::mutex> lock(mu_, std::adopt_lock);
    cv->wait(lock);
    lock.release();  // Still held: by the caller.
  }
  // The same for at most `timeout` (cv->wait_for).
  template <typename Rep, typename Period>
  std::cv_status WaitFor(std::condition_variable* cv,
                         const std::chrono::duration<Rep, Period>& timeout)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(this) {
    std::unique_lock<std::mutex> lock(mu_, std::adopt_lock);
    const std::cv_status status = cv->wait_for(lock, timeout);
    lock.release();
    return status;
  }

  // Tells the lock analysis that the caller holds this mutex, where it
  // cannot see that itself (the mutex reached through another object that
  // is known, by an invariant the analysis cannot follow, to be the one
  // held). No check at run time: std::mutex cannot tell who holds it.
  void AssertHeld() const ABSL_ASSERT_EXCLUSIVE_LOCK() {}

 private:
  std::mutex mu_;
};

// Holds `mu` for its scope, like std::unique_lock: Unlock() and Lock() let
// go of it and take it again within the scope.
class ABSL_SCOPED_LOCKABLE MutexLock {
 public:
  explicit MutexLock(Mutex* mu) ABSL_EXCLUSIVE_LOCK_FUNCTION(mu) : mu_(mu) { mu_->Lock(); }
  ~MutexLock() ABSL_UNLOCK_FUNCTION() {
    if (locked_) mu_->Unlock();
  }
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;

  void Unlock() ABSL_UNLOCK_FUNCTION() {
    mu_->Unlock();
    locked_ = false;
  }
  void Lock() ABSL_EXCLUSIVE_LOCK_FUNCTION() {
    mu_->Lock();
    locked_ = true;
  }

 private:
  Mutex* const mu_;
  bool locked_ = true;
};

}  // namespace cuckoo

#endif  // CUCKOO_BASE_MUTEX_H_
