// Cluster: cuckood as one replica of a cluster whose log is a NATS
// JetStream stream (docs/CLUSTER.md). With --nats, every state change
// (CreateFilter, DropFilter, Insert, Delete) is published to the stream as a
// LogEntry (log_entry.h); every replica consumes the stream in order and
// applies each entry deterministically, so every replica holds every filter,
// table bytes included, and serves reads from its own copy.
//
//   auto cluster = Cluster::Create(options, &registry, &persistence);
//   persistence.SetExternalLog(cluster->get());
//   LoadSummary loaded = *persistence.LoadAll();
//   (*cluster)->Start(loaded.resume_from, loaded.log_identity);
//   (*cluster)->Publish({EncodeInsertEntry(id, name, false, hashes)}, "req-1",
//                       [](Cluster::WriteResult r) { /* answer the call */ });
//
// A write is answered once JetStream acknowledged its entries (stored on the
// stream's replicas) and this replica applied them: its per-key results are
// those of the deterministic apply, the same on every replica, and its
// position is the stream sequence of its (last) entry.
//
// Request ids: an entry's NATS message id is "r/<request_id>/<part>" when
// the client gave one, so a retry within the stream's duplicate window is
// not stored again (JetStream acknowledges it as a duplicate of the first);
// every replica keeps the results of such entries for the same window, and
// answers the retry with them. Without a request id the replica makes up a
// unique message id.
//
// Threads: NATS's own (the connection's, which runs the publish
// acknowledgements, and the subscription's, which applies the entries in
// stream order), a maintenance thread (connects the stream and the
// consumer, refreshes the stream's state, expires waits) and a completion
// thread that runs the callbacks of Publish and WhenApplied, so that the
// apply never waits for them.
//
// Thread safety: all methods may be called from any thread.
#ifndef CUCKOO_SERVER_CLUSTER_CLUSTER_H_
#define CUCKOO_SERVER_CLUSTER_CLUSTER_H_

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "base/mutex.h"
#include "core/registry.h"
#include "server/cluster/cluster_options.h"
#include "server/cluster/log_digest.h"
#include "server/cluster/log_entry.h"
#include "server/cluster/peer_copy.h"
#include "server/storage/persistence.h"

namespace cuckoo::server {

// What GetServerInfo and /metrics report.
struct ClusterStatus {
  std::string replica_id;
  std::string nats_status;  // connected, reconnecting, disconnected, closed, connecting
  std::string nats_server;  // The URL connected to.
  std::string stream;
  std::string identity;  // "<stream>@<creation time>"; empty until known.
  uint32_t stream_replicas = 0;
  uint64_t stream_first = 0;
  uint64_t stream_last = 0;
  uint64_t applied = 0;
  uint64_t lag = 0;
  bool consuming = false;
  // Why this replica cannot apply the stream, if it cannot (empty if it can):
  // before it first consumes the stream, also why it cannot connect to NATS
  // (nats_error).
  std::string problem;
  // Why the last attempt to connect to a NATS server failed (the TLS
  // handshake, the credentials, ...), while not connected; empty while
  // connected. Never holds a secret.
  std::string nats_error;
  uint64_t entries_applied = 0;
  uint64_t entries_published = 0;
  uint64_t duplicates = 0;
  uint64_t publish_failures = 0;
  uint64_t purges = 0;      // Retention purges this replica made.
  uint64_t bootstraps = 0;  // Copies from a peer this replica made.
  // The end-to-end check of the log (log_digest.h): the digest at
  // `digest_position` (unknown while this replica replays entries from
  // before the position its checkpoint or copy named), "agreed",
  // "unverified" (its consumer started at consumer_from, and no majority
  // has agreed with it there yet), "diverged", "no majority" or "healing";
  // the highest position a majority agreed with it at; the replicas
  // reporting digests, this one included; divergences caught.
  bool digest_known = false;
  uint64_t digest = 0;
  uint64_t digest_position = 0;
  std::string digest_state;
  uint64_t verified_position = 0;
  uint64_t consumer_from = 0;
  uint64_t digest_voters = 1;
  uint64_t divergences = 0;
};

class Cluster final : public ExternalLog {
 public:
  // The outcome of a write (all of its entries).
  struct WriteResult {
    absl::Status status;
    uint64_t position = 0;         // Of its last entry.
    std::vector<uint8_t> results;  // Insert / delete: per key, InsertResult / DeleteResult.
    bool created = false;          // Create: a new filter.
    uint64_t freed_bytes = 0;      // Drop; rename: the replaced filter's.
    bool replaced = false;         // Rename: a filter of the new name was dropped.
  };
  using WriteDone = std::function<void(WriteResult)>;

