// cuckoo-bench: a load generator for one cuckood filter, shaped like the
// comparison with Redis + RedisBloom: batches of 1000 16-byte keys, 8 requests
// in flight on each of 2 connections, client on the same machine. See
// bench/LOADGEN.md for how to run it and how to read its numbers; --help for
// the flags.
//
// How it works
//  - Connections: --connections gRPC channels, each with a local subchannel
//    pool and its own channel argument, so each is its own TCP connection.
//    Calls go through grpc::GenericStub with grpc::ByteBuffer payloads.
//  - Threads: --threads client threads, each with its own CompletionQueue;
//    thread t drives the connections c with c % threads == t, and --depth
//    call slots on each. A slot issues its next request as soon as its last
//    one completes (a closed loop), from the same thread, so no client state
//    is shared between threads except a few atomics (phase, request count).
//  - Pre-built requests (cuckoo_bench_keys.h encodes them, in wire format,
//    into one slice each): the lookup/count pool (--pool keys, shared by the
//    two ops since their requests have the same wire format; each request a
//    random mix of present and absent keys per --positive, with a bitmap of
//    which keys must be present), and the churn window (one payload per
//    insert/delete batch, sent to Insert and later to Delete). Sending one
//    costs a slice reference, no copy and no serialisation. Populate requests
//    are encoded as they are sent (about 2 us per 1000 keys). Responses are
//    parsed with protobuf and checked key by key.
//  - Keys: present keys 0..keyspace-1 (inserted by --populate, never deleted),
//    absent keys never inserted, churn keys inserted and deleted during the
//    run: three disjoint index ranges (cuckoo_bench_keys.h).
//  - Churn: each connection owns a window of churn batches, each FREE,
//    INSERTED or in flight. Insert takes the oldest FREE batch and makes it
//    INSERTED when every key was inserted; Delete takes the oldest INSERTED
//    batch and frees it. So a key is only deleted after its insert completed,
//    never twice, and present keys are never deleted: a lookup of a present
//    key that answers false is a false negative, as is a delete of an
//    inserted churn key that finds nothing. An op with nothing to work on
//    (insert with no FREE batch, delete with no INSERTED one) is replaced by
//    another op of the mix drawn by weight; a slot with no op left idles. A
//    batch whose insert reported FULL or failed is retired (never deleted:
//    some of its keys may be absent). Before the run, when the mix has
//    deletes, half the window (all of it without inserts) is inserted; after
//    the run every INSERTED batch is deleted, leaving the filter as it was.
//  - Timing: warmup requests are not measured. A request is measured when
//    issued during the measured part; the run's length is from its start to
//    the last measured completion, and rates are per that length. Successful
//    requests count as requests and keys, and for latency (per request, issue
//    to completion, into a hand-written log-linear histogram,
//    cuckoo_bench_histogram.h, at most 1.6% above the truth); failed ones
//    count as errors by status code, and --max-errors of them stop a phase.
//
// Exit status: 0 on success; 1 if any request failed (any phase, warmup
// included), a false negative was seen, populate hit a full filter, or the
// server or filter could not be used; 2 for a usage error.
#include <grpcpp/create_channel.h>
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>
#include <openssl/crypto.h>
#include <sched.h>
#include <sys/resource.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <bit>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <deque>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "base/json.h"
#include "base/units.h"
#include "client/cuckoo_bench_histogram.h"
#include "client/cuckoo_bench_keys.h"
#include "client/cuckoo_client.h"

