#include "core/registry.h"

#include <algorithm>
#include <atomic>
#include <functional>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "base/utf8.h"

namespace cuckoo {
namespace {

// Settings of `have` that differ from what `want` asks for.
std::vector<std::string> Differences(const FilterShape& have, const FilterShape& want,
                                     bool seed_given) {
  std::vector<std::string> d;
  auto cmp = [&](const char* name, uint64_t a, uint64_t b) {
    if (a != b) d.push_back(absl::StrFormat("%s %u (requested %u)", name, a, b));
  };
  cmp("capacity", have.capacity, want.capacity);
  cmp("fingerprint_bits", have.fingerprint_bits, want.fingerprint_bits);
  cmp("bucket_size", have.bucket_size, want.bucket_size);
  cmp("shards", have.shards, want.shards);
  cmp("max_kicks", have.max_kicks, want.max_kicks);
  cmp("growth_factor", have.growth_factor, want.growth_factor);
  cmp("max_capacity", have.max_capacity, want.max_capacity);
  if (have.false_positive_rate != want.false_positive_rate) {
    d.push_back(absl::StrFormat("false_positive_rate %g (requested %g)", have.false_positive_rate,
                                want.false_positive_rate));
  }
  if (seed_given) cmp("seed", have.seed, want.seed);
  if (have.table_kind != want.table_kind) {
    d.push_back(absl::StrFormat("table kind %s (requested %s)", TableKindName(have.table_kind),
                                TableKindName(want.table_kind)));
  }
  return d;
}

}  // namespace

size_t FilterRegistry::FirstInvalidUtf8Byte(absl::string_view s) {
  return cuckoo::FirstInvalidUtf8Byte(s);
}

std::string FilterRegistry::QuoteName(absl::string_view name) {
  return absl::StrCat("\"", absl::CHexEscape(name), "\"");
}

absl::Status FilterRegistry::ValidateName(absl::string_view name) {
  if (name.empty()) return absl::InvalidArgumentError("filter name is empty");
  if (name.size() > kMaxFilterNameBytes) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "filter name is %u bytes; at most %u are allowed", name.size(), kMaxFilterNameBytes));
  }
  if (const size_t nul = name.find('\0'); nul != absl::string_view::npos) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "filter name %s has a NUL byte at offset %u; names may hold any byte but NUL",
        QuoteName(name), nul));
  }
  if (const size_t bad = FirstInvalidUtf8Byte(name); bad != absl::string_view::npos) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "filter name %s is not valid UTF-8 (byte 0x%02x at offset %u); names must be UTF-8 so "
        "that every filter is reachable over gRPC, whose strings are UTF-8",
        QuoteName(name), static_cast<unsigned char>(name[bad]), bad));
  }
  return absl::OkStatus();
}

// The memory budget: bytes reserved (for creations under way) or charged
// (to filters not yet freed). Shared with the filters' charges, which may
// outlive the registry.
class FilterRegistry::Budget {
 public:
  explicit Budget(uint64_t limit) : limit_(limit) {}

  // Reserves `bytes`, or says how much is free.
  absl::Status Reserve(absl::string_view name, uint64_t bytes) {
    uint64_t used = used_.load(std::memory_order_relaxed);
    do {
      if (absl::Status s = Fits(name, bytes, used); !s.ok()) return s;
    } while (!used_.compare_exchange_weak(used, used + bytes, std::memory_order_relaxed));
    return absl::OkStatus();
  }
  // The same check, reserving nothing.
  absl::Status Check(absl::string_view name, uint64_t bytes) const {
    return Fits(name, bytes, used_.load(std::memory_order_relaxed));
  }
  // Charges `bytes` whatever the limit: a filter's growth, which happens as
  // a write is applied and cannot be refused there (replay and replicas
  // must apply it the same way). The server refuses writes that could grow
  // once used() reaches the limit.
  void Charge(uint64_t bytes) { used_.fetch_add(bytes, std::memory_order_relaxed); }
  void Release(uint64_t bytes) { used_.fetch_sub(bytes, std::memory_order_relaxed); }
  uint64_t used() const { return used_.load(std::memory_order_relaxed); }

