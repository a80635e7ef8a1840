// FilterRegistry: the server's named filters, name -> CuckooFilter.
//
// Names are Redis-style keys: 1 to kMaxFilterNameBytes bytes of valid UTF-8
// with no NUL ("users:seen", "a/b", "my filter" are names). A name never
// becomes a path: snapshot files are named by the filter's id and hold the
// name (docs/SERVER_DESIGN.md). UTF-8 because the gRPC API's name fields are
// proto3 strings, which protobuf requires to be UTF-8: every filter must be
// reachable over gRPC.
// Creating a filter is checked against a memory budget for all filters and a
// maximum number of filters.
//
// The budget is charged with every byte a filter allocates
// (CuckooFilter::MemoryBytes) before the filter is allocated, and released
// only when the filter is freed: filters are handed out as shared_ptr, so a
// filter dropped while a request uses it stays alive, and charged, until the
// last such request ends. The budget therefore bounds the memory of all
// filters that exist, not only of those that have names.
//
// A growing filter (FilterShape::growing()) adds tables as inserts need
// them. Each is charged when it is added, whatever the budget says (growth
// happens while a logged write is applied, and must happen the same way on
// replay and on every replica), and released when the filter is freed. So
// memory_bytes() may pass the budget; cuckood refuses inserts into growing
// filters while it does (FilterServiceImpl), which bounds the excess by the
// growth of the batches already admitted.
//
// Thread safety: all methods are safe to call concurrently.
#ifndef CUCKOO_CORE_REGISTRY_H_
#define CUCKOO_CORE_REGISTRY_H_

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "base/mutex.h"
#include "base/shared_mutex.h"
#include "core/cuckoo_filter.h"

namespace cuckoo {

inline constexpr size_t kMaxFilterNameBytes = 512;

struct RegistryLimits {
  uint64_t memory_budget_bytes = uint64_t{8} << 30;  // Sum of all filters' tables.
  uint32_t max_filters = 1024;
};

class FilterRegistry {
 public:
  explicit FilterRegistry(RegistryLimits limits = {});
  ~FilterRegistry();

  // INVALID_ARGUMENT with the reason when `name` is not a valid filter name:
  // empty, longer than kMaxFilterNameBytes, with a NUL, or not valid UTF-8
  // (the message names the first bad byte's offset).
  static absl::Status ValidateName(absl::string_view name);
  // The offset of the first byte of `s` that does not start or continue a
  // valid UTF-8 sequence (overlong forms, surrogates and code points above
  // U+10FFFF are invalid, as protobuf says); npos if `s` is valid UTF-8.
  static size_t FirstInvalidUtf8Byte(absl::string_view s);
  // `name` in double quotes with every byte that is not printable ASCII
  // escaped (absl::CHexEscape): for messages and log lines, so that control
  // bytes never reach a terminal raw.
  static std::string QuoteName(absl::string_view name);

  // Creates filter `name`. If it exists: with `if_not_exists` and the same
  // settings (capacity, rate-derived shape, and seed if one was given) returns
  // the existing filter; otherwise ALREADY_EXISTS naming the differences.
  // RESOURCE_EXHAUSTED when the memory budget or filter count would be
  // exceeded; INVALID_ARGUMENT for bad names or options. `created`, if given,
  // tells whether the returned filter is new.
  //
  // `before_publish`, if given, runs with a new filter just before it gets
  // its name, under the registry's lock (keep it short: a log append); a
  // non-OK status abandons the creation and is returned. cuckood logs the
  // creation there, so that the log holds it before any write to the filter.
  using BeforePublish = std::function<absl::Status(CuckooFilter&)>;
  absl::StatusOr<std::shared_ptr<CuckooFilter>> Create(absl::string_view name,
                                                       const FilterOptions& options,
                                                       bool if_not_exists = false,
                                                       bool* created = nullptr,
                                                       const BeforePublish& before_publish = {});
  // Create's handling of a name that is taken, without creating: NOT_FOUND
  // when there is no filter `name`; the filter when if_not_exists and it
  // has the settings of `shape` (growth_factor, max_capacity and a growing
  // filter's false_positive_rate included; the seed compared only if
  // `seed_given`);
  // else ALREADY_EXISTS naming the differences. For callers that create
  // through a log (cuckood's cluster mode).
  absl::StatusOr<std::shared_ptr<CuckooFilter>> CheckExisting(absl::string_view name,
                                                              const FilterShape& shape,
                                                              bool seed_given,
                                                              bool if_not_exists) const;
  // Adds an already-built filter (e.g. loaded from a snapshot) under `name`,
  // with the same checks as Create; returns it as the registry hands it out.
  // A grown filter's budget check covers its first generation (what its
  // creation was admitted for); the tables it grew are charged whatever the
  // budget, as growth is.
  absl::StatusOr<std::shared_ptr<CuckooFilter>> Add(absl::string_view name,
                                                    std::unique_ptr<CuckooFilter> filter);

