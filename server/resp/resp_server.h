// RespServer: cuckood's Redis-protocol (RESP) port: TCP connections, each
// read into its own buffer, parsed with resp::Parser into commands, run in
// order by a CommandHandler, and answered in order. What the commands do is
// the handler's business (resp_commands.h); this file is only connections.
//
// Threads: `threads` io_context threads; each connection belongs to one of
// them (round-robin at accept, which runs on the first) and all its work runs
// there, so a connection needs no locks. A handler may answer later from any
// thread: the answer is posted back to the connection's thread.
//
// Per connection, in a loop: read (up to read_chunk bytes, more when one
// command needs it, never more than the parser's limits allow), parse every
// complete command in the buffer, run them in order (a handler may take
// several at once, e.g. consecutive CF.ADDs), append their replies to the
// output buffer, and when there is nothing left to run write the whole
// output with one write: a pipeline of commands read together is answered
// with one write. While a command is in flight (answered asynchronously)
// nothing more is read or run: its arguments are views into the input buffer,
// and commands run strictly one after another. Unless its handler says the
// command has taken effect and needs its arguments no more
// (Completion::Applied, e.g. a write waiting only for the log's fdatasync):
// then the next commands run meanwhile, up to max_pipelined of them waiting,
// and the replies still go out in order.
//
// Transactions: after the handler's MULTI (Session::multi) each command is
// offered to CommandHandler::Queue; those it queues are copied and kept
// (at most max_multi_commands and max_multi_bytes) and answered +QUEUED,
// nothing run. EXEC's handler (Session::exec) makes the connection run
// them, in order, before anything after EXEC, and their replies are
// gathered behind EXEC's own (the array's header) and sent together once
// the last one came: an EXEC of writes is answered once all are durable.
//
// Memory: every connection counts what it holds (input buffer, parsed
// arguments, parser state, pending and queued replies, session strings, an
// estimate of what its commands in flight hold in the handler, a
// transaction's queued commands and gathered replies, and a fixed part for
// the connection itself) in one total. Past client_memory the
// connections using the most are closed ("client_memory") until the total
// fits, as Redis 7 does with maxmemory-clients; a connection about to grow
// its input buffer past it is considered before it allocates. With
// auth_required, connections that have not authenticated are held to a few
// arguments and bytes each, to max_unauthenticated of them and to
// unauthenticated_memory together (the oldest or largest make room for a
// newcomer), and to auth_timeout.
//
// Limits: a protocol error is answered (after the replies of the commands
// before it) and the connection closed, as Redis does; more than
// max_connections get "-ERR max number of clients reached" and are closed;
// output past output_soft_limit stops reading and running until the client
// reads (so a client that never reads holds its own memory only), and a
// client that has not taken a byte of its pending output for
// write_stall_timeout is closed; idle_timeout closes connections that have
// sent nothing for that long (0: never). Timeouts are checked by one sweep
// per thread (a tenth of the shortest timeout, 10 ms to 1 s), not a timer
// per read, so a command costs no timer syscalls.
//
//   MyHandler handler;
//   auto server = RespServer::Start({.listen = "127.0.0.1:6379"}, &handler);
//   ... (*server)->port() ...
//   (*server)->Shutdown(absl::Seconds(5));  // or destroy it
//
// Thread safety: every public method may be called from any thread but the
// server's own; the handler must outlive the server.
#ifndef CUCKOO_SERVER_RESP_RESP_SERVER_H_
#define CUCKOO_SERVER_RESP_RESP_SERVER_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "server/resp/resp_protocol.h"

namespace boost::asio::ssl {
class context;
}  // namespace boost::asio::ssl

