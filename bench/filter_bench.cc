// filter_bench: the cuckoo filter paper's Table 3 (space, false-positive
// rate, construction speed) and Figure 5 (lookup throughput by share of
// positive queries) measured on this machine, for our CuckooFilter (b=4) with
// packed f=12 buckets ("cuckoo") and semi-sorted f=13 buckets
// ("cuckoo-ss13", the paper's "ss-CF": same memory, half the false-positive
// rate), and two baselines of the same memory and item count as the first
// (bench/bloom.h): a standard Bloom filter and a cache-line blocked Bloom
// filter.
//
//   filter_bench            cuckoo table >= 1 GiB, far beyond any cache
//   filter_bench --small    ~16 MiB tables: a CI smoke run of a few seconds
//   flags: --capacity=N --ops=N --threads=1,2 --json=PATH --only=cuckoo
//          --cuckoo=p12,ss13  cuckoo variants: p<f> packed, ss<f> semi-sorted
//
// Keys are 8 bytes, key i = splitmix64(i) in little-endian order, so no key
// array is stored however large the table: inserted keys are i < n, absent
// keys come from a range far above. The cuckoo filter is driven through its
// public API on std::string_view keys (it hashes them with XXH3); the Bloom
// filters hash the same keys with the same XXH3 call. Rates are million
// operations per second of wall time, summed over threads.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"
#include "absl/types/span.h"
#include "base/json.h"
#include "bench/bench_util.h"
#include "bench/bloom.h"
#include "core/cuckoo_filter.h"
#include "core/filter_options.h"
#include "core/internal/cuckoo_table.h"
#include "core/internal/page_buffer.h"
#include "core/internal/prefetch.h"

namespace cuckoo::bench {
namespace {

constexpr uint64_t kSeed = 0xC0FFEE5EED;  // Fixed: runs are repeatable.
constexpr uint32_t kBucketSize = 4;
constexpr size_t kBatch = 1024;
// Absent keys: indices no insert reaches, one range for the query streams and
// another for the false-positive probes.
constexpr uint64_t kQueryAbsentBase = uint64_t{1} << 62;
constexpr uint64_t kFprAbsentBase = kQueryAbsentBase + (uint64_t{1} << 61);
constexpr int kPercents[] = {0, 25, 50, 75, 100};
constexpr int kNumPercents = std::size(kPercents);
// The paper's filters stop at ~95% load; this is how far past the planned
// capacity the first-failure fill may go (planned load ~95%, failure ~96%).
constexpr double kFillBudget = 1.03;
constexpr uint64_t kMiB = uint64_t{1} << 20;

// ---------------------------------------------------------------- keys

// Key i: splitmix64(i) as 8 little-endian bytes written into `buf`.
std::string_view MakeKey(uint64_t i, char* buf) {
  uint64_t v = SplitMix64(i);
  for (int b = 0; b < 8; ++b) buf[b] = static_cast<char>(v >> (8 * b));
  return {buf, 8};
}

// Index of query q in a stream where `pct`% of queries ask for one of the n
// inserted keys (uniformly at random, so every query misses the cache) and
// the rest for distinct absent keys.
uint64_t QueryIndex(uint64_t q, int pct, uint64_t n) {
  uint64_t r = SplitMix64(q ^ 0xA5A5A5A5A5A5A5A5ull);
  bool positive = (r & 0xFFFF) * 100 < static_cast<uint64_t>(pct) << 16;
  return positive ? MulHi64(r, n) : kQueryAbsentBase + q;
}

// Up to kBatch keys with their indices, built in place.
struct KeyBatch {
  void Clear() { size = 0; }
  void Add(uint64_t i) {
    index[size] = i;
    views[size] = MakeKey(i, bytes[size]);
    ++size;
  }
  absl::Span<const std::string_view> keys() const { return {views, size}; }

  size_t size = 0;
  uint64_t index[kBatch];
  char bytes[kBatch][8];
  std::string_view views[kBatch];
};

// ---------------------------------------------------------------- subjects

// The cuckoo filter exactly as a server thread calls it.
class CuckooSubject {
 public:
  explicit CuckooSubject(CuckooFilter* f) : f_(f) {}
  InsertResult Insert(std::string_view key) { return f_->Insert(key); }
  bool MayContain(std::string_view key) const { return f_->MayContain(key); }
  void InsertBatch(absl::Span<const std::string_view> keys, absl::Span<InsertResult> out) {
    f_->InsertBatch(keys, /*if_absent=*/false, out);
  }
  void LookupBatch(absl::Span<const std::string_view> keys, absl::Span<bool> out) const {
    f_->LookupBatch(keys, out);
  }

 private:
  CuckooFilter* f_;
};

// A Bloom baseline behind the same calls, hashing keys as CuckooFilter does.
template <typename Bloom>
class BloomSubject {
 public:
  explicit BloomSubject(Bloom* b) : b_(b) {}
  InsertResult Insert(std::string_view key) {
    b_->Insert(HashKey(key, kSeed));
    return InsertResult::kInserted;
  }
  bool MayContain(std::string_view key) const { return b_->MayContain(HashKey(key, kSeed)); }
  void InsertBatch(absl::Span<const std::string_view> keys, absl::Span<InsertResult> out) {
    uint64_t h[kBatch];
    for (size_t i = 0; i < keys.size(); ++i) h[i] = HashKey(keys[i], kSeed);
    b_->InsertBatch({h, keys.size()});
    std::fill(out.begin(), out.end(), InsertResult::kInserted);
  }
  void LookupBatch(absl::Span<const std::string_view> keys, absl::Span<bool> out) const {
    uint64_t h[kBatch];
    for (size_t i = 0; i < keys.size(); ++i) h[i] = HashKey(keys[i], kSeed);
    b_->LookupBatch({h, keys.size()}, out);
  }