namespace cuckoo::bench {
namespace {

namespace v1 = ::cuckoo::v1;

constexpr char kHelp[] = R"(Usage: cuckoo-bench [flags]

Loads one cuckood filter with batched Insert / Lookup / Delete / Count calls
over asynchronous gRPC and reports, per operation, requests, keys, keys/s,
requests/s, errors by status code and per-request latency (p50, p90, p99,
p99.9, max), plus false negatives, which must be 0. See bench/LOADGEN.md.

Connections:
  --target=HOST:PORT[,HOST:PORT...]
                        the cuckood to load (default localhost:50051), or
                        unix:PATH / unix:///ABSOLUTE/PATH for its Unix
                        socket; with several (a cluster's replicas),
                        connection i goes to the (i mod n)-th
  --connections=N       gRPC channels, each its own TCP connection (default 2)
  --depth=D             requests in flight on each connection (default 8)
  --threads=T           client threads, each with a completion queue driving
                        every T-th connection; at most N (default 1)
  --timeout=DURATION    deadline of each request (default 30s)
  --max-errors=N        stop a phase after N failed requests (default 100;
                        0: never)
  --pin-cpu=LIST        run this process (every thread, gRPC's included) on
                        these CPUs only, e.g. 1 or 2-3 or 1,3 (sched_setaffinity;
                        default: wherever the kernel likes). Pin the server
                        apart: taskset -c 0 cuckood ... (bench/LOADGEN.md)

Security (as cuckooctl's flags of the same names):
  --token=TOKEN         access token, sent as "authorization: Bearer TOKEN"
                        with every request (default: none)
  --tls                 connect with TLS, checking the server's certificate
                        against the system's CAs or --ca
  --ca=PEM              CA certificate(s) for the server's; implies --tls
  --cert=PEM --key=PEM  this client's certificate and key (mutual TLS);
                        imply --tls
  --tls-server-name=NAME
                        check the server's certificate for NAME instead of
                        the target's host

Requests:
  --batch=B             keys per request (default 1000)
  --key-bytes=K         bytes per key, 8 to 65536 (default 16)
  --mix=OP:W[,OP:W]...  operations and weights; OP is insert, lookup, delete
                        or count (default lookup:100)
  --keyspace=N          present keys are keys 0..N-1 (default 10M)
  --positive=PCT        share of lookup and count keys drawn from the present
                        keys, 0 to 100; the others were never inserted
                        (default 50)
  --pool=N              keys pre-built into lookup/count requests, in at most
                        65536 requests (default 2M)
  --churn=N             keys in the insert/delete window (default: 1M, at
                        most half the filter's free capacity)
  --seed=S              seed for choosing keys (default 1)

Run:
  --duration=DURATION   length of the measured run (default 10s)
  --requests=N          instead, stop after N measured requests
  --warmup=DURATION     unmeasured load before the run (default 2s; 0: none)

Filter:
  --filter=NAME         the filter to load (default bench)
  --create=CAPACITY     first create it (if_not_exists) for this many keys
  --fpr=RATE            with --create: its false-positive rate (default: the
                        server's, 0.002)
  --semi-sort=BOOL      with --create: true for semi-sorted buckets, false for
                        packed ones (default: the server's choice)
  --populate            insert keys 0..keyspace-1 before the run, measured as
                        a phase of its own (with if_absent if the filter is
                        not empty)

Output:
  --json=PATH           also write the results as JSON (- for stdout)
  --help                print this text

Numbers take a k, M, G or T suffix in either case, 10^3 to 10^12
(10M = 10000000); durations are like 500ms, 10s, 1m. Single-key latency:
--batch=1 --depth=1 --connections=1, with cuckood and cuckoo-bench pinned to
different CPUs (--pin-cpu).
Exit status: 0 success; 1 a request failed, a false negative was seen, or the
server or filter could not be used; 2 usage error.
)";

enum Op : int { kInsert = 0, kLookup = 1, kDelete = 2, kCount = 3 };
constexpr int kNumOps = 4;
constexpr const char* kOpNames[kNumOps] = {"insert", "lookup", "delete", "count"};

const std::string& Method(Op op) {
  static const std::array<std::string, kNumOps>* const kMethods =
      new std::array<std::string, kNumOps>{
          "/cuckoo.v1.FilterService/Insert", "/cuckoo.v1.FilterService/Lookup",
          "/cuckoo.v1.FilterService/Delete", "/cuckoo.v1.FilterService/Count"};
  return (*kMethods)[op];
}

int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

double CpuSeconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6;
}

// splitmix64 as a generator.
class Rng {
 public:
  explicit Rng(uint64_t seed) : state_(seed) {}
  uint64_t Next() {
    const uint64_t r = SplitMix64(state_);
    state_ += 0x9E3779B97F4A7C15ull;
    return r;
  }

 private:
  uint64_t state_;
};

// ---------------------------------------------------------------------------
// Flags.

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

template <typename... Args>
absl::Status UsageError(const absl::FormatSpec<Args...>& format, const Args&... args) {
  return absl::InvalidArgumentError(absl::StrFormat(format, args...));
}

// Parses a count within [lo, hi] into *out.
template <typename T>
absl::Status CountFlag(const std::string& name, const std::string& value, uint64_t lo, uint64_t hi,
                       T* out) {
  const absl::StatusOr<uint64_t> v = ParseCount(value);
  if (!v.ok()) {
    return UsageError("--%s=%s: not a count (digits, optionally with a k, M, G or T suffix)", name,
                      value);
  }
  if (*v < lo || *v > hi) {
    return absl::InvalidArgumentError(
        absl::StrFormat("--%s=%s: must be %u to %u", name, value, lo, hi));
  }
  *out = static_cast<T>(*v);
  return absl::OkStatus();
}

absl::Status DurationFlag(const std::string& name, const std::string& value, bool allow_zero,
                          absl::Duration* out) {
  absl::Duration d;
  if (!absl::ParseDuration(value, &d) || d < absl::ZeroDuration() ||
      (!allow_zero && d == absl::ZeroDuration()) || d == absl::InfiniteDuration()) {
    return UsageError("--%s=%s: not a positive duration such as 500ms, 10s or 1m", name, value);
  }
  *out = d;
  return absl::OkStatus();
}

absl::Status ParseMix(const std::string& text, std::array<uint32_t, kNumOps>* weights) {
  std::array<uint32_t, kNumOps> w = {0, 0, 0, 0};
  uint64_t total = 0;
  for (absl::string_view part : absl::StrSplit(text, ',')) {
    std::vector<std::string> kv = absl::StrSplit(part, absl::MaxSplits(':', 1));
    int op = -1;
    for (int i = 0; i < kNumOps; ++i) {
      if (kv[0] == kOpNames[i]) op = i;
    }
    uint32_t weight = 0;
    if (op < 0 || kv.size() != 2 || !absl::SimpleAtoi(kv[1], &weight) || weight > 1'000'000) {
      return UsageError(
          "--mix=%s: \"%s\" is not OP:WEIGHT with OP one of insert, lookup, delete, count and "
          "WEIGHT 0 to 1000000",
          text, std::string(part));
    }
    w[op] += weight;
    total += weight;
  }
  if (total == 0) return UsageError("--mix=%s: the weights add up to 0", text);
  *weights = w;
  return absl::OkStatus();
}

// "1", "0-3", "1,3,5-6": CPU numbers, ascending, each once.
absl::Status ParseCpuList(const std::string& text, std::vector<int>* cpus) {
  std::vector<bool> in(CPU_SETSIZE, false);
  for (absl::string_view part : absl::StrSplit(text, ',')) {
    std::vector<std::string> range = absl::StrSplit(part, absl::MaxSplits('-', 1));
    int first = -1, last = -1;
    if (!absl::SimpleAtoi(range[0], &first) ||
        !absl::SimpleAtoi(range.size() == 2 ? range[1] : range[0], &last) || first < 0 ||
        last < first || last >= CPU_SETSIZE) {
      return UsageError(
          "--pin-cpu=%s: \"%s\" is not a CPU number or range (e.g. 1, 2-3, 1,3; below %d)", text,
          std::string(part), CPU_SETSIZE);
    }
    for (int c = first; c <= last; ++c) in[c] = true;
  }
  cpus->clear();
  for (int c = 0; c < CPU_SETSIZE; ++c) {
    if (in[c]) cpus->push_back(c);
  }
  return absl::OkStatus();
}

// Pins the calling thread, before any other starts: the threads it starts
// (gRPC's too) inherit the mask, so the whole process runs on `cpus`.
absl::Status PinToCpus(const std::vector<int>& cpus) {
  cpu_set_t set;
  CPU_ZERO(&set);
  for (int c : cpus) CPU_SET(c, &set);
  if (sched_setaffinity(0, sizeof(set), &set) != 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "--pin-cpu=%s: cannot run there (%s): %d CPUs are online (nproc), and a container or "
        "taskset may allow fewer",
        absl::StrJoin(cpus, ","), std::strerror(errno), std::thread::hardware_concurrency()));
  }
  return absl::OkStatus();
}

absl::Status ParseFlags(int argc, char** argv, Options* o, bool* help) {
  bool duration_set = false;
  bool fpr_set = false;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--help" || arg == "-h" || arg == "-help") {
      *help = true;
      return absl::OkStatus();
    }
    if (arg.size() < 3 || arg.compare(0, 2, "--") != 0) {
      return UsageError("unexpected argument \"%s\"", arg);
    }
    const size_t eq = arg.find('=');
    std::string name = arg.substr(2, eq == std::string::npos ? std::string::npos : eq - 2);
    std::replace(name.begin(), name.end(), '_', '-');
    std::optional<std::string> value;
    if (eq != std::string::npos) value = arg.substr(eq + 1);
    if (name == "populate" || name == "tls") {
      bool& flag = name == "tls" ? o->tls : o->populate;
      if (!value || *value == "true" || *value == "1") {
        flag = true;
      } else if (*value == "false" || *value == "0") {
        flag = false;
      } else {
        return UsageError("--%s=%s: must be true or false", name, *value);
      }
      continue;
    }
    if (!value) {
      if (i + 1 >= argc) return UsageError("--%s needs a value", name);
      value = argv[++i];
    }
    const std::string& v = *value;
    absl::Status s;
    if (name == "target") {
      if (v.empty()) return UsageError("--target is empty");
      o->target = v;
    } else if (name == "connections") {
      s = CountFlag(name, v, 1, 256, &o->connections);
    } else if (name == "depth") {
      s = CountFlag(name, v, 1, 4096, &o->depth);
    } else if (name == "threads") {
      s = CountFlag(name, v, 1, 256, &o->threads);
    } else if (name == "timeout") {
      s = DurationFlag(name, v, false, &o->timeout);
    } else if (name == "batch") {
      s = CountFlag(name, v, 1, 10'000'000, &o->batch);
    } else if (name == "key-bytes") {
      s = CountFlag(name, v, 8, 65536, &o->key_bytes);
    } else if (name == "mix") {
      s = ParseMix(v, &o->weights);
    } else if (name == "keyspace") {
      s = CountFlag(name, v, 1, uint64_t{1} << 40, &o->keyspace);
    } else if (name == "positive") {
      s = CountFlag(name, v, 0, 100, &o->positive);
    } else if (name == "pool") {
      s = CountFlag(name, v, 1, uint64_t{1} << 32, &o->pool_keys);
    } else if (name == "churn") {
      s = CountFlag(name, v, 1, uint64_t{1} << 40, &o->churn_keys);
    } else if (name == "max-errors") {
      s = CountFlag(name, v, 0, UINT64_MAX, &o->max_errors);
    } else if (name == "seed") {
      s = CountFlag(name, v, 0, UINT64_MAX, &o->seed);
    } else if (name == "duration") {
      s = DurationFlag(name, v, false, &o->duration);
      duration_set = true;
    } else if (name == "requests") {
      s = CountFlag(name, v, 1, uint64_t{1} << 50, &o->requests);
    } else if (name == "warmup") {
      s = DurationFlag(name, v, true, &o->warmup);
    } else if (name == "filter") {
      if (v.empty()) return UsageError("--filter is empty");
      o->filter = v;
    } else if (name == "create") {
      s = CountFlag(name, v, 1, uint64_t{1} << 40, &o->create);
    } else if (name == "fpr") {
      if (!absl::SimpleAtod(v, &o->fpr) || !(o->fpr > 0 && o->fpr < 1)) {
        return UsageError("--%s=%s: must be a rate between 0 and 1, such as 0.001", name, v);
      }
      fpr_set = true;
    } else if (name == "semi-sort") {
      if (v != "true" && v != "false") {
        return UsageError("--semi-sort=%s: must be true or false", v);
      }
      o->semi_sort = v == "true";
    } else if (name == "pin-cpu") {
      s = ParseCpuList(v, &o->pin_cpus);
    } else if (name == "json") {
      if (v.empty()) return UsageError("--json is empty");
      o->json = v;
    } else if (name == "token") {
      if (absl::Status t = client::ValidateToken(v); !t.ok()) {
        return UsageError("--token: %s", t.message());
      }
      o->token = v;
    } else if (name == "ca" || name == "cert" || name == "key" || name == "tls-server-name") {
      if (v.empty()) return UsageError("--%s is empty", name);
      (name == "ca"     ? o->ca
       : name == "cert" ? o->cert
       : name == "key"  ? o->key
                        : o->tls_server_name) = v;
    } else {
      return UsageError("unknown flag --%s", name);
    }
    if (!s.ok()) return s;
  }
  if (duration_set && o->requests > 0) {
    return UsageError("--duration and --requests exclude each other");
  }
  if (fpr_set && o->create == 0) {
    return UsageError("--fpr only applies with --create");
  }
  if (o->semi_sort.has_value() && o->create == 0) {
    return UsageError("--semi-sort only applies with --create");
  }
  if (o->threads > o->connections) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "--threads=%d is more than --connections=%d: each connection is driven by one thread",
        o->threads, o->connections));
  }
  if (o->pool_keys < static_cast<uint64_t>(o->batch)) o->pool_keys = o->batch;
  if (o->tls || !o->ca.empty() || !o->cert.empty() || !o->key.empty()) {
    absl::StatusOr<client::TlsOptions> tls = client::LoadTlsFiles(o->ca, o->cert, o->key);
    if (!tls.ok()) return tls.status();
    o->tls_options = *std::move(tls);
    o->tls_options.server_name = o->tls_server_name;
  } else if (!o->tls_server_name.empty()) {
    return UsageError("--tls-server-name needs TLS: give --tls, or --ca");
  }
  return absl::OkStatus();
}

