// RequestWindow: a single node's memory of recent Insert and Delete request
// ids, with each request's results, so that a retry (the same request_id,
// after a lost response) is answered with the first try's results instead
// of being applied again. A Delete applied twice would remove a second copy
// of its keys' fingerprints, which may belong to other keys.
//
//   RequestWindow::Outcome first;
//   switch (window.Start(key, &first, waiter)) {
//     case kNew:       apply; then window.Finish(key, outcome) (or Abort)
//     case kAnswered:  answer with `first`
//     case kWaiting:   the first try is still running: `waiter` gets its end
//   }
//
// The key names the request: cuckood makes it of the method, the request id
// and a digest of the content, so an id reused for another request is
// another key.
//
// Entries live for `window` after they finish, and the oldest go first when
// their results take more than `max_bytes`. A cluster replica keeps the
// same memory in server/cluster/cluster.h instead (JetStream deduplicates
// there). This window is in memory: a restart of the node forgets it
// (docs/CLUSTER.md, "Retries").
//
// Thread safety: all methods may be called from any thread.
#ifndef CUCKOO_SERVER_REQUEST_WINDOW_H_
#define CUCKOO_SERVER_REQUEST_WINDOW_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "core/mutex.h"

namespace cuckoo::server {

class RequestWindow {
 public:
  struct Outcome {
    uint64_t position = 0;
    std::vector<uint8_t> results;  // InsertResult / DeleteResult per key.
  };
  // Called with the first try's outcome, or its failure (then the retry
  // should be sent again: nothing of the first try was kept).
  using Waiter = std::function<void(const absl::Status&, const Outcome&)>;
  enum class Begin { kNew, kAnswered, kWaiting };

  RequestWindow(absl::Duration window, uint64_t max_bytes)
      : window_(window), max_bytes_(max_bytes) {}

  Begin Start(const std::string& key, Outcome* out, Waiter waiter);
  // The first try is done: remember it, and answer the waiters.
  void Finish(const std::string& key, Outcome outcome);
  // The first try failed: forget it; the waiters get `why`.
  void Abort(const std::string& key, const absl::Status& why);

  absl::Duration window() const { return window_; }
  size_t size() const;

 private:
  struct Entry {
    bool done = false;
    Outcome outcome;
    absl::Time expires;
    std::vector<Waiter> waiters;
  };
  void EvictLocked(absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const absl::Duration window_;
  const uint64_t max_bytes_;
  mutable Mutex mu_;
  absl::flat_hash_map<std::string, Entry> entries_ ABSL_GUARDED_BY(mu_);
  std::deque<std::string> done_order_ ABSL_GUARDED_BY(mu_);  // Finished keys, oldest first.
  uint64_t bytes_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace cuckoo::server

#endif  // CUCKOO_SERVER_REQUEST_WINDOW_H_
