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
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "server/cluster/cluster_internal.h"
#include "server/cluster/peer_copy.h"
#include "spdlog/spdlog.h"

namespace cuckoo::server {
namespace {

// Entries delivered and waiting for the apply, at most.
constexpr int kMaxPendingDeliveryBytes = 64 << 20;

}  // namespace

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
  if (stream_behind_checks_ >= 6) {
    SetProblem(absl::StrFormat(
        "this replica has applied up to position %u, but the stream %s ends at %u: the stream "
        "lost entries (restored from an older backup?); start this replica with an empty "
        "--data-dir to rebuild it from the stream",
        applied, options_.stream, state.last));
    return;
  }
  if (impl_->sub != nullptr || bootstrapping_.load(std::memory_order_acquire)) return;
  if (bootstrap_.joinable()) bootstrap_.join();  // A bootstrap that ended.
  const uint64_t needed = applied + 1;
  const bool gone =
      (state.msgs > 0 && needed < state.first) || (state.msgs == 0 && needed <= state.last);
  // A new, empty replica copies a peer rather than replaying the whole
  // stream (once: if no peer can be copied, it replays).
  const bool fresh =
      needed == 1 && state.last > 0 && !tried_new_replica_bootstrap_ && registry_->List().empty();
  if (gone || fresh) {
    StartBootstrap(state, needed, gone);
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
  {
    MutexLock lock(&mu_);
    // What kept the log out of reach has passed.
    if (absl::StartsWith(problem_, "cannot create the stream")) problem_.clear();
    stream_first_ = state.first;
    stream_last_ = state.last;
    stream_replicas_ = state.replicas;
    identity_ = state.identity;
    if (!expected_identity_.empty() && expected_identity_ != state.identity) {
      mismatch = absl::StrFormat(
          "this data directory's snapshots belong to the log %s, but the stream is now %s (it "
          "was deleted and created again): its positions mean nothing here; start this replica "
          "with an empty --data-dir to rebuild it from the stream",
          expected_identity_, state.identity);
    }
  }
  if (mismatch.empty()) return true;
  SetProblem(mismatch);
  return false;
}

void Cluster::StartBootstrap(const StreamState& state, uint64_t needed, bool gone) {
  const absl::Time now = absl::Now();
  if (now < next_bootstrap_) return;
  next_bootstrap_ = now + absl::Seconds(5);
  tried_new_replica_bootstrap_ = true;
  if (gone) {
    SetProblem(absl::StrFormat(
        "the stream %s starts at position %u, but this replica needs it from %u (it was away "
        "longer than the stream keeps entries): bootstrapping from a peer replica",
        options_.stream, state.first, needed));
  }
  std::vector<ReplicaRecord> peers;
  for (ReplicaRecord& r : ReadReplicas()) {
    if (r.identity == state.identity && r.key != replica_key_ && !r.address.empty()) {
      peers.push_back(std::move(r));
    }
  }
  bootstrapping_.store(true, std::memory_order_release);
  bootstrap_ =
      std::thread([this, identity = state.identity, gone, peers = std::move(peers)]() mutable {
        Bootstrap(identity, std::move(peers), gone);
      });
}

void Cluster::Consume(const StreamState& state, uint64_t needed) {
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

}  // namespace cuckoo::server