 private:
  Bloom* b_;
};

// ---------------------------------------------------------------- helpers

[[noreturn]] void Fail(std::string_view msg) {
  std::fflush(stdout);
  absl::FPrintF(stderr, "filter_bench: %s\n", msg);
  std::exit(1);
}

// What one thread of a measurement saw. Padded so threads never share a line.
struct alignas(64) Tally {
  uint64_t positives = 0;        // The sink: keeps lookups from being optimised away.
  uint64_t false_negatives = 0;  // Inserted keys reported absent: must stay 0.
  uint64_t failures = 0;         // Deletes of inserted keys that found nothing.
};

// Runs work(begin, end, tally) on `threads` disjoint slices of [first, last),
// all released together (the calling thread runs the first slice); returns
// the wall time from release to the last finish and the summed tallies.
template <typename Work>
std::pair<double, Tally> RunSlices(int threads, uint64_t first, uint64_t last, const Work& work) {
  const uint64_t ops = last - first;
  auto slice = [&](int t) { return first + ops * t / threads; };
  std::vector<Tally> tallies(threads);
  std::atomic<int> ready{0};
  std::atomic<bool> go{false};
  std::vector<std::thread> pool;
  for (int t = 1; t < threads; ++t) {
    pool.emplace_back([&, t] {
      ready.fetch_add(1);
      while (!go.load(std::memory_order_acquire)) {
      }
      work(slice(t), slice(t + 1), tallies[t]);
    });
  }
  while (ready.load() < threads - 1) {
  }
  double t0 = Now();
  go.store(true, std::memory_order_release);
  work(slice(0), slice(1), tallies[0]);
  for (std::thread& t : pool) t.join();
  double seconds = Now() - t0;
  Tally sum;
  for (const Tally& t : tallies) {
    sum.positives += t.positives;
    sum.false_negatives += t.false_negatives;
    sum.failures += t.failures;
  }
  return {seconds, sum};
}

// Runs [0, ops) as kRounds consecutive rounds of RunSlices and returns the
// median round's rate in M ops/s with the tallies of all rounds. The median
// because on a shared virtual machine other tenants slow memory down in
// bursts of a second or so; a burst then costs one round, not the cell.
constexpr int kRounds = 3;
template <typename Work>
std::pair<double, Tally> MedianRate(int threads, uint64_t ops, const Work& work) {
  std::vector<double> rates;
  Tally sum;
  for (int r = 0; r < kRounds; ++r) {
    uint64_t first = ops * r / kRounds, last = ops * (r + 1) / kRounds;
    auto [seconds, tally] = RunSlices(threads, first, last, work);
    rates.push_back(seconds > 0 ? (last - first) / seconds / 1e6 : 0);
    sum.positives += tally.positives;
    sum.false_negatives += tally.false_negatives;
    sum.failures += tally.failures;
  }
  std::sort(rates.begin(), rates.end());
  return {rates[kRounds / 2], sum};
}

std::string FirstLine(const char* path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return line;
}

// The 1, 5 and 15 minute load averages.
std::string LoadAverages() {
  std::string line = FirstLine("/proc/loadavg");
  size_t end = 0;
  for (int field = 0; field < 3 && end != std::string::npos; ++field) {
    end = line.find(' ', end + (field > 0));
  }
  return line.substr(0, end);
}

std::string CpuModel() {
  std::ifstream in("/proc/cpuinfo");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("model name", 0) == 0) return line.substr(line.find(':') + 2);
  }
  return "unknown";
}

// Memory of this process backed by transparent huge pages, from the kernel:
// the growth over a table's construction shows whether the table got them.
uint64_t AnonHugePagesMiB() {
  std::ifstream in("/proc/self/smaps_rollup");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("AnonHugePages:", 0) == 0) {
      return std::strtoull(line.c_str() + 14, nullptr, 10) / 1024;
    }
  }
  return 0;
}

// ---------------------------------------------------------------- memory ceiling

// What this machine's memory allows a lookup-shaped workload at the moment:
// per operation, two independent 8-byte reads at random places in a buffer as
// large as the filter (a cuckoo lookup reads two random buckets), and no other
// work. Pipelined(), like the batch pipelines, requests both lines kAhead
// operations in advance; Plain() is a simple loop that leaves the overlap to
// the CPU, like single-key lookups. No filter lookup beats these. On this
// shared virtual machine the ceiling swings by 2x within an hour, so every
// row of lookups is measured between two ceiling measurements and reported
// as a share of them.
class MemoryCeiling {
 public:
  explicit MemoryCeiling(uint64_t bytes) : span_(bytes - 8) {
    absl::StatusOr<PageBuffer> buf = PageBuffer::Allocate(bytes);
    if (!buf.ok()) Fail(buf.status().ToString());
    buf_ = *std::move(buf);
    std::memset(buf_.data(), 0x5A, bytes);  // Backed by (huge) pages, like a built table.
  }

