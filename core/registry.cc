#include "core/registry.h"

#include <algorithm>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

namespace cuckoo {
namespace {

// Table bytes a filter of this shape will allocate.
uint64_t PlannedBytes(const FilterShape& s) { return CuckooTable::AllocationBytes(s) * s.shards; }

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
  if (seed_given) cmp("seed", have.seed, want.seed);
  if (have.table_kind != want.table_kind) {
    d.push_back(absl::StrFormat("table kind %s (requested %s)", TableKindName(have.table_kind),
                                TableKindName(want.table_kind)));
  }
  return d;
}

}  // namespace

absl::Status FilterRegistry::ValidateName(absl::string_view name) {
  if (name.empty()) return absl::InvalidArgumentError("filter name is empty");
  if (name.size() > kMaxFilterNameBytes) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "filter name is %u bytes; at most %u are allowed", name.size(), kMaxFilterNameBytes));
  }
  auto ok = [](char c) { return absl::ascii_isalnum(c) || c == '.' || c == '_' || c == '-'; };
  if (!absl::ascii_isalnum(name[0])) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "filter name \"%s\" must start with a letter or digit", absl::CHexEscape(name)));
  }
  for (char c : name) {
    if (!ok(c)) {
      return absl::InvalidArgumentError(
          absl::StrFormat("filter name \"%s\" has character '%s'; allowed are A-Z a-z 0-9 . _ -",
                          absl::CHexEscape(name), absl::CHexEscape(absl::string_view(&c, 1))));
    }
  }
  return absl::OkStatus();
}

absl::Status FilterRegistry::CheckRoomLocked(absl::string_view name, uint64_t bytes) const {
  if (filters_.size() >= limits_.max_filters) {
    return absl::ResourceExhaustedError(absl::StrFormat(
        "cannot create filter \"%s\": max filters %u reached", name, limits_.max_filters));
  }
  if (bytes > limits_.memory_budget_bytes - std::min(memory_bytes_, limits_.memory_budget_bytes)) {
    return absl::ResourceExhaustedError(absl::StrFormat(
        "cannot create filter \"%s\": needs %u bytes but only %u of the memory budget of %u "
        "bytes are free",
        name, bytes,
        limits_.memory_budget_bytes - std::min(memory_bytes_, limits_.memory_budget_bytes),
        limits_.memory_budget_bytes));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<CuckooFilter>> FilterRegistry::Create(absl::string_view name,
                                                                     const FilterOptions& options,
                                                                     bool if_not_exists,
                                                                     bool* created) {
  if (created != nullptr) *created = false;
  if (absl::Status s = ValidateName(name); !s.ok()) return s;
  absl::StatusOr<FilterShape> shape = ComputeShape(options);
  if (!shape.ok()) return shape.status();
  {
    ReaderLock lock(&mu_);
    if (auto it = filters_.find(name); it != filters_.end()) {
      std::vector<std::string> diff =
          Differences(it->second->shape(), *shape, options.seed.has_value());
      if (if_not_exists && diff.empty()) return it->second;
      return absl::AlreadyExistsError(
          diff.empty() ? absl::StrFormat("filter \"%s\" already exists", name)
                       : absl::StrFormat("filter \"%s\" already exists with other settings: %s",
                                         name, absl::StrJoin(diff, ", ")));
    }
    if (absl::Status s = CheckRoomLocked(name, PlannedBytes(*shape)); !s.ok()) return s;
  }
  // Allocate outside the lock (large tables take a while to map), then check
  // again: another creator may have won the race.
  absl::StatusOr<std::unique_ptr<CuckooFilter>> filter = CuckooFilter::FromShape(*shape);
  if (!filter.ok()) return filter.status();
  std::shared_ptr<CuckooFilter> shared = *std::move(filter);
  if (absl::Status s = Add(name, shared); !s.ok()) {
    if (absl::IsAlreadyExists(s) && if_not_exists) {
      return Create(name, options, if_not_exists, created);
    }
    return s;
  }
  if (created != nullptr) *created = true;
  return shared;
}

absl::Status FilterRegistry::Add(absl::string_view name, std::shared_ptr<CuckooFilter> filter) {
  if (absl::Status s = ValidateName(name); !s.ok()) return s;
  WriterLock lock(&mu_);
  if (filters_.contains(name)) {
    return absl::AlreadyExistsError(absl::StrFormat("filter \"%s\" already exists", name));
  }
  if (absl::Status s = CheckRoomLocked(name, filter->memory_bytes()); !s.ok()) return s;
  memory_bytes_ += filter->memory_bytes();
  filters_.emplace(name, std::move(filter));
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<CuckooFilter>> FilterRegistry::Get(absl::string_view name) const {
  ReaderLock lock(&mu_);
  auto it = filters_.find(name);
  if (it == filters_.end()) {
    return absl::NotFoundError(absl::StrFormat("filter \"%s\" not found", absl::CHexEscape(name)));
  }
  return it->second;
}

absl::Status FilterRegistry::CheckRoom(absl::string_view name, uint64_t bytes) const {
  ReaderLock lock(&mu_);
  if (filters_.contains(name)) {
    return absl::AlreadyExistsError(absl::StrFormat("filter \"%s\" already exists", name));
  }
  return CheckRoomLocked(name, bytes);
}

absl::Status FilterRegistry::Drop(absl::string_view name, const CuckooFilter* only_if) {
  WriterLock lock(&mu_);
  auto it = filters_.find(name);
  if (it == filters_.end() || (only_if != nullptr && it->second.get() != only_if)) {
    return absl::NotFoundError(absl::StrFormat("filter \"%s\" not found", absl::CHexEscape(name)));
  }
  memory_bytes_ -= it->second->memory_bytes();
  filters_.erase(it);
  return absl::OkStatus();
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

uint64_t FilterRegistry::memory_bytes() const {
  ReaderLock lock(&mu_);
  return memory_bytes_;
}

size_t FilterRegistry::size() const {
  ReaderLock lock(&mu_);
  return filters_.size();
}

}  // namespace cuckoo