namespace cuckoo::server::resp {

// Per-connection state the command handler reads and changes. Touched only on
// the connection's own thread (handlers' completions are posted back to it).
struct Session {
  uint64_t id = 0;                    // CLIENT ID; unique, from 1
  std::string peer;                   // "ip:port" ("[ip6]:port")
  int protocol = 2;                   // 2, or 3 after HELLO 3
  std::string name;                   // CLIENT SETNAME
  std::string lib_name, lib_version;  // CLIENT SETINFO
  bool authenticated = false;         // handler-owned auth state ...
  std::shared_ptr<void> caller;       // ... handler-owned (opaque to the server)
  std::string token;                  // AUTH token, handler-owned
  uint32_t auth_failures = 0;         // failed AUTHs since the last good one, handler-owned
  bool close_after_reply = false;     // QUIT, or a fatal error: close once this reply is written
  absl::Time connected_at;
  std::string last_command;      // for CLIENT LIST: set by the connection as each command runs
  std::string user = "default";  // for CLIENT LIST: the caller's name (handler-owned)
  // MULTI ... EXEC: the handler's MULTI sets `multi`; from then on the
  // connection asks CommandHandler::Queue about each command and keeps
  // those queued (copies, counted in its memory) instead of running them.
  // EXEC's handler clears `multi` and sets `exec`: the connection then runs
  // the queued commands, in order, right after EXEC, and sends EXEC's reply
  // (the array's header) and theirs together once every one has answered.
  // With `multi` cleared and not `exec` (DISCARD, RESET) the queue is
  // dropped.
  bool multi = false;         // handler-owned
  bool multi_failed = false;  // a command was refused at queue time: EXEC aborts
  bool exec = false;          // handler-owned, cleared by the connection
  size_t multi_queued = 0;    // commands queued (the connection's count)
  // Set by the connection while it runs an EXEC's queued command; the
  // connection calls CommandHandler::ExecPaused wherever it stops running
  // them (a reply it waits for, the end of the EXEC, a close).
  bool in_exec = false;
  uint64_t log_transaction = 0;  // handler-owned: an open log transaction of an EXEC
};

// One parsed command: its arguments, views into the connection's input
// buffer. The server reuses these objects (and their vectors' capacity) from
// one batch to the next, so parsing allocates nothing in the steady state.
struct Command {
  std::vector<std::string_view> args;
};

namespace internal {
class Connection;
}  // namespace internal

// A connection as CLIENT LIST shows it (RespServer::ListClients).
struct ClientInfo {
  uint64_t id = 0;
  std::string addr, laddr;  // the peer's and the server's ends
  int fd = -1;
  std::string name;
  int64_t age_seconds = 0;   // since it connected
  int64_t idle_seconds = 0;  // since it last sent something
  bool multi = false;        // between MULTI and EXEC
  size_t multi_queued = 0;
  size_t memory = 0;  // as counted for client_memory
  std::string cmd;    // the last command's name, lower case
  std::string user;   // Session::user
  std::string lib_name, lib_version;
  int protocol = 2;
};

// Which connections CLIENT KILL closes: those matching every field set.
struct ClientFilter {
  std::optional<uint64_t> id;
  std::optional<std::string> addr, laddr, user;
  std::optional<int64_t> min_age_seconds;  // MAXAGE: connected longer than this
  uint64_t skip_id = 0;                    // SKIPME yes: the caller (0: none skipped)
  // The caller's connection (CLIENT KILL addr:port, or SKIPME no) is not
  // closed at once but after its reply.
  uint64_t caller_id = 0;
};

// The handle a handler answers through: copyable and movable; Reply must be
// called exactly once (over all copies), on any thread.
class Completion {
 public:
  Completion() = default;  // answers nothing: only to be assigned a real one
  // Queues `bytes` (the RESP replies of every command Execute took,
  // concatenated in order) for the client and lets the connection go on.
  // `then`, if given, runs first on the connection's thread with its
  // Session (e.g. to set close_after_reply or the auth state after an
  // asynchronous check). Called within Execute, the bytes are appended at
  // once; from elsewhere they are posted to the connection's thread (after
  // the server shut down they are dropped).
  void Reply(std::string bytes, std::function<void(Session*)> then = nullptr);
  // Within Execute, before Reply, on the connection's thread: the commands
  // taken have taken effect (a command run after them sees them) and the
  // handler keeps no view into their arguments. The connection then runs
  // its next commands while this reply is pending (up to
  // ServerOptions::max_pipelined replies pending); the replies still go out
  // in order, and `then` runs when this reply's turn comes. Without it the
  // connection runs nothing more until this reply came. Ignored elsewhere.
  void Applied();

