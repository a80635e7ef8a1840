// FilterServiceImpl's streaming RPCs: ExportFilter and ImportFilter
// (proto/cuckoo/v1/filter_service.proto), on gRPC's asynchronous API
// (server/service/call_queues.h), each call written as a reactor would be on the
// callback API: StartWrite/StartRead and Finish start operations, whose
// completions come back (CallQueues::Call's hooks) as OnWriteDone/OnReadDone,
// OnDone (where a cancellation is seen) and OnEnded.
//
// Both move a snapshot file (docs/SNAPSHOT_FORMAT.md) through a private file
// in the data directory, one chunk at a time:
// - ExportFilter writes the filter's snapshot with core/snapshot.h's writer
//   (one shard copied at a time under its shared lock, so the filter keeps
//   serving reads and writes) into <data-dir>/.export/<n>/, opens it, removes
//   its name at once (so that nothing is left behind however the call ends,
//   even a crash: the kernel frees the file with its last descriptor, and
//   start-up removes .export/ in case the crash came during the write), and
//   sends it in chunks of at most kExportChunkBytes.
// - ImportFilter appends each chunk it receives to <data-dir>/.import/<n>,
//   then reads the file back with the snapshot reader (every check start-up
//   makes, and the registry's admission through a claim on the name and its
//   memory), and hands the filter to Persistence::ImportNow, which makes it
//   durable before it is visible (the crash-safety order is there).
//
// Threads. The disk work (the export's snapshot write, each chunk's read or
// write, an import's check and commit) runs on FilterServiceImpl's transfer
// threads, not on gRPC's: a snapshot of a large filter takes seconds, and
// even a 1 MiB write can wait for the disk when the page cache is full of
// dirty pages, while gRPC's threads serve every other call. Not on the
// persistence thread either: an export must not hold up the periodic and
// final snapshots or the DropFilter queue for its whole transfer, and the
// disk work of several transfers may overlap. (An import's commit does take
// the persistence's file lock, in ImportNow, so it is ordered with
// snapshots, drops and log truncation.) There is one transfer thread per
// transfer that may run (kMaxExports + kMaxImports), so no transfer waits
// behind another's long step.
//
// Each call has at most one operation in flight: a callback (OnWriteDone,
// OnReadDone) posts the next step to a transfer thread, which starts the
// next write or read, or finishes the call. So the steps of one call never
// run concurrently, and the reactor stays valid until its Finish: OnDone,
// which deletes it, comes only once gRPC delivered both the Finish and the
// call's end.
//
// Idle clients. While a call holds its slot it is registered with the
// service's IdleSweeper (server/service/transfers.h), which looks at it a few times
// per --transfer-idle-timeout: a write (export) or read (import) started and
// not completed for longer than that means the client stopped taking or
// sending chunks, and the sweeper cancels the call with ABORTED and a
// message saying so (grpc_call_cancel_with_status: the client gets that
// status, not a bare CANCELLED). The pending operation then completes not
// ok, and the call ends as any failed call does: its file removed, its slot
// and disk claim given back, a warning logged. End unregisters the call
// before it finishes, and a check runs under the sweeper's lock, so the
// sweeper never touches a call that is gone.
//
// Bounds. An import's chunks arrive as raw bytes: one over
// kImportChunkBytes of data is refused before it is parsed, so each import
// holds at most one such chunk of its own (kTransferMemoryOverhead). An
// import's declared size (total_bytes), or else each chunk as it comes, is
// claimed from the data directory's free disk space beyond the write-ahead
// log's reserve (TransferDisk) before it is written.
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <system_error>
#include <utility>

#include "absl/functional/function_ref.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/strip.h"
#include "base/guarded.h"
#include "base/units.h"
#include "boost/asio/post.hpp"
#include "core/snapshot.h"
#include "grpc/grpc.h"
#include "grpcpp/impl/codegen/proto_utils.h"
#include "server/observability/logging.h"
#include "server/service/filter_service.h"
#include "server/service/filter_service_internal.h"
#include "server/service/status.h"
#include "spdlog/spdlog.h"

