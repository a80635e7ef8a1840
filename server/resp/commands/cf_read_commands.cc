// CF.EXISTS, CF.MEXISTS, CF.COUNT and CF.INFO: reads, on the connection's
// thread, straight on the filters (server/resp/commands/resp_commands.h).
#include <algorithm>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/scratch.h"
#include "server/resp/commands/commands_internal.h"
#include "server/resp/commands/resp_commands.h"

namespace cuckoo::server {
namespace {

using Clock = std::chrono::steady_clock;
using redis::ItemError;
using resp::Command;
using resp::Session;
using resp::Writer;

}  // namespace

void RedisCommands::Exists(Session* s, absl::Span<const Command> run, size_t command,
                           resp::Completion done, Clock::time_point start) {
  std::string out;
  Writer w(&out, s->protocol);
  const std::string_view key = run[0].args[1];
  // A refusal is the same for every command of the run (their items are
  // all valid, or the run is one command): one reply each.
  std::string error;
  std::shared_ptr<CuckooFilter> f;
  {
    Writer ew(&error, s->protocol);
    if (!ReadFilter(s, ew, command, key, &f)) {
    } else if (std::string e = ItemError(run[0].args[2], options_.max_key_bytes); !e.empty()) {
      ew.Error(e);
    }
  }
  if (!error.empty()) {
    for (size_t i = 0; i < run.size(); ++i) w.Raw(error);
  } else if (f == nullptr) {
    // RedisBloom: a missing filter holds nothing.
    w.SmallBooleans(run.size(), [](size_t) { return 0; });
  } else if (run.size() == 1) {
    w.Boolean(f->MayContain(run[0].args[2]));
  } else {
    ScratchArray<std::string_view> keys(run.size());
    ScratchArray<bool> present(run.size());
    for (size_t i = 0; i < run.size(); ++i) keys[i] = run[i].args[2];
    f->LookupBatch(keys.span(), present.span());
    w.SmallBooleans(run.size(), [&](size_t i) { return present[i] ? 1 : 0; });
  }
  // Counted per command: the replies of a run are all alike in kind.
  for (size_t i = 0; i < run.size(); ++i) Record(command, out, start, 1);
  done.Reply(std::move(out));
}

void RedisCommands::MExists(Session* s, const Command& c, Writer& w) {
  std::shared_ptr<CuckooFilter> f;
  if (!ReadFilter(s, w, redis::kCfMExists, c.args[1], &f)) return;
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
  w.Array(n);
  if (f == nullptr) {
    w.SmallBooleans(n, [](size_t) { return 0; });
    return;
  }
  ScratchArray<bool> present(n);
  f->LookupBatch(absl::MakeConstSpan(c.args.data() + 2, n), present.span());
  w.SmallBooleans(n, [&](size_t i) { return present[i] ? 1 : 0; });
}

void RedisCommands::Count(Session* s, const Command& c, Writer& w) {
  std::shared_ptr<CuckooFilter> f;
  if (!ReadFilter(s, w, redis::kCfCount, c.args[1], &f)) return;
  if (std::string e = ItemError(c.args[2], options_.max_key_bytes); !e.empty()) {
    w.Error(e);
    return;
  }
  w.Integer(f != nullptr ? f->ApproximateCount(c.args[2]) : 0);
}

void RedisCommands::Info(Session* s, const Command& c, Writer& w) {
  std::shared_ptr<CuckooFilter> f;
  if (!ReadFilter(s, w, redis::kCfInfo, c.args[1], &f)) return;
  if (f == nullptr) {
    w.Error("ERR not found");
    return;
  }
  const FilterShape& shape = f->shape();
  const FilterStats st = f->Stats();
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
  // A fixed filter takes keys until its slots are full (its capacity
  // rounded up to whole buckets in every shard, as RedisBloom rounds up to a
  // power of two): that is its real capacity.
  integer("Max capacity", shape.growing() ? st.reachable_capacity : st.slots);
  integer("Max filters", st.max_generations);
  integer("Fingerprint bits", shape.fingerprint_bits);
  integer("Shards", shape.shards);
  integer("Semi-sorted", shape.semi_sorted() ? 1 : 0);
  real("Load factor", st.load_factor);
  real("Error rate", st.false_positive_target);
  real("Error rate bound", st.false_positive_bound);
}

}  // namespace cuckoo::server
