// CF.ADD, CF.ADDNX, CF.INSERT, CF.INSERTNX, CF.DEL and CF.RESERVE: writes,
// through this server's own FilterService (server/resp/commands/resp_commands.h).
#include <algorithm>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/scratch.h"
#include "core/filter_options.h"
#include "server/resp/commands/commands_internal.h"
#include "server/resp/commands/resp_commands.h"
#include "server/service/status.h"

namespace cuckoo::server {
namespace {

using Clock = std::chrono::steady_clock;
using redis::A;
using redis::Is;
using redis::ItemError;
using redis::kCfAdd;
using redis::kCfAddNx;
using redis::kCfDel;
using redis::kCfInsert;
using redis::kCfInsertNx;
using redis::kCfReserve;
using redis::NameError;
using redis::ParseInt;
using redis::Shown;
using redis::StatusError;
using resp::Command;
using resp::Session;
using resp::Writer;

// RedisBloom's error texts (RedisBloom 2.4), bare as it sends them: its
// clients show them as they are.
constexpr char kFilterIsFull[] = "Filter is full";
constexpr char kMaxExpansions[] = "Maximum expansions reached";
constexpr char kDelNotFound[] = "Not found";
constexpr char kBadCapacity[] = "Bad capacity";
constexpr char kCapacityMinimum[] = "Capacity must be at least (BucketSize * 2)";
constexpr char kUnknownArgument[] = "Unknown argument received";
// RedisBloom's default bucket size, for its capacity minimum when BUCKETSIZE
// is not given (CF.INSERT has none): what RedisBloom accepts, cuckood does.
constexpr int64_t kRedisBloomBucketSize = 2;

// CF.INSERT's and CF.INSERTNX's options, up to ITEMS: the error reply's
// text, or "" with *items_at the index of the first item. RedisBloom's
// texts; a missing value or item list is a wrong number of arguments.
std::string InsertOptions(const Command& c, size_t command, uint64_t* capacity, bool* create,
                          size_t* items_at) {
  size_t i = 2;
  while (i < c.args.size()) {
    if (Is(c.args[i], "CAPACITY")) {
      if (i + 1 >= c.args.size()) break;
      int64_t v;
      if (!ParseInt(c.args[i + 1], &v)) return kBadCapacity;
      if (v < 2 * kRedisBloomBucketSize) return kCapacityMinimum;
      // Too large: the creation's check (CreationError) names the largest.
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
      return kUnknownArgument;
    }
  }
  return RedisCommands::WrongArity(kRedisCommandNames[command]);
}

// The service's refusal of an insert into a filter that holds its
// max_capacity (FilterServiceImpl::CheckGrowthBudget): RedisBloom's limit.
bool AtCeiling(const grpc::Status& st) {
  return st.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED &&
         absl::StrContains(st.error_message(), "max_capacity, a hard ceiling");
}

// The reply to a write the service refused (or whose log failed).
std::string WriteError(size_t command, const grpc::Status& st) {
  if (st.error_code() == grpc::StatusCode::NOT_FOUND && command == kCfDel) return kDelNotFound;
  if (command != kCfDel && AtCeiling(st)) return kMaxExpansions;
  return StatusError(st);
}

// The FilterOptions of a CreateFilterRequest made here (no fingerprint
// bits, shards or seed: the port never sets them).
FilterOptions OptionsOf(const v1::CreateFilterRequest& r) {
  return {.capacity = r.capacity(),
          .false_positive_rate = r.false_positive_rate(),
          .bucket_size = r.bucket_size(),
          .max_kicks = r.max_kicks(),
          .seed = uint64_t{0},
          .growth_factor = r.growth_factor(),
          .max_capacity = r.max_capacity(),
          .grow_on_repeats = r.grow_on_repeats()};
}
}  // namespace

void RedisCommands::SetGrowth(v1::CreateFilterRequest* req, uint32_t growth_factor) {
  req->set_growth_factor(growth_factor);
  req->set_grow_on_repeats(growth_factor != 0);
  req->clear_max_capacity();
  const uint64_t c = req->capacity();
  if (growth_factor == 0 || c >= kMaxCapacity) return;
  uint64_t ceiling = c <= kMaxCapacity / kRedisMaxGrowth ? c * kRedisMaxGrowth : kMaxCapacity;
  // No further than the schedule goes without a ceiling (the hash's bits
  // run out first for a large filter at a low rate: CF.RESERVE of 10^6 at
  // 1e-7 reaches about 250x): a max_capacity out of reach would refuse the
  // filter, which RedisBloom makes.
  if (const absl::StatusOr<FilterShape> unbounded = ComputeShape(OptionsOf(*req)); unbounded.ok()) {
    uint64_t reachable = 0;
    for (const GenerationShape& g : GenerationSchedule(*unbounded)) reachable += g.planned_items;
    if (reachable <= c) return;  // It cannot grow: as without a ceiling.
    ceiling = std::min(ceiling, reachable);
  }
  req->set_max_capacity(ceiling);
}

std::string RedisCommands::CreationError(const v1::CreateFilterRequest& req) {
  const absl::StatusOr<FilterShape> shape = ComputeShape(OptionsOf(req));
  if (shape.ok()) return std::string();
  // The capacity is what a client can change: the largest that would be
  // accepted with the same settings (acceptance falls with the capacity:
  // more shards and longer fingerprints leave fewer hash bits).
  auto accepted = [&](uint64_t capacity) {
    v1::CreateFilterRequest r = req;
    r.set_capacity(capacity);
    SetGrowth(&r, req.growth_factor());
    return ComputeShape(OptionsOf(r)).ok();
  };
  if (!accepted(2 * kRedisBloomBucketSize)) return StatusError(ToGrpcStatus(shape.status()));
  uint64_t lo = 2 * kRedisBloomBucketSize;  // Accepted.
  uint64_t hi = req.capacity();             // Refused.
  while (hi - lo > 1) {
    const uint64_t mid = lo + (hi - lo) / 2;
    (accepted(mid) ? lo : hi) = mid;
  }
  return absl::StrFormat(
      "ERR capacity %u is more than a filter made over the Redis port can have with these "
      "settings (%s); the largest accepted is %u: ask for a capacity of at most %u",
      req.capacity(),
      req.growth_factor() == 0 ? std::string("EXPANSION 0")
                               : absl::StrFormat("growing %ux, up to %ux its capacity",
                                                 req.growth_factor(), kRedisMaxGrowth),
      lo, lo);
}

bool RedisCommands::GrowsForRepeats(std::string_view key) const {
  absl::StatusOr<std::shared_ptr<CuckooFilter>> f = registry_->GetLive(A(key));
  return f.ok() && (*f)->shape().grow_on_repeats;
}

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
  // A CF.ADD that answers FULL gets RedisBloom's "Maximum expansions
  // reached" from a filter that grows as RedisBloom's do (it can grow no
  // further: its schedule, max_capacity or memory), else "Filter is full";
  // `growing()` says which, asked only then.
  template <typename Growing, typename Code>
  void Results(int protocol, size_t command, absl::Span<const size_t> sizes, Growing growing,
               Code code) {
    Writer w(&bytes, protocol);
    size_t key = 0;
    for (const size_t n : sizes) {
      switch (command) {
        case kCfAdd:
        case kCfAddNx:
          for (size_t i = 0; i < n; ++i, ++key) {
            const int c = code(key);
            // RESP3: booleans, as RedisBloom's.
            if (c == static_cast<int>(InsertResult::kInserted)) {
              w.Boolean(true);
            } else if (c == static_cast<int>(InsertResult::kAlreadyPresent)) {
              w.Boolean(false);
            } else {
              w.Error(growing() ? kMaxExpansions : kFilterIsFull);
            }
          }
          break;
        case kCfInsert:
        case kCfInsertNx:
          w.Array(n);
          {
            auto value = [&](size_t i) {
              const int c = code(key + i);
              return c == static_cast<int>(InsertResult::kInserted)         ? 1
                     : c == static_cast<int>(InsertResult::kAlreadyPresent) ? 0
                                                                            : -1;
            };
            // RESP3: CF.INSERT answers true or -1 per item, CF.INSERTNX
            // integers (RedisBloom's).
            if (command == kCfInsert) {
              w.SmallBooleans(n, value);
            } else {
              w.SmallIntegers(n, value);
            }
          }
          key += n;
          break;
        case kCfDel:
          for (size_t i = 0; i < n; ++i, ++key) {
            w.Boolean(code(key) == static_cast<int>(DeleteResult::kDeleted));
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
  const bool exists = registry_->GetLive(A(key)).ok();
  if (!exists && command == kCfDel) return fail(kDelNotFound);
  if (!exists && !create) return fail("ERR not found");
  if (exists && service_ != nullptr && service_->local_writes()) {
    // In an EXEC: inside its log transaction (begun here if none is
    // open). A log that cannot take one refuses the write, as it would.
    if (s->in_exec && s->log_transaction == 0) {
      absl::StatusOr<uint64_t> begun = service_->BeginLogTransaction();
      if (!begun.ok()) return fail(WriteError(command, ToGrpcStatus(begun.status())));
      s->log_transaction = *begun;
    }
    return WriteHere(s, caller, command, key, items, std::move(sizes), std::move(done), start);
  }
  // A creation (or a cluster's write) waits for its log: not in a
  // transaction.
  ExecPaused(s);
  WriteThroughService(s, command, key, items, std::move(sizes), exists, capacity, std::move(done),
                      start);
}

void RedisCommands::WriteThroughService(Session* s, size_t command, std::string_view key,
                                        absl::Span<const std::string_view> items,
                                        std::vector<size_t> sizes, bool exists, uint64_t capacity,
                                        resp::Completion done, Clock::time_point start) {
  auto call = std::make_shared<Call>();
  call->protocol = s->protocol;
  call->command = command;
  call->key = std::string(key);
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
      r.Results(
          call->protocol, call->command, call->sizes, [&] { return GrowsForRepeats(call->key); },
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
  SetGrowth(&call->create, options_.default_expansion);
  call->create.set_if_not_exists(true);
  if (std::string e = CreationError(call->create); !e.empty()) {
    RunReplies r;
    r.Errors(call->protocol, call->sizes.size(), e);
    Answer(call->command, call->start, &r, call->done);
    return;
  }
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
        replies.Results(
            s->protocol, command, sizes, [] { return false; },
            [&](size_t i) { return static_cast<int>(results[i]); });
      }
      return a;
    }
    ScratchArray<InsertResult> results(items.size());
    absl::StatusOr<FilterServiceImpl::AppliedWrite> a = service_->InsertNow(write, results.span());
    if (a.ok()) {
      replies.Results(
          s->protocol, command, sizes, [&] { return GrowsForRepeats(filter); },
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

void RedisCommands::Reserve(Session* s, absl::Span<const Command> run, size_t,
                            resp::Completion done, Clock::time_point start) {
  const Command& c = run[0];
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
  // RedisBloom's checks and texts: an option without a value is a wrong
  // number of arguments; then the capacity, each option's value, and the
  // capacity against the bucket size.
  if (c.args.size() % 2 == 0) return fail(WrongArity(c.args[0]));
  auto call = std::make_shared<Call>();
  v1::CreateFilterRequest& req = call->create;
  req.set_name(std::string(key));
  int64_t capacity;
  if (!ParseInt(c.args[2], &capacity)) return fail(kBadCapacity);
  req.set_false_positive_rate(options_.error_rate);
  uint32_t growth_factor = options_.default_expansion;
  int64_t bucket_size = kRedisBloomBucketSize;
  for (size_t i = 3; i + 1 < c.args.size(); i += 2) {
    const std::string_view option = c.args[i];
    int64_t v;
    const bool parsed = ParseInt(c.args[i + 1], &v);
    if (Is(option, "BUCKETSIZE")) {
      if (!parsed) return fail("Couldn't parse BUCKETSIZE");
      if (v < 1 || v > 255) {
        return fail("BUCKETSIZE: value must be an integer between 1 and 255, inclusive.");
      }
      // cuckood's bucket sizes are 2, 4 and 8: a size between them takes the
      // next larger (RedisBloom takes 1 to 255).
      if (v > 8) {
        return fail(absl::StrFormat(
            "ERR Bad bucket size %d: cuckood supports 1 to 8 (1 and 2 give 2, 3 and 4 give 4, 5 "
            "to 8 give 8)",
            v));
      }
      bucket_size = v;
      req.set_bucket_size(v <= 2 ? 2 : v <= 4 ? 4 : 8);
    } else if (Is(option, "MAXITERATIONS")) {
      if (!parsed) return fail("Couldn't parse MAXITERATIONS");
      if (v < 1 || v > 65535) {
        return fail("MAXITERATIONS: value must be an integer between 1 and 65535, inclusive.");
      }
      req.set_max_kicks(static_cast<uint32_t>(std::min<int64_t>(v, 10'000)));
    } else if (Is(option, "EXPANSION")) {
      if (!parsed) return fail("Couldn't parse EXPANSION");
      if (v < 0 || v > 32768) {
        return fail("EXPANSION: value must be an integer between 0 and 32768, inclusive.");
      }
      // 0: a fixed filter; 1 and 2: doubling (cuckood's smallest growth
      // factor); up to 8; more: 8.
      growth_factor = v == 0 ? 0 : static_cast<uint32_t>(std::clamp<int64_t>(v, 2, 8));
    } else {
      // RedisBloom ignores what it does not know; a typo here would make
      // another filter than asked for.
      return fail(absl::StrFormat(
          "ERR unknown argument '%s' (expected BUCKETSIZE, MAXITERATIONS or EXPANSION)",
          Shown(option)));
    }
  }
  if (capacity < 2 * bucket_size) return fail(kCapacityMinimum);
  req.set_capacity(static_cast<uint64_t>(capacity));
  SetGrowth(&req, growth_factor);
  if (std::string e = CreationError(req); !e.empty()) return fail(e);
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

}  // namespace cuckoo::server
