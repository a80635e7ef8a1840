// RedisCommands: RedisBloom's cuckoo-filter commands (CF.*) and the
// connection and keyspace commands Redis clients send, served on the Redis
// port (--redis-listen, server/resp/resp_server.h) over the same filters as the
// gRPC API. docs/REDIS_COMPATIBILITY.md lists every command, its replies and
// where cuckood differs from RedisBloom.
//
// Reads (CF.EXISTS, CF.MEXISTS, CF.COUNT, CF.INFO, EXISTS, TYPE, SCAN, KEYS,
// DBSIZE) run on the connection's thread, straight on the filters, like
// gRPC's Lookup and Count (lock-free batched lookups). Everything that
// changes state (CF.RESERVE, CF.ADD, CF.ADDNX, CF.INSERT, CF.INSERTNX,
// CF.DEL, DEL, CF.LOADCHUNK) and CF.SCANDUMP goes through the server's own
// FilterService: it is logged, made durable (or published to the cluster),
// authorised, audited and counted exactly as the same call from a gRPC
// client. On a single node the writes of an existing filter (CF.ADD,
// CF.ADDNX, CF.INSERT, CF.INSERTNX, CF.DEL) run the Insert or Delete RPC's
// body on the connection's thread (FilterServiceImpl::InsertNow, DeleteNow):
// applied at once, so the connection goes on with its next commands
// (Completion::Applied) and its pipelined writes share the log's group
// commits, and answered, in order, once durable. The rest (and every write
// in cluster mode, or one that creates its filter) are gRPC calls over an
// in-process channel, answered once gRPC answers, the connection waiting.
// Consecutive pipelined CF.ADD, CF.ADDNX or CF.DEL of one connection on one
// filter, and CF.INSERT (or CF.INSERTNX) on one filter with the same
// options, go as one batch, and consecutive CF.EXISTS as one batched lookup.
//
// Transactions (MULTI, EXEC, DISCARD): the state is the Session's, the
// queue the connection's (resp_server.h); Queue makes Redis's queue-time
// checks. WATCH is refused, UNWATCH is a no-op. UNLINK is DEL; FLUSHALL and
// FLUSHDB drop every filter (admin on each); MEMORY USAGE is CF.INFO's Size;
// MODULE LIST shows RedisBloom's "bf"; CLIENT LIST and KILL go through the
// server's connections (set_clients), each on its own thread.
//
// Authentication: with an access file (--auth-tokens) a connection must send
// AUTH <token> (or HELLO ... AUTH <user> <token>) first; the token is checked
// again, against the file in force, for every command, so a revoked token
// stops working at once. Grants apply per filter as on gRPC: CF.EXISTS needs
// read, CF.ADD write, CF.RESERVE and DEL admin.
//
// CF.SCANDUMP / CF.LOADCHUNK move a filter as chunks of its snapshot file
// (ExportFilter / ImportFilter): the first chunk is a 24-byte header (magic
// "CKDUMP01", the snapshot's size and items, little-endian u64s), then the
// snapshot file in 1 MiB chunks. A dump is taken whole when it starts (a
// private copy under data_dir/.redis-dump), so its chunks are one consistent
// snapshot; a load keeps its chunks in a private file there until the last
// one, then imports it. Both files are removed from the directory as soon
// as they are open, so a crash leaves none behind (a start-up removes the
// directory too). A dump or load belongs to the connection that started it
// and ends with it (closed for whatever reason, or RESET), as does a dump
// whose filter is dropped; an empty filter's dump is [0, nil] at once, and
// the end [0, nil], as in RedisBloom. Their file work (the copy, each chunk read or
// written, creating and removing files, the disk space check) runs on
// transfer threads of their own, never on a connection's thread nor under a
// lock other connections take, and the command is answered from there (a
// connection's replies stay in order: it runs its next command only then).
// A load's declared size must be one ImportFilter takes (the memory budget
// plus 1 MiB) and fit the data directory's free disk beside the write-ahead
// log's reserve (TransferDisk, server/service/transfers.h); a dump's copy must fit
// too. An unfinished dump or load whose client sent or asked for nothing
// for transfer_idle_timeout is dropped by a timer (IdleSweeper), its file
// removed and a line logged; its client's next chunk gets an error saying
// so.
//
// Thread safety: Execute is called from many connection threads at once.
#ifndef CUCKOO_SERVER_RESP_COMMANDS_RESP_COMMANDS_H_
#define CUCKOO_SERVER_RESP_COMMANDS_RESP_COMMANDS_H_

