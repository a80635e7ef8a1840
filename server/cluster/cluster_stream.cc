// The maintenance thread: expiring what waited too long, creating the
// stream and following its state, consuming it from the position this
// replica needs (or bootstrapping from a peer when the stream no longer
// holds it), the replica records and retention.
#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <limits>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "server/cluster/cluster_internal.h"
#include "server/cluster/log_digest.h"
#include "server/cluster/peer_copy.h"
#include "spdlog/spdlog.h"

namespace cuckoo::server {
namespace {

// Entries delivered and waiting for the apply, at most.
constexpr int kMaxPendingDeliveryBytes = 64 << 20;
// A replica whose digest report has not been renewed for this long no
// longer counts in the end-to-end check (each renews its own every second).
// Long enough that a watch cut off by a NATS server's loss (and made again,
// kDigestWatchSilence) does not make a replica believe itself alone, which
// would let it serve a copy nobody agreed with.
constexpr absl::Duration kDigestReportLive = absl::Minutes(1);
// Opens a KV bucket of the cluster, creating it (history 1, as many
// replicas as the stream) when there is none.
natsStatus OpenOrCreateBucket(jsCtx* js, kvStore** kv, const std::string& bucket,
                              const char* description, absl::Duration ttl, jsStorageType storage,
                              uint32_t replicas) {
  natsStatus s = js_KeyValue(kv, js, bucket.c_str());
  if (s != NATS_NOT_FOUND) return s;
  kvConfig cfg;
  kvConfig_Init(&cfg);
  cfg.Bucket = bucket.c_str();
  cfg.Description = description;
  cfg.History = 1;
  cfg.TTL = absl::ToInt64Nanoseconds(ttl);
  cfg.StorageType = storage;
  cfg.Replicas = static_cast<int>(std::max<uint32_t>(replicas, 1));
  return js_CreateKeyValue(kv, js, &cfg);
}

// No report from any other replica for this long, while there are others:
// the watch is stuck (its NATS server lost); it is made again.
constexpr absl::Duration kDigestWatchSilence = absl::Seconds(3);
// What this replica holds of the digest reports, at most (a hostile writer
// to the bucket could write any number of keys, of any size).
constexpr size_t kMaxDigestReportBytes = 4096;
constexpr size_t kMaxDigestPeers = 64;
// How far past the end of the stream's leader's copy a replica's may be
// for good before the stream counts as having lost entries: the NATS
// servers' copies numbered differently (MaintainStream).
constexpr uint64_t kStreamShiftTolerance = 16;

}  // namespace

void Cluster::Maintain() {
  absl::Time next_stream_check = absl::InfinitePast();
  absl::Time next_digest_check = absl::InfinitePast();
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
    SettleServingWaitersLocked(now);
    if (!completions_.empty()) work_cv_.notify_all();
    if (now >= next_digest_check && !identity_.empty()) {
      // The end-to-end check, often: a divergence is caught within a few
      // of these rounds of the others' applying the same positions.
      next_digest_check = now + absl::Milliseconds(100);
      const std::string identity = identity_;
      lock.Unlock();
      if (impl_->nc != nullptr && impl_->js != nullptr &&
          natsConnection_Status(impl_->nc) == NATS_CONN_STATUS_CONNECTED) {
        MaintainDigests(identity);
      }
      lock.Lock();
      continue;
    }
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
  WatchConnection();
  if (impl_->nc == nullptr || impl_->js == nullptr) return;
  if (natsConnection_Status(impl_->nc) != NATS_CONN_STATUS_CONNECTED) return;
  // Read before the stream's state: every entry applied by then is in the
  // state the stream reports.
  const uint64_t applied = applied_.load(std::memory_order_acquire);
  StreamState state;
  if (!ReadStream(&state) || !TakeStreamState(state)) return;
  MaintainReplicas(state.identity, state.first, state.last);
  // The stream's state can lag what its consumers were already given (seen
  // here under load: 4 entries behind for a moment), so only a stream that
  // stays behind this replica, check after check, lost entries.
  stream_behind_checks_ = applied > state.last ? stream_behind_checks_ + 1 : 0;
  // A few positions past the end the stream's leader reports, for good:
  // that leader's copy numbers the entries differently from the copy this
  // replica's consumer reads (nats-server 2.9.10, docs/CLUSTER.md), whose
  // new entries keep coming. Writes acknowledged with the leader's
  // positions may be refused meanwhile (never answered wrongly); reads
  // are served from this replica's copy, which the others' digests check,
  // and wait for the leader's positions shifted (position_shift_).
  position_shift_.store(stream_behind_checks_ >= 6 && applied - state.last <= kStreamShiftTolerance
                            ? applied - state.last
                            : 0,
                        std::memory_order_release);
  if (stream_behind_checks_ >= 6 && applied - state.last <= kStreamShiftTolerance) {
    if (stream_behind_checks_ == 6) {
      spdlog::warn(
          "cluster: this replica has applied up to position {}, {} past where the stream {} ends "
          "on its leader ({}): the NATS servers' copies of the stream number the entries "
          "differently (docs/CLUSTER.md, \"nats-server 2.9.10\"); writes may be refused until "
          "another server leads",
          applied, applied - state.last, options_.stream, state.last);
    }
  } else if (stream_behind_checks_ >= 6) {
    SetProblem(absl::StrFormat(
        "this replica has applied up to position %u, but the stream %s ends at %u: the stream "
        "lost entries (restored from an older backup?); start this replica with an empty "
        "--data-dir to rebuild it from the stream",
        applied, options_.stream, state.last));
    return;
  }
  if (bootstrapping_.load(std::memory_order_acquire)) return;
  if (bootstrap_.joinable()) bootstrap_.join();  // A bootstrap that ended.
  std::vector<std::string> majority;
  bool unanchored = false;
  {
    MutexLock lock(&mu_);
    if (digest_state_ == DigestJudgement::State::kDiverged && !healing_) {
      majority = digest_majority_;
    }
    unanchored = !digest_.has_value() && !anchor_.has_value() && !healing_;
  }
  if (!majority.empty()) {
    // Heal: stop applying this copy, and copy a replica of the majority.
    StopConsuming();
    StartBootstrap(state, applied + 1, false, true, &majority);
    return;
  }
  if (RecheckConsumer()) return;
  std::vector<std::string> with_digest;
  if (unanchored && DigestlessBootstrapDue(&with_digest)) {
    // Healed as a diverged replica is: out of service, retried until a
    // copy succeeds (its own filters are dropped before each try).
    StopConsuming();
    StartBootstrap(state, applied + 1, false, true, &with_digest);
    return;
  }
  if (impl_->sub != nullptr) return;
  const uint64_t needed = applied + 1;
  const bool gone =
      (state.msgs > 0 && needed < state.first) || (state.msgs == 0 && needed <= state.last);
  // A new, empty replica copies a peer rather than replaying the whole
  // stream (once: if no peer can be copied, it replays).
  const bool fresh =
      needed == 1 && state.last > 0 && !tried_new_replica_bootstrap_ && registry_->List().empty();
  if (gone || fresh) {
    StartBootstrap(state, needed, gone, false, nullptr);
    return;
  }
  Consume(state, needed);
}

bool Cluster::ReadStream(StreamState* state) {
  jsStreamInfo* si = nullptr;
  jsErrCode jerr = static_cast<jsErrCode>(0);
  natsStatus s = js_GetStreamInfo(&si, impl_->js, options_.stream.c_str(), nullptr, &jerr);
  if (s == NATS_NOT_FOUND || jerr == JSStreamNotFoundErr) {
    // This replica creates the log.
    const uint32_t replicas = StreamReplicasToCreate();
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
      return false;
    }
    spdlog::info(
        "cluster: created stream {} (subject {}, file storage, {} replicas, duplicate "
        "window {})",
        options_.stream, subject_, replicas, absl::FormatDuration(options_.dedup_window));
  } else if (s != NATS_OK) {
    // No JetStream leader just now, a timeout: keep what we know.
    spdlog::debug("cluster: stream info: {}", NatsError(s, jerr));
    return false;
  }
  state->first = si->State.FirstSeq;
  state->last = si->State.LastSeq;
  state->msgs = si->State.Msgs;
  state->identity = absl::StrCat(options_.stream, "@", si->Created);
  state->replicas = si->Config != nullptr ? static_cast<uint32_t>(si->Config->Replicas) : 0;
  jsStreamInfo_Destroy(si);
  return true;
}