namespace cuckoo::server {
namespace fs = std::filesystem;
using filter_service_internal::ShuttingDown;

// In a named namespace, not an anonymous one: the reactors below, classes
// with external linkage, hold one (g++'s -Wsubobject-linkage).
namespace filter_service_internal {

// An admin call's audit line, logged with its outcome when it ends.
struct AuditedCall {
  AuditedCall(Caller c, std::string p) : caller(std::move(c)), peer(std::move(p)) {}
  void Log(RpcMethod method, std::string_view filter, const absl::Status& status) const {
    Audit({.caller = caller.name(),
           .method = RpcMethodName(method),
           .filter = filter,
           .peer = peer,
           .outcome = StatusCodeName(static_cast<grpc::StatusCode>(status.code())),
           .detail = std::string_view(status.message().data(), status.message().size())});
  }
  Caller caller;
  std::string peer;
  std::string filter;  // ImportFilter: the name its first chunk gave
};

}  // namespace filter_service_internal

using filter_service_internal::AuditedCall;

namespace {

// What a chunk costs beyond its data: the first chunk's metadata (a
// FilterInfo with a name of at most 128 bytes, a few numbers) and framing.
constexpr uint64_t kChunkOverheadBytes = 1024;

// The largest import chunk message taken: kImportChunkBytes of data and
// the rest of a first chunk.
constexpr uint64_t kMaxImportMessageBytes = kImportChunkBytes + kChunkOverheadBytes;

// An export claims its filter's memory and this much more of the disk
// (ExportFilter's WriteFile).
constexpr uint64_t kExportClaimSlackBytes = 64 << 10;

// An export writes through its buffer and holds one chunk, and gRPC its
// serialized copy; an import holds the chunk it parsed, at most
// kMaxImportMessageBytes: the raw message it was parsed from is gRPC's
// (slices of the transport's memory quota, --transport-memory).
static_assert(kMaxExports * (kExportBufferBytes + 2 * (kExportChunkBytes + kChunkOverheadBytes)) +
                      kMaxImports * kMaxImportMessageBytes <=
                  kTransferMemoryOverhead,
              "the stated memory overhead must hold the transfers' buffers");

using Clock = std::chrono::steady_clock;

// Nanoseconds of `t` since the clock's epoch, never 0 (0: not waiting).
int64_t Ticks(Clock::time_point t) {
  return std::max<int64_t>(
      1, std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count());
}

absl::Status SystemError(absl::string_view what, const std::string& path, int err) {
  const std::string message = absl::StrFormat(
      "%s %s: %s", what, path, std::error_code(err, std::generic_category()).message());
  if (err == ENOSPC || err == EDQUOT) return absl::ResourceExhaustedError(message);
  return absl::InternalError(message);
}

// The idle check of ExportFilter and ImportFilter, run by the sweeper
// while the call is registered: an operation on the client (an export's
// write, an import's read) pending since `waiting_since` (Ticks; 0: none
// is) for longer than `timeout` at `now` means the client stopped taking
// or sending chunks. Then `timed_out` is set, once (the sweeper runs again
// before the call ends, and the call must be cancelled only once), and the
// call is cancelled with `idle_error()`, which its client gets (not a bare
// CANCELLED: grpc_call_cancel_with_status is thread-safe, as TryCancel).
void CancelIfIdle(grpc::ServerContext& ctx, const std::atomic<int64_t>& waiting_since,
                  std::atomic<bool>& timed_out, IdleSweeper::Clock::time_point now,
                  absl::Duration timeout, absl::FunctionRef<absl::Status()> idle_error) {
  const int64_t since = waiting_since.load(std::memory_order_acquire);
  if (since == 0 || Ticks(now) - since <= absl::ToInt64Nanoseconds(timeout) ||
      timed_out.exchange(true, std::memory_order_acq_rel)) {
    return;
  }
  const absl::Status status = idle_error();
  const std::string message(status.message());
  grpc_call_cancel_with_status(ctx.c_call(), static_cast<grpc_status_code>(status.code()),
                               message.c_str(), nullptr);
}

}  // namespace

// ---------------------------------------------------------------------------
// ExportFilter.

class FilterServiceImpl::ExportReactor final : public CallQueues::Call {
 public:
  // Posts a call on queue `queue` (method number `id` on the queues).
  static void Post(FilterServiceImpl* service, int id, grpc::ServerCompletionQueue* cq,
                   size_t queue) {
    auto* call = new ExportReactor(service, id, queue);
    call->context_.AsyncNotifyWhenDone(call->done_tag());
    service->RequestExportFilter(&call->context_, &call->request_, &call->writer_, cq, cq,
                                 call->start_tag());
  }

 private:
  enum Event { kWrite };

  ExportReactor(FilterServiceImpl* service, int id, size_t queue)
      : CallQueues::Call(service->queues_, id, queue), service_(service) {}