  double Measure(bool pipelined, int threads, uint64_t ops) const {
    return pipelined ? Pipelined(threads, ops) : Plain(threads, ops);
  }

 private:
  std::pair<uint64_t, uint64_t> Place(uint64_t q) const {
    uint64_t h = SplitMix64(q);
    return {MulHi64(h, span_), MulHi64(h * 0x9E3779B97F4A7C15ull, span_)};
  }
  uint64_t Read(uint64_t at) const {
    uint64_t v;
    std::memcpy(&v, buf_.data() + at, 8);
    return v;
  }

  double Plain(int threads, uint64_t ops) const {
    return MedianRate(threads, ops,
                      [&](uint64_t begin, uint64_t end, Tally& t) {
                        for (uint64_t q = begin; q < end; ++q) {
                          auto [a, b] = Place(q);
                          t.positives += int{Read(a) == q} | int{Read(b) == q};
                        }
                      })
        .first;
  }

  double Pipelined(int threads, uint64_t ops) const {
    return MedianRate(threads, ops,
                      [&](uint64_t begin, uint64_t end, Tally& t) {
                        constexpr uint64_t kAhead = 32;
                        std::pair<uint64_t, uint64_t> ring[kAhead];
                        auto start = [&](uint64_t q) {
                          ring[q % kAhead] = Place(q);
                          PrefetchLine(buf_.data() + ring[q % kAhead].first);
                          PrefetchLine(buf_.data() + ring[q % kAhead].second);
                        };
                        for (uint64_t q = begin; q < std::min(end, begin + kAhead); ++q) start(q);
                        for (uint64_t q = begin; q < end; ++q) {
                          auto [a, b] = ring[q % kAhead];
                          if (q + kAhead < end) start(q + kAhead);
                          t.positives += int{Read(a) == q} | int{Read(b) == q};
                        }
                      })
        .first;
  }

  uint64_t span_;
  PageBuffer buf_;
};

// ---------------------------------------------------------------- measurements

struct BuildResult {
  uint64_t attempted = 0;  // Keys offered.
  uint64_t inserted = 0;
  bool full = false;  // Stopped at the first key that did not fit.
  double seconds = 0;
  double mops() const { return seconds > 0 ? inserted / seconds / 1e6 : 0; }
};

// Inserts keys [from, to) one at a time, stopping at the first that does not
// fit (so the inserted keys are exactly [from, from + inserted)).
template <typename Subject>
BuildResult BuildSingle(Subject& s, uint64_t from, uint64_t to) {
  BuildResult r;
  char buf[8];
  double t0 = Now();
  for (uint64_t i = from; i < to; ++i) {
    ++r.attempted;
    if (s.Insert(MakeKey(i, buf)) != InsertResult::kInserted) {
      r.full = true;
      break;
    }
    ++r.inserted;
  }
  r.seconds = Now() - t0;
  return r;
}

// Inserts keys [from, to) in batches of kBatch, stopping after the batch in
// which the first key does not fit.
template <typename Subject>
BuildResult BuildBatched(Subject& s, uint64_t from, uint64_t to) {
  BuildResult r;
  auto batch = std::make_unique<KeyBatch>();
  InsertResult out[kBatch];
  double t0 = Now();
  for (uint64_t i = from; i < to && !r.full; i += kBatch) {
    batch->Clear();
    for (uint64_t j = i; j < std::min(to, i + kBatch); ++j) batch->Add(j);
    s.InsertBatch(batch->keys(), {out, batch->size});
    r.attempted += batch->size;
    for (size_t j = 0; j < batch->size; ++j) {
      if (out[j] == InsertResult::kInserted) {
        ++r.inserted;
      } else {
        r.full = true;
      }
    }
  }
  r.seconds = Now() - t0;
  return r;
}

// Share of `probes` absent keys the filter reports present.
template <typename Subject>
double MeasureFpr(const Subject& s, uint64_t probes) {
  auto work = [&](uint64_t begin, uint64_t end, Tally& t) {
    auto batch = std::make_unique<KeyBatch>();
    bool out[kBatch];
    for (uint64_t q = begin; q < end; q += kBatch) {
      batch->Clear();
      for (uint64_t j = q; j < std::min(end, q + kBatch); ++j) batch->Add(kFprAbsentBase + j);
      s.LookupBatch(batch->keys(), {out, batch->size});
      t.positives += std::count(out, out + batch->size, true);
    }
  };
  return static_cast<double>(RunSlices(1, 0, probes, work).second.positives) / probes;
}

struct LookupCell {
  double mops = 0;
  uint64_t queries = 0;
  uint64_t positives = 0;
};

struct LookupRow {
  bool batched = false;
  int threads = 1;
  LookupCell cells[kNumPercents];
  // The memory ceiling of this mode and thread count (pipelined for batches,
  // plain for single keys), measured just before and just after the cells.
  double ceiling_before = 0;
  double ceiling_after = 0;
  double ceiling() const { return (ceiling_before + ceiling_after) / 2; }
};

