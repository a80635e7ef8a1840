#include "server/resp/commands/resp_commands.h"

#include <fcntl.h>
#include <fnmatch.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <system_error>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "base/little_endian.h"
#include "base/units.h"
#include "boost/asio/post.hpp"
#include "boost/asio/steady_timer.hpp"
#include "base/scratch.h"
#include "cuckoo_version.h"
#include "server/observability/logging.h"
#include "server/resp/commands/command_names.h"
#include "server/service/status.h"
#include "spdlog/spdlog.h"
#include "xxhash.h"

namespace cuckoo::server {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
using resp::Command;
using resp::Session;
using resp::Writer;

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
  kUnknown,
};
static_assert(kRedisCommandNames[kCfLoadChunk] == "cf.loadchunk");
static_assert(kRedisCommandNames[kReset] == "reset");
static_assert(kUnknown == kRedisCommands - 1);

// Arity as Redis's command table gives it: n exactly, or -n for at least n
// (the command's name included).
constexpr int kArity[kRedisCommands] = {
    -3, 3,  3,  -4, -4, 3,  -3, 3,  3,  2, 3, 4,  // CF.*
    -1, 2,  -1, -2, 2,  -2, -1, -1, -1,           // PING .. INFO
    -2, -2, 2,  -2, 2,  1,  -2, 1,  0,            // DEL .. RESET, unknown
};

// RedisBloom's type name for a cuckoo filter (TYPE).
constexpr std::string_view kTypeName = "MBbloomCF";
// The Redis version whose protocol this port speaks (HELLO, INFO): what
// clients check before they use RESP3 and newer commands.
constexpr std::string_view kRedisVersion = "7.0.0";
// RedisBloom's module version reported to clients that look for it.
constexpr int kBloomModuleVersion = 20612;

absl::string_view A(std::string_view s) { return absl::string_view(s.data(), s.size()); }

bool Is(std::string_view a, std::string_view b) { return absl::EqualsIgnoreCase(A(a), A(b)); }

// A strict decimal integer, as Redis's string2ll: no spaces, no '+'.
bool ParseInt(std::string_view s, int64_t* out) {
  if (s.empty() || s.size() > 20) return false;
  size_t i = 0;
  const bool negative = s[0] == '-';
  if (negative) i = 1;
  if (i == s.size()) return false;
  uint64_t v = 0;
  for (; i < s.size(); ++i) {
    if (s[i] < '0' || s[i] > '9') return false;
    const uint64_t d = static_cast<uint64_t>(s[i] - '0');
    if (v > (UINT64_MAX - d) / 10) return false;
    v = v * 10 + d;
  }
  if (negative) {
    if (v > uint64_t{1} << 63) return false;
    *out = static_cast<int64_t>(0 - v);
  } else {
    if (v > static_cast<uint64_t>(INT64_MAX)) return false;
    *out = static_cast<int64_t>(v);
  }
  return true;
}

// `s` shown in a message: at most 64 bytes, non-printable bytes escaped.
std::string Shown(std::string_view s) {
  std::string out;
  for (size_t i = 0; i < s.size() && i < 64; ++i) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (c >= 0x20 && c < 0x7f && c != '\'') {
      out.push_back(static_cast<char>(c));
    } else {
      absl::StrAppendFormat(&out, "\\x%02x", c);
    }
  }
  if (s.size() > 64) out += "...";
  return out;
}

// The error reply for a failed gRPC call of this server's own service.
std::string StatusError(const grpc::Status& st) {
  switch (st.error_code()) {
    case grpc::StatusCode::UNAUTHENTICATED:
      return "NOAUTH " + st.error_message();
    case grpc::StatusCode::PERMISSION_DENIED:
      return "NOPERM " + st.error_message();
    default:
      return "ERR " + st.error_message();
  }
}

// The filter name check of the registry, as an error reply.
std::string NameError(std::string_view key, const absl::Status& s) {
  return absl::StrFormat("ERR invalid filter name '%s': %s", Shown(key), s.message());
}

RedisOutcome OutcomeOf(std::string_view reply) {
  if (reply.empty() || reply[0] != '-') return RedisOutcome::kOk;
  if (absl::StartsWith(A(reply), "-NOAUTH") || absl::StartsWith(A(reply), "-NOPERM") ||
      absl::StartsWith(A(reply), "-WRONGPASS")) {
    return RedisOutcome::kDenied;
  }
  return RedisOutcome::kError;
}

// SCAN's order: a 63-bit hash of the name, never 0 (cursor 0 starts and
// ends a scan). Names present from a scan's start to its end are returned
// exactly once whatever else is created or dropped meanwhile.
uint64_t ScanHash(std::string_view name) {
  return (XXH3_64bits(name.data(), name.size()) >> 1) | 1;
}

bool Matches(std::string_view pattern, const std::string& name) {
  if (pattern == "*") return true;
  const std::string p(pattern);
  return ::fnmatch(p.c_str(), name.c_str(), 0) == 0;
}

// What an item check says of one item: "" if it is a valid key.
std::string ItemError(std::string_view item, uint32_t max_key_bytes) {
  if (item.empty()) {
    return absl::StrFormat("ERR item is empty; cuckood items are 1 to %u bytes", max_key_bytes);
  }
  if (item.size() > max_key_bytes) {
    return absl::StrFormat("ERR item is %u bytes; the server's limit (--max-key-bytes) is %u bytes",
                           item.size(), max_key_bytes);
  }
  return std::string();
}

// CF.INSERT's and CF.INSERTNX's options, up to ITEMS: the error reply's
// text, or "" with *items_at the index of the first item.
std::string InsertOptions(const Command& c, size_t command, uint64_t* capacity, bool* create,
                          size_t* items_at) {
  size_t i = 2;
  while (i < c.args.size()) {
    if (Is(c.args[i], "CAPACITY")) {
      int64_t v;
      if (i + 1 >= c.args.size() || !ParseInt(c.args[i + 1], &v) || v < 1 ||
          v > (int64_t{1} << 40)) {
        return absl::StrFormat(
            "ERR Bad capacity: CAPACITY must be followed by an integer from 1 to %d",
            int64_t{1} << 40);
      }
      *capacity = static_cast<uint64_t>(v);
      i += 2;
    } else if (Is(c.args[i], "NOCREATE")) {
      *create = false;
      ++i;
    } else if (Is(c.args[i], "ITEMS")) {
      if (i + 1 == c.args.size()) break;
      *items_at = i + 1;
      return std::string();
    } else {
      return absl::StrFormat(
          "ERR unknown argument '%s' (expected CAPACITY c, NOCREATE or ITEMS item...)",
          Shown(c.args[i]));
    }
  }
  return absl::StrFormat("ERR %s needs ITEMS followed by at least one item",
                         absl::AsciiStrToUpper(A(kRedisCommandNames[command])));
}

}  // namespace

static_assert((kMaxRedisDumps + kMaxRedisLoads) * 2 * (kRedisDumpChunkBytes + 4096) <=
                  kRedisTransferBytes + (kMaxRedisDumps + kMaxRedisLoads) * 8192,
              "the transfer threads' chunks are in the stated overhead (kRedisTransferBytes)");

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
  int protocol = 2;
  size_t command = 0;
  // The keys of each command merged into this write (one reply each).
  std::vector<size_t> sizes;
  Clock::time_point start;
  resp::Completion done;
  std::string token;
};

// A CF.SCANDUMP in progress: its snapshot, whole, in a private file. The
// fields under transfer_mu_ but for fd and claim, which the export step
// sets before `ready` and the chunk reads then only read (pread).
struct RedisCommands::Dump {
  ~Dump() {
    if (fd >= 0) ::close(fd);
  }
  uint64_t id = 0;
  std::string name;
  std::string path;
  int fd = -1;
  uint64_t bytes = 0;
  uint64_t items = 0;
  bool ready = false;
  // Chunk reads posted and not done: not dropped for its idle time then.
  int reading = 0;
  std::chrono::steady_clock::time_point touched;
  TransferDisk::Claim claim;  // The copy's disk space not written yet.
};

// A CF.LOADCHUNK in progress: the chunks so far, in a private file. The
// fields under transfer_mu_ but for fd and claim, which only the step
// running on a transfer thread uses (`busy` says one runs).
struct RedisCommands::Load {
  ~Load() {
    if (fd >= 0) ::close(fd);
  }
  uint64_t id = 0;
  std::string name;
  std::string path;
  int fd = -1;
  uint64_t bytes = 0;
  uint64_t received = 0;
  uint64_t next_chunk = 2;
  // A step of it (creating its file, writing a chunk, the import) runs.
  bool busy = false;
  std::chrono::steady_clock::time_point touched;
  TransferDisk::Claim claim;  // The upload's disk space not written yet.
};

// A dump or load dropped for its idle time.
struct RedisCommands::Expired {
  bool load = false;
  std::string name;
  uint64_t id = 0;
  uint64_t done = 0;  // Bytes received (a load) or of the copy (a dump).
  std::chrono::steady_clock::time_point when;
};

RedisCommands::RedisCommands(FilterRegistry* registry, const Authenticator* auth, Metrics* metrics,
                             FilterServiceImpl* service, std::shared_ptr<grpc::Channel> channel,
                             RedisOptions options)
    : registry_(registry),
      auth_(auth),
      metrics_(metrics),
      service_(service),
      channel_(std::move(channel)),
      stub_(v1::FilterService::NewStub(channel_)),
      options_(std::move(options)) {
  expire_watch_ = idle_.Add([this](Clock::time_point now) { ExpireTransfers(now); });
}

RedisCommands::~RedisCommands() {
  // No dump or load is dropped from here on.
  idle_.Remove(std::exchange(expire_watch_, 0));
  // Delayed AUTH replies still waiting are dropped (the port is closed).
  delay_work_.reset();
  delay_io_.stop();
  if (delay_thread_.joinable()) delay_thread_.join();
  // The server's gRPC service is shut down by now, so every call made
  // through the in-process channel ends soon (cancelled if need be); their
  // callbacks use this object.
  for (int i = 0; calls_.load(std::memory_order_acquire) > 0; ++i) {
    if (i == 30'000) {
      spdlog::error("{} in-process calls of the Redis port still unanswered after 30s",
                    calls_.load());
    }
    absl::SleepFor(absl::Milliseconds(1));
  }
  transfer_threads_.join();
  MutexLock lock(&transfer_mu_);
  // (Their descriptors close with them.)
  for (auto& [id, d] : dumps_) ::unlink(d->path.c_str());
  for (auto& [name, l] : loads_) ::unlink(l->path.c_str());
}

std::string RedisCommands::WrongArity(std::string_view command) {
  return absl::StrFormat("ERR wrong number of arguments for '%s' command",
                         absl::AsciiStrToLower(A(command)));
}

void RedisCommands::Record(size_t command, std::string_view reply, Clock::time_point start,
                           size_t keys) {
  if (metrics_ == nullptr) return;
  metrics_->RecordRedisCommand(command, OutcomeOf(reply), Clock::now() - start, keys);
}

void RedisCommands::AddCredentials(const Session& s, grpc::ClientContext* ctx) const {
  if (auth_ != nullptr && !s.token.empty()) ctx->AddMetadata("authorization", "Bearer " + s.token);
}

