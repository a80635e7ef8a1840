#include "server/resp/resp_server.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstring>
#include <deque>
#include <list>
#include <mutex>
#include <optional>
#include <thread>
#include <unordered_set>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "boost/asio/executor_work_guard.hpp"
#include "boost/asio/io_context.hpp"
#include "boost/asio/ip/tcp.hpp"
#include "boost/asio/post.hpp"
#include "boost/asio/steady_timer.hpp"
#include "boost/asio/write.hpp"

namespace cuckoo::server::resp {

namespace asio = boost::asio;
using tcp = boost::asio::ip::tcp;
using Clock = std::chrono::steady_clock;
using boost::system::error_code;

namespace {

// Commands parsed at once before running them; the rest of the buffer is
// parsed when these have run (a 1000-command pipeline still gets one write).
constexpr size_t kMaxBatchCommands = 1024;
// A Command whose argument vector grew past this gives the memory back.
constexpr size_t kKeepArgs = 4096;
// An output buffer larger than this is freed once written.
constexpr size_t kKeepOutputBytes = 1 << 20;
// The first read buffer; it grows to read_chunk when a read fills it.
constexpr size_t kInitialReadBytes = 16 << 10;
// How long a closing connection may take to flush its replies.
constexpr auto kCloseFlushTime = std::chrono::seconds(1);

constexpr std::string_view kShuttingDown = "-ERR cuckood is shutting down\r\n";
constexpr std::string_view kMaxClients = "-ERR max number of clients reached\r\n";
constexpr std::string_view kMaxUnauthenticated =
    "-ERR max number of unauthenticated clients reached: AUTH right after connecting, or try "
    "again later\r\n";
constexpr std::string_view kUnauthenticatedMemory =
    "-ERR unauthenticated clients memory limit: the connections that have not sent AUTH hold "
    "more than their share of --redis-client-memory, and this one the most; AUTH right after "
    "connecting\r\n";
// A connection's own objects (the Connection, its socket, Session, list
// node), counted in its memory beside its buffers.
constexpr size_t kConnectionBytes = 2048;
// What a command in flight is counted to hold in the handler, beyond its
// arguments' bytes: a copy of each argument (e.g. a key in a protobuf
// request) costs about this much more.
constexpr size_t kInFlightBytesPerArg = 48;

std::string FormatEndpoint(const tcp::endpoint& endpoint) {
  const asio::ip::address address = endpoint.address();
  if (address.is_v6()) return absl::StrCat("[", address.to_string(), "]:", endpoint.port());
  return absl::StrCat(address.to_string(), ":", endpoint.port());
}

}  // namespace

namespace internal {
class Connection;
// Why RespServer::Core chose to close a connection.
enum class EvictReason : uint8_t { kClientMemory, kMaxUnauthenticated, kUnauthenticatedMemory };
}  // namespace internal

// The state shared by the server, its threads and its connections. Kept
// alive by every connection (their sockets need the io_contexts), so a
// handler answering after the server is gone touches only live memory.
class RespServer::Core : public std::enable_shared_from_this<RespServer::Core> {
 public:
  // One I/O thread and the connections it owns.
  struct Worker {
    asio::io_context io{1};
    std::optional<asio::executor_work_guard<asio::io_context::executor_type>> guard;
    asio::steady_timer sweep{io};
    // Open connections of this thread; touched on this thread only.
    std::list<std::shared_ptr<internal::Connection>> connections;
    // Where closing connections' unread input goes.
    std::array<char, 4096> discard;
    std::thread thread;
    std::atomic<bool> done{false};
  };

  Core(const ServerOptions& options, CommandHandler* handler)
      : options(options),
        handler(handler),
        stall_timeout(absl::ToChronoNanoseconds(options.write_stall_timeout)),
        idle_timeout(absl::ToChronoNanoseconds(options.idle_timeout)) {
    const int n = options.threads > 0
                      ? options.threads
                      : std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
    for (int i = 0; i < n; ++i) workers.push_back(std::make_unique<Worker>());
    acceptor.emplace(workers[0]->io);
    retry.emplace(workers[0]->io);
  }

  absl::Status Listen();
  void Run();
  void Accept();
  void Sweep(Worker* worker);
  void CloseAll(Worker* worker, bool force);
  void Shutdown(absl::Duration drain);
  void DoShutdown(absl::Duration drain);
  void Closed(std::string_view reason) {
    connection_count.fetch_sub(1);
    if (options.on_close) options.on_close(reason);
  }
  // Past client_memory: picks the connections using the most until the
  // rest fits, and has their threads close them. Any thread.
  void Evict();
  // With auth_required, the caps on connections not authenticated yet make
  // room for the newest rather than refuse it (a flood of them must not
  // lock out a client about to send AUTH). DisplaceOldest: at
  // max_unauthenticated, has the oldest such connection closed ("max_
  // unauthenticated"); false if none could be chosen. DisplaceLargest:
  // past unauthenticated_memory, has those holding the most closed until
  // the rest fits ("unauthenticated_memory"). Any thread.
  bool DisplaceOldestUnauthenticated();
  void DisplaceLargestUnauthenticated();
  // The connection's thread: it authenticated (false) or RESET (true).
  void UnauthenticatedChanged(internal::Connection* c, bool unauthenticated);
  // The connection's thread: it was chosen by Displace* and authenticated
  // before it closed; it stays.
  void Undisplace(internal::Connection* c);
  void Register(internal::Connection* c);
  void Unregister(internal::Connection* c);
  // Under registry_mu: marks `c` chosen to close for `reason`, counting it
  // as `bytes`, and takes it out of `unauthenticated`.
  void MarkEvicting(internal::Connection* c, size_t bytes, internal::EvictReason reason);
  // Under registry_mu: from connections and what each holds, marks the
  // largest for `reason` until `total` less theirs is within `limit`.
  std::vector<std::shared_ptr<internal::Connection>> ChooseLargest(
      std::vector<std::pair<size_t, internal::Connection*>> by_size, int64_t total, int64_t limit,
      internal::EvictReason reason);
  // Has each one's thread close it (Connection::Evict).
  void PostEvict(std::vector<std::shared_ptr<internal::Connection>> victims);