// `ops` queries, `pct`% of them for inserted keys [0, n), split over threads.
// Aborts on a false negative: every filter here promises none.
template <typename Subject>
LookupCell MeasureLookups(const Subject& s, std::string_view name, bool batched, int threads,
                          int pct, uint64_t n, uint64_t ops) {
  auto [mops, tally] = MedianRate(threads, ops, [&](uint64_t begin, uint64_t end, Tally& t) {
    if (!batched) {
      char buf[8];
      for (uint64_t q = begin; q < end; ++q) {
        uint64_t i = QueryIndex(q, pct, n);
        bool hit = s.MayContain(MakeKey(i, buf));
        t.positives += hit;
        t.false_negatives += !hit && i < n;
      }
      return;
    }
    auto batch = std::make_unique<KeyBatch>();
    bool out[kBatch];
    for (uint64_t q = begin; q < end; q += kBatch) {
      batch->Clear();
      for (uint64_t j = q; j < std::min(end, q + kBatch); ++j) batch->Add(QueryIndex(j, pct, n));
      s.LookupBatch(batch->keys(), {out, batch->size});
      for (size_t j = 0; j < batch->size; ++j) {
        t.positives += out[j];
        t.false_negatives += !out[j] && batch->index[j] < n;
      }
    }
  });
  if (tally.false_negatives > 0 || (pct == 100 && tally.positives != ops)) {
    Fail(absl::StrFormat(
        "%s: %d of %d %s lookups of inserted keys returned false (%d%% positive, "
        "%d threads): false negatives",
        name, tally.false_negatives, ops, batched ? "batched" : "single-key", pct, threads));
  }
  return {mops, ops, tally.positives};
}

template <typename Subject>
std::vector<LookupRow> MeasureAllLookups(const Subject& s, std::string_view name, uint64_t n,
                                         uint64_t ops, const std::vector<int>& threads,
                                         const MemoryCeiling& ceiling) {
  // An untimed pass first: the first timed cell otherwise pays for the
  // previous phase's dirty lines and cold page-table entries.
  MeasureLookups(s, name, /*batched=*/false, 1, 50, n, std::min<uint64_t>(ops, 1'000'000));
  std::vector<LookupRow> rows;
  for (bool batched : {false, true}) {
    for (int t : threads) {
      LookupRow row{.batched = batched, .threads = t};
      row.ceiling_before = ceiling.Measure(batched, t, ops);
      for (int p = 0; p < kNumPercents; ++p) {
        row.cells[p] = MeasureLookups(s, name, batched, t, kPercents[p], n, ops);
      }
      row.ceiling_after = ceiling.Measure(batched, t, ops);
      rows.push_back(row);
    }
  }
  return rows;
}

struct DeleteCell {
  bool batched = false;
  int threads = 1;
  uint64_t keys = 0;
  double mops = 0;
};

// Deletes `keys` inserted keys per cell, single-key and batched at each thread
// count; cell c takes keys [c * keys, (c + 1) * keys), so no key is deleted
// twice. Aborts if any delete of an inserted key finds nothing.
std::vector<DeleteCell> MeasureDeletes(CuckooFilter& f, uint64_t keys,
                                       const std::vector<int>& threads) {
  std::vector<DeleteCell> cells;
  uint64_t base = 0;
  for (bool batched : {false, true}) {
    for (int th : threads) {
      auto [mops, tally] = MedianRate(th, keys, [&](uint64_t begin, uint64_t end, Tally& t) {
        if (!batched) {
          char buf[8];
          for (uint64_t i = base + begin; i < base + end; ++i) {
            t.failures += f.Delete(MakeKey(i, buf)) != DeleteResult::kDeleted;
          }
          return;
        }
        auto batch = std::make_unique<KeyBatch>();
        DeleteResult out[kBatch];
        for (uint64_t i = base + begin; i < base + end; i += kBatch) {
          batch->Clear();
          for (uint64_t j = i; j < std::min(base + end, i + kBatch); ++j) batch->Add(j);
          f.DeleteBatch(batch->keys(), {out, batch->size});
          for (size_t j = 0; j < batch->size; ++j) t.failures += out[j] != DeleteResult::kDeleted;
        }
      });
      if (tally.failures > 0) {
        Fail(absl::StrFormat("cuckoo: %d of %d deletes of inserted keys found nothing",
                             tally.failures, keys));
      }
      cells.push_back({batched, th, keys, mops});
      base += keys;
    }
  }
  return cells;
}

// ---------------------------------------------------------------- runs

// One cuckoo filter to measure: b = 4, f bits, packed or semi-sorted.
struct CuckooVariant {
  uint32_t fingerprint_bits = 12;
  bool semi_sorted = false;
  // "cuckoo" for the paper's packed f=12 filter, else cuckoo-p<f> / -ss<f>.
  std::string Name() const {
    if (!semi_sorted && fingerprint_bits == 12) return "cuckoo";
    return absl::StrCat("cuckoo-", semi_sorted ? "ss" : "p", fingerprint_bits);
  }
};

struct Options {
  bool small = false;
  // The first sets the capacity (1 GiB or 16 MiB of its table) and the
  // Bloom filters' memory and items.
  std::vector<CuckooVariant> cuckoos = {{12, false}, {13, true}};
  uint64_t capacity = 0;  // 0: 1 GiB of cuckoo table, or 16 MiB with --small.
  uint64_t ops = 0;       // Queries per lookup measurement; 0: by mode.
  std::vector<int> threads = {1, 2};
  std::string json_path;
  bool only_cuckoo = false;
};