// ---------------------------------------------------------------------------
// Statistics.

// Error slots: the 17 gRPC status codes, then a response that does not match
// its request (wrong number of results, unparseable).
constexpr int kBadResponse = 17;
constexpr int kErrorSlots = 18;

std::string ErrorName(int slot) {
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

// ---------------------------------------------------------------------------
// The load engine.

enum class Phase { kPopulate, kPrime, kRun, kCleanup };
enum Stage : int { kWarmup = 0, kMeasure = 1, kStop = 2 };

// A pre-built lookup/count request.
struct PoolRequest {
  grpc::ByteBuffer payload;
  std::vector<uint64_t> must_be_present;  // Bit i: key i is a present key.
  uint32_t present_keys = 0;
};

// A connection's insert/delete window (see the header comment). Touched only
// by the thread driving the connection, and by the main thread between phases.
struct Churn {
  std::vector<grpc::ByteBuffer> payloads;  // One per batch.
  std::deque<uint32_t> free;
  std::deque<uint32_t> inserted;
  uint64_t retired = 0;
  uint32_t to_prime = 0;
};

struct Connection {
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<grpc::GenericStub> stub;
  Churn churn;
};

// A call slot: one request in flight at a time.
struct Call {
  Connection* conn = nullptr;
  Op op = kLookup;
  uint32_t item = 0;  // Pool request or churn batch.
  uint32_t keys = 0;
  bool measured = false;
  int64_t start_ns = 0;
  grpc::ByteBuffer request;
  std::optional<grpc::ClientContext> ctx;
  std::unique_ptr<grpc::GenericClientAsyncResponseReader> reader;
  grpc::ByteBuffer response;
  grpc::Status status;
};

struct Worker {
  explicit Worker(uint64_t seed) : rng(seed) {}
  grpc::CompletionQueue cq;
  std::vector<std::unique_ptr<Call>> calls;
  Rng rng;
  size_t lookup_cursor = 0;
  size_t count_cursor = 0;
  int in_flight = 0;
  PhaseStats measured;
  PhaseStats unmeasured;
  // Reused, so parsing allocates nothing once warm.
  v1::InsertResponse insert_resp;
  v1::LookupResponse lookup_resp;
  v1::DeleteResponse delete_resp;
  v1::CountResponse count_resp;
};

template <typename M>
bool Parse(grpc::ByteBuffer* buffer, M* msg) {
  return grpc::SerializationTraits<M>::Deserialize(buffer, msg).ok();
}

uint64_t Bit(const std::vector<uint64_t>& bits, size_t i) { return (bits[i >> 6] >> (i & 63)) & 1; }

// Bit i = b[i], for n <= 64 bools (each 0 or 1). Eight at a time: the
// multiplication moves byte k's low bit to bit 56 + k, with no carries.
uint64_t PackBools(const bool* b, uint32_t n) {
  uint64_t mask = 0;
  uint32_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t x;
    std::memcpy(&x, b + i, 8);
    mask |= ((x * 0x0102040810204080ull) >> 56) << i;
  }
  for (; i < n; ++i) mask |= static_cast<uint64_t>(b[i]) << i;
  return mask;
}

class Bench {
 public:
  explicit Bench(const Options& o) : o_(o) {}