#include <grpcpp/channel.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/time/time.h"
#include "base/mutex.h"
#include "boost/asio/executor_work_guard.hpp"
#include "boost/asio/io_context.hpp"
#include "boost/asio/thread_pool.hpp"
#include "core/registry.h"
#include "cuckoo/v1/filter_service.grpc.pb.h"
#include "server/observability/logging.h"
#include "server/observability/metrics.h"
#include "server/resp/commands/redis_options.h"
#include "server/resp/resp_server.h"
#include "server/security/auth.h"
#include "server/service/filter_service.h"
#include "server/service/in_process_calls.h"
#include "server/service/transfers.h"
#include "server/storage/persistence.h"

namespace cuckoo::server {

class RedisCommands final : public resp::CommandHandler {
 public:
  // `auth` null: no authentication. `service`: this server's FilterService,
  // and `channel` an in-process channel to it. `metrics` may be null.
  RedisCommands(FilterRegistry* registry, const Authenticator* auth, Metrics* metrics,
                FilterServiceImpl* service, std::shared_ptr<grpc::Channel> channel,
                RedisOptions options);
  ~RedisCommands() override;  // Waits for dump and load work running.

  size_t Execute(resp::Session* session, absl::Span<const resp::Command> commands,
                 resp::Completion done) override;
  // A connection closed: its dumps and loads end (EndTransfersOf).
  void Closed(resp::Session* session) override;
  // After MULTI: EXEC, DISCARD, MULTI, WATCH, QUIT and RESET run; another
  // command is queued if it passes the checks Redis makes at queue time
  // (known, arity, authentication, and the grant on each of its keys), else
  // refused (and EXEC will answer EXECABORT).
  Queueing Queue(resp::Session* session, const resp::Command& command, std::string* error) override;
  // An EXEC's writes applied here (single node) are one transaction of the
  // write-ahead log, all or none across a crash: begun at its first such
  // write (WriteHere), it ends at the first of its commands that could wait
  // for the log (one not in KeepsLogTransaction, or a CF.ADD that creates
  // its filter), and wherever the connection stops running the EXEC's
  // commands (ExecPaused); the next such write begins another.
  void ExecPaused(resp::Session* session) override;

  // For INFO's clients section.
  void set_connection_count(std::function<size_t()> count) { connections_ = std::move(count); }
  // For INFO: the connections' memory as counted, and how many were closed
  // to keep it under --redis-client-memory.
  struct ClientMemory {
    size_t bytes = 0;
    uint64_t evicted = 0;
  };
  void set_client_memory(std::function<ClientMemory()> f) { client_memory_ = std::move(f); }
  // For INFO's server section: the bound port.
  void set_port(int port) { port_ = port; }
  // For CLIENT LIST and CLIENT KILL: the server's connections
  // (resp::RespServer::ListClients, KillClients).
  using ListClients = std::function<void(std::function<void(std::vector<resp::ClientInfo>)>)>;
  using KillClients = std::function<void(resp::ClientFilter, std::function<void(size_t)>)>;
  void set_clients(ListClients list, KillClients kill) {
    list_clients_ = std::move(list);
    kill_clients_ = std::move(kill);
  }

  // The reply to a command after authentication failed or is missing, etc.:
  // public for tests of the error wording.
  static std::string WrongArity(std::string_view command);
  // The growth of a filter made over this port (CF.RESERVE, and CF.ADD or
  // CF.INSERT on a missing key): `growth_factor` (0: fixed), growing for
  // repeated keys as RedisBloom's filters do (grow_on_repeats), up to
  // kRedisMaxGrowth times its capacity or as far as its generation schedule
  // goes, whichever is less (max_capacity, which bounds the memory a client
  // repeating one key can make it take).
  static void SetGrowth(v1::CreateFilterRequest* req, uint32_t growth_factor);
  // "" if `req` (made here, with SetGrowth) makes a filter; else the error
  // reply: for a capacity too large, the largest the same settings accept.
  static std::string CreationError(const v1::CreateFilterRequest& req);

 private:
  // An entry of the command table (server/resp/commands/commands_internal.h).
  struct CommandSpec;
  struct Call;
  struct Dump;
  struct Load;
  struct Expired;