// Cuckoo-only facts about construction.
struct CuckooFacts {
  FilterShape shape;
  double load = 0;  // After the single-key construction.
  // Fill to first failure: the batch-built table, filled on one key at a time.
  uint64_t fill_budget = 0;  // Keys it may try in all.
  bool fill_failed = false;
  uint64_t fill_items = 0;
  double fill_load = 0;
  double fill_bits_per_item = 0;
};

// Everything measured for one filter.
struct FilterReport {
  std::string name;
  uint64_t items = 0;
  uint64_t bytes = 0;
  int k = 0;  // Bloom hash functions; 0 for the cuckoo filter.
  double expected_fpr = 0;
  double fpr = 0;
  uint64_t fpr_probes = 0;
  uint64_t huge_page_mib = 0;  // Growth of AnonHugePages during construction.
  BuildResult build;
  BuildResult build_batched;
  std::vector<LookupRow> lookups;
  std::vector<DeleteCell> deletes;  // Cuckoo only.
  std::optional<CuckooFacts> cuckoo;
  double bits_per_item() const { return items ? 8.0 * bytes / items : 0; }
};

uint64_t CuckooTableBytes(const FilterShape& shape) {
  return shape.shards * CuckooTable::AllocationBytes(shape);
}

FilterOptions CuckooOptions(const CuckooVariant& v, uint64_t capacity) {
  return {.capacity = capacity,
          .fingerprint_bits = v.fingerprint_bits,
          .bucket_size = kBucketSize,
          .seed = kSeed,
          .semi_sort = v.semi_sorted};
}

// Smallest round capacity whose cuckoo table takes at least `bytes`.
uint64_t CapacityForBytes(const CuckooVariant& v, uint64_t bytes) {
  // A bit below: bits per item are about (bits per slot) / 0.95.
  const uint32_t slot_bits = v.fingerprint_bits - (v.semi_sorted ? 1 : 0);
  uint64_t capacity = bytes * 8 * 95 / 100 / (slot_bits + 1) / 100'000 * 100'000;
  while (true) {
    absl::StatusOr<FilterShape> shape = ComputeShape(CuckooOptions(v, capacity));
    if (!shape.ok()) Fail(shape.status().ToString());
    if (CuckooTableBytes(*shape) >= bytes) return capacity;
    capacity += 100'000;
  }
}

std::unique_ptr<CuckooFilter> NewCuckoo(const CuckooVariant& v, uint64_t capacity) {
  absl::StatusOr<std::unique_ptr<CuckooFilter>> f =
      CuckooFilter::Create(CuckooOptions(v, capacity));
  if (!f.ok()) Fail(f.status().ToString());
  return *std::move(f);
}

FilterReport RunCuckoo(const Options& o, const CuckooVariant& v, uint64_t capacity, uint64_t ops,
                       const MemoryCeiling& ceiling) {
  FilterReport r{.name = v.Name()};
  CuckooFacts& facts = r.cuckoo.emplace();
  const uint64_t huge_before = AnonHugePagesMiB();
  std::unique_ptr<CuckooFilter> filter = NewCuckoo(v, capacity);
  CuckooSubject s(filter.get());
  facts.shape = filter->shape();
  absl::PrintF("%s: %d shards x %d buckets, %s, %.1f MiB; single-key construction...\n", r.name,
               facts.shape.shards, facts.shape.buckets_per_shard,
               TableKindName(facts.shape.table_kind), filter->memory_bytes() / double{kMiB});
  std::fflush(stdout);
  r.build = BuildSingle(s, 0, capacity);
  r.huge_page_mib = AnonHugePagesMiB() - huge_before;
  FilterStats st = filter->Stats();
  r.items = st.items;
  r.bytes = st.memory_bytes;
  r.expected_fpr = st.expected_false_positive_rate;
  facts.load = st.load_factor;
  if (r.items != r.build.inserted) {
    Fail(absl::StrFormat("%s: Stats().items = %d after %d inserts", r.name, r.items,
                         r.build.inserted));
  }

  // Batched construction on a second table of the same shape, which then
  // takes single keys past its capacity until the first one does not fit.
  {
    absl::PrintF("%s: batched construction, then fill to first failure...\n", r.name);
    std::fflush(stdout);
    std::unique_ptr<CuckooFilter> b = NewCuckoo(v, capacity);
    CuckooSubject bs(b.get());
    r.build_batched = BuildBatched(bs, 0, capacity);
    facts.fill_budget = static_cast<uint64_t>(std::ceil(capacity * kFillBudget));
    facts.fill_failed = r.build_batched.full;
    if (!facts.fill_failed) {
      facts.fill_failed = BuildSingle(bs, capacity, facts.fill_budget).full;
    }
    FilterStats bst = b->Stats();
    facts.fill_items = bst.items;
    facts.fill_load = bst.load_factor;
    facts.fill_bits_per_item = bst.bits_per_item;
  }

  const uint64_t n = r.items;  // Keys [0, n) are in the filter.
  r.fpr_probes = std::max<uint64_t>(ops, 1'000'000);
  r.fpr = MeasureFpr(s, r.fpr_probes);
  absl::PrintF("%s: lookups...\n", r.name);
  std::fflush(stdout);
  r.lookups = MeasureAllLookups(s, r.name, n, ops, o.threads, ceiling);
  // Deletes last (they empty the table), at most half the keys in all.
  uint64_t cells = 2 * o.threads.size();
  r.deletes = MeasureDeletes(*filter, std::min(ops, n / (2 * cells)), o.threads);
  return r;
}