  const ServerOptions options;
  CommandHandler* const handler;
  const std::chrono::nanoseconds stall_timeout;
  const std::chrono::nanoseconds idle_timeout;
  std::vector<std::unique_ptr<Worker>> workers;
  std::optional<tcp::acceptor> acceptor;
  std::optional<asio::steady_timer> retry;  // paces accepting again after an error
  size_t next_worker = 0;                   // on workers[0]'s thread
  std::string address;
  int port = 0;

  std::atomic<uint64_t> next_id{1};
  std::atomic<size_t> connection_count{0};
  std::atomic<int64_t> in_flight{0};
  // Memory (ServerOptions::client_memory): every connection's, and that of
  // the ones not authenticated yet; those counted; connections evicted.
  std::atomic<int64_t> client_bytes{0};
  std::atomic<int64_t> unauthenticated_bytes{0};
  std::atomic<size_t> unauthenticated_count{0};
  std::atomic<uint64_t> evicted{0};
  // Bytes of connections chosen for eviction and not closed yet.
  std::atomic<int64_t> eviction_bytes{0};
  // Every started connection not finalized yet, for Evict; those of them
  // not authenticated, oldest first, not chosen to close, for Displace*.
  std::mutex registry_mu;
  std::unordered_set<internal::Connection*> registry;
  std::list<internal::Connection*> unauthenticated;
  // Connections not authenticated chosen to close and not closed yet, and
  // their bytes (Displace*).
  std::atomic<size_t> displacing_count{0};
  std::atomic<int64_t> displacing_bytes{0};
  // Shutdown's phases: commands get the shutting-down error; connections are
  // being closed (a command in flight no longer holds one open); no more
  // posts to the threads (late replies are dropped).
  std::atomic<bool> shutting_down{false};
  std::atomic<bool> closing_all{false};
  std::atomic<bool> stopped{false};
  std::atomic<int> posting{0};   // Completion::Reply calls between checking `stopped` and posting
  std::once_flag shutdown_once;  // a second Shutdown waits for the first
  std::atomic<bool> acceptor_closed{false};
};

namespace internal {

namespace {
// The connection whose handler's Execute is running on this thread: a Reply
// for it is synchronous.
thread_local Connection* tl_executing = nullptr;
}  // namespace

// One client connection; lives on its worker's thread (see the top of
// resp_server.h for the loop). Owned by the worker's list while open, and by
// pending I/O handlers and handlers' Completions.
class Connection : public std::enable_shared_from_this<Connection> {
 public:
  using Core = RespServer::Core;

  Connection(std::shared_ptr<Core> core, Core::Worker* worker, tcp::socket socket,
             bool unauthenticated_counted)
      : core_(std::move(core)),
        worker_(worker),
        socket_(std::move(socket)),
        parser_(core_->options.limits),
        unauthenticated_counted_(unauthenticated_counted) {}

  ~Connection() {
    // Normally done when finalized; not for one the server dropped unstarted.
    if (registered_in_core_) core_->Unregister(this);
    if (unauthenticated_counted_) {
      core_->unauthenticated_count.fetch_sub(1);
      core_->unauthenticated_bytes.fetch_sub(static_cast<int64_t>(charged_));
    }
    core_->client_bytes.fetch_sub(static_cast<int64_t>(charged_));
  }

  // On the worker's thread.
  void Start() {
    worker_->connections.push_front(shared_from_this());
    registered_ = worker_->connections.begin();
    core_->Register(this);
    registered_in_core_ = true;
    error_code ec;
    socket_.set_option(tcp::no_delay(true), ec);
    const tcp::endpoint peer = socket_.remote_endpoint(ec);
    session_.peer = ec ? "?:0" : FormatEndpoint(peer);
    session_.id = core_->next_id.fetch_add(1);
    session_.connected_at = absl::Now();
    if (core_->closing_all.load()) {  // accepted just as the server shut down
      Close("shutdown");
      return;
    }
    last_input_ = unauthenticated_since_ = Clock::now();
    in_cap_ = std::min(kInitialReadBytes, std::max<size_t>(core_->options.read_chunk, 512));
    in_.reset(new char[in_cap_]);
    Process();
  }

  // Completion::Reply: the handler's answer, from any thread.
  void OnReply(std::shared_ptr<Connection> self, uint64_t seq, std::string bytes,
               std::function<void(Session*)> then) {
    if (tl_executing == this && seq == executing_seq_) {
      Slot& slot = slots_[seq - first_seq_];
      slot.ready = true;
      slot.bytes = std::move(bytes);
      slot.then = std::move(then);
      return;
    }
    Core& core = *core_;
    core.posting.fetch_add(1);
    if (!core.stopped.load()) {
      asio::post(worker_->io, [self = std::move(self), seq, bytes = std::move(bytes),
                               then = std::move(then)]() mutable {
        self->AsyncDone(seq, std::move(bytes), std::move(then));
      });
    }
    core.posting.fetch_sub(1);
  }

  // Completion::Applied.
  void OnApplied(uint64_t seq) {
    if (tl_executing != this || seq != executing_seq_) return;
    slots_[seq - first_seq_].applied = true;
  }

  // The periodic check of the timeouts, on the worker's thread.
  void Sweep(Clock::time_point now) {
    if (closed_) return;
    const ServerOptions& options = core_->options;
    if (close_after_flush_) {
      if (now >= close_deadline_) Close(reason_);
    } else if (writing_active_ && now - write_progress_ >= core_->stall_timeout &&
               core_->stall_timeout.count() > 0) {
      Close("slow_client");
    } else if (paused_ && options.output_soft_timeout > absl::ZeroDuration() &&
               now - paused_since_ >= absl::ToChronoNanoseconds(options.output_soft_timeout)) {
      Close("slow_client");
    } else if (unauthenticated_counted_ && options.auth_timeout > absl::ZeroDuration() &&
               now - unauthenticated_since_ >= absl::ToChronoNanoseconds(options.auth_timeout)) {
      Close("auth_timeout");
    } else if (core_->idle_timeout.count() > 0 && reading_ && unready_ == 0 &&
               now - last_input_ >= core_->idle_timeout) {
      Close("idle");
    }
  }

  // Shutdown: flush what is pending, then close (force: close now).
  void CloseForShutdown(bool force) {
    if (force) {
      Close("shutdown");
      MaybeFinalize();  // also one closed earlier, still waiting for a reply
      return;
    }
    CloseAfterFlush("shutdown");
  }