  void OnStarted() override {
    start_ = std::chrono::steady_clock::now();
    service_->in_flight_.fetch_add(1, std::memory_order_acq_rel);
    Start(&context_, request_);
  }
  void OnEvent(int event, bool ok) override {
    if (event == kWrite) OnWriteDone(ok);
  }
  void OnDone() override {
    if (context_.IsCancelled()) cancelled_.store(true, std::memory_order_release);
  }
  void OnEnded() override { service_->in_flight_.fetch_sub(1, std::memory_order_acq_rel); }

  // On the queue's thread: the checks that need no disk, then the snapshot
  // is written on a transfer thread.
  void Start(grpc::ServerContext* ctx, const v1::ExportFilterRequest& req) {
    if (!service_->accepting_.load(std::memory_order_acquire)) return End(ShuttingDown());
    absl::StatusOr<Caller> caller = service_->Authenticate(RpcMethod::kExportFilter, ctx);
    if (!caller.ok()) return End(caller.status());
    if (absl::Status a = service_->Authorize(*caller, RpcMethod::kExportFilter, req.name(), ctx);
        !a.ok()) {
      return End(a);
    }
    // A replica whose copy of the log is not checked, or disagrees, is
    // not copied from (peers bootstrap through this call).
    if (absl::Status c = service_->CheckClusterServing(); !c.ok()) return End(c);
    if (service_->auth_ != nullptr) audit_.emplace(*std::move(caller), ctx->peer());
    name_ = req.name();
    absl::StatusOr<std::shared_ptr<CuckooFilter>> filter = service_->FindFilter(name_);
    if (!filter.ok()) return End(filter.status());
    if (service_->exports_.fetch_add(1, std::memory_order_acq_rel) >= kMaxExports) {
      service_->exports_.fetch_sub(1, std::memory_order_acq_rel);
      return End(absl::ResourceExhaustedError(
          absl::StrFormat("%d exports are running already (the limit is %d at a time); retry later",
                          kMaxExports, kMaxExports)));
    }
    holds_slot_ = true;
    watch_ = service_->idle_.Add([this](IdleSweeper::Clock::time_point now) { CheckIdle(now); });
    filter_ = *std::move(filter);
    // Every write acknowledged up to here is in the filter: in the snapshot.
    log_position_ = service_->AppliedPosition();
    chunk_bytes_ = static_cast<size_t>(std::min<uint64_t>(
        kExportChunkBytes, service_->limits_.max_message_bytes - kChunkOverheadBytes));
    Post([this] { WriteFile(); });
  }

  void OnWriteDone(bool ok) {
    waiting_since_.store(0, std::memory_order_release);
    if (!ok) {
      Post([this] {
        End(timed_out_.load(std::memory_order_acquire)
                ? IdleError()
                : absl::CancelledError("the export was cancelled, or the client is gone"));
      });
      return;
    }
    Post([this] { SendNext(); });
  }
  void StartWrite(const v1::ExportFilterChunk* chunk) {
    waiting_since_.store(Ticks(Clock::now()), std::memory_order_release);
    writer_.Write(*chunk, &write_tag_);
  }

  // On the sweeper's thread, while the call is registered: a chunk the
  // client has not taken for the idle timeout ends the call.
  void CheckIdle(IdleSweeper::Clock::time_point now) {
    CancelIfIdle(context_, waiting_since_, timed_out_, now, service_->limits_.transfer_idle_timeout,
                 [this] { return IdleError(); });
  }
  absl::Status IdleError() const {
    return absl::AbortedError(absl::StrFormat(
        "the client took no chunk of the export of filter \"%s\" for %s "
        "(--transfer-idle-timeout): the export was abandoned and its slot freed; start it again",
        absl::CHexEscape(name_), absl::FormatDuration(service_->limits_.transfer_idle_timeout)));
  }
  void Finish(const grpc::Status& status) { writer_.Finish(status, finish_tag()); }

  // Runs `step` on a transfer thread; whatever it throws finishes the call.
  template <typename Step>
  void Post(Step step) {
    boost::asio::post(service_->transfer_threads_, [this, step = std::move(step)] {
      const absl::Status s = Guarded([&] {
        step();
        return absl::OkStatus();
      });
      if (!s.ok()) End(s);
    });
  }

  // Why to stop now, if so.
  absl::Status Stopped() const {
    if (timed_out_.load(std::memory_order_acquire)) return IdleError();
    if (cancelled_.load(std::memory_order_acquire)) {
      return absl::CancelledError("the export was cancelled");
    }
    if (service_->abort_.load(std::memory_order_acquire)) return ShuttingDown();
    return absl::OkStatus();
  }