  // INVALID_ARGUMENT for bad options, or a file of options.nats_security
  // that is missing, unreadable, empty or not what it should be (naming the
  // file and its flag). Reads those files (so that a bad one stops the
  // start) but connects nothing yet.
  static absl::StatusOr<std::unique_ptr<Cluster>> Create(ClusterOptions options,
                                                         FilterRegistry* registry,
                                                         Persistence* persistence);
  ~Cluster() override;  // Stop()s.
  Cluster(const Cluster&) = delete;
  Cluster& operator=(const Cluster&) = delete;

  // Connects (in the background, retrying for as long as it takes) and
  // applies the stream from `from` on, which must belong to the log named
  // `identity` (the checkpoint's; empty: any). `anchor`: the digest of the
  // log after position anchor->position (>= from - 1; the checkpoint's),
  // or none known (a checkpoint of an older cuckood).
  void Start(uint64_t from, std::string identity, std::optional<DigestPoint> anchor);
  // Stops applying, answers every waiting call with UNAVAILABLE and closes
  // the connection. Idempotent.
  void Stop();

  // Publishes `entries` (one request, in order), with message ids made from
  // `request_id` (if not empty), and calls `done` on the completion thread
  // once every entry is acknowledged and applied here, with the results of
  // all of them concatenated, or with UNAVAILABLE (not connected, no
  // acknowledgement, a timeout: some entries may have been applied, and a
  // retry with the same request id applies the rest once) or the apply's
  // status (NOT_FOUND, ALREADY_EXISTS, RESOURCE_EXHAUSTED, ...).
  void Publish(std::vector<std::string> entries, absl::string_view request_id, WriteDone done);
  // Whether this replica applied a write published under `request_id` and
  // still remembers its results (a retry of it is answered, not applied).
  bool Remembers(absl::string_view request_id) const;

  // Calls fn(OK) on the completion thread once this replica has applied the
  // log up to `position` (at once, on this thread, if it has), or
  // fn(UNAVAILABLE naming the lag) at `deadline`.
  void WhenApplied(uint64_t position, absl::Time deadline, std::function<void(absl::Status)> fn);

  // Hashes one entry may carry.
  size_t max_hashes_per_entry() const;
  ClusterStatus Status() const;
  // Connected, consuming, and at most ready_max_lag behind, and serving;
  // else false with the reason.
  bool Ready(std::string* why) const;
  // Whether this replica may answer reads and take writes: UNAVAILABLE,
  // naming the position and what to do, while its copy of the log
  // disagrees with another replica's (diverged, or no majority), while it
  // heals, and from a consumer's start until a majority agreed with it at
  // or after that position (docs/CLUSTER.md).
  // `transient` (if given) is set when the reason is only moments from
  // passing (a consumer just started, a check not yet made), as opposed to
  // a disagreement or a heal: then WhenServing waits for it.
  absl::Status CheckServing(bool* transient = nullptr) const;
  // Calls fn(OK) on the completion thread once this replica serves (at
  // once, on this thread, if it does), or fn(UNAVAILABLE naming why) when
  // its reason stops being transient or at `deadline`.
  void WhenServing(absl::Time deadline, std::function<void(absl::Status)> fn);
  const ClusterOptions& options() const { return options_; }

  // For the NATS callbacks: an entry delivered by the consumer (a natsMsg*,
  // which the caller destroys), and a publish acknowledgement (`sequence`
  // and `duplicate` if OK).
  void HandleMessage(void* msg);
  // Makes the consumer again when ContinuesThisReplicasCopy asked; true
  // when it starts healing instead (the maintenance thread).
  bool RecheckConsumer() ABSL_LOCKS_EXCLUDED(mu_);
  // False: the delivered entry is not to be applied (the continuity check
  // or a consumer to make again, above).
  bool ContinuesThisReplicasCopy(const std::string& consumer, uint64_t position, void* msg)
      ABSL_LOCKS_EXCLUDED(mu_);
  void HandleAck(const char* msg_id, uint64_t sequence, bool duplicate, const absl::Status& error);