  // Core::Evict or Core::Displace* chose this connection, counting it as
  // evicted_bytes, for evict_reason (set under Core::registry_mu, read on
  // the connection's thread after).
  std::atomic<bool> evicting{false};
  size_t evicted_bytes = 0;
  EvictReason evict_reason = EvictReason::kClientMemory;
  // Its place in Core::unauthenticated while it is there (under
  // Core::registry_mu).
  std::list<Connection*>::iterator unauthenticated_pos;
  bool in_unauthenticated = false;
  asio::io_context& io() { return worker_->io; }
  // What Account last counted, for Core::Evict (from any thread).
  std::atomic<size_t> charged{0};

  // On the worker's thread: closes a connection Core::Evict chose. The
  // client gets an error saying why if nothing is half-written.
  void Evict() {
    if (closed_ || close_after_flush_) return;
    if (evict_reason != EvictReason::kClientMemory) {
      if (session_.authenticated) {  // in the meantime
        core_->Undisplace(this);
        return;
      }
      if (!writing_active_) {
        const std::string_view error = evict_reason == EvictReason::kMaxUnauthenticated
                                           ? kMaxUnauthenticated
                                           : kUnauthenticatedMemory;
        error_code ignored;
        socket_.non_blocking(true, ignored);
        socket_.write_some(asio::buffer(error), ignored);
      }
      Close(evict_reason == EvictReason::kMaxUnauthenticated ? "max_unauthenticated"
                                                             : "unauthenticated_memory");
      return;
    }
    core_->evicted.fetch_add(1, std::memory_order_relaxed);
    if (core_->options.on_evict) {
      core_->options.on_evict(
          absl::StrFormat("id=%u addr=%s name=%s tot-mem=%u", session_.id, session_.peer,
                          session_.name, charged_),
          static_cast<size_t>(std::max<int64_t>(0, core_->client_bytes.load())));
    }
    if (!writing_active_) {
      const std::string error = absl::StrFormat(
          "-ERR client memory limit: this connection held %u bytes and the Redis port's clients "
          "together more than their limit of %u bytes (--redis-client-memory), so the clients "
          "using the most were closed\r\n",
          charged_, core_->options.client_memory);
      error_code ignored;
      socket_.non_blocking(true, ignored);
      socket_.write_some(asio::buffer(error), ignored);
    }
    Close("client_memory");
  }

 private:
  // A command handed to the handler, until its reply's turn to go out.
  struct Slot {
    bool ready = false;    // replied
    bool applied = false;  // Completion::Applied
    size_t arg_bytes = 0;  // counted while not replied
    std::string bytes;
    std::function<void(Session*)> then;
  };

  // Runs commands and reads until it has to wait (for a read, a reply in
  // flight, or the client to take its output), then writes what it has.
  void Process() {
    // After QUIT (close_after_reply) nothing more runs.
    while (!closed_ && !close_after_flush_ && !session_.close_after_reply && !reading_ &&
           !Blocked()) {
      if (PendingOutput() >= OutputLimit()) {
        if (!paused_) paused_since_ = Clock::now();
        paused_ = true;  // OnWrite resumes
        break;
      }
      if (next_cmd_ < n_cmds_) {
        RunNext();
        continue;
      }
      if (parse_error_) {
        if (!slots_.empty()) break;  // the replies before it first
        absl::StrAppend(&out_, "-", error_, "\r\n");
        CloseAfterFlush("protocol_error");
        break;
      }
      if (ParseBatch()) continue;
      if (half_closed_) break;  // AsyncDone closes once the replies are out
      StartRead();
    }
    Account();  // (before the replies go: a client that read one sees it counted)
    Flush();
  }

  // Whether the next command must wait: one in flight that did not say
  // Applied, or too many (or too large) that did.
  bool Blocked() const {
    return unapplied_ > 0 || queued_then_ > 0 ||
           unready_ >= std::max<size_t>(core_->options.max_pipelined, 1) ||
           (unready_ > 0 && unready_arg_bytes_ >= core_->options.max_pipelined_bytes);
  }

  size_t OutputLimit() const {
    return unauthenticated_counted_ ? std::min(core_->options.output_soft_limit,
                                               core_->options.unauthenticated_output_limit)
                                    : core_->options.output_soft_limit;
  }

  // Written, being written, and replies waiting for an earlier one.
  size_t PendingOutput() const {
    return out_.size() + (writing_.size() - written_) + queued_bytes_;
  }

  void RunNext() {
    if (core_->shutting_down.load(std::memory_order_relaxed)) {
      Emit(kShuttingDown);
      ++next_cmd_;
      return;
    }
    const absl::Span<const Command> commands(commands_.data() + next_cmd_, n_cmds_ - next_cmd_);
    const uint64_t seq = first_seq_ + slots_.size();
    slots_.emplace_back();
    executing_seq_ = seq;
    tl_executing = this;
    size_t took = core_->handler->Execute(&session_, commands, Completion(shared_from_this(), seq));
    tl_executing = nullptr;
    took = std::clamp<size_t>(took, 1, commands.size());
    Slot& slot = slots_.back();
    if (slot.ready) {
      Queue(slot);
      DrainReplies();
    } else {
      for (size_t i = 0; i < took; ++i) {
        for (std::string_view a : commands[i].args)
          slot.arg_bytes += a.size() + kInFlightBytesPerArg;
      }
      unready_arg_bytes_ += slot.arg_bytes;
      ++unready_;
      if (!slot.applied) ++unapplied_;
      core_->in_flight.fetch_add(1);
    }
    next_cmd_ += took;
  }

  // A reply of the server's own (not a handler's), in its turn.
  void Emit(std::string_view bytes) {
    if (slots_.empty()) {
      out_.append(bytes);
      return;
    }
    Slot& slot = slots_.emplace_back();
    slot.ready = true;
    slot.bytes = std::string(bytes);
    queued_bytes_ += slot.bytes.size();
  }

  // A reply came: counted until its turn. One with a `then` (which may
  // change the session, e.g. close after it) holds back the next commands
  // until it has run.
  void Queue(const Slot& slot) {
    queued_bytes_ += slot.bytes.size();
    if (slot.then) ++queued_then_;
  }

  // Moves the replies whose turn has come to the output.
  void DrainReplies() {
    while (!slots_.empty() && slots_.front().ready) {
      Slot slot = std::move(slots_.front());
      slots_.pop_front();
      ++first_seq_;
      queued_bytes_ -= slot.bytes.size();
      if (slot.then) --queued_then_;
      Apply(slot.bytes, slot.then);
    }
    if (session_.close_after_reply && slots_.empty() && !closed_) CloseAfterFlush("quit");
  }