  void WriteFile() {
    if (absl::Status s = Stopped(); !s.ok()) return End(s);
    const absl::Time t0 = absl::Now();
    dir_ = (fs::path(service_->persistence_->data_dir()) / kExportDir /
            absl::StrCat(service_->transfer_sequence_.fetch_add(1, std::memory_order_relaxed)))
               .string();
    // Its disk space, as other transfers claim theirs, so that the copy
    // cannot take the log's reserve: a snapshot file is no larger than the
    // filter's memory (its tables and a header for each table), measured
    // 0.68-0.997 of it; 64 KiB more covers a growth while it is written.
    TransferDisk::Claim claim;
    if (service_->disk_ != nullptr) {
      absl::StatusOr<TransferDisk::Claim> c = service_->disk_->Take(
          filter_->memory_bytes() + kExportClaimSlackBytes,
          absl::StrFormat("the export of filter \"%s\"", absl::CHexEscape(name_)));
      if (!c.ok()) return End(c.status());
      claim = *std::move(c);
    }
    std::error_code ec;
    fs::create_directories(dir_, ec);
    if (ec) return End(SystemError("create directory", dir_, ec.value()));
    // On a cluster replica, shards no entry wrote to for a while record its
    // applied position, so that a replica bootstrapping from this copy
    // resumes the stream from a position the stream still holds.
    Cluster* const cluster = service_->cluster_;
    absl::StatusOr<SnapshotWriteResult> w = WriteSnapshotFile(
        *filter_, name_, dir_,
        {.buffer_bytes = kExportBufferBytes,
         .position_floor = cluster == nullptr ? std::function<uint64_t()>()
                                              : [cluster] { return cluster->AppliedPosition(); }});
    if (!w.ok()) {
      return End(absl::Status(w.status().code(),
                              absl::StrCat("exporting filter \"", absl::CHexEscape(name_),
                                           "\": ", w.status().message())));
    }
    fd_ = ::open(w->path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd_ < 0) return End(SystemError("open", w->path, errno));
    // The open descriptor keeps the file: its name goes now.
    fs::remove_all(dir_, ec);
    dir_.clear();
    total_ = w->bytes;
    chunk_.set_total_bytes(w->bytes);
    chunk_.set_items(w->items);
    chunk_.set_log_position(log_position_);
    chunk_.set_filter_id(w->filter_id);
    FillFilterInfo(name_, *filter_, service_->persistence_->Record(name_, *filter_),
                   chunk_.mutable_filter());
    spdlog::info("exporting filter {}: {} items, {} snapshot written in {}; streaming it",
                 FilterRegistry::QuoteName(name_), w->items, FormatByteSize(w->bytes),
                 absl::FormatDuration(absl::Now() - t0));
    // The snapshot holds what is to be sent: a drop of the filter meanwhile
    // frees its memory at once.
    filter_.reset();
    SendNext();
  }

  void SendNext() {
    if (absl::Status s = Stopped(); !s.ok()) return End(s);
    if (offset_ == total_) return End(absl::OkStatus());
    if (offset_ > 0) chunk_.Clear();
    const size_t n = static_cast<size_t>(std::min<uint64_t>(chunk_bytes_, total_ - offset_));
    std::string* data = chunk_.mutable_data();
    data->resize(n);
    for (size_t done = 0; done < n;) {
      const ssize_t r = ::pread(fd_, data->data() + done, n - done, offset_ + done);
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0) {
        return End(r < 0 ? SystemError("read the export's copy of filter", name_, errno)
                         : absl::InternalError(absl::StrFormat(
                               "the export's copy of filter \"%s\" ended at %u of %u bytes",
                               absl::CHexEscape(name_), offset_ + done, total_)));
      }
      done += static_cast<size_t>(r);
    }
    offset_ += n;
    StartWrite(&chunk_);
  }

  // Releases the copy and finishes the call: the reactor's last step.
  void End(const absl::Status& status) {
    // No check of the sweeper's runs from here on.
    service_->idle_.Remove(std::exchange(watch_, 0));
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
    if (!dir_.empty()) {
      std::error_code ec;
      fs::remove_all(dir_, ec);
    }
    filter_.reset();
    if (status.ok()) {
      spdlog::info("exported filter {}: {} sent", FilterRegistry::QuoteName(name_),
                   FormatByteSize(total_));
    } else if (holds_slot_) {
      spdlog::warn("export of filter {} ended after {} of {}: {}", FilterRegistry::QuoteName(name_),
                   FormatByteSize(offset_), FormatByteSize(total_), std::string(status.message()));
    }
    // The slot is free once its files and chunk are: before the client
    // hears the status, so that its next export is not refused.
    if (std::exchange(holds_slot_, false)) {
      service_->exports_.fetch_sub(1, std::memory_order_acq_rel);
    }
    if (audit_.has_value()) audit_->Log(RpcMethod::kExportFilter, name_, status);
    if (service_->metrics_ != nullptr) {
      service_->metrics_->RecordRpc(RpcMethod::kExportFilter,
                                    static_cast<grpc::StatusCode>(status.code()),
                                    std::chrono::steady_clock::now() - start_);
    }
    Finish(ToGrpcStatus(status));
  }