  absl::Status Connect() {
    conns_.resize(o_.connections);
    // Several servers (a cluster's replicas): connection c goes to the
    // (c mod n)-th, so the load is spread evenly over them.
    const std::vector<std::string> targets = absl::StrSplit(o_.target, ',', absl::SkipEmpty());
    for (int c = 0; c < o_.connections; ++c) {
      grpc::ChannelArguments args;
      // Channels with equal arguments would share one subchannel, i.e. one
      // TCP connection; a local pool plus a distinct argument prevents that.
      args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
      args.SetInt("cuckoo_bench.connection", c);
      args.SetMaxReceiveMessageSize(-1);
      args.SetMaxSendMessageSize(-1);
      std::shared_ptr<grpc::ChannelCredentials> credentials =
          client::ChannelCredentials(o_.tls_options, args);
      conns_[c].channel = grpc::CreateCustomChannel(targets[c % targets.size()], credentials, args);
      conns_[c].stub = std::make_unique<grpc::GenericStub>(conns_[c].channel);
    }
    for (int c = 0; c < o_.connections; ++c) {
      if (!conns_[c].channel->WaitForConnected(
              absl::ToChronoTime(absl::Now() + absl::Seconds(10)))) {
        return absl::UnavailableError(absl::StrFormat("connection %d to %s not ready after 10s", c,
                                                      targets[c % targets.size()]));
      }
    }
    return absl::OkStatus();
  }

  // The lookup/count pool: --pool keys, in at most kMaxPoolRequests requests
  // (small batches would otherwise make millions of tiny slices) and at
  // least two per call slot.
  void BuildPool() {
    constexpr uint64_t kMaxPoolRequests = 65536;
    const uint64_t min_requests = 2 * static_cast<uint64_t>(o_.connections) * o_.depth;
    const uint64_t n = std::max<uint64_t>(
        std::min((o_.pool_keys + o_.batch - 1) / o_.batch, kMaxPoolRequests), min_requests);
    pool_.resize(n);
    Rng rng(SplitMix64(o_.seed ^ 0x706F6F6CULL));
    std::vector<uint64_t> indices(o_.batch);
    for (PoolRequest& r : pool_) {
      r.must_be_present.assign((o_.batch + 63) / 64, 0);
      for (int k = 0; k < o_.batch; ++k) {
        const uint64_t a = rng.Next();
        const uint64_t b = rng.Next();
        if (static_cast<int>(a % 100) < o_.positive) {
          indices[k] = b % o_.keyspace;
          r.must_be_present[k >> 6] |= uint64_t{1} << (k & 63);
          ++r.present_keys;
        } else {
          indices[k] = kAbsentBase | (b >> 1);
        }
      }
      r.payload = EncodeKeysRequest(o_.filter, o_.key_bytes, o_.batch,
                                    [&indices](size_t i) { return indices[i]; });
    }
  }
  size_t pool_requests() const { return pool_.size(); }

  // `batches` churn batches per connection, all FREE.
  void BuildChurn(uint32_t batches) {
    for (int c = 0; c < o_.connections; ++c) {
      Churn& ch = conns_[c].churn;
      ch.payloads.resize(batches);
      for (uint32_t b = 0; b < batches; ++b) {
        const uint64_t first =
            kChurnBase + (static_cast<uint64_t>(c) * batches + b) * static_cast<uint64_t>(o_.batch);
        ch.payloads[b] = EncodeKeysRequest(o_.filter, o_.key_bytes, o_.batch,
                                           [first](size_t i) { return first + i; });
        ch.free.push_back(b);
      }
      // With deletes in the mix, start half full (full for delete only).
      ch.to_prime = o_.uses(kDelete) ? (o_.uses(kInsert) ? batches / 2 : batches) : 0;
    }
  }
  uint64_t churn_retired() const {
    uint64_t n = 0;
    for (const Connection& c : conns_) n += c.churn.retired;
    return n;
  }
  uint64_t churn_inserted_batches() const {
    uint64_t n = 0;
    for (const Connection& c : conns_) n += c.churn.inserted.size();
    return n;
  }

  PhaseResult RunPhase(Phase phase, bool populate_if_absent = false) {
    phase_ = phase;
    populate_if_absent_ = populate_if_absent;
    populate_batches_ = (o_.keyspace + o_.batch - 1) / o_.batch;
    next_populate_.store(0);
    issued_.store(0);
    errors_.store(0);
    const bool warmup = phase == Phase::kRun && o_.warmup > absl::ZeroDuration();
    stage_.store(warmup ? kWarmup : kMeasure);

    std::vector<std::unique_ptr<Worker>> workers;
    for (int t = 0; t < o_.threads; ++t) {
      auto w = std::make_unique<Worker>(
          SplitMix64(o_.seed * 31 + t * 7 + static_cast<int>(phase) * 1'000'003));
      for (int c = t; c < o_.connections; c += o_.threads) {
        for (int d = 0; d < o_.depth; ++d) {
          w->calls.push_back(std::make_unique<Call>());
          w->calls.back()->conn = &conns_[c];
        }
      }
      // Spread the threads over the pool.
      w->lookup_cursor = pool_.empty() ? 0 : pool_.size() * t / o_.threads;
      w->count_cursor = pool_.empty() ? 0 : pool_.size() * (2 * t + 1) / (2 * o_.threads);
      workers.push_back(std::move(w));
    }

    PhaseResult result;
    const double cpu0 = CpuSeconds();
    const int64_t start = NowNs();
    int64_t t0 = start;
    std::atomic<int> done{0};
    std::vector<std::thread> threads;
    for (auto& w : workers) {
      threads.emplace_back([this, &w, &done] {
        Drive(*w);
        done.fetch_add(1);
      });
    }
    auto wait_until = [&](int64_t until_ns) {
      while (done.load() < o_.threads && NowNs() < until_ns) {
        std::this_thread::sleep_for(std::chrono::milliseconds(2));
      }
      return done.load() < o_.threads;  // Still running.
    };
    bool ran_to_end = true;
    if (phase == Phase::kRun) {
      if (warmup) {
        ran_to_end = wait_until(start + absl::ToInt64Nanoseconds(o_.warmup));
        t0 = NowNs();
        // Not over a kStop that --max-errors set during the warmup.
        int expected = kWarmup;
        stage_.compare_exchange_strong(expected, kMeasure, std::memory_order_release);
      }
      if (ran_to_end && o_.requests == 0) {
        ran_to_end = wait_until(t0 + absl::ToInt64Nanoseconds(o_.duration));
        stage_.store(kStop, std::memory_order_release);
      }
    }
    for (std::thread& t : threads) t.join();
    result.cpu_s = CpuSeconds() - cpu0;
    for (auto& w : workers) {
      result.measured.Merge(w->measured);
      result.unmeasured.Merge(w->unmeasured);
    }
    if (result.measured.end_ns > t0) result.elapsed_s = (result.measured.end_ns - t0) / 1e9;
    if (o_.max_errors > 0 && errors_.load() >= o_.max_errors) {
      result.stopped_early = absl::StrFormat("%u requests failed (--max-errors)", errors_.load());
    } else if (phase == Phase::kRun) {
      const OpStats total = result.measured.Total();
      const bool short_of_requests =
          o_.requests > 0 && total.requests + total.errors_total() < o_.requests;
      if (!ran_to_end || short_of_requests) {
        result.stopped_early =
            "no operation of the mix had work left: inserts need a FREE churn batch, deletes an "
            "INSERTED one (raise --churn, or mix inserts with deletes)";
      }
    }
    return result;
  }

 private:
  // Thread body: issues on every slot, then re-issues on each completion
  // until no slot has anything in flight.
  void Drive(Worker& w) {
    for (auto& call : w.calls) Issue(w, *call);
    void* tag = nullptr;
    bool ok = false;
    while (w.in_flight > 0) {
      if (!w.cq.Next(&tag, &ok)) break;
      Call& call = *static_cast<Call*>(tag);
      --w.in_flight;
      Complete(w, call, NowNs());
      Issue(w, call);
    }
    w.cq.Shutdown();
    while (w.cq.Next(&tag, &ok)) {
    }
    for (auto& call : w.calls) {
      call->reader.reset();
      call->ctx.reset();
    }
  }

