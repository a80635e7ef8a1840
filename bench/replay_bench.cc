// replay_bench: how fast a write-ahead log replays (cuckood's start-up after
// a crash) against how fast the same writes ran live, in memory, no disk.
//
// A filter is filled to --fill of its capacity, then copied (the "snapshot").
// Churn runs on the original through the logged write path
// (CuckooFilter::InsertHashed/DeleteHashed with a WriteLog that keeps every
// shard write in memory, as cuckood's log does): --batch-key batches that
// insert fresh keys and, once --window keys are in, delete the oldest batch,
// so the load stays near --fill. Then each replay mode applies the recorded
// log to its own copy and the result is compared with the original bit for
// bit (table bytes and counters of every shard):
//   one-by-one      CuckooFilter::ApplyShardWrite per record, one thread (the
//                   replay before WalApplier)
//   applier/N       server::WalApplier with N workers (what cuckood runs,
//                   N = max(2, hardware threads))
// Rates are key operations per second of wall time.
//
//   replay_bench [--capacity=N] [--fill=0.95] [--ops=N] [--batch=1000]
//                [--window=N] [--workers=1,2]
//   (defaults: 200M capacity, ops = capacity / 5, window = capacity / 50)
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"
#include "bench/bench_util.h"
#include "core/cuckoo_filter.h"
#include "core/filter_options.h"
#include "core/internal/filter_loading.h"
#include "server/wal/wal_apply.h"
#include "server/wal/wal_format.h"

