// growth_bench: growing filters (docs/GROWTH.md) against filters created at
// their final size, in one run (see README.md).
//
//   growth_bench            filters created for 1,000 keys grown to 10^7
//   growth_bench --small    grown to 10^5: a CI smoke run of a second or two
//   growth_bench --paths    batched lookups of growing filters that have not
//                           grown (and have grown in half their shards)
//                           against fixed ones, at 10^6 and 10^7 keys
//   growth_bench --paths --small   the same at 10^5 keys
//   flags: --json=PATH; with --paths, --rounds=N (default 7) and
//          --capacity=N (one size instead of the default ones)
//
// For each rate and growth factor it grows a filter from 1,000 keys,
// stopping at 10x, 100x, 1000x and 10000x, and reports there the measured
// false-positive rate (absent keys), the bound the filter reports, bits per
// key, generations, and, against a fixed filter created at that size with
// the same rate (same kind of table), the memory ratio and the batched
// lookup throughput ratio (1024-key batches of pre-hashed keys, half present,
// and all absent: a growing filter's worst case, every generation checked).
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/types/span.h"
#include "bench/bench_util.h"
#include "core/cuckoo_filter.h"

namespace cuckoo::bench {
namespace {

constexpr size_t kBatch = 1024;

[[noreturn]] void Fail(const std::string& message) {
  absl::FPrintF(stderr, "growth_bench: %s\n", message);
  std::exit(1);
}

std::unique_ptr<CuckooFilter> Make(const FilterOptions& o) {
  absl::StatusOr<std::unique_ptr<CuckooFilter>> f = CuckooFilter::Create(o);
  if (!f.ok()) Fail(std::string(f.status().message()));
  return *std::move(f);
}

uint64_t Key(uint64_t stream, uint64_t i) { return SplitMix64(i ^ (stream << 56)); }

std::vector<uint64_t> Hashes(const CuckooFilter& f, uint64_t stream, uint64_t from, uint64_t to) {
  std::vector<uint64_t> h;
  h.reserve(to - from);
  for (uint64_t i = from; i < to; ++i) {
    const uint64_t k = Key(stream, i);
    h.push_back(f.Hash(std::string_view(reinterpret_cast<const char*>(&k), sizeof(k))));
  }
  return h;
}

void InsertAll(CuckooFilter& f, uint64_t from, uint64_t to) {
  std::vector<uint64_t> h = Hashes(f, 0, from, to);
  std::vector<InsertResult> r(h.size());
  f.InsertHashed(h, false, absl::MakeSpan(r));
  for (size_t i = 0; i < r.size(); ++i) {
    if (r[i] != InsertResult::kInserted) Fail(absl::StrCat("insert ", from + i, " failed"));
  }
}

// Fraction of `n` absent keys found, and a check that every inserted key is.
double MeasureFpr(const CuckooFilter& f, uint64_t inserted, uint64_t n) {
  std::unique_ptr<bool[]> out(new bool[std::max(inserted, n)]);
  std::vector<uint64_t> present = Hashes(f, 0, 0, inserted);
  f.LookupHashed(present, absl::MakeSpan(out.get(), inserted));
  for (uint64_t i = 0; i < inserted; ++i) {
    if (!out[i]) Fail(absl::StrCat("false negative: key ", i, " of ", inserted));
  }
  std::vector<uint64_t> absent = Hashes(f, 1, 0, n);
  f.LookupHashed(absent, absl::MakeSpan(out.get(), n));
  uint64_t found = 0;
  for (uint64_t i = 0; i < n; ++i) found += out[i];
  return static_cast<double>(found) / n;
}

// Batched lookups per second over `hashes` in kBatch batches, best of 3.
double LookupRate(const CuckooFilter& f, const std::vector<uint64_t>& hashes) {
  std::unique_ptr<bool[]> out(new bool[kBatch]);
  double best = 0;
  uint64_t sink = 0;
  for (int round = 0; round < 3; ++round) {
    const double start = Now();
    for (size_t at = 0; at + kBatch <= hashes.size(); at += kBatch) {
      f.LookupHashed(absl::MakeConstSpan(hashes.data() + at, kBatch),
                     absl::MakeSpan(out.get(), kBatch));
      sink += out[0];
    }
    const double rate = static_cast<double>(hashes.size() / kBatch * kBatch) / (Now() - start);
    best = std::max(best, rate);
  }
  if (sink == 0xFFFFFFFFFFFFFFFFull) absl::PrintF("%u", sink);
  return best;
}

// 2^21 lookups: half of them present keys, in a shuffled order.
std::vector<uint64_t> MixedHashes(const CuckooFilter& f, uint64_t inserted, bool all_absent) {
  const uint64_t n = uint64_t{1} << 21;
  std::vector<uint64_t> h;
  h.reserve(n);
  for (uint64_t i = 0; i < n; ++i) {
    const bool present = !all_absent && (i & 1) == 0;
    const uint64_t k = present ? Key(0, SplitMix64(i) % inserted) : Key(2, i);
    h.push_back(f.Hash(std::string_view(reinterpret_cast<const char*>(&k), sizeof(k))));
  }
  return h;
}

struct Point {
  uint64_t keys = 0;
  uint32_t generations = 0;
  double fpr = 0, bound = 0, bits_per_key = 0;
  double fixed_fpr = 0, fixed_bits_per_key = 0;
  double lookup_mixed = 0, fixed_lookup_mixed = 0;
  double lookup_absent = 0, fixed_lookup_absent = 0;
};

struct Config {
  double rate;
  uint32_t factor;
  std::vector<Point> points;
};

Point Measure(CuckooFilter& f, uint64_t keys, double rate, uint64_t absent, bool throughput) {
  Point p;
  p.keys = keys;
  const FilterStats st = f.Stats();
  p.generations = static_cast<uint32_t>(st.generations.size());
  p.bound = st.false_positive_bound;
  p.bits_per_key = 8.0 * st.memory_bytes / keys;
  p.fpr = MeasureFpr(f, keys, absent);
  std::unique_ptr<CuckooFilter> fixed = Make({.capacity = keys, .false_positive_rate = rate});
  InsertAll(*fixed, 0, keys);
  p.fixed_bits_per_key = 8.0 * fixed->memory_bytes() / keys;
  p.fixed_fpr = MeasureFpr(*fixed, keys, absent);
  if (throughput) {
    // Alternating, so drift of the machine hits both alike.
    p.lookup_mixed = LookupRate(f, MixedHashes(f, keys, false));
    p.fixed_lookup_mixed = LookupRate(*fixed, MixedHashes(*fixed, keys, false));
    p.lookup_absent = LookupRate(f, MixedHashes(f, keys, true));
    p.fixed_lookup_absent = LookupRate(*fixed, MixedHashes(*fixed, keys, true));
  }
  return p;
}

// --- --paths: the lookup path of a growing filter before it grows ---
//
// CF.RESERVE makes a growing filter; until its shards grow, each has one
// table, exactly as a fixed filter's, and its batched lookups should cost
// the same. Five filters, all loaded with 90% of `capacity` keys:
//   fixed, same rate:   what CF.RESERVE ... EXPANSION 0 makes (shorter
//                       fingerprints, shards for its capacity alone);
//   fixed, same tables: the growing filter's shape with growth off (same
//                       shards, fingerprint size, table kind and seed);
//   growing, not grown: one table in every shard;
//   growing, half grown: then keys of the even shards only, until each of
//                       them has added its second table;
//   growing, all grown: created for capacity / 64 keys, with as many shards,
//                       so every shard has grown about 6 times (a filter
//                       that has grown costs more per lookup; this shows
//                       how much, on the same path as the others).
// Lookups: batches of 1000 pre-hashed keys (CF.MEXISTS x1000), all present
// (random keys of the filter's own) or all absent, one thread; rounds
// alternate the filters so drift of the machine hits all alike. Rates are
// per second of the thread's own CPU time (CLOCK_THREAD_CPUTIME_ID), which
// time slices lost to other processes on a shared machine do not count;
// the JSON also has the wall-clock rates.

constexpr size_t kPathBatch = 1000;

struct PathFilter {
  std::string name;
  std::unique_ptr<CuckooFilter> filter;
  std::vector<uint64_t> inserted;  // Hashes of the keys it holds.
  std::vector<uint64_t> present, absent;
  std::vector<double> present_rates, absent_rates;            // Per CPU second.
  std::vector<double> present_wall_rates, absent_wall_rates;  // Per second.
};

double ThreadCpuSeconds() {
  timespec t;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

// Looks up `hashes` in batches; appends the rates per CPU second and per
// second to *cpu and *wall.
void PathRate(const CuckooFilter& f, const std::vector<uint64_t>& hashes, bool expect,
              std::vector<double>* cpu, std::vector<double>* wall) {
  std::unique_ptr<bool[]> out(new bool[kPathBatch]);
  uint64_t found = 0;
  const size_t n = hashes.size() / kPathBatch * kPathBatch;
  const double start = Now();
  const double cpu_start = ThreadCpuSeconds();
  for (size_t at = 0; at < n; at += kPathBatch) {
    f.LookupHashed(absl::MakeConstSpan(hashes.data() + at, kPathBatch),
                   absl::MakeSpan(out.get(), kPathBatch));
    for (size_t k = 0; k < kPathBatch; ++k) found += out[k];
  }
  cpu->push_back(static_cast<double>(n) / (ThreadCpuSeconds() - cpu_start));
  wall->push_back(static_cast<double>(n) / (Now() - start));
  if (expect && found != n) Fail("a present key was not found");
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.size() % 2 == 1 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
}

void InsertHashes(CuckooFilter& f, const std::vector<uint64_t>& h) {
  std::vector<InsertResult> r(h.size());
  f.InsertHashed(h, false, absl::MakeSpan(r));
  for (InsertResult x : r) {
    if (x != InsertResult::kInserted) Fail("an insert failed");
  }
}

uint32_t ShardOf(const FilterShape& shape, uint64_t h) {
  return shape.shard_bits == 0 ? 0 : static_cast<uint32_t>(h >> (64 - shape.shard_bits));
}

std::string PathsAt(uint64_t capacity, int rounds) {
  constexpr double kRate = 0.002;  // The Redis port's default error rate.
  const FilterOptions growing{
      .capacity = capacity, .false_positive_rate = kRate, .seed = 7, .growth_factor = 2};
  std::vector<PathFilter> fs(5);
  fs[0].name = "fixed, same rate";
  fs[0].filter = Make({.capacity = capacity, .false_positive_rate = kRate, .seed = 7});
  fs[2].name = "growing, not grown";
  fs[2].filter = Make(growing);
  FilterShape same = fs[2].filter->shape();
  same.growth_factor = 0;
  same.max_capacity = 0;
  same.false_positive_rate = 0;
  absl::StatusOr<std::unique_ptr<CuckooFilter>> fixed_same = CuckooFilter::FromShape(same);
  if (!fixed_same.ok()) Fail(std::string(fixed_same.status().message()));
  fs[1].name = "fixed, same tables";
  fs[1].filter = *std::move(fixed_same);
  fs[3].name = "growing, half grown";
  fs[3].filter = Make(growing);
  fs[4].name = "growing, all grown";
  FilterOptions small_growing = growing;
  small_growing.capacity = capacity / 64;
  small_growing.shards = fs[2].filter->shape().shards;
  fs[4].filter = Make(small_growing);
  const uint64_t loaded = capacity * 9 / 10;
  for (PathFilter& p : fs) {
    p.inserted = Hashes(*p.filter, 0, 0, loaded);
    InsertHashes(*p.filter, p.inserted);
  }
  const FilterShape& shape = fs[3].filter->shape();
  for (uint32_t s = 0; s < shape.shards; ++s) {
    if (fs[2].filter->ShardGenerations(s) != 1) Fail("the growing filter grew at 90% load");
  }
  // Grow the even shards (all of them with one shard): their keys only, in
  // batches, until each has its second table.
  CuckooFilter& half = *fs[3].filter;
  const auto even_grown = [&] {
    for (uint32_t s = 0; s < shape.shards; s += 2) {
      if (half.ShardGenerations(s) < 2) return false;
    }
    return true;
  };
  for (uint64_t next = 0; !even_grown();) {
    std::vector<uint64_t> h;
    while (h.size() < 4096) {
      const uint64_t x = Hashes(half, 3, next, next + 1)[0];
      ++next;
      if (ShardOf(shape, x) % 2 == 0) h.push_back(x);
    }
    InsertHashes(half, h);
    fs[3].inserted.insert(fs[3].inserted.end(), h.begin(), h.end());
  }
  uint32_t grown_shards = 0;
  for (uint32_t s = 0; s < shape.shards; ++s) grown_shards += half.ShardGenerations(s) > 1;
  uint64_t all_generations = 0;
  for (uint32_t s = 0; s < shape.shards; ++s) {
    all_generations += fs[4].filter->ShardGenerations(s);
  }
  const uint64_t n = uint64_t{1} << 20;
  for (PathFilter& p : fs) {
    p.present.reserve(n);
    for (uint64_t i = 0; i < n; ++i)
      p.present.push_back(p.inserted[SplitMix64(i) % p.inserted.size()]);
    p.absent = Hashes(*p.filter, 2, 0, n);
  }
  for (int round = 0; round < rounds; ++round) {
    for (PathFilter& p : fs) {
      PathRate(*p.filter, p.present, true, &p.present_rates, &p.present_wall_rates);
    }
    for (PathFilter& p : fs) {
      PathRate(*p.filter, p.absent, false, &p.absent_rates, &p.absent_wall_rates);
    }
  }
  absl::PrintF(
      "%u-key filters, %u keys loaded (half grown: +%u keys in the even shards, %u of %u "
      "shards grown; all grown: %.1f tables a shard)\n",
      capacity, loaded, fs[3].inserted.size() - loaded, grown_shards, shape.shards,
      static_cast<double>(all_generations) / shape.shards);
  absl::PrintF("%-20s %-6s %-3s %-11s %-28s %-28s %-9s %-9s\n", "filter", "shards", "f", "kind",
               "present M/s median (range)", "absent M/s median (range)", "present x", "absent x");
  const double base_present = Median(fs[1].present_rates);
  const double base_absent = Median(fs[1].absent_rates);
  std::vector<std::string> rows;
  for (const PathFilter& p : fs) {
    const FilterShape& s = p.filter->shape();
    const auto [pmin, pmax] = std::minmax_element(p.present_rates.begin(), p.present_rates.end());
    const auto [amin, amax] = std::minmax_element(p.absent_rates.begin(), p.absent_rates.end());
    const double pm = Median(p.present_rates), am = Median(p.absent_rates);
    absl::PrintF("%-20s %-6u %-3u %-11s %-28s %-28s %-9.2f %-9.2f\n", p.name, s.shards,
                 s.fingerprint_bits, TableKindName(s.table_kind),
                 absl::StrFormat("%.2f (%.2f-%.2f)", pm / 1e6, *pmin / 1e6, *pmax / 1e6),
                 absl::StrFormat("%.2f (%.2f-%.2f)", am / 1e6, *amin / 1e6, *amax / 1e6),
                 pm / base_present, am / base_absent);
    rows.push_back(absl::StrFormat(
        "{\"capacity\":%u,\"filter\":\"%s\",\"shards\":%u,\"fingerprint_bits\":%u,"
        "\"present_per_cpu_s\":[%s],\"absent_per_cpu_s\":[%s],"
        "\"present_per_s\":[%s],\"absent_per_s\":[%s]}",
        capacity, p.name, s.shards, s.fingerprint_bits, absl::StrJoin(p.present_rates, ","),
        absl::StrJoin(p.absent_rates, ","), absl::StrJoin(p.present_wall_rates, ","),
        absl::StrJoin(p.absent_wall_rates, ",")));
  }
  absl::PrintF("(x: median against \"fixed, same tables\")\n\n");
  return absl::StrJoin(rows, ",");
}

int PathsMain(bool small, int rounds, uint64_t capacity, const std::string& json_path) {
  absl::PrintF(
      "growth_bench --paths%s: batched lookups (%u pre-hashed keys a batch, one thread), %d "
      "rounds alternating the filters; M/s per second of the thread's CPU time\n\n",
      small ? " --small" : "", kPathBatch, rounds);
  std::vector<std::string> rows;
  const std::vector<uint64_t> sizes = capacity != 0 ? std::vector<uint64_t>{capacity}
                                      : small       ? std::vector<uint64_t>{100'000}
                                                    : std::vector<uint64_t>{1'000'000, 10'000'000};
  for (uint64_t c : sizes) rows.push_back(PathsAt(c, rounds));
  if (!json_path.empty()) {
    std::ofstream out(json_path);
    out << "{\"paths\":[" << absl::StrJoin(rows, ",") << "]}\n";
    if (!out) Fail(absl::StrCat("cannot write ", json_path));
  }
  return 0;
}

int Main(int argc, char** argv) {
  bool small = false;
  bool paths = false;
  int rounds = 7;
  uint64_t capacity = 0;
  std::string json_path;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--small") {
      small = true;
    } else if (a == "--paths") {
      paths = true;
    } else if (a.rfind("--rounds=", 0) == 0) {
      rounds = std::atoi(a.c_str() + 9);
      if (rounds < 1 || rounds > 1000) Fail("--rounds must be 1 to 1000");
    } else if (a.rfind("--capacity=", 0) == 0) {
      capacity = std::strtoull(a.c_str() + 11, nullptr, 10);
      if (capacity < 64'000 || capacity > 100'000'000) Fail("--capacity must be 64000 to 10^8");
    } else if (a.rfind("--json=", 0) == 0) {
      json_path = a.substr(7);
    } else {
      Fail("usage: growth_bench [--small] [--paths [--rounds=N] [--capacity=N]] [--json=PATH]");
    }
  }
  if (paths) return PathsMain(small, rounds, capacity, json_path);
  const uint64_t start = 1000;
  const std::vector<uint64_t> stops =
      small ? std::vector<uint64_t>{10'000, 100'000}
            : std::vector<uint64_t>{10'000, 100'000, 1'000'000, 10'000'000};
  const uint64_t absent = small ? 100'000 : 1'000'000;
  std::vector<Config> configs;
  for (double rate : {0.03, 0.002, 0.001}) {
    for (uint32_t factor : {2u, 4u}) configs.push_back({rate, factor, {}});
  }
  for (Config& c : configs) {
    std::unique_ptr<CuckooFilter> f =
        Make({.capacity = start, .false_positive_rate = c.rate, .growth_factor = c.factor});
    uint64_t n = start;
    InsertAll(*f, 0, n);
    c.points.push_back(Measure(*f, n, c.rate, absent, false));
    for (uint64_t stop : stops) {
      InsertAll(*f, n, stop);
      n = stop;
      c.points.push_back(Measure(*f, n, c.rate, absent, stop >= 100'000));
    }
  }
  absl::PrintF(
      "growth_bench (%s): filters created for %u keys with growth, against fixed filters "
      "created at each size with the same rate; FPR measured on %u absent keys; lookups: "
      "%u-key batches of pre-hashed keys, best of 3\n\n",
      small ? "--small" : "full", start, absent, kBatch);
  absl::PrintF("%-6s %-3s %-9s %-4s %-9s %-9s %-9s %-8s %-8s %-6s %-7s %-7s\n", "rate", "G", "keys",
               "gens", "fpr", "bound", "fixed fpr", "bits/key", "fixed", "mem x", "mixed x",
               "absent x");
  std::vector<std::string> rows;
  for (const Config& c : configs) {
    for (const Point& p : c.points) {
      const double mem = p.bits_per_key / p.fixed_bits_per_key;
      const double mixed = p.fixed_lookup_mixed > 0 ? p.lookup_mixed / p.fixed_lookup_mixed : 0;
      const double abs = p.fixed_lookup_absent > 0 ? p.lookup_absent / p.fixed_lookup_absent : 0;
      absl::PrintF("%-6g %-3u %-9u %-4u %-9.5f %-9.5f %-9.5f %-8.2f %-8.2f %-6.2f %-7.2f %-7.2f\n",
                   c.rate, c.factor, p.keys, p.generations, p.fpr, p.bound, p.fixed_fpr,
                   p.bits_per_key, p.fixed_bits_per_key, mem, mixed, abs);
      rows.push_back(absl::StrFormat(
          "{\"rate\":%g,\"growth_factor\":%u,\"keys\":%u,\"generations\":%u,\"fpr\":%g,"
          "\"bound\":%g,\"fixed_fpr\":%g,\"bits_per_key\":%g,\"fixed_bits_per_key\":%g,"
          "\"lookups_mixed_per_s\":%g,\"fixed_lookups_mixed_per_s\":%g,"
          "\"lookups_absent_per_s\":%g,\"fixed_lookups_absent_per_s\":%g}",
          c.rate, c.factor, p.keys, p.generations, p.fpr, p.bound, p.fixed_fpr, p.bits_per_key,
          p.fixed_bits_per_key, p.lookup_mixed, p.fixed_lookup_mixed, p.lookup_absent,
          p.fixed_lookup_absent));
      if (p.fpr > c.rate) Fail(absl::StrFormat("measured rate %g > %g", p.fpr, c.rate));
    }
  }
  const std::string json = absl::StrCat("{\"points\":[", absl::StrJoin(rows, ","), "]}");
  if (!json_path.empty()) {
    std::ofstream out(json_path);
    out << json << "\n";
    if (!out) Fail(absl::StrCat("cannot write ", json_path));
  }
  return 0;
}

}  // namespace
}  // namespace cuckoo::bench

int main(int argc, char** argv) { return cuckoo::bench::Main(argc, argv); }