  void Issue(Worker& w, Call& call) {
    const int stage = stage_.load(std::memory_order_acquire);
    if (stage == kStop) return;
    const bool measured = stage == kMeasure;
    if (measured && phase_ == Phase::kRun && o_.requests > 0 &&
        issued_.fetch_add(1, std::memory_order_relaxed) >= o_.requests) {
      stage_.store(kStop, std::memory_order_relaxed);
      return;
    }
    if (!Next(w, call)) return;
    call.measured = measured;
    call.reader.reset();
    call.ctx.reset();
    call.ctx.emplace();
    call.ctx->set_deadline(absl::ToChronoTime(absl::Now() + o_.timeout));
    client::AddToken(o_.token, *call.ctx);
    call.start_ns = NowNs();
    call.reader =
        call.conn->stub->PrepareUnaryCall(&*call.ctx, Method(call.op), call.request, &w.cq);
    call.reader->StartCall();
    call.reader->Finish(&call.response, &call.status, &call);
    ++w.in_flight;
  }

  // Picks the slot's next request; false if there is none.
  bool Next(Worker& w, Call& call) {
    Churn& churn = call.conn->churn;
    switch (phase_) {
      case Phase::kPopulate: {
        const uint64_t b = next_populate_.fetch_add(1, std::memory_order_relaxed);
        if (b >= populate_batches_) return false;
        const uint64_t first = b * o_.batch;
        call.op = kInsert;
        call.keys = static_cast<uint32_t>(std::min<uint64_t>(o_.batch, o_.keyspace - first));
        call.request = EncodeKeysRequest(
            o_.filter, o_.key_bytes, call.keys, [first](size_t i) { return first + i; },
            populate_if_absent_);
        return true;
      }
      case Phase::kPrime:
        if (churn.to_prime == 0 || churn.free.empty()) return false;
        --churn.to_prime;
        return TakeChurn(kInsert, call);
      case Phase::kCleanup:
        return TakeChurn(kDelete, call);
      case Phase::kRun:
        break;
    }
    std::array<uint64_t, kNumOps> w8;
    uint64_t total = 0;
    for (int op = 0; op < kNumOps; ++op) {
      w8[op] = o_.weights[op];
      if (op == kInsert && churn.free.empty()) w8[op] = 0;
      if (op == kDelete && churn.inserted.empty()) w8[op] = 0;
      total += w8[op];
    }
    if (total == 0) return false;
    uint64_t r = w.rng.Next() % total;
    int op = 0;
    while (r >= w8[op]) r -= w8[op++];
    switch (op) {
      case kLookup:
      case kCount: {
        size_t& cursor = op == kLookup ? w.lookup_cursor : w.count_cursor;
        if (++cursor >= pool_.size()) cursor = 0;
        call.op = static_cast<Op>(op);
        call.item = static_cast<uint32_t>(cursor);
        call.keys = o_.batch;
        call.request = pool_[cursor].payload;
        return true;
      }
      default:
        return TakeChurn(static_cast<Op>(op), call);
    }
  }

  // Insert: the oldest FREE batch; delete: the oldest INSERTED one.
  bool TakeChurn(Op op, Call& call) {
    Churn& churn = call.conn->churn;
    std::deque<uint32_t>& from = op == kInsert ? churn.free : churn.inserted;
    if (from.empty()) return false;
    call.op = op;
    call.item = from.front();
    from.pop_front();
    call.keys = o_.batch;
    call.request = churn.payloads[call.item];
    return true;
  }

  void Complete(Worker& w, Call& call, int64_t end_ns) {
    PhaseStats& ps = call.measured ? w.measured : w.unmeasured;
    OpStats& s = ps.ops[call.op];
    if (call.measured) ps.end_ns = std::max(ps.end_ns, end_ns);
    const bool churn = phase_ != Phase::kPopulate && (call.op == kInsert || call.op == kDelete);
    Churn& ch = call.conn->churn;
    auto error = [&](int slot, std::string message) {
      s.Error(slot, std::move(message));
      // A churn batch may be half applied: never delete it.
      if (churn) ++ch.retired;
      if (o_.max_errors > 0 &&
          errors_.fetch_add(1, std::memory_order_relaxed) + 1 >= o_.max_errors) {
        stage_.store(kStop, std::memory_order_relaxed);
      }
    };
    auto bad = [&](const char* what, int got) {
      error(kBadResponse, absl::StrFormat("%s response with %d %s for %u keys", kOpNames[call.op],
                                          got, what, call.keys));
    };
    if (!call.status.ok()) return error(call.status.error_code(), call.status.error_message());
    // Only successful requests count as served, and for latency.
    if (call.measured) {
      ++s.requests;
      s.keys += call.keys;
      s.latency.Record(static_cast<uint64_t>(end_ns - call.start_ns));
    }
    switch (call.op) {
      case kLookup: {
        v1::LookupResponse& r = w.lookup_resp;
        if (!Parse(&call.response, &r) || r.present_size() != static_cast<int>(call.keys)) {
          return bad("results", r.present_size());
        }
        const PoolRequest& pr = pool_[call.item];
        const bool* present = r.present().data();
        // 64 keys at a time, without branches: half the keys are present, at
        // random, so a branch per key would mispredict half the time.
        for (uint32_t base = 0; base < call.keys; base += 64) {
          const uint64_t must = pr.must_be_present[base >> 6];
          const uint64_t got = PackBools(present + base, std::min<uint32_t>(64, call.keys - base));
          s.false_negatives += std::popcount(must & ~got);
          s.absent_hits += std::popcount(got & ~must);
        }
        s.present_keys += pr.present_keys;
        s.absent_keys += call.keys - pr.present_keys;
        break;
      }
      case kCount: {
        v1::CountResponse& r = w.count_resp;
        if (!Parse(&call.response, &r) || r.counts_size() != static_cast<int>(call.keys)) {
          return bad("counts", r.counts_size());
        }
        const PoolRequest& pr = pool_[call.item];
        const uint32_t* counts = r.counts().data();
        for (uint32_t i = 0; i < call.keys; ++i) {
          const uint64_t must = Bit(pr.must_be_present, i);
          const uint64_t hit = counts[i] != 0;
          s.false_negatives += must & (hit ^ 1);
          s.absent_hits += (must ^ 1) & hit;
        }
        s.present_keys += pr.present_keys;
        s.absent_keys += call.keys - pr.present_keys;
        break;
      }
      case kInsert: {
        v1::InsertResponse& r = w.insert_resp;
        if (!Parse(&call.response, &r) || r.results_size() != static_cast<int>(call.keys)) {
          return bad("results", r.results_size());
        }
        s.inserted += r.inserted();
        s.already_present += r.already_present();
        s.full += r.full();
        if (churn) {
          if (r.inserted() == call.keys) {
            ch.inserted.push_back(call.item);
          } else {
            ++ch.retired;
          }
        }
        break;
      }
      case kDelete: {
        v1::DeleteResponse& r = w.delete_resp;
        if (!Parse(&call.response, &r) || r.results_size() != static_cast<int>(call.keys)) {
          return bad("results", r.results_size());
        }
        s.deleted += r.deleted();
        s.not_found += r.not_found();
        // Every key of the batch was inserted: each delete must find it.
        s.false_negatives += r.not_found();
        ch.free.push_back(call.item);
        break;
      }
    }
  }

