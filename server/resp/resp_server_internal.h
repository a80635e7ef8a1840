// What the files of RespServer share (private to server/resp/): the state
// of the server, its threads and its connections (RespServer::Core) and one
// client connection (internal::Connection).
//
// resp_server.cc holds the listener, the I/O threads, the sweep of the
// timeouts and shutdown; resp_connection.cc a connection's loop (read,
// parse, run, reply, write, close) and the memory it counts; resp_eviction.cc
// the choice of the connections to close past client_memory and the caps on
// those not authenticated yet (max_unauthenticated, unauthenticated_memory).
#ifndef CUCKOO_SERVER_RESP_RESP_SERVER_INTERNAL_H_
#define CUCKOO_SERVER_RESP_RESP_SERVER_INTERNAL_H_

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_set>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "boost/asio/executor_work_guard.hpp"
#include "boost/asio/io_context.hpp"
#include "boost/asio/ip/tcp.hpp"
#include "boost/asio/ssl/context.hpp"
#include "boost/asio/ssl/stream.hpp"
#include "boost/asio/steady_timer.hpp"
#include "server/resp/resp_protocol.h"
#include "server/resp/resp_server.h"

namespace cuckoo::server::resp {

namespace asio = boost::asio;
using tcp = boost::asio::ip::tcp;
using Clock = std::chrono::steady_clock;
using boost::system::error_code;

// How long a closing connection may take to flush its replies.
constexpr auto kCloseFlushTime = std::chrono::seconds(1);

constexpr std::string_view kMaxUnauthenticated =
    "-ERR max number of unauthenticated clients reached: AUTH right after connecting, or try "
    "again later\r\n";

// "host:port", or "[host]:port" for IPv6.
std::string FormatEndpoint(const tcp::endpoint& endpoint);

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
  // Runs `each` on every worker's thread over its connections, then `done`
  // (on the thread of the last worker to finish). RespServer::ListClients
  // and KillClients.
  void ForEachWorker(std::function<void(Worker*)> each, std::function<void()> done);

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

// One client connection; lives on its worker's thread (see the top of
// resp_server.h for the loop). Owned by the worker's list while open, and by
// pending I/O handlers and handlers' Completions.
class Connection : public std::enable_shared_from_this<Connection> {
 public:
  using Core = RespServer::Core;

  Connection(std::shared_ptr<Core> core, Core::Worker* worker, tcp::socket socket,
             bool unauthenticated_counted,
             std::shared_ptr<boost::asio::ssl::context> tls_context = nullptr)
      : core_(std::move(core)),
        worker_(worker),
        socket_(std::move(socket)),
        tls_context_(std::move(tls_context)),
        parser_(core_->options.limits),
        unauthenticated_counted_(unauthenticated_counted) {}

  ~Connection();

  // On the worker's thread.
  void Start();

  // Completion::Reply: the handler's answer, from any thread.
  void OnReply(std::shared_ptr<Connection> self, uint64_t seq, std::string bytes,
               std::function<void(Session*)> then);

  // Completion::Applied.
  void OnApplied(uint64_t seq);

  // The periodic check of the timeouts, on the worker's thread.
  void Sweep(Clock::time_point now);

  // Shutdown: flush what is pending, then close (force: close now).
  void CloseForShutdown(bool force);

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
  void Evict();

  // On the worker's thread: CLIENT LIST's view of it (false once closed),
  // and CLIENT KILL's (true if it matched and is closing).
  bool Describe(Clock::time_point now, ClientInfo* info);
  bool Kill(const ClientFilter& filter, Clock::time_point now);

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
  void Process();

  // Whether the next command must wait: one in flight that did not say
  // Applied, or too many (or too large) that did.
  bool Blocked() const;

  size_t OutputLimit() const;

  // Written, being written, and replies waiting for an earlier one.
  size_t PendingOutput() const;

  void RunNext();

  // A reply of the server's own (not a handler's), in its turn.
  void Emit(std::string_view bytes);

  // A reply came: counted until its turn. One with a `then` (which may
  // change the session, e.g. close after it) holds back the next commands
  // until it has run.
  void Queue(const Slot& slot);

  // Moves the replies whose turn has come to the output (an EXEC's to
  // its ExecReply until its last one).
  void DrainReplies();

  // After MULTI: a copy of `c` kept until EXEC (or refused past
  // max_multi_commands / max_multi_bytes), answered +QUEUED.
  void QueueForExec(const Command& c);
  // EXEC's handler answered (its reply, seq `seq`, heads the array): the
  // queued commands run next.
  void StartExec(uint64_t seq);
  // DISCARD, RESET, a failed EXEC: the queue goes.
  void DropMultiQueue();
  // Once every command of the EXEC ran and answered: its reply goes out
  // whole.
  void MaybeEndExec();

