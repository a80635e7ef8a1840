#include "server/request_window.h"

#include <utility>

#include "absl/time/clock.h"

namespace cuckoo::server {
namespace {
// Bytes an entry is charged beyond its results: the key, the map's slot.
constexpr uint64_t kEntryOverhead = 256;
}  // namespace

RequestWindow::Begin RequestWindow::Start(const std::string& key, Outcome* out, Waiter waiter) {
  MutexLock lock(&mu_);
  EvictLocked(absl::Now());
  auto [it, inserted] = entries_.try_emplace(key);
  Entry& e = it->second;
  if (inserted) return Begin::kNew;
  if (e.done) {
    *out = e.outcome;
    return Begin::kAnswered;
  }
  e.waiters.push_back(std::move(waiter));
  return Begin::kWaiting;
}

void RequestWindow::Finish(const std::string& key, Outcome outcome) {
  std::vector<Waiter> waiters;
  Outcome copy;
  {
    MutexLock lock(&mu_);
    auto it = entries_.find(key);
    if (it == entries_.end()) return;
    Entry& e = it->second;
    waiters.swap(e.waiters);
    if (!waiters.empty()) copy = outcome;
    e.done = true;
    e.outcome = std::move(outcome);
    e.expires = absl::Now() + window_;
    bytes_ += e.outcome.results.size() + kEntryOverhead;
    done_order_.push_back(key);
    EvictLocked(absl::Now());
  }
  for (Waiter& w : waiters) w(absl::OkStatus(), copy);
}

void RequestWindow::Abort(const std::string& key, const absl::Status& why) {
  std::vector<Waiter> waiters;
  {
    MutexLock lock(&mu_);
    auto it = entries_.find(key);
    if (it == entries_.end() || it->second.done) return;
    waiters.swap(it->second.waiters);
    entries_.erase(it);
  }
  for (Waiter& w : waiters) w(why, Outcome{});
}

void RequestWindow::EvictLocked(absl::Time now) {
  while (!done_order_.empty()) {
    auto it = entries_.find(done_order_.front());
    if (it != entries_.end() && it->second.done && it->second.expires > now &&
        bytes_ <= max_bytes_) {
      break;
    }
    if (it != entries_.end() && it->second.done) {
      bytes_ -= it->second.outcome.results.size() + kEntryOverhead;
      entries_.erase(it);
    }
    done_order_.pop_front();
  }
}

size_t RequestWindow::size() const {
  MutexLock lock(&mu_);
  return entries_.size();
}

}  // namespace cuckoo::server