bool RedisCommands::CurrentCaller(Session* s, Writer& w, Caller* caller) {
  if (auth_ == nullptr) {
    *caller = Caller();
    return true;
  }
  AuthFailure why;
  absl::StatusOr<Caller> c = auth_->AuthenticateToken(s->token, &why);
  if (!c.ok()) {
    w.Error(absl::StrCat("NOAUTH the token this connection authenticated with no longer works (",
                         c.status().message(), "); AUTH again"));
    return false;
  }
  *caller = *std::move(c);
  return true;
}

bool RedisCommands::Authorize(Session* s, Writer& w, size_t command, Access need,
                              std::string_view filter, Caller* caller) {
  if (!CurrentCaller(s, w, caller)) return false;
  if (caller->Allows(need, filter)) return true;
  if (metrics_ != nullptr) {
    metrics_->RecordRedisAuthFailure(command, static_cast<size_t>(AuthFailure::kPermissionDenied));
  }
  const std::string name = absl::AsciiStrToUpper(A(kRedisCommandNames[command]));
  Audit({.caller = caller->name(),
         .method = name,
         .filter = filter,
         .peer = s->peer,
         .outcome = "PERMISSION_DENIED",
         .detail = AccessName(need)});
  w.Error(absl::StrFormat(
      "NOPERM \"%s\" may not run %s on filter '%s': that needs the %s grant on it (its grants: "
      "%s)",
      caller->name(), name, Shown(filter), AccessName(need), caller->GrantsText()));
  return false;
}

size_t RedisCommands::Execute(Session* session, absl::Span<const Command> commands,
                              resp::Completion done) {
  return Dispatch(session, commands, std::move(done));
}

size_t RedisCommands::Dispatch(Session* s, absl::Span<const Command> commands,
                               resp::Completion done) {
  const Clock::time_point start = Clock::now();
  const Command& c = commands[0];
  std::string out;
  Writer w(&out, s->protocol);
  const size_t argc = c.args.size();
  const size_t command = argc == 0 ? kUnknown : RedisCommandIndex(c.args[0]);
  auto finish = [&](size_t taken, size_t keys) {
    Record(command, out, start, keys);
    done.Reply(std::move(out));
    return taken;
  };
  if (command == kUnknown) {
    std::string args;
    for (size_t i = 1; i < argc && args.size() < 128; ++i) {
      absl::StrAppend(&args, "'", Shown(c.args[i]), "' ");
    }
    w.Error(absl::StrFormat("ERR unknown command '%s', with args beginning with: %s",
                            argc == 0 ? std::string() : Shown(c.args[0]), args));
    return finish(1, 0);
  }
  const int arity = kArity[command];
  if ((arity > 0 && argc != static_cast<size_t>(arity)) ||
      (arity < 0 && argc < static_cast<size_t>(-arity))) {
    w.Error(WrongArity(c.args[0]));
    return finish(1, 0);
  }
  if (auth_ != nullptr && command != kAuth && command != kHello && command != kQuit &&
      command != kReset) {
    if (!s->authenticated) {
      w.Error("NOAUTH Authentication required.");
      return finish(1, 0);
    }
    // The token again, against the access file in force: a revoked one
    // stops working on open connections at once.
    Caller caller;
    if (!CurrentCaller(s, w, &caller)) return finish(1, 0);
  }
  // A run of commands that can go as one batch: the same single-item
  // command on the same filter, each item valid.
  auto run_length = [&] {
    size_t n = 1;
    if (!ItemError(c.args[2], options_.max_key_bytes).empty()) return n;
    while (n < commands.size() && n < options_.max_batch_keys) {
      const Command& next = commands[n];
      if (next.args.size() != 3 || RedisCommandIndex(next.args[0]) != command ||
          next.args[1] != c.args[1] || !ItemError(next.args[2], options_.max_key_bytes).empty()) {
        break;
      }
      ++n;
    }
    return n;
  };
  switch (command) {
    case kCfExists: {
      const size_t n = run_length();
      Exists(s, commands.subspan(0, n), w);
      // Counted per command: the replies of a run are all alike in kind.
      for (size_t i = 0; i + 1 < n; ++i) Record(command, out, start, 1);
      return finish(n, 1);
    }
    case kCfMExists:
      MExists(s, c, w);
      return finish(1, argc - 2);
    case kCfCount:
      Count(s, c, w);
      return finish(1, 1);
    case kCfInfo:
      Info(s, c, w);
      return finish(1, 0);
    case kCfAdd:
    case kCfAddNx:
    case kCfDel: {
      const size_t n = run_length();
      Write(s, commands.subspan(0, n), command, std::move(done), start);
      return n;
    }
    case kCfInsert:
    case kCfInsertNx: {
      const size_t n = InsertRunLength(commands, command);
      Write(s, commands.subspan(0, n), command, std::move(done), start);
      return n;
    }
    case kCfReserve:
      Reserve(s, c, std::move(done), start);
      return 1;
    case kDel:
      DropKeys(s, c, std::move(done), start);
      return 1;
    case kCfScanDump:
      ScanDump(s, c, std::move(done), start);
      return 1;
    case kCfLoadChunk:
      LoadChunk(s, c, std::move(done), start);
      return 1;
    case kPing:
      if (argc == 1) {
        w.SimpleString("PONG");
      } else if (argc == 2) {
        w.Bulk(c.args[1]);
      } else {
        w.Error(WrongArity(c.args[0]));
      }
      return finish(1, 0);
    case kEcho:
      w.Bulk(c.args[1]);
      return finish(1, 0);
    case kHello:
    case kAuth: {
      absl::Duration delay;
      if (command == kHello) {
        delay = Hello(s, c, w);
      } else if (argc > 3) {
        w.Error("ERR syntax error");
      } else {
        delay = Auth(s, c, w);
      }
      if (delay <= absl::ZeroDuration()) return finish(1, 0);
      // The reply of a failed AUTH, later: the connection runs nothing
      // else meanwhile (its commands are answered in order).
      Record(command, out, start, 0);
      auto timer =
          std::make_shared<boost::asio::steady_timer>(delay_io_, absl::ToChronoNanoseconds(delay));
      timer->async_wait(
          [timer, done, out = std::move(out)](const boost::system::error_code&) mutable {
            done.Reply(std::move(out));
          });
      return 1;
    }
    case kSelect: {
      int64_t db;
      if (!ParseInt(c.args[1], &db)) {
        w.Error("ERR value is not an integer or out of range");
      } else if (db != 0) {
        w.Error("ERR DB index is out of range (cuckood has one keyspace: database 0)");
      } else {
        w.SimpleString("OK");
      }
      return finish(1, 0);
    }
    case kClient:
      Client(s, c, w);
      return finish(1, 0);
    case kQuit:
      w.SimpleString("OK");
      s->close_after_reply = true;
      return finish(1, 0);
    case kReset:
      s->protocol = 2;
      s->name.clear();
      if (auth_ != nullptr) {
        s->authenticated = false;
        s->token.clear();
      }
      {
        std::string reset;
        Writer(&reset, 2).SimpleString("RESET");
        out = std::move(reset);
      }
      return finish(1, 0);
    case kCommand:
      CommandInfo(s, c, w);
      return finish(1, 0);
    case kInfo:
      ServerInfo(s, c, w);
      return finish(1, 0);
    case kExists:
      KeyExists(s, c, w);
      return finish(1, 0);
    case kType:
      Type(s, c, w);
      return finish(1, 0);
    case kScan:
      Scan(s, c, w);
      return finish(1, 0);
    case kKeys:
      Keys(s, c, w);
      return finish(1, 0);
    case kDbSize:
      DbSize(s, w);
      return finish(1, 0);
    case kConfig:
      Config(s, c, w);
      return finish(1, 0);
    default:
      break;
  }
  w.Error("ERR internal error: a command without a handler (a bug in cuckood: please report it)");
  return finish(1, 0);
}

// ---- Reads, on the connection's thread ----

void RedisCommands::Exists(Session* s, absl::Span<const Command> run, Writer& w) {
  const std::string_view key = run[0].args[1];
  // A refusal is the same for every command of the run (their items are
  // all valid, or the run is one command): one reply each.
  std::string error;
  {
    Writer ew(&error, s->protocol);
    Caller caller;
    if (!Authorize(s, ew, kCfExists, Access::kRead, key, &caller)) {
    } else if (absl::Status v = FilterRegistry::ValidateName(A(key)); !v.ok()) {
      ew.Error(NameError(key, v));
    } else if (std::string e = ItemError(run[0].args[2], options_.max_key_bytes); !e.empty()) {
      ew.Error(e);
    }
  }
  if (!error.empty()) {
    for (size_t i = 0; i < run.size(); ++i) w.Raw(error);
    return;
  }
  absl::StatusOr<std::shared_ptr<CuckooFilter>> f = registry_->Get(A(key));
  if (!f.ok()) {
    // RedisBloom: a missing filter holds nothing.
    w.SmallIntegers(run.size(), [](size_t) { return 0; });
    return;
  }
  if (run.size() == 1) {
    w.Integer((*f)->MayContain(run[0].args[2]) ? 1 : 0);
    return;
  }
  ScratchArray<std::string_view> keys(run.size());
  ScratchArray<bool> present(run.size());
  for (size_t i = 0; i < run.size(); ++i) keys[i] = run[i].args[2];
  (*f)->LookupBatch(keys.span(), present.span());
  w.SmallIntegers(run.size(), [&](size_t i) { return present[i] ? 1 : 0; });
}

void RedisCommands::MExists(Session* s, const Command& c, Writer& w) {
  const std::string_view key = c.args[1];
  Caller caller;
  if (!Authorize(s, w, kCfMExists, Access::kRead, key, &caller)) return;
  if (absl::Status v = FilterRegistry::ValidateName(A(key)); !v.ok()) {
    w.Error(NameError(key, v));
    return;
  }
  const size_t n = c.args.size() - 2;
  if (n > options_.max_batch_keys) {
    w.Error(absl::StrFormat(
        "ERR %u items; the server's limit (--max-batch-keys) is %u: split the command", n,
        options_.max_batch_keys));
    return;
  }
  for (size_t i = 0; i < n; ++i) {
    if (std::string e = ItemError(c.args[2 + i], options_.max_key_bytes); !e.empty()) {
      w.Error(absl::StrCat(e, " (item ", i + 1, ")"));
      return;
    }
  }
  absl::StatusOr<std::shared_ptr<CuckooFilter>> f = registry_->Get(A(key));
  w.Array(n);
  if (!f.ok()) {
    w.SmallIntegers(n, [](size_t) { return 0; });
    return;
  }
  ScratchArray<bool> present(n);
  (*f)->LookupBatch(absl::MakeConstSpan(c.args.data() + 2, n), present.span());
  w.SmallIntegers(n, [&](size_t i) { return present[i] ? 1 : 0; });
}