  FilterServiceImpl* const service_;
  grpc::ServerContext context_;
  v1::ExportFilterRequest request_;
  grpc::ServerAsyncWriter<v1::ExportFilterChunk> writer_{&context_};
  CallQueues::Tag write_tag_{this, kWrite};
  std::chrono::steady_clock::time_point start_;
  std::optional<AuditedCall> audit_;  // With authentication on.
  std::atomic<bool> cancelled_{false};
  // Since when a write has waited for the client (Ticks; 0: none is
  // pending), and whether the sweeper ended the call for it.
  std::atomic<int64_t> waiting_since_{0};
  std::atomic<bool> timed_out_{false};
  // Set by Start, before any other step runs; then used by one step at a
  // time (see the top of the file).
  bool holds_slot_ = false;
  uint64_t watch_ = 0;  // The sweeper's registration while the slot is held.
  std::string name_;
  std::shared_ptr<CuckooFilter> filter_;
  uint64_t log_position_ = 0;
  size_t chunk_bytes_ = kExportChunkBytes;
  std::string dir_;
  int fd_ = -1;
  uint64_t total_ = 0;
  uint64_t offset_ = 0;
  v1::ExportFilterChunk chunk_;  // The one in flight.
};

// ---------------------------------------------------------------------------
// ImportFilter.

class FilterServiceImpl::ImportReactor final : public CallQueues::Call {
 public:
  // Posts a call on queue `queue` (method number `id` on the queues).
  static void Post(FilterServiceImpl* service, int id, grpc::ServerCompletionQueue* cq,
                   size_t queue) {
    auto* call = new ImportReactor(service, id, queue);
    call->context_.AsyncNotifyWhenDone(call->done_tag());
    service->RequestImportFilter(&call->context_, &call->reader_, cq, cq, call->start_tag());
  }

 private:
  enum Event { kRead };

  ImportReactor(FilterServiceImpl* service, int id, size_t queue)
      : CallQueues::Call(service->queues_, id, queue), service_(service) {}

  void OnStarted() override {
    start_ = std::chrono::steady_clock::now();
    service_->in_flight_.fetch_add(1, std::memory_order_acq_rel);
    Start();
  }
  void OnEvent(int event, bool ok) override {
    if (event == kRead) OnReadDone(ok);
  }
  void OnDone() override {
    if (context_.IsCancelled()) cancelled_.store(true, std::memory_order_release);
  }
  void OnEnded() override { service_->in_flight_.fetch_sub(1, std::memory_order_acq_rel); }

  void Start() {
    if (!service_->accepting_.load(std::memory_order_acquire)) return End(ShuttingDown());
    absl::StatusOr<Caller> caller = service_->Authenticate(RpcMethod::kImportFilter, ctx_);
    if (!caller.ok()) return End(caller.status());
    caller_ = *std::move(caller);
    // The filter's name comes with the first chunk; a caller that may not
    // import anything must not hold one of the few import slots until then.
    if (service_->auth_ != nullptr && !caller_.AdminOfSome()) {
      if (service_->metrics_ != nullptr) {
        service_->metrics_->RecordAuthFailure(RpcMethod::kImportFilter,
                                              static_cast<size_t>(AuthFailure::kPermissionDenied));
      }
      const std::string peer = ctx_->peer();
      Audit({.caller = caller_.name(),
             .method = "ImportFilter",
             .peer = peer,
             .outcome = "PERMISSION_DENIED",
             .detail = "admin"});
      return End(absl::PermissionDeniedError(absl::StrFormat(
          "\"%s\" may not call ImportFilter: that needs the admin grant on the new filter (its "
          "grants: %s)",
          caller_.name(), caller_.GrantsText())));
    }
    if (service_->cluster_ != nullptr) {
      // A replica's state changes only through the cluster's log.
      return End(absl::FailedPreconditionError(
          "import into a cluster is not supported yet: import into a single node, or create the "
          "filter through the cluster and insert its keys again (a cluster's state changes only "
          "through its log)"));
    }
    if (service_->imports_.fetch_add(1, std::memory_order_acq_rel) >= kMaxImports) {
      service_->imports_.fetch_sub(1, std::memory_order_acq_rel);
      return End(absl::ResourceExhaustedError(
          absl::StrFormat("%d imports are running already (the limit is %d at a time); retry later",
                          kMaxImports, kMaxImports)));
    }
    holds_slot_ = true;
    watch_ = service_->idle_.Add([this](IdleSweeper::Clock::time_point now) { CheckIdle(now); });
    limit_ = service_->registry_->limits().memory_budget_bytes + kImportSlackBytes;
    StartRead();
  }

