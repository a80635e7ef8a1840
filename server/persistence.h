// Persistence: the server's snapshots in its data directory, over
// core/snapshot.h.
//
//   Persistence p(&registry, "/var/lib/cuckood");
//   p.LoadAll();                        // at start-up, before serving
//   p.Start(absl::Seconds(60));         // periodic snapshots of changed filters
//   p.SnapshotAsync("users", false, done);  // the Snapshot RPC
//   p.Stop();                           // at shutdown, then:
//   p.SnapshotNow("", /*changed_only=*/true);
//
// Data directory layout: <name>.cuckoo per filter; .<name>.cuckoo.tmp while
// one is being written (removed at start-up if a crash left one);
// quarantine/ for files that failed their checks.
//
// Snapshot writes run on one background thread (Boost.Asio), which owns the
// interval timer, so periodic and requested snapshots never run at once and
// never block gRPC's threads. Dropping a filter removes its file under the
// filter's persist mutex, so a snapshot being written finishes first and none
// can follow.
//
// Thread safety: all methods may be called from any thread.
#ifndef CUCKOO_SERVER_PERSISTENCE_H_
#define CUCKOO_SERVER_PERSISTENCE_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "boost/asio/executor_work_guard.hpp"
#include "boost/asio/io_context.hpp"
#include "boost/asio/steady_timer.hpp"
#include "core/registry.h"
#include "core/snapshot.h"

namespace cuckoo::server {

class Metrics;

inline constexpr char kQuarantineDir[] = "quarantine";
// Locked (flock) by the cuckood using the directory.
inline constexpr char kLockFile[] = "LOCK";

struct SnapshotRun {
  // Sorted by filter name.
  std::vector<std::pair<std::string, SnapshotWriteResult>> written;
  // Skipped by changed_only.
  std::vector<std::string> unchanged;
  uint64_t bytes = 0;
  absl::Duration duration;
};

struct LoadSummary {
  size_t loaded = 0;
  size_t quarantined = 0;
  uint64_t items = 0;
  uint64_t bytes = 0;
  absl::Duration duration;
};

class Persistence {
 public:
  // Each snapshot file written or failed is counted in `metrics` (none if
  // null).
  Persistence(FilterRegistry* registry, std::string data_dir, Metrics* metrics = nullptr);
  ~Persistence();  // Stop()s.
  Persistence(const Persistence&) = delete;
  Persistence& operator=(const Persistence&) = delete;

  const std::string& data_dir() const { return data_dir_; }

  // Locks the data directory (<data-dir>/LOCK) for this process until the
  // Persistence is destroyed, then loads every snapshot in it into the
  // registry, logging a
  // line per filter. A file that fails its checks is logged with the reason
  // and moved to quarantine/; the rest still load. Fails (and the server
  // must not start, or it would later overwrite data it did not load) when
  // the directory cannot be read, a snapshot cannot be read for another
  // reason (I/O, permissions), a snapshot does not fit the memory budget
  // or filter limit, or another process holds the lock
  // (FAILED_PRECONDITION): two servers writing one directory would destroy
  // each other's snapshots.
  absl::StatusOr<LoadSummary> LoadAll();

  // Writes snapshots of filter `name` (all filters when empty) in the
  // calling thread. NOT_FOUND for an unknown filter. When some filters fail,
  // the others are still written and the first error is returned.
  absl::StatusOr<SnapshotRun> SnapshotNow(absl::string_view name, bool changed_only);
  // SnapshotNow on the background thread; `done` runs there. After Stop()
  // it runs in the calling thread.
  void SnapshotAsync(std::string name, bool changed_only,
                     std::function<void(absl::StatusOr<SnapshotRun>)> done);

  // Removes filter `name` and its snapshot file. NOT_FOUND for an unknown
  // filter; the file's error (and the filter is kept) if it cannot be
  // removed. Returns the dropped filter.
  absl::StatusOr<std::shared_ptr<CuckooFilter>> Drop(absl::string_view name);

  // Starts the background thread, with a snapshot of changed filters every
  // `interval` (none when zero).
  void Start(absl::Duration interval);
  // Stops the timer and the thread after work already queued has run.
  // Idempotent.
  void Stop();

 private:
  void ArmTimer();
  // Moves a bad file to quarantine/, logging why.
  void Quarantine(const std::string& path, const absl::Status& why);

  FilterRegistry* const registry_;
  const std::string data_dir_;
  Metrics* const metrics_;
  absl::Duration interval_;
  boost::asio::io_context io_;
  std::optional<boost::asio::executor_work_guard<boost::asio::io_context::executor_type>> work_;
  std::unique_ptr<boost::asio::steady_timer> timer_;
  std::thread thread_;
  int lock_fd_ = -1;
  std::mutex state_mu_;
  bool running_ = false;  // Guarded by state_mu_.
};

}  // namespace cuckoo::server

#endif  // CUCKOO_SERVER_PERSISTENCE_H_