namespace cuckoo::bench {
namespace {

constexpr uint64_t kSeed = 0xC0FFEE5EED;

[[noreturn]] void Fail(const std::string& msg) {
  absl::FPrintF(stderr, "replay_bench: %s\n", msg);
  std::exit(1);
}

struct Options {
  uint64_t capacity = 200'000'000;
  double fill = 0.95;
  uint64_t ops = 0;
  uint64_t batch = 1000;
  uint64_t window = 0;
  std::vector<size_t> workers = {1, 2};
};

// The recorded log: records with their hashes in one array.
struct Log {
  std::vector<server::WalRecord> records;  // hashes empty: see offset/count.
  std::vector<size_t> offset;
  std::vector<uint64_t> hashes;
  uint64_t Keys() const { return hashes.size(); }
};

std::unique_ptr<CuckooFilter> NewFilter(const Options& o) {
  absl::StatusOr<std::unique_ptr<CuckooFilter>> f =
      CuckooFilter::Create({.capacity = o.capacity, .seed = kSeed});
  if (!f.ok()) Fail(f.status().ToString());
  return *std::move(f);
}

// A copy of `from` (tables and counters), as a snapshot load makes it.
std::unique_ptr<CuckooFilter> Copy(const Options& o, const CuckooFilter& from) {
  std::unique_ptr<CuckooFilter> to = NewFilter(o);
  for (uint32_t i = 0; i < from.shape().shards; ++i) {
    absl::Span<uint8_t> dst = internal::FilterLoading::MutableShardBytes(*to, i);
    const CuckooFilter::ShardState s = from.CopyShard(i, dst.data());
    internal::FilterLoading::RestoreShard(*to, i, s.items, s.rng_state, s.position);
  }
  return to;
}

// Whether a and b hold the same bytes and counters in every shard.
bool Identical(const CuckooFilter& a, const CuckooFilter& b) {
  const size_t bytes = a.shape().table_bytes_per_shard();
  std::vector<uint8_t> x(bytes), y(bytes);
  for (uint32_t i = 0; i < a.shape().shards; ++i) {
    const CuckooFilter::ShardState sa = a.CopyShard(i, x.data());
    const CuckooFilter::ShardState sb = b.CopyShard(i, y.data());
    if (x != y || sa.items != sb.items || sa.rng_state != sb.rng_state ||
        sa.position != sb.position) {
      return false;
    }
  }
  return true;
}

std::optional<Options> ParseArgs(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    absl::string_view a = argv[i];
    auto value = [&](absl::string_view flag) -> std::optional<absl::string_view> {
      if (!absl::ConsumePrefix(&a, flag)) return std::nullopt;
      return a;
    };
    bool ok = true;
    if (auto v = value("--capacity=")) {
      ok = absl::SimpleAtoi(*v, &o.capacity) && o.capacity >= 100'000;
    } else if (auto v = value("--fill=")) {
      ok = absl::SimpleAtod(*v, &o.fill) && o.fill > 0 && o.fill <= 1;
    } else if (auto v = value("--ops=")) {
      ok = absl::SimpleAtoi(*v, &o.ops) && o.ops > 0;
    } else if (auto v = value("--batch=")) {
      ok = absl::SimpleAtoi(*v, &o.batch) && o.batch > 0;
    } else if (auto v = value("--window=")) {
      ok = absl::SimpleAtoi(*v, &o.window) && o.window > 0;
    } else if (auto v = value("--workers=")) {
      ok = ParseCountList(*v, &o.workers);
    } else {
      ok = false;
    }
    if (!ok) {
      absl::FPrintF(stderr,
                    "replay_bench: bad argument %s\nusage: replay_bench [--capacity=N] "
                    "[--fill=F] [--ops=N] [--batch=N] [--window=N] [--workers=1,2]\n",
                    argv[i]);
      return std::nullopt;
    }
  }
  if (o.ops == 0) o.ops = o.capacity / 5;
  if (o.window == 0) o.window = std::max<uint64_t>(o.batch, o.capacity / 50);
  return o;
}

int Main(int argc, char** argv) {
  const std::optional<Options> parsed = ParseArgs(argc, argv);
  if (!parsed) return 2;
  const Options& o = *parsed;
  std::unique_ptr<CuckooFilter> live = NewFilter(o);
  const uint64_t filled = static_cast<uint64_t>(o.capacity * o.fill);
  absl::PrintF("replay_bench: capacity %u (%u shards, %.2f GiB), filled with %u keys\n", o.capacity,
               live->shape().shards, live->memory_bytes() / double(uint64_t{1} << 30), filled);
  std::vector<uint64_t> h;
  std::vector<InsertResult> ins;
  std::vector<DeleteResult> del;
  uint64_t next_key = 0;
  const double f0 = Now();
  while (next_key < filled) {
    const uint64_t n = std::min(o.batch, filled - next_key);
    h.resize(n);
    ins.resize(n);
    for (uint64_t k = 0; k < n; ++k) h[k] = SplitMix64(next_key + k);
    next_key += n;
    live->InsertHashed(h, false, absl::MakeSpan(ins));
  }
  absl::PrintF("fill: %.1f s, %.2f M keys/s; load factor %.3f\n", Now() - f0,
               filled / (Now() - f0) / 1e6, live->Stats().load_factor);

  std::vector<std::unique_ptr<CuckooFilter>> copies;
  copies.push_back(Copy(o, *live));  // one-by-one
  for (size_t i = 0; i < o.workers.size(); ++i) copies.push_back(Copy(o, *live));

  // Churn, logged.
  Log log;
  log.records.reserve(o.ops / o.batch * live->shape().shards);
  log.hashes.reserve(o.ops + o.batch);
  uint64_t lsn = 0;
  auto record = [&](const ShardWrite& w) -> uint64_t {
    server::WalRecord r;
    r.type = w.kind == ShardWrite::kInsert ? server::WalRecordType::kInsert
                                           : server::WalRecordType::kDelete;
    r.lsn = ++lsn;
    r.write = w;
    r.write.hashes = {};
    log.offset.push_back(log.hashes.size());
    log.hashes.insert(log.hashes.end(), w.hashes.begin(), w.hashes.end());
    log.records.push_back(std::move(r));
    return lsn;
  };
  uint64_t oldest = filled;  // First churn key not yet deleted.
  uint64_t full = 0, ops = 0;
  const double c0 = Now();
  while (ops < o.ops) {
    const bool insert = next_key - oldest < o.window;
    const uint64_t first = insert ? next_key : oldest;
    h.resize(o.batch);
    for (uint64_t k = 0; k < o.batch; ++k) h[k] = SplitMix64(first + k);
    if (insert) {
      ins.resize(o.batch);
      live->InsertHashed(
          h, false, absl::MakeSpan(ins), [] { return false; }, record);
      for (InsertResult r : ins) full += r == InsertResult::kFull;
      next_key += o.batch;
    } else {
      del.resize(o.batch);
      live->DeleteHashed(
          h, absl::MakeSpan(del), [] { return false; }, record);
      oldest += o.batch;
    }
    ops += o.batch;
  }
  const double live_s = Now() - c0;
  absl::PrintF(
      "log: %u records, %u keys (%.1f keys per record), %u inserts FULL; load factor now %.3f\n",
      log.records.size(), log.Keys(), double(log.Keys()) / log.records.size(), full,
      live->Stats().load_factor);
  absl::PrintF("%-14s %8.2f s %8.2f M keys/s\n", "live (1 thread)", live_s,
               log.Keys() / live_s / 1e6);

  auto with_hashes = [&](size_t i) {
    server::WalRecord r = log.records[i];
    const size_t end = i + 1 < log.records.size() ? log.offset[i + 1] : log.hashes.size();
    r.hashes.assign(log.hashes.begin() + log.offset[i], log.hashes.begin() + end);
    r.write.hashes = r.hashes;
    return r;
  };
  // Records with their hashes, made before the clocks start (the reader's
  // parsing is not what is measured).
  std::vector<server::WalRecord> records;
  records.reserve(log.records.size());
  for (size_t i = 0; i < log.records.size(); ++i) records.push_back(with_hashes(i));
  log = Log{};

  bool all_identical = true;
  {
    CuckooFilter& f = *copies[0];
    const double t0 = Now();
    for (const server::WalRecord& r : records) {
      absl::StatusOr<bool> applied = f.ApplyShardWrite(r.write, r.lsn);
      if (!applied.ok()) Fail(applied.status().ToString());
    }
    const double s = Now() - t0;
    const bool same = Identical(f, *live);
    all_identical &= same;
    absl::PrintF("%-14s %8.2f s %8.2f M keys/s  %s\n", "one-by-one", s, o.ops / s / 1e6,
                 same ? "identical" : "DIFFERENT");
  }
  for (size_t i = 0; i < o.workers.size(); ++i) {
    CuckooFilter& f = *copies[i + 1];
    std::shared_ptr<CuckooFilter> shared(&f, [](CuckooFilter*) {});
    const server::WalApplier::Target target{shared, "bench"};
    const double t0 = Now();
    uint64_t applied = 0;
    {
      server::WalApplier applier(o.workers[i]);
      for (const server::WalRecord& r : records) applier.Apply(&target, r);
      if (absl::Status s = applier.Drain(&applied); !s.ok()) Fail(s.ToString());
    }
    const double s = Now() - t0;
    const bool same = Identical(f, *live);
    all_identical &= same;
    absl::PrintF("%-14s %8.2f s %8.2f M keys/s  %s\n", absl::StrFormat("applier/%u", o.workers[i]),
                 s, o.ops / s / 1e6, same ? "identical" : "DIFFERENT");
  }
  return all_identical ? 0 : 1;
}

}  // namespace
}  // namespace cuckoo::bench

int main(int argc, char** argv) { return cuckoo::bench::Main(argc, argv); }