template <typename Bloom>
FilterReport RunBloom(std::string_view name, uint64_t bytes, uint64_t n, uint64_t ops,
                      const Options& o, const MemoryCeiling& ceiling) {
  FilterReport r{.name = std::string(name), .items = n};
  auto make = [&] {
    absl::StatusOr<Bloom> b = Bloom::Create(bytes, n);
    if (!b.ok()) Fail(b.status().ToString());
    return *std::move(b);
  };
  absl::PrintF("%s: construction...\n", name);
  std::fflush(stdout);
  {
    const uint64_t huge_before = AnonHugePagesMiB();
    Bloom single = make();
    BloomSubject<Bloom> s(&single);
    r.build = BuildSingle(s, 0, n);
    r.huge_page_mib = AnonHugePagesMiB() - huge_before;
  }
  // The batch-built copy holds the same bits; it serves the lookups.
  Bloom filter = make();
  BloomSubject<Bloom> s(&filter);
  r.build_batched = BuildBatched(s, 0, n);
  r.bytes = filter.bytes();
  r.k = filter.k();
  r.expected_fpr = filter.ExpectedFalsePositiveRate(n);
  r.fpr_probes = std::max<uint64_t>(ops, 1'000'000);
  r.fpr = MeasureFpr(s, r.fpr_probes);
  absl::PrintF("%s: lookups...\n", name);
  std::fflush(stdout);
  r.lookups = MeasureAllLookups(s, r.name, n, ops, o.threads, ceiling);
  return r;
}

// ---------------------------------------------------------------- output

struct Machine {
  std::string cpu;
  unsigned hardware_threads = 0;
  std::string thp;
  // Other work on the machine skews every number: shown so a reader can tell.
  std::string loadavg_at_start;
  std::string loadavg_at_end;
};

std::string Mode(bool batched) { return batched ? "batched" : "single"; }

void PrintTables(const Options& o, const Machine& m, uint64_t ops,
                 const std::vector<FilterReport>& reports) {
  const CuckooFacts& first = *reports[0].cuckoo;
  absl::PrintF("\n== machine\n");
  absl::PrintF("cpu             %s (%d hardware threads)\n", m.cpu, m.hardware_threads);
  absl::PrintF("THP enabled     %s\n", m.thp);
  absl::PrintF("loadavg         %s at start, %s at end (1, 5, 15 min; this run adds 1-2)\n",
               m.loadavg_at_start, m.loadavg_at_end);
  for (const FilterReport& r : reports) {
    absl::PrintF(
        "huge pages      %s: AnonHugePages grew by %d MiB during construction (table %.0f MiB)\n",
        r.name, r.huge_page_mib, r.bytes / double{kMiB});
  }
  absl::PrintF(
      "run             %s, cuckoo capacity %d, %d queries per lookup cell, batches of %d\n",
      o.small ? "--small" : "full", first.shape.capacity, ops, kBatch);

  absl::PrintF("\nTable 3: space, accuracy, construction (one thread)\n");
  absl::PrintF("%-14s %10s %10s %9s %3s %8s %9s %10s %10s\n", "filter", "items (M)", "table MiB",
               "bits/item", "k", "FPR %", "expect %", "build M/s", "batch M/s");
  for (const FilterReport& r : reports) {
    absl::PrintF("%-14s %10.2f %10.1f %9.2f %3s %8.4f %9.4f %10.2f %10.2f\n", r.name, r.items / 1e6,
                 r.bytes / double{kMiB}, r.bits_per_item(), r.k ? absl::StrCat(r.k) : "-",
                 100 * r.fpr, 100 * r.expected_fpr, r.build.mops(), r.build_batched.mops());
  }
  absl::PrintF("FPR over %d absent keys; expect = model at the measured load.\n",
               reports[0].fpr_probes);
  for (const FilterReport& c : reports) {
    if (!c.cuckoo) continue;
    const CuckooFacts& facts = *c.cuckoo;
    absl::PrintF(
        "%s construction: %s after %d keys, load %.2f%% (%d shards x %d buckets x %d slots, "
        "f=%d, %s)\n",
        c.name, c.build.full ? "stopped at the first kFull" : "reached the planned capacity",
        c.build.attempted, 100 * facts.load, facts.shape.shards, facts.shape.buckets_per_shard,
        facts.shape.bucket_size, facts.shape.fingerprint_bits,
        TableKindName(facts.shape.table_kind));
    absl::PrintF(
        "%s batched construction: %s after %d keys\n", c.name,
        c.build_batched.full ? "stopped at the first kFull" : "reached the planned capacity",
        c.build_batched.attempted);
    if (facts.fill_failed) {
      absl::PrintF(
          "%s fill to first failure (capacity %d, up to %d keys): first kFull at %d items, "
          "load %.2f%%, %.2f bits/item\n",
          c.name, facts.shape.capacity, facts.fill_budget, facts.fill_items, 100 * facts.fill_load,
          facts.fill_bits_per_item);
    } else {
      absl::PrintF(
          "%s fill to first failure: no failure within %d keys (load %.2f%%); odd, expected "
          "one near 95.8%%\n",
          c.name, facts.fill_budget, 100 * facts.fill_load);
    }
  }

  absl::PrintF(
      "\nFigure 5: lookups, M ops/s (all threads) by share of positive queries; %d queries per "
      "cell, median of %d rounds\n",
      ops, kRounds);
  absl::PrintF("%-14s %-8s %7s", "filter", "mode", "threads");
  for (int pct : kPercents) absl::PrintF(" %7s", absl::StrCat(pct, "%"));
  absl::PrintF(" %9s %8s %9s\n", "FP%@0%", "ceiling", "50%/ceil");
  uint64_t sink = 0;
  for (const FilterReport& r : reports) {
    for (const LookupRow& row : r.lookups) {
      absl::PrintF("%-14s %-8s %7d", r.name, Mode(row.batched), row.threads);
      for (const LookupCell& cell : row.cells) {
        absl::PrintF(" %7.2f", cell.mops);
        sink += cell.positives;
      }
      absl::PrintF(" %9.4f %8.2f %9.2f\n", 100.0 * row.cells[0].positives / row.cells[0].queries,
                   row.ceiling(), row.cells[2].mops / row.ceiling());
    }
  }
  absl::PrintF(
      "ceiling: M ops/s of two random 8-byte reads per op in a buffer as large as the cuckoo\n"
      "table and no other work, with a 32-op prefetch pipeline for batched rows and a plain\n"
      "loop for single-key rows, same threads; mean of a run just before and just after the row.\n"
      "50%%/ceil: the 50%% cell as a share of it.\n");
  absl::PrintF("(sink: %d positive answers in all; every 100%% cell answered all true)\n", sink);

  for (const FilterReport& c : reports) {
    if (c.deletes.empty()) continue;
    absl::PrintF(
        "\n%s deletes of inserted keys, M ops/s (all threads); %d keys per cell, median of %d "
        "rounds\n",
        c.name, c.deletes[0].keys, kRounds);
    absl::PrintF("%-8s %7s %8s\n", "mode", "threads", "M ops/s");
    for (const DeleteCell& d : c.deletes) {
      absl::PrintF("%-8s %7d %8.2f\n", Mode(d.batched), d.threads, d.mops);
    }
  }
}

