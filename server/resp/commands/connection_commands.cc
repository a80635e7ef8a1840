// The connection commands (PING, ECHO, HELLO, AUTH, SELECT, CLIENT, QUIT,
// RESET) and the server's (COMMAND, INFO, CONFIG)
// (server/resp/commands/resp_commands.h).
#include <unistd.h>

#include <algorithm>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "boost/asio/steady_timer.hpp"
#include "cuckoo_version.h"
#include "server/observability/logging.h"
#include "server/resp/commands/commands_internal.h"
#include "server/resp/commands/resp_commands.h"

namespace cuckoo::server {
namespace {

using Clock = std::chrono::steady_clock;
using redis::A;
using redis::Is;
using redis::kBloomModuleVersion;
using redis::kRedisVersion;
using redis::Matches;
using redis::ParseInt;
using redis::Shown;
using resp::Command;
using resp::Session;
using resp::Writer;

}  // namespace

void RedisCommands::Ping(Session*, const Command& c, Writer& w) {
  if (c.args.size() == 1) {
    w.SimpleString("PONG");
  } else if (c.args.size() == 2) {
    w.Bulk(c.args[1]);
  } else {
    w.Error(WrongArity(c.args[0]));
  }
}

void RedisCommands::Echo(Session*, const Command& c, Writer& w) { w.Bulk(c.args[1]); }

void RedisCommands::Select(Session*, const Command& c, Writer& w) {
  int64_t db;
  if (!ParseInt(c.args[1], &db)) {
    w.Error("ERR value is not an integer or out of range");
  } else if (db != 0) {
    w.Error("ERR DB index is out of range (cuckood has one keyspace: database 0)");
  } else {
    w.SimpleString("OK");
  }
}

void RedisCommands::Quit(Session* s, const Command&, Writer& w) {
  w.SimpleString("OK");
  s->close_after_reply = true;
}

void RedisCommands::Reset(Session* s, const Command&, Writer& w) {
  EndTransfersOf(s->id);  // As a new connection: no dump or load of its own.
  // A transaction ends (the connection drops its queue).
  s->multi = s->multi_failed = false;
  s->protocol = 2;
  s->name.clear();
  if (auth_ != nullptr) {
    s->authenticated = false;
    s->token.clear();
    s->user = "default";
  }
  // In RESP2, the protocol the connection is back to.
  std::string reset;
  Writer(&reset, 2).SimpleString("RESET");
  w.Raw(reset);
}

void RedisCommands::Multi(Session* s, const Command&, Writer& w) {
  if (s->multi) {
    // As Redis: an error, and the transaction goes on.
    w.Error("ERR MULTI calls can not be nested");
    return;
  }
  s->multi = true;
  s->multi_failed = false;
  w.SimpleString("OK");
}

void RedisCommands::Exec(Session* s, const Command&, Writer& w) {
  if (!s->multi) {
    w.Error("ERR EXEC without MULTI");
    return;
  }
  s->multi = false;
  if (s->multi_failed) {
    s->multi_failed = false;  // (the connection drops the queue)
    w.Error("EXECABORT Transaction discarded because of previous errors.");
    return;
  }
  // The array's header: the connection runs the queued commands next and
  // sends their replies after it.
  w.Array(s->multi_queued);
  s->exec = true;
}

void RedisCommands::Discard(Session* s, const Command&, Writer& w) {
  if (!s->multi) {
    w.Error("ERR DISCARD without MULTI");
    return;
  }
  s->multi = s->multi_failed = false;
  w.SimpleString("OK");
}

void RedisCommands::Watch(Session* s, const Command&, Writer& w) {
  if (s->multi) {
    w.Error("ERR WATCH inside MULTI is not allowed");
    return;
  }
  w.Error(
      "ERR WATCH is not supported by cuckood (no optimistic locking of keys): send MULTI ... "
      "EXEC without WATCH (redis-py: pipeline() without watch()); a transaction's commands run "
      "in order when EXEC comes, none before");
}

void RedisCommands::Unwatch(Session*, const Command&, Writer& w) {
  // Nothing is ever watched.
  w.SimpleString("OK");
}

void RedisCommands::Module(Session*, const Command& c, Writer& w) {
  const std::string_view sub = c.args[1];
  if (Is(sub, "LIST") && c.args.size() == 2) {
    // As RedisBloom 2.4 reports itself: clients look for "bf".
    w.Array(1);
    w.Map(4);
    w.Bulk("name");
    w.Bulk("bf");
    w.Bulk("ver");
    w.Integer(kBloomModuleVersion);
    w.Bulk("path");
    w.Bulk("");
    w.Bulk("args");
    w.Array(0);
  } else if (Is(sub, "LOAD") || Is(sub, "LOADEX") || Is(sub, "UNLOAD")) {
    w.Error(absl::StrFormat(
        "ERR cuckood does not load or unload modules (MODULE %s): RedisBloom's CF.* commands are "
        "built in",
        absl::AsciiStrToUpper(A(Shown(sub)))));
  } else {
    w.Error(absl::StrFormat(
        "ERR unknown subcommand or wrong number of arguments for '%s'. cuckood serves MODULE "
        "LIST",
        Shown(sub)));
  }
}

void RedisCommands::HelloCommand(Session* s, absl::Span<const Command> run, size_t command,
                                 resp::Completion done, Clock::time_point start) {
  std::string out;
  Writer w(&out, s->protocol);
  const absl::Duration delay = Hello(s, run[0], w);
  ReplyAfter(delay, command, std::move(out), std::move(done), start);
}

void RedisCommands::AuthCommand(Session* s, absl::Span<const Command> run, size_t command,
                                resp::Completion done, Clock::time_point start) {
  std::string out;
  Writer w(&out, s->protocol);
  absl::Duration delay;
  if (run[0].args.size() > 3) {
    w.Error("ERR syntax error");
  } else {
    delay = Auth(s, run[0], w);
  }
  ReplyAfter(delay, command, std::move(out), std::move(done), start);
}

void RedisCommands::ReplyAfter(absl::Duration delay, size_t command, std::string reply,
                               resp::Completion done, Clock::time_point start) {
  Record(command, reply, start, 0);
  if (delay <= absl::ZeroDuration()) {
    done.Reply(std::move(reply));
    return;
  }
  // The reply of a failed AUTH, later: the connection runs nothing else
  // meanwhile (its commands are answered in order).
  auto timer =
      std::make_shared<boost::asio::steady_timer>(delay_io_, absl::ToChronoNanoseconds(delay));
  timer->async_wait([timer, done, out = std::move(reply)](
                        const boost::system::error_code&) mutable { done.Reply(std::move(out)); });
}

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
  if (metrics_ != nullptr) metrics_->RecordRedisAuthFailure(redis::kAuth, static_cast<size_t>(why));
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
  if (std::optional<absl::Duration> refused = SignIn(s, token, w)) return *refused;
  w.SimpleString("OK");
  return absl::ZeroDuration();
}

