// FilterServiceImpl: cuckoo.v1.FilterService (proto/cuckoo/v1/filter_service.proto)
// over a FilterRegistry.
//
// The data path (Insert, Lookup, Delete, Count) is served on gRPC's
// asynchronous API: each of N completion queues has one thread of its own
// that polls, reads a call, runs it inline (a batch is short, CPU-bound
// work) and sends the answer, with no hand-off to another thread on the way
// (docs/SERVER_DESIGN.md, "Threads of the request path", has the
// measurements that chose this). The other methods are asynchronous too,
// answered on the same threads or, for work that waits (snapshots, the
// log's fdatasync, transfers' disk work), from the threads that wait.
//
// A batch runs on the thread that would notice its cancellation, so a
// cancelled Insert or Delete batch runs to its end, or to its deadline, or
// to AbortRunning at shutdown, whichever comes first.
// Request-level problems become gRPC statuses whose message names the
// problem and the value (the mapping from absl::Status is in status.h); a
// request rejected that way changed nothing, because every key is checked
// against the limits before any is applied.
//
// Every call is counted in `metrics` (method, status code, duration; keys
// for the data path) when it finishes.
//
// Single node: writes are applied, logged in the write-ahead log, and
// answered once durable; their log_position is the log's sequence number.
// The Redis port runs the same writes on its own threads (InsertNow,
// DeleteNow: the RPC's body without the RPC).
// Cluster mode (`cluster` set): writes are published to the cluster's log
// and answered with the results of this replica's apply (Cluster::Publish);
// reads are served from this replica's copy, after waiting for
// min_log_position if the request has one.
//
// ExportFilter and ImportFilter stream a filter's snapshot file out and in
// (server/service/filter_transfer.cc). Their disk work (writing the export's file,
// writing an import's chunks, checking and committing it) runs on a pool of
// threads of their own, never on gRPC's, and at most kMaxExports and
// kMaxImports run at once, each with one chunk in flight. A transfer whose
// client takes (export) or sends (import) no chunk for
// transfer_idle_timeout is ended ABORTED, and an import's declared size
// must fit the disk (server/service/transfers.h).
//
// Thread safety: all handlers may run concurrently; the registry and the
// filters synchronise themselves.
#ifndef CUCKOO_SERVER_SERVICE_FILTER_SERVICE_H_
#define CUCKOO_SERVER_SERVICE_FILTER_SERVICE_H_

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "base/mutex.h"
#include "boost/asio/thread_pool.hpp"
#include "core/registry.h"
#include "cuckoo/v1/filter_service.grpc.pb.h"
#include "server/cluster/cluster.h"
#include "server/observability/logging.h"
#include "server/observability/metrics.h"
#include "server/security/auth.h"
#include "server/service/call_queues.h"
#include "server/service/service_limits.h"
#include "server/service/transfers.h"
#include "server/service/wire_format.h"
#include "server/storage/persistence.h"
#include "server/storage/request_window.h"

