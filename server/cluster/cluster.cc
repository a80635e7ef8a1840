#include "server/cluster/cluster.h"

#include <nats/nats.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <limits>
#include <utility>

#include "absl/random/random.h"
#include "absl/status/status.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "server/cluster/peer_copy.h"
#include "spdlog/spdlog.h"

namespace cuckoo::server {
namespace {

constexpr char kMsgIdHeader[] = "Nats-Msg-Id";
// NATS's default max_payload, assumed until the server says otherwise.
constexpr size_t kDefaultMaxPayload = size_t{1} << 20;
// Room left in a message for its headers (the message id and JetStream's).
constexpr size_t kHeaderRoom = 1024;
// Entries delivered and waiting for the apply, at most.
constexpr int kMaxPendingDeliveryBytes = 64 << 20;

std::string NatsError(natsStatus s, jsErrCode jerr = static_cast<jsErrCode>(0)) {
  std::string text = natsStatus_GetText(s);
  const char* last = nats_GetLastError(nullptr);
  if (last != nullptr && *last != '\0' && text != last) absl::StrAppend(&text, ": ", last);
  if (jerr != 0) absl::StrAppend(&text, " (JetStream error ", static_cast<int>(jerr), ")");
  return text;
}

const char* ConnStatusName(natsConnStatus s) {
  switch (s) {
    case NATS_CONN_STATUS_DISCONNECTED:
      return "disconnected";
    case NATS_CONN_STATUS_CONNECTING:
      return "connecting";
    case NATS_CONN_STATUS_CONNECTED:
      return "connected";
    case NATS_CONN_STATUS_CLOSED:
      return "closed";
    case NATS_CONN_STATUS_RECONNECTING:
      return "reconnecting";
    case NATS_CONN_STATUS_DRAINING_SUBS:
    case NATS_CONN_STATUS_DRAINING_PUBS:
      return "draining";
  }
  return "unknown";
}

}  // namespace

struct Cluster::Impl {
  natsOptions* opts = nullptr;
  natsConnection* nc = nullptr;
  jsCtx* js = nullptr;
  natsSubscription* sub = nullptr;
  kvStore* kv = nullptr;  // The replica records (maintenance thread).
};

struct Cluster::Call {
  WriteDone done;
  size_t parts = 0;
  size_t settled = 0;
  bool finished = false;
  absl::Time deadline;
  std::vector<WriteResult> outcomes;
};

namespace {

void OnMessageTrampoline(natsConnection*, natsSubscription*, natsMsg* msg, void* closure);
void OnAckTrampoline(jsCtx*, natsMsg* msg, jsPubAck* pa, jsPubAckErr* pae, void* closure);
void OnConnected(natsConnection* nc, void* closure) {
  char url[256] = {0};
  natsConnection_GetConnectedUrl(nc, url, sizeof(url));
  spdlog::info("cluster: connected to NATS at {}", url);
  (void)closure;
}
void OnDisconnected(natsConnection*, void*) {
  spdlog::warn(
      "cluster: disconnected from NATS; reconnecting (writes fail with UNAVAILABLE "
      "meanwhile, reads are served from this replica)");
}
void OnReconnected(natsConnection* nc, void* closure) { OnConnected(nc, closure); }

}  // namespace

absl::StatusOr<std::unique_ptr<Cluster>> Cluster::Create(ClusterOptions options,
                                                         FilterRegistry* registry,
                                                         Persistence* persistence) {
  if (options.nats_urls.empty()) return absl::InvalidArgumentError("--nats: no NATS URL");
  if (options.stream.empty() || options.stream.size() > 64 ||
      !std::all_of(options.stream.begin(), options.stream.end(), [](char c) {
        return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
               c == '_' || c == '-';
      })) {
    return absl::InvalidArgumentError(
        absl::StrFormat("--nats-stream=\"%s\": a stream name is 1 to 64 of A-Z a-z 0-9 _ -",
                        absl::CHexEscape(options.stream)));
  }
  if (options.replica_id.empty()) {
    char host[256] = {0};
    ::gethostname(host, sizeof(host) - 1);
    options.replica_id = host;
  }
  return std::unique_ptr<Cluster>(new Cluster(std::move(options), registry, persistence));
}

Cluster::Cluster(ClusterOptions options, FilterRegistry* registry, Persistence* persistence)
    : options_(std::move(options)),
      registry_(registry),
      persistence_(persistence),
      impl_(std::make_unique<Impl>()),
      subject_(absl::StrCat("cuckood.", options_.stream, ".log")),
      instance_(absl::StrFormat("%016x", absl::Uniform<uint64_t>(absl::BitGen()))) {
  // A KV key: the replica id with what keys may not hold replaced.
  for (char c : options_.replica_id) {
    const bool ok = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
                    c == '_' || c == '-';
    replica_key_.push_back(ok ? c : '_');
  }
}

Cluster::~Cluster() { Stop(); }

std::string Cluster::Identity() const {
  MutexLock lock(&mu_);
  return identity_;
}

void Cluster::Checkpointed(uint64_t needed) {
  spdlog::debug("cluster: checkpoint at position {}", needed);
  // Recorded in the replica records by the maintenance thread.
  needed_.store(needed, std::memory_order_release);
}

void Cluster::SetProblem(std::string problem) {
  MutexLock lock(&mu_);
  if (problem_ == problem) return;
  if (!problem.empty()) spdlog::error("cluster: {}", problem);
  problem_ = std::move(problem);
}

void Cluster::Start(uint64_t from, std::string identity) {
  applied_.store(from == 0 ? 0 : from - 1, std::memory_order_release);
  needed_.store(std::max<uint64_t>(from, 1), std::memory_order_release);
  {
    MutexLock lock(&mu_);
    if (started_) return;
    started_ = true;
    expected_identity_ = std::move(identity);
  }
  natsOptions_Create(&impl_->opts);
  std::vector<const char*> urls;
  for (const std::string& u : options_.nats_urls) urls.push_back(u.c_str());
  natsOptions_SetServers(impl_->opts, urls.data(), static_cast<int>(urls.size()));
  natsOptions_SetName(impl_->opts, absl::StrCat("cuckood ", options_.replica_id).c_str());
  natsOptions_SetMaxReconnect(impl_->opts, -1);
  natsOptions_SetReconnectWait(impl_->opts, 250);
  natsOptions_SetTimeout(impl_->opts, 2000);
  natsOptions_SetPingInterval(impl_->opts, 2000);
  natsOptions_SetMaxPingsOut(impl_->opts, 2);
  natsOptions_SetDisconnectedCB(impl_->opts, OnDisconnected, this);
  natsOptions_SetReconnectedCB(impl_->opts, OnReconnected, this);
  // With a connected callback, Connect returns at once and keeps trying in
  // the background: a replica starts (and serves reads) without NATS.
  natsOptions_SetRetryOnFailedConnect(impl_->opts, true, OnConnected, this);
  const natsStatus s = natsConnection_Connect(&impl_->nc, impl_->opts);
  if (s != NATS_OK && s != NATS_NOT_YET_CONNECTED) {
    SetProblem(absl::StrCat("cannot connect to NATS at ", absl::StrJoin(options_.nats_urls, ","),
                            ": ", NatsError(s)));
  }
  if (impl_->nc != nullptr) {
    jsOptions jo;
    jsOptions_Init(&jo);
    jo.Wait = 5000;
    jo.PublishAsync.AckHandler = OnAckTrampoline;
    jo.PublishAsync.AckHandlerClosure = this;
    jo.PublishAsync.MaxPending = 16384;
    jo.PublishAsync.StallWait = 100;
    if (natsStatus js = natsConnection_JetStream(&impl_->js, impl_->nc, &jo); js != NATS_OK) {
      SetProblem(absl::StrCat("cannot use JetStream: ", NatsError(js)));
    }
  }
  maintenance_ = std::thread([this] { Maintain(); });
  completion_ = std::thread([this] { Complete(); });
}

void Cluster::Stop() {
  if (stopping_.exchange(true)) return;
  {
    // No entry is being applied after this, and none will be.
    MutexLock apply(&apply_mu_);
  }
  {
    MutexLock lock(&mu_);
    stop_cv_.notify_all();
    work_cv_.notify_all();
  }
  if (maintenance_.joinable()) maintenance_.join();
  if (bootstrap_.joinable()) bootstrap_.join();
  if (impl_->kv != nullptr) kvStore_Destroy(impl_->kv);
  impl_->kv = nullptr;
  if (impl_->sub != nullptr) {
    natsSubscription_Unsubscribe(impl_->sub);
    natsSubscription_Destroy(impl_->sub);
    impl_->sub = nullptr;
  }
  if (impl_->nc != nullptr) natsConnection_Close(impl_->nc);
  {
    MutexLock lock(&mu_);
    const absl::Status down = absl::UnavailableError(
        "cuckood is shutting down; the write may or may not have been applied: retry with the "
        "same request_id against another replica");
    for (auto& [id, entries] : pending_) {
      for (PendingEntry& e : entries) FailCallLocked(e.call, down);
    }
    pending_.clear();
    for (auto& [position, waiter] : waiters_) {
      completions_.push_back([fn = std::move(waiter.second)] {
        fn(absl::UnavailableError("cuckood is shutting down"));
      });
    }
    waiters_.clear();
    completion_stop_ = true;
    work_cv_.notify_all();
  }
  if (completion_.joinable()) completion_.join();
  if (impl_->js != nullptr) jsCtx_Destroy(impl_->js);
  if (impl_->nc != nullptr) natsConnection_Destroy(impl_->nc);
  if (impl_->opts != nullptr) natsOptions_Destroy(impl_->opts);
  impl_->js = nullptr;
  impl_->nc = nullptr;
  impl_->opts = nullptr;
}

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
      problem = "it is not consuming the stream yet (starting, or NATS has no stream leader)";
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

namespace {

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

void OnMessageTrampoline(natsConnection*, natsSubscription*, natsMsg* msg, void* closure) {
  static_cast<Cluster*>(closure)->HandleMessage(msg);
  natsMsg_Destroy(msg);
}

}  // namespace

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

void Cluster::HandleMessage(void* m) {
  natsMsg* msg = static_cast<natsMsg*>(m);
  jsMsgMetaData* meta = nullptr;
  if (natsMsg_GetMetaData(&meta, msg) != NATS_OK) {
    spdlog::warn("cluster: a delivered message without JetStream metadata; ignored");
    return;
  }
  const uint64_t position = meta->Sequence.Stream;
  const uint64_t pending_after = meta->NumPending;
  jsMsgMetaData_Destroy(meta);
  MutexLock apply(&apply_mu_);
  if (stopping_.load(std::memory_order_acquire)) return;
  const uint64_t applied = applied_.load(std::memory_order_acquire);
  if (position <= applied) return;  // Delivered again (the consumer was recreated).
  if (position != applied + 1) {
    SetProblem(absl::StrFormat(
        "the stream no longer holds positions %u to %u, which this replica needs (it was away "
        "longer than the stream keeps entries, or the stream was purged): it serves reads as of "
        "position %u and applies nothing more; start it with an empty --data-dir to rebuild it "
        "from the stream, or from a copy of another replica's data directory",
        applied + 1, position - 1, applied));
    return;
  }
  const absl::string_view bytes(natsMsg_GetData(msg), natsMsg_GetDataLength(msg));
  absl::StatusOr<LogEntry> entry = DecodeLogEntry(bytes);
  WriteResult out;
  if (!entry.ok()) {
    if (absl::IsFailedPrecondition(entry.status())) {
      SetProblem(
          absl::StrFormat("cannot apply position %u: %s", position, entry.status().message()));
      return;
    }
    // Not cuckood's (someone published to the subject), or damaged: every
    // replica skips it alike.
    spdlog::error("cluster: skipped position {}: {}", position,
                  std::string(entry.status().message()));
    out.status = entry.status();
  } else {
    ApplyEntry(*entry, position, &out);
  }
  const char* id = nullptr;
  natsMsgHeader_Get(msg, kMsgIdHeader, &id);
  // Every entry passes here: its arguments are built only when asked for.
  if (entry.ok() && spdlog::should_log(spdlog::level::debug)) {
    spdlog::debug("applied position {}: {} {} ({} keys), message id {}", position,
                  std::string(LogEntryTypeName(entry->type)), entry->name, entry->hashes.size(),
                  id != nullptr ? id : "-");
  }
  MutexLock lock(&mu_);
  applied_.store(position, std::memory_order_release);
  ++entries_applied_;
  lag_hint_ = pending_after;
  if (id != nullptr) {
    const std::string msg_id(id);
    auto it = pending_.find(msg_id);
    if (it != pending_.end()) {
      for (PendingEntry& e : it->second) {
        if (e.applied) continue;
        e.applied = true;
        e.outcome = out;
        if (!e.acked) e.position = position;
      }
    }
    if (absl::StartsWith(msg_id, "r/")) RememberLocked(msg_id, position, out);
    SettleLocked(msg_id);
  }
  for (auto w = waiters_.begin(); w != waiters_.end() && w->first <= position;) {
    completions_.push_back([fn = std::move(w->second.second)] { fn(absl::OkStatus()); });
    w = waiters_.erase(w);
  }
  work_cv_.notify_all();
}

void Cluster::ApplyEntry(const LogEntry& e, uint64_t position, WriteResult* out) {
  absl::StatusOr<std::shared_ptr<CuckooFilter>> filter = registry_->Get(e.name);
  switch (e.type) {
    case LogEntryType::kCreateFilter: {
      if (filter.ok()) {
        if ((*filter)->id() != position) {
          out->status = absl::AlreadyExistsError(
              absl::StrFormat("filter \"%s\" already exists (created at log position %u)", e.name,
                              (*filter)->id()));
        }
        return;  // Else: loaded from a snapshot taken after this entry.
      }
      if (absl::Status room = registry_->CheckRoom(e.name, CuckooFilter::MemoryBytes(e.shape));
          !room.ok()) {
        out->status = room;
        if (room.code() == absl::StatusCode::kResourceExhausted) {
          spdlog::error(
              "cluster: filter {} (log position {}) does not fit this replica ({}): writes to it "
              "are refused here; give every replica the same --memory-budget and --max-filters",
              e.name, position, std::string(room.message()));
        }
        return;
      }
      absl::StatusOr<std::unique_ptr<CuckooFilter>> created = CuckooFilter::FromShape(e.shape);
      if (!created.ok()) {
        out->status = created.status();
        return;
      }
      (*created)->set_id(position);
      absl::StatusOr<std::shared_ptr<CuckooFilter>> added =
          registry_->Add(e.name, *std::move(created));
      if (!added.ok()) {
        out->status = added.status();
        return;
      }
      out->created = true;
      spdlog::info(
          "created filter {} at log position {}: capacity {}, fingerprint_bits {}, {} "
          "table, shards {}, {} bytes",
          e.name, position, e.shape.capacity, e.shape.fingerprint_bits,
          TableKindName(e.shape.table_kind), e.shape.shards, (*added)->memory_bytes());
      return;
    }
    case LogEntryType::kDropFilter:
      if (!filter.ok() || (*filter)->id() != e.filter_id) {
        out->status = absl::NotFoundError(
            absl::StrFormat("filter \"%s\" not found: dropped already", e.name));
        return;
      }
      out->freed_bytes = (*filter)->memory_bytes();
      spdlog::info("dropped filter {} at log position {}: {} items, {} bytes freed", e.name,
                   position, (*filter)->items(), out->freed_bytes);
      persistence_->ApplyDrop(e.name, *filter);
      return;
    case LogEntryType::kInsert:
    case LogEntryType::kDelete: {
      if (!filter.ok() || (*filter)->id() != e.filter_id) {
        out->status = absl::NotFoundError(absl::StrFormat(
            "filter \"%s\" not found: it was dropped before this write was applied", e.name));
        return;
      }
      // Any 64-bit value is a valid hash for any filter (the shard and
      // bucket are taken from its bits within range), so a hostile entry
      // can add or remove fingerprints but never reach outside the tables.
      out->results.resize(e.hashes.size());
      if (e.type == LogEntryType::kInsert) {
        std::vector<InsertResult> r(e.hashes.size());
        (*filter)->InsertHashedAt(e.hashes, e.if_absent, absl::MakeSpan(r), position);
        for (size_t i = 0; i < r.size(); ++i) out->results[i] = static_cast<uint8_t>(r[i]);
      } else {
        std::vector<DeleteResult> r(e.hashes.size());
        (*filter)->DeleteHashedAt(e.hashes, absl::MakeSpan(r), position);
        for (size_t i = 0; i < r.size(); ++i) out->results[i] = static_cast<uint8_t>(r[i]);
      }
      return;
    }
  }
}

void Cluster::WhenApplied(uint64_t position, absl::Time deadline,
                          std::function<void(absl::Status)> fn) {
  if (applied_.load(std::memory_order_acquire) >= position) {
    fn(absl::OkStatus());
    return;
  }
  MutexLock lock(&mu_);
  if (applied_.load(std::memory_order_acquire) >= position) {
    completions_.push_back([fn = std::move(fn)] { fn(absl::OkStatus()); });
    work_cv_.notify_all();
    return;
  }
  if (stopping_.load()) {
    completions_.push_back(
        [fn = std::move(fn)] { fn(absl::UnavailableError("cuckood is shutting down")); });
    work_cv_.notify_all();
    return;
  }
  waiters_.emplace(position, std::make_pair(deadline, std::move(fn)));
}

void Cluster::Complete() {
  MutexLock lock(&mu_);
  while (true) {
    while (completions_.empty() && !completion_stop_) mu_.Wait(&work_cv_);
    if (completions_.empty()) return;
    std::deque<std::function<void()>> batch;
    batch.swap(completions_);
    lock.Unlock();
    for (std::function<void()>& f : batch) f();
    batch.clear();
    lock.Lock();
  }
}

void Cluster::Maintain() {
  absl::Time next_stream_check = absl::InfinitePast();
  MutexLock lock(&mu_);
  while (!stopping_.load()) {
    // Expire what waited too long.
    const absl::Time now = absl::Now();
    const uint64_t applied = applied_.load(std::memory_order_acquire);
    for (auto w = waiters_.begin(); w != waiters_.end();) {
      if (w->second.first > now) {
        ++w;
        continue;
      }
      completions_.push_back(
          [fn = std::move(w->second.second), want = w->first, applied, last = stream_last_] {
            fn(absl::UnavailableError(absl::StrFormat(
                "this replica has applied the log up to position %u, not yet to %u as asked "
                "(min_log_position); the stream is at %u; retry against another replica",
                applied, want, last)));
          });
      w = waiters_.erase(w);
    }
    for (auto it = pending_.begin(); it != pending_.end();) {
      auto& v = it->second;
      for (auto e = v.begin(); e != v.end();) {
        if (e->call->finished || e->call->deadline <= now) {
          FailCallLocked(e->call,
                         absl::UnavailableError(absl::StrFormat(
                             "the write was not %s within %s (--cluster-write-timeout); it may "
                             "still be applied: retry with the same request_id",
                             e->acked ? "applied by this replica" : "acknowledged by the stream",
                             absl::FormatDuration(options_.write_timeout))));
          e = v.erase(e);
        } else {
          ++e;
        }
      }
      if (v.empty()) {
        pending_.erase(it++);
      } else {
        ++it;
      }
    }
    if (!completions_.empty()) work_cv_.notify_all();
    if (now >= next_stream_check) {
      next_stream_check = now + absl::Milliseconds(500);
      lock.Unlock();
      MaintainStream();
      lock.Lock();
      continue;
    }
    mu_.WaitFor(&stop_cv_, std::chrono::milliseconds(50));
  }
}

void Cluster::MaintainStream() {
  if (impl_->nc == nullptr || impl_->js == nullptr) return;
  if (natsConnection_Status(impl_->nc) != NATS_CONN_STATUS_CONNECTED) return;
  // Read before the stream's state: every entry applied by then is in the
  // state the stream reports.
  const uint64_t applied = applied_.load(std::memory_order_acquire);
  jsStreamInfo* si = nullptr;
  jsErrCode jerr = static_cast<jsErrCode>(0);
  natsStatus s = js_GetStreamInfo(&si, impl_->js, options_.stream.c_str(), nullptr, &jerr);
  if (s == NATS_NOT_FOUND || jerr == JSStreamNotFoundErr) {
    // This replica creates the log.
    uint32_t replicas = options_.stream_replicas;
    if (replicas == 0) {
      char** servers = nullptr;
      int count = 0;
      if (natsConnection_GetServers(impl_->nc, &servers, &count) == NATS_OK) {
        for (int i = 0; i < count; ++i) free(servers[i]);
        free(servers);
      }
      replicas = count >= 3 ? 3 : 1;
    }
    jsStreamConfig cfg;
    jsStreamConfig_Init(&cfg);
    cfg.Name = options_.stream.c_str();
    const char* subjects[] = {subject_.c_str()};
    cfg.Subjects = subjects;
    cfg.SubjectsLen = 1;
    cfg.Storage = js_FileStorage;
    cfg.Retention = js_LimitsPolicy;
    cfg.Replicas = replicas;
    cfg.Duplicates = absl::ToInt64Nanoseconds(options_.dedup_window);
    cfg.DenyDelete = true;
    jerr = static_cast<jsErrCode>(0);
    s = js_AddStream(&si, impl_->js, &cfg, nullptr, &jerr);
    if (s != NATS_OK) {
      SetProblem(absl::StrFormat("cannot create the stream %s (replicas %u): %s", options_.stream,
                                 replicas, NatsError(s, jerr)));
      return;
    }
    spdlog::info(
        "cluster: created stream {} (subject {}, file storage, {} replicas, duplicate "
        "window {})",
        options_.stream, subject_, replicas, absl::FormatDuration(options_.dedup_window));
  } else if (s != NATS_OK) {
    // No JetStream leader just now, a timeout: keep what we know.
    spdlog::debug("cluster: stream info: {}", NatsError(s, jerr));
    return;
  }
  {
    MutexLock lock(&mu_);
    // What kept the log out of reach has passed.
    if (absl::StartsWith(problem_, "cannot create the stream")) problem_.clear();
  }
  const uint64_t first = si->State.FirstSeq;
  const uint64_t last = si->State.LastSeq;
  const uint64_t msgs = si->State.Msgs;
  const std::string identity = absl::StrCat(options_.stream, "@", si->Created);
  const uint32_t replicas = si->Config != nullptr ? static_cast<uint32_t>(si->Config->Replicas) : 0;
  jsStreamInfo_Destroy(si);
  std::string mismatch;
  {
    MutexLock lock(&mu_);
    stream_first_ = first;
    stream_last_ = last;
    stream_replicas_ = replicas;
    identity_ = identity;
    if (!expected_identity_.empty() && expected_identity_ != identity) {
      mismatch = absl::StrFormat(
          "this data directory's snapshots belong to the log %s, but the stream is now %s (it "
          "was deleted and created again): its positions mean nothing here; start this replica "
          "with an empty --data-dir to rebuild it from the stream",
          expected_identity_, identity);
    }
  }
  if (!mismatch.empty()) {
    SetProblem(mismatch);
    return;
  }
  MaintainReplicas(identity, first, last);
  // The stream's state can lag what its consumers were already given (seen
  // here under load: 4 entries behind for a moment), so only a stream that
  // stays behind this replica, check after check, lost entries.
  stream_behind_checks_ = applied > last ? stream_behind_checks_ + 1 : 0;
  if (stream_behind_checks_ >= 6) {
    SetProblem(absl::StrFormat(
        "this replica has applied up to position %u, but the stream %s ends at %u: the stream "
        "lost entries (restored from an older backup?); start this replica with an empty "
        "--data-dir to rebuild it from the stream",
        applied, options_.stream, last));
    return;
  }
  if (impl_->sub != nullptr || bootstrapping_.load(std::memory_order_acquire)) return;
  if (bootstrap_.joinable()) bootstrap_.join();  // A bootstrap that ended.
  const uint64_t needed = applied + 1;
  const bool gone = (msgs > 0 && needed < first) || (msgs == 0 && needed <= last);
  // A new, empty replica copies a peer rather than replaying the whole
  // stream (once: if no peer can be copied, it replays).
  const bool fresh =
      needed == 1 && last > 0 && !tried_new_replica_bootstrap_ && registry_->List().empty();
  if (gone || fresh) {
    const absl::Time now = absl::Now();
    if (now < next_bootstrap_) return;
    next_bootstrap_ = now + absl::Seconds(5);
    tried_new_replica_bootstrap_ = true;
    if (gone) {
      SetProblem(absl::StrFormat(
          "the stream %s starts at position %u, but this replica needs it from %u (it was away "
          "longer than the stream keeps entries): bootstrapping from a peer replica",
          options_.stream, first, needed));
    }
    std::vector<ReplicaRecord> peers;
    for (ReplicaRecord& r : ReadReplicas()) {
      if (r.identity == identity && r.key != replica_key_ && !r.address.empty()) {
        peers.push_back(std::move(r));
      }
    }
    bootstrapping_.store(true, std::memory_order_release);
    bootstrap_ = std::thread([this, identity, gone, peers = std::move(peers)]() mutable {
      Bootstrap(identity, std::move(peers), gone);
    });
    return;
  }
  jsSubOptions so;
  jsSubOptions_Init(&so);
  so.Stream = options_.stream.c_str();
  so.Ordered = true;
  so.Config.DeliverPolicy = js_DeliverByStartSequence;
  so.Config.OptStartSeq = needed;
  // A consumer lost with its NATS server is noticed after a few missed
  // heartbeats and made again from the next position.
  so.Config.Heartbeat = absl::ToInt64Nanoseconds(absl::Seconds(1));
  natsSubscription* sub = nullptr;
  jerr = static_cast<jsErrCode>(0);
  s = js_Subscribe(&sub, impl_->js, subject_.c_str(), OnMessageTrampoline, this, nullptr, &so,
                   &jerr);
  if (s != NATS_OK) {
    spdlog::warn("cluster: cannot consume the stream yet: {}", NatsError(s, jerr));
    return;
  }
  // Entries wait here while the apply is busy: bounded, and flow control
  // slows the stream's delivery instead of dropping.
  natsSubscription_SetPendingLimits(sub, -1, kMaxPendingDeliveryBytes);
  impl_->sub = sub;
  {
    MutexLock lock(&mu_);
    consuming_ = true;
  }
  spdlog::info("cluster: applying stream {} from position {} (it holds {} to {})", options_.stream,
               needed, first, last);
}

void Cluster::MaintainReplicas(const std::string& identity, uint64_t first, uint64_t last) {
  const absl::Time now = absl::Now();
  if (impl_->kv == nullptr) {
    if (now < next_register_) return;
    next_register_ = now + absl::Seconds(5);  // Until the bucket is there.
    const std::string bucket = absl::StrCat(options_.stream, "_replicas");
    natsStatus s = js_KeyValue(&impl_->kv, impl_->js, bucket.c_str());
    if (s == NATS_NOT_FOUND) {
      kvConfig cfg;
      kvConfig_Init(&cfg);
      cfg.Bucket = bucket.c_str();
      cfg.Description = "cuckood: the first stream position each replica needs";
      cfg.History = 1;
      cfg.TTL = absl::ToInt64Nanoseconds(options_.replica_expiry);
      cfg.StorageType = js_FileStorage;
      MutexLock lock(&mu_);
      cfg.Replicas = static_cast<int>(std::max<uint32_t>(stream_replicas_, 1));
      lock.Unlock();
      s = js_CreateKeyValue(&impl_->kv, impl_->js, &cfg);
    }
    if (s != NATS_OK) {
      impl_->kv = nullptr;
      const std::string why = NatsError(s);
      if (why != kv_problem_) {
        spdlog::warn("cluster: cannot use the replica records (KV bucket {}): {}", bucket, why);
      }
      kv_problem_ = why;
      return;
    }
    kv_problem_.clear();
    next_register_ = absl::InfinitePast();
  }
  // This replica's record: refreshed well within the expiry, and at once
  // when its needed position moves.
  const uint64_t needed = needed_.load(std::memory_order_acquire);
  if (needed != registered_needed_ || now >= next_register_) {
    const std::string value = absl::StrFormat("cuckood-replica v1 identity=%s needed=%u address=%s",
                                              identity, needed, options_.advertise);
    uint64_t revision = 0;
    if (natsStatus s = kvStore_PutString(&revision, impl_->kv, replica_key_.c_str(), value.c_str());
        s != NATS_OK) {
      spdlog::warn("cluster: cannot record this replica's position: {}", NatsError(s));
      next_register_ = now + absl::Seconds(1);
      return;
    }
    registered_needed_ = needed;
    next_register_ =
        now + std::clamp(options_.replica_expiry / 4, absl::Seconds(1), absl::Hours(1));
  }

  // Retention: purge what every replica has checkpointed past, but nothing
  // the duplicate window may still need (a retry's request id is
  // recognised by the entry it repeats).
  if (now < next_retention_) return;
  next_retention_ =
      now + std::clamp(options_.replica_expiry / 8, absl::Seconds(1), absl::Minutes(1));
  last_seen_.emplace_back(now, last);
  const absl::Time window_start = now - options_.dedup_window;
  while (last_seen_.size() > 1 && last_seen_[1].first <= window_start) last_seen_.pop_front();
  if (last_seen_.front().first > window_start) return;
  const uint64_t old_last = last_seen_.front().second;
  uint64_t least = std::numeric_limits<uint64_t>::max();
  int replicas = 0;
  for (const ReplicaRecord& r : ReadReplicas()) {
    if (r.identity != identity) continue;
    least = std::min(least, r.needed);
    ++replicas;
  }
  if (replicas == 0) return;  // Not even this replica's: unknown.
  const uint64_t purge_to = std::min(least, old_last + 1);
  if (purge_to <= first) return;
  jsOptions o;
  jsOptions_Init(&o);
  o.Stream.Purge.Sequence = purge_to;
  jsErrCode jerr = static_cast<jsErrCode>(0);
  if (natsStatus s = js_PurgeStream(impl_->js, options_.stream.c_str(), &o, &jerr); s != NATS_OK) {
    spdlog::warn("cluster: cannot purge the stream up to {}: {}", purge_to, NatsError(s, jerr));
    return;
  }
  spdlog::info(
      "cluster: purged stream {} before position {} (every one of {} replicas has checkpointed "
      "past it)",
      options_.stream, purge_to, replicas);
  MutexLock lock(&mu_);
  ++purges_;
}

std::vector<Cluster::ReplicaRecord> Cluster::ReadReplicas() {
  std::vector<ReplicaRecord> out;
  if (impl_->kv == nullptr) return out;
  kvKeysList keys;
  std::memset(&keys, 0, sizeof(keys));
  kvWatchOptions wo;
  kvWatchOptions_Init(&wo);
  wo.Timeout = 5000;
  if (natsStatus s = kvStore_Keys(&keys, impl_->kv, &wo); s != NATS_OK) {
    if (s != NATS_NOT_FOUND)
      spdlog::warn("cluster: cannot list the replica records: {}", NatsError(s));
    return out;
  }
  for (int i = 0; i < keys.Count; ++i) {
    kvEntry* e = nullptr;
    if (kvStore_Get(&e, impl_->kv, keys.Keys[i]) != NATS_OK) continue;
    ReplicaRecord r;
    r.key = keys.Keys[i];
    bool valid = false;
    for (absl::string_view field : absl::StrSplit(kvEntry_ValueString(e), ' ')) {
      if (absl::ConsumePrefix(&field, "identity=")) {
        r.identity = std::string(field);
      } else if (absl::ConsumePrefix(&field, "needed=")) {
        valid = absl::SimpleAtoi(field, &r.needed);
      } else if (absl::ConsumePrefix(&field, "address=")) {
        r.address = std::string(field);
      }
    }
    kvEntry_Destroy(e);
    if (valid && !r.identity.empty()) out.push_back(std::move(r));
  }
  kvKeysList_Destroy(&keys);
  return out;
}

void Cluster::Bootstrap(std::string identity, std::vector<ReplicaRecord> peers, bool must) {
  const absl::Time t0 = absl::Now();
  // The most advanced first.
  std::sort(peers.begin(), peers.end(),
            [](const ReplicaRecord& a, const ReplicaRecord& b) { return a.needed > b.needed; });
  std::string failures;
  bool done = false;
  for (const ReplicaRecord& peer : peers) {
    if (stopping_.load()) break;
    // Nothing of this replica's own is worth keeping: the stream cannot
    // bring it up to date. (A new replica has nothing.)
    for (const auto& [name, filter] : registry_->List()) persistence_->ApplyDrop(name, filter);
    spdlog::info("cluster: bootstrapping: copying every filter from peer {} ({})", peer.key,
                 peer.address);
    PeerAccess access;
    if (options_.peer_access) {
      absl::StatusOr<PeerAccess> a = options_.peer_access();
      if (!a.ok()) {
        spdlog::warn("cluster: cannot bootstrap from peer {}: {}", peer.key,
                     std::string(a.status().message()));
        absl::StrAppend(&failures, failures.empty() ? "" : "; ", a.status().message());
        continue;
      }
      access = *std::move(a);
    }
    absl::StatusOr<PeerCopy> copy = CopyFromPeer(
        peer.address, identity, access, registry_,
        (std::filesystem::path(persistence_->data_dir()) / kImportDir).string(), stopping_);
    if (!copy.ok()) {
      spdlog::warn("cluster: bootstrap from peer {} failed: {}", peer.key,
                   std::string(copy.status().message()));
      absl::StrAppend(&failures, failures.empty() ? "" : "; ", copy.status().message());
      continue;
    }
    uint64_t items = 0;
    absl::Status added;
    for (PeerFilter& f : copy->filters) {
      items += f.items;
      absl::StatusOr<std::shared_ptr<CuckooFilter>> a =
          registry_->AddClaimed(std::move(f.claim), std::move(f.filter));
      if (!a.ok()) added = a.status();
    }
    if (!added.ok()) {
      spdlog::warn("cluster: bootstrap from peer {} failed: {}", peer.key,
                   std::string(added.message()));
      absl::StrAppend(&failures, failures.empty() ? "" : "; ", added.message());
      continue;
    }
    applied_.store(copy->resume_from - 1, std::memory_order_release);
    needed_.store(copy->resume_from, std::memory_order_release);
    // On disk, with the checkpoint, before the stream is applied again.
    if (absl::StatusOr<SnapshotRun> run = persistence_->SnapshotNow("", false); !run.ok()) {
      spdlog::warn("cluster: snapshots after the bootstrap: {} (they are written again later)",
                   std::string(run.status().message()));
    }
    spdlog::info(
        "cluster: bootstrapped from peer {} in {}: {} filters, {} items, {} bytes of snapshots; "
        "applying the stream from position {}",
        peer.key, absl::FormatDuration(absl::Now() - t0), copy->filters.size(), items, copy->bytes,
        copy->resume_from);
    {
      MutexLock lock(&mu_);
      ++bootstraps_;
    }
    done = true;
    break;
  }
  if (done || !must) {
    if (!done && !peers.empty()) {
      spdlog::info("cluster: no peer could be copied ({}); replaying the stream instead", failures);
    }
    SetProblem("");
  } else {
    SetProblem(absl::StrFormat(
        "this replica needs the stream from position %u, which the stream %s no longer holds, "
        "and no peer replica could be copied (%s); retrying. Peers are found in the KV bucket "
        "%s_replicas, at the address each gives with --advertise",
        applied_.load() + 1, options_.stream,
        peers.empty() ? std::string("none is recorded") : failures, options_.stream));
  }
  bootstrapping_.store(false, std::memory_order_release);
}

ClusterStatus Cluster::Status() const {
  ClusterStatus st;
  st.replica_id = options_.replica_id;
  st.stream = options_.stream;
  if (impl_->nc != nullptr) {
    st.nats_status = ConnStatusName(natsConnection_Status(impl_->nc));
    char url[256] = {0};
    if (natsConnection_GetConnectedUrl(impl_->nc, url, sizeof(url)) == NATS_OK) {
      // Without any user:password@ it may hold: GetServerInfo shows it to
      // every caller.
      std::string shown = url;
      const size_t scheme = shown.find("://");
      const size_t at = shown.find('@', scheme == std::string::npos ? 0 : scheme + 3);
      if (scheme != std::string::npos && at != std::string::npos)
        shown.erase(scheme + 3, at - scheme - 2);
      st.nats_server = shown;
    }
  } else {
    st.nats_status = "closed";
  }
  st.applied = applied_.load(std::memory_order_acquire);
  MutexLock lock(&mu_);
  st.stream_replicas = stream_replicas_;
  st.stream_first = stream_first_;
  st.stream_last = std::max(stream_last_, st.applied + lag_hint_);
  st.lag = st.stream_last - st.applied;
  st.consuming = consuming_;
  st.problem = problem_;
  st.identity = identity_;
  st.purges = purges_;
  st.bootstraps = bootstraps_;
  st.entries_applied = entries_applied_;
  st.entries_published = entries_published_;
  st.duplicates = duplicates_;
  st.publish_failures = publish_failures_;
  return st;
}

bool Cluster::Ready(std::string* why) const {
  const ClusterStatus st = Status();
  if (!st.problem.empty()) {
    *why = st.problem;
    return false;
  }
  // Connected or not: a replica cut off from NATS still serves reads of
  // what it has applied (and writes fail UNAVAILABLE); taking every replica
  // out of service while NATS is away would fail the reads too.
  if (!st.consuming) {
    *why = absl::StrCat("not consuming the stream yet (NATS ", st.nats_status, ")");
    return false;
  }
  if (st.lag > options_.ready_max_lag) {
    *why = absl::StrFormat("%u entries behind the stream (at most %u allowed: --ready-max-lag)",
                           st.lag, options_.ready_max_lag);
    return false;
  }
  return true;
}

}  // namespace cuckoo::server