  // A name, one filter of the count and memory held for a filter that is
  // being built elsewhere and takes a while (cuckood's ImportFilter reads it
  // from a file, then makes it durable): while the claim is held, the name
  // is taken (Create, Add, CheckRoom and ClaimName of it fail with
  // ALREADY_EXISTS saying it is being added), and its bytes are charged to
  // the budget. AddClaimed publishes the filter under the name; a claim
  // destroyed unpublished gives everything back. Movable; the registry must
  // outlive it.
  class Claim {
   public:
    Claim() = default;
    Claim(Claim&& other) noexcept { *this = std::move(other); }
    Claim& operator=(Claim&& other) noexcept;
    ~Claim() { Release(); }
    bool held() const { return registry_ != nullptr; }
    const std::string& name() const { return name_; }
    uint64_t bytes() const { return bytes_; }

   private:
    friend class FilterRegistry;
    void Release();

    FilterRegistry* registry_ = nullptr;
    std::string name_;
    uint64_t bytes_ = 0;
  };
  // Claims `name` for a filter of `bytes` memory: INVALID_ARGUMENT for a bad
  // name, ALREADY_EXISTS when it is taken (or claimed), RESOURCE_EXHAUSTED
  // when the memory budget or filter count has no room.
  absl::StatusOr<Claim> ClaimName(absl::string_view name, uint64_t bytes);
  // Adds `filter` under the claim's name (it cannot be taken meanwhile);
  // `before_publish` as in Create. INVALID_ARGUMENT for a claim not held. A
  // filter larger than the claim's bytes (a grown filter claimed for its
  // first generation: a cluster replica's peer copy) has the difference
  // charged whatever the budget, as its growth was. ImportFilter claims a
  // file's whole size, so an import is checked against the budget in full.
  absl::StatusOr<std::shared_ptr<CuckooFilter>> AddClaimed(
      Claim claim, std::unique_ptr<CuckooFilter> filter, const BeforePublish& before_publish = {});

  // NOT_FOUND when there is no such filter. Expired filters included (for
  // their owner's drops and the log's replay); what clients see is GetLive.
  absl::StatusOr<std::shared_ptr<CuckooFilter>> Get(absl::string_view name) const;

  // --- Expiry (CuckooFilter::expire_at: Unix milliseconds) ---
  //
  // A filter is expired from its expire_at on (as a Redis key). The
  // registry never drops one by itself: its owner does, with a logged drop
  // (cuckood's expiry timer); until then GetLive and ListLive leave it out,
  // so that clients see it gone from the moment it expires.

