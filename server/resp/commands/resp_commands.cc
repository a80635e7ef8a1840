#include "server/resp/commands/resp_commands.h"

#include <unistd.h>

#include <iterator>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "server/observability/logging.h"
#include "server/resp/commands/commands_internal.h"
#include "spdlog/spdlog.h"

namespace cuckoo::server {
namespace {

using Clock = std::chrono::steady_clock;
using redis::A;
using redis::ItemError;
using redis::NameError;
using redis::Shown;
using resp::Command;
using resp::Session;
using resp::Writer;

RedisOutcome OutcomeOf(std::string_view reply) {
  if (reply.empty() || reply[0] != '-') return RedisOutcome::kOk;
  if (absl::StartsWith(A(reply), "-NOAUTH") || absl::StartsWith(A(reply), "-NOPERM") ||
      absl::StartsWith(A(reply), "-WRONGPASS")) {
    return RedisOutcome::kDenied;
  }
  return RedisOutcome::kError;
}
}  // namespace

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
  const std::string name = absl::AsciiStrToUpper(A(kRedisCommandNames[command]));
  RecordDenied(*s, command, name, *caller, filter, need);
  w.Error(absl::StrFormat(
      "NOPERM \"%s\" may not run %s on filter '%s': that needs the %s grant on it (its grants: "
      "%s)",
      caller->name(), name, Shown(filter), AccessName(need), caller->GrantsText()));
  return false;
}

void RedisCommands::RecordDenied(const Session& s, size_t command, std::string_view method,
                                 const Caller& caller, std::string_view filter, Access need) {
  if (metrics_ != nullptr) {
    metrics_->RecordRedisAuthFailure(command, static_cast<size_t>(AuthFailure::kPermissionDenied));
  }
  Audit({.caller = caller.name(),
         .method = method,
         .filter = filter,
         .peer = s.peer,
         .outcome = "PERMISSION_DENIED",
         .detail = AccessName(need)});
}

bool RedisCommands::ReadFilter(Session* s, Writer& w, size_t command, std::string_view key,
                               std::shared_ptr<CuckooFilter>* filter) {
  Caller caller;
  if (!Authorize(s, w, command, Access::kRead, key, &caller)) return false;
  if (absl::Status v = FilterRegistry::ValidateName(A(key)); !v.ok()) {
    // No filter has such a name: the existence reads answer "missing".
    if (command == redis::kCfExists || command == redis::kCfMExists || command == redis::kCfCount) {
      *filter = nullptr;
      return true;
    }
    w.Error(NameError(key, v));
    return false;
  }
  absl::StatusOr<std::shared_ptr<CuckooFilter>> f = registry_->GetLive(A(key));
  *filter = f.ok() ? *std::move(f) : nullptr;
  return true;
}

size_t RedisCommands::Execute(Session* session, absl::Span<const Command> commands,
                              resp::Completion done) {
  return Dispatch(session, commands, std::move(done));
}

namespace {

// The commands an EXEC's log transaction goes on over: writes of items
// (WriteHere, applied on the connection's thread, answered once durable)
// and reads of filters, none of which waits for the log.
bool KeepsLogTransaction(size_t command) {
  switch (command) {
    case redis::kCfAdd:
    case redis::kCfAddNx:
    case redis::kCfInsert:
    case redis::kCfInsertNx:
    case redis::kCfDel:
    case redis::kCfExists:
    case redis::kCfMExists:
    case redis::kCfCount:
    case redis::kCfInfo:
      return true;
    default:
      return false;
  }
}

}  // namespace

void RedisCommands::ExecPaused(Session* s) {
  if (s->log_transaction == 0) return;
  service_->EndLogTransaction(std::exchange(s->log_transaction, 0));
}

bool RedisCommands::Admissible(Session* s, const Command& c, size_t command, Writer& w) {
  const size_t argc = c.args.size();
  if (command == redis::kUnknown) {
    std::string args;
    for (size_t i = 1; i < argc && args.size() < 128; ++i) {
      absl::StrAppend(&args, "'", Shown(c.args[i]), "' ");
    }
    w.Error(absl::StrFormat("ERR unknown command '%s', with args beginning with: %s",
                            argc == 0 ? std::string() : Shown(c.args[0]), args));
    return false;
  }
  const CommandSpec& spec = Commands()[command];
  if ((spec.arity > 0 && argc != static_cast<size_t>(spec.arity)) ||
      (spec.arity < 0 && argc < static_cast<size_t>(-spec.arity))) {
    w.Error(WrongArity(c.args[0]));
    return false;
  }
  if (auth_ != nullptr && spec.access != RedisAccess::kNone) {
    if (!s->authenticated) {
      w.Error("NOAUTH Authentication required.");
      return false;
    }
    // The token again, against the access file in force: a revoked one
    // stops working on open connections at once.
    Caller caller;
    if (!CurrentCaller(s, w, &caller)) return false;
  }
  return true;
}