  void OnReadDone(bool ok) {
    waiting_since_.store(0, std::memory_order_release);
    boost::asio::post(service_->transfer_threads_, [this, ok] {
      // ok: a chunk arrived; else the client is done sending (or gone).
      const absl::Status s = Guarded([&] { return ok ? TakeChunk() : Commit(); });
      if (!s.ok()) return End(s);
      if (ok) return StartRead();
      End(absl::OkStatus());
    });
  }
  void StartRead() {
    waiting_since_.store(Ticks(Clock::now()), std::memory_order_release);
    reader_.Read(&message_, &read_tag_);
  }
  // With OK, the response (resp_) goes with the status.
  void Finish(const grpc::Status& status) {
    if (status.ok()) {
      grpc::ByteBuffer out;
      bool own = false;
      const grpc::Status s =
          grpc::SerializationTraits<v1::ImportFilterResponse>::Serialize(response_, &out, &own);
      if (s.ok()) {
        reader_.Finish(out, status, finish_tag());
        return;
      }
      reader_.FinishWithError(s, finish_tag());
    } else {
      reader_.FinishWithError(status, finish_tag());
    }
  }

  // On the sweeper's thread, while the call is registered: no chunk (nor
  // the end of the upload) for the idle timeout ends the call.
  void CheckIdle(IdleSweeper::Clock::time_point now) {
    CancelIfIdle(context_, waiting_since_, timed_out_, now, service_->limits_.transfer_idle_timeout,
                 [this] { return IdleError(); });
  }
  absl::Status IdleError() const {
    return absl::AbortedError(absl::StrFormat(
        "no chunk of the import arrived for %s (--transfer-idle-timeout): the import was "
        "abandoned, its upload removed and its slot freed; nothing was created; start it again",
        absl::FormatDuration(service_->limits_.transfer_idle_timeout)));
  }

  absl::Status Stopped() const {
    if (timed_out_.load(std::memory_order_acquire)) return IdleError();
    if (cancelled_.load(std::memory_order_acquire) || ctx_->IsCancelled()) {
      return absl::CancelledError("the import was cancelled; nothing was created");
    }
    if (service_->abort_.load(std::memory_order_acquire)) return ShuttingDown();
    return absl::OkStatus();
  }

