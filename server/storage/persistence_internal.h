// What the files of Persistence share (private to server/storage/).
//
// The files: persistence.cc holds the persistence thread, its queue of
// snapshot and drop requests and its timers; persistence_load.cc loading
// the data directory at start-up (LoadAll: snapshots, quarantine, the
// log's replay or the cluster checkpoint, the request window);
// persistence_snapshot.cc writing snapshots, imports and drops and the
// records of what was written; persistence_log.cc what keeps the log
// short: its truncation behind the snapshots, the cluster checkpoint, the
// creations and drops logged.
#ifndef CUCKOO_SERVER_STORAGE_PERSISTENCE_INTERNAL_H_
#define CUCKOO_SERVER_STORAGE_PERSISTENCE_INTERNAL_H_

#include <string>

#include "absl/strings/str_format.h"
#include "absl/time/time.h"

namespace cuckoo::server::persistence_internal {

inline std::string Ms(absl::Duration d) {
  return absl::StrFormat("%.1fms", absl::ToDoubleMilliseconds(d));
}

}  // namespace cuckoo::server::persistence_internal

#endif  // CUCKOO_SERVER_STORAGE_PERSISTENCE_INTERNAL_H_