namespace cuckoo::server {

// INVALID_ARGUMENT unless `id` is empty or 1 to 128 printable ASCII
// characters (! to ~).
absl::Status ValidateRequestId(std::string_view id);

// Fills `info` with the filter's settings, current state and latest snapshot.
// CreateFilterRequest's and SetFilterExpiryRequest's expire_at in Unix
// milliseconds (finer parts cut off): INVALID_ARGUMENT naming `field` for a
// time before 1970-01-01T00:00:00.001Z or after the year 9999.
absl::StatusOr<int64_t> ExpireAtMillis(const google::protobuf::Timestamp& t,
                                       std::string_view field);
void SetExpireAt(int64_t ms, google::protobuf::Timestamp* out);
void FillFilterInfo(const std::string& name, const CuckooFilter& filter,
                    const SnapshotRecord& snapshot, v1::FilterInfo* info);

// The data-path RPCs (Insert, Lookup, Delete, Count) take their messages as
// raw bytes and parse them with wire_format.h (no per-key allocation);
// ImportFilter takes its chunks as raw bytes too, so that one larger than
// kImportChunkBytes is refused before it is parsed into a copy; the rest
// use the generated messages.
// Every method is on gRPC's asynchronous API (server/service/call_queues.h says
// why); the data path and ImportFilter raw. (gRPC resets a method's handler only when a
// synchronous method is marked asynchronous, so the chain starts from the
// synchronous Service and marks every method.)
using FilterServiceBase = v1::FilterService::WithAsyncMethod_SetFilterExpiry<
    v1::FilterService::WithAsyncMethod_CreateFilter<
        v1::FilterService::WithAsyncMethod_GetFilter<v1::FilterService::WithAsyncMethod_ListFilters<
            v1::FilterService::WithAsyncMethod_DropFilter<
                v1::FilterService::WithAsyncMethod_RenameFilter<
                    v1::FilterService::WithAsyncMethod_GetServerInfo<
                        v1::FilterService::WithAsyncMethod_Snapshot<
                            v1::FilterService::WithAsyncMethod_ExportFilter<
                                v1::FilterService::WithRawMethod_ImportFilter<
                                    v1::FilterService::WithRawMethod_Insert<
                                        v1::FilterService::WithRawMethod_Lookup<
                                            v1::FilterService::WithRawMethod_Delete<
                                                v1::FilterService::WithRawMethod_Count<
                                                    v1::FilterService::Service>>>>>>>>>>>>>>;

class FilterServiceImpl final : public FilterServiceBase {
 public:
  // `persistence` writes and removes the filters' snapshot files; calls are
  // counted in `metrics` (none if null); `cluster` is null on a single node.
  FilterServiceImpl(FilterRegistry* registry, Persistence* persistence, Metrics* metrics,
                    const ServiceLimits& limits, absl::Duration snapshot_interval,
                    Cluster* cluster = nullptr)
      : registry_(registry),
        persistence_(persistence),
        metrics_(metrics),
        limits_(limits),
        snapshot_interval_(snapshot_interval),
        cluster_(cluster),
        window_(limits.dedup_window, limits.max_dedup_bytes) {
    // A single node keeps its request ids with its log: the replay and the
    // snapshot runs fill and save this window (RequestWindow).
    if (persistence_ != nullptr && cluster_ == nullptr) persistence_->SetRequestWindow(&window_);
  }

  // Turns authentication on (server/security/auth.h): from now on every call but
  // GetServerInfo needs a grant on its filter (Access for each method:
  // RequiredAccess), and GetServerInfo a known caller. Call before serving.
  void SetAuthenticator(const Authenticator* auth) { auth_ = auth; }
  // Imports claim their disk space here first (null, the default: not
  // checked). Call before serving.
  void SetTransferDisk(TransferDisk* disk) { disk_ = disk; }

  // The log position this server has applied: the cluster's, or the last
  // write-ahead log record appended (0 with neither).
  uint64_t AppliedPosition() const;
  // Cluster mode: UNAVAILABLE while this replica's copy of the log is not
  // checked against the others' or disagrees (Cluster::CheckServing).
  absl::Status CheckClusterServing() const;

  // From now on every call fails with UNAVAILABLE ("shutting down").
  void StopAccepting() { accepting_.store(false, std::memory_order_release); }
  // Insert and Delete batches still running stop at their next part (see
  // CuckooFilter::kBatchPartKeys) and answer UNAVAILABLE, saying how many of
  // their keys were applied. For a shutdown whose drain time is over.
  void AbortRunning() { abort_.store(true, std::memory_order_release); }
  // Calls started and not yet done (their response not yet sent).
  int64_t calls_in_flight() const { return in_flight_.load(std::memory_order_acquire); }

  // Registers every method's calls on `queues` (before queues->Start),
  // which must outlive the service's calls.
  void RegisterCalls(CallQueues* queues);

