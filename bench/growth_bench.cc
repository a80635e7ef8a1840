// growth_bench: growing filters (docs/GROWTH.md) against filters created at
// their final size, in one run (see README.md).
//
//   growth_bench            filters created for 1,000 keys grown to 10^7
//   growth_bench --small    grown to 10^5: a CI smoke run of a second or two
//   flags: --json=PATH
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

int Main(int argc, char** argv) {
  bool small = false;
  std::string json_path;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--small") {
      small = true;
    } else if (a.rfind("--json=", 0) == 0) {
      json_path = a.substr(7);
    } else {
      Fail("usage: growth_bench [--small] [--json=PATH]");
    }
  }
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