uint32_t Cluster::StreamReplicasToCreate() {
  if (options_.stream_replicas != 0) return options_.stream_replicas;
  char** servers = nullptr;
  int count = 0;
  if (natsConnection_GetServers(impl_->nc, &servers, &count) == NATS_OK) {
    for (int i = 0; i < count; ++i) free(servers[i]);
    free(servers);
  }
  return count >= 3 ? 3 : 1;
}

bool Cluster::TakeStreamState(const StreamState& state) {
  std::string mismatch;
  bool at_start = false;
  {
    MutexLock lock(&mu_);
    // What kept the log out of reach has passed.
    if (absl::StartsWith(problem_, "cannot create the stream")) problem_.clear();
    stream_first_ = state.first;
    stream_last_ = state.last;
    stream_replicas_ = state.replicas;
    // From now on this replica follows this log (a new data directory's
    // first), and only this one.
    if (expected_identity_.empty()) expected_identity_ = state.identity;
    if (expected_identity_ != state.identity) {
      // identity_ stays what it was (empty at the start): no checkpoint
      // names the other log, and no replica record or digest report is
      // written for it.
      at_start = identity_.empty();
      mismatch = absl::StrFormat(
          "the data directory %s follows the log %s, but stream %s is now the log %s (another "
          "stream of that name, or the stream deleted and created again): the directory's "
          "filters and positions are not this stream's, so this replica serves nothing; start "
          "it with an empty --data-dir: it bootstraps from a peer replica (move the old "
          "directory aside; nothing in it was changed)",
          persistence_->data_dir(), expected_identity_, options_.stream, state.identity);
      foreign_log_ = mismatch;
      SettleServingWaitersLocked(absl::Now());
    } else {
      identity_ = state.identity;
    }
  }
  if (mismatch.empty()) return true;
  SetProblem(mismatch);
  if (at_start && options_.on_foreign_log) {
    options_.on_foreign_log(absl::FailedPreconditionError(mismatch));
  }
  return false;
}