std::optional<absl::Duration> RedisCommands::SignIn(Session* s, std::string_view token, Writer& w) {
  AuthFailure why;
  absl::StatusOr<Caller> caller = auth_->AuthenticateToken(token, &why);
  if (!caller.ok()) {
    w.Error(absl::StrCat("WRONGPASS invalid username-password pair or user is disabled. (",
                         caller.status().message(), ")"));
    return AuthFailed(s, why);
  }
  s->authenticated = true;
  s->token = std::string(token);
  s->user = std::string(caller->name());
  s->auth_failures = 0;
  return std::nullopt;
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
    if (std::optional<absl::Duration> refused = SignIn(s, token, w)) return *refused;
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

void RedisCommands::ClientCommand(Session* s, absl::Span<const Command> run, size_t command,
                                  resp::Completion done, Clock::time_point start) {
  const Command& c = run[0];
  std::string out;
  Writer w(&out, s->protocol);
  auto answer = [&] {
    Record(command, out, start, 0);
    done.Reply(std::move(out));
  };
  const bool list = Is(c.args[1], "LIST");
  if (!list && !Is(c.args[1], "KILL")) {
    Client(s, c, w);
    return answer();
  }
  const std::string sub = list ? "CLIENT LIST" : "CLIENT KILL";
  if (auth_ != nullptr) {
    // Other callers' connections: for those who administer every filter.
    Caller caller;
    if (!CurrentCaller(s, w, &caller)) return answer();
    if (!caller.AdminOfAll()) {
      RecordDenied(*s, command, sub, caller, "*", Access::kAdmin);
      w.Error(absl::StrFormat(
          "NOPERM \"%s\" may not run %s: it shows or closes every client's connection, which "
          "needs the admin grant on every filter (admin:*; its grants: %s)",
          caller.name(), sub, caller.GrantsText()));
      return answer();
    }
  }
  if (!list_clients_ || !kill_clients_) {
    w.Error(absl::StrFormat("ERR %s is not available: this port has no server's connections", sub));
    return answer();
  }
  if (list) return ClientList(s, c, command, std::move(done), start);
  resp::ClientFilter filter;
  filter.caller_id = s->id;
  bool none = false;  // TYPE master, replica or pubsub: cuckood has none
  const bool old_form = c.args.size() == 3;
  if (old_form) {
    filter.addr = std::string(c.args[2]);
  } else if (c.args.size() < 3 || c.args.size() % 2 != 0) {
    w.Error("ERR syntax error");
    return answer();
  } else {
    filter.skip_id = s->id;
    for (size_t i = 2; i + 1 < c.args.size(); i += 2) {
      const std::string_view key = c.args[i], value = c.args[i + 1];
      int64_t n;
      if (Is(key, "ID")) {
        if (!ParseInt(value, &n) || n <= 0) {
          w.Error("ERR client-id should be greater than 0");
          return answer();
        }
        filter.id = static_cast<uint64_t>(n);
      } else if (Is(key, "TYPE")) {
        if (Is(value, "master") || Is(value, "replica") || Is(value, "slave") ||
            Is(value, "pubsub")) {
          none = true;
        } else if (!Is(value, "normal")) {
          w.Error(absl::StrFormat("ERR Unknown client type '%s'", Shown(value)));
          return answer();
        }
      } else if (Is(key, "USER")) {
        filter.user = std::string(value);
      } else if (Is(key, "ADDR")) {
        filter.addr = std::string(value);
      } else if (Is(key, "LADDR")) {
        filter.laddr = std::string(value);
      } else if (Is(key, "SKIPME")) {
        if (Is(value, "yes")) {
          filter.skip_id = s->id;
        } else if (Is(value, "no")) {
          filter.skip_id = 0;
        } else {
          w.Error("ERR syntax error");
          return answer();
        }
      } else if (Is(key, "MAXAGE")) {
        if (!ParseInt(value, &n) || n < 0) {
          w.Error("ERR value is not an integer or out of range");
          return answer();
        }
        filter.min_age_seconds = n;
      } else {
        w.Error("ERR syntax error");
        return answer();
      }
    }
  }
  if (none) {
    w.Integer(0);
    return answer();
  }
  kill_clients_(std::move(filter), [this, command, start, old_form, protocol = s->protocol,
                                    done = std::move(done)](size_t killed) mutable {
    std::string out;
    Writer w(&out, protocol);
    if (!old_form) {
      w.Integer(static_cast<int64_t>(killed));
    } else if (killed > 0) {
      w.SimpleString("OK");
    } else {
      w.Error("ERR No such client");
    }
    Record(command, out, start, 0);
    done.Reply(std::move(out));
  });
}

void RedisCommands::ClientList(Session* s, const Command& c, size_t command, resp::Completion done,
                               Clock::time_point start) {
  std::string out;
  Writer w(&out, s->protocol);
  std::vector<uint64_t> ids;
  bool none = false;
  for (size_t i = 2; i < c.args.size();) {
    if (Is(c.args[i], "TYPE") && i + 1 < c.args.size()) {
      const std::string_view t = c.args[i + 1];
      if (Is(t, "master") || Is(t, "replica") || Is(t, "slave") || Is(t, "pubsub")) {
        none = true;
      } else if (!Is(t, "normal")) {
        w.Error(absl::StrFormat("ERR Unknown client type '%s'", Shown(t)));
        break;
      }
      i += 2;
    } else if (Is(c.args[i], "ID") && i + 1 < c.args.size()) {
      for (++i; i < c.args.size(); ++i) {
        int64_t id;
        if (!ParseInt(c.args[i], &id) || id <= 0) {
          w.Error("ERR Invalid client ID");
          break;
        }
        ids.push_back(static_cast<uint64_t>(id));
      }
      if (!out.empty()) break;
    } else {
      w.Error("ERR syntax error");
      break;
    }
  }
  if (!out.empty() || none) {
    if (out.empty()) w.Verbatim("txt", "");
    Record(command, out, start, 0);
    return done.Reply(std::move(out));
  }
  list_clients_([this, command, start, ids = std::move(ids), protocol = s->protocol,
                 done = std::move(done)](std::vector<resp::ClientInfo> clients) mutable {
    std::string text;
    for (const resp::ClientInfo& i : clients) {
      if (!ids.empty() && std::find(ids.begin(), ids.end(), i.id) == ids.end()) continue;
      // Redis 7's fields, those cuckood has (no pub/sub, WATCH, replicas).
      absl::StrAppendFormat(
          &text,
          "id=%u addr=%s laddr=%s fd=%d name=%s age=%d idle=%d flags=%s db=0 sub=0 psub=0 ssub=0 "
          "multi=%d watch=0 tot-mem=%u cmd=%s user=%s redir=-1 resp=%d lib-name=%s lib-ver=%s\n",
          i.id, i.addr, i.laddr, i.fd, i.name, i.age_seconds, i.idle_seconds, i.multi ? "x" : "N",
          i.multi ? static_cast<int64_t>(i.multi_queued) : -1, i.memory, i.cmd, i.user, i.protocol,
          i.lib_name, i.lib_version);
    }
    std::string out;
    Writer(&out, protocol).Verbatim("txt", text);
    Record(command, out, start, 0);
    done.Reply(std::move(out));
  });
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
        "SETNAME, GETNAME, SETINFO, ID, INFO, LIST and KILL",
        Shown(sub)));
  }
}