 private:
  absl::Status Fits(absl::string_view name, uint64_t bytes, uint64_t used) const {
    const uint64_t free = limit_ - std::min(used, limit_);
    if (bytes <= free) return absl::OkStatus();
    return absl::ResourceExhaustedError(absl::StrFormat(
        "cannot create filter \"%s\": needs %u bytes but only %u of the memory budget of %u "
        "bytes are free",
        name, bytes, free, limit_));
  }

  const uint64_t limit_;
  std::atomic<uint64_t> used_{0};
};

namespace {

// What the registry hands out: a filter, and its charge on the budget,
// released after the filter is freed: the bytes charged when it was added,
// and those of every table it grew since (`grown`, counted by its growth
// listener).
struct ChargedFilter {
  std::unique_ptr<CuckooFilter> filter;
  std::atomic<uint64_t> grown{0};
  std::function<void(uint64_t grown)> release;
  ~ChargedFilter() {
    filter.reset();
    if (release) release(grown.load(std::memory_order_relaxed));
  }
};

}  // namespace

FilterRegistry::FilterRegistry(RegistryLimits limits)
    : limits_(limits), budget_(std::make_shared<Budget>(limits.memory_budget_bytes)) {}

FilterRegistry::~FilterRegistry() = default;

absl::Status FilterRegistry::CheckNameAndCountLocked(absl::string_view name) const {
  if (filters_.contains(name)) {
    return absl::AlreadyExistsError(absl::StrFormat("filter %s already exists", QuoteName(name)));
  }
  if (claimed_.contains(name)) {
    return absl::AlreadyExistsError(absl::StrFormat(
        "filter %s is being added (an import of it is under way)", QuoteName(name)));
  }
  if (filters_.size() + claimed_.size() >= limits_.max_filters) {
    return absl::ResourceExhaustedError(absl::StrFormat(
        "cannot create filter \"%s\": max filters %u reached", name, limits_.max_filters));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<CuckooFilter>> FilterRegistry::ExistingLocked(
    const std::shared_ptr<CuckooFilter>& existing, absl::string_view name, const FilterShape& shape,
    bool seed_given, bool if_not_exists) const {
  std::vector<std::string> diff = Differences(existing->shape(), shape, seed_given);
  if (if_not_exists && diff.empty()) return existing;
  return absl::AlreadyExistsError(
      diff.empty() ? absl::StrFormat("filter %s already exists", QuoteName(name))
                   : absl::StrFormat("filter %s already exists with other settings: %s",
                                     QuoteName(name), absl::StrJoin(diff, ", ")));
}

absl::StatusOr<std::shared_ptr<CuckooFilter>> FilterRegistry::CheckExisting(
    absl::string_view name, const FilterShape& shape, bool seed_given, bool if_not_exists) const {
  ReaderLock lock(&mu_);
  auto it = filters_.find(name);
  if (it == filters_.end()) {
    return absl::NotFoundError(absl::StrFormat("filter %s not found", QuoteName(name)));
  }
  return ExistingLocked(it->second, name, shape, seed_given, if_not_exists);
}

absl::StatusOr<std::shared_ptr<CuckooFilter>> FilterRegistry::Create(
    absl::string_view name, const FilterOptions& options, bool if_not_exists, bool* created,
    const BeforePublish& before_publish) {
  if (created != nullptr) *created = false;
  if (absl::Status s = ValidateName(name); !s.ok()) return s;
  absl::StatusOr<FilterShape> shape = ComputeShape(options);
  if (!shape.ok()) return shape.status();
  // Wait for a creation of this name already under way: its outcome is this
  // call's starting point.
  {
    MutexLock lock(&creating_mu_);
    while (creating_.contains(name)) creating_mu_.Wait(&creating_cv_);
    creating_.emplace(name);
  }
  struct Done {
    FilterRegistry* r;
    absl::string_view name;
    ~Done() {
      {
        MutexLock lock(&r->creating_mu_);
        r->creating_.erase(name);
      }
      r->creating_cv_.notify_all();
    }
  } done{this, name};
  {
    ReaderLock lock(&mu_);
    if (auto it = filters_.find(name); it != filters_.end()) {
      return ExistingLocked(it->second, name, *shape, options.seed.has_value(), if_not_exists);
    }
    if (absl::Status s = CheckNameAndCountLocked(name); !s.ok()) return s;
  }
  // The memory is reserved before it is allocated, so creations racing each
  // other cannot together exceed the budget; it is allocated outside the
  // lock (large tables take a while to map), then the name is checked
  // again: another creator may have won the race.
  const uint64_t bytes = CuckooFilter::MemoryBytes(*shape);
  if (absl::Status s = budget_->Reserve(name, bytes); !s.ok()) return s;
  absl::StatusOr<std::unique_ptr<CuckooFilter>> filter = CuckooFilter::FromShape(*shape);
  if (!filter.ok()) {
    budget_->Release(bytes);
    return filter.status();
  }
  absl::StatusOr<std::shared_ptr<CuckooFilter>> added =
      AddReserved(name, *std::move(filter), bytes, before_publish);
  if (!added.ok()) return added.status();
  if (created != nullptr) *created = true;
  return added;
}

absl::StatusOr<std::shared_ptr<CuckooFilter>> FilterRegistry::Add(
    absl::string_view name, std::unique_ptr<CuckooFilter> filter) {
  if (absl::Status s = ValidateName(name); !s.ok()) return s;
  {
    ReaderLock lock(&mu_);
    if (absl::Status s = CheckNameAndCountLocked(name); !s.ok()) return s;
  }
  // The budget admits what the filter's creation was admitted for (its
  // first generation); tables it has grown since are charged whatever the
  // budget, as growth is: a server whose filters grew past the budget must
  // still load them all at its next start.
  const uint64_t total = filter->memory_bytes();
  const uint64_t bytes = std::min(total, CuckooFilter::MemoryBytes(filter->shape()));
  if (absl::Status s = budget_->Reserve(name, bytes); !s.ok()) return s;
  budget_->Charge(total - bytes);
  return AddReserved(name, std::move(filter), total);
}

absl::StatusOr<std::shared_ptr<CuckooFilter>> FilterRegistry::AddReserved(
    absl::string_view name, std::unique_ptr<CuckooFilter> filter, uint64_t reserved,
    const BeforePublish& before_publish) {
  // From here the charge belongs to the filter: freed with it. (Until it
  // does, an allocation failing here gives it back.)
  std::shared_ptr<ChargedFilter> charged;
  try {
    charged = std::make_shared<ChargedFilter>();
    charged->release = [budget = budget_, reserved](uint64_t grown) {
      budget->Release(reserved + grown);
    };
  } catch (...) {
    budget_->Release(reserved);
    throw;
  }
  charged->filter = std::move(filter);
  WatchGrowth(*charged->filter, &charged->grown);
  std::shared_ptr<CuckooFilter> shared(charged, charged->filter.get());
  WriterLock lock(&mu_);
  if (absl::Status s = CheckNameAndCountLocked(name); !s.ok()) return s;
  if (before_publish) {
    if (absl::Status s = before_publish(*shared); !s.ok()) return s;
  }
  filters_.emplace(name, shared);
  return shared;
}

FilterRegistry::Claim& FilterRegistry::Claim::operator=(Claim&& other) noexcept {
  if (this != &other) {
    Release();
    registry_ = std::exchange(other.registry_, nullptr);
    name_ = std::move(other.name_);
    bytes_ = std::exchange(other.bytes_, 0);
  }
  return *this;
}

void FilterRegistry::Claim::Release() {
  if (registry_ == nullptr) return;
  {
    WriterLock lock(&registry_->mu_);
    registry_->claimed_.erase(name_);
  }
  registry_->budget_->Release(bytes_);
  registry_ = nullptr;
}

absl::StatusOr<FilterRegistry::Claim> FilterRegistry::ClaimName(absl::string_view name,
                                                                uint64_t bytes) {
  if (absl::Status s = ValidateName(name); !s.ok()) return s;
  Claim claim;
  WriterLock lock(&mu_);
  if (absl::Status s = CheckNameAndCountLocked(name); !s.ok()) return s;
  if (absl::Status s = budget_->Reserve(name, bytes); !s.ok()) return s;
  claimed_.emplace(name);
  claim.registry_ = this;
  claim.name_ = std::string(name);
  claim.bytes_ = bytes;
  return claim;
}

absl::StatusOr<std::shared_ptr<CuckooFilter>> FilterRegistry::AddClaimed(
    Claim claim, std::unique_ptr<CuckooFilter> filter, const BeforePublish& before_publish) {
  if (claim.registry_ != this) {
    return absl::InvalidArgumentError("AddClaimed: the claim is not held on this registry");
  }
  if (filter->memory_bytes() > claim.bytes_) {
    // A grown filter whose claim covered its first generation (a peer
    // copy: the replica must hold every filter of the log, as replay
    // would): the tables it grew are charged whatever the budget, as
    // growth is, and held by the claim until the filter is published.
    const uint64_t more = filter->memory_bytes() - claim.bytes_;
    budget_->Charge(more);
    claim.bytes_ += more;
  }
  // From here the charge belongs to the filter, freed with it.
  auto charged = std::make_shared<ChargedFilter>();
  charged->filter = std::move(filter);
  WatchGrowth(*charged->filter, &charged->grown);
  // Until it is published, the claim holds the filter's bytes (and gives
  // them back if it is not); the filter only what it might grow.
  charged->release = [budget = budget_](uint64_t grown) { budget->Release(grown); };
  std::shared_ptr<CuckooFilter> shared(charged, charged->filter.get());
  WriterLock lock(&mu_);
  if (before_publish) {
    if (absl::Status s = before_publish(*shared); !s.ok()) return s;  // The claim gives back.
  }
  charged->release = [budget = budget_, bytes = claim.bytes_](uint64_t grown) {
    budget->Release(bytes + grown);
  };
  claimed_.erase(claim.name_);
  claim.registry_ = nullptr;  // Its name and bytes are the filter's now.
  filters_.emplace(claim.name_, shared);
  return shared;
}

void FilterRegistry::WatchGrowth(CuckooFilter& filter, std::atomic<uint64_t>* grown) {
  // Called under the growing shard's lock: two atomic adds.
  filter.set_growth_listener([budget = budget_, grown](uint64_t bytes) {
    budget->Charge(bytes);
    grown->fetch_add(bytes, std::memory_order_relaxed);
  });
}

absl::StatusOr<std::shared_ptr<CuckooFilter>> FilterRegistry::Get(absl::string_view name) const {
  ReaderLock lock(&mu_);
  auto it = filters_.find(name);
  if (it == filters_.end()) {
    return absl::NotFoundError(absl::StrFormat("filter %s not found", QuoteName(name)));
  }
  return it->second;
}

int64_t FilterRegistry::NowMs() const {
  return now_ms_ ? now_ms_() : absl::ToUnixMillis(absl::Now());
}

bool FilterRegistry::Expired(const CuckooFilter& filter) const {
  const int64_t at = filter.expire_at();
  return at != 0 && NowMs() >= at;
}

absl::StatusOr<std::shared_ptr<CuckooFilter>> FilterRegistry::GetLive(
    absl::string_view name) const {
  absl::StatusOr<std::shared_ptr<CuckooFilter>> f = Get(name);
  if (f.ok() && Expired(**f)) {
    return absl::NotFoundError(absl::StrFormat(
        "filter %s not found: it expired at %s", QuoteName(name),
        absl::FormatTime(absl::RFC3339_full, absl::FromUnixMillis((*f)->expire_at()),
                         absl::UTCTimeZone())));
  }
  return f;
}

std::vector<std::pair<std::string, std::shared_ptr<CuckooFilter>>> FilterRegistry::ListLive()
    const {
  std::vector<std::pair<std::string, std::shared_ptr<CuckooFilter>>> out = List();
  const int64_t now = NowMs();
  std::erase_if(out, [&](const auto& e) {
    const int64_t at = e.second->expire_at();
    return at != 0 && now >= at;
  });
  return out;
}

absl::Status FilterRegistry::CheckRoom(absl::string_view name, uint64_t bytes) const {
  {
    ReaderLock lock(&mu_);
    if (absl::Status s = CheckNameAndCountLocked(name); !s.ok()) return s;
  }
  return budget_->Check(name, bytes);
}

absl::Status FilterRegistry::Drop(absl::string_view name, const CuckooFilter* only_if) {
  WriterLock lock(&mu_);
  auto it = filters_.find(name);
  if (it == filters_.end() || (only_if != nullptr && it->second.get() != only_if)) {
    return absl::NotFoundError(absl::StrFormat("filter %s not found", QuoteName(name)));
  }
  // The budget keeps the filter's charge until the filter is freed.
  filters_.erase(it);
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<CuckooFilter>> FilterRegistry::Rename(
    absl::string_view name, absl::string_view new_name, bool replace, const CuckooFilter* only_if,
    std::shared_ptr<CuckooFilter>* replaced, const BeforeRename& before_commit) {
  if (replaced != nullptr) replaced->reset();
  if (absl::Status s = ValidateName(new_name); !s.ok()) return s;
  WriterLock lock(&mu_);
  auto it = filters_.find(name);
  if (it == filters_.end() || (only_if != nullptr && it->second.get() != only_if)) {
    return absl::NotFoundError(absl::StrFormat("filter %s not found", QuoteName(name)));
  }
  std::shared_ptr<CuckooFilter> filter = it->second;
  if (name == new_name) {
    if (before_commit) {
      if (absl::Status s = before_commit(*filter, nullptr); !s.ok()) return s;
    }
    return filter;
  }
  if (claimed_.contains(new_name)) {
    return absl::AlreadyExistsError(
        absl::StrFormat("filter %s is being added", QuoteName(new_name)));
  }
  auto dest = filters_.find(new_name);
  if (dest != filters_.end() && !replace) {
    return absl::AlreadyExistsError(
        absl::StrFormat("filter %s already exists", QuoteName(new_name)));
  }
  if (before_commit) {
    if (absl::Status s =
            before_commit(*filter, dest != filters_.end() ? dest->second.get() : nullptr);
        !s.ok()) {
      return s;
    }
  }
  // The budget keeps a replaced filter's charge until it is freed.
  if (dest != filters_.end()) {
    if (replaced != nullptr) *replaced = std::move(dest->second);
    filters_.erase(dest);
  }
  filters_.erase(filters_.find(name));
  filters_.emplace(std::string(new_name), filter);
  return filter;
}

std::vector<std::pair<std::string, std::shared_ptr<CuckooFilter>>> FilterRegistry::List() const {
  std::vector<std::pair<std::string, std::shared_ptr<CuckooFilter>>> out;
  {
    ReaderLock lock(&mu_);
    out.assign(filters_.begin(), filters_.end());
  }
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  return out;
}

uint64_t FilterRegistry::memory_bytes() const { return budget_->used(); }

size_t FilterRegistry::size() const {
  ReaderLock lock(&mu_);
  return filters_.size();
}

}  // namespace cuckoo
