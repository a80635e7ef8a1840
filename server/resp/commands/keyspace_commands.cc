// DEL, EXISTS, TYPE, SCAN, KEYS, DBSIZE, RENAME and RENAMENX: Redis's keyspace commands over
// the filters' names (server/resp/commands/resp_commands.h).
#include <algorithm>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "server/observability/logging.h"
#include "server/resp/commands/commands_internal.h"
#include "server/resp/commands/resp_commands.h"
#include "xxhash.h"

namespace cuckoo::server {
namespace {

using Clock = std::chrono::steady_clock;
using redis::A;
using redis::Is;
using redis::kTypeName;
using redis::Matches;
using redis::ParseInt;
using redis::Shown;
using redis::StatusError;
using resp::Command;
using resp::Session;
using resp::Writer;

// SCAN's order: a 63-bit hash of the name, never 0 (cursor 0 starts and
// ends a scan). Names present from a scan's start to its end are returned
// exactly once whatever else is created or dropped meanwhile.
uint64_t ScanHash(std::string_view name) {
  return (XXH3_64bits(name.data(), name.size()) >> 1) | 1;
}
}  // namespace

void RedisCommands::DropKeys(Session* s, absl::Span<const Command> run, size_t command,
                             resp::Completion done, Clock::time_point start) {
  const Command& c = run[0];
  std::string out;
  Writer w(&out, s->protocol);
  Caller caller;
  if (!CurrentCaller(s, w, &caller)) {
    Record(command, out, start, 0);
    return done.Reply(std::move(out));
  }
  // As Redis's ACLs: every key is checked before any is deleted.
  std::vector<std::string> names;
  for (size_t i = 1; i < c.args.size(); ++i) {
    if (!FilterRegistry::ValidateName(A(c.args[i])).ok()) continue;  // Cannot exist.
    if (!Authorize(s, w, command, Access::kAdmin, c.args[i], &caller)) {
      Record(command, out, start, 0);
      return done.Reply(std::move(out));
    }
    names.emplace_back(c.args[i]);
  }
  DropNames(s, command, std::move(names), false, std::move(done), start);
}

void RedisCommands::Flush(Session* s, absl::Span<const Command> run, size_t command,
                          resp::Completion done, Clock::time_point start) {
  const Command& c = run[0];
  std::string out;
  Writer w(&out, s->protocol);
  auto fail = [&] {
    Record(command, out, start, 0);
    done.Reply(std::move(out));
  };
  // ASYNC and SYNC alike: each drop is answered once durable.
  if (c.args.size() > 2 ||
      (c.args.size() == 2 && !Is(c.args[1], "ASYNC") && !Is(c.args[1], "SYNC"))) {
    w.Error("ERR syntax error");
    return fail();
  }
  Caller caller;
  if (!CurrentCaller(s, w, &caller)) return fail();
  std::vector<std::string> names;
  size_t refused = 0;
  for (auto& [name, f] : registry_->List()) {
    if (!caller.Allows(Access::kAdmin, name)) ++refused;
    names.push_back(name);
  }
  if (refused > 0) {
    // Named by count only: the caller may not even see those filters.
    const std::string upper = absl::AsciiStrToUpper(A(kRedisCommandNames[command]));
    RecordDenied(*s, command, upper, caller, "*", Access::kAdmin);
    w.Error(absl::StrFormat(
        "NOPERM \"%s\" may not run %s: it drops every filter, which needs the admin grant on "
        "each, and %d of the %d filters are not among its admin grants (its grants: %s); nothing "
        "was dropped",
        caller.name(), upper, refused, names.size(), caller.GrantsText()));
    return fail();
  }
  std::sort(names.begin(), names.end());
  DropNames(s, command, std::move(names), true, std::move(done), start);
}

void RedisCommands::DropNames(Session* s, size_t command, std::vector<std::string> names, bool ok,
                              resp::Completion done, Clock::time_point start) {
  struct State {
    std::vector<std::string> names;
    size_t next = 0;
    int64_t dropped = 0;
    std::string token;
    int protocol = 2;
    size_t command = 0;
    bool ok = false;
    resp::Completion done;
    Clock::time_point start;
    std::function<void()> step;
  };
  auto state = std::make_shared<State>();
  state->names = std::move(names);
  state->token = s->token;
  state->protocol = s->protocol;
  state->command = command;
  state->ok = ok;
  state->done = std::move(done);
  state->start = start;
  // One DropFilter after another; the reply counts the filters dropped.
  state->step = [this, state] {
    if (state->next == state->names.size()) {
      std::string out;
      if (state->ok) {
        Writer(&out, state->protocol).SimpleString("OK");
      } else {
        Writer(&out, state->protocol).Integer(state->dropped);
      }
      Record(state->command, out, state->start, 0);
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
            Record(state->command, out, state->start, 0);
            state->done.Reply(std::move(out));
            state->step = nullptr;
            return;
          }
          state->step();
        });
  };
  state->step();
}