  // --- Writes on the caller's thread (the Redis port's, on a single node) ---
  //
  // An Insert or Delete run on the calling thread exactly as the RPC's data
  // path runs it (one body, RunBatch: the same checks in the same order, the
  // same errors, the same log records, counted and in flight as a call of
  // the method), without a gRPC call: `caller` as Admit would have set it
  // (the Redis port authenticates its connections itself), `peer` for the
  // audit line of a refusal. No request id, no deadline. Only where writes
  // apply here: local_writes() (in cluster mode they are published, and
  // applied when the log comes back: the RPC).
  struct LocalWrite {
    const Caller* caller = nullptr;
    std::string_view peer;
    std::string_view filter;
    absl::Span<const std::string_view> keys;
    bool if_absent = false;  // Insert only
  };
  class AppliedWrite;
  // The error (nothing was applied, unless the server's shutdown cut a long
  // Insert short: then the message says how much was), or the write applied
  // with `results` (keys.size() of them) filled: every read that starts
  // after this returns sees it. It is answered once durable (AppliedWrite).
  absl::StatusOr<AppliedWrite> InsertNow(const LocalWrite& write, absl::Span<InsertResult> results);
  absl::StatusOr<AppliedWrite> DeleteNow(const LocalWrite& write, absl::Span<DeleteResult> results);
  bool local_writes() const { return cluster_ == nullptr; }
  // A transaction of the write-ahead log around local writes (the Redis
  // port's EXEC): the log replays the records appended between its begin
  // and its end all or none, and acknowledges nothing from the begin on
  // until the end is durable (Wal::BeginTransaction). Returns the begin's
  // lsn, 0 without a log (in cluster mode, or none), or the log's refusal
  // (no room: RESOURCE_EXHAUSTED, UNAVAILABLE), which the write it was for
  // answers with. End it promptly, once, and never wait for a write of it
  // to be durable before it ended.
  absl::StatusOr<uint64_t> BeginLogTransaction();
  void EndLogTransaction(uint64_t begin_lsn);

  // --- Filter expiry (filter_expiry.cc) ---
  //
  // How often the timer looks for expired filters: an expired filter is
  // dropped (a logged drop) at most about this long after its expire_at
  // (it is invisible to clients from expire_at on: FilterRegistry::GetLive).
  static constexpr absl::Duration kExpiryCheckInterval = absl::Milliseconds(50);
  // Starts the drop of every expired filter whose drop is not under way
  // already: on a single node a DropFilter's (the persistence thread
  // logs it), in cluster mode a published drop entry naming the filter's
  // id (only while this replica serves). Returns how many it started.
  // The timer (StartExpiry) calls it every kExpiryCheckInterval; tests call
  // it directly (with a registry's fake clock).
  size_t DropExpiredNow();
  // Starts and stops the timer (cuckood: once serving; at shutdown).
  void StartExpiry();
  void StopExpiry();

 private:
  class CallReactor;
  template <typename Request, typename Response>
  class UnaryCall;

  class ExportReactor;
  class ImportReactor;

  // How a call goes on after its handler's body returned OK.
  struct Next {
    // Answer once the write-ahead log has this lsn durable (single node).
    uint64_t durable_lsn = 0;
    // Run the body again once this replica has applied the log this far.
    uint64_t min_position = 0;
    // Cluster mode: run the body again once this replica serves (its
    // check of the log is about to agree: Cluster::WhenServing).
    bool wait_serving = false;
    // The body handed the reactor on: it is answered elsewhere.
    bool answered = false;
    // A write with a request id (single node): remembered once durable.
    std::string window_key;
    RequestWindow::Outcome outcome;
    // The write failed after part of it was applied: its key is kept in
    // doubt (RequestWindow::Abandon), never forgotten.
    bool partly_applied = false;
    // Drop this expired filter (named expired_name) first, then run the
    // body again: a CreateFilter of an expired filter's name (as Redis's
    // lazy expiry deletes the key before the command runs).
    std::shared_ptr<CuckooFilter> expired;
    std::string expired_name;
  };

  // Cluster mode: OK while this replica serves; sets next->wait_serving
  // (and returns OK) while its check of the log is only moments from
  // agreeing (a new consumer, just started), so that the call waits for
  // it; else UNAVAILABLE naming why (diverged, no majority, healing).
  absl::Status ClusterServing(Next* next) const;