  // ExternalLog.
  uint64_t AppliedPosition() const override { return applied_.load(std::memory_order_acquire); }
  std::string Identity() const override;
  std::string Name() const override;
  bool AppliedDigest(uint64_t* position, uint64_t* digest) const override;
  void Checkpointed(uint64_t needed) override;

 private:
  struct Impl;
  struct Call;
  // One published entry of a call, keyed by its message id.
  struct PendingEntry {
    std::shared_ptr<Call> call;
    size_t part = 0;
    uint64_t position = 0;  // Set by the acknowledgement.
    bool acked = false;
    bool applied = false;  // Results in `outcome`.
    WriteResult outcome;
  };
  struct Remembered {
    uint64_t position = 0;
    WriteResult outcome;
    absl::Time expires;
    uint64_t bytes = 0;
  };

  Cluster(ClusterOptions options, FilterRegistry* registry, Persistence* persistence);

  // Sets up the NATS connection's options (impl_->opts): servers,
  // reconnects, TLS and credentials (cluster_connect.cc). Create's errors.
  absl::Status ConfigureConnection();
  // The connect thread: tries the NATS servers every 250 ms until one takes
  // the connection (nats.c 3.4's own retry of a first connect gives up for
  // good when a server was reached but the TLS handshake or the
  // credentials failed), recording why each try failed (nats_error_); then
  // sets impl_->nc and impl_->js, and nats.c reconnects by itself.
  void Connect();
  // Records (and logs once) a reason the connection to NATS is down.
  void SetNatsError(std::string error);
  // Maintenance thread: records why a connection that was up is down
  // (nats_error_), logging each new reason once; clears it once connected.
  void WatchConnection();
  // A failed connect's natsStatus and nats.c's text, told as what to fix
  // (the flags to check).
  std::string DescribeConnectError(int status, const std::string& text) const;