  // Appends the chunk just read to the private file.
  absl::Status TakeChunk() {
    if (absl::Status s = Stopped(); !s.ok()) return s;
    // Checked before it is parsed: the parse is a copy of the chunk's data.
    if (const size_t bytes = message_.Length(); bytes > kMaxImportMessageBytes) {
      message_.Clear();
      return absl::ResourceExhaustedError(absl::StrFormat(
          "import chunk %u is a message of %u bytes: chunks are at most %u bytes of data (%u "
          "bytes a message); send the snapshot in smaller chunks",
          chunks_ + 1, bytes, kImportChunkBytes, kMaxImportMessageBytes));
    }
    if (message_.Length() == 0) {
      chunk_.Clear();  // An empty message: every field unset.
    } else if (!grpc::SerializationTraits<v1::ImportFilterChunk>::Deserialize(&message_, &chunk_)
                    .ok()) {
      return absl::InvalidArgumentError(
          absl::StrFormat("import chunk %u is not an ImportFilterChunk message", chunks_ + 1));
    }
    if (name_.empty()) {
      if (chunk_.name().empty()) {
        return absl::InvalidArgumentError(
            "the first chunk of an import must carry the new filter's name");
      }
      if (absl::Status s = FilterRegistry::ValidateName(chunk_.name()); !s.ok()) return s;
      // Before anything that could tell whether the name is taken.
      if (absl::Status a =
              service_->Authorize(caller_, RpcMethod::kImportFilter, chunk_.name(), ctx_);
          !a.ok()) {
        return a;
      }
      if (service_->auth_ != nullptr) {
        audit_.emplace(caller_, ctx_->peer());
        audit_->filter = chunk_.name();
      }
      // Early, so that a taken name is refused before the upload. (It is
      // checked again, and claimed, once the snapshot has arrived.)
      if (service_->registry_->Get(chunk_.name()).ok()) {
        return absl::AlreadyExistsError(
            absl::StrFormat("filter \"%s\" already exists", absl::CHexEscape(chunk_.name())));
      }
      name_ = chunk_.name();
      expected_ = chunk_.total_bytes();
      if (expected_ > limit_) return TooLarge(expected_);
      if (expected_ != 0 && service_->disk_ != nullptr) {
        absl::StatusOr<TransferDisk::Claim> claim = service_->disk_->Take(
            expected_, absl::StrFormat("the import of filter \"%s\"", absl::CHexEscape(name_)));
        if (!claim.ok()) return claim.status();
        claim_ = *std::move(claim);
      }
      const fs::path dir = fs::path(service_->persistence_->data_dir()) / kImportDir;
      std::error_code ec;
      fs::create_directories(dir, ec);
      if (ec) return SystemError("create directory", dir.string(), ec.value());
      // Numbered, not named: a name is any key ("../x") and never part of
      // a path.
      path_ =
          (dir / absl::StrCat(service_->transfer_sequence_.fetch_add(1, std::memory_order_relaxed)))
              .string();
      fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
      if (fd_ < 0) {
        const int err = errno;
        path_.clear();  // Not ours to remove.
        return SystemError("create", (dir / name_).string(), err);
      }
    } else if (!chunk_.name().empty() && chunk_.name() != name_) {
      return absl::InvalidArgumentError(
          absl::StrFormat("chunk %u names filter \"%s\", but the import's first chunk named \"%s\"",
                          chunks_, absl::CHexEscape(chunk_.name()), absl::CHexEscape(name_)));
    }
    ++chunks_;
    const std::string& data = chunk_.data();
    if (received_ + data.size() > limit_) return TooLarge(received_ + data.size());
    if (expected_ != 0 && received_ + data.size() > expected_) {
      return absl::InvalidArgumentError(
          absl::StrFormat("more bytes arrived than the %u total_bytes announced", expected_));
    }
    if (expected_ == 0 && service_->disk_ != nullptr && !data.empty()) {
      // No size announced: each chunk is claimed as it comes.
      if (absl::Status s = service_->disk_->Extend(
              &claim_, data.size(),
              absl::StrFormat("the import of filter \"%s\" (%u bytes so far)",
                              absl::CHexEscape(name_), received_));
          !s.ok()) {
        return s;
      }
    }
    for (size_t done = 0; done < data.size();) {
      const ssize_t w = ::write(fd_, data.data() + done, data.size() - done);
      if (w < 0 && errno == EINTR) continue;
      if (w < 0) return SystemError("write", path_, errno);
      done += static_cast<size_t>(w);
    }
    received_ += data.size();
    claim_.Wrote(data.size());
    chunk_.Clear();
    return absl::OkStatus();
  }

  absl::Status TooLarge(uint64_t bytes) const {
    return absl::ResourceExhaustedError(absl::StrFormat(
        "the import is %u bytes or more, more than this server's memory budget of %u bytes plus "
        "%u: no filter it can hold has a snapshot that large",
        bytes, limit_ - kImportSlackBytes, kImportSlackBytes));
  }