void RedisCommands::Count(Session* s, const Command& c, Writer& w) {
  const std::string_view key = c.args[1];
  Caller caller;
  if (!Authorize(s, w, kCfCount, Access::kRead, key, &caller)) return;
  if (absl::Status v = FilterRegistry::ValidateName(A(key)); !v.ok()) {
    w.Error(NameError(key, v));
    return;
  }
  if (std::string e = ItemError(c.args[2], options_.max_key_bytes); !e.empty()) {
    w.Error(e);
    return;
  }
  absl::StatusOr<std::shared_ptr<CuckooFilter>> f = registry_->Get(A(key));
  w.Integer(f.ok() ? (*f)->ApproximateCount(c.args[2]) : 0);
}

void RedisCommands::Info(Session* s, const Command& c, Writer& w) {
  const std::string_view key = c.args[1];
  Caller caller;
  if (!Authorize(s, w, kCfInfo, Access::kRead, key, &caller)) return;
  if (absl::Status v = FilterRegistry::ValidateName(A(key)); !v.ok()) {
    w.Error(NameError(key, v));
    return;
  }
  absl::StatusOr<std::shared_ptr<CuckooFilter>> f = registry_->Get(A(key));
  if (!f.ok()) {
    w.Error("ERR not found");
    return;
  }
  const FilterShape& shape = (*f)->shape();
  const FilterStats st = (*f)->Stats();
  const uint64_t filters = std::max<uint64_t>(1, st.generations.size());
  w.Map(17);
  auto integer = [&](std::string_view name, uint64_t v) {
    w.SimpleString(name);
    w.Integer(static_cast<int64_t>(std::min<uint64_t>(v, INT64_MAX)));
  };
  auto real = [&](std::string_view name, double v) {
    w.SimpleString(name);
    w.Double(v);
  };
  // RedisBloom's eight, in its order.
  integer("Size", st.memory_bytes);
  integer("Number of buckets", st.slots / shape.bucket_size);
  integer("Number of filters", filters);
  integer("Number of items inserted", st.items);
  integer("Number of items deleted", st.deletes);
  integer("Bucket size", shape.bucket_size);
  integer("Expansion rate", shape.growth_factor);
  integer("Max iterations", shape.max_kicks);
  // cuckood's own.
  integer("Capacity", shape.capacity);
  integer("Max capacity", st.reachable_capacity);
  integer("Max filters", st.max_generations);
  integer("Fingerprint bits", shape.fingerprint_bits);
  integer("Shards", shape.shards);
  integer("Semi-sorted", shape.semi_sorted() ? 1 : 0);
  real("Load factor", st.load_factor);
  real("Error rate",
       shape.growing() ? shape.false_positive_rate : st.expected_false_positive_rate_at_capacity);
  real("Error rate bound", st.false_positive_bound);
}

// ---- Writes, through this server's own FilterService ----

namespace {
// The reply to a write the service refused (or whose log failed).
std::string WriteError(size_t command, const grpc::Status& st) {
  return st.error_code() == grpc::StatusCode::NOT_FOUND && command == kCfDel
             ? std::string("ERR Not found")
             : StatusError(st);
}
}  // namespace

// The replies of a write's run of commands, in order, and what the metrics
// count of each: where its reply ends in `bytes`, and its keys.
struct RedisCommands::RunReplies {
  std::string bytes;
  std::vector<std::pair<size_t, size_t>> parts;

  // The same error for each of `commands`.
  void Errors(int protocol, size_t commands, std::string_view error) {
    bytes.clear();
    parts.clear();
    Writer w(&bytes, protocol);
    for (size_t i = 0; i < commands; ++i) {
      w.Error(error);
      parts.emplace_back(bytes.size(), 0);
    }
  }

  // The replies from the per-key results: `code(i)` is key i's
  // InsertResult or DeleteResult (as an int); `sizes` the keys of each
  // command, in order (a CF.ADD's 1).
  template <typename Code>
  void Results(int protocol, size_t command, absl::Span<const size_t> sizes, Code code) {
    Writer w(&bytes, protocol);
    size_t key = 0;
    for (const size_t n : sizes) {
      switch (command) {
        case kCfAdd:
        case kCfAddNx:
          for (size_t i = 0; i < n; ++i, ++key) {
            const int c = code(key);
            if (c == static_cast<int>(InsertResult::kInserted)) {
              w.Integer(1);
            } else if (c == static_cast<int>(InsertResult::kAlreadyPresent)) {
              w.Integer(0);
            } else {
              w.Error("ERR Filter is full");
            }
          }
          break;
        case kCfInsert:
        case kCfInsertNx:
          w.Array(n);
          w.SmallIntegers(n, [&](size_t i) {
            const int c = code(key + i);
            return c == static_cast<int>(InsertResult::kInserted)         ? 1
                   : c == static_cast<int>(InsertResult::kAlreadyPresent) ? 0
                                                                          : -1;
          });
          key += n;
          break;
        case kCfDel:
          for (size_t i = 0; i < n; ++i, ++key) {
            w.Integer(code(key) == static_cast<int>(DeleteResult::kDeleted) ? 1 : 0);
          }
          break;
        default:
          break;
      }
      parts.emplace_back(bytes.size(), n);
    }
  }
};

void RedisCommands::Answer(size_t command, Clock::time_point start, RunReplies* replies,
                           resp::Completion& done) {
  size_t begin = 0;
  for (const auto& [end, keys] : replies->parts) {
    Record(command, std::string_view(replies->bytes).substr(begin, end - begin), start, keys);
    begin = end;
  }
  done.Reply(std::move(replies->bytes));
}

size_t RedisCommands::InsertRunLength(absl::Span<const Command> commands, size_t command) const {
  const Command& c = commands[0];
  uint64_t capacity;
  bool create;
  size_t items_at = 0;
  auto valid_items = [&](const Command& r) {
    for (size_t i = items_at; i < r.args.size(); ++i) {
      if (!ItemError(r.args[i], options_.max_key_bytes).empty()) return false;
    }
    return true;
  };
  if (!InsertOptions(c, command, &capacity, &create, &items_at).empty() || !valid_items(c)) {
    return 1;
  }
  size_t n = 1;
  size_t total = c.args.size() - items_at;
  while (n < commands.size()) {
    const Command& next = commands[n];
    // The same command on the same filter with the same options, its items
    // valid, and the run within --max-batch-keys.
    if (next.args.size() <= items_at || RedisCommandIndex(next.args[0]) != command ||
        !std::equal(c.args.begin() + 1, c.args.begin() + items_at, next.args.begin() + 1) ||
        total + (next.args.size() - items_at) > options_.max_batch_keys || !valid_items(next)) {
      break;
    }
    total += next.args.size() - items_at;
    ++n;
  }
  return n;
}

void RedisCommands::Write(Session* s, absl::Span<const Command> run, size_t command,
                          resp::Completion done, Clock::time_point start) {
  const Command& c = run[0];
  const std::string_view key = c.args[1];
  auto fail = [&](std::string_view error) {
    RunReplies r;
    r.Errors(s->protocol, run.size(), error);
    Answer(command, start, &r, done);
  };
  if (absl::Status v = FilterRegistry::ValidateName(A(key)); !v.ok()) {
    return fail(NameError(key, v));
  }
  const bool insert_many = command == kCfInsert || command == kCfInsertNx;
  // The items, and CF.INSERT's options.
  absl::Span<const std::string_view> items;
  // Each command's items: a CF.INSERT's all, a CF.ADD's one.
  std::vector<size_t> sizes;
  uint64_t capacity = options_.default_capacity;
  bool create = command != kCfDel;
  size_t items_at = 2;
  if (insert_many) {
    // The commands of a run have the same options (InsertRunLength).
    if (std::string e = InsertOptions(c, command, &capacity, &create, &items_at); !e.empty()) {
      return fail(e);
    }
    if (c.args.size() - items_at > options_.max_batch_keys) {
      return fail(absl::StrFormat(
          "ERR %u items; the server's limit (--max-batch-keys) is %u: split the command",
          c.args.size() - items_at, options_.max_batch_keys));
    }
    for (const Command& r : run) sizes.push_back(r.args.size() - items_at);
  } else {
    sizes.assign(run.size(), 1);
  }
  // A run's items gathered; a lone CF.INSERT's are in place.
  size_t total = 0;
  for (size_t n : sizes) total += n;
  ScratchArray<std::string_view> gathered(run.size() > 1 || !insert_many ? total : 0);
  if (gathered.size() == 0) {
    items = absl::MakeConstSpan(c.args).subspan(items_at);
  } else {
    size_t k = 0;
    for (const Command& r : run) {
      for (size_t i = items_at; i < r.args.size(); ++i) gathered[k++] = r.args[i];
    }
    items = gathered.span();
  }
  for (size_t i = 0; i < items.size(); ++i) {
    if (std::string e = ItemError(items[i], options_.max_key_bytes); !e.empty()) {
      return fail(insert_many ? absl::StrCat(e, " (item ", i + 1, ")") : e);
    }
  }
  Caller caller;
  {
    std::string e;
    Writer ew(&e, s->protocol);
    if (!CurrentCaller(s, ew, &caller)) {
      return fail(std::string_view(e).substr(1, e.size() - 3));
    }
  }
  {
    // The grant first: whether the filter exists is not for callers
    // without one (the service checks again).
    std::string e;
    Writer ew(&e, s->protocol);
    if (!caller.Allows(Access::kWrite, key) &&
        !Authorize(s, ew, command, Access::kWrite, key, &caller)) {
      return fail(std::string_view(e).substr(1, e.size() - 3));
    }
  }
  const bool exists = registry_->Get(A(key)).ok();
  if (!exists && command == kCfDel) return fail("ERR Not found");
  if (!exists && !create) return fail("ERR not found");
  if (exists && service_ != nullptr && service_->local_writes()) {
    return WriteHere(s, caller, command, key, items, std::move(sizes), std::move(done), start);
  }
  auto call = std::make_shared<Call>();
  call->protocol = s->protocol;
  call->command = command;
  call->sizes = std::move(sizes);
  call->start = start;
  call->token = s->token;
  call->done = std::move(done);

  // The reply once the call is answered.
  auto reply = [this, call](const grpc::Status& st) {
    RunReplies r;
    if (!st.ok()) {
      r.Errors(call->protocol, call->sizes.size(), WriteError(call->command, st));
      Answer(call->command, call->start, &r, call->done);
      return;
    }
    const auto& results =
        call->command == kCfDel ? call->deleted.results() : call->inserted.results();
    size_t keys = 0;
    for (size_t n : call->sizes) keys += n;
    if (static_cast<size_t>(results.size()) != keys) {
      // Never expected; but one reply per command whatever happens.
      r.Errors(call->protocol, call->sizes.size(),
               absl::StrFormat("ERR internal error: %u results for %u keys", results.size(), keys));
    } else {
      // The proto's enums are the core's results + 1 (UNSPECIFIED is 0).
      r.Results(call->protocol, call->command, call->sizes,
                [&](size_t i) { return results[static_cast<int>(i)] - 1; });
    }
    Answer(call->command, call->start, &r, call->done);
  };

  // Then the write itself.
  auto send = [this, call, reply](auto&&) {
    grpc::ClientContext* ctx = new grpc::ClientContext();
    if (auth_ != nullptr && !call->token.empty()) {
      ctx->AddMetadata("authorization", "Bearer " + call->token);
    }
    auto answered = [this, call, ctx, reply](grpc::Status st) {
      const CallDone call_done{&calls_};
      delete ctx;
      reply(st);
    };
    calls_.fetch_add(1, std::memory_order_relaxed);
    if (call->command == kCfDel) {
      in_process_.Start(
          [&](grpc::CompletionQueue* q) { return stub_->PrepareAsyncDelete(ctx, call->del, q); },
          &call->deleted, std::move(answered));
    } else {
      in_process_.Start(
          [&](grpc::CompletionQueue* q) { return stub_->PrepareAsyncInsert(ctx, call->insert, q); },
          &call->inserted, std::move(answered));
    }
  };
  if (command == kCfDel) {
    call->del.set_filter(std::string(key));
    for (std::string_view k : items) call->del.add_keys(k.data(), k.size());
  } else {
    call->insert.set_filter(std::string(key));
    call->insert.set_if_absent(command == kCfAddNx || command == kCfInsertNx);
    for (std::string_view k : items) call->insert.add_keys(k.data(), k.size());
  }
  if (exists) {
    send(0);
    return;
  }
  // A filter made on the first add, as RedisBloom does: growing, sized for
  // `capacity` keys at first.
  call->create.set_name(std::string(key));
  call->create.set_capacity(capacity);
  call->create.set_false_positive_rate(options_.error_rate);
  call->create.set_growth_factor(options_.default_expansion);
  call->create.set_if_not_exists(true);
  AddCredentials(*s, &call->ctx);
  calls_.fetch_add(1, std::memory_order_relaxed);
  in_process_.Start(
      [&](grpc::CompletionQueue* q) {
        return stub_->PrepareAsyncCreateFilter(&call->ctx, call->create, q);
      },
      &call->created,
      [this, call, send, reply](grpc::Status st) {
        const CallDone call_done{&calls_};
        // Made meanwhile by another client, maybe
        // with other settings: add to it.
        if (st.ok() || st.error_code() == grpc::StatusCode::ALREADY_EXISTS) {
          send(0);
        } else {
          reply(st);
        }
      });
}

