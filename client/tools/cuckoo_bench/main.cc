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
//  - Pre-built requests (keys.h encodes them, in wire format,
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
//    run: three disjoint index ranges (keys.h).
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
//    latency_histogram.h, at most 1.6% above the truth); failed ones
//    count as errors by status code, and --max-errors of them stop a phase.
//
// Exit status: 0 on success; 1 if any request failed (any phase, warmup
// included), a false negative was seen, populate hit a full filter, or the
// server or filter could not be used; 2 for a usage error.
//
// The files: options (flags, --help), load (the engine), stats (counts),
// report (stdout and --json), keys.h and latency_histogram.h.
#include <openssl/crypto.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "client/cuckoo_client.h"
#include "client/tools/cuckoo_bench/keys.h"
#include "client/tools/cuckoo_bench/load.h"
#include "client/tools/cuckoo_bench/options.h"
#include "client/tools/cuckoo_bench/report.h"
#include "client/tools/cuckoo_bench/stats.h"

namespace cuckoo::bench {
namespace {

namespace v1 = ::cuckoo::v1;

std::string Code(const absl::Status& s) { return absl::StatusCodeToString(s.code()); }

// What the phases found, added up.
struct Outcome {
  uint64_t errors = 0;
  uint64_t false_negatives = 0;
  bool failed = false;  // Populate failed: nothing runs after it.
};

// The server's info, and the flags checked against its limits; the exit
// code to stop with, or nullopt.
std::optional<int> CheckServer(const Options& o, client::Client& admin,
                               v1::GetServerInfoResponse& info) {
  absl::StatusOr<v1::GetServerInfoResponse> server = admin.ServerInfo();
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

  info = *std::move(server);
  return std::nullopt;
}

// Creates the filter (--create), gets its info and checks that lookups can
// expect the keyspace present; the exit code to stop with, or nullopt.
std::optional<int> PrepareFilter(const Options& o, client::Client& admin, v1::FilterInfo& got) {
  if (o.create > 0) {
    v1::CreateFilterRequest req;
    req.set_name(o.filter);
    req.set_capacity(o.create);
    if (o.fpr > 0) req.set_false_positive_rate(o.fpr);
    if (o.semi_sort.has_value()) req.set_semi_sort(*o.semi_sort);
    req.set_if_not_exists(true);
    absl::StatusOr<v1::CreateFilterResponse> created = admin.CreateFilter(req);
    if (!created.ok()) {
      absl::FPrintF(stderr, "cuckoo-bench: cannot create filter \"%s\" on %s: %s: %s\n", o.filter,
                    o.target, Code(created.status()), created.status().message());
      return 1;
    }
  }
  absl::StatusOr<v1::FilterInfo> info = admin.GetFilter(o.filter);
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

  got = *std::move(info);
  return std::nullopt;
}

// The populate phase (--populate): keys 0..keyspace-1.
void Populate(const Options& o, Bench& bench, const v1::FilterInfo& info, JsonWriter& j,
              Outcome& outcome) {
  const bool if_absent = info.items() > 0;
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
  outcome.errors += p.errors();
  WriteOpJson(j, "populate", s, p.elapsed_s, kInsert);
  if (s.full > 0 || s.errors_total() > 0) {
    absl::FPrintF(stderr,
                  "cuckoo-bench: populate failed (%u keys did not fit, %u requests failed): "
                  "lookups of those keys would be false negatives; stopping\n",
                  s.full, s.errors_total());
    outcome.failed = true;
  }
}

// The churn window for inserts and deletes, at most half the filter's free
// capacity, and before the run with deletes the half of it they delete; the
// exit code to stop with, or nullopt.
std::optional<int> PrepareChurn(const Options& o, client::Client& admin, Bench& bench,
                                Outcome& outcome) {
  absl::StatusOr<v1::FilterInfo> info = admin.GetFilter(o.filter);
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
    absl::PrintF("churn window: %u keys inserted before the run (deletes need them)\n", s.inserted);
    PrintErrors("prime", s);
    outcome.errors += prime.errors();
  }
  return std::nullopt;
}

// The measured run, its report, and the cleanup that deletes what the churn
// window left inserted.
void Run(const Options& o, Bench& bench, JsonWriter& j, Outcome& outcome) {
  absl::PrintF("run: mix %s, %s%s\n", o.MixText(),
               o.requests > 0 ? absl::StrFormat("%u requests", o.requests)
                              : absl::FormatDuration(o.duration),
               o.warmup > absl::ZeroDuration()
                   ? absl::StrFormat(" after %s warmup", absl::FormatDuration(o.warmup))
                   : "");
  const PhaseResult run = bench.RunPhase(Phase::kRun);
  PrintRun(o, run);
  outcome.errors += run.errors();
  outcome.false_negatives += run.false_negatives();
  WriteRunJson(j, o, run);
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
    outcome.errors += cleanup.errors();
    outcome.false_negatives += cleanup.false_negatives();
  }
}