  // Parses the complete commands at the front of the unparsed input; true
  // if there is something to run (or a protocol error to answer).
  bool ParseBatch() {
    if (big_args_) {
      big_args_ = false;
      for (Command& c : commands_) {
        if (c.args.capacity() > kKeepArgs) {
          args_bytes_ -= c.args.capacity() * sizeof(std::string_view);
          std::vector<std::string_view>().swap(c.args);
        }
      }
    }
    n_cmds_ = next_cmd_ = 0;
    // Every command parsed before has run: the parser's own copies of
    // unescaped inline arguments can go.
    parser_.ReleaseArgs();
    while (n_cmds_ < kMaxBatchCommands && in_begin_ < in_end_) {
      const ServerOptions& options = core_->options;
      const ParserLimits& limits = options.auth_required && !session_.authenticated
                                       ? options.unauthenticated_limits
                                       : options.limits;
      if (!SameLimits(parser_.limits(), limits)) parser_.set_limits(limits);
      if (n_cmds_ == commands_.size()) {
        commands_.emplace_back();
        args_bytes_ += sizeof(Command);
      }
      std::vector<std::string_view>& args = commands_[n_cmds_].args;
      const size_t had = args.capacity();
      args.clear();
      size_t consumed = 0;
      const Parser::Result r = parser_.Parse(
          std::string_view(in_.get() + in_begin_, in_end_ - in_begin_), &consumed, &args, &error_);
      args_bytes_ += (args.capacity() - had) * sizeof(std::string_view);
      if (r == Parser::Result::kNeedMore) break;
      if (r == Parser::Result::kError) {
        parse_error_ = true;
        break;
      }
      in_begin_ += consumed;
      if (args.capacity() > kKeepArgs) big_args_ = true;
      if (!args.empty()) ++n_cmds_;  // "*0", an empty line: nothing to run
    }
    return n_cmds_ > 0 || parse_error_;
  }

  static bool SameLimits(const ParserLimits& a, const ParserLimits& b) {
    return a.max_bulk_bytes == b.max_bulk_bytes && a.max_args == b.max_args &&
           a.max_inline_bytes == b.max_inline_bytes && a.max_command_bytes == b.max_command_bytes;
  }

  // Makes room for the rest of the partial command (or the next ones) and
  // reads. Only when no command that did not say Applied is in flight: its
  // views into the buffer must not move.
  void StartRead() {
    const ServerOptions& options = core_->options;
    if (in_begin_ == in_end_) in_begin_ = in_end_ = 0;
    const size_t have = in_end_ - in_begin_;
    const size_t hint = parser_.pending_hint();
    const size_t chunk = std::max<size_t>(options.read_chunk, 512);
    const ParserLimits& limits = parser_.limits();
    const size_t max_cap = std::max(limits.max_command_bytes, limits.max_inline_bytes) + chunk;
    size_t cap = in_cap_;
    if (cap > chunk && have <= chunk / 2 && hint <= chunk) cap = chunk;  // after a big command
    if (hint > cap) {
      cap = std::min(hint, max_cap);
    } else if (have == cap || (last_read_filled_ && cap < chunk)) {
      cap = std::min(std::max(cap * 2, chunk), max_cap);
    }
    cap = std::max(cap, have + 1);
    if (cap > in_cap_ && !Admit(cap - in_cap_)) return;
    if (cap != in_cap_) {
      std::unique_ptr<char[]> bigger(new char[cap]);
      std::memcpy(bigger.get(), in_.get() + in_begin_, have);
      in_ = std::move(bigger);
      in_cap_ = cap;
      in_begin_ = 0;
      in_end_ = have;
      Account();
    } else if (in_begin_ > 0 && (in_cap_ - in_end_ < in_cap_ / 2 || in_begin_ + hint > in_cap_)) {
      std::memmove(in_.get(), in_.get() + in_begin_, have);
      in_begin_ = 0;
      in_end_ = have;
    }
    reading_ = true;
    socket_.async_read_some(
        asio::buffer(in_.get() + in_end_, in_cap_ - in_end_),
        [self = shared_from_this()](error_code ec, size_t n) { self->OnRead(ec, n); });
  }

  void OnRead(error_code ec, size_t n) {
    reading_ = false;
    if (closed_) return;
    if (close_after_flush_) {
      if (ec) {
        if (lingering_ || ec != asio::error::eof) Close(reason_);
        return;
      }
      if (lingering_) StartDiscardRead();
      return;
    }
    if (ec) {
      if (ec == asio::error::eof && (PendingOutput() > 0 || !slots_.empty())) {
        // A client that half-closed still gets its replies.
        half_closed_ = true;
        if (slots_.empty()) CloseAfterFlush("eof");
      } else {
        Close(ec == asio::error::eof ? "eof" : "error");
      }
      return;
    }
    in_end_ += n;
    last_read_filled_ = in_end_ == in_cap_;
    last_input_ = Clock::now();
    Process();
  }

  // The handler's answer, posted from another thread.
  void AsyncDone(uint64_t seq, std::string bytes, std::function<void(Session*)> then) {
    if (finalized_ || seq < first_seq_ || seq - first_seq_ >= slots_.size()) return;
    Slot& slot = slots_[seq - first_seq_];
    if (slot.ready) return;
    slot.ready = true;
    slot.bytes = std::move(bytes);
    slot.then = std::move(then);
    Queue(slot);
    unready_arg_bytes_ -= slot.arg_bytes;
    --unready_;
    if (!slot.applied) --unapplied_;
    core_->in_flight.fetch_sub(1);
    DrainReplies();
    if (closed_) {
      MaybeFinalize();
      return;
    }
    if (half_closed_ && slots_.empty() && !close_after_flush_) {
      CloseAfterFlush("eof");
      return;
    }
    Process();
  }

  void Apply(const std::string& bytes, const std::function<void(Session*)>& then) {
    if (then) then(&session_);
    if (!lingering_ && !closed_) out_.append(bytes);
  }

  // Writes the output gathered so far, unless a write is in progress (its
  // completion writes what came meanwhile).
  void Flush() {
    if (writing_active_ || out_.empty() || closed_) return;
    writing_.clear();
    writing_.swap(out_);
    written_ = 0;
    writing_active_ = true;
    write_progress_ = Clock::now();
    WriteSome();
  }

