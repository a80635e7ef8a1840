// cuckoo-bench's counts: per operation (requests, keys, errors by status
// code, false negatives, outcomes, latency), per phase, and a phase's
// result. Each thread keeps its own and the main thread merges them.
#ifndef CUCKOO_CLIENT_TOOLS_CUCKOO_BENCH_STATS_H_
#define CUCKOO_CLIENT_TOOLS_CUCKOO_BENCH_STATS_H_

#include <algorithm>
#include <array>
#include <cstdint>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "client/tools/cuckoo_bench/latency_histogram.h"
#include "client/tools/cuckoo_bench/options.h"

namespace cuckoo::bench {

// Error slots: the 17 gRPC status codes, then a response that does not match
// its request (wrong number of results, unparseable).
inline constexpr int kBadResponse = 17;
inline constexpr int kErrorSlots = 18;

inline std::string ErrorName(int slot) {
  if (slot == kBadResponse) return "BAD_RESPONSE";
  return absl::StatusCodeToString(static_cast<absl::StatusCode>(slot));
}

struct OpStats {
  uint64_t requests = 0;
  uint64_t keys = 0;
  std::array<uint64_t, kErrorSlots> errors{};
  std::array<std::string, kErrorSlots> first_error;
  // Lookup / count: a present key answered false (count 0); delete: an
  // inserted key not found.
  uint64_t false_negatives = 0;
  // Lookup / count.
  uint64_t present_keys = 0;
  uint64_t absent_keys = 0;
  uint64_t absent_hits = 0;  // Absent keys answered true (count > 0).
  // Insert / delete.
  uint64_t inserted = 0;
  uint64_t already_present = 0;
  uint64_t full = 0;
  uint64_t deleted = 0;
  uint64_t not_found = 0;
  LatencyHistogram latency;

  uint64_t errors_total() const {
    uint64_t n = 0;
    for (uint64_t e : errors) n += e;
    return n;
  }

  void Error(int slot, std::string message) {
    if (errors[slot]++ == 0) first_error[slot] = std::move(message);
  }

  void Merge(const OpStats& o) {
    requests += o.requests;
    keys += o.keys;
    for (int i = 0; i < kErrorSlots; ++i) {
      if (errors[i] == 0 && o.errors[i] > 0) first_error[i] = o.first_error[i];
      errors[i] += o.errors[i];
    }
    false_negatives += o.false_negatives;
    present_keys += o.present_keys;
    absent_keys += o.absent_keys;
    absent_hits += o.absent_hits;
    inserted += o.inserted;
    already_present += o.already_present;
    full += o.full;
    deleted += o.deleted;
    not_found += o.not_found;
    latency.Merge(o.latency);
  }
};

struct PhaseStats {
  std::array<OpStats, kNumOps> ops;
  int64_t end_ns = 0;  // Last completion.

  OpStats Total() const {
    OpStats t;
    for (const OpStats& s : ops) t.Merge(s);
    return t;
  }
  void Merge(const PhaseStats& o) {
    for (int i = 0; i < kNumOps; ++i) ops[i].Merge(o.ops[i]);
    end_ns = std::max(end_ns, o.end_ns);
  }
};

struct PhaseResult {
  PhaseStats measured;
  PhaseStats unmeasured;  // Warmup.
  double elapsed_s = 0;   // Measured start to last measured completion.
  double cpu_s = 0;       // This process's CPU time (all threads, gRPC's too).
  std::string stopped_early;

  uint64_t errors() const {
    return measured.Total().errors_total() + unmeasured.Total().errors_total();
  }
  uint64_t false_negatives() const {
    return measured.Total().false_negatives + unmeasured.Total().false_negatives;
  }
};

}  // namespace cuckoo::bench

#endif  // CUCKOO_CLIENT_TOOLS_CUCKOO_BENCH_STATS_H_