resp::CommandHandler::Queueing RedisCommands::Queue(Session* s, const Command& c,
                                                    std::string* error) {
  const size_t command = c.args.empty() ? redis::kUnknown : RedisCommandIndex(c.args[0]);
  switch (command) {
    case redis::kMulti:
    case redis::kExec:
    case redis::kDiscard:
    case redis::kWatch:
    case redis::kQuit:
    case redis::kReset:
      return Queueing::kRun;
    default:
      break;
  }
  const Clock::time_point start = Clock::now();
  error->clear();
  Writer w(error, s->protocol);
  bool ok = Admissible(s, c, command, w);
  // As Redis 7's ACLs at queue time: the grant the command needs on each of
  // its keys (a missing filter that CF.ADD would create needs admin then,
  // checked when it runs).
  const CommandSpec* spec = command == redis::kUnknown ? nullptr : &Commands()[command];
  if (ok && auth_ != nullptr && spec->first_key > 0 && spec->access != RedisAccess::kConnection &&
      spec->access != RedisAccess::kNone) {
    const Access need = spec->access == RedisAccess::kRead    ? Access::kRead
                        : spec->access == RedisAccess::kWrite ? Access::kWrite
                                                              : Access::kAdmin;
    const size_t last = spec->last_key < 0 ? c.args.size() - 1 : spec->last_key;
    Caller caller;
    for (size_t i = spec->first_key; ok && i <= last && i < c.args.size(); i += spec->step) {
      // (A name that cannot be a filter's is the command's own error.)
      if (!FilterRegistry::ValidateName(A(c.args[i])).ok()) continue;
      ok = Authorize(s, w, command, need, c.args[i], &caller);
    }
  }
  if (ok) return Queueing::kQueue;
  s->multi_failed = true;
  Record(command, *error, start, 0);
  return Queueing::kRefuse;
}

size_t RedisCommands::Dispatch(Session* s, absl::Span<const Command> commands,
                               resp::Completion done) {
  const Clock::time_point start = Clock::now();
  const Command& c = commands[0];
  std::string out;
  Writer w(&out, s->protocol);
  const size_t argc = c.args.size();
  const size_t command = argc == 0 ? redis::kUnknown : RedisCommandIndex(c.args[0]);
  if (s->log_transaction != 0 && (!s->in_exec || !KeepsLogTransaction(command))) ExecPaused(s);
  auto finish = [&](size_t keys) {
    Record(command, out, start, keys);
    done.Reply(std::move(out));
    return size_t{1};
  };
  if (!Admissible(s, c, command, w)) return finish(0);
  const CommandSpec& spec = Commands()[command];
  if (spec.run != nullptr) {
    const size_t n = spec.batch == nullptr ? 1 : (this->*spec.batch)(commands, command);
    (this->*spec.run)(s, commands.subspan(0, n), command, std::move(done), start);
    return n;
  }
  (this->*spec.reply)(s, c, w);
  return finish(spec.keys == RedisKeys::kItems ? argc - 2 : spec.keys == RedisKeys::kOne ? 1 : 0);
}

size_t RedisCommands::ItemRunLength(absl::Span<const Command> commands, size_t command) const {
  // The same single-item command on the same filter, each item valid.
  const Command& c = commands[0];
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
}