  void WriteSome() {
    socket_.async_write_some(
        asio::buffer(writing_.data() + written_, writing_.size() - written_),
        [self = shared_from_this()](error_code ec, size_t n) { self->OnWrite(ec, n); });
  }

  void OnWrite(error_code ec, size_t n) {
    if (closed_) {
      writing_active_ = false;
      std::string().swap(writing_);  // the write that held it has ended
      Account();
      return;
    }
    if (ec) {
      writing_active_ = false;
      Close("error");
      return;
    }
    written_ += n;
    write_progress_ = Clock::now();
    if (written_ < writing_.size()) {
      WriteSome();
      return;
    }
    writing_active_ = false;
    writing_.clear();
    written_ = 0;
    if (writing_.capacity() > kKeepOutputBytes) std::string().swap(writing_);
    if (close_after_flush_) {
      if (!out_.empty()) {
        Flush();
      } else {
        FinishGraceful();
      }
      Account();
      return;
    }
    if (paused_ && PendingOutput() < OutputLimit()) {
      paused_ = false;
      Process();  // flushes and counts too
      return;
    }
    Flush();
    Account();
  }

  // Stops running commands; closes once the output is written (bounded by
  // kCloseFlushTime, checked by the sweep).
  void CloseAfterFlush(std::string_view reason) {
    if (close_after_flush_ || closed_) return;
    close_after_flush_ = true;
    reason_ = std::string(reason);
    close_deadline_ = Clock::now() + kCloseFlushTime;
    Flush();
    if (!writing_active_) FinishGraceful();
  }

  // Everything written: our FIN, then the client's unread input is read and
  // dropped until it closes too (or the deadline), so that closing with
  // unread input does not reset the connection and destroy the last replies
  // before the client reads them.
  void FinishGraceful() {
    if (lingering_ || closed_) return;
    lingering_ = true;
    error_code ignored;
    socket_.shutdown(tcp::socket::shutdown_send, ignored);
    if (!reading_) StartDiscardRead();
  }

  void StartDiscardRead() {
    reading_ = true;
    socket_.async_read_some(asio::buffer(worker_->discard),
                            [self = shared_from_this()](error_code ec, size_t) {
                              self->reading_ = false;
                              if (self->closed_) return;
                              if (ec) {
                                self->Close(self->reason_);
                              } else {
                                self->StartDiscardRead();
                              }
                            });
  }

  void Close(std::string_view reason) {
    if (closed_) return;
    closed_ = true;
    if (!close_after_flush_) reason_ = std::string(reason);
    error_code ignored;
    socket_.close(ignored);
    // What is not written now never will be; what a pending write holds
    // goes when that write ends (OnWrite).
    std::string().swap(out_);
    MaybeFinalize();
    Account();
  }

  // Once closed and no command in flight (or the server is closing every
  // connection): tells the handler and the metrics, leaves the worker's
  // list and gives its memory back. The caller holds a reference.
  void MaybeFinalize() {
    if (finalized_ || !closed_) return;
    if (unready_ > 0 && !core_->closing_all.load()) return;
    finalized_ = true;
    if (unready_ > 0) core_->in_flight.fetch_sub(static_cast<int64_t>(unready_));
    const bool views_in_use = unapplied_ > 0;  // a handler may still read its args
    unready_ = unapplied_ = 0;
    unready_arg_bytes_ = 0;
    core_->handler->Closed(&session_);
    core_->Unregister(this);
    registered_in_core_ = false;
    // The memory goes now, not when the last reference does (a handler's
    // Completion may keep this object long after).
    std::deque<Slot>().swap(slots_);
    queued_bytes_ = queued_then_ = 0;
    if (!views_in_use) {
      std::vector<Command>().swap(commands_);
      in_.reset();
      in_cap_ = in_begin_ = in_end_ = 0;
      parser_ = Parser(core_->options.limits);
    }
    std::string().swap(out_);
    std::string().swap(error_);
    for (std::string* text :
         {&session_.name, &session_.lib_name, &session_.lib_version, &session_.last_command}) {
      std::string().swap(*text);
    }
    if (evicting.load()) {
      core_->eviction_bytes.fetch_sub(static_cast<int64_t>(evicted_bytes));
      if (evict_reason != EvictReason::kClientMemory) {
        core_->displacing_count.fetch_sub(1);
        core_->displacing_bytes.fetch_sub(static_cast<int64_t>(evicted_bytes));
      }
    }
    Account();
    // Counted as a connection until its memory is given back: one that no
    // longer counts holds none (connections() 0 means client_memory() 0).
    core_->Closed(reason_);
    worker_->connections.erase(registered_);
  }

  // What this connection holds now (see the top of resp_server.h).
  size_t MemoryBytes() const {
    if (finalized_) return 0;
    return kConnectionBytes + in_cap_ + args_bytes_ + parser_.MemoryBytes() + out_.capacity() +
           writing_.capacity() + error_.capacity() + session_.name.capacity() +
           session_.lib_name.capacity() + session_.lib_version.capacity() +
           session_.token.capacity() + session_.last_command.capacity() +
           slots_.size() * sizeof(Slot) + queued_bytes_ + unready_arg_bytes_;
  }

  // Counts MemoryBytes (and the authentication state) in the server's
  // totals; evicts past client_memory and closes an unauthenticated
  // connection past unauthenticated_memory.
  void Account() { Charge(MemoryBytes()); }

  // Before growing by `extra` bytes: false (and closed) if this connection
  // may not.
  bool Admit(size_t extra) {
    Charge(MemoryBytes() + extra);
    if (closed_) return false;
    // Acquire: Core::MarkEvicting's evict_reason and evicted_bytes.
    if (evicting.load()) {
      Evict();  // which keeps one that authenticated since it was chosen
      if (closed_ || close_after_flush_ || evicting.load()) return false;
    }
    return true;
  }

