#include "server/wal/wal_apply.h"

#include <algorithm>
#include <utility>

#include "absl/strings/escaping.h"
#include "absl/strings/str_format.h"

namespace cuckoo::server {

uint64_t WalApplier::ReplayMemoryBound(uint64_t segment_bytes, size_t workers) {
  const Options defaults;
  // (ScanWal's records held inside transactions: kWalScanHeldBytes.)
  return segment_bytes + kWalScanHeldBytes + defaults.max_queued_bytes +
         std::max<size_t>(1, workers) * Batch::CapacityBytes(defaults);
}

WalApplier::WalApplier(size_t workers, Options options) : options_(options) {
  workers = std::max<size_t>(1, workers);
  for (size_t i = 0; i < workers; ++i) workers_.push_back(std::make_unique<Worker>());
  for (auto& w : workers_) w->thread = std::thread([this, p = w.get()] { Run(*p); });
}

WalApplier::~WalApplier() {
  for (auto& w : workers_) {
    Hand(*w);
    MutexLock lock(&w->mu);
    w->stop = true;
    w->cv.notify_one();
  }
  for (auto& w : workers_) w->thread.join();
}

void WalApplier::Apply(const Target* target, const WalRecord& r) {
  // One filter's shards spread over the workers, and different filters'
  // shard 0 over different workers.
  const size_t slot =
      (reinterpret_cast<uintptr_t>(target) / alignof(Target) + r.write.shard) % workers_.size();
  Worker& w = *workers_[slot];
  Batch& b = w.filling;
  if (b.items.empty()) b.Reserve(options_);
  b.items.push_back({.target = target,
                     .lsn = r.lsn,
                     .write = {.kind = r.write.kind,
                               .shard = r.write.shard,
                               .if_absent = r.write.if_absent,
                               .full_before = r.write.full_before,
                               .ceiling = r.write.ceiling},
                     .offset = b.hashes.size(),
                     .count = r.hashes.size()});
  b.hashes.insert(b.hashes.end(), r.hashes.begin(), r.hashes.end());
  // Records without keys (none the writer makes) count too: a batch never
  // outgrows what Reserve gave it.
  if (b.hashes.size() >= options_.batch_hashes || b.items.size() >= options_.batch_hashes) {
    Hand(w);
  }
}

void WalApplier::Hand(Worker& w) {
  if (w.filling.items.empty()) return;
  const uint64_t bytes = w.filling.Bytes();
  {
    MutexLock lock(&mu_);
    // One batch always fits, however large: the bound is on what waits.
    while (queued_bytes_ > 0 && queued_bytes_ + bytes > options_.max_queued_bytes) {
      mu_.Wait(&room_cv_);
    }
    queued_bytes_ += bytes;
  }
  MutexLock lock(&w.mu);
  w.queue.push_back(std::move(w.filling));
  w.filling = Batch{};
  w.cv.notify_one();
}

absl::Status WalApplier::Drain(uint64_t* applied) {
  for (auto& w : workers_) Hand(*w);
  MutexLock lock(&mu_);
  while (queued_bytes_ > 0) mu_.Wait(&room_cv_);
  *applied = applied_;
  return error_;
}

void WalApplier::Run(Worker& w) {
  while (true) {
    Batch b;
    {
      MutexLock lock(&w.mu);
      while (!w.stop && w.queue.empty()) w.mu.Wait(&w.cv);
      if (w.queue.empty()) return;
      b = std::move(w.queue.front());
      w.queue.pop_front();
    }
    bool failed;
    {
      MutexLock lock(&mu_);
      failed = !error_.ok();
    }
    for (size_t begin = 0; begin < b.items.size() && !failed;) {
      size_t end = begin + 1;
      while (end < b.items.size() && b.items[end].target == b.items[begin].target) ++end;
      failed = !ApplyRun(b, begin, end);
      begin = end;
    }
    MutexLock lock(&mu_);
    queued_bytes_ -= b.Bytes();
    room_cv_.notify_all();
  }
}

bool WalApplier::ApplyRun(const Batch& b, size_t begin, size_t end) {
  const size_t n = end - begin;
  std::vector<ShardWrite> writes(n);
  std::vector<uint64_t> positions(n);
  for (size_t i = 0; i < n; ++i) {
    const Item& item = b.items[begin + i];
    writes[i] = item.write;
    writes[i].hashes = absl::MakeConstSpan(b.hashes.data() + item.offset, item.count);
    positions[i] = item.lsn;
  }
  CuckooFilter& filter = *b.items[begin].target->filter;
  absl::StatusOr<size_t> applied = filter.ApplyShardWrites(writes, positions);
  if (applied.ok()) {
    MutexLock lock(&mu_);
    applied_ += *applied;
    return true;
  }
  // Nothing was applied: once more one by one, to name the bad record and
  // apply the ones before it.
  size_t before = 0;
  absl::Status error;
  for (size_t i = 0; i < n && error.ok(); ++i) {
    absl::StatusOr<bool> one = filter.ApplyShardWrite(writes[i], positions[i]);
    if (!one.ok()) {
      error = absl::DataLossError(absl::StrFormat(
          "write-ahead log record lsn %u cannot be applied to filter \"%s\": %s", positions[i],
          absl::CHexEscape(b.items[begin].target->name), one.status().message()));
    } else if (*one) {
      ++before;
    }
  }
  MutexLock lock(&mu_);
  applied_ += before;
  if (error_.ok()) error_ = error;
  return false;
}

}  // namespace cuckoo::server