  // The filter a request names: INVALID_ARGUMENT for a malformed name,
  // NOT_FOUND for an unknown one.
  absl::StatusOr<std::shared_ptr<CuckooFilter>> FindFilter(std::string_view name) const;
  // Admission of an Insert into `filter`: RESOURCE_EXHAUSTED naming it, the
  // memory in use and the budget when it is growing and the registry's
  // memory in use is at or over the budget (growth is charged as it
  // happens and cannot be refused once a write is logged; FilterRegistry);
  // also RESOURCE_EXHAUSTED naming it, its max_capacity and its items when
  // it holds max_capacity items already (the ceiling itself is the
  // engine's, per shard: CuckooFilter::ShardCeiling).
  absl::Status CheckGrowthBudget(std::string_view name, const CuckooFilter& filter) const;
  // The data path's batch, once the call is checked and its filter found
  // (and a write's request id started in the window: next->window_key): an
  // Insert checked against the growth budget, a write's room reserved in the
  // write-ahead log, apply(filter, keys, if_absent, results, stop, log) run
  // with StopReason(method, ctx) between the parts of a long batch and each
  // shard's part logged, the request id's records logged, and the keys
  // counted. *position: the answer's log position; next->durable_lsn: what
  // a write waits for before it is answered. Shared by the RPCs (DataPath)
  // and the writes on the caller's thread (InsertNow, DeleteNow).
  template <typename Result, typename Apply>
  absl::Status RunBatch(RpcMethod method, CuckooFilter& filter, std::string_view filter_name,
                        absl::Span<const std::string_view> keys, bool if_absent, Apply apply,
                        const grpc::ServerContextBase* ctx, absl::Span<Result> results, Next* next,
                        uint64_t* position);
  // Why a batch should stop between its parts, or OK to go on: the server
  // is stopping running calls (AbortRunning; never a Delete, which has no
  // long kick chains), or the call (ctx, if not null) was cancelled or is
  // past its deadline.
  absl::Status StopReason(RpcMethod method, const grpc::ServerContextBase* ctx) const;
  // What a data-path request may hold (the server's limits).
  wire::KeysRequestLimits KeyLimits() const {
    return {.max_keys = limits_.max_batch_keys,
            .min_key_bytes = 1,
            .max_key_bytes = limits_.max_key_bytes,
            .max_filter_bytes = kMaxFilterNameBytes,
            .max_request_id_bytes = kMaxRequestIdBytes};
  }
  // InsertNow's and DeleteNow's body.
  template <typename Result, typename Apply>
  absl::StatusOr<AppliedWrite> WriteNow(RpcMethod method, const LocalWrite& write, Apply apply,
                                        absl::Span<Result> results);
  // A call ended: counted in the metrics with its status and duration.
  void RecordCall(RpcMethod method, const absl::Status& status,
                  std::chrono::steady_clock::time_point start) const;
  // A read's min_log_position: OK to go on (next->min_position left 0), or
  // next->min_position set (wait for it), or OUT_OF_RANGE on a single node
  // asked for a position past its log.
  absl::Status CheckMinPosition(uint64_t min_position, Next* next) const;
  // The shared body of the data-path RPCs: parses the request (message type
  // `message`), finds the filter, checks the keys, runs
  // apply(filter, request, results, stop) and encodes the results. `stop`
  // says whether to end a long batch early (the call was cancelled or is
  // past its deadline, or AbortRunning); apply returns how many keys it
  // applied. Inserts and Deletes reserve room in the write-ahead log first
  // and log what they apply (`apply`'s WriteLog, null for reads);
  // *wait_lsn is then the lsn to wait for before answering (0: none).
  // Writes (Insert, Delete) carry `request_id`s: a repeat is answered with
  // the first try's results (RequestWindow), and in cluster mode they are
  // published instead of applied here (ClusterWrite).
  template <typename Result, typename Apply, typename Encode>
  absl::Status DataPath(RpcMethod method, grpc::ServerContextBase* ctx,
                        const grpc::ByteBuffer& request, std::string_view message,
                        grpc::ByteBuffer* response, Apply apply, Encode encode,
                        CallReactor* reactor, Next* next);
  // Cluster mode's Insert and Delete, once parsed and checked: publishes
  // the hashes and answers from the apply's results.
  template <typename Result, typename Encode>
  void ClusterWrite(RpcMethod method, const std::shared_ptr<CuckooFilter>& filter,
                    std::string_view filter_name, absl::Span<const std::string_view> keys,
                    bool if_absent, std::string_view request_id, grpc::ByteBuffer* response,
                    Encode encode, CallReactor* reactor);

