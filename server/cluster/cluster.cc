#include "server/cluster/cluster.h"

#include <unistd.h>

#include <algorithm>
#include <utility>

#include "absl/random/random.h"
#include "absl/status/status.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "server/cluster/cluster_internal.h"
#include "spdlog/spdlog.h"

namespace cuckoo::server {

std::string NatsError(natsStatus s, jsErrCode jerr) {
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

namespace {

void OnDisconnected(natsConnection*, void*) {
  spdlog::warn(
      "cluster: disconnected from NATS; reconnecting (writes fail with UNAVAILABLE "
      "meanwhile, reads are served from this replica)");
}
void OnReconnected(natsConnection* nc, void*) { LogConnected(nc); }

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
  std::unique_ptr<Cluster> cluster(new Cluster(std::move(options), registry, persistence));
  if (absl::Status s = cluster->ConfigureConnection(); !s.ok()) return s;
  return cluster;
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

std::string Cluster::Name() const { return absl::StrCat("stream ", options_.stream); }

bool Cluster::AppliedDigest(uint64_t* position, uint64_t* digest) const {
  MutexLock lock(&mu_);
  if (digest_.has_value()) {
    *position = applied_.load(std::memory_order_acquire);
    *digest = *digest_;
    return true;
  }
  // Replaying up to its anchor (after a restart or a copy): the anchor,
  // which a restart from this checkpoint reaches the same way.
  if (anchor_.has_value()) {
    *position = anchor_->position;
    *digest = anchor_->digest;
    return true;
  }
  return false;
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

void Cluster::Start(uint64_t from, std::string identity, std::optional<DigestPoint> anchor) {
  const uint64_t applied = from == 0 ? 0 : from - 1;
  applied_.store(applied, std::memory_order_release);
  needed_.store(std::max<uint64_t>(from, 1), std::memory_order_release);
  {
    MutexLock lock(&mu_);
    if (started_) return;
    started_ = true;
    expected_identity_ = std::move(identity);
    if (anchor.has_value() && anchor->position == applied) {
      digest_ = anchor->digest;
      history_.Add(applied, *digest_);
    } else if (anchor.has_value() && anchor->position > applied) {
      anchor_ = anchor;  // Known once the replay reaches it.
    } else if (applied == 0) {
      digest_ = 0;  // The empty log's.
    } else {
      spdlog::warn(
          "cluster: the checkpoint records no digest of the log (a cuckood before the end-to-end "
          "check wrote it): this replica copies one from a peer replica that has one, or, if none "
          "has, the first such replica starts the digests from its position");
    }
  }
  // impl_->opts: servers, reconnects, TLS and credentials
  // (ConfigureConnection, from Create). Once connected, nats.c reconnects
  // by itself; until then the connect thread tries (Connect,
  // cluster_connect.cc): a replica starts (and serves reads) without NATS.
  natsOptions_SetDisconnectedCB(impl_->opts, OnDisconnected, this);
  natsOptions_SetReconnectedCB(impl_->opts, OnReconnected, this);
  connect_ = std::thread([this] { Connect(); });
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
  if (connect_.joinable()) connect_.join();
  if (maintenance_.joinable()) maintenance_.join();
  if (bootstrap_.joinable()) bootstrap_.join();
  if (impl_->kv != nullptr) kvStore_Destroy(impl_->kv);
  impl_->kv = nullptr;
  if (impl_->digest_watch != nullptr) kvWatcher_Destroy(impl_->digest_watch);
  impl_->digest_watch = nullptr;
  if (impl_->digest_kv != nullptr) kvStore_Destroy(impl_->digest_kv);
  impl_->digest_kv = nullptr;
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
    for (auto& [deadline, fn] : serving_waiters_) {
      completions_.push_back(
          [fn = std::move(fn)] { fn(absl::UnavailableError("cuckood is shutting down")); });
    }
    serving_waiters_.clear();
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
      st.nats_server = NatsUrlWithoutUserInfo(url);
    }
  } else {
    // Not connected yet (the connect thread is trying: problem says why),
    // or stopped.
    st.nats_status = stopping_.load() ? "closed" : "disconnected";
  }
  st.applied = applied_.load(std::memory_order_acquire);
  MutexLock lock(&mu_);
  st.stream_replicas = stream_replicas_;
  st.stream_first = stream_first_;
  st.stream_last = std::max(stream_last_, st.applied + lag_hint_);
  st.lag = st.stream_last - st.applied;
  st.consuming = consuming_;
  st.problem = problem_;
  st.nats_error = nats_error_;
  // Before it ever consumed the stream, why it cannot connect is why it
  // cannot apply the stream. (Once consuming, a replica cut off from NATS
  // goes on serving reads: nats_error tells why, problem stays empty.)
  if (st.problem.empty() && !consuming_ && !nats_error_.empty()) {
    st.problem = absl::StrCat("cannot connect to NATS: ", nats_error_);
  }
  st.identity = identity_;
  st.purges = purges_;
  st.bootstraps = bootstraps_;
  st.entries_applied = entries_applied_;
  st.entries_published = entries_published_;
  st.duplicates = duplicates_;
  st.publish_failures = publish_failures_;
  st.digest_known = digest_.has_value();
  st.digest = digest_.value_or(0);
  st.digest_position = applied_.load(std::memory_order_acquire);  // The pair, under mu_.
  st.verified_position = verified_;
  st.consumer_from = consumer_from_;
  st.digest_voters = voters_;
  st.divergences = divergences_;
  if (healing_) {
    st.digest_state = "healing";
  } else if (digest_state_ == DigestJudgement::State::kDiverged) {
    st.digest_state = "diverged";
  } else if (digest_state_ == DigestJudgement::State::kNoMajority) {
    st.digest_state = "no majority";
  } else {
    st.digest_state = NotServingLocked().empty() ? "agreed" : "unverified";
  }
  return st;
}

std::string Cluster::NotServingLocked(bool* transient) const {
  if (transient != nullptr) *transient = false;
  if (!foreign_log_.empty()) return foreign_log_;
  const std::string repair = "docs/CLUSTER.md, \"Checking the log end to end\"";
  if (digest_state_ == DigestJudgement::State::kDiverged) {
    return absl::StrFormat(
        "this replica's copy of the log differs from the majority's at position %u (%s): it "
        "serves nothing until it has copied a replica that agrees (%s); retry against another "
        "replica (%s)",
        digest_at_, digest_detail_, healing_ ? "under way" : "starting", repair);
  }
  if (digest_state_ == DigestJudgement::State::kNoMajority) {
    return absl::StrFormat(
        "this replica's copy of the log disagrees with another replica's at position %u (%s): "
        "neither serves until a majority decides which copy is right; bring back or add a "
        "replica, or repair by hand (%s)",
        digest_at_, digest_detail_, repair);
  }
  if (healing_) return "this replica is copying a peer replica's filters (bootstrap)";
  if (!judged_) {
    // Cut off from NATS since it started: it serves what its snapshots
    // hold, as when NATS goes away later.
    if (consumer_from_ == 0 &&
        (impl_->nc == nullptr || natsConnection_Status(impl_->nc) != NATS_CONN_STATUS_CONNECTED)) {
      return "";
    }
    if (transient != nullptr) *transient = true;
    return "this replica has not yet compared its copy of the log with the other replicas' "
           "(starting); retry against another replica";
  }
  if (consumer_from_ == 0) return "";  // Applied nothing since it started: checked as it is.
  if (voters_ > 1 && verified_ < consumer_from_) {
    if (transient != nullptr) *transient = true;
    return absl::StrFormat(
        "this replica resumed the stream at position %u (applied up to %u) and a majority of the "
        "%u replicas has not yet agreed with its copy of the log there (%s); retry against "
        "another replica",
        consumer_from_, applied_.load(std::memory_order_acquire), voters_,
        digest_.has_value() ? absl::StrFormat("agreed up to %u", verified_)
                            : std::string("its digest is known once it has applied the position "
                                          "its checkpoint or copy named"));
  }
  return "";
}

absl::Status Cluster::CheckServing(bool* transient) const {
  MutexLock lock(&mu_);
  std::string why = NotServingLocked(transient);
  if (why.empty()) return absl::OkStatus();
  return absl::UnavailableError(std::move(why));
}

void Cluster::WhenServing(absl::Time deadline, std::function<void(absl::Status)> fn) {
  MutexLock lock(&mu_);
  bool transient = false;
  std::string why = NotServingLocked(&transient);
  if (why.empty() || !transient || stopping_.load()) {
    absl::Status s = why.empty()        ? absl::OkStatus()
                     : stopping_.load() ? absl::UnavailableError("cuckood is shutting down")
                                        : absl::UnavailableError(why);
    lock.Unlock();
    fn(std::move(s));
    return;
  }
  serving_waiters_.emplace_back(deadline, std::move(fn));
}

void Cluster::SettleServingWaitersLocked(absl::Time now) {
  if (serving_waiters_.empty()) return;
  bool transient = false;
  const std::string why = NotServingLocked(&transient);
  for (auto w = serving_waiters_.begin(); w != serving_waiters_.end();) {
    if (!why.empty() && transient && w->first > now) {
      ++w;
      continue;
    }
    const absl::Status s = why.empty() ? absl::OkStatus() : absl::UnavailableError(why);
    completions_.push_back([fn = std::move(w->second), s] { fn(s); });
    w = serving_waiters_.erase(w);
  }
  work_cv_.notify_all();
}

bool Cluster::Ready(std::string* why) const {
  const ClusterStatus st = Status();
  if (!st.problem.empty()) {
    *why = st.problem;
    return false;
  }
  if (absl::Status serving = CheckServing(); !serving.ok()) {
    *why = std::string(serving.message());
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