void Cluster::StartBootstrap(const StreamState& state, uint64_t needed, bool gone, bool heal,
                             const std::vector<std::string>* only) {
  const absl::Time now = absl::Now();
  if (now < next_bootstrap_) return;
  next_bootstrap_ = now + absl::Seconds(5);
  tried_new_replica_bootstrap_ = true;
  if (heal) {
    MutexLock lock(&mu_);
    healing_ = true;
  }
  if (gone) {
    SetProblem(absl::StrFormat(
        "the stream %s starts at position %u, but this replica needs it from %u (it was away "
        "longer than the stream keeps entries): bootstrapping from a peer replica",
        options_.stream, state.first, needed));
  }
  std::vector<ReplicaRecord> peers;
  for (ReplicaRecord& r : ReadReplicas()) {
    if (r.identity == state.identity && r.key != replica_key_ && !r.address.empty() &&
        (only == nullptr || std::find(only->begin(), only->end(), r.key) != only->end())) {
      peers.push_back(std::move(r));
    }
  }
  bootstrapping_.store(true, std::memory_order_release);
  bootstrap_ = std::thread(
      [this, identity = state.identity, gone, heal, peers = std::move(peers)]() mutable {
        Bootstrap(identity, std::move(peers), gone, heal);
      });
}

bool Cluster::RecheckConsumer() {
  {
    MutexLock lock(&mu_);
    if (!recheck_consumer_) return false;
  }
  StopConsuming();
  MutexLock lock(&mu_);
  recheck_consumer_ = false;
  if (continuity_failures_ < kMaxContinuityFailures) return false;  // Consumed again at once.
  continuity_failures_ = 0;
  // No NATS server it was given continues its copy: the copy it applied
  // is numbered differently from the others. It heals from a replica whose
  // digest differs from its own (one that applied the others' numbering),
  // if one reports; a replica that applied the same copy would give it
  // the same numbering, so without one it keeps trying: its server may
  // come back (docs/CLUSTER.md, "nats-server 2.9.10").
  std::vector<std::string> peers;
  const DigestReport mine = MyReportLocked(identity_);
  for (const auto& [key, p] : peer_reports_) {
    if (p.report.digest.has_value() && !p.report.diverged &&
        CompareWithHistory(history_, mine, p.report).relation == DigestRelation::kDisagree) {
      peers.push_back(key);
    }
  }
  if (peers.empty()) {
    spdlog::error(
        "cluster: no NATS server's copy of the stream continues this replica's at position {} "
        "after {} consumers, and no replica numbers the stream otherwise: it keeps trying "
        "(docs/CLUSTER.md, \"nats-server 2.9.10\")",
        applied_.load(std::memory_order_acquire), kMaxContinuityFailures);
    return false;
  }
  digest_state_ = DigestJudgement::State::kDiverged;
  digest_at_ = applied_.load(std::memory_order_acquire);
  digest_detail_ = absl::StrFormat(
      "no NATS server's copy of the stream holds at position %u the entry it applied there, "
      "after %u consumers",
      digest_at_, kMaxContinuityFailures);
  digest_majority_ = std::move(peers);
  ++divergences_;
  spdlog::error("cluster: {}", NotServingLocked());
  return true;
}

