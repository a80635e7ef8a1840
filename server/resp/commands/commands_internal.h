// What the files of RedisCommands share (private to server/resp/commands/):
// the command indices, the command table's entry (CommandSpec: name, arity,
// access, whether it writes, handler), the argument checks and error
// texts, and the state of in-process calls, dumps and loads.
//
// The families: resp_commands.cc holds the table, Dispatch and the checks
// every command passes; cf_read_commands.cc CF.EXISTS, CF.MEXISTS,
// CF.COUNT and CF.INFO; cf_write_commands.cc CF.ADD, CF.ADDNX, CF.INSERT,
// CF.INSERTNX, CF.DEL and CF.RESERVE; dump_commands.cc CF.SCANDUMP and
// CF.LOADCHUNK; keyspace_commands.cc DEL, UNLINK, FLUSHALL, FLUSHDB, EXISTS,
// TYPE, SCAN, KEYS, DBSIZE and MEMORY; expiry_commands.cc EXPIRE, PEXPIRE,
// EXPIREAT, PEXPIREAT, TTL, PTTL, PERSIST, EXPIRETIME and PEXPIRETIME;
// connection_commands.cc the rest
// (PING, AUTH, HELLO, CLIENT, MULTI, EXEC, DISCARD, WATCH, MODULE, COMMAND,
// INFO, CONFIG, ...).
#ifndef CUCKOO_SERVER_RESP_COMMANDS_COMMANDS_INTERNAL_H_
#define CUCKOO_SERVER_RESP_COMMANDS_COMMANDS_INTERNAL_H_

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "server/resp/commands/command_names.h"
#include "server/resp/commands/resp_commands.h"