  absl::Status DoCreateFilter(const v1::CreateFilterRequest& req, v1::CreateFilterResponse* resp,
                              CallReactor* reactor, Next* next);
  absl::Status DoDropFilter(const v1::DropFilterRequest& req, v1::DropFilterResponse* resp,
                            CallReactor* reactor, Next* next);
  absl::Status DoRenameFilter(const v1::RenameFilterRequest& req, v1::RenameFilterResponse* resp,
                              CallReactor* reactor, Next* next);
  absl::Status DoGetFilter(const v1::GetFilterRequest& req, v1::GetFilterResponse* resp,
                           CallReactor* reactor, Next* next);
  absl::Status DoListFilters(const v1::ListFiltersRequest& req, v1::ListFiltersResponse* resp,
                             CallReactor* reactor, Next* next);
  absl::Status DoGetServerInfo(v1::GetServerInfoResponse* resp);
  absl::Status DoSetFilterExpiry(const v1::SetFilterExpiryRequest& req,
                                 v1::SetFilterExpiryResponse* resp, CallReactor* reactor,
                                 Next* next);
  // Logs the drop of expired filter `filter` named `name` (as DropFilter
  // does) and calls done(status, the drop's log position).
  void DropExpired(const std::string& name, const std::shared_ptr<CuckooFilter>& filter,
                   std::function<void(absl::Status, uint64_t position)> done);

  // Registers unary method `method` on the queues: each call, once
  // admitted, runs handle(call).
  template <typename Request, typename Response, typename RequestFn, typename Handle>
  void AddUnary(CallQueues* queues, RpcMethod method, RequestFn request, Handle handle);
  // ExportFilter and ImportFilter (filter_transfer.cc).
  void AddTransfers(CallQueues* queues);
  // Runs body(reactor, &next), then goes on as `next` says. The body must
  // capture nothing that dies with the handler's frame: it may run again,
  // later, on another thread.
  template <typename Body>
  void Continue(CallReactor* reactor, grpc::ServerContextBase* ctx, Body body);
  // The checks every call passes first (counted already): true to go on;
  // otherwise the call was answered, UNAVAILABLE when the server is
  // shutting down, or UNAUTHENTICATED when authentication is on and the
  // call carries no known credentials.
  bool Admit(CallReactor* reactor, RpcMethod method);
  // Snapshot, once admitted.
  void ServeSnapshot(CallReactor* reactor, const v1::SnapshotRequest& req,
                     v1::SnapshotResponse* resp);
  // The data path's body for a call of `method` (Insert, Lookup, Delete or
  // Count) on the asynchronous API.
  absl::Status DataCall(RpcMethod method, grpc::ServerContextBase* ctx,
                        const grpc::ByteBuffer& request, grpc::ByteBuffer* response,
                        CallReactor* reactor, Next* next);
  // Authentication for the streaming calls: the caller of `ctx`, or
  // UNAUTHENTICATED (counted and audited).
  absl::StatusOr<Caller> Authenticate(RpcMethod method, grpc::ServerContextBase* ctx) const;
  // Whether `caller` may call `method` on filter `filter` ("" for none: a
  // whole-server Snapshot needs admin on "*"): OK, or PERMISSION_DENIED
  // naming the method, the filter and the caller's grants (counted and
  // audited). Never looks the filter up: the answer is the same whether it
  // exists or not.
  // The audit line's peer is ctx's, or `peer` when ctx is null.
  absl::Status Authorize(const Caller& caller, RpcMethod method, std::string_view filter,
                         const grpc::ServerContextBase* ctx, std::string_view peer = {}) const;

