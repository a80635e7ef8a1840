#include "server/storage/request_window.h"

#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "base/little_endian.h"
#include "core/hash.h"  // xxhash.h

namespace cuckoo::server {
namespace {
// Bytes an entry is charged beyond its results: the key, the map's slot.
constexpr uint64_t kEntryOverhead = 256;

// <data-dir>/REQUESTS: magic, version u32, count u32, entries, then
// XXH3-64 of everything before it (docs/WAL_FORMAT.md).
constexpr char kSaveMagic[8] = {'\x89', 'C', 'K', 'R', 'E', 'Q', '\n', 0};
constexpr uint32_t kSaveVersion = 1;
constexpr size_t kSaveHeader = 16;
// key_length u32, flags u32 (bit 0: in doubt), time (Unix µs) u64,
// position u64, result count u32; then the key and the results.
constexpr size_t kSaveEntryFixed = 28;
constexpr uint32_t kSaveInDoubt = 1;

uint64_t Charge(const RequestWindow::Outcome& o) { return o.results.size() + kEntryOverhead; }
}  // namespace

RequestWindow::Begin RequestWindow::Start(const std::string& key, Outcome* out, Waiter waiter) {
  MutexLock lock(&mu_);
  EvictLocked(absl::Now());
  auto [it, inserted] = entries_.try_emplace(key);
  Entry& e = it->second;
  if (inserted) {
    e.time = absl::Now();
    return Begin::kNew;
  }
  if (e.done) {
    if (e.in_doubt) return Begin::kInDoubt;
    *out = e.outcome;
    return Begin::kAnswered;
  }
  e.waiters.push_back(std::move(waiter));
  return Begin::kWaiting;
}

void RequestWindow::Logged(const std::string& key) {
  MutexLock lock(&mu_);
  auto it = entries_.find(key);
  if (it != entries_.end() && !it->second.done) it->second.logged = true;
}

void RequestWindow::Recorded(const std::string& key, uint64_t lsn, const Outcome& outcome) {
  MutexLock lock(&mu_);
  auto it = entries_.find(key);
  if (it == entries_.end() || it->second.done) return;
  it->second.record_lsn = lsn;
  it->second.outcome = outcome;
}

void RequestWindow::DoneLocked(const std::string& key, Entry& e, absl::Time time) {
  e.done = true;
  e.logged = false;
  e.record_lsn = 0;
  e.time = time;
  e.expires = time + window_;
  bytes_ += Charge(e.outcome);
  done_order_.push_back(key);
}

void RequestWindow::Finish(const std::string& key, Outcome outcome) {
  std::vector<Waiter> waiters;
  Outcome copy;
  {
    MutexLock lock(&mu_);
    auto it = entries_.find(key);
    if (it == entries_.end() || it->second.done) return;
    Entry& e = it->second;
    waiters.swap(e.waiters);
    if (!waiters.empty()) copy = outcome;
    e.outcome = std::move(outcome);
    DoneLocked(key, e, absl::Now());
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

void RequestWindow::Abandon(const std::string& key, const absl::Status& why) {
  std::vector<Waiter> waiters;
  {
    MutexLock lock(&mu_);
    auto it = entries_.find(key);
    if (it == entries_.end() || it->second.done) return;
    Entry& e = it->second;
    waiters.swap(e.waiters);
    e.outcome = Outcome{};
    e.in_doubt = true;
    DoneLocked(key, e, absl::Now());
    EvictLocked(absl::Now());
  }
  const absl::Status aborted = absl::AbortedError(
      absl::StrCat("the first try of this request_id ended part-way (", why.message(), ")"));
  for (Waiter& w : waiters) w(aborted, Outcome{});
}

std::vector<RequestWindow::Saved> RequestWindow::Save(uint64_t synced_lsn) const {
  std::vector<Saved> out;
  MutexLock lock(&mu_);
  const absl::Time now = absl::Now();
  for (const auto& [key, e] : entries_) {
    if (e.done) {
      if (e.expires <= now) continue;
      out.push_back({.key = key, .in_doubt = e.in_doubt, .time = e.time, .outcome = e.outcome});
    } else if (e.record_lsn != 0 && e.record_lsn <= synced_lsn) {
      // Durable, not yet answered: it finishes now, as far as a restart knows.
      out.push_back({.key = key, .in_doubt = false, .time = now, .outcome = e.outcome});
    } else if (e.logged) {
      out.push_back({.key = key, .in_doubt = true, .time = e.time, .outcome = {}});
    }
  }
  return out;
}

void RequestWindow::RestoreDone(const std::string& key, absl::Time finished, Outcome outcome) {
  MutexLock lock(&mu_);
  const absl::Time now = absl::Now();
  if (finished + window_ <= now) return;
  auto [it, inserted] = entries_.try_emplace(key);
  Entry& e = it->second;
  if (!inserted) {
    if (!e.done || (!e.in_doubt && e.time >= finished)) return;
    bytes_ -= Charge(e.outcome);
  }
  e.in_doubt = false;
  e.outcome = std::move(outcome);
  if (inserted || !e.done) {
    DoneLocked(key, e, finished);
  } else {
    e.time = finished;
    e.expires = finished + window_;
    bytes_ += Charge(e.outcome);
  }
  EvictLocked(now);
}

void RequestWindow::RestoreInDoubt(const std::string& key, absl::Time started) {
  MutexLock lock(&mu_);
  const absl::Time now = absl::Now();
  if (started + window_ <= now) return;
  auto [it, inserted] = entries_.try_emplace(key);
  Entry& e = it->second;
  if (!inserted) {
    if (!e.done || e.in_doubt || e.time >= started) return;
    // A finished entry older than this start: the id was sent again after
    // the window, and that try is the one in doubt.
    bytes_ -= Charge(e.outcome);
    e.outcome = Outcome{};
    e.in_doubt = true;
    e.time = started;
    e.expires = started + window_;
    bytes_ += Charge(e.outcome);
    return;
  }
  e.in_doubt = true;
  DoneLocked(key, e, started);
  EvictLocked(now);
}

std::string RequestWindow::Encode(const std::vector<Saved>& entries) {
  size_t bytes = kSaveHeader + 8;
  for (const Saved& s : entries) bytes += kSaveEntryFixed + s.key.size() + s.outcome.results.size();
  std::string out(bytes, '\0');
  uint8_t* p = reinterpret_cast<uint8_t*>(out.data());
  std::memcpy(p, kSaveMagic, 8);
  Put32(p + 8, kSaveVersion);
  Put32(p + 12, static_cast<uint32_t>(entries.size()));
  uint8_t* q = p + kSaveHeader;
  for (const Saved& s : entries) {
    Put32(q, static_cast<uint32_t>(s.key.size()));
    Put32(q + 4, s.in_doubt ? kSaveInDoubt : 0);
    Put64(q + 8, static_cast<uint64_t>(absl::ToUnixMicros(s.time)));
    Put64(q + 16, s.outcome.position);
    Put32(q + 24, static_cast<uint32_t>(s.outcome.results.size()));
    q += kSaveEntryFixed;
    std::memcpy(q, s.key.data(), s.key.size());
    q += s.key.size();
    if (!s.outcome.results.empty()) {
      std::memcpy(q, s.outcome.results.data(), s.outcome.results.size());
    }
    q += s.outcome.results.size();
  }
  Put64(q, XXH3_64bits(p, static_cast<size_t>(q - p)));
  return out;
}

absl::StatusOr<std::vector<RequestWindow::Saved>> RequestWindow::Decode(absl::string_view bytes,
                                                                        absl::string_view path) {
  auto damaged = [&](absl::string_view why) {
    return absl::DataLossError(absl::StrFormat(
        "%s: %s; the ids of the requests in the last --dedup-window are in it. Restore it from a "
        "backup, or move it aside to start without them (a retry of a request made before the "
        "restart may then be applied twice)",
        path, why));
  };
  const uint8_t* p = reinterpret_cast<const uint8_t*>(bytes.data());
  if (bytes.size() < kSaveHeader + 8 || std::memcmp(p, kSaveMagic, 8) != 0) {
    return damaged("not a cuckood request window file (bad magic number or too short)");
  }
  if (Get64(p + bytes.size() - 8) != XXH3_64bits(p, bytes.size() - 8)) {
    return damaged("checksum mismatch");
  }
  if (Get32(p + 8) != kSaveVersion) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "%s: request window format version %u is not one this build reads (version %u): a "
        "newer cuckood wrote it; run the newer cuckood again",
        path, Get32(p + 8), kSaveVersion));
  }
  const uint32_t count = Get32(p + 12);
  std::vector<Saved> out;
  size_t off = kSaveHeader;
  const size_t end = bytes.size() - 8;
  for (uint32_t i = 0; i < count; ++i) {
    if (end - off < kSaveEntryFixed) return damaged("an entry cut off");
    const uint8_t* q = p + off;
    const uint32_t key_len = Get32(q);
    const uint32_t flags = Get32(q + 4);
    const uint32_t n = Get32(q + 24);
    if ((flags & ~kSaveInDoubt) != 0) return damaged("unknown entry flags");
    if (end - off - kSaveEntryFixed < uint64_t{key_len} + n) return damaged("an entry cut off");
    Saved s;
    s.in_doubt = (flags & kSaveInDoubt) != 0;
    s.time = absl::FromUnixMicros(static_cast<int64_t>(Get64(q + 8)));
    s.outcome.position = Get64(q + 16);
    s.key.assign(reinterpret_cast<const char*>(q + kSaveEntryFixed), key_len);
    s.outcome.results.assign(q + kSaveEntryFixed + key_len, q + kSaveEntryFixed + key_len + n);
    off += kSaveEntryFixed + key_len + n;
    out.push_back(std::move(s));
  }
  if (off != end) return damaged("bytes after the last entry");
  return out;
}

void RequestWindow::EvictLocked(absl::Time now) {
  while (!done_order_.empty()) {
    auto it = entries_.find(done_order_.front());
    if (it != entries_.end() && it->second.done && it->second.expires > now &&
        bytes_ <= max_bytes_) {
      break;
    }
    if (it != entries_.end() && it->second.done) {
      bytes_ -= Charge(it->second.outcome);
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