std::string JsonBuild(const BuildResult& b) {
  return absl::StrFormat(
      R"({"attempted":%d,"inserted":%d,"stopped_at_full":%s,"seconds":%.3f,"mops":%.3f})",
      b.attempted, b.inserted, b.full ? "true" : "false", b.seconds, b.mops());
}

std::string Json(const Options& o, const Machine& m, uint64_t ops,
                 const std::vector<FilterReport>& reports) {
  std::string j = absl::StrFormat(
      R"({"machine":{"cpu":%s,"hardware_threads":%d,"thp_enabled":%s,"loadavg_at_start":%s,)"
      R"("loadavg_at_end":%s},)"
      R"("run":{"mode":"%s","capacity":%d,"queries_per_cell":%d,"batch":%d,"threads":[%s],)"
      R"("bucket_size":%d,"positive_percents":[%s]},"filters":[)",
      JsonString(m.cpu), m.hardware_threads, JsonString(m.thp), JsonString(m.loadavg_at_start),
      JsonString(m.loadavg_at_end), o.small ? "small" : "full", reports[0].cuckoo->shape.capacity,
      ops, kBatch, absl::StrJoin(o.threads, ","), kBucketSize, absl::StrJoin(kPercents, ","));
  for (size_t i = 0; i < reports.size(); ++i) {
    const FilterReport& r = reports[i];
    absl::StrAppendFormat(
        &j,
        R"(%s{"name":"%s","items":%d,"bytes":%d,"bits_per_item":%.4f,"k":%d,"fpr":%.6f,)"
        R"("expected_fpr":%.6f,"fpr_probes":%d,"huge_page_mib":%d,"build":%s,)"
        R"("build_batched":%s,)",
        i ? "," : "", r.name, r.items, r.bytes, r.bits_per_item(), r.k, r.fpr, r.expected_fpr,
        r.fpr_probes, r.huge_page_mib, JsonBuild(r.build), JsonBuild(r.build_batched));
    if (r.cuckoo) {
      const CuckooFacts& facts = *r.cuckoo;
      absl::StrAppendFormat(
          &j,
          R"("fingerprint_bits":%d,"table_kind":"%s","shards":%d,"buckets_per_shard":%d,)"
          R"("load":%.5f,)"
          R"("first_failure":{"budget":%d,"failed":%s,"items":%d,"load":%.5f,"bits_per_item":%.4f},)",
          facts.shape.fingerprint_bits, TableKindName(facts.shape.table_kind), facts.shape.shards,
          facts.shape.buckets_per_shard, facts.load, facts.fill_budget,
          facts.fill_failed ? "true" : "false", facts.fill_items, facts.fill_load,
          facts.fill_bits_per_item);
    }
    j += R"("lookups":[)";
    for (size_t k = 0; k < r.lookups.size(); ++k) {
      const LookupRow& row = r.lookups[k];
      std::vector<std::string> mops, positives;
      for (const LookupCell& cell : row.cells) {
        mops.push_back(absl::StrFormat("%.3f", cell.mops));
        positives.push_back(absl::StrCat(cell.positives));
      }
      absl::StrAppendFormat(&j,
                            R"(%s{"mode":"%s","threads":%d,"mops":[%s],"positives":[%s],)"
                            R"("ceiling_mops":[%.3f,%.3f]})",
                            k ? "," : "", Mode(row.batched), row.threads, absl::StrJoin(mops, ","),
                            absl::StrJoin(positives, ","), row.ceiling_before, row.ceiling_after);
    }
    j += "]";
    if (!r.deletes.empty()) {
      j += R"(,"deletes":[)";
      for (size_t k = 0; k < r.deletes.size(); ++k) {
        const DeleteCell& d = r.deletes[k];
        absl::StrAppendFormat(&j, R"(%s{"mode":"%s","threads":%d,"keys":%d,"mops":%.3f})",
                              k ? "," : "", Mode(d.batched), d.threads, d.keys, d.mops);
      }
      j += "]";
    }
    j += "}";
  }
  return j + "]}";
}