  void Charge(size_t bytes) {
    const int64_t delta = static_cast<int64_t>(bytes) - static_cast<int64_t>(charged_);
    charged_ = bytes;
    charged.store(bytes, std::memory_order_relaxed);
    Core& core = *core_;
    const int64_t total = core.client_bytes.fetch_add(delta, std::memory_order_relaxed) + delta;
    const bool unauthenticated =
        core.options.auth_required && !session_.authenticated && !finalized_;
    if (unauthenticated != unauthenticated_counted_) {
      unauthenticated_counted_ = unauthenticated;
      if (unauthenticated) {  // RESET
        core.unauthenticated_count.fetch_add(1);
        core.unauthenticated_bytes.fetch_add(static_cast<int64_t>(bytes));
        unauthenticated_since_ = Clock::now();
      } else {
        core.unauthenticated_count.fetch_sub(1);
        core.unauthenticated_bytes.fetch_sub(static_cast<int64_t>(bytes) - delta);
      }
      core.UnauthenticatedChanged(this, unauthenticated);
    } else if (unauthenticated && delta != 0) {
      const int64_t together =
          core.unauthenticated_bytes.fetch_add(delta, std::memory_order_relaxed) + delta;
      if (delta > 0 &&
          together - core.displacing_bytes.load() >
              static_cast<int64_t>(core.options.unauthenticated_memory) &&
          !closed_) {
        // The largest go, which may be this one (Admit then closes it).
        core.DisplaceLargestUnauthenticated();
      }
    }
    if (delta > 0 && core.options.client_memory > 0 &&
        total > static_cast<int64_t>(core.options.client_memory)) {
      core.Evict();
    }
  }

  const std::shared_ptr<Core> core_;
  Core::Worker* const worker_;
  tcp::socket socket_;
  std::list<std::shared_ptr<Connection>>::iterator registered_;
  bool registered_in_core_ = false;
  Session session_;
  Parser parser_;

  // Input: [in_begin_, in_end_) not parsed yet; parsed commands' views
  // point before in_begin_.
  std::unique_ptr<char[]> in_;
  size_t in_cap_ = 0;
  size_t in_begin_ = 0;
  size_t in_end_ = 0;
  bool last_read_filled_ = false;

  // Parsed commands: [next_cmd_, n_cmds_) still to run. Reused.
  std::vector<Command> commands_;
  size_t args_bytes_ = 0;  // their objects and argument vectors
  size_t n_cmds_ = 0;
  size_t next_cmd_ = 0;
  bool big_args_ = false;
  bool parse_error_ = false;  // after the parsed commands
  std::string error_;

  // Commands handed to the handler whose replies have not gone to out_ yet,
  // in order; slots_[0] is command first_seq_. The one being executed.
  std::deque<Slot> slots_;
  uint64_t first_seq_ = 0;
  uint64_t executing_seq_ = 0;
  size_t unready_ = 0;            // slots not replied
  size_t unapplied_ = 0;          // of them, not Applied (0 or 1)
  size_t unready_arg_bytes_ = 0;  // their Slot::arg_bytes
  size_t queued_bytes_ = 0;       // replied slots' bytes
  size_t queued_then_ = 0;        // replied slots with a `then`

  // Output: out_ gathers replies while writing_ is being written.
  std::string out_;
  std::string writing_;
  size_t written_ = 0;

  // Memory counted (Account) and the authentication state counted with it.
  size_t charged_ = 0;
  bool unauthenticated_counted_;

  bool reading_ = false;
  bool writing_active_ = false;
  bool paused_ = false;
  bool half_closed_ = false;
  bool close_after_flush_ = false;
  bool lingering_ = false;
  bool closed_ = false;
  bool finalized_ = false;
  std::string reason_;
  Clock::time_point last_input_;
  Clock::time_point write_progress_;
  Clock::time_point close_deadline_;
  Clock::time_point paused_since_;
  Clock::time_point unauthenticated_since_;
};

}  // namespace internal

void Completion::Reply(std::string bytes, std::function<void(Session*)> then) {
  std::shared_ptr<internal::Connection> c = std::move(connection_);
  if (c == nullptr) return;  // a second Reply on this handle
  internal::Connection* raw = c.get();
  raw->OnReply(std::move(c), seq_, std::move(bytes), std::move(then));
}

void Completion::Applied() {
  if (connection_ != nullptr) connection_->OnApplied(seq_);
}

absl::Status RespServer::Core::Listen() {
  const std::string& listen = options.listen;
  const size_t colon = listen.rfind(':');
  if (colon == std::string::npos) {
    return absl::InvalidArgumentError(
        absl::StrFormat("RESP listen address \"%s\" is not host:port", listen));
  }
  std::string host = listen.substr(0, colon);
  const std::string port_text = listen.substr(colon + 1);
  if (port_text.empty() || port_text.size() > 5 ||
      !std::all_of(port_text.begin(), port_text.end(),
                   [](char c) { return c >= '0' && c <= '9'; }) ||
      std::stoi(port_text) > 65535) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "RESP listen address \"%s\": port \"%s\" is not a number 0..65535", listen, port_text));
  }
  if (!host.empty() && host.front() == '[') {
    if (host.size() < 2 || host.back() != ']') {
      return absl::InvalidArgumentError(
          absl::StrFormat("RESP listen address \"%s\": unbalanced '[' in the host", listen));
    }
    host = host.substr(1, host.size() - 2);
  } else if (host.find(':') != std::string::npos) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "RESP listen address \"%s\": an IPv6 host must be in brackets, e.g. [::1]:6379", listen));
  }
  if (host.empty()) host = "0.0.0.0";
  error_code ec;
  tcp::resolver resolver(workers[0]->io);
  tcp::resolver::results_type endpoints = resolver.resolve(
      host, port_text, tcp::resolver::passive | tcp::resolver::numeric_service, ec);
  if (ec || endpoints.empty()) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "RESP listen address \"%s\": cannot resolve \"%s\": %s", listen, host, ec.message()));
  }
  const tcp::endpoint endpoint = endpoints.begin()->endpoint();
  auto fail = [&](std::string_view what) {
    return absl::UnavailableError(
        absl::StrFormat("cannot listen on RESP address %s: %s: %s", listen, what, ec.message()));
  };
  if (acceptor->open(endpoint.protocol(), ec); ec) return fail("socket");
  if (acceptor->set_option(asio::socket_base::reuse_address(true), ec); ec) {
    return fail("SO_REUSEADDR");
  }
  if (acceptor->bind(endpoint, ec); ec) return fail("bind");
  if (acceptor->listen(options.listen_backlog, ec); ec) return fail("listen");
  const tcp::endpoint bound = acceptor->local_endpoint(ec);
  if (ec) return fail("getsockname");
  port = bound.port();
  address = FormatEndpoint(bound);
  return absl::OkStatus();
}