void Cluster::Consume(const StreamState& state, uint64_t needed) {
  jsSubOptions so;
  jsSubOptions_Init(&so);
  so.Stream = options_.stream.c_str();
  so.Ordered = true;
  so.Config.DeliverPolicy = js_DeliverByStartSequence;
  so.Config.OptStartSeq = needed;
  {
    MutexLock lock(&mu_);
    // The continuity check: from the last position applied, when this
    // replica knows its entry and the stream still holds it.
    continuity_.reset();
    if (needed > 1 && needed - 1 >= state.first) {
      if (std::optional<uint64_t> h = history_.EntryAt(needed - 1); h.has_value()) {
        continuity_ = DigestPoint{needed - 1, *h};
        so.Config.OptStartSeq = needed - 1;
      }
    }
    expect_new_consumer_ = true;
    recheck_consumer_ = false;
  }
  // A consumer lost with its NATS server is noticed after a few missed
  // heartbeats and made again from the next position.
  so.Config.Heartbeat = absl::ToInt64Nanoseconds(absl::Seconds(1));
  natsSubscription* sub = nullptr;
  jsErrCode jerr = static_cast<jsErrCode>(0);
  natsStatus s = js_Subscribe(&sub, impl_->js, subject_.c_str(), OnMessageTrampoline, this, nullptr,
                              &so, &jerr);
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
               needed, state.first, state.last);
}

