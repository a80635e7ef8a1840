// RequestWindow: a single node's memory of recent Insert and Delete request
// ids, with each request's results, so that a retry (the same request_id,
// after a lost response) is answered with the first try's results instead
// of being applied again. A Delete applied twice would remove a second copy
// of its keys' fingerprints, which may belong to other keys.
//
//   RequestWindow::Outcome first;
//   switch (window.Start(key, &first, waiter)) {
//     case kNew:       apply; then window.Finish(key, outcome) (or Abort,
//                      or Abandon if part of it was applied)
//     case kAnswered:  answer with `first`
//     case kWaiting:   the first try is still running: `waiter` gets its end
//     case kInDoubt:   the first try ended part-way (Abandon): never apply
//                      it again; answer ABORTED
//   }
//
// The key names the request: cuckood makes it of the method, the request id
// and a digest of the content, so an id reused for another request is
// another key.
//
// Entries live for `window` after they finish, and the oldest go first when
// their results take more than `max_bytes`. A cluster replica keeps the
// same memory in server/cluster/cluster.h instead (JetStream deduplicates
// there).
//
// The window survives restarts and crashes with the write-ahead log
// (docs/WAL_FORMAT.md, "Request records"; docs/CLUSTER.md, "Retries"): the
// service logs a RequestStart record before a request's first shard write
// (Logged) and its RequestResults records after the last (Recorded), and
// answers once those are durable. Replay gives them back (RestoreInDoubt,
// RestoreDone): a durable write of a request is never without its id. A
// RequestStart without its results (a crash mid-batch: never acknowledged,
// and part of it may be applied) comes back in doubt. Before a snapshot run
// truncates the log, Persistence writes the live entries to
// <data-dir>/REQUESTS (Save; restored at start-up before the replay), so
// truncation never drops an id still inside the window.
//
// Thread safety: all methods may be called from any thread.
#ifndef CUCKOO_SERVER_STORAGE_REQUEST_WINDOW_H_
#define CUCKOO_SERVER_STORAGE_REQUEST_WINDOW_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "base/mutex.h"

namespace cuckoo::server {

class RequestWindow {
 public:
  struct Outcome {
    uint64_t position = 0;
    std::vector<uint8_t> results;  // InsertResult / DeleteResult per key.
  };
  // Called with the first try's outcome, or its failure (then the retry
  // should be sent again: nothing of the first try was kept), or ABORTED
  // when it ended part-way (Abandon).
  using Waiter = std::function<void(const absl::Status&, const Outcome&)>;
  enum class Begin { kNew, kAnswered, kWaiting, kInDoubt };

  RequestWindow(absl::Duration window, uint64_t max_bytes)
      : window_(window), max_bytes_(max_bytes) {}

  Begin Start(const std::string& key, Outcome* out, Waiter waiter);
  // The first try is about to log its first write (before the log's
  // RequestStart record is appended): from here a save keeps it, in doubt
  // until Recorded.
  void Logged(const std::string& key);
  // The first try's results were appended to the log at `lsn` (not yet
  // durable): a save made once `lsn` is synced keeps them.
  void Recorded(const std::string& key, uint64_t lsn, const Outcome& outcome);
  // The first try is done (durable): remember it, and answer the waiters.
  void Finish(const std::string& key, Outcome outcome);
  // The first try failed with nothing applied: forget it; the waiters get
  // `why`.
  void Abort(const std::string& key, const absl::Status& why);
  // The first try failed after part of it was applied (cut short, or the
  // log failed): remember it in doubt, so that it is never applied again;
  // the waiters get ABORTED.
  void Abandon(const std::string& key, const absl::Status& why);

  // An entry as it is saved and restored.
  struct Saved {
    std::string key;
    bool in_doubt = false;
    absl::Time time;  // When it finished (in doubt: when it started).
    Outcome outcome;  // Not in doubt.
  };
  // The entries a restart must know, given that the log is fdatasync'ed up
  // to `synced_lsn`: the finished ones, those whose results are synced, and
  // those that logged a write (in doubt). Not the expired.
  std::vector<Saved> Save(uint64_t synced_lsn) const;
  // Start-up (before serving): an entry from a save or the log's replay.
  // Expired ones are ignored; a finished entry replaces one in doubt; one
  // in doubt replaces a finished entry only if it is newer (the same id
  // sent again after the window).
  void RestoreDone(const std::string& key, absl::Time finished, Outcome outcome);
  void RestoreInDoubt(const std::string& key, absl::Time started);

  // The save's file format: <data-dir>/REQUESTS (docs/WAL_FORMAT.md).
  static std::string Encode(const std::vector<Saved>& entries);
  // DATA_LOSS naming `path` when the bytes are not a whole file.
  static absl::StatusOr<std::vector<Saved>> Decode(absl::string_view bytes, absl::string_view path);

  absl::Duration window() const { return window_; }
  size_t size() const;

 private:
  struct Entry {
    bool done = false;
    bool in_doubt = false;    // done: ended part-way.
    bool logged = false;      // Not done: it logged a write.
    uint64_t record_lsn = 0;  // Not done: its results are in the log there.
    Outcome outcome;
    absl::Time time;
    absl::Time expires;
    std::vector<Waiter> waiters;
  };
  // Marks `e` done at `time`, charging its bytes.
  void DoneLocked(const std::string& key, Entry& e, absl::Time time)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void EvictLocked(absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const absl::Duration window_;
  const uint64_t max_bytes_;
  mutable Mutex mu_;
  absl::flat_hash_map<std::string, Entry> entries_ ABSL_GUARDED_BY(mu_);
  std::deque<std::string> done_order_ ABSL_GUARDED_BY(mu_);  // Finished keys, oldest first.
  uint64_t bytes_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace cuckoo::server

#endif  // CUCKOO_SERVER_STORAGE_REQUEST_WINDOW_H_