  const Options& o_;
  std::vector<Connection> conns_;
  std::vector<PoolRequest> pool_;
  Phase phase_ = Phase::kRun;
  bool populate_if_absent_ = false;
  uint64_t populate_batches_ = 0;
  std::atomic<int> stage_{kMeasure};
  std::atomic<uint64_t> issued_{0};
  std::atomic<uint64_t> errors_{0};
  std::atomic<uint64_t> next_populate_{0};
};

// ---------------------------------------------------------------------------
// Reporting.

double Rate(uint64_t n, double seconds) { return seconds > 0 ? n / seconds : 0; }
double Us(uint64_t ns) { return ns / 1e3; }

// A small JSON writer: nested objects, two-space indentation.
class JsonWriter {
 public:
  void Begin(const char* key = nullptr) {
    Prefix(key);
    out_ += '{';
    first_.push_back(true);
  }
  void End() {
    const bool empty = first_.back();
    first_.pop_back();
    if (!empty) Newline();
    out_ += '}';
  }
  void Num(const char* key, double v) {
    Prefix(key);
    out_ += std::isfinite(v) ? absl::StrFormat("%.10g", v) : "null";
  }
  void Int(const char* key, uint64_t v) {
    Prefix(key);
    out_ += absl::StrCat(v);
  }
  void Str(const char* key, const std::string& v) {
    Prefix(key);
    Quote(v);
  }
  void Bool(const char* key, bool v) {
    Prefix(key);
    out_ += v ? "true" : "false";
  }
  void Null(const char* key) {
    Prefix(key);
    out_ += "null";
  }
  std::string str() const { return out_ + "\n"; }

 private:
  void Newline() {
    out_ += '\n';
    out_.append(2 * first_.size(), ' ');
  }
  void Prefix(const char* key) {
    if (!first_.empty()) {
      if (!first_.back()) out_ += ',';
      first_.back() = false;
      Newline();
    }
    if (key != nullptr) {
      Quote(key);
      out_ += ": ";
    }
  }
  void Quote(std::string_view s) { out_ += JsonString(s); }

  std::string out_;
  std::vector<bool> first_;
};

void WriteOpJson(JsonWriter& j, const char* key, const OpStats& s, double elapsed, int op) {
  j.Begin(key);
  j.Int("requests", s.requests);
  j.Int("keys", s.keys);
  j.Num("keys_per_s", Rate(s.keys, elapsed));
  j.Num("requests_per_s", Rate(s.requests, elapsed));
  j.Int("errors_total", s.errors_total());
  j.Begin("errors");
  for (int e = 0; e < kErrorSlots; ++e) {
    if (s.errors[e] > 0) j.Int(ErrorName(e).c_str(), s.errors[e]);
  }
  j.End();
  j.Begin("error_messages");
  for (int e = 0; e < kErrorSlots; ++e) {
    if (s.errors[e] > 0) j.Str(ErrorName(e).c_str(), s.first_error[e]);
  }
  j.End();
  j.Int("false_negatives", s.false_negatives);
  if (op < 0 || op == kLookup || op == kCount) {
    j.Int("present_keys", s.present_keys);
    j.Int("absent_keys", s.absent_keys);
    j.Int("absent_hits", s.absent_hits);
    j.Num("observed_false_positive_rate",
          s.absent_keys > 0 ? static_cast<double>(s.absent_hits) / s.absent_keys : 0);
  }
  if (op < 0 || op == kInsert) {
    j.Int("inserted", s.inserted);
    j.Int("already_present", s.already_present);
    j.Int("full", s.full);
  }
  if (op < 0 || op == kDelete) {
    j.Int("deleted", s.deleted);
    j.Int("not_found", s.not_found);
  }
  j.Begin("latency_us");
  j.Num("mean", s.latency.mean() / 1e3);
  j.Num("p50", Us(s.latency.Quantile(0.50)));
  j.Num("p90", Us(s.latency.Quantile(0.90)));
  j.Num("p99", Us(s.latency.Quantile(0.99)));
  j.Num("p999", Us(s.latency.Quantile(0.999)));
  j.Num("max", Us(s.latency.max()));
  j.End();
  j.End();
}

void PrintHeaderRow() {
  absl::PrintF("  %-8s %9s %11s %11s %9s %6s %9s %9s %9s %9s %9s\n", "op", "requests", "keys",
               "keys/s", "req/s", "errors", "p50 us", "p90 us", "p99 us", "p99.9 us", "max us");
}

void PrintRow(const char* name, const OpStats& s, double elapsed) {
  absl::PrintF("  %-8s %9u %11u %11.0f %9.1f %6u %9.1f %9.1f %9.1f %9.1f %9.1f\n", name, s.requests,
               s.keys, Rate(s.keys, elapsed), Rate(s.requests, elapsed), s.errors_total(),
               Us(s.latency.Quantile(0.5)), Us(s.latency.Quantile(0.9)),
               Us(s.latency.Quantile(0.99)), Us(s.latency.Quantile(0.999)), Us(s.latency.max()));
}

void PrintErrors(const char* name, const OpStats& s) {
  for (int e = 0; e < kErrorSlots; ++e) {
    if (s.errors[e] > 0) {
      absl::PrintF("  %s errors: %u x %s, first: %s\n", name, s.errors[e], ErrorName(e),
                   s.first_error[e]);
    }
  }
}

// ---------------------------------------------------------------------------

std::string Code(const absl::Status& s) { return absl::StatusCodeToString(s.code()); }