// The filter after the run, the result line and --json; the exit code.
int Finish(const Options& o, client::Client& admin, JsonWriter& j, const Outcome& outcome) {
  if (absl::StatusOr<v1::FilterInfo> after = admin.GetFilter(o.filter); after.ok()) {
    ReportFilter(j, o, *after);
  }
  const uint64_t errors = outcome.errors;
  const uint64_t false_negatives = outcome.false_negatives;
  const bool ok = !outcome.failed && errors == 0 && false_negatives == 0;
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
  v1::GetServerInfoResponse server;
  if (std::optional<int> code = CheckServer(o, *admin, server)) return *code;
  v1::FilterInfo info;
  if (std::optional<int> code = PrepareFilter(o, *admin, info)) return *code;

  absl::PrintF(
      "cuckoo-bench: %s (cuckood %s), filter \"%s\" (capacity %u, %u items), %d connections x "
      "depth %d, %d thread%s, batch %d, %d-byte keys%s\n",
      o.target, server.version(), o.filter, info.capacity(), info.items(), o.connections, o.depth,
      o.threads, o.threads == 1 ? "" : "s", o.batch, o.key_bytes,
      o.pin_cpus.empty() ? "" : absl::StrCat(", pinned to CPU ", absl::StrJoin(o.pin_cpus, ",")));

  Bench bench(o);
  if (absl::Status s = bench.Connect(); !s.ok()) {
    absl::FPrintF(stderr, "cuckoo-bench: %s\n", s.message());
    return 1;
  }
  JsonWriter j;
  BeginJson(j, o, server);

  Outcome outcome;
  if (o.populate) {
    Populate(o, bench, info, j, outcome);
  } else {
    j.Null("populate");
  }
  if (!outcome.failed && o.churns()) {
    if (std::optional<int> code = PrepareChurn(o, *admin, bench, outcome)) return *code;
  }
  const bool reads = o.uses(kLookup) || o.uses(kCount);
  if (!outcome.failed && reads) {
    const int64_t t = NowNs();
    bench.BuildPool();
    absl::PrintF("lookup/count pool: %u requests, %u keys (%d%% present), built in %.2f s\n",
                 bench.pool_requests(), bench.pool_requests() * o.batch, o.positive,
                 (NowNs() - t) / 1e9);
  }
  if (!outcome.failed) {
    Run(o, bench, j, outcome);
  } else {
    j.Null("run");
  }
  return Finish(o, *admin, j, outcome);
}

}  // namespace
}  // namespace cuckoo::bench

int main(int argc, char** argv) {
  // No OpenSSL cleanup at exit: see cuckooctl's main.
  OPENSSL_init_crypto(OPENSSL_INIT_NO_ATEXIT, nullptr);
  return cuckoo::bench::Main(argc, argv);
}