void RedisCommands::RenameKey(Session* s, absl::Span<const Command> run, size_t command,
                              resp::Completion done, Clock::time_point start) {
  const Command& c = run[0];
  const bool nx = command == redis::kRenameNx;
  std::string out;
  Writer w(&out, s->protocol);
  auto reply = [&] {
    Record(command, out, start, 0);
    done.Reply(std::move(out));
  };
  Caller caller;
  if (!CurrentCaller(s, w, &caller)) return reply();
  // As Redis's ACLs: both keys' grants before anything else.
  for (size_t i = 1; i <= 2; ++i) {
    if (!FilterRegistry::ValidateName(A(c.args[i])).ok()) continue;
    if (!Authorize(s, w, command, Access::kAdmin, c.args[i], &caller)) return reply();
  }
  // A key that cannot be a filter's name cannot exist: Redis's answer for a
  // missing key. A destination that cannot be one is refused, saying why.
  if (!FilterRegistry::ValidateName(A(c.args[1])).ok() || !registry_->Get(A(c.args[1])).ok()) {
    w.Error("ERR no such key");
    return reply();
  }
  if (absl::Status bad = FilterRegistry::ValidateName(A(c.args[2])); !bad.ok()) {
    w.Error(redis::NameError(c.args[2], bad));
    return reply();
  }
  auto call = std::make_shared<Call>();
  call->rename.set_name(std::string(c.args[1]));
  call->rename.set_new_name(std::string(c.args[2]));
  call->rename.set_replace(!nx);
  call->protocol = s->protocol;
  call->command = command;
  call->start = start;
  call->done = std::move(done);
  AddCredentials(*s, &call->ctx);
  calls_.fetch_add(1, std::memory_order_relaxed);
  in_process_.Start(
      [&](grpc::CompletionQueue* q) {
        return stub_->PrepareAsyncRenameFilter(&call->ctx, call->rename, q);
      },
      &call->renamed,
      [this, call, nx](grpc::Status st) {
        const CallDone call_done{&calls_};
        std::string out;
        Writer w(&out, call->protocol);
        if (st.ok()) {
          if (nx) {
            // RENAMENX of a key to itself: 0, as Redis answers (the
            // destination exists).
            w.Integer(call->rename.name() == call->rename.new_name() ? 0 : 1);
          } else {
            w.SimpleString("OK");
          }
        } else if (st.error_code() == grpc::StatusCode::NOT_FOUND) {
          w.Error("ERR no such key");  // Dropped or renamed meanwhile.
        } else if (nx && st.error_code() == grpc::StatusCode::ALREADY_EXISTS) {
          w.Integer(0);
        } else {
          w.Error(StatusError(st));
        }
        Record(call->command, out, call->start, 0);
        call->done.Reply(std::move(out));
      });
}

void RedisCommands::KeyExists(Session* s, const Command& c, Writer& w) {
  Caller caller;
  if (!CurrentCaller(s, w, &caller)) return;
  int64_t n = 0;
  for (size_t i = 1; i < c.args.size(); ++i) {
    if (!FilterRegistry::ValidateName(A(c.args[i])).ok()) continue;
    if (!caller.Allows(Access::kRead, c.args[i])) continue;  // As SCAN: not shown.
    n += registry_->GetLive(A(c.args[i])).ok() ? 1 : 0;
  }
  w.Integer(n);
}

void RedisCommands::Type(Session* s, const Command& c, Writer& w) {
  Caller caller;
  if (!CurrentCaller(s, w, &caller)) return;
  const bool found = FilterRegistry::ValidateName(A(c.args[1])).ok() &&
                     caller.Allows(Access::kRead, c.args[1]) &&
                     registry_->GetLive(A(c.args[1])).ok();
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
  for (auto& [name, f] : registry_->ListLive()) {
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
  for (auto& [name, f] : registry_->ListLive()) {
    if (caller.Allows(Access::kRead, name) && Matches(c.args[1], name)) names.push_back(name);
  }
  std::sort(names.begin(), names.end());
  w.Array(names.size());
  for (const std::string& n : names) w.Bulk(n);
}

void RedisCommands::DbSize(Session* s, const Command&, Writer& w) {
  Caller caller;
  if (!CurrentCaller(s, w, &caller)) return;
  int64_t n = 0;
  for (const auto& [name, f] : registry_->ListLive()) n += caller.Allows(Access::kRead, name);
  w.Integer(n);
}

void RedisCommands::MemoryCommand(Session* s, const Command& c, Writer& w) {
  if (!Is(c.args[1], "USAGE")) {
    w.Error(absl::StrFormat(
        "ERR unknown subcommand '%s': cuckood serves MEMORY USAGE key [SAMPLES n] only (the "
        "server's memory: INFO memory, or the metric cuckood_memory_used_bytes)",
        Shown(c.args[1])));
    return;
  }
  if (c.args.size() != 3 && c.args.size() != 5) {
    w.Error(c.args.size() < 3 ? WrongArity("memory|usage") : "ERR syntax error");
    return;
  }
  if (c.args.size() == 5) {
    int64_t samples;
    if (!Is(c.args[3], "SAMPLES")) {
      w.Error("ERR syntax error");
      return;
    }
    // Ignored (the size is exact), but checked as Redis does.
    if (!ParseInt(c.args[4], &samples) || samples < 0) {
      w.Error("ERR value is not an integer or out of range");
      return;
    }
  }
  Caller caller;
  if (!Authorize(s, w, redis::kMemory, Access::kRead, c.args[2], &caller)) return;
  std::shared_ptr<CuckooFilter> f;
  if (FilterRegistry::ValidateName(A(c.args[2])).ok()) {
    absl::StatusOr<std::shared_ptr<CuckooFilter>> got = registry_->GetLive(A(c.args[2]));
    if (got.ok()) f = *std::move(got);
  }
  if (f == nullptr) {
    w.Null();
    return;
  }
  // CF.INFO's Size: the tables and shards allocated.
  w.Integer(static_cast<int64_t>(std::min<uint64_t>(f->memory_bytes(), INT64_MAX)));
}

}  // namespace cuckoo::server