void RedisCommands::WriteHere(Session* s, const Caller& caller, size_t command,
                              std::string_view filter, absl::Span<const std::string_view> items,
                              std::vector<size_t> sizes, resp::Completion done,
                              Clock::time_point start) {
  const FilterServiceImpl::LocalWrite write{
      .caller = &caller,
      .peer = s->peer,
      .filter = filter,
      .keys = items,
      .if_absent = command == kCfAddNx || command == kCfInsertNx};
  RunReplies replies;
  // Applied on this thread; the replies are known now, and sent once the
  // write is durable.
  auto applied = [&]() -> absl::StatusOr<FilterServiceImpl::AppliedWrite> {
    if (command == kCfDel) {
      ScratchArray<DeleteResult> results(items.size());
      absl::StatusOr<FilterServiceImpl::AppliedWrite> a =
          service_->DeleteNow(write, results.span());
      if (a.ok()) {
        replies.Results(s->protocol, command, sizes,
                        [&](size_t i) { return static_cast<int>(results[i]); });
      }
      return a;
    }
    ScratchArray<InsertResult> results(items.size());
    absl::StatusOr<FilterServiceImpl::AppliedWrite> a = service_->InsertNow(write, results.span());
    if (a.ok()) {
      replies.Results(s->protocol, command, sizes,
                      [&](size_t i) { return static_cast<int>(results[i]); });
    }
    return a;
  }();
  if (!applied.ok()) {
    replies.Errors(s->protocol, sizes.size(), WriteError(command, ToGrpcStatus(applied.status())));
    Answer(command, start, &replies, done);
    return;
  }
  // Later commands of the connection may run now (they see this write);
  // its replies still go out in their turn.
  done.Applied();
  calls_.fetch_add(1, std::memory_order_relaxed);
  std::move(*applied).Then([this, command, start, protocol = s->protocol, n = sizes.size(),
                            replies = std::move(replies),
                            done = std::move(done)](absl::Status durable) mutable {
    const CallDone call_done{&calls_};
    if (!durable.ok()) replies.Errors(protocol, n, WriteError(command, ToGrpcStatus(durable)));
    Answer(command, start, &replies, done);
  });
}