void RespServer::Core::Run() {
  Accept();
  for (auto& w : workers) {
    w->guard.emplace(w->io.get_executor());
    Sweep(w.get());
    w->thread = std::thread([w = w.get()] {
      w->io.run();
      w->done.store(true);
    });
  }
}

void RespServer::Core::Accept() {
  Worker* const worker = workers[next_worker].get();
  next_worker = (next_worker + 1) % workers.size();
  acceptor->async_accept(worker->io, [this, worker](error_code ec, tcp::socket socket) {
    if (ec == asio::error::operation_aborted || !acceptor->is_open()) return;
    if (ec) {
      // E.g. out of file descriptors: try again shortly rather than spin.
      retry->expires_after(std::chrono::milliseconds(100));
      retry->async_wait([this](error_code wait_ec) {
        if (!wait_ec) Accept();
      });
      return;
    }
    if (options.on_connect) options.on_connect();
    auto refuse = [&](std::string_view error, std::string_view reason) {
      // As Redis: the error, then close. It fits the socket buffer.
      error_code ignored;
      socket.non_blocking(true, ignored);
      socket.write_some(asio::buffer(error), ignored);
      socket.shutdown(tcp::socket::shutdown_send, ignored);
      socket.close(ignored);
      if (options.on_close) options.on_close(reason);
    };
    if (connection_count.load() >= options.max_connections) {
      refuse(kMaxClients, "max_clients");
    } else if (options.auth_required &&
               static_cast<int64_t>(unauthenticated_count.load()) -
                       static_cast<int64_t>(displacing_count.load()) >=
                   static_cast<int64_t>(options.max_unauthenticated) &&
               !DisplaceOldestUnauthenticated()) {
      // Those not authenticated are all accepted and not started yet.
      refuse(kMaxUnauthenticated, "max_unauthenticated");
    } else {
      connection_count.fetch_add(1);
      if (options.auth_required) unauthenticated_count.fetch_add(1);
      auto connection = std::make_shared<internal::Connection>(
          shared_from_this(), worker, std::move(socket), options.auth_required);
      asio::post(worker->io, [connection] { connection->Start(); });
    }
    Accept();
  });
}

void RespServer::Core::MarkEvicting(internal::Connection* c, size_t bytes,
                                    internal::EvictReason reason) {
  c->evicted_bytes = bytes;
  c->evict_reason = reason;
  c->evicting.store(true);
  eviction_bytes.fetch_add(static_cast<int64_t>(bytes));
  if (reason != internal::EvictReason::kClientMemory) {
    displacing_count.fetch_add(1);
    displacing_bytes.fetch_add(static_cast<int64_t>(bytes));
  }
  if (c->in_unauthenticated) {
    unauthenticated.erase(c->unauthenticated_pos);
    c->in_unauthenticated = false;
  }
}

void RespServer::Core::Evict() {
  const int64_t limit = static_cast<int64_t>(options.client_memory);
  if (client_bytes.load() - eviction_bytes.load() <= limit) return;
  std::vector<std::shared_ptr<internal::Connection>> victims;
  {
    std::unique_lock<std::mutex> lock(registry_mu, std::try_to_lock);
    if (!lock.owns_lock()) return;  // another thread is at it
    const int64_t total = client_bytes.load() - eviction_bytes.load();
    if (total <= limit) return;
    std::vector<std::pair<size_t, internal::Connection*>> by_size;
    by_size.reserve(registry.size());
    for (internal::Connection* c : registry) {
      if (!c->evicting.load()) by_size.emplace_back(c->charged.load(), c);
    }
    victims = ChooseLargest(std::move(by_size), total, limit, internal::EvictReason::kClientMemory);
  }
  PostEvict(std::move(victims));
}

std::vector<std::shared_ptr<internal::Connection>> RespServer::Core::ChooseLargest(
    std::vector<std::pair<size_t, internal::Connection*>> by_size, int64_t total, int64_t limit,
    internal::EvictReason reason) {
  std::sort(by_size.begin(), by_size.end(),
            [](const auto& a, const auto& b) { return a.first > b.first; });
  std::vector<std::shared_ptr<internal::Connection>> victims;
  for (const auto& [bytes, c] : by_size) {
    if (total <= limit) break;
    std::shared_ptr<internal::Connection> victim = c->weak_from_this().lock();
    if (victim == nullptr) continue;  // being destroyed
    MarkEvicting(c, bytes, reason);
    total -= static_cast<int64_t>(bytes);
    victims.push_back(std::move(victim));
  }
  return victims;
}

void RespServer::Core::PostEvict(std::vector<std::shared_ptr<internal::Connection>> victims) {
  for (auto& v : victims) {
    asio::io_context& io = v->io();
    asio::post(io, [v = std::move(v)] { v->Evict(); });
  }
}

void RespServer::Core::Register(internal::Connection* c) {
  std::lock_guard<std::mutex> lock(registry_mu);
  registry.insert(c);
  // Counted unauthenticated since it was accepted (Accept).
  if (options.auth_required) {
    c->unauthenticated_pos = unauthenticated.insert(unauthenticated.end(), c);
    c->in_unauthenticated = true;
  }
}

void RespServer::Core::Unregister(internal::Connection* c) {
  std::lock_guard<std::mutex> lock(registry_mu);
  registry.erase(c);
  if (c->in_unauthenticated) {
    unauthenticated.erase(c->unauthenticated_pos);
    c->in_unauthenticated = false;
  }
}

void RespServer::Core::UnauthenticatedChanged(internal::Connection* c, bool now_unauthenticated) {
  std::lock_guard<std::mutex> lock(registry_mu);
  if (now_unauthenticated) {
    // RESET: the newest. (A finalized connection is never unauthenticated.)
    if (!c->in_unauthenticated && !c->evicting.load()) {
      c->unauthenticated_pos = unauthenticated.insert(unauthenticated.end(), c);
      c->in_unauthenticated = true;
    }
  } else if (c->in_unauthenticated) {
    unauthenticated.erase(c->unauthenticated_pos);
    c->in_unauthenticated = false;
  }
}

