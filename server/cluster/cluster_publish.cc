// Publishing writes to the stream, their acknowledgements, and settling
// each call with its results once this replica applied its entries (or
// failing it), remembering them for retries within --dedup-window.
#include <algorithm>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "server/cluster/cluster_internal.h"

namespace cuckoo::server {
namespace {

// NATS's default max_payload, assumed until the server says otherwise.
constexpr size_t kDefaultMaxPayload = size_t{1} << 20;
// Room left in a message for its headers (the message id and JetStream's).
constexpr size_t kHeaderRoom = 1024;

}  // namespace

size_t Cluster::max_hashes_per_entry() const {
  size_t payload = kDefaultMaxPayload;
  if (impl_->nc != nullptr) {
    const int64_t p = natsConnection_GetMaxPayload(impl_->nc);
    if (p > 0) payload = static_cast<size_t>(p);
  }
  if (options_.max_entry_bytes != 0) payload = std::min(payload, options_.max_entry_bytes);
  return std::max<size_t>(
      1, MaxHashesPerLogEntry(payload > kHeaderRoom ? payload - kHeaderRoom : payload));
}

bool Cluster::Remembers(absl::string_view request_id) const {
  if (request_id.empty()) return false;
  MutexLock lock(&mu_);
  return remembered_.contains(absl::StrCat("r/", request_id, "/0"));
}

void Cluster::Publish(std::vector<std::string> entries, absl::string_view request_id,
                      WriteDone done) {
  auto call = std::make_shared<Call>();
  call->done = std::move(done);
  call->parts = entries.size();
  call->outcomes.resize(entries.size());
  call->deadline = absl::Now() + options_.write_timeout;
  std::string problem;
  {
    MutexLock lock(&mu_);
    problem = problem_;
    if (problem.empty() && !consuming_) {
      // Its own writes would wait for an apply that cannot come yet.
      problem = nats_error_.empty()
                    ? "it is not consuming the stream yet (starting, or NATS has no stream leader)"
                    : absl::StrCat("it cannot connect to NATS: ", nats_error_);
    }
  }
  if (stopping_.load() || impl_->js == nullptr || !problem.empty()) {
    MutexLock lock(&mu_);
    FailCallLocked(call, absl::UnavailableError(absl::StrCat(
                             "this replica cannot write to the cluster log now",
                             problem.empty() ? std::string() : absl::StrCat(": ", problem),
                             "; retry against another replica")));
    work_cv_.notify_all();
    return;
  }
  if (natsConnection_Status(impl_->nc) != NATS_CONN_STATUS_CONNECTED) {
    MutexLock lock(&mu_);
    FailCallLocked(call,
                   absl::UnavailableError(absl::StrCat(
                       "not connected to NATS (", ConnStatusName(natsConnection_Status(impl_->nc)),
                       "): nothing was written; retry, or retry against another replica")));
    work_cv_.notify_all();
    return;
  }
  for (size_t i = 0; i < entries.size(); ++i) {
    const std::string msg_id =
        request_id.empty() ? absl::StrCat("g/", instance_, "/", next_generated_.fetch_add(1))
                           : absl::StrCat("r/", request_id, "/", i);
    {
      MutexLock lock(&mu_);
      if (call->finished) return;
      auto known = remembered_.find(msg_id);
      if (known != remembered_.end()) {
        // A retry of an entry this replica applied: its results are known.
        PendingEntry e{.call = call,
                       .part = i,
                       .position = known->second.position,
                       .acked = true,
                       .applied = true,
                       .outcome = known->second.outcome};
        ++duplicates_;
        pending_[msg_id].push_back(std::move(e));
        SettleLocked(msg_id);
        work_cv_.notify_all();
        continue;
      }
      pending_[msg_id].push_back(PendingEntry{.call = call, .part = i});
      ++entries_published_;
    }
    natsMsg* msg = nullptr;
    natsStatus s = natsMsg_Create(&msg, subject_.c_str(), nullptr, entries[i].data(),
                                  static_cast<int>(entries[i].size()));
    if (s == NATS_OK) {
      jsPubOptions po;
      jsPubOptions_Init(&po);
      po.MsgId = msg_id.c_str();
      po.MaxWait = absl::ToInt64Milliseconds(options_.write_timeout);
      s = js_PublishMsgAsync(impl_->js, &msg, &po);
    }
    natsMsg_Destroy(msg);  // No-op when the library took it.
    if (s != NATS_OK) {
      MutexLock lock(&mu_);
      ++publish_failures_;
      auto it = pending_.find(msg_id);
      if (it != pending_.end()) {
        auto& v = it->second;
        v.erase(std::remove_if(v.begin(), v.end(),
                               [&](const PendingEntry& e) { return e.call == call && !e.acked; }),
                v.end());
        if (v.empty()) pending_.erase(it);
      }
      FailCallLocked(call, absl::UnavailableError(absl::StrFormat(
                               "could not publish part %u of %u to the cluster log: %s; retry "
                               "(with the same request_id: parts already logged are not "
                               "applied twice)",
                               i + 1, entries.size(), NatsError(s))));
      work_cv_.notify_all();
      return;
    }
  }
}

void OnAckTrampoline(jsCtx*, natsMsg* msg, jsPubAck* pa, jsPubAckErr* pae, void* closure) {
  const char* id = nullptr;
  if (msg != nullptr) natsMsgHeader_Get(msg, kMsgIdHeader, &id);
  absl::Status error;
  if (pa == nullptr) {
    std::string why = "no acknowledgement";
    if (pae != nullptr) {
      why = pae->ErrText != nullptr && *pae->ErrText != '\0' ? pae->ErrText
                                                             : natsStatus_GetText(pae->Err);
      if (pae->ErrCode != 0) absl::StrAppend(&why, " (JetStream error ", pae->ErrCode, ")");
    }
    error = absl::UnavailableError(
        absl::StrCat("the cluster log did not acknowledge the write (", why,
                     "): it may or may not be logged; retry with the same request_id"));
  }
  if (id != nullptr) {
    static_cast<Cluster*>(closure)->HandleAck(id, pa != nullptr ? pa->Sequence : 0,
                                              pa != nullptr && pa->Duplicate, error);
  }
  natsMsg_Destroy(msg);
}
void Cluster::FailCallLocked(const std::shared_ptr<Call>& call, const absl::Status& s) {
  if (call->finished) return;
  call->finished = true;
  completions_.push_back([call, s] {
    WriteResult r;
    r.status = s;
    call->done(std::move(r));
  });
}

void Cluster::SettleLocked(const std::string& msg_id) {
  auto it = pending_.find(msg_id);
  if (it == pending_.end()) return;
  std::vector<PendingEntry>& entries = it->second;
  const uint64_t applied = applied_.load(std::memory_order_acquire);
  for (auto e = entries.begin(); e != entries.end();) {
    if (e->call->finished) {
      e = entries.erase(e);
      continue;
    }
    if (!e->acked) {
      ++e;
      continue;
    }
    if (!e->applied) {
      if (applied < e->position) {
        ++e;
        continue;
      }
      // Applied before this call registered it (a retry whose first try
      // went through another replica or before a restart): its results are
      // what this replica remembered, if it still does.
      auto known = remembered_.find(msg_id);
      if (known == remembered_.end() || known->second.position != e->position) {
        FailCallLocked(
            e->call,
            absl::UnavailableError(absl::StrFormat(
                "the write was applied at position %u (a repeat of request id \"%s\"), but this "
                "replica no longer holds its results (kept for --dedup-window, or lost in a "
                "restart); retry against another replica",
                e->position, absl::CHexEscape(msg_id.substr(2)))));
        e = entries.erase(e);
        continue;
      }
      e->outcome = known->second.outcome;
      e->applied = true;
    }
    Call& call = *e->call;
    e->outcome.position = e->position;
    if (!e->outcome.status.ok()) {
      FailCallLocked(e->call, e->outcome.status);
      e = entries.erase(e);
      continue;
    }
    call.outcomes[e->part] = std::move(e->outcome);
    if (++call.settled == call.parts) {
      call.finished = true;
      completions_.push_back([c = e->call] {
        WriteResult r;
        for (WriteResult& part : c->outcomes) {
          r.position = std::max(r.position, part.position);
          r.created = r.created || part.created;
          r.replaced = r.replaced || part.replaced;
          r.freed_bytes += part.freed_bytes;
          r.results.insert(r.results.end(), part.results.begin(), part.results.end());
        }
        c->done(std::move(r));
      });
    }
    e = entries.erase(e);
  }
  if (entries.empty()) pending_.erase(it);
}

void Cluster::RememberLocked(const std::string& msg_id, uint64_t position, const WriteResult& r) {
  const absl::Time now = absl::Now();
  // The oldest go first: past the window, or past the byte bound.
  while (!remembered_order_.empty()) {
    auto it = remembered_.find(remembered_order_.front());
    if (it != remembered_.end() && it->second.expires > now &&
        remembered_bytes_ + r.results.size() + 128 <= options_.max_dedup_bytes) {
      break;
    }
    if (it != remembered_.end()) {
      remembered_bytes_ -= it->second.bytes;
      remembered_.erase(it);
    }
    remembered_order_.pop_front();
  }
  Remembered& m = remembered_[msg_id];
  if (m.bytes != 0)
    remembered_bytes_ -= m.bytes;  // Replaced.
  else
    remembered_order_.push_back(msg_id);
  m.position = position;
  m.outcome = r;
  m.expires = now + options_.dedup_window;
  m.bytes = r.results.size() + msg_id.size() + 128;
  remembered_bytes_ += m.bytes;
}

void Cluster::HandleAck(const char* msg_id, uint64_t sequence, bool duplicate,
                        const absl::Status& error) {
  MutexLock lock(&mu_);
  auto it = pending_.find(msg_id);
  if (it == pending_.end()) return;
  for (PendingEntry& e : it->second) {
    if (e.acked || e.call->finished) continue;
    if (!error.ok()) {
      ++publish_failures_;
      FailCallLocked(e.call, error);
    } else {
      e.acked = true;
      e.position = sequence;
      if (duplicate) ++duplicates_;
    }
    break;
  }
  SettleLocked(msg_id);
  work_cv_.notify_all();
}

}  // namespace cuckoo::server