namespace cuckoo::server {
namespace redis {

// Indices into kRedisCommandNames.
enum : size_t {
  kCfReserve,
  kCfAdd,
  kCfAddNx,
  kCfInsert,
  kCfInsertNx,
  kCfExists,
  kCfMExists,
  kCfDel,
  kCfCount,
  kCfInfo,
  kCfScanDump,
  kCfLoadChunk,
  kPing,
  kEcho,
  kHello,
  kAuth,
  kSelect,
  kClient,
  kQuit,
  kCommand,
  kInfo,
  kDel,
  kExists,
  kType,
  kScan,
  kKeys,
  kDbSize,
  kConfig,
  kReset,
  kMulti,
  kExec,
  kDiscard,
  kWatch,
  kUnwatch,
  kUnlink,
  kFlushAll,
  kFlushDb,
  kMemory,
  kModule,
  kExpire,
  kPExpire,
  kExpireAt,
  kPExpireAt,
  kTtl,
  kPTtl,
  kPersist,
  kExpireTime,
  kPExpireTime,
  kRename,
  kRenameNx,
  kUnknown,
};
static_assert(kRedisCommandNames[kCfLoadChunk] == "cf.loadchunk");
static_assert(kRedisCommandNames[kReset] == "reset");
static_assert(kRedisCommandNames[kModule] == "module");
static_assert(kRedisCommandNames[kPExpireTime] == "pexpiretime");
static_assert(kRedisCommandNames[kRenameNx] == "renamenx");
static_assert(kUnknown == kRedisCommands - 1);

// RedisBloom's type name for a cuckoo filter (TYPE).
inline constexpr std::string_view kTypeName = "MBbloomCF";
// The Redis version whose protocol this port speaks (HELLO, INFO): what
// clients check before they use RESP3 and newer commands.
inline constexpr std::string_view kRedisVersion = "7.0.0";
// RedisBloom's module version reported to clients that look for it.
inline constexpr int kBloomModuleVersion = 20612;

inline absl::string_view A(std::string_view s) { return absl::string_view(s.data(), s.size()); }

inline bool Is(std::string_view a, std::string_view b) {
  return absl::EqualsIgnoreCase(A(a), A(b));
}

// A strict decimal integer, as Redis's string2ll: no spaces, no '+'.
bool ParseInt(std::string_view s, int64_t* out);

// `s` shown in a message: at most 64 bytes, non-printable bytes escaped.
std::string Shown(std::string_view s);

// The error reply for a failed gRPC call of this server's own service.
std::string StatusError(const grpc::Status& st);

// The filter name check of the registry, as an error reply.
std::string NameError(std::string_view key, const absl::Status& s);

// What an item check says of one item: "" if it is a valid key.
std::string ItemError(std::string_view item, uint32_t max_key_bytes);

// Whether `name` matches the glob `pattern` (KEYS, SCAN MATCH, CONFIG GET).
bool Matches(std::string_view pattern, const std::string& name);

}  // namespace redis

// What a command's caller must have (CommandSpec::access). Dispatch checks
// that the connection is authenticated for all but kNone; the grant on a
// filter is checked by the handler, after its own argument checks.
enum class RedisAccess : uint8_t {
  kNone,        // runs before authentication (AUTH, HELLO, QUIT, RESET)
  kConnection,  // an authenticated connection, no grant on a filter
  kRead,        // the read grant on the filter (or shows only those with it)
  kWrite,       // the write grant on the filter
  kAdmin,       // the admin grant on the filter (each filter, for DEL)
};

// The keys the metrics count for a command answered by a `reply` handler.
enum class RedisKeys : uint8_t { kNone, kOne, kItems /* all after the filter's name */ };

// One entry of the command table (RedisCommands::Commands()), as Redis's
// redisCommandTable: in kRedisCommandNames's order.
struct RedisCommands::CommandSpec {
  // Lower case, as COMMAND lists it and the metrics label it.
  std::string_view name;
  // Arity as Redis's command table gives it: n exactly, or -n for at least
  // n (the command's name included).
  int arity;
  // COMMAND's flags (space-separated) and key positions.
  std::string_view flags;
  int first_key, last_key, step;
  RedisAccess access;
  // Changes state (through this server's FilterService).
  bool writes;
  // The handler: one of `reply` (answers at once, on the connection's
  // thread, into the Writer; Dispatch counts it and sends it) and `run`
  // (answers through the Completion itself, maybe later).
  void (RedisCommands::*reply)(resp::Session*, const resp::Command&, resp::Writer&);
  RedisKeys keys;
  void (RedisCommands::*run)(resp::Session*, absl::Span<const resp::Command>, size_t,
                             resp::Completion, std::chrono::steady_clock::time_point);
  // For a `run` handler: how many of the pipelined commands, from this one,
  // go as one batch (given them and the command's index); null: one.
  size_t (RedisCommands::*batch)(absl::Span<const resp::Command>, size_t) const;
};

// Counts an in-process call's callback as done when it returns.
struct CallDone {
  std::atomic<int64_t>* calls;
  ~CallDone() { calls->fetch_sub(1, std::memory_order_acq_rel); }
};

// One in-process gRPC call and what its reply needs.
struct RedisCommands::Call {
  grpc::ClientContext ctx;
  v1::CreateFilterRequest create;
  v1::CreateFilterResponse created;
  v1::InsertRequest insert;
  v1::InsertResponse inserted;
  v1::DeleteRequest del;
  v1::DeleteResponse deleted;
  v1::DropFilterRequest drop;
  v1::DropFilterResponse dropped;
  v1::SetFilterExpiryRequest expiry;
  v1::SetFilterExpiryResponse expiry_set;
  v1::RenameFilterRequest rename;
  v1::RenameFilterResponse renamed;
  int protocol = 2;
  size_t command = 0;
  // The filter written to.
  std::string key;
  // The keys of each command merged into this write (one reply each).
  std::vector<size_t> sizes;
  std::chrono::steady_clock::time_point start;
  resp::Completion done;
  std::string token;
};

// A CF.SCANDUMP in progress: its snapshot, whole, in a private file
// removed from the directory once open (its space goes with the last
// descriptor). It belongs to the connection that started it (`owner`, its
// Session::id) and ends with it. The fields under transfer_mu_ but for fd
// and claim, which the export step sets before `ready` and the chunk reads
// then only read (pread).
struct RedisCommands::Dump {
  ~Dump() {
    if (fd >= 0) ::close(fd);
  }
  uint64_t id = 0;
  uint64_t owner = 0;
  std::string name;
  // The filter dumped, to see that it was dropped (or dropped and made
  // again) since: a weak reference, which keeps none of its memory.
  std::weak_ptr<const CuckooFilter> filter;
  std::string path;  // For messages: the file is removed once open.
  int fd = -1;
  uint64_t bytes = 0;
  uint64_t items = 0;
  bool ready = false;
  // Its connection closed (or RESET) while the copy was being written:
  // the export's end removes it.
  bool owner_gone = false;
  // Chunk reads posted and not done: not dropped for its idle time then.
  int reading = 0;
  std::chrono::steady_clock::time_point touched;
  TransferDisk::Claim claim;  // The copy's disk space not written yet.
};

// A CF.LOADCHUNK in progress: the chunks so far, in a private file removed
// from the directory once open. It belongs to the connection that sent its
// header (`owner`) and ends with it. The fields under transfer_mu_ but for
// fd and claim, which only the step running on a transfer thread uses
// (`busy` says one runs).
struct RedisCommands::Load {
  ~Load() {
    if (fd >= 0) ::close(fd);
  }
  uint64_t id = 0;
  uint64_t owner = 0;
  std::string name;
  std::string path;  // For messages: the file is removed once open.
  int fd = -1;
  uint64_t bytes = 0;
  uint64_t received = 0;
  uint64_t next_chunk = 2;
  // A step of it (creating its file, writing a chunk, the import) runs.
  bool busy = false;
  // Its connection closed (or RESET) while a step ran: the step's end
  // removes it.
  bool owner_gone = false;
  std::chrono::steady_clock::time_point touched;
  TransferDisk::Claim claim;  // The upload's disk space not written yet.
};

// A dump or load dropped for its idle time, or a dump whose filter was
// dropped: remembered for the error its client gets next.
struct RedisCommands::Expired {
  bool load = false;
  bool filter_dropped = false;  // Else idle.
  std::string name;
  uint64_t id = 0;
  uint64_t done = 0;  // Bytes received (a load) or of the copy (a dump).
  std::chrono::steady_clock::time_point when;
};

}  // namespace cuckoo::server

#endif  // CUCKOO_SERVER_RESP_COMMANDS_COMMANDS_INTERNAL_H_