// ---------------------------------------------------------------- main

constexpr char kUsage[] =
    "usage: filter_bench [--small] [--capacity=N] [--ops=N] [--threads=1,2] [--json=PATH] "
    "[--only=cuckoo] [--cuckoo=p12,ss13]\n";

// Flags are parsed with absl::string_view: the distribution's Abseil is built
// with its own string_view type, which its parsers require.
std::optional<Options> ParseArgs(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    absl::string_view a = argv[i];
    auto value = [&](absl::string_view flag) -> std::optional<absl::string_view> {
      if (!absl::ConsumePrefix(&a, flag)) return std::nullopt;
      return a;
    };
    bool ok = true;
    if (a == "--small") {
      o.small = true;
    } else if (a == "--only=cuckoo") {
      o.only_cuckoo = true;
    } else if (auto v = value("--capacity=")) {
      ok = absl::SimpleAtoi(*v, &o.capacity) && o.capacity > 0;
    } else if (auto v = value("--ops=")) {
      ok = absl::SimpleAtoi(*v, &o.ops) && o.ops > 0;
    } else if (auto v = value("--json=")) {
      o.json_path = std::string(*v);
    } else if (auto v = value("--cuckoo=")) {
      o.cuckoos.clear();
      for (absl::string_view spec : absl::StrSplit(*v, ',')) {
        CuckooVariant c;
        c.semi_sorted = absl::ConsumePrefix(&spec, "ss");
        ok = ok && (c.semi_sorted || absl::ConsumePrefix(&spec, "p")) &&
             absl::SimpleAtoi(spec, &c.fingerprint_bits) &&
             c.fingerprint_bits >= (c.semi_sorted ? 5u : kMinFingerprintBits) &&
             c.fingerprint_bits <= kMaxFingerprintBits;
        o.cuckoos.push_back(c);
      }
    } else if (auto v = value("--threads=")) {
      ok = ParseCountList(*v, &o.threads);
    } else {
      ok = false;
    }
    if (!ok) {
      absl::FPrintF(stderr, "filter_bench: bad argument %s\n%s", argv[i], kUsage);
      return std::nullopt;
    }
  }
  return o;
}

int Main(int argc, char** argv) {
  std::optional<Options> parsed = ParseArgs(argc, argv);
  if (!parsed) return 2;
  const Options& o = *parsed;
  const uint64_t capacity =
      o.capacity ? o.capacity : CapacityForBytes(o.cuckoos[0], o.small ? 16 * kMiB : 1024 * kMiB);
  const uint64_t ops = o.ops ? o.ops : o.small ? 1'000'000 : 10'000'000;
  Machine machine{CpuModel(), std::thread::hardware_concurrency(),
                  FirstLine("/sys/kernel/mm/transparent_hugepage/enabled"), LoadAverages()};
  absl::PrintF("filter_bench: %s, capacity %d, %d queries per cell, cpu %s, THP %s\n",
               o.small ? "--small" : "full", capacity, ops, machine.cpu, machine.thp);
  std::fflush(stdout);

  const double t0 = Now();
  std::vector<FilterReport> reports;
  absl::StatusOr<FilterShape> shape = ComputeShape(CuckooOptions(o.cuckoos[0], capacity));
  if (!shape.ok()) Fail(shape.status().ToString());
  const MemoryCeiling ceiling(CuckooTableBytes(*shape));
  for (const CuckooVariant& v : o.cuckoos) {
    reports.push_back(RunCuckoo(o, v, capacity, ops, ceiling));
  }
  if (!o.only_cuckoo) {
    // Same memory and the same keys as the cuckoo filter.
    const uint64_t bytes = reports[0].bytes;
    const uint64_t n = reports[0].items;
    reports.push_back(RunBloom<BloomFilter>("bloom", bytes, n, ops, o, ceiling));
    reports.push_back(RunBloom<BlockedBloomFilter>("blocked-bloom", bytes, n, ops, o, ceiling));
  }

  machine.loadavg_at_end = LoadAverages();
  PrintTables(o, machine, ops, reports);
  absl::PrintF("\ntotal time %.1f s\n", Now() - t0);
  std::string json = Json(o, machine, ops, reports);
  absl::PrintF("\n%s\n", json);
  if (!o.json_path.empty()) {
    std::ofstream out(o.json_path);
    out << json << "\n";
    if (!out) Fail(absl::StrCat("cannot write ", o.json_path));
  }
  return 0;
}

}  // namespace
}  // namespace cuckoo::bench

int main(int argc, char** argv) { return cuckoo::bench::Main(argc, argv); }