  // The clock expiry is judged by (Unix milliseconds); the system clock by
  // default. Set it while no other thread reads it (tests: a fake clock).
  void SetClock(std::function<int64_t()> now_ms) { now_ms_ = std::move(now_ms); }
  int64_t NowMs() const;
  // Whether `filter` is expired now.
  bool Expired(const CuckooFilter& filter) const;
  // Get, but NOT_FOUND (saying it expired) for an expired filter.
  absl::StatusOr<std::shared_ptr<CuckooFilter>> GetLive(absl::string_view name) const;
  // List without the expired filters.
  std::vector<std::pair<std::string, std::shared_ptr<CuckooFilter>>> ListLive() const;
  // With `only_if`, drops the filter only if it is that one (else NOT_FOUND):
  // for callers that looked the filter up first and must not drop a newer
  // filter of the same name.
  absl::Status Drop(absl::string_view name, const CuckooFilter* only_if = nullptr);
  // Renames filter `name` to `new_name` in one step under the registry's
  // lock: no caller ever sees both names, or neither, or the destination's
  // earlier filter once Rename has returned. NOT_FOUND when there is no
  // filter `name` (or, with `only_if`, when it is not that filter);
  // INVALID_ARGUMENT for a bad new name; when `new_name` is taken (or
  // claimed): ALREADY_EXISTS unless `replace`, which drops the filter there
  // (returned in *replaced; null if none). `name == new_name` changes
  // nothing and succeeds (Redis's RENAME k k). `before_commit`, if given,
  // runs under the lock once every check has passed, with the filter and
  // the one to be replaced (null if none): a non-OK status abandons the
  // rename and is returned (cuckood logs the rename there, so that the log
  // orders it exactly where the registry does).
  using BeforeRename =
      std::function<absl::Status(CuckooFilter& filter, const CuckooFilter* replaced)>;
  absl::StatusOr<std::shared_ptr<CuckooFilter>> Rename(
      absl::string_view name, absl::string_view new_name, bool replace,
      const CuckooFilter* only_if = nullptr, std::shared_ptr<CuckooFilter>* replaced = nullptr,
      const BeforeRename& before_commit = {});
  // OK if a filter of `bytes` table memory named `name` could be added now
  // (the checks of Add, without adding).
  absl::Status CheckRoom(absl::string_view name, uint64_t bytes) const;
  // All filters, sorted by name.
  std::vector<std::pair<std::string, std::shared_ptr<CuckooFilter>>> List() const;

  // Bytes charged to the memory budget now: every filter not yet freed
  // (named or dropped but still in use, with the tables it grew) and
  // creations under way. May exceed limits().memory_budget_bytes by what
  // growing filters added (see above).
  uint64_t memory_bytes() const;
  size_t size() const;
  const RegistryLimits& limits() const { return limits_; }

 private:
  class Budget;

  // RESOURCE_EXHAUSTED naming `name` when there is no room for one more
  // filter; ALREADY_EXISTS when the name is taken.
  absl::Status CheckNameAndCountLocked(absl::string_view name) const
      ABSL_SHARED_LOCKS_REQUIRED(mu_);
  // Create's answer for a taken name (see CheckExisting).
  absl::StatusOr<std::shared_ptr<CuckooFilter>> ExistingLocked(
      const std::shared_ptr<CuckooFilter>& existing, absl::string_view name,
      const FilterShape& shape, bool seed_given, bool if_not_exists) const
      ABSL_SHARED_LOCKS_REQUIRED(mu_);
  // Makes `filter` charge each table it grows to the budget, counted in
  // *grown (released when the filter is freed).
  void WatchGrowth(CuckooFilter& filter, std::atomic<uint64_t>* grown);
  // Charges `filter` to the budget (`reserved` bytes of it reserved
  // already) and adds it under `name`.
  absl::StatusOr<std::shared_ptr<CuckooFilter>> AddReserved(
      absl::string_view name, std::unique_ptr<CuckooFilter> filter, uint64_t reserved,
      const BeforePublish& before_publish = {});

  const RegistryLimits limits_;
  const std::shared_ptr<Budget> budget_;
  std::function<int64_t()> now_ms_;  // Empty: the system clock.
  mutable SharedMutex mu_;
  absl::flat_hash_map<std::string, std::shared_ptr<CuckooFilter>> filters_ ABSL_GUARDED_BY(mu_);
  // Names held by Claims (see Claim); each counts as a filter.
  absl::flat_hash_set<std::string> claimed_ ABSL_GUARDED_BY(mu_);

  // Names a Create is working on: one creation of a name at a time, so a
  // racing idempotent create gets the filter, not a budget error caused by
  // the memory its twin holds.
  Mutex creating_mu_;
  std::condition_variable creating_cv_;
  absl::flat_hash_set<std::string> creating_ ABSL_GUARDED_BY(creating_mu_);
};

}  // namespace cuckoo

#endif  // CUCKOO_CORE_REGISTRY_H_