void Cluster::MaintainReplicas(const std::string& identity, uint64_t first, uint64_t last) {
  const absl::Time now = absl::Now();
  if (impl_->kv == nullptr) {
    if (now < next_register_) return;
    next_register_ = now + absl::Seconds(5);  // Until the bucket is there.
    const std::string bucket = absl::StrCat(options_.stream, "_replicas");
    natsStatus s = OpenOrCreateBucket(impl_->js, &impl_->kv, bucket,
                                      "cuckood: the first stream position each replica needs",
                                      options_.replica_expiry, js_FileStorage, StreamReplicas());
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

void Cluster::Bootstrap(std::string identity, std::vector<ReplicaRecord> peers, bool must,
                        bool heal) {
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
    {
      // The copy's digest, known once the stream is applied up to the
      // position the peer reported it at (resume_from - 1 or later).
      MutexLock lock(&mu_);
      applied_.store(copy->resume_from - 1, std::memory_order_release);
      history_.Clear();
      digest_.reset();
      anchor_.reset();
      if (copy->anchor.position == copy->resume_from - 1) {
        digest_ = copy->anchor.digest;
        history_.Add(copy->anchor.position, *digest_);
      } else {
        anchor_ = copy->anchor;
      }
      digest_state_ = DigestJudgement::State::kAgreed;
      digest_detail_.clear();
      digest_majority_.clear();
      verified_ = 0;
      consumer_name_.clear();
      consumer_from_ = 0;
      consumer_servers_.clear();
      healing_ = false;
    }
    needed_.store(copy->resume_from, std::memory_order_release);
    // On disk, with the checkpoint, before the stream is applied again
    // (the checkpoint of what this replica held may name a later position
    // than the copy's: it is replaced).
    persistence_->ForgetCheckpoint();
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
  if (heal && !done) {
    MutexLock lock(&mu_);
    healing_ = false;  // Tried again by the maintenance thread.
    spdlog::warn("cluster: healing: no replica of the majority could be copied ({}); retrying",
                 peers.empty() ? std::string("none is recorded with an address") : failures);
  } else if (done || !must) {
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

void Cluster::StopConsuming() {
  if (impl_->sub == nullptr) return;
  natsSubscription_Unsubscribe(impl_->sub);
  // No entry is being applied after this (the subscription's callback
  // takes apply_mu_), and none will be.
  MutexLock apply(&apply_mu_);
  natsSubscription_Destroy(impl_->sub);
  impl_->sub = nullptr;
  MutexLock lock(&mu_);
  consuming_ = false;
}

uint32_t Cluster::StreamReplicas() const {
  MutexLock lock(&mu_);
  return stream_replicas_;
}

bool Cluster::OpenDigestBucket() {
  if (impl_->digest_kv != nullptr && impl_->digest_watch != nullptr) return true;
  const absl::Time now = absl::Now();
  if (now < next_digest_open_) return false;
  next_digest_open_ = now + absl::Seconds(2);
  const std::string bucket = absl::StrCat(options_.stream, "_digests");
  natsStatus s = NATS_OK;
  if (impl_->digest_kv == nullptr) {
    // A replica that stopped reporting leaves the bucket after a minute,
    // as it leaves the check (kDigestReportLive). File storage, as the
    // stream's and the replica records': a replicated memory-storage stream
    // loses its copy and its raft log with each restart of one of its NATS
    // servers, and nats-server 2.9.10 recovers such a stream badly (in the
    // chaos test, after kill -9s of two of its servers in turn, no report
    // got through for 55 s while the stream itself was served); every
    // replica then stays unverified after its next consumer, and writes
    // stall.
    s = OpenOrCreateBucket(impl_->js, &impl_->digest_kv, bucket,
                           "cuckood: each replica's digest of the log it applied (docs/CLUSTER.md)",
                           kDigestReportLive, js_FileStorage, StreamReplicas());
    if (s == NATS_OK) WarnOfMemoryBucket(bucket);
  }
  if (s == NATS_OK && impl_->digest_watch == nullptr) {
    s = kvStore_WatchAll(&impl_->digest_watch, impl_->digest_kv, nullptr);
    if (s == NATS_OK && digest_watch_started_ == absl::InfinitePast()) digest_watch_started_ = now;
    if (s == NATS_OK) digest_watch_opened_ = now;
  }
  if (s != NATS_OK) {
    if (impl_->digest_watch != nullptr) kvWatcher_Destroy(impl_->digest_watch);
    if (impl_->digest_kv != nullptr) kvStore_Destroy(impl_->digest_kv);
    impl_->digest_watch = nullptr;
    impl_->digest_kv = nullptr;
    const std::string why = NatsError(s);
    if (why != digest_kv_problem_) {
      spdlog::warn(
          "cluster: cannot use the digest reports (KV bucket {}): {}; this replica cannot check "
          "its copy of the log against the others' and serves nothing after its consumer starts "
          "until it can",
          bucket, why);
    }
    digest_kv_problem_ = why;
    return false;
  }
  digest_kv_problem_.clear();
  return true;
}

void Cluster::WarnOfMemoryBucket(const std::string& bucket) {
  if (digest_bucket_checked_) return;
  jsStreamInfo* si = nullptr;
  jsErrCode jerr = static_cast<jsErrCode>(0);
  if (js_GetStreamInfo(&si, impl_->js, absl::StrCat("KV_", bucket).c_str(), nullptr, &jerr) !=
      NATS_OK) {
    return;  // Unknown now: checked when the bucket is opened again.
  }
  const bool memory =
      si->Config != nullptr && si->Config->Storage == js_MemoryStorage && si->Config->Replicas > 1;
  jsStreamInfo_Destroy(si);
  digest_bucket_checked_ = true;
  if (!memory) return;
  spdlog::warn(
      "cluster: the digest reports' KV bucket {} has memory storage (an earlier cuckood made it): "
      "restarts of its NATS servers can leave it taking no reports (nats-server 2.9.10), and then "
      "every replica stops serving after its next consumer until reports get through again; "
      "delete the bucket (nats kv del {}) and the replicas make it again with file storage "
      "(docs/CLUSTER.md, \"Checking the log end to end\")",
      bucket, bucket);
}

void Cluster::ReadDigestReports() {
  const absl::Time now = absl::Now();
  for (int i = 0; i < 1024; ++i) {
    kvEntry* e = nullptr;
    const natsStatus s = kvWatcher_Next(&e, impl_->digest_watch, 1);
    if (s == NATS_TIMEOUT) break;
    if (s != NATS_OK) {
      spdlog::warn("cluster: the digest reports' watch failed ({}); watching again", NatsError(s));
      kvWatcher_Destroy(impl_->digest_watch);
      impl_->digest_watch = nullptr;
      return;
    }
    if (e == nullptr) {  // The initial state is read.
      MutexLock lock(&mu_);
      digest_reports_read_ = true;
      continue;
    }
    const std::string key = kvEntry_Key(e);
    if (kvEntry_Operation(e) != kvOp_Put) {
      peer_reports_.erase(key);
    } else if (key != replica_key_) {
      // Anyone with access to the bucket can write to it: what this
      // replica holds of it is bounded (kClusterDigestBytes).
      absl::StatusOr<DigestReport> r =
          static_cast<size_t>(kvEntry_ValueLen(e)) > kMaxDigestReportBytes
              ? absl::InvalidArgumentError(
                    absl::StrFormat("digest record \"%s\" is not one (%d bytes, more than %u)", key,
                                    kvEntry_ValueLen(e), kMaxDigestReportBytes))
          : !peer_reports_.contains(key) && peer_reports_.size() >= kMaxDigestPeers
              ? absl::ResourceExhaustedError(absl::StrFormat(
                    "digest record \"%s\" ignored: %u other replicas report already", key,
                    kMaxDigestPeers))
              : ParseDigestReport(key, kvEntry_ValueString(e));
      if (r.ok()) {
        // Renewed only by a new revision: a watch made again delivers the
        // last report of each replica once more, and a report that stopped
        // being renewed (its replica gone, or the bucket not taking puts)
        // must leave the check after kDigestReportLive, not live on.
        const uint64_t revision = kvEntry_Revision(e);
        auto known = peer_reports_.find(key);
        const absl::Time changed =
            known != peer_reports_.end() && known->second.revision == revision
                ? known->second.changed
                : now;
        peer_reports_[key] = PeerReport{*std::move(r), changed, revision};
      } else {
        spdlog::warn("cluster: {}", std::string(r.status().message()));
      }
    }
    kvEntry_Destroy(e);
  }
}

void Cluster::MaintainDigests(const std::string& identity) {
  if (!OpenDigestBucket()) return;
  ReadDigestReports();
  if (impl_->digest_watch == nullptr) return;
  const absl::Time now = absl::Now();
  absl::Time last_heard = absl::InfinitePast();
  for (const auto& [key, p] : peer_reports_) last_heard = std::max(last_heard, p.changed);
  if (!peer_reports_.empty() && now - last_heard > kDigestWatchSilence &&
      now - digest_watch_opened_ > kDigestWatchSilence) {
    spdlog::info("cluster: no digest report from another replica for {}; watching again",
                 absl::FormatDuration(now - last_heard));
    kvWatcher_Destroy(impl_->digest_watch);
    impl_->digest_watch = nullptr;
    return;
  }
  for (auto it = peer_reports_.begin(); it != peer_reports_.end();) {
    if (now - it->second.changed > kDigestReportLive) {
      it = peer_reports_.erase(it);
    } else {
      ++it;
    }
  }
  CheckConsumerPlacement();
  Judge(identity);
  // This replica's report: at once when it moved (these rounds are 100 ms
  // apart), else every second (the others count a replica as reporting
  // for kDigestReportLive after its last report).
  DigestReport mine;
  {
    MutexLock lock(&mu_);
    mine = MyReportLocked(identity);
  }
  const std::string value = FormatDigestReport(mine);
  if (now < next_digest_publish_ && value == published_report_) return;
  uint64_t revision = 0;
  if (natsStatus s =
          kvStore_PutString(&revision, impl_->digest_kv, replica_key_.c_str(), value.c_str());
      s != NATS_OK) {
    spdlog::debug("cluster: cannot publish this replica's digest: {}", NatsError(s));
    return;
  }
  published_report_ = value;
  next_digest_publish_ = now + absl::Seconds(1);
}

DigestReport Cluster::MyReportLocked(const std::string& identity) const {
  DigestReport mine;
  mine.key = replica_key_;
  mine.identity = identity;
  mine.applied = applied_.load(std::memory_order_acquire);
  // The digest at `applied` (both change together, under mu_).
  mine.digest = digest_;
  mine.marks = history_.Marks();
  mine.consumer_from = consumer_from_;
  mine.diverged = digest_state_ == DigestJudgement::State::kDiverged;
  return mine;
}

void Cluster::Judge(const std::string& identity) {
  std::vector<DigestReport> peers;
  for (const auto& [key, p] : peer_reports_) {
    if (p.report.identity == identity) peers.push_back(p.report);
  }
  MutexLock lock(&mu_);
  // Not before every report was read once (alone by ignorance would
  // verify everything), and not while healing.
  if (healing_ || !digest_reports_read_) return;
  const DigestJudgement j = JudgeDigests(history_, MyReportLocked(identity), peers);
  voters_ = j.voters;
  judged_ = true;
  const DigestJudgement::State was = digest_state_;
  // A diverged copy stays refused until it is healed (Bootstrap resets
  // it), whoever leaves; disagreeing replicas stay refused until a
  // majority decides, not when the other one goes away.
  if (was == DigestJudgement::State::kDiverged) return;
  if (was == DigestJudgement::State::kNoMajority && j.state == DigestJudgement::State::kAgreed &&
      j.voters < 2) {
    return;
  }
  if (j.state == DigestJudgement::State::kAgreed) {
    verified_ = std::max(verified_, j.verified);
    if (was != j.state) {
      spdlog::info(
          "cluster: this replica's copy of the log agrees with a majority again (up to "
          "position {})",
          verified_);
    }
    digest_state_ = j.state;
    digest_detail_.clear();
    digest_majority_.clear();
    return;
  }
  if (was == j.state) return;  // Said already.
  digest_state_ = j.state;
  digest_at_ = j.at;
  digest_detail_ = j.detail;
  digest_majority_ = j.majority;
  ++divergences_;
  // The NATS servers whose copies this replica applied since a majority
  // last agreed with it: one of them differs (when this replica is the
  // one that diverged). A new consumer is not kept on them for a while.
  std::vector<std::string> servers;
  for (size_t i = 0; i < consumer_servers_.size(); ++i) {
    const bool active_after =
        i + 1 == consumer_servers_.size() || consumer_servers_[i + 1].first > verified_ + 1;
    if (!active_after || consumer_servers_[i].second.empty()) continue;
    if (std::find(servers.begin(), servers.end(), consumer_servers_[i].second) == servers.end()) {
      servers.push_back(consumer_servers_[i].second);
    }
  }
  if (j.state == DigestJudgement::State::kDiverged) {
    for (const std::string& server : servers) {
      suspect_servers_[server] = absl::Now() + absl::Minutes(10);
    }
  }
  spdlog::error("cluster: {}{}", NotServingLocked(),
                servers.empty()
                    ? std::string()
                    : absl::StrFormat(" (applied from NATS server%s %s since position %u)",
                                      servers.size() == 1 ? "" : "s", absl::StrJoin(servers, ", "),
                                      verified_));
}

void Cluster::CheckConsumerPlacement() {
  if (impl_->sub == nullptr) return;
  std::string name;
  uint64_t from = 0;
  {
    MutexLock lock(&mu_);
    name = consumer_name_;
    from = consumer_from_;
  }
  if (name.empty() || name == checked_consumer_) return;
  jsConsumerInfo* ci = nullptr;
  jsErrCode jerr = static_cast<jsErrCode>(0);
  if (natsSubscription_GetConsumerInfo(&ci, impl_->sub, nullptr, &jerr) != NATS_OK) return;
  std::string server;
  if (ci->Name != nullptr && name != ci->Name) {
    jsConsumerInfo_Destroy(ci);
    return;  // Made again since: checked with the next entry.
  }
  if (ci->Cluster != nullptr && ci->Cluster->Leader != nullptr) server = ci->Cluster->Leader;
  jsConsumerInfo_Destroy(ci);
  checked_consumer_ = name;
  {
    MutexLock lock(&mu_);
    consumer_servers_.emplace_back(from, server);
    if (consumer_servers_.size() > 8) consumer_servers_.erase(consumer_servers_.begin());
  }
  const absl::Time now = absl::Now();
  for (auto it = suspect_servers_.begin(); it != suspect_servers_.end();) {
    it = it->second <= now ? suspect_servers_.erase(it) : std::next(it);
  }
  if (!suspect_servers_.contains(server) || placement_retries_ >= 5) {
    placement_retries_ = 0;
    return;
  }
  ++placement_retries_;
  spdlog::warn(
      "cluster: the consumer is on NATS server {}, whose copy of the stream differed from the "
      "majority's lately; making another (try {} of 5)",
      server, placement_retries_);
  StopConsuming();
}

bool Cluster::DigestlessBootstrapDue(std::vector<std::string>* with_digest) {
  if (impl_->digest_watch == nullptr) return false;
  std::string least = replica_key_;
  for (const auto& [key, p] : peer_reports_) {
    if (p.report.digest.has_value()) {
      with_digest->push_back(key);
    } else {
      least = std::min(least, key);
    }
  }
  if (!with_digest->empty()) return true;
  // Only after a few rounds of reports: replicas upgraded together see
  // each other first, and only the lowest id starts the digests.
  if (absl::Now() - digest_watch_started_ < absl::Seconds(3)) return false;
  MutexLock lock(&mu_);
  if (least != replica_key_ || !digest_reports_read_) return false;
  // No replica has a digest: this one starts them from its position.
  const uint64_t applied = applied_.load(std::memory_order_acquire);
  digest_ = NextLogDigest(0, applied, 0);
  history_.Add(applied, *digest_);
  spdlog::warn(
      "cluster: no replica reports a digest of the log: this one starts the digests at position "
      "{}; replicas without one copy a replica that has one",
      applied);
  return false;
}

}  // namespace cuckoo::server