  // The command table, one entry per command in kRedisCommandNames's order
  // but "unknown" (resp_commands.cc).
  static absl::Span<const CommandSpec> Commands();
  // One command (or a run of merged ones) given to Execute: looked up in
  // the table, its arity and the connection's authentication checked, then
  // its handler called.
  size_t Dispatch(resp::Session* session, absl::Span<const resp::Command> commands,
                  resp::Completion done);
  // The checks a command passes before it runs or is queued: known
  // (`command` its index), its arity, the connection authenticated with a
  // token still valid; false with the error reply written.
  bool Admissible(resp::Session* session, const resp::Command& c, size_t command, resp::Writer& w);
  // The authenticated caller for this command, or an error reply written.
  bool Authorize(resp::Session* session, resp::Writer& w, size_t command, Access need,
                 std::string_view filter, Caller* caller);
  bool CurrentCaller(resp::Session* session, resp::Writer& w, Caller* caller);
  // A refusal for want of `need` on `filter` ("*": every filter): counted in
  // cuckood_auth_failures_total under `command` and audited as `method`.
  // The caller writes the reply.
  void RecordDenied(const resp::Session& session, size_t command, std::string_view method,
                    const Caller& caller, std::string_view filter, Access need);
  // Whether the filter named `key` exists and grows as RedisBloom's do, for
  // repeated keys too (grow_on_repeats): a CF.ADD it answers FULL gets
  // RedisBloom's "Maximum expansions reached", other filters' "Filter is
  // full".
  bool GrowsForRepeats(std::string_view key) const;
  // The reads' prologue: the read grant on `key`, the name's check, then
  // the filter (null if there is none of that name); false with the error
  // reply written. CF.EXISTS, CF.MEXISTS and CF.COUNT answer a key that
  // cannot be a filter's name (not UTF-8, too long) as RedisBloom answers a
  // missing key; CF.INFO refuses it, saying why.
  bool ReadFilter(resp::Session* s, resp::Writer& w, size_t command, std::string_view key,
                  std::shared_ptr<CuckooFilter>* filter);
  // How many of `commands`, from the first, a CF.EXISTS, CF.ADD, CF.ADDNX
  // or CF.DEL (`command`) can run as one batch: the same command on the
  // same filter, every item valid, within --max-batch-keys.
  size_t ItemRunLength(absl::Span<const resp::Command> commands, size_t command) const;

  // CF.* reads (cf_read_commands.cc), on the connection's thread.
  void Exists(resp::Session* s, absl::Span<const resp::Command> run, size_t command,
              resp::Completion done, std::chrono::steady_clock::time_point start);
  void MExists(resp::Session* s, const resp::Command& c, resp::Writer& w);
  void Count(resp::Session* s, const resp::Command& c, resp::Writer& w);
  void Info(resp::Session* s, const resp::Command& c, resp::Writer& w);

  // CF.* writes (cf_write_commands.cc): CF.ADD, CF.ADDNX, CF.INSERT,
  // CF.INSERTNX and CF.DEL, a run of them at once.
  void Write(resp::Session* s, absl::Span<const resp::Command> run, size_t command,
             resp::Completion done, std::chrono::steady_clock::time_point start);
  // How many of `commands`, from the first, a CF.INSERT or CF.INSERTNX
  // (`command`) can run as one batch: the same command on the same filter
  // with the same options, every item valid, within --max-batch-keys.
  size_t InsertRunLength(absl::Span<const resp::Command> commands, size_t command) const;
  // Write's path on a single node, for a filter that exists: applied on
  // this thread (FilterServiceImpl::InsertNow, DeleteNow), then Applied(),
  // and answered once durable. `sizes`: each command's keys.
  void WriteHere(resp::Session* s, const Caller& caller, size_t command, std::string_view filter,
                 absl::Span<const std::string_view> items, std::vector<size_t> sizes,
                 resp::Completion done, std::chrono::steady_clock::time_point start);
  // Write's other path: a gRPC call over the in-process channel (creating
  // the filter first if it does not exist, `capacity` keys).
  void WriteThroughService(resp::Session* s, size_t command, std::string_view filter,
                           absl::Span<const std::string_view> items, std::vector<size_t> sizes,
                           bool exists, uint64_t capacity, resp::Completion done,
                           std::chrono::steady_clock::time_point start);
  // The replies of a write's run of commands (cf_write_commands.cc).
  struct RunReplies;
  // Counts each of `replies` in the metrics and sends them.
  void Answer(size_t command, std::chrono::steady_clock::time_point start, RunReplies* replies,
              resp::Completion& done);
  void Reserve(resp::Session* s, absl::Span<const resp::Command> run, size_t command,
               resp::Completion done, std::chrono::steady_clock::time_point start);