  // Parses the complete commands at the front of the unparsed input; true
  // if there is something to run (or a protocol error to answer).
  bool ParseBatch();

  static bool SameLimits(const ParserLimits& a, const ParserLimits& b);

  // Makes room for the rest of the partial command (or the next ones) and
  // reads. Only when no command that did not say Applied is in flight: its
  // views into the buffer must not move.
  void StartRead();

  void OnRead(error_code ec, size_t n);

  // The handler's answer, posted from another thread.
  void AsyncDone(uint64_t seq, std::string bytes, std::function<void(Session*)> then);

  // Runs `then` and appends the reply to `to` (out_, or an ExecReply's).
  void Apply(const std::string& bytes, const std::function<void(Session*)>& then, std::string* to);

  // Writes the output gathered so far, unless a write is in progress (its
  // completion writes what came meanwhile).
  void Flush();

  void WriteSome();

  void OnWrite(error_code ec, size_t n);

  // Stops running commands; closes once the output is written (bounded by
  // kCloseFlushTime, checked by the sweep).
  void CloseAfterFlush(std::string_view reason);

  // Everything written: our FIN, then the client's unread input is read and
  // dropped until it closes too (or the deadline), so that closing with
  // unread input does not reset the connection and destroy the last replies
  // before the client reads them.
  void FinishGraceful();

  void StartDiscardRead();

  void Close(std::string_view reason);

  // Once closed and no command in flight (or the server is closing every
  // connection): tells the handler and the metrics, leaves the worker's
  // list and gives its memory back. The caller holds a reference.
  void MaybeFinalize();

  // What this connection holds now (see the top of resp_server.h).
  size_t MemoryBytes() const;
  // Of it, the EXECs' replies gathering.
  size_t ExecReplyBytes() const;

  // Counts MemoryBytes (and the authentication state) in the server's
  // totals; evicts past client_memory and closes an unauthenticated
  // connection past unauthenticated_memory.
  void Account();

  // Before growing by `extra` bytes: false (and closed) if this connection
  // may not.
  bool Admit(size_t extra);

  void Charge(size_t bytes);

  // The socket's reads and writes, through TLS when tls_ is set.
  template <typename Buffer, typename Handler>
  void ReadSome(const Buffer& buffer, Handler&& handler);
  template <typename Buffer, typename Handler>
  void WriteSomeBytes(const Buffer& buffer, Handler&& handler);

  // With TLS: the handshake, then Process (or closed, "tls_handshake").
  void StartHandshake();

  const std::shared_ptr<Core> core_;
  Core::Worker* const worker_;
  tcp::socket socket_;
  // TLS: the context it was accepted with (kept alive for the stream) and
  // the stream over socket_; handshaking until the handshake completes.
  std::shared_ptr<boost::asio::ssl::context> tls_context_;
  std::unique_ptr<boost::asio::ssl::stream<tcp::socket&>> tls_;
  bool handshaking_ = false;
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

  // MULTI's queue: each command's arguments, owned, and their bytes as
  // counted (QueueForExec). At EXEC they move to exec_args_, and
  // exec_cmds_ (views into them) run before the rest of the pipeline:
  // exec_cmds_[exec_next_] is next while exec_running_. (They stay until
  // the next EXEC or the last reply: a command in flight that did not say
  // Applied may still read them, and nothing else runs meanwhile.)
  std::vector<std::vector<std::string>> multi_queue_;
  size_t multi_bytes_ = 0;
  std::vector<std::vector<std::string>> exec_args_;
  std::vector<Command> exec_cmds_;
  size_t exec_bytes_ = 0;
  size_t exec_next_ = 0;
  bool exec_running_ = false;
  // The EXECs whose replies are not all in, oldest first (pipelined
  // transactions: the next may run while the writes of one wait to be
  // durable): the replies of slots [first, end) gather in `out` (EXEC's
  // own first, the array's header), moved to out_ whole once the last came;
  // `end` is known once its commands all ran.
  struct ExecReply {
    uint64_t first = 0;
    uint64_t end = UINT64_MAX;
    std::string out;
  };
  std::deque<ExecReply> execs_;

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

}  // namespace cuckoo::server::resp

#endif  // CUCKOO_SERVER_RESP_RESP_SERVER_INTERNAL_H_
