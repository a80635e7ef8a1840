#include "server/wal/wal.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "base/units.h"
#include "spdlog/spdlog.h"

namespace cuckoo::server {

absl::string_view DurabilityName(Durability d) {
  switch (d) {
    case Durability::kSync:
      return "sync";
    case Durability::kInterval:
      return "interval";
    case Durability::kNone:
      return "none";
  }
  return "?";
}

absl::StatusOr<Durability> ParseDurability(absl::string_view s) {
  if (s == "sync") return Durability::kSync;
  if (s == "interval") return Durability::kInterval;
  if (s == "none") return Durability::kNone;
  return absl::InvalidArgumentError(absl::StrFormat(
      "durability \"%s\" is not one of sync (every acknowledged write is on disk), interval "
      "(fdatasync every --wal-sync-interval) or none (the OS flushes)",
      s));
}

uint64_t WalBytesForBatch(size_t keys, uint32_t shards) {
  // One record per shard and part of CuckooFilter::kBatchPartKeys keys at
  // most, never more than one per key.
  const uint64_t parts = (keys + CuckooFilter::kBatchPartKeys - 1) / CuckooFilter::kBatchPartKeys;
  const uint64_t records = std::min<uint64_t>(keys, parts * std::max<uint32_t>(shards, 1));
  return WalShardWriteBytes(0) * records + 8 * uint64_t{keys};
}

namespace {

// What a waiter gets when the log failed: the system error, and what it
// means for this process.
absl::Status FailureStatus(const absl::Status& io) {
  const std::string msg = absl::StrCat(
      "the write-ahead log failed (", io.message(),
      "); this cuckood acknowledges no more writes and restarts, and replaying the log "
      "recovers every write acknowledged before; retry after the restart");
  return absl::IsResourceExhausted(io) ? absl::ResourceExhaustedError(msg)
                                       : absl::UnavailableError(msg);
}

}  // namespace

Wal::Wal(WalOptions options)
    : options_(std::move(options)), env_(options_.env != nullptr ? options_.env : PosixEnv()) {}

absl::StatusOr<std::unique_ptr<Wal>> Wal::Open(WalOptions options, const WalScan& scan,
                                               uint64_t at_least) {
  if (options.segment_bytes < kWalMinSegmentBytes) {
    return absl::InvalidArgumentError(
        absl::StrFormat("log segments of %u bytes are too small (at least %u)",
                        options.segment_bytes, kWalMinSegmentBytes));
  }
  if (options.max_pending_bytes < 4 * kWalMaxRecordBytes) {
    return absl::InvalidArgumentError(
        absl::StrFormat("a pending-bytes bound of %u is too small (at least %u)",
                        options.max_pending_bytes, 4 * kWalMaxRecordBytes));
  }
  std::unique_ptr<Wal> wal(new Wal(std::move(options)));
  Env* env = wal->env_;
  const std::string& dir = wal->options_.dir;
  if (absl::Status s = env->CreateDir(dir); !s.ok()) return s;
  // A clean close's record holds only until something is appended: gone
  // (and durably so) before anything is.
  std::vector<std::string> remove = scan.unused;
  if (!scan.closed_file.empty()) remove.push_back(scan.closed_file);
  for (const std::string& path : remove) {
    if (absl::Status s = env->Remove(path); !s.ok()) return s;
  }
  if (!remove.empty()) {
    if (absl::Status s = env->SyncDir(dir); !s.ok()) return s;
  }
  const uint64_t last = std::max(scan.last_lsn, at_least > 0 ? at_least - 1 : 0);
  MutexLock lock(&wal->mu_);
  wal->appended_lsn_ = wal->written_lsn_ = wal->synced_lsn_ = last;
  wal->appended_published_.store(last, std::memory_order_release);
  uint64_t next_sequence = 1;
  for (const WalSegmentInfo& s : scan.segments) {
    wal->segments_.push_back({.sequence = s.sequence,
                              .first_lsn = s.first_lsn,
                              .last_lsn = s.last_lsn,
                              .path = s.path,
                              .file_bytes = s.file_bytes});
    next_sequence = s.sequence + 1;
  }
  // A prepared segment an earlier process left unused is reused, if it has
  // the configured size (--wal-segment-size may have changed): a restart
  // does not write a segment's worth of zeros again.
  if (!scan.prepared.path.empty()) {
    bool reused = false;
    if (scan.prepared.file_bytes == wal->options_.segment_bytes &&
        scan.prepared.sequence >= next_sequence) {
      absl::StatusOr<std::unique_ptr<EnvFile>> f = env->Open(scan.prepared.path);
      if (f.ok()) {
        wal->prepared_ = *std::move(f);
        next_sequence = scan.prepared.sequence;
        reused = true;
      }
    }
    if (!reused) {
      if (absl::Status s = env->Remove(scan.prepared.path); !s.ok()) return s;
      if (absl::Status s = env->SyncDir(dir); !s.ok()) return s;
    }
  }
  wal->next_sequence_ = next_sequence;
  if (!scan.segments.empty()) {
    const WalSegmentInfo& tail = scan.segments.back();
    absl::StatusOr<std::unique_ptr<EnvFile>> f = env->Open(tail.path);
    if (!f.ok()) return f.status();
    if (!scan.cut.empty() && tail.end < tail.file_bytes) {
      // Zero what a torn write left after the last valid record, so that
      // what is appended next is never followed by stale bytes.
      std::vector<uint8_t> zeros(std::min<uint64_t>(tail.file_bytes - tail.end, 1 << 20), 0);
      for (uint64_t off = tail.end; off < tail.file_bytes; off += zeros.size()) {
        const size_t n = std::min<uint64_t>(zeros.size(), tail.file_bytes - off);
        if (absl::Status s = (*f)->Write(off, absl::MakeConstSpan(zeros.data(), n)); !s.ok()) {
          return s;
        }
      }
    }
    // Whatever an earlier process wrote and did not sync is durable from
    // here on.
    if (absl::Status s = (*f)->Sync(); !s.ok()) return s;
    // Appending goes on in this segment only if the lsns continue there.
    if (tail.last_lsn == last) {
      wal->current_ = *std::move(f);
      wal->current_end_ = tail.end;
      wal->current_bytes_ = tail.file_bytes;
    }
  }
  wal->committer_ = std::thread([w = wal.get()] { w->Run(); });
  wal->preparer_ = std::thread([w = wal.get()] { w->Prepare(); });
  // The next segment is prepared before Open returns (before cuckood says
  // it is serving), so that no client's write waits for it; a failure is
  // logged, and Reserve asks again.
  wal->PrepareNextLocked();
  while (wal->preparing_) wal->mu_.Wait(&wal->done_cv_);
  return wal;
}

Wal::~Wal() { Close(); }

void Wal::PrepareNextLocked() {
  if (prepared_ != nullptr || preparing_ || stop_preparer_) return;
  preparing_ = true;
  prepare_cv_.notify_one();
}

void Wal::Prepare() {
  MutexLock lock(&mu_);
  while (true) {
    // It stops only after the committer (Close): the committer may need a
    // segment for the last records.
    while (!(preparing_ || stop_preparer_)) mu_.Wait(&prepare_cv_);
    if (stop_preparer_) {
      preparing_ = false;
      done_cv_.notify_all();
      return;
    }
    const std::string path = WalSegmentPath(options_.dir, next_sequence_);
    lock.Unlock();
    // A leftover of a preparation that failed halfway (a crash) is replaced.
    (void)env_->Remove(path);
    absl::StatusOr<std::unique_ptr<EnvFile>> f =
        env_->Create(path, options_.segment_bytes, &cancel_prepare_);
    absl::Status s = f.status();
    if (s.ok()) s = env_->SyncDir(options_.dir);
    if (!s.ok() && f.ok()) {
      f->reset();
      (void)env_->Remove(path);
    }
    lock.Lock();
    preparing_ = false;
    if (s.ok()) {
      prepared_ = *std::move(f);
      prepare_error_ = absl::OkStatus();
    } else {
      prepare_error_ = s;
      prepare_failed_at_ = absl::Now();
      // A cancellation is Close's (the partial file is gone: Create removes
      // it; a crash instead leaves one that the next start deletes or
      // redoes), not a failure to report.
      if (!absl::IsCancelled(s)) {
        spdlog::error("could not prepare the next write-ahead log segment: {}",
                      std::string(s.message()));
      }
    }
    done_cv_.notify_all();
  }
}

uint64_t Wal::RoomLocked() const {
  // A segment's last record-sized stretch may go unused (records never span
  // segments).
  const uint64_t slack = kWalMaxRecordBytes;
  auto usable = [&](uint64_t bytes) { return bytes > slack ? bytes - slack : 0; };
  uint64_t room = 0;
  if (current_ != nullptr) room += usable(current_bytes_ - current_end_);
  if (prepared_ != nullptr) room += usable(options_.segment_bytes - kWalSegmentHeaderBytes);
  room = std::min(room, options_.max_pending_bytes);
  const uint64_t pending = buffer_.size() + in_write_;
  return room > pending ? room - pending : 0;
}

uint64_t Wal::MaxReservation() const {
  // A batch larger than one segment's room (or max_pending_bytes) reserves
  // that much: its records go out a segment at a time, each prepared ahead
  // as the one before fills.
  const uint64_t segment = options_.segment_bytes - kWalSegmentHeaderBytes;
  return std::min(options_.max_pending_bytes,
                  segment > kWalMaxRecordBytes ? segment - kWalMaxRecordBytes : segment);
}

absl::Status Wal::Reserve(uint64_t bytes) {
  bytes = std::min(bytes, MaxReservation());
  MutexLock lock(&mu_);
  const absl::Time give_up = absl::Now() + absl::Seconds(5);
  while (true) {
    if (!failure_.ok()) return failure_;
    if (closing_) return absl::UnavailableError("cuckood is shutting down");
    if (reserved_ + bytes <= RoomLocked()) {
      reserved_ += bytes;
      return absl::OkStatus();
    }
    if (prepared_ == nullptr && !preparing_) {
      if (!prepare_error_.ok() && absl::Now() - prepare_failed_at_ < absl::Seconds(1)) {
        // Asked again at most once a second: the disk may have room again.
        return absl::ResourceExhaustedError(
            absl::StrCat("no room for the write-ahead log (", prepare_error_.message(),
                         "); nothing of this request was applied; free space in ", options_.dir,
                         " (or let snapshots truncate the log) and retry"));
      }
      PrepareNextLocked();
    }
    if (absl::Now() > give_up) {
      return absl::UnavailableError(
          "the write-ahead log had no room for this request within 5 s; nothing of it was "
          "applied; retry");
    }
    mu_.WaitFor(&done_cv_, std::chrono::milliseconds(100));
  }
}

void Wal::Unreserve(uint64_t bytes) {
  bytes = std::min(bytes, MaxReservation());
  MutexLock lock(&mu_);
  reserved_ -= std::min(reserved_, bytes);
}

uint64_t Wal::Append(size_t bytes,
                     const std::function<void(uint64_t, uint64_t, uint8_t*)>& encode) {
  MutexLock lock(&mu_);
  return AppendLocked(bytes, encode);
}

uint64_t Wal::AppendLocked(size_t bytes,
                           const std::function<void(uint64_t, uint64_t, uint8_t*)>& encode) {
  const uint64_t lsn = ++appended_lsn_;
  appended_published_.store(lsn, std::memory_order_release);
  if (closed_ || !failure_.ok()) return lsn;
  if (buffer_.empty()) buffered_first_lsn_ = lsn;
  const size_t at = buffer_.size();
  buffer_.resize(at + bytes);
  encode(lsn, synced_lsn_, buffer_.data() + at);
  work_cv_.notify_one();
  return lsn;
}

uint64_t Wal::AppendShardWrite(uint64_t filter_id, const ShardWrite& write) {
  return Append(WalShardWriteBytes(write.hashes.size()),
                [&](uint64_t lsn, uint64_t synced, uint8_t* out) {
                  EncodeShardWrite(lsn, synced, filter_id, write, out);
                });
}

uint64_t Wal::AppendCreateFilter(absl::string_view name, const FilterShape& shape) {
  return Append(WalCreateFilterBytes(name, shape),
                [&](uint64_t lsn, uint64_t synced, uint8_t* out) {
                  EncodeCreateFilter(lsn, synced, name, shape, out);
                });
}

uint64_t Wal::AppendRequestStart(uint64_t filter_id, const WalRequest& request) {
  return Append(WalRequestStartBytes(request.key),
                [&](uint64_t lsn, uint64_t synced, uint8_t* out) {
                  EncodeRequestStart(lsn, synced, filter_id, request, out);
                });
}

uint64_t Wal::AppendRequestResults(uint64_t filter_id, const WalRequest& request) {
  const absl::Span<const uint8_t> all(request.results);
  WalRequest part = request;
  part.results.clear();
  uint64_t lsn = 0;
  for (size_t off = 0; off < all.size() || off == 0; off += kWalResultsPerRecord) {
    const absl::Span<const uint8_t> chunk =
        all.subspan(off, std::min(kWalResultsPerRecord, all.size() - off));
    part.offset = static_cast<uint32_t>(off);
    lsn = Append(WalRequestResultsBytes(part.key, chunk.size()),
                 [&](uint64_t l, uint64_t synced, uint8_t* out) {
                   EncodeRequestResults(l, synced, filter_id, part, chunk, out);
                 });
    if (all.empty()) break;
  }
  return lsn;
}

uint64_t WalBytesForRequest(size_t key_bytes, size_t keys) {
  const std::string key(key_bytes, 'k');
  const uint64_t chunks =
      std::max<uint64_t>(1, (keys + kWalResultsPerRecord - 1) / kWalResultsPerRecord);
  return WalRequestStartBytes(key) + chunks * WalRequestResultsBytes(key, 0) + keys + 8 * chunks;
}

uint64_t Wal::AppendDropFilter(uint64_t filter_id) {
  return Append(kWalDropFilterBytes, [&](uint64_t lsn, uint64_t synced, uint8_t* out) {
    EncodeDropFilter(lsn, synced, filter_id, out);
  });
}

uint64_t Wal::AppendSetExpiry(uint64_t filter_id, int64_t expire_at) {
  return Append(kWalSetExpiryBytes, [&](uint64_t lsn, uint64_t synced, uint8_t* out) {
    EncodeSetExpiry(lsn, synced, filter_id, expire_at, out);
  });
}

uint64_t Wal::AppendRenameFilter(uint64_t filter_id, absl::string_view new_name,
                                 uint64_t replaced_id, bool replace) {
  return Append(WalRenameFilterBytes(new_name), [&](uint64_t lsn, uint64_t synced, uint8_t* out) {
    EncodeRenameFilter(lsn, synced, filter_id, new_name, replaced_id, replace, out);
  });
}

uint64_t Wal::BeginTransaction() {
  MutexLock lock(&mu_);
  // A run of overlapping transactions holds back every answer until it
  // closes: one that has gone on for kWalMaxRunGrowth takes no more, so
  // that a steady stream of transactions on many connections cannot keep
  // one open for ever. The transactions open end without waiting for
  // anything (Wal::BeginTransaction's contract), so this wait is short.
  while (open_transactions_ > 0 && absl::Now() - run_started_ >= kWalMaxRunGrowth &&
         failure_.ok() && !closed_ && !closing_) {
    mu_.WaitFor(&run_cv_, std::chrono::milliseconds(10));  // (closing: not notified)
  }
  if (open_transactions_++ == 0) run_started_ = absl::Now();
  const uint64_t lsn = AppendLocked(
      kWalTxnRecordBytes,
      [](uint64_t l, uint64_t synced, uint8_t* out) { EncodeTxnBegin(l, synced, out); });
  transactions_.emplace(lsn, 0);
  return lsn;
}

void Wal::EndTransaction(uint64_t begin_lsn) {
  MutexLock lock(&mu_);
  const uint64_t lsn = AppendLocked(
      kWalTxnRecordBytes,
      [&](uint64_t l, uint64_t synced, uint8_t* out) { EncodeTxnEnd(l, synced, begin_lsn, out); });
  auto it = transactions_.find(begin_lsn);
  if (it != transactions_.end()) it->second = lsn;
  if (open_transactions_ > 0 && --open_transactions_ == 0) run_cv_.notify_all();
  // A SyncTo past the begin waits for the end: synced soon, whatever the
  // mode.
  if (sync_wanted_lsn_ >= begin_lsn) sync_wanted_lsn_ = std::max(sync_wanted_lsn_, lsn);
}

uint64_t Wal::HeldLocked(uint64_t lsn) const {
  // Transactions that overlap make one run, from the first begin to the
  // last end: a replay of the log up to `lsn` cuts it at the start of the
  // run still open there (ScanWal), so nothing from that start on is
  // durable yet.
  uint64_t start = 0, reach = 0;  // The run's; reach UINT64_MAX: open at lsn.
  for (const auto& [begin, end] : transactions_) {
    if (begin > lsn) break;
    const uint64_t to = end == 0 || end > lsn ? UINT64_MAX : end;
    if (start == 0 || begin > reach) {
      start = begin;
      reach = to;
    } else {
      reach = std::max(reach, to);
    }
  }
  return reach == UINT64_MAX ? start - 1 : lsn;
}

void Wal::PruneTransactionsLocked() {
  // A run of overlapping transactions whose every end is written holds
  // nothing back from an lsn it does not straddle: the written position is
  // past it, and the synced one is past it or, before it, is raised past
  // it whole by the next fdatasync. So it goes unless the synced position
  // lies inside it (HeldLocked needs it then).
  auto it = transactions_.begin();
  while (it != transactions_.end()) {
    const uint64_t start = it->first;
    uint64_t reach = 0;
    bool ended = true;
    auto last = it;
    for (; last != transactions_.end() && (last == it || last->first < reach); ++last) {
      if (last->second == 0) ended = false;
      reach = std::max(reach, last->second == 0 ? UINT64_MAX : last->second);
    }
    if (ended && reach <= written_lsn_ && (reach <= synced_lsn_ || start > synced_lsn_)) {
      it = transactions_.erase(it, last);
    } else {
      it = last;
    }
  }
}

uint64_t Wal::DurableLsnLocked() const {
  return HeldLocked(options_.durability == Durability::kSync ? synced_lsn_ : written_lsn_);
}

uint64_t Wal::SyncedLsnLocked() const { return HeldLocked(synced_lsn_); }

void Wal::WhenDurable(uint64_t lsn, Done done) {
  absl::Status now;
  {
    MutexLock lock(&mu_);
    if (failure_.ok() && lsn > DurableLsnLocked()) {
      if (closed_) {
        now = absl::UnavailableError("the write-ahead log is closed (cuckood is shutting down)");
      } else {
        waiters_.emplace(lsn, std::move(done));
        return;
      }
    } else {
      now = lsn <= DurableLsnLocked() ? absl::OkStatus() : failure_;
    }
  }
  done(now);
}

absl::Status Wal::WaitDurable(uint64_t lsn) {
  std::mutex m;
  std::condition_variable cv;
  bool finished = false;
  absl::Status result;
  WhenDurable(lsn, [&](absl::Status s) {
    std::lock_guard<std::mutex> lock(m);
    result = std::move(s);
    finished = true;
    cv.notify_one();
  });
  std::unique_lock<std::mutex> lock(m);
  cv.wait(lock, [&] { return finished; });
  return result;
}

absl::Status Wal::SyncTo(uint64_t lsn) {
  MutexLock lock(&mu_);
  sync_wanted_lsn_ = std::max(sync_wanted_lsn_, lsn);
  work_cv_.notify_one();
  while (!(SyncedLsnLocked() >= lsn || !failure_.ok() || closed_)) mu_.Wait(&done_cv_);
  if (SyncedLsnLocked() >= lsn) return absl::OkStatus();
  if (!failure_.ok()) return failure_;
  return absl::UnavailableError("the write-ahead log is closed (cuckood is shutting down)");
}

void Wal::AnswerLocked(std::vector<std::pair<Done, absl::Status>>* out) {
  const uint64_t durable = DurableLsnLocked();
  while (!waiters_.empty()) {
    auto it = waiters_.begin();
    if (failure_.ok() && it->first > durable && !closed_) break;
    absl::Status s = it->first <= durable ? absl::OkStatus()
                     : !failure_.ok()     ? failure_
                                          : absl::UnavailableError(
                                                "the write-ahead log is closed (cuckood is shutting "
                                                    "down)");
    out->emplace_back(std::move(it->second), std::move(s));
    waiters_.erase(it);
  }
}

absl::Status Wal::StartSegment(uint64_t first_lsn) {
  std::unique_ptr<EnvFile> next;
  Segment seg;
  uint64_t prev_last_lsn = 0;
  {
    MutexLock lock(&mu_);
    PrepareNextLocked();
    while (!(prepared_ != nullptr || !preparing_)) mu_.Wait(&done_cv_);
    if (prepared_ == nullptr) {
      return prepare_error_.ok() ? absl::UnavailableError("no log segment could be prepared")
                                 : prepare_error_;
    }
    next = std::move(prepared_);
    prev_last_lsn = segments_.empty() ? 0 : segments_.back().last_lsn;
    seg = {.sequence = next_sequence_++,
           .first_lsn = first_lsn,
           .last_lsn = first_lsn - 1,
           .path = next->path(),
           .file_bytes = options_.segment_bytes};
  }
  // The segment being left is complete: make it durable before the log goes
  // on elsewhere, in every mode (once per segment): a later segment must
  // never hold records past a hole, and from here only the current segment
  // can hold records not yet synced, which is all SyncTo and Close sync.
  if (current_ != nullptr) {
    if (absl::Status s = current_->Sync(); !s.ok()) return s;
  }
  uint8_t header[kWalSegmentHeaderBytes];
  EncodeSegmentHeader({.sequence = seg.sequence,
                       .first_lsn = first_lsn,
                       .prev_last_lsn = prev_last_lsn,
                       .segment_bytes = options_.segment_bytes,
                       .created = absl::Now()},
                      header);
  if (absl::Status s = next->Write(0, absl::MakeConstSpan(header)); !s.ok()) return s;
  MutexLock lock(&mu_);
  current_ = std::move(next);
  current_bytes_ = options_.segment_bytes;
  current_end_ = kWalSegmentHeaderBytes;
  segments_.push_back(std::move(seg));
  PrepareNextLocked();
  return absl::OkStatus();
}

absl::Status Wal::WriteOut(const std::vector<uint8_t>& data, uint64_t* records) {
  size_t pos = 0;
  while (pos < data.size()) {
    uint64_t end, bytes;
    {
      MutexLock lock(&mu_);
      end = current_end_;
      bytes = current_ != nullptr ? current_bytes_ : 0;
    }
    // The longest run of whole records that fits in the current segment.
    size_t run = 0;
    uint64_t last_lsn = 0;
    while (pos + run < data.size()) {
      const uint32_t len = WalRecordLength(data.data() + pos + run);
      if (current_ == nullptr || end + run + len > bytes) break;
      last_lsn = WalRecordLsn(data.data() + pos + run);
      run += len;
      ++*records;
    }
    if (run == 0) {
      if (absl::Status s = StartSegment(WalRecordLsn(data.data() + pos)); !s.ok()) return s;
      continue;
    }
    if (absl::Status s = current_->Write(end, absl::MakeConstSpan(data.data() + pos, run));
        !s.ok()) {
      return s;
    }
    MutexLock lock(&mu_);
    current_end_ += run;
    segments_.back().last_lsn = last_lsn;
    in_write_ -= run;
    pos += run;
  }
  return absl::OkStatus();
}

void Wal::Run() {
  std::vector<uint8_t> data;
  MutexLock lock(&mu_);
  while (true) {
    const bool interval = options_.durability == Durability::kInterval;
    const bool interval_due = interval && synced_lsn_ < written_lsn_ &&
                              absl::Now() >= last_sync_ + options_.sync_interval;
    const bool sync_wanted = sync_wanted_lsn_ > synced_lsn_;
    if (buffer_.empty() && !sync_wanted && !interval_due && !closing_) {
      if (interval && synced_lsn_ < written_lsn_) {
        mu_.WaitFor(&work_cv_,
                    absl::ToChronoNanoseconds(std::max(
                        absl::ZeroDuration(), last_sync_ + options_.sync_interval - absl::Now())));
      } else {
        mu_.Wait(&work_cv_);
      }
      continue;
    }
    if (closing_ && buffer_.empty() && (!failure_.ok() || synced_lsn_ >= written_lsn_)) break;
    data.clear();
    data.swap(buffer_);
    const uint64_t upto = appended_lsn_;
    in_write_ = data.size();
    const bool sync = failure_.ok() && (options_.durability == Durability::kSync || sync_wanted ||
                                        interval_due || closing_);
    absl::Status s = failure_;
    lock.Unlock();
    uint64_t records = 0;
    absl::Duration sync_took;
    if (s.ok() && !data.empty()) s = WriteOut(data, &records);
    if (s.ok() && sync && current_ != nullptr) {
      const absl::Time t0 = absl::Now();
      s = current_->Sync();
      sync_took = absl::Now() - t0;
      last_sync_ = absl::Now();
    }
    if (s.ok()) {
      if (!data.empty() && options_.on_write) options_.on_write(data.size(), records);
      if (sync && options_.on_sync) options_.on_sync(sync_took);
    }
    lock.Lock();
    in_write_ = 0;
    bool report = false;
    if (!s.ok() && failure_.ok()) {
      spdlog::critical("write-ahead log: {}", std::string(s.message()));
      failure_ = FailureStatus(s);
      report = true;
    }
    if (failure_.ok()) {
      written_lsn_ = upto;
      if (sync) synced_lsn_ = upto;
      bytes_written_ += data.size();
      PruneTransactionsLocked();
    }
    std::vector<std::pair<Done, absl::Status>> answers;
    AnswerLocked(&answers);
    done_cv_.notify_all();
    if (!answers.empty() || report) {
      lock.Unlock();
      for (auto& [done, status] : answers) done(status);
      if (report && options_.on_failure) options_.on_failure(s);
      lock.Lock();
    }
  }
  closed_ = true;
  std::vector<std::pair<Done, absl::Status>> answers;
  AnswerLocked(&answers);
  done_cv_.notify_all();
  lock.Unlock();
  for (auto& [done, status] : answers) done(status);
}

void Wal::Close() {
  {
    MutexLock lock(&mu_);
    closing_ = true;
    work_cv_.notify_one();
    prepare_cv_.notify_one();
  }
  if (committer_.joinable()) committer_.join();
  // The committer needs no more segments: a preparation in progress is
  // abandoned rather than waited for (it may take seconds on a slow disk).
  cancel_prepare_.store(true, std::memory_order_relaxed);
  {
    MutexLock lock(&mu_);
    stop_preparer_ = true;
    prepare_cv_.notify_one();
  }
  if (preparer_.joinable()) preparer_.join();
  MutexLock lock(&mu_);
  if (finished_) return;  // Closed before (the destructor calls Close again).
  finished_ = true;
  closed_ = true;
  // Everything appended is on disk: record where the log ends, so that the
  // next start reads only that much (docs/WAL_FORMAT.md, "The clean-close
  // file"). Without the record, a start reads every segment whole.
  // (Not with a transaction open: the next start must cut the log at its
  // begin, which a clean close's short read would not.)
  if (failure_.ok() && buffer_.empty() && synced_lsn_ == appended_lsn_ && transactions_.empty() &&
      (current_ != nullptr || segments_.empty())) {
    WalClosed c;
    if (current_ != nullptr) {
      c.segment_sequence = segments_.back().sequence;
      c.end = current_end_;
      c.last_lsn = segments_.back().last_lsn;
    }
    if (prepared_ != nullptr) {
      c.prepared_sequence = next_sequence_;
      c.prepared_bytes = options_.segment_bytes;
    }
    if (absl::Status s = WriteClosedFile(c); !s.ok()) {
      spdlog::warn(
          "write-ahead log: could not record the clean close ({}); the next start reads "
          "every segment whole",
          std::string(s.message()));
    }
  }
  current_.reset();
  prepared_.reset();
}

absl::Status Wal::WriteClosedFile(const WalClosed& c) {
  const std::string path = absl::StrCat(options_.dir, "/", kWalClosedName);
  const std::string tmp = path + ".tmp";
  uint8_t bytes[kWalClosedBytes];
  EncodeWalClosed(c, bytes);
  if (absl::Status s = env_->Remove(tmp); !s.ok()) return s;
  absl::StatusOr<std::unique_ptr<EnvFile>> f = env_->Create(tmp, kWalClosedBytes);
  if (!f.ok()) return f.status();
  if (absl::Status s = (*f)->Write(0, absl::MakeConstSpan(bytes)); !s.ok()) return s;
  if (absl::Status s = (*f)->Sync(); !s.ok()) return s;
  f->reset();
  if (absl::Status s = env_->Rename(tmp, path); !s.ok()) return s;
  return env_->SyncDir(options_.dir);
}

absl::Status Wal::Truncate(uint64_t needed_lsn) {
  std::vector<std::string> remove;
  {
    MutexLock lock(&mu_);
    // Only a prefix, and never the segment being written, nor a
    // transaction's begin that a replay may yet cut the log at.
    if (!transactions_.empty()) needed_lsn = std::min(needed_lsn, transactions_.begin()->first);
    while (segments_.size() > 1 && segments_.front().last_lsn < needed_lsn) {
      remove.push_back(segments_.front().path);
      segments_.erase(segments_.begin());
    }
  }
  if (remove.empty()) return absl::OkStatus();
  for (const std::string& path : remove) {
    if (absl::Status s = env_->Remove(path); !s.ok()) return s;
  }
  return env_->SyncDir(options_.dir);
}

namespace {

// The bytes of the regular files named `suffix` in `dir` (their total, and
// the largest); none if `dir` does not exist.
absl::Status FileBytes(Env* env, const std::string& dir, absl::string_view suffix, uint64_t* total,
                       uint64_t* largest) {
  absl::StatusOr<std::vector<std::string>> names = env->List(dir);
  if (!names.ok()) return EnvErrno(names.status()) == ENOENT ? absl::OkStatus() : names.status();
  for (const std::string& name : *names) {
    if (!absl::EndsWith(name, suffix)) continue;
    absl::StatusOr<std::unique_ptr<EnvFile>> f = env->Open(absl::StrCat(dir, "/", name));
    if (!f.ok()) continue;  // Not a regular file: not ours to count.
    absl::StatusOr<uint64_t> size = (*f)->Size();
    if (!size.ok()) return size.status();
    *total += *size;
    *largest = std::max(*largest, *size);
  }
  return absl::OkStatus();
}

std::string Mib(uint64_t bytes) {
  return absl::StrFormat("%.1f MiB", static_cast<double>(bytes) / (1 << 20));
}

}  // namespace

absl::Status CheckWalDiskSpace(Env* env, const std::string& data_dir, const std::string& wal_dir,
                               uint64_t segment_bytes) {
  // The data directory may not exist yet: its nearest existing ancestor is
  // on the same volume.
  std::string at = data_dir;
  absl::StatusOr<VolumeSpace> space = env->DiskSpace(at);
  for (int up = 0; up < 64 && !space.ok() && EnvErrno(space.status()) == ENOENT; ++up) {
    const size_t slash = at.find_last_of('/');
    if (slash == std::string::npos || at.size() <= 1) break;
    at = slash == 0 ? "/" : at.substr(0, slash);
    space = env->DiskSpace(at);
  }
  if (absl::IsUnimplemented(space.status())) return absl::OkStatus();
  if (!space.ok()) return space.status();
  uint64_t log_bytes = 0, largest_segment = 0, snapshot_bytes = 0, largest_snapshot = 0;
  if (absl::Status s = FileBytes(env, wal_dir, kWalSegmentSuffix, &log_bytes, &largest_segment);
      !s.ok()) {
    return s;
  }
  if (absl::Status s = FileBytes(env, data_dir, ".cuckoo", &snapshot_bytes, &largest_snapshot);
      !s.ok()) {
    return s;
  }
  const uint64_t have = space->free_bytes + log_bytes;
  const uint64_t need = 2 * segment_bytes + largest_snapshot;
  if (need <= have) return absl::OkStatus();
  const uint64_t fits = have > largest_snapshot ? (have - largest_snapshot) / 2 / 4096 * 4096 : 0;
  return absl::FailedPreconditionError(absl::StrFormat(
      "a --wal-segment-size of %s does not fit on the volume of %s: the write-ahead log needs two "
      "segments (%s) beside a copy of the largest snapshot (%s), but the volume holds %s with %s "
      "free (%s more in log segments); %s",
      Mib(segment_bytes), data_dir, Mib(2 * segment_bytes), Mib(largest_snapshot),
      Mib(space->total_bytes), Mib(space->free_bytes), Mib(log_bytes),
      fits >= kWalMinSegmentBytes
          ? absl::StrFormat("a --wal-segment-size of at most %s would fit", Mib(fits))
          : absl::StrFormat("no --wal-segment-size fits (at least %s): free space on it",
                            Mib(kWalMinSegmentBytes))));
}

WalStats Wal::Stats() const {
  MutexLock lock(&mu_);
  WalStats st;
  st.appended_lsn = appended_lsn_;
  st.durable_lsn = DurableLsnLocked();
  st.synced_lsn = SyncedLsnLocked();
  st.open_transactions = open_transactions_;
  st.tracked_transactions = transactions_.size();
  st.segments = segments_.size() + (prepared_ != nullptr ? 1 : 0);
  for (const Segment& s : segments_) st.disk_bytes += s.file_bytes;
  if (prepared_ != nullptr) st.disk_bytes += options_.segment_bytes;
  st.bytes_written = bytes_written_;
  st.first_needed_segment_lsn = segments_.empty() ? 0 : segments_.front().first_lsn;
  return st;
}

absl::Status Wal::health() const {
  MutexLock lock(&mu_);
  return failure_;
}

absl::Status ValidateWalOptions(const WalOptions& o) {
  if (o.sync_interval < absl::Milliseconds(10) || o.sync_interval > absl::Hours(1)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("--wal-sync-interval=%s must be between 10ms and 1h",
                        absl::FormatDuration(o.sync_interval)));
  }
  if (o.segment_bytes < kWalMinSegmentBytes || o.segment_bytes > (uint64_t{1} << 30) ||
      o.segment_bytes % 4096 != 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "--wal-segment-size=%s must be a multiple of 4KiB between %s and 1GiB",
        FormatByteSizeExactly(o.segment_bytes), FormatByteSizeExactly(kWalMinSegmentBytes)));
  }
  return absl::OkStatus();
}

}  // namespace cuckoo::server