  void Maintain();
  // One round of Maintain's NATS work: the stream, the consumer.
  void MaintainStream();
  // The stream's state as MaintainStream reads it.
  struct StreamState {
    uint64_t first = 0;
    uint64_t last = 0;
    uint64_t msgs = 0;
    uint32_t replicas = 0;
    std::string identity;  // "<stream>@<creation time>"
  };
  // Reads the stream's state, creating the stream when there is none. False
  // when it cannot be known now.
  bool ReadStream(StreamState* state);
  // The replicas of a stream this replica creates: --nats-replicas,
  // or 3 when the connection knows 3 NATS servers or more, else 1.
  uint32_t StreamReplicasToCreate();
  // Takes `state` as what is known of the stream. False (the problem set)
  // when the stream is not the log this data directory's snapshots follow.
  bool TakeStreamState(const StreamState& state);
  // Copies a peer replica (at most every 5 s): this replica needs entries
  // from `needed` that the stream no longer holds (`gone`), or is new.
  // `heal`: this replica's copy of the log diverged; `only`: the peers
  // that may be copied (the majority, or those with a digest; null: any).
  void StartBootstrap(const StreamState& state, uint64_t needed, bool gone, bool heal,
                      const std::vector<std::string>* only);
  // A replica whose checkpoint records no digest: true when a peer has one
  // (copy it); else the first such replica (by key) starts the digests
  // from its own position, and the others copy it.
  bool DigestlessBootstrapDue(std::vector<std::string>* with_digest);
  // Consumes the stream from position `needed`.
  void Consume(const StreamState& state, uint64_t needed);
  void Complete();
  // Applies one entry at `position`; fills `out`.
  void ApplyEntry(const LogEntry& e, uint64_t position, WriteResult* out);
  // Moves finished entries' calls to the completion queue.
  void SettleLocked(const std::string& msg_id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void FailCallLocked(const std::shared_ptr<Call>& call, const absl::Status& s)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void RememberLocked(const std::string& msg_id, uint64_t position, const WriteResult& r)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void SetProblem(std::string problem);
  // Maintain's replica records: opens (or creates) the KV bucket, records
  // this replica's needed position, and purges the stream up to what every
  // replica still needs. Maintenance thread only.
  void MaintainReplicas(const std::string& identity, uint64_t first, uint64_t last);
  struct ReplicaRecord {
    std::string key;
    std::string identity;
    uint64_t needed = 0;
    std::string address;
  };
  std::vector<ReplicaRecord> ReadReplicas();
  // The end-to-end check (maintenance thread): publishes this replica's
  // digest report, reads the others', judges, and on a divergence stops
  // serving and heals from the majority.
  void MaintainDigests(const std::string& identity);
  bool OpenDigestBucket();
  // Warns (once) when the digest reports' bucket, made by an earlier
  // cuckood, is a replicated memory-storage stream.
  void WarnOfMemoryBucket(const std::string& bucket);
  // The stream's replication factor as last read (0 while unknown).
  uint32_t StreamReplicas() const;
  void ReadDigestReports();
  void Judge(const std::string& identity);
  // This replica's digest report (what it publishes and is judged by).
  DigestReport MyReportLocked(const std::string& identity) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A new consumer: which NATS server holds it; dropped (and made again)
  // when that server's copy of the stream differed lately.
  void CheckConsumerPlacement();
  // Serving's state in words, or empty when serving; `transient` as for
  // CheckServing.
  std::string NotServingLocked(bool* transient = nullptr) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Answers the calls waiting in WhenServing whose wait is over: all of
  // them when serving or not transient, else those past their deadline
  // (`now`).
  void SettleServingWaitersLocked(absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Copies every filter from one of `peers` (peer_copy.h) in place of this
  // replica's, then resumes the stream after the copy. On the bootstrap
  // thread (which touches no NATS object); `must` when the stream no longer
  // holds what this replica needs (else a new empty replica, which may
  // replay the stream instead).
  void Bootstrap(std::string identity, std::vector<ReplicaRecord> peers, bool must, bool heal);
  // Drops the consumer (maintenance thread), so that the stream is not
  // applied while a bootstrap replaces the state.
  void StopConsuming();

  const ClusterOptions options_;
  FilterRegistry* const registry_;
  Persistence* const persistence_;
  std::unique_ptr<Impl> impl_;  // The NATS objects.
  const std::string subject_;
  const std::string instance_;  // Unique per process: generated message ids.

  std::atomic<uint64_t> applied_{0};
  // The first position this replica needs: where it started, then each
  // checkpoint's (what it records for the stream's retention).
  std::atomic<uint64_t> needed_{1};
  std::atomic<bool> bootstrapping_{false};
  std::atomic<uint64_t> next_generated_{1};
  std::atomic<bool> stopping_{false};

  mutable Mutex mu_;
  std::condition_variable work_cv_;  // To the completion thread.
  std::condition_variable stop_cv_;  // To the maintenance thread.
  absl::flat_hash_map<std::string, std::vector<PendingEntry>> pending_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::string, Remembered> remembered_ ABSL_GUARDED_BY(mu_);
  std::deque<std::string> remembered_order_ ABSL_GUARDED_BY(mu_);
  uint64_t remembered_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  std::multimap<uint64_t, std::pair<absl::Time, std::function<void(absl::Status)>>> waiters_
      ABSL_GUARDED_BY(mu_);
  std::deque<std::function<void()>> completions_ ABSL_GUARDED_BY(mu_);
  std::vector<std::pair<absl::Time, std::function<void(absl::Status)>>> serving_waiters_
      ABSL_GUARDED_BY(mu_);
  std::string identity_ ABSL_GUARDED_BY(mu_);
  std::string expected_identity_ ABSL_GUARDED_BY(mu_);
  // Why this replica serves nothing: the stream is another log than the one
  // its data directory follows (TakeStreamState). Never cleared.
  std::string foreign_log_ ABSL_GUARDED_BY(mu_);
  std::string problem_ ABSL_GUARDED_BY(mu_);
  std::string nats_error_ ABSL_GUARDED_BY(mu_);
  uint64_t stream_first_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t stream_last_ ABSL_GUARDED_BY(mu_) = 0;
  uint32_t stream_replicas_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t lag_hint_ ABSL_GUARDED_BY(mu_) = 0;  // NumPending of the last entry delivered.
  bool consuming_ ABSL_GUARDED_BY(mu_) = false;
  bool started_ ABSL_GUARDED_BY(mu_) = false;
  bool completion_stop_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t entries_applied_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t entries_published_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t duplicates_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t publish_failures_ ABSL_GUARDED_BY(mu_) = 0;

  // The apply (the subscription's thread) holds this while it applies an
  // entry; Stop takes it to know no apply runs any more.
  Mutex apply_mu_;

  // Consecutive stream checks that found the stream ending before what this
  // replica has applied (maintenance thread only).
  int stream_behind_checks_ = 0;
  // How far this replica's copy of the stream numbers entries past its
  // leader's (MaintainStream, kStreamShiftTolerance): a read waiting for a
  // position the leader acknowledged waits this much further.
  std::atomic<uint64_t> position_shift_{0};
  // Maintenance thread only: the replica records.
  std::string replica_key_;
  std::string kv_problem_;
  uint64_t registered_needed_ = 0;
  absl::Time next_register_ = absl::InfinitePast();
  absl::Time next_retention_ = absl::InfinitePast();
  absl::Time next_bootstrap_ = absl::InfinitePast();
  bool tried_new_replica_bootstrap_ = false;
  // The stream's last position as seen at times, to purge nothing younger
  // than the duplicate window.
  std::deque<std::pair<absl::Time, uint64_t>> last_seen_;
  uint64_t purges_ ABSL_GUARDED_BY(mu_) = 0;
  // The end-to-end check (log_digest.h). The digest after applied_ (none
  // until the anchor's position is applied), the anchor, this replica's
  // recent digests, its consumer and where it started, the judgement.
  std::optional<uint64_t> digest_ ABSL_GUARDED_BY(mu_);
  std::optional<DigestPoint> anchor_ ABSL_GUARDED_BY(mu_);
  DigestHistory history_ ABSL_GUARDED_BY(mu_);
  std::string consumer_name_ ABSL_GUARDED_BY(mu_);
  // The continuity check (ContinuesThisReplicasCopy): a consumer this
  // replica makes starts one position early, at the last one it applied,
  // and must deliver there the entry it applied (`digest` holds its hash);
  // one that does not reads a copy numbered differently, and is made again
  // (kMaxContinuityFailures times, then the replica heals from a peer).
  std::optional<DigestPoint> continuity_ ABSL_GUARDED_BY(mu_);
  std::string delivering_consumer_ ABSL_GUARDED_BY(mu_);
  bool expect_new_consumer_ ABSL_GUARDED_BY(mu_) = false;
  bool recheck_consumer_ ABSL_GUARDED_BY(mu_) = false;
  int continuity_failures_ ABSL_GUARDED_BY(mu_) = 0;
  static constexpr int kMaxContinuityFailures = 6;
  uint64_t consumer_from_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t verified_ ABSL_GUARDED_BY(mu_) = 0;
  DigestJudgement::State digest_state_ ABSL_GUARDED_BY(mu_) = DigestJudgement::State::kAgreed;
  std::string digest_detail_ ABSL_GUARDED_BY(mu_);
  uint64_t digest_at_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<std::string> digest_majority_ ABSL_GUARDED_BY(mu_);
  size_t voters_ ABSL_GUARDED_BY(mu_) = 1;
  bool healing_ ABSL_GUARDED_BY(mu_) = false;
  // The others' reports were read once (their initial state), and this
  // replica was judged against them once.
  bool digest_reports_read_ ABSL_GUARDED_BY(mu_) = false;
  bool judged_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t divergences_ ABSL_GUARDED_BY(mu_) = 0;
  // Maintenance thread only: the others' reports (with when each last
  // changed, here), when this replica's was last published, and with what.
  struct PeerReport {
    DigestReport report;
    absl::Time changed;
    uint64_t revision = 0;  // The bucket's, of the last report renewed.
  };
  std::map<std::string, PeerReport> peer_reports_;
  absl::Time next_digest_publish_ = absl::InfinitePast();
  absl::Time next_digest_open_ = absl::InfinitePast();
  absl::Time digest_watch_started_ = absl::InfinitePast();  // First opened.
  absl::Time digest_watch_opened_ = absl::InfinitePast();   // Last opened.
  std::string published_report_;
  std::string digest_kv_problem_;
  bool digest_bucket_checked_ = false;  // Its storage (WarnOfMemoryBucket).
  // The NATS servers the consumers were placed on, from where each started
  // (the last few), to name the server whose copy differed; servers whose
  // copy differed lately (until when), where a new consumer is not kept.
  std::vector<std::pair<uint64_t, std::string>> consumer_servers_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, absl::Time> suspect_servers_;  // Maintenance thread.
  std::string checked_consumer_;                       // Maintenance thread.
  int placement_retries_ = 0;                          // Maintenance thread.
  uint64_t bootstraps_ ABSL_GUARDED_BY(mu_) = 0;
  std::thread bootstrap_;

  std::thread connect_;
  std::thread maintenance_;
  std::thread completion_;
};

}  // namespace cuckoo::server

#endif  // CUCKOO_SERVER_CLUSTER_CLUSTER_H_