// COMMAND's entry of a command, from the command table.
void RedisCommands::WriteCommandEntry(const CommandSpec& d, Writer& w) {
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

void RedisCommands::CommandInfo(Session*, const Command& c, Writer& w) {
  const absl::Span<const CommandSpec> table = Commands();
  if (c.args.size() == 1) {
    w.Array(table.size());
    for (const CommandSpec& d : table) WriteCommandEntry(d, w);
    return;
  }
  const std::string_view sub = c.args[1];
  if (Is(sub, "COUNT") && c.args.size() == 2) {
    w.Integer(table.size());
  } else if (Is(sub, "INFO")) {
    if (c.args.size() == 2) {
      w.Array(table.size());
      for (const CommandSpec& d : table) WriteCommandEntry(d, w);
      return;
    }
    w.Array(c.args.size() - 2);
    for (size_t i = 2; i < c.args.size(); ++i) {
      const CommandSpec* found = nullptr;
      for (const CommandSpec& d : table) {
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
    w.Array(table.size());
    for (const CommandSpec& d : table) w.Bulk(d.name);
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
      for (const auto& [name, f] : registry_->ListLive()) n += caller.Allows(Access::kRead, name);
      if (n > 0) absl::StrAppendFormat(&text, "db0:keys=%u,expires=0,avg_ttl=0\r\n", n);
    }
  }
  w.Verbatim("txt", text);
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
