// EXPIRE, PEXPIRE, EXPIREAT, PEXPIREAT, PERSIST, TTL, PTTL, EXPIRETIME and
// PEXPIRETIME: Redis 7's key expiry over the filters' expiry
// (server/resp/commands/resp_commands.h, docs/REDIS_COMPATIBILITY.md).
//
// The changes go through the service's SetFilterExpiry (logged, durable
// when answered, replicated); a time not in the future drops the filter
// (a logged drop), as Redis deletes such a key. The reads answer from the
// filter's expiry here; an expired filter is missing
// (FilterRegistry::GetLive) from its expire_at on.
#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "server/resp/commands/commands_internal.h"
#include "server/resp/commands/resp_commands.h"

namespace cuckoo::server {
namespace {

using Clock = std::chrono::steady_clock;
using redis::A;
using redis::Is;
using redis::ParseInt;
using redis::StatusError;
using resp::Command;
using resp::Session;
using resp::Writer;
using Condition = v1::SetFilterExpiryRequest;

// The latest expiry a filter may have (Unix milliseconds): the year 9999,
// as the service's Timestamps go.
constexpr int64_t kMaxExpireAtMs = int64_t{253402300799999};

// EXPIRE's options (Redis 7): the condition, or an error reply's text.
std::string ParseCondition(const Command& c, Condition::Condition* out) {
  bool nx = false, xx = false, gt = false, lt = false;
  for (size_t i = 3; i < c.args.size(); ++i) {
    const std::string_view o = c.args[i];
    if (Is(o, "NX")) {
      nx = true;
    } else if (Is(o, "XX")) {
      xx = true;
    } else if (Is(o, "GT")) {
      gt = true;
    } else if (Is(o, "LT")) {
      lt = true;
    } else {
      return absl::StrCat("ERR Unsupported option ", redis::Shown(o));
    }
  }
  if (nx && (xx || gt || lt)) {
    return "ERR NX and XX, GT or LT options at the same time are not compatible";
  }
  if (gt && lt) return "ERR GT and LT options at the same time are not compatible";
  *out = nx   ? Condition::IF_NONE
         : xx ? Condition::IF_SET
         : gt ? Condition::IF_LATER
         : lt ? Condition::IF_EARLIER
              : Condition::ALWAYS;
  // XX with GT is GT (no expiry never passes GT); XX with LT is LT on a
  // filter that has an expiry (the caller checks that).
  return "";
}

}  // namespace

void RedisCommands::SetExpiry(Session* s, absl::Span<const Command> run, size_t command,
                              resp::Completion done, Clock::time_point start) {
  const Command& c = run[0];
  std::string out;
  Writer w(&out, s->protocol);
  auto answer = [&] {
    Record(command, out, start, 0);
    done.Reply(std::move(out));
  };
  const bool persist = command == redis::kPersist;
  int64_t at = 0;
  Condition::Condition condition = Condition::ALWAYS;
  bool xx_with_lt = false;
  if (!persist) {
    int64_t n = 0;
    if (!ParseInt(c.args[2], &n)) {
      w.Error("ERR value is not an integer or out of range");
      return answer();
    }
    if (std::string e = ParseCondition(c, &condition); !e.empty()) {
      w.Error(e);
      return answer();
    }
    for (size_t i = 3; i < c.args.size(); ++i) xx_with_lt = xx_with_lt || Is(c.args[i], "XX");
    xx_with_lt = xx_with_lt && condition == Condition::IF_EARLIER;
    // As Redis: relative times from now, seconds times 1000; overflow (and,
    // here, a time past the year 9999) is "invalid expire time".
    const bool seconds = command == redis::kExpire || command == redis::kExpireAt;
    const bool relative = command == redis::kExpire || command == redis::kPExpire;
    bool ok = true;
    if (seconds) ok = !__builtin_mul_overflow(n, int64_t{1000}, &n);
    if (ok && relative) ok = !__builtin_add_overflow(n, registry_->NowMs(), &n);
    if (!ok || n > kMaxExpireAtMs) {
      w.Error(
          absl::StrFormat("ERR invalid expire time in '%s' command", kRedisCommandNames[command]));
      return answer();
    }
    // Not in the future: the filter goes now (the service drops it). A
    // time before 1970 is sent as 1 ms after it (the service takes none
    // earlier; any time in the past drops the filter).
    at = std::max<int64_t>(n, 1);
  }
  Caller caller;
  if (!Authorize(s, w, command, Access::kAdmin, c.args[1], &caller)) return answer();
  if (!FilterRegistry::ValidateName(A(c.args[1])).ok()) {
    w.Integer(0);  // No filter has such a name.
    return answer();
  }
  absl::StatusOr<std::shared_ptr<CuckooFilter>> f = registry_->GetLive(A(c.args[1]));
  if (!f.ok()) {
    w.Integer(0);
    return answer();
  }
  if (xx_with_lt && (*f)->expire_at() == 0) {
    // XX LT: only a filter that has an expiry (LT alone sets one on a
    // filter without).
    w.Integer(0);
    return answer();
  }
  auto call = std::make_shared<Call>();
  call->expiry.set_name(std::string(c.args[1]));
  call->expiry.set_condition(condition);
  if (!persist) {
    call->expiry.mutable_expire_at()->set_seconds(at / 1000);
    call->expiry.mutable_expire_at()->set_nanos(static_cast<int32_t>(at % 1000) * 1'000'000);
  }
  call->protocol = s->protocol;
  call->command = command;
  call->start = start;
  call->done = std::move(done);
  AddCredentials(*s, &call->ctx);
  calls_.fetch_add(1, std::memory_order_relaxed);
  in_process_.Start(
      [&](grpc::CompletionQueue* q) {
        return stub_->PrepareAsyncSetFilterExpiry(&call->ctx, call->expiry, q);
      },
      &call->expiry_set,
      [this, call](grpc::Status st) {
        const CallDone call_done{&calls_};
        std::string reply;
        Writer rw(&reply, call->protocol);
        if (st.ok()) {
          rw.Integer(call->expiry_set.changed() ? 1 : 0);
        } else if (st.error_code() == grpc::StatusCode::NOT_FOUND) {
          rw.Integer(0);  // Dropped (or expired) meanwhile: as a missing key.
        } else {
          rw.Error(StatusError(st));
        }
        Record(call->command, reply, call->start, 0);
        call->done.Reply(std::move(reply));
      });
}

void RedisCommands::ExpiryInfo(Session* s, const Command& c, Writer& w) {
  Caller caller;
  if (!Authorize(s, w, RedisCommandIndex(c.args[0]), Access::kRead, c.args[1], &caller)) return;
  const size_t command = RedisCommandIndex(c.args[0]);
  absl::StatusOr<std::shared_ptr<CuckooFilter>> f =
      FilterRegistry::ValidateName(A(c.args[1])).ok()
          ? registry_->GetLive(A(c.args[1]))
          : absl::StatusOr<std::shared_ptr<CuckooFilter>>(absl::NotFoundError(""));
  if (!f.ok()) return w.Integer(-2);
  const int64_t at = (*f)->expire_at();
  if (at == 0) return w.Integer(-1);
  switch (command) {
    case redis::kTtl:
    case redis::kPTtl: {
      const int64_t left = std::max<int64_t>(at - registry_->NowMs(), 0);
      // As Redis: TTL rounds to the nearest second.
      return w.Integer(command == redis::kTtl ? (left + 500) / 1000 : left);
    }
    case redis::kExpireTime:
      return w.Integer(at / 1000);
    default:
      return w.Integer(at);
  }
}

}  // namespace cuckoo::server