 private:
  friend class internal::Connection;
  Completion(std::shared_ptr<internal::Connection> connection, uint64_t seq)
      : connection_(std::move(connection)), seq_(seq) {}
  std::shared_ptr<internal::Connection> connection_;
  uint64_t seq_ = 0;  // which of the connection's commands this answers
};

// What the server calls. Commands of one connection run strictly one after
// another, in order: the next one starts only after the previous completed
// (or, with Completion::Applied, took effect).
class CommandHandler {
 public:
  virtual ~CommandHandler() = default;
  // Runs commands[0] and, optionally, some of the commands right after it
  // (already parsed from the same connection's pipeline; e.g. consecutive
  // CF.ADDs merged into one batch). Returns how many it took (>= 1, at most
  // commands.size()). It must then call done.Reply(bytes) exactly once, with
  // the replies of all the commands it took, concatenated in order,
  // synchronously before returning or later from any thread. The args stay
  // valid until done.Reply is called. After Execute returned, the session may
  // be touched only through Reply's `then`.
  virtual size_t Execute(Session* session, absl::Span<const Command> commands, Completion done) = 0;
  // After MULTI (Session::multi), before each command, on the connection's
  // thread: kRun runs it now (EXEC, DISCARD, ...: Execute); kQueue keeps a
  // copy until EXEC and answers +QUEUED; kRefuse answers `*error` (its RESP
  // bytes), and the handler has set Session::multi_failed so that EXEC
  // aborts. The checks Redis makes at queue time are the handler's.
  enum class Queueing { kRun, kQueue, kRefuse };
  virtual Queueing Queue(Session* /*session*/, const Command& /*command*/, std::string* /*error*/) {
    return Queueing::kRun;
  }
  // Called once when a connection closes, on its thread (e.g. to forget
  // per-connection state). Not called for a command still in flight
  // afterwards: a Reply after Closed is dropped.
  virtual void Closed(Session* /*session*/) {}
  // The connection stopped running an EXEC's commands, for now or for good
  // (the EXEC ended, or the connection waits for a reply, or closes):
  // whatever the handler holds open across them ends. While the handler
  // holds something open (Session::log_transaction), the connection does not
  // pause an EXEC for its unsent output.
  virtual void ExecPaused(Session* /*session*/) {}
};

struct ServerOptions {
  std::string listen;  // "host:port", ":port" (every address), "[::1]:port"; port 0 = ephemeral
  int threads = 0;     // I/O threads; 0 = std::thread::hardware_concurrency() (min 1)
  ParserLimits limits;
  // With authentication on (the handler sets Session::authenticated), a
  // connection that has not authenticated yet is held to these instead, as
  // Redis does since CVE-2021-32675: anyone who reaches the port could
  // otherwise make it buffer max_command_bytes per connection.
  bool auth_required = false;
  ParserLimits unauthenticated_limits = {.max_bulk_bytes = 16 << 10,
                                         .max_args = 10,
                                         .max_inline_bytes = 16 << 10,
                                         .max_command_bytes = 256 << 10,
                                         .note = " before AUTH"};
  // With auth_required: connections not authenticated yet, at most this
  // many (one more: the one waiting longest is closed with "-ERR max number
  // of unauthenticated clients reached", "max_unauthenticated"; a new one is
  // refused only if none has started yet), this much memory together (past
  // it, those holding the most are closed: "unauthenticated_memory"), and
  // for at most auth_timeout after they connected or RESET ("auth_timeout";
  // 0 = no limit). The caps make room for newcomers so that a flood of
  // connections that never AUTH does not lock out a client that does. Their output stops
  // running commands past unauthenticated_output_limit.
  size_t max_unauthenticated = 1000;
  size_t unauthenticated_memory = 32 << 20;
  absl::Duration auth_timeout = absl::Seconds(10);
  size_t unauthenticated_output_limit = 64 << 10;
  size_t max_connections = 10'000;  // more: "-ERR max number of clients reached", closed
  absl::Duration idle_timeout = absl::ZeroDuration();  // 0 = never (Redis "timeout 0")
  // Every connection's memory together (see the top of this file); past it
  // the connections using the most are closed: "client_memory". 0 = no
  // limit (Redis's maxmemory-clients 0).
  size_t client_memory = 0;
  // Pending reply bytes past which the connection stops reading and running
  // commands until the client reads (backpressure).
  size_t output_soft_limit = 1 << 20;
  // Output past output_soft_limit for this long without falling under it
  // (a client that takes a byte now and then): closed, "slow_client", as
  // Redis's client-output-buffer-limit soft seconds.
  absl::Duration output_soft_timeout = absl::Seconds(60);
  // Output pending and no byte of it taken for this long: the client is
  // closed (slow client).
  absl::Duration write_stall_timeout = absl::Seconds(60);
  // Replies of Applied commands pending on one connection, and the bytes of
  // those commands' arguments; past either, the next command waits.
  size_t max_pipelined = 32;
  size_t max_pipelined_bytes = 8 << 20;
  // Commands one transaction (MULTI ... EXEC) may queue, and their bytes
  // (arguments and their copies' overhead, as counted in the connection's
  // memory). One more is refused with an error naming the limit, and the
  // transaction then aborts at EXEC (Redis has no limit; queued commands
  // must fit in the connection's memory).
  size_t max_multi_commands = 10'000;
  size_t max_multi_bytes = 16 << 20;
  size_t read_chunk = 64 << 10;
  int listen_backlog = 1024;
  // TLS (resp_tls.h): when set, every connection handshakes with the
  // context it returns before anything else (called once per accepted
  // connection, on an I/O thread; after a reload it returns the new one).
  // Unset: plaintext. A TLS connection is counted kTlsConnectionBytes more.
  std::function<std::shared_ptr<boost::asio::ssl::context>()> tls_context;
  // A connection whose TLS handshake has not finished this long after it
  // connected is closed ("tls_handshake"; a failed handshake too).
  absl::Duration tls_handshake_timeout = absl::Seconds(10);
  // Metrics hooks (optional), called on I/O threads: a connection accepted
  // (also one then refused), and closed, with the reason: "quit", "eof",
  // "error", "protocol_error", "idle", "slow_client", "shutdown",
  // "max_clients", "client_memory", "unauthenticated_memory",
  // "auth_timeout", "max_unauthenticated", "tls_handshake", "killed"
  // (CLIENT KILL).
  std::function<void()> on_connect;
  std::function<void(std::string_view reason)> on_close;
  // A connection closed for client_memory, described as Redis's log line
  // does ("id=7 addr=10.0.0.2:5123 name= tot-mem=16842752"), with the
  // total at that moment (for a log line; rate-limiting is the caller's).
  std::function<void(std::string_view client, size_t total)> on_evict;
};

class RespServer {
 public:
  // Binds and starts accepting. UNAVAILABLE naming the address and the
  // error if it cannot bind; INVALID_ARGUMENT for a malformed address (or
  // a host name that does not resolve).
  static absl::StatusOr<std::unique_ptr<RespServer>> Start(const ServerOptions& options,
                                                           CommandHandler* handler);
  RespServer(const RespServer&) = delete;
  RespServer& operator=(const RespServer&) = delete;
  ~RespServer();  // Shutdown(absl::ZeroDuration()) if not done yet.