  FilterRegistry* const registry_;
  Persistence* const persistence_;
  Metrics* const metrics_;
  const ServiceLimits limits_;
  const absl::Duration snapshot_interval_;
  Cluster* const cluster_;
  const Authenticator* auth_ = nullptr;
  TransferDisk* disk_ = nullptr;
  // The audit lines of calls refused for their credentials, at most
  // kUnauthenticatedAuditsPerSecond a second: anyone who reaches the port
  // can make such calls, and must not be able to flood the log. The rest
  // are counted and summed up in one line (and in the metrics).
  static constexpr int kUnauthenticatedAuditsPerSecond = 50;
  mutable RateLimitedAudit unauthenticated_audit_{kUnauthenticatedAuditsPerSecond,
                                                  "calls refused as UNAUTHENTICATED"};
  RequestWindow window_;
  std::atomic<bool> accepting_{true};
  std::atomic<bool> abort_{false};
  std::atomic<int64_t> in_flight_{0};
  // ExportFilter and ImportFilter calls running; names their private files.
  std::atomic<int> exports_{0};
  std::atomic<int> imports_{0};
  std::atomic<uint64_t> transfer_sequence_{0};
  // The queues serving the calls (RegisterCalls), and what each method's
  // calls need to post their successors.
  CallQueues* queues_ = nullptr;
  std::vector<std::shared_ptr<const void>> call_kinds_;
  // Ends transfers whose client has been idle for transfer_idle_timeout.
  IdleSweeper idle_{IdleSweeper::IntervalFor(limits_.transfer_idle_timeout)};
  // Expiry: the ids of filters whose drop DropExpiredNow started and that
  // have not finished (at most one per filter), and the timer.
  Mutex expiry_mu_;
  absl::flat_hash_set<uint64_t> expiring_ ABSL_GUARDED_BY(expiry_mu_);
  IdleSweeper expiry_timer_{kExpiryCheckInterval};
  uint64_t expiry_check_ = 0;
  // The transfers' disk work: one thread per transfer that may run, so that
  // none waits for another's long step (a large snapshot written or
  // checked). Last: destroyed (joined) first.
  boost::asio::thread_pool transfer_threads_{kMaxExports + kMaxImports};
};

// A write InsertNow or DeleteNow applied, not yet answered: a call of its
// method in flight (shutdown waits for it) until it is durable. Then must be
// called once; one destroyed without it ends the same way, telling no one.
class FilterServiceImpl::AppliedWrite {
 public:
  AppliedWrite(AppliedWrite&& other) noexcept
      : service_(std::exchange(other.service_, nullptr)),
        method_(other.method_),
        start_(other.start_),
        lsn_(other.lsn_) {}
  AppliedWrite& operator=(AppliedWrite&&) = delete;
  ~AppliedWrite();

  // The last log record of the write (0: nothing to wait for).
  uint64_t lsn() const { return lsn_; }
  // Calls done(OK) once the write's log records are durable per
  // --durability, or done(error) if the log failed first: at once, on this
  // thread, if that is known already, else on the log's committer thread.
  // The call is counted in the metrics just before.
  void Then(std::function<void(absl::Status)> done) &&;

 private:
  friend class FilterServiceImpl;
  AppliedWrite(FilterServiceImpl* service, RpcMethod method,
               std::chrono::steady_clock::time_point start, uint64_t lsn)
      : service_(service), method_(method), start_(start), lsn_(lsn) {}

  FilterServiceImpl* service_;
  RpcMethod method_;
  std::chrono::steady_clock::time_point start_;
  uint64_t lsn_;
};

}  // namespace cuckoo::server

#endif  // CUCKOO_SERVER_SERVICE_FILTER_SERVICE_H_
