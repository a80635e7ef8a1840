#include "client/tools/cuckoo_bench/options.h"

#include <sched.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "base/units.h"

namespace cuckoo::bench {

const char kHelp[] = R"(Usage: cuckoo-bench [flags]

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

namespace {

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

// Which flags were given, for the checks of how they go together.
struct Given {
  bool duration = false;
  bool fpr = false;
};

// Sets flag `name` (dashes) from its value `v`, checked.
absl::Status ParseValueFlag(const std::string& name, const std::string& v, Options* o,
                            Given* given) {
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
    given->duration = true;
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
    given->fpr = true;
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
  return s;
}

// How the flags go together, and the TLS files they name.
absl::Status CheckOptions(Options* o, const Given& given) {
  if (given.duration && o->requests > 0) {
    return UsageError("--duration and --requests exclude each other");
  }
  if (given.fpr && o->create == 0) {
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

}  // namespace

absl::Status ParseFlags(int argc, char** argv, Options* o, bool* help) {
  Given given;
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
    if (absl::Status s = ParseValueFlag(name, *value, o, &given); !s.ok()) return s;
  }
  return CheckOptions(o, given);
}

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

}  // namespace cuckoo::bench