int Main(int argc, char** argv) {
  Options o;
  bool help = false;
  if (absl::Status s = ParseFlags(argc, argv, &o, &help); !s.ok()) {
    absl::FPrintF(stderr, "cuckoo-bench: %s\nTry cuckoo-bench --help.\n", s.message());
    return 2;
  }
  if (help) {
    absl::PrintF("%s", kHelp);
    return 0;
  }
  // First, before gRPC starts a thread: they all inherit the pinning.
  if (!o.pin_cpus.empty()) {
    if (absl::Status s = PinToCpus(o.pin_cpus); !s.ok()) {
      absl::FPrintF(stderr, "cuckoo-bench: %s\n", s.message());
      return 2;
    }
  }
  // gRPC locks absl::Mutexes on every call; Debian's abseil checks each lock
  // for deadlock cycles (GraphCycles), a few percent of this process's CPU.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);

  // Control calls (server info, create, filter info) go over an ordinary client.
  auto admin = client::Client::Connect(
      o.target, {.timeout = absl::Seconds(10), .token = o.token, .tls = o.tls_options});
  absl::StatusOr<v1::GetServerInfoResponse> server = admin->ServerInfo();
  if (!server.ok()) {
    absl::FPrintF(stderr, "cuckoo-bench: cannot reach cuckood at %s: %s: %s\n", o.target,
                  Code(server.status()), server.status().message());
    return 1;
  }
  if (static_cast<uint64_t>(o.batch) > server->max_batch_keys()) {
    absl::FPrintF(stderr,
                  "cuckoo-bench: --batch=%d is over the server's max_batch_keys (%u)\n"
                  "Try cuckoo-bench --help.\n",
                  o.batch, server->max_batch_keys());
    return 2;
  }
  if (static_cast<uint64_t>(o.key_bytes) > server->max_key_bytes()) {
    absl::FPrintF(stderr,
                  "cuckoo-bench: --key-bytes=%d is over the server's max_key_bytes (%u)\n"
                  "Try cuckoo-bench --help.\n",
                  o.key_bytes, server->max_key_bytes());
    return 2;
  }
  if (const size_t bytes = KeysRequestSize(o.filter, o.key_bytes, o.batch, true);
      bytes > server->max_message_bytes()) {
    absl::FPrintF(stderr,
                  "cuckoo-bench: a request of %d %d-byte keys is %u bytes, over the server's "
                  "max_message_bytes (%u): lower --batch\n",
                  o.batch, o.key_bytes, bytes, server->max_message_bytes());
    return 2;
  }

  if (o.create > 0) {
    v1::CreateFilterRequest req;
    req.set_name(o.filter);
    req.set_capacity(o.create);
    if (o.fpr > 0) req.set_false_positive_rate(o.fpr);
    if (o.semi_sort.has_value()) req.set_semi_sort(*o.semi_sort);
    req.set_if_not_exists(true);
    absl::StatusOr<v1::CreateFilterResponse> created = admin->CreateFilter(req);
    if (!created.ok()) {
      absl::FPrintF(stderr, "cuckoo-bench: cannot create filter \"%s\" on %s: %s: %s\n", o.filter,
                    o.target, Code(created.status()), created.status().message());
      return 1;
    }
  }
  absl::StatusOr<v1::FilterInfo> info = admin->GetFilter(o.filter);
  if (!info.ok()) {
    if (absl::IsNotFound(info.status())) {
      absl::FPrintF(stderr,
                    "cuckoo-bench: filter \"%s\" not found on %s (NOT_FOUND: %s); create it with "
                    "--create=CAPACITY\n",
                    o.filter, o.target, info.status().message());
    } else {
      absl::FPrintF(stderr, "cuckoo-bench: cannot get filter \"%s\" from %s: %s: %s\n", o.filter,
                    o.target, Code(info.status()), info.status().message());
    }
    return 1;
  }
  const bool reads = o.uses(kLookup) || o.uses(kCount);
  if (reads && o.positive > 0 && !o.populate && info->items() < o.keyspace) {
    absl::FPrintF(stderr,
                  "cuckoo-bench: filter \"%s\" holds %u items, fewer than --keyspace=%u, whose "
                  "keys lookups expect present: add --populate, or --positive=0\n"
                  "Try cuckoo-bench --help.\n",
                  o.filter, info->items(), o.keyspace);
    return 2;
  }

  absl::PrintF(
      "cuckoo-bench: %s (cuckood %s), filter \"%s\" (capacity %u, %u items), %d connections x "
      "depth %d, %d thread%s, batch %d, %d-byte keys%s\n",
      o.target, server->version(), o.filter, info->capacity(), info->items(), o.connections,
      o.depth, o.threads, o.threads == 1 ? "" : "s", o.batch, o.key_bytes,
      o.pin_cpus.empty() ? "" : absl::StrCat(", pinned to CPU ", absl::StrJoin(o.pin_cpus, ",")));

  Bench bench(o);
  if (absl::Status s = bench.Connect(); !s.ok()) {
    absl::FPrintF(stderr, "cuckoo-bench: %s\n", s.message());
    return 1;
  }

  JsonWriter j;
  j.Begin();
  j.Str("tool", "cuckoo-bench");
  j.Begin("config");
  j.Str("target", o.target);
  j.Str("filter", o.filter);
  j.Int("connections", o.connections);
  j.Int("depth", o.depth);
  j.Int("threads", o.threads);
  j.Int("batch", o.batch);
  j.Int("key_bytes", o.key_bytes);
  j.Str("pin_cpus", absl::StrJoin(o.pin_cpus, ","));
  j.Begin("mix");
  for (int op = 0; op < kNumOps; ++op) {
    if (o.uses(static_cast<Op>(op))) j.Int(kOpNames[op], o.weights[op]);
  }
  j.End();
  j.Int("keyspace", o.keyspace);
  j.Int("positive_percent", o.positive);
  j.Num("duration_s", o.requests > 0 ? 0 : absl::ToDoubleSeconds(o.duration));
  j.Int("requests", o.requests);
  j.Num("warmup_s", absl::ToDoubleSeconds(o.warmup));
  j.Int("create", o.create);
  j.Num("fpr", o.fpr);
  if (o.semi_sort.has_value()) j.Bool("semi_sort", *o.semi_sort);
  j.Bool("populate", o.populate);
  j.Int("seed", o.seed);
  j.End();
  j.Begin("server");
  j.Str("version", server->version());
  j.Int("max_batch_keys", server->max_batch_keys());
  j.Int("max_key_bytes", server->max_key_bytes());
  j.End();

  uint64_t errors = 0;
  uint64_t false_negatives = 0;
  bool failed = false;

  if (o.populate) {
    const bool if_absent = info->items() > 0;
    absl::PrintF("populate: inserting keys 0..%u%s\n", o.keyspace - 1,
                 if_absent ? " with if_absent (the filter is not empty)" : "");
    PhaseResult p = bench.RunPhase(Phase::kPopulate, if_absent);
    const OpStats& s = p.measured.ops[kInsert];
    absl::PrintF(
        "populate: %u keys in %u requests, %.2f s: %.0f keys/s, %.1f req/s; %u inserted, %u "
        "already present, %u full; latency us p50 %.1f p99 %.1f max %.1f; client CPU %.2f "
        "cores\n",
        s.keys, s.requests, p.elapsed_s, Rate(s.keys, p.elapsed_s), Rate(s.requests, p.elapsed_s),
        s.inserted, s.already_present, s.full, Us(s.latency.Quantile(0.5)),
        Us(s.latency.Quantile(0.99)), Us(s.latency.max()),
        p.elapsed_s > 0 ? p.cpu_s / p.elapsed_s : 0);
    PrintErrors("populate", s);
    errors += p.errors();
    WriteOpJson(j, "populate", s, p.elapsed_s, kInsert);
    if (s.full > 0 || s.errors_total() > 0) {
      absl::FPrintF(stderr,
                    "cuckoo-bench: populate failed (%u keys did not fit, %u requests failed): "
                    "lookups of those keys would be false negatives; stopping\n",
                    s.full, s.errors_total());
      failed = true;
    }
  } else {
    j.Null("populate");
  }

  PhaseResult run;
  if (!failed && o.churns()) {
    info = admin->GetFilter(o.filter);
    if (!info.ok()) {
      absl::FPrintF(stderr, "cuckoo-bench: cannot get filter \"%s\": %s: %s\n", o.filter,
                    Code(info.status()), info.status().message());
      return 1;
    }
    const uint64_t room = info->capacity() > info->items() ? info->capacity() - info->items() : 0;
    const uint64_t per_slot = static_cast<uint64_t>(o.connections) * o.batch;
    const uint64_t need = 2 * per_slot * o.depth;
    uint64_t churn = o.churn_keys > 0 ? o.churn_keys : std::min<uint64_t>(1'000'000, room / 2);
    if (o.churn_keys > room) {
      absl::FPrintF(stderr,
                    "cuckoo-bench: --churn=%u is more than the filter's free capacity (%u keys)\n",
                    o.churn_keys, room);
      return 2;
    }
    churn = std::max(churn, std::min(need, room));
    if (churn < need) {
      absl::FPrintF(stderr,
                    "cuckoo-bench: the insert/delete window needs at least 2 x depth x "
                    "connections x batch = %u keys of free capacity; filter \"%s\" has %u: "
                    "create a larger filter, or lower --depth or --batch\n",
                    need, o.filter, room);
      return 2;
    }
    const uint32_t batches = static_cast<uint32_t>(churn / per_slot);
    const int64_t t = NowNs();
    bench.BuildChurn(batches);
    absl::PrintF("churn window: %u keys (%u batches per connection), built in %.2f s\n",
                 static_cast<uint64_t>(batches) * per_slot, batches, (NowNs() - t) / 1e9);
    if (o.uses(kDelete)) {
      PhaseResult prime = bench.RunPhase(Phase::kPrime);
      const OpStats& s = prime.measured.ops[kInsert];
      absl::PrintF("churn window: %u keys inserted before the run (deletes need them)\n",
                   s.inserted);
      PrintErrors("prime", s);
      errors += prime.errors();
    }
  }
  if (!failed && reads) {
    const int64_t t = NowNs();
    bench.BuildPool();
    absl::PrintF("lookup/count pool: %u requests, %u keys (%d%% present), built in %.2f s\n",
                 bench.pool_requests(), bench.pool_requests() * o.batch, o.positive,
                 (NowNs() - t) / 1e9);
  }

  if (!failed) {
    absl::PrintF("run: mix %s, %s%s\n", o.MixText(),
                 o.requests > 0 ? absl::StrFormat("%u requests", o.requests)
                                : absl::FormatDuration(o.duration),
                 o.warmup > absl::ZeroDuration()
                     ? absl::StrFormat(" after %s warmup", absl::FormatDuration(o.warmup))
                     : "");
    run = bench.RunPhase(Phase::kRun);
    const double el = run.elapsed_s;
    PrintHeaderRow();
    for (int op = 0; op < kNumOps; ++op) {
      if (o.uses(static_cast<Op>(op))) PrintRow(kOpNames[op], run.measured.ops[op], el);
    }
    const OpStats total = run.measured.Total();
    PrintRow("total", total, el);
    absl::PrintF("  measured %.2f s; client CPU %.2f cores (all its threads, gRPC's included)\n",
                 el, el > 0 ? run.cpu_s / el : 0);
    for (int op = 0; op < kNumOps; ++op) {
      const OpStats& s = run.measured.ops[op];
      if (!o.uses(static_cast<Op>(op))) continue;
      if (op == kLookup || op == kCount) {
        absl::PrintF(
            "  %s: %u present keys, %u false negatives; %u absent keys, %u answered %s "
            "(%.4f%%)\n",
            kOpNames[op], s.present_keys, s.false_negatives, s.absent_keys, s.absent_hits,
            op == kLookup ? "true" : "count > 0",
            s.absent_keys > 0 ? 100.0 * s.absent_hits / s.absent_keys : 0.0);
      } else if (op == kInsert) {
        absl::PrintF("  insert: %u inserted, %u full\n", s.inserted, s.full);
      } else {
        absl::PrintF("  delete: %u deleted, %u not found (false negatives)\n", s.deleted,
                     s.not_found);
      }
      PrintErrors(kOpNames[op], s);
    }
    const OpStats warm = run.unmeasured.Total();
    if (warm.errors_total() > 0 || warm.false_negatives > 0) {
      absl::PrintF("  warmup: %u errors, %u false negatives\n", warm.errors_total(),
                   warm.false_negatives);
      for (int op = 0; op < kNumOps; ++op) PrintErrors(kOpNames[op], run.unmeasured.ops[op]);
    }
    if (!run.stopped_early.empty()) absl::PrintF("  stopped early: %s\n", run.stopped_early);
    errors += run.errors();
    false_negatives += run.false_negatives();

    j.Begin("run");
    j.Num("elapsed_s", el);
    j.Num("client_cpu_cores", el > 0 ? run.cpu_s / el : 0);
    if (run.stopped_early.empty()) {
      j.Null("stopped_early");
    } else {
      j.Str("stopped_early", run.stopped_early);
    }
    j.Begin("ops");
    for (int op = 0; op < kNumOps; ++op) {
      if (o.uses(static_cast<Op>(op))) {
        WriteOpJson(j, kOpNames[op], run.measured.ops[op], el, op);
      }
    }
    j.End();
    WriteOpJson(j, "total", total, el, -1);
    j.Begin("warmup");
    j.Int("requests", warm.requests);
    j.Int("errors_total", warm.errors_total());
    j.Int("false_negatives", warm.false_negatives);
    j.End();
    j.End();

    if (o.churns()) {
      const uint64_t left = bench.churn_inserted_batches();
      PhaseResult cleanup = bench.RunPhase(Phase::kCleanup);
      const OpStats& s = cleanup.measured.ops[kDelete];
      absl::PrintF("cleanup: deleted %u of %u churn keys left inserted", s.deleted, left * o.batch);
      if (bench.churn_retired() > 0) {
        absl::PrintF("; %u batches retired after FULL or an error stay in the filter",
                     bench.churn_retired());
      }
      absl::PrintF("\n");
      PrintErrors("cleanup", s);
      errors += cleanup.errors();
      false_negatives += cleanup.false_negatives();
    }
  } else {
    j.Null("run");
  }

  if (absl::StatusOr<v1::FilterInfo> after = admin->GetFilter(o.filter); after.ok()) {
    absl::PrintF("filter \"%s\": %u items, load factor %.3f, expected false-positive rate %.4f%%\n",
                 o.filter, after->items(), after->load_factor(),
                 100 * after->expected_false_positive_rate());
    j.Begin("filter");
    j.Int("capacity", after->capacity());
    j.Int("items", after->items());
    j.Num("load_factor", after->load_factor());
    j.Num("expected_false_positive_rate", after->expected_false_positive_rate());
    j.Int("fingerprint_bits", after->fingerprint_bits());
    j.Bool("semi_sort", after->semi_sort());
    j.Int("memory_bytes", after->memory_bytes());
    j.End();
  }

  const bool ok = !failed && errors == 0 && false_negatives == 0;
  j.Int("errors", errors);
  j.Int("false_negatives", false_negatives);
  j.Bool("ok", ok);
  j.End();
  absl::PrintF("result: %s (%u errors, %u false negatives)\n", ok ? "OK" : "FAILED", errors,
               false_negatives);
  std::fflush(stdout);
  if (!o.json.empty()) {
    if (o.json == "-") {
      absl::PrintF("%s", j.str());
    } else {
      std::ofstream out(o.json, std::ios::binary | std::ios::trunc);
      out << j.str();
      if (!out.good()) {
        absl::FPrintF(stderr, "cuckoo-bench: cannot write %s\n", o.json);
        return 1;
      }
    }
  }
  return ok ? 0 : 1;
}

}  // namespace
}  // namespace cuckoo::bench

int main(int argc, char** argv) {
  // No OpenSSL cleanup at exit: see cuckooctl's main.
  OPENSSL_init_crypto(OPENSSL_INIT_NO_ATEXIT, nullptr);
  return cuckoo::bench::Main(argc, argv);
}