void RedisCommands::Reserve(Session* s, const Command& c, resp::Completion done,
                            Clock::time_point start) {
  const std::string_view key = c.args[1];
  auto fail = [&](std::string_view error) {
    std::string out;
    Writer(&out, s->protocol).Error(error);
    Record(kCfReserve, out, start, 0);
    done.Reply(std::move(out));
  };
  if (absl::Status v = FilterRegistry::ValidateName(A(key)); !v.ok()) {
    return fail(NameError(key, v));
  }
  auto call = std::make_shared<Call>();
  v1::CreateFilterRequest& req = call->create;
  req.set_name(std::string(key));
  int64_t capacity;
  if (!ParseInt(c.args[2], &capacity) || capacity < 1 || capacity > (int64_t{1} << 40)) {
    return fail(absl::StrFormat("ERR Bad capacity '%s': an integer from 1 to %d", Shown(c.args[2]),
                                int64_t{1} << 40));
  }
  req.set_capacity(static_cast<uint64_t>(capacity));
  req.set_false_positive_rate(options_.error_rate);
  req.set_growth_factor(options_.default_expansion);
  for (size_t i = 3; i < c.args.size(); i += 2) {
    const std::string_view option = c.args[i];
    int64_t v;
    if (i + 1 >= c.args.size() || !ParseInt(c.args[i + 1], &v)) {
      return fail(
          absl::StrFormat("ERR %s needs an integer value", absl::AsciiStrToUpper(A(option))));
    }
    if (Is(option, "BUCKETSIZE")) {
      // cuckood's bucket sizes are 2, 4 and 8: a size between them takes the
      // next larger (RedisBloom takes 1 to 255).
      if (v < 1 || v > 8) {
        return fail(absl::StrFormat(
            "ERR Bad bucket size %d: cuckood supports 1 to 8 (1 and 2 give 2, 3 and 4 give 4, 5 "
            "to 8 give 8)",
            v));
      }
      req.set_bucket_size(v <= 2 ? 2 : v <= 4 ? 4 : 8);
    } else if (Is(option, "MAXITERATIONS")) {
      if (v < 1 || v > 65535) {
        return fail(absl::StrFormat("ERR Bad max iterations %d: an integer from 1 to 65535", v));
      }
      req.set_max_kicks(static_cast<uint32_t>(std::min<int64_t>(v, 10'000)));
    } else if (Is(option, "EXPANSION")) {
      if (v < 0 || v > 32768) {
        return fail(absl::StrFormat("ERR Bad expansion %d: an integer from 0 to 32768", v));
      }
      // 0: a fixed filter; 1 and 2: doubling (cuckood's smallest growth
      // factor); up to 8; more: 8.
      req.set_growth_factor(v == 0 ? 0 : static_cast<uint32_t>(std::clamp<int64_t>(v, 2, 8)));
    } else {
      return fail(absl::StrFormat(
          "ERR unknown argument '%s' (expected BUCKETSIZE, MAXITERATIONS or EXPANSION)",
          Shown(option)));
    }
  }
  call->protocol = s->protocol;
  call->start = start;
  call->done = std::move(done);
  AddCredentials(*s, &call->ctx);
  calls_.fetch_add(1, std::memory_order_relaxed);
  in_process_.Start(
      [&](grpc::CompletionQueue* q) {
        return stub_->PrepareAsyncCreateFilter(&call->ctx, call->create, q);
      },
      &call->created,
      [this, call](grpc::Status st) {
        const CallDone call_done{&calls_};
        std::string out;
        Writer w(&out, call->protocol);
        if (st.ok()) {
          w.SimpleString("OK");
        } else if (st.error_code() == grpc::StatusCode::ALREADY_EXISTS) {
          w.Error("ERR item exists");
        } else {
          w.Error(StatusError(st));
        }
        Record(kCfReserve, out, call->start, 0);
        call->done.Reply(std::move(out));
      });
}

void RedisCommands::DropKeys(Session* s, const Command& c, resp::Completion done,
                             Clock::time_point start) {
  std::string out;
  Writer w(&out, s->protocol);
  Caller caller;
  if (!CurrentCaller(s, w, &caller)) {
    Record(kDel, out, start, 0);
    return done.Reply(std::move(out));
  }
  // As Redis's ACLs: every key is checked before any is deleted.
  std::vector<std::string> names;
  for (size_t i = 1; i < c.args.size(); ++i) {
    if (!FilterRegistry::ValidateName(A(c.args[i])).ok()) continue;  // Cannot exist.
    if (!Authorize(s, w, kDel, Access::kAdmin, c.args[i], &caller)) {
      Record(kDel, out, start, 0);
      return done.Reply(std::move(out));
    }
    names.emplace_back(c.args[i]);
  }
  struct State {
    std::vector<std::string> names;
    size_t next = 0;
    int64_t dropped = 0;
    std::string token;
    int protocol = 2;
    resp::Completion done;
    Clock::time_point start;
    std::function<void()> step;
  };
  auto state = std::make_shared<State>();
  state->names = std::move(names);
  state->token = s->token;
  state->protocol = s->protocol;
  state->done = std::move(done);
  state->start = start;
  // One DropFilter after another; the reply counts the filters dropped.
  state->step = [this, state] {
    if (state->next == state->names.size()) {
      std::string out;
      Writer(&out, state->protocol).Integer(state->dropped);
      Record(kDel, out, state->start, 0);
      state->done.Reply(std::move(out));
      state->step = nullptr;  // Breaks the cycle.
      return;
    }
    auto call = std::make_shared<Call>();
    call->drop.set_name(state->names[state->next++]);
    if (auth_ != nullptr) call->ctx.AddMetadata("authorization", "Bearer " + state->token);
    calls_.fetch_add(1, std::memory_order_relaxed);
    in_process_.Start(
        [&](grpc::CompletionQueue* q) {
          return stub_->PrepareAsyncDropFilter(&call->ctx, call->drop, q);
        },
        &call->dropped,
        [this, state, call](grpc::Status st) {
          const CallDone call_done{&calls_};
          if (st.ok()) {
            ++state->dropped;
          } else if (st.error_code() != grpc::StatusCode::NOT_FOUND) {
            std::string out;
            Writer(&out, state->protocol).Error(StatusError(st));
            Record(kDel, out, state->start, 0);
            state->done.Reply(std::move(out));
            state->step = nullptr;
            return;
          }
          state->step();
        });
  };
  state->step();
}

// ---- CF.SCANDUMP and CF.LOADCHUNK ----
//
// Every file operation of a dump or load runs on transfer_threads_, and the
// command is answered from there; transfer_mu_ guards only the maps and the
// bookkeeping, never file work. A load runs one step at a time (`busy`); a
// dump's chunks may be read by several connections at once (pread on the
// dump's descriptor).

namespace {

// A dump's iterators: the dump's id in the high 31 bits, the chunk in the
// low 32 (1 = the header).
constexpr uint64_t Iterator(uint64_t id, uint64_t chunk) { return id << 32 | chunk; }

std::string Errno(int err) { return std::error_code(err, std::generic_category()).message(); }

}  // namespace

void RedisCommands::Discard(std::shared_ptr<Dump> dump) {
  boost::asio::post(transfer_threads_, [dump = std::move(dump)]() mutable {
    ::unlink(dump->path.c_str());
    // The descriptor closes with the last reference: a chunk read may hold
    // one still.
    dump.reset();
  });
}

void RedisCommands::Discard(std::shared_ptr<Load> load) {
  // Not busy (no step of it runs): its descriptor and claim are free.
  boost::asio::post(transfer_threads_, [load = std::move(load)] {
    if (load->fd >= 0) ::close(std::exchange(load->fd, -1));
    ::unlink(load->path.c_str());
    load->claim.Reset();
  });
}

void RedisCommands::EndLoad(const std::shared_ptr<Load>& load) {
  {
    MutexLock lock(&transfer_mu_);
    auto found = loads_.find(load->name);
    if (found != loads_.end() && found->second == load) loads_.erase(found);
  }
  if (load->fd >= 0) ::close(std::exchange(load->fd, -1));
  ::unlink(load->path.c_str());
  load->claim.Reset();
}

void RedisCommands::ExpireTransfers(Clock::time_point now) {
  const auto timeout = absl::ToChronoNanoseconds(options_.transfer_idle_timeout);
  std::vector<std::shared_ptr<Dump>> dumps;
  std::vector<std::shared_ptr<Load>> loads;
  {
    MutexLock lock(&transfer_mu_);
    for (auto it = dumps_.begin(); it != dumps_.end();) {
      const Dump& d = *it->second;
      // A dump whose copy is still being written, or whose chunk is being
      // read, is not idle.
      if (d.ready && d.reading == 0 && now - d.touched > timeout) {
        expired_.push_back(
            {.load = false, .name = d.name, .id = d.id, .done = d.bytes, .when = now});
        dumps.push_back(std::move(it->second));
        it = dumps_.erase(it);
      } else {
        ++it;
      }
    }
    for (auto it = loads_.begin(); it != loads_.end();) {
      const Load& l = *it->second;
      if (!l.busy && now - l.touched > timeout) {
        expired_.push_back(
            {.load = true, .name = l.name, .id = l.id, .done = l.received, .when = now});
        loads.push_back(std::move(it->second));
        it = loads_.erase(it);
      } else {
        ++it;
      }
    }
    while (!expired_.empty() &&
           (expired_.size() > kMaxRedisExpiredTransfers ||
            now - expired_.front().when > absl::ToChronoNanoseconds(kRedisExpiredTransferMemory))) {
      expired_.pop_front();
    }
  }
  const std::string idle = absl::FormatDuration(options_.transfer_idle_timeout);
  for (std::shared_ptr<Dump>& d : dumps) {
    spdlog::warn(
        "CF.SCANDUMP of filter {} (dump {}) abandoned: no chunk was asked for in {} "
        "(--transfer-idle-timeout); its copy of {} is removed",
        d->name, d->id, idle, FormatByteSize(d->bytes));
    Discard(std::move(d));
  }
  for (std::shared_ptr<Load>& l : loads) {
    spdlog::warn(
        "CF.LOADCHUNK of filter {} (dump {}) abandoned: no chunk arrived for {} "
        "(--transfer-idle-timeout); the {} of {} received are removed",
        l->name, l->id, idle, FormatByteSize(l->received), FormatByteSize(l->bytes));
    Discard(std::move(l));
  }
}

std::string RedisCommands::NoDump(std::string_view key, int64_t iterator, uint64_t id) {
  const std::string idle = absl::FormatDuration(options_.transfer_idle_timeout);
  for (auto it = expired_.rbegin(); it != expired_.rend(); ++it) {
    if (!it->load && it->id == id && it->name == key) {
      return absl::StrFormat(
          "ERR the CF.SCANDUMP of '%s' with iterator %d was abandoned: no chunk was asked for in "
          "%s (--transfer-idle-timeout), so its copy was removed; start again with iterator 0",
          Shown(key), iterator, idle);
    }
  }
  return absl::StrFormat(
      "ERR no CF.SCANDUMP of '%s' is in progress with iterator %d (finished, idle for more than "
      "%s, or not from this server): start again with iterator 0",
      Shown(key), iterator, idle);
}

std::string RedisCommands::NoLoad(std::string_view key, uint64_t id) {
  for (auto it = expired_.rbegin(); it != expired_.rend(); ++it) {
    if (it->load && it->id == id && it->name == key) {
      return absl::StrFormat(
          "ERR the CF.LOADCHUNK of '%s' (dump %u) was abandoned: no chunk arrived for %s "
          "(--transfer-idle-timeout), so the %s received were removed; load the dump again from "
          "its first chunk",
          Shown(key), id, absl::FormatDuration(options_.transfer_idle_timeout),
          FormatByteSize(it->done));
    }
  }
  return absl::StrFormat(
      "ERR no CF.LOADCHUNK of '%s' is in progress: load the dump's first chunk first", Shown(key));
}

void RedisCommands::ScanDump(Session* s, const Command& c, resp::Completion done,
                             Clock::time_point start) {
  const std::string_view key = c.args[1];
  const int protocol = s->protocol;
  auto reply = [this, start, protocol](resp::Completion& d, std::string_view error,
                                       uint64_t iterator, std::string_view data) {
    std::string out;
    Writer w(&out, protocol);
    if (!error.empty()) {
      w.Error(error);
    } else {
      w.Array(2);
      w.Integer(static_cast<int64_t>(iterator));
      w.Bulk(data);
    }
    Record(kCfScanDump, out, start, 0);
    d.Reply(std::move(out));
  };
  if (absl::Status v = FilterRegistry::ValidateName(A(key)); !v.ok()) {
    return reply(done, NameError(key, v), 0, "");
  }
  int64_t it;
  if (!ParseInt(c.args[2], &it) || it < 0) {
    return reply(done, "ERR Bad iterator: a non-negative integer, 0 to start", 0, "");
  }
  {
    std::string e;
    Writer ew(&e, protocol);
    Caller caller;
    if (!Authorize(s, ew, kCfScanDump, Access::kAdmin, key, &caller)) {
      Record(kCfScanDump, e, start, 0);
      return done.Reply(std::move(e));
    }
  }
  if (it != 0) {
    const uint64_t id = static_cast<uint64_t>(it) >> 32;
    const uint64_t chunk = static_cast<uint64_t>(it) & 0xffffffffu;
    std::shared_ptr<Dump> dump;
    std::string error;
    bool finished = false;
    uint64_t offset = 0;
    {
      MutexLock lock(&transfer_mu_);
      auto found = dumps_.find(id);
      if (found == dumps_.end() || !found->second->ready || found->second->name != key ||
          chunk == 0) {
        error = NoDump(key, it, id);
      } else {
        dump = found->second;
        dump->touched = Clock::now();
        offset = (chunk - 1) * kRedisDumpChunkBytes;
        if (offset >= dump->bytes) {
          dumps_.erase(found);
          finished = true;
        } else {
          ++dump->reading;
        }
      }
    }
    if (!error.empty()) return reply(done, error, 0, "");
    if (finished) {
      Discard(std::move(dump));
      return reply(done, "", 0, "");
    }
    // Read on a transfer thread: the file may be out of the page cache, and
    // the disk slow.
    boost::asio::post(transfer_threads_, [this, dump = std::move(dump), offset, chunk, id, reply,
                                          done = std::move(done)]() mutable {
      std::string data(std::min<uint64_t>(kRedisDumpChunkBytes, dump->bytes - offset), '\0');
      size_t got = 0;
      int err = 0;
      while (got < data.size()) {
        const ssize_t n = ::pread(dump->fd, data.data() + got, data.size() - got,
                                  static_cast<off_t>(offset + got));
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) {
          err = n < 0 ? errno : 0;
          break;
        }
        got += static_cast<size_t>(n);
      }
      {
        MutexLock lock(&transfer_mu_);
        --dump->reading;
        dump->touched = Clock::now();
      }
      const std::string path = dump->path;
      dump.reset();  // (Here, not on the connection's thread, if it is the last.)
      if (got != data.size()) {
        return reply(done,
                     absl::StrFormat("ERR cannot read the dump file %s: %s", path,
                                     err != 0 ? Errno(err) : std::string("short read")),
                     0, "");
      }
      reply(done, "", Iterator(id, chunk + 1), data);
    });
    return;
  }
  // Iterator 0: export the filter, whole, to a private file.
  auto dump = std::make_shared<Dump>();
  dump->id = next_dump_.fetch_add(1, std::memory_order_relaxed) & 0x7fffffffu;
  dump->name = std::string(key);
  const fs::path dir = fs::path(options_.data_dir) / kRedisDumpDir;
  dump->path = (dir / absl::StrCat("dump-", dump->id)).string();
  dump->touched = Clock::now();
  {
    MutexLock lock(&transfer_mu_);
    if (dumps_.size() >= kMaxRedisDumps) {
      return reply(
          done,
          absl::StrFormat("ERR %u CF.SCANDUMPs are in progress already (the most at "
                          "once); finish one, or wait %s for an abandoned one to expire",
                          dumps_.size(), absl::FormatDuration(options_.transfer_idle_timeout)),
          0, "");
    }
    dumps_[dump->id] = dump;
  }
  const std::string token = s->token;
  boost::asio::post(transfer_threads_, [this, dump, dir, token, reply,
                                        done = std::move(done)]() mutable {
    auto failed = [&](std::string_view error) {
      {
        MutexLock lock(&transfer_mu_);
        dumps_.erase(dump->id);
      }
      if (dump->fd >= 0) ::close(std::exchange(dump->fd, -1));
      ::unlink(dump->path.c_str());
      dump->claim.Reset();
      reply(done, error, 0, "");
    };
    std::error_code ec;
    fs::create_directories(dir, ec);
    if (ec) {
      return failed(absl::StrFormat("ERR cannot create %s: %s", dir.string(), ec.message()));
    }
    // Read and written here; then read by the chunks' reads.
    dump->fd = ::open(dump->path.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (dump->fd < 0) {
      return failed(absl::StrFormat("ERR cannot create %s: %s", dump->path, Errno(errno)));
    }
    grpc::ClientContext ctx;
    if (auth_ != nullptr) ctx.AddMetadata("authorization", "Bearer " + token);
    v1::ExportFilterRequest req;
    req.set_name(dump->name);
    std::unique_ptr<grpc::ClientReader<v1::ExportFilterChunk>> reader =
        stub_->ExportFilter(&ctx, req);
    v1::ExportFilterChunk chunk;
    uint64_t written = 0;
    std::string write_error;
    while (reader->Read(&chunk)) {
      if (chunk.total_bytes() != 0) {
        dump->bytes = chunk.total_bytes();
        dump->items = chunk.items();
        // The copy's disk space, before any of it is written.
        if (options_.disk != nullptr) {
          absl::StatusOr<TransferDisk::Claim> claim = options_.disk->Take(
              dump->bytes, absl::StrFormat("the CF.SCANDUMP of '%s'", Shown(dump->name)));
          if (claim.ok()) {
            dump->claim = *std::move(claim);
          } else {
            write_error = absl::StrCat("ERR ", claim.status().message());
          }
        }
      }
      const std::string& data = chunk.data();
      size_t off = 0;
      while (write_error.empty() && off < data.size()) {
        const ssize_t n = ::write(dump->fd, data.data() + off, data.size() - off);
        if (n < 0) {
          if (errno == EINTR) continue;
          write_error = absl::StrFormat("ERR cannot write %s: %s", dump->path, Errno(errno));
        } else {
          off += static_cast<size_t>(n);
        }
      }
      written += data.size();
      dump->claim.Wrote(data.size());
      if (!write_error.empty()) {
        ctx.TryCancel();
        break;
      }
    }
    const grpc::Status st = reader->Finish();
    if (!write_error.empty()) return failed(write_error);
    if (!st.ok()) {
      return failed(st.error_code() == grpc::StatusCode::NOT_FOUND ? std::string("ERR not found")
                                                                   : StatusError(st));
    }
    if (written != dump->bytes || written == 0) {
      return failed(absl::StrFormat("ERR the export sent %u bytes of %u", written, dump->bytes));
    }
    char header[kRedisDumpHeaderBytes];
    std::memcpy(header, kRedisDumpMagic, 8);
    Put64(header + 8, dump->bytes);
    Put64(header + 16, dump->items);
    {
      MutexLock lock(&transfer_mu_);
      dump->ready = true;
      dump->touched = Clock::now();
    }
    const uint64_t id = dump->id;
    dump.reset();  // (Here, if the dump was dropped meanwhile.)
    reply(done, "", Iterator(id, 1), std::string_view(header, sizeof(header)));
  });
}

void RedisCommands::LoadChunk(Session* s, const Command& c, resp::Completion done,
                              Clock::time_point start) {
  const std::string_view key = c.args[1];
  // A view into the connection's input, valid until the reply.
  const std::string_view data = c.args[3];
  const int protocol = s->protocol;
  auto reply = [this, start, protocol](resp::Completion& d, std::string_view error) {
    std::string out;
    Writer w(&out, protocol);
    if (error.empty()) {
      w.SimpleString("OK");
    } else {
      w.Error(error);
    }
    Record(kCfLoadChunk, out, start, 0);
    d.Reply(std::move(out));
  };
  if (absl::Status v = FilterRegistry::ValidateName(A(key)); !v.ok()) {
    return reply(done, NameError(key, v));
  }
  int64_t it;
  if (!ParseInt(c.args[2], &it) || it <= 0 || (it & 0xffffffff) == 0) {
    return reply(done, "ERR Bad iterator: use the iterator CF.SCANDUMP returned with this chunk");
  }
  {
    std::string e;
    Writer ew(&e, protocol);
    Caller caller;
    if (!Authorize(s, ew, kCfLoadChunk, Access::kAdmin, key, &caller)) {
      Record(kCfLoadChunk, e, start, 0);
      return done.Reply(std::move(e));
    }
  }
  const uint64_t id = static_cast<uint64_t>(it) >> 32;
  const uint64_t chunk = static_cast<uint64_t>(it) & 0xffffffffu;
  const std::string name(key);
  if (chunk == 1) {
    // The header: starts (or restarts) the load of `key`.
    if (data.size() != kRedisDumpHeaderBytes || std::memcmp(data.data(), kRedisDumpMagic, 8) != 0) {
      return reply(done,
                   "ERR this is not the first chunk of a cuckood CF.SCANDUMP (chunks of "
                   "RedisBloom's own dumps cannot be loaded: see docs/REDIS_COMPATIBILITY.md)");
    }
    if (registry_->Get(A(key)).ok()) {
      return reply(done, absl::StrFormat("ERR filter '%s' exists: DEL it first, or load the dump "
                                         "under another name",
                                         Shown(key)));
    }
    const uint64_t bytes = Get64(data.data() + 8);
    // What ImportFilter would refuse is refused now, before any upload.
    const uint64_t budget = registry_->limits().memory_budget_bytes;
    if (bytes == 0) {
      return reply(done, "ERR the dump's header declares an empty snapshot (0 bytes)");
    }
    if (bytes > budget + kImportSlackBytes) {
      return reply(done,
                   absl::StrFormat("ERR the dump's header declares a snapshot of %u bytes (%s), "
                                   "more than this server imports: its memory budget of %s plus "
                                   "%s (no filter it can hold has a snapshot that large)",
                                   bytes, FormatByteSize(bytes), FormatByteSize(budget),
                                   FormatByteSize(kImportSlackBytes)));
    }
    auto load = std::make_shared<Load>();
    load->id = id;
    load->name = name;
    load->bytes = bytes;
    load->busy = true;  // Until its file is created.
    load->touched = Clock::now();
    // Its own sequence number: a file of an earlier load of the same dump
    // may still be being removed.
    load->path =
        (fs::path(options_.data_dir) / kRedisDumpDir /
         absl::StrCat("load-", next_load_.fetch_add(1, std::memory_order_relaxed), "-", name))
            .string();
    std::shared_ptr<Load> old;
    std::string error;
    {
      MutexLock lock(&transfer_mu_);
      auto found = loads_.find(name);
      if (found != loads_.end() && found->second->busy) {
        error = absl::StrFormat(
            "ERR the load of '%s' is busy with a chunk or its import: restart it once that is "
            "answered",
            Shown(key));
      } else {
        if (found != loads_.end()) {
          old = std::move(found->second);
          loads_.erase(found);
        }
        if (loads_.size() >= kMaxRedisLoads) {
          error = absl::StrFormat(
              "ERR %u CF.LOADCHUNK loads are in progress already (the most at once); finish one, "
              "or wait %s for an abandoned one to expire",
              loads_.size(), absl::FormatDuration(options_.transfer_idle_timeout));
        } else {
          loads_[name] = load;
        }
      }
    }
    if (old != nullptr) Discard(std::move(old));
    if (!error.empty()) return reply(done, error);
    boost::asio::post(transfer_threads_, [this, load, reply, done = std::move(done)]() mutable {
      reply(done, StartLoad(load));
    });
    return;
  }
  std::shared_ptr<Load> load, dropped;
  std::string error;
  {
    MutexLock lock(&transfer_mu_);
    auto found = loads_.find(name);
    if (found == loads_.end()) {
      error = NoLoad(key, id);
    } else if (found->second->busy) {
      error = absl::StrFormat(
          "ERR chunk %u of dump %u arrived while the load of '%s' is still busy with its "
          "previous chunk (or its import): send a load's chunks one at a time, each once the one "
          "before is answered",
          chunk, id, Shown(key));
    } else if (found->second->id != id || chunk != found->second->next_chunk) {
      error = absl::StrFormat(
          "ERR chunk %u of dump %u arrived, but chunk %u of dump %u was expected next: load the "
          "chunks in the order CF.SCANDUMP returned them",
          chunk, id, found->second->next_chunk, found->second->id);
    } else if (found->second->received + data.size() > found->second->bytes) {
      error = absl::StrFormat(
          "ERR the chunks hold more than the %u bytes the dump's header announced; the load is "
          "abandoned",
          found->second->bytes);
      dropped = std::move(found->second);
      loads_.erase(found);
    } else {
      load = found->second;
      load->busy = true;
      load->touched = Clock::now();
    }
  }
  if (dropped != nullptr) Discard(std::move(dropped));
  if (!error.empty()) return reply(done, error);
  const std::string token = s->token;
  boost::asio::post(transfer_threads_,
                    [this, load, data, token, reply, done = std::move(done)]() mutable {
                      reply(done, WriteChunk(load, data, token));
                    });
}

std::string RedisCommands::StartLoad(const std::shared_ptr<Load>& load) {
  if (options_.disk != nullptr) {
    absl::StatusOr<TransferDisk::Claim> claim = options_.disk->Take(
        load->bytes, absl::StrFormat("the CF.LOADCHUNK of '%s'", Shown(load->name)));
    if (!claim.ok()) {
      EndLoad(load);
      return absl::StrCat("ERR ", claim.status().message());
    }
    load->claim = *std::move(claim);
  }
  const fs::path dir = fs::path(load->path).parent_path();
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) {
    EndLoad(load);
    return absl::StrFormat("ERR cannot create %s: %s", dir.string(), ec.message());
  }
  load->fd = ::open(load->path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (load->fd < 0) {
    const std::string error = absl::StrFormat("ERR cannot create %s: %s", load->path, Errno(errno));
    EndLoad(load);
    return error;
  }
  MutexLock lock(&transfer_mu_);
  load->busy = false;
  load->touched = Clock::now();
  return "";
}

std::string RedisCommands::WriteChunk(const std::shared_ptr<Load>& load, std::string_view data,
                                      const std::string& token) {
  for (size_t off = 0; off < data.size();) {
    const ssize_t n = ::write(load->fd, data.data() + off, data.size() - off);
    if (n < 0) {
      if (errno == EINTR) continue;
      const std::string error = absl::StrFormat("ERR cannot write %s: %s; the load is abandoned",
                                                load->path, Errno(errno));
      EndLoad(load);
      return error;
    }
    off += static_cast<size_t>(n);
  }
  load->claim.Wrote(data.size());
  {
    MutexLock lock(&transfer_mu_);
    load->received += data.size();
    ++load->next_chunk;
    load->touched = Clock::now();
    if (load->received < load->bytes) {
      load->busy = false;
      return "";
    }
  }
  // The last chunk: import the file, then answer.
  return ImportLoad(load, token);
}

std::string RedisCommands::ImportLoad(const std::shared_ptr<Load>& load, const std::string& token) {
  ::close(std::exchange(load->fd, -1));
  std::string error;
  const int fd = ::open(load->path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    error = absl::StrFormat("ERR cannot read %s: %s", load->path, Errno(errno));
  } else {
    grpc::ClientContext ctx;
    if (auth_ != nullptr) ctx.AddMetadata("authorization", "Bearer " + token);
    v1::ImportFilterResponse resp;
    std::unique_ptr<grpc::ClientWriter<v1::ImportFilterChunk>> writer =
        stub_->ImportFilter(&ctx, &resp);
    v1::ImportFilterChunk chunk;
    chunk.set_name(load->name);
    chunk.set_total_bytes(load->bytes);
    std::string buffer(kRedisDumpChunkBytes, '\0');
    uint64_t sent = 0;
    while (sent < load->bytes) {
      const ssize_t n = ::read(fd, buffer.data(), buffer.size());
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        error = absl::StrFormat("ERR cannot read %s: %s", load->path,
                                n < 0 ? Errno(errno) : std::string("short file"));
        ctx.TryCancel();
        break;
      }
      chunk.set_data(buffer.data(), static_cast<size_t>(n));
      sent += static_cast<uint64_t>(n);
      if (!writer->Write(chunk)) break;
      chunk.clear_name();
      chunk.clear_total_bytes();
    }
    writer->WritesDone();
    const grpc::Status st = writer->Finish();
    ::close(fd);
    if (error.empty() && !st.ok()) {
      error = st.error_code() == grpc::StatusCode::ALREADY_EXISTS
                  ? absl::StrFormat(
                        "ERR filter '%s' exists: DEL it first, or load the dump under another "
                        "name",
                        Shown(load->name))
                  : StatusError(st);
    }
  }
  EndLoad(load);
  return error;
}

// ---- Connection commands ----

namespace {

// Failed AUTHs of a connection or peer address answered at once; after
// them, the reply waits kAuthFirstDelay, doubling with each failure up to
// kAuthMaxDelay. A peer's failures are forgotten kAuthPeerMemory after its
// last.
constexpr uint32_t kFreeAuthFailures = 3;
constexpr absl::Duration kAuthFirstDelay = absl::Milliseconds(100);
constexpr absl::Duration kAuthMaxDelay = absl::Seconds(5);
constexpr absl::Duration kAuthPeerMemory = absl::Minutes(10);
constexpr size_t kMaxAuthPeers = 65536;

// The longest client name, lib-name or lib-ver a connection may set: each
// is kept for the connection's life, and Redis has no limit (300 idle
// connections with 1 MiB names pinned 320 MB).
constexpr size_t kMaxClientNameBytes = 256;

// "" if `value` may be a client name (`what` "Client names") or lib-name /
// lib-ver (`what` "lib-name and lib-ver"); else the error.
std::string ClientNameError(std::string_view value, std::string_view what) {
  for (char ch : value) {
    if (ch < '!' || ch > '~') {
      return absl::StrCat("ERR ", A(what),
                          " cannot contain spaces, newlines or special characters.");
    }
  }
  if (value.size() > kMaxClientNameBytes) {
    return absl::StrFormat("ERR %s may be at most %d bytes (this one is %d)", what,
                           kMaxClientNameBytes, value.size());
  }
  return "";
}

// "ip:port" or "[ip6]:port": the address without the port.
std::string_view PeerAddress(std::string_view peer) {
  const size_t colon = peer.rfind(':');
  return colon == std::string_view::npos ? peer : peer.substr(0, colon);
}

}  // namespace

absl::Duration RedisCommands::AuthFailed(Session* s, AuthFailure why) {
  if (metrics_ != nullptr) metrics_->RecordRedisAuthFailure(kAuth, static_cast<size_t>(why));
  auth_audit_.Refused({.caller = "-",
                       .method = "AUTH",
                       .peer = s->peer,
                       .outcome = "UNAUTHENTICATED",
                       .detail = AuthFailureName(why)});
  ++s->auth_failures;
  uint32_t peer_failures = 0;
  {
    const absl::Time now = absl::Now();
    MutexLock lock(&auth_mu_);
    if (now - auth_peers_swept_ >= absl::Seconds(1)) {
      for (auto it = auth_peers_.begin(); it != auth_peers_.end();) {
        if (now - it->second.last > kAuthPeerMemory) {
          auth_peers_.erase(it++);
        } else {
          ++it;
        }
      }
      auth_peers_swept_ = now;
    }
    const std::string address(PeerAddress(s->peer));
    auto it = auth_peers_.find(address);
    if (it == auth_peers_.end() && auth_peers_.size() < kMaxAuthPeers) {
      it = auth_peers_.emplace(address, PeerAuthFailures{}).first;
    }
    if (it != auth_peers_.end()) {
      if (now - it->second.last > kAuthPeerMemory) it->second.failures = 0;
      peer_failures = ++it->second.failures;
      it->second.last = now;
    }
  }
  const uint32_t n = std::max(s->auth_failures, peer_failures);
  if (n <= kFreeAuthFailures) return absl::ZeroDuration();
  const uint32_t doublings = std::min<uint32_t>(n - kFreeAuthFailures - 1, 16);
  return std::min(kAuthFirstDelay * (uint64_t{1} << doublings), kAuthMaxDelay);
}

absl::Duration RedisCommands::Auth(Session* s, const Command& c, Writer& w) {
  const std::string_view token = c.args.size() == 3 ? c.args[2] : c.args[1];
  if (auth_ == nullptr) {
    if (c.args.size() == 2) {
      w.Error(
          "ERR AUTH <password> called without any password configured for the default user. Are "
          "you sure your configuration is correct?");
    } else {
      w.SimpleString("OK");
    }
    return absl::ZeroDuration();
  }
  AuthFailure why;
  absl::StatusOr<Caller> caller = auth_->AuthenticateToken(token, &why);
  if (!caller.ok()) {
    w.Error(absl::StrCat("WRONGPASS invalid username-password pair or user is disabled. (",
                         caller.status().message(), ")"));
    return AuthFailed(s, why);
  }
  s->authenticated = true;
  s->token = std::string(token);
  s->auth_failures = 0;
  w.SimpleString("OK");
  return absl::ZeroDuration();
}

absl::Duration RedisCommands::Hello(Session* s, const Command& c, Writer& w) {
  int protocol = s->protocol;
  size_t i = 1;
  if (c.args.size() >= 2) {
    int64_t v;
    if (!ParseInt(c.args[1], &v)) {
      w.Error("ERR Protocol version is not an integer or out of range");
      return absl::ZeroDuration();
    }
    if (v != 2 && v != 3) {
      w.Error("NOPROTO unsupported protocol version");
      return absl::ZeroDuration();
    }
    protocol = static_cast<int>(v);
    i = 2;
  }
  std::string_view token, name;
  bool auth = false, set_name = false;
  for (; i < c.args.size(); ++i) {
    if (Is(c.args[i], "AUTH") && i + 2 < c.args.size()) {
      auth = true;
      token = c.args[i + 2];
      i += 2;
    } else if (Is(c.args[i], "SETNAME") && i + 1 < c.args.size()) {
      set_name = true;
      name = c.args[i + 1];
      i += 1;
    } else {
      w.Error(absl::StrFormat("ERR Syntax error in HELLO option '%s'", Shown(c.args[i])));
      return absl::ZeroDuration();
    }
  }
  if (auth && auth_ != nullptr) {
    AuthFailure why;
    absl::StatusOr<Caller> caller = auth_->AuthenticateToken(token, &why);
    if (!caller.ok()) {
      w.Error(absl::StrCat("WRONGPASS invalid username-password pair or user is disabled. (",
                           caller.status().message(), ")"));
      return AuthFailed(s, why);
    }
    s->authenticated = true;
    s->token = std::string(token);
    s->auth_failures = 0;
  }
  if (auth_ != nullptr && !s->authenticated) {
    w.Error(
        "NOAUTH HELLO must be called with the client already authenticated, otherwise the HELLO "
        "<proto> AUTH <user> <pass> option can be used to authenticate the client and select the "
        "RESP protocol version at the same time");
    return absl::ZeroDuration();
  }
  if (set_name) {
    if (const std::string error = ClientNameError(name, "Client names"); !error.empty()) {
      w.Error(error);
      return absl::ZeroDuration();
    }
    s->name = std::string(name);
  }
  s->protocol = protocol;
  // The reply is in the protocol just chosen.
  std::string out;
  Writer h(&out, protocol);
  h.Map(8);
  h.Bulk("server");
  h.Bulk("cuckood");
  h.Bulk("version");
  h.Bulk(kRedisVersion);
  h.Bulk("proto");
  h.Integer(protocol);
  h.Bulk("id");
  h.Integer(static_cast<int64_t>(s->id));
  h.Bulk("mode");
  h.Bulk("standalone");
  h.Bulk("role");
  h.Bulk("master");
  h.Bulk("modules");
  h.Array(1);
  h.Map(4);
  h.Bulk("name");
  h.Bulk("bf");
  h.Bulk("ver");
  h.Integer(kBloomModuleVersion);
  h.Bulk("path");
  h.Bulk("");
  h.Bulk("args");
  h.Array(0);
  h.Bulk("cuckood_version");
  h.Bulk(kVersion);
  w.Raw(out);
  return absl::ZeroDuration();
}

void RedisCommands::Client(Session* s, const Command& c, Writer& w) {
  const std::string_view sub = c.args[1];
  if (Is(sub, "SETNAME") && c.args.size() == 3) {
    if (const std::string error = ClientNameError(c.args[2], "Client names"); !error.empty()) {
      w.Error(error);
      return;
    }
    s->name = std::string(c.args[2]);
    w.SimpleString("OK");
  } else if (Is(sub, "GETNAME") && c.args.size() == 2) {
    if (s->name.empty()) {
      w.Null();
    } else {
      w.Bulk(s->name);
    }
  } else if (Is(sub, "SETINFO") && c.args.size() == 4) {
    if (const std::string error = ClientNameError(c.args[3], "lib-name and lib-ver");
        !error.empty()) {
      w.Error(error);
      return;
    }
    if (Is(c.args[2], "LIB-NAME")) {
      s->lib_name = std::string(c.args[3]);
    } else if (Is(c.args[2], "LIB-VER")) {
      s->lib_version = std::string(c.args[3]);
    } else {
      w.Error(absl::StrFormat("ERR Unrecognized option '%s'", Shown(c.args[2])));
      return;
    }
    w.SimpleString("OK");
  } else if (Is(sub, "ID") && c.args.size() == 2) {
    w.Integer(static_cast<int64_t>(s->id));
  } else if (Is(sub, "INFO") && c.args.size() == 2) {
    w.Verbatim("txt", absl::StrFormat("id=%u addr=%s name=%s age=%d db=0 resp=%d lib-name=%s "
                                      "lib-ver=%s\n",
                                      s->id, s->peer, s->name,
                                      absl::ToInt64Seconds(absl::Now() - s->connected_at),
                                      s->protocol, s->lib_name, s->lib_version));
  } else {
    w.Error(absl::StrFormat(
        "ERR unknown subcommand or wrong number of arguments for '%s'. cuckood serves CLIENT "
        "SETNAME, GETNAME, SETINFO, ID and INFO",
        Shown(sub)));
  }
}

namespace {
struct CommandDoc {
  std::string_view name;
  int arity;
  std::string_view flags;  // space-separated
  int first_key, last_key, step;
};
constexpr CommandDoc kDocs[] = {
    {"cf.reserve", -3, "write denyoom", 1, 1, 1},
    {"cf.add", 3, "write denyoom", 1, 1, 1},
    {"cf.addnx", 3, "write denyoom", 1, 1, 1},
    {"cf.insert", -4, "write denyoom", 1, 1, 1},
    {"cf.insertnx", -4, "write denyoom", 1, 1, 1},
    {"cf.exists", 3, "readonly fast", 1, 1, 1},
    {"cf.mexists", -3, "readonly fast", 1, 1, 1},
    {"cf.del", 3, "write fast", 1, 1, 1},
    {"cf.count", 3, "readonly fast", 1, 1, 1},
    {"cf.info", 2, "readonly fast", 1, 1, 1},
    {"cf.scandump", 3, "readonly", 1, 1, 1},
    {"cf.loadchunk", 4, "write denyoom", 1, 1, 1},
    {"ping", -1, "fast", 0, 0, 0},
    {"echo", 2, "fast", 0, 0, 0},
    {"hello", -1, "noscript loading stale fast no_auth", 0, 0, 0},
    {"auth", -2, "noscript loading stale fast no_auth", 0, 0, 0},
    {"select", 2, "loading stale fast", 0, 0, 0},
    {"client", -2, "noscript loading stale", 0, 0, 0},
    {"quit", -1, "noscript loading stale fast no_auth", 0, 0, 0},
    {"command", -1, "loading stale", 0, 0, 0},
    {"info", -1, "loading stale", 0, 0, 0},
    {"del", -2, "write", 1, -1, 1},
    {"exists", -2, "readonly fast", 1, -1, 1},
    {"type", 2, "readonly fast", 1, 1, 1},
    {"scan", -2, "readonly", 0, 0, 0},
    {"keys", 2, "readonly", 0, 0, 0},
    {"dbsize", 1, "readonly fast", 0, 0, 0},
    {"config", -2, "admin noscript loading stale", 0, 0, 0},
    {"reset", 1, "noscript loading stale fast no_auth", 0, 0, 0},
};

void WriteCommandEntry(const CommandDoc& d, Writer& w) {
  std::vector<std::string_view> flags;
  for (std::string_view rest = d.flags; !rest.empty();) {
    const size_t sp = rest.find(' ');
    flags.push_back(rest.substr(0, sp));
    rest = sp == std::string_view::npos ? std::string_view() : rest.substr(sp + 1);
  }
  w.Array(10);
  w.Bulk(d.name);
  w.Integer(d.arity);
  w.Set(flags.size());
  for (std::string_view f : flags) w.SimpleString(f);
  w.Integer(d.first_key);
  w.Integer(d.last_key);
  w.Integer(d.step);
  w.Set(0);    // ACL categories
  w.Set(0);    // tips
  w.Array(0);  // key specs
  w.Array(0);  // subcommands
}
}  // namespace

void RedisCommands::CommandInfo(Session*, const Command& c, Writer& w) {
  if (c.args.size() == 1) {
    w.Array(std::size(kDocs));
    for (const CommandDoc& d : kDocs) WriteCommandEntry(d, w);
    return;
  }
  const std::string_view sub = c.args[1];
  if (Is(sub, "COUNT") && c.args.size() == 2) {
    w.Integer(std::size(kDocs));
  } else if (Is(sub, "INFO")) {
    if (c.args.size() == 2) {
      w.Array(std::size(kDocs));
      for (const CommandDoc& d : kDocs) WriteCommandEntry(d, w);
      return;
    }
    w.Array(c.args.size() - 2);
    for (size_t i = 2; i < c.args.size(); ++i) {
      const CommandDoc* found = nullptr;
      for (const CommandDoc& d : kDocs) {
        if (Is(d.name, c.args[i])) found = &d;
      }
      if (found != nullptr) {
        WriteCommandEntry(*found, w);
      } else {
        w.NullArray();
      }
    }
  } else if (Is(sub, "DOCS")) {
    // No documents: redis-cli then falls back to its own help.
    w.Map(0);
  } else if (Is(sub, "LIST")) {
    w.Array(std::size(kDocs));
    for (const CommandDoc& d : kDocs) w.Bulk(d.name);
  } else {
    w.Error(absl::StrFormat(
        "ERR unknown subcommand '%s'. cuckood serves COMMAND, COMMAND COUNT, INFO, DOCS and LIST",
        Shown(sub)));
  }
}

void RedisCommands::ServerInfo(Session* s, const Command& c, Writer& w) {
  auto wanted = [&](std::string_view section) {
    if (c.args.size() == 1) return true;
    for (size_t i = 1; i < c.args.size(); ++i) {
      if (Is(c.args[i], section) || Is(c.args[i], "all") || Is(c.args[i], "everything") ||
          Is(c.args[i], "default")) {
        return true;
      }
    }
    return false;
  };
  std::string text;
  if (wanted("server")) {
    absl::StrAppendFormat(&text,
                          "# Server\r\nredis_version:%s\r\ncuckood_version:%s\r\nredis_mode:"
                          "standalone\r\nprocess_id:%d\r\ntcp_port:%d\r\nuptime_in_seconds:%d\r\n"
                          "\r\n",
                          kRedisVersion, kVersion, ::getpid(), port_,
                          absl::ToInt64Seconds(absl::Now() - started_));
  }
  const ClientMemory clients = client_memory_ ? client_memory_() : ClientMemory();
  if (wanted("clients")) {
    absl::StrAppendFormat(&text,
                          "# Clients\r\nconnected_clients:%u\r\nmaxclients:%u\r\n"
                          "evicted_clients:%u\r\n\r\n",
                          connections_ ? connections_() : 0, options_.max_clients, clients.evicted);
  }
  if (wanted("memory")) {
    absl::StrAppendFormat(&text,
                          "# Memory\r\nused_memory:%u\r\nmaxmemory:%u\r\nmem_clients_normal:%u\r\n"
                          "maxmemory_clients:%u\r\n\r\n",
                          registry_->memory_bytes(), registry_->limits().memory_budget_bytes,
                          clients.bytes, options_.max_client_memory);
  }
  if (wanted("modules")) {
    absl::StrAppendFormat(&text,
                          "# Modules\r\nmodule:name=bf,ver=%d,api=1,filters=0,usedby=[],"
                          "using=[],options=[]\r\n\r\n",
                          kBloomModuleVersion);
  }
  if (wanted("keyspace")) {
    text += "# Keyspace\r\n";
    Caller caller;
    std::string ignored;
    Writer iw(&ignored, s->protocol);
    if (CurrentCaller(s, iw, &caller)) {
      size_t n = 0;
      for (const auto& [name, f] : registry_->List()) n += caller.Allows(Access::kRead, name);
      if (n > 0) absl::StrAppendFormat(&text, "db0:keys=%u,expires=0,avg_ttl=0\r\n", n);
    }
  }
  w.Verbatim("txt", text);
}

// ---- Keyspace commands over filter names ----

void RedisCommands::KeyExists(Session* s, const Command& c, Writer& w) {
  Caller caller;
  if (!CurrentCaller(s, w, &caller)) return;
  int64_t n = 0;
  for (size_t i = 1; i < c.args.size(); ++i) {
    if (!FilterRegistry::ValidateName(A(c.args[i])).ok()) continue;
    if (!caller.Allows(Access::kRead, c.args[i])) continue;  // As SCAN: not shown.
    n += registry_->Get(A(c.args[i])).ok() ? 1 : 0;
  }
  w.Integer(n);
}

void RedisCommands::Type(Session* s, const Command& c, Writer& w) {
  Caller caller;
  if (!CurrentCaller(s, w, &caller)) return;
  const bool found = FilterRegistry::ValidateName(A(c.args[1])).ok() &&
                     caller.Allows(Access::kRead, c.args[1]) && registry_->Get(A(c.args[1])).ok();
  w.SimpleString(found ? kTypeName : "none");
}

void RedisCommands::Scan(Session* s, const Command& c, Writer& w) {
  uint64_t cursor = 0;
  {
    const std::string_view t = c.args[1];
    bool ok = !t.empty() && t.size() <= 20;
    for (char ch : t) ok = ok && ch >= '0' && ch <= '9';
    if (ok) {
      uint64_t v = 0;
      for (char ch : t) {
        const uint64_t d = static_cast<uint64_t>(ch - '0');
        if (v > (UINT64_MAX - d) / 10) ok = false;
        v = v * 10 + d;
      }
      cursor = v;
    }
    if (!ok) {
      w.Error("ERR invalid cursor");
      return;
    }
  }
  std::string_view pattern = "*";
  int64_t count = 10;
  bool type_ok = true;
  for (size_t i = 2; i < c.args.size(); i += 2) {
    if (i + 1 >= c.args.size()) {
      w.Error("ERR syntax error");
      return;
    }
    if (Is(c.args[i], "MATCH")) {
      pattern = c.args[i + 1];
    } else if (Is(c.args[i], "COUNT")) {
      if (!ParseInt(c.args[i + 1], &count)) {
        w.Error("ERR value is not an integer or out of range");
        return;
      }
      if (count < 1) {
        w.Error("ERR syntax error");
        return;
      }
    } else if (Is(c.args[i], "TYPE")) {
      type_ok = Is(c.args[i + 1], kTypeName);
    } else {
      w.Error("ERR syntax error");
      return;
    }
  }
  Caller caller;
  if (!CurrentCaller(s, w, &caller)) return;
  std::vector<std::pair<uint64_t, std::string>> names;
  for (auto& [name, f] : registry_->List()) {
    const uint64_t h = ScanHash(name);
    if (h >= cursor && caller.Allows(Access::kRead, name)) names.emplace_back(h, name);
  }
  std::sort(names.begin(), names.end());
  size_t end = std::min<size_t>(names.size(), static_cast<size_t>(count));
  // Names of one hash go together, so the next cursor never splits them.
  while (end > 0 && end < names.size() && names[end].first == names[end - 1].first) ++end;
  const uint64_t next = end < names.size() ? names[end].first : 0;
  std::vector<std::string_view> shown;
  for (size_t i = 0; i < end; ++i) {
    if (type_ok && Matches(pattern, names[i].second)) shown.push_back(names[i].second);
  }
  w.Array(2);
  w.Bulk(absl::StrCat(next));
  w.Array(shown.size());
  for (std::string_view n : shown) w.Bulk(n);
}

void RedisCommands::Keys(Session* s, const Command& c, Writer& w) {
  Caller caller;
  if (!CurrentCaller(s, w, &caller)) return;
  std::vector<std::string> names;
  for (auto& [name, f] : registry_->List()) {
    if (caller.Allows(Access::kRead, name) && Matches(c.args[1], name)) names.push_back(name);
  }
  std::sort(names.begin(), names.end());
  w.Array(names.size());
  for (const std::string& n : names) w.Bulk(n);
}

void RedisCommands::DbSize(Session* s, Writer& w) {
  Caller caller;
  if (!CurrentCaller(s, w, &caller)) return;
  int64_t n = 0;
  for (const auto& [name, f] : registry_->List()) n += caller.Allows(Access::kRead, name);
  w.Integer(n);
}

void RedisCommands::Config(Session*, const Command& c, Writer& w) {
  if (Is(c.args[1], "GET") && c.args.size() >= 3) {
    // The few Redis settings clients ask for on connect (redis-benchmark:
    // save and appendonly), as what they mean here: no RDB snapshots in
    // Redis's sense, every write in the write-ahead log.
    const std::vector<std::pair<std::string, std::string>> settings = {
        {"save", ""},
        {"appendonly", "yes"},
        {"databases", "1"},
        {"maxmemory", absl::StrCat(registry_->limits().memory_budget_bytes)},
        {"maxclients", absl::StrCat(options_.max_clients)},
        {"maxmemory-clients", absl::StrCat(options_.max_client_memory)},
        {"proto-max-bulk-len", absl::StrCat(options_.max_bulk_bytes)},
    };
    std::vector<const std::pair<std::string, std::string>*> found;
    for (const auto& setting : settings) {
      for (size_t i = 2; i < c.args.size(); ++i) {
        if (Matches(absl::AsciiStrToLower(A(c.args[i])), setting.first)) {
          found.push_back(&setting);
          break;
        }
      }
    }
    w.Map(found.size());
    for (const auto* setting : found) {
      w.Bulk(setting->first);
      w.Bulk(setting->second);
    }
    return;
  }
  w.Error(absl::StrFormat(
      "ERR CONFIG %s is not supported: cuckood is configured with flags and environment "
      "variables (cuckood --help)",
      Shown(absl::AsciiStrToUpper(A(c.args[1])))));
}

}  // namespace cuckoo::server