void RespServer::Core::Undisplace(internal::Connection* c) {
  std::lock_guard<std::mutex> lock(registry_mu);
  if (!c->evicting.load()) return;
  eviction_bytes.fetch_sub(static_cast<int64_t>(c->evicted_bytes));
  displacing_count.fetch_sub(1);
  displacing_bytes.fetch_sub(static_cast<int64_t>(c->evicted_bytes));
  c->evicting.store(false);
}

bool RespServer::Core::DisplaceOldestUnauthenticated() {
  std::shared_ptr<internal::Connection> victim;
  {
    std::lock_guard<std::mutex> lock(registry_mu);
    for (internal::Connection* c : unauthenticated) {
      victim = c->weak_from_this().lock();
      if (victim == nullptr) continue;  // being destroyed
      MarkEvicting(c, c->charged.load(), internal::EvictReason::kMaxUnauthenticated);
      break;
    }
  }
  if (victim == nullptr) return false;
  asio::io_context& io = victim->io();
  asio::post(io, [v = std::move(victim)] { v->Evict(); });
  return true;
}

void RespServer::Core::DisplaceLargestUnauthenticated() {
  const int64_t limit = static_cast<int64_t>(options.unauthenticated_memory);
  std::vector<std::shared_ptr<internal::Connection>> victims;
  {
    std::lock_guard<std::mutex> lock(registry_mu);
    const int64_t total = unauthenticated_bytes.load() - displacing_bytes.load();
    if (total <= limit) return;
    std::vector<std::pair<size_t, internal::Connection*>> by_size;
    by_size.reserve(unauthenticated.size());
    for (internal::Connection* c : unauthenticated) by_size.emplace_back(c->charged.load(), c);
    victims = ChooseLargest(std::move(by_size), total, limit,
                            internal::EvictReason::kUnauthenticatedMemory);
  }
  PostEvict(std::move(victims));
}

void RespServer::Core::Sweep(Worker* worker) {
  absl::Duration interval = absl::Milliseconds(250);
  if (options.idle_timeout > absl::ZeroDuration()) {
    interval = std::min(interval, options.idle_timeout / 10);
  }
  for (absl::Duration timeout :
       {options.write_stall_timeout, options.output_soft_timeout, options.auth_timeout}) {
    if (timeout > absl::ZeroDuration()) interval = std::min(interval, timeout / 10);
  }
  interval = std::max(interval, absl::Milliseconds(10));
  worker->sweep.expires_after(absl::ToChronoNanoseconds(interval));
  worker->sweep.async_wait([this, worker](error_code ec) {
    if (ec || stopped.load()) return;
    const Clock::time_point now = Clock::now();
    for (auto it = worker->connections.begin(); it != worker->connections.end();) {
      std::shared_ptr<internal::Connection> c = *it++;  // Sweep may erase it from the list
      c->Sweep(now);
    }
    if (options.client_memory > 0) Evict();  // in case a trigger was missed
    Sweep(worker);
  });
}

void RespServer::Core::CloseAll(Worker* worker, bool force) {
  for (auto it = worker->connections.begin(); it != worker->connections.end();) {
    std::shared_ptr<internal::Connection> c = *it++;
    c->CloseForShutdown(force);
  }
}

void RespServer::Core::Shutdown(absl::Duration drain) {
  std::call_once(shutdown_once, [&] { DoShutdown(drain); });
}

void RespServer::Core::DoShutdown(absl::Duration drain) {
  auto wait_until = [](Clock::time_point deadline, auto done) {
    while (!done() && Clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  };
  // New commands get the shutting-down error; no new connections.
  shutting_down.store(true);
  asio::post(workers[0]->io, [this] {
    error_code ignored;
    acceptor->close(ignored);
    retry->cancel();
    acceptor_closed.store(true);
  });
  wait_until(Clock::now() + std::chrono::seconds(1), [&] { return acceptor_closed.load(); });
  // Commands in flight complete and are answered.
  wait_until(Clock::now() + absl::ToChronoNanoseconds(std::max(drain, absl::ZeroDuration())),
             [&] { return in_flight.load() <= 0; });
  // Every connection flushes and closes.
  closing_all.store(true);
  for (auto& w : workers) asio::post(w->io, [this, w = w.get()] { CloseAll(w, false); });
  wait_until(Clock::now() + kCloseFlushTime + std::chrono::milliseconds(200),
             [&] { return connection_count.load() == 0; });
  // No more posts from late replies; what is left closes now; the threads
  // return once their io_contexts have nothing left to do.
  stopped.store(true);
  while (posting.load() > 0) std::this_thread::yield();
  for (auto& w : workers) {
    asio::post(w->io, [this, w = w.get()] {
      CloseAll(w, true);
      w->sweep.cancel();
    });
    w->guard.reset();
  }
  wait_until(Clock::now() + std::chrono::seconds(2), [&] {
    return std::all_of(workers.begin(), workers.end(), [](auto& w) { return w->done.load(); });
  });
  for (auto& w : workers) {
    w->io.stop();  // (a no-op unless something still had work after 2 s)
    if (w->thread.joinable()) w->thread.join();
  }
  // Connections still referenced here only (the cycle through Core).
  for (auto& w : workers) w->connections.clear();
}

RespServer::RespServer(std::shared_ptr<Core> core) : core_(std::move(core)) {}

RespServer::~RespServer() { Shutdown(absl::ZeroDuration()); }

absl::StatusOr<std::unique_ptr<RespServer>> RespServer::Start(const ServerOptions& options,
                                                              CommandHandler* handler) {
  auto core = std::make_shared<Core>(options, handler);
  if (absl::Status s = core->Listen(); !s.ok()) return s;
  core->Run();
  return std::unique_ptr<RespServer>(new RespServer(std::move(core)));
}

std::string RespServer::address() const { return core_->address; }
int RespServer::port() const { return core_->port; }
size_t RespServer::connections() const { return core_->connection_count.load(); }
size_t RespServer::commands_in_flight() const {
  return static_cast<size_t>(std::max<int64_t>(0, core_->in_flight.load()));
}
size_t RespServer::client_memory() const {
  return static_cast<size_t>(std::max<int64_t>(0, core_->client_bytes.load()));
}
uint64_t RespServer::evicted_clients() const { return core_->evicted.load(); }
size_t RespServer::unauthenticated_connections() const {
  return core_->unauthenticated_count.load();
}
void RespServer::Shutdown(absl::Duration drain) { core_->Shutdown(drain); }

}  // namespace cuckoo::server::resp