  // The upload is complete: check it whole, then create the filter.
  absl::Status Commit() {
    if (absl::Status s = Stopped(); !s.ok()) return s;
    if (name_.empty()) {
      return absl::InvalidArgumentError(
          "no chunks arrived: an import's first chunk carries the new filter's name");
    }
    if (expected_ != 0 && received_ != expected_) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "the upload ended after %u of the %u bytes total_bytes announced", received_, expected_));
    }
    const int fd = std::exchange(fd_, -1);
    if (::close(fd) != 0) return SystemError("write", path_, errno);
    // Every check of a snapshot loaded at start-up; the name and memory are
    // claimed before the tables are allocated (the header says how much: a
    // growing filter's grown tables included).
    FilterRegistry::Claim claim;
    absl::StatusOr<LoadedSnapshot> loaded =
        ReadSnapshotFile(path_, /*expected_name=*/{}, [&](const SnapshotHeader& h) {
          absl::StatusOr<FilterRegistry::Claim> c =
              service_->registry_->ClaimName(name_, h.memory_bytes);
          if (!c.ok()) return c.status();
          claim = *std::move(c);
          return absl::OkStatus();
        });
    ::unlink(path_.c_str());
    if (!loaded.ok()) {
      // The reader names the file, a private one: name what was sent instead.
      absl::string_view why = loaded.status().message();
      absl::ConsumePrefix(&why, path_ + ": ");
      if (absl::IsAlreadyExists(loaded.status()) || absl::IsResourceExhausted(loaded.status())) {
        return loaded.status();  // The registry's, naming the filter.
      }
      return absl::Status(loaded.status().code(),
                          absl::StrFormat("the snapshot sent for filter \"%s\" (%u bytes): %s",
                                          absl::CHexEscape(name_), received_, why));
    }
    if (absl::Status s = Stopped(); !s.ok()) return s;
    SnapshotWriteResult written;
    uint64_t lsn = 0;
    const std::string source = loaded->header.name;
    const uint64_t items = loaded->items;
    absl::StatusOr<std::shared_ptr<CuckooFilter>> added = service_->persistence_->ImportNow(
        std::move(claim), std::move(loaded->filter), &written, &lsn);
    if (!added.ok()) {
      return absl::Status(added.status().code(),
                          absl::StrCat("importing filter \"", absl::CHexEscape(name_),
                                       "\": ", added.status().message()));
    }
    FillFilterInfo(name_, **added, service_->persistence_->Record(name_, **added),
                   resp_->mutable_filter());
    resp_->set_log_position(lsn);
    resp_->set_bytes(received_);
    resp_->set_source_name(source);
    spdlog::info(
        "imported filter {} from a snapshot of filter {}: {} items, {} received; created at log "
        "position {}, {} written",
        FilterRegistry::QuoteName(name_), FilterRegistry::QuoteName(source), items,
        FormatByteSize(received_), lsn, written.path);
    return absl::OkStatus();
  }

  void End(const absl::Status& status) {
    // No check of the sweeper's runs from here on.
    service_->idle_.Remove(std::exchange(watch_, 0));
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
    if (!path_.empty()) ::unlink(path_.c_str());
    claim_.Reset();
    if (!status.ok() && (!name_.empty() || timed_out_.load(std::memory_order_acquire))) {
      spdlog::warn(
          "import of filter {} failed after {} received: {}",
          name_.empty() ? std::string("(not named yet)") : FilterRegistry::QuoteName(name_),
          FormatByteSize(received_), std::string(status.message()));
    }
    if (std::exchange(holds_slot_, false)) {
      service_->imports_.fetch_sub(1, std::memory_order_acq_rel);
    }
    if (audit_.has_value()) audit_->Log(RpcMethod::kImportFilter, audit_->filter, status);
    if (service_->metrics_ != nullptr) {
      service_->metrics_->RecordRpc(RpcMethod::kImportFilter,
                                    static_cast<grpc::StatusCode>(status.code()),
                                    std::chrono::steady_clock::now() - start_);
    }
    Finish(ToGrpcStatus(status));
  }

  FilterServiceImpl* const service_;
  grpc::ServerContext context_;
  grpc::ServerContext* const ctx_ = &context_;
  v1::ImportFilterResponse response_;
  v1::ImportFilterResponse* const resp_ = &response_;
  grpc::ServerAsyncReader<grpc::ByteBuffer, grpc::ByteBuffer> reader_{&context_};
  CallQueues::Tag read_tag_{this, kRead};
  std::chrono::steady_clock::time_point start_;
  std::atomic<bool> cancelled_{false};
  // Since when a read has waited for the client (Ticks; 0: none is
  // pending), and whether the sweeper ended the call for it.
  std::atomic<int64_t> waiting_since_{0};
  std::atomic<bool> timed_out_{false};
  // Used by one step at a time (see the top of the file).
  bool holds_slot_ = false;
  uint64_t watch_ = 0;         // The sweeper's registration while the slot is held.
  TransferDisk::Claim claim_;  // The upload's disk space not written yet.
  uint64_t limit_ = 0;
  std::string name_;  // Empty until the first chunk.
  Caller caller_;
  std::optional<AuditedCall> audit_;  // With authentication on, once the name is known.
  uint64_t expected_ = 0;
  uint64_t received_ = 0;
  uint64_t chunks_ = 0;
  std::string path_;
  int fd_ = -1;
  grpc::ByteBuffer message_;     // The chunk being read, as sent.
  v1::ImportFilterChunk chunk_;  // And parsed.
};

void FilterServiceImpl::AddTransfers(CallQueues* queues) {
  queues->AddMethod([this](grpc::ServerCompletionQueue* cq, size_t queue,
                           int id) { ExportReactor::Post(this, id, cq, queue); },
                    1);
  queues->AddMethod([this](grpc::ServerCompletionQueue* cq, size_t queue,
                           int id) { ImportReactor::Post(this, id, cq, queue); },
                    1);
}

}  // namespace cuckoo::server