absl::Span<const RedisCommands::CommandSpec> RedisCommands::Commands() {
  using R = RedisCommands;
  constexpr RedisAccess kNone = RedisAccess::kNone;
  constexpr RedisAccess kConnection = RedisAccess::kConnection;
  constexpr RedisAccess kRead = RedisAccess::kRead;
  constexpr RedisAccess kWrite = RedisAccess::kWrite;
  constexpr RedisAccess kAdmin = RedisAccess::kAdmin;
  constexpr RedisKeys kNoKeys = RedisKeys::kNone;
  // name, arity, COMMAND's flags and key positions, access, writes; then
  // the handler: `reply` and the keys counted, or `run` and its batch.
  static constexpr CommandSpec kTable[] = {
      {"cf.reserve", -3, "write denyoom", 1, 1, 1, kAdmin, true,  //
       nullptr, kNoKeys, &R::Reserve, nullptr},
      {"cf.add", 3, "write denyoom", 1, 1, 1, kWrite, true,  //
       nullptr, kNoKeys, &R::Write, &R::ItemRunLength},
      {"cf.addnx", 3, "write denyoom", 1, 1, 1, kWrite, true,  //
       nullptr, kNoKeys, &R::Write, &R::ItemRunLength},
      {"cf.insert", -4, "write denyoom", 1, 1, 1, kWrite, true,  //
       nullptr, kNoKeys, &R::Write, &R::InsertRunLength},
      {"cf.insertnx", -4, "write denyoom", 1, 1, 1, kWrite, true,  //
       nullptr, kNoKeys, &R::Write, &R::InsertRunLength},
      {"cf.exists", 3, "readonly fast", 1, 1, 1, kRead, false,  //
       nullptr, kNoKeys, &R::Exists, &R::ItemRunLength},
      {"cf.mexists", -3, "readonly fast", 1, 1, 1, kRead, false,  //
       &R::MExists, RedisKeys::kItems, nullptr, nullptr},
      {"cf.del", 3, "write fast", 1, 1, 1, kWrite, true,  //
       nullptr, kNoKeys, &R::Write, &R::ItemRunLength},
      {"cf.count", 3, "readonly fast", 1, 1, 1, kRead, false,  //
       &R::Count, RedisKeys::kOne, nullptr, nullptr},
      {"cf.info", 2, "readonly fast", 1, 1, 1, kRead, false,  //
       &R::Info, kNoKeys, nullptr, nullptr},
      {"cf.scandump", 3, "readonly", 1, 1, 1, kAdmin, false,  //
       nullptr, kNoKeys, &R::ScanDump, nullptr},
      {"cf.loadchunk", 4, "write denyoom", 1, 1, 1, kAdmin, true,  //
       nullptr, kNoKeys, &R::LoadChunk, nullptr},
      {"ping", -1, "fast", 0, 0, 0, kConnection, false,  //
       &R::Ping, kNoKeys, nullptr, nullptr},
      {"echo", 2, "fast", 0, 0, 0, kConnection, false,  //
       &R::Echo, kNoKeys, nullptr, nullptr},
      {"hello", -1, "noscript loading stale fast no_auth", 0, 0, 0, kNone, false,  //
       nullptr, kNoKeys, &R::HelloCommand, nullptr},
      {"auth", -2, "noscript loading stale fast no_auth", 0, 0, 0, kNone, false,  //
       nullptr, kNoKeys, &R::AuthCommand, nullptr},
      {"select", 2, "loading stale fast", 0, 0, 0, kConnection, false,  //
       &R::Select, kNoKeys, nullptr, nullptr},
      {"client", -2, "noscript loading stale", 0, 0, 0, kConnection, false,  //
       nullptr, kNoKeys, &R::ClientCommand, nullptr},
      {"quit", -1, "noscript loading stale fast no_auth", 0, 0, 0, kNone, false,  //
       &R::Quit, kNoKeys, nullptr, nullptr},
      {"command", -1, "loading stale", 0, 0, 0, kConnection, false,  //
       &R::CommandInfo, kNoKeys, nullptr, nullptr},
      {"info", -1, "loading stale", 0, 0, 0, kConnection, false,  //
       &R::ServerInfo, kNoKeys, nullptr, nullptr},
      {"del", -2, "write", 1, -1, 1, kAdmin, true,  //
       nullptr, kNoKeys, &R::DropKeys, nullptr},
      {"exists", -2, "readonly fast", 1, -1, 1, kRead, false,  //
       &R::KeyExists, kNoKeys, nullptr, nullptr},
      {"type", 2, "readonly fast", 1, 1, 1, kRead, false,  //
       &R::Type, kNoKeys, nullptr, nullptr},
      {"scan", -2, "readonly", 0, 0, 0, kRead, false,  //
       &R::Scan, kNoKeys, nullptr, nullptr},
      {"keys", 2, "readonly", 0, 0, 0, kRead, false,  //
       &R::Keys, kNoKeys, nullptr, nullptr},
      {"dbsize", 1, "readonly fast", 0, 0, 0, kRead, false,  //
       &R::DbSize, kNoKeys, nullptr, nullptr},
      {"config", -2, "admin noscript loading stale", 0, 0, 0, kConnection, false,  //
       &R::Config, kNoKeys, nullptr, nullptr},
      {"reset", 1, "noscript loading stale fast no_auth", 0, 0, 0, kNone, false,  //
       &R::Reset, kNoKeys, nullptr, nullptr},
      {"multi", 1, "noscript loading stale fast allow_busy", 0, 0, 0, kConnection, false,  //
       &R::Multi, kNoKeys, nullptr, nullptr},
      {"exec", 1, "noscript loading stale skip_slowlog", 0, 0, 0, kConnection, false,  //
       &R::Exec, kNoKeys, nullptr, nullptr},
      {"discard", 1, "noscript loading stale fast allow_busy", 0, 0, 0, kConnection, false,  //
       &R::Discard, kNoKeys, nullptr, nullptr},
      {"watch", -2, "noscript loading stale fast allow_busy", 1, -1, 1, kConnection, false,  //
       &R::Watch, kNoKeys, nullptr, nullptr},
      {"unwatch", 1, "noscript loading stale fast allow_busy", 0, 0, 0, kConnection, false,  //
       &R::Unwatch, kNoKeys, nullptr, nullptr},
      {"unlink", -2, "write fast", 1, -1, 1, kAdmin, true,  //
       nullptr, kNoKeys, &R::DropKeys, nullptr},
      {"flushall", -1, "write", 0, 0, 0, kAdmin, true,  //
       nullptr, kNoKeys, &R::Flush, nullptr},
      {"flushdb", -1, "write", 0, 0, 0, kAdmin, true,  //
       nullptr, kNoKeys, &R::Flush, nullptr},
      {"memory", -2, "readonly", 2, 2, 1, kRead, false,  //
       &R::MemoryCommand, kNoKeys, nullptr, nullptr},
      {"module", -2, "admin noscript", 0, 0, 0, kConnection, false,  //
       &R::Module, kNoKeys, nullptr, nullptr},
      {"expire", -3, "write fast", 1, 1, 1, kAdmin, true,  //
       nullptr, kNoKeys, &R::SetExpiry, nullptr},
      {"pexpire", -3, "write fast", 1, 1, 1, kAdmin, true,  //
       nullptr, kNoKeys, &R::SetExpiry, nullptr},
      {"expireat", -3, "write fast", 1, 1, 1, kAdmin, true,  //
       nullptr, kNoKeys, &R::SetExpiry, nullptr},
      {"pexpireat", -3, "write fast", 1, 1, 1, kAdmin, true,  //
       nullptr, kNoKeys, &R::SetExpiry, nullptr},
      {"ttl", 2, "readonly fast", 1, 1, 1, kRead, false,  //
       &R::ExpiryInfo, kNoKeys, nullptr, nullptr},
      {"pttl", 2, "readonly fast", 1, 1, 1, kRead, false,  //
       &R::ExpiryInfo, kNoKeys, nullptr, nullptr},
      {"persist", 2, "write fast", 1, 1, 1, kAdmin, true,  //
       nullptr, kNoKeys, &R::SetExpiry, nullptr},
      {"expiretime", 2, "readonly fast", 1, 1, 1, kRead, false,  //
       &R::ExpiryInfo, kNoKeys, nullptr, nullptr},
      {"pexpiretime", 2, "readonly fast", 1, 1, 1, kRead, false,  //
       &R::ExpiryInfo, kNoKeys, nullptr, nullptr},
      {"rename", 3, "write", 1, 2, 1, kAdmin, true,  //
       nullptr, kNoKeys, &R::RenameKey, nullptr},
      {"renamenx", 3, "write fast", 1, 2, 1, kAdmin, true,  //
       nullptr, kNoKeys, &R::RenameKey, nullptr},
  };
  static_assert(std::size(kTable) == redis::kUnknown, "one entry per command but \"unknown\"");
  static_assert(
      [] {
        for (size_t i = 0; i < std::size(kTable); ++i) {
          const CommandSpec& e = kTable[i];
          // In the metrics' order, one handler each, and "write" in COMMAND's
          // flags exactly for the commands that write.
          if (e.name != kRedisCommandNames[i] || (e.reply == nullptr) == (e.run == nullptr) ||
              (e.batch != nullptr && e.run == nullptr) ||
              e.writes != (e.flags.substr(0, 5) == "write")) {
            return false;
          }
        }
        return true;
      }(),
      "the command table matches kRedisCommandNames and has one handler per command");
  return kTable;
}
}  // namespace cuckoo::server