  // The bound address, "host:port" ("[host]:port" for IPv6), with the port
  // resolved when `listen` asked for port 0.
  std::string address() const;
  int port() const;
  // Open connections.
  size_t connections() const;
  // Commands handed to the handler and not answered yet.
  size_t commands_in_flight() const;
  // The connections' memory as counted for client_memory, and how many
  // connections were closed to keep it (since start).
  size_t client_memory() const;
  uint64_t evicted_clients() const;
  // Connections that have not authenticated (with auth_required).
  size_t unauthenticated_connections() const;

  // CLIENT LIST and CLIENT KILL: every open connection, each described (or
  // matched and closed) on its own thread; `done` is called once, on one of
  // the server's threads, when all have been (never after Shutdown began
  // closing the connections). KILL closes a matching connection at once
  // (reason "killed"), but the caller's after its reply.
  void ListClients(std::function<void(std::vector<ClientInfo>)> done);
  void KillClients(ClientFilter filter, std::function<void(size_t killed)> done);

  // Drains and stops: stops accepting; commands already running complete
  // and are answered; any command that would start from now on gets
  // "-ERR cuckood is shutting down" instead. Waits until no command is in
  // flight or `drain` passed, then closes every connection (its pending
  // replies written first, for at most 1 s) and joins the threads.
  // Idempotent: a later call returns once the first has finished.
  void Shutdown(absl::Duration drain);

  class Core;  // internal

 private:
  explicit RespServer(std::shared_ptr<Core> core);
  std::shared_ptr<Core> core_;
};

}  // namespace cuckoo::server::resp

#endif  // CUCKOO_SERVER_RESP_RESP_SERVER_H_
