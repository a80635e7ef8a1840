// cuckoo-bench's flags: what a run does (Options), parsed and checked from
// the command line, and the help text that lists them.
#ifndef CUCKOO_CLIENT_TOOLS_CUCKOO_BENCH_OPTIONS_H_
#define CUCKOO_CLIENT_TOOLS_CUCKOO_BENCH_OPTIONS_H_

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/time.h"
#include "client/cuckoo_client.h"

namespace cuckoo::bench {

// --help: every flag (bench/LOADGEN.md's table lists the same ones,
// tests/docs/docs_drift_test.cc checks).
extern const char kHelp[];

enum Op : int { kInsert = 0, kLookup = 1, kDelete = 2, kCount = 3 };
constexpr int kNumOps = 4;
inline constexpr const char* kOpNames[kNumOps] = {"insert", "lookup", "delete", "count"};

struct Options {
  std::string target = "localhost:50051";
  int connections = 2;
  int depth = 8;
  int threads = 1;
  absl::Duration timeout = absl::Seconds(30);
  int batch = 1000;
  int key_bytes = 16;
  std::array<uint32_t, kNumOps> weights = {0, 100, 0, 0};
  uint64_t keyspace = 10'000'000;
  int positive = 50;
  uint64_t pool_keys = 2'000'000;
  uint64_t churn_keys = 0;  // 0: automatic.
  uint64_t seed = 1;
  uint64_t max_errors = 100;  // 0: never stop.
  absl::Duration duration = absl::Seconds(10);
  uint64_t requests = 0;  // 0: run for `duration`.
  absl::Duration warmup = absl::Seconds(2);
  std::string filter = "bench";
  uint64_t create = 0;  // 0: do not create.
  double fpr = 0;
  std::optional<bool> semi_sort;
  bool populate = false;
  std::string json;
  std::string token;
  bool tls = false;
  std::string ca, cert, key, tls_server_name;
  // What ParseFlags made of the five above.
  client::TlsOptions tls_options;
  // --pin-cpu: the CPUs this process runs on; empty: not pinned.
  std::vector<int> pin_cpus;

  bool uses(Op op) const { return weights[op] > 0; }
  bool churns() const { return uses(kInsert) || uses(kDelete); }
  std::string MixText() const {
    std::vector<std::string> parts;
    for (int op = 0; op < kNumOps; ++op) {
      if (weights[op] > 0) parts.push_back(absl::StrFormat("%s:%u", kOpNames[op], weights[op]));
    }
    return absl::StrJoin(parts, ",");
  }
};

// Parses the flags into *o, checking each and how they go together; *help
// when --help was given (nothing after it is read). An error is a usage
// error, its message for "cuckoo-bench: MESSAGE".
absl::Status ParseFlags(int argc, char** argv, Options* o, bool* help);

// Pins the calling thread, before any other starts: the threads it starts
// (gRPC's too) inherit the mask, so the whole process runs on `cpus`.
absl::Status PinToCpus(const std::vector<int>& cpus);

}  // namespace cuckoo::bench

#endif  // CUCKOO_CLIENT_TOOLS_CUCKOO_BENCH_OPTIONS_H_