  // CF.SCANDUMP and CF.LOADCHUNK (dump_commands.cc).
  void ScanDump(resp::Session* s, absl::Span<const resp::Command> run, size_t command,
                resp::Completion done, std::chrono::steady_clock::time_point start);
  void LoadChunk(resp::Session* s, absl::Span<const resp::Command> run, size_t command,
                 resp::Completion done, std::chrono::steady_clock::time_point start);
  // CF.SCANDUMP's two cases: a chunk of a dump taken (`it` not 0), and
  // iterator 0, which takes the dump. `reply` answers.
  using DumpReply = std::function<void(resp::Completion&, std::string_view error, uint64_t iterator,
                                       std::string_view data)>;
  void ReadDumpChunk(uint64_t owner, std::string_view key, int64_t it, resp::Completion done,
                     DumpReply reply);
  void StartDump(uint64_t owner, std::string_view key, std::shared_ptr<const CuckooFilter> filter,
                 const std::string& token, resp::Completion done, DumpReply reply);
  // CF.LOADCHUNK's two cases: the header (chunk 1), which starts a load,
  // and the chunks after it. `reply` answers ("" for OK).
  using LoadReply = std::function<void(resp::Completion&, std::string_view error)>;
  void LoadHeader(uint64_t owner, std::string_view key, uint64_t id, std::string_view data,
                  resp::Completion done, LoadReply reply);
  void LoadNextChunk(uint64_t owner, std::string_view key, uint64_t id, uint64_t chunk,
                     std::string_view data, const std::string& token, resp::Completion done,
                     LoadReply reply);
  // Ends the dumps and loads of connection `owner` (Session::id): when it
  // closes, and on RESET. Their files go on a transfer thread; a step
  // running for one (the export, a chunk's write) ends it when it is done.
  void EndTransfersOf(uint64_t owner);
  // Whether the filter `dump` was taken from was dropped since (or dropped
  // and made again).
  bool FilterDropped(const Dump& dump) const;
  // Takes out of dumps_ those whose filter was dropped, remembered in
  // expired_ for the error their client gets next; for Discard.
  std::vector<std::shared_ptr<Dump>> TakeDroppedDumps(std::chrono::steady_clock::time_point now)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(transfer_mu_);
  // A step of `load` done (busy no more): false if its connection ended
  // meanwhile (then the caller ends it: EndLoad).
  bool StepDone(Load& load);
  // CF.SCANDUMP's and CF.LOADCHUNK's helpers. A dump or load taken out of
  // dumps_ / loads_ is handed to Discard, which removes its file on a
  // transfer thread.
  void Discard(std::shared_ptr<Dump> dump);
  void Discard(std::shared_ptr<Load> load);
  // Drops the dumps and loads idle for transfer_idle_timeout, and the
  // dumps whose filter was dropped (the sweeper's check).
  void ExpireTransfers(std::chrono::steady_clock::time_point now);
  // The error for a dump (or load) not in progress, saying it was dropped
  // for its idle time if it was.
  std::string NoDump(std::string_view key, int64_t iterator, uint64_t id)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(transfer_mu_);
  std::string NoLoad(std::string_view key, uint64_t id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(transfer_mu_);
  // A dump's export to its private file (in `dir`), on a transfer thread:
  // "" or the error reply.
  std::string ExportDump(const std::shared_ptr<Dump>& dump, const std::string& dir,
                         const std::string& token);
  // A load's steps, on a transfer thread, each returning its error reply
  // ("" for OK): the header's (claims the disk space, creates the file),
  // each chunk's (written; the last one then imported by ImportLoad).
  std::string StartLoad(const std::shared_ptr<Load>& load);
  std::string WriteChunk(const std::shared_ptr<Load>& load, std::string_view data,
                         const std::string& token);
  std::string ImportLoad(const std::shared_ptr<Load>& load, const std::string& token);
  // A load done with or failed, on a transfer thread: out of loads_, its
  // file removed.
  void EndLoad(const std::shared_ptr<Load>& load);

  // Connection commands (connection_commands.cc).
  void Ping(resp::Session* s, const resp::Command& c, resp::Writer& w);
  void Echo(resp::Session* s, const resp::Command& c, resp::Writer& w);
  void Select(resp::Session* s, const resp::Command& c, resp::Writer& w);
  void Quit(resp::Session* s, const resp::Command& c, resp::Writer& w);
  void Reset(resp::Session* s, const resp::Command& c, resp::Writer& w);
  // HELLO and AUTH: answered at once, or after the delay Hello or Auth
  // gives.
  void HelloCommand(resp::Session* s, absl::Span<const resp::Command> run, size_t command,
                    resp::Completion done, std::chrono::steady_clock::time_point start);
  void AuthCommand(resp::Session* s, absl::Span<const resp::Command> run, size_t command,
                   resp::Completion done, std::chrono::steady_clock::time_point start);
  // Counts `reply` and sends it after `delay` (at once if none).
  void ReplyAfter(absl::Duration delay, size_t command, std::string reply, resp::Completion done,
                  std::chrono::steady_clock::time_point start);
  // AUTH and HELLO: what to wait before the reply is sent (a failed AUTH
  // after a few is answered later and later, see AuthFailed).
  absl::Duration Hello(resp::Session* s, const resp::Command& c, resp::Writer& w);
  absl::Duration Auth(resp::Session* s, const resp::Command& c, resp::Writer& w);
  // Counts, audits and slows a failed AUTH: returns the delay for its reply,
  // growing with the failures of the connection and of its peer address.
  absl::Duration AuthFailed(resp::Session* s, AuthFailure why);
  // AUTH's and HELLO ... AUTH's check of `token`: on success marks the
  // session authenticated and returns nullopt; otherwise answers WRONGPASS
  // and returns AuthFailed's delay.
  std::optional<absl::Duration> SignIn(resp::Session* s, std::string_view token, resp::Writer& w);
  // CLIENT: LIST and KILL ask the server about every connection (answered
  // later, from its threads); the rest are Client's, at once.
  void ClientCommand(resp::Session* s, absl::Span<const resp::Command> run, size_t command,
                     resp::Completion done, std::chrono::steady_clock::time_point start);
  void ClientList(resp::Session* s, const resp::Command& c, size_t command, resp::Completion done,
                  std::chrono::steady_clock::time_point start);
  void Client(resp::Session* s, const resp::Command& c, resp::Writer& w);
  void CommandInfo(resp::Session* s, const resp::Command& c, resp::Writer& w);
  static void WriteCommandEntry(const CommandSpec& d, resp::Writer& w);
  void ServerInfo(resp::Session* s, const resp::Command& c, resp::Writer& w);
  void Config(resp::Session* s, const resp::Command& c, resp::Writer& w);

  // Transactions (connection_commands.cc): the state is the Session's,
  // the queue the connection's (resp::Session::multi).
  void Multi(resp::Session* s, const resp::Command& c, resp::Writer& w);
  void Exec(resp::Session* s, const resp::Command& c, resp::Writer& w);
  void Discard(resp::Session* s, const resp::Command& c, resp::Writer& w);
  void Watch(resp::Session* s, const resp::Command& c, resp::Writer& w);
  void Unwatch(resp::Session* s, const resp::Command& c, resp::Writer& w);
  // MODULE LIST (connection_commands.cc).
  void Module(resp::Session* s, const resp::Command& c, resp::Writer& w);

  // Keyspace commands over filter names (keyspace_commands.cc). DEL and
  // UNLINK drop the filters named, FLUSHALL and FLUSHDB every filter (each
  // needs the admin grant on every filter it drops, checked before any is
  // dropped), one DropFilter call after another.
  void DropKeys(resp::Session* s, absl::Span<const resp::Command> run, size_t command,
                resp::Completion done, std::chrono::steady_clock::time_point start);
  void Flush(resp::Session* s, absl::Span<const resp::Command> run, size_t command,
             resp::Completion done, std::chrono::steady_clock::time_point start);
  // Drops `names`; answers the number dropped, or +OK with `ok`.
  void DropNames(resp::Session* s, size_t command, std::vector<std::string> names, bool ok,
                 resp::Completion done, std::chrono::steady_clock::time_point start);
  // RENAME and RENAMENX: one RenameFilter call (the admin grant on both
  // names, as dropping one and creating the other need).
  void RenameKey(resp::Session* s, absl::Span<const resp::Command> run, size_t command,
                 resp::Completion done, std::chrono::steady_clock::time_point start);
  void MemoryCommand(resp::Session* s, const resp::Command& c, resp::Writer& w);
  void KeyExists(resp::Session* s, const resp::Command& c, resp::Writer& w);
  void Type(resp::Session* s, const resp::Command& c, resp::Writer& w);
  void Scan(resp::Session* s, const resp::Command& c, resp::Writer& w);
  void Keys(resp::Session* s, const resp::Command& c, resp::Writer& w);
  void DbSize(resp::Session* s, const resp::Command& c, resp::Writer& w);
  // expiry_commands.cc: EXPIRE, PEXPIRE, EXPIREAT, PEXPIREAT and PERSIST
  // (SetFilterExpiry through the service); TTL, PTTL, EXPIRETIME and
  // PEXPIRETIME (read here).
  void SetExpiry(resp::Session* s, absl::Span<const resp::Command> run, size_t command,
                 resp::Completion done, std::chrono::steady_clock::time_point start);
  void ExpiryInfo(resp::Session* s, const resp::Command& c, resp::Writer& w);

  // Counts a reply in the metrics (outcome from its first bytes).
  void Record(size_t command, std::string_view reply, std::chrono::steady_clock::time_point start,
              size_t keys);
  // Adds "authorization" metadata for the session's token.
  void AddCredentials(const resp::Session& s, grpc::ClientContext* ctx) const;

  FilterRegistry* const registry_;
  const Authenticator* const auth_;
  Metrics* const metrics_;
  FilterServiceImpl* const service_;
  const std::shared_ptr<grpc::Channel> channel_;
  const std::unique_ptr<v1::FilterService::Stub> stub_;
  // Where the calls through stub_ complete.
  InProcessCalls in_process_;
  const RedisOptions options_;
  std::function<size_t()> connections_;
  std::function<ClientMemory()> client_memory_;
  ListClients list_clients_;
  KillClients kill_clients_;
  int port_ = 0;
  const absl::Time started_ = absl::Now();

  // In-process gRPC calls, and writes waiting to be durable, whose callbacks
  // have not returned.
  std::atomic<int64_t> calls_{0};
  // Dumps and loads. Held for lookups and bookkeeping only: never across
  // file work.
  Mutex transfer_mu_;
  std::atomic<uint64_t> next_dump_{1};
  std::atomic<uint64_t> next_load_{1};  // Names loads' files.
  std::map<uint64_t, std::shared_ptr<Dump>> dumps_ ABSL_GUARDED_BY(transfer_mu_);
  std::map<std::string, std::shared_ptr<Load>> loads_ ABSL_GUARDED_BY(transfer_mu_);
  // Those dropped for their idle time, newest last.
  std::deque<Expired> expired_ ABSL_GUARDED_BY(transfer_mu_);
  // Failed AUTHs by peer address (without the port), for the delay; at most
  // kMaxAuthPeers, forgotten kAuthPeerMemory after their last failure.
  struct PeerAuthFailures {
    uint32_t failures = 0;
    absl::Time last;
  };
  Mutex auth_mu_;
  absl::flat_hash_map<std::string, PeerAuthFailures> auth_peers_ ABSL_GUARDED_BY(auth_mu_);
  absl::Time auth_peers_swept_ ABSL_GUARDED_BY(auth_mu_);
  RateLimitedAudit auth_audit_{50, "failed Redis AUTHs"};
  // Where delayed AUTH replies wait (one thread, timers only).
  boost::asio::io_context delay_io_{1};
  boost::asio::executor_work_guard<boost::asio::io_context::executor_type> delay_work_{
      delay_io_.get_executor()};
  std::thread delay_thread_{[this] { delay_io_.run(); }};
  // Drops idle dumps and loads (ExpireTransfers), registered as
  // expire_watch_ from construction to destruction.
  IdleSweeper idle_{IdleSweeper::IntervalFor(options_.transfer_idle_timeout)};
  uint64_t expire_watch_ = 0;
  // Dumps' and loads' file work (the export's and import's streams, each
  // chunk read or written): one thread per dump and load that may be
  // unfinished, so that none waits behind another's long step (a dump's
  // copy being written, a load's import, a disk that stalls). Last: joined
  // first.
  boost::asio::thread_pool transfer_threads_{kMaxRedisDumps + kMaxRedisLoads};
};

}  // namespace cuckoo::server

#endif  // CUCKOO_SERVER_RESP_COMMANDS_RESP_COMMANDS_H_
