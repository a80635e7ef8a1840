// FilterRegistry: the server's named filters, name -> CuckooFilter.
//
// Names match [A-Za-z0-9][A-Za-z0-9._-]{0,127}: a name also becomes a file name
// in the data directory, so it can never be a path ("..", "a/b") or hidden.
// Creating a filter is checked against a memory budget for all tables and a
// maximum number of filters.
//
// Thread safety: all methods are safe to call concurrently. Filters are handed
// out as shared_ptr, so a filter dropped while a request uses it stays alive
// until that request ends.
#ifndef CUCKOO_CORE_REGISTRY_H_
#define CUCKOO_CORE_REGISTRY_H_

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "core/cuckoo_filter.h"
#include "core/shared_mutex.h"

namespace cuckoo {

inline constexpr size_t kMaxFilterNameBytes = 128;

struct RegistryLimits {
  uint64_t memory_budget_bytes = uint64_t{8} << 30;  // Sum of all filters' tables.
  uint32_t max_filters = 1024;
};

class FilterRegistry {
 public:
  explicit FilterRegistry(RegistryLimits limits = {}) : limits_(limits) {}

  // INVALID_ARGUMENT with the reason when `name` is not a valid filter name.
  static absl::Status ValidateName(absl::string_view name);

  // Creates filter `name`. If it exists: with `if_not_exists` and the same
  // settings (capacity, rate-derived shape, and seed if one was given) returns
  // the existing filter; otherwise ALREADY_EXISTS naming the differences.
  // RESOURCE_EXHAUSTED when the memory budget or filter count would be
  // exceeded; INVALID_ARGUMENT for bad names or options. `created`, if given,
  // tells whether the returned filter is new.
  absl::StatusOr<std::shared_ptr<CuckooFilter>> Create(absl::string_view name,
                                                       const FilterOptions& options,
                                                       bool if_not_exists = false,
                                                       bool* created = nullptr);
  // Adds an already-built filter (e.g. loaded from a snapshot) under `name`,
  // with the same checks as Create.
  absl::Status Add(absl::string_view name, std::shared_ptr<CuckooFilter> filter);

  // NOT_FOUND when there is no such filter.
  absl::StatusOr<std::shared_ptr<CuckooFilter>> Get(absl::string_view name) const;
  // With `only_if`, drops the filter only if it is that one (else NOT_FOUND):
  // for callers that looked the filter up first and must not drop a newer
  // filter of the same name.
  absl::Status Drop(absl::string_view name, const CuckooFilter* only_if = nullptr);
  // OK if a filter of `bytes` table memory named `name` could be added now
  // (the checks of Add, without adding).
  absl::Status CheckRoom(absl::string_view name, uint64_t bytes) const;
  // All filters, sorted by name.
  std::vector<std::pair<std::string, std::shared_ptr<CuckooFilter>>> List() const;

  uint64_t memory_bytes() const;
  size_t size() const;
  const RegistryLimits& limits() const { return limits_; }

 private:
  absl::Status CheckRoomLocked(absl::string_view name, uint64_t bytes) const
      ABSL_SHARED_LOCKS_REQUIRED(mu_);

  const RegistryLimits limits_;
  mutable SharedMutex mu_;
  absl::flat_hash_map<std::string, std::shared_ptr<CuckooFilter>> filters_ ABSL_GUARDED_BY(mu_);
  uint64_t memory_bytes_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace cuckoo

#endif  // CUCKOO_CORE_REGISTRY_H_
