// A connection's loop: read, parse, run in order, reply in order, write,
// close (see the top of resp_server.h), and the memory it counts.
#include <algorithm>
#include <cstring>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "boost/asio/post.hpp"
#include "boost/asio/write.hpp"
#include "server/resp/resp_server_internal.h"
#include "server/resp/resp_tls.h"

namespace cuckoo::server::resp {

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

constexpr std::string_view kShuttingDown = "-ERR cuckood is shutting down\r\n";
// A connection's own objects (the Connection, its socket, Session, list
// node), counted in its memory beside its buffers.
constexpr size_t kConnectionBytes = 2048;
// What a command in flight is counted to hold in the handler, beyond its
// arguments' bytes: a copy of each argument (e.g. a key in a protobuf
// request) costs about this much more.
constexpr size_t kInFlightBytesPerArg = 48;

}  // namespace

namespace internal {

namespace {
// The connection whose handler's Execute is running on this thread: a Reply
// for it is synchronous.
thread_local Connection* tl_executing = nullptr;
}  // namespace

Connection::~Connection() {
  // Normally done when finalized; not for one the server dropped unstarted.
  if (registered_in_core_) core_->Unregister(this);
  if (unauthenticated_counted_) {
    core_->unauthenticated_count.fetch_sub(1);
    core_->unauthenticated_bytes.fetch_sub(static_cast<int64_t>(charged_));
  }
  core_->client_bytes.fetch_sub(static_cast<int64_t>(charged_));
}

void Connection::Start() {
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
  if (tls_context_ != nullptr) {
    StartHandshake();
    return;
  }
  Process();
}

void Connection::StartHandshake() {
  tls_ = std::make_unique<asio::ssl::stream<tcp::socket&>>(socket_, *tls_context_);
  handshaking_ = true;
  Account();
  tls_->async_handshake(asio::ssl::stream_base::server, [self = shared_from_this()](error_code ec) {
    self->handshaking_ = false;
    if (self->closed_) return;
    if (ec) {
      self->Close("tls_handshake");
      return;
    }
    self->last_input_ = Clock::now();
    self->Process();
  });
}

template <typename Buffer, typename Handler>
void Connection::ReadSome(const Buffer& buffer, Handler&& handler) {
  if (tls_ != nullptr) {
    tls_->async_read_some(buffer, std::forward<Handler>(handler));
  } else {
    socket_.async_read_some(buffer, std::forward<Handler>(handler));
  }
}

template <typename Buffer, typename Handler>
void Connection::WriteSomeBytes(const Buffer& buffer, Handler&& handler) {
  if (tls_ != nullptr) {
    tls_->async_write_some(buffer, std::forward<Handler>(handler));
  } else {
    socket_.async_write_some(buffer, std::forward<Handler>(handler));
  }
}

void Connection::OnReply(std::shared_ptr<Connection> self, uint64_t seq, std::string bytes,
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

void Connection::OnApplied(uint64_t seq) {
  if (tl_executing != this || seq != executing_seq_) return;
  slots_[seq - first_seq_].applied = true;
}

void Connection::Sweep(Clock::time_point now) {
  if (closed_) return;
  const ServerOptions& options = core_->options;
  if (close_after_flush_) {
    if (now >= close_deadline_) Close(reason_);
  } else if (handshaking_) {
    if (now - last_input_ >= absl::ToChronoNanoseconds(options.tls_handshake_timeout)) {
      Close("tls_handshake");
    }
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

void Connection::CloseForShutdown(bool force) {
  if (force) {
    Close("shutdown");
    MaybeFinalize();  // also one closed earlier, still waiting for a reply
    return;
  }
  CloseAfterFlush("shutdown");
}

void Connection::Process() {
  // After QUIT (close_after_reply) nothing more runs.
  // (An EXEC's commands all run even so: its array is answered whole.)
  while (!closed_ && !close_after_flush_ && (!session_.close_after_reply || exec_running_) &&
         !reading_ && !Blocked()) {
    // (Not inside an EXEC's log transaction: its commands' replies are
    // bounded by its queue, and pausing would end it.)
    if (PendingOutput() >= OutputLimit() && !(exec_running_ && session_.log_transaction != 0)) {
      if (!paused_) paused_since_ = Clock::now();
      paused_ = true;  // OnWrite resumes
      break;
    }
    if (exec_running_ || next_cmd_ < n_cmds_) {
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
  // Whatever stopped the loop, an EXEC's log transaction ends here: its
  // writes are answered once it ended, so it must not wait for them.
  if (session_.log_transaction != 0) core_->handler->ExecPaused(&session_);
  Account();  // (before the replies go: a client that read one sees it counted)
  Flush();
}

bool Connection::Blocked() const {
  // An EXEC's commands run on while earlier ones wait for their replies
  // (the transaction's own size bounds them): its writes are answered only
  // once its log transaction ended, after the last of them ran.
  return unapplied_ > 0 || queued_then_ > 0 ||
         (!exec_running_ &&
          (unready_ >= std::max<size_t>(core_->options.max_pipelined, 1) ||
           (unready_ > 0 && unready_arg_bytes_ >= core_->options.max_pipelined_bytes)));
}

size_t Connection::OutputLimit() const {
  return unauthenticated_counted_ ? std::min(core_->options.output_soft_limit,
                                             core_->options.unauthenticated_output_limit)
                                  : core_->options.output_soft_limit;
}

size_t Connection::PendingOutput() const {
  return out_.size() + (writing_.size() - written_) + queued_bytes_;
}

void Connection::RunNext() {
  // An EXEC's commands first, then the pipeline's.
  const bool from_exec = exec_running_;
  size_t& next = from_exec ? exec_next_ : next_cmd_;
  const absl::Span<const Command> commands =
      from_exec ? absl::Span<const Command>(exec_cmds_).subspan(exec_next_)
                : absl::Span<const Command>(commands_.data() + next_cmd_, n_cmds_ - next_cmd_);
  if (core_->shutting_down.load(std::memory_order_relaxed)) {
    Emit(kShuttingDown);
    ++next;
    if (from_exec) MaybeEndExec();
    return;
  }
  // CLIENT LIST's cmd= (at most 32 bytes: a client chooses what it sends).
  const std::string_view name = commands[0].args[0].substr(0, 32);
  session_.last_command.assign(name);
  absl::AsciiStrToLower(&session_.last_command);
  if (!from_exec && session_.multi) {
    std::string error;
    switch (core_->handler->Queue(&session_, commands[0], &error)) {
      case CommandHandler::Queueing::kQueue:
        QueueForExec(commands[0]);
        ++next;
        return;
      case CommandHandler::Queueing::kRefuse:
        Emit(error);
        ++next;
        return;
      case CommandHandler::Queueing::kRun:
        break;
    }
  }
  const uint64_t seq = first_seq_ + slots_.size();
  slots_.emplace_back();
  executing_seq_ = seq;
  tl_executing = this;
  session_.in_exec = from_exec;
  size_t took = core_->handler->Execute(&session_, commands, Completion(shared_from_this(), seq));
  session_.in_exec = false;
  tl_executing = nullptr;
  took = std::clamp<size_t>(took, 1, commands.size());
  next += took;
  Slot& slot = slots_.back();
  if (!slot.ready) {
    for (size_t i = 0; i < took; ++i) {
      for (std::string_view a : commands[i].args) slot.arg_bytes += a.size() + kInFlightBytesPerArg;
    }
    unready_arg_bytes_ += slot.arg_bytes;
    ++unready_;
    if (!slot.applied) ++unapplied_;
    core_->in_flight.fetch_add(1);
  }
  // (Before its reply drains: EXEC's reply heads the array gathered.)
  if (session_.exec) {
    session_.exec = false;
    StartExec(seq);
  } else if (!session_.multi && (!multi_queue_.empty() || session_.multi_queued > 0)) {
    DropMultiQueue();  // DISCARD, RESET, an aborted EXEC
  }
  if (slot.ready) {
    Queue(slot);
    DrainReplies();
  }
  if (from_exec) MaybeEndExec();
}

void Connection::QueueForExec(const Command& c) {
  const ServerOptions& options = core_->options;
  // Each argument's string and bytes, the vectors holding them, and the
  // views EXEC will run them from.
  size_t bytes = sizeof(std::vector<std::string>) + sizeof(Command);
  for (std::string_view a : c.args)
    bytes += sizeof(std::string) + sizeof(std::string_view) + a.size();
  if (multi_queue_.size() >= options.max_multi_commands ||
      multi_bytes_ + bytes > options.max_multi_bytes) {
    session_.multi_failed = true;
    Emit(absl::StrCat("-ERR MULTI queue limit: a transaction may queue at most ",
                      options.max_multi_commands, " commands of ", options.max_multi_bytes,
                      " bytes together (it holds ", multi_queue_.size(), " of ", multi_bytes_,
                      " bytes; this one needs ", bytes,
                      "); EXEC will abort: send smaller transactions\r\n"));
    return;
  }
  if (!Admit(bytes)) return;  // closed past the connections' memory
  std::vector<std::string>& args = multi_queue_.emplace_back();
  args.reserve(c.args.size());
  for (std::string_view a : c.args) args.emplace_back(a);
  multi_bytes_ += bytes;
  session_.multi_queued = multi_queue_.size();
  Emit("+QUEUED\r\n");
}

void Connection::DropMultiQueue() {
  std::vector<std::vector<std::string>>().swap(multi_queue_);
  multi_bytes_ = 0;
  session_.multi_queued = 0;
  session_.multi_failed = false;
}

void Connection::StartExec(uint64_t seq) {
  // (No command of an earlier EXEC still reads its arguments: Blocked()
  // let this one run.)
  exec_args_ = std::move(multi_queue_);
  multi_queue_.clear();
  exec_bytes_ = multi_bytes_;
  DropMultiQueue();
  exec_cmds_.resize(exec_args_.size());
  for (size_t i = 0; i < exec_args_.size(); ++i) {
    exec_cmds_[i].args.assign(exec_args_[i].begin(), exec_args_[i].end());
  }
  exec_next_ = 0;
  exec_running_ = true;
  execs_.push_back({.first = seq});
  // (EXEC's own reply is drained after this: the end is known at the
  // earliest after it.)
  MaybeEndExec();
}

void Connection::MaybeEndExec() {
  if (exec_running_ && exec_next_ == exec_cmds_.size()) {
    exec_running_ = false;
    execs_.back().end = first_seq_ + slots_.size();
    if (session_.log_transaction != 0) core_->handler->ExecPaused(&session_);
  }
  while (!execs_.empty() && execs_.front().end <= first_seq_) {
    if (!lingering_ && !closed_) out_.append(execs_.front().out);
    execs_.pop_front();
  }
  if (execs_.empty() && !exec_running_ && exec_bytes_ > 0) {
    std::vector<Command>().swap(exec_cmds_);
    std::vector<std::vector<std::string>>().swap(exec_args_);
    exec_bytes_ = 0;
  }
}

void Connection::Emit(std::string_view bytes) {
  if (slots_.empty()) {
    // (With nothing pending, a running EXEC is the only one gathering.)
    (exec_running_ ? execs_.back().out : out_).append(bytes);
    return;
  }
  Slot& slot = slots_.emplace_back();
  slot.ready = true;
  slot.bytes = std::string(bytes);
  queued_bytes_ += slot.bytes.size();
}

void Connection::Queue(const Slot& slot) {
  queued_bytes_ += slot.bytes.size();
  if (slot.then) ++queued_then_;
}

void Connection::DrainReplies() {
  while (!slots_.empty() && slots_.front().ready) {
    Slot slot = std::move(slots_.front());
    slots_.pop_front();
    const uint64_t seq = first_seq_++;
    queued_bytes_ -= slot.bytes.size();
    if (slot.then) --queued_then_;
    const bool in_exec = !execs_.empty() && seq >= execs_.front().first && seq < execs_.front().end;
    Apply(slot.bytes, slot.then, in_exec ? &execs_.front().out : &out_);
    if (in_exec) MaybeEndExec();
  }
  if (session_.close_after_reply && slots_.empty() && execs_.empty() && !closed_) {
    CloseAfterFlush("quit");
  }
}

bool Connection::ParseBatch() {
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

bool Connection::SameLimits(const ParserLimits& a, const ParserLimits& b) {
  return a.max_bulk_bytes == b.max_bulk_bytes && a.max_args == b.max_args &&
         a.max_inline_bytes == b.max_inline_bytes && a.max_command_bytes == b.max_command_bytes;
}

void Connection::StartRead() {
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
  ReadSome(asio::buffer(in_.get() + in_end_, in_cap_ - in_end_),
           [self = shared_from_this()](error_code ec, size_t n) { self->OnRead(ec, n); });
}

void Connection::OnRead(error_code ec, size_t n) {
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

void Connection::AsyncDone(uint64_t seq, std::string bytes, std::function<void(Session*)> then) {
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

void Connection::Apply(const std::string& bytes, const std::function<void(Session*)>& then,
                       std::string* to) {
  if (then) then(&session_);
  if (!lingering_ && !closed_) to->append(bytes);
}

void Connection::Flush() {
  if (writing_active_ || out_.empty() || closed_) return;
  writing_.clear();
  writing_.swap(out_);
  written_ = 0;
  writing_active_ = true;
  write_progress_ = Clock::now();
  WriteSome();
}

void Connection::WriteSome() {
  WriteSomeBytes(asio::buffer(writing_.data() + written_, writing_.size() - written_),
                 [self = shared_from_this()](error_code ec, size_t n) { self->OnWrite(ec, n); });
}

void Connection::OnWrite(error_code ec, size_t n) {
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

void Connection::CloseAfterFlush(std::string_view reason) {
  if (close_after_flush_ || closed_) return;
  close_after_flush_ = true;
  reason_ = std::string(reason);
  close_deadline_ = Clock::now() + kCloseFlushTime;
  Flush();
  if (!writing_active_) FinishGraceful();
}

void Connection::FinishGraceful() {
  if (lingering_ || closed_) return;
  if (handshaking_) {  // nothing was said: no reply to keep
    Close(reason_);
    return;
  }
  lingering_ = true;
  error_code ignored;
  socket_.shutdown(tcp::socket::shutdown_send, ignored);
  if (!reading_) StartDiscardRead();
}

void Connection::StartDiscardRead() {
  reading_ = true;
  ReadSome(asio::buffer(worker_->discard), [self = shared_from_this()](error_code ec, size_t) {
    self->reading_ = false;
    if (self->closed_) return;
    if (ec) {
      self->Close(self->reason_);
    } else {
      self->StartDiscardRead();
    }
  });
}

void Connection::Close(std::string_view reason) {
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

void Connection::MaybeFinalize() {
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
  std::vector<std::vector<std::string>>().swap(multi_queue_);
  multi_bytes_ = 0;
  std::deque<ExecReply>().swap(execs_);
  exec_running_ = false;
  if (!views_in_use) {
    std::vector<Command>().swap(exec_cmds_);
    std::vector<std::vector<std::string>>().swap(exec_args_);
    exec_bytes_ = 0;
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

size_t Connection::MemoryBytes() const {
  if (finalized_) return 0;
  return kConnectionBytes + (tls_ != nullptr ? kTlsConnectionBytes : 0) + in_cap_ + args_bytes_ +
         parser_.MemoryBytes() + out_.capacity() + writing_.capacity() + error_.capacity() +
         session_.name.capacity() + session_.lib_name.capacity() + session_.lib_version.capacity() +
         session_.token.capacity() + session_.last_command.capacity() + session_.user.capacity() +
         slots_.size() * sizeof(Slot) + queued_bytes_ + unready_arg_bytes_ + multi_bytes_ +
         exec_bytes_ + ExecReplyBytes();
}

size_t Connection::ExecReplyBytes() const {
  size_t bytes = execs_.size() * sizeof(ExecReply);
  for (const ExecReply& e : execs_) bytes += e.out.capacity();
  return bytes;
}

void Connection::Account() { Charge(MemoryBytes()); }

bool Connection::Admit(size_t extra) {
  Charge(MemoryBytes() + extra);
  if (closed_) return false;
  // Acquire: Core::MarkEvicting's evict_reason and evicted_bytes.
  if (evicting.load()) {
    Evict();  // which keeps one that authenticated since it was chosen
    if (closed_ || close_after_flush_ || evicting.load()) return false;
  }
  return true;
}

void Connection::Charge(size_t bytes) {
  const int64_t delta = static_cast<int64_t>(bytes) - static_cast<int64_t>(charged_);
  charged_ = bytes;
  charged.store(bytes, std::memory_order_relaxed);
  Core& core = *core_;
  const int64_t total = core.client_bytes.fetch_add(delta, std::memory_order_relaxed) + delta;
  const bool unauthenticated = core.options.auth_required && !session_.authenticated && !finalized_;
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

bool Connection::Describe(Clock::time_point now, ClientInfo* info) {
  if (closed_ || finalized_) return false;
  error_code ec;
  const tcp::endpoint local = socket_.local_endpoint(ec);
  info->id = session_.id;
  info->addr = session_.peer;
  info->laddr = ec ? "?:0" : FormatEndpoint(local);
  info->fd = static_cast<int>(socket_.native_handle());
  info->name = session_.name;
  info->age_seconds = absl::ToInt64Seconds(absl::Now() - session_.connected_at);
  info->idle_seconds = std::chrono::duration_cast<std::chrono::seconds>(now - last_input_).count();
  info->multi = session_.multi;
  info->multi_queued = multi_queue_.size();
  info->memory = MemoryBytes();
  info->cmd = session_.last_command;
  info->user = session_.user;
  info->lib_name = session_.lib_name;
  info->lib_version = session_.lib_version;
  info->protocol = session_.protocol;
  return true;
}

bool Connection::Kill(const ClientFilter& filter, Clock::time_point now) {
  if (closed_ || finalized_ || close_after_flush_) return false;
  if (filter.skip_id != 0 && session_.id == filter.skip_id) return false;
  ClientInfo info;
  if (!Describe(now, &info)) return false;
  if ((filter.id && *filter.id != info.id) || (filter.addr && *filter.addr != info.addr) ||
      (filter.laddr && *filter.laddr != info.laddr) || (filter.user && *filter.user != info.user) ||
      (filter.min_age_seconds && info.age_seconds <= *filter.min_age_seconds)) {
    return false;
  }
  if (session_.id == filter.caller_id) {
    // After its reply (CLIENT KILL is running on it): as QUIT.
    session_.close_after_reply = true;
    return true;
  }
  Close("killed");
  return true;
}

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

}  // namespace cuckoo::server::resp
